#!/usr/bin/env python3
"""The parameter-server peer of `make bench-ps`: PyTorch RPC, async (Downpour) SGD on Fashion-MNIST.

Built the way PyTorch's RPC examples build a parameter server
(examples/distributed/rpc/batch and the "Implementing a Parameter Server
Using Distributed RPC" tutorial): one server process "ps" and --workers
processes "worker1".."workerW" in one torch.distributed.rpc group (world
size W+1, TensorPipe backend, everything on 127.0.0.1). The server owns the
model and a torch.optim.SGD, wraps itself in an RRef and starts every
worker's training loop with rpc_async. Each worker step is

    forward + backward on the worker's batch, then ONE
    rpc_sync(ps, ParameterServer.update_and_fetch, (ps_rref, grads))

and the server, under a lock, sets the gradients, takes one optimizer step
(each push applied at once: asynchronous, Downpour SGD, no barrier) and
returns copies of the fresh weights, which the worker trains its next step
on. Before its first step a worker fetches the weights with one
get_weights RPC (timed in its loop, as Shoal's first pull is).

Matched to `shoal train --mode async --servers 1 --lr-decay none`:
  * model: mlp 784-H...-10 with ReLU (--hidden 512,512 gives 669,706
    parameters), softmax cross-entropy averaged over the batch; init
    U(+-sqrt(6/fan_in)) before a ReLU, U(+-1/sqrt(fan_in)) for the last
    layer, biases zero (Shoal's distribution, not its numbers);
  * optimizer: heavy-ball SGD with momentum on the server (PyTorch's SGD
    is Shoal's "momentum"), constant --lr, no warm-up, no decay;
  * data: DistributedSampler(num_replicas=W, rank=i, shuffle=True,
    seed=--seed, drop_last=False) reseeded with seed + epoch, the semantics
    Shoal's data.Sampler copies (a different RNG, so a different order);
    the last short batch of an epoch is kept; pixels become float32 through
    a 256-entry table, by default Shoal's normalisation
    (p/255 - 0.2860)/0.3530 (--norm unit: p/255);
  * threads: each worker process runs --threads intra-op threads (default
    max(1, CPUs // workers), the share `shoal train` gives each worker's
    GEMMs); the server's optimizer runs on one;
  * evaluation: after the last worker finishes, the server evaluates its
    final weights on the whole test set (batches of 1000), as `shoal train`
    evaluates the weights it pulls from its servers.

Transport: --transport tcp (the default) restricts TensorPipe to its "uv"
transport (TCP over loopback) and its "basic" channel, so the tensors travel
over the TCP connection as Shoal's gRPC does; --transport auto lets
TensorPipe choose (on one host: shared memory and cross-memory attach,
which move no bytes through TCP).

Timing, per worker and step (statistics skip each worker's first step):
  data     taking the batch (sampler indices, gather, pixel table)
  compute  zero_grad, forward, backward
  rpc      the update_and_fetch round trip: sending the gradients, waiting
           for the lock, the server's optimizer step, receiving the weights
  copy     copying the received weights into the worker's model
  step     all four
The server also reports, per update, "lock" (waiting for the lock) and
"apply" (optimizer step and the copy of the weights it returns), so
rpc - lock - apply is what the transport and the RPC framework cost.
train_seconds is the longest worker loop (from its first fetch to its last
step, the way `shoal train --stats` reports worker_seconds), and
samples_per_sec is all workers' samples over it.

Prints one JSON object (one line) with --json, else a summary. Exits
nonzero, naming the cause, when torch or the data is missing or a process
fails; then it stops the others. Needs Debian's python3-torch (PyTorch
1.13, CPU); run it with /usr/bin/python3.
"""
import argparse
import json
import math
import os
import sys
import tempfile
import threading
import time

from peerlib import add_training_args, bind_worker, blas_name, check_training_args, run_children, set_threads, \
    write_result
