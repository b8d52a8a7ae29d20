#!/bin/sh
# scripts/build-static.sh VERSION GOOS GOARCH DIR: builds leasemgr and
# executor for GOOS/GOARCH into DIR, static (CGO_ENABLED=0), with VERSION
# stamped into both (buildinfo.version: `leasemgr --version` prints it).
# The one build of scripts/release.sh and scripts/image.sh.
set -eu
if [ $# -ne 4 ]; then
	echo "usage: scripts/build-static.sh VERSION GOOS GOARCH DIR" >&2
	exit 2
fi
version=$1 goos=$2 goarch=$3 dir=$4
case $version in
v[0-9]*.[0-9]*.[0-9]*) ;;
*)
	echo "build-static.sh: version \"$version\": want a semantic version with a v, e.g. v1.2.0 or v1.2.0-rc.1" >&2
	exit 2
	;;
esac
cd "$(dirname "$0")/.."
mkdir -p "$dir"
CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath \
	-ldflags "-s -w -X github.com/slotlease/slotlease/buildinfo.version=$version" \
	-o "$dir/" ./cmd/leasemgr ./cmd/executor
