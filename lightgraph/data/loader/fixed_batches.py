"""The loader of data modules whose epoch is a fixed list of batches: a whole graph (layer-wise
evaluation, co-training's graph steps), a rank's partition (full-graph partition-parallel
training) or a graph's token sequences (the graph transformers)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class FixedBatchLoader(Generic[T]):
    """Yields the same ``batches``, in order, every epoch; its length is their number.

    Nothing is sampled or shuffled, so there is no position to resume: a resumed epoch
    starts again from the first batch, which is what Lightning does with any sized
    iterable. A plain list will not do as a Lightning dataloader: Lightning reads a list
    as several dataloaders.

    Args:
        batches: the batches of an epoch (one object for a one-step epoch: ``[graph]``).
    """

    def __init__(self, batches: Sequence[T]) -> None:
        if isinstance(batches, (str, bytes)) or not isinstance(batches, Sequence):
            raise TypeError(
                f"FixedBatchLoader: expected `batches` to be a sequence of the epoch's batches "
                f"(a list; `[batch]` for one) but got {type(batches).__name__}."
            )
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[T]:
        return iter(self.batches)

    def __repr__(self) -> str:
        return f"FixedBatchLoader(num_batches={len(self.batches)})"
