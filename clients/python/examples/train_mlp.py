#!/usr/bin/env python3
"""Trains Shoal's MLP in PyTorch as one worker of a `shoal ps` job.

The servers hold the weights and run the optimizer; this worker, like a Go
`shoal worker`, pulls the weights, computes the gradient of a batch of its
share of Fashion-MNIST with PyTorch, and pushes it (one push-pull per step,
as the Go worker does). It works in async, sync and ssp mode, alongside Go
workers of the same job:

    shoal ps --listen 127.0.0.1:7070 --servers 2 --shard 0 --workers 2 --mode sync &
    shoal ps --listen 127.0.0.1:7071 --servers 2 --shard 1 --workers 2 --mode sync &
    shoal worker --servers 127.0.0.1:7070,127.0.0.1:7071 --mode sync --rank 0 --world-size 2 --steps 300 &
    /usr/bin/python3 clients/python/examples/train_mlp.py --servers 127.0.0.1:7070,127.0.0.1:7071 \\
        --rank 1 --world-size 2 --steps 300

The model, its data and the data order come from the PyTorch peer of
Shoal's benchmarks (bench/peers/torch_ddp.py): Flatten, Linear+ReLU per
hidden width, Linear to 10 classes; pixels normalised as Shoal's default;
this rank's share of the training set in DistributedSampler order (the same
shares as Shoal's sampler, drawn with PyTorch's generator). Needs Debian's
python3-torch, python3-grpcio and python3-numpy: run it with /usr/bin/python3.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))  # clients/python: the shoal package
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))  # torch_ddp: model and data

PROG = "train_mlp.py"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servers", required=True, help="the shards' addresses HOST:PORT, comma-separated, in shard order")
    p.add_argument("--rank", type=int, default=0, help="this worker's id (0..world size - 1)")
    p.add_argument("--world-size", type=int, default=1, help="workers in the job (each trains on its share of the data)")
    p.add_argument("--mode", default="", help="check that the servers run this mode (async, sync, ssp); default: any")
    p.add_argument("--hidden", default="256,128", help="MLP hidden widths, comma-separated (as the servers' --hidden)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=None, help="training steps (default: --epochs over this rank's share)")
    p.add_argument("--epochs", type=int, default=None, help="epochs over this rank's share (default 1)")
    p.add_argument("--seed", type=int, default=1, help="data order")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="folder of the Fashion-MNIST idx files (plain or .gz)")
    p.add_argument("--norm", choices=["standard", "unit"], default="standard")
    p.add_argument("--threads", type=int, default=1, help="PyTorch threads")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds for the servers to answer, and for each call")
    p.add_argument("--eval", action=argparse.BooleanOptionalAction, default=True,
                   help="evaluate the final weights on the test set")
    p.add_argument("--json", action="store_true", help="end with one JSON line")
    args = p.parse_args(argv)
    if args.steps is not None and args.epochs is not None:
        p.error("give --steps or --epochs, not both")
    if args.steps is None and args.epochs is None:
        args.epochs = 1
    if not 0 <= args.rank < args.world_size:
        p.error("--rank %d: want 0..%d (--world-size %d)" % (args.rank, args.world_size - 1, args.world_size))
    if args.batch < 1 or (args.steps is not None and args.steps < 1) or (args.epochs is not None and args.epochs < 1) or args.threads < 1:
        p.error("want --batch, --steps, --epochs and --threads >= 1")
    try:
        args.hidden_widths = [int(h) for h in args.hidden.split(",")]
    except ValueError:
        p.error("--hidden %r: want widths like 256,128" % args.hidden)
    args.model = "mlp"
    return args


def train(args):
    from peerlib import set_threads
    set_threads(args.threads)
    import torch
    import torch_ddp

    import shoal

    torch.set_num_threads(args.threads)
    client = shoal.Client(args.servers, worker_id=args.rank, connect_timeout=args.timeout, call_timeout=args.timeout)
    with client:
        if args.mode and client.mode != args.mode:
            raise shoal.ShoalError("--mode %s: the servers run mode %s" % (args.mode, client.mode))
        if client.mode != "async" and client.workers != args.world_size:
            raise shoal.ShoalError("--world-size %d: the servers expect %d workers" % (args.world_size, client.workers))
        model = torch_ddp.build(torch, args)
        flat = shoal.FlatParameters(model, client.layout)
        train_x, train_y, lut, batches, total = torch_ddp.training_share(torch, args, args.rank, args.world_size)
        loss_fn = torch.nn.CrossEntropyLoss()

        start = client.join()  # 0, unless this worker restarts into a run under way
        for _ in range(start):
            next(batches)
        pushes = duplicates = dropped = 0
        last_loss = None  # no step yet
        t0 = time.perf_counter()
        client.pull(flat.params)
        for step in range(start, total):
            idx = next(batches)
            x = lut[train_x[idx].long()].view(-1, 1, torch_ddp.SIDE, torch_ddp.SIDE)
            flat.zero_grad()
            loss = loss_fn(model(x), train_y[idx])
            loss.backward()
            last_loss = loss.item()
            if step == total - 1:
                res = client.push(flat.flat_grads(), step)
            else:
                res = client.push_pull(flat.flat_grads(), step, into=flat.params)
            pushes += 1
            duplicates += res.duplicates
            dropped += res.dropped
        seconds = time.perf_counter() - t0

        out = {"worker": args.rank, "mode": client.mode, "steps": pushes, "pushes": pushes,
               "duplicates": duplicates, "dropped": dropped, "seconds": seconds, "last_loss": last_loss}
        print("worker %d (python): %d steps from step %d in %.1fs, last batch loss %s"
              % (args.rank, pushes, start, seconds, "-" if last_loss is None else "%.4f" % last_loss), file=sys.stderr)
        if args.eval:
            # In sync mode this waits until the shards applied the last step.
            client.pull(flat.params)
            test_x, test_y = torch_ddp.load_set(torch, args.data, *torch_ddp.TEST_FILES)
            acc, test_loss = torch_ddp.evaluate(torch, model, test_x, test_y, lut)
            out.update(test_accuracy=acc, test_loss=test_loss, clocks=client.clocks)
            print("test: loss %.4f, accuracy %.2f%% (%d samples)" % (test_loss, 100 * acc, test_x.shape[0]), file=sys.stderr)
    if args.json:
        print(json.dumps(out))


def main():
    args = parse_args()
    import importlib.util
    missing = [m for m in ("grpc", "numpy", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit("%s: %s missing for %s: install Debian's python3-grpcio, python3-numpy and python3-torch and run this "
                 "with /usr/bin/python3" % (PROG, ", ".join(missing), sys.executable))
    import shoal
    try:
        train(args)
    except (shoal.ShoalError, OSError, ValueError) as e:
        sys.exit("%s: worker %d: %s" % (PROG, args.rank, e))


if __name__ == "__main__":
    main()
