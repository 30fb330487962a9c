#!/usr/bin/env python3
"""Synthetic data-parallel training throughput, Horovod's way of measuring
it (a torchvision model on a fixed random batch; warm-up batches, then
--num-iters timings of --num-batches-per-iter steps; img/s per rank, mean
over the timings, times the number of ranks), with the gradients averaged
by either

  --backend shoal: shoal.torch's DistributedOptimizer (Horovod's API on
                   Shoal's ring), ranks spawned by shoal.run, or
  --backend ddp:   PyTorch's DistributedDataParallel over gloo, ranks
                   spawned by torch.multiprocessing,

the same model, batch, optimizer and threads for both. Prints one JSON
object. Needs Debian's python3-torch and python3-torchvision, and
libshoal.so for shoal (make libshoal, or $SHOAL_LIBRARY).
"""
import argparse
import json
import os
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from peerlib import free_port  # noqa: E402


def setup(args, rank, size, local_rank):
    import torch
    import torch.nn.functional as F
    from torchvision import models
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = "cpu"
    if args.device == "cuda":
        device = "cuda:%d" % (local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    model = getattr(models, args.model)().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * size)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)
    return model, opt, data, target, F


def synced(args, step):
    """step, then on a GPU wait for it: the timings hold the GPU's work."""
    if args.device != "cuda":
        return step
    import torch

    def run():
        step()
        torch.cuda.synchronize()
    return run


def measure(args, step, rank, size):
    step = synced(args, step)
    timeit.timeit(step, number=args.num_warmup_batches)
    rates = []
    for _ in range(args.num_iters):
        t = timeit.timeit(step, number=args.num_batches_per_iter)
        rates.append(args.batch_size * args.num_batches_per_iter / t)
    return rates


def shoal_rank(args):
    import shoal.torch as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    model, opt, data, target, F = setup(args, rank, size, hvd.local_rank())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()
    rates = measure(args, step, rank, size)
    hvd.shutdown()
    return rates


def ddp_rank(rank, args, port, out):
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.np)
    model, opt, data, target, F = setup(args, rank, args.np, rank)
    ddp = torch.nn.parallel.DistributedDataParallel(model)

    def step():
        opt.zero_grad()
        F.cross_entropy(ddp(data), target).backward()
        opt.step()
    rates = measure(args, step, rank, args.np)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rates, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["shoal", "ddp"], required=True)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--model", default="resnet18", help="a torchvision.models constructor")
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-warmup-batches", type=int, default=3)
    p.add_argument("--num-batches-per-iter", type=int, default=5)
    p.add_argument("--num-iters", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the model and batch live (cuda: rank r on cuda:r mod the GPUs; DDP still over gloo)")
    args = p.parse_args()
    if args.backend == "shoal":
        import shoal
        rates = shoal.run(shoal_rank, args=(args,), np=args.np)[0]
    else:
        import tempfile

        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "rates.json")
            mp.spawn(ddp_rank, args=(args, free_port(), out), nprocs=args.np, join=True)
            with open(out) as f:
                rates = json.load(f)
    mean = sum(rates) / len(rates)
    sd = (sum((r - mean) ** 2 for r in rates) / len(rates)) ** 0.5
    print(json.dumps({"backend": args.backend, "np": args.np, "model": args.model, "batch_size": args.batch_size,
                      "image_size": args.image_size, "threads": args.threads, "device": args.device,
                      "img_per_sec_per_rank": mean,
                      "img_per_sec_total": mean * args.np, "conf95_total": 1.96 * sd * args.np,
                      "per_iter": rates}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
