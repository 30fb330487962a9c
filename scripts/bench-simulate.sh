#!/usr/bin/env bash
# Predicts the runs of docs/bench-train/results.json (make bench) with the
# simulator, each from its own measured compute and its workers' start
# times (shoal bench simulate --calibrate), into docs/bench-simulate/
# (results.json, report.md and the plots, marked simulated), and writes
# the comparison (predicted against measured mean step, run by run) into
# docs/BENCHMARKS.md between <!-- simulate:begin --> and
# <!-- simulate:end -->. A run also measured in $REPEATED/*/results.json
# (scripts/bench-repeat.sh) has each measurement predicted from its own
# calibration, and the median of the predictions is compared with the
# median of the measurements; the table shows their spread.
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
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$SHOAL" "${cmd[@]}" | tee "$tmp/out.txt"
grep '^CPU per byte' "$tmp/out.txt" > "$tmp/cpu.txt" || true
# Each repeat predicted from its own calibration, beside the others; the
# host's CPU per byte is fitted to the loopback run of make bench, which
# the repeats do not run.
pairs=()
for f in "$REPEATED"/*/results.json; do
	[ -f "$f" ] || continue
	n=$(basename "$(dirname "$f")")
	"$SHOAL" bench simulate --calibrate "$f" --cpu-calibrate "$MEASURED" --out "$tmp/$n" --data "$DATA_DIR" >/dev/null
	pairs+=("$f" "$tmp/$n/results.json")
done
python3 - "$MEASURED" "$OUT/results.json" "$DOC" "${cmd[*]}" "$tmp/cpu.txt" "${pairs[@]}" <<'PY'
import json, statistics, sys
sys.path.insert(0, "scripts")
from benchdoc import put_section, revision, machine
measured_file, simulated_file, doc, cmd, cpu_file = sys.argv[1:6]
cpu = open(cpu_file).read().strip()
# The repeats, each with its prediction.
repeat_files = sys.argv[6::2]
def steps(f):
    return {r["id"]: r["step_time"]["step"]["mean"] for r in json.load(open(f))["runs"] if not r.get("error") and r.get("step_time")}
measured = json.load(open(measured_file))
sim = steps(simulated_file)
again = {}  # id -> [(measured, predicted)] of the repeats
for f, p in zip(sys.argv[6::2], sys.argv[7::2]):
    m, ps = steps(f), steps(p)
    for k in m:
        if k in ps:
            again.setdefault(k, []).append((m[k], ps[k]))
rows, close, cases, worst, spread = [], 0, 0, 1.0, 1.0
for r in measured["runs"]:
    if r.get("peer") or r.get("error") or r["workers"] < 2 or not r.get("nic_gbps") or r["id"] not in sim:
        continue
    pairs = [(r["step_time"]["step"]["mean"], sim[r["id"]])] + again.get(r["id"], [])
    ms, ps = [m for m, _ in pairs], [p for _, p in pairs]
    m, p = statistics.median(ms), statistics.median(ps)
    ratio = p / m
    cases += 1
    close += abs(ratio - 1) <= 0.15
    worst = max(worst, ratio, 1 / ratio)
    spread = max(spread, max(ms) / min(ms))
    more = "; ".join(f"{x*1e3:,.0f}" for x in ms[1:]) or "–"
    rows.append(f"| {r['id']} | {ms[0]*1e3:,.2f} | {more} | {m*1e3:,.2f} | {p*1e3:,.2f} | {ratio:.2f} |")
sources = f"`{measured_file}` (revision {measured['revision'][:7]}, started {measured['started'][:10]})"
if repeat_files:
    sources += " and the repeats in " + ", ".join(f"`{f}`" for f in repeat_files) + " (scripts/bench-repeat.sh)"
table = "\n".join([
    f"Command: `make bench-simulate` (`shoal {cmd}`) at revision {revision()}, against the runs of "
    f"{sources}; machine: {machine()}.",
    "Every run of 2 or more workers through the NIC model; mean step after the first, in ms. Each measurement is",
    "predicted from its own compute and its workers' start times; a run measured more than once is compared",
    "as the median of its predictions against the median of its measurements. " + (cpu + "." if cpu else ""),
    "",
    "| run | measured (make bench) | measured again | median | predicted (median) | predicted / measured |",
    "|---|---|---|---|---|---|",
    *rows,
    "",
    f"**{close} of {cases}** predictions within 15% of the median measurement; the farthest off by a factor of {worst:.2f}. "
    f"The measurements of one run differ by up to a factor of {spread:.2f} among themselves.",
])
put_section(doc, "simulate", table, "Simulated vs measured: shoal bench plan's simulator")
PY
echo "bench-simulate: wrote $OUT and updated $DOC"
