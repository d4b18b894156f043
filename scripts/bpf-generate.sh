#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Regenerates the bpf2go output (*_bpfel.go, *_bpfel.o) from the BPF C.
# Needs Debian's clang, llvm and libbpf-dev; the result is byte-for-byte
# reproducible for the versions in scripts/bpf-toolchain.txt, whatever
# directory the tree is in. With other versions it still generates, after
# naming each difference, so a developer knows why check-generated may
# disagree. STACKTOP_BPF_TOOLCHAIN=strict makes a difference an error.
set -eu
cd "$(dirname "$0")/.."
differs=0
while read -r pkg want; do
	case "$pkg" in '#'* | '') continue ;; esac
	have=$(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || echo "not installed (or not Debian)")
	if [ "$have" != "$want" ]; then
		echo "bpf-generate: $pkg is $have, the committed objects were made with $want" >&2
		differs=1
	fi
done <scripts/bpf-toolchain.txt
if [ "$differs" = 1 ] && [ "${STACKTOP_BPF_TOOLCHAIN:-}" = strict ]; then
	echo "bpf-generate: refusing to generate with another toolchain (STACKTOP_BPF_TOOLCHAIN=strict)" >&2
	exit 1
fi
export BPF2GO_CC=clang
export BPF2GO_STRIP=llvm-strip
export BPF2GO_CFLAGS="-O2 -g -Wall -Werror -I$PWD/bpf/include -fdebug-prefix-map=$PWD/bpf/include=bpf/include -I/usr/include/$(clang -print-multiarch)"
go generate ./...
# bpf2go writes no licence line: the Go it generates is Apache-2.0 like the
# rest of the Go; the objects it embeds carry the C's dual licence.
for f in $(git ls-files '*_bpfel.go') $(git ls-files --others --exclude-standard '*_bpfel.go'); do
	sed -i '1i // SPDX-License-Identifier: Apache-2.0\n' "$f"
done
