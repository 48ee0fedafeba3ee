"""Out-of-core preparation: the memory budget, the on-disk CSC, and the partition store built
from a graph's arrays on disk (never loaded whole), byte for byte the in-memory store."""

from __future__ import annotations

import json
import os

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from numpy.lib.format import open_memmap
from torch_geometric.data import Data
from torch_geometric.nn.models import GraphSAGE

from lightgraph.data import (
    GraphDataset,
    MultistageDataModule,
    NeighborSamplingDataModule,
    PartitionStoreDataModule,
    SyntheticGraph,
)
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.data.lightning import build_store
from lightgraph.data.loader import LargeBatchSampler, PartitionBatchSampler
from lightgraph.data.partition.out_of_core import (
    add_key_counts,
    on_disk_csc,
    validate_on_disk_graph,
)
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.models import MiniBatchNodeClassifier
from lightgraph.utilities.memory import (
    cgroup_memory_limit,
    check_memory_budget,
    default_memory_budget,
    resident_memory,
    rows_per_chunk,
)

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
NAMES = ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask")


# ------------------------------------------------------------------- the memory budget
def _fake_root(tmp_path, cgroup: str, files: dict[str, str], ram: int = 16 * GIB) -> str:
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/meminfo").write_text(f"MemTotal:       {ram // 1024} kB\nMemFree: 1 kB\n")
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text + "\n")
    return str(root)


def test_cgroup_v2_limit_is_the_smallest_on_the_path_to_the_root(tmp_path):
    root = _fake_root(
        tmp_path,
        "0::/user.slice/job.scope\n",
        {
            "sys/fs/cgroup/user.slice/job.scope/memory.max": "max",
            "sys/fs/cgroup/user.slice/memory.max": str(2 * GIB),
            "sys/fs/cgroup/memory.max": str(8 * GIB),
        },
    )
    assert cgroup_memory_limit(root) == 2 * GIB
    assert default_memory_budget(root) == GIB  # half the limit


def test_the_budget_leaves_out_what_the_process_already_holds(tmp_path):
    root = _fake_root(
        tmp_path,
        "0::/job\n",
        {"sys/fs/cgroup/job/memory.max": str(GIB)},
    )
    assert default_memory_budget(root) == GIB // 2
    # A process that imported torch holds ~0.7 GiB of its 1 GiB limit: half of the rest.
    with open(os.path.join(root, "proc/self/status"), "w") as f:
        f.write(f"Name: python\nVmRSS:\t{700 * MIB // KIB} kB\n")
    assert default_memory_budget(root) == (GIB - 700 * MIB) // 2


def test_mapped_file_pages_do_not_count_against_the_budget(tmp_path):
    """A pass over a memory-mapped graph makes its file pages resident (RssFile): they are
    page cache the limit reclaims, so only anonymous and shared memory is left out. With
    VmRSS a 1 GiB limit had left the minimum budget of 1 MiB."""
    root = _fake_root(tmp_path, "0::/job\n", {"sys/fs/cgroup/job/memory.max": str(GIB)})
    with open(os.path.join(root, "proc/self/status"), "w") as f:
        f.write(
            f"Name: python\nVmRSS:\t{1100 * MIB // KIB} kB\nRssAnon:\t{500 * MIB // KIB} kB\n"
            f"RssFile:\t{580 * MIB // KIB} kB\nRssShmem:\t{20 * MIB // KIB} kB\n"
        )
    assert resident_memory(root) == 520 * MIB
    assert default_memory_budget(root) == (GIB - 520 * MIB) // 2


@pytest.mark.parametrize(
    "num_keys,size", [(50, 1 << 20), (5000, 300), (0, 1 << 20), (400_000, 1 << 17)]
)
def test_add_key_counts_is_a_bincount_into_a_view(num_keys, size):
    gen = np.random.default_rng(num_keys)
    keys = gen.integers(0, size, num_keys)
    base = gen.integers(0, 9, size + 1)
    expected = base.copy()
    expected[1:] += np.bincount(keys, minlength=size)
    add_key_counts(base[1:], keys)  # a view, as the CSC's indptr[1:]
    np.testing.assert_array_equal(base, expected)


