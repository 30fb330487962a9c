#!/usr/bin/env python3
"""The peer of `shoal bench allreduce`: PyTorch's gloo allreduce, same sizes and process count.

Prints one JSON object per size with the keys of `shoal bench allreduce --json`
(op, np, bytes, seconds, algbw_gbps, busbw_gbps, correct), measured the same
way: warm-up calls, a barrier, timed calls without refilling, the slowest
rank's mean time, then one checked call on fresh inputs.
Needs Debian's python3-torch (PyTorch 1.13, CPU, gloo).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from peerlib import free_port


def parse_sizes(text):
    units = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}
    out = []
    for f in text.split(","):
        f = f.strip()
        mult = 1
        for suffix, m in units.items():
            if f.endswith(suffix):
                f, mult = f[: -len(suffix)], m
                break
        out.append(int(f) * mult)
    return out


def run(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.np)
    n_ranks = args.np
    device = "cpu"
    if args.device == "cuda":
        device = "cuda:%d" % (rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    for size in parse_sizes(args.sizes):
        n = size // 4
        idx = torch.arange(n, dtype=torch.float32, device=device).remainder_(7)
        buf = (rank + 1) * idx + rank
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        sync()
        secs = torch.tensor([(time.perf_counter() - start) / args.iters], dtype=torch.float64)
        dist.all_reduce(secs, op=dist.ReduceOp.MAX)
        buf = (rank + 1) * idx + rank
        dist.all_reduce(buf)
        want = sum((r + 1) * idx + r for r in range(n_ranks))
        ok = torch.tensor([1.0 if torch.equal(buf, want) else 0.0])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if rank == 0:
            t = secs.item()
            alg = size / t / 1e9
            print(json.dumps({"op": "allreduce", "np": n_ranks, "bytes": size, "seconds": t, "algbw_gbps": alg,
                              "busbw_gbps": alg * 2 * (n_ranks - 1) / n_ranks, "correct": ok.item() == 1.0,
                              "transport": "gloo", "device": str(buf.device)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--sizes", default="1MiB,4MiB,16MiB,64MiB")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the tensor lives (cuda: gloo's CUDA allreduce, rank r on cuda:r mod the GPUs)")
    args = p.parse_args()
    mp.spawn(run, args=(args, free_port()), nprocs=args.np, join=True)


if __name__ == "__main__":
    sys.exit(main())
