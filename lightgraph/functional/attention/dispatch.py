"""One entry point for TorchGT's attention kinds: dense, raw, sparse, cluster-sparse, dual, auto.

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightgraph.functional.attention.cluster_sparse import (
    cluster_sparse_attention,
    default_num_clusters,
)
from lightgraph.functional.attention.dense import dense_attention
from lightgraph.functional.attention.pattern import AttentionGraph
from lightgraph.functional.attention.raw import raw_attention
from lightgraph.functional.attention.sparse import _sparse_attention
from lightgraph.utilities.checks import (
    check_bias_table,
    check_choice,
    check_int,
    check_qkv,
    check_rate,
)

__all__ = [
    "DEFAULT_DENSE_EVERY",
    "DENSE_KINDS",
    "KINDS",
    "SPARSE_KINDS",
    "attend",
    "dual_uses_dense",
    "lookup_rows",
    "resolve_kind",
]

#: The attention kinds :func:`attend` dispatches to.
KINDS: tuple[str, ...] = ("dense", "raw", "sparse", "cluster_sparse", "dual", "auto")

#: The kinds that attend every pair (the pattern only through ``dense_bucket``).
DENSE_KINDS: tuple[str, ...] = ("dense", "raw")

#: The topology-induced kinds ``"dual"`` runs between its dense steps (``sparse_kind``).
SPARSE_KINDS: tuple[str, ...] = ("sparse", "cluster_sparse", "auto")

#: Default period of ``"dual"``'s dense interleave (see :func:`dual_uses_dense`).
DEFAULT_DENSE_EVERY: int = 11


def dual_uses_dense(graph: AttentionGraph, step: int, dense_every: int) -> bool:
    """Whether dual-interleaved attention runs the dense pattern at ``step``.

    Dense when ``dense_every > 0`` and ``step % dense_every == 0`` (the periodic
    fully-connected interleave), and always when ``graph`` fails any of C1-C3.

    The thesis gives no period; the layers default to :data:`DEFAULT_DENSE_EVERY` (11).
    On a pattern that meets C1-C3 about one training step in ten (1/11) pays dense
    attention's cost and the others the sparse kind's, while every layer still sees the
    full pattern regularly. The period counts steps, not sequences: with ``N`` sequences
    per epoch in a fixed order, the dense steps land only on the sequences whose index is
    a multiple of ``gcd(dense_every, N)`` (with period 10 and ``N = 4`` only on sequences
    0 and 2, with ``N = 5`` only on sequence 0). The default is the prime 11 rather than
    10 so that, unless ``N`` is a multiple of 11, the dense steps cycle through every
    sequence (for ``N = 5``: sequences 0, 1, 2, 3, 4 at steps 0, 11, 22, 33, 44).

    Args:
        graph: the sequence's pattern (its conditions are cached on it).
        step: the training step.
        dense_every: period of the dense interleave (0: only when a condition fails).
    """
    owner = "dual_uses_dense"
    if not isinstance(dense_every, int) or dense_every < 0:
        raise ValueError(f"{owner}: expected `dense_every` >= 0 but got {dense_every!r}.")
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"{owner}: expected `step` >= 0 but got {step!r}.")
    if dense_every > 0 and step % dense_every == 0:
        return True
    return not all(graph.conditions().values())


def resolve_kind(
    graph: AttentionGraph,
    kind: str,
    *,
    step: int = 0,
    dense_every: int = DEFAULT_DENSE_EVERY,
    sparse_kind: str = "sparse",
    num_clusters: int = 1,
    block_size: int = 16,
    threshold: float = 0.0,
) -> str:
    """The kernel ``kind`` runs on ``graph``: ``"dense"``, ``"raw"``, ``"sparse"`` or
    ``"cluster_sparse"``.

    * ``"dense"``, ``"raw"``, ``"sparse"``, ``"cluster_sparse"``: themselves;
    * ``"auto"``: ``graph.auto_kind(num_clusters, block_size, threshold)`` --
      ``"cluster_sparse"`` when the cluster-sparse layout's
      :attr:`~lightgraph.functional.attention.ClusterSparseLayout.tile_fill` is at least
      :data:`~lightgraph.functional.attention.AUTO_MIN_TILE_FILL`, else ``"sparse"``
      (deterministic, cached on the graph);
    * ``"dual"``: ``"dense"`` when
      :func:`~lightgraph.functional.attention.dual_uses_dense` says so (``dense_every >
      0`` and ``step % dense_every == 0``, or the pattern fails C1-C3), otherwise
      ``sparse_kind`` resolved as above.

    Args:
        graph: the sequence's pattern.
        kind: one of :data:`KINDS`.
        step: training step, for ``"dual"``.
        dense_every: period of ``"dual"``'s dense interleave (0: only when a condition
            fails); pass 0 in evaluation.
        sparse_kind: what ``"dual"`` runs between dense steps, one of :data:`SPARSE_KINDS`.
        num_clusters, block_size, threshold: the cluster-sparse layout (``"auto"``).
    """
    owner = "resolve_kind"
    check_choice(owner, "kind", kind, KINDS)
    check_choice(owner, "sparse_kind", sparse_kind, SPARSE_KINDS)
    if kind == "dual":
        if dual_uses_dense(graph, step, dense_every):
            return "dense"
        kind = sparse_kind
    if kind == "auto":
        return graph.auto_kind(num_clusters, block_size, threshold)
    return kind


class _LookupRows(torch.autograd.Function):
    """``table[index]`` whose backward sums the gradient rows with ``index_add_``."""

    @staticmethod
    def forward(ctx, table: Tensor, index: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(index)
        ctx.num_rows = table.shape[0]
        return table[index]

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        (index,) = ctx.saved_tensors
        flat = index.reshape(-1)
        grad = grad.reshape(flat.numel(), *grad.shape[index.dim() :])
        out = grad.new_zeros(ctx.num_rows, *grad.shape[1:])
        return out.index_add_(0, flat, grad), None


def lookup_rows(table: Tensor, index: Tensor) -> Tensor:
    """``table[index]`` (rows of a small table for many entries: the spatial-bias lookup).

    Same values as ``table[index]``; the gradient of ``table`` is summed with
    ``index_add_`` rather than advanced indexing's backward, which on CUDA sorts the
    entries and adds each row's duplicates one after another: with millions of entries
    over a few dozen buckets that took 96% of a Graphormer-slim training step at 131K
    tokens on an H100 (0.58 s per lookup)."""
    if not (torch.is_grad_enabled() and table.requires_grad):
        return table[index]
    return _LookupRows.apply(table, index)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    graph: AttentionGraph,
    kind: str,
    bias_table: Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    step: int = 0,
    dense_every: int = DEFAULT_DENSE_EVERY,
    sparse_kind: str = "sparse",
    num_clusters: int | None = None,
    block_size: int = 16,
    threshold: float = 0.0,
) -> Tensor:
    """The attention of one layer over ``graph``, by ``kind`` (one of :data:`KINDS`).

    * ``"dense"``: full attention with
      :func:`~lightgraph.functional.attention.dense_attention` (SDPA);
    * ``"raw"``: full attention with :func:`~lightgraph.functional.attention.raw_attention`
      (materialised scores);
    * ``"sparse"``: :func:`~lightgraph.functional.attention.sparse_attention` over
      ``graph.edge_index``;
    * ``"cluster_sparse"``: :func:`~lightgraph.functional.attention.cluster_sparse_attention`
      over ``graph.cluster_layout(num_clusters, block_size, threshold)``;
    * ``"auto"``: ``"cluster_sparse"`` when that layout's tiles are at least
      :data:`~lightgraph.functional.attention.AUTO_MIN_TILE_FILL` full, else
      ``"sparse"`` (:meth:`AttentionGraph.auto_kind`: deterministic, cached on the graph);
    * ``"dual"``: TorchGT's dual-interleaved attention -- ``sparse_kind`` (``"sparse"``,
      ``"cluster_sparse"`` or ``"auto"``), but ``"dense"`` when
      :func:`~lightgraph.functional.attention.dual_uses_dense` says so (every
      ``dense_every`` steps, and always when the pattern fails C1-C3).

    :func:`resolve_kind` tells which of the four kernels a call runs. The per-head bias
    is looked up in ``bias_table`` with ``graph.edge_bucket`` (sparse kinds), the
    layout's buckets (``far_bucket`` on added pairs) or ``graph.dense_bucket`` (dense
    kinds); where that bucket is ``None`` the kind runs without bias. A query whose
    every pair is masked (``-inf`` bias) outputs zeros under every kind.

    Args:
        q, k, v: ``[S, H, D]`` for the heads this process computes.
        graph: the sequence's pattern (on the device of ``q``).
        kind: one of :data:`KINDS`.
        bias_table: ``[num_buckets, H]`` learned bias for these heads.
        dropout_p: attention dropout (pass 0 in evaluation).
        step: training step, for ``"dual"``.
        dense_every: period of the dense interleave for ``"dual"`` (0: never periodic;
            default :data:`~lightgraph.functional.attention.DEFAULT_DENSE_EVERY`, 11;
            pass 0 in evaluation).
        sparse_kind: the kind ``"dual"`` runs between dense steps, one of
            :data:`SPARSE_KINDS`.
        num_clusters: clusters ``k`` for ``"cluster_sparse"`` and ``"auto"``; ``None``
            uses :func:`~lightgraph.functional.attention.default_num_clusters` of
            ``H * D`` (at most ``S``), which depends on the sizes only, not on the machine.
        block_size: tile side ``d_b`` for ``"cluster_sparse"`` and ``"auto"``.
        threshold: transfer threshold for ``"cluster_sparse"`` and ``"auto"``.

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``
        - **output:** ``[S, H, D_v]``
    """
    owner = "attend"
    check_choice(owner, "kind", kind, KINDS)
    check_choice(owner, "sparse_kind", sparse_kind, SPARSE_KINDS)
    check_int(owner, "dense_every", dense_every, 0)
    S, H, D = check_qkv(owner, q, k, v)
    if not isinstance(graph, AttentionGraph):
        raise ValueError(
            f"{owner}: expected `graph` to be an AttentionGraph but got {type(graph).__name__}."
        )
    graph.validate()
    if graph.num_tokens != S:
        raise ValueError(
            f"{owner}: expected `graph` over S={S} tokens (the length of `q`) but it has "
            f"{graph.num_tokens}."
        )
    if graph.device != q.device:
        raise ValueError(
            f"{owner}: expected `graph` on {q.device} but it is on {graph.device}; call "
            f"`graph.to(device)`."
        )
    if bias_table is not None:
        check_bias_table(owner, bias_table, H, q)
        for name in ("edge_bucket", "dense_bucket"):
            top = graph.cache.get(("max_bucket", name), -1)
            if top >= bias_table.shape[0]:
                raise ValueError(
                    f"{owner}: `graph.{name}` uses bucket {top} but `bias_table` has only "
                    f"{bias_table.shape[0]} rows."
                )
    if num_clusters is None:
        num_clusters = min(default_num_clusters(H * D), S)
    kind = resolve_kind(
        graph,
        kind,
        step=step,
        dense_every=dense_every,
        sparse_kind=sparse_kind,
        num_clusters=num_clusters,
        block_size=block_size,
        threshold=threshold,
    )
    if kind in DENSE_KINDS:
        bias = None
        if bias_table is not None and graph.dense_bucket is not None:
            bias = lookup_rows(bias_table, graph.dense_bucket).permute(2, 0, 1)
        fn = dense_attention if kind == "dense" else raw_attention
        return fn(q, k, v, bias=bias, dropout_p=dropout_p)
    if kind == "sparse":
        pattern = graph.sorted_by_query()
        bias = None
        if bias_table is not None and pattern.edge_bucket is not None:
            bias = lookup_rows(bias_table, pattern.edge_bucket)
        dropout_p = check_rate(owner, "dropout_p", dropout_p)
        return _sparse_attention(q, k, v, graph._sparse_structure(H), bias, dropout_p)
    layout = graph.cluster_layout(num_clusters, block_size, threshold)
    table = bias_table if layout.tile_bucket is not None else None
    return cluster_sparse_attention(q, k, v, layout, table, dropout_p=dropout_p)
