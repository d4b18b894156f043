#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Checks the latency nic probe against emulated NIC hardware stamps: boots a
# qemu guest (TCG) with two igb NICs (QEMU's 82576 emulation, QEMU 8.0+) on
# one hub and runs nicguest in it (see main.go). About a minute, and a 70 MB
# kernel download the first time. Needs qemu-system-x86_64, busybox-static
# xz/zstd and Debian's apt (the host's suite's generic kernel: Debian's cloud
# kernels, which the kernel matrix boots, are built without igb).
set -eu
cd "$(dirname "$0")/../.."
cache=${STACKTOP_KERNEL_CACHE:-/var/cache/stacktop-kernels}/nic
pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
root=$cache/$pkg
if [ ! -e "$root/.complete" ]; then
	mkdir -p "$cache"
	(cd "$cache" && apt-get download "$pkg" >/dev/null)
	rm -rf "$root" && dpkg-deb -x "$cache/${pkg}"_*.deb "$root" && rm -f "$cache/${pkg}"_*.deb
	touch "$root/.complete"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root/bin" "$work/root/m"
CGO_ENABLED=0 go build -o "$work/root/bin/stacktop" ./cmd/stacktop
CGO_ENABLED=0 go build -o "$work/root/bin/nicguest" ./test/nicguest
cp "$(command -v busybox)" "$work/root/bin/busybox"
for applet in sh mount insmod ip sleep poweroff; do ln -s busybox "$work/root/bin/$applet"; done
# busybox's insmod takes uncompressed modules only.
for m in dca i2c-algo-bit igb; do
	ko=$(find "$root/lib/modules" -name "$m.ko*")
	case "$ko" in
	*.xz) xz -dc "$ko" ;;
	*.zst) zstd -dcq "$ko" ;;
	*) cat "$ko" ;;
	esac >"$work/root/m/$m.ko"
done
cat >"$work/root/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t bpf bpf /sys/fs/bpf; mount -t tracefs tracefs /sys/kernel/tracing
for m in dca i2c-algo-bit igb; do insmod /m/$m.ko; done
ip link set eth0 up; ip link set eth1 up
sleep 3
/bin/stacktop doctor | sed -n '/^INTERFACE/,$p'
/bin/nicguest /bin/stacktop eth0 eth1
poweroff -f
INIT
chmod +x "$work/root/init"
mkdir -p "$work/root/proc" "$work/root/sys" "$work/root/dev"
(cd "$work/root" && find . | busybox cpio -o -H newc 2>/dev/null) | gzip -1 >"$work/initrd.gz"
# igb's SR-IOV functions take the slots 16 above its own: the two NICs sit
# apart. iomem=relaxed lets nicguest read a register of its NIC (main.go).
timeout 240 qemu-system-x86_64 -accel tcg -m 1G -smp 2 -nodefaults -no-user-config -display none \
	-serial stdio -no-reboot -kernel "$root"/boot/vmlinuz-* -initrd "$work/initrd.gz" \
	-append "console=ttyS0 loglevel=4 panic=-1 rdinit=/init iomem=relaxed" \
	-netdev hubport,hubid=0,id=p0 -device igb,netdev=p0,addr=0x3 \
	-netdev hubport,hubid=0,id=p1 -device igb,netdev=p1,addr=0x6 2>&1 | tee "$work/console.log" | grep -v '^\[ '
grep -q '^NICGUEST PASS' "$work/console.log"
