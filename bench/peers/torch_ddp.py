#!/usr/bin/env python3
"""The peer of `shoal bench train`: PyTorch DistributedDataParallel with gloo on Fashion-MNIST.

Starts --workers processes of this script on loopback (MASTER_ADDR 127.0.0.1,
MASTER_PORT a free port, RANK, WORLD_SIZE), each with --threads threads
(default: the CPUs this process may use // workers, at least 1), and trains
the same model as Shoal's nn package (mlp 784-H...-10 with ReLU, default
784-256-128-10; or cnn, as in torch_train.py) with DDP over the gloo backend:
per-rank batch --batch, SGD with momentum (PyTorch's heavy-ball SGD, which
is Shoal's "momentum" optimizer) at a constant --lr (no warm-up, no decay).

Matched to Shoal:
  * data: the four idx files in --data, plain or gzipped (Shoal reads either),
    checked like Shoal checks them; pixels stay uint8 and become float32 per
    batch through a 256-entry table, Shoal's default normalisation
    (p/255 - 0.2860) / 0.3530 (--norm unit gives p/255, Shoal's
    NormalizeUnit);
  * order: DistributedSampler(shuffle=True, seed=--seed, drop_last=False),
    reseeded with seed + epoch each epoch, whose semantics Shoal's Sampler
    copies (same shares and padding; a different RNG, so a different order);
    the last short batch of an epoch is kept, as Shoal's loader does;
  * init: weights U(+-sqrt(6/fan_in)) for layers a ReLU follows and
    U(+-1/sqrt(fan_in)) for the last, biases zero, as Shoal's (same
    distribution, not the same numbers);
  * evaluation: rank 0 evaluates the whole 10,000-image test set (batches of
    1000, mean cross-entropy and accuracy) every --eval-every steps and after
    the last step; that time is part of train_seconds but not of the curve's
    seconds, as in Shoal, and the other ranks spend it waiting in
    the next step's allreduce.

Timing, per rank and step (statistics skip each rank's step 0, the warm-up):
  data     taking the batch: the sampler's indices (a new epoch's permutation
           included), gathering the uint8 rows and the table look-up. It is
           synchronous; Shoal's loader prepares batches ahead on a goroutine.
  compute  forward and backward until DDP hands the last gradient bucket to
           allreduce (a pass-through comm hook notes the time), plus the
           optimizer step. Step_time also carries "optimizer", the
           optimizer step alone (not one of Shoal's phases).
  reduce   from the last bucket's hand-off until backward returns: the
           allreduce time that backward did not hide, waiting for the slowest
           rank (and for rank 0's evaluations) included. With one bucket (the
           mlp's 0.94 MB is under DDP's 25 MB bucket cap) nothing overlaps and
           this is the whole allreduce; with several, earlier buckets overlap
           backward and that overlapped part counts as compute.
  wait, pull, push   zero: DDP has no such phases.
  step     data + compute + reduce.

The hook is PyTorch's own allreduce_hook (divide by the world size,
allreduce), called from Python instead of DDP's built-in C++ path: the same
collective, plus one Python call per bucket and step.

Traffic: bytes_sent_per_step and bytes_received_per_step are measured, per
rank, as the growth from the first step to the end of the last of the
kernel's byte counters (TCP_INFO: tcpi_bytes_sent less retransmissions,
tcpi_bytes_received) summed over the rank's TCP sockets, over the steps
(step 0 included), then averaged over the ranks. They count gloo's payload and its framing, not TCP/IP headers; the
rendezvous store is idle while training. Where the counters cannot be read
they are 0 and "notes" says so.

train_seconds is, per rank, from leaving a barrier after process-group init,
data loading and DDP construction to the end of its last step (rank 0: of its
final evaluation); the run's is the largest. samples counts every rank's
samples (the last short batch as it is).

Prints one JSON object with the keys of bench/record.go's Record (peer
"pytorch-ddp-gloo", mode "ddp") with --json, else a summary. Extra keys:
backend, threads, notes. Exits nonzero, naming the cause, when torch or the
data is missing or a rank fails; then it stops the other ranks. Collectives
and init time out after --timeout seconds. Needs Debian's python3-torch
(PyTorch 1.13, CPU, gloo); run it with /usr/bin/python3.
"""
import argparse
import json
import math
import os
import socket
import sys
import tempfile
import time

from peerlib import add_training_args, blas_name, check_training_args, free_port, run_children, set_threads, \
    write_result
from peerlib import main as peer_main

