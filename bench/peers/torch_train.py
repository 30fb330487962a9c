#!/usr/bin/env python3
"""The peer of `shoal bench compute`: one worker's training step in PyTorch.

Same models as Shoal's nn package, built as the DDP peer builds them
(torch_ddp.build, layer for layer: mlp 784-H...-10 with ReLU; cnn conv
1->16 3x3 pad 1, ReLU, maxpool 2, conv 16->32 3x3 pad 1, ReLU, maxpool 2,
fc 1568->128, ReLU, fc 128->10, with Shoal's init), same batch of random
inputs, SGD with momentum 0.9 at lr 0.01, the same warm-up and timed steps,
on --threads threads. Prints one JSON object with the keys of
`shoal bench compute --json` (model, hidden, batch, threads, backend, steps,
seconds, samples_per_sec).

With --device cuda (or cuda:N) the model, the batch and the optimizer live
on the GPU, as `shoal bench compute --device cuda` runs; the clock waits for
the GPU (torch.cuda.synchronize) before it starts and before it stops, and
the loss is read back every step, as Shoal reads its losses.

The thread count is set before torch is imported (OMP_NUM_THREADS for
PyTorch's own kernels and oneDNN, OPENBLAS_NUM_THREADS for the BLAS, which
Debian's build does not otherwise limit) and with torch.set_num_threads.
Needs Debian's python3-torch (PyTorch 1.13, CPU); run it with /usr/bin/python3,
or on a GPU machine with a CUDA build of PyTorch (e.g. /opt/torch/.venv/bin/python).
"""
import argparse
import json
import sys
import time

from peerlib import blas_name, set_threads
from torch_ddp import build


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--hidden", default="512,512", help="MLP hidden widths, comma-separated")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=10, help="untimed steps")
    p.add_argument("--steps", type=int, default=100, help="timed steps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    return p.parse_args()


def main():
    args = parse_args()
    if args.threads < 1 or args.batch < 1 or args.steps < 1 or args.warmup < 0:
        sys.exit("torch_train.py: want threads, batch, steps >= 1 and warmup >= 0")
    try:
        args.hidden_widths = [int(h) for h in args.hidden.split(",")]
    except ValueError:
        sys.exit("torch_train.py: want --hidden like 512,512")
    set_threads(args.threads)
    import torch  # after the environment: the libraries read it when loaded

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        sys.exit("torch_train.py: --device %s: %s" % (args.device, e))
    gpu = device.type == "cuda"
    if gpu and not torch.cuda.is_available():
        sys.exit("torch_train.py: --device %s: this PyTorch sees no CUDA device" % args.device)
    model = build(torch, args).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(args.batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    def sync():
        if gpu:
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    secs = time.perf_counter() - start
    print(json.dumps({
        "model": args.model,
        "hidden": args.hidden_widths if args.model == "mlp" else [],
        "batch": args.batch,
        "threads": args.threads,
        "backend": "torch-%s/%s" % (torch.__version__,
                                    "%s %s" % (device, torch.cuda.get_device_name(device)) if gpu else blas_name()),
        "steps": args.steps,
        "seconds": secs,
        "samples_per_sec": args.batch * args.steps / secs,
    }))


if __name__ == "__main__":
    main()
