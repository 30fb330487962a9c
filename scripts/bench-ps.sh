#!/usr/bin/env bash
# Shoal's parameter server against a PyTorch RPC parameter server
# (bench/peers/torch_rpc_ps.py), in one session, alternating: per round
#   (a) shoal train --mode async, (b) the same with --mode sync,
#   (c) the PyTorch peer (async, one update-and-fetch RPC per step), with
#       TensorPipe held to TCP over loopback (as Shoal's gRPC) and then
#       with the transports TensorPipe picks itself (shared memory and
#       cross-memory attach on one host, as PyTorch's examples run it),
#       and over TCP again with its workers bound to cores of their own as
#       shoal train binds Shoal's (--bind auto; only where that binds: the
#       workers' threads take the CPUs),
#   (d) shoal bench tcp: one loopback TCP connection's round trip of the
#       same vector each way (669,706 float32 for --hidden 512,512),
# all with 2 workers, 1 server, the MLP 784-512-512-10, batch 64, momentum
# SGD at a constant lr 0.01 (--lr-decay none), for BENCH_PS_ROUNDS rounds;
# then writes the medians over the rounds into docs/BENCHMARKS.md between
# <!-- ps:begin --> and <!-- ps:end --> ("## Parameter server: Shoal vs
# PyTorch RPC") and prints them, with Shoal-async/peer samples/s and the
# accuracy difference.
#
# Knobs (environment): BENCH_PS_ROUNDS (3), BENCH_PS_EPOCHS (2),
# BENCH_PS_STEPS (unset; steps per worker instead of epochs, for short
# runs), BENCH_PS_WORKERS (2), BENCH_PS_BATCH (64), BENCH_PS_TCP_ITERS (50),
# BENCH_PS_THREADS (unset: each side's default, the cores divided by the
# workers; N: --threads N to Shoal's workers and the peer's alike),
# BENCH_PS_PEER_THREADS (unset: as BENCH_PS_THREADS; N: --threads N to the
# peer's workers alone, so that each side runs at its own best thread
# count in one run: on 16 cores the peer was best at 4, Shoal at 8),
# BENCH_PS_BIND (auto: --bind, Shoal's workers bound to cores of their
# own where they fit; none: unbound), BENCH_PS_LANES (unset: shoal
# train's choice for this machine, 4 on 8 CPUs or more, else 1; N: --lanes
# N, the connections Shoal's workers split each push-pull to the server
# over; the peer has one RPC channel), BENCH_PS_PARALLEL_STEP (unset:
# shoal train's choice, on with 8 CPUs or more; 1: --parallel-step,
# Shoal's server updates its chunks on several goroutines, each chunk's
# reply going out once it is updated; 0: off),
# BENCH_PS_CHUNK_BYTES (unset: Shoal's default --chunk-bytes, 1 MiB, 3
# chunks of this model; N: --chunk-bytes N, so that more lanes have
# chunks to carry),
# DOC (docs/BENCHMARKS.md; point it at a scratch copy for trial runs),
# BENCH_PS_OUT (unset: the runs' JSON records go to a temporary folder,
# removed at the end; set: they are kept there, one .jsonl per run kind,
# appended round by round, so a run cut short still leaves its rounds),
# PYTHON, SHOAL, DATA_DIR. Needs Debian's python3-torch, the Fashion-MNIST
# files and a built bin/shoal (make bench-ps).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
SHOAL=${SHOAL:-bin/shoal}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
ROUNDS=${BENCH_PS_ROUNDS:-3}
EPOCHS=${BENCH_PS_EPOCHS:-2}
STEPS=${BENCH_PS_STEPS:-}
WORKERS=${BENCH_PS_WORKERS:-2}
BATCH=${BENCH_PS_BATCH:-64}
TCP_ITERS=${BENCH_PS_TCP_ITERS:-50}
THREADS=${BENCH_PS_THREADS:-}
PEER_THREADS=${BENCH_PS_PEER_THREADS:-$THREADS}
LANES=${BENCH_PS_LANES:-}
BIND=${BENCH_PS_BIND:-auto}
PARSTEP=${BENCH_PS_PARALLEL_STEP:-}
CHUNK=${BENCH_PS_CHUNK_BYTES:-}
parallel=() parallel_knob=
case $PARSTEP in
'') ;;
0 | 1) parallel=(--parallel-step=$([ "$PARSTEP" = 1 ] && echo true || echo false)) parallel_knob=" BENCH_PS_PARALLEL_STEP=$PARSTEP" ;;
*) echo "bench-ps: BENCH_PS_PARALLEL_STEP=$PARSTEP: want 0 or 1 (or unset, shoal train's choice)" >&2; exit 1 ;;
esac
lanes=() lanes_knob=
if [ -n "$LANES" ]; then
	lanes=(--lanes "$LANES") lanes_knob=" BENCH_PS_LANES=$LANES"
