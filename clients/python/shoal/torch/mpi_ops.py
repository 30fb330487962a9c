"""Horovod's collective operations (horovod.torch.mpi_ops) over Shoal's ring.

Every operation is queued in the native library, which runs them one at a
time in submission order on its own thread; an `_async` form returns a
handle at once, and `synchronize(handle)` waits (without holding the GIL)
and returns the output. Every rank must issue the same operations in the
same order: the library compares a descriptor (name, dtype, size, op)
before each one and fails all ranks, naming what each submitted, when they
differ. Tensors are reduced in place in their own memory when they are
contiguous CPU tensors; others (CUDA, strided) go through a contiguous CPU
copy.
"""

import ctypes
import itertools
import os
import pickle
import threading
import time

import torch

from shoal.torch import _native
from shoal.torch._native import HorovodInternalError
from shoal.torch.compression import Compression


class ReduceOp(int):
    """An allreduce op; the values are the library's."""

    _names = {}

    def __new__(cls, value, name):
        o = int.__new__(cls, value)
        cls._names[value] = name
        return o

    def __repr__(self):
        return "hvd." + self._names[int(self)]


Average = ReduceOp(0, "Average")
Sum = ReduceOp(1, "Sum")
Adasum = ReduceOp(2, "Adasum")
Min = ReduceOp(3, "Min")
Max = ReduceOp(4, "Max")
Product = ReduceOp(5, "Product")


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.handle = 0
        self.identity = (0, 1, 0, 1)
        self.ops = {}  # handle -> _Pending
        self.next = itertools.count(1)
        self.names = {}  # kind -> itertools.count, for unnamed ops


_state = _State()


def init(comm=None, process_sets=None):
    """Joins the ring: rank, size, local rank and rank 0's address come from
    the launcher's environment (SHOAL_RANK/SHOAL_WORLD_SIZE, mpirun's
    OMPI_COMM_WORLD_*, Slurm's SLURM_*, torchrun's RANK/WORLD_SIZE/
    LOCAL_RANK with MASTER_ADDR/MASTER_PORT). Calling it again is a no-op.
    SHOAL_COLLECTIVE_TIMEOUT (seconds, default 300) bounds joining and each
    collective; SHOAL_SHM=0 keeps ranks on one host on TCP."""
    if comm is not None and comm != [] and sorted(comm) != list(range(len(comm))):
        raise NotImplementedError("shoal.torch.init: sub-communicators (comm=%r) are not supported yet" % (comm,))
    if process_sets:
        raise NotImplementedError("shoal.torch.init: process sets are not supported yet")
    with _state.lock:
        if _state.handle:
            return
        L = _native.lib()
        timeout_ms = int(float(os.environ.get("SHOAL_COLLECTIVE_TIMEOUT", "300")) * 1000)
        flags = 0
        if os.environ.get("SHOAL_SHM", "1") == "0":
            flags |= _native.FLAG_NO_SHM
        if os.environ.get("SHOAL_CHECK_COLLECTIVES", "1") == "0":
            flags |= _native.FLAG_NO_CHECK
        err = _native.errbuf()
        h = L.shoal_init(-1, 0, 0, 0, None, None, timeout_ms, flags, err, _native.ERR_LEN)
        if not h:
            raise HorovodInternalError("shoal.torch.init: " + _native.message(err))
        ident = (ctypes.c_int64 * 4)()
        L.shoal_identity(h, ident)
        _state.handle, _state.identity = h, tuple(ident)
        _state.names = {}


def shutdown():
    """Leaves the ring (and the parameter servers); pending operations fail.
    init may be called again."""
    from shoal.torch import _ps
    _ps.close_all()
    with _state.lock:
        h, _state.handle = _state.handle, 0
        _state.ops.clear()
    if h:
        err = _native.errbuf()
        if _native.lib().shoal_shutdown(h, err, _native.ERR_LEN) != 0:
            raise HorovodInternalError("shoal.torch.shutdown: " + _native.message(err))


