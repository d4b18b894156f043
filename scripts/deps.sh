#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs, from Debian's packages, what building the BPF objects, running
# the test suites and checking the packages (lintian, buildah) need. Does
# nothing when everything is already there.
set -eu
need=""
for pair in clang:clang llvm-strip:llvm bpftool:bpftool ip:iproute2 tmux:tmux \
	nginx:nginx wrk:wrk prometheus:prometheus qemu-system-x86_64:qemu-system-x86 \
	busybox:busybox-static xz:xz-utils zstd:zstd \
	lintian:lintian buildah:buildah file:file man:man-db make:make; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || need="$need ${pair#*:}"
done
[ -f /usr/include/bpf/bpf_helpers.h ] || need="$need libbpf-dev"
export DEBIAN_FRONTEND=noninteractive
if [ -n "$need" ]; then
	echo "installing:$need"
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

# The kernel matrix needs QEMU 8.1 or later: before it, TCG can run a stale
# translation of kernel code the guest is patching (a static key flipped as
# a BPF program attaches) and kills guests that did nothing wrong
# (docs/MATRIX.md). Debian 12 ships 7.2; its backports ship 10.0.
qemu_fixed() {
	version=$(qemu-system-x86_64 --version | sed -n '1s/^QEMU emulator version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
	# shellcheck disable=SC2086
	set -- $version
	[ "${1:-0}" -gt 8 ] || { [ "${1:-0}" -eq 8 ] && [ "${2:-0}" -ge 1 ]; }
}
qemu_fixed && exit 0
. /etc/os-release
if [ "${VERSION_CODENAME:-}" != bookworm ]; then
	echo "qemu-system-x86_64 is older than 8.1 and this is not Debian 12: the kernel matrix may lose guests to a TCG bug (docs/MATRIX.md)" >&2
	exit 0
fi
echo "installing: qemu-system-x86 from bookworm-backports (the kernel matrix needs QEMU 8.1 or later)"
cat >/etc/apt/sources.list.d/stacktop-bookworm-backports.sources <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt-get update -qq
apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 >/dev/null
qemu_fixed || { echo "qemu-system-x86_64 is still older than 8.1 after installing from bookworm-backports" >&2; exit 1; }
