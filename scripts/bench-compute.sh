#!/usr/bin/env bash
# Runs `shoal bench compute` and its PyTorch peer (bench/peers/torch_train.py)
# for the MLP 784-512-512-10 and the CNN at batch 64 on one thread, alternating
# Shoal and PyTorch for ROUNDS rounds in one session, and writes the
# side-by-side table (medians over the rounds, and their ratio) into
# docs/BENCHMARKS.md between <!-- compute:begin --> and <!-- compute:end -->.
# Needs Debian's python3-torch and a built bin/shoal (make bench-compute).
#
# On a GPU machine: DEVICE=cuda (both sides compute there, weights resident),
# BATCHES="256 1024 4096" (each model at each batch; the issue's CNN row is
# MODELS=cnn BATCHES=256), SHOAL=.gpubin/shoal (make gpubin, carried there),
# PYTHON=/opt/torch/.venv/bin/python; the table goes into the section
# compute-gpu of DOC (point DOC at a copy under $OUT to bring it back).
# PRECISION=bf16 or fp16 (a GPU only) times Shoal's mixed precision beside
# PyTorch's autocast (with a GradScaler for fp16), into the section
# compute-gpu-bf16 or compute-gpu-fp16.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
SHOAL=${SHOAL:-bin/shoal}
BATCH=${BATCH:-64}
BATCHES=${BATCHES:-$BATCH}
DEVICE=${DEVICE:-cpu}
PRECISION=${PRECISION:-fp32}
MODELS=${MODELS:-mlp cnn}
THREADS=${THREADS:-1}
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-10}
ROUNDS=${ROUNDS:-3}
DOC=${DOC:-docs/BENCHMARKS.md}
"$PY" -c 'import torch' 2>/dev/null || {
	echo "bench-compute: $PY cannot import torch: apt-get install python3-torch" >&2; exit 1; }
[ -x "$SHOAL" ] || { echo "bench-compute: $SHOAL not found: run make build first" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
	for model in $MODELS; do
		for batch in $BATCHES; do
			echo "round $round/$ROUNDS: $model batch $batch on $DEVICE: shoal, torch" >&2
			common=(--model "$model" --batch "$batch" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" --device "$DEVICE" --precision "$PRECISION")
			[ "$model" = mlp ] && common+=(--hidden 512,512)
			"$SHOAL" bench compute "${common[@]}" --json >>"$out/shoal-$model-$batch.jsonl"
			"$PY" bench/peers/torch_train.py "${common[@]}" >>"$out/torch-$model-$batch.jsonl"
		done
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

prec=""
[ "$PRECISION" = fp32 ] || prec=" PRECISION=$PRECISION"
cmd="make bench-compute (DEVICE=$DEVICE$prec MODELS=\"$MODELS\" BATCHES=\"$BATCHES\" THREADS=$THREADS STEPS=$STEPS WARMUP=$WARMUP ROUNDS=$ROUNDS)"
"$PY" - "$out" "$cmd" "$DOC" "$load_before" "$load_after" "$MODELS" "$BATCHES" "$DEVICE" "$PRECISION" <<'EOF'
import datetime, json, statistics, sys

sys.path.insert(0, "scripts")
from benchdoc import machine, put_section, revision

folder, command, doc, load_before, load_after, models, batches, device, precision = sys.argv[1:10]


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


names = {"mlp": "MLP 784-512-512-10", "cnn": "CNN (conv16-conv32-fc128)"}
rows = []
for model, batch in [(m, b) for m in models.split() for b in batches.split()]:
    s, t = load(f"{folder}/shoal-{model}-{batch}.jsonl"), load(f"{folder}/torch-{model}-{batch}.jsonl")
    sm = statistics.median(r["samples_per_sec"] for r in s)
    tm = statistics.median(r["samples_per_sec"] for r in t)
    each = ", ".join(f"{a['samples_per_sec']:.0f}/{b['samples_per_sec']:.0f}" for a, b in zip(s, t))
    rows.append(f"| {names[model]} | {s[0]['batch']} | {s[0]['threads']} | {sm:,.0f} | {tm:,.0f} | **{sm / tm:.2f}×** | "
                f"{s[0]['backend']} | {t[0]['backend']} | {each} |")
rev = revision()
table = "\n".join([
    f"Command: `{command}` at revision {rev}, {datetime.date.today()}.",
    f"Machine: {machine()}; load average {load_before} before, {load_after} after.",
    "Shoal and PyTorch alternate, one run each per round; the table gives the medians over the rounds."
    + ("" if precision == "fp32" else f" Precision {precision}: Shoal's --precision {precision} (half-precision GEMM operands, float32 accumulation and master weights"
       + (", dynamic loss scaling" if precision == "fp16" else "") + ") against PyTorch's torch.autocast"
       + (" with a GradScaler" if precision == "fp16" else "") + "."),
    "",
    "| model | batch | threads | Shoal samples/s | PyTorch samples/s | Shoal / PyTorch | Shoal GEMM | PyTorch | rounds (Shoal/PyTorch) |",
    "|---|---|---|---|---|---|---|---|---|",
    *rows,
])
if device == "cpu":
    put_section(doc, "compute", table, "Training compute: Shoal vs PyTorch")
elif precision == "fp32":
    put_section(doc, "compute-gpu", table, "Training compute on a GPU: Shoal vs PyTorch eager")
else:
    put_section(doc, "compute-gpu-" + precision, table, f"Mixed precision ({precision}) on a GPU: Shoal vs PyTorch autocast")
print(table)
EOF