def is_initialized():
    return _state.handle != 0


def _handle():
    h = _state.handle
    if not h:
        raise ValueError("shoal.torch has not been initialized; use hvd.init().")
    return h


def size():
    _handle()
    return _state.identity[1]


def rank():
    _handle()
    return _state.identity[0]


def local_rank():
    _handle()
    return _state.identity[2]


def local_size():
    _handle()
    return _state.identity[3]


def cross_rank():
    return rank() // local_size()


def cross_size():
    return max(1, size() // local_size())


def is_homogeneous():
    return size() % local_size() == 0


def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    pass  # no timeline yet: accepted so scripts that call it run


def stop_timeline():
    pass


class _Pending:
    """What synchronize needs of an op: the op id, the buffers to keep alive,
    and how to turn the buffer into the output."""

    __slots__ = ("op", "keep", "finish")

    def __init__(self, op, keep, finish):
        self.op, self.keep, self.finish = op, keep, finish


def _name(kind, name):
    if name is None:
        c = _state.names.setdefault(kind, itertools.count())
        return "%s.noname.%d" % (kind, next(c))
    return str(name)


def _contig_cpu(t):
    """t itself when it is a contiguous CPU tensor, else a contiguous CPU copy."""
    if t.device.type == "cpu" and t.is_contiguous():
        return t
    return t.detach().to("cpu").contiguous()


def _register(op, keep, finish):
    h = next(_state.next)
    _state.ops[h] = _Pending(op, keep, finish)
    return h


def _submitted(op, err, what):
    if not op:
        raise HorovodInternalError("%s: %s" % (what, _native.message(err)))


def _resolve_op(average, op, fn):
    if op is None:
        if average is None or average:
            return Average
        return Sum
    if average is not None:
        raise ValueError("%s: give op or average, not both" % fn)
    return op


def _allreduce_into(buf, name, op, prescale, postscale, wire):
    """Queues an in-place allreduce of the contiguous CPU tensor buf."""
    code = _native.dtype_code(buf)
    err = _native.errbuf()
    op_id = _native.lib().shoal_allreduce(_handle(), buf.data_ptr(), buf.numel(), code, int(op), wire,
                                          float(prescale), float(postscale), name.encode(), err, _native.ERR_LEN)
    _submitted(op_id, err, "allreduce %r" % name)
    return op_id


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None, _wire=_native.COMPRESSION_NONE):
    """Queues an in-place allreduce of tensor; returns a handle."""
    op = _resolve_op(average, op, "allreduce_async_")
    name = _name("allreduce", name)
    buf = _contig_cpu(tensor)
    op_id = _allreduce_into(buf, name, op, prescale_factor, postscale_factor, _wire)

    def finish():
        if buf is not tensor:
            with torch.no_grad():
                tensor.copy_(buf)
        return tensor
    return _register(op_id, (buf, tensor), finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None, _wire=_native.COMPRESSION_NONE):
    """Queues an allreduce of a copy of tensor; synchronize returns the result."""
    op = _resolve_op(average, op, "allreduce_async")
    name = _name("allreduce", name)
    buf = tensor.detach().to("cpu", copy=True).contiguous()
    op_id = _allreduce_into(buf, name, op, prescale_factor, postscale_factor, _wire)
    device = tensor.device
    return _register(op_id, (buf,), lambda: buf.to(device) if device.type != "cpu" else buf)


