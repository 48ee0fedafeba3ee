"""TorchGT's attention kernels behind one entry point: dense, raw, sparse, cluster-sparse, dual."""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from lightgraph.nn.cluster_sparse import (
    ClusterSparseLayout,
    check_bias_table,
    check_dropout,
    check_edge_index,
    check_qkv,
    cluster_sparse_attention,
)

__all__ = [
    "KINDS",
    "AttentionGraph",
    "ClusterSparseLayout",
    "SortedPattern",
    "attend",
    "check_conditions",
    "cluster_sparse_attention",
    "default_num_clusters",
    "dense_attention",
    "dual_uses_dense",
    "raw_attention",
    "sparse_attention",
]

#: The attention kinds :func:`attend` dispatches to.
KINDS: tuple[str, ...] = ("dense", "raw", "sparse", "cluster_sparse", "dual")

#: The integer :math:`i` of the thesis's rule :math:`k = \lfloor\sqrt{Q_{L2} / (i\,d)}\rfloor`.
#: 1536 reproduces the thesis's fitted ``k = 8`` for an RTX 3090 (6 MiB L2) at ``d = 64``.
CLUSTER_CACHE_DIVISOR: int = 1536

_L2_SIZE_FILE = "/sys/devices/system/cpu/cpu0/cache/index2/size"


class SortedPattern(NamedTuple):
    """A pattern sorted by query, then key (CSR order)."""

    edge_index: Tensor  # [2, E]
    edge_bucket: Tensor | None  # [E]
    perm: Tensor  # [E]: sorted = original[..., perm]
    ptr: Tensor  # [S + 1]: the entries of query i are ptr[i]:ptr[i + 1]


