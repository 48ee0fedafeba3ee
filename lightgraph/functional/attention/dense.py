"""Full attention through PyTorch's fused ``scaled_dot_product_attention`` ("GP-Flash")."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lightgraph.utilities.checks import check_qkv, check_rate, describe

__all__ = ["dense_attention"]


def _dense_inputs(
    owner: str, S: int, H: int, q: Tensor, bias: Tensor | None, mask: Tensor | None
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Check ``bias``/``mask`` of the dense kinds.

    Returns:
        ``(bias, mask with the empty rows opened, empty rows)``; the last is ``None`` when
        every query may attend to some key.
    """
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.shape != (H, S, S):
            raise ValueError(
                f"{owner}: expected `bias` of shape [H, S, S] = [{H}, {S}, {S}] but got "
                f"{describe(bias)}."
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
                f"{describe(mask)}."
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


def _open_dead_rows(scores: Tensor) -> tuple[Tensor, Tensor | None]:
    """Rows of ``[H, S, S]`` additive scores that are ``-inf`` everywhere (a query whose
    every key is masked, e.g. by the masked bucket's ``-inf`` bias).

    Returns:
        ``(scores with those rows set to 0, [H, S] bool dead rows)``; the last is ``None``
        when there are none. Softmax over a dead row would be ``0 / 0 = NaN`` in the
        output and, through its backward, in every gradient; opened rows are finite and
        their outputs are zeroed by the caller, which makes their gradients exactly zero
        (the other rows are untouched).
    """
    dead = torch.isneginf(scores).all(-1)
    if not bool(dead.any()):
        return scores, None
    return scores.masked_fill(dead[..., None], 0.0), dead


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
            that may attend to nothing (by ``mask``, or a head's ``bias`` row that is
            ``-inf`` at every allowed key) outputs zeros, with zero gradients and no NaN.
        dropout_p: dropout on the attention probabilities (pass 0 in evaluation).

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``
        - **output:** ``[S, H, D_v]``
    """
    owner = "dense_attention"
    S, H, _ = check_qkv(owner, q, k, v)
    dropout_p = check_rate(owner, "dropout_p", dropout_p)
    bias, mask, empty = _dense_inputs(owner, S, H, q, bias, mask)
    attn_mask, dead = mask, None
    if bias is not None:
        attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        # Not every SDPA kernel zeroes a fully masked row: open such rows, zero them below.
        attn_mask, dead = _open_dead_rows(attn_mask)
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
    if dead is not None:
        out = out.masked_fill(dead.t()[:, :, None], 0.0)
    return out