def test_cgroup_v1_limit_inside_a_container_and_hybrid_mounts(tmp_path):
    # The path /proc/self/cgroup names does not exist in the container's view: the walk up
    # ends at the mounted root, the container's limit. The unified (v2) hierarchy of a
    # hybrid mount has no memory controller.
    root = _fake_root(
        tmp_path,
        "9:pids:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n",
        {
            "sys/fs/cgroup/memory/memory.limit_in_bytes": str(GIB),
            "sys/fs/cgroup/unified/cgroup.procs": "1",
        },
    )
    assert cgroup_memory_limit(root) == GIB
    assert default_memory_budget(root) == GIB // 2


@pytest.mark.parametrize(
    "cgroup,files",
    [
        # cgroup v1 without a limit reads as a huge number
        ("4:memory:/\n", {"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"}),
        # a limit above the physical memory is no limit
        ("0::/\n", {"sys/fs/cgroup/memory.max": str(64 * GIB)}),
        ("0::/a\n", {"sys/fs/cgroup/a/memory.max": "max"}),
        ("", {}),  # no cgroup file at all
    ],
)
def test_without_a_limit_the_budget_is_a_quarter_of_the_ram(tmp_path, cgroup, files):
    root = _fake_root(tmp_path, cgroup, files, ram=16 * GIB)
    assert cgroup_memory_limit(root) is None
    assert default_memory_budget(root) == 4 * GIB


def test_memory_budget_checks_and_chunks():
    assert check_memory_budget("M", 4096) == 4096
    assert check_memory_budget("M", None) == default_memory_budget() > 0
    for bad in (0, -1, 1.5, True, "1G"):
        with pytest.raises(ValueError, match=r"M: expected `memory_budget` to be a positive"):
            check_memory_budget("M", bad)
    assert rows_per_chunk(1000, 10) == 100
    assert rows_per_chunk(1000, 10, reserved=600) == 40
    assert rows_per_chunk(1000, 10, reserved=5000) == 25  # a quarter of the budget
    assert rows_per_chunk(1000, 10, cap=7) == 7
    assert rows_per_chunk(5, 10) == 1


# ------------------------------------------------------------------------- the CSC
def _npy(path, array: np.ndarray) -> np.ndarray:
    """``array`` written with ``open_memmap`` and opened read-only memory-mapped."""
    out = open_memmap(str(path), mode="w+", dtype=array.dtype, shape=array.shape)
    out[...] = array
    out.flush()
    del out
    return np.load(str(path), mmap_mode="r")


