#!/bin/sh
# scripts/version.sh VERSION: prints VERSION as the binaries are stamped
# with it, a semantic version with a v as the go command writes a
# module's (1.2.0 and v1.2.0 are v1.2.0), or says what is wrong and exits 2.
set -eu
v=${1-}
case ${v#v} in
[0-9]*.[0-9]*.[0-9]*) echo "v${v#v}" ;;
*)
	echo "version \"$v\": want a semantic version, e.g. v1.2.0, 1.2.0 or v1.2.0-rc.1" >&2
	exit 2
	;;
esac
