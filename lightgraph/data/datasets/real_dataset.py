"""Real node-classification benchmarks loaded through PyG or OGB by name.

:class:`RealDataset` wraps the PyG dataset classes (Reddit, Flickr, Yelp,
AmazonProducts) and OGB's :class:`ogb.nodeproppred.PygNodePropPredDataset`
(ogbn-products, ogbn-arxiv, ogbn-papers100M) and converts what they load to the
:class:`~lightgraph.data.datasets.graph_dataset.GraphDataset` layout. The datasets are downloaded
on first use (which needs internet) or read from ``root`` if they are already there.
``ogb`` is an optional dependency, needed for the ``ogbn-*`` names only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import os.path as osp
import pickle
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from lightgraph.data.datasets.graph_dataset import GraphDataset, validate_graph

__all__ = ["REAL_DATASETS", "WITH_OGB", "RealDataset", "RealDatasetInfo"]

_LOADER_VERSION = 1  # bump when load() returns something different for the same files


def _probe_ogb() -> bool:
    try:
        return importlib.util.find_spec("ogb") is not None
    except (ImportError, ValueError):
        return False


WITH_OGB: bool = _probe_ogb()
"""Whether the optional ``ogb`` package is installed (probed once, without importing it)."""

_OGB_HINT = "install it with `pip install ogb`"


@dataclass(frozen=True)
class RealDatasetInfo:
    """Static metadata of a real dataset, known without loading it.

    Attributes:
        num_features: node feature dimension.
        num_classes: number of classes (of labels if ``multilabel``).
        multilabel: whether every node carries several binary labels.
        source: ``"pyg"`` (a :mod:`torch_geometric.datasets` class of the same name) or
            ``"ogb"`` (:class:`ogb.nodeproppred.PygNodePropPredDataset`).
        directed: whether the stored graph is directed; :meth:`RealDataset.load` then adds
            the reverse edges.
    """

    num_features: int
    num_classes: int
    multilabel: bool
    source: str
    directed: bool = False


REAL_DATASETS: Mapping[str, RealDatasetInfo] = MappingProxyType(
    {
        "Reddit": RealDatasetInfo(602, 41, False, "pyg"),
        "Flickr": RealDatasetInfo(500, 7, False, "pyg"),
        "Yelp": RealDatasetInfo(300, 100, True, "pyg"),
        "AmazonProducts": RealDatasetInfo(200, 107, True, "pyg"),
        "ogbn-products": RealDatasetInfo(100, 47, False, "ogb"),
        "ogbn-arxiv": RealDatasetInfo(128, 40, False, "ogb", directed=True),
        "ogbn-papers100M": RealDatasetInfo(128, 172, False, "ogb", directed=True),
    }
)
"""The supported dataset names and their metadata."""


def _require_ogb(name: str) -> None:
    if not WITH_OGB:
        raise ImportError(
            f"RealDataset: dataset `name`={name!r} is loaded through the optional `ogb` "
            f"package, which is not installed; {_OGB_HINT}."
        )


@contextlib.contextmanager
def _allow_pyg_storage_unpickling() -> Iterator[None]:
    """Let ``torch.load(weights_only=True)`` read the ``Data`` objects OGB saves.

    ``ogb`` (<= 1.3.6) calls ``torch.load`` without ``weights_only``; since torch 2.6
    that means ``weights_only=True``, which rejects PyG's storage classes and the NumPy
    scalar OGB's binary reader (ogbn-papers100M) stores as ``num_nodes``. This allows
    exactly those for the duration of the block (the globals already allowed are left
    alone).
    """
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None:  # torch < 2.5 does not default to weights_only=True
        yield
        return
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    numpy_core = getattr(np, "_core", None) or np.core
    candidates: list[Any] = [DataEdgeAttr, DataTensorAttr, GlobalStorage]
    candidates += [numpy_core.multiarray.scalar, np.dtype]
    candidates += [type(np.dtype(t)) for t in (np.int32, np.int64, np.float32, np.float64)]
    allowed = set(torch.serialization.get_safe_globals())
    with safe_globals([obj for obj in candidates if obj not in allowed]):
        yield


def check_name_and_root(
    owner: str, name: Any, names: Mapping[str, Any], root: Any
) -> tuple[str, str]:
    """A known dataset ``name`` and a non-empty ``root`` path (``~`` expanded)."""
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"{owner}: expected `name` to be one of {list(names)} but got {name!r}")
    if not isinstance(root, (str, os.PathLike)) or not os.fspath(root):
        raise ValueError(
            f"{owner}: expected `root` to be a non-empty directory path but got {root!r}"
        )
    return name, osp.expanduser(os.fspath(root))


def _index_mask(index: Tensor, num_nodes: int) -> Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[index.reshape(-1).to(torch.long)] = True
    return mask


class RealDataset(GraphDataset):
    """A real node-classification benchmark, loaded through PyG or OGB by name.

    * ``"Reddit"``: 602 features, 41 classes (``torch_geometric.datasets.Reddit``);
    * ``"Flickr"``: 500 features, 7 classes (``torch_geometric.datasets.Flickr``);
    * ``"Yelp"``: 300 features, 100 labels, multi-label (``torch_geometric.datasets.Yelp``);
    * ``"AmazonProducts"``: 200 features, 107 labels, multi-label
      (``torch_geometric.datasets.AmazonProducts``);
    * ``"ogbn-products"``: 100 features, 47 classes (OGB);
    * ``"ogbn-arxiv"``: 128 features, 40 classes (OGB);
    * ``"ogbn-papers100M"``: 128 features, 172 classes (OGB).

    Files live where the underlying loader puts them: the PyG datasets under
    ``<root>/<name>/{raw,processed}`` (e.g. ``data/Reddit/raw/reddit_data.npz``), the OGB
    datasets under ``<root>/<name with "-" replaced by "_">/`` (e.g.
    ``data/ogbn_arxiv/{raw,split,processed}``), exactly as OGB's own download unpacks
    them. Missing files are downloaded on the first :meth:`load`.

    :meth:`load` returns the :class:`~lightgraph.data.datasets.graph_dataset.GraphDataset`
    layout (``x`` float32, ``y`` long ``[N]`` or float 0/1 ``[N, C]`` for Yelp and
    AmazonProducts, ``edge_index``, the three masks) and drops every other attribute.
    Specifics:

    * OGB's split indices become the masks and ``y [N, 1]`` is squeezed to ``[N]``;
    * ogbn-arxiv and ogbn-papers100M are directed citation graphs: the reverse edges are
      added (``torch_geometric.utils.to_undirected``, which also removes duplicates);
    * ogbn-papers100M labels only ~1.5 M of its ~111 M nodes (the others are ``NaN``):
      the unlabeled nodes get ``y = 0`` as a placeholder and are kept out of every mask,
      so they never reach a loss or a metric.

    Args:
        name: one of :data:`REAL_DATASETS` (case-sensitive).
        root: directory holding (or receiving) the dataset files.

    Raises:
        ValueError: if ``name`` is unknown or ``root`` is not a non-empty path.
        ImportError: if ``name`` is an ``ogbn-*`` dataset and ``ogb`` is not installed.
    """

    def __init__(self, name: str, root: str = "data") -> None:
        self.name, self.root = check_name_and_root("RealDataset", name, REAL_DATASETS, root)
        self.info = REAL_DATASETS[name]
        if self.info.source == "ogb":
            _require_ogb(name)

    @property
    def num_features(self) -> int:
        """Node feature dimension (from the metadata table)."""
        return self.info.num_features

    @property
    def num_classes(self) -> int:
        """Number of classes, or of labels for the multi-label datasets."""
        return self.info.num_classes

    @property
    def multilabel(self) -> bool:
        """``True`` for Yelp and AmazonProducts."""
        return self.info.multilabel

    def fingerprint(self) -> str:
        """E.g. ``RealDataset(v1,name='Reddit')``.

        ``root`` is left out on purpose: it says where the files are, not what they hold.
        """
        return f"RealDataset(v{_LOADER_VERSION},name={self.name!r})"

    def __repr__(self) -> str:
        return f"RealDataset(name={self.name!r}, root={self.root!r})"

    def load(self) -> Data:
        """Load (downloading if needed) and convert the dataset.

        Raises:
            ImportError: for ``ogbn-*`` datasets when ``ogb`` cannot be imported.
            ValueError: if the files under ``root`` do not match the dataset's metadata
                (e.g. another dataset's files).
        """
        data = self._load_ogb() if self.info.source == "ogb" else self._load_pyg()
        validate_graph(data, self.num_classes, self.multilabel)
        if data.x.size(1) != self.num_features:
            raise ValueError(
                f"RealDataset: expected {self.num_features} node features for {self.name!r} "
                f"but the files under {self.root!r} hold {data.x.size(1)}"
            )
        return data

    def _load_pyg(self) -> Data:
        import torch_geometric.datasets as pyg_datasets

        dataset_cls = getattr(pyg_datasets, self.name)
        raw = dataset_cls(root=osp.join(self.root, self.name))[0]
        y = raw.y.to(torch.float32) if self.multilabel else raw.y.reshape(-1).to(torch.long)
        return self._finish(raw.x, y, raw.edge_index, raw.train_mask, raw.val_mask, raw.test_mask)

    def _load_ogb(self) -> Data:
        _require_ogb(self.name)
        try:
            from ogb.nodeproppred import PygNodePropPredDataset
        except ImportError as exc:
            raise ImportError(
                f"RealDataset: dataset `name`={self.name!r} needs the `ogb` package, which "
                f"could not be imported ({exc}); {_OGB_HINT}."
            ) from exc
        with _allow_pyg_storage_unpickling():
            dataset = PygNodePropPredDataset(name=self.name, root=self.root)
            split = self._ogb_split(dataset)
        raw = dataset[0]
        num_nodes = int(raw.num_nodes)
        y = raw.y.reshape(-1)
        labeled: Tensor | None = None
        if y.is_floating_point():  # ogbn-papers100M: NaN marks the unlabeled nodes
            labeled = ~torch.isnan(y)
            y = torch.where(labeled, y, torch.zeros_like(y))
        y = y.to(torch.long)
        masks = []
        for key in ("train", "valid", "test"):
            mask = _index_mask(torch.as_tensor(split[key]), num_nodes)
            if labeled is not None:
                mask &= labeled
            masks.append(mask)
        edge_index = raw.edge_index.to(torch.long)
        if self.info.directed:
            edge_index = to_undirected(edge_index, num_nodes=num_nodes)
        return self._finish(raw.x, y, edge_index, *masks)

    def _ogb_split(self, dataset: Any) -> dict[str, Any]:
        try:
            return dataset.get_idx_split()
        except pickle.UnpicklingError:
            # A pre-saved `split_dict.pt` holding objects that weights_only loading
            # rejects; it comes with the dataset's official archive, as PyG's own
            # loader assumes for its files when it falls back the same way.
            path = osp.join(dataset.root, "split", dataset.meta_info["split"], "split_dict.pt")
            warnings.warn(
                f"RealDataset: loading {path} with torch.load(weights_only=False); only do "
                f"this with files from a trusted source.",
                stacklevel=3,
            )
            return torch.load(path, weights_only=False)

    @staticmethod
    def _finish(
        x: Tensor,
        y: Tensor,
        edge_index: Tensor,
        train_mask: Tensor,
        val_mask: Tensor,
        test_mask: Tensor,
    ) -> Data:
        return Data(
            x=x.to(torch.float32),
            y=y,
            edge_index=edge_index.to(torch.long),
            train_mask=train_mask.to(torch.bool),
            val_mask=val_mask.to(torch.bool),
            test_mask=test_mask.to(torch.bool),
        )
