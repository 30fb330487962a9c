#!/usr/bin/env bash
# Issue 46's GPU check in one call to the GPU machine (16 cores, CUDA 13, a
# CUDA build of PyTorch, no Go, no network), from the binaries `make gpubin`
# built elsewhere (.gpubin/, carried there). From the repository root:
#
#   scripts/gpu-check.sh                       every part
#   scripts/gpu-check.sh --rerun-failed DIR    only the parts DIR's summary.txt
#                                              lists as fail, timeout or notrun
#                                              (DIR: what an earlier call brought
#                                              back; its gpu-check.tgz is unpacked
#                                              first, so the tables hold both calls)
#   scripts/gpu-check.sh --only "info train-ring"
#
# The parts, each under its own timeout (seconds, TIMEOUT_<part> with the
# dashes as underscores overrides; the defaults add up to 8.0 minutes, so
# that one hang cannot eat an 8-minute call):
#
#   info           shoal info (text and --json), nvidia-smi               15
#   conformance    the CUDA conformance suite, SHOAL_REQUIRE_GPU=1
#                  (gpu.test; the emulator's own tests skipped)           40
#   optimizer-step the fused optimizer kernels (momentum, Adam) over the
#                  whole vector on the GPU beside optim's step on the
#                  host (gpu.test's BenchmarkOptimizerStep, $OPT_BENCHTIME
#                  each, into optimizer-step.txt)                         20
#   compute-shoal  shoal bench compute --device cuda --sweep, ONE process:
#                  $SWEEP in each of $PRECISIONS, $ROUNDS rounds, the
#                  steps replayed as CUDA graphs, the batch kept on the
#                  GPU (--batch-on-device) as the PyTorch peer keeps it   65
#   compute-shoal-eager  the same in fp32 with --cuda-graphs=false: the
#                  graphs' share of the speed                             35
#   compute-shoal-upload  the same in fp32 with the batch uploaded each
#                  step, as a training worker's step                      35
#   compute-torch  bench/peers/torch_train.py --sweep, the same points in
#                  ONE process: eager fp32, autocast bf16 and fp16        60
#                  (skipped, saying why, where $PYTHON has no PyTorch or
#                  its PyTorch sees no CUDA device)
#   train-async    shoal train --device cuda --stats, 2 workers sharing   40
#   train-ring     the GPU, async and ring, the default MLP, $TRAIN_ARGS
#                  (default --epochs 3 on $DATA)                          40
#   train-ring-resident  train-ring with --device-resident: the weights
#                  and optimizer state kept on the GPU, the reduced
#                  gradient uploaded and stepped there (off by default
#                  until this part and train-ring compare it)             30
#   torch-hvd      shoal.torch with CUDA tensors (scripts/gpu-torch-hvd.sh,
#                  .gpubin/libshoal.so): hvd.allreduce_ against gloo at 2
#                  ranks, 16 and 64 MiB, and synthetic resnet18 training
#                  with DistributedOptimizer against DDP over gloo        100
#                  (skipped, saying why, as compute-torch is)
#
# After every part it rewrites the summary and the tables, so a call cut
# short still brings back what ran. Everything is written into WORK
# (default gpu-check-work/): <part>.log (stderr), the parts' outputs,
# summary.txt, compute.md, train.md and torch.md. Where OUT is set (the
# device tool's folder that comes back, at most 8 files), it gets
# summary.txt, compute.md, train.md, torch.md and gpu-check.tgz (all of
# WORK).
#
# Knobs (environment): SHOAL (default .gpubin/shoal, or .gpubin/shoal.gz
# unpacked), GPU_TEST (.gpubin/gpu.test), LIBSHOAL (.gpubin/libshoal.so,
# or its .gz unpacked), TORCH_HVD_ENV (settings for gpu-torch-hvd.sh,
# e.g. "SIZES=1MiB ITERS=2"), PYTHON (default
# /opt/torch/.venv/bin/python, else python3), DATA (the Fashion-MNIST
# folder; default .gpubin/data where it exists, else --dataset synthetic),
# SWEEP ("mlp:64,256,1024,4096 cnn:64,256"), HIDDEN (512,512), PRECISIONS
# (fp32,bf16,fp16), ROUNDS (3), STEPS (200), WARMUP (20), TRAIN_ARGS,
# CONFORMANCE_RUN and CONFORMANCE_SKIP (gpu.test's -test.run and
# -test.skip), OPT_BENCHTIME (50x), DEVICE (cuda).
#
# On the CUDA emulator (internal/cudaemu), to try the whole script on a
# machine without a GPU: make gpu-check-emu (Makefile says what it sets).
set -uo pipefail
cd "$(dirname "$0")/.."