fi
DOC=${DOC:-docs/BENCHMARKS.md}
HIDDEN=512,512
"$PY" -c 'import torch.distributed.rpc' 2>/dev/null || {
	echo "bench-ps: $PY cannot import torch.distributed.rpc: apt-get install python3-torch" >&2; exit 1; }
[ -x "$SHOAL" ] || { echo "bench-ps: $SHOAL not found: run make build first" >&2; exit 1; }
[ -f "$DOC" ] || { echo "bench-ps: $DOC not found" >&2; exit 1; }
scripts/ensure-dataset.sh "$DATA_DIR" >&2

# The vector of --hidden 512,512: 669,706 float32 (the table checks that
# every run reports that many parameters).
tcp_bytes=$((669706 * 4))

if [ -n "$STEPS" ]; then
	length=(--steps "$STEPS") length_knob=BENCH_PS_STEPS=$STEPS
else
	length=(--epochs "$EPOCHS") length_knob=BENCH_PS_EPOCHS=$EPOCHS
fi
chunk=() chunk_knob=
if [ -n "$CHUNK" ]; then
	chunk=(--chunk-bytes "$CHUNK") chunk_knob=" BENCH_PS_CHUNK_BYTES=$CHUNK"
fi
threads=() threads_knob=
if [ -n "$THREADS" ]; then
	threads=(--threads "$THREADS") threads_knob=" BENCH_PS_THREADS=$THREADS"
fi
peer_threads=()
if [ -n "$PEER_THREADS" ]; then
	peer_threads=(--threads "$PEER_THREADS")
	[ "$PEER_THREADS" = "$THREADS" ] || threads_knob+=" BENCH_PS_PEER_THREADS=$PEER_THREADS"
fi
train=(--workers "$WORKERS" --servers 1 --hidden "$HIDDEN" --batch "$BATCH" --lr 0.01 --momentum 0.9
	--lr-decay none "${length[@]}" "${threads[@]}" --bind "$BIND" "${lanes[@]}" "${parallel[@]}" "${chunk[@]}" --data "$DATA_DIR" --stats --json)
peer=(bench/peers/torch_rpc_ps.py --workers "$WORKERS" --hidden "$HIDDEN" --batch "$BATCH" --lr 0.01 --momentum 0.9
	"${length[@]}" "${peer_threads[@]}" --data "$DATA_DIR" --json)
tcp=(bench tcp --bytes "$tcp_bytes" --iters "$TCP_ITERS" --json)

