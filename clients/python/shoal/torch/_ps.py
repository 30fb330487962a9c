"""DistributedOptimizer on Shoal's parameter servers (SHOAL_MODE=async,
sync or ssp, which `shoal run --mode` sets).

What a step computes: the script's own optimizer runs on every rank, on the
weights the rank pulled, with the rank's own gradient; the rank pushes the
update it made, negated (weights before minus weights after its step), and
the shards, which run plain SGD at learning rate 1, apply it: sync shards
apply the mean of the ranks' updates once per step, async shards each
update as it comes, SSP shards each update divided by the number of
workers. The optimizer's state (momentum buffers, Adam's moments) stays on
each rank. For SGD with or without momentum, Nesterov and weight decay,
whose update is linear in the gradient, the mean of the ranks' updates is
the update of their mean gradient, so sync mode computes what the ring
computes; for Adam and other optimizers that are not linear it is the mean
of each rank's step (as in local SGD), not a step on the mean gradient.
Learning-rate schedulers work as on one process: the step is the rank's.

With SHOAL_LOCAL_STEPS=H (shoal run --local-steps H: low-communication
training, DiLoCo) the script's optimizer is the inner optimizer: a rank
takes H steps on its own weights and pushes only then, the pseudo-gradient
(the weights it pulled minus its own after the H steps), and the shards
apply it with the outer optimizer (--outer-optimizer, Nesterov by
default). Between pushes the model holds the rank's own weights, so an
evaluation there sees them; optimizer.push_local_steps() pushes the steps taken
since the last push now and loads the shards' weights (every rank must
call it at the same point, as any collective, since sync shards wait for
every rank's push).

The pushes travel as the DistributedOptimizer's compression= says (fp16,
bf16), or as SHOAL_COMPRESSION does (shoal run --compression none, fp16,
bf16, or int8, which is for pseudo-gradients only and needs local steps);
given both, they must agree (libshoal refuses them otherwise, naming both).

Rank 0 writes the model's tensors and initial values at its first step()
to $SHOAL_PS_INIT, where the shards wait for them; every rank then pulls
the shards' weights, so all begin at rank 0's. The exchange is one
push-pull per step, from and into one flat float32 vector in Go (libshoal,
package tensorps): nothing crosses Python per element.
"""

import ctypes
import hashlib
import json
import os

import torch

from shoal.torch import _native, mpi_ops
from shoal.torch.compression import Compression

PS_MODES = ("async", "sync", "ssp")


def mode():
    """The job's mode: SHOAL_MODE, ring when unset."""
    m = os.environ.get("SHOAL_MODE", "ring") or "ring"
    if m not in PS_MODES + ("ring",):
        raise ValueError("SHOAL_MODE=%r: want ring, async, sync or ssp" % m)
    return m


def local_steps():
    """SHOAL_LOCAL_STEPS: the steps a rank takes between pushes, 0 (unset)
    for a push every step."""
    v = os.environ.get("SHOAL_LOCAL_STEPS", "") or "0"
    try:
        h = int(v)
    except ValueError:
        h = -1
    if h < 0:
        raise ValueError("SHOAL_LOCAL_STEPS=%r: want the number of local steps between pushes, >= 0 "
                         "(shoal run --local-steps sets it)" % v)
    return h


def _encoding(compression):
    if compression in (None, Compression.none):
        return _native.COMPRESSION_NONE
    if compression is Compression.fp16:
        return _native.COMPRESSION_FP16
    if compression is Compression.bf16:
        return _native.COMPRESSION_BF16
    raise ValueError("shoal.torch: compression %r has no parameter-server encoding (want Compression.none, fp16 "
                     "or bf16)" % (compression,))


