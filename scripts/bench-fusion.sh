#!/usr/bin/env bash
# Measures ring allreduce with and without overlap of communication and
# backward (--fusion-bytes 65536 vs 0), for the CNN and the MLP at 2
# workers, over shared memory (no NIC model) and through a 1 Gbit/s NIC
# model, alternating the settings for ROUNDS rounds in one session, and
# writes the table (medians) into docs/BENCHMARKS.md between
# <!-- fusion:begin --> and <!-- fusion:end -->.
set -euo pipefail
cd "$(dirname "$0")/.."
SHOAL=${SHOAL:-bin/shoal}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-200}
DOC=${DOC:-docs/BENCHMARKS.md}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$SHOAL" ] || { echo "bench-fusion: $SHOAL not found: run make build first" >&2; exit 1; }
scripts/ensure-dataset.sh "$DATA_DIR"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
	for model in cnn mlp; do
		for nic in 0 1; do
			for fusion in 0 65536; do
				echo "round $round/$ROUNDS: $model, NIC $nic Gbit/s, fusion $fusion" >&2
				"$SHOAL" train --mode ring --workers 2 --model "$model" --steps "$STEPS" --data "$DATA_DIR" --test=false \
					--stats --json --nic-gbps "$nic" --fusion-bytes "$fusion" 2>/dev/null |
					tail -1 | python3 -c 'import json,sys; d=json.load(sys.stdin); d["fusion"]=int(sys.argv[1]); d["nic"]=float(sys.argv[2]); print(json.dumps(d))' "$fusion" "$nic" >>"$out"
			done
		done
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$out" "$DOC" "$ROUNDS" "$STEPS" "$load_before" "$load_after" <<'PY'
import datetime, json, statistics, sys
sys.path.insert(0, "scripts")
from benchdoc import machine, put_section, revision
path, doc, rounds, steps, lb, la = sys.argv[1:7]
runs = [json.loads(l) for l in open(path) if l.strip()]
def med(sel, f):
    return statistics.median(f(r) for r in sel)
rows = []
for model in ("cnn", "mlp"):
    for nic in (0.0, 1.0):
        base = [r for r in runs if r["model"].startswith(model) and r["nic"] == nic and r["fusion"] == 0]
        fused = [r for r in runs if r["model"].startswith(model) and r["nic"] == nic and r["fusion"] == 65536]
        sps = lambda r: r["samples"] / r["worker_seconds"]
        step = lambda r: 1e3 * r["step_time"]["step"]["p50"]
        red = lambda r: 1e3 * r["step_time"]["reduce"]["mean"]
        net = "shared memory" if nic == 0 else f"{nic:g} Gbit/s NIC model (TCP)"
        rows.append(f"| {base[0]['model']} | {net} | {med(base, step):.1f} / {med(fused, step):.1f} | {med(base, red):.1f} / {med(fused, red):.1f} | "
                    f"{med(base, sps):,.0f} | {med(fused, sps):,.0f} | **{med(fused, sps) / med(base, sps):.2f}×** |")
table = "\n".join([
    f"Command: `scripts/bench-fusion.sh` (ROUNDS={rounds} STEPS={steps}) at revision {revision()}, {datetime.date.today()}.",
    f"Machine: {machine()}; load average {lb} before, {la} after.",
    "Ring allreduce, 2 workers, batch 64; `--fusion-bytes 0` (one allreduce after backward) against 65536 (buckets reduced while backward runs),",
    "alternating within each round; medians over the rounds. Reduce is the time a step spends in allreduce after backward (the part not hidden).",
    "",
    "| model | network | step p50 (ms) off / on | reduce after backward (ms) off / on | samples/s off | samples/s on | on / off |",
    "|---|---|---|---|---|---|---|",
    *rows,
])
put_section(doc, "fusion", table, "Ring allreduce: overlapping communication with backward")
print(table)
PY
