#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The version make builds and releases (the Makefile's VERSION): v<the VERSION file> when
# HEAD is tagged so and the tree is clean; else a semver pre-release of it naming the
# commit, v0.1.0-dev.<short sha>, with .dirty when a tracked file differs from HEAD, so
# that no build between releases passes for one; v0.1.0-dev outside a git checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."
release=v$(tr -d '[:space:]' <VERSION)
if ! sha=$(git rev-parse --short=7 HEAD 2>/dev/null); then
  echo "$release-dev"
  exit 0
fi
dirty=
[ -z "$(git status --porcelain --untracked-files=no)" ] || dirty=.dirty
if [ -z "$dirty" ] && [ "$(git rev-parse -q --verify "refs/tags/$release^{commit}" || true)" = "$(git rev-parse HEAD)" ]; then
  echo "$release"
  exit 0
fi
# A pre-release identifier of digits only is a number, and semver (so krew) refuses one
# starting with 0: such a sha is written as git describe writes any, after a g.
case $sha in
  *[!0-9]*) ;;
  *) sha=g$sha ;;
esac
echo "$release-dev.$sha$dirty"
