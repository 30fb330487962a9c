"""DistributedOptimizer (horovod.torch.optimizer) over Shoal's ring.

The wrapped optimizer's class is subclassed at run time, as Horovod does, so
isinstance checks and the optimizer's own step() keep working. A hook on
each parameter's gradient accumulator counts the backward passes; once a
parameter has had backward_passes_per_step of them its gradient is ready.
Parameters are cut, in reverse order (the order backward produces them),
into fusion buckets of at most SHOAL_FUSION_THRESHOLD bytes (else
HOROVOD_FUSION_THRESHOLD, default 25 MiB) of one dtype; a bucket is packed
into one flat tensor and its allreduce queued as soon as all its gradients
are ready, so communication overlaps the rest of backward. synchronize()
(called by step()) queues the buckets still waiting (a missing gradient
counts as zeros), waits for all of them and unpacks the results into the
gradients.

On the parameter servers (SHOAL_MODE=async, sync or ssp) there are no
buckets: step() runs the wrapped optimizer on this rank and exchanges its
update with the shards in one push-pull (_ps.py says what that computes).
"""

import os
import warnings
from contextlib import contextmanager

import torch

from shoal.torch import _native, _ps, mpi_ops
from shoal.torch.compression import Compression

# A bucket's allreduce starts only once all of its gradients are ready, so
# the bucket size bounds how much communication overlaps backward: with
# Horovod's 64 MiB, a model under 64 MiB (resnet18's 47 MB) was one bucket
# sent after backward. 25 MiB is DDP's default (docs/BENCHMARKS.md, "Horovod's
# PyTorch API", has the measurement).
DEFAULT_FUSION_BYTES = 25 << 20


_OP_NAMES = {mpi_ops.Sum: "hvd.Sum", mpi_ops.Adasum: "hvd.Adasum"}