from peerlib import main as peer_main
from torch_ddp import TEST_FILES, DEFAULT_DATA, SIDE, build, evaluate, load_set, pixel_table, preflight, quantiles, \
    training_share

PEER = "pytorch-rpc-ps"
PROG = "torch_rpc_ps.py"
SERVER = "ps"


def fail(msg):
    sys.exit("%s: %s" % (PROG, msg))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="worker processes (the server is one more)")
    add_training_args(p, "512,512", "worker", DEFAULT_DATA)
    p.add_argument("--transport", choices=["tcp", "auto"], default="tcp",
                   help="tcp: TensorPipe's uv transport and basic channel only; auto: TensorPipe's choice")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for init and each update RPC")
    p.add_argument("--bind", choices=["none", "auto"], default="none",
                   help="auto: bind each worker to --threads CPUs of its own where they fit, as shoal train "
                        "--bind auto does (the server is not bound); none: as PyTorch's examples run")
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    bad = []
    check_training_args(p, args, bad, "512,512")
    args.model = "mlp"  # what torch_ddp.build reads
    return args


# ---- the server -----------------------------------------------------------

class ParameterServer:
    """The model's weights and the optimizer; one update at a time."""

    def __init__(self, torch, args):
        torch.manual_seed(args.seed)
        self.model = build(torch, args)
        self.params = list(self.model.parameters())
        self.opt = torch.optim.SGD(self.params, lr=args.lr, momentum=args.momentum)
        self.lock = threading.Lock()
        self.updates = 0
        self.lock_seconds = []   # per update: waiting for the lock
        self.apply_seconds = []  # per update: optimizer step and the weights' copy

    def snapshot(self):
        return [p.detach().clone() for p in self.params]

    @staticmethod
    def get_weights(ps_rref):
        self = ps_rref.local_value()
        with self.lock:
            return self.snapshot()

    @staticmethod
    def update_and_fetch(ps_rref, grads):
        """Applies one worker's gradients at once (Downpour) and returns the
        weights after it. Called concurrently from the RPC threads."""
        self = ps_rref.local_value()
        t0 = time.perf_counter()
        with self.lock:
            t1 = time.perf_counter()
            for p, g in zip(self.params, grads):
                p.grad = g
            self.opt.step()
            out = self.snapshot()
            self.updates += 1
            self.lock_seconds.append(t1 - t0)
            self.apply_seconds.append(time.perf_counter() - t1)
        return out


def server_main(args, torch, rpc):
    torch.set_num_threads(1)
    ps = ParameterServer(torch, args)
    rpc.init_rpc(SERVER, rank=0, world_size=args.workers + 1, rpc_backend_options=backend_options(args, rpc))
    ps_rref = rpc.RRef(ps)
    conf = {k: getattr(args, k) for k in ("workers", "hidden", "hidden_widths", "model", "batch", "epochs", "steps",
                                          "seed", "data", "norm", "threads", "timeout")}
    wall0 = time.perf_counter()
    # timeout 0: a training loop has no deadline; each update RPC has one.
    futs = [rpc.rpc_async("worker%d" % i, worker_loop, args=(ps_rref, i - 1, conf), timeout=0)
            for i in range(1, args.workers + 1)]
    per_worker = [f.wait() for f in futs]
    wall = time.perf_counter() - wall0

    test_x, test_y = load_set(torch, args.data, *TEST_FILES)
    accuracy, loss = evaluate(torch, ps.model, test_x, test_y, pixel_table(torch, args.norm))
    rpc.shutdown()
    return {
        "per_worker": per_worker,
        "updates": ps.updates,
        "lock": ps.lock_seconds,
        "apply": ps.apply_seconds,
        "loop_wall_seconds": wall,
        "test_accuracy": accuracy,
        "test_loss": loss,
        "parameters": sum(p.numel() for p in ps.params),
        "backend": "torch-%s/%s" % (torch.__version__, blas_name()),
    }


