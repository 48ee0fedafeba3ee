"""Edge splits for link prediction, against PyG's RandomLinkSplit as the reference meaning."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import RandomLinkSplit
from torch_geometric.utils import to_undirected

from lightgraph.data.datasets.link_split import LinkSplit, edge_keys, random_link_split


def _random_graph(n: int, m: int, seed: int, undirected: bool = True) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=gen)
    ei = ei[:, ei[0] != ei[1]]
    return to_undirected(ei, num_nodes=n) if undirected else ei


def _pairs(edges: torch.Tensor, undirected: bool) -> set[tuple[int, int]]:
    out = set()
    for u, v in edges.t().tolist():
        out.add((min(u, v), max(u, v)) if undirected else (u, v))
    return out


def _directed(edges: torch.Tensor) -> set[tuple[int, int]]:
    return {tuple(e) for e in edges.t().tolist()}


def test_splits_partition_the_edges_and_hide_the_held_out_ones():
    n = 200
    ei = _random_graph(n, 1500, 0)
    s = random_link_split(ei, n, val_ratio=0.1, test_ratio=0.2, seed=3)
    assert s.undirected
    everything = _pairs(ei, True)
    parts = [_pairs(s.train, True), _pairs(s.val, True), _pairs(s.test, True)]
    assert set().union(*parts) == everything
    assert sum(len(p) for p in parts) == len(everything)
    assert len(parts[1]) == int(0.1 * len(everything)) and len(parts[2]) == int(
        0.2 * len(everything)
    )
    assert all(u < v for u, v in s.train.t().tolist())
    train_graph = _directed(s.message_edges("train"))
    assert train_graph == _directed(s.message_edges("val"))
    for u, v in s.val.t().tolist() + s.test.t().tolist():
        assert (u, v) not in train_graph and (v, u) not in train_graph
    test_graph = _directed(s.message_edges("test"))
    for u, v in s.val.t().tolist():
        assert (u, v) in test_graph and (v, u) in test_graph
    for u, v in s.test.t().tolist():
        assert (u, v) not in test_graph and (v, u) not in test_graph


def test_the_meaning_is_pyg_random_link_split():
    """PyG's split, handed to LinkSplit, gives PyG's message-passing graphs."""
    n = 150
    ei = _random_graph(n, 900, 1)
    data = Data(edge_index=ei, num_nodes=n)
    torch.manual_seed(0)
    train, val, test = RandomLinkSplit(
        num_val=0.1, num_test=0.2, is_undirected=True, add_negative_train_samples=False
    )(data)

    def positives(d):
        return d.edge_label_index[:, d.edge_label == 1]

    s = LinkSplit(
        num_nodes=n,
        undirected=True,
        train=positives(train),
        val=positives(val),
        test=positives(test),
        other=torch.empty(2, 0, dtype=torch.long),
        remove_reverse=True,
        graph_keys=edge_keys(ei[0], ei[1], n).unique(),
    )
    for name, d in (("train", train), ("val", val), ("test", test)):
        assert _directed(s.message_edges(name)) == _directed(d.edge_index), name


def test_directed_graphs_keep_an_edge_and_its_reverse_together():
    n = 100
    ei = _random_graph(n, 600, 2, undirected=False)
    ei = torch.cat([ei, ei[:, :150].flip(0)], dim=1)  # some reverses, not all
    s = random_link_split(ei, n, 0.15, 0.15, seed=0)
    assert not s.undirected
    where = {}
    for name in ("train", "val", "test"):
        for u, v in s.positives(name).t().tolist():
            where[(u, v)] = name
    assert set(where) == _directed(ei) - {(u, u) for u in range(n)}
    for (u, v), name in where.items():
        if (v, u) in where:
            assert where[(v, u)] == name
    train_graph = _directed(s.message_edges("train"))
    for u, v in s.test.t().tolist():
        assert (u, v) not in train_graph and (v, u) not in train_graph


def test_self_loops_are_never_positives_and_stay_visible():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 0], [1, 0, 2, 1, 2, 2, 0]])
    ei = to_undirected(ei, num_nodes=4)
    s = random_link_split(ei, 4, 0.3, 0.3, seed=0)
    for name in ("train", "val", "test"):
        assert not bool((s.positives(name)[0] == s.positives(name)[1]).any())
        graph = _directed(s.message_edges(name))
        assert (0, 0) in graph and (2, 2) in graph


def test_the_split_is_reproducible_and_seeded():
    ei = _random_graph(120, 700, 4)
    a = random_link_split(ei, 120, 0.1, 0.1, seed=5)
    b = random_link_split(ei, 120, 0.1, 0.1, seed=5)
    c = random_link_split(ei, 120, 0.1, 0.1, seed=6)
    assert torch.equal(a.test, b.test) and torch.equal(a.train, b.train)
    assert not torch.equal(a.test, c.test)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(val_ratio=-0.1), r"`val_ratio` in \[0, 1\)"),
        (dict(test_ratio=1.0), r"`test_ratio` in \[0, 1\)"),
        (dict(val_ratio=0.5, test_ratio=0.5), r"val_ratio \+ test_ratio.*< 1"),
        (dict(undirected=True), r"undirected=True.*symmetric"),
    ],
)
def test_bad_split_arguments_are_named(kwargs, match):
    ei = torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match=match):
        random_link_split(ei, 4, **kwargs)


def test_edge_ids_out_of_range_are_named():
    with pytest.raises(ValueError, match=r"`edge_index`.*\[0, 3\].*\[0, 7\]"):
        random_link_split(torch.tensor([[0, 1], [2, 7]]), 4)


def test_overlapping_splits_are_an_error():
    e = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"'train' and 'test'.*disjoint.*\(1, 2\)"):
        LinkSplit(
            num_nodes=3,
            undirected=True,
            train=e,
            val=torch.empty(2, 0, dtype=torch.long),
            test=torch.tensor([[2], [1]]),  # (1, 2) reversed: the same unordered pair
            other=torch.empty(2, 0, dtype=torch.long),
            remove_reverse=True,
            graph_keys=torch.empty(0, dtype=torch.long),
        )


def test_the_transductive_split_is_the_default_and_unchanged_by_the_mode_argument():
    ei = _random_graph(120, 700, 8)
    a = random_link_split(ei, 120, 0.1, 0.2, seed=1)
    b = random_link_split(ei, 120, 0.1, 0.2, seed=1, mode="transductive")
    assert torch.equal(a.test, b.test) and not a.inductive


def test_inductive_splits_hold_out_nodes_training_never_sees():
    n = 300
    ei = _random_graph(n, 2400, 9)
    s = random_link_split(ei, n, 0.1, 0.1, seed=2, mode="inductive", observed_ratio=0.4)
    assert s.inductive
    train_nodes = set(s.message_edges("train").flatten().tolist()) | set(s.train.flatten().tolist())
    new_val = set(s.val.flatten().tolist()) - train_nodes
    new_test = set(s.test.flatten().tolist()) - train_nodes
    assert new_val and new_test
    # Training never touches a new node; every edge is in exactly one set.
    everything = _pairs(ei, True)
    parts = [s.train, s.val, s.test, s.val_observed, s.test_observed]
    assert sum(p.size(1) for p in parts) == len(everything)
    assert set().union(*(_pairs(p, True) for p in parts)) == everything
    # Each split sees its new nodes' observed edges, never its positives.
    val_graph, test_graph = _directed(s.message_edges("val")), _directed(s.message_edges("test"))
    assert _directed(s.val_observed) <= val_graph and _directed(s.test_observed) <= test_graph
    for edges, graph in ((s.val, val_graph), (s.test, test_graph)):
        for u, v in edges.t().tolist():
            assert (u, v) not in graph and (v, u) not in graph
    assert _directed(s.val) <= test_graph  # test sees the validation graph too
    # About observed_ratio of the new nodes' edges are observed.
    new_edges = s.val.size(1) + s.val_observed.size(1)
    assert abs(s.val_observed.size(1) / new_edges - 0.4) < 0.1


def test_a_bad_split_mode_or_observed_ratio_is_named():
    ei = _random_graph(50, 200, 1)
    with pytest.raises(ValueError, match=r"`mode`.*transductive.*inductive"):
        random_link_split(ei, 50, mode="by-node")
    with pytest.raises(ValueError, match=r"`observed_ratio` in \[0, 1\)"):
        random_link_split(ei, 50, mode="inductive", observed_ratio=1.0)
