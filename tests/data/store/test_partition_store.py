"""HANOI's partition store, checked against references computed here from the input graph."""

from __future__ import annotations

import json
import os
import pickle
import threading
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.data import Data

from lightgraph.data import SyntheticGraph, partition_graph
from lightgraph.data.datasets import generate_synthetic_graph
from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.store.cache import META_FILE, CacheReader, CacheWriter, CorruptCacheError
from lightgraph.data.store.partition_store import (
    IOStats,
    MacroBatch,
    PartitionStore,
    StaleStoreError,
    build_partition_store,
    write_partition_store,
)

F = 12  # features
ID = 4  # bytes of an int32 node id


def make_graph(multilabel: bool = False, seed: int = 0) -> Data:
    """A small graph with directed extra edges, duplicates and self-loops."""
    data = generate_synthetic_graph(
        num_nodes=600, avg_degree=8, num_features=F, num_classes=5, multilabel=multilabel, seed=seed
    )
    gen = torch.Generator().manual_seed(seed + 1)
    extra = torch.randint(0, 600, (2, 300), generator=gen)  # one direction only
    dup = data.edge_index[:, :50]  # parallel edges
    loops = torch.arange(0, 600, 37).repeat(2, 1)  # self-loops
    data.edge_index = torch.cat([data.edge_index, extra, dup, loops], 1)
    return data


def top_hubs(data: Data, count: int) -> torch.Tensor:
    deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    return torch.sort(torch.topk(deg, count).indices).values


@pytest.fixture(scope="module")
def graph() -> Data:
    return make_graph()


@pytest.fixture(scope="module")
def part(graph) -> torch.Tensor:
    return partition_graph(graph.edge_index, graph.num_nodes, 6, method="metis")


@pytest.fixture(scope="module")
def hubs(graph) -> torch.Tensor:
    return top_hubs(graph, 15)


@pytest.fixture(scope="module")
def store(tmp_path_factory, graph, part, hubs) -> PartitionStore:
    return build_partition_store(
        graph, tmp_path_factory.mktemp("s") / "store", part, hubs, chunk_size=333
    )


# ------------------------------------------------------------------------ references
def edge_multiset(pairs) -> Counter:
    return Counter(map(tuple, torch.as_tensor(pairs).reshape(-1, 2).tolist()))


def expected_subgraph(data: Data, part, hubs, parts) -> Counter:
    """Edges (original ids, with multiplicity) with both endpoints in parts' nodes or hubs."""
    keep = torch.isin(part, torch.tensor(parts)) | torch.isin(torch.arange(data.num_nodes), hubs)
    src, dst = data.edge_index
    mask = keep[src] & keep[dst]
    return edge_multiset(data.edge_index[:, mask].t())


def macro_edges(mb: MacroBatch) -> Counter:
    return edge_multiset(mb.node_ids[mb.edge_index].t())


def bucket_counts(data: Data, part, hubs, k):
    """Non-hub edges per (src part, dst part) and hub edges per non-hub endpoint's part."""
    is_hub = torch.zeros(data.num_nodes, dtype=torch.bool)
    is_hub[hubs] = True
    e_pp = torch.zeros(k, k, dtype=torch.long)
    e_hp = torch.zeros(k, dtype=torch.long)
    for u, v in data.edge_index.t().tolist():
        if not is_hub[u] and not is_hub[v]:
            e_pp[part[u], part[v]] += 1
        elif is_hub[u] != is_hub[v]:
            e_hp[part[v] if is_hub[u] else part[u]] += 1
    return e_pp, e_hp


