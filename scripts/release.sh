#!/bin/sh
# scripts/release.sh VERSION [OUT]: the release archives, from one
# command (docs/deploy.md): for each of linux/amd64, linux/arm64 and
# darwin/arm64 (RELEASE_TARGETS to choose), OUT/slotlease-VERSION-OS-ARCH.tar.gz
# holding static leasemgr and executor with VERSION stamped in, LICENSE,
# README.md, docs/deploy.md and deploy/ (the systemd units, the
# Containerfile); and OUT/SHA256SUMS (sha256sum -c SHA256SUMS checks them).
# OUT defaults to dist/. The archives are reproducible: entries sorted,
# owned by 0:0, dated at the last commit.
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: scripts/release.sh VERSION [OUT]   (e.g. scripts/release.sh v1.2.0; 1.2.0 is v1.2.0)" >&2
	exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
version=$("$root/scripts/version.sh" "$1")
out=${2:-$root/dist}
targets=${RELEASE_TARGETS:-linux/amd64 linux/arm64 darwin/arm64}
mkdir -p "$out"
out=$(cd "$out" && pwd)
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

names=
for t in $targets; do
	goos=${t%/*} goarch=${t#*/}
	name=slotlease-$version-$goos-$goarch
	stage=$work/$name
	"$root/scripts/build-static.sh" "$version" "$goos" "$goarch" "$stage"
	mkdir -p "$stage/docs" "$stage/deploy"
	cp "$root/LICENSE" "$root/README.md" "$stage/"
	cp "$root/docs/deploy.md" "$stage/docs/"
	cp -R "$root/deploy/systemd" "$root/deploy/container" "$stage/deploy/"
	chmod -R u=rwX,go=rX "$stage"
	tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
	names="$names $name.tar.gz"
	echo "release.sh: $out/$name.tar.gz"
done
# shellcheck disable=SC2086 # names are ours, without spaces
(cd "$out" && sha256sum $names >SHA256SUMS)
echo "release.sh: $out/SHA256SUMS"
