"""NodeSequenceDataModule: sequences, attention patterns, buckets, shards, cache, PE columns.

The builders it uses are tested in tests/data/test_sequences.py and
tests/functional/test_graph_encoding.py.
"""

from __future__ import annotations

import logging
import os
from types import SimpleNamespace

import pytest
import torch

import lightgraph.data.lightning.node_sequence as node_sequence
from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.data.lightning.node_sequence import NodeSequenceDataModule
from lightgraph.data.loader.token_batch import TokenShard
from lightgraph.data.store.cache import META_FILE, CorruptCacheError, check_cache
from lightgraph.functional.graph_encoding import (
    EDGE_BUCKET,
    FAR_BUCKET,
    GLOBAL_BUCKET,
    SELF_BUCKET,
    num_buckets,
)
from lightgraph.functional.sequence_parallel import shard_range

NUM_NODES, LENGTH = 150, 64


def _dataset() -> SyntheticGraph:
    return SyntheticGraph(num_nodes=NUM_NODES, avg_degree=5, num_features=4, num_classes=3, seed=1)


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> NodeSequenceDataModule:
    dm = NodeSequenceDataModule(
        _dataset(),
        sequence_length=LENGTH,
        pe_dim=3,
        cache_dir=str(tmp_path_factory.mktemp("cache")),
    )
    dm.prepare_data()
    dm.setup()
    return dm


def test_sequences_cover_every_node_once(full) -> None:
    lengths = [item.num_tokens - 1 for item in full.sequences]
    assert lengths == [LENGTH, LENGTH, NUM_NODES - 2 * LENGTH]
    ids = torch.cat([item.node_ids[1:] for item in full.sequences])
    assert torch.equal(torch.sort(ids).values, torch.arange(NUM_NODES))
    for item in full.sequences:
        assert item.node_ids[0] == -1 and bool(item.is_global[0]) and not item.is_global[1:].any()
        assert not item.x[0].any()
        for name in ("train_mask", "val_mask", "test_mask"):
            mask = getattr(item, name)
            assert not mask[0]  # the global token is never labelled
            assert item.global_counts[name] == int(mask.sum())
    data = _dataset().load()
    item = full.sequences[1]
    assert torch.equal(item.x[1:], data.x[item.node_ids[1:]])
    assert torch.equal(item.y[1:], data.y[item.node_ids[1:]])


def test_pattern_is_the_induced_subgraph_plus_self_loops_global_edges_and_path(full) -> None:
    data = _dataset().load()
    edges = {tuple(e) for e in data.edge_index.t().tolist() if e[0] != e[1]}
    for item in full.sequences:
        graph = item.graph
        graph.validate()
        S = graph.num_tokens
        src, dst = graph.edge_index
        key = dst * S + src
        assert bool((key[1:] > key[:-1]).all())  # sorted by query then key, no duplicates
        ids = item.node_ids
        expected = {}
        for j in range(1, S):
            for i in range(1, S):
                if (int(ids[j]), int(ids[i])) in edges:
                    expected[(j, i)] = EDGE_BUCKET
        for t in range(S):
            expected[(t, t)] = SELF_BUCKET
        for t in range(1, S):
            expected[(0, t)] = expected[(t, 0)] = GLOBAL_BUCKET
        for t in range(S - 1):  # the token path, where the graph lacks the pair
            expected.setdefault((t, t + 1), FAR_BUCKET)
            expected.setdefault((t + 1, t), FAR_BUCKET)
        pairs = zip(src.tolist(), dst.tolist(), strict=True)
        got = dict(zip(pairs, graph.edge_bucket.tolist(), strict=True))
        assert got == expected
        assert graph.far_bucket == FAR_BUCKET
        assert item.num_buckets == num_buckets(5) == 9
        local = graph.edge_index[:, graph.edge_bucket == EDGE_BUCKET]
        assert torch.equal(item.in_degree[1:], torch.bincount(local[1] - 1, minlength=S - 1))
        assert torch.equal(item.out_degree[1:], torch.bincount(local[0] - 1, minlength=S - 1))
        assert item.in_degree[0] == item.out_degree[0] == 0
        # The default sequences meet C1-C3 (C2 by the token path, C3 by the global token).
        graph.num_layers = 2
        graph.cache.pop("conditions", None)
        assert graph.conditions() == {"c1": True, "c2": True, "c3": True}


