"""NpyGraph: a graph brought as NumPy files, read memory-mapped, checked and fingerprinted."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from lightgraph.data import (
    MacroBatchDataModule,
    MultistageDataModule,
    NeighborSamplingDataModule,
    NpyGraph,
    SyntheticGraph,
    from_pyg,
)
from lightgraph.data.datasets import npy_graph as npy_graph_module
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.data.loader import LargeBatchSampler, PartitionBatchSampler

KEYS = ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")
GRAPH = SyntheticGraph(num_nodes=200, avg_degree=4, num_features=5, seed=3)


def _assert_same_graph(got, want) -> None:
    """Every standard attribute equal in value, dtype and shape (no tolerance)."""
    for key in KEYS:
        a, b = getattr(got, key), getattr(want, key)
        assert a.dtype == b.dtype, key
        assert torch.equal(a, b), key


def _save_graph(root, n=30, e=80, f=4, c=3, seed=0, **override) -> dict[str, np.ndarray]:
    """A graph written with plain ``numpy.save``, as a user would (``override`` replaces arrays)."""
    rng = np.random.default_rng(seed)
    arrays = {
        "edge_index": rng.integers(0, n, size=(2, e), dtype=np.int64),
        "x": rng.standard_normal((n, f)).astype(np.float32),
        "y": rng.integers(0, c, size=n, dtype=np.int64),
        "train_mask": rng.random(n) < 0.5,
        "val_mask": rng.random(n) < 0.2,
        "test_mask": rng.random(n) < 0.2,
    }
    arrays.update(override)
    os.makedirs(root, exist_ok=True)
    for name, value in arrays.items():
        if value is not None:
            np.save(os.path.join(root, f"{name}.npy"), value)
    return arrays


# ------------------------------------------------------------------------- round trips
def test_from_pyg_round_trip_equals_the_in_memory_graph(tmp_path):
    data = GRAPH.load()
    graph = from_pyg(data, str(tmp_path / "g"), chunk_bytes=256)  # many chunks per array
    assert isinstance(graph, NpyGraph)
    _assert_same_graph(NpyGraph(str(tmp_path / "g")).load(), data)
    assert graph.num_features == 5 and graph.num_classes == GRAPH.num_classes
    assert graph.multilabel is False
    assert (graph.num_nodes, graph.num_edges) == (200, data.edge_index.size(1))

    disk = graph.on_disk()
    assert isinstance(disk, OnDiskGraph)
    assert disk.num_nodes == 200 and disk.num_classes == GRAPH.num_classes
    assert not disk.multilabel
    for key in KEYS:
        array = getattr(disk, key)
        assert isinstance(array, np.memmap), key  # memory-mapped, not loaded
        assert not array.flags.writeable, key
        np.testing.assert_array_equal(array, getattr(data, key).numpy())


def test_plain_numpy_files_load_as_pyg_tensors(tmp_path):
    arrays = _save_graph(tmp_path)
    data = NpyGraph(str(tmp_path)).load()
    assert data.edge_index.dtype == torch.long and data.x.dtype == torch.float32
    assert data.y.dtype == torch.long
    for key in KEYS:
        np.testing.assert_array_equal(getattr(data, key).numpy(), arrays[key])


def test_int32_edges_and_float16_features(tmp_path):
    arrays = _save_graph(tmp_path, n=40, e=100)
    np.save(tmp_path / "edge_index.npy", arrays["edge_index"].astype(np.int32))
    np.save(tmp_path / "x.npy", arrays["x"].astype(np.float16))
    graph = NpyGraph(str(tmp_path))
    data = graph.load()
    assert data.edge_index.dtype == torch.long and data.x.dtype == torch.float32
    np.testing.assert_array_equal(data.edge_index.numpy(), arrays["edge_index"])
    np.testing.assert_array_equal(data.x.numpy(), arrays["x"].astype(np.float16).astype(np.float32))
    disk = graph.on_disk()
    assert disk.edge_index.dtype == np.int32 and disk.x.dtype == np.float16


def test_multilabel_round_trip(tmp_path):
    source = SyntheticGraph(num_nodes=120, avg_degree=3, num_features=4, multilabel=True, seed=1)
    data = source.load()
    graph = from_pyg(data, str(tmp_path), chunk_bytes=100)
    assert graph.multilabel and graph.num_classes == source.num_classes
    _assert_same_graph(graph.load(), data)
    disk = graph.on_disk()
    assert disk.multilabel and disk.y.shape == (120, source.num_classes)


def test_num_classes_from_labels_meta_json_and_multilabel_width(tmp_path):
    _save_graph(tmp_path / "a", y=np.array([0, 4, 2] * 10, dtype=np.int64))
    assert NpyGraph(str(tmp_path / "a")).num_classes == 5  # y.max() + 1
    _save_graph(tmp_path / "b", y=np.array([0, 4, 2] * 10, dtype=np.int64))
    (tmp_path / "b" / "meta.json").write_text(json.dumps({"name": "mine", "num_classes": 7}))
    graph = NpyGraph(str(tmp_path / "b"))
    assert graph.num_classes == 7 and graph.name == "mine"
    labels = (np.arange(30 * 6).reshape(30, 6) % 4 == 0).astype(np.float32)
    _save_graph(tmp_path / "c", y=labels)
    assert NpyGraph(str(tmp_path / "c")).num_classes == 6
    assert NpyGraph(str(tmp_path / "c")).multilabel


def test_sizes_come_from_the_headers_without_reading_the_arrays(tmp_path, monkeypatch):
    _save_graph(tmp_path, n=30, f=4)
    (tmp_path / "meta.json").write_text(json.dumps({"num_classes": 3}))

    def fail(*args, **kwargs):
        raise AssertionError("an array was opened")

    monkeypatch.setattr(np, "load", fail)
    monkeypatch.setattr(np, "memmap", fail)
    graph = NpyGraph(str(tmp_path))
    assert (graph.num_features, graph.num_classes, graph.multilabel) == (4, 3, False)
    assert graph.num_nodes == 30 and graph.num_edges == 80


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("missing", ["edge_index", "x", "y", "train_mask", "test_mask"])
def test_a_missing_file_names_it_and_the_layout(tmp_path, missing):
    _save_graph(tmp_path, **{missing: None})
    with pytest.raises(FileNotFoundError) as info:
        NpyGraph(str(tmp_path))
    message = str(info.value)
    assert f"`{missing}.npy`" in message and str(tmp_path) in message
    for line in (
        "edge_index.npy  int32 or int64",
        "x.npy  float16 or float32",
        "y.npy  int64 [N], or float16/float32 0/1 [N, C]",
        "train_mask.npy  bool [N]",
        "val_mask.npy  bool [N]",
        "test_mask.npy  bool [N]",
    ):
        assert " ".join(line.split()) in " ".join(message.split()), line


def test_a_missing_root_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"(?s)no directory .*nowhere.*edge_index.npy"):
        NpyGraph(str(tmp_path / "nowhere"))


@pytest.mark.parametrize(
    "override,match",
    [
        (
            {"edge_index": np.zeros((2, 5), np.float32)},
            r"`edge_index.npy`.*int32 or int64.*float32",
        ),
        ({"edge_index": np.zeros((3, 5), np.int64)}, r"`edge_index.npy`.*\[2, E\].*\(3, 5\)"),
        ({"edge_index": np.zeros(5, np.int64)}, r"`edge_index.npy`.*2-D.*\(5,\)"),
        ({"x": np.zeros((30, 4), np.float64)}, r"`x.npy`.*float16 or float32.*float64"),
        ({"x": np.zeros(30, np.float32)}, r"`x.npy`.*2-D \[N, F\].*\(30,\)"),
        ({"y": np.zeros(30, np.int32)}, r"`y.npy`.*int64.*int32"),
        ({"y": np.zeros((30, 2, 2), np.float32)}, r"`y.npy`.*\(30, 2, 2\)"),
        ({"y": np.zeros((30, 2), np.int64)}, r"`y.npy`.*float16 or float32.*int64"),
        ({"train_mask": np.zeros(30, np.uint8)}, r"`train_mask.npy`.*bool.*uint8"),
        ({"x": np.zeros((31, 4), np.float32)}, r"`y.npy` has 30 rows.*`x.npy` has 31"),
        ({"val_mask": np.zeros(29, bool)}, r"`val_mask.npy` has 29 rows.*`x.npy` has 30"),
        ({"x": np.zeros((0, 4), np.float32)}, r"`x.npy`.*at least one node"),
        ({"x": np.zeros((30, 0), np.float32)}, r"`x.npy`.*one feature"),
    ],
)
def test_wrong_dtype_shape_or_size_is_named(tmp_path, override, match):
    _save_graph(tmp_path, **override)
    with pytest.raises(ValueError, match=match):
        NpyGraph(str(tmp_path))


def test_a_truncated_file_is_named(tmp_path):
    _save_graph(tmp_path)
    path = tmp_path / "x.npy"
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 5)
    with pytest.raises(ValueError, match=rf"`x.npy`.*truncated.*{size - 5} bytes.*{size}"):
        NpyGraph(str(tmp_path))


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b"GARBAGE!" + b[8:],  # bad magic
        lambda b: b[:10] + b"\x00" * 50 + b[60:],  # bad header text
        lambda b: b[:20],  # cut inside the header
        lambda b: b"",  # empty file
    ],
)
def test_a_corrupted_header_is_named(tmp_path, damage):
    _save_graph(tmp_path)
    path = tmp_path / "edge_index.npy"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=r"`edge_index.npy` is not a readable .npy file") as info:
        NpyGraph(str(tmp_path))
    assert info.value.__cause__ is not None  # numpy's own error is kept


def test_trailing_bytes_are_named(tmp_path):
    _save_graph(tmp_path)
    with open(tmp_path / "y.npy", "ab") as f:
        f.write(b"\x00" * 16)
    with pytest.raises(ValueError, match=r"`y.npy`.*16 bytes more than its header"):
        NpyGraph(str(tmp_path))


def test_edge_ids_out_of_range_are_found_in_bounded_chunks(tmp_path, monkeypatch):
    edges = np.zeros((2, 1000), np.int64)
    edges[1, 777] = 30  # n = 30: one past the last node
    _save_graph(tmp_path, edge_index=edges)
    graph = NpyGraph(str(tmp_path))  # headers only: not noticed yet
    seen = []
    real_check = npy_graph_module._column_range

    def spy(array, lo, hi):
        seen.append(hi - lo)
        return real_check(array, lo, hi)

    monkeypatch.setattr(npy_graph_module, "_column_range", spy)
    with pytest.raises(ValueError, match=r"`edge_index.npy`.*\[0, 29\].*column 777.*30"):
        graph.check_edges(chunk_bytes=1600)  # 100 columns of 2 x int64
    assert max(seen) == 100
    with pytest.raises(ValueError, match=r"column 777"):
        graph.on_disk()
    with pytest.raises(ValueError, match=r"edge_index"):
        graph.load()
    edges[1, 777] = -1
    _save_graph(tmp_path, edge_index=edges)
    with pytest.raises(ValueError, match=r"column 777.*-1"):
        NpyGraph(str(tmp_path)).check_edges()


def test_labels_are_checked_against_num_classes(tmp_path):
    _save_graph(tmp_path, y=np.array([0, 1, 6] * 10, dtype=np.int64))
    (tmp_path / "meta.json").write_text(json.dumps({"num_classes": 3}))
    with pytest.raises(ValueError, match=r"`y.npy`.*\[0, 2\].*6"):
        NpyGraph(str(tmp_path)).on_disk()
    _save_graph(tmp_path, y=np.array([0, -1, 2] * 10, dtype=np.int64))
    with pytest.raises(ValueError, match=r"`y.npy`.*-1"):
        NpyGraph(str(tmp_path)).on_disk()
    (tmp_path / "meta.json").unlink()
    _save_graph(tmp_path, y=np.full((30, 2), 0.5, np.float32))
    with pytest.raises(ValueError, match=r"`y.npy`.*0 or 1.*0.5"):
        NpyGraph(str(tmp_path)).on_disk()


@pytest.mark.parametrize(
    "meta,match",
    [
        ("{not json", r"`meta.json`.*not valid JSON"),
        ("[1, 2]", r"`meta.json`.*JSON object"),
        ('{"num_class": 3}', r"`meta.json`.*unknown key 'num_class'.*\('name', 'num_classes'\)"),
        ('{"num_classes": 0}', r"`num_classes` in `meta.json`.*positive integer.*0"),
        ('{"name": 5}', r"`name` in `meta.json`.*string.*5"),
    ],
)
def test_a_bad_meta_json_is_named(tmp_path, meta, match):
    _save_graph(tmp_path)
    (tmp_path / "meta.json").write_text(meta)
    with pytest.raises(ValueError, match=match):
        NpyGraph(str(tmp_path))


def test_meta_num_classes_must_match_the_multilabel_width(tmp_path):
    _save_graph(tmp_path, y=np.zeros((30, 4), np.float32))
    (tmp_path / "meta.json").write_text(json.dumps({"num_classes": 5}))
    with pytest.raises(ValueError, match=r"`num_classes` 5.*4 label columns"):
        NpyGraph(str(tmp_path))


def test_a_pickled_graph_carries_paths_not_arrays(tmp_path):
    import pickle

    from_pyg(GRAPH.load(), str(tmp_path))
    graph = NpyGraph(str(tmp_path))
    graph.on_disk()  # opens every memory map
    payload = pickle.dumps(graph)
    assert len(payload) < 4096 < (tmp_path / "x.npy").stat().st_size
    _assert_same_graph(pickle.loads(payload).load(), GRAPH.load())


def test_bad_root_argument_is_named():
    with pytest.raises(TypeError, match=r"NpyGraph: expected `root`.*int"):
        NpyGraph(3)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- fingerprint
def test_fingerprint_notices_a_changed_file(tmp_path):
    _save_graph(tmp_path, n=3000, f=64)  # x.npy: 768 KB, more than the sampled bytes
    graph = NpyGraph(str(tmp_path))
    before = graph.fingerprint()
    assert before == NpyGraph(str(tmp_path)).fingerprint()  # stable

    path = tmp_path / "x.npy"
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # touched
    touched = graph.fingerprint()
    assert touched != before

    # One byte changed at a sampled offset (the last byte lies in the last sampled block),
    # with size and mtime put back: the sampled hash still notices.
    stat = path.stat()
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert graph.fingerprint() != touched

    # meta.json takes part: it changes num_classes.
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert graph.fingerprint() == touched
    (tmp_path / "meta.json").write_text(json.dumps({"num_classes": 9}))
    assert graph.fingerprint() != touched


def test_fingerprint_reads_a_bounded_sample(tmp_path, monkeypatch):
    _save_graph(tmp_path, n=20000, f=64)  # x.npy: 5 MiB
    graph = NpyGraph(str(tmp_path))
    read = []
    real_pread = os.pread

    def counting_pread(fd, size, offset):
        block = real_pread(fd, size, offset)
        read.append(len(block))
        return block

    monkeypatch.setattr(npy_graph_module.os, "pread", counting_pread)
    graph.fingerprint()
    per_file = (npy_graph_module.FINGERPRINT_BLOCKS + 1) * npy_graph_module.FINGERPRINT_BLOCK_BYTES
    assert 0 < sum(read) <= 6 * per_file
    assert sum(read) < (tmp_path / "x.npy").stat().st_size / 4


# -------------------------------------------------------------------- in a data module
def _assert_same_store(dm, reference) -> None:
    """Prepare both data modules; the store built from the files equals the one built from
    the in-memory graph."""
    for module in (dm, reference):
        module.prepare_data()
        module.setup("fit")
    got, want = dm.full_graph(), reference.full_graph()
    for key in ("node_ids", "x", "y", "indptr", "indices"):
        assert torch.equal(getattr(got, key), getattr(want, key)), key


def test_a_store_data_module_trains_on_an_npy_graph(tmp_path):
    import lightning.pytorch as pl
    from torch_geometric.nn.models import GraphSAGE

    from lightgraph.models import MiniBatchNodeClassifier

    graph = from_pyg(GRAPH.load(), str(tmp_path / "g"))
    kwargs = dict(num_parts=4, parts_per_batch=2, fanouts=[3, 2], batch_size=32)
    dm = MacroBatchDataModule(graph, cache_dir=str(tmp_path / "npy"), **kwargs)
    reference = MacroBatchDataModule(GRAPH, cache_dir=str(tmp_path / "mem"), **kwargs)
    _assert_same_store(dm, reference)

    gnn = GraphSAGE(graph.num_features, 8, num_layers=2, out_channels=graph.num_classes)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(MiniBatchNodeClassifier(gnn, graph.num_classes), dm)
    assert trainer.global_step > 0


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda g, c: NeighborSamplingDataModule(
                g, storage="mmap", cache_dir=c, fanouts=[3, 2], batch_size=16
            ),
            id="ns-ext",
        ),
        pytest.param(
            lambda g, c: NeighborSamplingDataModule(
                g, storage="memory", cache_dir=c, fanouts=[3, 2], batch_size=16
            ),
            id="ns-mem",
        ),
        pytest.param(
            lambda g, c: MultistageDataModule(
                g,
                first_stage=LargeBatchSampler(),
                cache_dir=c,
                fanouts=[3, 2],
                batch_size=16,
                prefetch=False,
            ),
            id="joestar-lbs",
        ),
        pytest.param(
            lambda g, c: MultistageDataModule(
                g,
                first_stage=PartitionBatchSampler(num_parts=4, parts_per_batch=2, history=False),
                cache_dir=c,
                fanouts=[3, 2],
                batch_size=16,
                prefetch=False,
            ),
            id="joestar-pbs",
        ),
    ],
)
def test_ns_and_joestar_take_an_npy_graph_like_the_in_memory_graph(tmp_path, make):
    """The same store and the same training batches from the files as from ``load()``."""
    graph = from_pyg(GRAPH.load(), str(tmp_path / "g"))
    dm, reference = make(graph, str(tmp_path / "npy")), make(GRAPH, str(tmp_path / "mem"))
    _assert_same_store(dm, reference)

    def seeds(module) -> list[list[int]]:
        out = []
        for batch in module.train_loader():
            if hasattr(batch, "macro"):  # a JOESTAR step: its seeds' original ids
                out.append(module.store.node_ids[batch.macro.node[batch.seeds]].tolist())
            else:
                out.append(batch.n_id[: batch.batch_size].tolist())
        return out

    assert seeds(dm) == seeds(reference)
