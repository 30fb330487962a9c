#!/usr/bin/env bash
# Runs `shoal bench train` (the built-in plan unless flags are given: they
# are passed on) into docs/bench-train/ and puts its report, with the plots
# embedded, into docs/BENCHMARKS.md between <!-- train:begin --> and
# <!-- train:end -->. The PyTorch DDP peer runs where Debian's
# python3-torch is installed, and is skipped, saying why, where not.
# REPORT_ONLY=1 renders the report and plots again from $OUT/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
SHOAL=${SHOAL:-bin/shoal}
OUT=${OUT:-docs/bench-train}
DOC=${DOC:-docs/BENCHMARKS.md}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
[ -x "$SHOAL" ] || { echo "bench-train: $SHOAL not found: run make build first" >&2; exit 1; }
scripts/ensure-dataset.sh "$DATA_DIR"
rm -f "$OUT"/*.png
if [ "${REPORT_ONLY:-}" = 1 ]; then
	# Render the report and plots again from the results already there.
	"$SHOAL" bench report "$OUT/results.json"
else
	"$SHOAL" bench train --out "$OUT" --data "$DATA_DIR" "$@"
fi
python3 - "$OUT" "$DOC" <<'PY'
import os, re, sys
sys.path.insert(0, "scripts")
from benchdoc import put_section
out, doc = sys.argv[1:3]
with open(os.path.join(out, "report.md")) as f:
    report = f.read()
rel = os.path.relpath(out, os.path.dirname(doc))
# The report's own title gives way to the section heading; its images and
# links point into the output folder.
report = re.sub(r"\A# .*\n+", "", report)
report = re.sub(r"\]\((?!https?:)([^)]+)\)", lambda m: f"]({rel}/{m.group(1)})", report)
report = re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", report, flags=re.M)
put_section(doc, "train", f"The full results: [{rel}/results.json]({rel}/results.json) (schema: [bench-schema.md](bench-schema.md)).\n\n{report.strip()}",
            "Training: parameter servers vs ring allreduce")
PY
echo "bench-train: wrote $OUT and updated $DOC"
