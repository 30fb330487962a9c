#!/usr/bin/env python3
"""Merges scripts/bench-torch.sh's results (python-N, shoal-N and gloo-N
.jsonl, a line per size and repeat; synthetic.jsonl) from a folder into markdown tables, prints them
and puts them into BENCHMARKS.md between the torch markers."""
import datetime
import glob
import json
import os
import re
import statistics
import sys

from benchdoc import machine, put_section, revision


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def by_bytes(path):
    """Each size's records (one per repeat) as one: the median busbw, every
    busbw, and whether all were correct."""
    out = {}
    for r in (load(path) if os.path.exists(path) else []):
        out.setdefault(r["bytes"], []).append(r)
    return {b: {"busbw_gbps": statistics.median(x["busbw_gbps"] for x in rs), "all": [x["busbw_gbps"] for x in rs],
                "correct": all(x["correct"] for x in rs)} for b, rs in out.items()}


def main(folder, command, doc):
    rows = []
    nps = sorted(int(re.findall(r"\d+", os.path.basename(p))[-1]) for p in glob.glob(os.path.join(folder, "python-*.jsonl")))
    for n in nps:
        py, sh, gl = (by_bytes(os.path.join(folder, "%s-%d.jsonl" % (k, n))) for k in ("python", "shoal", "gloo"))
        for size in sorted(py):
            p, s, g = py[size], sh.get(size), gl.get(size)

            def bw(r):
                return "%.2f (%s)" % (r["busbw_gbps"], ", ".join("%.2f" % x for x in r["all"])) if r else "–"

            def ratio(r):
                return "%.2f×" % (p["busbw_gbps"] / r["busbw_gbps"]) if r else "–"
            ok = all(r["correct"] for r in (p, s, g) if r)
            rows.append("| %d | %d MiB | %s | %s | %s | %s | %s | %s |" % (
                n, size >> 20, bw(p), bw(s), bw(g), ratio(s), ratio(g), ok))
    syn = load(os.path.join(folder, "synthetic.jsonl")) if os.path.exists(os.path.join(folder, "synthetic.jsonl")) else []
    srows = []
    if syn:
        first = syn[0]
        rates = {b: [r["img_per_sec_total"] for r in syn if r["backend"] == b] for b in ("shoal", "ddp")}
        med = {b: statistics.median(v) for b, v in rates.items() if v}
        srows = [
            "| N | model | batch per rank | threads per rank | shoal.torch img/s (each round) | DDP gloo img/s (each round) | shoal / DDP (medians) |",
            "|---|---|---|---|---|---|---|",
            "| %d | %s | %d | %d | %.2f (%s) | %.2f (%s) | %.2f× |" % (
                first["np"], first["model"], first["batch_size"], first["threads"],
                med["shoal"], ", ".join("%.2f" % x for x in rates["shoal"]),
                med["ddp"], ", ".join("%.2f" % x for x in rates["ddp"]), med["shoal"] / med["ddp"]),
        ]
    loads = []
    for when in ("start", "end"):
        try:
            with open(os.path.join(folder, "load-" + when)) as f:
                loads.append("%s at the %s" % (" ".join(f.read().split()[:3]), when))
        except OSError:
            pass
    table = "\n".join([
        "Command: `%s` at revision %s, %s." % (command, revision(), datetime.date.today()),
        "Machine: %s. All measured in one run, one after the other%s." % (
            machine(), "; load averages (1, 5, 15 min) " + ", ".join(loads) if loads else ""),
        "",
        "busbw in GB/s: the median over the repeats (each repeat's in brackets); the ratios are the medians'.",
        "",
        "| N | size | shoal.torch from Python busbw | shoal bench busbw | gloo busbw | "
        "Python / shoal bench | Python / gloo | all correct |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        *srows,
    ])
    put_section(doc, "torch", table, "Horovod's PyTorch API: shoal.torch vs shoal bench vs gloo")
    print(table)


if __name__ == "__main__":
    main(*sys.argv[1:4])
