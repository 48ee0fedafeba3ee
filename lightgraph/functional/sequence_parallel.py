"""How a sequence's tokens are split over the ranks of a sequence-parallel group.

The runtime that moves the shards (:class:`~lightgraph.distributed.SequenceParallel`)
lives in :mod:`lightgraph.distributed`; these pure functions are shared by it, the data
modules that shard token batches and the models.
"""

from __future__ import annotations

from typing import Any

from lightgraph.utilities.checks import check_int

__all__ = ["shard_range", "shard_sizes"]


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


def __getattr__(name: str) -> Any:
    # Compatibility alias: SequenceParallel moved to the runtime floor (lightgraph.distributed).
    if name == "SequenceParallel":
        from lightgraph.distributed.sequence_parallel import SequenceParallel

        return SequenceParallel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
