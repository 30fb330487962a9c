#!/usr/bin/env bash
# Runs what issue 14 asks of a GPU machine, from the repository root of a
# machine with a GPU, CUDA and a CUDA build of PyTorch but no Go, with the
# binaries `make gpubin` built elsewhere (.gpubin/) carried there.
# Everything it prints goes into OUT (default gpu-check-out/), one log per
# step; a failed step is recorded and the next one runs.
#
#   1. shoal info                                  -> info.txt
#   2. the CUDA conformance suite, required        -> gpu-test.txt
#   3. shoal train --model mlp|cnn --epochs 3, on cuda and on cpu
#                                                  -> train-<model>-<device>.json
#   4. shoal bench compute beside PyTorch eager    -> BENCHMARKS.md (section compute-gpu)
#   5. shoal train --device cuda --workers 4 in async, sync and ring
#                                                  -> train4-<mode>.json
#   6. mixed precision: shoal train --model mlp|cnn --epochs 3 in bf16 and
#      fp16 (beside step 3's fp32 on cuda)         -> train-<model>-<precision>.json
#      and bench compute --precision beside PyTorch autocast, MLP at batch
#      1024 and 4096                               -> BENCHMARKS.md (sections compute-gpu-bf16, -fp16)
#
# DATA is the Fashion-MNIST folder (the idx .gz files; carry it, it is
# 30 MB); without it steps 3 and 5 train on --dataset synthetic.
# PYTHON is PyTorch's interpreter (default /opt/torch/.venv/bin/python).
# STEPS selects steps: e.g. STEPS="1 2" for info and the suite only.
# The device tool allows 10 minutes a command and about 15 minutes of
# device time a session, the machine's start included: run it as two
# calls (STEPS="1 2 3", then STEPS="4 5 6"), each with its own OUT.
# Seen on an H100 with 16 cores (2026-11-26): step 1 took 1 s, step 2 23 s,
# step 5 12 s, step 6's four trainings 52 s; step 4 starts 36 processes
# (each CUDA's and PyTorch's start-up) and did not end within 150 s.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check-out}
DATA=${DATA:-}
PYTHON=${PYTHON:-/opt/torch/.venv/bin/python}
# The selection is read and then unset: bench-compute.sh (steps 4 and 6)
# reads STEPS as the timed steps of each run, and on the H100 on
# 2026-11-26 a selection of "6" leaked into it as 6 steps a run.
CHECKS=${STEPS:-1 2 3 4 5 6}
unset STEPS
SHOAL=.gpubin/shoal
mkdir -p "$OUT"
# A gzipped binary (to fit the device tool's 64 MiB with the data) is unpacked.
if [ -f "$SHOAL.gz" ] && [ ! -x "$SHOAL" ]; then
	gunzip -c "$SHOAL.gz" >"$SHOAL" && chmod +x "$SHOAL"
fi
[ -x "$SHOAL" ] || { echo "gpu-check: $SHOAL not found: run make gpubin on the build machine and carry .gpubin" >&2; exit 1; }
export SHOAL_REVISION=${SHOAL_REVISION:-$(cat .gpubin/REVISION 2>/dev/null || echo unknown)}
export SHOAL_CUDA_CACHE=${SHOAL_CUDA_CACHE:-$OUT/cuda-cache}

data=(--dataset synthetic)
[ -n "$DATA" ] && data=(--data "$DATA")
status=0
step() { # step NAME LOG COMMAND...: runs and records the command's exit status
	local name=$1 log=$2
	shift 2
	echo "== $name: $*" | tee -a "$OUT/steps.txt" >&2
	local t0=$SECONDS
	"$@" >"$OUT/$log" 2>"$OUT/$log.stderr"
	local rc=$?
	echo "   exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt" >&2
	[ $rc -eq 0 ] || status=1
}
want() { [[ " $CHECKS " == *" $1 "* ]]; }

want 1 && { step info info.txt "$SHOAL" info; nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1; }
# In the package's folder, where its testdata is.
want 2 && step "conformance suite" gpu-test.txt bash -c 'cd gpu && SHOAL_REQUIRE_GPU=1 exec ../.gpubin/gpu.test -test.v -test.count=1'
if want 3; then
	for model in mlp cnn; do
		for device in cuda cpu; do
			step "train $model on $device" "train-$model-$device.json" \
				"$SHOAL" train --device "$device" --model "$model" --epochs 3 "${data[@]}" --json
		done
	done
fi
if want 4; then
	cp docs/BENCHMARKS.md "$OUT/BENCHMARKS.md"
	step "bench compute beside PyTorch eager" bench-compute.txt env DEVICE=cuda MODELS="mlp cnn" BATCHES="256 1024 4096" \
		SHOAL="$SHOAL" PYTHON="$PYTHON" DOC="$OUT/BENCHMARKS.md" scripts/bench-compute.sh
fi
if want 5; then
	for mode in async sync ring; do
		step "train 4 workers on one GPU, $mode" "train4-$mode.json" \
			"$SHOAL" train --device cuda --workers 4 --mode "$mode" --epochs 1 "${data[@]}" --json
	done
fi
if want 6; then
	for precision in bf16 fp16; do
		for model in mlp cnn; do
			step "train $model on cuda in $precision" "train-$model-$precision.json" \
				"$SHOAL" train --device cuda --precision "$precision" --model "$model" --epochs 3 "${data[@]}" --json
		done
	done
	[ -f "$OUT/BENCHMARKS.md" ] || cp docs/BENCHMARKS.md "$OUT/BENCHMARKS.md"
	for precision in bf16 fp16; do
		step "bench compute in $precision beside PyTorch autocast" "bench-compute-$precision.txt" env DEVICE=cuda PRECISION="$precision" \
			MODELS=mlp BATCHES="1024 4096" SHOAL="$SHOAL" PYTHON="$PYTHON" DOC="$OUT/BENCHMARKS.md" scripts/bench-compute.sh
	done
fi
exit $status
