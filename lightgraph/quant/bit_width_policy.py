"""The interface of bit-width policies for quantised boundary exchanges."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.utilities.checks import BITS, check_bits

__all__ = ["BITS", "BitWidthPolicy", "check_bits"]


class BitWidthPolicy(ABC):
    """Chooses the bit-width of every boundary message row.

    The sender of a row and its receiver compute its width independently — the sender
    for the inner nodes it sends, the receiver for the halo nodes it receives — and must
    get the same answer, so a policy may depend only on information both ends share
    (global node properties stored in the :class:`~lightgraph.functional.HaloPlan`, the
    layer, the direction and its own settings, which callbacks change identically on all
    ranks). No bit-width metadata is sent.

    Node-wise policies implement :meth:`row_bits`. Policies whose widths depend on the
    device pair a row travels between (:class:`~lightgraph.quant.VarianceAwareBits`,
    :class:`~lightgraph.quant.RandomBits`) override :meth:`message_bits` instead, which
    sees the whole message layout, and refuse :meth:`row_bits`.

    Attributes:
        base_bits: the time-adaptive base width :math:`b_t`
            (:class:`~lightgraph.callbacks.AdaptiveBitWidth` sets it between epochs).
        version: a counter a policy increments whenever its widths change for a reason
            other than ``base_bits`` (a redraw, a re-assignment), so cached message
            layouts are rebuilt.
        tracing: whether the exchanger should report the rows it sends to
            :meth:`observe` (policies that learn from the messages switch it on).
    """

    version: int = 0
    tracing: bool = False

    def __init__(self, base_bits: int = 8) -> None:
        self.base_bits = check_bits(type(self).__name__, "base_bits", base_bits)

    @property
    def base_bits(self) -> int:
        return self._base_bits

    @base_bits.setter
    def base_bits(self, value: int) -> None:
        self._base_bits = check_bits(type(self).__name__, "base_bits", value)

    @abstractmethod
    def row_bits(self, plan: HaloPlan, nodes: Tensor, layer: str, direction: str) -> Tensor:
        """Bit-width (``torch.long``, values in (1, 2, 4, 8)) of each row.

        Args:
            plan: the calling rank's plan.
            nodes: local ids of the rows' nodes (inner nodes when sending, halo nodes when
                receiving).
            layer: the exchanging layer's name.
            direction: ``"forward"`` (embeddings) or ``"backward"`` (gradients).
        """

    def message_bits(self, plan: HaloPlan, layer: str, direction: str) -> tuple[Tensor, Tensor]:
        """Widths of a complete exchange: ``(send_bits, recv_bits)``.

        ``send_bits`` is aligned with ``plan.send_index`` (the rows this rank owns and
        others hold as halo rows), ``recv_bits`` with the halo rows (in the plan's order).
        In the ``"backward"`` direction the same rows travel the other way (gradients of
        halo rows back to their owners) and keep this alignment. The default asks
        :meth:`row_bits` for both lists.
        """
        device = plan.send_index.device
        halo = plan.num_inner + torch.arange(plan.num_halo, device=device)
        return (
            self.row_bits(plan, plan.send_index, layer, direction),
            self.row_bits(plan, halo, layer, direction),
        )

    def observe(  # noqa: B027 - optional hook
        self,
        plan: HaloPlan,
        layer: str,
        direction: str,
        rows: Tensor,
        alpha2: Tensor | None,
    ) -> None:
        """Rows this rank sends in one complete exchange (called only while :attr:`tracing`).

        Called once per traced exchange, so a policy sees every epoch it traces
        (:class:`~lightgraph.quant.VarianceAwareBits` averages them). ``alpha2`` holds the
        receiver-side aggregation coefficients of this rank's halo rows
        (:func:`~lightgraph.quant.aggregation_coefficients`) for forward exchanges.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_bits={self.base_bits})"
