"""Cutting a macro-batch's training order into mini-batches.

HANOI's and JOESTAR's loaders train mini-batches drawn from one macro-batch at a time, so
every macro-batch ends with its own remainder. :func:`even_batches` spreads it: the
macro-batch's targets go into ``ceil(n / batch_size)`` mini-batches whose sizes differ by
at most one, instead of full batches and one small tail.

Under data parallelism the ``N`` ranks train shares of the same macro-batch, together
in the steps one process with the global batch gives it: :func:`macro_batch_steps` at
``N * b`` (:func:`~lightgraph.data.loader.macro_batch.shard_macro_batches`).
"""

from __future__ import annotations

import math

from torch import Tensor

__all__ = ["even_batches", "macro_batch_steps", "split_sizes"]


def even_batches(order: Tensor, batch_size: int) -> list[Tensor]:
    """``order`` cut into ``ceil(n / batch_size)`` consecutive mini-batches of near-equal size.

    Sizes differ by at most one (the first ``n mod count`` batches hold one more) and none
    exceeds ``batch_size``: a macro-batch of 1,250 targets at ``batch_size=1000`` gives two
    batches of 625, not 1,000 and 250. The step count is the same as fixed-size slicing
    (``ceil(n / batch_size)``); only the tail's share changes. Every macro-batch of
    HANOI and JOESTAR ends with such a tail, and a small one takes an optimiser step as
    large as a full one on a far noisier gradient: with JOESTAR-II's 16 of 128 partitions
    per macro-batch, slicing by 1,000 cost one point of test accuracy after 5 epochs, and
    with 64 of 128 (tails of 3 targets) four and a half (docs/joestar.md, "Mini-batches of
    a macro-batch").
    """
    n = int(order.numel())
    if n == 0:
        return []
    return list(order.tensor_split(math.ceil(n / int(batch_size))))


def macro_batch_steps(n: int, batch_size: int) -> int:
    """Mini-batches of a macro-batch of ``n`` targets at ``batch_size``: ``ceil(n /
    batch_size)`` (0 for ``n = 0``), as :func:`even_batches` cuts it.

    Data-parallel ranks use it at the global batch: ``N`` ranks at ``batch_size=b`` each
    take ``macro_batch_steps(n, N * b)`` steps on their shares of a macro-batch, the steps
    one process with the global batch ``N * b`` takes. (Cutting a whole macro-batch per
    rank at ``b`` would not keep that count: with ``n = 1250`` and a global batch of 1000,
    one process takes 2 steps of 625 and two ranks would take 3 of 417 each on half as many
    macro-batches, 12 global steps per epoch instead of 16, and a point of accuracy less.)
    """
    return math.ceil(int(n) / int(batch_size))


def split_sizes(n: int, count: int) -> list[int]:
    """The sizes of ``count`` consecutive near-equal pieces of ``n`` items (the first
    ``n mod count`` one larger), as ``Tensor.tensor_split(count)`` cuts them."""
    if count <= 0:
        return []
    q, r = divmod(int(n), int(count))
    return [q + 1] * r + [q] * (count - r)
