#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's quick start as a newcomer types it, in both modes: `make run` (FOLLOW=0, so
# it returns after the example output) and `make run MODE=dra`, each output checked
# (deploy/e2e/quickstart_test.go); on the DRA cluster, the README's install commands as
# written (deploy/ci/readme-commands.sh); then `make down` and the check that the machine
# is as it was before. Run by .ci/run as root; the stack must not be running.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$PWD/_output/quickstart
stack=deploy/local/stack.sh
mkdir -p "$out"
if "$stack" status | grep -q ': running'; then
  echo "quickstart: the local stack is running; make down first" >&2
  exit 1
fi
up=0
trap '[ "$up" = 0 ] || make down >/dev/null 2>&1 || true' EXIT

for mode in devicePlugin dra; do
  "$stack" machine-state >"$out/before.env"
  cmd=(make run FOLLOW=0)
  [ "$mode" = dra ] && cmd+=(MODE=dra)
  echo "== quickstart: ${cmd[*]}"
  up=1
  start=$SECONDS
  "${cmd[@]}" 2>&1 | tee "$out/run-$mode.log"
  echo "== quickstart: ${cmd[*]} returned in $((SECONDS - start)) s; checking its output"
  NR1_QUICKSTART_LOG=$out/run-$mode.log NR1_QUICKSTART_MODE=$mode \
    go test -tags quickstart -count=1 -run TestQuickStartOutput -v ./deploy/e2e/
  if [ "$mode" = dra ]; then
    deploy/ci/readme-commands.sh
  fi
  echo "== quickstart: make down"
  make down
  up=0
  NR1_E2E_BEFORE=$out/before.env go test -tags e2eclean -count=1 -run TestNothingLeftAfterDown -v ./deploy/e2e/
done
