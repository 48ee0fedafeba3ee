"""The files of a partition store: names, dtypes, shapes and the format tag.

All arrays are ``.npy`` files; node ids are ``int32`` when the graph has fewer than
``2**31`` nodes, ``int64`` otherwise (``meta["id_dtype"]``). The store is a cache
directory of :mod:`lightgraph.data.store.cache` (atomic staging and publish,
manifest in ``meta.json``).

Files (``N`` nodes, ``F`` features, ``C`` classes, ``k`` partitions, ``H`` hubs):

===================== ========================= =============================================
file                  dtype, shape              content
===================== ========================= =============================================
``x.npy``             float32 ``[N, F]``        features, store order
``y.npy``             int64 ``[N]`` or          labels (single-label) or 0/1 label matrix
                      float32 ``[N, C]``        (multi-label), store order
``masks.npy``         bool ``[N, 3]``           train/val/test masks, store order
``node_ids.npy``      id ``[N]``                original id of every store id
``part_ptr.npy``      int64 ``[k + 1]``         node offsets of the partitions
``edges.npy``         id ``[E_pp, 2]``          (src, dst) store ids of edges between two
                                                non-hub nodes, bucket ``p * k + q`` holds
                                                those from partition ``p`` to ``q``
``edge_ptr.npy``      int64 ``[k * k + 1]``     bucket offsets of ``edges.npy``
``hub_edges.npy``     id ``[E_hp, 2]``          (hub index, store id of the other end) of
                                                edges with exactly one hub endpoint; bucket
                                                ``2p`` holds hub -> partition ``p``, bucket
                                                ``2p + 1`` partition ``p`` -> hub
``hub_edge_ptr.npy``  int64 ``[2k + 1]``        bucket offsets of ``hub_edges.npy``
``hub_ids.npy``       int64 ``[H]``             original ids of the hubs (sorted)
``hub_store_ids.npy`` id ``[H]``                their store ids
``hub_x.npy``         float32 ``[H, F]``        hub features (pinned after open)
``hub_y.npy``         like ``y`` ``[H, ...]``   hub labels (pinned after open)
``hub_hub_edges.npy`` id ``[E_hh, 2]``          (src, dst) hub indices of hub-hub edges
``csc_indptr.npy``    int64 ``[N + 1]``         whole-graph CSC: in-edges of store id ``v``
``csc_indices.npy``   id ``[E]``                are ``csc_indices[indptr[v]:indptr[v+1]]``
                                                (source store ids, input edge order)
===================== ========================= =============================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: ``meta["format"]`` of a partition store.
STORE_FORMAT = "lightgraph.partition_store"
#: Bumped whenever the file layout changes (a store of another version is stale).
STORE_VERSION = 1

X_FILE, Y_FILE, MASKS_FILE, NODE_IDS_FILE = "x.npy", "y.npy", "masks.npy", "node_ids.npy"
PART_PTR_FILE = "part_ptr.npy"
EDGES_FILE, EDGE_PTR_FILE = "edges.npy", "edge_ptr.npy"
HUB_EDGES_FILE, HUB_EDGE_PTR_FILE = "hub_edges.npy", "hub_edge_ptr.npy"
HUB_IDS_FILE, HUB_STORE_IDS_FILE = "hub_ids.npy", "hub_store_ids.npy"
HUB_X_FILE, HUB_Y_FILE, HUB_HUB_EDGES_FILE = "hub_x.npy", "hub_y.npy", "hub_hub_edges.npy"
CSC_INDPTR_FILE, CSC_INDICES_FILE = "csc_indptr.npy", "csc_indices.npy"

#: The node arrays a macro-batch reads a slice of, per partition.
NODE_FILES = (X_FILE, Y_FILE, MASKS_FILE, NODE_IDS_FILE)


def expected_arrays(meta: dict[str, Any]) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """``{file: (dtype, shape)}`` of every array of the store ``meta`` describes."""
    n, f, k, h = (int(meta[key]) for key in ("num_nodes", "num_features", "num_parts", "num_hubs"))
    idt = np.dtype(meta["id_dtype"])
    y_dtype = np.dtype(meta["label_dtype"])
    y_shape: tuple[int, ...] = (int(meta["num_classes"]),) if meta["multilabel"] else ()
    int64, float32 = np.dtype(np.int64), np.dtype(np.float32)
    return {
        X_FILE: (float32, (n, f)),
        Y_FILE: (y_dtype, (n, *y_shape)),
        MASKS_FILE: (np.dtype(np.bool_), (n, 3)),
        NODE_IDS_FILE: (idt, (n,)),
        PART_PTR_FILE: (int64, (k + 1,)),
        EDGES_FILE: (idt, (int(meta["num_part_edges"]), 2)),
        EDGE_PTR_FILE: (int64, (k * k + 1,)),
        HUB_EDGES_FILE: (idt, (int(meta["num_hub_edges"]), 2)),
        HUB_EDGE_PTR_FILE: (int64, (2 * k + 1,)),
        HUB_IDS_FILE: (int64, (h,)),
        HUB_STORE_IDS_FILE: (idt, (h,)),
        HUB_X_FILE: (float32, (h, f)),
        HUB_Y_FILE: (y_dtype, (h, *y_shape)),
        HUB_HUB_EDGES_FILE: (idt, (int(meta["num_hub_hub_edges"]), 2)),
        CSC_INDPTR_FILE: (int64, (n + 1,)),
        CSC_INDICES_FILE: (idt, (int(meta["num_edges"]),)),
    }
