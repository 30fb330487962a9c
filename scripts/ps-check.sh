#!/usr/bin/env bash
# What issue 10 still asks of a machine with cores to spare, from binaries
# built elsewhere (make gpubin-ps: .gpubin/shoal, .gpubin/rpc.test,
# .gpubin/ps.test and .gpubin/ps-purego.test, plain or gzipped; the Fashion-MNIST files in DATA) on a
# machine with PyTorch but no Go, such as the device machine (16 cores).
# The 2026-11-26 runs there (docs/BENCHMARKS.md, "On 16 cores") found the
# PyTorch peer at its best with 4 threads a worker, a lone push-pull 2.4x a
# raw TCP round trip, and 4 shards in one process training 1.7x faster
# than one. After the scan on arrival, the copy-free replies, the parallel
# step and the AVX2 update, the 2026-11-27 run (b0dfd43, "On 16 cores, a
# third time") found 4 lanes with the parallel step at 2.3x the peer with
# communication at 1.4x raw TCP, and since eed8ed3 they are the defaults
# on 8 or more CPUs. What it runs:
#
#   1. The lanes and the parallel step alone: BenchmarkPushPullLanes (the
#      670k push-pull over 1-4 connections, serial and parallel step)
#      beside `shoal bench tcp`, and ps's BenchmarkPush and
#      BenchmarkPushRead (the shard's serial work per push of the 670k
#      vector: the push scanned by the shard or as it arrived; the reply
#      copied, held, held across the next push) with GOMAXPROCS 1, 4 and
#      8, the parallel step on and off, alternating, and once more with
#      the Go loops instead of the AVX2 update and scan (ps-purego.test,
#      GOMAXPROCS 1), MICRO_ROUNDS rounds (default 1) -> micro.txt
#   2. make bench-ps for each of VARIANTS,
#      "LANES:PARALLEL_STEP[:THREADS[:CHUNK_BYTES[:PEER_THREADS]]]"
#      (THREADS, a Shoal worker's, default 4, the peer's best; CHUNK_BYTES
#      default 1 MiB, 3 chunks of the 670k MLP; PEER_THREADS, a peer
#      worker's, default THREADS; default "1:0 1:1 4:1:4:262144 4:1:8:262144:4")
#      -> bench-ps-<variant>.txt, with the runs' JSON records in
#      ps-<variant>/ (the variant's colons as dashes)
#
# STEPS (steps per worker) replaces EPOCHS for a short trial. Everything
# goes into OUT (default ps-check-out/). With the defaults (EPOCHS=1,
# ROUNDS=3, MICRO_ROUNDS=1, four variants) it took 537 s on the device
# machine on 2026-11-27. Pack OUT into one file there (the device tool brings back at
# most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-ps-check-out}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
PYTHON=${PYTHON:-python3}
THREADS=${THREADS:-4}
VARIANTS=${VARIANTS:-1:0 1:1 4:1:4:262144 4:1:8:262144:4}
EPOCHS=${EPOCHS:-1}
STEPS=${STEPS:-} # steps per worker instead of epochs (a short trial run)
ROUNDS=${ROUNDS:-3}
MICRO_ROUNDS=${MICRO_ROUNDS:-1}
mkdir -p "$OUT" bin
for b in shoal rpc.test ps.test ps-purego.test; do
	if [ -f ".gpubin/$b.gz" ] && [ ! -x ".gpubin/$b" ]; then
		gunzip -c ".gpubin/$b.gz" >".gpubin/$b" && chmod +x ".gpubin/$b"
	fi
	[ -x ".gpubin/$b" ] || { echo "ps-check: .gpubin/$b not found: run make gpubin on the build machine and carry .gpubin" >&2; exit 1; }
done
export SHOAL_REVISION=${SHOAL_REVISION:-$(cat .gpubin/REVISION 2>/dev/null || echo unknown)}
status=0

{
	echo "revision $SHOAL_REVISION, $(nproc) cores, $(date -u +%FT%TZ)"
	for round in $(seq 1 "$MICRO_ROUNDS"); do
		echo "== round $round"
		(cd rpc && ../.gpubin/rpc.test -test.run '^$' -test.bench 'PushPullLanes/mlp' -test.benchtime 0.5s) | grep -E '^Benchmark' || status=1
		.gpubin/shoal bench tcp --bytes 2678824 --iters 200 || status=1
		for par in false true; do
			echo "parallel step $par"
			(cd ps && ../.gpubin/ps.test -test.run '^$' -test.bench 'BenchmarkPush(Read)?$' -test.cpu 1,4,8 -test.benchtime 0.5s -parallel-step=$par) | grep -E '^Benchmark' || status=1
		done
		echo "the Go loops (purego), parallel step false"
		(cd ps && ../.gpubin/ps-purego.test -test.run '^$' -test.bench 'BenchmarkPush(Read)?$' -test.cpu 1 -test.benchtime 0.5s) | grep -E '^Benchmark' || status=1
	done
} >"$OUT/micro.txt" 2>&1
echo "ps-check: lanes, parallel step and raw TCP alone -> $OUT/micro.txt" >&2

for v in $VARIANTS; do
	IFS=: read -r lanes par threads chunk peer <<<"$v"
	name=${v//:/-}
	knob=(BENCH_PS_THREADS="${threads:-$THREADS}" BENCH_PS_LANES="$lanes" BENCH_PS_PARALLEL_STEP="$par")
	[ -z "$chunk" ] || knob+=(BENCH_PS_CHUNK_BYTES="$chunk")
	[ -z "$peer" ] || knob+=(BENCH_PS_PEER_THREADS="$peer")
	[ -z "$STEPS" ] || knob+=(BENCH_PS_STEPS="$STEPS")
	cp docs/BENCHMARKS.md "$OUT/BENCHMARKS-$name.md"
	echo "ps-check: make bench-ps, ${knob[*]}" >&2
	env "${knob[@]}" BENCH_PS_EPOCHS="$EPOCHS" BENCH_PS_ROUNDS="$ROUNDS" BENCH_PS_OUT="$OUT/ps-$name" PYTHON="$PYTHON" \
		SHOAL=.gpubin/shoal DATA_DIR="$DATA" DOC="$OUT/BENCHMARKS-$name.md" scripts/bench-ps.sh \
		>"$OUT/bench-ps-$name.txt" 2>"$OUT/bench-ps-$name.stderr" || status=1
	rm -f "$OUT/BENCHMARKS-$name.md"
	grep -E '^\| Shoal|^\| PyTorch|^Shoal async /' "$OUT/bench-ps-$name.txt" >&2
done
exit $status
