"""A PyTorch model's parameters and gradients as views of two flat float32
vectors in Shoal's layout, so that a pull writes the weights straight into
the model and a push sends the gradients straight from it."""

from __future__ import annotations

from typing import Dict, List, Sequence

from shoal.client import ShoalError, Tensor


class FlatParameters:
    """Lays model's parameters over one flat vector, params, in the layout
    the servers report (Client.layout), and their gradients over another,
    grads.

    Shoal's tensors line up with PyTorch's in order and shape: its MLP is
    Flatten, then Linear (+ ReLU) layers whose weights are [out, in] and
    biases [out], as nn.Linear's, and its CNN's convolutions are [out, in,
    kh, kw] as nn.Conv2d's; only the names differ (fc1.weight against, say,
    1.weight of an nn.Sequential). So model.parameters(), in order, must
    match layout tensor for tensor in shape, and nothing is reshaped or
    transposed. names maps each of the model's parameter names to Shoal's.

    After it, each parameter's .data is a view of params and its .grad a
    view of grads: backward() accumulates into grads, zero_grad() clears
    it. An optimizer step in PyTorch is not needed (the servers run the
    optimizer); should anything replace a .grad tensor, flat_grads() copies
    it back.
    """

    def __init__(self, model, layout: Sequence[Tensor], copy_values: bool = False) -> None:
        import torch
        named = list(model.named_parameters())
        if len(named) != len(layout):
            raise ShoalError("the model has %d parameter tensors, the servers' layout %d (%s)"
                             % (len(named), len(layout), ", ".join(t.name for t in layout)))
        size = max((t.offset + t.size for t in layout), default=0)
        self.params = torch.zeros(size, dtype=torch.float32)
        self.grads = torch.zeros(size, dtype=torch.float32)
        self.names: Dict[str, str] = {}
        self._views: List[tuple] = []
        for (name, p), t in zip(named, layout):
            if tuple(p.shape) != tuple(t.shape):
                raise ShoalError("parameter %s has shape %s, the servers' %s has %s"
                                 % (name, list(p.shape), t.name, list(t.shape)))
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ShoalError("parameter %s is %s on %s; want float32 on the CPU" % (name, p.dtype, p.device))
            v = self.params[t.offset:t.offset + t.size].view(t.shape)
            g = self.grads[t.offset:t.offset + t.size].view(t.shape)
            if copy_values:
                v.copy_(p.detach())
            p.data = v
            p.grad = g
            self.names[name] = t.name
            self._views.append((p, g))

    def zero_grad(self) -> None:
        """Clears the gradients (and puts back any .grad that was replaced)."""
        for p, g in self._views:
            if p.grad is None or p.grad.data_ptr() != g.data_ptr():
                p.grad = g
        self.grads.zero_()

    def flat_grads(self):
        """The gradients as one flat vector in Shoal's layout (grads itself,
        once any .grad that was replaced has been copied back)."""
        for p, g in self._views:
            if p.grad is None:
                g.zero_()
            elif p.grad.data_ptr() != g.data_ptr():
                g.copy_(p.grad)
                p.grad = g
        return self.grads
