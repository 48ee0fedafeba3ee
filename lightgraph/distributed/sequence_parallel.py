"""Ulysses-style sequence parallelism: all-to-all between sequence shards and head shards."""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from lightgraph.data.partition.partition_plan import boundary_importance
from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.halo_exchange import start_exchange_bytes
from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.functional.quantize import (
    PARAM_BYTES_PER_ROW,
    pack_rows,
    packed_nbytes,
    unpack_rows,
    warmup,
)
from lightgraph.functional.sequence_parallel import shard_range, shard_sizes, token_plan
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.quant.degree_aware_bits import DegreeAwareBits
from lightgraph.quant.variance_aware_bits import VarianceAwareBits
from lightgraph.utilities.checks import check_int, check_type
from lightgraph.utilities.collectives import all_gather_rows
from lightgraph.utilities.random_state import (
    check_rng_state,
    generator_state,
    restore_generator,
)

#: Widths of one all-to-all: per peer, the widths of the rows sent to it and received from it.
Widths = tuple[list[Tensor], list[Tensor]]

_MAX_LAYOUTS = 256


def token_importance(graph: Any) -> Tensor:
    """Sylvie's degree importance carried over to the tokens of an attention pattern.

    A token's degree is the number of queries that attend to it (its key degree, the
    entries of ``graph.edge_index[0]``, self-loop included): the more queries read its
    key and value, the more attention outputs its quantisation error reaches, as a
    boundary node's in-degree counts the aggregations its halo row enters. The
    importance is the mid-rank percentile of that degree among all ``S`` tokens,
    :func:`~lightgraph.data.partition.partition_plan.boundary_importance` over the whole sequence
    (the largest degree gets 1). It is the same on every rank (every rank holds the full
    pattern), so both ends of a token row compute the same width. Cached in
    ``graph.cache``.

    Args:
        graph: an :class:`~lightgraph.functional.attention.AttentionGraph` (anything with
            ``num_tokens``, ``edge_index`` ``[2, E]`` and a ``cache`` dict).

    Returns:
        ``[S]`` float32 in ``[0, 1]`` (CPU).
    """
    cache = getattr(graph, "cache", None)
    if isinstance(cache, dict) and "token_importance" in cache:
        return cache["token_importance"]
    num_tokens = int(graph.num_tokens)
    keys = graph.edge_index[0].detach().cpu()
    degree = torch.bincount(keys, minlength=num_tokens)
    importance = boundary_importance(degree, torch.arange(num_tokens))
    if isinstance(cache, dict):
        cache["token_importance"] = importance
    return importance


def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def check_sequence_policy(owner: str, name: str, policy: Any) -> None:
    """Raise a ``TypeError`` unless ``policy`` can size the token all-to-alls: ``None`` or a
    :class:`~lightgraph.quant.BitWidthPolicy` other than
    :class:`~lightgraph.quant.VarianceAwareBits`."""
    if policy is None:
        return
    check_type(
        owner,
        name,
        policy,
        BitWidthPolicy,
        "a lightgraph.quant policy such as FixedBits or RandomBits, or None",
    )
    if isinstance(policy, VarianceAwareBits):
        raise TypeError(
            f"{owner}: VarianceAwareBits cannot size the token all-to-alls of "
            "sequence (graph) parallelism: its widths are solved (AdaQP's MILP) from "
            "traced halo messages, the aggregation coefficients of a partition plan and "
            "a link cost model, none of which token rows have. Use FixedBits, RandomBits "
            "or DegreeAwareBits (token degree in the attention pattern), or None for "
            "FP32."
        )