@dataclass(eq=False)
class AttentionGraph:
    """The attention pattern of one token sequence (tokens ``0 .. num_tokens - 1``).

    Entry ``e`` lets query ``edge_index[1, e]`` attend to key ``edge_index[0, e]``. The
    pattern must hold the self-loops (condition C1) and, if the model has global tokens,
    their edges. Derived data (sorted views, kernel structures, layouts, conditions) is
    cached in ``cache``: treat the graph as immutable once used, or clear ``cache``.

    Args:
        num_tokens: sequence length ``S``.
        edge_index: ``[2, E]`` long, row 0 key (source), row 1 query (target).
        edge_bucket: ``[E]`` long row of the per-head bias table for every entry (e.g. a
            shortest-path-distance bucket); ``None`` for no bias on sparse kinds.
        dense_bucket: ``[S, S]`` long bucket of every (query, key) pair, for the dense kinds
            on small sequences; ``None`` for no bias on dense kinds.
        far_bucket: bucket of the pairs a cluster-sparse transfer adds.
        num_layers: model depth ``L`` (condition C3).
        cache: derived data, filled lazily.
    """

    num_tokens: int
    edge_index: Tensor
    edge_bucket: Tensor | None = None
    dense_bucket: Tensor | None = None
    far_bucket: int = 0
    num_layers: int = 1
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    def validate(self) -> AttentionGraph:
        """Check shapes, dtypes, devices and id ranges; returns ``self``. Cached once it passes."""
        if self.cache.get("validated"):
            return self
        owner = "AttentionGraph"
        S = self.num_tokens
        if not isinstance(S, int) or S < 1:
            raise ValueError(f"{owner}: expected `num_tokens` >= 1 but got {S!r}.")
        check_edge_index(owner, self.edge_index, S)
        E, device = self.edge_index.shape[1], self.edge_index.device
        if self.edge_bucket is not None:
            b = self.edge_bucket
            if not isinstance(b, Tensor) or b.shape != (E,) or b.dtype != torch.long:
                raise ValueError(
                    f"{owner}: expected `edge_bucket` of shape [E={E}] and dtype torch.long but got "
                    f"{_describe(b)}."
                )
        if self.dense_bucket is not None:
            b = self.dense_bucket
            if not isinstance(b, Tensor) or b.shape != (S, S) or b.dtype != torch.long:
                raise ValueError(
                    f"{owner}: expected `dense_bucket` of shape [S, S] = [{S}, {S}] and dtype "
                    f"torch.long but got {_describe(b)}."
                )
        for name in ("edge_bucket", "dense_bucket"):
            b = getattr(self, name)
            if b is not None and b.numel():
                if b.device != device:
                    raise ValueError(
                        f"{owner}: expected `{name}` on the device of `edge_index` ({device}) but "
                        f"got {b.device}."
                    )
                if int(b.min()) < 0:
                    raise ValueError(f"{owner}: expected `{name}` >= 0 but found {int(b.min())}.")
                self.cache[("max_bucket", name)] = int(b.max())
        if not isinstance(self.far_bucket, int) or self.far_bucket < 0:
            raise ValueError(f"{owner}: expected `far_bucket` >= 0 but got {self.far_bucket!r}.")
        if not isinstance(self.num_layers, int) or self.num_layers < 1:
            raise ValueError(f"{owner}: expected `num_layers` >= 1 but got {self.num_layers!r}.")
        self.cache["validated"] = True
        return self

    @property
    def device(self) -> torch.device:
        return self.edge_index.device

    def to(self, device: torch.device | str) -> AttentionGraph:
        """A copy on ``device`` (the condition results carry over; other cached data is rebuilt)."""

        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device)

        out = AttentionGraph(
            self.num_tokens,
            self.edge_index.to(device),
            move(self.edge_bucket),
            move(self.dense_bucket),
            self.far_bucket,
            self.num_layers,
        )
        if "conditions" in self.cache:
            out.cache["conditions"] = self.cache["conditions"]
        return out

    def sorted_by_query(self) -> SortedPattern:
        """The pattern sorted by query, then key, with its CSR pointer (cached)."""
        cached = self.cache.get("sorted")
        if cached is None:
            self.validate()
            cached = _sort_by_query(self.edge_index, self.num_tokens, self.edge_bucket)
            self.cache["sorted"] = cached
        return cached

    def conditions(self) -> dict[str, bool]:
        """Conditions C1-C3 of :func:`check_conditions` for this pattern (cached)."""
        cached = self.cache.get("conditions")
        if cached is None:
            self.validate()
            cached = check_conditions(self.edge_index, self.num_tokens, self.num_layers)
            self.cache["conditions"] = cached
        return dict(cached)

    def cluster_layout(
        self, num_clusters: int, block_size: int = 16, threshold: float = 0.0
    ) -> ClusterSparseLayout:
        """The :class:`ClusterSparseLayout` of this pattern (the latest one is cached)."""
        key = (num_clusters, block_size, float(threshold))
        cached = self.cache.get("cluster_layout")
        if cached is None or cached[0] != key:
            self.validate()
            layout = ClusterSparseLayout(
                self.edge_index,
                self.num_tokens,
                num_clusters,
                block_size=block_size,
                threshold=threshold,
                edge_bucket=self.edge_bucket,
                far_bucket=self.far_bucket,
            )
            cached = (key, layout)
            self.cache["cluster_layout"] = cached
        return cached[1]

    def _sparse_structure(self, num_heads: int) -> _SparseStructure:
        key = ("sparse_structure", num_heads)
        cached = self.cache.get(key)
        if cached is None:
            pattern = self.sorted_by_query()
            cached = _SparseStructure(pattern.edge_index, self.num_tokens, num_heads)
            self.cache[key] = cached
        return cached


def _describe(x: Any) -> str:
    if isinstance(x, Tensor):
        return f"shape {tuple(x.shape)}, dtype {x.dtype}"
    return repr(x)


def _sort_by_query(
    edge_index: Tensor, num_tokens: int, edge_bucket: Tensor | None
) -> SortedPattern:
    src, dst = edge_index
    key = dst * num_tokens + src
    if key.numel() < 2 or bool((key[1:] >= key[:-1]).all()):
        perm = torch.arange(key.numel(), device=key.device)
    else:
        perm = torch.argsort(key, stable=True)
        edge_index = edge_index[:, perm]
        edge_bucket = None if edge_bucket is None else edge_bucket[perm]
    counts = torch.bincount(edge_index[1], minlength=num_tokens)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    return SortedPattern(edge_index, edge_bucket, perm, ptr)


