"""The autograd side of the halo exchange: the exchange as a differentiable function
(pipelined and overlapped) and the split path (:class:`HaloTransfer`), built on the
exchanger's public methods."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lightgraph.data.partition.partition_plan import PartitionPlan
from lightgraph.distributed.halo_messages import HaloMessages, Inflight
from lightgraph.functional.halo_exchange import (
    GradientJoin,
    Ready,
    exchange_needed,
    exchange_rows,
    grad_join,
)

if TYPE_CHECKING:
    from lightgraph.distributed.halo_exchanger import HaloExchanger


class PipelinedExchange(torch.autograd.Function):
    """Halo exchange with quantisation, boundary sampling and the async pipeline."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, ex: HaloExchanger, plan: PartitionPlan, layer: str) -> Tensor:  # type: ignore[override]
        msgs = ex.messages(plan, layer, "forward")

        def start() -> Any:
            return ex.start_forward(x, msgs, layer, plan)

        received, used = ex.transfer((layer, "forward"), start, msgs)
        ctx.ex, ctx.plan, ctx.layer, ctx.num_inner = ex, plan, layer, x.size(0)
        return torch.cat([x, used.place(received).to(x.dtype)], dim=0)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        return (_backward_exchange(ctx, grad_out), None, None, None)


class FinishedExchange(torch.autograd.Function):
    """``[x; halo]`` from rows received by :meth:`HaloExchanger.start` (overlap mode)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,
        received: Tensor,
        msgs: HaloMessages,
        ex: HaloExchanger,
        plan: PartitionPlan,
        layer: str,
    ) -> Tensor:
        ctx.ex, ctx.plan, ctx.layer, ctx.num_inner = ex, plan, layer, x.size(0)
        return torch.cat([x, msgs.place(received).to(x.dtype)], dim=0)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        return (_backward_exchange(ctx, grad_out), None, None, None, None, None)


def _backward_exchange(ctx: Any, grad_out: Tensor) -> Tensor:
    """Send halo gradients back to their owners (under the exchanger's mode) and accumulate."""
    ex, plan, layer, n = ctx.ex, ctx.plan, ctx.layer, ctx.num_inner
    msgs = ex.messages(plan, layer, "backward")
    halo_grad = grad_out[n:]

    def start() -> Any:
        return ex.start_backward(halo_grad, msgs, layer, plan)

    received, used = ex.transfer((layer, "backward"), start, msgs)
    grad_x = grad_out[:n].clone()
    grad_x.index_add_(0, used.send_index, received.to(grad_x.dtype))
    return grad_x


class HaloTransfer:
    """One layer's exchange on the split path (:meth:`HaloExchanger.start_halo`).

    Attributes:
        inner: the layer input ``x``, routed through a gradient join when it requires
            gradients (see :func:`~lightgraph.functional.halo_exchange.grad_join`); every
            use of the inner rows must go through it.

    :meth:`halo` returns the ``[num_halo, F]`` halo rows (differentiable: their gradient
    travels back to the owners and is added to the gradient of :attr:`inner`); call it
    once. If autograd reaches the join but not the halo rows (a layer that ignores them
    on this rank), the join sends zero gradients for them, so every rank takes part in
    the backward exchange.
    """

    def __init__(
        self, ex: HaloExchanger, x: Tensor, plan: PartitionPlan, stage: str, layer: str
    ) -> None:
        self.layer = layer
        self._taken = False
        self._received: Tensor | None = None
        self._inflight: Inflight | None = None
        self._dtype = x.dtype
        if not exchange_needed(plan.send_counts, plan.halo_counts, ex.group, "HaloExchanger"):
            kind = "none"
        elif stage != "train" or ex.exact():
            kind = "plain"  # exact FP32, the rows of `halo_exchange`
            rows = x.detach().index_select(0, plan.send_index)
            self._received = exchange_rows(
                rows,
                plan.send_counts,
                plan.halo_counts,
                ex.group,
                ex.transport,
                ex.ring_executor(),
            )
            ex.stats.record(stage, layer, "forward", rows.numel() * rows.element_size())
        elif ex.overlaps(stage):
            kind = "overlap"
            self._inflight = ex.start(x, plan, layer)
        else:
            kind = "pipelined"  # quantised / sampled / asynchronous, as `__call__`
            msgs = ex.messages(plan, layer, "forward")

            def start() -> Any:
                return ex.start_forward(x, msgs, layer, plan)

            received, used = ex.transfer((layer, "forward"), start, msgs)
            self._received = used.place(received).to(x.dtype)
        self.kind = kind
        self._ex = ex
        joined = kind != "none" and torch.is_grad_enabled() and x.requires_grad
        self._sender: _HaloGradients | None = None
        if joined:
            join = GradientJoin()
            # No tensors in the sender: the join holds it without a cycle through autograd.
            shape = (plan.num_halo,) + tuple(x.shape[1:])
            self._sender = _HaloGradients(ex, plan, stage, layer, kind, join, shape, x)
            join.expect(self._sender.ensure_sent)
            x = grad_join(x, join)
        self.inner: Tensor = x

    def halo(self) -> Tensor:
        """The halo rows (in overlap mode: waits for the transfer started at construction)."""
        if self._taken:
            raise RuntimeError(
                f"HaloTransfer({self.layer}): halo() was already called; keep its result."
            )
        self._taken = True
        if self.kind == "none":
            return self.inner.new_zeros((0,) + tuple(self.inner.shape[1:]))
        rows = self._rows()
        if self._sender is None:
            return rows
        self._sender.armed = True
        return _HaloRows.apply(self.inner, rows, self._sender)

    def local(self) -> Tensor:
        """``[inner; halo]`` rows, what :meth:`HaloExchanger.__call__` returns."""
        return torch.cat([self.inner, self.halo()], dim=0)

    def _rows(self) -> Tensor:
        if self.kind == "overlap":
            inflight, self._inflight = self._inflight, None
            assert inflight is not None
            received = inflight.pending.wait()
            self._ex.put_buffer((self.layer, "forward"), Ready(received), inflight.msgs)
            return inflight.msgs.place(received).to(self._dtype)
        received, self._received = self._received, None
        assert received is not None
        return received


class _HaloGradients:
    """Sends one layer's halo gradients back (under the exchanger's mode) into its join."""

    def __init__(
        self,
        ex: HaloExchanger,
        plan: PartitionPlan,
        stage: str,
        layer: str,
        kind: str,
        join: GradientJoin,
        shape: tuple[int, ...],
        like: Tensor,
    ) -> None:
        self.ex, self.plan, self.stage, self.layer, self.kind = ex, plan, stage, layer, kind
        self.join, self.shape = join, shape
        self.dtype, self.device = like.dtype, like.device
        self.armed = False  # the halo rows were handed out
        self.sent = False

    def ensure_sent(self) -> None:
        """Called by the join: a rank whose halo rows got no gradient still sends zeros."""
        if self.armed and not self.sent:
            self.send(torch.zeros(self.shape, dtype=self.dtype, device=self.device))

    def send(self, grad: Tensor) -> None:
        """Send the halo rows' gradient back; the join adds what comes back to ``inner``'s."""
        self.sent = True
        ex, plan, layer = self.ex, self.plan, self.layer
        if self.kind == "plain":
            grad = grad.contiguous()
            back = exchange_rows(
                grad,
                plan.halo_counts,
                plan.send_counts,
                ex.group,
                ex.transport,
                ex.ring_executor(),
            )
            ex.stats.record(self.stage, layer, "backward", grad.numel() * grad.element_size())
            self.join.park(Ready(back), plan.send_index)
            return
        key = (layer, "backward")
        msgs = ex.messages(plan, layer, "backward")

        def start() -> Any:
            return ex.start_backward(grad, msgs, layer, plan)

        if self.kind == "pipelined":
            received, used = ex.transfer(key, start, msgs)
            self.join.park(Ready(received), used.send_index)
            return
        # overlap: only start; the join waits once the inner rows' backward is done
        previous = ex.take_buffer(key)
        if previous is not None:
            previous[0].wait()  # drain a transfer started by an asynchronous epoch
        pending = start()
        ex.put_buffer(key, pending, msgs)  # drain() completes it if the join never runs

        def done(received: Tensor) -> None:
            current = ex.buffer(key)
            if current is not None and current[0] is pending:
                ex.put_buffer(key, Ready(received), msgs)  # what a following async epoch reads

        self.join.park(pending, msgs.send_index, done)


class _HaloRows(torch.autograd.Function):
    """Halo rows attached to the layer input's graph; backward sends their gradient home."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, inner: Tensor, rows: Tensor, sender: _HaloGradients
    ) -> Tensor:
        ctx.sender = sender
        # A new tensor object for autograd to own (buffers may keep `rows` itself).
        return rows.detach()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        ctx.sender.send(grad)
        return None, None, None
