#!/usr/bin/env bash
# What issue 10 still asks of a machine with cores to spare, from binaries
# built elsewhere (make gpubin: .gpubin/shoal, .gpubin/rpc.test and
# .gpubin/ps.test, plain or gzipped; the Fashion-MNIST files in DATA) on a
# machine with PyTorch but no Go, such as the device machine (16 cores).
# The 2026-11-26 runs there (docs/BENCHMARKS.md, "On 16 cores") found the
# PyTorch peer at its best with 4 threads a worker, a lone push-pull 2.4x a
# raw TCP round trip, and 4 shards in one process training 1.7x faster
# than one: the shard's serial optimizer step, under its lock, serves both
# workers. What is left to measure:
#
#   1. The lanes and the parallel step alone: BenchmarkPushPullLanes (the
#      670k push-pull over 1-4 connections) beside `shoal bench tcp`, and
#      ps's BenchmarkPush (the shard's update of the 670k vector) with
#      GOMAXPROCS 1, 4 and 8, the parallel step on and off, alternating,
#      ROUNDS rounds -> micro.txt
#   2. make bench-ps at THREADS threads a worker (default 4, the peer's
#      best) for each of VARIANTS, "LANES:PARALLEL_STEP" (default "1:0 1:1
#      3:1") -> bench-ps-<lanes>-<parstep>.txt, with the runs' JSON records
#      in ps-<lanes>-<parstep>/
#
# STEPS (steps per worker) replaces EPOCHS for a short trial. Everything
# goes into OUT (default ps-check-out/). With the defaults (EPOCHS=1,
# ROUNDS=3) it takes about 8 minutes on the device machine; pack OUT into
# one file there (the device tool brings back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-ps-check-out}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
PYTHON=${PYTHON:-python3}
THREADS=${THREADS:-4}
VARIANTS=${VARIANTS:-1:0 1:1 3:1}
EPOCHS=${EPOCHS:-1}
STEPS=${STEPS:-} # steps per worker instead of epochs (a short trial run)
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT" bin
for b in shoal rpc.test ps.test; do
	if [ -f ".gpubin/$b.gz" ] && [ ! -x ".gpubin/$b" ]; then
		gunzip -c ".gpubin/$b.gz" >".gpubin/$b" && chmod +x ".gpubin/$b"
	fi
	[ -x ".gpubin/$b" ] || { echo "ps-check: .gpubin/$b not found: run make gpubin on the build machine and carry .gpubin" >&2; exit 1; }
done
export SHOAL_REVISION=${SHOAL_REVISION:-$(cat .gpubin/REVISION 2>/dev/null || echo unknown)}
status=0

{
	echo "revision $SHOAL_REVISION, $(nproc) cores, $(date -u +%FT%TZ)"
	for round in $(seq 1 "$ROUNDS"); do
		echo "== round $round"
		(cd rpc && ../.gpubin/rpc.test -test.run '^$' -test.bench 'PushPullLanes/mlp' -test.benchtime 1s) | grep -E '^Benchmark' || status=1
		.gpubin/shoal bench tcp --bytes 2678824 --iters 200 || status=1
		for par in false true; do
			echo "parallel step $par"
			(cd ps && ../.gpubin/ps.test -test.run '^$' -test.bench 'BenchmarkPush$' -test.cpu 1,4,8 -test.benchtime 1s -parallel-step=$par) | grep -E '^Benchmark' || status=1
		done
	done
} >"$OUT/micro.txt" 2>&1
echo "ps-check: lanes, parallel step and raw TCP alone -> $OUT/micro.txt" >&2

for v in $VARIANTS; do
	lanes=${v%%:*} par=${v##*:}
	knob=(BENCH_PS_THREADS="$THREADS" BENCH_PS_LANES="$lanes" BENCH_PS_PARALLEL_STEP="$par")
	[ -z "$STEPS" ] || knob+=(BENCH_PS_STEPS="$STEPS")
	cp docs/BENCHMARKS.md "$OUT/BENCHMARKS-$lanes-$par.md"
	echo "ps-check: make bench-ps, $THREADS threads, lanes $lanes, parallel step $par" >&2
	env "${knob[@]}" BENCH_PS_EPOCHS="$EPOCHS" BENCH_PS_ROUNDS="$ROUNDS" BENCH_PS_OUT="$OUT/ps-$lanes-$par" PYTHON="$PYTHON" \
		SHOAL=.gpubin/shoal DATA_DIR="$DATA" DOC="$OUT/BENCHMARKS-$lanes-$par.md" scripts/bench-ps.sh \
		>"$OUT/bench-ps-$lanes-$par.txt" 2>"$OUT/bench-ps-$lanes-$par.stderr" || status=1
	rm -f "$OUT/BENCHMARKS-$lanes-$par.md"
	grep -E '^\| Shoal|^\| PyTorch|^Shoal async /' "$OUT/bench-ps-$lanes-$par.txt" >&2
done
exit $status