# ---------------------------------------------------------------------------------------
# Dense kinds.


def _dense_inputs(
    owner: str, S: int, H: int, q: Tensor, bias: Tensor | None, mask: Tensor | None
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Check ``bias``/``mask``; returns (bias, mask with empty rows opened, empty rows)."""
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.shape != (H, S, S):
            raise ValueError(
                f"{owner}: expected `bias` of shape [H, S, S] = [{H}, {S}, {S}] but got "
                f"{_describe(bias)}."
            )
        if bias.dtype != q.dtype or bias.device != q.device:
            raise ValueError(
                f"{owner}: expected `bias` with the dtype and device of `q` ({q.dtype}, {q.device}) "
                f"but got ({bias.dtype}, {bias.device})."
            )
    empty = None
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.shape != (S, S) or mask.dtype != torch.bool:
            raise ValueError(
                f"{owner}: expected `mask` of shape [S, S] = [{S}, {S}] and dtype torch.bool but got "
                f"{_describe(mask)}."
            )
        if mask.device != q.device:
            raise ValueError(f"{owner}: expected `mask` on {q.device} but got {mask.device}.")
        # A query that may attend to nothing outputs zeros: open its row (no NaN anywhere),
        # then zero its output.
        empty = ~mask.any(-1)
        if bool(empty.any()):
            mask = mask | empty[:, None]
        else:
            empty = None
    return bias, mask, empty


def dense_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Full attention with :func:`torch.nn.functional.scaled_dot_product_attention`.

    .. math::
        \\mathbf{O} = \\operatorname{softmax}\\Big(\\frac{\\mathbf{Q}\\mathbf{K}^\\top}{\\sqrt{D}}
        + \\mathbf{B}\\Big)\\mathbf{V}

    per head. Without ``bias`` and ``mask`` PyTorch picks a fused kernel (on CPU the flash
    kernel, no ``S x S`` memory); either one forces the math path.

    Args:
        q, k, v: ``[S, H, D]`` (``v`` may have its own last dimension).
        bias: ``[H, S, S]`` additive float bias.
        mask: ``[S, S]`` bool, ``True`` where query ``i`` may attend to key ``j``. A query
            that may attend to nothing outputs zeros.
        dropout_p: dropout on the attention probabilities (pass 0 in evaluation).

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``
        - **output:** ``[S, H, D_v]``
    """
    owner = "dense_attention"
    S, H, _ = check_qkv(owner, q, k, v)
    dropout_p = check_dropout(owner, dropout_p)
    bias, mask, empty = _dense_inputs(owner, S, H, q, bias, mask)
    attn_mask = mask
    if bias is not None:
        attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    # [1, H, S, D]: without the batch dimension PyTorch's CPU dispatch skips the flash kernel.
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        attn_mask=attn_mask,
        dropout_p=dropout_p,
    )[0].transpose(0, 1)
    if empty is not None:
        out = out.masked_fill(empty[:, None, None], 0.0)
    return out


