"""numba kernels of :func:`lightgraph.functional.fast_dropout.dropout`: mask, scale and write in one pass.

Private module, imported lazily by :mod:`lightgraph.functional.fast_dropout` on the first call
that can take the CPU kernel path (importing it imports numba). No ``fastmath``: the
kept values are ``x * scale`` in the input's dtype, as torch's dropout computes them.

Randomness comes from the caller: ``words`` holds 63 uniform bits per int64 (torch's
``random_()`` on an int64 tensor), cut into three 21-bit lanes; element ``i`` reads lane
``i % 3`` of word ``i // 3`` and is dropped iff the lane is below ``threshold``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

LANE_BITS = 21
LANES_PER_WORD = 3

_LANE_MASK = np.int64((1 << LANE_BITS) - 1)
_S1 = np.int64(LANE_BITS)
_S2 = np.int64(2 * LANE_BITS)
_JIT: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(**_JIT)
def dropout_forward(x, words, threshold, scale, out, keep):  # pragma: no cover - numba
    """``out[i] = x[i] * scale`` where lane ``i`` >= ``threshold``, else 0; ``keep[i]``
    records the choice (1 kept, 0 dropped). 1-D contiguous arrays; ``scale`` has the
    dtype of ``x``."""
    n = x.shape[0]
    zero = x.dtype.type(0)
    full = n // 3
    for w in range(full):
        v = words[w]
        i = 3 * w
        k0 = (v & _LANE_MASK) >= threshold
        k1 = ((v >> _S1) & _LANE_MASK) >= threshold
        k2 = ((v >> _S2) & _LANE_MASK) >= threshold
        keep[i] = k0
        keep[i + 1] = k1
        keep[i + 2] = k2
        out[i] = x[i] * scale if k0 else zero
        out[i + 1] = x[i + 1] * scale if k1 else zero
        out[i + 2] = x[i + 2] * scale if k2 else zero
    rest = n - 3 * full
    if rest:
        v = words[full]
        for j in range(rest):
            i = 3 * full + j
            k = ((v >> np.int64(LANE_BITS * j)) & _LANE_MASK) >= threshold
            keep[i] = k
            out[i] = x[i] * scale if k else zero


@njit(**_JIT)
def dropout_backward(grad, keep, scale, out):  # pragma: no cover - numba
    """``out[i] = grad[i] * scale`` where ``keep[i]``, else 0."""
    zero = grad.dtype.type(0)
    for i in range(grad.shape[0]):
        out[i] = grad[i] * scale if keep[i] else zero
