"""Differentiable halo (boundary-node) exchange between graph partitions."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor, Future
from typing import Any, Literal, get_args

import torch
import torch.distributed as dist
from torch import Tensor

from lightgraph.functional.exchange_stats import ExchangeStats

Transport = Literal["all_to_all", "ring"]
TRANSPORTS: tuple[str, ...] = get_args(Transport)


def check_transport(transport: str, owner: str = "halo_exchange") -> str:
    if transport not in TRANSPORTS:
        raise ValueError(
            f"{owner}: expected `transport` to be one of {TRANSPORTS} but got {transport!r}."
        )
    return transport


class PendingExchange:
    """Rows in flight: call :meth:`wait` to get them."""

    def __init__(self, recv: Tensor, works: list[Any]) -> None:
        self._recv = recv
        self._works = works

    def wait(self) -> Tensor:
        for work in self._works:
            work.wait()
        self._works = []
        return self._recv


def start_exchange_rows(
    send: Tensor,
    send_counts: Sequence[int],
    recv_counts: Sequence[int],
    group: dist.ProcessGroup | None = None,
    transport: str = "all_to_all",
    executor: Executor | None = None,
) -> PendingExchange:
    """Start sending ``send`` rows to peers; rows for peer ``q`` are the ``q``-th split.

    ``send`` holds ``sum(send_counts)`` rows, split in rank order; the result holds
    ``sum(recv_counts)`` rows, the rows from rank ``q`` in the ``q``-th split. The
    returned handle's :meth:`~PendingExchange.wait` completes the transfer:
    ``all_to_all`` runs as an asynchronous collective; ``ring`` runs its rounds on
    ``executor`` when one is given — a single-worker executor owned by the caller (the
    :class:`~lightgraph.distributed.HaloExchanger` owns one), so ring transfers of one
    rank run in the order they were started — and inline (completed on return) otherwise.

    * ``"all_to_all"``: one ``all_to_all_single`` with uneven splits.
    * ``"ring"``: ``P - 1`` rounds; in round ``r`` a rank sends to ``rank + r`` and
      receives from ``rank - r`` (modulo ``P``) with ``batch_isend_irecv``.
    """
    check_transport(transport)
    send = send.contiguous()
    recv = send.new_empty((int(sum(recv_counts)),) + tuple(send.shape[1:]))
    if transport == "all_to_all":
        work = dist.all_to_all_single(
            recv,
            send,
            output_split_sizes=list(recv_counts),
            input_split_sizes=list(send_counts),
            group=group,
            async_op=True,
        )
        return PendingExchange(recv, [work])

    if executor is None:
        _ring_rounds(send, recv, list(send_counts), list(recv_counts), group)
        return PendingExchange(recv, [])
    # The ring's rounds run on the caller's single-worker executor: FIFO across calls, so
    # every rank issues its ring transfers in the same order.
    future = executor.submit(_ring_rounds, send, recv, list(send_counts), list(recv_counts), group)
    return PendingExchange(recv, [_FutureWork(future)])


class _FutureWork:
    def __init__(self, future: Future) -> None:
        self.future = future

    def wait(self) -> None:
        self.future.result()


def _ring_rounds(
    send: Tensor,
    recv: Tensor,
    send_counts: list[int],
    recv_counts: list[int],
    group: dist.ProcessGroup | None,
) -> None:
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    send_off = [0]
    recv_off = [0]
    for c in send_counts:
        send_off.append(send_off[-1] + int(c))
    for c in recv_counts:
        recv_off.append(recv_off[-1] + int(c))
    for step in range(1, world):
        dst, src = (rank + step) % world, (rank - step) % world
        ops = []
        # A pair of ranks agrees on a zero count, so both sides skip the same operations.
        if send_counts[dst] > 0:
            ops.append(
                dist.P2POp(
                    dist.isend, send[send_off[dst] : send_off[dst + 1]], _global(group, dst), group
                )
            )
        if recv_counts[src] > 0:
            ops.append(
                dist.P2POp(
                    dist.irecv, recv[recv_off[src] : recv_off[src + 1]], _global(group, src), group
                )
            )
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()


def _global(group: dist.ProcessGroup | None, group_rank: int) -> int:
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def exchange_rows(
    send: Tensor,
    send_counts: Sequence[int],
    recv_counts: Sequence[int],
    group: dist.ProcessGroup | None = None,
    transport: str = "all_to_all",
    executor: Executor | None = None,
) -> Tensor:
    """Blocking version of :func:`start_exchange_rows`."""
    return start_exchange_rows(send, send_counts, recv_counts, group, transport, executor).wait()


class _HaloExchange(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,
        send_index: Tensor,
        send_counts: list[int],
        recv_counts: list[int],
        group: dist.ProcessGroup | None,
        transport: str,
        stats: ExchangeStats | None,
        stage: str,
        layer: str,
        executor: Executor | None,
    ) -> Tensor:
        send = x.index_select(0, send_index)
        recv = exchange_rows(send, send_counts, recv_counts, group, transport, executor)
        if stats is not None:
            stats.record(stage, layer, "forward", send.numel() * send.element_size())
        ctx.save_for_backward(send_index)
        ctx.meta = (x.size(0), send_counts, recv_counts, group, transport, stats, stage, layer)
        ctx.executor = executor
        return torch.cat([x, recv], dim=0)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        (send_index,) = ctx.saved_tensors
        num_inner, send_counts, recv_counts, group, transport, stats, stage, layer = ctx.meta
        grad_halo = grad_out[num_inner:].contiguous()
        # The reverse collective: halo gradients travel back to their owners.
        back = exchange_rows(grad_halo, recv_counts, send_counts, group, transport, ctx.executor)
        if stats is not None:
            stats.record(stage, layer, "backward", grad_halo.numel() * grad_halo.element_size())
        grad_x = grad_out[:num_inner].clone()
        # A node sent to several peers receives a gradient from each: accumulate them.
        grad_x.index_add_(0, send_index, back)
        return grad_x, None, None, None, None, None, None, None, None, None


def halo_exchange(
    x: Tensor,
    send_index: Tensor,
    send_counts: Sequence[int],
    recv_counts: Sequence[int],
    group: dist.ProcessGroup | None = None,
    transport: str = "all_to_all",
    stats: ExchangeStats | None = None,
    stage: str = "train",
    layer: str = "layer",
    executor: Executor | None = None,
) -> Tensor:
    """Append the halo rows owned by other ranks to this rank's inner rows.

    Forward: rows ``x[send_index]`` go to the peers (split by ``send_counts``) and the
    rows received from the peers (split by ``recv_counts``) are appended:

    .. math::
        \\mathbf{H}_{\\text{local}} = \\begin{bmatrix} \\mathbf{H}_{\\text{inner}} \\\\
        \\mathbf{H}_{\\text{halo}} \\end{bmatrix}

    Backward: the gradient of the halo rows is sent back to the owners, and each owner
    adds every gradient it receives to the rows it sent (``index_add``).

    Args:
        x: inner rows ``[num_inner, *]``.
        send_index: ``[sum(send_counts)]`` rows of ``x`` to send, grouped by peer.
        send_counts: rows sent to each rank of ``group``.
        recv_counts: rows received from each rank of ``group``.
        group: process group of the exchange (default: the world).
        transport: ``"all_to_all"`` or ``"ring"``.
        stats: optional byte counter; records ``(stage, layer, direction, "data")``.
        stage: label for ``stats`` (``"train"``, ``"val"``, ...).
        layer: label for ``stats``.
        executor: single-worker executor for the ``ring`` transport (see
            :func:`start_exchange_rows`); ``None`` runs the rounds inline.

    Shapes:
        - **input:** ``[num_inner, F]``
        - **output:** ``[num_inner + sum(recv_counts), F]``
    """
    check_transport(transport)
    if not dist.is_available() or not dist.is_initialized():
        if sum(recv_counts) or sum(send_counts):
            raise RuntimeError(
                "halo_exchange: this partition has halo nodes but torch.distributed is not "
                "initialised. Train partitioned graphs with "
                "`Trainer(strategy='boundary_exchange', devices=num_partitions)`."
            )
        return x
    world = dist.get_world_size(group)
    if world == 1 and not sum(recv_counts):
        return x
    if len(send_counts) != world or len(recv_counts) != world:
        raise ValueError(
            f"halo_exchange: expected one send and one receive count per rank ({world}) but got "
            f"{len(send_counts)} and {len(recv_counts)}; the partition plan was built for a "
            f"different number of partitions than the process group has ranks."
        )
    return _HaloExchange.apply(
        x,
        send_index,
        list(send_counts),
        list(recv_counts),
        group,
        transport,
        stats,
        stage,
        layer,
        executor,
    )