def raw_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Full attention that materialises the ``[H, S, S]`` score matrix ("GP-Raw").

    Computes the same function as :func:`dense_attention` with plain tensor ops: scores
    :math:`\\mathbf{Q}\\mathbf{K}^\\top/\\sqrt{D} + \\mathbf{B}`, masked to :math:`-\\infty`,
    a row softmax, dropout, then the product with :math:`\\mathbf{V}`.

    Args:
        q, k, v: ``[S, H, D]`` (``v`` may have its own last dimension).
        bias: ``[H, S, S]`` additive float bias.
        mask: ``[S, S]`` bool, ``True`` where query ``i`` may attend to key ``j``. A query
            that may attend to nothing outputs zeros.
        dropout_p: dropout on the attention probabilities (pass 0 in evaluation).

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``
        - **output:** ``[S, H, D_v]``
    """
    owner = "raw_attention"
    S, H, D = check_qkv(owner, q, k, v)
    dropout_p = check_dropout(owner, dropout_p)
    bias, mask, empty = _dense_inputs(owner, S, H, q, bias, mask)
    scores = torch.einsum("ihd,jhd->hij", q, k) * (1.0 / math.sqrt(D))
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        probs = F.dropout(probs, dropout_p)
    out = torch.einsum("hij,jhd->ihd", probs, v)
    if empty is not None:
        out = out.masked_fill(empty[:, None, None], 0.0)
    return out


# ---------------------------------------------------------------------------------------
# Sparse kind.


class _SparseStructure:
    """CSR index arrays of a query-sorted pattern, repeated block-diagonally over ``H`` heads.

    Head ``h`` of token ``i`` is row ``h * S + i`` of an ``[H S, H S]`` matrix, so a single
    CSR product serves all heads (one call is much faster on CPU than one per head).
    """

    def __init__(self, edge_index: Tensor, num_tokens: int, num_heads: int) -> None:
        src, dst = edge_index
        S, H, E = num_tokens, num_heads, src.numel()
        self.num_rows, self.nnz = H * S, H * E
        device = src.device
        idx = torch.int32 if H * max(S, E) < 2**31 - 1 else torch.long
        heads = torch.arange(H, device=device)[:, None]

        def crow(counts: Tensor) -> Tensor:
            starts = torch.cumsum(counts, 0) - counts
            flat = (starts[None, :] + heads * E).reshape(-1)
            return torch.cat([flat, flat.new_full((1,), H * E)]).to(idx)

        in_deg = torch.bincount(dst, minlength=S)
        self.crow = crow(in_deg)
        self.col = (src[None, :] + heads * S).reshape(-1).to(idx)
        self.row = (dst[None, :] + heads * S).reshape(-1).to(idx)
        self.lengths = in_deg.repeat(H)
        perm = torch.argsort(src, stable=True)  # keeps queries ascending within a key
        self.crow_t = crow(torch.bincount(src, minlength=S))
        self.col_t = (dst[perm][None, :] + heads * S).reshape(-1).to(idx)
        self.perm_t = (perm[None, :] + heads * E).reshape(-1).to(idx)

    def matrix(self, values: Tensor, transpose: bool = False) -> Tensor:
        """The ``[H S, H S]`` CSR matrix with ``values`` (given in query-sorted order)."""
        size = (self.num_rows, self.num_rows)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta")
            if transpose:
                return torch.sparse_csr_tensor(
                    self.crow_t, self.col_t, values[self.perm_t], size, check_invariants=False
                )
            return torch.sparse_csr_tensor(
                self.crow, self.col, values, size, check_invariants=False
            )

    def sddmm(self, a: Tensor, b: Tensor, scale: float = 1.0) -> Tensor:
        """``scale * (a_i . b_j)`` for every entry ``(j -> i)``, ``a``/``b`` head-major ``[H S, D]``."""
        empty = self.matrix(a.new_zeros(self.nnz))
        return torch.sparse.sampled_addmm(empty, a, b.t(), beta=0.0, alpha=scale).values()

    def softmax(self, logits: Tensor) -> Tensor:
        """Softmax over the entries of every (head, query) row, stabilised by the row max."""
        row_max = torch.segment_reduce(logits, "max", lengths=self.lengths, unsafe=True)
        row_max = row_max.masked_fill_(torch.isinf(row_max), 0.0)
        probs = (logits - row_max[self.row]).exp_()
        denom = torch.zeros_like(row_max).index_add_(0, self.row, probs)
        denom = denom.masked_fill_(denom == 0, 1.0)
        return probs.div_(denom[self.row])


def _head_major(x: Tensor) -> Tensor:
    """``[S, H, D]`` -> contiguous ``[H S, D]``."""
    return x.transpose(0, 1).reshape(x.shape[0] * x.shape[1], x.shape[2])


class _SparseAttention(torch.autograd.Function):
    """Edge-wise attention as CSR products: SDDMM for the scores, SpMM for the outputs.

    Saves q, k, v (head-major), the output and the ``[H E]`` probabilities; no
    ``[E, H, D]`` tensor is ever formed.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor | None,
        st: _SparseStructure,
        scale: float,
        dropout_p: float,
    ) -> Tensor:
        S, H, _ = q.shape
        qh, kh, vh = _head_major(q), _head_major(k), _head_major(v)
        logits = st.sddmm(qh, kh, scale)
        if bias is not None:
            logits = logits + bias.t().reshape(-1)
        probs = st.softmax(logits)
        keep, attn = None, probs
        if dropout_p > 0.0:
            keep = torch.rand_like(probs) >= dropout_p
            attn = probs * keep / (1.0 - dropout_p)
        out = torch.sparse.mm(st.matrix(attn), vh).view(H, S, -1).transpose(0, 1).contiguous()
        ctx.save_for_backward(qh, kh, vh, probs, keep, out)
        ctx.st, ctx.scale, ctx.dropout_p = st, scale, dropout_p
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        qh, kh, vh, probs, keep, out = ctx.saved_tensors
        st: _SparseStructure = ctx.st
        S, H, Dv = out.shape
        d_out = _head_major(grad_out)
        grad_q = grad_k = grad_v = grad_bias = None

        def back(x: Tensor, D: int) -> Tensor:
            return x.view(H, S, D).transpose(0, 1)

        if ctx.needs_input_grad[2]:
            attn = probs if keep is None else probs * keep / (1.0 - ctx.dropout_p)
            grad_v = back(torch.sparse.mm(st.matrix(attn, transpose=True), d_out), Dv)
        if any(ctx.needs_input_grad[i] for i in (0, 1, 3)):
            d_attn = st.sddmm(d_out, vh)
            if keep is not None:
                d_attn = d_attn * keep / (1.0 - ctx.dropout_p)
            # sum_j p_ij dP_ij = dO_i . out_i, also with dropout (out uses the dropped weights).
            delta = _head_major((grad_out * out).sum(-1, keepdim=True)).view(-1)
            d_logits = probs * (d_attn - delta[st.row])
            D = qh.shape[1]
            if ctx.needs_input_grad[0]:
                grad_q = back(torch.sparse.mm(st.matrix(d_logits), kh).mul_(ctx.scale), D)
            if ctx.needs_input_grad[1]:
                dk = torch.sparse.mm(st.matrix(d_logits, transpose=True), qh).mul_(ctx.scale)
                grad_k = back(dk, D)
            if ctx.needs_input_grad[3]:
                grad_bias = d_logits.view(H, -1).t()
        return grad_q, grad_k, grad_v, grad_bias, None, None, None


