#!/usr/bin/env bash
# Predicts the runs of docs/bench-train/results.json (make bench) with the
# simulator, each from its own measured compute (shoal bench simulate
# --calibrate), into docs/bench-simulate/ (results.json, report.md and the
# plots, marked simulated), and writes the comparison (predicted against
# measured mean step, run by run) into docs/BENCHMARKS.md between
# <!-- simulate:begin --> and <!-- simulate:end -->. A run also measured
# in $REPEATED/*/results.json (scripts/bench-repeat.sh) is compared with
# the median of its measurements, and the table shows their spread.
set -euo pipefail
cd "$(dirname "$0")/.."
SHOAL=${SHOAL:-bin/shoal}
MEASURED=${MEASURED:-docs/bench-train/results.json}
OUT=${OUT:-docs/bench-simulate}
DOC=${DOC:-docs/BENCHMARKS.md}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
REPEATED=${REPEATED:-docs/bench-repeat}
[ -x "$SHOAL" ] || { echo "bench-simulate: $SHOAL not found: run make build first" >&2; exit 1; }
[ -f "$MEASURED" ] || { echo "bench-simulate: $MEASURED not found: run make bench first" >&2; exit 1; }
scripts/ensure-dataset.sh "$DATA_DIR"
rm -f "$OUT"/*.png
# The plan and NIC of the measured run, so that every id has its twin.
cmd=(bench simulate --calibrate "$MEASURED" --out "$OUT" --data "$DATA_DIR")
"$SHOAL" "${cmd[@]}"
python3 - "$MEASURED" "$OUT/results.json" "$DOC" "${cmd[*]}" "$REPEATED"/*/results.json <<'PY'
import json, os, statistics, sys
sys.path.insert(0, "scripts")
from benchdoc import put_section, revision, machine
measured_file, simulated_file, doc, cmd = sys.argv[1:5]
# An unmatched glob comes through as itself: no repeats.
repeat_files = sorted(f for f in sys.argv[5:] if os.path.exists(f))
measured = json.load(open(measured_file))
simulated = json.load(open(simulated_file))
sim = {r["id"]: r for r in simulated["runs"]}
again = {}
for f in repeat_files:
    for r in json.load(open(f))["runs"]:
        if not r.get("error") and r.get("step_time"):
            again.setdefault(r["id"], []).append(r["step_time"]["step"]["mean"])
rows, close, cases, worst, spread = [], 0, 0, 1.0, 1.0
for r in measured["runs"]:
    if r.get("peer") or r.get("error") or r["workers"] < 2 or not r.get("nic_gbps") or r["id"] not in sim:
        continue
    first, p = r["step_time"]["step"]["mean"], sim[r["id"]]["step_time"]["step"]["mean"]
    all_ = [first] + again.get(r["id"], [])
    m = statistics.median(all_)
    ratio = p / m
    cases += 1
    close += abs(ratio - 1) <= 0.15
    worst = max(worst, ratio, 1 / ratio)
    spread = max(spread, max(all_) / min(all_))
    more = "; ".join(f"{x*1e3:,.0f}" for x in all_[1:]) or "–"
    rows.append(f"| {r['id']} | {first*1e3:,.2f} | {more} | {m*1e3:,.2f} | {p*1e3:,.2f} | {ratio:.2f} |")
sources = f"`{measured_file}` (revision {measured['revision'][:7]}, started {measured['started'][:10]})"
if repeat_files:
    sources += " and the repeats in " + ", ".join(f"`{f}`" for f in repeat_files) + " (scripts/bench-repeat.sh)"
table = "\n".join([
    f"Command: `make bench-simulate` (`shoal {cmd}`) at revision {revision()}, against the runs of "
    f"{sources}; machine: {machine()}.",
    "Every run of 2 or more workers through the NIC model; mean step after the first, in ms; a run measured",
    "more than once is compared with the median of its measurements:",
    "",
    "| run | measured (make bench) | measured again | median | predicted | predicted / median |",
    "|---|---|---|---|---|---|",
    *rows,
    "",
    f"**{close} of {cases}** predictions within 15% of the median measurement; the farthest off by a factor of {worst:.2f}. "
    f"The measurements of one run differ by up to a factor of {spread:.2f} among themselves.",
])
put_section(doc, "simulate", table, "Simulated vs measured: shoal bench plan's simulator")
PY
echo "bench-simulate: wrote $OUT and updated $DOC"
