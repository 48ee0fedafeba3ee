"""The halo exchanger: the runtime object behind every partition-aware layer's exchange."""

from __future__ import annotations

import importlib
import itertools
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any, Literal, get_args

import torch
import torch.distributed as dist
from torch import Tensor

from lightgraph.data.partition.partition_plan import PartitionPlan
from lightgraph.distributed.bit_assignment import reassign_bits
from lightgraph.distributed.halo_messages import (
    Decoding,
    HaloMessages,
    Inflight,
    RestoredRows,
    restore_buffers,
)
from lightgraph.distributed.halo_transfer import FinishedExchange, HaloTransfer, PipelinedExchange
from lightgraph.distributed.link_profiler import resolve_cost_model
from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.halo_exchange import (
    TRANSPORTS,
    Ready,
    halo_exchange,
    start_exchange_bytes,
    start_exchange_rows,
)
from lightgraph.functional.quantize import (
    PARAM_BYTES_PER_ROW,
    pack_rows,
    packed_nbytes,
)
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.quant.random_bits import RandomBits
from lightgraph.quant.variance_aware_bits import (
    AssignmentReport,
    VarianceAwareBits,
    aggregation_coefficients,
)
from lightgraph.utilities.checks import check_choice, check_probability, check_type
from lightgraph.utilities.random_state import (
    check_rng_state,
    generator_state,
    restore_generator,
)

Mode = Literal["sync", "async", "overlap"]
MODES: tuple[str, ...] = get_args(Mode)

_EXCHANGER_IDS = itertools.count()