def _sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, st: _SparseStructure, bias: Tensor | None, dropout_p: float
) -> Tensor:
    scale = 1.0 / math.sqrt(q.shape[2])
    if q.dtype in (torch.float32, torch.float64):
        return _SparseAttention.apply(q, k, v, bias, st, scale, dropout_p)
    # The sparse products have no half-precision kernels: compute in float32.
    bias = None if bias is None else bias.float()
    out = _SparseAttention.apply(q.float(), k.float(), v.float(), bias, st, scale, dropout_p)
    return out.to(q.dtype)


def sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    edge_index: Tensor,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """TorchGT's topology-induced attention: every query attends to its pattern entries only.

    .. math::
        \\mathbf{o}_i = \\sum_{e = (j \\to i)} \\operatorname{softmax}_e\\Big(
        \\frac{\\mathbf{q}_i^\\top \\mathbf{k}_j}{\\sqrt{D}} + b_e\\Big) \\mathbf{v}_j

    The softmax runs over the entries of each query and subtracts their maximum (no
    clamping), so huge logits stay finite. Every column of ``edge_index`` is one entry
    (a duplicate pair counts twice). A query without entries outputs zeros. The scores are
    a sampled dense-dense product and the outputs a sparse-dense product on one
    block-diagonal CSR matrix over all heads; a custom autograd function keeps memory at
    :math:`O(E H)` (first-order gradients only).

    Args:
        q, k, v: ``[S, H, D]`` (``v`` may have its own last dimension).
        edge_index: ``[2, E]`` long, row 0 key (source), row 1 query (target); any order.
        bias: ``[E, H]`` additive bias of every entry.
        dropout_p: dropout on the attention probabilities (pass 0 in evaluation).

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``, edge_index ``[2, E]``
        - **output:** ``[S, H, D_v]``
    """
    owner = "sparse_attention"
    S, H, _ = check_qkv(owner, q, k, v)
    dropout_p = check_dropout(owner, dropout_p)
    check_edge_index(owner, edge_index, S)
    if edge_index.device != q.device:
        raise ValueError(
            f"{owner}: expected `edge_index` on {q.device} but got {edge_index.device}."
        )
    E = edge_index.shape[1]
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.shape != (E, H):
            raise ValueError(
                f"{owner}: expected `bias` of shape [E, H] = [{E}, {H}] but got {_describe(bias)}."
            )
        if bias.dtype != q.dtype or bias.device != q.device:
            raise ValueError(
                f"{owner}: expected `bias` with the dtype and device of `q` ({q.dtype}, {q.device}) "
                f"but got ({bias.dtype}, {bias.device})."
            )
    pattern = _sort_by_query(edge_index, S, None)
    if bias is not None:
        bias = bias[pattern.perm]
    return _sparse_attention(q, k, v, _SparseStructure(pattern.edge_index, S, H), bias, dropout_p)


