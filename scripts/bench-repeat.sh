#!/usr/bin/env bash
# Measures make bench's communication-bound runs (the 25.4M-parameter MLP,
# 4 steps each, every mode at 2 and 4 workers and 1, 2, 4 shards, through
# the 1 Gbit/s NIC model) again, REPEATS times, each into
# docs/bench-repeat/N/results.json, N after the repeats already there (so
# that measurements taken on other days add up). make bench measures each
# of them once, over 3 steps after the first; these repeats give their
# spread from run to run on this machine, and make bench-simulate compares
# the median of its predictions with the median of every measurement of a
# run.
# Run it with nothing else on the machine: a compile beside it slows the
# 4-worker runs by up to half.
set -euo pipefail
cd "$(dirname "$0")/.."
SHOAL=${SHOAL:-bin/shoal}
OUT=${OUT:-docs/bench-repeat}
REPEATS=${REPEATS:-2}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$SHOAL" ] || { echo "bench-repeat: $SHOAL not found: run make build first" >&2; exit 1; }
scripts/ensure-dataset.sh "$DATA_DIR"
first=1
while [ -e "$OUT/$first" ]; do first=$((first + 1)); done
for i in $(seq "$first" $((first + REPEATS - 1))); do
	dir="$OUT/$i"
	"$SHOAL" bench train --models big --modes async,async-overlap,sync,ssp,ring --workers 2,4 --servers 1,2,4 \
		--steps 4 --nic-gbps 1 --peers "" --data "$DATA_DIR" --out "$dir"
	# The measurements only: the report and plots are make bench's.
	rm -f "$dir"/*.png "$dir"/report.md
done
echo "bench-repeat: wrote $REPEATS repeats into $OUT/$first.. $OUT/$((first + REPEATS - 1))"
