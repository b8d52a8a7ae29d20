#!/bin/sh
# secrets.sh: the cluster's secrets for deploy/kubernetes, from the files
# of `leasemgr layout` (docs/deploy.md, "Kubernetes").
#
# Usage: deploy/kubernetes/secrets.sh OUT [NAMESPACE [EXECUTORS]]
#
# Runs `leasemgr layout` into OUT (again with --force if OUT holds a
# layout: its seeds are kept) for three servers nats-0..2 behind the
# headless Service nats of NAMESPACE (default slotlease), listening on
# every address, stores under the StatefulSet's volume (/data/jetstream),
# seeds named under /etc/slotlease/creds, and the executors EXECUTORS
# (comma-separated, default "default"). Then writes OUT/kubernetes.yaml,
# private, to apply before the manifests:
#
#   Secret nats-conf                       nats-0.conf nats-1.conf nats-2.conf
#   Secret slotlease-manager-creds         manager.nk jobs-admin.nk
#   Secret slotlease-executor-NAME-creds   executor-NAME.nk, per executor
#   Secret slotlease-reader-creds          reader.nk
#   ConfigMap slotlease-leasemgr-env       leasemgr.env's variables
#   ConfigMap slotlease-executor-NAME-env  executor-NAME.env's
#   ConfigMap slotlease-reader-env         reader.env's
#
# The ConfigMaps hold the variables' values as a shell reads the files
# (kubectl create configmap --from-env-file would keep the quotes around
# DISCONNECT_EVENTS' '$SYS...'). sys.nk, the system account's seed, stays
# in OUT: it is for operators, not for anything in the cluster.
# LEASEMGR names the leasemgr binary (default: leasemgr on PATH).
set -eu

usage() {
	echo "usage: $0 OUT [NAMESPACE [EXECUTORS]]" >&2
	exit 2
}
[ $# -ge 1 ] && [ $# -le 3 ] || usage
out=$1
ns=${2:-slotlease}
executors=${3:-default}
leasemgr=${LEASEMGR:-leasemgr}

# Both become parts of Kubernetes names (DNS labels).
dns_label() { # what value
	case $2 in
	"" | -* | *- | *[!a-z0-9-]*)
		echo "$0: $1 \"$2\": must be a DNS label (lower-case letters, digits and '-', not at either end)" >&2
		exit 2
		;;
	esac
}
dns_label NAMESPACE "$ns"
for e in $(echo "$executors" | tr ',' ' '); do
	dns_label "executor name" "$e"
done

force=
[ -e "$out/leasemgr.env" ] && force=--force
"$leasemgr" layout --out "$out" --servers 3 \
	--hosts "nats-0.nats.$ns.svc,nats-1.nats.$ns.svc,nats-2.nats.$ns.svc" \
	--bind 0.0.0.0 --store-dir /data/jetstream --creds-dir /etc/slotlease/creds \
	--executors "$executors" $force >/dev/null

header() { # kind name
	printf -- '---\napiVersion: v1\nkind: %s\nmetadata:\n  name: %s\n  namespace: %s\n  labels:\n    app.kubernetes.io/part-of: slotlease\n' "$1" "$2" "$ns"
}

# secret NAME FILE...: a Secret with each file under its base name.
secret() {
	header Secret "$1"
	printf 'type: Opaque\ndata:\n'
	shift
	for f in "$@"; do
		printf '  %s: %s\n' "$(basename "$f")" "$(base64 <"$f" | tr -d '\n')"
	done
}

# envmap NAME FILE: a ConfigMap of the variables FILE sets, valued as a
# shell sourcing it sees them, double-quoted for YAML.
envmap() {
	header ConfigMap "$1"
	printf 'data:\n'
	for v in $(sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' "$2"); do
		value=$(
			set -a
			. "$2"
			eval "printf '%s' \"\$$v\""
		)
		printf '  %s: "%s"\n' "$v" "$(printf '%s' "$value" | sed 's/\\/\\\\/g; s/"/\\"/g')"
	done
}

umask 077
{
	printf '# Written by deploy/kubernetes/secrets.sh from the layout in %s.\n' "$out"
	printf '# It holds the NATS servers'"'"' route password and the users'"'"' seeds: keep it private.\n'
	secret nats-conf "$out/nats/nats-0.conf" "$out/nats/nats-1.conf" "$out/nats/nats-2.conf"
	secret slotlease-manager-creds "$out/creds/manager.nk" "$out/creds/jobs-admin.nk"
	for e in $(echo "$executors" | tr ',' ' '); do
		secret "slotlease-executor-$e-creds" "$out/creds/executor-$e.nk"
	done
	secret slotlease-reader-creds "$out/creds/reader.nk"
	envmap slotlease-leasemgr-env "$out/leasemgr.env"
	for e in $(echo "$executors" | tr ',' ' '); do
		envmap "slotlease-executor-$e-env" "$out/executor-$e.env"
	done
	envmap slotlease-reader-env "$out/reader.env"
} >"$out/kubernetes.yaml.tmp"
mv "$out/kubernetes.yaml.tmp" "$out/kubernetes.yaml"
echo "wrote $out/kubernetes.yaml; next: kubectl apply -f $out/kubernetes.yaml && kubectl apply -k deploy/kubernetes"
