"""DistributedOptimizer (horovod.torch.optimizer) over Shoal's ring.

The wrapped optimizer's class is subclassed at run time, as Horovod does, so
isinstance checks and the optimizer's own step() keep working. A hook on
each parameter's gradient accumulator counts the backward passes; once a
parameter has had backward_passes_per_step of them its gradient is ready.
Parameters are cut, in reverse order (the order backward produces them),
into fusion buckets of at most SHOAL_FUSION_THRESHOLD bytes (else
HOROVOD_FUSION_THRESHOLD, default 25 MiB; the first at most 1 MiB) of one
dtype; a bucket's allreduce is queued as soon as all its gradients are
ready, so communication overlaps the rest of backward. Each bucket is one
flat tensor kept between steps, and the gradients of its contiguous CPU
parameters are views into it (DDP's gradient_as_bucket_view): backward
accumulates into the bucket, the ring reduces it in place, and step() reads
the result there, with no copy in or out. A gradient that is not such a view
(the first step, or after zero_grad(set_to_none=True)) is copied in once and
replaced by its view. synchronize() (called by step()) queues the buckets
still waiting (a missing gradient counts as zeros), waits for all of them and
writes the results into the gradients that are not views.

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
# PyTorch API", has the measurement). The first bucket (the last layers,
# whose gradients backward produces first) is capped at 1 MiB, as DDP's is,
# so the first reduction starts as early in backward as it can.
DEFAULT_FUSION_BYTES = 25 << 20
FIRST_BUCKET_BYTES = 1 << 20


_OP_NAMES = {mpi_ops.Sum: "hvd.Sum", mpi_ops.Adasum: "hvd.Adasum"}


class _Bucket:
    """A fusion bucket: its parameters, their flat buffer (kept between
    steps), and per parameter its offset and, for a contiguous parameter,
    the view of the buffer that becomes its gradient."""

    __slots__ = ("index", "params", "ready", "handle", "flat", "ctx", "launched", "buf", "offsets", "views")

    def __init__(self, index, params):
        self.index, self.params = index, params
        self.ready, self.handle, self.flat, self.ctx, self.launched = 0, None, None, None, False
        self.offsets, off = [], 0
        for p in params:
            self.offsets.append(off)
            off += p.numel()
        self.buf = torch.zeros(off, dtype=params[0].dtype, device=params[0].device)
        self.views = [self.buf[o:o + p.numel()].view_as(p) if p.is_contiguous() else None
                      for o, p in zip(self.offsets, params)]

    def gather(self):
        """Brings every gradient into buf (zeros for a missing one) and makes
        each contiguous parameter's gradient its view; a gradient already
        its view (every step after the first, unless zero_grad set it to
        None) costs nothing."""
        with torch.no_grad():
            for p, off, v in zip(self.params, self.offsets, self.views):
                g = p.grad
                if v is not None and g is not None and g.data_ptr() == v.data_ptr() and g.shape == v.shape:
                    continue
                dst = self.buf[off:off + p.numel()]
                if g is None:
                    dst.zero_()
                else:
                    dst.copy_(g.detach().reshape(-1))
                if v is not None:
                    p.grad = v

    def scatter(self, out):
        """Writes the reduced out into the gradients that are not views of
        buf (all of them when out is not buf itself)."""
        in_place = out.data_ptr() == self.buf.data_ptr() and out.device == self.buf.device
        with torch.no_grad():
            for p, off, v in zip(self.params, self.offsets, self.views):
                if in_place and v is not None and p.grad is not None and p.grad.data_ptr() == v.data_ptr():
                    continue
                chunk = out[off:off + p.numel()].view_as(p).to(device=p.device, dtype=p.dtype)
                if p.grad is None:
                    p.grad = chunk.clone()
                else:
                    p.grad.copy_(chunk)


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
        first = min(limit, int(os.environ.get("SHOAL_FIRST_BUCKET_BYTES", FIRST_BUCKET_BYTES)))
        cur, cur_bytes = [], 0
        for p in reversed(params):
            nb = p.numel() * p.element_size()
            cap = first if not self._buckets else limit
            if cur and (cur_bytes + nb > cap or p.dtype != cur[0].dtype or p.device != cur[0].device):
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
        """Brings bucket b's gradients into its buffer and queues their allreduce."""
        b.gather()
        flat = b.buf
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
            b.scatter(out)
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