class Exchange:
    """One rank's link to the shards: the model's float32 parameters as one
    flat vector, pushed and pulled once per step."""

    def __init__(self, named_parameters, compression):
        self.params, layout = [], []
        for name, p in named_parameters:
            if not p.requires_grad:
                continue
            if p.dtype != torch.float32:
                raise TypeError("shoal.torch: on the parameter servers (SHOAL_MODE=%s) parameters are float32; %s is %s "
                                "(keep the master weights in float32, e.g. with torch.autocast)" % (mode(), name, p.dtype))
            if p.is_sparse:
                raise TypeError("shoal.torch: %s is sparse: the parameter servers hold dense tensors" % name)
            self.params.append(p)
            layout.append({"name": name, "shape": list(p.shape) or [1]})
        self.layout = json.dumps(layout).encode()
        self.n = sum(p.numel() for p in self.params)
        self.encoding = _encoding(compression)
        self.handle = 0
        # CUDA parameters are staged through pinned host memory.
        pin = any(p.is_cuda for p in self.params)
        self.dst = torch.empty(self.n, dtype=torch.float32, pin_memory=pin)
        self.upd = torch.empty(self.n, dtype=torch.float32, pin_memory=pin)
        # With local steps: the weights last pulled (the round's start) and
        # how many steps were taken since.
        self.h = local_steps()
        self.pending = 0
        self.anchor = torch.empty(self.n, dtype=torch.float32, pin_memory=pin) if self.h else None

    def _flat(self, out):
        off = 0
        with torch.no_grad():
            for p in self.params:
                k = p.numel()
                out[off:off + k].copy_(p.detach().reshape(-1))
                off += k
        return out

    def _load(self):
        off = 0
        with torch.no_grad():
            for p in self.params:
                k = p.numel()
                p.copy_(self.dst[off:off + k].view_as(p))
                off += k

    def _call(self, what, f, *args):
        err = _native.errbuf()
        if f(*args, err, _native.ERR_LEN) != 0:
            raise mpi_ops.HorovodInternalError("shoal.torch: %s: %s" % (what, _native.message(err)))

    def connect(self):
        """Rank 0 writes the model where the shards wait for it; after a
        barrier every rank joins the servers and takes their weights."""
        L = _native.lib()
        path = os.environ.get("SHOAL_PS_INIT", "")
        if mpi_ops.rank() == 0 and path:
            self._flat(self.dst)
            self._call("writing the model to SHOAL_PS_INIT=%s" % path, L.shoal_ps_write_model, path.encode(),
                       self.layout, self.dst.data_ptr(), self.n)
        # Every rank must hold the model rank 0 wrote: compare before any
        # rank joins the shards (this is the barrier after the write too).
        mine = (len(self.params), self.n, hashlib.sha256(self.layout).hexdigest()[:16])
        models = mpi_ops.allgather_object(mine, name="shoal.ps.model")
        if any(m != models[0] for m in models):
            raise mpi_ops.HorovodInternalError(
                "shoal.torch: the ranks built different models, so they cannot share parameter servers: %s"
                % "; ".join("rank %d: %d tensors, %d floats (layout %s)" % ((r,) + tuple(m)) for r, m in enumerate(models)))
        err = _native.errbuf()
        timeout_ms = int(float(os.environ.get("SHOAL_CONNECT_TIMEOUT", "60")) * 1000)
        h = L.shoal_ps_open(self.layout, self.encoding, timeout_ms, err, _native.ERR_LEN)
        if not h:
            raise mpi_ops.HorovodInternalError("shoal.torch: the parameter servers: " + _native.message(err))
        self.handle = h
        self._call("pulling the weights", L.shoal_ps_params, h, self.dst.data_ptr(), self.n)
        self._load()
        if self.h:
            self.anchor.copy_(self.dst)

    def step(self, inner_step):
        """Runs the wrapped optimizer's step on this rank, pushes its
        update and loads the weights the shards send back; with local
        steps, pushes only every H-th step (the pseudo-gradient of the H)."""
        if not self.handle:
            self.connect()  # loads rank 0's weights: the local step then starts where the shards are
        if self.h:
            result = inner_step()
            self.pending += 1
            if self.pending == self.h:
                self.flush()
            return result
        self._flat(self.upd)
        result = inner_step()
        with torch.no_grad():
            off = 0
            for p in self.params:
                k = p.numel()
                self.upd[off:off + k].sub_(p.detach().reshape(-1))  # before - after: what SGD at lr 1 subtracts
                off += k
        self._call("step", _native.lib().shoal_ps_push, self.handle, self.upd.data_ptr(), self.dst.data_ptr(), self.n)
        self._load()
        return result

    def flush(self):
        """With local steps: pushes the pseudo-gradient of the steps taken
        since the last push (anchor - weights) and loads the shards'
        weights, which begin the next round. Nothing to do without local
        steps or pending steps."""
        if not self.h or not self.pending or not self.handle:
            return
        self._flat(self.upd)
        with torch.no_grad():
            torch.sub(self.anchor, self.upd, out=self.upd)
        self._call("pushing the pseudo-gradient of %d local steps" % self.pending, _native.lib().shoal_ps_push,
                   self.handle, self.upd.data_ptr(), self.dst.data_ptr(), self.n)
        self._load()
        self.anchor.copy_(self.dst)
        self.pending = 0

    def stats(self):
        out = (ctypes.c_int64 * 6)()
        if not self.handle or _native.lib().shoal_ps_stats(self.handle, out) != 0:
            return {"steps": 0, "start_step": 0, "dropped": 0, "max_staleness": 0, "mean_staleness": 0.0}
        steps, start, dropped, worst, count, total = out
        return {"steps": steps, "start_step": start, "dropped": dropped, "max_staleness": worst,
                "mean_staleness": (total / count) if count else 0.0}

    def close(self):
        h, self.handle = self.handle, 0
        if h:
            self._call("closing", _native.lib().shoal_ps_close, h)


_open = []


def register(x):
    _open.append(x)


def close_all():
    """Closes every rank's link to the shards (hvd.shutdown)."""
    while _open:
        _open.pop().close()
