#!/usr/bin/env bash
# cluster-demo.sh: a secure 3-server NATS JetStream cluster and N lease-manager
# nodes on this machine, for demos and manual fault trials.
#
# Usage:
#   scripts/cluster-demo.sh [NODES]          # NODES lease-manager nodes, default 3
#
# It builds bin/leasemgr, bin/executor and bin/nats-server (the real
# nats-server, from this module's dependency), writes the cluster's layout
# with `leasemgr layout --out $DEMO_DIR/layout` (docs/cluster.md, "A secure
# cluster"), then starts:
#   - three NATS servers nats-0 nats-1 nats-2, `nats-server -c` one process
#     each (so `kill -9` works), on client ports 4222-4224, route ports
#     6222-6224 and monitoring ports 8222-8224 (127.0.0.1 only), stores under
#     $DEMO_DIR/layout/store. They run docs/security.md's accounts layout:
#     every client needs its user's nkey seed; anonymous connections are
#     refused;
#   - for each node nodeI: two leasemgr processes with NODE_ID=nodeI, an
#     active manager and a hot standby (LEADER_TTL), pools gpu=1 and cpu=4,
#     the environment of $DEMO_DIR/layout/leasemgr.env (NATS_URL listing all
#     three servers, the manager's and jobs-admin's seeds, NATS_REPLICAS=3,
#     and fast release on: DISCONNECT_EVENTS), each with its own HTTP_ADDR
#     (web page and /v1/pools) from port HTTP_BASE (8100) up, and all of
#     them candidates for the cluster pool api=2 (CLUSTER_POOLS), which
#     exactly one of them serves at a time;
# and writes $DEMO_DIR/executor.env and $DEMO_DIR/reader.env, the exports an
# executor and a reader (leasemgr pools, watch) on this cluster source, and
# $DEMO_DIR/restart-nats.sh. It prints what to try. Ctrl-C stops
# everything. Logs and pid files are in $DEMO_DIR (default
# /tmp/slotlease-demo); it is wiped at start.
#
# Environment: DEMO_DIR, LEASE_TTL (default 6s), LEADER_TTL (default 1s), HTTP_BASE,
# POOL_CAPACITIES (default gpu=1,cpu=4), CLUSTER_POOLS (default api=2; empty
# for none), DEMO_CLIENT_PORT (default 4222), DEMO_CLUSTER_PORT (default
# 6222), DEMO_MONITOR_PORT (default 8222): the first server's; the others
# take the next ones.
#
# Fault trials while it runs (pids are in $DEMO_DIR/*.pid):
#   . $DEMO_DIR/executor.env                # then, in that shell:
#   NODE_ID=node1 bin/executor run --pool gpu -- sleep 600 &   # holds node1's gpu
#   NODE_ID=node1 bin/executor run --pool gpu -- date          # waits for it
#   kill -9 %1                              # crash the holder: fast release
#                                           # grants the waiter within about a
#                                           # second (DISCONNECT_GRACE, 0.8 s,
#                                           # and the close check), not at the TTL
#   kill -9 "$(cat $DEMO_DIR/node1-a.pid)"   # crash node1's manager: the standby
#                                           # takes over within 2 x LEADER_TTL
#   $DEMO_DIR/restart-nats.sh 1             # restart nats-1 as a rolling restart
#                                           # does: lame duck mode (SIGUSR2), wait
#                                           # for it to exit, start it, wait until
#                                           # it is healthy (current) again
#   kill -9 "$(cat $DEMO_DIR/nats-1.pid)"    # crash one NATS server; the cluster
#                                           # keeps quorum; start it again with
#                                           # restart-nats.sh 1
#   kill -STOP / -CONT <pid>                # freeze a manager or a server: a
#                                           # partition as seen from outside
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
DEMO_CLIENT_PORT=${DEMO_CLIENT_PORT:-4222}
DEMO_CLUSTER_PORT=${DEMO_CLUSTER_PORT:-6222}
DEMO_MONITOR_PORT=${DEMO_MONITOR_PORT:-8222}