# -------------------------------------------------------------------------- layout
def test_files_follow_the_documented_layout(store, graph, part, hubs) -> None:
    d = store.directory
    load = lambda name: np.load(os.path.join(d, name))  # noqa: E731
    k = 6
    order = torch.from_numpy(np.argsort(part.numpy(), kind="stable"))  # partition-major
    assert torch.equal(torch.from_numpy(load("node_ids.npy")).long(), order)
    assert load("node_ids.npy").dtype == np.int32 and store.id_dtype == np.int32
    assert torch.equal(torch.from_numpy(load("x.npy")), graph.x[order])
    assert torch.equal(torch.from_numpy(load("y.npy")), graph.y[order])
    masks = torch.stack([graph.train_mask, graph.val_mask, graph.test_mask], 1)
    assert torch.equal(torch.from_numpy(load("masks.npy")), masks[order])
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(part, minlength=k).cumsum(0)])
    assert torch.equal(store.part_ptr, ptr) and torch.equal(
        torch.from_numpy(load("part_ptr.npy")), ptr
    )
    assert torch.equal(torch.from_numpy(load("hub_x.npy")), graph.x[hubs])
    assert torch.equal(torch.from_numpy(load("hub_ids.npy")), hubs) and torch.equal(
        store.hubs, hubs
    )

    # Every bucket holds exactly the edges it is named after (in store ids).
    store_of = torch.empty_like(order)
    store_of[order] = torch.arange(len(order))
    is_hub = torch.zeros(graph.num_nodes, dtype=torch.bool)
    is_hub[hubs] = True
    src, dst = graph.edge_index
    edges, eptr = load("edges.npy"), load("edge_ptr.npy")
    for p in range(k):
        for q in range(k):
            want = ~is_hub[src] & ~is_hub[dst] & (part[src] == p) & (part[dst] == q)
            got = edges[eptr[p * k + q] : eptr[p * k + q + 1]]
            assert edge_multiset(got) == edge_multiset(store_of[graph.edge_index[:, want]].t())
    # hub edges: (hub index, store id of the other end); bucket 2p: hub -> p, 2p+1: p -> hub
    hub_index = torch.full((graph.num_nodes,), -1)
    hub_index[hubs] = torch.arange(len(hubs))
    hub_edges, hptr = load("hub_edges.npy"), load("hub_edge_ptr.npy")
    assert hptr.shape == (2 * k + 1,)
    for p in range(k):
        out = is_hub[src] & ~is_hub[dst] & (part[dst] == p)
        into = ~is_hub[src] & is_hub[dst] & (part[src] == p)
        got = hub_edges[hptr[2 * p] : hptr[2 * p + 1]]
        assert edge_multiset(got) == edge_multiset(
            torch.stack([hub_index[src[out]], store_of[dst[out]]], 1)
        )
        got = hub_edges[hptr[2 * p + 1] : hptr[2 * p + 2]]
        assert edge_multiset(got) == edge_multiset(
            torch.stack([hub_index[dst[into]], store_of[src[into]]], 1)
        )
    want = is_hub[src] & is_hub[dst]
    assert edge_multiset(load("hub_hub_edges.npy")) == edge_multiset(
        hub_index[graph.edge_index[:, want]].t()
    )

    meta = json.load(open(os.path.join(d, META_FILE)))
    assert meta["num_nodes"] == 600 and meta["num_parts"] == k and meta["num_hubs"] == 15
    assert meta["id_dtype"] == "int32" and meta["num_edges"] == graph.edge_index.size(1)
    assert set(meta["manifest"]["files"]) == set(os.listdir(d)) - {META_FILE}


# ------------------------------------------------------------------------ round trip
@pytest.mark.parametrize("multilabel", [False, True])
@pytest.mark.parametrize("method", ["random", "metis"])
@pytest.mark.parametrize("num_hubs", [0, 9])
def test_round_trip_every_partition(tmp_path, multilabel, method, num_hubs) -> None:
    data = make_graph(multilabel, seed=3)
    k = 5
    part = partition_graph(data.edge_index, data.num_nodes, k, method=method, seed=2)
    hubs = top_hubs(data, num_hubs) if num_hubs else torch.zeros(0, dtype=torch.long)
    store = build_partition_store(data, tmp_path / "s", part, hubs, chunk_size=97)
    assert (store.num_nodes, store.num_parts, store.num_features) == (600, k, F)
    assert store.multilabel == multilabel and store.num_classes == 5
    xs, ys, ids, masks, edges = [], [], [], [], Counter()
    for p in range(k):
        mb = store.read_macro_batch([p])
        n = mb.num_part_nodes
        # the partition's own nodes, in original order (a stable sort), come first
        assert torch.equal(mb.node_ids[:n], torch.nonzero(part == p).flatten())
        xs.append(mb.x[:n]), ys.append(mb.y[:n]), ids.append(mb.node_ids[:n])
        masks.append(torch.stack([mb.val_mask[:n], mb.test_mask[:n]], 1))
        # edges with at least one endpoint in p and none a hub outside p: counted once
        here = torch.zeros(data.num_nodes, dtype=torch.bool)
        here[mb.node_ids[:n]] = True
        e = mb.node_ids[mb.edge_index]
        own = here[e[0]] & here[e[1]]
        edges += edge_multiset(e[:, own].t())
    ids_all = torch.cat(ids)
    inverse = torch.empty_like(ids_all)
    inverse[ids_all] = torch.arange(len(ids_all))
    assert torch.equal(torch.cat(xs)[inverse], data.x)
    assert torch.equal(torch.cat(ys)[inverse], data.y) and torch.cat(ys).dtype == data.y.dtype
    assert torch.equal(torch.cat(masks)[inverse], torch.stack([data.val_mask, data.test_mask], 1))
    src, dst = data.edge_index
    assert edges == edge_multiset(data.edge_index[:, part[src] == part[dst]].t())
    # all partitions at once: the whole graph, every edge once
    mb = store.read_macro_batch(list(range(k)))
    inv = torch.empty_like(mb.node_ids)
    inv[mb.node_ids] = torch.arange(mb.num_nodes)
    assert mb.num_nodes == 600 and torch.equal(mb.x[inv], data.x) and torch.equal(mb.y[inv], data.y)
    assert macro_edges(mb) == edge_multiset(data.edge_index.t())
    is_hub = torch.isin(torch.arange(600), hubs)
    assert torch.equal(mb.train_mask[inv], data.train_mask & ~is_hub)
    assert torch.equal(mb.is_hub[inv], is_hub)


