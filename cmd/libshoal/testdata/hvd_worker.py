"""One rank of libshoal's tests (libshoal_test.go): a Horovod-style script
on shoal.torch. argv[1] is the mode; the rank's identity comes from the
environment. It prints one JSON line on success; on a collective failure it
prints {"error": ...} and exits 3.

ops:   allreduce (ops, dtypes, compression, async), broadcast, allgather with
       varying first dims, broadcast_object, allgather_object, barrier, and a
       mismatched collective; prints what it computed for the test to check.
train: a small model, SGD through DistributedOptimizer; argv[2] is the
       global batch (each rank takes its share of it), argv[3] the fusion
       threshold in bytes, argv[4] backward_passes_per_step, argv[5] the
       compression (none, fp16, bf16), argv[6] the op (average, adasum);
       prints the final parameters.
localref: what train computes on parameter servers with local steps, in
       one process: argv[3] simulated ranks from rank 0's initial weights,
       each with its own SGD state on its share of argv[2], every argv[4]
       steps and after the last the weights set to the ranks' mean (the outer SGD at lr 1
       without momentum); prints the final parameters.
die:   rank argv[2] exits after one allreduce; the others go on and must fail.
stall: rank argv[2] stops issuing collectives for $STALL_SECONDS; the others
       must fail at the collective timeout, before it is back.
syncbn: hvd.SyncBatchNorm on each rank's share of a batch against torch's
       BatchNorm2d on the whole batch; prints the largest differences.
"""

import json
import os
import sys
import time

import torch

import shoal.torch as hvd


def ops():
    r, n = hvd.rank(), hvd.size()
    out = {"rank": r, "size": n, "local_rank": hvd.local_rank(), "local_size": hvd.local_size()}
    x = torch.arange(6, dtype=torch.float32) * (r + 1)
    out["avg"] = hvd.allreduce(x, name="x").tolist()
    out["sum"] = hvd.allreduce(x, name="x", op=hvd.Sum).tolist()
    out["max"] = hvd.allreduce(x, op=hvd.Max).tolist()
    out["min"] = hvd.allreduce(x, op=hvd.Min).tolist()
    out["fp16"] = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16).tolist()
    out["half"] = hvd.allreduce(x.half(), op=hvd.Sum).float().tolist()
    out["f64"] = hvd.allreduce(torch.tensor([1e-17 * (r + 1), 1.0], dtype=torch.float64), op=hvd.Sum).tolist()
    out["i64"] = hvd.allreduce(torch.tensor([2 ** 40 + r], dtype=torch.int64), op=hvd.Sum).tolist()
    out["scaled"] = hvd.allreduce(torch.ones(3), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25).tolist()
    y = torch.full((4,), float(r))
    h = hvd.allreduce_async_(y, name="y", op=hvd.Sum)
    z = torch.full((2, 3), float(r)).t()  # not contiguous
    hz = hvd.allreduce_async_(z, name="z", op=hvd.Sum)
    hvd.synchronize(h)
    hvd.synchronize(hz)
    out["inplace"], out["strided"] = y.tolist(), z.tolist()
    b = torch.full((3,), float(r))
    hvd.broadcast_(b, root_rank=n - 1, name="b")
    out["bcast"] = b.tolist()
    out["gather"] = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int32)).tolist()
    parts = [torch.full((j + 1, 2), 100 * r + j, dtype=torch.int64) for j in range(n)]
    got, got_splits = hvd.alltoall(torch.cat(parts), splits=[j + 1 for j in range(n)])
    out["alltoall"], out["alltoall_splits"] = got.tolist(), got_splits.tolist()
    out["reducescatter"] = hvd.reducescatter(torch.arange(2 * n + 1, dtype=torch.float32).reshape(-1, 1) * (r + 1),
                                             op=hvd.Sum).reshape(-1).tolist()
    out["bobj"] = hvd.broadcast_object({"from": r, "list": [1, 2]}, root_rank=0)
    out["gobj"] = hvd.allgather_object("rank%d" % r)
    hvd.barrier()
    try:
        hvd.allreduce(torch.zeros(4 + r), name="mismatch.%d" % (r % 2))
        out["mismatch"] = "no error"
    except hvd.HorovodInternalError as e:
        out["mismatch"] = str(e)
    out["after_mismatch"] = hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist()
    try:
        hvd.allreduce(torch.zeros(2, dtype=torch.complex64))
        out["complex"] = "no error"
    except TypeError as e:
        out["complex"] = str(e)
    return out


