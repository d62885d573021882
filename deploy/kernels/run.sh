#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the privileged tests of PACKAGES on a Debian kernel in a qemu guest (software
# emulation), as root in an initramfs: busybox, the kernel's own modules the tests need,
# and each package's static test binary. ARCH (amd64 or arm64, the NR1's own) picks the
# kernel, the busybox and the tests' architecture; SUITE (bookworm: 6.1; trixie: 6.12;
# sid) the kernel. Both come from Debian's archive through an apt of the script's own
# (its sources, lists and cache under $NR1_CACHE/kernels), so the host's apt sources and
# architectures stay as they are; the packages are cached by their versions.
#   deploy/kernels/run.sh [-run REGEX] [PACKAGE...]     (default: ./bpf)
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."
run=.
if [[ ${1:-} == -run ]]; then run=$2; shift 2; fi
pkgs=("${@:-./bpf}")
suite=${SUITE:-bookworm}
arch=${ARCH:-amd64}
cache=${NR1_CACHE:-$HOME/.cache/nr1-agent}/kernels
export PATH=$PATH:/usr/local/go/bin

case $arch in
amd64)
	qemu=(qemu-system-x86_64 -accel tcg)
	qemu_pkg=qemu-system-x86
	console=ttyS0
	;;
arm64)
	# A Cortex-A57 runs 32-bit (AArch32) code at EL0, as the NR1's cores do: the
	# kernel's compat entries are there to be called.
	qemu=(qemu-system-aarch64 -accel tcg -M virt -cpu cortex-a57)
	qemu_pkg=qemu-system-arm
	console=ttyAMA0
	;;
*)
	echo "ARCH=$arch: amd64 or arm64" >&2
	exit 2
	;;
esac

key=/usr/share/keyrings/debian-archive-keyring.gpg
need=()
command -v "${qemu[0]}" >/dev/null || need+=("$qemu_pkg")
command -v cpio >/dev/null || need+=(cpio)
[[ -r $key ]] || need+=(debian-archive-keyring)
if ((${#need[@]})); then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# An apt of the script's own for ARCH and SUITE.
apt=$cache/apt-$arch-$suite
mkdir -p "$apt"/{lists/partial,archives/partial}
{
	echo "deb [arch=$arch signed-by=$key] http://deb.debian.org/debian $suite main"
	if [[ $suite != sid && $suite != unstable ]]; then
		echo "deb [arch=$arch signed-by=$key] http://deb.debian.org/debian $suite-updates main"
		echo "deb [arch=$arch signed-by=$key] http://deb.debian.org/debian-security $suite-security main"
	fi
} >"$apt/sources.list"
opts=(-o "APT::Architecture=$arch" -o "APT::Architectures::=$arch" -o "Dir::Etc::SourceList=$apt/sources.list"
	-o Dir::Etc::SourceParts=/dev/null -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
	-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o Dir::State::status=/dev/null
	-o Debug::NoLocking=1 -o APT::Sandbox::User=root)
# The lists are read again once a day (a stamp of their reading: apt dates a list as
# the archive does).
if [[ -z $(find "$apt/updated" -mmin -1440 2>/dev/null) ]]; then
	apt-get "${opts[@]}" update -qq
	touch "$apt/updated"
fi

# fetch PACKAGE: the directory PACKAGE's candidate is unpacked in, under the cache.
fetch() {
	local version dir tmp
	version=$(apt-cache "${opts[@]}" policy "$1" | awk '/Candidate:/{print $2}')
	[[ -n $version && $version != '(none)' ]] || { echo "no $1 for $arch in $suite" >&2; exit 1; }
	dir=$cache/$arch/$1-${version//:/_}
	if [[ ! -d $dir ]]; then
		mkdir -p "$cache/$arch"
		tmp=$(mktemp -d)
		(cd "$tmp" && apt-get "${opts[@]}" download "$1=$version" >&2)
		dpkg-deb -x "$tmp"/*.deb "$dir.part"
		rm -rf "$tmp"
		mv "$dir.part" "$dir"
	fi
	echo "$dir"
}

# The kernel: the package Debian's linux-image-ARCH names in SUITE.
image=$(apt-cache "${opts[@]}" depends "linux-image-$arch" 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}' || true)
[[ -n $image ]] || { echo "no linux-image-$arch in $suite" >&2; exit 1; }
kdir=$(fetch "$image")
busybox=$(fetch busybox-static)/bin/busybox

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,proc,sys,dev,tmp}
cp "$busybox" "$root/bin/"
# tun (10:200) is the gate tests' queue device.
find "$kdir/lib/modules" -name 'tun.ko*' -exec cp {} "$root/" \;
# nr1-load, the CG workload some tests start, and the same built for the 32-bit sibling
# of ARCH (i386, 32-bit ARM), a CG whose system calls all enter through the kernel's
# compat entries: the guest has no toolchain to build them.
GOARCH=$arch CGO_ENABLED=0 go build -o "$root/bin/nr1-load" ./cmd/nr1-load
case $arch in amd64) arch32=386 ;; arm64) arch32=arm ;; esac
GOARCH=$arch32 GOARM=7 CGO_ENABLED=0 go build -o "$root/bin/nr1-load32" ./cmd/nr1-load
tests=()
for p in "${pkgs[@]}"; do
	name=$(basename "$p").test
	GOARCH=$arch CGO_ENABLED=0 go test -c -o "$root/$name" "$p"
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
export NR1_LOAD=/bin/nr1-load NR1_LOAD32=/bin/nr1-load32
cd /tmp
rc=0
for t in ${tests[*]}; do \$t -test.v -test.run '$run' || rc=1; done
echo "== guest: exit \$rc"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

echo "== $image ($arch, $suite): ${pkgs[*]}"
log=$work/console
timeout "${TIMEOUT:-1800}" "${qemu[@]}" -m 2048 -smp 1 -nographic -no-reboot \
	-kernel "$kdir"/boot/vmlinuz-* -initrd "$work/initrd.gz" \
	-append "console=$console quiet panic=-1 lsm=bpf" | tee "$log" | grep --line-buffered -E '^(---|===|ok|FAIL|PASS|    |== guest)'
grep -q '^== guest: exit 0' "$log"
