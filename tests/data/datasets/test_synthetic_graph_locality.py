"""SyntheticGraph(locality=...): intra-community edges close in a latent id order."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data import SyntheticGraph
from lightgraph.data.datasets import generate_synthetic_graph
from lightgraph.data.lightning.node_sequence import NodeSequenceDataModule

SMALL = {"num_nodes": 3000, "avg_degree": 10.0, "num_classes": 4, "num_features": 8}


def _intra_rank_distance(data) -> tuple[torch.Tensor, torch.Tensor]:
    """Every undirected edge: whether it is intra-community, and |rank difference| of its
    ends in their community's id order (computed from scratch, not with the generator)."""
    n, community = data.num_nodes, data.community
    src, dst = data.edge_index
    keep = src < dst
    src, dst = src[keep], dst[keep]
    rank = torch.empty(n, dtype=torch.long)
    for c in torch.unique(community).tolist():
        members = (community == c).nonzero().squeeze(1)  # ascending ids
        rank[members] = torch.arange(members.numel())
    intra = community[src] == community[dst]
    return intra, (rank[src] - rank[dst]).abs()


def _close_share(data, within: int) -> float:
    intra, distance = _intra_rank_distance(data)
    return float((distance[intra] <= within).double().mean())


def _tile_fill(dataset: SyntheticGraph, sequence_length: int) -> float:
    """Tile fill of the cluster-sparse layout over the data module's METIS-ordered sequences."""
    module = NodeSequenceDataModule(dataset, sequence_length=sequence_length, cache_dir="unused")
    entries = tiles = 0
    for item in module.build_sequences():
        layout = item.graph.cluster_layout(num_clusters=8, block_size=16)
        entries += layout.num_entries
        tiles += layout.num_tiles
    return entries / (tiles * 16**2)


def test_zero_locality_is_the_graph_without_the_option() -> None:
    plain = generate_synthetic_graph(**SMALL)
    for kwargs in ({"locality": 0.0}, {"locality": 0.0, "locality_scale": 3.0}):
        zero = generate_synthetic_graph(**SMALL, **kwargs)
        for key in plain.keys():
            value = plain[key]
            assert torch.equal(value, zero[key]) if torch.is_tensor(value) else value == zero[key]
        # Neither the config nor the cache key mention the option at its default.
        graph = SyntheticGraph(**SMALL, **kwargs)
        assert "locality" not in graph.config() and "locality_scale" not in graph.config()
        assert graph.fingerprint() == SyntheticGraph(**SMALL).fingerprint()
        assert "locality" not in repr(graph)


def test_the_option_enters_config_and_fingerprint() -> None:
    graph = SyntheticGraph(**SMALL, locality=0.75)
    config = graph.config()
    assert config["locality"] == 0.75 and config["locality_scale"] == 16.0
    assert "locality=0.75,locality_scale=16.0" in graph.fingerprint()
    other = SyntheticGraph(**SMALL, locality=0.75, locality_scale=8)
    assert (
        len({graph.fingerprint(), other.fingerprint(), SyntheticGraph(**SMALL).fingerprint()}) == 3
    )
    assert isinstance(other.locality_scale, float)
    assert SyntheticGraph(**config).fingerprint() == graph.fingerprint()  # round trip
    loaded = graph.load()
    direct = generate_synthetic_graph(**SMALL, locality=0.75)
    assert torch.equal(loaded.edge_index, direct.edge_index)


def test_reproducible_under_the_seed() -> None:
    a = generate_synthetic_graph(**SMALL, locality=0.9, seed=3)
    b = generate_synthetic_graph(**SMALL, locality=0.9, seed=3)
    for key in a.keys():
        if torch.is_tensor(a[key]):
            assert torch.equal(a[key], b[key]), key
    c = generate_synthetic_graph(**SMALL, locality=0.9, seed=4)
    assert not torch.equal(a.edge_index, c.edge_index)


@pytest.mark.parametrize("locality", [0.3, 0.9, 1.0])
@pytest.mark.parametrize("homophily", [0.5, 0.8])
def test_edge_count_homophily_and_graph_format_are_kept(locality, homophily) -> None:
    data = generate_synthetic_graph(**SMALL, homophily=homophily, locality=locality)
    num_edges = round(SMALL["num_nodes"] * SMALL["avg_degree"] / 2)
    src, dst = data.edge_index
    assert data.edge_index.size(1) == 2 * num_edges
    assert not bool((src == dst).any())
    key = src * data.num_nodes + dst
    assert bool((key[1:] > key[:-1]).all())  # sorted by source then target, no duplicates
    reverse = torch.sort(dst * data.num_nodes + src).values
    assert torch.equal(reverse, key)  # both directions
    intra, _ = _intra_rank_distance(data)
    assert int(intra.sum()) == round(homophily * num_edges)  # exact edge homophily


