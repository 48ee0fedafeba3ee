"""Tests of the real dataset loaders on tiny files written in each dataset's raw format.

Nothing is downloaded: the files the PyG / OGB dataset classes look for are written
into a temporary ``root`` so that their own ``process`` step runs on them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.data import Data

import lightgraph.data.datasets.real_dataset as real_dataset
from lightgraph.data.datasets.graph_dataset import GraphDataset, validate_graph
from lightgraph.data.datasets.real_dataset import REAL_DATASETS, RealDataset

NUM_NODES = 12
# A small undirected graph stored with both directions; (0, 5) and (5, 0) etc.
UNDIRECTED_PAIRS = [
    (0, 1),
    (1, 2),
    (2, 3),
    (3, 4),
    (4, 5),
    (5, 0),
    (6, 7),
    (8, 9),
    (10, 11),
    (1, 7),
]
TRAIN, VAL, TEST = [0, 1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11]


def _both_directions(pairs: list[tuple[int, int]]) -> np.ndarray:
    edges = pairs + [(b, a) for a, b in pairs]
    return np.array(sorted(edges), dtype=np.int64).T


def _edge_set(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in edge_index.t().tolist()}


def _mask(index: list[int]) -> torch.Tensor:
    mask = torch.zeros(NUM_NODES, dtype=torch.bool)
    mask[index] = True
    return mask


def _features(name: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((NUM_NODES, REAL_DATASETS[name].num_features)).astype(np.float32)


def _check_common(data: Data, name: str, x: np.ndarray) -> None:
    info = REAL_DATASETS[name]
    validate_graph(data, info.num_classes, info.multilabel)
    assert data.x.dtype == torch.float32
    assert torch.allclose(data.x, torch.from_numpy(x), atol=1e-6)
    assert data.edge_index.dtype == torch.long
    assert set(data.keys()) == {"x", "y", "edge_index", "train_mask", "val_mask", "test_mask"}


# --------------------------------------------------------------------------------------
# PyG datasets
# --------------------------------------------------------------------------------------


def _write_graphsaint(raw: Path, x: np.ndarray, class_map: dict[str, object]) -> None:
    """GraphSAINT's format, used by Flickr, Yelp and AmazonProducts."""
    raw.mkdir(parents=True)
    edges = _both_directions(UNDIRECTED_PAIRS)
    adj = sp.csr_matrix(
        (np.ones(edges.shape[1], dtype=np.float32), (edges[0], edges[1])),
        shape=(NUM_NODES, NUM_NODES),
    )
    np.savez(
        raw / "adj_full.npz", data=adj.data, indices=adj.indices, indptr=adj.indptr, shape=adj.shape
    )
    np.save(raw / "feats.npy", x)
    (raw / "class_map.json").write_text(json.dumps(class_map))
    (raw / "role.json").write_text(json.dumps({"tr": TRAIN, "va": VAL, "te": TEST}))


def test_flickr(tmp_path: Path) -> None:
    x = _features("Flickr")
    labels = [i % 7 for i in range(NUM_NODES)]
    _write_graphsaint(tmp_path / "Flickr" / "raw", x, {str(i): c for i, c in enumerate(labels)})
    data = RealDataset("Flickr", root=str(tmp_path)).load()
    _check_common(data, "Flickr", x)
    assert data.y.dtype == torch.long
    assert data.y.tolist() == labels
    assert _edge_set(data.edge_index) == _edge_set(
        torch.from_numpy(_both_directions(UNDIRECTED_PAIRS))
    )
    assert torch.equal(data.train_mask, _mask(TRAIN))
    assert torch.equal(data.val_mask, _mask(VAL))
    assert torch.equal(data.test_mask, _mask(TEST))


@pytest.mark.parametrize("name", ["Yelp", "AmazonProducts"])
def test_multilabel_graphsaint(tmp_path: Path, name: str) -> None:
    info = REAL_DATASETS[name]
    x = _features(name)
    y = np.zeros((NUM_NODES, info.num_classes), dtype=np.int64)
    for i in range(NUM_NODES):
        y[i, [i % info.num_classes, (3 * i + 1) % info.num_classes]] = 1
    _write_graphsaint(tmp_path / name / "raw", x, {str(i): row.tolist() for i, row in enumerate(y)})
    data = RealDataset(name, root=str(tmp_path)).load()
    _check_common(data, name, x)
    assert data.y.dtype == torch.float32
    assert torch.equal(data.y, torch.from_numpy(y).float())
    assert torch.equal(data.val_mask, _mask(VAL))
    assert data.edge_index.size(1) == 2 * len(UNDIRECTED_PAIRS)


