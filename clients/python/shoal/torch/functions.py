"""Horovod's broadcast helpers (horovod.torch.functions)."""

import collections

import torch

from shoal.torch import mpi_ops


def broadcast_parameters(params, root_rank=0, process_set=None):
    """Overwrites params (a state_dict, model.named_parameters(), or a list
    of (name, tensor) pairs) with root_rank's, in place."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or isinstance(params, collections.abc.Iterable):
        items = list(params)
        if items and not isinstance(items[0], tuple):
            items = [("param.%d" % i, p) for i, p in enumerate(items)]
    else:
        raise ValueError("broadcast_parameters: invalid params of type %s" % type(params))
    handles = []
    for name, p in items:
        if p is None or not torch.is_tensor(p):
            continue
        handles.append(mpi_ops.broadcast_async_(p.data if isinstance(p, torch.nn.Parameter) else p, root_rank,
                                                "broadcast.param." + str(name)))
    for h in handles:
        mpi_ops.synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank=0, model=None, process_set=None):
    """Makes every rank's optimizer state (moments, steps, hyper-parameters)
    root_rank's: root's state_dict travels pickled and the others load it."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state = mpi_ops.broadcast_object(optimizer.state_dict(), root_rank, name="broadcast.optimizer_state")
    if mpi_ops.rank() != root_rank:
        optimizer.load_state_dict(state)