def test_communities_labels_and_feature_law_are_kept() -> None:
    plain = generate_synthetic_graph(**SMALL)
    local = generate_synthetic_graph(**SMALL, locality=0.9)
    assert torch.equal(plain.community, local.community)
    assert torch.equal(plain.y, local.y)
    assert local.x.shape == plain.x.shape and local.x.dtype == plain.x.dtype
    for name in ("train_mask", "val_mask", "test_mask"):
        assert int(local[name].sum()) == int(plain[name].sum())
    # Features still follow the class: class means are far apart, as without the option.
    means = torch.stack([local.x[local.y == c].mean(0) for c in range(SMALL["num_classes"])])
    assert float(torch.cdist(means, means).max()) > 1.0


def test_degrees_keep_their_heavy_tail() -> None:
    kwargs = {"num_nodes": 20000, "avg_degree": 20.0, "homophily": 0.8}
    plain = generate_synthetic_graph(**kwargs)
    local = generate_synthetic_graph(**kwargs, locality=0.9)
    d0 = torch.bincount(plain.edge_index[0], minlength=20000).double()
    d1 = torch.bincount(local.edge_index[0], minlength=20000).double()
    q = torch.tensor([0.5, 0.9, 0.99, 0.999], dtype=torch.float64)
    ratio = torch.quantile(d1, q) / torch.quantile(d0, q)
    assert bool(((ratio > 0.8) & (ratio < 1.25)).all()), ratio
    assert float(d1.max()) > 0.75 * float(d0.max())
    # Same weights: the nodes that are hubs without the option are hubs with it.
    top = torch.argsort(d0, descending=True)[:200]
    assert float(d1[top].mean()) > 0.8 * float(d0[top].mean())


def test_locality_shortens_intra_community_edges() -> None:
    kwargs = {"num_nodes": 20000, "avg_degree": 20.0, "homophily": 0.8}
    base = _close_share(generate_synthetic_graph(**kwargs), 32)
    half = _close_share(generate_synthetic_graph(**kwargs, locality=0.5), 32)
    high = _close_share(generate_synthetic_graph(**kwargs, locality=0.9), 32)
    # 625-node communities: 64 of 624 other members lie within 32 ranks, about 10 %.
    assert base < 0.15
    assert half > base + 0.2 and high > half + 0.1 and high > 0.5
    # A smaller scale gives shorter local edges.
    small = _close_share(generate_synthetic_graph(**kwargs, locality=0.9, locality_scale=4), 8)
    assert small > _close_share(generate_synthetic_graph(**kwargs, locality=0.9), 8) + 0.05


def test_tile_fill_rises_after_the_metis_order() -> None:
    # 2 sequences of 4096 nodes, 16 METIS parts for 16 communities. Every non-local entry
    # (inter-community edges, hubs' wide edges, the global token's) still costs a whole
    # tile, so the fill rises by about 1.6x here (0.022 -> 0.035), not to the band's.
    kwargs = {"num_nodes": 8192, "avg_degree": 10.0, "homophily": 0.9, "num_features": 4}
    kwargs["num_communities"] = 16
    base = _tile_fill(SyntheticGraph(**kwargs), 4096)
    local = _tile_fill(SyntheticGraph(**kwargs, locality=1.0), 4096)
    assert local > 1.4 * base, (base, local)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"locality": 1.5}, r"expected `locality` in \[0, 1\] but got 1.5"),
        ({"locality": -0.1}, r"expected `locality` in \[0, 1\] but got -0.1"),
        ({"locality": "0.5"}, r"expected `locality` in \[0, 1\] but got '0.5'"),
        ({"locality": True}, r"expected `locality` in \[0, 1\] but got True"),
        ({"locality": float("nan")}, r"expected `locality` in \[0, 1\] but got nan"),
        (
            {"locality": 0.5, "locality_scale": 0.5},
            r"expected `locality_scale` to be a finite number >= 1 \(mean distance in nodes\) "
            r"but got 0.5",
        ),
        (
            {"locality_scale": float("inf")},
            r"expected `locality_scale` to be a finite number >= 1",
        ),
        ({"locality_scale": None}, r"expected `locality_scale` to be a finite number >= 1"),
    ],
)
def test_bad_locality(kwargs, match) -> None:
    with pytest.raises(ValueError, match=rf"^SyntheticGraph: {match}"):
        SyntheticGraph(**kwargs)
    with pytest.raises(ValueError, match=match):
        generate_synthetic_graph(num_nodes=100, **kwargs)
