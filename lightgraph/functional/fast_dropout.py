"""Dropout whose mask costs one pass on the CPU.

:func:`dropout` is :func:`torch.nn.functional.dropout` (zero each element with
probability ``p``, scale the kept ones by ``1 / (1 - p)``) with a cheaper mask on the CPU.
torch draws the mask with ``bernoulli_``, one generator call per element, which on a
2-core CPU took 31 % of a whole sampled-training epoch (GraphSAGE, hidden 128, batches of
1,000 seeds on a 1M-node graph; torch 2.13, one thread): more than the layers' matrix
products. Here one ``random_()`` int64 draw gives three elements their 21-bit uniform
lanes, and a numba kernel compares, scales and writes the output and a one-byte keep mask
in one pass; the backward pass multiplies by the same mask.

What differs from torch's dropout:

* the drop probability is ``round(p * 2^21) / 2^21`` (within ``2.4e-7`` of ``p``; exact
  for ``p = 0.5`` and every multiple of ``2^-21``);
* the masks are different draws from the same distribution (torch's generator still
  drives them: ``torch.manual_seed`` makes them reproducible, and a checkpointed
  generator state resumes them);
* no double backward (the backward is a kernel, ``once_differentiable``).

Elsewhere -- other devices, dtypes other than float32/float64, ``p`` of 0 or 1, inside
:func:`torch.compile`, or where numba is missing -- it is torch's dropout itself.
"""

from __future__ import annotations

import threading
import warnings
from types import ModuleType
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

__all__ = ["Dropout", "dropout"]

#: Bits of the uniform lane each element is compared on: the drop probability is a
#: multiple of ``2^-LANE_BITS``.
LANE_BITS = 21

_KERNELS: ModuleType | None = None
_KERNELS_TRIED = False
_LOCK = threading.Lock()


def _kernels() -> ModuleType | None:
    global _KERNELS, _KERNELS_TRIED
    if not _KERNELS_TRIED:
        with _LOCK:
            if not _KERNELS_TRIED:
                try:
                    from lightgraph.functional import _dropout_kernels
                except ImportError:  # no numba: torch's dropout serves
                    _dropout_kernels = None  # type: ignore[assignment]
                _KERNELS = _dropout_kernels
                _KERNELS_TRIED = True
    return _KERNELS


def _disable(err: Exception) -> None:
    global _KERNELS
    _KERNELS = None
    warnings.warn(
        f"lightgraph.functional.fast_dropout: the numba kernel failed ({err!r}); using torch's "
        "dropout from now on.",
        RuntimeWarning,
        stacklevel=4,
    )


def _threshold(p: float) -> int:
    return int(round(p * (1 << LANE_BITS)))


class _KernelDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float, kernels: ModuleType) -> Tensor:
        flat = x.detach().contiguous().view(-1)
        n = flat.numel()
        words = torch.empty((n + 2) // 3, dtype=torch.int64).random_()
        np_dtype = np.float32 if x.dtype == torch.float32 else np.float64
        scale = np_dtype(1.0) / np_dtype(1.0 - p)  # torch: ones.div_(1 - p) in x's dtype
        out = torch.empty_like(flat)
        keep = torch.empty(n, dtype=torch.uint8)
        kernels.dropout_forward(
            flat.numpy(), words.numpy(), np.int64(_threshold(p)), scale, out.numpy(), keep.numpy()
        )
        ctx.save_for_backward(keep)
        ctx.scale = scale
        ctx.kernels = kernels
        return out.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        g = grad.contiguous().view(-1)
        out = torch.empty_like(g)
        ctx.kernels.dropout_backward(g.numpy(), keep.numpy(), ctx.scale, out.numpy())
        return out.view(grad.shape), None, None


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """:func:`torch.nn.functional.dropout` with a one-pass mask on the CPU (module docstring).

    Args:
        x: input of any shape.
        p: probability of zeroing an element, in ``[0, 1]``.
        training: apply dropout (``False``: return ``x`` unchanged).

    Returns:
        ``x`` with each element zeroed with probability ``p`` and the others scaled by
        ``1 / (1 - p)``; same shape and dtype.
    """
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: expected `p` in [0, 1] but got {p!r}.")
    if not training or p == 0.0:
        return x
    kernels = _kernels()
    if (
        kernels is None
        or p == 1.0
        or x.device.type != "cpu"
        or x.dtype not in (torch.float32, torch.float64)
        or x.numel() == 0
        or torch.compiler.is_compiling()
    ):
        return F.dropout(x, p, training=True)
    try:
        return _KernelDropout.apply(x, float(p), kernels)
    except Exception as err:  # numba could not compile or run here: torch's dropout
        if _KERNELS is None:  # pragma: no cover - disabled meanwhile
            return F.dropout(x, p, training=True)
        _disable(err)
        return F.dropout(x, p, training=True)


class Dropout(nn.Dropout):
    """:class:`torch.nn.Dropout` computed by :func:`dropout` (same arguments; no
    ``inplace``: the output is always a new tensor)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
