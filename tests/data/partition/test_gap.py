"""GAP (label-balanced streaming FENNEL) against a slow reference and its invariants."""

from __future__ import annotations

import math
import sys
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
import torch

import lightgraph.data.partition.gap as gap_module
from lightgraph.data import SyntheticGraph, partition_graph
from lightgraph.data.partition.gap import gap_partition


# ----------------------------------------------------------------- the slow reference
def _neighbours(edge_index: torch.Tensor, num_nodes: int) -> list[set[int]]:
    nbrs: list[set[int]] = [set() for _ in range(num_nodes)]
    for a, b in edge_index.t().tolist():
        if a != b:
            nbrs[a].add(b)
            nbrs[b].add(a)
    return nbrs


def _strata(y: torch.Tensor, train_mask: torch.Tensor) -> list[int]:
    labels = y.argmax(1) if y.dim() == 2 else y
    train = train_mask.tolist()
    classes = sorted({int(labels[v]) for v in range(len(train)) if train[v]})
    index = {c: i for i, c in enumerate(classes)}
    return [index[int(labels[v])] if train[v] else len(classes) for v in range(len(train))]


def _caps(stratum: list[int], k: int, slack: float) -> dict[int, int]:
    exact = Fraction(str(slack))
    return {s: math.ceil(exact * n / k) for s, n in Counter(stratum).items()}


def _marginal_cost(num_nodes: int, m: int, k: int, size: int, balance: float):
    # Delta C_s(c) = C_s(c + 1) - C_s(c), C_s(c) = alpha * mu * (c / mu) ** 1.5.
    alpha = balance * m * k**0.5 / num_nodes**1.5
    mu = size / num_nodes
    return lambda c: alpha * mu * (((c + 1) / mu) ** 1.5 - (c / mu) ** 1.5)


