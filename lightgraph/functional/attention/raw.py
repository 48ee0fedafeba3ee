"""Full attention that materialises the score matrix ("GP-Raw")."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from lightgraph.functional.attention.dense import _dense_inputs, _open_dead_rows
from lightgraph.utilities.checks import check_qkv, check_rate

__all__ = ["raw_attention"]


def raw_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None = None,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Full attention that materialises the ``[H, S, S]`` score matrix ("GP-Raw").

    Computes the same function as
    :func:`~lightgraph.functional.attention.dense_attention` with plain tensor ops: scores
    :math:`\\mathbf{Q}\\mathbf{K}^\\top/\\sqrt{D} + \\mathbf{B}`, masked to :math:`-\\infty`,
    a row softmax, dropout, then the product with :math:`\\mathbf{V}`. A (head, query) row
    whose scores are all :math:`-\\infty` (every key masked, by ``mask`` or by a ``-inf``
    bias such as the masked bucket's) outputs zeros, like the other kinds: its scores are
    replaced by zeros before the softmax and its output zeroed after, so neither the
    output nor any gradient gets a NaN and the other rows' gradients are unchanged.

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
    dropout_p = check_rate(owner, "dropout_p", dropout_p)
    bias, mask, empty = _dense_inputs(owner, S, H, q, bias, mask)
    scores = torch.einsum("ihd,jhd->hij", q, k) * (1.0 / math.sqrt(D))
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    dead = None
    if bias is not None:
        scores, dead = _open_dead_rows(scores)
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        probs = F.dropout(probs, dropout_p)
    out = torch.einsum("hij,jhd->ihd", probs, v)
    if empty is not None:
        out = out.masked_fill(empty[:, None, None], 0.0)
    if dead is not None:
        out = out.masked_fill(dead.t()[:, :, None], 0.0)
    return out
