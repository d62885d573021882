#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# apt-install.sh PKG...: installs those of the Debian packages that are missing, as root;
# the package lists are refreshed at most every 12 hours ($NR1_CACHE/.apt-updated).
set -euo pipefail
cache=${NR1_CACHE:-$HOME/.cache/nr1-agent}
missing=()
for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${missing[*]}; install them as root (sudo make deps)" >&2
  exit 1
fi
printf '[apt] apt-get install %s\n' "${missing[*]}" >&2
mkdir -p "$cache"
if [ ! -f "$cache/.apt-updated" ] || [ -n "$(find "$cache/.apt-updated" -mmin +720)" ]; then
  apt-get update -qq && touch "$cache/.apt-updated"
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
