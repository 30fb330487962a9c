#!/usr/bin/env python3
"""The tables of scripts/gpu-check.sh, in Markdown, from what its parts wrote.

  gpu_tables.py compute SHOAL.jsonl TORCH.jsonl [--shoal-eager EAGER.jsonl] [--shoal-upload UPLOAD.jsonl]
                 [--torch-note TEXT]
      shoal bench compute --sweep beside bench/peers/torch_train.py --sweep:
      per model, batch and precision the median samples/s over the rounds of
      each side, their ratio, and issue 46's target for it (Shoal at least
      1.0x PyTorch eager at every batch and 1.5x at batch 64 in fp32; bf16 at
      least autocast's), beside Shoal's steps op by op (--cuda-graphs=false)
      where --shoal-eager gives them, and Shoal's steps uploading their batch
      each step (as a training worker's do) where --shoal-upload gives them.
      A side that did not run (no file, or
      an empty one) leaves its column empty; --torch-note says why.
  gpu_tables.py torch TORCH-HVD.jsonl [--note TEXT]
      scripts/gpu-torch-hvd.sh's results: shoal.torch's allreduce from Python
      against gloo's on the same tensors (busbw, their ratio; issue 40's
      target is 1.5x gloo), and synthetic training img/s with shoal.torch's
      DistributedOptimizer against DDP (target: at least DDP's).
  gpu_tables.py train FILE...
      shoal train --json results (the last JSON line of each file): samples/s,
      test accuracy and the mean step time split (compute, data, wait, pull,
      push, reduce, in ms).

Needs only Python's standard library: it runs where PyTorch is missing too.
"""
import argparse
import json
import os
import statistics
import sys

NAMES = {"mlp": "MLP", "cnn": "CNN"}
PEER = {"fp32": "eager", "bf16": "autocast bf16", "fp16": "autocast fp16 + GradScaler"}


def load_jsonl(path):
    """The JSON objects of path, one a line; lines that are not JSON (a
    warning, a cut-off last line) are skipped. [] if there is no file."""
    if not path or not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def key(r):
    return (r["model"], tuple(r.get("hidden") or []), r["batch"], r.get("precision", "fp32"))


def group(recs):
    g = {}
    for r in recs:
        g.setdefault(key(r), []).append(r["samples_per_sec"])
    return g


def target(batch, precision):
    """Issue 46's target for Shoal / PyTorch at this point, or None."""
    if precision == "fp32":
        return 1.5 if batch == 64 else 1.0
    if precision == "bf16":
        return 1.0
    return None


