"""SyncBatchNorm (horovod.torch.SyncBatchNorm) over Shoal's ring.

In training, the batch statistics are those of the whole global batch:
each rank's per-channel sum, sum of squares and count are summed over the
ranks (one allreduce, float64) before normalizing, and backward sums the
per-channel sums of the output gradient and of its product with the
normalized input the same way, so every rank's input gradient is its
share of the gradient of the global batch's normalization. The weight and
bias gradients stay local (DistributedOptimizer averages them, as it does
every gradient). In eval mode, and on one rank, it is torch's BatchNorm.
Unlike Horovod's, it runs on CPU tensors (CUDA tensors go through the
allreduce's CPU copy).
"""

import torch
import torch.nn.functional as F
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from shoal.torch import mpi_ops


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over the global batch (see the module doc); the
    arguments are torch.nn.BatchNorm*'s."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or mpi_ops.size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                use_batch_stats, factor, self.eps)
        running = self.training and self.track_running_stats
        return _SyncBatchNorm.apply(input, self.weight, self.bias, self.running_mean if running else None,
                                    self.running_var if running else None, self.eps, factor)


def _shape(t, x):
    """t (per channel) shaped to broadcast against x (N, C, ...)."""
    return t.view((1, -1) + (1,) * (x.dim() - 2))


class _SyncBatchNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        x = x.contiguous()
        c = x.size(1)
        dims = [0] + list(range(2, x.dim()))
        x64 = x.detach().to(torch.float64)
        local = torch.cat([x64.sum(dims), (x64 * x64).sum(dims),
                           torch.tensor([x.numel() // c], dtype=torch.float64, device=x.device)])
        total = mpi_ops.allreduce(local, op=mpi_ops.Sum, name="sync_batch_norm.stats")
        total = total.to(x.device)
        n = total[-1].item()
        if n <= 1:
            raise ValueError("SyncBatchNorm: expected more than 1 value per channel over all ranks (got %d)" % n)
        mean64 = total[:c] / n
        var64 = (total[c:2 * c] / n - mean64 * mean64).clamp_(min=0)  # biased, as batch norm normalizes
        mean, invstd = mean64.to(x.dtype), (var64 + eps).rsqrt().to(x.dtype)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean64.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_((var64 * n / (n - 1)).to(running_var.dtype), alpha=momentum)
        xhat = (x - _shape(mean, x)) * _shape(invstd, x)
        y = xhat
        if weight is not None:
            y = y * _shape(weight, x)
        if bias is not None:
            y = y + _shape(bias, x)
        ctx.save_for_backward(xhat, weight, invstd)
        ctx.n = n
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, weight, invstd = ctx.saved_tensors
        dy = dy.contiguous()
        c = dy.size(1)
        dims = [0] + list(range(2, dy.dim()))
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        both = torch.cat([sum_dy, sum_dy_xhat])
        both = both.to(torch.float64 if both.dtype == torch.float64 else torch.float32)
        total = mpi_ops.allreduce(both, op=mpi_ops.Sum, name="sync_batch_norm.grad")
        total = total.to(device=dy.device, dtype=dy.dtype)
        mean_dy, mean_dy_xhat = total[:c] / ctx.n, total[c:] / ctx.n
        scale = invstd if weight is None else invstd * weight
        dx = (dy - _shape(mean_dy, dy) - xhat * _shape(mean_dy_xhat, dy)) * _shape(scale, dy)
        dweight = sum_dy_xhat if weight is not None and ctx.needs_input_grad[1] else None
        dbias = sum_dy if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dweight, dbias, None, None, None, None
