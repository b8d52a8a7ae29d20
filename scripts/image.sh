#!/bin/sh
# scripts/image.sh [VERSION]: builds the container image slotlease:VERSION
# (docs/deploy.md, "Container") from deploy/container/Containerfile with
# podman, pulling nothing: static leasemgr and executor for this machine's
# architecture (GOARCH to choose) with VERSION stamped in, a user 65532
# and its state directory, FROM scratch; in Docker's format, which keeps
# the HEALTHCHECK (OCI's has none). VERSION defaults to v0.0.0-dev; the
# tag is VERSION as given, the binaries say it with a v.
# PODMAN names the podman command, flags included, e.g.
# PODMAN="podman --storage-driver vfs" where overlay does not work.
set -eu
if [ $# -gt 1 ]; then
	echo "usage: scripts/image.sh [VERSION]   (e.g. scripts/image.sh v1.2.0)" >&2
	exit 2
fi
version=${1:-v0.0.0-dev}
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/version.sh" "$version" >/dev/null
goarch=${GOARCH:-$(go env GOARCH)}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

"$root/scripts/build-static.sh" "$version" linux "$goarch" "$ctx"
# The image's files besides the binaries: its user and group, a private
# state directory owned by that user (a new volume copies it), /tmp.
mkdir -p "$ctx/rootfs/etc" "$ctx/rootfs/tmp" "$ctx/rootfs/var/lib" "$ctx/state"
printf 'root:x:0:0:root:/:/sbin/nologin\nslotlease:x:65532:65532:slotlease:/var/lib/slotlease:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nslotlease:x:65532:\n' >"$ctx/rootfs/etc/group"
chmod 0644 "$ctx/rootfs/etc/passwd" "$ctx/rootfs/etc/group"
chmod 0755 "$ctx/rootfs" "$ctx/rootfs/etc" "$ctx/rootfs/var" "$ctx/rootfs/var/lib"
chmod 1777 "$ctx/rootfs/tmp"
chmod 0700 "$ctx/state"
cp "$root/deploy/container/Containerfile" "$ctx/"
# shellcheck disable=SC2086 # PODMAN is a command with its flags
${PODMAN:-podman} build --format docker --arch "$goarch" --build-arg "VERSION=$version" -t "slotlease:$version" -f "$ctx/Containerfile" "$ctx"
echo "image.sh: slotlease:$version"
