#!/usr/bin/env bash
# Runs Shoal's allreduce benchmark and PyTorch gloo's, for the same sizes
# and process counts, one after the other in one session, and writes the
# side-by-side table into docs/BENCHMARKS.md. Needs Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
SIZES=${SIZES:-1MiB,4MiB,16MiB,64MiB}
ITERS=${ITERS:-20}
NPS=${NPS:-2 4}
"$PY" -c 'import torch.distributed' 2>/dev/null || {
	echo "bench-allreduce: $PY cannot import torch: apt-get install python3-torch" >&2; exit 1; }
out=$(mktemp -d)
for np in $NPS; do
	echo "np=$np: shoal" >&2
	bin/shoal bench allreduce --np "$np" --sizes "$SIZES" --iters "$ITERS" --json >"$out/shoal-$np.jsonl"
	echo "np=$np: torch gloo" >&2
	"$PY" bench/peers/torch_allreduce.py --np "$np" --sizes "$SIZES" --iters "$ITERS" >"$out/gloo-$np.jsonl"
done
cmd="make bench-allreduce (SIZES=$SIZES ITERS=$ITERS NPS='$NPS')"
"$PY" scripts/allreduce_table.py "$out" "$cmd" docs/BENCHMARKS.md
rm -rf "$out"
