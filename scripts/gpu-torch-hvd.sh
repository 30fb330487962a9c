#!/usr/bin/env bash
# gpu-check.sh's torch-hvd part: shoal.torch (Horovod's API over Shoal's
# ring) with the tensors on the GPU, against PyTorch's gloo on the same
# tensors, from Python ranks sharing the machine's GPUs:
#   hvd.allreduce_ (bench/peers/hvd_allreduce.py) and gloo's all_reduce
#   (bench/peers/torch_allreduce.py) of $SIZES at $NP ranks, then, where
#   torchvision imports, synthetic training (bench/peers/hvd_synthetic.py)
#   with shoal.torch's DistributedOptimizer and with DDP over gloo.
# One JSON object a line on stdout, each with "part"; what a part printed
# on stderr goes to stderr. A part that fails is said on stdout as
# {"part": ..., "error": ...} and the next one runs. Knobs (environment):
# PYTHON, DEVICE (cuda), NP (2), SIZES (16MiB,64MiB), ITERS (10),
# SYN_MODEL (resnet18), SYN_BATCH (32), SYN_IMAGE (224), SYN_ARGS.
# Needs SHOAL_LIBRARY (libshoal.so) set by the caller.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
NP=${NP:-2}
SIZES=${SIZES:-16MiB,64MiB}
ITERS=${ITERS:-10}
SYN_MODEL=${SYN_MODEL:-resnet18}
SYN_BATCH=${SYN_BATCH:-32}
SYN_IMAGE=${SYN_IMAGE:-224}
SYN_ARGS=${SYN_ARGS:---num-warmup-batches 3 --num-batches-per-iter 5 --num-iters 3}
rc=0
part() { # part NAME CMD...: CMD's JSON lines, each tagged with the part
	local name=$1
	shift
	local out
	if out=$("$@"); then
		printf '%s\n' "$out" | sed -n "s/^{/{\"part\": \"$name\", /p"
	else
		echo "{\"part\": \"$name\", \"error\": \"exit $?\"}"
		rc=1
	fi
}
part hvd-allreduce "$PYTHON" bench/peers/hvd_allreduce.py --device "$DEVICE" --np "$NP" --sizes "$SIZES" --iters "$ITERS"
part gloo-allreduce "$PYTHON" bench/peers/torch_allreduce.py --device "$DEVICE" --np "$NP" --sizes "$SIZES" --iters "$ITERS"
if "$PYTHON" -c 'import torchvision' 2>/dev/null; then
	for backend in shoal ddp; do
		# shellcheck disable=SC2086 # SYN_ARGS is a list of flags
		part "synthetic-$backend" "$PYTHON" bench/peers/hvd_synthetic.py --backend "$backend" --device "$DEVICE" --np "$NP" \
			--model "$SYN_MODEL" --batch-size "$SYN_BATCH" --image-size "$SYN_IMAGE" $SYN_ARGS
	done
else
	echo '{"part": "synthetic", "error": "skipped: torchvision does not import here"}'
fi
exit $rc
