"""numba kernels of the out-of-core build: counting and the spill files' counting sort.

Private module, imported lazily by :mod:`lightgraph.utilities.spill` and
:func:`lightgraph.data.partition.out_of_core.add_key_counts` on their first call (importing
it imports numba).
"""

from __future__ import annotations

from typing import Any

from numba import njit

_JIT: dict[str, Any] = {"cache": True, "nogil": True}


@njit(**_JIT)
def count_keys(counts, keys):  # pragma: no cover - numba
    """``counts[keys[i]] += 1`` for every ``i``."""
    for i in range(keys.shape[0]):
        counts[keys[i]] += 1


@njit(**_JIT)
def window_of(keys, starts, table, shift, first, last, window, counts):  # pragma: no cover - numba
    """``window[i]``: the window of ``keys[i]`` (the last ``j`` with ``starts[j] <=
    keys[i]``) less ``first``, or ``-1`` outside ``[first, last)``; ``counts[w]`` counts
    window ``first + w`` and ``counts[-1]`` all records kept. ``table[b]`` is the window
    of key ``b << shift``: a lookup, then a step past the windows that start inside the
    key's bucket."""
    n = starts.shape[0]
    for i in range(keys.shape[0]):
        k = keys[i]
        w = table[k >> shift]
        while w + 1 < n and starts[w + 1] <= k:
            w += 1
        if first <= w < last:
            window[i] = w - first
            counts[w - first] += 1
            counts[-1] += 1
        else:
            window[i] = -1


@njit(**_JIT)
def scatter_order(window, cursor, order):  # pragma: no cover - numba
    """``order``: the records' indices grouped by window, in input order within one
    (``cursor[w]``: the next slot of window ``w``)."""
    for i in range(window.shape[0]):
        w = window[i]
        if w >= 0:
            order[cursor[w]] = i
            cursor[w] += 1


@njit(**_JIT)
def place(keys, values, cursor, out):  # pragma: no cover - numba
    """``out[cursor[keys[i]], :] = values[i, :]``, advancing the cursor (a stable scatter)."""
    for i in range(keys.shape[0]):
        k = keys[i]
        j = cursor[k]
        for c in range(values.shape[1]):
            out[j, c] = values[i, c]
        cursor[k] = j + 1
