#!/usr/bin/env bash
# Predicts the runs of docs/bench-train/results.json (make bench) with the
# simulator, each from its own measured compute (shoal bench simulate
# --calibrate), into docs/bench-simulate/ (results.json, report.md and the
# plots, marked simulated), and writes the comparison (predicted against
# measured mean step, run by run) into docs/BENCHMARKS.md between
# <!-- simulate:begin --> and <!-- simulate:end -->.
set -euo pipefail
cd "$(dirname "$0")/.."
SHOAL=${SHOAL:-bin/shoal}
MEASURED=${MEASURED:-docs/bench-train/results.json}
OUT=${OUT:-docs/bench-simulate}
DOC=${DOC:-docs/BENCHMARKS.md}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$SHOAL" ] || { echo "bench-simulate: $SHOAL not found: run make build first" >&2; exit 1; }
[ -f "$MEASURED" ] || { echo "bench-simulate: $MEASURED not found: run make bench first" >&2; exit 1; }
scripts/ensure-dataset.sh "$DATA_DIR"
rm -f "$OUT"/*.png
# The plan and NIC of the measured run, so that every id has its twin.
cmd=(bench simulate --calibrate "$MEASURED" --out "$OUT" --data "$DATA_DIR")
"$SHOAL" "${cmd[@]}"
python3 - "$MEASURED" "$OUT/results.json" "$DOC" "${cmd[*]}" <<'PY'
import json, sys
sys.path.insert(0, "scripts")
from benchdoc import put_section, revision, machine
measured_file, simulated_file, doc, cmd = sys.argv[1:5]
measured = json.load(open(measured_file))
simulated = json.load(open(simulated_file))
sim = {r["id"]: r for r in simulated["runs"]}
rows, close, cases, worst = [], 0, 0, 1.0
for r in measured["runs"]:
    if r.get("peer") or r.get("error") or r["workers"] < 2 or not r.get("nic_gbps") or r["id"] not in sim:
        continue
    m, p = r["step_time"]["step"]["mean"], sim[r["id"]]["step_time"]["step"]["mean"]
    ratio = p / m
    cases += 1
    close += abs(ratio - 1) <= 0.15
    worst = max(worst, ratio, 1 / ratio)
    rows.append(f"| {r['id']} | {m*1e3:,.2f} | {p*1e3:,.2f} | {ratio:.2f} |")
table = "\n".join([
    f"Command: `make bench-simulate` (`shoal {cmd}`) at revision {revision()}, against the runs of "
    f"`{measured_file}` (revision {measured['revision'][:7]}, started {measured['started'][:10]}); machine: {machine()}.",
    "Every run of 2 or more workers through the NIC model; mean step after the first, in ms:",
    "",
    "| run | measured | predicted | predicted / measured |",
    "|---|---|---|---|",
    *rows,
    "",
    f"**{close} of {cases}** predictions within 15%; the farthest off by a factor of {worst:.2f}.",
])
put_section(doc, "simulate", table, "Simulated vs measured: shoal bench plan's simulator")
PY
echo "bench-simulate: wrote $OUT and updated $DOC"
