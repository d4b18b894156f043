#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the Debian package of stacktop with dpkg-deb from a built static
# binary: scripts/deb.sh BINARY OUTDIR. Prints the path of the .deb.
#
# Everything in it comes from the tree and the binary at build time: the man
# pages and the shell completions from the binary's own command tree (the
# hidden `stacktop man DIR`, cobra's `completion`), the unit from
# deploy/systemd with ExecStart pointed at /usr/bin. The version is the
# VERSION file's, the timestamps SOURCE_DATE_EPOCH's (default: the last
# commit's), so two builds of one commit are byte for byte the same.
set -eu
bin=$1
out=$2
root=$(git rev-parse --show-toplevel)
: "${SOURCE_DATE_EPOCH:=$(git -C "$root" log -1 --format=%ct)}"
export SOURCE_DATE_EPOCH
: "${VERSION:=$(cat "$root/VERSION")}"
: "${DEB_MAINTAINER:=$(git -C "$root" log -1 --format='%an <%ae>')}"

# Debian versions must start with a digit and, for a package without a
# separate Debian revision, hold no hyphen.
case $VERSION in
[0-9]*[!0-9A-Za-z.+~]* | [!0-9]*) echo "deb.sh: version $VERSION is not a Debian upstream version (digits, letters, . + ~)" >&2; exit 1 ;;
esac
case $(file -b "$bin") in
*x86-64*) arch=amd64 ;;
*aarch64*) arch=arm64 ;;
*) echo "deb.sh: $bin: not an amd64 or arm64 executable" >&2; exit 1 ;;
esac
case $(file -b "$bin") in
*statically\ linked*) ;;
*) echo "deb.sh: $bin is not statically linked (build it with make build)" >&2; exit 1 ;;
esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/pkg
gen=$stage/gen
umask 022

install -D -m 0755 "$bin" "$pkg/usr/bin/stacktop"
ln -s stacktop "$pkg/usr/bin/tcptop"
ln -s stacktop "$pkg/usr/bin/netstacklat"

mkdir -p "$gen" "$pkg/usr/share/man/man1"
"$bin" man "$gen"
for page in "$gen"/*.1; do
	gzip -9n <"$page" >"$pkg/usr/share/man/man1/$(basename "$page").gz"
done
ln -s stacktop-top.1.gz "$pkg/usr/share/man/man1/tcptop.1.gz"
ln -s stacktop-latency.1.gz "$pkg/usr/share/man/man1/netstacklat.1.gz"
mkdir -p "$pkg/usr/share/bash-completion/completions" "$pkg/usr/share/zsh/vendor-completions" \
	"$pkg/usr/share/fish/vendor_completions.d"
"$bin" completion bash >"$pkg/usr/share/bash-completion/completions/stacktop"
"$bin" completion zsh >"$pkg/usr/share/zsh/vendor-completions/_stacktop"
"$bin" completion fish >"$pkg/usr/share/fish/vendor_completions.d/stacktop.fish"

unit=$pkg/usr/lib/systemd/system/stacktop.service
mkdir -p "$(dirname "$unit")"
sed 's|/usr/local/bin/stacktop|/usr/bin/stacktop|g; s|^# Install:.*|# Installed by the stacktop package: systemctl enable --now stacktop|; /^#  *systemctl daemon-reload/d' \
	"$root/deploy/systemd/stacktop.service" >"$unit"
grep -q '^ExecStart=/usr/bin/stacktop ' "$unit" || { echo "deb.sh: no ExecStart=/usr/local/bin/stacktop in deploy/systemd/stacktop.service to point at /usr/bin" >&2; exit 1; }

doc=$pkg/usr/share/doc/stacktop
install -D -m 0644 "$root/deploy/debian/copyright" "$doc/copyright"
printf 'stacktop (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- %s  %s\n' \
	"$VERSION" "$(git -C "$root" rev-parse HEAD)" "$DEB_MAINTAINER" \
	"$(date -u -R -d "@$SOURCE_DATE_EPOCH")" | gzip -9n >"$doc/changelog.gz"
mkdir -p "$pkg/usr/share/lintian/overrides"
install -m 0644 "$root/deploy/debian/lintian-overrides" "$pkg/usr/share/lintian/overrides/stacktop"

mkdir -p "$pkg/DEBIAN"
sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$DEB_MAINTAINER|" \
	-e "s|@SIZE@|$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)|" \
	"$root/deploy/debian/control" >"$pkg/DEBIAN/control"
(cd "$pkg" && find usr -type f -exec md5sum {} + | LC_ALL=C sort -k2) >"$pkg/DEBIAN/md5sums"
chmod 0644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/md5sums"
find "$pkg" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# gzip, not xz or zstd: every dpkg reads it (zstd needs dpkg 1.21.18, newer
# than bullseye's, whose 5.10 kernel stacktop supports), and it compresses
# the 17 MB binary about three times faster than xz (2.7 s against 8.3 s here).
mkdir -p "$out"
deb=$out/stacktop_${VERSION}_$arch.deb
dpkg-deb --root-owner-group -Zgzip --build "$pkg" "$deb" >/dev/null
echo "$deb"
