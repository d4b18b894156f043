#!/bin/sh
# Builds the Debian package of stacktop with dpkg-deb: the static binary
# (and the tcptop/netstacklat names it answers to), the systemd unit of
# deploy/systemd, man pages and shell completions generated from the CLI.
#
#   scripts/deb.sh [OUTDIR]      (default bin/; VERSION=1.2.3 to set the version)
set -eu

cd "$(dirname "$0")/.."
out=${1:-bin}
version=${VERSION:-0~git$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$stage/usr/bin/stacktop" ./cmd/stacktop
bin="$stage/usr/bin/stacktop"
ln -s stacktop "$stage/usr/bin/tcptop"
ln -s stacktop "$stage/usr/bin/netstacklat"

install -d "$stage/usr/lib/systemd/system"
sed 's|/usr/local/bin/stacktop|/usr/bin/stacktop|g; s|^# Install:.*|# Installed by the stacktop package: systemctl enable --now stacktop|; /^#  *systemctl daemon-reload/d' \
	deploy/systemd/stacktop.service >"$stage/usr/lib/systemd/system/stacktop.service"

man="$stage/usr/share/man/man1"
install -d "$man"
"$bin" man "$man"
gzip -9n "$man"/*.1
ln -s stacktop-top.1.gz "$man/tcptop.1.gz"
ln -s stacktop-latency.1.gz "$man/netstacklat.1.gz"

# Go links statically by design: no libc, one binary for every distribution.
install -d "$stage/usr/share/lintian/overrides"
echo "stacktop: statically-linked-binary [usr/bin/stacktop]" >"$stage/usr/share/lintian/overrides/stacktop"

install -d "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
	"$stage/usr/share/fish/vendor_completions.d"
"$bin" completion bash >"$stage/usr/share/bash-completion/completions/stacktop"
"$bin" completion zsh >"$stage/usr/share/zsh/vendor-completions/_stacktop"
"$bin" completion fish >"$stage/usr/share/fish/vendor_completions.d/stacktop.fish"

doc="$stage/usr/share/doc/stacktop"
install -d "$doc"
cat >"$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: stacktop
Source: https://github.com/stacktop/stacktop

Files: *
Copyright: 2026 the stacktop developers
License: GPL-2.0
 The BPF programs (bpf/) declare GPL-2.0; the repository has no license file
 for the rest yet, so the whole package is distributed under GPL-2.0.
 On Debian systems the full text is in /usr/share/common-licenses/GPL-2.
COPYRIGHT
printf 'stacktop (%s) unstable; urgency=medium\n\n  * Package built from commit %s.\n\n -- stacktop developers <stacktop@users.noreply.github.com>  %s\n' \
	"$version" "$(git rev-parse HEAD 2>/dev/null || echo unknown)" "$(date -R -u -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")" |
	gzip -9n >"$doc/changelog.gz"

install -d "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: stacktop
Version: $version
Architecture: $arch
Maintainer: stacktop developers <stacktop@users.noreply.github.com>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Section: net
Priority: optional
Homepage: https://github.com/stacktop/stacktop
Description: eBPF observability for the Linux host network stack
 stacktop shows which connections move the bytes on a Linux host (a top-like
 view per connection, process and cgroup) and how long received packets wait
 inside its network stack (netstacklat's histograms), and exports both to
 Prometheus (stacktop serve, with a systemd unit).
CONTROL
(cd "$stage" && find usr -type f -exec md5sum {} + | sort -k2) >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"

mkdir -p "$out"
deb="$out/stacktop_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