def backend_options(args, rpc):
    kw = {}
    if args.transport == "tcp":
        kw = {"_transports": ["uv"], "_channels": ["basic"]}
    return rpc.TensorPipeRpcBackendOptions(init_method="tcp://127.0.0.1:%d" % args.port,
                                           rpc_timeout=args.timeout, **kw)


# ---- a worker -------------------------------------------------------------

def worker_loop(ps_rref, index, conf):
    """One worker's training loop, started by the server over RPC; returns
    its step times and counts."""
    import torch
    import torch.distributed.rpc as rpc

    args = argparse.Namespace(**conf)
    train_x, train_y, lut, next_batch, total = training_share(torch, args, index, args.workers)
    model = build(torch, args)  # its weights are replaced by the server's before the first step
    params = list(model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    owner = ps_rref.owner()

    def load(weights):
        with torch.no_grad():
            for p, w in zip(params, weights):
                p.copy_(w)

    phases = {"step": [], "data": [], "compute": [], "rpc": [], "copy": []}
    samples = 0
    start = time.perf_counter()
    load(rpc.rpc_sync(owner, ParameterServer.get_weights, args=(ps_rref,)))
    for step in range(total):
        t0 = time.perf_counter()
        idx = next(next_batch)
        x = lut[train_x[idx].long()]
        y = train_y[idx]
        t1 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        if not math.isfinite(loss.item()):
            raise RuntimeError("step %d: training loss is %s; the model diverged" % (step, loss.item()))
        t2 = time.perf_counter()
        weights = rpc.rpc_sync(owner, ParameterServer.update_and_fetch, args=(ps_rref, [p.grad for p in params]))
        t3 = time.perf_counter()
        load(weights)
        t4 = time.perf_counter()
        samples += len(idx)
        if step > 0:
            for k, v in (("step", t4 - t0), ("data", t1 - t0), ("compute", t2 - t1), ("rpc", t3 - t2), ("copy", t4 - t3)):
                phases[k].append(v)
    return {"worker": index, "steps": total, "samples": samples, "seconds": time.perf_counter() - start,
            "phases": phases, "threads": torch.get_num_threads(),
            "cpus": sorted(os.sched_getaffinity(0))}


def worker_main(args, torch, rpc):
    torch.set_num_threads(args.threads)
    rpc.init_rpc("worker%d" % args.rank, rank=args.rank, world_size=args.workers + 1,
                 rpc_backend_options=backend_options(args, rpc))
    rpc.shutdown()  # serves the server's worker_loop call, then waits for everyone


def process_main(args):
    set_threads(1 if args.rank == 0 else args.threads)
    if args.rank > 0 and args.bind == "auto":
        bind_worker(args.rank - 1, args.workers, args.threads)
    import torch
    import torch.distributed.rpc as rpc
    if not rpc.is_available():
        raise RuntimeError("this PyTorch (%s) has no torch.distributed.rpc" % torch.__version__)
    if args.rank > 0:
        worker_main(args, torch, rpc)
        return
    write_result(args.result, server_main(args, torch, rpc))


# ---- the launcher ---------------------------------------------------------

def launch(args, argv):
    port = preflight(args, fail)
    tmpdir = tempfile.TemporaryDirectory(prefix="torch_rpc_ps.")
    result = os.path.join(tmpdir.name, "server.json")
    script = os.path.abspath(__file__)
    # TensorPipe listens on this interface's address: loopback only.
    env = dict(os.environ, TP_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo")
    names = ["server"] + ["worker %d" % i for i in range(1, args.workers + 1)]
    wall0 = time.perf_counter()
    run_children([[sys.executable, script] + argv + ["--rank", str(r), "--port", str(port), "--result", result]
                  for r in range(args.workers + 1)], [env] * (args.workers + 1), names, fail)
    wall = time.perf_counter() - wall0
    try:
        with open(result) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        fail("the server exited without its result: %s" % e)
    tmpdir.cleanup()
    res["wall_seconds"] = wall
    return res


def record(args, res, command):
    per = res["per_worker"]
    ph = {k: [v for w in per for v in w["phases"][k]] for k in per[0]["phases"]}
    step_time = {k: quantiles(v) for k, v in ph.items()}
    server_time = {"lock": quantiles(res["lock"]), "apply": quantiles(res["apply"])}
    train_seconds = max(w["seconds"] for w in per)
    samples = sum(w["samples"] for w in per)
    return {
        "peer": PEER,
        "command": command,
        "mode": "async",
        "model": "mlp " + "-".join(str(w) for w in [SIDE * SIDE] + args.hidden_widths + [10]),
        "parameters": res["parameters"],
        "vector_bytes": 4 * res["parameters"],
        "workers": args.workers,
        "servers": 1,
        "batch": args.batch,
        "seed": args.seed,
        "optimizer": "momentum" if args.momentum > 0 else "sgd",
        "lr": args.lr,
        "momentum": args.momentum,
        "epochs": args.epochs,
        "steps": max(w["steps"] for w in per),
        "updates": res["updates"],
        "samples": samples,
        "train_seconds": train_seconds,
        "samples_per_sec": samples / train_seconds if train_seconds > 0 else 0.0,
        "wall_seconds": res["wall_seconds"],
        "test_accuracy": res["test_accuracy"],
        "test_loss": res["test_loss"],
        "step_time": step_time,
        "server_time": server_time,
        "rpc_seconds": step_time["rpc"]["mean"],
        "norm": args.norm,
        "transport": "tensorpipe/uv+basic (tcp)" if args.transport == "tcp" else "tensorpipe/auto",
        "backend": res["backend"],
        "threads": per[0]["threads"],
        "bind": args.bind,
        # Each worker's CPUs (its affinity; all of the machine's unless bound).
        "cpus": [w["cpus"] for w in per],
        "notes": [
            "one update_and_fetch RPC per step: the gradients out, the weights back; the server applies each at once "
            "under a lock (async, Downpour)",
            "rpc = that round trip (lock wait and the server's optimizer step included, server_time has both); "
            "statistics skip each worker's first step",
            "train_seconds: the longest worker loop; samples_per_sec: all workers' samples over it",
        ],
    }


def summary(rec):
    st = rec["step_time"]
    ms = lambda q: "%.2f/%.2f ms" % (1e3 * q["mean"], 1e3 * q["p95"])  # noqa: E731
    return "\n".join([
        "%s: %s, %d params, %d workers x batch %d, 1 server, %s lr %g momentum %g, %d thread(s) per worker, %s, %s" % (
            rec["peer"], rec["model"], rec["parameters"], rec["workers"], rec["batch"], rec["optimizer"], rec["lr"],
            rec["momentum"], rec["threads"], rec["transport"], rec["backend"]),
        "trained %d steps per worker, %d updates, %d samples in %.2f s: %.0f samples/s (wall %.2f s)" % (
            rec["steps"], rec["updates"], rec["samples"], rec["train_seconds"], rec["samples_per_sec"],
            rec["wall_seconds"]),
        "step (mean/p95) %s: data %s, compute %s, rpc %s, copy %s" % (
            ms(st["step"]), ms(st["data"]), ms(st["compute"]), ms(st["rpc"]), ms(st["copy"])),
        "server per update (mean/p95): lock %s, apply %s" % (
            ms(rec["server_time"]["lock"]), ms(rec["server_time"]["apply"])),
        "test accuracy %.2f%%, loss %.4f" % (100 * rec["test_accuracy"], rec["test_loss"]),
    ])


def main():
    peer_main(PROG, parse_args, process_main, lambda r: "server" if r == 0 else "worker %d" % r, launch, record, summary)


if __name__ == "__main__":
    main()
