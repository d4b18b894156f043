#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The benchmark suite's entry point (not part of `make test`):
#
#   sudo bench/run.sh [flags]      e.g. -suites overhead -rounds 5 -out /tmp/b
#   sudo bench/run.sh -h           all flags
#
# Installs what the benchmark needs beyond scripts/deps.sh (bpftrace, the
# peer it is compared with), mounts tracefs for bpftrace's classic
# tracepoints, builds stacktop and the harness, and runs the harness. The
# full run takes at most 50 minutes (-budget); run it on a quiet machine.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "error: the benchmark loads BPF programs and creates network namespaces: run it as root" >&2
	exit 77
fi
scripts/deps.sh
need=""
for pair in bpftrace:bpftrace taskset:util-linux; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || need="$need ${pair#*:}"
done
if [ -n "$need" ]; then
	echo "installing:$need"
	apt-get update -qq
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
if ! mountpoint -q /sys/kernel/tracing; then
	mount -t tracefs nodev /sys/kernel/tracing
fi
# wrk holds 1,000 connections and nginx as many: lift the soft descriptor
# limit to the hard one.
ulimit -n "$(ulimit -Hn)"
bin=$(mktemp -d /tmp/stacktop-bench-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
CGO_ENABLED=0 go build -trimpath -o "$bin/stacktop" ./cmd/stacktop
CGO_ENABLED=0 go build -trimpath -o "$bin/bench" ./bench
"$bin/bench" -stacktop "$bin/stacktop" -command "bench/run.sh $*" "$@"