def _messy_edges(num_nodes: int, num_edges: int, seed: int) -> np.ndarray:
    """Repeated edges, self-loops, nodes without in-edges, one node with many."""
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, num_nodes, (2, num_edges))
    ei[1][ei[1] < 10] = 10  # nodes 0..9 have no in-edges
    ei[1, : num_edges // 5] = 11  # node 11: a fifth of all edges
    ei[:, -50:] = ei[:, :50]  # repeats
    ei[1, 100:150] = ei[0, 100:150]  # self-loops
    return ei


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("budget", [1, 2 * KIB, 64 * KIB, None])
def test_on_disk_csc_equals_to_csc(tmp_path, dtype, budget):
    n = 300
    ei = _messy_edges(n, 4000, seed=1).astype(dtype)
    want_ptr, want_idx = to_csc(torch.from_numpy(ei.astype(np.int64)), n)
    indptr, indices = on_disk_csc(_npy(tmp_path / "ei.npy", ei), n, tmp_path, budget)
    assert isinstance(indices, np.memmap) and indices.dtype == np.int32
    assert indptr.dtype == np.int64
    np.testing.assert_array_equal(indptr, want_ptr.numpy())
    np.testing.assert_array_equal(indices, want_idx.numpy())


def test_on_disk_csc_of_a_graph_without_edges_and_bad_input(tmp_path):
    ei = np.zeros((2, 0), dtype=np.int64)
    indptr, indices = on_disk_csc(ei, 4, tmp_path, 4 * KIB)
    np.testing.assert_array_equal(indptr, np.zeros(5))
    assert indices.shape == (0,)
    bad = np.array([[0, 1, 2], [1, 4, 0]])
    with pytest.raises(ValueError, match=r"\[0, 3\].*edge 1 is \(1, 4\)"):
        on_disk_csc(bad, 4, tmp_path)
    with pytest.raises(ValueError, match="`edge_index` to be an integer array of shape"):
        on_disk_csc(np.zeros((3, 2), np.int64), 4, tmp_path)
    with pytest.raises(ValueError, match="`directory` to be an existing directory"):
        on_disk_csc(ei, 4, tmp_path / "missing")


# ------------------------------------------------------------------ graphs on disk
class ArraysGraph(GraphDataset):
    """One graph's ``.npy`` files: through :meth:`on_disk` (memory-mapped; ``load()``
    fails, so any whole-graph load is caught) or through :meth:`load` (read whole)."""

    def __init__(self, root, num_classes: int, multilabel: bool, on_disk: bool) -> None:
        self.root, self._classes, self._multilabel = str(root), num_classes, multilabel
        self._on_disk = on_disk

    @property
    def num_features(self) -> int:
        return int(np.load(os.path.join(self.root, "x.npy"), mmap_mode="r").shape[1])

    @property
    def num_classes(self) -> int:
        return self._classes

    @property
    def multilabel(self) -> bool:
        return self._multilabel

    def fingerprint(self) -> str:
        return f"ArraysGraph({self.root})"  # the same graph: the same store either way

    def _arrays(self, mmap: bool) -> dict[str, np.ndarray]:
        mode = "r" if mmap else None
        return {k: np.load(os.path.join(self.root, f"{k}.npy"), mmap_mode=mode) for k in NAMES}

    def load(self) -> Data:
        if self._on_disk:
            raise AssertionError("the graph on disk was loaded whole")
        arrays = {k: torch.from_numpy(v) for k, v in self._arrays(mmap=False).items()}
        arrays["edge_index"] = arrays["edge_index"].long()
        return Data(**arrays)

    def on_disk(self) -> OnDiskGraph | None:
        if not self._on_disk:
            return None
        arrays = self._arrays(mmap=True)
        return OnDiskGraph(
            num_nodes=int(arrays["x"].shape[0]),
            num_classes=self._classes,
            multilabel=self._multilabel,
            **arrays,
        )


def _write_graph(root, multilabel: bool = False, num_nodes: int = 600) -> tuple:
    """A synthetic graph as ``.npy`` files: ids int32, features float16 (both as a user's
    files may have them), edges shuffled."""
    source = SyntheticGraph(num_nodes=num_nodes, avg_degree=6, num_features=6, seed=1)
    data = source.load()
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    ei = data.edge_index.numpy()[:, rng.permutation(data.edge_index.size(1))]
    y = data.y.numpy()
    classes = source.num_classes
    if multilabel:
        y = (rng.random((num_nodes, 5)) < 0.3).astype(np.float32)
        classes = 5
    arrays = {
        "edge_index": ei.astype(np.int32),
        "x": data.x.numpy().astype(np.float16),
        "y": y,
        **{k: getattr(data, k).numpy() for k in NAMES[3:]},
    }
    for name, array in arrays.items():
        _npy(os.path.join(root, f"{name}.npy"), np.ascontiguousarray(array))
    return (
        ArraysGraph(root, classes, multilabel, on_disk=True),
        ArraysGraph(root, classes, multilabel, on_disk=False),
    )


def _store_files(path: str, ignore: tuple[str, ...] = ("build_seconds", "build_stages")) -> dict:
    """Every file's bytes, ``meta.json`` parsed without the keys in ``ignore``."""
    files = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            files[name] = f.read()
    meta = json.loads(files.pop("meta.json"))
    for key in ignore:
        meta.pop(key, None)  # timings (and the on-disk build's stage records)
    return {"files": files, "meta": meta}


@pytest.mark.parametrize(
    "partitioner,hub_fraction,multilabel",
    [("gap", 0.05, False), ("metis", 0.02, False), ("random", 0.05, True)],
)
def test_store_from_disk_is_the_in_memory_store_byte_for_byte(
    tmp_path, partitioner, hub_fraction, multilabel
):
    on_disk, in_memory = _write_graph(tmp_path / "graph", multilabel)
    stores = {}
    for name, dataset in (("disk", on_disk), ("memory", in_memory)):
        dm = PartitionStoreDataModule(
            dataset,
            num_parts=4,
            partitioner=partitioner,
            hub_fraction=hub_fraction,
            cache_dir=str(tmp_path / name),
            memory_budget=256 * KIB,
        )
        dm.prepare_data()
        # nothing else in the cache directory: the work files are gone
        assert os.listdir(tmp_path / name) == [os.path.basename(dm.cache_path())]
        stores[name] = _store_files(dm.cache_path())
    assert stores["disk"]["meta"]["num_hubs"] > 0
    assert stores["disk"]["files"].keys() == stores["memory"]["files"].keys()
    for name, content in stores["memory"]["files"].items():
        assert stores["disk"]["files"][name] == content, name
    # The edge chunk is a build detail that differs: from disk the per-node arrays are
    # memory-mapped work files, outside the memory budget, and the chunks get a share.
    disk_meta, memory_meta = (dict(stores[k]["meta"]) for k in ("disk", "memory"))
    disk_meta.pop("chunk_size"), memory_meta.pop("chunk_size")
    assert disk_meta == memory_meta


def test_a_small_memory_budget_gives_the_same_store(tmp_path):
    on_disk, _ = _write_graph(tmp_path / "graph")
    stores, chunks = {}, {}
    for budget in (64 * KIB, GIB):
        store = build_store(
            on_disk,
            cache_dir=str(tmp_path / str(budget)),
            num_parts=8,
            hub_fraction=0.05,
            memory_budget=budget,
        )
        with open(os.path.join(store.directory, "meta.json")) as f:
            chunks[budget] = json.load(f)["chunk_size"]
        stores[budget] = _store_files(
            store.directory, ignore=("build_seconds", "build_stages", "chunk_size", "memory_budget")
        )
    num_edges = stores[GIB]["meta"]["num_edges"]
    assert chunks[64 * KIB] * 10 < num_edges <= chunks[GIB]  # many chunks against one
    assert stores[64 * KIB] == stores[GIB]


def test_node_rows_distributed_over_many_windows_give_the_same_store(tmp_path, monkeypatch):
    """The on-disk node rows and edge outputs go through spill files, one per window of
    store rows or keys: with several windows, several passes and chunks of a few rows the
    store equals the in-memory one byte for byte."""
    from lightgraph.utilities import spill

    on_disk, data = _write_graph(tmp_path / "graph")
    windows = []
    real_windows = spill.KeyedSpill.windows

    def count_windows(self, p, owner="KeyedSpill"):
        for first, stop, values in real_windows(self, p, owner):
            windows.append((self.name, p, first))
            yield first, stop, values

    monkeypatch.setattr(spill.KeyedSpill, "windows", count_windows)
    kw = {"num_parts": 8, "hub_fraction": 0.05, "memory_budget": 16 * KIB}
    disk = build_store(on_disk, cache_dir=str(tmp_path / "disk"), **kw)
    memory = build_store(data, cache_dir=str(tmp_path / "memory"), **kw)
    assert len({w for w in windows if w[0] == "rows"}) >= 3  # of 600 store rows
    ignore = ("build_seconds", "build_stages", "chunk_size")  # the chunk: a build detail
    assert _store_files(disk.directory, ignore) == _store_files(memory.directory, ignore)
    # a budget of 4 KiB: many windows, and with at most 4 spill files open at once,
    # several passes over the edges and the rows
    windows.clear()
    monkeypatch.setattr(spill, "MAX_OPEN_FILES", 4)
    tiny = build_store(
        on_disk, cache_dir=str(tmp_path / "tiny"), **{**kw, "memory_budget": 4 * KIB}
    )
    assert len({w for w in windows if w[0] == "csc"}) > 10
    assert max(p for name, p, _ in windows if name == "rows") >= 2
    assert max(p for name, p, _ in windows if name == "csc") >= 2
    files, ref = _store_files(tiny.directory), _store_files(memory.directory)
    assert files["files"] == ref["files"]


def test_bad_arrays_on_disk_are_named(tmp_path):
    on_disk, _ = _write_graph(tmp_path / "graph", num_nodes=200)
    graph = on_disk.on_disk()
    assert validate_on_disk_graph(graph, on_disk.num_classes, False, 4 * KIB) >= 1
    ei = np.array(graph.edge_index)
    ei[1, 777] = 200
    bad = OnDiskGraph(**{**graph.__dict__, "edge_index": ei})
    with pytest.raises(ValueError, match=r"\[0, 199\].*edge 777"):
        validate_on_disk_graph(bad, memory_budget=4 * KIB)
    bad = OnDiskGraph(**{**graph.__dict__, "y": np.array(graph.y) + 100})
    with pytest.raises(ValueError, match="class labels in `y`"):
        validate_on_disk_graph(bad, num_classes=on_disk.num_classes)
    bad = OnDiskGraph(**{**graph.__dict__, "val_mask": np.array(graph.val_mask)[:-1]})
    with pytest.raises(ValueError, match="`val_mask` to be a boolean array of shape"):
        validate_on_disk_graph(bad)
    bad = OnDiskGraph(**{**graph.__dict__, "x": np.array(graph.x).astype(np.int8)})
    with pytest.raises(ValueError, match="`x` to be a 2-D floating point array"):
        validate_on_disk_graph(bad)


# -------------------------------------------- the baselines train from a graph on disk
def _fit(dm) -> pl.Trainer:
    torch.manual_seed(0)
    gnn = GraphSAGE(dm.num_features, 16, num_layers=2, out_channels=dm.num_classes)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(MiniBatchNodeClassifier(gnn, dm.num_classes, lr=1e-2), dm)
    return trainer


@pytest.mark.parametrize(
    "make",
    [
        lambda ds, d: NeighborSamplingDataModule(ds, [4, 4], 64, "memory", cache_dir=d),
        lambda ds, d: NeighborSamplingDataModule(ds, [4, 4], 64, "mmap", cache_dir=d),
        lambda ds, d: MultistageDataModule(
            ds, LargeBatchSampler(ratio=0.5), [4, 4], 64, cache_dir=d
        ),
        lambda ds, d: MultistageDataModule(
            ds, PartitionBatchSampler(4, 2, history=False), [4, 4], 64, cache_dir=d
        ),
    ],
    ids=["ns-mem", "ns-ext", "joestar-lbs", "joestar-pbs"],
)
def test_baselines_train_from_a_graph_on_disk_without_loading_it(tmp_path, make):
    on_disk, _ = _write_graph(tmp_path / "graph")
    dm = make(on_disk, str(tmp_path / "cache"))
    trainer = _fit(dm)
    assert trainer.global_step == 3 and "val_acc" in trainer.callback_metrics
    # the graph the module trains from is the graph on disk (store ids -> original ids)
    indptr, indices, x, y = dm.graph_arrays()
    ids = dm.store.node_ids.long()
    graph = on_disk.on_disk()
    np.testing.assert_array_equal(x.numpy(), np.asarray(graph.x)[ids.numpy()].astype(np.float32))
    np.testing.assert_array_equal(y.numpy(), np.asarray(graph.y)[ids.numpy()])
    if getattr(dm, "storage", None) == "mmap":
        assert dm.memory_mapped(x)  # NS-Ext samples from the store's files
    deg = (indptr[1:] - indptr[:-1]).long()
    dst = ids[torch.repeat_interleave(torch.arange(ids.numel()), deg)]
    got = sorted(zip(ids[indices.long()].tolist(), dst.tolist(), strict=True))
    ei = np.asarray(graph.edge_index)
    assert got == sorted(zip(ei[0].tolist(), ei[1].tolist(), strict=True))


def test_hub_selection_reads_the_on_disk_csc(tmp_path, monkeypatch):
    """The build hands the hub selection the CSC it built on disk (to_csc's, of the
    original ids), the training mask to exclude and its memory budget."""
    import lightgraph.data.lightning.partition_store_data_module as module
    from lightgraph.data.partition.hubs import select_hubs

    on_disk, in_memory = _write_graph(tmp_path / "graph")
    data = in_memory.load()
    calls = []

    def reference(indptr, indices, num_nodes, train_mask, fraction, walk_length, **kwargs):
        want_ptr, want_idx = to_csc(data.edge_index, num_nodes)
        assert isinstance(indices, np.memmap)
        np.testing.assert_array_equal(indptr, want_ptr.numpy())
        np.testing.assert_array_equal(indices, want_idx.numpy())
        np.testing.assert_array_equal(kwargs["exclude"], data.train_mask.numpy())
        calls.append(kwargs["memory_budget"])
        mask = torch.from_numpy(np.array(train_mask))
        hubs = select_hubs(data.edge_index, num_nodes, mask, fraction, walk_length, exclude=mask)
        return hubs.numpy()

    monkeypatch.setattr(module, "select_hubs_on_disk", reference)
    store = build_store(
        on_disk, str(tmp_path / "disk"), 4, "random", hub_fraction=0.05, memory_budget=8 * KIB
    )
    assert calls == [6 * KIB]  # the stage's chunks: STAGE_CHUNK_SHARE of the budget
    want = select_hubs(data.edge_index, 600, data.train_mask, 0.05, exclude=data.train_mask)
    assert torch.equal(store.hubs, want)


def test_writer_and_csc_memory_is_bounded_by_nodes_and_budget(tmp_path, monkeypatch):
    """E >> N: what the writer (and the CSC builder) allocates (NumPy, traced) stays below ``64 N + 2 budget``
    plus a constant, far below one E-sized id array; without a budget (chunks of
    ``DEFAULT_CHUNK_SIZE`` edges) it exceeds that bound (so the check can fail). The cache
    manifest's SHA-1 reads (a constant 1 MiB buffer) are left out."""
    import tracemalloc

    import lightgraph.data.store.cache as cache
    from lightgraph.data import write_partition_store
    from lightgraph.data.store import CacheWriter

    monkeypatch.setattr(cache, "file_sha1", lambda path: "")
    n, e, budget = 1000, 200_000, 128 * KIB
    rng = np.random.default_rng(0)
    graph = OnDiskGraph(
        num_nodes=n,
        edge_index=_npy(tmp_path / "ei.npy", rng.integers(0, n, (2, e)).astype(np.int32)),
        x=_npy(tmp_path / "x.npy", rng.random((n, 4), dtype=np.float32)),
        y=_npy(tmp_path / "y.npy", rng.integers(0, 3, n)),
        train_mask=_npy(tmp_path / "tr.npy", rng.random(n) < 0.5),
        val_mask=_npy(tmp_path / "va.npy", np.zeros(n, bool)),
        test_mask=_npy(tmp_path / "te.npy", np.ones(n, bool)),
        num_classes=3,
    )
    part, hubs = torch.from_numpy(rng.integers(0, 8, n)), torch.arange(0, n, 40)
    bound = 64 * n + 2 * budget + 64 * KIB
    peaks = []
    for name, memory_budget in (("bounded", budget), ("unbounded", None)):
        os.makedirs(tmp_path / name)
        writer = CacheWriter(str(tmp_path / name))
        tracemalloc.start()
        try:
            write_partition_store(writer, graph, part, hubs, memory_budget=memory_budget)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[0] < bound < 8 * e, (peaks, bound)
    assert peaks[1] > bound, (peaks, bound)
    # the CSC: the same bound
    peaks = []
    for name, memory_budget in (("csc-bounded", budget), ("csc-unbounded", None)):
        os.makedirs(tmp_path / name)
        tracemalloc.start()
        try:
            on_disk_csc(graph.edge_index, n, tmp_path / name, memory_budget)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[0] < bound < peaks[1], (peaks, bound)
