#!/usr/bin/env bash
# cluster-demo.sh: a 3-node NATS JetStream cluster and N lease-manager nodes
# on this machine, for demos and manual fault trials.
#
# Usage:
#   scripts/cluster-demo.sh [NODES]          # NODES lease-manager nodes, default 3
#
# It builds bin/leasemgr, bin/executor and bin/natscluster, then starts:
#   - three NATS servers n0 n1 n2, one process each (so `kill -9` works), on
#     client ports 4222-4224 and route ports 6222-6224, stores under $DEMO_DIR;
#   - for each node nodeI: two leasemgr processes with NODE_ID=nodeI, an
#     active manager and a hot standby (LEADER_TTL), pools gpu=1 and cpu=4,
#     NATS_URL listing all three servers and NATS_REPLICAS=3, each with its
#     own HTTP_ADDR (web page and /v1/pools) from port HTTP_BASE (8100) up,
#     and all of them candidates for the cluster pool api=2 (CLUSTER_POOLS),
#     which exactly one of them serves at a time;
# and prints what to try. Ctrl-C stops everything. Logs and pid files are in
# $DEMO_DIR (default /tmp/slotlease-demo); it is wiped at start.
#
# Environment: DEMO_DIR, LEASE_TTL (default 6s), LEADER_TTL (default 1s), HTTP_BASE,
# POOL_CAPACITIES (default gpu=1,cpu=4), CLUSTER_POOLS (default api=2; empty
# for none), NATS_PORTS (default 4222,4223,4224),
# NATS_CLUSTER_PORTS (default 6222,6223,6224).
#
# Fault trials while it runs (pids are in $DEMO_DIR/*.pid):
#   kill -9 "$(cat $DEMO_DIR/node1-a.pid)"   # crash node1's manager: the standby
#                                           # takes over within 2 x LEADER_TTL
#   kill -9 "$(cat $DEMO_DIR/nats-n1.pid)"   # crash one NATS server; the cluster
#                                           # keeps quorum; restart it with:
#   $DEMO_DIR/restart-nats.sh 1
#   kill -STOP / -CONT <pid>                # freeze a manager or a server: a
#                                           # partition as seen from outside
# Executors against the cluster (same NATS_URL, NODE_ID picks the node):
#   NATS_URL=... NODE_ID=node1 bin/executor run --pool gpu -- sleep 10
# Watch every event:
#   NATS_URL=... bin/leasemgr watch --node '*'
#
# Keep LEASE_TTL >= 2 x LEADER_TTL + 4s, or a takeover can outlast a
# holder's deadline and cost it its lease (docs/guarantees.md, section 1);
# leasemgr warns below that and refuses a LEASE_TTL not above LEADER_TTL.
set -euo pipefail

NODES=${1:-3}
DEMO_DIR=${DEMO_DIR:-/tmp/slotlease-demo}
LEASE_TTL=${LEASE_TTL:-6s}
HTTP_BASE=${HTTP_BASE:-8100}
LEADER_TTL=${LEADER_TTL:-1s}
POOLS=${POOL_CAPACITIES:-gpu=1,cpu=4}
CLUSTER_POOLS=${CLUSTER_POOLS-api=2}
NATS_PORTS=${NATS_PORTS:-4222,4223,4224}
NATS_CLUSTER_PORTS=${NATS_CLUSTER_PORTS:-6222,6223,6224}

cd "$(dirname "$0")/.."
ROOT=$(pwd)

echo "building into $ROOT/bin ..."
go build -o bin/ ./cmd/leasemgr ./cmd/executor ./test/cluster/cmd/natscluster

rm -rf "$DEMO_DIR"
mkdir -p "$DEMO_DIR"

IFS=, read -r -a ports <<<"$NATS_PORTS"
NATS_URL=""
for p in "${ports[@]}"; do
	NATS_URL="${NATS_URL:+$NATS_URL,}nats://127.0.0.1:$p"
done
export NATS_URL