def _trainer_with_shard(world_size: int, rank: int) -> SimpleNamespace:
    """A trainer whose strategy reports a token shard, as GraphParallelStrategy does."""
    kwargs = {"world_size": world_size, "rank": rank}
    return SimpleNamespace(strategy=SimpleNamespace(sequence_parallel_kwargs=kwargs))


@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_concatenate_to_the_full_sequence(full, world_size: int) -> None:
    shards = []
    for rank in range(world_size):
        dm = NodeSequenceDataModule(
            _dataset(), sequence_length=LENGTH, pe_dim=3, cache_dir=full.cache_dir
        )
        dm.trainer = _trainer_with_shard(world_size, rank)
        dm.setup()
        assert dm.token_shard == TokenShard(world_size, rank)
        shards.append(dm.train_dataloader())
    for s, whole in enumerate(full.sequences):
        parts = [list(loader)[s] for loader in shards]
        S = whole.num_tokens
        assert S % world_size  # uneven shards (65 and 23 tokens)
        for rank, part in enumerate(parts):
            assert part.token_range == shard_range(S, world_size, rank)
            assert (
                part.is_sharded
                and part.num_local_tokens == part.token_range[1] - part.token_range[0]
            )
            assert torch.equal(part.graph.edge_index, whole.graph.edge_index)
            assert torch.equal(part.graph.edge_bucket, whole.graph.edge_bucket)
            assert part.global_counts == whole.global_counts
        for name in (
            "x",
            "y",
            "is_global",
            "in_degree",
            "out_degree",
            "train_mask",
            "val_mask",
            "test_mask",
            "node_ids",
            "lap_pe",
        ):
            joined = torch.cat([getattr(p, name) for p in parts])
            assert torch.equal(joined, getattr(whole, name)), name


def test_laplacian_pe_rows(full) -> None:
    item = full.sequences[0]
    assert item.lap_pe.shape == (item.num_tokens, 3)
    assert not item.lap_pe[0].any() and item.lap_pe[1:].abs().sum() > 0
    dm = NodeSequenceDataModule(
        _dataset(), sequence_length=LENGTH, pe_dim=5, cache_dir=full.cache_dir
    )
    assert dm.pe_dim == 5 and dm.cache_path() == dm.cache_path(5) != full.cache_path()


def test_the_model_is_never_read(full) -> None:
    # A trainer whose model asks for 5 PE columns and whose strategy runs 2 graph-parallel
    # ranks, but reports no `sequence_parallel_kwargs`, changes nothing: pe_dim is the data
    # module's own setting and the token shard comes from that property only.
    model = SimpleNamespace(model=SimpleNamespace(requires_laplacian_pe=True, pe_dim=5))
    sp = SimpleNamespace(world_size=2, rank=1)
    dm = NodeSequenceDataModule(_dataset(), sequence_length=LENGTH, cache_dir=full.cache_dir)
    dm.trainer = SimpleNamespace(
        strategy=SimpleNamespace(sequence_parallel=sp), lightning_module=model
    )
    dm.setup()
    assert dm.token_shard == TokenShard() and not dm.sequences[0].is_sharded
    assert all(item.lap_pe is None for item in dm.sequences)
    assert not hasattr(node_sequence, "model_pe_dim")


def test_cache_is_reused(full) -> None:
    dm = NodeSequenceDataModule(
        _dataset(), sequence_length=LENGTH, pe_dim=3, cache_dir=full.cache_dir
    )
    dm.setup()  # no prepare_data: loads the cache the fixture wrote
    assert dm.build_seconds == {}
    for a, b in zip(dm.sequences, full.sequences, strict=True):
        assert torch.equal(a.x, b.x) and torch.equal(a.graph.edge_index, b.graph.edge_index)
    assert dm.sequences[0].to("cpu") is dm.sequences[0]


