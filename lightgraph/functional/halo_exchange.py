"""Differentiable halo (boundary-node) exchange between graph partitions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    stream = _current_stream(send)
    future = executor.submit(
        _on_stream, stream, _ring_rounds, send, recv, list(send_counts), list(recv_counts), group
    )
    return PendingExchange(recv, [_FutureWork(future, stream)])


def _current_stream(t: Tensor) -> Any:
    """The CUDA stream the caller works on for a CUDA tensor (``None`` on CPU)."""
    return torch.cuda.current_stream(t.device) if t.is_cuda else None


def _on_stream(stream: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` on a worker thread under the caller's CUDA stream (a worker's current
    stream would otherwise be the device's default stream, unordered with the caller's)."""
    if stream is None:
        return fn(*args)
    with torch.cuda.stream(stream):
        return fn(*args)


class _FutureWork:
    def __init__(self, future: Future, stream: Any = None) -> None:
        self.future = future
        self.stream = stream

    def wait(self) -> Any:
        result = self.future.result()
        if self.stream is not None:
            # The worker waited for its transfers on `stream`; order the caller after it.
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)
        return result


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


class PendingBytes:
    """Variable-size messages in flight: :meth:`wait` returns the received bytes, and
    :attr:`recv_counts` then holds how many came from each peer."""

    def __init__(self, future: Any, recv_counts: list[int] | None = None) -> None:
        self._future = future
        self.recv_counts = recv_counts
        self._recv: Tensor | None = None

    def wait(self) -> Tensor:
        if self._recv is None:
            result = self._future.wait()
            if isinstance(result, tuple):  # the ring worker learns the sizes itself
                result, self.recv_counts = result
            self._recv = result
            self._future = None
        return self._recv


def start_exchange_bytes(
    send: Tensor,
    send_counts: Sequence[int],
    group: dist.ProcessGroup | None = None,
    transport: str = "all_to_all",
    executor: Executor | None = None,
) -> PendingBytes:
    """Start sending byte messages whose sizes only the sender knows.

    The per-peer sizes travel first (one ``int64`` per peer pair), then the messages:

    * ``"all_to_all"``: a blocking ``all_to_all_single`` of ``[P]`` counts, then the
      payload as an asynchronous ``all_to_all_single`` with the received split sizes;
    * ``"ring"``: both steps run as ring rounds (``P - 1`` rounds each) in one job on
      ``executor`` (FIFO with every other ring transfer of the caller), or inline without
      an executor, so the counts never wait on the caller's thread.

    Args:
        send: ``[sum(send_counts)]`` bytes (uint8), the ``q``-th split for rank ``q``.
        send_counts: bytes sent to each rank of ``group`` (``0`` to itself).
        group: process group (default: the world).
        transport: ``"all_to_all"`` or ``"ring"``.
        executor: single-worker executor of the ring (see :func:`start_exchange_rows`).

    Returns:
        A :class:`PendingBytes`; its :meth:`~PendingBytes.wait` gives the
        ``[sum(recv_counts)]`` received bytes, the ``q``-th split from rank ``q``.
    """
    check_transport(transport)
    send = send.contiguous()
    counts_out = list(int(c) for c in send_counts)
    if transport == "all_to_all":
        out = torch.tensor(counts_out, dtype=torch.int64, device=send.device)
        counts = torch.empty_like(out)
        dist.all_to_all_single(counts, out, group=group)
        recv_counts = [int(c) for c in counts.tolist()]
        return PendingBytes(
            start_exchange_rows(send, counts_out, recv_counts, group, transport), recv_counts
        )
    if executor is None:
        return PendingBytes(Ready(_ring_bytes(send, counts_out, group)))
    stream = _current_stream(send)
    future = executor.submit(_on_stream, stream, _ring_bytes, send, counts_out, group)
    return PendingBytes(_FutureWork(future, stream))


