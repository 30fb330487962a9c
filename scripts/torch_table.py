#!/usr/bin/env python3
"""Merges scripts/bench-torch.sh's results (python-N, shoal-N and gloo-N
.jsonl, synthetic.jsonl) from a folder into markdown tables, prints them
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
    return {r["bytes"]: r for r in load(path)} if os.path.exists(path) else {}


def main(folder, command, doc):
    rows = []
    nps = sorted(int(re.findall(r"\d+", os.path.basename(p))[-1]) for p in glob.glob(os.path.join(folder, "python-*.jsonl")))
    for n in nps:
        py, sh, gl = (by_bytes(os.path.join(folder, "%s-%d.jsonl" % (k, n))) for k in ("python", "shoal", "gloo"))
        for size in sorted(py):
            p, s, g = py[size], sh.get(size), gl.get(size)

            def bw(r):
                return "%.2f" % r["busbw_gbps"] if r else "–"

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
    table = "\n".join([
        "Command: `%s` at revision %s, %s." % (command, revision(), datetime.date.today()),
        "Machine: %s. All measured in one run, one after the other." % machine(),
        "",
        "| N | size | shoal.torch from Python busbw (GB/s) | shoal bench busbw (GB/s) | gloo busbw (GB/s) | "
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
