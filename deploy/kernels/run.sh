#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the privileged tests of PACKAGES on a Debian kernel in a qemu guest (software
# emulation), as root in an initramfs: busybox, the kernel's own modules the tests need,
# and each package's static test binary. The kernel is Debian's for SUITE (bookworm:
# 6.1), cached under $NR1_CACHE/kernels by its package's version.
#   deploy/kernels/run.sh [-run REGEX] [PACKAGE...]     (default: ./bpf)
set -euo pipefail
cd "$(dirname "$0")/../.."
run=.
if [[ ${1:-} == -run ]]; then run=$2; shift 2; fi
pkgs=("${@:-./bpf}")
suite=${SUITE:-bookworm}
cache=${NR1_CACHE:-$HOME/.cache/nr1-agent}/kernels
export PATH=$PATH:/usr/local/go/bin

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[[ -x /bin/busybox ]] || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
if ((${#need[@]})); then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The kernel: the package Debian's linux-image-amd64 names in SUITE.
mkdir -p "$cache"
image=$(apt-cache depends -t "$suite" linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
[[ -n $image ]] || { echo "no linux-image-amd64 in $suite: is it in an apt source?" >&2; exit 1; }
version=$(apt-cache policy "$image" | awk '/Candidate:/{print $2}')
kdir=$cache/$image-$version
if [[ ! -d $kdir ]]; then
	tmp=$(mktemp -d)
	(cd "$tmp" && apt-get download "$image=$version" >/dev/null 2>&1)
	dpkg-deb -x "$tmp"/*.deb "$kdir.part"
	rm -rf "$tmp"
	mv "$kdir.part" "$kdir"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,proc,sys,dev,tmp}
cp /bin/busybox "$root/bin/"
# tun (10:200) is the gate tests' queue device.
find "$kdir/lib/modules" -name 'tun.ko*' -exec cp {} "$root/" \;
tests=()
for p in "${pkgs[@]}"; do
	name=$(basename "$p").test
	CGO_ENABLED=0 go test -c -o "$root/$name" "$p"
	tests+=("/$name")
done
cat >"$root/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
mount -t cgroup2 none /sys/fs/cgroup; mount -t bpf bpf /sys/fs/bpf; mount -t tracefs tracefs /sys/kernel/tracing
mkdir -p /dev/pts; mount -t devpts -o ptmxmode=0666 devpts /dev/pts; [ -e /dev/ptmx ] || ln -s pts/ptmx /dev/ptmx
for m in /*.ko*; do insmod \$m; done
ulimit -n 1048576
cd /tmp
rc=0
for t in ${tests[*]}; do \$t -test.v -test.run '$run' || rc=1; done
echo "== guest: exit \$rc"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

echo "== $image $version ($suite): ${pkgs[*]}"
log=$work/console
timeout "${TIMEOUT:-1800}" qemu-system-x86_64 -accel tcg -m 2048 -smp 1 -nographic -no-reboot \
	-kernel "$kdir"/boot/vmlinuz-* -initrd "$work/initrd.gz" \
	-append "console=ttyS0 quiet panic=-1 lsm=bpf" | tee "$log" | grep --line-buffered -E '^(---|===|ok|FAIL|PASS|    |== guest)'
grep -q '^== guest: exit 0' "$log"
