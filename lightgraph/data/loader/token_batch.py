"""The batch graph transformers consume (one token sequence, or a rank's shard of it), and
the typed hand-off that tells a data module which shard a rank keeps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor

from lightgraph.functional.attention import AttentionGraph
from lightgraph.functional.sequence_parallel import shard_range
from lightgraph.utilities.checks import check_int

__all__ = ["TokenBatch", "TokenShard", "sequence_parallel_shard"]

_TOKEN_FIELDS = (
    "x",
    "is_global",
    "in_degree",
    "out_degree",
    "train_mask",
    "val_mask",
    "test_mask",
    "node_ids",
    "graph_index",
    "lap_pe",
)


@dataclass(frozen=True)
class TokenShard:
    """Which contiguous token shard of every sequence a rank keeps.

    What a graph-parallel strategy reports in ``sequence_parallel_kwargs`` (``world_size``
    ranks of its sequence-parallel group, this process being ``rank``), read by
    :func:`sequence_parallel_shard`; the default keeps every token. The shard is the range
    :func:`~lightgraph.functional.sequence_parallel.shard_range` gives.

    Args:
        world_size: ranks the tokens are split over (``>= 1``).
        rank: this rank, in ``[0, world_size)``.
    """

    world_size: int = 1
    rank: int = 0

    def __post_init__(self) -> None:
        owner = "TokenShard"
        check_int(owner, "world_size", self.world_size)
        check_int(owner, "rank", self.rank, 0, self.world_size - 1)

    @property
    def is_sharded(self) -> bool:
        """Whether a rank keeps only part of the tokens (``world_size > 1``)."""
        return self.world_size > 1


def sequence_parallel_shard(trainer: Any) -> TokenShard:
    """The token shard ``trainer``'s strategy assigns this process.

    Read from ``trainer.strategy.sequence_parallel_kwargs`` -- ``{"world_size": P, "rank":
    r}``, what :class:`~lightgraph.strategies.GraphParallelStrategy` reports once set up --
    the way Lightning's loaders read the data-parallel replicas from the strategy's
    ``distributed_sampler_kwargs``; ``TokenShard()`` (every token) without a trainer or for
    a strategy without the property (no graph parallelism).
    """
    strategy = getattr(trainer, "strategy", None)
    kwargs = getattr(strategy, "sequence_parallel_kwargs", None)
    if kwargs is None:
        return TokenShard()
    if not isinstance(kwargs, Mapping) or set(kwargs) != {"world_size", "rank"}:
        raise TypeError(
            f"sequence_parallel_shard: expected the strategy's `sequence_parallel_kwargs` to be "
            f"a mapping with keys 'world_size' and 'rank' but {type(strategy).__name__} gives "
            f"{kwargs!r}."
        )
    return TokenShard(world_size=kwargs["world_size"], rank=kwargs["rank"])


@dataclass(eq=False)
class TokenBatch:
    """One token sequence (or one rank's shard of it) as the graph transformers consume it.

    Token-wise fields hold the tokens ``token_range = [start, end)`` of the full sequence
    (all of them outside graph parallelism); ``graph`` always describes the *full* sequence,
    since every rank attends over all tokens after the all-to-all.

    Attributes:
        x: ``[S_r, F]`` float token features (zeros for global tokens).
        graph: the attention pattern of the full sequence of ``S`` tokens.
        is_global: ``[S_r]`` bool, which tokens are global tokens (learned embeddings).
        in_degree, out_degree: ``[S_r]`` long degrees inside the sequence (or graph),
            clipped to the data module's ``max_degree``; 0 for global tokens.
        y: node-level: ``[S_r]`` targets of the tokens (ignored where no mask is set);
            graph-level: ``[num_graphs]`` targets of the graphs.
        train_mask, val_mask, test_mask: ``[S_r]`` bool (node-level); global tokens are
            never labelled.
        node_ids: ``[S_r]`` long node id in the source graph (``-1`` for global tokens).
        graph_index: ``[S_r]`` long graph of every token (graph-level batches).
        readout_index: ``[num_graphs]`` long position of every graph's global token in the
            full sequence (graph-level batches with global tokens).
        lap_pe: ``[S_r, k]`` Laplacian eigenvector positional encodings (zeros for global
            tokens), when the data module was built with ``pe_dim > 0``.
        token_range: ``(start, end)`` of the tokens held here.
        global_counts: labelled tokens of the *full* sequence per mask name, so a shard can
            normalise its loss without communication.
        num_buckets: learned bias buckets the pattern was built for (``max_distance + 4``).
        index: position of the sequence in its data module.
    """

    x: Tensor
    graph: AttentionGraph
    is_global: Tensor
    in_degree: Tensor
    out_degree: Tensor
    y: Tensor | None = None
    train_mask: Tensor | None = None
    val_mask: Tensor | None = None
    test_mask: Tensor | None = None
    node_ids: Tensor | None = None
    graph_index: Tensor | None = None
    readout_index: Tensor | None = None
    lap_pe: Tensor | None = None
    token_range: tuple[int, int] = (0, 0)
    global_counts: dict[str, int] = field(default_factory=dict)
    num_buckets: int = 0
    index: int = 0

    def __post_init__(self) -> None:
        if self.token_range == (0, 0):
            self.token_range = (0, self.graph.num_tokens)

    @property
    def num_tokens(self) -> int:
        """Tokens of the full sequence (``S``)."""
        return self.graph.num_tokens

    @property
    def num_local_tokens(self) -> int:
        """Tokens held here (``S_r``)."""
        return self.x.size(0)

    @property
    def is_sharded(self) -> bool:
        """Whether this batch holds only a shard of the sequence's tokens."""
        return self.token_range != (0, self.num_tokens)

    @property
    def num_graphs(self) -> int:
        """Graphs in a graph-level batch (1 for a node sequence)."""
        if self.readout_index is not None:
            return self.readout_index.numel()
        if self.graph_index is not None and self.graph_index.numel():
            return int(self.graph_index.max()) + 1
        return 1

    @property
    def device(self) -> torch.device:
        """The device of the token features."""
        return self.x.device

    def select_shard(self, world_size: int, rank: int) -> TokenBatch:
        """The tokens :func:`~lightgraph.functional.sequence_parallel.shard_range` gives
        ``rank`` of ``world_size``; the attention graph stays whole.

        Args:
            world_size: ranks the tokens are split over.
            rank: the rank whose tokens to keep.
        """
        if self.is_sharded:
            raise ValueError("TokenBatch.select_shard: this batch is already a shard.")
        if self.readout_index is not None or self.graph_index is not None:
            raise ValueError(
                "TokenBatch.select_shard: graph-level batches are data-parallel (one graph "
                "batch per rank); shard node-level sequences only."
            )
        start, end = shard_range(self.num_tokens, world_size, rank)
        sliced = {
            name: getattr(self, name)[start:end].clone()
            for name in _TOKEN_FIELDS
            if getattr(self, name) is not None
        }
        if self.y is not None:
            sliced["y"] = self.y[start:end].clone()
        return replace(self, token_range=(start, end), **sliced)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TokenBatch:
        """A copy on ``device``; the attention graph's copy is cached on the graph, so its
        derived data (sorted pattern, layouts, conditions) survives between epochs.

        Args:
            device: the target device (the batch itself when it is there already).
            non_blocking: forwarded to :meth:`torch.Tensor.to`.
        """
        device = torch.device(device)
        if self.x.device == device:
            return self
        key = ("to", str(device))
        graph = self.graph.cache.get(key)
        if graph is None:
            graph = self.graph.to(device)
            self.graph.cache[key] = graph
        moved: dict[str, Any] = {"graph": graph}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                moved[f.name] = value.to(device, non_blocking=non_blocking)
        return replace(self, **moved)