if [ -n "${BENCH_PS_OUT:-}" ]; then
	out=$BENCH_PS_OUT
	mkdir -p "$out"
	rm -f "$out"/*.jsonl
else
	out=$(mktemp -d)
	trap 'rm -rf "$out"' EXIT
fi
# The last JSON line of a run's stdout is its record.
record() { grep '^{' | tail -n 1; }
# The peer runs bound too where shoal train --bind auto binds (the same
# rule, peerlib.binds_workers): its workers' threads take the CPUs.
peer_binds=$("$PY" -c 'import os, sys; sys.path.insert(0, "bench/peers"); from peerlib import binds_workers
w, t = int(sys.argv[1]), int(sys.argv[2] or 0) or max(1, len(os.sched_getaffinity(0)) // int(sys.argv[1]))
print(int(binds_workers(len(os.sched_getaffinity(0)), w, t)))' "$WORKERS" "$PEER_THREADS")
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
	for mode in async sync; do
		echo "round $round/$ROUNDS: shoal $mode" >&2
		"$SHOAL" train --mode "$mode" "${train[@]}" | record >>"$out/shoal-$mode.jsonl"
	done
	echo "round $round/$ROUNDS: pytorch rpc" >&2
	"$PY" "${peer[@]}" | record >>"$out/peer.jsonl"
	echo "round $round/$ROUNDS: pytorch rpc, transport auto" >&2
	"$PY" "${peer[@]}" --transport auto | record >>"$out/peer-auto.jsonl"
	if [ "$peer_binds" = 1 ]; then
		echo "round $round/$ROUNDS: pytorch rpc, workers bound" >&2
		"$PY" "${peer[@]}" --bind auto | record >>"$out/peer-bound.jsonl"
	fi
	echo "round $round/$ROUNDS: raw tcp" >&2
	"$SHOAL" "${tcp[@]}" | record >>"$out/tcp.jsonl"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

"$PY" - "$out" "$DOC" "$load_before" "$load_after" "$ROUNDS" \
	"make bench-ps (BENCH_PS_ROUNDS=$ROUNDS $length_knob BENCH_PS_WORKERS=$WORKERS BENCH_PS_BATCH=$BATCH BENCH_PS_TCP_ITERS=$TCP_ITERS$threads_knob BENCH_PS_BIND=$BIND$lanes_knob$parallel_knob$chunk_knob)" \
	"$SHOAL train --mode async|sync ${train[*]}" "$PY ${peer[*]}" "$SHOAL ${tcp[*]}" <<'EOF'
import datetime, json, os, statistics, sys

sys.path.insert(0, "scripts")
from benchdoc import machine, put_section, revision

folder, doc, load_before, load_after, rounds, make_cmd, shoal_cmd, peer_cmd, tcp_cmd = sys.argv[1:10]


def load(name):
    with open(f"{folder}/{name}.jsonl") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    if len(rows) != int(rounds):
        sys.exit(f"bench-ps: {name}: {len(rows)} records for {rounds} rounds")
    return rows


med = statistics.median
shoal = {m: load(f"shoal-{m}") for m in ("async", "sync")}
peer, peer_auto, tcp = load("peer"), load("peer-auto"), load("tcp")
# The bound peer ran only where shoal train --bind auto binds.
peer_bound = load("peer-bound") if os.path.exists(f"{folder}/peer-bound.jsonl") else []
for r in shoal["async"] + shoal["sync"] + peer + peer_auto + peer_bound:
    if r["parameters"] != 669706:
        sys.exit(f"bench-ps: a run trained {r['parameters']} parameters, want 669,706")
tcp_p50 = med(r["median_seconds"] for r in tcp)
tcp_gbps = med(r["gbps"] for r in tcp)


def shoal_row(rs, mode):
    # samples over the workers' own run time (the longest), as bench train
    # counts it; shoal train's samples_per_sec also counts starting them.
    sps = [r["samples"] / r["worker_seconds"] for r in rs]
    st = [r["step_time"] for r in rs]
    return {
        "name": f"Shoal {mode}", "sps": sps, "acc": [r["test_accuracy"] for r in rs],
        "comm_p50": [s["pull"]["p50"] + s["push"]["p50"] for s in st],
        "comm_mean": [s["pull"]["mean"] + s["push"]["mean"] for s in st],
        "parts": "pull %.1f + push %.1f%s" % (
            1e3 * med(s["pull"]["p50"] for s in st), 1e3 * med(s["push"]["p50"] for s in st),
            "; barrier wait %.1f" % (1e3 * med(s["wait"]["p50"] for s in st)) if mode == "sync" else ""),
        "steps": rs[0]["steps"], "step_p50": [s["step"]["p50"] for s in st], "compute_p50": [s["compute"]["p50"] for s in st],
    }


def peer_row(rs, name):
    st = [r["step_time"] for r in rs]
    sv = [r["server_time"] for r in rs]
    return {
        "name": name, "sps": [r["samples_per_sec"] for r in rs], "acc": [r["test_accuracy"] for r in rs],
        "comm_p50": [s["rpc"]["p50"] for s in st], "comm_mean": [s["rpc"]["mean"] for s in st],
        "parts": "one RPC; server lock wait %.1f + apply %.1f (means)" % (
            1e3 * med(s["lock"]["mean"] for s in sv), 1e3 * med(s["apply"]["mean"] for s in sv)),
        "steps": rs[0]["steps"], "step_p50": [s["step"]["p50"] for s in st], "compute_p50": [s["compute"]["p50"] for s in st],
    }


rows = [shoal_row(shoal["async"], "async"), shoal_row(shoal["sync"], "sync"),
        peer_row(peer, "PyTorch RPC (async, TCP)"), peer_row(peer_auto, "PyTorch RPC (async, TensorPipe's choice)")]
if peer_bound:
    rows.append(peer_row(peer_bound, "PyTorch RPC (async, TCP, workers bound)"))
lines = []
for r in rows:
    comm = med(r["comm_p50"])
    lines.append(
        f"| {r['name']} | {med(r['sps']):,.0f} | {100 * med(r['acc']):.2f}% | {1e3 * comm:.1f} | {1e3 * med(r['comm_mean']):.1f} | "
        f"{comm / tcp_p50:.1f}× | {r['parts']} | {1e3 * med(r['step_p50']):.1f} | {1e3 * med(r['compute_p50']):.1f} | {r['steps']:,} | "
        + ", ".join(f"{s:,.0f}" for s in r["sps"]) + " |")
ratio = med(rows[0]["sps"]) / med(rows[2]["sps"])
points = 100 * (med(rows[0]["acc"]) - med(rows[2]["acc"]))
ratio_auto = med(rows[0]["sps"]) / med(rows[3]["sps"])
points_auto = 100 * (med(rows[0]["acc"]) - med(rows[3]["acc"]))
peer0 = peer[0]
table = "\n".join([
    f"Command: `{make_cmd}` at revision {revision()}, {datetime.date.today()}; per round, in this order:",
    "",
    f"- `{shoal_cmd}`",
    f"- `{peer_cmd}`",
    f"- `{tcp_cmd}`",
    "",
    f"Machine: {machine()}; load average {load_before} at the start, {load_after} at the end.",
    f"Medians over {rounds} round(s). samples/s: all workers' samples over the longest worker's training loop "
    "(Shoal: `worker_seconds` of `--stats`; the peer: its workers' loops, from the first weight fetch). "
    "Communication per step, p50 and mean, in ms: Shoal's pull + push phases of `--stats` (the sum of their p50s; "
    "sync's barrier wait is outside the pull and shown apart); the peer's update-and-fetch RPC round trip (the server's "
    "lock wait and optimizer step included, since they are inside it). Both move the "
    f"{669706 * 4:,}-byte vector each way per step. Raw TCP: `shoal bench tcp`'s median round trip of the same bytes "
    "each way over one loopback connection, measured in the same rounds. "
    f"PyTorch peer: {peer0['transport']} (TCP) or {peer_auto[0]['transport']} (TensorPipe's own choice), "
    f"{peer0['backend']}, {peer0['threads']} thread(s) per worker, its workers on CPUs "
    f"{' | '.join(','.join(map(str, c)) for c in peer0['cpus'])} (unbound, as PyTorch's examples run)"
    + (f" or {' | '.join(','.join(map(str, c)) for c in peer_bound[0]['cpus'])} (`--bind auto`, as Shoal's)" if peer_bound else
       " (not run bound: shoal train --bind auto binds no workers here)") + "; Shoal: "
    f"{shoal['async'][0].get('threads', '?')} GEMM thread(s) per worker, "
    f"workers bound to CPUs {' | '.join(shoal['async'][0].get('cpus') or ['none (unbound)'])}, "
    f"{shoal['async'][0].get('lanes', 1)} lane(s) (connections) per push-pull, "
    f"the server's optimizer step {'parallel' if shoal['async'][0].get('parallel_step') else 'serial'}.",
    "",
    "| run | samples/s | test accuracy | comm/step p50 (ms) | comm/step mean (ms) | comm p50 / raw TCP | comm parts (ms, p50) | step p50 (ms) | compute p50 (ms) | steps/worker | rounds (samples/s) |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
    *lines,
    f"| raw TCP, {669706 * 4:,} B each way | | | {1e3 * tcp_p50:.2f} | | 1.0× | {tcp_gbps:.2f} GB/s (both directions) | | | | "
    + ", ".join(f"{1e3 * r['median_seconds']:.2f} ms" for r in tcp) + " |",
    "",
    f"Shoal async / PyTorch RPC over TCP: **{ratio:.2f}×** samples/s, test accuracy {points:+.2f} points; "
    f"against TensorPipe's own choice of transport: **{ratio_auto:.2f}×**, {points_auto:+.2f} points"
    + (f"; against the peer over TCP with its workers bound as Shoal's: **{med(rows[0]['sps']) / med(rows[4]['sps']):.2f}×**, "
       f"{100 * (med(rows[0]['acc']) - med(rows[4]['acc'])):+.2f} points." if peer_bound else "."),
])
put_section(doc, "ps", table, "Parameter server: Shoal vs PyTorch RPC")
print(table)
EOF