def _wire_of(compression, tensor):
    """The wire format the library can do for a known compressor, else None."""
    if tensor.dtype != torch.float32:
        return _native.COMPRESSION_NONE if compression in (None, Compression.none) else None
    return {None: _native.COMPRESSION_NONE, Compression.none: _native.COMPRESSION_NONE,
            Compression.fp16: _native.COMPRESSION_FP16, Compression.bf16: _native.COMPRESSION_BF16}.get(compression)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Returns the reduction of tensor over all ranks (tensor is unchanged)."""
    wire = _wire_of(compression, tensor)
    if wire is not None:
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, _wire=wire))
    compressed, ctx = compression.compress(tensor)
    out = synchronize(allreduce_async(compressed, average, name, op, prescale_factor, postscale_factor))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces tensor over all ranks in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=None):
    base = _name("grouped_allreduce", name)
    hs = [allreduce_async_(t, average, "%s.%d" % (base, i), op, prescale_factor, postscale_factor)
          for i, t in enumerate(tensors)]
    return _register(0, (), lambda: [synchronize(h) for h in hs])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None):
    base = _name("grouped_allreduce", name)
    hs = [allreduce_async(t, average, "%s.%d" % (base, i), op, prescale_factor, postscale_factor)
          for i, t in enumerate(tensors)]
    return _register(0, (), lambda: [synchronize(h) for h in hs])


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor))


def allgather_async(tensor, name=None, process_set=None):
    """Queues a concatenation, along the first dimension, of every rank's
    tensor (the first dimensions may differ, the others must not)."""
    name = _name("allgather", name)
    buf = _contig_cpu(tensor)
    if buf.dim() == 0:
        buf = buf.reshape(1)
    row_elems = 1
    for d in buf.shape[1:]:
        row_elems *= d
    row_bytes = max(1, row_elems) * buf.element_size()
    code = _native.dtype_code(buf)
    err = _native.errbuf()
    L = _native.lib()
    h = _handle()
    op_id = L.shoal_allgather(h, buf.data_ptr(), buf.numel() * buf.element_size(), code, row_bytes,
                              name.encode(), err, _native.ERR_LEN)
    _submitted(op_id, err, "allgather %r" % name)
    shape, dtype, device = tuple(buf.shape[1:]), buf.dtype, tensor.device

    def finish():
        rows = (ctypes.c_int64 * size())()
        n = L.shoal_result_bytes(h, op_id, rows)
        out = torch.empty((sum(rows),) + shape, dtype=dtype)
        if n != out.numel() * out.element_size() or L.shoal_result_copy(h, op_id, out.data_ptr()) != 0:
            raise HorovodInternalError("allgather %r: the library's result has %d bytes, want %d" % (name, n, out.numel() * out.element_size()))
        return out.to(device) if device.type != "cpu" else out
    return _register(op_id, (buf,), finish)


def allgather(tensor, name=None, process_set=None):
    return synchronize(allgather_async(tensor, name))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """Queues an in-place broadcast of root_rank's tensor."""
    name = _name("broadcast", name)
    buf = _contig_cpu(tensor)
    code = _native.dtype_code(buf)
    err = _native.errbuf()
    op_id = _native.lib().shoal_broadcast(_handle(), buf.data_ptr(), buf.numel() * buf.element_size(), code,
                                          int(root_rank), name.encode(), err, _native.ERR_LEN)
    _submitted(op_id, err, "broadcast %r" % name)

    def finish():
        if buf is not tensor:
            with torch.no_grad():
                tensor.copy_(buf)
        return tensor
    return _register(op_id, (buf, tensor), finish)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    name = _name("broadcast", name)
    out = tensor.detach().to("cpu", copy=True).contiguous()
    h = broadcast_async_(out, root_rank, name)
    device = tensor.device
    p = _state.ops[h]
    p.finish = lambda: out.to(device) if device.type != "cpu" else out
    return h