class Net(torch.nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, hidden)
        self.fc2 = torch.nn.Linear(hidden, 4)
        self.fc3 = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def train(global_batch, fusion, passes, compression="none", op="average"):
    os.environ["SHOAL_FUSION_THRESHOLD"] = str(fusion)
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(1000 + r)  # ranks start apart: broadcast_parameters must fix it
    model = Net(17 if os.environ.get("WIDER_RANK") == str(r) else 16)
    g = torch.Generator().manual_seed(7)
    X = torch.randn(512, 8, generator=g)
    Y = X[:, :1] * 0.5 - X[:, 1:2] + 0.1 * torch.randn(512, 1, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), backward_passes_per_step=passes,
                                   compression=getattr(hvd.Compression, compression),
                                   op={"average": hvd.Average, "adasum": hvd.Adasum}[op])
    if os.environ.get("SKIP_BROADCAST") != "1":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    share = global_batch // n
    micro = share // passes
    steps = 12
    # REPORT_PSEUDO=1 (with local steps): the largest |pseudo-gradient| of
    # each push, read from the exchange after it pushed.
    pseudo = []

    def note_push():
        ex = getattr(opt, "_ps", None)
        if os.environ.get("REPORT_PSEUDO") == "1" and ex is not None and ex.h and ex.pending == 0:
            pseudo.append(ex.upd.abs().max().item())

    for s in range(steps):
        base = (s * global_batch) % 512
        opt.zero_grad(set_to_none=os.environ.get("ZERO_TO_NONE") == "1")
        for k in range(passes):
            lo = base + r * share + k * micro
            # each micro-batch's mean loss, divided by passes: the sum over
            # passes is the mean over the rank's share
            loss = torch.nn.functional.mse_loss(model(X[lo:lo + micro]), Y[lo:lo + micro]) / passes
            loss.backward()
        if os.environ.get("SYNC_THEN_STEP") == "1":
            # Horovod's pattern for gradient clipping
            opt.synchronize()
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        note_push()
    if os.environ.get("PUSH_AT_END") == "1":
        pending = getattr(opt, "_ps", None) is not None and opt._ps.pending
        opt.push_local_steps()  # the last, partial round of local steps
        if pending:
            note_push()
    return {"rank": r, "size": n, "params": {k: v.reshape(-1).tolist() for k, v in model.state_dict().items()},
            "buckets": len(opt._buckets), "ps": opt.ps_stats(), "grad_views": grad_views(opt),
            "pseudo_max": pseudo}


def grad_views(opt):
    """How many parameters' gradients lie in their fusion bucket's buffer
    (DistributedOptimizer's gradient-as-bucket-view)."""
    n = 0
    for b in opt._buckets:
        lo = b.buf.data_ptr()
        hi = lo + b.buf.numel() * b.buf.element_size()
        n += sum(1 for p in b.params if p.grad is not None and lo <= p.grad.data_ptr() < hi)
    return n


def localref(global_batch, n, h):
    import copy
    torch.manual_seed(1000)  # rank 0's model, which every rank begins from
    start = Net(16)
    g = torch.Generator().manual_seed(7)
    X = torch.randn(512, 8, generator=g)
    Y = X[:, :1] * 0.5 - X[:, 1:2] + 0.1 * torch.randn(512, 1, generator=g)
    models = [copy.deepcopy(start) for _ in range(n)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in models]
    share = global_batch // n
    for s in range(12):
        base = (s * global_batch) % 512
        for r in range(n):
            lo = base + r * share
            opts[r].zero_grad()
            torch.nn.functional.mse_loss(models[r](X[lo:lo + share]), Y[lo:lo + share]).backward()
            opts[r].step()
        if (s + 1) % h == 0 or s == 11:  # the last, partial round pushed too (PUSH_AT_END)
            with torch.no_grad():
                for ps in zip(*(m.parameters() for m in models)):
                    mean = sum(p.detach() for p in ps) / n
                    for p in ps:
                        p.copy_(mean)
    return {"params": {k: v.reshape(-1).tolist() for k, v in models[0].state_dict().items()}}