def test_chunk_size_does_not_change_the_files(tmp_path, graph, part, hubs) -> None:
    a = build_partition_store(graph, tmp_path / "a", part, hubs, chunk_size=5)
    b = build_partition_store(graph, tmp_path / "b", part, hubs, chunk_size=1 << 20)
    files = lambda s: json.load(open(os.path.join(s.directory, META_FILE)))["manifest"]["files"]  # noqa: E731
    assert files(a) == files(b)


# ---------------------------------------------------------------------- macro-batches
@pytest.mark.parametrize("parts", [[0], [4, 1], [2, 3, 5], [5, 0, 3, 1]])
def test_macro_batch_is_the_induced_subgraph_on_parts_and_hubs(
    store, graph, part, hubs, parts
) -> None:
    mb = store.read_macro_batch(parts)
    in_parts = [torch.nonzero(part == p).flatten() for p in parts]
    outside_hubs = hubs[~torch.isin(part[hubs], torch.tensor(parts))]
    assert torch.equal(mb.node_ids, torch.cat(in_parts + [outside_hubs]))
    assert mb.num_part_nodes == sum(len(t) for t in in_parts) and mb.parts == tuple(parts)
    ids = mb.node_ids
    assert torch.equal(mb.x, graph.x[ids]) and mb.x.dtype == torch.float32
    assert torch.equal(mb.y, graph.y[ids])
    is_hub = torch.isin(ids, hubs)
    assert torch.equal(mb.is_hub, is_hub) and int(is_hub.sum()) == len(hubs)
    assert torch.equal(mb.train_mask, graph.train_mask[ids] & ~is_hub)
    appended = torch.arange(mb.num_nodes) >= mb.num_part_nodes
    assert torch.equal(mb.val_mask, graph.val_mask[ids] & ~appended)
    assert torch.equal(mb.test_mask, graph.test_mask[ids] & ~appended)
    store_of = torch.empty(graph.num_nodes, dtype=torch.long)
    store_of[store.node_ids.long()] = torch.arange(graph.num_nodes)
    assert torch.equal(mb.store_ids, store_of[ids])
    assert macro_edges(mb) == expected_subgraph(graph, part, hubs, parts)

    data = mb.to_data()
    assert data.num_nodes == mb.num_nodes and torch.equal(data.n_id, ids)
    assert torch.equal(data.edge_index, mb.edge_index) and torch.equal(data.is_hub, is_hub)


def test_hub_in_and_out_of_the_batch(tmp_path) -> None:
    # Hand-built: nodes 0-3 in part 0, 4-7 in part 1, 8-9 in part 2; hubs 2 (part 0) and 8.
    part = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    edges = torch.tensor(
        [[0, 1], [2, 1], [1, 2], [4, 2], [8, 2], [2, 8], [8, 5], [9, 8], [0, 4], [5, 6], [9, 0]]
    ).t()
    data = Data(
        x=torch.arange(20.0).view(10, 2),
        y=torch.arange(10) % 3,
        edge_index=edges,
        train_mask=torch.ones(10, dtype=torch.bool),
        val_mask=torch.zeros(10, dtype=torch.bool),
        test_mask=torch.zeros(10, dtype=torch.bool),
    )
    store = build_partition_store(data, tmp_path / "s", part, torch.tensor([2, 8]))
    mb = store.read_macro_batch([0])
    assert mb.node_ids.tolist() == [0, 1, 2, 3, 8]
    assert mb.is_hub.tolist() == [False, False, True, False, True]
    assert mb.train_mask.tolist() == [True, True, False, True, False]
    got = sorted(map(tuple, mb.node_ids[mb.edge_index].t().tolist()))
    assert got == [(0, 1), (1, 2), (2, 1), (2, 8), (8, 2)]
    mb = store.read_macro_batch([1])
    assert mb.node_ids.tolist() == [4, 5, 6, 7, 2, 8]
    got = sorted(map(tuple, mb.node_ids[mb.edge_index].t().tolist()))
    assert got == [(2, 8), (4, 2), (5, 6), (8, 2), (8, 5)]


