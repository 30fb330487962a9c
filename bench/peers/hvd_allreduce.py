#!/usr/bin/env python3
"""Shoal's allreduce as a Python program sees it: shoal.torch's
hvd.allreduce_ (in place, a float32 tensor, op Sum: what
DistributedOptimizer issues) from --np ranks spawned by shoal.run; the
tensor on the CPU, or with --device cuda on the GPU (every rank on
cuda:LOCAL_RANK mod the GPUs; the ring reduces a host copy).

Prints one JSON object per size with the keys of `shoal bench allreduce
--json` (op, np, bytes, seconds, algbw_gbps, busbw_gbps, correct,
transport), measured as it and bench/peers/torch_allreduce.py measure:
warm-up calls, a barrier, timed calls without refilling, the slowest rank's
mean time, then one checked call on fresh inputs. Needs libshoal.so (make
libshoal, or $SHOAL_LIBRARY) and Debian's python3-torch.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

import shoal  # noqa: E402


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


def rank_main(sizes, iters, warmup, device="cpu"):
    import torch

    import shoal.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    rank, n = hvd.rank(), hvd.size()
    if device == "cuda":
        device = "cuda:%d" % (hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    rows = []
    for size in sizes:
        idx = torch.arange(size // 4, dtype=torch.float32, device=device).remainder_(7)
        buf = (rank + 1) * idx + rank
        for i in range(warmup):
            hvd.allreduce_(buf, op=hvd.Sum, name="bench.%d" % size)
        sync()
        hvd.barrier()
        start = time.perf_counter()
        for i in range(iters):
            hvd.allreduce_(buf, op=hvd.Sum, name="bench.%d" % size)
        sync()
        secs = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        t = hvd.allreduce(secs, op=hvd.Max, name="bench.secs").item()
        buf = (rank + 1) * idx + rank
        hvd.allreduce_(buf, op=hvd.Sum, name="bench.check")
        want = sum((r + 1) * idx + r for r in range(n))
        ok = hvd.allreduce(torch.tensor([1.0 if torch.equal(buf, want) else 0.0]), op=hvd.Min, name="bench.ok").item()
        alg = size / t / 1e9
        rows.append({"op": "allreduce", "np": n, "bytes": size, "seconds": t, "algbw_gbps": alg,
                     "busbw_gbps": alg * 2 * (n - 1) / n, "correct": ok == 1.0,
                     "transport": "tcp" if os.environ.get("SHOAL_SHM") == "0" else "shm",
                     "caller": "python shoal.torch", "device": str(buf.device)})
    hvd.shutdown()
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--sizes", default="16MiB,64MiB")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the tensor lives")
    args = p.parse_args()
    rows = shoal.run(rank_main, args=(parse_sizes(args.sizes), args.iters, args.warmup, args.device), np=args.np)[0]
    for r in rows:
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
