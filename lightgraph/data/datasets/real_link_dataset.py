"""OGB's link-prediction benchmarks with their official splits and evaluation negatives.

:class:`RealLinkDataset` loads ``ogbl-collab``, ``ogbl-ppa`` and ``ogbl-citation2`` through
OGB's :class:`ogb.linkproppred.PygLinkPropPredDataset` (the optional ``ogb`` package;
the files are downloaded on first use, which needs internet, or read from ``root``, laid
out as OGB's archives unpack) and hands a link data module their official split
(:meth:`RealLinkDataset.official_link_split`), so training, validation and test use the
benchmark's own edges and negatives:

======================  ==========  =====================================  =============
dataset                 graph       validation / test negatives            metric
======================  ==========  =====================================  =============
``ogbl-collab``         undirected  one shared set of node pairs           Hits@50
``ogbl-ppa``            undirected  one shared set of node pairs           Hits@100
``ogbl-citation2``      directed    1,000 destinations per query edge      MRR
======================  ==========  =====================================  =============

Shared negatives are scored once and every positive is compared with the ``K``-th best of
them (:func:`~lightgraph.functional.link_ranking.hits_at_k_shared`, OGB's ``_eval_hits``);
per-query negatives rank each positive (OGB's ``_eval_mrr``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import GraphDataset
from lightgraph.data.datasets.link_split import LinkSplit, OfficialLinkSplit, edge_keys
from lightgraph.data.datasets.real_dataset import (
    _OGB_HINT,
    WITH_OGB,
    _allow_pyg_storage_unpickling,
    check_name_and_root,
)

__all__ = ["REAL_LINK_DATASETS", "OfficialLinkSplit", "RealLinkDataset", "RealLinkDatasetInfo"]

_LOADER_VERSION = 1


@dataclass(frozen=True)
class RealLinkDatasetInfo:
    """Static metadata of a link benchmark.

    Attributes:
        num_features: node feature dimension.
        undirected: the graph (and every split's edges) is undirected.
        negatives: ``"shared"`` (node pairs, one set for every positive) or ``"per_query"``
            (destinations per query edge).
        metric: OGB's metric, ``"hits@K"`` or ``"mrr"``.
    """

    num_features: int
    undirected: bool
    negatives: str
    metric: str


REAL_LINK_DATASETS: Mapping[str, RealLinkDatasetInfo] = MappingProxyType(
    {
        "ogbl-collab": RealLinkDatasetInfo(128, True, "shared", "hits@50"),
        "ogbl-ppa": RealLinkDatasetInfo(58, True, "shared", "hits@100"),
        "ogbl-citation2": RealLinkDatasetInfo(128, False, "per_query", "mrr"),
    }
)


@contextlib.contextmanager
def _allow_numpy_arrays() -> Iterator[None]:
    """Let ``torch.load(weights_only=True)`` (what ``ogb`` calls since torch 2.6) read the
    NumPy arrays OGB's split files may hold -- arrays only, nothing executable."""
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None:
        yield
        return
    numpy_core = getattr(np, "_core", None) or np.core
    candidates: list[Any] = [numpy_core.multiarray._reconstruct, np.ndarray]
    allowed = set(torch.serialization.get_safe_globals())
    with _allow_pyg_storage_unpickling(), safe_globals([c for c in candidates if c not in allowed]):
        yield


def _as_tensor(value: Any) -> Tensor:
    return torch.as_tensor(np.asarray(value)).to(torch.long)


def _edges(part: Mapping[str, Any]) -> Tensor:
    """``[2, E]`` positive edges of one of OGB's split dicts."""
    if "edge" in part:
        return _as_tensor(part["edge"]).t().contiguous()
    return torch.stack([_as_tensor(part["source_node"]), _as_tensor(part["target_node"])])


class RealLinkDataset(GraphDataset):
    """An OGB link-prediction benchmark with its official split (see the module).

    Args:
        name: one of :data:`REAL_LINK_DATASETS`.
        root: directory holding (or receiving) the files, OGB's layout
            (``<root>/ogbl_collab/{raw,split,processed}``).

    Raises:
        ValueError: an unknown ``name`` or an empty ``root``.
        ImportError: ``ogb`` is not installed.
    """

    def __init__(self, name: str, root: str = "data") -> None:
        name, root = check_name_and_root("RealLinkDataset", name, REAL_LINK_DATASETS, root)
        if not WITH_OGB:
            raise ImportError(
                f"RealLinkDataset: `name`={name!r} is loaded through the optional `ogb` "
                f"package, which is not installed; {_OGB_HINT}."
            )
        self.name, self.root = name, root
        self.info = REAL_LINK_DATASETS[name]
        self._dataset: Any = None

    @property
    def num_features(self) -> int:
        return self.info.num_features

    @property
    def num_classes(self) -> int:
        """Link benchmarks have no node classes: 1 (a placeholder)."""
        return 1

    @property
    def multilabel(self) -> bool:
        return False

    def fingerprint(self) -> str:
        return f"RealLinkDataset(v{_LOADER_VERSION},name={self.name!r})"

    def __repr__(self) -> str:
        return f"RealLinkDataset(name={self.name!r}, root={self.root!r})"

    def _ogb(self) -> Any:
        if self._dataset is None:
            from ogb.linkproppred import PygLinkPropPredDataset

            with _allow_pyg_storage_unpickling():
                self._dataset = PygLinkPropPredDataset(name=self.name, root=self.root)
        return self._dataset

    def load(self) -> Data:
        """The graph: ``x`` (float32), ``edge_index`` (OGB's training graph, both directions
        for the undirected benchmarks), no labels and no node splits (``y`` zeros, masks
        empty: the task is over edges)."""
        raw = self._ogb()[0]
        num_nodes = int(raw.num_nodes)
        if raw.x.size(1) != self.num_features:
            raise ValueError(
                f"RealLinkDataset: expected {self.num_features} node features for "
                f"{self.name!r} but the files under {self.root!r} hold {raw.x.size(1)}"
            )
        empty = torch.zeros(num_nodes, dtype=torch.bool)
        return Data(
            x=raw.x.to(torch.float32),
            y=torch.zeros(num_nodes, dtype=torch.long),
            edge_index=raw.edge_index.to(torch.long),
            train_mask=empty,
            val_mask=empty.clone(),
            test_mask=empty.clone(),
            num_nodes=num_nodes,
        )

    def official_link_split(self) -> OfficialLinkSplit:
        """The benchmark's positive edges and evaluation negatives."""
        dataset = self._ogb()
        with warnings.catch_warnings(), _allow_numpy_arrays():
            warnings.simplefilter("ignore")
            parts = dataset.get_edge_split()
        num_nodes = int(dataset[0].num_nodes)
        train, val, test = (_edges(parts[k]) for k in ("train", "valid", "test"))
        keys = edge_keys(*torch.cat([train, val, test], 1), num_nodes)
        split = LinkSplit(
            num_nodes=num_nodes,
            undirected=self.info.undirected,
            train=train,
            val=val,
            test=test,
            other=torch.empty(2, 0, dtype=torch.long),
            remove_reverse=False,
            graph_keys=keys.unique(),
            check_disjoint=False,
        )
        shared = self.info.negatives == "shared"
        negatives = {}
        for ours, theirs in (("val", "valid"), ("test", "test")):
            part = parts[theirs]
            if shared:
                negatives[ours] = _as_tensor(part["edge_neg"]).t().contiguous()
            else:
                negatives[ours] = _as_tensor(part["target_node_neg"])
        return OfficialLinkSplit(split, negatives, shared, self.info.metric)
