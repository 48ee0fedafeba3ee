"""The interface of bit-width policies for quantised boundary exchanges."""

from __future__ import annotations

from abc import ABC, abstractmethod

from torch import Tensor

from lightgraph.data.partition_plan import PartitionPlan

BITS: tuple[int, ...] = (1, 2, 4, 8)


def check_bits(owner: str, name: str, value: int, allowed: tuple[int, ...] = BITS) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
        raise ValueError(f"{owner}: expected `{name}` to be one of {allowed} but got {value!r}.")
    return value


class BitWidthPolicy(ABC):
    """Chooses the bit-width of every boundary message row.

    The sender of a row and its receiver call :meth:`row_bits` independently — the sender
    for the inner nodes it sends, the receiver for the halo nodes it receives — and must
    get the same answer, so a policy may depend only on information both ends share
    (global node properties stored in the :class:`~lightgraph.data.PartitionPlan`, the
    layer, the direction and its own settings, which callbacks change identically on all
    ranks). No bit-width metadata is sent.

    Attributes:
        base_bits: the time-adaptive base width :math:`b_t`
            (:class:`~lightgraph.callbacks.AdaptiveBitWidth` sets it between epochs).
    """

    def __init__(self, base_bits: int = 8) -> None:
        self.base_bits = check_bits(type(self).__name__, "base_bits", base_bits)

    @property
    def base_bits(self) -> int:
        return self._base_bits

    @base_bits.setter
    def base_bits(self, value: int) -> None:
        self._base_bits = check_bits(type(self).__name__, "base_bits", value)

    @abstractmethod
    def row_bits(self, plan: PartitionPlan, nodes: Tensor, layer: str, direction: str) -> Tensor:
        """Bit-width (``torch.long``, values in (1, 2, 4, 8)) of each row.

        Args:
            plan: the calling rank's plan.
            nodes: local ids of the rows' nodes (inner nodes when sending, halo nodes when
                receiving).
            layer: the exchanging layer's name.
            direction: ``"forward"`` (embeddings) or ``"backward"`` (gradients).
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_bits={self.base_bits})"