def compute_table(shoal_path, torch_path, torch_note="", eager_path="", upload_path=""):
    shoal, torch, eager = load_jsonl(shoal_path), load_jsonl(torch_path), load_jsonl(eager_path)
    upload = load_jsonl(upload_path)
    s, t, e, u = group(shoal), group(torch), group(eager), group(upload)
    keys = sorted(set(s) | set(t) | set(e) | set(u),
                  key=lambda k: (list(NAMES).index(k[0]) if k[0] in NAMES else 9, k[3] != "fp32", k[3], k[2]))
    lines = []
    backend = lambda recs: recs[0]["backend"] if recs else "not run"
    graphs = sorted({r.get("graphs", "?") for r in shoal})
    lines.append(f"Shoal: {backend(shoal)}, CUDA graphs {' / '.join(graphs) or '?'}"
                 f"{'; op by op (--cuda-graphs=false): ' + backend(eager) if eager else ''}. "
                 f"PyTorch: {backend(torch)}{' (' + torch_note + ')' if torch_note else ''}.")
    if torch and "tf32" in torch[0]:
        lines.append(f"PyTorch's TF32 settings (its defaults, unchanged): {torch[0]['tf32']}.")
    lines += ["",
              "| model | batch | precision | Shoal samples/s | Shoal op by op | Shoal, batch uploaded each step "
              "| PyTorch samples/s | PyTorch as | Shoal / PyTorch "
              "| op by op / PyTorch | uploaded / PyTorch | target | met | rounds (Shoal; op by op; uploaded; PyTorch) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    missed = 0
    med = lambda v: statistics.median(v) if v else None
    fmt = lambda v: f"{v:,.0f}" if v is not None else "—"
    ratio = lambda a, b: a / b if a and b else None
    each = lambda v: ", ".join(f"{x:,.0f}" for x in v) or "—"
    for k in keys:
        model, hidden, batch, prec = k
        name = NAMES.get(model, model) + (" " + "-".join(["784", *map(str, hidden), "10"]) if hidden else "")
        sm, em, um, tm = med(s.get(k, [])), med(e.get(k, [])), med(u.get(k, [])), med(t.get(k, []))
        r, re_, ru = ratio(sm, tm), ratio(em, tm), ratio(um, tm)
        want = target(batch, prec)
        met = "" if r is None or want is None else ("yes" if r >= want else "**no**")
        missed += met == "**no**"
        lines.append(f"| {name} | {batch} | {prec} | {fmt(sm)} | {fmt(em)} | {fmt(um)} | {fmt(tm)} | {PEER.get(prec, prec)} | "
                     f"{f'**{r:.2f}×**' if r else '—'} | {f'{re_:.2f}×' if re_ else '—'} | {f'{ru:.2f}×' if ru else '—'} | "
                     f"{f'≥ {want:.1f}×' if want else '—'} | {met} | "
                     f"{each(s.get(k, []))}; {each(e.get(k, []))}; {each(u.get(k, []))}; {each(t.get(k, []))} |")
    lines.append("")
    lines.append(f"Points below their target: {missed}." if torch and shoal else "No ratio: one side did not run.")
    if shoal and all(r.get("batch_on_device") for r in shoal):
        lines.append("Shoal's batch stays on the GPU (--batch-on-device), as the PyTorch peer's does, in the columns "
                     "the target compares; the 'uploaded each step' column is a training worker's step, the batch's "
                     "upload included. Medians over the rounds.")
    else:
        lines.append("Shoal's step uploads its batch every step, as a training worker does; the PyTorch peer's batch "
                     "stays on the GPU. Medians over the rounds.")
    return "\n".join(lines)


def torch_table(path, note=""):
    recs = load_jsonl(path)
    if not recs:
        return "shoal.torch on the GPU: not run" + (f" ({note})." if note else ".")
    lines = []
    ar = {}
    for r in recs:
        if r.get("op") == "allreduce":
            ar.setdefault((r["np"], r["bytes"]), {})[r["part"]] = r
    if ar:
        dev = next((r.get("device", "?") for r in recs if r.get("op") == "allreduce"), "?")
        lines += [f"Allreduce from Python, tensors on {dev}; busbw in GB/s.", "",
                  "| N | size | shoal.torch busbw | gloo busbw | shoal.torch / gloo | target | both correct |",
                  "|---|---|---|---|---|---|---|"]
        for (n, size), parts in sorted(ar.items()):
            h, g = parts.get("hvd-allreduce"), parts.get("gloo-allreduce")
            hb, gb = (h or {}).get("busbw_gbps"), (g or {}).get("busbw_gbps")
            ratio = f"**{hb / gb:.2f}×**" if hb and gb else "—"
            ok = all(x.get("correct") for x in (h, g) if x)
            lines.append(f"| {n} | {size >> 20} MiB | {hb or 0:.2f} | {gb or 0:.2f} | {ratio} | ≥ 1.5× | {ok} |")
        lines.append("")
    syn = {r["backend"]: r for r in recs if "backend" in r}
    if syn:
        lines += ["| synthetic | model | N | batch per rank | img/s total | ± (95%) | per iteration |", "|---|---|---|---|---|---|---|"]
        for b in ("shoal", "ddp"):
            if b in syn:
                r = syn[b]
                lines.append(f"| {'shoal.torch DistributedOptimizer' if b == 'shoal' else 'DDP over gloo'} | {r['model']} | {r['np']} | "
                             f"{r['batch_size']} | {r['img_per_sec_total']:,.1f} | {r['conf95_total']:,.1f} | "
                             + ", ".join(f"{x:,.1f}" for x in r.get("per_iter", [])) + " |")
        if "shoal" in syn and "ddp" in syn:
            lines += ["", f"shoal.torch / DDP: **{syn['shoal']['img_per_sec_total'] / syn['ddp']['img_per_sec_total']:.2f}×** (target ≥ 1.0×)."]
    errs = [f"{r['part']}: {r['error']}" for r in recs if "error" in r]
    if errs:
        lines += ["", "Did not run: " + "; ".join(errs) + "."]
    if note:
        lines += ["", note]
    return "\n".join(lines)


def last_json(path):
    last = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    last = json.loads(line)
                except json.JSONDecodeError:
                    pass
    return last


def train_table(paths):
    parts = ["compute", "data", "wait", "pull", "push", "reduce"]
    lines = ["| run | mode | workers | device | precision | epochs | steps | test accuracy | samples/s | wall s | step ms | "
             + " | ".join(f"{p} ms" for p in parts) + " |",
             "|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(parts)]
    for p in paths:
        r = last_json(p) if os.path.exists(p) else None
        run = os.path.basename(p).rsplit(".", 1)[0]
        if r is None:
            lines.append(f"| {run} | not run or no result | " + " | " * (9 + len(parts)))
            continue
        st = r.get("step_time") or {}
        ms = lambda q: f"{1000 * st[q]['mean']:.3f}" if q in st and st[q] else "—"
        lines.append(f"| {run} | {r.get('mode', '?')} | {r.get('workers', '?')} | {r.get('device', 'cpu')} | {r.get('precision', 'fp32')} | "
                     f"{r.get('epochs', '?')} | {r.get('steps', '?')} | {100 * r.get('test_accuracy', 0):.2f}% | "
                     f"{r.get('samples_per_sec', 0):,.0f} | {r.get('wall_seconds', 0):.1f} | {ms('step')} | "
                     + " | ".join(ms(q) for q in parts) + " |")
    lines.append("")
    lines.append("Step times are the workers' means (record.StepTime); on a GPU `compute` holds the host-device copies too.")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("compute")
    c.add_argument("shoal")
    c.add_argument("torch")
    c.add_argument("--torch-note", default="")
    c.add_argument("--shoal-eager", default="", help="shoal bench compute --cuda-graphs=false's records")
    c.add_argument("--shoal-upload", default="", help="shoal bench compute's records without --batch-on-device")
    t = sub.add_parser("train")
    t.add_argument("files", nargs="+")
    h = sub.add_parser("torch")
    h.add_argument("results")
    h.add_argument("--note", default="")
    args = p.parse_args()
    if args.what == "compute":
        print(compute_table(args.shoal, args.torch, args.torch_note, args.shoal_eager, args.shoal_upload))
    elif args.what == "torch":
        print(torch_table(args.results, args.note))
    else:
        print(train_table(args.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
