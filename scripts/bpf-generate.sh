#!/bin/sh
# Regenerates the bpf2go output (*_bpfel.go, *_bpfel.o) from bpf/*.bpf.c.
# Needs Debian's clang, llvm and libbpf-dev; the result is byte-for-byte
# reproducible for a given clang, whatever directory the tree is in.
set -eu
cd "$(dirname "$0")/.."
export BPF2GO_CC=clang
export BPF2GO_STRIP=llvm-strip
export BPF2GO_CFLAGS="-O2 -g -Wall -Werror -I$PWD/bpf/include -I/usr/include/$(clang -print-multiarch)"
go generate ./...
