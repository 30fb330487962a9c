#!/usr/bin/env python3
"""Merges shoal-N.jsonl and gloo-N.jsonl from a folder into a markdown table
and puts it into BENCHMARKS.md between the allreduce markers."""
import datetime
import glob
import json
import os
import platform
import re
import subprocess
import sys


def load(path):
    with open(path) as f:
        return {r["bytes"]: r for r in map(json.loads, filter(str.strip, f))}


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model or platform.processor()}, {platform.system()} {platform.release()}"


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
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    table = "\n".join([
        f"Command: `{command}` at revision {rev}, {datetime.date.today()}.",
        f"Machine: {machine()}. Both measured in the same session, one after the other.",
        "",
        "| N | size | Shoal busbw (GB/s) | gloo busbw (GB/s) | Shoal / gloo | Shoal transport | both correct |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ])
    with open(doc) as f:
        text = f.read()
    begin, end = "<!-- allreduce:begin -->", "<!-- allreduce:end -->"
    if begin not in text:
        text += f"\n{begin}\n{end}\n"
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{table}\n{end}", text, flags=re.S)
    with open(doc, "w") as f:
        f.write(text)
    print(table)


if __name__ == "__main__":
    main(*sys.argv[1:4])