def test_sequence_length_equal_to_the_graph_and_no_reorder(tmp_path) -> None:
    dm = NodeSequenceDataModule(
        _dataset(),
        sequence_length=NUM_NODES,
        reorder="none",
        global_token=False,
        dense_limit=NUM_NODES,
        cache_dir=str(tmp_path),
    )
    dm.setup()
    (item,) = dm.sequences
    assert item.num_tokens == NUM_NODES and not item.is_global.any()
    assert torch.equal(item.node_ids, torch.arange(NUM_NODES))
    assert item.graph.dense_bucket is not None
    assert not (item.graph.edge_bucket == GLOBAL_BUCKET).any()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"`sequence_length` <= the number of nodes \(150\).*151"):
        NodeSequenceDataModule(_dataset(), sequence_length=NUM_NODES + 1)
    with pytest.raises(ValueError, match=r"`reorder` to be one of \('metis', 'none'\)"):
        NodeSequenceDataModule(_dataset(), reorder="rcm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`max_distance` to be an integer >= 2"):
        NodeSequenceDataModule(_dataset(), sequence_length=10, max_distance=1)
    with pytest.raises(TypeError, match="GraphDataset"):
        NodeSequenceDataModule(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="single-label"):
        NodeSequenceDataModule(SyntheticGraph(num_nodes=50, avg_degree=3, multilabel=True))
    with pytest.raises(ValueError, match="`pe_dim` to be an integer >= 0"):
        NodeSequenceDataModule(_dataset(), sequence_length=10, pe_dim=-1)


def test_sequences_too_short_for_the_ranks(tmp_path) -> None:
    dm = NodeSequenceDataModule(_dataset(), sequence_length=148, cache_dir=str(tmp_path))
    dm.trainer = _trainer_with_shard(4, 0)
    with pytest.raises(ValueError, match="3 tokens cannot be split over 4"):
        dm.setup()
    for bad in ((4, 0), {"num_shards": 4, "shard": 0}):
        dm.trainer = SimpleNamespace(strategy=SimpleNamespace(sequence_parallel_kwargs=bad))
        with pytest.raises(
            TypeError, match=r"`sequence_parallel_kwargs` to be a mapping with keys"
        ):
            dm.setup()
    with pytest.raises(AttributeError):
        dm.token_shard = TokenShard(4, 0)  # type: ignore[misc]  # what setup loaded


# ----------------------------------------------------------------------------- the cache
def _small(cache_dir: str, **kwargs) -> NodeSequenceDataModule:
    return NodeSequenceDataModule(_dataset(), sequence_length=LENGTH, cache_dir=cache_dir, **kwargs)


def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def test_cache_layout(full) -> None:
    path = full.cache_path()
    assert os.path.basename(path).startswith(f"SyntheticGraph-seq{LENGTH}-")
    assert sorted(os.listdir(path)) == [META_FILE, "seq00000.pt", "seq00001.pt", "seq00002.pt"]
    assert check_cache(path, deep=True) is None and full.verify_cache() is None


def test_truncated_cache_file_setup_names_it(tmp_path) -> None:
    built = _small(str(tmp_path))
    built.prepare_data()
    path = built.cache_path()
    bad = os.path.join(path, "seq00001.pt")
    _truncate(bad)
    dm = _small(str(tmp_path))
    with pytest.raises(CorruptCacheError) as info:
        dm.setup()
    msg = str(info.value)
    assert msg.startswith("NodeSequenceDataModule: the cache file ") and bad in msg
    assert "truncated or overwritten" in msg and f"Delete {path} (or just seq00001.pt)" in msg
    assert info.value.path == bad and info.value.directory == path
    assert dm.sequences is None and dm.build_seconds == {}  # setup never rebuilds
    with pytest.raises(RuntimeError, match="call `setup\\(\\)` before requesting dataloaders"):
        dm.train_dataloader()


