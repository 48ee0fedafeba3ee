"""Ulysses-style sequence parallelism: all-to-all between sequence shards and head shards."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.sequence_parallel import shard_sizes
from lightgraph.utilities.checks import check_int


def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


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

    Args:
        group: process group of the exchange (default: the world group).
        stats: byte counter; records the bytes this rank sends (its own slice excluded) under
            ``(stage, layer, "forward" | "backward")``. A fresh one is created when ``None``.

    Shapes:
        - :meth:`to_heads`: ``[S_r, H, *]`` → ``[S, H / P, *]``
        - :meth:`to_sequence`: ``[S, H / P, *]`` → ``[S_r, H, *]``
    """

    def __init__(
        self, group: dist.ProcessGroup | None = None, stats: ExchangeStats | None = None
    ) -> None:
        if stats is not None and not isinstance(stats, ExchangeStats):
            raise TypeError(
                f"SequenceParallel: expected `stats` to be an ExchangeStats or None but got "
                f"{type(stats).__name__}."
            )
        self.group = group
        self.stats = stats if stats is not None else ExchangeStats()
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
        return f"{type(self).__name__}(world_size={self.world_size}, rank={self.rank})"

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
        dist.all_gather_into_tensor(out, padded, group=self.group)
        return torch.cat([out[r * longest : r * longest + n] for r, n in enumerate(sizes)])

    # ------------------------------------------------------- raw exchanges
    def _heads_exchange(self, x: Tensor, num_tokens: int) -> tuple[Tensor, int]:
        """``[S_r, H, *]`` → ``[S, H/P, *]``; returns the result and the bytes sent to peers."""
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
        return recv, (p - 1) * local * row_bytes

    def _sequence_exchange(self, x: Tensor, num_tokens: int) -> tuple[Tensor, int]:
        """``[S, H/P, *]`` → ``[S_r, H, *]``; returns the result and the bytes sent to peers."""
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
        return out, (num_tokens - local) * row_bytes


class _ToHeads(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Tensor, sp: SequenceParallel, num_tokens: int, layer: str, stage: str
    ) -> Tensor:
        out, sent = sp._heads_exchange(x, num_tokens)
        sp.stats.record(stage, layer, "forward", sent)
        ctx.meta = (sp, num_tokens, layer, stage)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        sp, num_tokens, layer, stage = ctx.meta
        grad_x, sent = sp._sequence_exchange(grad_out, num_tokens)
        sp.stats.record(stage, layer, "backward", sent)
        return grad_x, None, None, None, None


class _ToSequence(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Tensor, sp: SequenceParallel, num_tokens: int, layer: str, stage: str
    ) -> Tensor:
        out, sent = sp._sequence_exchange(x, num_tokens)
        sp.stats.record(stage, layer, "forward", sent)
        ctx.meta = (sp, num_tokens, layer, stage)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        sp, num_tokens, layer, stage = ctx.meta
        grad_x, sent = sp._heads_exchange(grad_out, num_tokens)
        sp.stats.record(stage, layer, "backward", sent)
        return grad_x, None, None, None, None