class Ready:
    """An already-completed transfer: :meth:`wait` returns ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def wait(self) -> Any:
        return self.value


def _ring_bytes(
    send: Tensor, send_counts: list[int], group: dist.ProcessGroup | None
) -> tuple[Tensor, list[int]]:
    """Ring rounds of the per-peer sizes, then of the bytes: ``(received, recv_counts)``."""
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    one = [0 if q == rank else 1 for q in range(world)]
    peers = [q for q in range(world) if q != rank]
    counts_out = torch.tensor(
        [send_counts[q] for q in peers], dtype=torch.int64, device=send.device
    )
    counts_in = torch.empty_like(counts_out)
    _ring_rounds(counts_out, counts_in, one, one, group)
    recv_counts = [0] * world
    for q, c in zip(peers, counts_in.tolist(), strict=True):
        recv_counts[q] = int(c)
    recv = send.new_empty((sum(recv_counts),))
    _ring_rounds(send, recv, send_counts, recv_counts, group)
    return recv, recv_counts


def exchange_needed(
    send_counts: Sequence[int],
    recv_counts: Sequence[int],
    group: dist.ProcessGroup | None = None,
    owner: str = "halo_exchange",
) -> bool:
    """Whether these counts need a collective (checks them against the process group).

    ``False`` on a single process without halo rows; raises when rows must travel but
    ``torch.distributed`` is not initialised, or when the counts do not match the group.
    """
    if not dist.is_available() or not dist.is_initialized():
        if sum(recv_counts) or sum(send_counts):
            raise RuntimeError(
                f"{owner}: this partition has halo nodes but torch.distributed is not "
                "initialised. Train partitioned graphs with "
                "`Trainer(strategy='boundary_exchange', devices=num_parts)`."
            )
        return False
    world = dist.get_world_size(group)
    if world == 1 and not sum(recv_counts):
        return False
    if len(send_counts) != world or len(recv_counts) != world:
        raise ValueError(
            f"{owner}: expected one send and one receive count per rank ({world}) but got "
            f"{len(send_counts)} and {len(recv_counts)}; the partition plan was built for a "
            f"different number of partitions than the process group has ranks."
        )
    return True


class GradientJoin:
    """Where a layer's deferred backward exchange leaves the gradient rows it receives.

    The overlapped backward of a partition-aware layer: the halo rows' backward only
    *starts* sending their gradients to the owners and :meth:`park`\\ s the transfer
    here; :func:`grad_join`'s backward, which autograd reaches only after every other
    use of the layer input (the inner-row work) has produced its gradient, waits and
    accumulates:

    .. math::
        \\frac{\\partial L}{\\partial \\mathbf{x}} = \\frac{\\partial L}{\\partial
        \\mathbf{x}}\\Big|_{\\text{local}} + \\operatorname{index\\_add}\\big(\\text{send\\_index},
        \\; \\text{received halo gradients}\\big)
    """

    def __init__(self) -> None:
        self._parked: list[tuple[Any, Tensor, Callable[[Tensor], None] | None]] = []
        self._expected: list[Callable[[], None]] = []

    def expect(self, ensure: Callable[[], None]) -> None:
        """Call ``ensure()`` first thing in :meth:`collect` (e.g. to start a transfer that
        autograd never reached, so that every rank takes part in it)."""
        self._expected.append(ensure)

    def park(
        self, pending: Any, index: Tensor, on_done: Callable[[Tensor], None] | None = None
    ) -> None:
        """Leave a transfer whose ``wait()`` gives the rows to add at ``index``."""
        self._parked.append((pending, index, on_done))

    def collect(self, grad: Tensor) -> Tensor:
        """``grad`` plus every parked transfer's rows (waits for them)."""
        expected, self._expected = self._expected, []
        for ensure in expected:
            ensure()
        if not self._parked:
            return grad
        out = grad.clone()
        parked, self._parked = self._parked, []
        for pending, index, on_done in parked:
            received = pending.wait()
            if on_done is not None:
                on_done(received)
            # A node sent to several peers receives a gradient from each: accumulate them.
            out.index_add_(0, index, received.to(out.dtype))
        return out


class _GradJoin(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, join: GradientJoin) -> Tensor:  # type: ignore[override]
        ctx.join = join
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return ctx.join.collect(grad), None


def grad_join(x: Tensor, join: GradientJoin) -> Tensor:
    """``x`` unchanged; in backward, ``join``'s parked gradient rows are added to its gradient.

    Route every use of a layer's input through the result so that autograd reaches this
    node last: its backward then waits for the halo gradients that were sent while the
    rest of the layer's backward ran (see :class:`GradientJoin`).

    Shapes:
        - **input:** ``[num_inner, F]``
        - **output:** ``[num_inner, F]``
    """
    return _GradJoin.apply(x, join)


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
    if not exchange_needed(send_counts, recv_counts, group):
        return x
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
