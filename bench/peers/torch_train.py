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

--precision bf16 or fp16 (GPU only) runs forward and backward under
torch.autocast in that type, the recipe `shoal bench compute --precision`
is measured against; fp16 adds a GradScaler (scale, step, update each
step; it skips a step whose gradients overflow where Shoal takes it again,
so the JSON says how many it skipped).

--sweep times several models and batches in one process, each point
--rounds times in each of --precisions, the rounds outermost, one JSON
object a line with its "round" (as shoal bench compute --sweep): one
start-up of Python, PyTorch and CUDA for the whole table.

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
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                   help="autocast forward and backward to bf16 or fp16 (a GPU only; fp16 with a GradScaler)")
    p.add_argument("--sweep", default="",
                   help="models and their batches to time in turn in this one process, e.g. "
                        "'mlp:64,256,1024,4096 cnn:64,256' (instead of --model and --batch), as shoal bench compute --sweep")
    p.add_argument("--precisions", default="", help="with --sweep: e.g. fp32,bf16,fp16 (default: --precision)")
    p.add_argument("--rounds", type=int, default=1, help="with --sweep: times each point is timed, the rounds outermost")
    return p.parse_args()


def parse_sweep(args):
    """The points of the run: [(model, batch)] and the precisions; without
    --sweep, the one point of --model, --batch and --precision."""
    if not args.sweep:
        if args.precisions or args.rounds != 1:
            sys.exit("torch_train.py: --precisions and --rounds: only with --sweep")
        return [(args.model, [args.batch])], [args.precision]
    models = []
    for item in args.sweep.replace(";", " ").split():
        model, _, batches = item.partition(":")
        try:
            bs = [int(b) for b in batches.split(",")]
        except ValueError:
            bs = []
        if model not in ("mlp", "cnn") or not bs or min(bs) < 1:
            sys.exit("torch_train.py: --sweep %r: %r: want a model (mlp or cnn), a colon and batches, e.g. mlp:64,256 cnn:64"
                     % (args.sweep, item))
        models.append((model, bs))
    precisions = (args.precisions or args.precision).replace(" ", "").split(",")
    for prec in precisions:
        if prec not in ("fp32", "bf16", "fp16"):
            sys.exit("torch_train.py: --precisions %r: precision %r: want fp32, bf16 or fp16" % (args.precisions, prec))
    if not models or args.rounds < 1:
        sys.exit("torch_train.py: --sweep needs a model and --rounds >= 1")
    return models, precisions


def measure(torch, args, device, model_name, batch, precision):
    """Times one point: a fresh model (Shoal's init from --seed), its
    optimizer and one random batch; returns the JSON record."""
    gpu = device.type == "cuda"
    torch.manual_seed(args.seed)
    args.model = model_name
    model = build(torch, args).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = None
    if precision == "fp16":
        amp = getattr(torch, "amp", None)
        scaler = amp.GradScaler("cuda") if amp is not None and hasattr(amp, "GradScaler") else torch.cuda.amp.GradScaler()
    skipped = [0]

    def step():
        opt.zero_grad(set_to_none=True)
        if half is None:
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()
        with torch.autocast(device_type="cuda", dtype=half):
            loss = loss_fn(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
            return loss.item()
        before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if scaler.get_scale() < before:
            skipped[0] += 1
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
    rec = {
        "model": model_name,
        "hidden": args.hidden_widths if model_name == "mlp" else [],
        "batch": batch,
        "threads": args.threads,
        "backend": "torch-%s/%s" % (torch.__version__,
                                    "%s %s" % (device, torch.cuda.get_device_name(device)) if gpu else blas_name()),
        "precision": precision,
        "steps": args.steps,
        "seconds": secs,
        "samples_per_sec": batch * args.steps / secs,
        "skipped_steps": skipped[0],
    }
    if gpu:
        # PyTorch's defaults, recorded: TF32 in cuDNN's convolutions (on by
        # default) and in matmuls (off by default).
        rec["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
    return rec


def main():
    args = parse_args()
    if args.threads < 1 or args.batch < 1 or args.steps < 1 or args.warmup < 0:
        sys.exit("torch_train.py: want threads, batch, steps >= 1 and warmup >= 0")
    try:
        args.hidden_widths = [int(h) for h in args.hidden.split(",")]
    except ValueError:
        sys.exit("torch_train.py: want --hidden like 512,512")
    models, precisions = parse_sweep(args)
    set_threads(args.threads)
    import torch  # after the environment: the libraries read it when loaded

    torch.set_num_threads(args.threads)
    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        sys.exit("torch_train.py: --device %s: %s" % (args.device, e))
    gpu = device.type == "cuda"
    if gpu and not torch.cuda.is_available():
        sys.exit("torch_train.py: --device %s: this PyTorch (%s) sees no CUDA device" % (args.device, torch.__version__))
    if any(p != "fp32" for p in precisions) and not gpu:
        sys.exit("torch_train.py: --precision %s: autocast is measured on a GPU; use --device cuda"
                 % next(p for p in precisions if p != "fp32"))
    for rnd in range(1, args.rounds + 1):
        for model_name, batches in models:
            for precision in precisions:
                for batch in batches:
                    rec = measure(torch, args, device, model_name, batch, precision)
                    if args.sweep:
                        rec["round"] = rnd
                    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