# ---------------------------------------------------------------------------------------
# Conditions C1-C3 and dual-interleaved attention.


def _hamiltonian_certificate(src: Tensor, dst: Tensor, n: int) -> bool:
    """Whether the undirected simple graph of the pattern provably has a Hamiltonian path."""
    if n <= 1:
        return True
    off = src != dst
    lo, hi = torch.minimum(src[off], dst[off]), torch.maximum(src[off], dst[off])
    pairs = torch.unique(lo * n + hi)
    chain = torch.arange(n - 1, device=src.device)
    if bool(torch.isin(chain * n + chain + 1, pairs).all()):
        return True  # the token order 0, 1, ..., n-1 is itself a Hamiltonian path
    if n < 3:
        return False
    degree = torch.bincount(pairs // n, minlength=n) + torch.bincount(pairs % n, minlength=n)
    return bool(2 * degree.min() >= n)  # Dirac: a Hamiltonian cycle, hence a path


def _csr_adjacency(rows: Tensor, cols: Tensor, n: int) -> Tensor:
    order = torch.argsort(rows * n + cols)
    rows, cols = rows[order], cols[order]
    counts = torch.bincount(rows, minlength=n)
    crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    values = torch.ones(rows.numel(), device=rows.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, cols, values, (n, n), check_invariants=False)


def _hops_to_cover(adjacency: Tensor, start: Tensor, max_hops: int) -> int | None:
    """Hops until every column's BFS (from the rows ``start`` marks) covers all tokens."""
    reached = start
    if bool(reached.all()):
        return 0
    for hop in range(1, max_hops + 1):
        reached = reached | (torch.sparse.mm(adjacency, reached.float()) > 0)
        if bool(reached.all()):
            return hop
    return None


def _within_hops(src: Tensor, dst: Tensor, n: int, num_layers: int) -> bool:
    """Whether information of every token reaches every other within ``num_layers`` hops."""
    if n <= 1:
        return True
    forward = _csr_adjacency(dst, src, n)  # (A x)_i gathers from the keys of query i
    backward = _csr_adjacency(src, dst, n)
    off = src != dst
    degree = torch.bincount(src[off], minlength=n) + torch.bincount(dst[off], minlength=n)
    hub = torch.zeros(n, 1, dtype=torch.bool, device=src.device)
    hub[int(degree.argmax())] = True
    # The hub must reach everyone and be reached by everyone: otherwise C3 fails at once.
    out_hops = _hops_to_cover(forward, hub, num_layers)
    if out_hops is None:
        return False
    in_hops = _hops_to_cover(backward, hub, num_layers)
    if in_hops is None:
        return False
    if out_hops + in_hops <= num_layers:
        return True  # every pair routes through the hub (e.g. a global token)
    # Exact: a BFS from every token, a batch of sources per sparse product, first failure exits.
    batch = max(1, min(n, (1 << 22) // n))
    for first in range(0, n, batch):
        sources = torch.arange(first, min(first + batch, n), device=src.device)
        start = torch.zeros(n, sources.numel(), dtype=torch.bool, device=src.device)
        start[sources, torch.arange(sources.numel(), device=src.device)] = True
        if _hops_to_cover(forward, start, num_layers) is None:
            return False
    return True


def check_conditions(edge_index: Tensor, num_tokens: int, num_layers: int) -> dict[str, bool]:
    """TorchGT's conditions for the topology-induced pattern (Thesis ch. 4, §4.3.2).

    * ``c1``: every token has a self-loop entry.
    * ``c2``: the pattern has a Hamiltonian path -- *certified* by a sufficient test on the
      undirected simple graph (directions, self-loops and duplicates dropped): either the
      token order ``0, 1, ..., S-1`` is a path of the graph, or Dirac's theorem applies
      (:math:`S \\ge 3` and minimum degree :math:`\\ge S/2`, which gives a Hamiltonian
      cycle). ``False`` means "cannot certify", not "no such path". ``S <= 1`` passes.
    * ``c3``: information of every token reaches every other token within ``num_layers``
      hops along the entries (key to query; walks of at most ``num_layers`` edges). Sparse
      BFS steps with early exit: the highest-degree token must reach and be reached by all
      tokens (else ``False``); if the two hop counts sum to at most ``num_layers`` (a
      global token) the answer is ``True``; otherwise batched BFS from every token decides.

    Args:
        edge_index: ``[2, E]`` long, row 0 key (source), row 1 query (target).
        num_tokens: sequence length ``S``.
        num_layers: model depth ``L``.

    Returns:
        ``{"c1": bool, "c2": bool, "c3": bool}``.
    """
    owner = "check_conditions"
    if not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"{owner}: expected `num_tokens` >= 1 but got {num_tokens!r}.")
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"{owner}: expected `num_layers` >= 1 but got {num_layers!r}.")
    check_edge_index(owner, edge_index, num_tokens)
    src, dst = edge_index
    has_loop = torch.zeros(num_tokens, dtype=torch.bool, device=src.device)
    has_loop[src[src == dst]] = True
    return {
        "c1": bool(has_loop.all()),
        "c2": _hamiltonian_certificate(src, dst, num_tokens),
        "c3": _within_hops(src, dst, num_tokens, num_layers),
    }


def dual_uses_dense(graph: AttentionGraph, step: int, dense_every: int) -> bool:
    """Whether dual-interleaved attention runs the dense pattern at ``step``.

    Dense when ``dense_every > 0`` and ``step % dense_every == 0`` (the periodic
    fully-connected interleave), and always when ``graph`` fails any of C1-C3.
    """
    owner = "dual_uses_dense"
    if not isinstance(dense_every, int) or dense_every < 0:
        raise ValueError(f"{owner}: expected `dense_every` >= 0 but got {dense_every!r}.")
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"{owner}: expected `step` >= 0 but got {step!r}.")
    if dense_every > 0 and step % dense_every == 0:
        return True
    return not all(graph.conditions().values())