class SequenceParallel:
    """Turns sequence shards into head shards and back (DeepSpeed-Ulysses) with all_to_all_single.

    Each of the ``P`` ranks of ``group`` holds a contiguous shard of ``S_r`` tokens (see
    :func:`shard_sizes`) of every head. Before attention, :meth:`to_heads` exchanges them so
    that each rank holds all ``S`` tokens of ``H / P`` heads; after attention,
    :meth:`to_sequence` restores the token shards:

    .. math::
        [S_r, H, D] \\xrightarrow{\\text{all-to-all}} [S, H/P, D]
        \\xrightarrow{\\text{attention}} [S, H/P, D]
        \\xrightarrow{\\text{all-to-all}} [S_r, H, D]

    A rank sends ``(P - 1) / P`` of its tensor per all-to-all, so the volume per rank is
    ``O(S H D / P)`` (TorchGT §4.3.3, DeepSpeed-Ulysses). Both directions are differentiable;
    the backward of one is the other. Every call is a collective: all ranks of ``group`` must
    make the same calls in the same order. The device of the tensors decides the transport
    (gloo on CPU, NCCL on CUDA); inputs are made contiguous, as gloo requires.

    With one rank (or without an initialised process group) every method is the identity and
    nothing is sent.

    **Quantised all-to-alls** (``policy=``, a :mod:`lightgraph.quant` bit-width policy, as
    the halo exchanger's): training exchanges (``stage="train"``) send every *token row*
    — one token's values for the heads of one peer, ``(H / P) * prod(*)`` values, e.g.
    ``3 D H / P`` for the stacked Q, K, V — as stochastically rounded integer codes of the
    policy's width (1, 2, 4 or 8 bits, bit-packed, with a bf16 scale and zero point per
    row; :func:`~lightgraph.functional.quantize.pack_rows`), in both directions: forward
    the activations (``"forward"`` widths), backward their gradients (``"backward"``
    widths). The rounding noise is the counter-based stream of
    :mod:`lightgraph.functional.quantize`, seeded from a generator of this object
    (``seed`` and the rank), so a run is reproducible under a seed, and rounding is
    unbiased. The local block (this rank's tokens of its own heads) is never quantised.
    Messages are preceded by their per-peer byte sizes (a row whose zero point needs
    float32 carries 2 more bytes). Widths come from ``policy.message_bits`` on the
    all-to-all's :func:`~lightgraph.functional.sequence_parallel.token_plan`: the plan's
    "nodes" are token rows, its ``importance`` the per-token importance set with
    :meth:`set_token_importance`. :class:`~lightgraph.quant.FixedBits` and
    :class:`~lightgraph.quant.RandomBits` (a width per row and device pair) need nothing
    else; :class:`~lightgraph.quant.DegreeAwareBits` needs the token importance
    (:func:`token_importance` of the attention pattern, which ``GraphParallelStrategy``
    sets for every training batch); :class:`~lightgraph.quant.VarianceAwareBits` is
    rejected (its widths are solved from traced halo messages, a partition's
    aggregation coefficients and a link cost model, which token rows do not have).
    Evaluation exchanges (any other stage) stay exact FP32, and without a policy every
    exchange is the plain FP32 all-to-all.

    Args:
        group: process group of the exchange (default: the world group).
        stats: byte counter; records the bytes this rank sends (its own slice excluded) under
            ``(stage, layer, "forward" | "backward")``; quantised exchanges record the codes
            under ``kind="data"`` and the scales, zero points and float32 zero-point
            extensions under ``kind="params"``. A fresh one is created when ``None``.
        policy: bit-width policy of training exchanges; ``None`` sends FP32.
        seed: seed of the quantisation noise (combined with the rank).

    Shapes:
        - :meth:`to_heads`: ``[S_r, H, *]`` → ``[S, H / P, *]``
        - :meth:`to_sequence`: ``[S, H / P, *]`` → ``[S_r, H, *]``
    """

    def __init__(
        self,
        group: dist.ProcessGroup | None = None,
        stats: ExchangeStats | None = None,
        policy: BitWidthPolicy | None = None,
        seed: int = 0,
    ) -> None:
        if stats is not None and not isinstance(stats, ExchangeStats):
            raise TypeError(
                f"SequenceParallel: expected `stats` to be an ExchangeStats or None but got "
                f"{type(stats).__name__}."
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(
                f"SequenceParallel: expected `seed` to be an integer but got {seed!r}."
            )
        self.group = group
        self.stats = stats if stats is not None else ExchangeStats()
        self.seed = seed
        self._policy: BitWidthPolicy | None = None
        self._policy_generation = 0
        self._importance: Tensor | None = None
        self._importance_generation = 0
        self._generator: torch.Generator | None = None
        self._layouts: dict[Any, Widths] = {}
        self._plans: dict[Any, HaloPlan] = {}
        self.set_policy(policy)
        if dist.is_available() and dist.is_initialized():
            self.world_size = dist.get_world_size(group)
            self.rank = dist.get_rank(group)
        elif group is not None:
            raise RuntimeError(
                "SequenceParallel: got a process `group` but torch.distributed is not initialised."
            )
        else:
            self.world_size = 1
            self.rank = 0

    def __repr__(self) -> str:
        policy = "" if self.policy is None else f", policy={self.policy!r}"
        return f"{type(self).__name__}(world_size={self.world_size}, rank={self.rank}{policy})"

    # ------------------------------------------------------------------ quantisation
    @property
    def policy(self) -> BitWidthPolicy | None:
        """The bit-width policy of training exchanges (``None``: FP32)."""
        return self._policy

    def set_policy(self, policy: BitWidthPolicy | None) -> None:
        """Quantise training exchanges with ``policy`` from the next call on (``None``: FP32).

        Raises:
            TypeError: for anything but a :class:`~lightgraph.quant.BitWidthPolicy` or
                ``None``, and for :class:`~lightgraph.quant.VarianceAwareBits`.
        """
        check_sequence_policy("SequenceParallel", "policy", policy)
        self._policy = policy
        self._policy_generation += 1
        self._layouts.clear()

    def setup(self) -> None:
        """Compile the quantiser's kernels now when a policy is set (outside the timed steps).

        :func:`~lightgraph.functional.quantize.warmup` (numba, cached on disk); without it
        the first quantised exchange compiles them.
        """
        if self._policy is not None and self.world_size > 1:
            warmup()

    @property
    def needs_token_importance(self) -> bool:
        """Whether the policy reads per-token importances (:meth:`set_token_importance`)."""
        return isinstance(self._policy, DegreeAwareBits)

    @property
    def token_importance(self) -> Tensor | None:
        """The per-token importance the plans carry (``None``: zeros)."""
        return self._importance

    def set_token_importance(self, importance: Tensor | None) -> None:
        """Per-token importance in ``[0, 1]`` of the next exchanges (e.g. :func:`token_importance`).

        Every rank must set the same values (they size the rows on both ends). Setting the
        same values again (e.g. the next epoch's copy of a batch) keeps the cached widths.

        Shapes:
            - importance: ``[S]``, the sequence length of the following exchanges.
        """
        if importance is self._importance:
            return
        if importance is not None:
            if (
                not isinstance(importance, Tensor)
                or importance.dim() != 1
                or not importance.is_floating_point()
            ):
                raise ValueError(
                    "SequenceParallel.set_token_importance: expected a 1-D float tensor [S] or "
                    f"None but got {importance!r}."
                )
            imp = importance.detach().cpu()
            if imp.numel() and not bool(((imp >= 0) & (imp <= 1)).all()):
                raise ValueError(
                    "SequenceParallel.set_token_importance: expected values in [0, 1] but got "
                    f"min {float(imp.min())}, max {float(imp.max())}."
                )
            current = self._importance
            if (
                current is not None
                and current.shape == importance.shape
                and torch.equal(current.detach().cpu(), imp)
            ):
                return
        self._importance = importance
        self._importance_generation += 1
        if len(self._plans) > _MAX_LAYOUTS:
            self._plans.clear()

    def quantizes(self, stage: str) -> bool:
        """Whether exchanges of ``stage`` are quantised (training, a policy, ``P > 1``)."""
        return self._policy is not None and stage == "train" and self.world_size > 1

    def plan(self, kind: str, num_tokens: int) -> HaloPlan:
        """This rank's :func:`~lightgraph.functional.sequence_parallel.token_plan` of ``kind``."""
        imp = self._importance
        key = (kind, num_tokens, self._importance_generation if imp is not None else None)
        plan = self._plans.get(key)
        if plan is None:
            if imp is not None and imp.numel() != num_tokens:
                raise ValueError(
                    f"SequenceParallel: the token importance holds {imp.numel()} tokens but the "
                    f"exchange has num_tokens={num_tokens}; set the importance of this sequence "
                    "(set_token_importance) before its exchanges."
                )
            if len(self._plans) > _MAX_LAYOUTS:
                self._plans.clear()
            plan = token_plan(kind, num_tokens, self.world_size, self.rank, imp)
            self._plans[key] = plan
        return plan

    def message_bits(self, kind: str, num_tokens: int, layer: str, direction: str) -> Widths:
        """Per-peer widths of one all-to-all: ``(sent, received)``, aligned with the plan.

        ``sent[q]`` holds the widths of the rows :func:`token_plan` ``(kind)`` sends to
        peer ``q`` in the forward direction (``send_counts[q]`` rows), ``received[q]``
        those of the rows it receives from ``q`` (``halo_counts[q]``); empty for this
        rank. In the ``"backward"`` direction the same rows travel the other way and keep
        this alignment (as the policy's ``message_bits``).
        """
        policy = self._policy
        if policy is None:
            raise RuntimeError("SequenceParallel.message_bits: no bit-width policy is set.")
        if self.needs_token_importance and self._importance is None:
            raise RuntimeError(
                f"SequenceParallel: {type(policy).__name__} sizes token rows by their "
                "importance, and none is set. Under GraphParallelStrategy it is set for every "
                "training batch with an attention graph (a TokenBatch); with SequenceParallel "
                "alone, call set_token_importance(token_importance(graph)) before the exchanges."
            )
        imp_key = self._importance_generation if self._importance is not None else None
        key = (
            kind,
            num_tokens,
            layer,
            direction,
            self._policy_generation,
            policy.base_bits,
            policy.version,
            imp_key,
        )
        cached = self._layouts.get(key)
        if cached is not None:
            return cached
        plan = self.plan(kind, num_tokens)
        send_bits, recv_bits = policy.message_bits(plan, layer, direction)
        send_bits, recv_bits = send_bits.detach().cpu().long(), recv_bits.detach().cpu().long()
        if send_bits.numel() != sum(plan.send_counts) or recv_bits.numel() != plan.num_halo:
            raise RuntimeError(
                f"SequenceParallel: {type(policy).__name__}.message_bits returned "
                f"{send_bits.numel()} send and {recv_bits.numel()} receive widths for a plan of "
                f"{sum(plan.send_counts)} sent and {plan.num_halo} received rows."
            )
        widths = (
            list(send_bits.split(plan.send_counts)),
            list(recv_bits.split(plan.halo_counts)),
        )
        if len(self._layouts) > _MAX_LAYOUTS:
            self._layouts.clear()
        self._layouts[key] = widths
        return widths

    def _widths(
        self, kind: str, num_tokens: int, layer: str, direction: str, stage: str
    ) -> Widths | None:
        """Widths of one exchange in its own sending order, or ``None`` for FP32.

        Forward: the plan's ``(sent, received)``. Backward: the gradients of the plan's
        received rows go back to their owners, so the roles swap.
        """
        if not self.quantizes(stage):
            return None
        sent, received = self.message_bits(kind, num_tokens, layer, direction)
        return (sent, received) if direction == "forward" else (received, sent)

    def rng_state(self) -> dict[str, Any]:
        """The quantisation-noise generator's state (``None`` before the first quantised
        all-to-all), for :class:`~lightgraph.callbacks.RandomStateCheckpoint`."""
        return {"generator": generator_state(self._generator)}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Continue the quantisation noise from :meth:`rng_state` (``None``: freshly seeded)."""
        owner = "SequenceParallel.set_rng_state"
        check_rng_state(owner, state, ("generator",), "SequenceParallel.rng_state()")
        self._generator = restore_generator(state["generator"], None, owner, "state['generator']")

    def _rng(self) -> torch.Generator:
        # One CPU generator: pack_rows draws one seed from it per message, on any device.
        if self._generator is None:
            self._generator = torch.Generator().manual_seed(
                (self.seed * 1_000_003 + self.rank) % (2**63)
            )
        return self._generator

    # ------------------------------------------------------------------ checks
    def check_heads(self, num_heads: int, owner: str = "SequenceParallel") -> None:
        """Raise a ``ValueError`` unless ``num_heads`` splits evenly over the ranks.

        Uneven head splits are rejected rather than padded: every rank then runs the same
        attention kernel on the same number of heads, and the all-to-all splits stay equal.
        """
        check_int(owner, "num_heads", num_heads)
        p = self.world_size
        if num_heads % p:
            raise ValueError(
                f"{owner}: expected `num_heads` to be a multiple of the sequence-parallel world "
                f"size {p} (e.g. {p}, {2 * p}, {3 * p}) but got {num_heads}. With {num_heads} "
                f"heads the world size must be one of {_divisors(num_heads)}; change the number "
                f"of heads or of devices."
            )

    def head_slice(self, num_heads: int) -> slice:
        """The heads this rank computes after :meth:`to_heads` (e.g. to slice a bias ``[H, S, S]``)."""
        self.check_heads(num_heads)
        local = num_heads // self.world_size
        return slice(self.rank * local, (self.rank + 1) * local)

    def _check_tokens(self, num_tokens: int, rows: int, full: bool, method: str) -> None:
        expected = num_tokens if full else shard_sizes(num_tokens, self.world_size)[self.rank]
        if rows != expected:
            what = "the full sequence" if full else f"the shard of rank {self.rank}"
            raise ValueError(
                f"SequenceParallel.{method}: expected `x` to hold {expected} tokens ({what} of "
                f"num_tokens={num_tokens} over {self.world_size} ranks) but got {rows}."
            )

    # ------------------------------------------------------------ collectives
    def to_heads(
        self, x: Tensor, num_tokens: int, layer: str = "attention", stage: str = "train"
    ) -> Tensor:
        """All tokens of this rank's heads from every rank's token shard of all heads.

        Args:
            x: ``[S_r, H, *]``, this rank's tokens (``S_r = shard_sizes(num_tokens, P)[rank]``).
            num_tokens: sequence length ``S`` (summed over ranks).
            layer: label for :attr:`stats`.
            stage: label for :attr:`stats`.

        Returns:
            ``[S, H / P, *]``: every token, heads :meth:`head_slice` ``(H)``, in token order.
        """
        if x.dim() < 2:
            raise ValueError(
                f"SequenceParallel.to_heads: expected `x` of shape [tokens, heads, ...] but got "
                f"shape {tuple(x.shape)}."
            )
        self._check_tokens(num_tokens, x.size(0), False, "to_heads")
        self.check_heads(x.size(1), "SequenceParallel.to_heads")
        if self.world_size == 1:
            return x
        return _ToHeads.apply(x, self, num_tokens, layer, stage)

    def to_sequence(
        self, x: Tensor, num_tokens: int, layer: str = "attention", stage: str = "train"
    ) -> Tensor:
        """Inverse of :meth:`to_heads`: ``[S, H / P, *]`` → this rank's tokens ``[S_r, H, *]``."""
        if x.dim() < 2:
            raise ValueError(
                f"SequenceParallel.to_sequence: expected `x` of shape [tokens, heads, ...] but "
                f"got shape {tuple(x.shape)}."
            )
        self._check_tokens(num_tokens, x.size(0), True, "to_sequence")
        if self.world_size == 1:
            return x
        return _ToSequence.apply(x, self, num_tokens, layer, stage)

    def gather_tokens(self, x: Tensor, num_tokens: int) -> Tensor:
        """Every rank's token shard ``[S_r, *]`` concatenated in token order: ``[S, *]``.

        For evaluation and tests; the result carries no gradient and is not counted in
        :attr:`stats`.
        """
        self._check_tokens(num_tokens, x.size(0), False, "gather_tokens")
        if self.world_size == 1:
            return x.detach()
        sizes = shard_sizes(num_tokens, self.world_size)
        longest = sizes[0]
        # gloo cannot all-gather uneven tensors: pad every shard to the longest one.
        padded = x.detach().new_zeros((longest,) + tuple(x.shape[1:]))
        padded[: x.size(0)] = x.detach()
        out = padded.new_empty((self.world_size * longest,) + tuple(x.shape[1:]))
        all_gather_rows(out, padded, self.group)
        return torch.cat([out[r * longest : r * longest + n] for r, n in enumerate(sizes)])

    # ------------------------------------------------------- raw exchanges
    def _heads_exchange(
        self,
        x: Tensor,
        num_tokens: int,
        stage: str,
        layer: str,
        direction: str,
        widths: Widths | None = None,
    ) -> Tensor:
        """``[S_r, H, *]`` → ``[S, H/P, *]``; records the bytes sent to peers."""
        if widths is not None:
            return self._heads_exchange_quantized(x, num_tokens, stage, layer, direction, widths)
        p = self.world_size
        sizes = shard_sizes(num_tokens, p)
        local = x.size(0)
        rest = tuple(x.shape[2:])
        heads = x.size(1) // p
        # Block q of the send buffer holds this rank's tokens of rank q's heads.
        send = x.reshape((local, p, heads) + rest).transpose(0, 1).contiguous()
        send = send.reshape((p * local, heads) + rest)
        recv = send.new_empty((num_tokens, heads) + rest)
        dist.all_to_all_single(
            recv, send, output_split_sizes=sizes, input_split_sizes=[local] * p, group=self.group
        )
        row_bytes = heads * math.prod(rest) * send.element_size()
        self.stats.record(stage, layer, direction, (p - 1) * local * row_bytes)
        return recv

    def _sequence_exchange(
        self,
        x: Tensor,
        num_tokens: int,
        stage: str,
        layer: str,
        direction: str,
        widths: Widths | None = None,
    ) -> Tensor:
        """``[S, H/P, *]`` → ``[S_r, H, *]``; records the bytes sent to peers."""
        if widths is not None:
            return self._sequence_exchange_quantized(x, num_tokens, stage, layer, direction, widths)
        p = self.world_size
        sizes = shard_sizes(num_tokens, p)
        local = sizes[self.rank]
        rest = tuple(x.shape[2:])
        heads = x.size(1)
        send = x.contiguous()
        recv = send.new_empty((p * local, heads) + rest)
        dist.all_to_all_single(
            recv, send, output_split_sizes=[local] * p, input_split_sizes=sizes, group=self.group
        )
        # Block q of recv holds this rank's tokens of rank q's heads: put heads back in order.
        out = recv.reshape((p, local, heads) + rest).transpose(0, 1)
        out = out.reshape((local, p * heads) + rest)
        row_bytes = heads * math.prod(rest) * send.element_size()
        self.stats.record(stage, layer, direction, (num_tokens - local) * row_bytes)
        return out

    def _heads_exchange_quantized(
        self, x: Tensor, num_tokens: int, stage: str, layer: str, direction: str, widths: Widths
    ) -> Tensor:
        p, me = self.world_size, self.rank
        local = x.size(0)
        rest = tuple(x.shape[2:])
        heads = x.size(1) // p
        dim = heads * math.prod(rest)
        # Row i of block q: token i of this rank, the values of rank q's heads.
        send = x.detach().reshape(local, p, dim).transpose(0, 1).contiguous()
        recv = send.new_empty((num_tokens, dim))
        start, end = shard_range(num_tokens, p, me)
        recv[start:end] = send[me]  # the local block never leaves the rank, exact
        blocks = [send[q] for q in range(p)]
        outs = [recv[slice(*shard_range(num_tokens, p, q))] for q in range(p)]
        self._quantized_all_to_all(blocks, outs, widths, stage, layer, direction)
        return recv.view((num_tokens, heads) + rest)

    def _sequence_exchange_quantized(
        self, x: Tensor, num_tokens: int, stage: str, layer: str, direction: str, widths: Widths
    ) -> Tensor:
        p, me = self.world_size, self.rank
        local = shard_sizes(num_tokens, p)[me]
        rest = tuple(x.shape[2:])
        heads = x.size(1)
        dim = heads * math.prod(rest)
        flat = x.detach().contiguous().view(num_tokens, dim)
        # Block q of recv: this rank's tokens of rank q's heads.
        recv = flat.new_empty((p, local, dim))
        start, end = shard_range(num_tokens, p, me)
        recv[me] = flat[start:end]  # the local block never leaves the rank, exact
        blocks = [flat[slice(*shard_range(num_tokens, p, q))] for q in range(p)]
        outs = [recv[q] for q in range(p)]
        self._quantized_all_to_all(blocks, outs, widths, stage, layer, direction)
        out = recv.view((p, local, heads) + rest).transpose(0, 1)
        return out.reshape((local, p * heads) + rest)

    def _quantized_all_to_all(
        self,
        blocks: list[Tensor],
        outs: list[Tensor],
        widths: Widths,
        stage: str,
        layer: str,
        direction: str,
    ) -> None:
        """Quantise ``blocks[q]`` (``[n_q, D]``) for every peer ``q``, exchange, dequantise
        what peer ``q`` sent into ``outs[q]``. This rank's own block is skipped."""
        p, me = self.world_size, self.rank
        bits_out, bits_in = widths
        dim = blocks[me].size(1)
        device = blocks[me].device
        gen = self._rng()
        tic = time.perf_counter()
        buffers: list[Tensor] = []
        bytes_out = [0] * p
        formula = rows = 0
        for q in range(p):
            block = blocks[q]
            if q == me or block.size(0) == 0:
                continue
            if bits_out[q].numel() != block.size(0):
                raise RuntimeError(
                    f"SequenceParallel: {bits_out[q].numel()} widths for the {block.size(0)} "
                    f"rows sent to rank {q} ({layer}, {direction})."
                )
            buf = pack_rows(block, bits_out[q], gen)
            buffers.append(buf)
            bytes_out[q] = buf.numel()
            formula += packed_nbytes(bits_out[q], dim)
            rows += block.size(0)
        payload = torch.cat(buffers) if buffers else torch.empty(0, dtype=torch.uint8)
        payload = payload.to(device)
        self.stats.record_time(stage, "quantize", time.perf_counter() - tic)
        # Side information: a bf16 scale and zero point per row, plus the float32 zero-point
        # extensions a buffer carries beyond the formula (wide-offset rows).
        params = PARAM_BYTES_PER_ROW * rows + (payload.numel() - formula)
        self.stats.record(stage, layer, direction, payload.numel() - params)
        self.stats.record(stage, layer, direction, params, kind="params")
        # A message's size depends on its data (wide-offset rows): sizes travel first.
        pending = start_exchange_bytes(payload, bytes_out, self.group)
        received = pending.wait()
        sizes = pending.recv_counts
        if sizes is None or len(sizes) != p or sum(sizes) != received.numel():
            raise RuntimeError(
                f"SequenceParallel: expected the peers' message sizes to add up to the "
                f"{received.numel()} bytes received, one per rank ({p}), but got {sizes}."
            )
        tic = time.perf_counter()
        offset = 0
        for q in range(p):
            size = sizes[q]
            if q == me:
                if size:
                    raise RuntimeError("SequenceParallel: a rank sent a message to itself.")
                continue
            out = outs[q]
            if out.size(0):
                unpack_rows(received[offset : offset + size], bits_in[q], dim, out.dtype, out=out)
            elif size:
                raise RuntimeError(
                    f"SequenceParallel: rank {q} sent {size} bytes where no rows were expected; "
                    "the ranks disagree on the message layout."
                )
            offset += size
        self.stats.record_time(stage, "dequantize", time.perf_counter() - tic)


class _ToHeads(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Tensor, sp: SequenceParallel, num_tokens: int, layer: str, stage: str
    ) -> Tensor:
        widths = sp._widths("heads", num_tokens, layer, "forward", stage)
        out = sp._heads_exchange(x, num_tokens, stage, layer, "forward", widths)
        ctx.meta = (sp, num_tokens, layer, stage)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        sp, num_tokens, layer, stage = ctx.meta
        widths = sp._widths("heads", num_tokens, layer, "backward", stage)
        grad_x = sp._sequence_exchange(grad_out, num_tokens, stage, layer, "backward", widths)
        return grad_x, None, None, None, None


class _ToSequence(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Tensor, sp: SequenceParallel, num_tokens: int, layer: str, stage: str
    ) -> Tensor:
        widths = sp._widths("sequence", num_tokens, layer, "forward", stage)
        out = sp._sequence_exchange(x, num_tokens, stage, layer, "forward", widths)
        ctx.meta = (sp, num_tokens, layer, stage)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        sp, num_tokens, layer, stage = ctx.meta
        widths = sp._widths("sequence", num_tokens, layer, "backward", stage)
        grad_x = sp._heads_exchange(grad_out, num_tokens, stage, layer, "backward", widths)
        return grad_x, None, None, None, None