PEER = "pytorch-ddp-gloo"
PROG = "torch_ddp.py"
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
TRAIN_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801
SIDE, CLASSES = 28, 10
# Shoal's data.FashionMNISTMean and FashionMNISTStd.
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530
EVAL_BATCH = 1000  # Shoal's worker.Evaluate batch
DATA_HINT = "; install it with `apt-get install dataset-fashion-mnist` or pass --data"


def fail(msg):
    sys.exit("%s: %s" % (PROG, msg))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="DDP processes")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    add_training_args(p, "256,128", "rank", DEFAULT_DATA)
    p.add_argument("--eval-every", type=int, default=0, help="rank 0 evaluates every that many steps (0: only at the end)")
    p.add_argument("--target-accuracy", type=float, default=0.0, help="test accuracy to time (0: none)")
    p.add_argument("--stop-at-accuracy", type=float, default=0.0,
                   help="with --eval-every: stop once rank 0 measures this test accuracy (0: never); rank 0 broadcasts the decision")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for process-group init and each collective")
    args = p.parse_args(argv)
    bad = []
    if args.eval_every < 0:
        bad.append("--eval-every >= 0")
    if not 0 <= args.target_accuracy <= 1:
        bad.append("--target-accuracy in [0, 1]")
    if not 0 <= args.stop_at_accuracy <= 1:
        bad.append("--stop-at-accuracy in [0, 1]")
    if args.stop_at_accuracy > 0 and not args.eval_every:
        bad.append("--eval-every > 0 with --stop-at-accuracy")
    check_training_args(p, args, bad, "256,128")
    return args


# ---- data -----------------------------------------------------------------

def find_idx(folder, base):
    for path in (os.path.join(folder, base), os.path.join(folder, base + ".gz")):
        if os.path.isfile(path):
            return path
    raise FileNotFoundError("neither %s nor %s.gz in %s%s" % (base, base, folder, DATA_HINT))


def read_idx(path, magic):
    """The dims and bytes of one idx file, checked as Shoal checks them."""
    import gzip
    import struct
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise ValueError("%s: %s" % (path, e)) from e
    if len(raw) < 4:
        raise ValueError("%s: %d bytes, want an idx header" % (path, len(raw)))
    (got,) = struct.unpack(">I", raw[:4])
    if got != magic:
        raise ValueError("%s: magic 0x%08x, want 0x%08x" % (path, got, magic))
    ndim = magic & 0xFF
    head = 4 + 4 * ndim
    if len(raw) < head:
        raise ValueError("%s: truncated header" % path)
    dims = list(struct.unpack(">%dI" % ndim, raw[4:head]))
    want = head + math.prod(dims)
    if len(raw) != want:
        raise ValueError("%s: %d bytes, want %d as its header %s promises" % (path, len(raw), want, dims))
    return dims, raw[head:]


def load_set(torch, folder, images_base, labels_base):
    """uint8 images [n, 784] and int64 labels [n]."""
    ipath, lpath = find_idx(folder, images_base), find_idx(folder, labels_base)
    idims, ibytes = read_idx(ipath, IMAGES_MAGIC)
    ldims, lbytes = read_idx(lpath, LABELS_MAGIC)
    if idims[1:] != [SIDE, SIDE]:
        raise ValueError("%s: images are %dx%d, want %dx%d" % (ipath, idims[1], idims[2], SIDE, SIDE))
    if ldims[0] != idims[0] or idims[0] == 0:
        raise ValueError("%s holds %d images and %s %d labels, want as many (and some)" % (ipath, idims[0], lpath, ldims[0]))
    x = torch.frombuffer(bytearray(ibytes), dtype=torch.uint8).view(idims[0], SIDE * SIDE)
    y = torch.frombuffer(bytearray(lbytes), dtype=torch.uint8).long()
    if int(y.max()) >= CLASSES:
        raise ValueError("%s: a label >= %d" % (lpath, CLASSES))
    return x, y