ALL_PARTS="info conformance optimizer-step compute-shoal compute-shoal-eager compute-shoal-upload compute-torch train-async train-ring train-ring-resident torch-hvd"
usage() { sed -n '2,13p' "$0" >&2; exit 2; }
parts=$ALL_PARTS
prev=""
while [ $# -gt 0 ]; do
	case $1 in
	--rerun-failed) [ $# -ge 2 ] || usage; prev=$2; shift 2 ;;
	--only) [ $# -ge 2 ] || usage; parts=$2; shift 2 ;;
	-h | --help) usage ;;
	*) echo "gpu-check: unknown argument $1" >&2; usage ;;
	esac
done
for p in $parts; do
	[[ " $ALL_PARTS " == *" $p "* ]] || { echo "gpu-check: no part $p (parts: $ALL_PARTS)" >&2; exit 2; }
done

WORK=${WORK:-gpu-check-work}
OUT=${OUT:-}
SHOAL=${SHOAL:-.gpubin/shoal}
GPU_TEST=${GPU_TEST:-.gpubin/gpu.test}
LIBSHOAL=${LIBSHOAL:-.gpubin/libshoal.so}
if [ -z "${PYTHON:-}" ]; then
	PYTHON=/opt/torch/.venv/bin/python
	[ -x "$PYTHON" ] || PYTHON=python3
fi
if [ -z "${DATA+x}" ]; then
	DATA=""
	[ -d .gpubin/data ] && DATA=.gpubin/data
fi
DEVICE=${DEVICE:-cuda}
SWEEP=${SWEEP:-mlp:64,256,1024,4096 cnn:64,256}
HIDDEN=${HIDDEN:-512,512}
PRECISIONS=${PRECISIONS:-fp32,bf16,fp16}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
CONFORMANCE_RUN=${CONFORMANCE_RUN:-}
CONFORMANCE_SKIP=${CONFORMANCE_SKIP:-Emulator|ALostContext}
OPT_BENCHTIME=${OPT_BENCHTIME:-50x}
if [ -z "${TRAIN_ARGS+x}" ]; then
	TRAIN_ARGS="--epochs 3 --dataset synthetic"
	[ -n "$DATA" ] && TRAIN_ARGS="--epochs 3 --data $DATA"
fi
declare -A limit=([info]=15 [conformance]=40 [optimizer-step]=20 [compute-shoal]=65 [compute-shoal-eager]=35 [compute-shoal-upload]=35 [compute-torch]=60 [train-async]=40 [train-ring]=40 [train-ring-resident]=30 [torch-hvd]=100)
for p in $ALL_PARTS; do
	v=TIMEOUT_${p//-/_}
	[ -n "${!v:-}" ] && limit[$p]=${!v}
done

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd) # the conformance part runs in gpu/
declare -A status secs note
for p in $ALL_PARTS; do status[$p]=notrun secs[$p]=0 note[$p]=""; done

# --rerun-failed: the earlier call's results first, then only its failures.
if [ -n "$prev" ]; then
	[ -f "$prev/summary.txt" ] || { echo "gpu-check: --rerun-failed $prev: no $prev/summary.txt" >&2; exit 2; }
	[ -f "$prev/gpu-check.tgz" ] && tar -xzf "$prev/gpu-check.tgz" -C "$WORK" --strip-components=1
	parts=""
	while read -r p st s n; do
		[ -n "${status[$p]+x}" ] || continue
		status[$p]=$st secs[$p]=$s note[$p]=${n:-}
		case $st in fail | timeout | notrun) parts="$parts $p"; status[$p]=notrun ;; esac
	done < <(sed -n '/^part /,$p' "$prev/summary.txt" | tail -n +2)
	echo "gpu-check: rerunning:${parts:- nothing (no part failed)}" >&2
fi

# A gzipped binary (make gpubin's, to fit the device tool's 64 MiB) is
# unpacked into WORK, not beside it: a later call would carry both.
for v in SHOAL GPU_TEST LIBSHOAL; do
	b=${!v}
	if [ ! -f "$b" ] && [ -f "$b.gz" ]; then
		mkdir -p "$WORK/bin"
		gunzip -c "$b.gz" >"$WORK/bin/${b##*/}" && chmod +x "$WORK/bin/${b##*/}"
		printf -v "$v" '%s' "$WORK/bin/${b##*/}"
	fi
