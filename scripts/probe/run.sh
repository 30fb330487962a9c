#!/usr/bin/env bash
# Reruns issue 44's attacks 1-5 against live `shoal train` runs on loopback,
# each beside an undisturbed run of the same command (docs/PROBE.md).
#
#   scripts/probe/run.sh [attack...]     attacks: base gossip gossip-plain conns flood reform session hijack malformed restart
#
# Env: SHOAL (the shoal binary; built to /tmp/probe-shoal if unset), PROBE
# (this probe; built to /tmp/probe-bin), OUT (folder of the runs' output,
# default /tmp/probe-runs), EPOCHS (default 2), FLOOD_HTTP2 (set: the
# flood's connections complete the HTTP/2 handshake, then never call),
# FLOOD_HEALTH (check or watch: each of the flood's connections makes one
# health Check, or holds a health Watch, then never calls), RESTART_STEPS
# (restart's --steps per worker, default 600: more, so that the hijack 5 s
# in lands mid-run on a fast machine).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/probe-runs}
EPOCHS=${EPOCHS:-2}
mkdir -p "$OUT"
if [ -z "${SHOAL:-}" ]; then SHOAL=/tmp/probe-shoal; go build -o "$SHOAL" ./cmd/shoal || exit 1; fi
if [ -z "${PROBE:-}" ]; then PROBE=/tmp/probe-bin; go build -o "$PROBE" ./scripts/probe || exit 1; fi

PS_ARGS=(--mode async --workers 2 --servers 1 --epochs "$EPOCHS" --metrics --log-level info)
RING_ARGS=(--mode ring --workers 2 --epochs "$EPOCHS" --log-level info)

# start NAME ARGS...: starts shoal train in the background, output in $OUT/NAME.out.
start() {
	local name=$1; shift
	echo "== $name: shoal train $*"
	"$SHOAL" train "$@" >"$OUT/$name.out" 2>&1 &
	TRAIN=$!
}

# wait_for NAME REGEX: waits (60 s at most) for a line of the run's output.
wait_for() {
	for _ in $(seq 600); do
		grep -qE "$2" "$OUT/$1.out" && return 0
		sleep 0.1
	done
	echo "   (no line matching $2)"; return 1
}

# finish NAME: waits for the run and prints its end.
finish() {
	local t0=$SECONDS
	wait "$TRAIN"; local rc=$?
	echo "   exit $rc; $(grep -E '^test:' "$OUT/$1.out" || echo 'no test line'); $(grep -E '^throughput' "$OUT/$1.out" | sed 's/.*wall/wall/')"
	grep -E 'shoal:|membership_events|re-formed|moved' "$OUT/$1.out" | grep -v level=INFO | head -5 | sed 's/^/   /'
	echo "   output lines: $(wc -l <"$OUT/$1.out"), of which level=ERROR: $(grep -c level=ERROR "$OUT/$1.out"), level=WARN: $(grep -c level=WARN "$OUT/$1.out")"
}

shard_addr() { grep -m1 'msg=serving component=ps' "$OUT/$1.out" | sed -E 's/.* addr=([0-9.:]+) .*/\1/'; }
gossip_addr() { grep -m1 'msg=serving component=ps' "$OUT/$1.out" | sed -E 's/.* gossip=([0-9.:]+) .*/\1/'; }
ps_metrics() { grep -m1 '^metrics: ps 0 at' "$OUT/$1.out" | sed -E 's/.* at //'; }

# ring_ports: the TCP ports the ring ranks (children of $TRAIN) listen on.
ring_ports() {
	local pids; pids=$(pgrep -P "$TRAIN" | paste -sd'|')
	ss -ltnpH 2>/dev/null | grep -E "pid=($pids)," | awk '{print $4}' | grep '^127.0.0.1:' | paste -sd,
}

ps_run() { # NAME: a PS run ready for an attack (shard serving, both workers training)
	start "$1" "${PS_ARGS[@]}"
	wait_for "$1" 'msg=serving component=ps' && wait_for "$1" "^\[ps 0\].*worker joined.*rank=0" && wait_for "$1" "^\[ps 0\].*worker joined.*rank=1"; sleep 1
}