def batches(torch, sampler, batch):
    """The index batches of an endless run of epochs: the sampler's order,
    reseeded with each epoch, in batches of batch, the last short batch of
    an epoch kept. A new epoch's permutation is drawn when its first batch
    is asked for."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler)), dtype=torch.long)
        for pos in range(0, len(order), batch):
            yield order[pos:pos + batch]
        epoch += 1


def training_share(torch, args, rank, ranks):
    """What rank of ranks trains on: the training images and labels, the
    pixel table, the generator of its index batches (its
    DistributedSampler's, see batches) and how many steps it runs (--steps,
    or --epochs over its share)."""
    from torch.utils.data.distributed import DistributedSampler
    train_x, train_y = load_set(torch, args.data, *TRAIN_FILES)
    sampler = DistributedSampler(range(train_x.shape[0]), num_replicas=ranks, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=False)
    total = args.steps if args.steps is not None else args.epochs * math.ceil(len(sampler) / args.batch)
    return train_x, train_y, pixel_table(torch, args.norm), batches(torch, sampler, args.batch), total


def evaluate(torch, model, test_x, test_y, lut):
    """Accuracy and mean cross-entropy of model on the whole test set, in
    batches of EVAL_BATCH."""
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for i in range(0, test_x.shape[0], EVAL_BATCH):
            x = lut[test_x[i:i + EVAL_BATCH].long()].view(-1, 1, SIDE, SIDE)
            y = test_y[i:i + EVAL_BATCH]
            out = model(x)
            loss_sum += torch.nn.functional.cross_entropy(out, y, reduction="sum").item()
            correct += int((out.argmax(1) == y).sum())
    return correct / test_x.shape[0], loss_sum / test_x.shape[0]


def pixel_table(torch, norm):
    """The float32 of each byte value, computed in float64 as Shoal does."""
    if norm == "unit":
        vals = [p / 255 for p in range(256)]
    else:
        vals = [(p / 255 - FASHION_MEAN) / FASHION_STD for p in range(256)]
    return torch.tensor(vals, dtype=torch.float64).float()


# ---- model ----------------------------------------------------------------

def build(torch, args):
    """Shoal's model, with Shoal's init distribution."""
    nn = torch.nn
    if args.model == "mlp":
        widths = [SIDE * SIDE] + args.hidden_widths
        layers = [nn.Flatten()]
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], CLASSES))
        model = nn.Sequential(*layers)
    else:
        model = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, CLASSES),
        )
    mods = list(model)
    with torch.no_grad():
        for i, m in enumerate(mods):
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                fan_in = m.weight[0].numel()
                relu = i + 1 < len(mods) and isinstance(mods[i + 1], nn.ReLU)
                bound = math.sqrt(6 / fan_in) if relu else 1 / math.sqrt(fan_in)
                m.weight.uniform_(-bound, bound)
                m.bias.zero_()
    return model


# ---- traffic --------------------------------------------------------------

def tcp_bytes():
    """(sent, received) payload bytes over all of this process's TCP sockets
    since each was opened, from the kernel's TCP_INFO (tcpi_bytes_sent less
    tcpi_bytes_retrans, or tcpi_bytes_acked before Linux 4.19, and
    tcpi_bytes_received); None when it cannot be read."""
    import struct
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    sent = received = 0
    for name in fds:
        try:
            if not os.readlink("/proc/self/fd/" + name).startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue  # closed meanwhile, or not a socket Python knows
        try:
            if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        except OSError:
            return None
        finally:
            s.close()
        if len(info) < 136:
            return None
        acked, rcvd = struct.unpack_from("=QQ", info, 120)
        if len(info) >= 216:
            # bytes_sent counts retransmissions (tail-loss probes happen on
            # a loaded loopback too); bytes_retrans is their part.
            out, retrans = struct.unpack_from("=QQ", info, 200)
            sent += out - retrans
        else:
            sent += acked
        received += rcvd
    return sent, received


# ---- one rank -------------------------------------------------------------

def rank_main(args):
    set_threads(args.threads)
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = args.rank, args.workers
    if not dist.is_available() or not dist.is_gloo_available():
        raise RuntimeError("this PyTorch (%s) has no gloo backend" % torch.__version__)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))

    train_x, train_y, lut, next_batch, total = training_share(torch, args, rank, world)
    test_x = test_y = None
    if rank == 0:
        test_x, test_y = load_set(torch, args.data, *TEST_FILES)

    torch.manual_seed(args.seed)
    model = build(torch, args)
    params = sum(p.numel() for p in model.parameters())
    ddp = DDP(model)  # broadcasts rank 0's weights
    handoffs = []

    def timed_allreduce(state, bucket):
        handoffs.append(time.perf_counter())
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, timed_allreduce)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()

    phases = {"step": [], "data": [], "compute": [], "reduce": [], "optimizer": []}
    curve = []
    samples = 0
    dist.barrier()
    io0 = tcp_bytes()
    start = time.perf_counter()
    eval_spent = 0.0
    for step in range(1, total + 1):
        t0 = time.perf_counter()
        idx = next(next_batch)
        x = lut[train_x[idx].long()].view(-1, 1, SIDE, SIDE)
        y = train_y[idx]
        t1 = time.perf_counter()
        handoffs.clear()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        samples += len(idx)
        if step > 1:
            last = handoffs[-1] if handoffs else t2
            phases["step"].append(t3 - t0)
            phases["data"].append(t1 - t0)
            phases["compute"].append((last - t1) + (t3 - t2))
            phases["reduce"].append(t2 - last)
            phases["optimizer"].append(t3 - t2)
        if step == total:
            io1 = tcp_bytes()
        reached = False
        if rank == 0 and ((args.eval_every and step % args.eval_every == 0) or step == total):
            t_eval = time.perf_counter()
            acc, tl = evaluate(torch, model, test_x, test_y, lut)
            # The curve's clock leaves the evaluations out, as Shoal's does.
            curve.append({"seconds": t_eval - start - eval_spent, "step": step, "accuracy": acc, "loss": tl})
            eval_spent += time.perf_counter() - t_eval
            reached = args.stop_at_accuracy > 0 and acc >= args.stop_at_accuracy
        if args.stop_at_accuracy > 0 and step % args.eval_every == 0 and step < total:
            # Every rank takes part, so all stop after the same step.
            flag = torch.tensor([1.0 if reached else 0.0])
            dist.broadcast(flag, 0)
            if flag.item() > 0:
                io1 = tcp_bytes()
                total = step
                break
    seconds = time.perf_counter() - start
    dist.barrier()
    dist.destroy_process_group()

    traffic = None
    if io0 is not None and io1 is not None:
        traffic = {"sent": io1[0] - io0[0], "received": io1[1] - io0[1]}
    result = {
        "rank": rank, "steps": total, "samples": samples, "seconds": seconds, "phases": phases,
        "traffic": traffic, "curve": curve, "parameters": params, "threads": args.threads,
        "backend": "torch-%s/%s" % (torch.__version__, blas_name()),
    }
    write_result(args.result, result)


# ---- the launcher ---------------------------------------------------------

def quantiles(xs):
    """mean, p50, p95 (linear interpolation, as numpy.percentile)."""
    if not xs:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0}
    s = sorted(xs)

    def q(p):
        h = (len(s) - 1) * p
        lo = math.floor(h)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (h - lo)

    return {"mean": sum(s) / len(s), "p50": q(0.5), "p95": q(0.95)}


def preflight(args, fail):
    """Checks that PyTorch and the dataset are there (fail says what is
    not) and returns a free port on 127.0.0.1 for the processes to meet."""
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        fail("PyTorch is not installed for %s: install Debian's python3-torch and run this with /usr/bin/python3"
             % sys.executable)
    if not os.path.isdir(args.data):
        fail("dataset folder %s: not a directory%s" % (args.data, DATA_HINT))
    try:
        for base in TRAIN_FILES + TEST_FILES:
            find_idx(args.data, base)
    except FileNotFoundError as e:
        fail("fashion-mnist: %s" % e)
    return free_port()


def launch(args, argv):
    port = preflight(args, fail)
    tmpdir = tempfile.TemporaryDirectory(prefix="torch_ddp.")
    script = os.path.abspath(__file__)
    cmds, envs, results = [], [], []
    for r in range(args.workers):
        envs.append(dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                         WORLD_SIZE=str(args.workers)))
        results.append(os.path.join(tmpdir.name, "rank%d.json" % r))
        cmds.append([sys.executable, script] + argv + ["--rank", str(r), "--result", results[r]])
    run_children(cmds, envs, ["rank %d of %d" % (r, args.workers) for r in range(args.workers)], fail)
    per_rank = []
    for r, path in enumerate(results):
        try:
            with open(path) as f:
                per_rank.append(json.load(f))
        except (OSError, ValueError) as e:
            fail("rank %d exited without its result: %s" % (r, e))
    tmpdir.cleanup()
    return per_rank


def record(args, per_rank, command):
    r0 = per_rank[0]
    notes = [
        "compute = forward + backward until DDP hands the last gradient bucket to allreduce, plus the optimizer "
        "step (step_time.optimizer alone); reduce = from that hand-off until backward returns, waiting for the "
        "slowest rank and for rank 0's evaluations included; with several buckets the overlapped allreduce counts "
        "as compute",
        "data is synchronous (indices, gather, pixel table); wait, pull and push do not apply and are 0",
        "constant lr, no warm-up or decay; rank 0's evaluations count in train_seconds but not in the curve's seconds",
    ]
    traffic = [p["traffic"] for p in per_rank]
    steps = max(p["steps"] for p in per_rank)
    if all(t is not None for t in traffic):
        sent = sum(t["sent"] for t in traffic) / len(traffic) / steps
        received = sum(t["received"] for t in traffic) / len(traffic) / steps
        notes.append("bytes per step: growth of the kernel's TCP_INFO byte counters summed over each rank's TCP "
                     "sockets from the first step to the end of the last (gloo's payload and framing; no TCP/IP "
                     "headers, no retransmissions), over the steps, mean over the ranks")
    else:
        sent = received = 0.0
        notes.append("bytes per step: not measured (TCP_INFO byte counters unavailable), reported as 0")
    ph = {k: [v for p in per_rank for v in p["phases"][k]] for k in per_rank[0]["phases"]}
    step_time = {k: quantiles(ph.get(k, [])) for k in ("step", "compute", "data", "wait", "pull", "push", "reduce")}
    step_time["optimizer"] = quantiles(ph["optimizer"])
    train_seconds = max(p["seconds"] for p in per_rank)
    samples = sum(p["samples"] for p in per_rank)
    mean_step = step_time["step"]["mean"]
    idle = min(1.0, max(0.0, 1 - step_time["compute"]["mean"] / mean_step)) if mean_step > 0 else 0.0
    curve = r0["curve"]
    rec = {
        "id": "%s/%s/ddp/w%d/s0" % (PEER, args.model, args.workers),
        "peer": PEER,
        "command": command,
        "mode": "ddp",
        "model": args.model,
        "parameters": r0["parameters"],
        "vector_bytes": 4 * r0["parameters"],
        "workers": args.workers,
        "servers": 0,
        "batch": args.batch,
        "seed": args.seed,
        "optimizer": "momentum" if args.momentum > 0 else "sgd",
        "lr": args.lr,
        "nic_gbps": 0,
        "rtt_ms": 0,
        "steps": steps,
        "samples": samples,
        "train_seconds": train_seconds,
        "samples_per_sec": samples / train_seconds if train_seconds > 0 else 0.0,
        "step_time": step_time,
        "idle_fraction": idle,
        "bytes_sent_per_step": sent,
        "bytes_received_per_step": received,
        "curve": curve,
        "test_accuracy": curve[-1]["accuracy"] if curve else -1,
    }
    if args.target_accuracy > 0:
        rec["target_accuracy"] = args.target_accuracy
        hit = next((c for c in curve if c["accuracy"] >= args.target_accuracy), None)
        if hit is not None:
            rec["seconds_to_target"] = hit["seconds"]
            rec["steps_to_target"] = hit["step"]
    rec["backend"] = r0["backend"]
    rec["threads"] = r0["threads"]
    rec["notes"] = notes
    return rec


def summary(rec):
    st = rec["step_time"]
    ms = lambda q: "%.2f/%.2f ms" % (1e3 * q["mean"], 1e3 * q["p95"])  # noqa: E731
    lines = [
        "%s: %s %d params, %d workers x batch %d, %s lr %g, %d threads each, %s" % (
            rec["id"], rec["model"], rec["parameters"], rec["workers"], rec["batch"], rec["optimizer"], rec["lr"],
            rec["threads"], rec["backend"]),
        "trained %d steps, %d samples in %.2f s: %.0f samples/s" % (
            rec["steps"], rec["samples"], rec["train_seconds"], rec["samples_per_sec"]),
        "step (mean/p95) %s: data %s, compute %s (optimizer %s), reduce %s; idle %.1f%%" % (
            ms(st["step"]), ms(st["data"]), ms(st["compute"]), ms(st["optimizer"]), ms(st["reduce"]),
            100 * rec["idle_fraction"]),
        "traffic per step and worker: sent %.0f B, received %.0f B" % (
            rec["bytes_sent_per_step"], rec["bytes_received_per_step"]),
    ]
    for c in rec["curve"]:
        lines.append("  step %6d  %8.2f s  test accuracy %.2f%%  loss %.4f" % (
            c["step"], c["seconds"], 100 * c["accuracy"], c["loss"]))
    if "target_accuracy" in rec:
        if "seconds_to_target" in rec:
            lines.append("target %.2f%% reached at step %d, %.2f s" % (
                100 * rec["target_accuracy"], rec["steps_to_target"], rec["seconds_to_target"]))
        else:
            lines.append("target %.2f%% not reached" % (100 * rec["target_accuracy"]))
    lines.append("test accuracy %.2f%%" % (100 * rec["test_accuracy"]))
    return "\n".join(lines)


def main():
    peer_main(PROG, parse_args, rank_main, lambda r: "rank %d" % r, launch, record, summary)


if __name__ == "__main__":
    main()