def test_empty_partitions_and_a_single_partition(tmp_path, graph) -> None:
    part = torch.zeros(graph.num_nodes, dtype=torch.long)
    store = build_partition_store(graph, tmp_path / "s", part, None, num_parts=3)
    assert store.num_parts == 3 and store.part_sizes.tolist() == [600, 0, 0]
    mb = store.read_macro_batch([2, 1])
    assert mb.num_nodes == 0 and mb.num_edges == 0 and store.io_stats.read_calls == 0
    mb = store.read_macro_batch([1, 0])
    assert macro_edges(mb) == edge_multiset(graph.edge_index.t())


# -------------------------------------------------------------------------- I/O
def test_bytes_read_match_the_formula(store, graph, part, hubs) -> None:
    k = 6
    e_pp, e_hp = bucket_counts(graph, part, hubs, k)
    sizes = torch.bincount(part, minlength=k)
    node_row = 4 * F + 8 + 3 + ID  # x float32, y int64, 3 mask bytes, node id
    for parts in ([0], [4, 1], [5, 0, 3, 1], list(range(k))):
        p = torch.tensor(parts)
        expected = (
            int(sizes[p].sum()) * node_row
            + int(e_pp[p][:, p].sum()) * 2 * ID
            + int(e_hp[p].sum()) * 2 * ID
        )
        store.io_stats.reset()
        store.read_macro_batch(parts)
        stats = store.io_stats
        assert stats.bytes_read == store.macro_batch_bytes(parts) == expected
        assert stats.bytes_per_file["x.npy"] == int(sizes[p].sum()) * 4 * F
        assert stats.as_dict()["read_amplification"] >= 1.0


def test_read_calls_one_per_contiguous_slice(store, graph, part, hubs) -> None:
    e_pp, e_hp = bucket_counts(graph, part, hubs, 6)
    # parts 4 and 1: no two slices adjacent on disk -> one call per non-empty slice
    store.io_stats.reset()
    store.read_macro_batch([4, 1])
    calls = 4 * 2 + int((e_pp[[1, 4]][:, [1, 4]] > 0).sum()) + int((e_hp[[1, 4]] > 0).sum())
    assert store.io_stats.read_calls == calls
    # parts 1 and 2: buckets (1,1)+(1,2), (2,1)+(2,2) and hub buckets 1+2 are adjacent
    assert (e_pp[1:3, 1:3] > 0).all() and (e_hp[1:3] > 0).all()
    store.io_stats.reset()
    store.read_macro_batch([1, 2])
    assert store.io_stats.read_calls == 4 + 2 + 1  # node files: blocks 1, 2 adjacent
    store.io_stats.reset()
    store.read_macro_batch([2, 1])
    assert store.io_stats.read_calls == 8 + 2 + 1  # node blocks in the given order: 2 then 1


def test_pages_touched_and_reset(store, part) -> None:
    path = os.path.join(store.directory, "x.npy")
    header = os.path.getsize(path) - 600 * F * 4
    ptr = store.part_ptr
    first, last = header + int(ptr[3]) * F * 4, header + int(ptr[4]) * F * 4 - 1
    stats = store.io_stats
    assert isinstance(stats, IOStats)
    stats.reset()
    store.read_macro_batch([3])
    pages, once = stats.pages_touched, stats.bytes_read
    assert pages["x.npy"] == last // 4096 - first // 4096 + 1
    # reading the same slices again touches no new page
    store.read_macro_batch([3])
    store.read_macro_batch([3])
    assert stats.pages_touched == pages and stats.bytes_read == 3 * once
    summary = stats.as_dict()
    assert summary["pages_touched"] == sum(pages.values()) and summary["bytes_read"] == 3 * once
    # a new epoch counts pages afresh; bytes and calls keep accumulating
    stats.start_epoch()
    assert stats.pages_touched == {} and stats.bytes_read == 3 * once
    store.read_macro_batch([3])
    assert stats.pages_touched == pages
    stats.reset()
    assert (stats.bytes_read, stats.read_calls, stats.pages_touched) == (0, 0, {})