def test_reddit(tmp_path: Path) -> None:
    raw = tmp_path / "Reddit" / "raw"
    raw.mkdir(parents=True)
    x = _features("Reddit")
    labels = np.array([(5 * i) % 41 for i in range(NUM_NODES)], dtype=np.int64)
    node_types = np.ones(NUM_NODES, dtype=np.int64)
    node_types[VAL], node_types[TEST] = 2, 3
    np.savez(raw / "reddit_data.npz", feature=x, label=labels, node_types=node_types)
    edges = _both_directions(UNDIRECTED_PAIRS)
    adj = sp.coo_matrix(
        (np.ones(edges.shape[1]), (edges[0], edges[1])), shape=(NUM_NODES, NUM_NODES)
    )
    sp.save_npz(raw / "reddit_graph.npz", adj)

    data = RealDataset("Reddit", root=str(tmp_path)).load()
    _check_common(data, "Reddit", x)
    assert data.y.tolist() == labels.tolist()
    assert torch.equal(data.edge_index, torch.from_numpy(edges))  # coalesced by PyG
    assert torch.equal(data.train_mask, _mask(TRAIN))
    assert torch.equal(data.test_mask, _mask(TEST))
    # The processed file is reused on the next load.
    again = RealDataset("Reddit", root=str(tmp_path)).load()
    assert torch.equal(again.x, data.x)


def test_feature_size_mismatch_is_reported(tmp_path: Path) -> None:
    x = np.zeros((NUM_NODES, 3), dtype=np.float32)  # Flickr has 500 features
    _write_graphsaint(tmp_path / "Flickr" / "raw", x, {str(i): 0 for i in range(NUM_NODES)})
    with pytest.raises(ValueError, match="expected 500 node features for 'Flickr'"):
        RealDataset("Flickr", root=str(tmp_path)).load()


# --------------------------------------------------------------------------------------
# OGB datasets
# --------------------------------------------------------------------------------------


def _write_csv(path: Path, array: np.ndarray) -> None:
    import pandas as pd

    pd.DataFrame(array).to_csv(path, header=False, index=False, compression="gzip")


def _ogb_dirs(root: Path, name: str) -> tuple[Path, Path]:
    """The layout of OGB's unpacked archive; RELEASE_v1.txt stops a version prompt."""
    base = root / name.replace("-", "_")
    split_type = "sales_ranking" if name == "ogbn-products" else "time"
    (base / "raw").mkdir(parents=True)
    (base / "split" / split_type).mkdir(parents=True)
    (base / "RELEASE_v1.txt").write_text("")
    for key, index in (("train", TRAIN), ("valid", VAL), ("test", TEST)):
        _write_csv(base / "split" / split_type / f"{key}.csv.gz", np.array(index)[:, None])
    return base / "raw", base / "split" / split_type


def _write_ogb_csv_graph(raw: Path, edges: np.ndarray, x: np.ndarray, labels: np.ndarray) -> None:
    _write_csv(raw / "edge.csv.gz", edges.T)
    _write_csv(raw / "num-node-list.csv.gz", np.array([[NUM_NODES]]))
    _write_csv(raw / "num-edge-list.csv.gz", np.array([[edges.shape[1]]]))
    _write_csv(raw / "node-feat.csv.gz", x)
    _write_csv(raw / "node-label.csv.gz", labels[:, None])


def test_ogbn_products(tmp_path: Path) -> None:
    pytest.importorskip("ogb")
    raw, _ = _ogb_dirs(tmp_path, "ogbn-products")
    x = _features("ogbn-products")
    labels = np.array([i % 47 for i in range(NUM_NODES)], dtype=np.int64)
    one_way = np.array(UNDIRECTED_PAIRS, dtype=np.int64).T  # OGB adds the inverse edges
    _write_ogb_csv_graph(raw, one_way, x, labels)

    data = RealDataset("ogbn-products", root=str(tmp_path)).load()
    _check_common(data, "ogbn-products", x)
    assert data.y.dtype == torch.long and data.y.tolist() == labels.tolist()
    assert _edge_set(data.edge_index) == _edge_set(
        torch.from_numpy(_both_directions(UNDIRECTED_PAIRS))
    )
    assert torch.equal(data.train_mask, _mask(TRAIN))
    assert torch.equal(data.val_mask, _mask(VAL))
    assert torch.equal(data.test_mask, _mask(TEST))