def broadcast(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async(tensor, root_rank, name))


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name))


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Sends splits[j] rows of tensor (along the first dimension; equal
    parts when splits is None) to rank j, and returns the rows received from
    every rank, in rank order, and, when splits was given, how many rows
    came from each rank. Built on allgather: every rank receives every
    rank's whole tensor (N times the traffic of a true alltoall)."""
    n, r = size(), rank()
    name = _name("alltoall", name)
    rows = tensor.shape[0] if tensor.dim() > 0 else 1
    given = splits is not None
    if splits is None:
        if rows % n != 0:
            raise ValueError("alltoall: the first dimension (%d) is not divisible by the number of ranks (%d); "
                             "give splits" % (rows, n))
        splits = [rows // n] * n
    splits = torch.as_tensor(splits, dtype=torch.int64).reshape(-1)
    if splits.numel() != n or int(splits.sum()) != rows or bool((splits < 0).any()):
        raise ValueError("alltoall: splits %s: want %d non-negative counts summing to %d" % (splits.tolist(), n, rows))
    table = allgather(splits.reshape(1, n), name + ".splits")  # table[k, j]: rows rank k sends rank j
    data = allgather(tensor.reshape((rows,) + tuple(tensor.shape[1:])), name + ".data")
    totals = table.sum(dim=1).tolist()
    parts, start = [], 0
    for k in range(n):
        off = start + int(table[k, :r].sum())
        parts.append(data[off:off + int(table[k, r])])
        start += totals[k]
    out = torch.cat(parts) if parts else data[:0]
    if given:
        return out, table[:, r].clone()
    return out


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces tensor over all ranks and returns this rank's block of rows:
    rows/N of them, one more on the first rows%N ranks. Built on allreduce
    (the whole result travels to every rank)."""
    n, r = size(), rank()
    reduced = allreduce(tensor, name=_name("reducescatter", name), compression=compression, op=op,
                        prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    rows = reduced.shape[0]
    q, rem = divmod(rows, n)
    lo = r * q + min(r, rem)
    return reduced[lo:lo + q + (1 if r < rem else 0)].clone()


def barrier(process_set=None):
    err = _native.errbuf()
    op_id = _native.lib().shoal_barrier(_handle(), err, _native.ERR_LEN)
    _submitted(op_id, err, "barrier")
    synchronize(_register(op_id, (), lambda: None))


def join(device=-1):
    """Waits for every rank to reach join and returns the rank that reached
    it last. Unlike Horovod's, ranks that joined do not stand in for the
    others' collectives: every rank must have issued the same collectives
    before joining."""
    t = torch.tensor([time.time()], dtype=torch.float64)
    times = allgather(t, name="join")
    return int(torch.argmax(times).item())


def poll(handle):
    """True when the operation behind handle has finished."""
    p = _state.ops.get(handle)
    if p is None:
        raise ValueError("shoal.torch.poll: unknown handle %r" % (handle,))
    if not p.op:
        return True
    return _native.lib().shoal_poll(_handle(), p.op) != 0


def synchronize(handle):
    """Waits for the operation behind handle and returns its output."""
    p = _state.ops.pop(handle, None)
    if p is None:
        raise ValueError("shoal.torch.synchronize: unknown handle %r (already synchronized?)" % (handle,))
    if p.op:
        err = _native.errbuf()
        if _native.lib().shoal_wait(_handle(), p.op, err, _native.ERR_LEN) != 0:
            raise HorovodInternalError(_native.message(err))
    return p.finish()


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns root_rank's obj on every rank (pickled)."""
    name = _name("broadcast_object", name)
    if rank() == root_rank:
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        n = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        n = torch.zeros(1, dtype=torch.int64)
    broadcast_(n, root_rank, name + ".size")
    if rank() != root_rank:
        data = torch.empty(int(n.item()), dtype=torch.uint8)
    broadcast_(data, root_rank, name + ".data")
    if rank() == root_rank:
        return obj
    return pickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    """Returns the list of every rank's obj, in rank order (pickled)."""
    name = _name("allgather_object", name)
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = allgather(torch.tensor([data.numel()], dtype=torch.int64), name + ".size")
    allb = allgather(data, name + ".data").numpy().tobytes()
    out, off = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(allb[off:off + n]))
        off += n
    return out
