#!/bin/sh
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
[ -z "$need" ] && exit 0
echo "installing:$need"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $need >/dev/null