def test_ogbn_arxiv_is_made_undirected(tmp_path: Path) -> None:
    pytest.importorskip("ogb")
    raw, _ = _ogb_dirs(tmp_path, "ogbn-arxiv")
    x = _features("ogbn-arxiv")
    labels = np.array([(7 * i) % 40 for i in range(NUM_NODES)], dtype=np.int64)
    directed = np.array(UNDIRECTED_PAIRS + [(1, 0)], dtype=np.int64).T  # (0,1) both ways once
    _write_ogb_csv_graph(raw, directed, x, labels)
    _write_csv(raw / "node_year.csv.gz", np.full((NUM_NODES, 1), 2020))

    data = RealDataset("ogbn-arxiv", root=str(tmp_path)).load()
    _check_common(data, "ogbn-arxiv", x)
    assert data.y.tolist() == labels.tolist()
    expected = _both_directions(UNDIRECTED_PAIRS)
    assert torch.equal(data.edge_index, torch.from_numpy(expected))  # coalesced, no duplicates
    assert torch.equal(data.test_mask, _mask(TEST))


def test_ogbn_papers100m_unlabeled_nodes_are_masked(tmp_path: Path) -> None:
    pytest.importorskip("ogb")
    raw, _ = _ogb_dirs(tmp_path, "ogbn-papers100M")
    x = _features("ogbn-papers100M")
    labels = np.array([float(i % 172) for i in range(NUM_NODES)], dtype=np.float32)
    unlabeled = [2, 7, 11]  # one in each split
    labels[unlabeled] = np.nan
    directed = np.array(UNDIRECTED_PAIRS, dtype=np.int64).T
    np.savez(
        raw / "data.npz",
        edge_index=directed,
        num_nodes_list=np.array([NUM_NODES]),
        num_edges_list=np.array([directed.shape[1]]),
        node_feat=x,
        node_year=np.full((NUM_NODES, 1), 2020),
    )
    np.savez(raw / "node-label.npz", node_label=labels[:, None])

    data = RealDataset("ogbn-papers100M", root=str(tmp_path)).load()
    _check_common(data, "ogbn-papers100M", x)
    assert data.y.dtype == torch.long
    expected_y = [0 if i in unlabeled else i % 172 for i in range(NUM_NODES)]
    assert data.y.tolist() == expected_y
    assert torch.equal(data.train_mask, _mask([i for i in TRAIN if i not in unlabeled]))
    assert torch.equal(data.val_mask, _mask([i for i in VAL if i not in unlabeled]))
    assert torch.equal(data.test_mask, _mask([i for i in TEST if i not in unlabeled]))
    assert _edge_set(data.edge_index) == _edge_set(
        torch.from_numpy(_both_directions(UNDIRECTED_PAIRS))
    )


# --------------------------------------------------------------------------------------
# Metadata and errors
# --------------------------------------------------------------------------------------


EXPECTED_METADATA = {
    "Reddit": (602, 41, False),
    "Flickr": (500, 7, False),
    "Yelp": (300, 100, True),
    "AmazonProducts": (200, 107, True),
    "ogbn-products": (100, 47, False),
    "ogbn-arxiv": (128, 40, False),
    "ogbn-papers100M": (128, 172, False),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_METADATA))
def test_metadata_is_known_without_loading(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(real_dataset, "WITH_OGB", True)  # constructing needs no ogb import
    dataset = RealDataset(name, root=str(tmp_path / "nothing-here"))
    assert isinstance(dataset, GraphDataset)
    assert (dataset.num_features, dataset.num_classes, dataset.multilabel) == EXPECTED_METADATA[
        name
    ]
    assert name in dataset.fingerprint()
    assert not (tmp_path / "nothing-here").exists()


def test_fingerprint_depends_on_name_only(tmp_path: Path) -> None:
    a = RealDataset("Reddit", root=str(tmp_path / "a"))
    b = RealDataset("Reddit", root=str(tmp_path / "b"))
    assert a.fingerprint() == b.fingerprint() != RealDataset("Flickr").fingerprint()


@pytest.mark.parametrize("name", ["reddit", "Cora", "ogbn-mag", "", 3])
def test_unknown_name_lists_the_allowed_ones(name: object) -> None:
    with pytest.raises(
        ValueError,
        match=r"RealDataset: expected `name` to be one of .*'Reddit'.*'ogbn-papers100M'.* but got",
    ):
        RealDataset(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("root", ["", None, 5])
def test_bad_root(root: object) -> None:
    with pytest.raises(ValueError, match="RealDataset: expected `root`"):
        RealDataset("Flickr", root=root)  # type: ignore[arg-type]


def test_missing_ogb_raises_with_pip_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real_dataset, "WITH_OGB", False)
    with pytest.raises(ImportError, match="pip install ogb"):
        RealDataset("ogbn-arxiv")
    RealDataset("Reddit")  # the PyG datasets do not need ogb


def test_unimportable_ogb_raises_with_pip_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(real_dataset, "WITH_OGB", True)
    dataset = RealDataset("ogbn-products", root=str(tmp_path))
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", None)  # makes the import fail
    with pytest.raises(ImportError, match="pip install ogb"):
        dataset.load()
    assert not os.listdir(tmp_path)
