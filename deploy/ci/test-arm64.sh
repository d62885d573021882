#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the unit tests built for arm64, the NR1 node's architecture, under qemu-user
# (make test-arm64; arguments go to go test). Tests start their own binary again as a
# helper, or one they built, so the kernel must hand arm64 executables to qemu as well:
# when no binfmt_misc handler does, one is registered for the run and removed after
# (root). What qemu-user cannot emulate (bpf(2), clone3) is skipped by the tests that
# need it, each saying what it lacks (go test -v lists them).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
qemu=$(command -v qemu-aarch64) || { echo "no qemu-aarch64: make deps installs qemu-user" >&2; exit 1; }
binfmt=/proc/sys/fs/binfmt_misc
handler=nr1-test-aarch64
# The ELF header of an arm64 executable, as qemu's own binfmt configuration matches it.
magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
mounted=
registered=

cleanup() {
	if [ -n "$registered" ]; then echo -1 >"$binfmt/$handler"; fi
	if [ -n "$mounted" ]; then umount "$binfmt"; fi
}
trap cleanup EXIT

# arm64_handler: an enabled handler for arm64 executables is registered.
arm64_handler() {
	local f
	[ "$(cat "$binfmt/status" 2>/dev/null)" = enabled ] || return 1
	for f in "$binfmt"/*; do
		case ${f##*/} in register | status) continue ;; esac
		grep -qx enabled "$f" && grep -qx 'magic 7f454c460201010000000000000000000200b700' "$f" && return 0
	done
	return 1
}

if ! arm64_handler; then
	if [ "$(id -u)" != 0 ]; then
		echo "arm64 helper processes need a binfmt_misc handler: run as root, or install qemu-user-binfmt" >&2
		exit 1
	fi
	if ! mountpoint -q "$binfmt"; then
		mount -t binfmt_misc binfmt_misc "$binfmt"
		mounted=1
	fi
	# F: the kernel opens qemu now, so the handler works in any mount namespace.
	printf ':%s:M::%s:%s:%s:F\n' "$handler" "$magic" "$mask" "$qemu" >"$binfmt/register"
	registered=1
fi

start=$SECONDS
status=0
GOARCH=arm64 CGO_ENABLED=0 "$GO" test -count=1 -exec "$qemu" "$@" ./... || status=$?
echo "arm64 tests under $("$qemu" --version | head -1): $((SECONDS - start)) s"
exit "$status"