@functools.lru_cache(maxsize=1)
def _l2_cache_bytes() -> int:
    try:
        with open(_L2_SIZE_FILE) as f:
            text = f.read().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        return int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        return 1 << 20


def default_num_clusters(hidden_channels: int, cache_bytes: int | None = None) -> int:
    """TorchGT's cluster count :math:`k = \\lfloor\\sqrt{Q_{L2} / (i\\,d)}\\rfloor`, at least 1.

    :math:`Q_{L2}` is ``cache_bytes`` or, if ``None``, this machine's L2 size (read from
    ``/sys/devices/system/cpu/cpu0/cache/index2/size``; 1 MiB when unavailable), :math:`d`
    is ``hidden_channels`` and :math:`i` is :data:`CLUSTER_CACHE_DIVISOR` (1536, which
    gives the thesis's ``k = 8`` for a 6 MiB L2 at ``d = 64``).
    """
    owner = "default_num_clusters"
    if not isinstance(hidden_channels, int) or hidden_channels < 1:
        raise ValueError(f"{owner}: expected `hidden_channels` >= 1 but got {hidden_channels!r}.")
    if cache_bytes is None:
        cache_bytes = _l2_cache_bytes()
    if not isinstance(cache_bytes, int) or cache_bytes < 1:
        raise ValueError(f"{owner}: expected `cache_bytes` >= 1 but got {cache_bytes!r}.")
    return max(1, math.isqrt(cache_bytes // (CLUSTER_CACHE_DIVISOR * hidden_channels)))


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
    dense_every: int = 0,
    num_clusters: int | None = None,
    block_size: int = 16,
    threshold: float = 0.0,
) -> Tensor:
    """The attention of one layer over ``graph``, by ``kind`` (one of :data:`KINDS`).

    * ``"dense"``: full attention with :func:`dense_attention` (SDPA);
    * ``"raw"``: full attention with :func:`raw_attention` (materialised scores);
    * ``"sparse"``: :func:`sparse_attention` over ``graph.edge_index``;
    * ``"cluster_sparse"``: :func:`cluster_sparse_attention` over
      ``graph.cluster_layout(num_clusters, block_size, threshold)``;
    * ``"dual"``: TorchGT's dual-interleaved attention -- ``"sparse"``, but ``"dense"``
      when :func:`dual_uses_dense` says so (every ``dense_every`` steps, and always when
      the pattern fails C1-C3).

    The per-head bias is looked up in ``bias_table`` with ``graph.edge_bucket`` (sparse
    kinds), the layout's buckets (``far_bucket`` on added pairs) or ``graph.dense_bucket``
    (dense kinds); where that bucket is ``None`` the kind runs without bias.

    Args:
        q, k, v: ``[S, H, D]`` for the heads this process computes.
        graph: the sequence's pattern (on the device of ``q``).
        kind: one of :data:`KINDS`.
        bias_table: ``[num_buckets, H]`` learned bias for these heads.
        dropout_p: attention dropout (pass 0 in evaluation).
        step: training step, for ``"dual"``.
        dense_every: period of the dense interleave for ``"dual"`` (0: never periodic).
        num_clusters: clusters ``k`` for ``"cluster_sparse"``; ``None`` uses
            :func:`default_num_clusters` of ``H * D`` (at most ``S``).
        block_size: tile side ``d_b`` for ``"cluster_sparse"``.
        threshold: transfer threshold for ``"cluster_sparse"``.

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``
        - **output:** ``[S, H, D_v]``
    """
    owner = "attend"
    if kind not in KINDS:
        raise ValueError(f"{owner}: expected `kind` to be one of {KINDS} but got {kind!r}.")
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
    if kind == "dual":
        kind = "dense" if dual_uses_dense(graph, step, dense_every) else "sparse"
    if kind in ("dense", "raw"):
        bias = None
        if bias_table is not None and graph.dense_bucket is not None:
            bias = bias_table[graph.dense_bucket].permute(2, 0, 1)
        fn = dense_attention if kind == "dense" else raw_attention
        return fn(q, k, v, bias=bias, dropout_p=dropout_p)
    if kind == "sparse":
        pattern = graph.sorted_by_query()
        bias = None
        if bias_table is not None and pattern.edge_bucket is not None:
            bias = bias_table[pattern.edge_bucket]
        dropout_p = check_dropout(owner, dropout_p)
        return _sparse_attention(q, k, v, graph._sparse_structure(H), bias, dropout_p)
    if num_clusters is None:
        num_clusters = min(default_num_clusters(H * D), S)
    layout = graph.cluster_layout(num_clusters, block_size, threshold)
    table = bias_table if layout.tile_bucket is not None else None
    return cluster_sparse_attention(q, k, v, layout, table, dropout_p=dropout_p)
