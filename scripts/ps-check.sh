#!/usr/bin/env bash
# What issue 10 still asks of a machine with cores to spare, from binaries
# built elsewhere (make gpubin: .gpubin/shoal and .gpubin/rpc.test, plain or
# gzipped; the Fashion-MNIST files in DATA) on a machine with PyTorch but no
# Go, such as the device machine (16 cores). Two questions the 2026-11-26 run
# there left open (docs/BENCHMARKS.md, "On 16 cores"):
#
#   1. A push-pull of the 2.7 MB vector alone, against a raw TCP round trip
#      of the same bytes, on that machine: BenchmarkPushPull/mlp-670k/tcp
#      and `shoal bench tcp`, alternating, ROUNDS rounds -> pushpull.txt
#   2. Whether the PyTorch RPC peer does better with fewer threads than the
#      cores divided by its workers: make bench-ps (BENCH_PS_EPOCHS=EPOCHS,
#      BENCH_PS_ROUNDS=ROUNDS) once per value of THREADS ("default" leaves
#      each side its own rule) -> bench-ps-threads-<t>.txt, with the runs'
#      JSON records in ps-<t>/
#
# STEPS (steps per worker) replaces EPOCHS for a short trial. Everything
# goes into OUT (default ps-check-out/). With the defaults
# (THREADS="1 4 default", EPOCHS=1, ROUNDS=3) it takes about 7 minutes on
# the device machine; pack OUT into one file there (the device tool brings
# back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-ps-check-out}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
PYTHON=${PYTHON:-python3}
THREADS=${THREADS:-1 4 default}
EPOCHS=${EPOCHS:-1}
STEPS=${STEPS:-} # steps per worker instead of epochs (a short trial run)
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT" bin
for b in shoal rpc.test; do
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
		(cd rpc && ../.gpubin/rpc.test -test.run '^$' -test.bench 'PushPull/mlp-670k/tcp$' -test.benchtime 2s) | grep -E '^Benchmark' || status=1
		.gpubin/shoal bench tcp --bytes 2678824 --iters 200 || status=1
	done
} >"$OUT/pushpull.txt" 2>&1
echo "ps-check: push-pull alone and raw TCP -> $OUT/pushpull.txt" >&2

for t in $THREADS; do
	knob=()
	[ "$t" = default ] || knob=(BENCH_PS_THREADS="$t")
	[ -z "$STEPS" ] || knob+=(BENCH_PS_STEPS="$STEPS")
	cp docs/BENCHMARKS.md "$OUT/BENCHMARKS-$t.md"
	echo "ps-check: make bench-ps, threads $t" >&2
	env "${knob[@]}" BENCH_PS_EPOCHS="$EPOCHS" BENCH_PS_ROUNDS="$ROUNDS" BENCH_PS_OUT="$OUT/ps-$t" PYTHON="$PYTHON" \
		SHOAL=.gpubin/shoal DATA_DIR="$DATA" DOC="$OUT/BENCHMARKS-$t.md" scripts/bench-ps.sh \
		>"$OUT/bench-ps-threads-$t.txt" 2>"$OUT/bench-ps-threads-$t.stderr" || status=1
	rm -f "$OUT/BENCHMARKS-$t.md"
	grep -E '^\| Shoal|^\| PyTorch|^Shoal async /' "$OUT/bench-ps-threads-$t.txt" >&2
done
exit $status
