#!/usr/bin/env python3
"""Merges shoal-N.jsonl and gloo-N.jsonl from a folder into a markdown table
and puts it into BENCHMARKS.md between the allreduce markers."""
import datetime
import glob
import json
import os
import re
import sys

from benchdoc import machine, put_section, revision


def load(path):
    with open(path) as f:
        return {r["bytes"]: r for r in map(json.loads, filter(str.strip, f))}


def main(folder, command, doc):
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "shoal-*.jsonl")), key=lambda p: int(re.findall(r"\d+", p)[-1])):
        np_ = re.findall(r"\d+", os.path.basename(path))[-1]
        shoal, gloo = load(path), load(os.path.join(folder, f"gloo-{np_}.jsonl"))
        for size in sorted(shoal):
            s, g = shoal[size], gloo.get(size)
            ratio = f"{s['busbw_gbps'] / g['busbw_gbps']:.2f}×" if g else "–"
            rows.append(f"| {np_} | {size >> 20} MiB | {s['busbw_gbps']:.2f} | {g['busbw_gbps']:.2f} | {ratio} | "
                        f"{s['transport']} | {s['correct'] and (g or {}).get('correct', False)} |" if g else
                        f"| {np_} | {size >> 20} MiB | {s['busbw_gbps']:.2f} | – | – | {s['transport']} | {s['correct']} |")
    rev = revision()
    table = "\n".join([
        f"Command: `{command}` at revision {rev}, {datetime.date.today()}.",
        f"Machine: {machine()}. Both measured in the same session, one after the other.",
        "",
        "| N | size | Shoal busbw (GB/s) | gloo busbw (GB/s) | Shoal / gloo | Shoal transport | both correct |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ])
    put_section(doc, "allreduce", table, "Allreduce bandwidth: Shoal vs PyTorch gloo")
    print(table)


if __name__ == "__main__":
    main(*sys.argv[1:4])
