"""Node sequences of a graph for graph transformers (TorchGT, §4.3.2-4.3.3).

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); the section numbers refer to it.

A graph too large for one attention pass is cut into *node sequences*: the nodes are
reordered with METIS so that every cluster occupies a contiguous range of ids
(:func:`metis_order`), then cut into consecutive sequences of ``sequence_length`` nodes
(:func:`split_sequences`). Each sequence becomes one
:class:`~lightgraph.data.loader.token_batch.TokenBatch` (:func:`build_sequence`): its tokens (an
optional global token first, then the nodes), their features, labels and masks, the
in/out-degree of every node inside the sequence (Graphormer's centrality encoding) and the
:class:`~lightgraph.functional.attention.AttentionGraph` of the *whole* sequence -- the
induced subgraph, self-loops, global-token edges and the token-order path
(:func:`token_pattern`), with a bias bucket for every entry (the layout of
:mod:`lightgraph.functional.graph_encoding`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lightgraph.data.datasets.graph_dataset import MASK_NAMES
from lightgraph.data.loader.token_batch import TokenBatch
from lightgraph.data.partition.partitioner import partition_graph
from lightgraph.functional.attention import AttentionGraph, add_token_path
from lightgraph.functional.graph_encoding import (
    EDGE_BUCKET,
    FAR_BUCKET,
    GLOBAL_BUCKET,
    SELF_BUCKET,
    distance_buckets,
    laplacian_pe,
    num_buckets,
)

__all__ = ["build_sequence", "metis_order", "split_sequences", "token_pattern"]


def token_pattern(
    edges: Tensor, num_nodes: int, global_token: bool, token_path: bool = True
) -> tuple[Tensor, Tensor, int]:
    """Graph edges + self-loops + global edges (+ the token path), sorted by query then key,
    with buckets.

    ``edges`` must be sorted by target then source, without duplicates or self-loops; the
    other entries are merged in by computing every entry's position (no sort).

    With ``token_path`` the pairs ``(i, i + 1)`` and ``(i + 1, i)`` of consecutive tokens
    that are not yet entries are added (:func:`~lightgraph.functional.attention.add_token_path`,
    at most ``2 (S - 1)`` entries), so the pattern holds a Hamiltonian path and condition
    C2 holds by construction. They get ``FAR_BUCKET`` (3), the bucket of attended pairs
    that are not graph edges (shared with the pairs a cluster-sparse transfer adds); in
    ``dense_bucket`` the same pairs keep their shortest-path bucket. With a global token
    its pair with token 1 is already an entry.

    Args:
        edges: ``[2, E]`` edges among the nodes (local ids).
        num_nodes: nodes of the graph.
        global_token: prepend a global token (token 0) linked to every node both ways.
        token_path: add the token-order path (condition C2 by construction).

    Returns:
        ``(edge_index [2, E'], bucket [E'], num_tokens)`` of the pattern.
    """
    g = int(global_token)
    S = num_nodes + g
    src, dst = edges[0] + g, edges[1] + g
    E = src.numel()
    in_deg = torch.bincount(dst, minlength=S)
    row_len = in_deg + 1 + g  # graph entries, the self-loop and the global token's entry
    if g:
        row_len[0] = S  # the global token attends to every token
    row_start = torch.cumsum(row_len, 0) - row_len
    edge_row_start = torch.cumsum(in_deg, 0) - in_deg
    below = torch.bincount(dst[src < dst], minlength=S)  # keys smaller than the query
    total = int(row_len.sum())
    key = torch.empty(total, dtype=torch.long)
    query = torch.empty(total, dtype=torch.long)
    bucket = torch.empty(total, dtype=torch.long)
    # Graph edges: after the global entry, shifted by one past the self-loop.
    rank = torch.arange(E) - edge_row_start[dst]
    pos = row_start[dst] + g + rank + (src > dst).long()
    key[pos], query[pos], bucket[pos] = src, dst, EDGE_BUCKET
    # Self-loops.
    tokens = torch.arange(S)
    pos = row_start + g + below
    if g:
        pos[0] = 0
    key[pos], query[pos], bucket[pos] = tokens, tokens, SELF_BUCKET
    if g:
        nodes = tokens[1:]
        pos = row_start[1:]  # key 0 comes first in every node's row
        key[pos], query[pos], bucket[pos] = 0, nodes, GLOBAL_BUCKET
        pos = nodes  # the global token's row: keys 1 .. S-1 after its self-loop
        key[pos], query[pos], bucket[pos] = nodes, 0, GLOBAL_BUCKET
    pattern = torch.stack([key, query])
    if token_path:
        pattern, path_bucket = add_token_path(pattern, S, bucket, FAR_BUCKET)
        bucket = bucket if path_bucket is None else path_bucket
    return pattern, bucket, S


def build_sequence(
    x: Tensor,
    edge_index: Tensor,
    *,
    y: Tensor | None = None,
    masks: dict[str, Tensor] | None = None,
    node_ids: Tensor | None = None,
    global_token: bool = True,
    max_degree: int = 64,
    max_distance: int = 5,
    dense_limit: int = 2048,
    pe_dim: int = 0,
    seed: int = 0,
    index: int = 0,
    token_path: bool = True,
) -> TokenBatch:
    """The :class:`~lightgraph.data.loader.token_batch.TokenBatch` of one node sequence (an
    induced subgraph).

    Args:
        x: ``[n, F]`` node features.
        edge_index: ``[2, E]`` edges among the ``n`` nodes (local ids, messages from row 0
            to row 1). Self-loops and duplicates are dropped (the pattern adds one
            self-loop per token).
        y: ``[n]`` node targets.
        masks: ``train_mask``/``val_mask``/``test_mask`` of the nodes.
        node_ids: ``[n]`` ids in the source graph.
        global_token: prepend a global token (token 0) that attends to and is attended by
            every node.
        max_degree: degrees are clipped to this value.
        max_distance: shortest paths longer than this share its bucket.
        dense_limit: ``dense_bucket`` (``[S, S]``) is built only for ``S <= dense_limit``.
        pe_dim: Laplacian eigenvectors to add as ``lap_pe`` (0: none).
        seed: seed of the eigenvector signs.
        index: position of the sequence.
        token_path: add the token-order path ``i <-> i + 1`` to the pattern where it
            lacks it (bucket ``FAR_BUCKET``; see :func:`token_pattern`), so condition C2
            holds by construction.
    """
    n = x.size(0)
    g = int(global_token)
    keep = edge_index[0] != edge_index[1]
    key = edge_index[1, keep] * n + edge_index[0, keep]
    if key.numel() > 1 and not bool((key[1:] > key[:-1]).all()):
        key = torch.unique(key)  # sorted by target, then source; duplicates dropped
    edges = torch.stack([key % n, key // n])
    pattern, bucket, S = token_pattern(edges, n, global_token, token_path)
    dense = None
    if S <= dense_limit:
        dense = torch.full((S, S), GLOBAL_BUCKET, dtype=torch.long)
        dense[g:, g:] = distance_buckets(edges, n, max_distance)
        if g:
            dense[0, 0] = SELF_BUCKET
    graph = AttentionGraph(S, pattern, bucket, dense, far_bucket=FAR_BUCKET)

    def pad(values: Tensor | None, fill: Any) -> Tensor | None:
        if values is None:
            return None
        if not g:
            return values
        head = torch.full((1,) + tuple(values.shape[1:]), fill, dtype=values.dtype)
        return torch.cat([head, values])

    in_degree = torch.bincount(edges[1], minlength=n).clamp_(max=max_degree)
    out_degree = torch.bincount(edges[0], minlength=n).clamp_(max=max_degree)
    masks = masks or {}
    full_masks = {name: pad(masks.get(name), False) for name in MASK_NAMES}
    counts = {name: int(m.sum()) for name, m in full_masks.items() if m is not None}
    pe = None
    if pe_dim:
        pe = pad(laplacian_pe(edges, n, pe_dim, seed + index), 0.0)
    is_global = torch.zeros(S, dtype=torch.bool)
    is_global[:g] = True
    return TokenBatch(
        x=pad(x, 0.0),
        graph=graph,
        is_global=is_global,
        in_degree=pad(in_degree, 0),
        out_degree=pad(out_degree, 0),
        y=pad(y, 0) if y is not None and y.dim() == 1 else pad(y, 0.0),
        node_ids=pad(node_ids if node_ids is not None else torch.arange(n), -1),
        lap_pe=pe,
        global_counts=counts,
        num_buckets=num_buckets(max_distance),
        index=index,
        **full_masks,
    )


def metis_order(edge_index: Tensor, num_nodes: int, num_clusters: int, seed: int = 0) -> Tensor:
    """Node order (new position -> old id) with METIS clusters contiguous: by part, then id.

    Args:
        edge_index: ``[2, E]`` edges of the graph.
        num_nodes: nodes of the graph.
        num_clusters: METIS parts.
        seed: METIS seed.
    """
    part = partition_graph(edge_index, num_nodes, num_clusters, "metis", seed)
    return torch.argsort(part * num_nodes + torch.arange(num_nodes))


def split_sequences(
    edge_index: Tensor, order: Tensor, sequence_length: int
) -> tuple[list[Tensor], list[Tensor]]:
    """Cut the reordered nodes into consecutive sequences; keep the edges inside each.

    Args:
        edge_index: ``[2, E]`` edges of the graph (old ids).
        order: ``[n]`` node order, new position -> old id (e.g. :func:`metis_order`).
        sequence_length: nodes per sequence (the last one may be shorter).

    Returns:
        per sequence, the old node ids in token order and the ``[2, E_s]`` edges in local
        ids (duplicates and self-loops removed, sorted by target then source).
    """
    n = order.numel()
    position = torch.empty_like(order)
    position[order] = torch.arange(n)
    src, dst = position[edge_index[0]], position[edge_index[1]]
    seq = dst // sequence_length
    keep = (src // sequence_length == seq) & (src != dst)
    src, dst, seq = src[keep], dst[keep], seq[keep]
    # One sort groups edges by sequence (ids are contiguous per sequence) and orders
    # each group by target then source; duplicates become neighbours.
    key = torch.unique(dst * n + src)
    src, dst = key % n, key // n
    seq = dst // sequence_length
    num_seq = math.ceil(n / sequence_length)
    counts = torch.bincount(seq, minlength=num_seq).tolist()
    nodes, edges = [], []
    for s, (s_src, s_dst) in enumerate(zip(src.split(counts), dst.split(counts), strict=True)):
        offset = s * sequence_length
        nodes.append(order[offset : offset + sequence_length])
        edges.append(torch.stack([s_src - offset, s_dst - offset]))
    return nodes, edges