command -v curl >/dev/null || {
	echo "cluster-demo.sh: needs curl (it asks each NATS server's /healthz)" >&2
	exit 1
}

cd "$(dirname "$0")/.."
ROOT=$(pwd)

echo "building into $ROOT/bin ..."
go build -o bin/ ./cmd/leasemgr ./cmd/executor github.com/nats-io/nats-server/v2

rm -rf "$DEMO_DIR"
mkdir -p "$DEMO_DIR"
LAYOUT=$DEMO_DIR/layout
"$ROOT/bin/leasemgr" layout --out "$LAYOUT" --client-port "$DEMO_CLIENT_PORT" \
	--cluster-port "$DEMO_CLUSTER_PORT" --monitor-port "$DEMO_MONITOR_PORT" >"$DEMO_DIR/layout.txt"

# The layout's environment files are plain VAR=value lines (systemd's
# EnvironmentFile= reads them); these are the same as exports, for a shell.
exports() { # env file, what it is for
	echo "# $2 on the demo's cluster: . this file (a copy of $1 as exports)"
	sed -n -e 's/^\([A-Z_][A-Z0-9_]*=\)/export \1/p' "$1"
}
{
	exports "$LAYOUT/executor.env" "An executor"
	echo "# Then give each run its node: NODE_ID=node1 bin/executor run --pool gpu -- ..."
} >"$DEMO_DIR/executor.env"
exports "$LAYOUT/reader.env" "A reader (leasemgr pools, watch)" >"$DEMO_DIR/reader.env"
NATS_URL=$(sed -n 's/^NATS_URL=//p' "$LAYOUT/leasemgr.env")

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

# restart-nats.sh I: what a rolling restart does to one server. If server I
# runs, it stops it in lame duck mode (SIGUSR2: it hands the raft groups it
# leads to the others, then closes its clients one at a time) and waits for
# it to exit; then it starts the server with the same conf (also after a
# kill -9) and waits until its /healthz says ok: JetStream current with the
# meta leader and every stream and consumer it holds.
cat >"$DEMO_DIR/restart-nats.sh" <<EOF
#!/usr/bin/env bash
set -eu
i=\${1:?usage: restart-nats.sh I (0, 1 or 2)}
conf="$LAYOUT/nats/nats-\$i.conf"
[ -e "\$conf" ] || { echo "no server \$i: \$conf is missing" >&2; exit 2; }
pidf="$DEMO_DIR/nats-\$i.pid"
health="http://127.0.0.1:\$(($DEMO_MONITOR_PORT + i))/healthz"
if [ -e "\$pidf" ] && kill -0 "\$(cat "\$pidf")" 2>/dev/null; then
	pid=\$(cat "\$pidf")
	echo "nats-\$i (pid \$pid): lame duck mode ..."
	kill -USR2 "\$pid"
	for _ in \$(seq 1 1200); do
		kill -0 "\$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "\$pid" 2>/dev/null; then
		echo "nats-\$i did not exit within 120 s" >&2
		exit 1
	fi
fi
"$ROOT/bin/nats-server" -c "\$conf" >>"$DEMO_DIR/nats-\$i.log" 2>&1 &
echo \$! >"\$pidf"
echo "nats-\$i started, pid \$!; waiting until it is current ..."
for _ in \$(seq 1 1200); do
	if curl -fs "\$health" >/dev/null 2>&1; then
		echo "nats-\$i is current"
		exit 0
	fi
	sleep 0.1
done
echo "nats-\$i is not current after 120 s: see $DEMO_DIR/nats-\$i.log" >&2
exit 1
EOF
chmod +x "$DEMO_DIR/restart-nats.sh"

for i in 0 1 2; do
	"$ROOT/bin/nats-server" -c "$LAYOUT/nats/nats-$i.conf" >>"$DEMO_DIR/nats-$i.log" 2>&1 &
	echo $! >"$DEMO_DIR/nats-$i.pid"
done