def test_concurrent_reads_are_counted_exactly(store) -> None:
    store.io_stats.reset()
    batches = [[0, 1], [2], [3, 4, 5], [5, 0]]
    errors: list[BaseException] = []

    def work(parts):
        try:
            for _ in range(5):
                store.read_macro_batch(parts)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.io_stats.bytes_read == 5 * sum(store.macro_batch_bytes(b) for b in batches)


# ------------------------------------------------------------------ whole graph
def test_csc_and_memory_mapped_arrays(store, graph) -> None:
    node_ids = store.node_ids.long()
    store_of = torch.empty_like(node_ids)
    store_of[node_ids] = torch.arange(len(node_ids))
    src, dst = store_of[graph.edge_index]
    # scipy's CSC of the graph in store ids; it sums parallel edges into counts
    ref = sp.coo_matrix(
        (np.ones(src.numel()), (src.numpy(), dst.numpy())), shape=(600, 600)
    ).tocsc()
    indptr, indices = store.csc()
    assert indices.dtype == torch.int32 and indptr.dtype == torch.long
    in_deg = torch.from_numpy(np.asarray(ref.sum(axis=0)).ravel().astype(np.int64))
    assert torch.equal(indptr, torch.cat([torch.zeros(1, dtype=torch.long), in_deg.cumsum(0)]))
    for v in range(600):
        lo, hi = ref.indptr[v], ref.indptr[v + 1]
        theirs = Counter(
            dict(
                zip(ref.indices[lo:hi].tolist(), ref.data[lo:hi].astype(int).tolist(), strict=True)
            )
        )
        assert Counter(indices[indptr[v] : indptr[v + 1]].tolist()) == theirs

    assert torch.equal(store.features(), graph.x[node_ids])
    assert torch.equal(store.labels(), graph.y[node_ids])
    masks = store.masks()
    assert torch.equal(masks["train_mask"], graph.train_mask[node_ids])
    assert torch.equal(masks["test_mask"], graph.test_mask[node_ids])
    assert torch.equal(store.mask("val"), graph.val_mask[node_ids])
    assert store.mask("val_mask") is not None
    with pytest.raises(
        ValueError,
        match=r"PartitionStore.mask: expected `split` to be one of .*'train'.* but got 'dev'",
    ):
        store.mask("dev")
    feats = store.features()
    assert store.features() is feats  # one map per file
    if os.path.exists("/proc/self/maps"):  # the tensor's memory is a map of x.npy, not a copy
        path, ptr = os.path.realpath(os.path.join(store.directory, "x.npy")), feats.data_ptr()
        with open("/proc/self/maps") as f:
            spans = [line.split()[0].split("-") for line in f if line.rstrip().endswith(path)]
        assert any(int(lo, 16) <= ptr < int(hi, 16) for lo, hi in spans)


def test_pickles_by_directory(store) -> None:
    clone = pickle.loads(pickle.dumps(store))
    assert clone.directory == store.directory and clone.fingerprint == store.fingerprint
    a, b = store.read_macro_batch([1, 3]), clone.read_macro_batch([1, 3])
    assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
    clone.close()


# ---------------------------------------------------------------- staleness, damage
def test_stale_fingerprint_names_meta_json_both_fingerprints_and_the_fix(
    tmp_path, graph, part, hubs
) -> None:
    store = build_partition_store(graph, tmp_path / "s", part, hubs, fingerprint="abc")
    assert PartitionStore.open(tmp_path / "s", "abc").fingerprint == "abc"
    with pytest.raises(StaleStoreError) as err:
        PartitionStore.open(tmp_path / "s", fingerprint="xyz")
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    assert os.path.join(store.directory, META_FILE) in msg and "'abc'" in msg and "'xyz'" in msg
    assert "Delete" in msg and "build_partition_store" in msg
    assert err.value.expected == "xyz" and err.value.found == "abc"


def test_build_reuses_a_matching_store_and_replaces_a_stale_one(
    tmp_path, graph, part, hubs
) -> None:
    path = tmp_path / "s"
    first = build_partition_store(graph, path, part, hubs)
    mtime = os.path.getmtime(path / "x.npy")
    again = build_partition_store(graph, path, part, hubs)
    assert again.fingerprint == first.fingerprint and os.path.getmtime(path / "x.npy") == mtime
    other = partition_graph(graph.edge_index, graph.num_nodes, 4, method="random")
    rebuilt = build_partition_store(graph, path, other, hubs)
    assert rebuilt.fingerprint != first.fingerprint and rebuilt.num_parts == 4
    with pytest.raises(StaleStoreError, match="stale"):
        PartitionStore.open(path, first.fingerprint)
    assert sorted(os.listdir(tmp_path)) == ["s"]  # no staging or old directory left