stop_pids() { # pid files...
	local f pids=()
	for f in "$@"; do
		[ -e "$f" ] || continue
		pids+=("$(cat "$f")")
	done
	[ ${#pids[@]} -gt 0 ] || return 0
	kill "${pids[@]}" 2>/dev/null || true
	for _ in $(seq 1 50); do
		kill -0 "${pids[@]}" 2>/dev/null || return 0
		sleep 0.2
	done
}
cleanup() {
	echo
	echo "stopping ..."
	# Managers first, while NATS is there to hand their leadership over.
	stop_pids "$DEMO_DIR"/node*.pid
	stop_pids "$DEMO_DIR"/nats-*.pid
	wait 2>/dev/null || true
	echo "logs kept in $DEMO_DIR"
}
trap cleanup EXIT INT TERM

start_nats() { # index
	local i=$1
	"$ROOT/bin/natscluster" -only "$i" -dir "$DEMO_DIR/nats" -ports "$NATS_PORTS" -cluster-ports "$NATS_CLUSTER_PORTS" \
		>>"$DEMO_DIR/nats-n$i.log" 2>&1 &
	echo $! >"$DEMO_DIR/nats-n$i.pid"
}

cat >"$DEMO_DIR/restart-nats.sh" <<EOF
#!/usr/bin/env bash
# restart-nats.sh I: start NATS server nI again on its ports and store.
set -eu
i=\$1
"$ROOT/bin/natscluster" -only "\$i" -dir "$DEMO_DIR/nats" -ports "$NATS_PORTS" -cluster-ports "$NATS_CLUSTER_PORTS" >>"$DEMO_DIR/nats-n\$i.log" 2>&1 &
echo \$! >"$DEMO_DIR/nats-n\$i.pid"
echo "n\$i restarted, pid \$!"
EOF
chmod +x "$DEMO_DIR/restart-nats.sh"

for i in 0 1 2; do
	start_nats "$i"
done

# Wait until JetStream answers (a meta leader is elected) before the
# managers create their buckets at 3 replicas.
echo "waiting for the JetStream cluster ..."
"$ROOT/bin/natscluster" -wait 60s -ports "$NATS_PORTS"

http_port() { # node-number suffix
	local n=$1 s=$2 k=0
	[ "$s" = b ] && k=1
	echo $((HTTP_BASE + 2 * (n - 1) + k))
}

start_manager() { # node-number suffix
	local n=$1 s=$2 node="node$1"
	env NODE_ID="$node" POOL_CAPACITIES="$POOLS" CLUSTER_POOLS="$CLUSTER_POOLS" NATS_REPLICAS=3 LEASE_TTL="$LEASE_TTL" LEADER_TTL="$LEADER_TTL" \
		HTTP_ADDR="127.0.0.1:$(http_port "$n" "$s")" NATS_URL="$NATS_URL" "$ROOT/bin/leasemgr" run >>"$DEMO_DIR/$node-$s.log" 2>&1 &
	echo $! >"$DEMO_DIR/$node-$s.pid"
}

# The first manager creates the buckets and the event stream at 3
# replicas; right after the cluster forms that can time out, so retry it
# until it serves, then start the others.
for attempt in 1 2 3 4 5; do
	start_manager 1 a
	for _ in $(seq 1 150); do
		grep -q "lease manager serving" "$DEMO_DIR/node1-a.log" && break 2
		kill -0 "$(cat "$DEMO_DIR/node1-a.pid")" 2>/dev/null || break
		sleep 0.2
	done
	echo "node1-a did not start (attempt $attempt), retrying; see $DEMO_DIR/node1-a.log"
	kill "$(cat "$DEMO_DIR/node1-a.pid")" 2>/dev/null || true
	sleep 1
done
for n in $(seq 2 "$NODES"); do
	start_manager "$n" a
done
sleep 1 # let the first one of each node take the lead
for n in $(seq 1 "$NODES"); do
	start_manager "$n" b
done

cat <<EOF

3 NATS servers and $NODES nodes x 2 lease managers are running (LEASE_TTL=$LEASE_TTL, LEADER_TTL=$LEADER_TTL).

  export NATS_URL=$NATS_URL
  NODE_ID=node1 bin/leasemgr pools                       # node1's pools and the cluster's
  bin/leasemgr watch --node '*'                          # every lease event
  NODE_ID=node1 bin/executor run --pool gpu -- sleep 20  # hold node1's gpu for 20s
  NODE_ID=node2 bin/executor run --pool gpu --pool api -- sleep 20  # node2's gpu and one of the cluster's 2 api
  open http://127.0.0.1:$HTTP_BASE/                      # node1-a's web page (node1-b: $((HTTP_BASE + 1)), node2-a: $((HTTP_BASE + 2)), ...)

  kill -9 \$(cat $DEMO_DIR/node1-a.pid)    # crash node1's active manager
  kill -9 \$(cat $DEMO_DIR/nats-n1.pid)    # crash a NATS server ...
  $DEMO_DIR/restart-nats.sh 1             # ... and bring it back

Logs: $DEMO_DIR/*.log. Ctrl-C stops everything.
EOF

wait
