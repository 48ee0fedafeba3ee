"""TorchGT's topology-induced sparse attention: CSR products over one block-diagonal matrix."""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from lightgraph.functional.attention.sorted_pattern import sort_by_query
from lightgraph.utilities.checks import check_graph_edge_index, check_qkv, check_rate, describe

__all__ = ["sparse_attention"]


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
    dropout_p = check_rate(owner, "dropout_p", dropout_p)
    check_graph_edge_index(owner, "edge_index", edge_index, S, unit="token", require_long=True)
    if edge_index.device != q.device:
        raise ValueError(
            f"{owner}: expected `edge_index` on {q.device} but got {edge_index.device}."
        )
    E = edge_index.shape[1]
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.shape != (E, H):
            raise ValueError(
                f"{owner}: expected `bias` of shape [E, H] = [{E}, {H}] but got {describe(bias)}."
            )
        if bias.dtype != q.dtype or bias.device != q.device:
            raise ValueError(
                f"{owner}: expected `bias` with the dtype and device of `q` ({q.dtype}, {q.device}) "
                f"but got ({bias.dtype}, {bias.device})."
            )
    pattern = sort_by_query(edge_index, S, None)
    if bias is not None:
        bias = bias[pattern.perm]
    return _sparse_attention(q, k, v, _SparseStructure(pattern.edge_index, S, H), bias, dropout_p)
