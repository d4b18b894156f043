#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fails when the committed BPF objects differ from what internal/*/bpf/*.bpf.c
# compile to.
set -eu
cd "$(dirname "$0")/.."
scripts/bpf-generate.sh
changed=$(git status --porcelain -- '*_bpfel.go' '*_bpfel.o')
if [ -n "$changed" ]; then
	echo "generated BPF objects are stale; run scripts/bpf-generate.sh and commit:" >&2
	echo "$changed" >&2
	exit 1
fi
echo "generated BPF objects match their sources"