done
export SHOAL_REVISION=${SHOAL_REVISION:-$(cat .gpubin/REVISION 2>/dev/null || echo unknown)}
export SHOAL_CUDA_CACHE=${SHOAL_CUDA_CACHE:-$WORK/cuda-cache}
export PYTHONUNBUFFERED=1
started=$(date -u +%FT%TZ)

# run PART CMD...: CMD under the part's timeout, stdout to what the part
# names, stderr to WORK/PART.log; records pass, fail or timeout.
run() {
	local p=$1
	shift
	local t0=$SECONDS rc
	note[$p]=""
	echo "== $p (at most ${limit[$p]} s): $*" | tee -a "$WORK/$p.log" >&2
	timeout -k 5 "${limit[$p]}" "$@" 2>>"$WORK/$p.log"
	rc=$?
	secs[$p]=$((SECONDS - t0))
	case $rc in
	0) status[$p]=pass ;;
	124 | 137) status[$p]=timeout note[$p]="killed after ${limit[$p]} s" ;;
	*) status[$p]=fail note[$p]="exit $rc: $(grep -v '^==' "$WORK/$p.log" | tail -n 1 | cut -c1-160)" ;;
	esac
	echo "   $p: ${status[$p]} after ${secs[$p]} s ${note[$p]}" >&2
}

skip() { status[$1]=skip note[$1]=$2; echo "   $1: skipped: $2" >&2; }

gpu_name() {
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 | grep . ||
		echo "no nvidia-smi; shoal info: $(grep -m 1 '^devices:' "$WORK/info.txt" 2>/dev/null)"
}

# report rewrites the summary and the tables, and copies them to OUT.
report() {
	{
		echo "gpu-check at revision $SHOAL_REVISION, started $started, now $(date -u +%FT%TZ)"
		echo "gpu: $(gpu_name)${DEVICE:+ (--device $DEVICE)}; $(nproc) cores"
		echo "sweep: $SWEEP (hidden $HIDDEN) in $PRECISIONS, $ROUNDS rounds of $WARMUP+$STEPS steps; train: $TRAIN_ARGS"
		echo "part status seconds note"
		for p in $ALL_PARTS; do echo "$p ${status[$p]} ${secs[$p]} ${note[$p]}"; done
	} >"$WORK/summary.txt"
	local tnote=""
	[ "${status[compute-torch]}" = skip ] && tnote=${note[compute-torch]}
	"${PYTHON_TABLES:-python3}" scripts/gpu_tables.py compute "$WORK/compute-shoal.jsonl" "$WORK/compute-torch.jsonl" \
		--shoal-eager "$WORK/compute-shoal-eager.jsonl" --shoal-upload "$WORK/compute-shoal-upload.jsonl" --torch-note "$tnote" >"$WORK/compute.md" 2>>"$WORK/tables.log"
	"${PYTHON_TABLES:-python3}" scripts/gpu_tables.py train "$WORK/train-async.json" "$WORK/train-ring.json" "$WORK/train-ring-resident.json" \
		>"$WORK/train.md" 2>>"$WORK/tables.log"
	"${PYTHON_TABLES:-python3}" scripts/gpu_tables.py torch "$WORK/torch-hvd.jsonl" --note "${note[torch-hvd]}" \
		>"$WORK/torch.md" 2>>"$WORK/tables.log"
	if [ -n "$OUT" ]; then
		mkdir -p "$OUT"
		cp "$WORK/summary.txt" "$WORK/compute.md" "$WORK/train.md" "$WORK/torch.md" "$WORK/optimizer-step.txt" "$OUT/" 2>/dev/null
		tar -C "$(dirname "$WORK")" -czf "$OUT/gpu-check.tgz.part" --exclude=cuda-cache --exclude=bin "$(basename "$WORK")" &&
			mv "$OUT/gpu-check.tgz.part" "$OUT/gpu-check.tgz"
	fi
}

want() { [[ " $parts " == *" $1 "* ]]; }
need() { # need BINARY PART: skips the part (as a failure) without the binary
	[ -x "$1" ] && return 0
	status[$2]=fail note[$2]="$1 not found: run make gpubin on the build machine and carry .gpubin"
	echo "   $2: ${note[$2]}" >&2
	return 1
}

report
if want info; then
	if need "$SHOAL" info; then
		run info "$SHOAL" info >"$WORK/info.txt"
		"$SHOAL" info --json >"$WORK/info.json" 2>/dev/null
		nvidia-smi >"$WORK/nvidia-smi.txt" 2>&1
	fi
	report
