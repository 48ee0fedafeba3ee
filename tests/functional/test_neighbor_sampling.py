"""Tests of the vectorised neighbour sampler against independent references.

References: per-neighbour inclusion frequencies against their closed forms (binomial,
5 sigma), a Python edge set, a Python BFS, a full-graph SAGEConv model, and the same
sample drawn from memmapped int32 CSC arrays.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections import defaultdict

import numpy as np
import pytest
import torch
from scipy.stats import chi2
from torch.overrides import TorchFunctionMode
from torch_geometric.nn import SAGEConv

import lightgraph.functional.neighbor_sampling as ns
from lightgraph.functional.neighbor_sampling import NeighborSample, sample_neighbors, to_csc

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def random_graph(num_nodes: int = 60, num_edges: int = 400, seed: int = 0, simple: bool = True):
    """A directed random graph with a few hubs (no self-loops; no repeats if ``simple``)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    dst = torch.cat(
        [
            torch.randint(0, 4, (num_edges // 4,), generator=g),  # hubs 0..3
            torch.randint(0, num_nodes, (num_edges - num_edges // 4,), generator=g),
        ]
    )
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    if simple:
        ei = torch.unique(ei, dim=1)
        ei = ei[:, torch.randperm(ei.size(1), generator=g)]
    return ei


def star_in(deg: int, center: int = 0) -> torch.Tensor:
    """Edges ``1..deg -> center``."""
    src = torch.arange(1, deg + 1)
    return torch.stack([src, torch.full_like(src, center)])


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def hop_ranges(out: NeighborSample) -> list[tuple[int, int]]:
    bounds = np.cumsum([0] + out.num_sampled_nodes)
    return [(int(bounds[i]), int(bounds[i + 1])) for i in range(len(out.num_sampled_nodes))]


# --------------------------------------------------------------------------------- to_csc
def test_to_csc_rows_and_permutation():
    ei = random_graph(40, 300, simple=False)
    ei = torch.cat([ei, ei[:, :5]], dim=1)  # repeated edges stay
    indptr, indices, perm = to_csc(ei, 45, return_perm=True)  # nodes 40..44 isolated
    assert indptr.shape == (46,) and indptr[0] == 0 and indptr[-1] == ei.size(1)
    for v in range(45):
        expected = sorted(ei[0, ei[1] == v].tolist())
        assert indices[indptr[v] : indptr[v + 1]].tolist() == expected
    dst = torch.repeat_interleave(torch.arange(45), indptr.diff())
    assert torch.equal(ei[:, perm], torch.stack([indices, dst]))
    assert sorted(perm.tolist()) == list(range(ei.size(1)))


# ------------------------------------------------------------------------- distribution
def two_stars(d0: int, d1: int) -> torch.Tensor:
    """Edges ``1..d0 -> 0`` and ``d0+1..d0+d1 -> d0+d1+1`` (two centres, disjoint leaves)."""
    c1 = d0 + d1 + 1
    return torch.cat(
        [star_in(d0), torch.stack([torch.arange(d0 + 1, c1), torch.full((d1,), c1)])], 1
    )


# Floyd's algorithm serves deg * 16 >= k * k, random keys the others (one hop can mix them).
@pytest.mark.parametrize("d0,d1,k", [(10, 12, 3), (40, 300, 30), (100, 70, 60)])
def test_inclusion_frequency_without_replacement(d0, d1, k):
    c1 = d0 + d1 + 1
    indptr, indices = to_csc(two_stars(d0, d1), c1 + 1)
    n = 2000  # each repeated seed is an independent draw
    seeds = torch.tensor([0, c1]).repeat(n)
    out = sample_neighbors(indptr, indices, seeds, [k], generator=gen(1))
    assert out.num_sampled_edges == [2 * n * k]
    assert torch.equal(out.col, torch.arange(2 * n).repeat_interleave(k))  # grouped by dst
    per_draw = out.node[out.row].view(2 * n, k)
    assert (per_draw.sort(1).values.diff(dim=1) > 0).all()  # distinct within a draw
    for centre, deg, leaves in ((0, d0, range(1, d0 + 1)), (c1, d1, range(d0 + 1, c1))):
        draws = per_draw[seeds == centre]
        assert ((draws >= leaves.start) & (draws < leaves.stop)).all()
        counts = torch.bincount(draws.flatten() - leaves.start, minlength=deg).double()
        p = k / deg
        assert (counts - n * p).abs().max() <= 5 * math.sqrt(n * p * (1 - p))


def test_subsets_are_uniform_without_replacement():
    deg, k, n = 5, 2, 5000  # 10 subsets, each with probability 1/10
    indptr, indices = to_csc(star_in(deg), deg + 1)
    out = sample_neighbors(indptr, indices, torch.zeros(n, dtype=torch.long), [k], generator=gen(2))
    pairs = out.node[out.row].view(n, k).sort(1).values
    codes = pairs[:, 0] * 10 + pairs[:, 1]
    _, counts = torch.unique(codes, return_counts=True)
    assert counts.numel() == 10
    p = 0.1
    assert (counts.double() - n * p).abs().max() <= 5 * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("deg,k", [(10, 3), (3, 5)])
def test_inclusion_frequency_with_replacement(deg, k):
    indptr, indices = to_csc(star_in(deg), deg + 1)
    n = 3000
    out = sample_neighbors(
        indptr, indices, torch.zeros(n, dtype=torch.long), [k], replace=True, generator=gen(3)
    )
    assert out.num_sampled_edges == [n * k]  # k draws even when deg < k
    per_draw = out.node[out.row].view(n, k)
    included = torch.stack([(per_draw == u).any(1) for u in range(1, deg + 1)], 1)
    counts = included.sum(0).double()
    p = 1 - (1 - 1 / deg) ** k
    assert (counts - n * p).abs().max() <= 5 * math.sqrt(n * p * (1 - p))
    draws = torch.bincount(per_draw.flatten(), minlength=deg + 1)[1:].double()
    q = 1 / deg  # every single draw is uniform
    assert (draws - n * k * q).abs().max() <= 5 * math.sqrt(n * k * q * (1 - q))


# ------------------------------------------------------------------------------ structure
def assert_valid_sample(out, ei, indptr, indices, seeds, fanouts, replace):
    """Every structural property of a sample (shared by the serial and threaded tests)."""
    edges = set(map(tuple, ei.t().tolist()))
    deg = indptr.diff()
    assert torch.equal(out.node[: seeds.numel()], seeds)
    assert sum(out.num_sampled_nodes) == out.node.numel()
    assert sum(out.num_sampled_edges) == out.row.numel() == out.col.numel() == out.edge.numel()
    assert len(out.num_sampled_nodes) == len(fanouts) + 1
    assert len(out.num_sampled_edges) == len(fanouts)
    # every sampled edge is an edge of the graph, and `edge` is its CSC position
    src, dst = out.node[out.row], out.node[out.col]
    assert all((u, v) in edges for u, v in zip(src.tolist(), dst.tolist(), strict=True))
    assert torch.equal(indices[out.edge], src)
    assert torch.equal(torch.searchsorted(indptr, out.edge, right=True) - 1, dst)
    # new nodes are new: no global id appears twice except repeated seeds
    assert out.node[seeds.numel() :].unique().numel() == out.node.numel() - seeds.numel()
    assert not set(out.node[seeds.numel() :].tolist()) & set(seeds.tolist())
    ranges = hop_ranges(out)
    e0 = 0
    for h, (k, m) in enumerate(zip(fanouts, out.num_sampled_edges, strict=True)):
        row, col = out.row[e0 : e0 + m], out.col[e0 : e0 + m]
        lo, hi = ranges[h]
        assert ((col >= lo) & (col < hi)).all()  # hop h+1 expands the nodes of hop h
        assert (col.diff() >= 0).all()  # edges grouped by destination, in node order
        assert (row < ranges[h + 1][1]).all()  # sources are known by the end of hop h+1
        # the nodes new at hop h+1 are its sources unseen before, in order of appearance
        seen = set(out.node[: ranges[h + 1][0]].tolist())
        first = [u for u in dict.fromkeys(out.node[row].tolist()) if u not in seen]
        assert out.node[ranges[h + 1][0] : ranges[h + 1][1]].tolist() == first
        per_dst = torch.bincount(col - lo, minlength=hi - lo)
        d = deg[out.node[lo:hi]]
        expected = d if k < 0 else torch.where(d > 0, k, 0) if replace else d.clamp(max=k)
        assert torch.equal(per_dst, expected)
        if not replace:  # no repeated neighbour of one destination
            pairs = torch.stack([col, out.node[row]])
            assert torch.unique(pairs, dim=1).size(1) == m
        e0 += m


@pytest.mark.parametrize("replace", [False, True])
def test_fanout_caps_and_edges_exist(replace):
    ei = random_graph()
    indptr, indices = to_csc(ei, 60)
    fanouts = [4, 3, 2]
    seeds = torch.tensor([0, 1, 7, 7, 30])  # a hub and a repeated seed
    out = sample_neighbors(indptr, indices, seeds, fanouts, replace=replace, generator=gen(4))
    assert_valid_sample(out, ei, indptr, indices, seeds, fanouts, replace)


def bfs_in(ei: torch.Tensor, seeds: list[int], hops: int) -> tuple[list[set], set]:
    """Layers of nodes reached through in-edges, and the edges into expanded nodes."""
    into = defaultdict(list)
    for u, v in ei.t().tolist():
        into[v].append(u)
    seen = set(seeds)
    layers = [set(seeds)]
    frontier = list(dict.fromkeys(seeds))
    expanded_edges = set()
    for _ in range(hops):
        nxt = []
        for v in frontier:
            for u in into[v]:
                expanded_edges.add((u, v))
                if u not in seen:
                    seen.add(u)
                    nxt.append(u)
        layers.append(set(nxt))
        frontier = nxt
    return layers, expanded_edges


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_full_fanout_matches_bfs(hops):
    ei = random_graph(80, 240, seed=5)
    indptr, indices = to_csc(ei, 80)
    seeds = [3, 11, 42]
    out = sample_neighbors(indptr, indices, torch.tensor(seeds), [-1] * hops)
    layers, expanded = bfs_in(ei, seeds, hops)
    for (lo, hi), layer in zip(hop_ranges(out), layers, strict=True):
        assert set(out.node[lo:hi].tolist()) == layer and hi - lo == len(layer)
    got = set(zip(out.node[out.row].tolist(), out.node[out.col].tolist(), strict=True))
    assert got == expanded and out.row.numel() == len(expanded)


def test_full_fanout_sage_matches_full_graph():
    torch.manual_seed(0)
    n = 120
    ei = random_graph(n, 900, seed=6)
    x = torch.randn(n, 8)
    conv1, conv2 = SAGEConv(8, 16), SAGEConv(16, 4)

    def model(x, edge_index):
        return conv2(conv1(x, edge_index).relu(), edge_index)

    indptr, indices = to_csc(ei, n)
    seeds = torch.tensor([5, 0, 77, 5, 119])
    out = sample_neighbors(indptr, indices, seeds, [-1, -1])
    sub = model(x[out.node], torch.stack([out.row, out.col]))[: seeds.numel()]
    assert torch.allclose(sub, model(x, ei)[seeds], atol=1e-5)


# -------------------------------------------------------------------- reproducibility
class _Recorder(TorchFunctionMode):
    """Names of the torch functions called on the watched tensors."""

    def __init__(self, watched):
        super().__init__()
        self.watched = watched
        self.calls = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in list(args) + list(kwargs.values()):
            if any(a is w for w in self.watched):
                self.calls.add(getattr(func, "__name__", str(func)))
        return func(*args, **kwargs)


@pytest.mark.parametrize("mode", ["c", "r"])
def test_memmap_int32_gives_identical_samples(tmp_path, mode):
    ei = random_graph(60, 500, seed=7)
    indptr, indices = to_csc(ei, 60)
    arrays = {}
    for name, t in (("indptr", indptr), ("indices", indices)):
        mm = np.memmap(tmp_path / name, dtype=np.int32, mode="w+", shape=(t.numel(),))
        mm[:] = t.numpy()
        mm.flush()
        del mm
        with warnings.catch_warnings():  # mode "r": torch warns the array is read-only
            warnings.simplefilter("ignore", UserWarning)
            arrays[name] = torch.from_numpy(
                np.memmap(tmp_path / name, dtype=np.int32, mode=mode, shape=(t.numel(),))
            )
    seeds = torch.tensor([0, 9, 33])
    for replace in (False, True):
        ref = sample_neighbors(indptr, indices, seeds, [5, 3, 2], replace, gen(8))
        rec = _Recorder([arrays["indptr"], arrays["indices"]])
        with rec:
            got = sample_neighbors(
                arrays["indptr"], arrays["indices"], seeds, [5, 3, 2], replace, gen(8)
            )
        for a, b in zip(ref, got, strict=True):
            assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
        # only gathers of sampled rows: no conversion or copy of the whole arrays
        assert rec.calls <= {"index_select", "numel", "dim", "size", "__get__"}, rec.calls


def test_seeded_generator_and_buffer():
    ei = random_graph(100, 900, seed=9)
    indptr, indices = to_csc(ei, 100)
    seeds = torch.arange(0, 100, 7)
    a = sample_neighbors(indptr, indices, seeds, [4, 3], generator=gen(10))
    b = sample_neighbors(indptr, indices, seeds, [4, 3], generator=gen(10))
    c = sample_neighbors(indptr, indices, seeds, [4, 3], generator=gen(11))
    buffer = torch.full((100,), -1, dtype=torch.long)
    d = sample_neighbors(indptr, indices, seeds, [4, 3], generator=gen(10), node_buffer=buffer)
    for x, y, z in zip(a[:4], b[:4], d[:4], strict=True):
        assert torch.equal(x, y) and torch.equal(x, z)
    assert a[4:] == b[4:] == d[4:]
    assert not torch.equal(a.edge, c.edge)
    assert (buffer == -1).all()  # the scratch buffer is handed back clean


def test_isolated_and_empty_seeds():
    indptr, indices = to_csc(star_in(4), 8)
    out = sample_neighbors(indptr, indices, torch.tensor([6, 0, 6]), [2, -1])
    assert out.num_sampled_nodes == [3, 2, 0] and out.num_sampled_edges == [2, 0]
    empty = sample_neighbors(indptr, indices, torch.empty(0, dtype=torch.long), [2, 2])
    assert empty.num_sampled_nodes == [0, 0, 0] and empty.node.numel() == 0


@pytest.mark.cuda
@pytest.mark.parametrize("replace", [False, True])
def test_cuda_matches_cpu_with_a_cpu_generator(replace):
    ei = random_graph(200, 3000, seed=12)
    indptr, indices = to_csc(ei, 200)
    seeds = torch.arange(0, 200, 3)
    cpu = sample_neighbors(indptr, indices, seeds, [6, 4, 60], replace, gen(13))
    buffer = torch.full((200,), -1, dtype=torch.long, device="cuda")
    cuda = sample_neighbors(
        indptr.cuda().int(), indices.cuda(), seeds.cuda(), [6, 4, 60], replace, gen(13), buffer
    )
    assert cuda.node.is_cuda
    for a, b in zip(cpu[:4], cuda[:4], strict=True):
        assert torch.equal(a, b.cpu())
    assert cpu[4:] == cuda[4:]


# ---------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "fanouts,match",
    [
        ([], r"`fanouts` to be a non-empty list"),
        ([3, 0], r"`fanouts\[1\]` to be a positive integer or -1 .* but got 0"),
        ([-2], r"`fanouts\[0\]` to be a positive integer or -1 .* but got -2"),
        ([2.5], r"`fanouts\[0\]`.* but got 2.5"),
        ([True], r"`fanouts\[0\]`.* but got True"),
        (5, r"`fanouts` to be a non-empty list .* but got 5"),
    ],
)
def test_bad_fanouts(fanouts, match):
    indptr, indices = to_csc(star_in(3), 4)
    with pytest.raises(ValueError, match="sample_neighbors: expected " + match):
        sample_neighbors(indptr, indices, torch.tensor([0]), fanouts)


def test_bad_inputs():
    indptr, indices = to_csc(star_in(3), 4)
    with pytest.raises(ValueError, match=r"`seeds` in \[0, 3\] .* found values in \[0, 4\]"):
        sample_neighbors(indptr, indices, torch.tensor([0, 4]), [2])
    with pytest.raises(ValueError, match=r"`seeds` in \[0, 3\] .* found values in \[-1, 0\]"):
        sample_neighbors(indptr, indices, torch.tensor([-1, 0]), [2])
    with pytest.raises(ValueError, match="`seeds` to be a 1-D integer tensor"):
        sample_neighbors(indptr, indices, torch.tensor([0.0]), [2])
    with pytest.raises(TypeError, match="`seeds` to be a Tensor"):
        sample_neighbors(indptr, indices, [0], [2])
    with pytest.raises(ValueError, match="`indptr` to be a 1-D torch.int32 or torch.int64"):
        sample_neighbors(indptr.float(), indices, torch.tensor([0]), [2])
    with pytest.raises(ValueError, match="`replace` to be one of"):
        sample_neighbors(indptr, indices, torch.tensor([0]), [2], replace=1)
    with pytest.raises(ValueError, match=r"`node_buffer` to be an int64 tensor of shape \(4,\)"):
        sample_neighbors(indptr, indices, torch.tensor([0]), [2], node_buffer=torch.full((3,), -1))
    with pytest.raises(ValueError, match=r"to_csc: expected node ids in `edge_index`"):
        to_csc(torch.tensor([[0, 5], [1, 2]]), 4)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2", None])
def test_bad_num_threads(bad):
    indptr, indices = to_csc(star_in(3), 4)
    with pytest.raises(
        ValueError,
        match=r"sample_neighbors: expected `num_threads` to be a "
        r"positive integer but got",
    ):
        sample_neighbors(indptr, indices, torch.tensor([0]), [2], num_threads=bad)


# ------------------------------------------------------------- intra-batch threads
THREADS = [2, 3, 4]


@pytest.fixture(params=["pool", "inline"])
def execution(request, monkeypatch):
    """Chunks run on the thread pool (every hop) or all in the calling thread (the
    small-frontier path); the sample must not depend on which."""
    monkeypatch.setattr(ns, "_MIN_PARALLEL", 0 if request.param == "pool" else 10**9)
    return request.param


def assert_same(a: NeighborSample, b: NeighborSample) -> None:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y.to(x.device))
        else:
            assert x == y


def test_one_thread_is_the_serial_sampler():
    ei = random_graph(100, 900, seed=20)
    indptr, indices = to_csc(ei, 100)
    seeds = torch.arange(0, 100, 3)
    for replace in (False, True):
        g1, g2 = gen(21), gen(21)
        a = sample_neighbors(indptr, indices, seeds, [5, 60, 2], replace, g1)
        b = sample_neighbors(indptr, indices, seeds, [5, 60, 2], replace, g2, num_threads=1)
        assert_same(a, b)
        assert torch.equal(g1.get_state(), g2.get_state())  # same draws consumed


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("replace", [False, True])
def test_threads_reproducible(num_threads, replace, execution, monkeypatch):
    ei = random_graph(300, 4000, seed=22)
    indptr, indices = to_csc(ei, 300)
    seeds = torch.randint(0, 300, (120,), generator=gen(23))
    fanouts = [6, 4, 60]  # 60: random keys on the hubs, Floyd elsewhere

    def draw(seed, **kw):
        return sample_neighbors(
            indptr, indices, seeds, fanouts, replace, gen(seed), num_threads=num_threads, **kw
        )

    a = draw(24)
    assert_same(a, draw(24))
    buffer = torch.full((300,), -1, dtype=torch.long)
    assert_same(a, draw(24, node_buffer=buffer))
    assert (buffer == -1).all()
    assert not torch.equal(a.edge, draw(25).edge)
    # pool and inline execution draw the same chunks from the same generators
    other = 10**9 if execution == "pool" else 0
    monkeypatch.setattr(ns, "_MIN_PARALLEL", other)
    assert_same(a, draw(24))
    # the global CPU generator serves when none is given
    torch.manual_seed(26)
    b = sample_neighbors(indptr, indices, seeds, fanouts, replace, num_threads=num_threads)
    torch.manual_seed(26)
    c = sample_neighbors(indptr, indices, seeds, fanouts, replace, num_threads=num_threads)
    assert_same(b, c)


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("replace", [False, True])
def test_threads_structure(num_threads, replace, execution):
    ei = random_graph(200, 2500, seed=27)
    indptr, indices = to_csc(ei, 200)
    seeds = torch.cat(
        [torch.tensor([0, 1, 2, 9, 9]), torch.randint(0, 200, (37,), generator=gen(28))]
    )
    fanouts = [5, 3, 50, 2]
    out = sample_neighbors(
        indptr, indices, seeds, fanouts, replace, gen(29), num_threads=num_threads
    )
    assert_valid_sample(out, ei, indptr, indices, seeds, fanouts, replace)


@pytest.mark.parametrize("num_threads", THREADS)
def test_threads_keep_the_serial_layout(num_threads, execution):
    """Without randomness (full fanouts, or fanouts above every degree) the threaded sample
    is the serial one, bit for bit: chunks are concatenated in frontier order."""
    ei = random_graph(150, 700, seed=30)
    indptr, indices = to_csc(ei, 150)
    seeds = torch.tensor([4, 0, 99, 4, 17, 3, 120])
    buffer = torch.full((150,), -1, dtype=torch.long)
    for fanouts in ([-1, -1, -1], [1000, -1]):
        serial = sample_neighbors(indptr, indices, seeds, fanouts)
        for buf in (None, buffer):
            got = sample_neighbors(
                indptr, indices, seeds, fanouts, node_buffer=buf, num_threads=num_threads
            )
            assert_same(serial, got)
    # isolated seeds, then empty frontiers; and no seeds at all
    indptr, indices = to_csc(star_in(4), 8)
    for seeds in (torch.tensor([6, 7, 6]), torch.empty(0, dtype=torch.long)):
        assert_same(
            sample_neighbors(indptr, indices, seeds, [2, 2]),
            sample_neighbors(indptr, indices, seeds, [2, 2], num_threads=num_threads),
        )


def inclusion_chi2(draws: torch.Tensor, first: int, deg: int) -> float:
    """p-value of the per-neighbour inclusion counts of ``[n, k]`` uniform k-subsets of
    the neighbours ``first .. first + deg - 1``.

    The inclusion indicators of a uniform k-subset have variance ``p (1 - p)``, ``p = k /
    deg``, and covariance ``-p (1 - p) / (deg - 1)``, so ``sum (c - n p)^2 / (n p (1 - p)
    deg / (deg - 1))`` is chi-square with ``deg - 1`` degrees of freedom.
    """
    n, k = draws.shape
    assert ((draws >= first) & (draws < first + deg)).all()
    counts = torch.bincount(draws.flatten() - first, minlength=deg).double()
    p = k / deg
    stat = float(((counts - n * p) ** 2).sum()) / (n * p * (1 - p) * deg / (deg - 1))
    return float(chi2.sf(stat, deg - 1))


@pytest.mark.parametrize("num_threads", [3, 4])
@pytest.mark.parametrize("d0,d1,k", [(12, 40, 5), (40, 300, 30)])
def test_threads_inclusion_frequency_without_replacement(num_threads, d0, d1, k, monkeypatch):
    monkeypatch.setattr(ns, "_MIN_PARALLEL", 0)
    c1 = d0 + d1 + 1
    indptr, indices = to_csc(two_stars(d0, d1), c1 + 1)
    n = 3001  # chunks of unequal size, both centres in every chunk
    seeds = torch.tensor([0, c1]).repeat(n)
    out = sample_neighbors(indptr, indices, seeds, [k], generator=gen(31), num_threads=num_threads)
    per_draw = out.node[out.row].view(2 * n, k)
    assert (per_draw.sort(1).values.diff(dim=1) > 0).all()  # distinct within a draw
    p_values = []
    for centre, deg, first in ((0, d0, 1), (c1, d1, d0 + 1)):
        p_values.append(inclusion_chi2(per_draw[seeds == centre], first, deg))
        # every chunk on its own is uniform too (a chunk-dependent bias would show here)
        bounds = [2 * n * c // num_threads for c in range(num_threads + 1)]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            mine = (seeds == centre) & (torch.arange(2 * n) >= lo) & (torch.arange(2 * n) < hi)
            p_values.append(inclusion_chi2(per_draw[mine], first, deg))
    assert min(p_values) > 1e-4, p_values


@pytest.mark.parametrize("num_threads", [2, 3])
def test_threads_subsets_and_draws_are_uniform(num_threads, monkeypatch):
    monkeypatch.setattr(ns, "_MIN_PARALLEL", 0)
    deg, n = 5, 6000
    indptr, indices = to_csc(star_in(deg), deg + 1)
    seeds = torch.zeros(n, dtype=torch.long)
    # without replacement: the 10 pairs of 5 neighbours, each with probability 1/10
    out = sample_neighbors(indptr, indices, seeds, [2], generator=gen(32), num_threads=num_threads)
    pairs = out.node[out.row].view(n, 2).sort(1).values
    codes = (pairs[:, 0] - 1) * deg + (pairs[:, 1] - 1)
    counts = torch.bincount(codes, minlength=deg * deg).double()
    counts = counts[[a * deg + b for a in range(deg) for b in range(a + 1, deg)]]
    assert counts.sum() == n
    assert chi2.sf(float(((counts - n / 10) ** 2).sum()) / (n / 10), 9) > 1e-4
    # chunks draw independently: equal chunks of one repeated seed differ
    per_chunk = pairs[: n // num_threads * num_threads].view(num_threads, -1, 2)
    assert not torch.equal(per_chunk[0], per_chunk[1])
    # with replacement every single draw is uniform (Pearson's test on the draw counts)
    k = 4
    out = sample_neighbors(
        indptr, indices, seeds, [k], replace=True, generator=gen(33), num_threads=num_threads
    )
    draws = torch.bincount(out.node[out.row] - 1, minlength=deg).double()
    e = n * k / deg
    assert chi2.sf(float(((draws - e) ** 2).sum()) / e, deg - 1) > 1e-4


def test_threads_on_memmapped_int32(tmp_path, monkeypatch):
    monkeypatch.setattr(ns, "_MIN_PARALLEL", 0)
    ei = random_graph(60, 500, seed=34)
    indptr, indices = to_csc(ei, 60)
    arrays = []
    for name, t in (("indptr", indptr), ("indices", indices)):
        mm = np.memmap(tmp_path / name, dtype=np.int32, mode="w+", shape=(t.numel(),))
        mm[:] = t.numpy()
        arrays.append(torch.from_numpy(mm))
    seeds = torch.tensor([0, 9, 33, 2, 41])
    for replace in (False, True):
        ref = sample_neighbors(indptr, indices, seeds, [5, 3, 2], replace, gen(35), num_threads=3)
        got = sample_neighbors(*arrays, seeds, [5, 3, 2], replace, gen(35), num_threads=3)
        assert_same(ref, got)


def test_threads_are_reused_not_leaked(monkeypatch):
    monkeypatch.setattr(ns, "_MIN_PARALLEL", 0)
    indptr, indices = to_csc(random_graph(100, 900, seed=36), 100)
    seeds = torch.arange(100)

    def workers() -> int:
        return sum(t.name.startswith("lightgraph-sampler") for t in threading.enumerate())

    for _ in range(20):
        sample_neighbors(indptr, indices, seeds, [3, 2], generator=gen(37), num_threads=4)
    after = workers()
    assert 1 <= after <= 3  # the caller expands chunk 0 itself
    for _ in range(20):
        sample_neighbors(indptr, indices, seeds, [3, 2], generator=gen(37), num_threads=3)
    assert workers() == after


def test_threads_wait_for_every_chunk_on_error(monkeypatch):
    """A failing chunk raises in the caller, after the other chunks have finished."""
    monkeypatch.setattr(ns, "_MIN_PARALLEL", 0)
    indptr, indices = to_csc(random_graph(100, 900, seed=38), 100)
    done = []
    expand = ns._expand

    def flaky(indptr, indices, frontier, *args):
        if frontier.numel() and int(frontier[0]) == 0:
            raise RuntimeError("chunk failed")
        out = expand(indptr, indices, frontier, *args)
        done.append(frontier.numel())
        return out

    monkeypatch.setattr(ns, "_expand", flaky)
    buffer = torch.full((100,), -1, dtype=torch.long)
    with pytest.raises(RuntimeError, match="chunk failed"):
        sample_neighbors(indptr, indices, torch.arange(100), [3], node_buffer=buffer, num_threads=4)
    assert sorted(done) == [25, 25, 25] and (buffer == -1).all()


@pytest.mark.cuda
@pytest.mark.parametrize("replace", [False, True])
def test_threads_cuda_match_cpu_with_a_cpu_generator(replace, execution):
    ei = random_graph(200, 3000, seed=39)
    indptr, indices = to_csc(ei, 200)
    seeds = torch.arange(0, 200, 3)
    cpu = sample_neighbors(indptr, indices, seeds, [6, 4, 60], replace, gen(40), num_threads=3)
    buffer = torch.full((200,), -1, dtype=torch.long, device="cuda")
    cuda = sample_neighbors(
        indptr.cuda().int(),
        indices.cuda(),
        seeds.cuda(),
        [6, 4, 60],
        replace,
        gen(40),
        buffer,
        num_threads=3,
    )
    assert cuda.node.is_cuda
    assert_same(cpu, cuda)


@pytest.mark.parametrize("intra_op_threads, expected", [(1, 1), (None, 2)])
def test_sampling_runs_with_the_requested_intra_op_threads_and_restores_them(
    monkeypatch, intra_op_threads, expected
):
    """Torch's intra-op threads while a hop is expanded (1 by default: the sampler's many
    small ops collapse with 2 threads on a busy machine), and torch's setting afterwards."""
    indptr, indices = to_csc(random_graph(), 60)
    seen = []
    real_expand = ns._expand

    def expand(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real_expand(*args, **kwargs)

    monkeypatch.setattr(ns, "_expand", expand)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        kwargs = {} if intra_op_threads == 1 else {"intra_op_threads": intra_op_threads}
        a = sample_neighbors(indptr, indices, torch.arange(5), [3, 2], generator=gen(0), **kwargs)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [expected, expected]
    b = sample_neighbors(indptr, indices, torch.arange(5), [3, 2], generator=gen(0))
    assert_same(a, b)  # the thread count does not change the sample
    with pytest.raises(ValueError, match="sample_neighbors: expected `intra_op_threads`"):
        sample_neighbors(indptr, indices, torch.arange(5), [3], intra_op_threads=0)


def test_a_background_sampler_leaves_the_process_thread_count_alone(monkeypatch):
    """torch's intra-op thread count is process-wide: a sampler running in a background
    thread (prefetch, stage 1) must not change it under the main thread's model step."""
    import threading

    indptr, indices = to_csc(random_graph(), 60)
    seen = []
    real_expand = ns._expand

    def expand(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real_expand(*args, **kwargs)

    monkeypatch.setattr(ns, "_expand", expand)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        worker = threading.Thread(
            target=sample_neighbors, args=(indptr, indices, torch.arange(5), [3, 2])
        )
        worker.start()
        worker.join(timeout=30)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [2, 2]
