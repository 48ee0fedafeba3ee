"""numba kernels of the out-of-core build: counting and the spill files' counting sort.

Private module, imported lazily by :mod:`lightgraph.utilities.spill` and
:func:`lightgraph.data.partition.out_of_core.add_key_counts` on their first call (importing
it imports numba).
"""

from __future__ import annotations

from typing import Any

import numpy as np
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
def spill_records(keys, key_units, values, window, cursor, out):  # pragma: no cover - numba
    """The records ``(key, value)`` of the input grouped by window, in input order within
    one: row ``cursor[w]`` of ``out`` receives the next record of window ``w``: its key
    little-endian in its first ``key_units`` units, then the row of ``values``. ``out``
    and ``values`` are rows of unsigned units of one width (a record's key and value are
    whole units); rows with ``window[i] < 0`` are skipped."""
    vs = values.shape[1]
    bits = 8 * out.itemsize
    for i in range(window.shape[0]):
        w = window[i]
        if w >= 0:
            j = cursor[w]
            cursor[w] = j + 1
            k = np.uint64(keys[i])
            if key_units == 1:
                out[j, 0] = k
            else:
                for c in range(key_units):
                    out[j, c] = (k >> np.uint64(bits * c)) & np.uint64((1 << bits) - 1)
            for c in range(vs):
                out[j, key_units + c] = values[i, c]


@njit(**_JIT)
def place_records(keys, records, first_key, value_at, cursor, out):  # pragma: no cover - numba
    """``out[cursor[keys[i] - first_key]] = records[i, value_at:]``, advancing the
    cursor (a stable scatter of a window's spilled records; rows of unsigned units)."""
    vs = out.shape[1]
    for i in range(keys.shape[0]):
        k = keys[i] - first_key
        j = cursor[k]
        cursor[k] = j + 1
        for c in range(vs):
            out[j, c] = records[i, value_at + c]


# inlined into the per-edge loops: a call between compiled functions passes every array
# as a struct (~90 ns a call measured here for a per-record helper)
@njit(inline="always", **_JIT)
def _is_hub(hub_bits, v):  # pragma: no cover - numba
    return (hub_bits[v >> 3] >> (v & 7)) & 1


@njit(**_JIT)
def count_store_edges(
    src, dst, hub_bits, node_part, store_of, k, cnt_pp, cnt_hp, in_degree
):  # pragma: no cover - numba
    """The partition store's first edge pass over one chunk: ``cnt_pp[part[s] * k +
    part[d]]`` counts the edges between non-hub nodes, ``cnt_hp[2 * part[x] + (0: hub ->
    x, 1: x -> hub)]`` the edges between a hub and a non-hub node ``x``, and
    ``in_degree[store_of[d]]`` every edge; returns the number of hub-hub edges."""
    num_hh = 0
    for e in range(src.shape[0]):
        s, d = src[e], dst[e]
        hs, hd = _is_hub(hub_bits, s), _is_hub(hub_bits, d)
        if hs == 0 and hd == 0:
            cnt_pp[np.int64(node_part[s]) * k + node_part[d]] += 1
        elif hs == 0:
            cnt_hp[2 * np.int64(node_part[s]) + 1] += 1
        elif hd == 0:
            cnt_hp[2 * np.int64(node_part[d])] += 1
        else:
            num_hh += 1
        in_degree[store_of[d]] += 1
    return num_hh


@njit(**_JIT)
def split_store_edges(  # pragma: no cover - numba
    src, dst, hub_bits, node_part, store_of, hub_ids, k,
    pp_key, pp_pair, hp_key, hp_pair, hh_pair, csc_key, csc_value,
):  # fmt: skip
    """The partition store's second edge pass over one chunk, in edge order: the edges
    between non-hub nodes (bucket ``part[s] * k + part[d]``, pair of store ids), between a
    hub and a non-hub node (bucket as :func:`count_store_edges`, pair ``(hub rank, store
    id of the other end)``), between hubs (pair of hub ranks) and every edge's CSC entry
    (key: the target's store id, value: the source's). Returns the counts of the three
    kinds."""
    n_pp = 0
    n_hp = 0
    n_hh = 0
    for e in range(src.shape[0]):
        s, d = src[e], dst[e]
        hs, hd = _is_hub(hub_bits, s), _is_hub(hub_bits, d)
        ss, sd = store_of[s], store_of[d]
        if hs == 0 and hd == 0:
            pp_key[n_pp] = np.int64(node_part[s]) * k + node_part[d]
            pp_pair[n_pp, 0] = ss
            pp_pair[n_pp, 1] = sd
            n_pp += 1
        elif hs == 0:  # s -> hub d
            hp_key[n_hp] = 2 * np.int64(node_part[s]) + 1
            hp_pair[n_hp, 0] = np.searchsorted(hub_ids, d)
            hp_pair[n_hp, 1] = ss
            n_hp += 1
        elif hd == 0:  # hub s -> d
            hp_key[n_hp] = 2 * np.int64(node_part[d])
            hp_pair[n_hp, 0] = np.searchsorted(hub_ids, s)
            hp_pair[n_hp, 1] = sd
            n_hp += 1
        else:
            hh_pair[n_hh, 0] = np.searchsorted(hub_ids, s)
            hh_pair[n_hh, 1] = np.searchsorted(hub_ids, d)
            n_hh += 1
        csc_key[e] = sd
        csc_value[e] = ss
    return n_pp, n_hp, n_hh
