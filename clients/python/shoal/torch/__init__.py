"""Horovod's PyTorch API over Shoal's collectives: change

    import horovod.torch as hvd

to

    import shoal.torch as hvd

and the script runs on Shoal's ring (ring mode: every rank holds the whole
model and the gradients are allreduced over a TCP/shared-memory ring in
Go, loaded from libshoal.so with ctypes; see _native.py to build it).
Launch it with mpirun, Slurm or torchrun-style variables (see
clients/python/README.md, "From Horovod to Shoal").

Implemented: init, shutdown, is_initialized, size, rank, local_rank,
local_size, cross_rank, cross_size, the *_built/*_enabled queries,
allreduce(_)(_async), grouped_allreduce*, allgather(_async), broadcast(_)
(_async_), broadcast_object, allgather_object, barrier, join (a barrier
that returns the last rank to arrive), poll, synchronize,
broadcast_parameters, broadcast_optimizer_state, DistributedOptimizer
(hooks, fusion buckets, backward_passes_per_step, Compression.none/fp16/
bf16, op Average/Sum/Adasum, gradient_predivide_factor), ops Average, Sum,
Adasum, Min, Max, Product, and alltoall and reducescatter built on
allgather and allreduce, SyncBatchNorm (on CPU tensors too). Not yet:
process sets, elastic, timeline, sparse gradients.
"""

from shoal.torch._native import HorovodInternalError
from shoal.torch.compression import Compression
from shoal.torch.functions import broadcast_optimizer_state, broadcast_parameters
from shoal.torch.mpi_ops import (
    Adasum, Average, Max, Min, Product, ReduceOp, Sum,
    allgather, allgather_async, allgather_object, allreduce, allreduce_, allreduce_async, allreduce_async_,
    alltoall, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_, broadcast_object,
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, init, is_homogeneous,
    is_initialized, join, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
    poll, rank, reducescatter, rocm_built, shutdown, size, start_timeline, stop_timeline, synchronize,
)
from shoal.torch.optimizer import DistributedOptimizer
from shoal.torch.sync_batch_norm import SyncBatchNorm