fi
if want conformance; then
	if need "$GPU_TEST" conformance; then
		# In the package's folder, where its testdata is.
		abs=$(cd "$(dirname "$GPU_TEST")" && pwd)/$(basename "$GPU_TEST")
		args=(-test.v -test.count=1 -test.skip "$CONFORMANCE_SKIP")
		[ -n "$CONFORMANCE_RUN" ] && args+=(-test.run "$CONFORMANCE_RUN")
		run conformance env -C gpu SHOAL_REQUIRE_GPU=1 "$abs" "${args[@]}" >"$WORK/conformance.txt"
	fi
	report
fi
if want optimizer-step; then
	if need "$GPU_TEST" optimizer-step; then
		abs=$(cd "$(dirname "$GPU_TEST")" && pwd)/$(basename "$GPU_TEST")
		run optimizer-step env -C gpu SHOAL_REQUIRE_GPU=1 "$abs" -test.run '^$' -test.bench BenchmarkOptimizerStep \
			-test.benchtime "$OPT_BENCHTIME" >"$WORK/optimizer-step.txt"
	fi
	report
fi
sweep=(--sweep "$SWEEP" --hidden "$HIDDEN" --precisions "$PRECISIONS" --rounds "$ROUNDS" --steps "$STEPS" --warmup "$WARMUP")
if want compute-shoal; then
	if need "$SHOAL" compute-shoal; then
		run compute-shoal "$SHOAL" bench compute --device "$DEVICE" "${sweep[@]}" --batch-on-device --json >"$WORK/compute-shoal.jsonl"
	fi
	report
fi
if want compute-shoal-eager; then
	if need "$SHOAL" compute-shoal-eager; then
		run compute-shoal-eager "$SHOAL" bench compute --device "$DEVICE" "${sweep[@]}" --precisions fp32 --cuda-graphs=false \
			--batch-on-device --json >"$WORK/compute-shoal-eager.jsonl"
	fi
	report
fi
if want compute-shoal-upload; then
	if need "$SHOAL" compute-shoal-upload; then
		run compute-shoal-upload "$SHOAL" bench compute --device "$DEVICE" "${sweep[@]}" --precisions fp32 \
			--json >"$WORK/compute-shoal-upload.jsonl"
	fi
	report
fi
if want compute-torch; then
	# No PyTorch, or one without CUDA (a CPU-only build): said, not a failure.
	probe=$("$PYTHON" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -n 1)
	case $probe in
	*" True") run compute-torch "$PYTHON" bench/peers/torch_train.py --device "$DEVICE" "${sweep[@]}" >"$WORK/compute-torch.jsonl" ;;
	*" False") skip compute-torch "PyTorch ${probe% False} at $PYTHON sees no CUDA device" ;;
	*) skip compute-torch "no PyTorch at $PYTHON: ${probe:0:120}" ;;
	esac
	report
fi
for part in async ring ring-resident; do
	if want "train-$part"; then
		if need "$SHOAL" "train-$part"; then
			extra=()
			[ "$part" = ring-resident ] && extra=(--device-resident)
			# shellcheck disable=SC2086 # TRAIN_ARGS is a list of flags
			run "train-$part" "$SHOAL" train --device "$DEVICE" --workers 2 --mode "${part%-resident}" "${extra[@]}" $TRAIN_ARGS --stats --json >"$WORK/train-$part.json"
		fi
		report
	fi
done

if want torch-hvd; then
	probe=$("$PYTHON" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -n 1)
	if [ "$DEVICE" = cuda ] && [[ $probe != *" True" ]]; then
		skip torch-hvd "no PyTorch with CUDA at $PYTHON: ${probe:0:120}"
	elif [ ! -f "$LIBSHOAL" ]; then
		status[torch-hvd]=fail note[torch-hvd]="$LIBSHOAL not found: run make gpubin on the build machine and carry .gpubin"
	else
		# shellcheck disable=SC2086 # TORCH_HVD_ENV is a list of settings
		run torch-hvd env SHOAL_LIBRARY="$(cd "$(dirname "$LIBSHOAL")" && pwd)/$(basename "$LIBSHOAL")" PYTHON="$PYTHON" \
			DEVICE="$DEVICE" ${TORCH_HVD_ENV:-} scripts/gpu-torch-hvd.sh >"$WORK/torch-hvd.jsonl"
	fi
	report
fi

cat "$WORK/summary.txt" >&2
for p in $ALL_PARTS; do
	case ${status[$p]} in fail | timeout) exit 1 ;; esac
done
exit 0