def die(victim):
    r = hvd.rank()
    hvd.allreduce(torch.ones(8), name="warmup")
    if r == victim:
        os._exit(7)
    for i in range(100):
        hvd.allreduce(torch.ones(1 << 16), name="after.%d" % i)
    return {"rank": r, "error": None}


def stall(victim):
    r = hvd.rank()
    hvd.allreduce(torch.ones(8), name="warmup")
    if r == victim:
        time.sleep(float(os.environ["STALL_SECONDS"]))  # a rank stuck in its own work
        os._exit(7)
    hvd.allreduce(torch.ones(1 << 16), name="stalled")
    return {"rank": r, "error": None}


def syncbn():
    """hvd.SyncBatchNorm on each rank's share of a batch (uneven shares)
    against torch's BatchNorm2d on the whole batch: outputs, input
    gradients, running statistics after two steps, the weight and bias
    gradients summed over the ranks, and eval mode; returns the largest
    differences."""
    r, n = hvd.rank(), hvd.size()
    g = torch.Generator().manual_seed(3)
    counts = [2 + k for k in range(n)]
    lo, hi = sum(counts[:r]), sum(counts[:r + 1])
    ref, sbn = torch.nn.BatchNorm2d(4, momentum=0.3), hvd.SyncBatchNorm(4, momentum=0.3)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(4, generator=g))
        ref.bias.copy_(torch.randn(4, generator=g))
        sbn.load_state_dict(ref.state_dict())
    diff = {"y": 0.0, "dx": 0.0}
    for step in range(2):
        X = torch.randn(sum(counts), 4, 3, 5, generator=g) * 2 + 1
        G = torch.randn(X.shape, generator=g)
        for m in (ref, sbn):
            m.zero_grad()
        xr = X.clone().requires_grad_()
        (ref(xr) * G).sum().backward()
        xs = X[lo:hi].clone().requires_grad_()
        ys = sbn(xs)
        (ys * G[lo:hi]).sum().backward()
        with torch.no_grad():
            want = torch.nn.functional.batch_norm(X, None, None, ref.weight, ref.bias, True, 0.0, ref.eps)[lo:hi]
        diff["y"] = max(diff["y"], (ys.detach() - want).abs().max().item())
        diff["dx"] = max(diff["dx"], (xs.grad - xr.grad[lo:hi]).abs().max().item())
    diff["running_mean"] = (sbn.running_mean - ref.running_mean).abs().max().item()
    diff["running_var"] = (sbn.running_var - ref.running_var).abs().max().item()
    diff["dweight"] = (hvd.allreduce(sbn.weight.grad, op=hvd.Sum) - ref.weight.grad).abs().max().item()
    diff["dbias"] = (hvd.allreduce(sbn.bias.grad, op=hvd.Sum) - ref.bias.grad).abs().max().item()
    diff["batches_tracked"] = int(sbn.num_batches_tracked)
    ref.eval()
    sbn.eval()
    X = torch.randn(sum(counts), 4, 3, 5, generator=g)
    with torch.no_grad():
        diff["eval"] = (sbn(X[lo:hi]) - ref(X)[lo:hi]).abs().max().item()
    return {"rank": r, "size": n, "diff": diff}


def main():
    hvd.init()
    mode = sys.argv[1]
    try:
        if mode == "ops":
            out = ops()
        elif mode == "train":
            out = train(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:7])
        elif mode == "localref":
            out = localref(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        elif mode == "die":
            out = die(int(sys.argv[2]))
        elif mode == "stall":
            out = stall(int(sys.argv[2]))
        elif mode == "syncbn":
            out = syncbn()
        else:
            raise SystemExit("unknown mode " + mode)
    except hvd.HorovodInternalError as e:
        print(json.dumps({"rank": hvd.rank(), "error": str(e)}), flush=True)
        os._exit(3)
    print(json.dumps(out), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
