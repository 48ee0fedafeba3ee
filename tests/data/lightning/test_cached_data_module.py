from __future__ import annotations

import json
import logging
import os
import stat
from types import SimpleNamespace

import pytest
import torch

from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.store.cache import (
    META_FILE,
    CacheReader,
    CacheWriter,
    CorruptCacheError,
    atomic_path,
    atomic_write,
    check_cache,
    fingerprint_digest,
    tensor_digest,
)

LOGGER = "lightgraph.data.lightning.cached_data_module"


class Toy(CachedDataModule):
    """Two tensor files and a JSON file; rank r loads ``shard<r>.pt``."""

    def __init__(self, cache_dir: str, size: int = 64, num_shards: int = 2) -> None:
        super().__init__(cache_dir)
        self.size = size
        self.num_shards = num_shards
        self.builds = 0
        self.loads: list[tuple[int, int]] = []
        self.shard: torch.Tensor | None = None

    def fingerprint(self) -> dict:
        return {"format": 1, "size": self.size, "num_shards": self.num_shards}

    def build(self, writer: CacheWriter) -> dict:
        self.builds += 1
        for r in range(self.num_shards):
            writer.save(f"shard{r}.pt", torch.arange(self.size) + 1000 * r)
        writer.save_json("extra/info.json", {"size": self.size})
        return {"num_shards": self.num_shards}

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        self.loads.append((rank, world_size))
        assert cache.meta == {"num_shards": self.num_shards}
        assert cache.load_json("extra/info.json") == {"size": self.size}
        self.shard = cache.load(f"shard{rank}.pt")

    def loader(self, split: str) -> list:
        return [(split, self.shard)]


def attach(dm: CachedDataModule, world: int, rank: int) -> None:
    dm.trainer = SimpleNamespace(world_size=world, global_rank=rank)  # what the Trainer provides


def built(tmp_path, **kwargs) -> Toy:
    dm = Toy(str(tmp_path), **kwargs)
    dm.prepare_data()
    assert dm.builds == 1
    return dm


def mtimes(path: str) -> dict[str, int]:
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            out[os.path.relpath(os.path.join(root, n), path)] = os.stat(
                os.path.join(root, n)
            ).st_mtime_ns
    return out


# --------------------------------------------------------------------------- layout
def test_cache_layout_manifest_and_no_leftovers(tmp_path) -> None:
    dm = built(tmp_path)
    path = dm.cache_path()
    assert os.path.dirname(path) == str(tmp_path)
    name = os.path.basename(path)
    assert name == f"Toy-{fingerprint_digest(dm.fingerprint())}" and len(name) == len("Toy-") + 16
    assert sorted(mtimes(path)) == sorted(
        [META_FILE, "shard0.pt", "shard1.pt", os.path.join("extra", "info.json")]
    )
    with open(os.path.join(path, META_FILE)) as f:
        meta = json.load(f)
    assert meta["num_shards"] == 2
    files = meta["manifest"]["files"]
    assert sorted(files) == ["extra/info.json", "shard0.pt", "shard1.pt"]
    for rel, record in files.items():
        full = os.path.join(path, *rel.split("/"))
        assert record["bytes"] == os.path.getsize(full) and len(record["sha1"]) == 40
    assert check_cache(path) is None and check_cache(path, deep=True) is None
    assert dm.verify_cache() is None


def test_another_configuration_gets_another_directory(tmp_path) -> None:
    a, b = Toy(str(tmp_path), size=8), Toy(str(tmp_path), size=9)
    assert a.cache_path() != b.cache_path()
    assert Toy(str(tmp_path), size=8).cache_path() == a.cache_path()


def test_good_cache_is_reused_without_rebuilding(tmp_path) -> None:
    first = built(tmp_path)
    before = mtimes(first.cache_path())
    again = Toy(str(tmp_path))
    again.prepare_data()
    again.setup()
    assert again.builds == 0
    assert mtimes(first.cache_path()) == before
    assert torch.equal(again.shard, torch.arange(64))


def test_setup_loads_the_calling_ranks_files_once(tmp_path) -> None:
    built(tmp_path)
    dm = Toy(str(tmp_path))
    attach(dm, 2, 1)
    dm.setup("fit")
    dm.setup("validate")  # already loaded: no second load
    assert dm.loads == [(1, 2)] and dm.builds == 0
    assert torch.equal(dm.shard, torch.arange(64) + 1000)
    for split, hook in (
        ("train", dm.train_dataloader),
        ("val", dm.val_dataloader),
        ("test", dm.test_dataloader),
        ("predict", dm.predict_dataloader),
    ):
        ((got, shard),) = hook()
        assert got == split and shard is dm.shard


def test_setup_without_prepare_data_builds(tmp_path) -> None:
    dm = Toy(str(tmp_path))
    dm.setup()
    assert dm.builds == 1 and dm.loads == [(0, 1)]


def test_dataloaders_need_setup(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="Toy: call `setup\\(\\)` before requesting dataloaders"):
        Toy(str(tmp_path)).train_dataloader()