def test_garbage_cache_file_setup_names_it(tmp_path) -> None:
    built = _small(str(tmp_path))
    built.prepare_data()
    bad = os.path.join(built.cache_path(), "seq00000.pt")
    size = os.path.getsize(bad)
    with open(bad, "wb") as f:
        f.write(b"\x00" * size)  # the size check passes; the loader fails
    with pytest.raises(CorruptCacheError, match="seq00000.pt is unreadable") as info:
        _small(str(tmp_path)).setup()
    assert info.value.path == bad and info.value.__cause__ is not None


def test_prepare_data_rebuilds_a_damaged_cache(tmp_path, caplog) -> None:
    built = _small(str(tmp_path), pe_dim=2)
    built.setup()
    path = built.cache_path()
    bad = os.path.join(path, "seq00002.pt")
    _truncate(bad)
    assert check_cache(path) is not None
    dm = _small(str(tmp_path), pe_dim=2)
    with caplog.at_level(logging.WARNING, logger="lightgraph.data.lightning.cached_data_module"):
        dm.prepare_data()
    assert bad in caplog.text and "rebuilding" in caplog.text
    assert set(dm.build_seconds) == {"load", "reorder", "sequences"}
    assert check_cache(path, deep=True) is None
    dm.setup()
    for a, b in zip(dm.train_dataloader(), built.train_dataloader(), strict=True):
        assert torch.equal(a.x, b.x) and torch.equal(a.lap_pe, b.lap_pe)
        assert torch.equal(a.graph.edge_index, b.graph.edge_index)


def test_another_pe_dim_uses_another_cache_directory(tmp_path) -> None:
    none, two = _small(str(tmp_path)), _small(str(tmp_path), pe_dim=2)
    assert none.fingerprint()["pe_dim"] == 0 and two.fingerprint()["pe_dim"] == 2
    assert "format" in two.fingerprint()
    assert none.cache_path() != two.cache_path() == none.cache_path(2)
    none.setup()
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(none.cache_path())]
    two.setup()  # builds its own cache: the one without PE columns is not picked up
    assert sorted(os.listdir(tmp_path)) == sorted(
        os.path.basename(dm.cache_path()) for dm in (none, two)
    )
    assert all(item.lap_pe is None for item in none.sequences)
    assert all(item.lap_pe.shape == (item.num_tokens, 2) for item in two.sequences)


def test_token_path_is_an_option_and_part_of_the_cache_key(tmp_path) -> None:
    with_path = NodeSequenceDataModule(_dataset(), sequence_length=LENGTH, cache_dir=str(tmp_path))
    without = NodeSequenceDataModule(
        _dataset(), sequence_length=LENGTH, cache_dir=str(tmp_path), token_path=False
    )
    assert with_path.token_path and not without.token_path
    assert with_path.fingerprint()["token_path"] is True
    assert with_path.cache_path() != without.cache_path()
    with_path.setup()
    without.setup()  # its own cache: the one with the path is not picked up
    assert len(os.listdir(tmp_path)) == 2
    for a, b in zip(with_path.sequences, without.sequences, strict=True):
        S = a.num_tokens
        key_a = a.graph.edge_index[1] * S + a.graph.edge_index[0]
        key_b = b.graph.edge_index[1] * S + b.graph.edge_index[0]
        assert bool(torch.isin(key_b, key_a).all())  # the path only adds entries
        added = a.graph.edge_bucket[~torch.isin(key_a, key_b)]
        assert 0 < added.numel() <= 2 * (S - 1) and bool((added == FAR_BUCKET).all())
        assert a.graph.conditions()["c2"]
    with pytest.raises(ValueError, match="`token_path` to be one of \\(True, False\\) but got 1"):
        NodeSequenceDataModule(_dataset(), sequence_length=LENGTH, token_path=1)