def test_never_replaces_a_directory_that_is_not_a_store(tmp_path, graph, part) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(ValueError, match=r"holds other files \(thesis.tex\).*refusing to replace"):
        build_partition_store(graph, tmp_path / "mine", part, None)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a directory"):
        build_partition_store(graph, tmp_path / "file", part, None)
    (tmp_path / "empty").mkdir()
    assert build_partition_store(graph, tmp_path / "empty", part, None).num_hubs == 0


def test_other_layout_version_is_stale(tmp_path, graph, part, hubs) -> None:
    d = build_partition_store(graph, tmp_path / "s", part, hubs).directory
    meta_path = os.path.join(d, META_FILE)
    meta = json.load(open(meta_path))
    meta["version"] = 0
    json.dump(meta, open(meta_path, "w"))
    with pytest.raises(
        StaleStoreError, match=f"{META_FILE} describes .*'lightgraph.partition_store', 0"
    ):
        PartitionStore.open(d)
    # build_partition_store replaces it
    assert build_partition_store(graph, tmp_path / "s", part, hubs).meta["version"] == 1


def test_dataset_is_loaded_only_to_build(tmp_path, monkeypatch) -> None:
    dataset = SyntheticGraph(num_nodes=300, avg_degree=6, num_features=F, num_classes=4)
    data = dataset.load()
    part = partition_graph(data.edge_index, data.num_nodes, 3, method="random")
    store = build_partition_store(dataset, tmp_path / "s", part, top_hubs(data, 4))
    assert store.num_classes == dataset.num_classes and store.num_nodes == 300
    mb = store.read_macro_batch([0, 1, 2])
    assert macro_edges(mb) == edge_multiset(data.edge_index.t())

    def no_load():
        raise AssertionError("loaded although the store is up to date")

    monkeypatch.setattr(dataset, "load", no_load)
    again = build_partition_store(dataset, tmp_path / "s", part, top_hubs(data, 4))
    assert again.fingerprint == store.fingerprint


def _built(tmp_path, graph, part, hubs):
    return build_partition_store(graph, tmp_path / "s", part, hubs).directory


@pytest.mark.parametrize("name", ["edges.npy", "x.npy", "hub_x.npy", "csc_indices.npy"])
def test_truncated_file_is_named(tmp_path, graph, part, hubs, name) -> None:
    d = _built(tmp_path, graph, part, hubs)
    path = os.path.join(d, name)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 8)
    with pytest.raises(CorruptCacheError, match="truncated") as err:
        PartitionStore.open(d)
    assert (
        err.value.path == path
        and path in str(err.value)
        and "build_partition_store" in str(err.value)
    )


def test_missing_files_are_named(tmp_path, graph, part, hubs) -> None:
    d = _built(tmp_path, graph, part, hubs)
    os.remove(os.path.join(d, "hub_edge_ptr.npy"))
    with pytest.raises(CorruptCacheError, match="hub_edge_ptr.npy is missing"):
        PartitionStore.open(d)
    os.remove(os.path.join(d, META_FILE))
    with pytest.raises(CorruptCacheError, match=f"{META_FILE} is missing"):
        PartitionStore.open(d)


def test_same_size_garbage_header_is_named(tmp_path, graph, part, hubs) -> None:
    d = _built(tmp_path, graph, part, hubs)
    path = os.path.join(d, "masks.npy")
    with open(path, "r+b") as f:
        f.write(b"garbage!")
    with pytest.raises(CorruptCacheError, match="masks.npy is unreadable"):
        PartitionStore.open(d)


def test_file_truncated_after_open_fails_the_read_naming_it(tmp_path, graph, part, hubs) -> None:
    d = _built(tmp_path, graph, part, hubs)
    store = PartitionStore.open(d)
    path = os.path.join(d, "x.npy")
    with open(path, "r+b") as f:
        f.truncate(1024)
    with pytest.raises(CorruptCacheError, match="x.npy is truncated since it was opened"):
        store.read_macro_batch([5])


