#!/bin/sh
# scripts/build-static.sh VERSION GOOS GOARCH DIR: builds leasemgr and
# executor for GOOS/GOARCH into DIR, static (CGO_ENABLED=0), with VERSION
# stamped into both (buildinfo.version, with a v: `leasemgr --version`
# prints v1.2.0 for 1.2.0 or v1.2.0).
# The one build of scripts/release.sh and scripts/image.sh.
set -eu
if [ $# -ne 4 ]; then
	echo "usage: scripts/build-static.sh VERSION GOOS GOARCH DIR" >&2
	exit 2
fi
goos=$2 goarch=$3 dir=$4
version=$("$(dirname "$0")/version.sh" "$1")
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
cd "$(dirname "$0")/.."
CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath \
	-ldflags "-s -w -X github.com/slotlease/slotlease/buildinfo.version=$version" \
	-o "$dir/" ./cmd/leasemgr ./cmd/executor