for attack in "${@:-base gossip gossip-plain conns reform session hijack malformed}"; do
	for a in $attack; do
		case $a in
		base)
			start base-ps "${PS_ARGS[@]}"; finish base-ps
			start base-ring "${RING_ARGS[@]}"; finish base-ring
			start base-ps-tls "${PS_ARGS[@]}" --tls; finish base-ps-tls ;;
		gossip)
			start gossip "${PS_ARGS[@]}" --tls
			wait_for gossip 'msg=serving component=ps'
			"$PROBE" gossip -join "$(gossip_addr gossip)" -hold 15s
			finish gossip ;;
		gossip-plain)
			start gossip-plain "${PS_ARGS[@]}"
			wait_for gossip-plain 'msg=serving component=ps'
			"$PROBE" gossip -join "$(gossip_addr gossip-plain)" -hold 15s
			finish gossip-plain ;;
		conns)
			ps_run conns
			"$PROBE" conns -addr "$(shard_addr conns)" -n 1100 -hold 8s
			finish conns ;;
		flood)
			# shoal ps --max-connections 16 + 2 shoal worker started during a
			# sustained flood of 32 silent connections, each reopened as soon as
			# the shard closes it.
			echo "== flood: shoal ps --max-connections 16; 32 flooders; 2 shoal worker --steps 300 started during the flood"
			P=127.0.0.1:${PS_PORT:-17072}
			"$SHOAL" ps --listen "$P" --mode async --workers 2 --max-connections 16 --log-level info >"$OUT/flood-ps.out" 2>&1 & local_ps=$!
			sleep 2
			"$PROBE" flood -addr "$P" -n 32 -hold "${FLOOD_HOLD:-40s}" ${FLOOD_HTTP2:+-http2} ${FLOOD_HEALTH:+-health $FLOOD_HEALTH} & probe=$!
			sleep 2
			"$SHOAL" worker --servers "$P" --mode async --rank 1 --world-size 2 --steps 300 >"$OUT/flood-w1.out" 2>&1 & w1=$!
			"$SHOAL" worker --servers "$P" --mode async --rank 0 --world-size 2 --steps 300 >"$OUT/flood-w0.out" 2>&1; rc0=$?
			wait $w1; rc1=$?
			echo "   worker 0 exit $rc0: $(grep -E '^test:|^shoal:' "$OUT/flood-w0.out" | cut -c1-200)"
			echo "   worker 1 exit $rc1: $(grep -E 'steps,|^shoal:' "$OUT/flood-w1.out" | cut -c1-200)"
			wait $probe
			echo "   shard: $(grep -c 'closed a connection still in its handshake' "$OUT/flood-ps.out") 'closed a connection still in its handshake' lines, $(grep -c 'refused a connection' "$OUT/flood-ps.out") 'refused a connection' lines"
			kill "$local_ps"; wait "$local_ps" 2>/dev/null ;;
		reform)
			start reform "${RING_ARGS[@]}"
			wait_for reform 'msg=generation ' ; sleep 1
			ports=$(ring_ports); echo "   ring ranks listen on: $ports"
			"$PROBE" reform -addrs "$ports" -n "${REFORMS:-40}"
			finish reform ;;
		session)
			ps_run session
			"$PROBE" session -addr "$(shard_addr session)"
			finish session ;;
		hijack)
			ps_run hijack
			"$PROBE" hijack -addr "$(shard_addr hijack)"
			finish hijack ;;
		restart)
			# shoal ps + shoal worker by hand: the hijack, then worker 0 restarted with its flags.
			echo "== restart: shoal ps + 2 shoal worker --steps ${RESTART_STEPS:-600}; hijack worker 0; restart it"
			P=127.0.0.1:${PS_PORT:-17071}
			"$SHOAL" ps --listen "$P" --mode async --workers 2 --log-level info >"$OUT/restart-ps.out" 2>&1 & local_ps=$!
			sleep 2
			"$SHOAL" worker --servers "$P" --mode async --rank 1 --world-size 2 --steps "${RESTART_STEPS:-600}" >"$OUT/restart-w1.out" 2>&1 & w1=$!
			"$SHOAL" worker --servers "$P" --mode async --rank 0 --world-size 2 --steps "${RESTART_STEPS:-600}" >"$OUT/restart-w0.out" 2>&1 & w0=$!
			sleep 5
			"$PROBE" hijack -addr "$P"
			wait $w0; echo "   worker 0 exit $?: $(grep '^shoal:' "$OUT/restart-w0.out" | cut -c1-200)"
			"$SHOAL" worker --servers "$P" --mode async --rank 0 --world-size 2 --steps "${RESTART_STEPS:-600}" >"$OUT/restart-w0b.out" 2>&1
			echo "   restarted worker 0 exit $?:"; grep -E 'joining a run|steps,|^test' "$OUT/restart-w0b.out" | sed 's/^/     /'
			wait $w1; echo "   worker 1 exit $?"
			kill "$local_ps"; wait "$local_ps" 2>/dev/null ;;
		malformed)
			ps_run malformed
			"$PROBE" malformed -addr "$(shard_addr malformed)" -gossip "$(gossip_addr malformed)" -n 2000 ${JOIN_AS:+-join-as $JOIN_AS}
			"$PROBE" metrics -url "$(ps_metrics malformed)"
			finish malformed ;;
		*) echo "unknown attack $a"; exit 2 ;;
		esac
	done
done