# -------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"part": torch.zeros(599, dtype=torch.long)},
            ValueError,
            r"`part` to be an integer tensor of shape \[600\].*\(599,\)",
        ),
        ({"part": torch.zeros(600)}, ValueError, r"`part` to be an integer tensor.*torch.float32"),
        ({"part": [0] * 600}, TypeError, r"`part` to be a Tensor.*but got list"),
        (
            {"part": torch.full((600,), -1)},
            ValueError,
            r"ids in `part` to lie in \[0, num_parts\).*\[-1, -1\]",
        ),
        (
            {"part": torch.arange(600) % 4, "num_parts": 3},
            ValueError,
            r"ids in `part` to lie in \[0, 2\] \(num_parts = 3\).*\[0, 3\]",
        ),
        ({"hubs": torch.tensor([3, 600])}, ValueError, r"`hubs` to lie in \[0, 599\].*\[3, 600\]"),
        (
            {"hubs": torch.tensor([5, 3])},
            ValueError,
            r"`hubs` to be strictly increasing.*hubs\[0\] = 5 followed by hubs\[1\] = 3",
        ),
        ({"hubs": torch.tensor([3, 3])}, ValueError, r"strictly increasing.*no duplicates"),
        ({"hubs": torch.tensor([[3]])}, ValueError, r"`hubs` to be a 1-D integer tensor"),
        ({"chunk_size": 0}, ValueError, r"`chunk_size` to be a positive integer but got 0"),
    ],
)
def test_bad_inputs_are_named(tmp_path, graph, kwargs, error, match) -> None:
    args = {"part": torch.arange(600) % 3, "hubs": None, **kwargs}
    with pytest.raises(error, match=match) as err:
        build_partition_store(graph, tmp_path / "s", args.pop("part"), args.pop("hubs"), **args)
    assert str(err.value).split(":")[0] in ("write_partition_store", "build_partition_store")
    assert not os.path.exists(tmp_path / "s") or not os.listdir(tmp_path / "s")


@pytest.mark.parametrize(
    ("parts", "error", "match"),
    [
        (
            [6],
            ValueError,
            r"partition ids in \[0, 5\] \(num_parts = 6\) but got \[6\]; invalid: \[6\]",
        ),
        ([-1, 2], ValueError, r"invalid: \[-1\]"),
        ([], ValueError, r"non-empty sequence.*but got \[\]"),
        (
            [1, 2, 1],
            ValueError,
            r"distinct partition ids in \[0, 5\] but got \[1, 2, 1\]; duplicated: \[1\]",
        ),
        ([True], ValueError, r"invalid: \[True\]"),
        ([1.0], ValueError, r"invalid: \[1.0\]"),
        (3, TypeError, r"`parts` to be a sequence.*but got int"),
        (torch.tensor([0.5]), ValueError, r"`parts`.*torch.float32"),
    ],
)
def test_bad_parts_are_named(store, parts, error, match) -> None:
    with pytest.raises(error, match=match) as err:
        store.read_macro_batch(parts)
    assert str(err.value).startswith("PartitionStore.read_macro_batch: expected `parts`")
    with pytest.raises(error):
        store.macro_batch_bytes(parts)


def test_parts_as_a_tensor(store) -> None:
    a, b = store.read_macro_batch(torch.tensor([3, 0])), store.read_macro_batch([3, 0])
    assert torch.equal(a.node_ids, b.node_ids) and torch.equal(a.edge_index, b.edge_index)


# -------------------------------------------------------------- inside a data module
class StoreModule(CachedDataModule):
    def __init__(self, cache_dir: str, data: Data, part: torch.Tensor, hubs: torch.Tensor) -> None:
        super().__init__(cache_dir)
        self.data, self.part, self.hubs = data, part, hubs

    def fingerprint(self) -> dict:
        return {"format": 1, "k": int(self.part.max()) + 1}

    def build(self, writer: CacheWriter) -> dict:
        return write_partition_store(writer, self.data, self.part, self.hubs, fingerprint="fp")

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        self.store = PartitionStore(cache, fingerprint="fp")

    def loader(self, split: str) -> list:
        return [self.store.read_macro_batch([0])]


def test_written_by_a_cached_data_module(tmp_path, graph, part, hubs) -> None:
    dm = StoreModule(str(tmp_path), graph, part, hubs)
    dm.prepare_data()
    dm.setup("fit")
    (mb,) = dm.train_dataloader()
    assert macro_edges(mb) == expected_subgraph(graph, part, hubs, [0])
    os.remove(os.path.join(dm.cache_path(), "edges.npy"))
    with pytest.raises(CorruptCacheError, match=r"edges.npy is missing.*StoreModule.prepare_data"):
        StoreModule(str(tmp_path), graph, part, hubs).setup("fit")