# Wait until every server is current with a JetStream meta leader before
# the managers create their buckets at 3 replicas.
echo "waiting for the JetStream cluster ..."
for i in 0 1 2; do
	for attempt in $(seq 1 600); do
		curl -fs "http://127.0.0.1:$((DEMO_MONITOR_PORT + i))/healthz" >/dev/null 2>&1 && break
		[ "$attempt" -lt 600 ] || {
			echo "nats-$i is not healthy after 60 s: see $DEMO_DIR/nats-$i.log" >&2
			exit 1
		}
		sleep 0.1
	done
done

http_port() { # node-number suffix
	local n=$1 s=$2 k=0
	[ "$s" = b ] && k=1
	echo $((HTTP_BASE + 2 * (n - 1) + k))
}

start_manager() { # node-number suffix
	local n=$1 s=$2 node="node$1"
	(
		set -a
		# shellcheck source=/dev/null
		. "$LAYOUT/leasemgr.env"
		set +a
		exec env NODE_ID="$node" POOL_CAPACITIES="$POOLS" CLUSTER_POOLS="$CLUSTER_POOLS" LEASE_TTL="$LEASE_TTL" LEADER_TTL="$LEADER_TTL" \
			HTTP_ADDR="127.0.0.1:$(http_port "$n" "$s")" "$ROOT/bin/leasemgr" run
	) >>"$DEMO_DIR/$node-$s.log" 2>&1 &
	echo $! >"$DEMO_DIR/$node-$s.pid"
}

# The first manager creates the buckets and the event stream at 3
# replicas, which can take a while right after the cluster forms (leasemgr
# retries its set-up by itself); then start the others.
start_manager 1 a
for attempt in $(seq 1 600); do
	grep -q "lease manager serving" "$DEMO_DIR/node1-a.log" && break
	kill -0 "$(cat "$DEMO_DIR/node1-a.pid")" 2>/dev/null || {
		echo "node1-a exited: see $DEMO_DIR/node1-a.log" >&2
		exit 1
	}
	[ "$attempt" -lt 600 ] || {
		echo "node1-a does not serve after 120 s: see $DEMO_DIR/node1-a.log" >&2
		exit 1
	}
	sleep 0.2
done
for n in $(seq 2 "$NODES"); do
	start_manager "$n" a
done
sleep 1 # let the first one of each node take the lead
for n in $(seq 1 "$NODES"); do
	start_manager "$n" b
done

cat <<EOF

3 NATS servers (accounts layout: no anonymous client) and $NODES nodes x 2 lease
managers are running (LEASE_TTL=$LEASE_TTL, LEADER_TTL=$LEADER_TTL, fast release on).
The layout is in $LAYOUT ($DEMO_DIR/layout.txt lists its files).

  . $DEMO_DIR/reader.env                 # a reader's NATS_URL, seed and inbox
  NODE_ID=node1 bin/leasemgr pools                       # node1's pools and the cluster's
  bin/leasemgr watch --node '*'                          # every lease event
  . $DEMO_DIR/executor.env               # an executor's (in another shell)
  NODE_ID=node1 bin/executor run --pool gpu -- sleep 600 &   # hold node1's gpu
  NODE_ID=node1 bin/executor run --pool gpu -- date          # wait for it ...
  kill -9 %1                                                 # ... granted within about a second
  NODE_ID=node2 bin/executor run --pool gpu --pool api -- sleep 20  # node2's gpu and one of the cluster's 2 api
  open http://127.0.0.1:$HTTP_BASE/                      # node1-a's web page (node1-b: $((HTTP_BASE + 1)), node2-a: $((HTTP_BASE + 2)), ...)

  NATS_URL=$NATS_URL bin/leasemgr pools   # no credentials: refused
  kill -9 \$(cat $DEMO_DIR/node1-a.pid)    # crash node1's active manager
  $DEMO_DIR/restart-nats.sh 1             # rolling restart of one server: lame duck, start, wait until current
  kill -9 \$(cat $DEMO_DIR/nats-1.pid)     # crash a NATS server ...
  $DEMO_DIR/restart-nats.sh 1             # ... and bring it back

Logs: $DEMO_DIR/*.log. Ctrl-C stops everything.
EOF

wait