class HaloExchanger:
    """Exchanges halo rows of a :class:`~lightgraph.data.PartitionPlan` over a process group.

    It holds what a run keeps between layers and epochs — the process group, the
    transport (and the ring's worker thread), the byte counters, the bit-width policy,
    the execution mode and the buffers of the asynchronous pipeline — so layers only pass
    rows, the plan and a label. It knows nothing of Lightning:
    :class:`~lightgraph.strategies.BoundaryExchangeStrategy` builds one on its dedicated
    process group and hands it to the module in a
    :class:`~lightgraph.distributed.ParallelContext`.

    Training exchanges (``stage="train"``) follow the configuration:

    * ``policy=None``: FP32 rows, exactly the plain :func:`halo_exchange`.
    * ``policy=...``: every row is quantised to the policy's bit-width (stochastic
      rounding, codes bit-packed, bf16 scale and zero point) in both directions; the rows
      of all widths for one peer travel in one buffer, one collective per layer and
      direction, preceded by the per-peer buffer sizes (a buffer may be longer than the
      widths imply; its extra bytes count as parameter bytes). On CUDA, quantisation and
      communication run on a side stream of the exchanger.
    * ``mode="sync"``: layers wait for this epoch's halo rows (and gradients).
    * ``mode="async"``: the inter-epoch pipeline of PipeGCN/Sylvie — a layer computes
      with the halo rows received during the previous epoch while this epoch's rows are
      in flight, and inner rows receive the halo gradients of the previous epoch while
      this epoch's travel. Staleness is exactly one epoch. An exchange with no previous
      epoch to draw from (the first training epoch) is performed synchronously, and every
      synchronous exchange also refreshes the buffers, so switching modes between epochs
      never serves data older than one epoch. The buffers are part of :meth:`rng_state`,
      so a run resumed from a checkpoint continues the pipeline exactly.
    * ``mode="overlap"``: AdaQP's computation/communication parallelisation — partition-aware
      layers start the exchange (:meth:`start_halo`), compute what their inner rows
      determine while it is in flight, then finish with the halo rows; in backward the
      halo gradients are sent while the inner rows' gradient is computed and accumulated
      last (:func:`~lightgraph.functional.halo_exchange.grad_join`). No staleness:
      results equal ``"sync"`` (same quantisation draws). Layers that do not split their
      work simply get the synchronous exchange.
    * ``boundary_sampling=p``: BNS-GCN — each epoch every rank keeps a random fraction
      ``p`` of the boundary rows it exchanges with each peer (both ends draw the same
      sample from a seed shared by the pair) and drops the rest: dropped halo rows are
      zero for that epoch, which removes their edges from sum-type aggregations.

    Evaluation exchanges (any other stage) are always synchronous, exact FP32 and
    complete, so reported accuracy measures the model, not the transport.

    Args:
        group: process group of the exchange (``None``: the default group).
        transport: ``"all_to_all"`` or ``"ring"``.
        policy: bit-width policy (:mod:`lightgraph.quant`), ``None`` for FP32.
        mode: ``"sync"``, ``"async"`` or ``"overlap"``; may be changed between epochs.
        boundary_sampling: BNS-GCN keep-probability ``p`` or ``None``.
        seed: seed of quantisation noise and boundary sampling.
        compile_quantization: quantise/dequantise with the ``torch.compile``-d kernels of
            :mod:`lightgraph.functional.quantize` (same bytes, faster quantisation on the
            CPU once compiled, docs/benchmarks.md; the first epoch pays the compilation).
    """

    def __init__(
        self,
        group: dist.ProcessGroup | None = None,
        transport: str = "all_to_all",
        policy: BitWidthPolicy | None = None,
        mode: str = "sync",
        boundary_sampling: float | None = None,
        seed: int = 0,
        compile_quantization: bool = False,
    ) -> None:
        owner = "HaloExchanger"
        self.group = group
        self.compile_quantization = compile_quantization
        self.transport = check_choice(owner, "transport", transport, TRANSPORTS)
        self._policy: BitWidthPolicy | None = None
        self._policy_generation = 0
        self._uid = next(_EXCHANGER_IDS)  # names this exchanger's layouts in a plan's cache
        self.set_policy(policy)
        self.mode = mode
        self.boundary_sampling = check_probability(
            owner, "boundary_sampling", boundary_sampling, optional=True
        )
        self.seed = seed
        self.epoch = 0
        self.stats = ExchangeStats()
        self._generator: torch.Generator | None = None
        self._buffers: dict[tuple[str, str], tuple[Any, HaloMessages]] = {}
        # The ring's rounds run on one worker owned by this exchanger: FIFO across calls.
        self._executor: ThreadPoolExecutor | None = None
        # CUDA side streams of quantisation and communication, one per device.
        self._streams: dict[torch.device, Any] | None = None
        #: how each layer weighs received halo rows ("gcn", "mean" or "sum"), reported by
        #: the layers (:class:`~lightgraph.nn.PartitionAware`) for variance-aware policies
        self.aggregations: dict[str, str] = {}

    @property
    def policy(self) -> BitWidthPolicy | None:
        """The bit-width policy of training messages (``None``: FP32)."""
        return self._policy

    def set_policy(self, policy: BitWidthPolicy | None) -> None:
        """Quantise training messages with ``policy`` from the next exchange on (``None``: FP32)."""
        if policy is not None:
            check_type(
                "HaloExchanger",
                "policy",
                policy,
                BitWidthPolicy,
                "a lightgraph.quant policy such as DegreeAwareBits or FixedBits, or None",
            )
        self._policy = policy
        self._policy_generation += 1

    @property
    def distributed(self) -> bool:
        """Whether the exchange spans more than one initialised rank."""
        return dist.is_available() and dist.is_initialized() and dist.get_world_size(self.group) > 1

    def setup(self) -> None:
        """Prepare the policy once the process group is up (collective).

        A :class:`~lightgraph.quant.VarianceAwareBits` policy without a cost model gets one
        from :func:`~lightgraph.distributed.resolve_cost_model` (profiling the links when
        configured to). With a policy, the quantiser's ``warmup()`` runs once when
        :mod:`lightgraph.functional.quantize` provides one.
        """
        policy = self.policy
        if isinstance(policy, VarianceAwareBits) and policy.cost_model is None and self.distributed:
            policy.cost_model = resolve_cost_model(
                policy.cost_model_spec,
                self.group,
                cache_path=policy.cost_model_path,
                sizes_bytes=policy.profile_sizes,
            )
        # (the package re-exports the function `quantize` under the module's name)
        warmup = getattr(importlib.import_module("lightgraph.functional.quantize"), "warmup", None)
        if policy is not None and callable(warmup):
            warmup()  # one-off kernel set-up of the quantiser, outside the timed steps

    def reassign(self, epoch: int | None = None) -> AssignmentReport | None:
        """Re-assign the policy's widths (collective on every rank of the exchange).

        :class:`~lightgraph.quant.VarianceAwareBits` solves new widths from the rows traced
        since the last assignment (:func:`~lightgraph.distributed.reassign_bits`) and the
        report is returned; :class:`~lightgraph.quant.RandomBits` redraws its widths
        (``None`` is returned).
        """
        policy = self.policy
        if isinstance(policy, VarianceAwareBits):
            policy.tracing = False
            return reassign_bits(policy, self.group, self.transport, epoch)
        if isinstance(policy, RandomBits):
            policy.redraw()
            return None
        raise TypeError(
            "HaloExchanger.reassign: expected the policy to be a VarianceAwareBits or RandomBits "
            f"but got {type(policy).__name__ if policy is not None else 'None (FP32 exchange)'}."
        )

    def ring_executor(self) -> ThreadPoolExecutor | None:
        if self.transport != "ring":
            return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lightgraph-ring")
        return self._executor

    def set_aggregation(self, layer: str, aggregation: str) -> None:
        """Record how ``layer`` aggregates halo rows (``"gcn"``, ``"mean"`` or ``"sum"``)."""
        self.aggregations[layer] = aggregation

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        self._mode = check_choice("HaloExchanger", "mode", value, MODES)

    def start_epoch(self, epoch: int) -> None:
        """Begin training epoch ``epoch``: boundary sampling draws anew and the counters restart.

        :attr:`stats` then holds the bytes and quantisation time of this epoch (training
        and the evaluation that follows it) for every reader until the next call.
        """
        self.epoch = epoch
        self.stats.reset()

    # ----------------------------------------------------------------------- entry point
    def __call__(
        self, x: Tensor, plan: PartitionPlan, stage: str = "train", layer: str = "layer"
    ) -> Tensor:
        if stage != "train" or self.exact():
            return halo_exchange(
                x,
                plan.send_index,
                plan.send_counts,
                plan.halo_counts,
                group=self.group,
                transport=self.transport,
                stats=self.stats,
                stage=stage,
                layer=layer,
                executor=self.ring_executor(),
            )
        if not self.distributed:
            return halo_exchange(
                x, plan.send_index, plan.send_counts, plan.halo_counts, group=self.group
            )
        return PipelinedExchange.apply(x, self, plan, layer)

    def exact(self) -> bool:
        """Whether training exchanges are the plain FP32 synchronous :func:`halo_exchange`."""
        return (
            self.policy is None
            and self.mode == "sync"
            and self.boundary_sampling is None
            and not self._buffers
        )

    # ----------------------------------------------------------- overlap (start / finish)
    def overlaps(self, stage: str) -> bool:
        """Whether layers should split their work around :meth:`start` / :meth:`finish`."""
        return stage == "train" and self.mode == "overlap" and self.distributed

    def start(self, x: Tensor, plan: PartitionPlan, layer: str) -> Inflight:
        """Start this layer's forward exchange; rows travel while the caller computes."""
        key = (layer, "forward")
        msgs = self.messages(plan, layer, "forward")
        previous = self._buffers.pop(key, None)
        if previous is not None:
            previous[0].wait()  # drain a transfer started by an asynchronous epoch
        pending = self.start_forward(x, msgs, layer, plan)
        self._buffers[key] = (pending, msgs)  # drain() completes it if never finished
        return Inflight(pending, msgs, layer)

    def start_forward(self, x: Tensor, msgs: HaloMessages, layer: str, plan: PartitionPlan) -> Any:
        """Start sending ``x``'s rows of ``msgs`` (forward direction) to their peers."""
        rows = x.detach().index_select(0, msgs.send_index)
        return self._start(
            rows,
            msgs.send_counts,
            msgs.recv_counts,
            msgs.send_bits,
            msgs.recv_bits,
            layer,
            "forward",
            plan,
        )

    def start_backward(
        self, halo_grad: Tensor, msgs: HaloMessages, layer: str, plan: PartitionPlan
    ) -> Any:
        """Start sending the halo rows' gradients of ``msgs`` back to their owners."""
        rows = msgs.pick(halo_grad).contiguous()
        return self._start(
            rows,
            msgs.recv_counts,
            msgs.send_counts,
            msgs.recv_bits,
            msgs.send_bits,
            layer,
            "backward",
            plan,
        )

    def start_halo(
        self, x: Tensor, plan: PartitionPlan, stage: str = "train", layer: str = "layer"
    ) -> HaloTransfer:
        """The exchange of a layer that computes in two halves around it (split path).

        Returns a :class:`HaloTransfer`: compute everything that needs only inner rows
        from its :attr:`~HaloTransfer.inner`, then call :meth:`~HaloTransfer.halo` for
        the ``[num_halo, F]`` halo rows. Rows, bits, quantisation draws, sampling and
        staleness are exactly those of :meth:`__call__` under the same configuration;
        what the mode changes is only *when* the transfers complete:

        * ``"sync"`` / ``"async"`` (and every non-training stage): the rows are fetched
          here, before the inner-row work; in backward the halo gradients are fetched
          before the inner rows' gradient is computed.
        * ``"overlap"``: the transfer starts here and :meth:`~HaloTransfer.halo` waits for
          it, so the inner-row work runs while rows travel. In backward the halo rows'
          gradients are only *sent* when autograd reaches them (before the inner-row
          work's backward) and are received and accumulated by a
          :func:`~lightgraph.functional.halo_exchange.grad_join` on the layer input,
          which autograd reaches last.
        """
        return HaloTransfer(self, x, plan, stage, layer)

    def finish(self, inflight: Inflight, x: Tensor, plan: PartitionPlan) -> Tensor:
        """Wait for :meth:`start`'s rows; returns ``[x; halo]`` (differentiable, like ``__call__``)."""
        received = inflight.pending.wait()
        self._buffers[(inflight.layer, "forward")] = (Ready(received), inflight.msgs)
        return FinishedExchange.apply(x, received, inflight.msgs, self, plan, inflight.layer)

    def drain(self) -> None:
        """Complete every transfer still in flight (before the process group goes away).

        This includes halo gradients of an overlapped backward pass that was never
        completed: their transfers finish here, and their rows are dropped.
        """
        for pending, _ in self._buffers.values():
            pending.wait()
        self._buffers.clear()

    def close(self) -> None:
        """Drain, then stop the ring worker (the exchanger can be used again afterwards)."""
        self.drain()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # ------------------------------------------------------------------ exchange buffers
    def buffer(self, key: tuple[str, str]) -> tuple[Any, HaloMessages] | None:
        """The last transfer of ``(layer, direction)``: ``(pending or ready rows, messages)``."""
        return self._buffers.get(key)

    def put_buffer(self, key: tuple[str, str], pending: Any, msgs: HaloMessages) -> None:
        """Record a transfer of ``(layer, direction)`` (what an asynchronous epoch reads)."""
        self._buffers[key] = (pending, msgs)

    def take_buffer(self, key: tuple[str, str]) -> tuple[Any, HaloMessages] | None:
        """Remove and return the transfer of ``(layer, direction)``, if any."""
        return self._buffers.pop(key, None)

    # ------------------------------------------------------------------- resume state
    def rng_state(self) -> dict[str, Any]:
        """What a resumed run continues from, for
        :class:`~lightgraph.callbacks.RandomStateCheckpoint`:

        * ``"generator"``: the quantisation-noise generator's state (``None`` before the
          first quantised exchange);
        * ``"buffers"``: the rows the exchange carries into the next epoch, one entry per
          ``(layer, direction)`` — the halo rows (``"forward"``) and halo gradients
          (``"backward"``) received in the last training exchange, with the message layout
          they travelled in (which rows, their bit-widths). An asynchronous epoch computes
          with them (the previous epoch's rows) while its own travel; without them a run
          resumed before an asynchronous epoch would exchange fresh rows there. Transfers
          still in flight (started by an asynchronous epoch for the next one) are waited
          for first: the wait is idempotent (a transfer caches its rows), so the run goes
          on exactly as without the save. Empty when every exchange so far was the plain
          synchronous FP32 one. Rows and layouts are saved as CPU tensors; restored rows
          move to the exchange's device at their first use.

        Boundary sampling needs no state: its draws follow from ``(seed, epoch, pair)``.
        """
        buffers = []
        for (layer, direction), (pending, msgs) in self._buffers.items():
            rows = pending.wait()  # the next epoch's wait returns the same rows
            buffers.append(
                {"layer": layer, "direction": direction, "rows": rows.detach().cpu()} | msgs.state()
            )
        return {"generator": generator_state(self._generator), "buffers": buffers}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`rng_state`: the quantisation noise and the carried rows.

        A generator not created yet is created from the saved state; ``None`` returns to a
        freshly seeded generator at the next quantised exchange. The carried rows replace
        this exchanger's (an asynchronous epoch computes with them next). A state without
        ``"buffers"`` (saved before lightgraph kept them) restores the generator only.
        """
        owner = "HaloExchanger.set_rng_state"
        keys = (
            ("generator",)
            if isinstance(state, Mapping) and set(state) == {"generator"}
            else ("generator", "buffers")
        )
        check_rng_state(owner, state, keys, "HaloExchanger.rng_state()")
        buffers = restore_buffers(owner, state["buffers"]) if "buffers" in state else None
        self._generator = restore_generator(state["generator"], None, owner, "state['generator']")
        if buffers is not None:
            self.drain()
            self._buffers = buffers

    # ----------------------------------------------------------------------- internals
    def _rng(self, device: torch.device) -> torch.Generator:
        if self._generator is None or self._generator.device != device:
            rank = dist.get_rank() if dist.is_initialized() else 0
            self._generator = torch.Generator(device=device).manual_seed(
                self.seed * 1_000_003 + rank
            )
        return self._generator

    def messages(self, plan: PartitionPlan, layer: str, direction: str) -> HaloMessages:
        """This epoch's message layout (bit-widths, sampled rows) for one layer and direction."""
        sampled = self.boundary_sampling is not None
        policy = self.policy
        bits_key = (
            None if policy is None else (self._policy_generation, policy.base_bits, policy.version)
        )
        # Layouts live with the plan they describe (a moved or rebuilt plan starts afresh),
        # keyed by everything they depend on.
        layouts: dict[Any, HaloMessages] = plan.cached(("halo_messages", self._uid), dict)
        key = (
            self.epoch if sampled else None,
            bits_key,
            layer if policy is not None else None,
            direction if policy is not None else None,
        )
        cached = layouts.get(key)
        if cached is not None:
            return cached
        if len(layouts) > 64:
            layouts.clear()
        send_index, send_counts = plan.send_index, list(plan.send_counts)
        send_pos: Tensor | None = None
        recv_index, recv_counts = None, list(plan.halo_counts)
        if sampled:
            send_pos, send_counts, recv_index, recv_counts = self._sample(plan)
            send_index = plan.send_index[send_pos]
        send_bits = recv_bits = None
        if policy is not None:
            send_bits, recv_bits = policy.message_bits(plan.halo, layer, direction)
            if send_pos is not None:
                send_bits = send_bits[send_pos]
            if recv_index is not None:
                recv_bits = recv_bits[recv_index]
        msgs = HaloMessages(
            send_index, send_counts, recv_index, recv_counts, send_bits, recv_bits, plan.num_halo
        )
        layouts[key] = msgs
        return msgs

    def _sample(self, plan: PartitionPlan) -> tuple[Tensor, list[int], Tensor, list[int]]:
        """``(send positions, send counts, recv positions, recv counts)`` kept this epoch."""
        p = self.boundary_sampling
        rank = plan.rank
        device = plan.send_index.device

        def keep(src: int, dst: int, count: int) -> Tensor:
            # The pair (src -> dst) draws from its own seed: both ends get the same mask.
            gen = torch.Generator().manual_seed(
                (((self.seed * 1_000_003 + self.epoch) * 1_000_003 + src) * 1_000_003 + dst)
                % (2**62)
            )
            return (torch.rand(count, generator=gen) < p).to(device)

        send_parts, send_counts, recv_parts, recv_counts = [], [], [], []
        offset = 0
        for q, count in enumerate(plan.send_counts):
            mask = (
                keep(rank, q, count) if count else torch.zeros(0, dtype=torch.bool, device=device)
            )
            send_parts.append(torch.nonzero(mask).flatten() + offset)
            send_counts.append(int(mask.sum()))
            offset += count
        offset = 0
        for q, count in enumerate(plan.halo_counts):
            mask = (
                keep(q, rank, count) if count else torch.zeros(0, dtype=torch.bool, device=device)
            )
            recv_parts.append(torch.nonzero(mask).flatten() + offset)
            recv_counts.append(int(mask.sum()))
            offset += count
        return torch.cat(send_parts), send_counts, torch.cat(recv_parts), recv_counts

    def _start(
        self,
        rows: Tensor,
        counts_out: list[int],
        counts_in: list[int],
        bits_out: Tensor | None,
        bits_in: Tensor | None,
        layer: str,
        direction: str,
        plan: PartitionPlan | None = None,
    ) -> Any:
        rows = rows.contiguous()
        if (
            plan is not None
            and self.policy is not None
            and self.policy.tracing
            and self.boundary_sampling is None
        ):
            aggregation = self.aggregations.get(layer, "sum")
            alpha2 = (
                plan.cached(
                    ("alpha2", aggregation),
                    lambda: aggregation_coefficients(
                        plan.halo, plan.edge_index, aggregation, plan.gcn_degree
                    ),
                )
                if direction == "forward"
                else None
            )
            self.policy.observe(plan.halo, layer, direction, rows, alpha2)
        if bits_out is None or bits_in is None:
            self.stats.record("train", layer, direction, rows.numel() * rows.element_size())
            return start_exchange_rows(
                rows, counts_out, counts_in, self.group, self.transport, self.ring_executor()
            )
        dim = rows.size(1)
        gen = self._rng(rows.device)
        # CUDA: quantise and communicate on a side stream, ordered after the rows' producer.
        stream = self._side_stream(rows) if rows.is_cuda else None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream(rows.device))
        with nullcontext() if stream is None else torch.cuda.stream(stream):
            if stream is not None:
                rows.record_stream(stream)  # the caller may free `rows` before we are done
            tic = time.perf_counter()
            buffers, bytes_out, formula, start = [], [], 0, 0
            for count in counts_out:
                seg = rows[start : start + count]
                buf = (
                    pack_rows(
                        seg,
                        bits_out[start : start + count],
                        gen,
                        compiled=self.compile_quantization,
                    )
                    if count
                    else rows.new_empty(0, dtype=torch.uint8)
                )
                if count:
                    formula += packed_nbytes(bits_out[start : start + count], dim)
                buffers.append(buf)
                bytes_out.append(buf.numel())
                start += count
            payload = torch.cat(buffers) if buffers else rows.new_empty(0, dtype=torch.uint8)
            self.stats.record_time("train", "quantize", time.perf_counter() - tic)
            # Side information: the bf16 scale and zero point of every row, plus whatever a
            # packed buffer carries beyond the code bytes of the formula.
            params = PARAM_BYTES_PER_ROW * rows.size(0) + (payload.numel() - formula)
            self.stats.record("train", layer, direction, payload.numel() - params)
            self.stats.record("train", layer, direction, params, kind="params")
            # The receiver cannot size its buffers from the widths alone: sizes travel first.
            pending = start_exchange_bytes(
                payload, bytes_out, self.group, self.transport, self.ring_executor()
            )
        return Decoding(
            pending,
            bits_in,
            counts_in,
            dim,
            rows.dtype,
            self.stats,
            self.compile_quantization,
            stream,
        )

    def _side_stream(self, rows: Tensor) -> Any:
        """This exchanger's CUDA side stream on ``rows``' device (AdaQP's resource isolation)."""
        if self._streams is None:
            self._streams = {}
        device = rows.device
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        return self._streams[device]

    def transfer(
        self, key: tuple[str, str], start: Any, msgs: HaloMessages
    ) -> tuple[Tensor, HaloMessages]:
        """Rows for this step under the current mode; returns them with their layout."""
        previous = self._buffers.pop(key, None)
        if self.mode == "async" and previous is not None:
            stale, stale_msgs = previous[0].wait(), previous[1]
            if isinstance(previous[0], RestoredRows):  # from a checkpoint, on the CPU
                device = msgs.send_index.device
                stale, stale_msgs = stale.to(device), stale_msgs.to(device)
            self._buffers[key] = (start(), msgs)  # this epoch's rows, used next epoch
            return stale, stale_msgs
        if previous is not None:
            previous[0].wait()  # drain a transfer started by an asynchronous epoch
        fresh = start().wait()
        self._buffers[key] = (Ready(fresh), msgs)
        return fresh, msgs