def reference_gap(
    edge_index, num_nodes, k, y, train_mask, passes=3, seed=0, balance=1.0, slack=1.1
) -> torch.Tensor:
    """Algorithm 2 with the O(k) scan of FENNEL: every node goes to the non-full partition
    of highest score (ties: smallest id), one streaming pass then ``passes`` refinements."""
    nbrs = _neighbours(edge_index, num_nodes)
    m = max(sum(len(s) for s in nbrs) // 2, 1)
    stratum = _strata(y, train_mask)
    sizes = Counter(stratum)
    caps = _caps(stratum, k, slack)
    cost = {s: _marginal_cost(num_nodes, m, k, n, balance) for s, n in sizes.items()}
    degree = [len(s) for s in nbrs]
    perm = np.random.default_rng(seed).permutation(num_nodes).tolist()
    order = sorted(perm, key=lambda v: -degree[v])  # stable: ties keep the seeded order
    part = [-1] * num_nodes
    counts = {s: [0] * k for s in sizes}
    for _ in range(passes + 1):
        for v in order:
            s = stratum[v]
            if part[v] >= 0:
                counts[s][part[v]] -= 1
            near = Counter(part[u] for u in nbrs[v] if part[u] >= 0)
            best, best_p = -math.inf, -1
            for p in range(k):
                if counts[s][p] >= caps[s]:
                    continue
                score = near[p] - cost[s](counts[s][p])
                if score > best:
                    best, best_p = score, p
            part[v] = best_p
            counts[s][best_p] += 1
    size = Counter(part)
    for p in range(k):
        if size[p] == 0:
            largest = max(range(k), key=lambda q: (size[q], -q))
            v = part.index(largest)
            part[v] = p
            size[largest] -= 1
            size[p] += 1
    return torch.tensor(part, dtype=torch.long)


def objective(edge_index, num_nodes, k, y, train_mask, balance=1.0):
    """Phi(part) = uncut undirected edges - sum_s sum_i C_s(|V_i^s|), as a function."""
    nbrs = _neighbours(edge_index, num_nodes)
    src, dst = map(
        torch.tensor,
        zip(*((a, b) for a in range(num_nodes) for b in nbrs[a] if a < b), strict=True),
    )
    alpha = balance * max(len(src), 1) * k**0.5 / num_nodes**1.5
    stratum = _strata(y, train_mask)
    sizes = Counter(stratum)

    def phi(part: torch.Tensor) -> float:
        uncut = int((part[src] == part[dst]).sum())
        cells = Counter(zip(stratum, part.tolist(), strict=True))
        cost = sum(
            alpha * (sizes[s] / num_nodes) * (c / (sizes[s] / num_nodes)) ** 1.5
            for (s, _), c in cells.items()
        )
        return uncut - cost

    return phi


# ------------------------------------------------------------------------------ helpers
def _random_graph(num_nodes, num_edges, num_classes, seed, train_ratio=0.5):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    y = torch.randint(0, num_classes, (num_nodes,), generator=gen)
    train_mask = torch.rand(num_nodes, generator=gen) < train_ratio
    return edge_index, y, train_mask


def _skewed_graph(num_nodes=4000, seed=3):
    """Homophilous graph with 16 communities and skewed labels 8:4:2:1:1 over them."""
    data = SyntheticGraph(
        num_nodes=num_nodes, avg_degree=10, num_classes=2, num_communities=16,
        homophily=0.9, seed=seed,
    ).load()  # fmt: skip
    label_of_community = torch.tensor([0] * 8 + [1] * 4 + [2] * 2 + [3, 4])
    return data.edge_index, label_of_community[data.community], data.train_mask


def _stratum_counts(part, y, train_mask, k):
    stratum = torch.tensor(_strata(y, train_mask))
    return torch.zeros(int(stratum.max()) + 1, k, dtype=torch.long).index_put_(
        (stratum, part), torch.ones_like(part), accumulate=True
    )


def mean_tv(part, y, train_mask, k) -> float:
    """Mean total-variation distance of the partitions' training-label distributions
    from the global one."""
    labels, p = y[train_mask], part[train_mask]
    num_classes = int(labels.max()) + 1
    table = torch.zeros(k, num_classes).index_put_((p, labels), torch.ones(len(p)), accumulate=True)
    glob = table.sum(0) / table.sum()
    local = table / table.sum(1, keepdim=True).clamp(min=1)
    return float(0.5 * (local - glob).abs().sum(1).mean())


def cut(edge_index, part) -> float:
    src, dst = edge_index
    keep = src != dst
    return float((part[src[keep]] != part[dst[keep]]).double().mean())


# -------------------------------------------------------------------- equality with the slow reference
@pytest.mark.parametrize(
    "num_nodes,num_edges,num_classes,k,passes,seed,balance,slack",
    [
        (60, 150, 3, 4, 0, 0, 1.0, 1.1),
        (120, 400, 4, 7, 3, 1, 1.0, 1.1),
        (150, 300, 2, 16, 2, 2, 2.5, 1.0),
        (90, 500, 5, 3, 1, 3, 0.0, 1.3),  # balance 0: caps only, many ties
        (200, 60, 3, 10, 2, 4, 1.0, 1.1),  # sparse: isolated nodes
        (40, 100, 3, 40, 1, 5, 0.3, 1.0),  # one node per partition
    ],
)
def test_matches_slow_reference(num_nodes, num_edges, num_classes, k, passes, seed, balance, slack):
    edge_index, y, train_mask = _random_graph(num_nodes, num_edges, num_classes, seed)
    # Self-loops and repeated (also reversed) edges are in the random edge list on purpose.
    got = gap_partition(
        edge_index, num_nodes, k, y, train_mask,
        passes=passes, seed=seed, balance=balance, slack=slack,
    )  # fmt: skip
    want = reference_gap(edge_index, num_nodes, k, y, train_mask, passes, seed, balance, slack)
    assert torch.equal(got, want)


def test_matches_reference_with_all_nodes_training_and_sparse_labels():
    edge_index, _, _ = _random_graph(80, 200, 2, 7)
    y = torch.tensor([0, 17, 5] * 26 + [17, 0])  # label ids with gaps
    train_mask = torch.ones(80, dtype=torch.bool)
    got = gap_partition(edge_index, 80, 6, y, train_mask, passes=2, seed=1)
    assert torch.equal(got, reference_gap(edge_index, 80, 6, y, train_mask, 2, 1))


# ------------------------------------------------------------------------------ invariants
@pytest.fixture(scope="module")
def skewed():
    return _skewed_graph()


@pytest.mark.parametrize("k,slack", [(16, 1.1), (16, 1.0), (50, 1.25)])
def test_caps_hold_per_stratum_per_partition(skewed, k, slack):
    edge_index, y, train_mask = skewed
    part = gap_partition(edge_index, y.numel(), k, y, train_mask, slack=slack)
    assert part.dtype == torch.long and part.shape == (y.numel(),)  # one entry per node
    assert int(part.min()) >= 0 and int(part.max()) < k
    counts = _stratum_counts(part, y, train_mask, k)
    stratum = _strata(y, train_mask)
    caps = _caps(stratum, k, slack)
    for s in range(counts.size(0)):
        assert int(counts[s].max()) <= caps[s], (s, counts[s].tolist(), caps[s])
    assert int(torch.bincount(part, minlength=k).min()) > 0


def test_no_empty_partition_even_when_the_stream_leaves_some():
    # balance 0 fills partitions in id order up to their caps: with slack 1.5 the stream
    # leaves the last third empty, and the fill step must give each of them a node.
    edge_index = torch.empty(2, 0, dtype=torch.long)
    y = torch.zeros(30, dtype=torch.long)
    train_mask = torch.ones(30, dtype=torch.bool)
    part = gap_partition(edge_index, 30, 10, y, train_mask, balance=0.0, slack=1.5)
    assert torch.bincount(part, minlength=10).min() > 0
    assert torch.equal(part, reference_gap(edge_index, 30, 10, y, train_mask, 3, 0, 0.0, 1.5))


def test_no_edges_positive_balance_is_exactly_balanced():
    y = torch.arange(40) % 4
    train_mask = torch.arange(40) < 32
    part = gap_partition(torch.empty(2, 0, dtype=torch.long), 40, 8, y, train_mask)
    counts = _stratum_counts(part, y, train_mask, 8)
    assert counts.min() == counts.max() == 1  # 8 training nodes of each label, 8 others


def test_label_balance_beats_metis_on_skewed_homophilous_graph(skewed):
    edge_index, y, train_mask = skewed
    n, k = y.numel(), 16
    gap = gap_partition(edge_index, n, k, y, train_mask)
    metis = partition_graph(edge_index, n, k, "metis")
    rand = partition_graph(edge_index, n, k, "random")
    tv_gap, tv_metis = mean_tv(gap, y, train_mask, k), mean_tv(metis, y, train_mask, k)
    assert tv_gap < 0.25 * tv_metis, (tv_gap, tv_metis)
    assert tv_gap <= mean_tv(rand, y, train_mask, k)  # at least as balanced as random
    assert cut(edge_index, gap) < 0.8 * cut(edge_index, rand), (
        cut(edge_index, gap),
        cut(edge_index, rand),
    )


def test_refinement_never_lowers_the_objective(skewed):
    edge_index, y, train_mask = skewed
    n, k = y.numel(), 16
    parts = [gap_partition(edge_index, n, k, y, train_mask, passes=p) for p in range(4)]
    phi = objective(edge_index, n, k, y, train_mask)
    values = [phi(p) for p in parts]
    assert all(b >= a - 1e-9 for a, b in zip(values[:-1], values[1:], strict=True)), values
    assert values[-1] > values[0]  # refinement does something here
    cuts = [cut(edge_index, p) for p in parts]
    assert cuts[-1] <= cuts[0], cuts


def test_balance_weight_trades_cut_for_label_balance(skewed):
    # With balance 0 only the (loose) caps balance the labels; FENNEL's alpha (balance 1)
    # and a stronger one spread every label more evenly, the stronger one at the price
    # of more cut edges. (Balance 0 also cuts more: nothing steers the first nodes of the
    # stream apart, so partition 0 fills with unrelated high-degree nodes.)
    edge_index, y, train_mask = skewed
    n, k = y.numel(), 16
    runs = {
        b: gap_partition(edge_index, n, k, y, train_mask, balance=b, slack=1.5)
        for b in (0.0, 1.0, 8.0)
    }
    tv = {b: mean_tv(p, y, train_mask, k) for b, p in runs.items()}
    cuts = {b: cut(edge_index, p) for b, p in runs.items()}
    assert tv[0.0] > tv[1.0] > tv[8.0], tv
    assert cuts[1.0] < cuts[8.0], cuts


def test_multilabel_uses_argmax_and_is_seeded():
    edge_index, y, train_mask = _random_graph(100, 300, 4, 11)
    scores = torch.rand(100, 4, generator=torch.Generator().manual_seed(0))
    a = gap_partition(edge_index, 100, 5, scores, train_mask, seed=2)
    assert torch.equal(a, gap_partition(edge_index, 100, 5, scores.argmax(1), train_mask, seed=2))
    assert torch.equal(a, reference_gap(edge_index, 100, 5, scores, train_mask, 3, 2))
    assert torch.equal(a, gap_partition(edge_index, 100, 5, scores, train_mask, seed=2))
    multi_hot = scores > 0.5  # 0/1 targets, boolean or float: the first positive class
    b = gap_partition(edge_index, 100, 5, multi_hot, train_mask, seed=2)
    assert torch.equal(b, gap_partition(edge_index, 100, 5, multi_hot.float(), train_mask, seed=2))
    assert torch.equal(b, reference_gap(edge_index, 100, 5, multi_hot.float(), train_mask, 3, 2))


def test_partition_graph_gap_dispatches(skewed):
    edge_index, y, train_mask = skewed
    got = partition_graph(edge_index, y.numel(), 8, "gap", seed=4, y=y, train_mask=train_mask)
    assert torch.equal(got, gap_partition(edge_index, y.numel(), 8, y, train_mask, seed=4))
    ones = partition_graph(edge_index, y.numel(), 1, "gap", y=y, train_mask=train_mask)
    assert torch.equal(ones, torch.zeros(y.numel(), dtype=torch.long))


# ------------------------------------------------------------------------------ bad input
EI = torch.tensor([[0, 1, 2], [1, 2, 3]])
Y = torch.tensor([0, 1, 0, 1])
MASK = torch.tensor([True, True, False, True])


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            {"num_parts": 5},
            ValueError,
            "gap_partition: expected `num_parts` <= num_nodes \\(4\\).*got num_parts=5",
        ),
        ({"num_parts": 0}, ValueError, "`num_parts` to be a positive integer but got 0"),
        ({"y": None}, TypeError, "gap_partition: expected `y` to be a Tensor.*but got NoneType"),
        (
            {"y": torch.tensor([0, 1])},
            ValueError,
            "`y` to be integer class ids of shape \\(4,\\).*got shape \\(2,\\)",
        ),
        ({"y": torch.rand(4)}, ValueError, "`y` to be integer class ids.*dtype torch.float32"),
        ({"y": torch.tensor([0, -1, 0, 1])}, ValueError, "class ids >= 0 but found -1"),
        (
            {"train_mask": torch.ones(4)},
            ValueError,
            "`train_mask` to be a boolean tensor of shape \\(4,\\) but got shape \\(4,\\), dtype torch.float32",
        ),
        ({"train_mask": None}, TypeError, "`train_mask` to be a Tensor"),
        ({"slack": 0.9}, ValueError, "`slack` >= 1 \\(a real number\\) but got 0.9"),
        ({"balance": -1.0}, ValueError, "`balance` >= 0 but got -1.0"),
        ({"passes": -1}, ValueError, "`passes` to be an integer >= 0 but got -1"),
        (
            {"edge_index": torch.tensor([[0, 4], [1, 0]])},
            ValueError,
            "node ids in `edge_index` to lie in \\[0, 3\\]",
        ),
    ],
)
def test_bad_input(kwargs, error, match):
    args = {"edge_index": EI, "num_nodes": 4, "num_parts": 2, "y": Y, "train_mask": MASK}
    args.update(kwargs)
    extra = {k: args.pop(k) for k in ("slack", "balance", "passes") if k in args}
    with pytest.raises(error, match=match):
        gap_partition(**args, **extra)


@pytest.mark.parametrize("missing", ["y", "train_mask", "both"])
def test_partition_graph_gap_needs_labels(missing):
    kwargs = {"y": Y, "train_mask": MASK}
    for name in ("y", "train_mask") if missing == "both" else (missing,):
        kwargs.pop(name)
    names = "y=None and train_mask=None" if missing == "both" else f"{missing}=None"
    with pytest.raises(
        ValueError, match=f"partition_graph: method='gap'.*needs `y`.*but got {names}\\."
    ):
        partition_graph(EI, 4, 2, "gap", **kwargs)


def test_missing_numba_is_a_clear_import_error(monkeypatch):
    monkeypatch.setattr(gap_module, "_compiled", False)
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` now fails
    with pytest.raises(ImportError, match="gap_partition needs numba.*pip install 'numba>=0.59'"):
        gap_partition(EI, 4, 2, Y, MASK)
