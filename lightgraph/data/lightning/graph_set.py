"""GraphSetDataModule: graph-level tasks over a set of small graphs, served as token batches."""

from __future__ import annotations

from collections.abc import Sequence

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_set import SyntheticGraphSet
from lightgraph.data.loader.token_batch import TokenBatch
from lightgraph.data.partition.sequences import token_pattern
from lightgraph.functional.attention import AttentionGraph
from lightgraph.functional.graph_encoding import (
    GLOBAL_BUCKET,
    SELF_BUCKET,
    check_max_distance,
    distance_buckets,
    laplacian_pe,
    num_buckets,
)
from lightgraph.utilities.checks import check_int

__all__ = ["GraphSetDataModule", "collate_graphs"]


class _GraphItem:
    """One graph's tokens and pattern, prepared once."""

    def __init__(
        self,
        data: Data,
        global_token: bool,
        max_degree: int,
        max_distance: int,
        pe_dim: int,
        seed: int,
    ) -> None:
        n = int(data.num_nodes)
        g = int(global_token)
        keep = data.edge_index[0] != data.edge_index[1]
        key = torch.unique(data.edge_index[1, keep] * n + data.edge_index[0, keep])
        edges = torch.stack([key % n, key // n])
        # No token path: a batch's pattern is block-diagonal over its graphs, so C2 and C3
        # fail for every batch of more than one graph whatever each graph holds (a path
        # across graphs would attend across them); "dual" runs dense on such batches.
        self.pattern, self.bucket, self.num_tokens = token_pattern(
            edges, n, global_token, token_path=False
        )
        dense = torch.full((n + g, n + g), GLOBAL_BUCKET, dtype=torch.long)
        dense[g:, g:] = distance_buckets(edges, n, max_distance)
        if g:
            dense[0, 0] = SELF_BUCKET
        self.dense = dense
        zero = torch.zeros(g, dtype=torch.long)
        self.x = torch.cat([data.x.new_zeros(g, data.x.size(1)), data.x])
        self.in_degree = torch.cat(
            [zero, torch.bincount(edges[1], minlength=n).clamp(max=max_degree)]
        )
        self.out_degree = torch.cat(
            [zero, torch.bincount(edges[0], minlength=n).clamp(max=max_degree)]
        )
        self.y = data.y.reshape(-1)[:1]
        self.lap_pe = None
        if pe_dim:
            pe = laplacian_pe(edges, n, pe_dim, seed)
            self.lap_pe = torch.cat([pe.new_zeros(g, pe_dim), pe])
        self.global_token = global_token


def collate_graphs(
    items: Sequence[_GraphItem], num_learned_buckets: int, dense_limit: int
) -> TokenBatch:
    """One block-diagonal :class:`TokenBatch` from prepared graphs.

    Token order: graph by graph, each its global token (if any) and then its nodes. The
    pattern holds each graph's edges, self-loops and global-token edges only; the dense
    buckets (when the batch has at most ``dense_limit`` tokens) give every cross-graph pair
    the masked bucket ``num_learned_buckets``, and so does ``far_bucket``, so no kind ever
    attends across graphs.
    """
    sizes = [item.num_tokens for item in items]
    offsets = torch.tensor([0] + sizes[:-1]).cumsum(0)
    S = sum(sizes)
    masked = num_learned_buckets
    pattern = torch.cat([item.pattern + int(o) for item, o in zip(items, offsets, strict=True)], 1)
    bucket = torch.cat([item.bucket for item in items])
    dense = None
    if S <= dense_limit:
        dense = torch.full((S, S), masked, dtype=torch.long)
        for item, o in zip(items, offsets.tolist(), strict=True):
            dense[o : o + item.num_tokens, o : o + item.num_tokens] = item.dense
    graph = AttentionGraph(S, pattern, bucket, dense, far_bucket=masked)
    counts = torch.tensor(sizes)
    graph_index = torch.repeat_interleave(torch.arange(len(items)), counts)
    is_global = torch.zeros(S, dtype=torch.bool)
    readout = None
    if items[0].global_token:
        readout = offsets.clone()
        is_global[readout] = True
    lap_pe = None
    if items[0].lap_pe is not None:
        lap_pe = torch.cat([item.lap_pe for item in items])
    return TokenBatch(
        x=torch.cat([item.x for item in items]),
        graph=graph,
        is_global=is_global,
        in_degree=torch.cat([item.in_degree for item in items]),
        out_degree=torch.cat([item.out_degree for item in items]),
        y=torch.cat([item.y for item in items]),
        graph_index=graph_index,
        readout_index=readout,
        lap_pe=lap_pe,
        global_counts={"graphs": len(items)},
        num_buckets=num_learned_buckets,
    )


class _Collate:
    def __init__(self, num_learned_buckets: int, dense_limit: int) -> None:
        self.num_learned_buckets = num_learned_buckets
        self.dense_limit = dense_limit

    def __call__(self, items: list[_GraphItem]) -> TokenBatch:
        return collate_graphs(items, self.num_learned_buckets, self.dense_limit)


class GraphSetDataModule(pl.LightningDataModule):
    """Batches of small graphs for graph-level graph transformers, data-parallel.

    Every graph is prepared once in ``setup`` (pattern, shortest-path buckets, degrees,
    Laplacian encodings when ``pe_dim > 0``) and split at random into train /
    validation / test graphs. A batch is one :class:`TokenBatch` over all its graphs' tokens
    with a block-diagonal attention graph (see :func:`collate_graphs`), ``graph_index``
    (the graph of every token, for pooling), ``readout_index`` (each graph's global token,
    the readout) and ``y`` (one target per graph). Under DDP each rank gets its own batches
    (Lightning's distributed sampler); sequence parallelism is for node sequences.

    Args:
        dataset: the graphs (default: ``SyntheticGraphSet()``); anything with ``load()``
            returning PyG ``Data`` objects with ``x``, ``edge_index`` and ``y``, plus
            ``num_features``, ``num_classes`` and ``num_outputs``.
        batch_size: graphs per batch.
        train_ratio, val_ratio: fractions of graphs for training and validation; the rest
            is the test set.
        max_distance: shortest paths longer than this share a bias bucket.
        max_degree: degrees are clipped to this value.
        global_token: give every graph a global token (its readout); without one, models
            mean-pool the graph's tokens.
        dense_limit: build ``dense_bucket`` for batches of at most this many tokens.
        pe_dim: Laplacian eigenvectors per token (``lap_pe``); 0: none. A model that reads
            them (e.g. ``GT``) needs the same ``pe_dim``.
        seed: seed of the split and of the training shuffle.
    """

    def __init__(
        self,
        dataset: SyntheticGraphSet | None = None,
        batch_size: int = 64,
        train_ratio: float = 0.8,
        val_ratio: float = 0.1,
        max_distance: int = 5,
        max_degree: int = 64,
        global_token: bool = True,
        dense_limit: int = 4096,
        pe_dim: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        owner = "GraphSetDataModule"
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"{owner}: expected `batch_size` >= 1 but got {batch_size!r}.")
        if not 0.0 < train_ratio < 1.0:
            raise ValueError(f"{owner}: expected `train_ratio` in (0, 1) but got {train_ratio!r}.")
        if not 0.0 <= val_ratio < 1.0 or train_ratio + val_ratio > 1.0:
            raise ValueError(
                f"{owner}: expected `val_ratio` in [0, 1 - train_ratio] = "
                f"[0, {1.0 - train_ratio:g}] but got {val_ratio!r}."
            )
        check_max_distance(owner, max_distance)
        check_int(owner, "pe_dim", pe_dim, 0)
        if isinstance(max_degree, bool) or not isinstance(max_degree, int) or max_degree < 1:
            raise ValueError(f"{owner}: expected `max_degree` >= 1 but got {max_degree!r}.")
        if isinstance(dense_limit, bool) or not isinstance(dense_limit, int) or dense_limit < 0:
            raise ValueError(f"{owner}: expected `dense_limit` >= 0 but got {dense_limit!r}.")
        self.dataset = SyntheticGraphSet() if dataset is None else dataset
        self.batch_size = batch_size
        self.train_ratio = train_ratio
        self.val_ratio = val_ratio
        self.max_distance = max_distance
        self.max_degree = max_degree
        self.global_token = bool(global_token)
        self.dense_limit = dense_limit
        self.pe_dim = pe_dim
        self.seed = seed
        self.splits: dict[str, list[_GraphItem]] | None = None

    @property
    def num_features(self) -> int:
        return self.dataset.num_features

    @property
    def num_classes(self) -> int | None:
        """Number of classes, ``None`` for regression."""
        return self.dataset.num_classes

    @property
    def num_outputs(self) -> int:
        """Model outputs per graph (``num_classes``, or 1 for regression)."""
        return self.dataset.num_outputs

    @property
    def num_buckets(self) -> int:
        """Learned bias buckets a model needs (``max_distance + 4``)."""
        return num_buckets(self.max_distance)

    def split_indices(self, num_graphs: int) -> dict[str, Tensor]:
        """Disjoint random train/val/test graph indices covering every graph."""
        perm = torch.randperm(num_graphs, generator=torch.Generator().manual_seed(self.seed))
        num_train = max(1, round(self.train_ratio * num_graphs))
        num_val = min(round(self.val_ratio * num_graphs), num_graphs - num_train)
        return {
            "train": perm[:num_train],
            "val": perm[num_train : num_train + num_val],
            "test": perm[num_train + num_val :],
        }

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        graphs = self.dataset.load()
        items = [
            _GraphItem(
                g, self.global_token, self.max_degree, self.max_distance, self.pe_dim, self.seed + i
            )
            for i, g in enumerate(graphs)
        ]
        self.splits = {
            name: [items[i] for i in idx.tolist()]
            for name, idx in self.split_indices(len(items)).items()
        }

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if self.splits is None:
            raise RuntimeError("GraphSetDataModule: call `setup()` before requesting dataloaders.")
        return DataLoader(
            self.splits[split],  # type: ignore[arg-type]
            batch_size=self.batch_size,
            shuffle=shuffle,
            collate_fn=_Collate(self.num_buckets, self.dense_limit),
            generator=torch.Generator().manual_seed(self.seed) if shuffle else None,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