class _Bucket:
    __slots__ = ("index", "params", "ready", "handle", "flat", "ctx", "launched", "buf")

    def __init__(self, index, params):
        self.index, self.params = index, params
        self.ready, self.handle, self.flat, self.ctx, self.launched = 0, None, None, None, False
        # buf is the bucket's fusion buffer, made at its first launch and
        # kept: a fresh one each step costs the allocator's page faults on
        # tens of MB (DDP keeps its buckets too)
        self.buf = None


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=mpi_ops.Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False, process_set=None):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%d" % i, v)
                                for i, v in enumerate(p for g in self.param_groups for p in g["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                             "produced by model.named_parameters().")
        names = [n for n, _ in named_parameters]
        if len(set(names)) < len(names):
            raise ValueError("Parameter names in named_parameters must be unique.")
        all_ids = {id(p) for g in self.param_groups for p in g["params"]}
        named_ids = {id(p) for _, p in named_parameters}
        if all_ids - named_ids:
            raise ValueError("named_parameters was specified, but one or more model parameters were not named.")
        if op not in (mpi_ops.Average, mpi_ops.Sum, mpi_ops.Adasum):
            raise ValueError("DistributedOptimizer: op must be hvd.Average, hvd.Sum or hvd.Adasum, got %r" % (op,))
        if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        self._ps = None
        if _ps.mode() in _ps.PS_MODES:
            if op != mpi_ops.Average:
                raise ValueError("DistributedOptimizer: op=%s has no meaning on the parameter servers (SHOAL_MODE=%s): "
                                 "sync shards apply the mean of the ranks' updates, async shards each update; use "
                                 "hvd.Average, or run with --mode ring" % (_OP_NAMES.get(op, op), _ps.mode()))
            self._ps = _ps.Exchange(named_parameters, compression)
            _ps.register(self._ps)
        if groups is not None:
            warnings.warn("shoal.torch: DistributedOptimizer(groups=...) is ignored: "
                          "buckets are formed by SHOAL_FUSION_THRESHOLD")
        self._op = op
        self._predivide = float(gradient_predivide_factor)
        self._passes = int(backward_passes_per_step)
        if self._passes < 1:
            raise ValueError("backward_passes_per_step must be at least 1")
        self._names = {id(p): n for n, p in named_parameters}
        self._synchronized = False
        self._should_synchronize = True
        self._delay = {}
        self._bucket_of = {}
        self._buckets = []
        self._grad_accs = []
        if self._ps is None and (mpi_ops.size() > 1 or os.environ.get("SHOAL_HOOKS_ON_ONE_RANK") == "1"):
            self._make_buckets([p for _, p in named_parameters if p.requires_grad])
            self._register_hooks()

    def _make_buckets(self, params):
        limit = int(os.environ.get("SHOAL_FUSION_THRESHOLD", os.environ.get("HOROVOD_FUSION_THRESHOLD",
                                                                           DEFAULT_FUSION_BYTES)))
        cur, cur_bytes = [], 0
        for p in reversed(params):
            nb = p.numel() * p.element_size()
            if cur and (cur_bytes + nb > limit or p.dtype != cur[0].dtype or p.device != cur[0].device):
                self._buckets.append(_Bucket(len(self._buckets), cur))
                cur, cur_bytes = [], 0
            cur.append(p)
            cur_bytes += nb
        if cur:
            self._buckets.append(_Bucket(len(self._buckets), cur))
        for b in self._buckets:
            for p in b.params:
                self._bucket_of[id(p)] = b
                self._delay[id(p)] = self._passes

    def _register_hooks(self):
        for b in self._buckets:
            for p in b.params:
                p_tmp = p.expand_as(p)
                grad_acc = p_tmp.grad_fn.next_functions[0][0]
                grad_acc.register_hook(self._make_hook(p))
                self._grad_accs.append(grad_acc)

    def _make_hook(self, p):
        def hook(*ignore):
            pid = id(p)
            if self._delay[pid] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before call to step(). "
                    "Increase backward_passes_per_step to accumulate gradients locally.")
            self._delay[pid] -= 1
            if self._delay[pid] == 0:
                b = self._bucket_of[pid]
                b.ready += 1
                if b.ready == len(b.params) and not b.launched:
                    self._launch(b)
        return hook

    def _launch(self, b):
        """Packs bucket b's gradients and queues their allreduce."""
        grads = [p.grad.detach().reshape(-1) if p.grad is not None
                 else torch.zeros(p.numel(), dtype=p.dtype, device=p.device) for p in b.params]
        n = sum(g.numel() for g in grads)
        if b.buf is None or b.buf.numel() != n or b.buf.dtype != grads[0].dtype or b.buf.device != grads[0].device:
            b.buf = torch.empty(n, dtype=grads[0].dtype, device=grads[0].device)
        flat = torch.cat(grads, out=b.buf) if len(grads) > 1 else b.buf.copy_(grads[0])
        op, pre, post = self._op, 1.0, 1.0
        if op == mpi_ops.Average and self._predivide != 1.0:
            op, pre, post = mpi_ops.Sum, 1.0 / self._predivide, self._predivide / mpi_ops.size()
        name = "grad.bucket.%d.%s" % (b.index, self._names[id(b.params[0])])
        wire = mpi_ops._wire_of(self._compression, flat)
        ctx = None
        if wire is None:
            flat, ctx = self._compression.compress(flat)
            wire = _native.COMPRESSION_NONE
        if flat.device.type != "cpu":
            flat = flat.cpu()
        b.flat, b.ctx, b.launched = flat, ctx, True
        b.handle = mpi_ops.allreduce_async_(flat, name=name, op=op, prescale_factor=pre, postscale_factor=post,
                                            _wire=wire)

    def synchronize(self):
        """Queues the buckets not yet queued, waits for every bucket and
        writes the reduced gradients back. On the parameter servers there
        is nothing to reduce: step() pushes (so the usual
        synchronize(); clip; with skip_synchronize(): step() pattern keeps
        its local steps)."""
        if self._ps is not None:
            return
        if not self._buckets:
            self._synchronized = True
            return
        for b in self._buckets:
            if not b.launched:
                self._launch(b)
        for b in self._buckets:
            out = mpi_ops.synchronize(b.handle)
            if b.ctx is not None or self._compression not in (None, Compression.none, Compression.fp16, Compression.bf16):
                out = self._compression.decompress(out, b.ctx)
            off = 0
            with torch.no_grad():
                for p in b.params:
                    n = p.numel()
                    chunk = out[off:off + n].view_as(p).to(device=p.device, dtype=p.dtype)
                    if p.grad is None:
                        p.grad = chunk.clone()
                    else:
                        p.grad.copy_(chunk)
                    off += n
            b.handle, b.flat, b.ctx, b.launched, b.ready = None, None, None, False, 0
        for k in self._delay:
            self._delay[k] = self._passes
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """For use after an explicit synchronize(): step() then skips it."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._ps is not None:
            return self._ps.step(lambda: super(self.__class__, self).step(closure))
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def push_local_steps(self):
        """On the parameter servers with local steps (SHOAL_LOCAL_STEPS):
        pushes the pseudo-gradient of the steps taken since the last push
        now and loads the shards' weights, e.g. before an evaluation that
        should see the shared weights. Every rank must call it at the same
        point, as a collective. Nothing to do otherwise."""
        if self._ps is not None:
            self._ps.flush()

    def ps_stats(self):
        """On the parameter servers: steps pushed, the step this rank began
        at, sync pushes dropped (backup workers) and the staleness of async
        and SSP pushes (max and mean); None in ring mode."""
        return self._ps.stats() if self._ps is not None else None

    def zero_grad(self, *args, **kwargs):
        if any(b.launched for b in self._buckets):
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it "
                                 "can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=mpi_ops.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wraps optimizer so that step() applies the gradients averaged (or
    summed, or AdaSum-combined) over all ranks. op=Adasum combines the
    gradients with AdaSum (Horovod combines the optimizer's updates)."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)
