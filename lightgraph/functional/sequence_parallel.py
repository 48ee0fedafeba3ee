"""How a sequence's tokens are split over the ranks of a sequence-parallel group.

The runtime that moves the shards (:class:`~lightgraph.distributed.SequenceParallel`)
lives in :mod:`lightgraph.distributed`; these pure functions are shared by it, the data
modules that shard token batches and the models.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.utilities.checks import check_int

__all__ = ["TOKEN_PLAN_KINDS", "shard_range", "shard_sizes", "token_plan"]

#: The two all-to-alls of Ulysses sequence parallelism, as :func:`token_plan` names them.
TOKEN_PLAN_KINDS: tuple[str, ...] = ("heads", "sequence")


def shard_sizes(num_tokens: int, world_size: int) -> list[int]:
    """Number of tokens each rank holds when ``num_tokens`` are split over ``world_size`` ranks.

    The split is contiguous and as even as possible: the first ``num_tokens % world_size``
    ranks hold one token more than the others.

    Example:
        >>> shard_sizes(11, 3)
        [4, 4, 3]
    """
    check_int("shard_sizes", "world_size", world_size)
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int):
        raise ValueError(
            f"shard_sizes: expected `num_tokens` to be an integer but got {num_tokens!r}."
        )
    if num_tokens < world_size:
        raise ValueError(
            f"shard_sizes: expected `num_tokens` to be at least `world_size` ({world_size}) so "
            f"every rank holds a token, but got num_tokens={num_tokens}. Use fewer ranks or "
            f"longer sequences."
        )
    base, extra = divmod(num_tokens, world_size)
    return [base + 1 if r < extra else base for r in range(world_size)]


def shard_range(num_tokens: int, world_size: int, rank: int) -> tuple[int, int]:
    """``[start, end)`` of the tokens ``rank`` holds (see :func:`shard_sizes`)."""
    sizes = shard_sizes(num_tokens, world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(
            f"shard_range: expected `rank` to be an integer in [0, {world_size}) but got {rank!r}."
        )
    start = sum(sizes[:rank])
    return start, start + sizes[rank]


def token_plan(
    kind: str,
    num_tokens: int,
    world_size: int,
    rank: int,
    importance: Tensor | None = None,
) -> HaloPlan:
    """One all-to-all of sequence parallelism as a :class:`~lightgraph.functional.HaloPlan`
    of *token rows*, so bit-width policies (:mod:`lightgraph.quant`) can size its messages.

    A token row is one token's values for the heads of one peer, flattened: in
    ``to_heads`` rank ``r`` sends each peer ``q`` its ``S_r`` tokens of ``q``'s heads, in
    ``to_sequence`` it sends ``q`` the ``S_q`` tokens of ``q``'s shard for its own heads.
    The plan describes the *forward* message, and the backward all-to-all (the gradients)
    moves the same rows the other way, as halo gradients go back to their owners:

    * ``"heads"`` (``to_heads``): the inner rows are this rank's ``S_r`` tokens (local id
      ``i`` = token ``start_r + i``), sent to every peer (``send_counts[q] = S_r``); the
      halo rows are the other ranks' tokens in token order (``halo_counts[q] = S_q``).
    * ``"sequence"`` (``to_sequence``): the inner rows are all ``S`` tokens (local id =
      token id) of this rank's heads; shard ``q`` goes to peer ``q``
      (``send_counts[q] = S_q``); the halo rows are this rank's own tokens, received once
      from every peer (``halo_counts[q] = S_r``).

    The local block (a rank's own tokens of its own heads) never travels:
    ``send_counts[rank] = halo_counts[rank] = 0``. ``global_ids`` are token ids;
    ``importance`` holds ``importance[token]`` of every local row (zeros without one),
    e.g. the token-degree importance :class:`~lightgraph.quant.DegreeAwareBits` reads.
    Sender and receiver of a message build matching plans: ``send_counts[q]`` of rank
    ``r`` equals ``halo_counts[r]`` of rank ``q``, row for row.

    Args:
        kind: ``"heads"`` or ``"sequence"``.
        num_tokens: sequence length ``S``.
        world_size: ranks ``P``.
        rank: this rank.
        importance: ``[S]`` float per-token importance in ``[0, 1]``, or ``None``.

    Example:
        >>> plan = token_plan("heads", 5, 2, 0)
        >>> plan.num_inner, plan.send_counts, plan.halo_counts, plan.global_ids.tolist()
        (3, [0, 3], [0, 2], [0, 1, 2, 3, 4])
    """
    if kind not in TOKEN_PLAN_KINDS:
        raise ValueError(f"token_plan: expected `kind` in {TOKEN_PLAN_KINDS} but got {kind!r}.")
    sizes = shard_sizes(num_tokens, world_size)
    start, end = shard_range(num_tokens, world_size, rank)
    local = end - start
    peers = [q for q in range(world_size) if q != rank]
    ranges = [shard_range(num_tokens, world_size, q) for q in range(world_size)]
    mine = torch.arange(start, end)
    others = torch.cat([torch.arange(*ranges[q]) for q in peers]) if peers else mine[:0]
    if kind == "heads":
        num_inner = local
        send_index = torch.arange(local).repeat(len(peers))
        send_counts = [0 if q == rank else local for q in range(world_size)]
        halo_counts = [0 if q == rank else sizes[q] for q in range(world_size)]
        global_ids = torch.cat([mine, others])
    else:
        num_inner = num_tokens
        send_index = others
        send_counts = [0 if q == rank else sizes[q] for q in range(world_size)]
        halo_counts = [0 if q == rank else local for q in range(world_size)]
        global_ids = torch.cat([torch.arange(num_tokens), mine.repeat(len(peers))])
    if importance is None:
        weights = torch.zeros(global_ids.numel(), dtype=torch.float32)
    else:
        if not isinstance(importance, Tensor) or importance.shape != (num_tokens,):
            got = tuple(importance.shape) if isinstance(importance, Tensor) else importance
            raise ValueError(
                f"token_plan: expected `importance` of shape [num_tokens={num_tokens}] but got "
                f"{got!r}."
            )
        weights = importance.detach().cpu().float()[global_ids]
    return HaloPlan(
        rank=rank,
        num_parts=world_size,
        num_inner=num_inner,
        send_index=send_index,
        send_counts=send_counts,
        halo_counts=halo_counts,
        global_ids=global_ids,
        importance=weights,
    )