# ----------------------------------------------------------------- damaged caches
def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _garbage(path: str) -> None:
    with open(path, "wb") as f:
        f.write(b"this is not a torch file")


def _same_size_garbage(path: str) -> None:
    size = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(b"\x00" * size)


@pytest.mark.parametrize("damage", [_truncate, _garbage], ids=["truncated", "garbage"])
def test_damaged_file_setup_names_it_and_prepare_data_rebuilds(tmp_path, caplog, damage) -> None:
    path = built(tmp_path).cache_path()
    bad = os.path.join(path, "shard1.pt")
    damage(bad)

    # A rank that cannot rebuild (others read the cache): a clear error, not torch's.
    rank1 = Toy(str(tmp_path))
    attach(rank1, 2, 1)
    with pytest.raises(CorruptCacheError) as info:
        rank1.setup()
    msg = str(info.value)
    assert msg.startswith("Toy: the cache file ")
    assert bad in msg and "truncated or overwritten" in msg
    assert f"Delete {path} (or just shard1.pt) and re-run" in msg and "prepare_data" in msg
    assert info.value.path == bad and info.value.directory == path
    assert rank1.builds == 0

    # Rank 0 is fine: its own file is intact.
    rank0 = Toy(str(tmp_path))
    attach(rank0, 2, 0)
    rank0.setup()

    # prepare_data (local rank 0) detects it, warns naming the file, rebuilds.
    builder = Toy(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        builder.prepare_data()
    assert builder.builds == 1
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.WARNING and bad in record.getMessage()
    assert "rebuilding" in record.getMessage()
    assert check_cache(path) is None

    rank1 = Toy(str(tmp_path))
    attach(rank1, 2, 1)
    rank1.setup()
    assert torch.equal(rank1.shard, torch.arange(64) + 1000)


def test_same_size_garbage_fails_at_load_with_a_clear_error(tmp_path, caplog) -> None:
    path = built(tmp_path).cache_path()
    bad = os.path.join(path, "shard0.pt")
    _same_size_garbage(bad)

    # Sizes match: the cheap check passes and the reader wraps the loader's error.
    dm = Toy(str(tmp_path))
    dm.prepare_data()
    assert dm.builds == 0
    with pytest.raises(CorruptCacheError, match="the cache file .*shard0.pt is unreadable") as info:
        dm.setup()
    assert info.value.__cause__ is not None  # the loader's own error stays attached
    assert "Delete" in str(info.value)

    # The checksum check catches it in prepare_data and rebuilds.
    deep = Toy(str(tmp_path))
    deep.cache_verify = "checksum"
    assert deep.verify_cache() is not None and deep.verify_cache(deep=False) is None
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        deep.prepare_data()
    assert deep.builds == 1 and "SHA-1" in caplog.text and bad in caplog.text
    deep.setup()
    assert torch.equal(deep.shard, torch.arange(64))


def test_missing_file_listed_in_the_manifest(tmp_path, caplog) -> None:
    path = built(tmp_path).cache_path()
    os.remove(os.path.join(path, "shard1.pt"))
    rank1 = Toy(str(tmp_path))
    attach(rank1, 2, 1)
    with pytest.raises(CorruptCacheError, match="shard1.pt is missing"):
        rank1.setup()
    builder = Toy(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        builder.prepare_data()
    assert builder.builds == 1 and "shard1.pt is missing" in caplog.text


def test_half_written_cache_is_rebuilt(tmp_path, caplog) -> None:
    path = built(tmp_path).cache_path()
    os.remove(os.path.join(path, META_FILE))  # a build that died before its manifest
    assert check_cache(path).kind == "incomplete"
    dm = Toy(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        dm.prepare_data()
    assert dm.builds == 1 and "half-written" in caplog.text and META_FILE in caplog.text
    assert check_cache(path) is None


def test_half_written_cache_in_setup_is_built_there(tmp_path) -> None:
    path = built(tmp_path).cache_path()
    os.remove(os.path.join(path, META_FILE))
    dm = Toy(str(tmp_path))
    dm.setup()  # no prepare_data: there is no finished cache, as without a Trainer
    assert dm.builds == 1 and dm.loads == [(0, 1)]


def test_cache_without_a_manifest_is_rebuilt(tmp_path, caplog) -> None:
    # What older lightgraph versions wrote: meta.json without the manifest.
    path = built(tmp_path).cache_path()
    with open(os.path.join(path, META_FILE), "w") as f:
        json.dump({"num_shards": 2}, f)
    dm = Toy(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        dm.prepare_data()
    assert dm.builds == 1 and "without a manifest" in caplog.text


def test_corrupt_meta_file(tmp_path, caplog) -> None:
    path = built(tmp_path).cache_path()
    meta = os.path.join(path, META_FILE)
    with open(meta, "w") as f:
        f.write("{not json")
    dm = Toy(str(tmp_path))
    with pytest.raises(CorruptCacheError, match=f"{META_FILE} is unreadable.*Delete"):
        dm.setup()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        dm.prepare_data()
    assert dm.builds == 1 and meta in caplog.text
    dm.setup()


def test_a_failed_build_leaves_no_cache(tmp_path) -> None:
    class Failing(Toy):
        def build(self, writer: CacheWriter) -> dict:
            writer.save("shard0.pt", torch.zeros(3))
            raise RuntimeError("boom")

    dm = Failing(str(tmp_path))
    with pytest.raises(RuntimeError, match="boom"):
        dm.prepare_data()
    assert os.listdir(tmp_path) == []  # the staging directory is gone, nothing published
    assert check_cache(dm.cache_path()).missing


def test_concurrent_builder_that_finishes_first_wins(tmp_path) -> None:
    # Another process publishes a complete cache while this one builds: keep theirs.
    class Racing(Toy):
        def cache_name(self) -> str:
            return "Toy"  # the same cache directory as the other process's

        def build(self, writer: CacheWriter) -> dict:
            other = Toy(str(tmp_path))
            other.prepare_data()
            self.theirs = mtimes(other.cache_path())
            return super().build(writer)

    dm = Racing(str(tmp_path))
    dm.prepare_data()
    assert dm.builds == 1 and mtimes(dm.cache_path()) == dm.theirs
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(dm.cache_path())]


def test_files_of_two_builds_never_mix(tmp_path) -> None:
    # A rebuild replaces the whole directory: no file of the damaged build survives.
    path = built(tmp_path).cache_path()
    stray = os.path.join(path, "stray.pt")
    torch.save(1, stray)
    os.remove(os.path.join(path, META_FILE))
    Toy(str(tmp_path)).prepare_data()
    assert not os.path.exists(stray) and check_cache(path) is None
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]


# --------------------------------------------------------------------- atomic writes
def test_atomic_write_replaces_only_on_success(tmp_path) -> None:
    target = tmp_path / "sub" / "file.txt"
    with atomic_write(target, "w") as f:
        f.write("first")
    assert target.read_text() == "first"
    with pytest.raises(RuntimeError, match="interrupted"):
        with atomic_write(target, "w") as f:
            f.write("second, half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "first"
    assert os.listdir(target.parent) == ["file.txt"]  # the temporary file is gone
    with pytest.raises(ValueError, match="`mode` to be one of \\('w', 'wb', 'wt'\\) but got 'a'"):
        with atomic_write(target, "a"):
            pass


def test_atomic_path_respects_the_umask(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "x.pt") as tmp:
            assert os.path.dirname(tmp) == str(tmp_path)
            torch.save(torch.ones(2), tmp)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "x.pt").st_mode) == 0o644


def test_published_cache_respects_the_umask(tmp_path) -> None:
    # Shared caches: other users must be able to read what one user built.
    old = os.umask(0o022)
    try:
        path = built(tmp_path).cache_path()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    for name in ("shard0.pt", META_FILE):
        assert stat.S_IMODE(os.stat(os.path.join(path, name)).st_mode) == 0o644


@pytest.mark.parametrize("name", ["", "../x.pt", "/abs.pt", "a/../b.pt", META_FILE, "a//b"])
def test_writer_rejects_names_outside_the_cache(tmp_path, name) -> None:
    with pytest.raises(ValueError, match="Toy: expected a cache file name to be a relative path"):
        CacheWriter(str(tmp_path), "Toy").save(name, 1)


def test_build_metadata_cannot_shadow_the_manifest(tmp_path) -> None:
    class Shadow(Toy):
        def build(self, writer: CacheWriter) -> dict:
            return {"manifest": 1}

    with pytest.raises(ValueError, match="must not use the key 'manifest'"):
        Shadow(str(tmp_path)).prepare_data()


def test_reader_rejects_unlisted_files(tmp_path) -> None:
    path = built(tmp_path).cache_path()
    reader = CacheReader(path, "Toy")
    with pytest.raises(CorruptCacheError, match="nope.pt is not listed in the manifest"):
        reader.load("nope.pt")


# ------------------------------------------------------------------------- the key
def test_fingerprint_digest() -> None:
    key = {"b": 1, "a": [1, 2]}
    assert fingerprint_digest(key) == fingerprint_digest({"a": [1, 2], "b": 1})
    assert fingerprint_digest(key) != fingerprint_digest({"a": [1, 2], "b": 2})
    assert len(fingerprint_digest(key)) == 16
    with pytest.raises(TypeError, match="JSON-serialisable cache key.*tensor_digest"):
        fingerprint_digest({"t": torch.ones(2)})
    t = torch.arange(6).view(2, 3)
    assert tensor_digest(t) == tensor_digest(t.t().contiguous().t())
    assert tensor_digest(t) != tensor_digest(t + 1)


def test_hooks_must_be_implemented(tmp_path) -> None:
    dm = CachedDataModule(str(tmp_path))
    with pytest.raises(NotImplementedError, match="CachedDataModule must implement `fingerprint"):
        dm.prepare_data()


def test_bad_cache_verify(tmp_path) -> None:
    class Bad(Toy):
        cache_verify = "sizes"

    with pytest.raises(ValueError, match="`cache_verify` to be one of \\('size', 'checksum'\\)"):
        Bad(str(tmp_path)).prepare_data()
