#!/usr/bin/env bash
# shoal.torch (Horovod's PyTorch API over Shoal's ring) from Python against
# the Go benchmark of the same ring and against PyTorch's gloo, in one run:
#   (a) hvd.allreduce_ from Python  (bench/peers/hvd_allreduce.py)
#   (b) shoal bench allreduce       (the ring from Go, no Python)
#   (c) torch.distributed gloo      (bench/peers/torch_allreduce.py)
# for SIZES at each of NPS ranks, one after the other per N, REPEATS times
# over (the table has each one's median busbw: on a 2-core machine shared
# with other work one measurement of each is mostly noise); then
#   (d) synthetic training img/s    (bench/peers/hvd_synthetic.py), shoal.torch's
#       DistributedOptimizer against DistributedDataParallel over gloo, the
#       same model, batch and threads, alternating ROUNDS times, at SYN_NP ranks;
# and writes one table into docs/BENCHMARKS.md ("torch" markers). Needs
# Debian's python3-torch and python3-torchvision; builds bin/shoal and
# libshoal.so first (make build libshoal).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
SIZES=${SIZES:-16MiB,64MiB}
ITERS=${ITERS:-20}
REPEATS=${REPEATS:-3}
NPS=${NPS:-2 4}
SYN_NP=${SYN_NP:-2}
SYN_MODEL=${SYN_MODEL:-resnet18}
SYN_BATCH=${SYN_BATCH:-8}
SYN_ARGS=${SYN_ARGS:---num-warmup-batches 3 --num-batches-per-iter 3 --num-iters 4}
ROUNDS=${ROUNDS:-2}
DOC=${DOC:-docs/BENCHMARKS.md}
"$PY" -c 'import torch.distributed, torchvision' 2>/dev/null || {
	echo "bench-torch: $PY cannot import torch and torchvision: apt-get install python3-torch python3-torchvision" >&2; exit 1; }
export SHOAL_LIBRARY=${SHOAL_LIBRARY:-$PWD/clients/python/shoal/torch/libshoal.so}
# the raw results stay in bench-out/torch/ (git-ignored): scripts/torch_table.py
# bench-out/torch CMD DOC makes the tables again
out=bench-out/torch
rm -rf "$out"
mkdir -p "$out"
cp /proc/loadavg "$out/load-start" 2>/dev/null || true
for rep in $(seq "$REPEATS"); do
	for np in $NPS; do
		echo "repeat $rep, np=$np: shoal.torch from Python" >&2
		"$PY" bench/peers/hvd_allreduce.py --np "$np" --sizes "$SIZES" --iters "$ITERS" >>"$out/python-$np.jsonl"
		echo "repeat $rep, np=$np: shoal bench allreduce" >&2
		bin/shoal bench allreduce --np "$np" --sizes "$SIZES" --iters "$ITERS" --json >>"$out/shoal-$np.jsonl"
		echo "repeat $rep, np=$np: torch gloo" >&2
		"$PY" bench/peers/torch_allreduce.py --np "$np" --sizes "$SIZES" --iters "$ITERS" >>"$out/gloo-$np.jsonl"
	done
done
for round in $(seq "$ROUNDS"); do
	for backend in shoal ddp; do
		echo "synthetic round $round: $backend, np=$SYN_NP, $SYN_MODEL, batch $SYN_BATCH" >&2
		# shellcheck disable=SC2086
		"$PY" bench/peers/hvd_synthetic.py --backend "$backend" --np "$SYN_NP" --model "$SYN_MODEL" \
			--batch-size "$SYN_BATCH" $SYN_ARGS >>"$out/synthetic.jsonl"
	done
done
cp /proc/loadavg "$out/load-end" 2>/dev/null || true
cmd="make bench-torch (SIZES=$SIZES ITERS=$ITERS REPEATS=$REPEATS NPS='$NPS' SYN_NP=$SYN_NP SYN_MODEL=$SYN_MODEL SYN_BATCH=$SYN_BATCH SYN_ARGS='$SYN_ARGS' ROUNDS=$ROUNDS)"
"$PY" scripts/torch_table.py "$out" "$cmd" "$DOC"