# ------------------------------------------------------------- ids outside their range
def _overwrite(path: str, index: tuple[int, ...], value: int) -> None:
    """Change one entry of a ``.npy`` file in place (same size: the manifest still agrees)."""
    array = np.load(path, mmap_mode="r+")
    array[index] = value
    array.flush()
    del array


def _bucket_of_first_edge(directory: str, k: int = 6) -> tuple[int, int]:
    eptr = np.load(os.path.join(directory, "edge_ptr.npy"))
    return divmod(int(np.searchsorted(eptr, 0, side="right")) - 1, k)


def test_out_of_range_id_in_edges_is_named(tmp_path, graph, part, hubs) -> None:
    d = _built(tmp_path, graph, part, hubs)
    path = os.path.join(d, "edges.npy")
    p, q = _bucket_of_first_edge(d)
    _overwrite(path, (0, 1), 6000)  # a 600-node graph
    store = PartitionStore.open(d)
    with pytest.raises(CorruptCacheError, match=r"edges\.npy is .*6000") as err:
        store.read_macro_batch(sorted({p, q}))
    assert err.value.path == path and "build_partition_store" in str(err.value)


def test_edge_id_of_a_partition_outside_its_bucket_is_named(tmp_path, graph, part, hubs) -> None:
    # In [0, num_nodes) but not in the bucket's partition: a wrong row of the batch.
    d = _built(tmp_path, graph, part, hubs)
    path = os.path.join(d, "edges.npy")
    p, q = _bucket_of_first_edge(d)
    other = next(r for r in range(6) if r not in (p, q))
    ptr = np.load(os.path.join(d, "part_ptr.npy"))
    _overwrite(path, (0, 0), int(ptr[other]))
    store = PartitionStore.open(d)
    with pytest.raises(CorruptCacheError, match=rf"edges\.npy is .*{int(ptr[other])}") as err:
        store.read_macro_batch(sorted({p, q}))
    assert err.value.path == path


def test_out_of_range_ids_in_hub_edges_and_node_ids_are_named(tmp_path, graph, part, hubs) -> None:
    d = _built(tmp_path, graph, part, hubs)
    hptr = np.load(os.path.join(d, "hub_edge_ptr.npy"))
    p = (int(np.searchsorted(hptr, 0, side="right")) - 1) // 2
    _overwrite(os.path.join(d, "hub_edges.npy"), (0, 1), 6000)
    with pytest.raises(CorruptCacheError, match=r"hub_edges\.npy is .*6000"):
        PartitionStore.open(d).read_macro_batch([p])

    d = _built(tmp_path / "b", graph, part, hubs)
    _overwrite(os.path.join(d, "node_ids.npy"), (0,), 6000)
    store = PartitionStore.open(d)
    with pytest.raises(CorruptCacheError, match=r"node_ids\.npy is .*6000"):
        store.read_macro_batch([0])
    with pytest.raises(CorruptCacheError, match=r"node_ids\.npy is .*6000"):
        _ = store.node_ids


@pytest.mark.parametrize(
    ("name", "index", "value"),
    [
        ("hub_store_ids.npy", (0,), 6000),
        ("hub_ids.npy", (0,), 6000),
        ("hub_hub_edges.npy", (0, 1), 6000),
        ("edge_ptr.npy", (1,), 10**6),  # offsets that are not non-decreasing
        ("hub_edge_ptr.npy", (1,), -5),
    ],
)
def test_out_of_range_ids_read_at_open_are_named(
    tmp_path, graph, part, hubs, name, index, value
) -> None:
    d = _built(tmp_path, graph, part, hubs)
    path = os.path.join(d, name)
    _overwrite(path, index, value)
    with pytest.raises(CorruptCacheError, match=rf"{name} is .*{value}") as err:
        PartitionStore.open(d)
    assert err.value.path == path


@pytest.mark.parametrize(
    ("name", "index", "value"),
    [
        ("csc_indices.npy", (7,), 6000),
        ("csc_indices.npy", (0,), -1),
        ("csc_indptr.npy", (5,), 10**6),
    ],
)
def test_out_of_range_ids_of_the_whole_graph_csc_are_named(
    tmp_path, graph, part, hubs, name, index, value
) -> None:
    d = _built(tmp_path, graph, part, hubs)
    path = os.path.join(d, name)
    _overwrite(path, index, value)
    store = PartitionStore.open(d)
    with pytest.raises(CorruptCacheError, match=rf"{name} is .*{value}") as err:
        store.csc()
    assert err.value.path == path
