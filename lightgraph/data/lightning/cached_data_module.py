"""A LightningDataModule base for data built once, cached on disk and loaded per rank.

Every large-graph data module of lightgraph follows one pattern: ``prepare_data`` (which
Lightning calls on local rank 0 of every node) builds some files from the whole graph
once; ``setup`` (every rank) loads only what its rank needs; the dataloaders hand that
out. :class:`CachedDataModule` owns the parts that are the same everywhere:

* the **cache directory** ``<cache_dir>/<cache_name()>-<digest>``, where the digest hashes
  :meth:`~CachedDataModule.fingerprint` (every input that changes the files), so another
  configuration never picks up the wrong files;
* **atomic writes**: every file goes to a temporary file in the same directory, is
  fsync'ed and moved into place with :func:`os.replace`, so a file is either absent or
  complete. A build writes into a private staging directory next to the cache and
  publishes it whole with one :func:`os.replace` of the directory, so a reader never
  sees a mixture of two builds, and concurrent builders (several nodes on a shared
  filesystem) cannot corrupt each other: the first to finish wins, the others discard
  their copy;
* a **manifest**: ``meta.json`` -- the subclass's own metadata plus, under
  ``"manifest"``, the size and SHA-1 of every file -- is written *last*. A cache without
  it is half-written and is rebuilt; a file whose size differs from the manifest
  (truncated, overwritten) is detected without reading it;
* **corruption handling**: ``prepare_data`` rebuilds a damaged cache, with a logged
  warning naming the file; ``setup`` (a rank that cannot rebuild while the others read)
  raises :class:`CorruptCacheError` naming the file and the fix instead of a loader's
  internal error;
* the **dataloader boilerplate** (``train/val/test/predict_dataloader``, and the error
  when they are requested before ``setup``).

A subclass implements four hooks::

    class MyDataModule(CachedDataModule):
        def fingerprint(self) -> dict:            # JSON-serialisable cache key
            return {"format": 1, "dataset": self.dataset.fingerprint(), "k": self.k}

        def build(self, writer: CacheWriter) -> dict:   # prepare_data, one process
            data = self.dataset.load()
            writer.save("features.pt", data.x)           # atomic, recorded in the manifest
            return {"num_nodes": data.num_nodes}         # stored in meta.json

        def load(self, cache: CacheReader, rank: int, world_size: int) -> None:  # setup
            self.x = cache.load("features.pt")           # size-checked, errors made clear

        def loader(self, split: str):                    # train/val/test/predict
            return [self.x]
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import lightning.pytorch as pl

from lightgraph.data.contract import DataContractProvider
from lightgraph.data.loader.data_parallel import DataParallelShard, check_shard, data_parallel_shard
from lightgraph.data.store.cache import (
    VERIFY_MODES,
    CacheProblem,
    CacheReader,
    CacheWriter,
    build_cache,
    check_cache,
    fingerprint_digest,
    read_manifest,
)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------- the base
class CachedDataModule(DataContractProvider, pl.LightningDataModule):
    """Base of data modules that build files once (``prepare_data``) and load them per rank.

    Subclasses implement :meth:`fingerprint`, :meth:`build`, :meth:`load` and
    :meth:`loader`; they may override :meth:`cache_name`, :meth:`rank_and_world_size` and
    :meth:`is_loaded`. See the module docstring for the cache layout and guarantees.

    * ``prepare_data``: if :meth:`cache_path` holds no complete cache (missing,
      half-written, a file missing or of the wrong size -- or, with
      ``cache_verify = "checksum"``, of the wrong SHA-1), calls :meth:`build` with a
      :class:`CacheWriter` on a private staging directory, writes ``meta.json`` (its
      return value plus the manifest) last and moves the directory into place (unless
      another process published a complete cache meanwhile). A damaged cache is
      rebuilt, with a logged warning naming the file.
    * ``setup``: builds the cache itself only if it has none (``prepare_data`` was not
      called, as without a Trainer); otherwise calls :meth:`load` with a
      :class:`CacheReader` and the rank, which raises :class:`CorruptCacheError` for a
      damaged file instead of rebuilding while other ranks read.
    * ``*_dataloader``: :meth:`loader` of the split, after ``setup``.

    Args:
        cache_dir: the directory holding every configuration's cache directory.
    """

    #: What ``prepare_data`` compares with the manifest before reusing a cache:
    #: ``"size"`` (cheap; catches truncated and half-written caches) or ``"checksum"``
    #: (also SHA-1; reads the whole cache once per run).
    cache_verify: ClassVar[str] = "size"

    def __init__(self, cache_dir: str = "lightgraph_cache") -> None:
        super().__init__()
        self.cache_dir = cache_dir
        self._cache_loaded = False
        self._data_shard: DataParallelShard | None = None

    # ------------------------------------------------------------------ subclass hooks
    def fingerprint(self) -> dict[str, Any]:
        """Every input that changes the cached files, JSON-serialisable (the cache key).

        Include a format version to bump when the file layout changes; hash tensor
        arguments with :func:`tensor_digest`.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement `fingerprint()`.")

    def cache_name(self) -> str:
        """Readable prefix of the cache directory name (the digest follows)."""
        return type(self).__name__

    def build(self, writer: CacheWriter) -> Mapping[str, Any] | None:
        """Build every file from the inputs, writing each through ``writer``.

        Runs in ``prepare_data`` on one process per node. Returns JSON-serialisable
        metadata (sizes, build times) stored in ``meta.json`` and handed back to
        :meth:`load` as ``cache.meta``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement `build(writer)`.")

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        """Load what ``rank`` of ``world_size`` needs from ``cache`` onto ``self``.

        Read files with ``cache.load(name)`` or inside ``with cache.reading(name) as path``
        so a damaged file raises a clear :class:`CorruptCacheError`.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement `load(cache, rank, world_size)`."
        )

    def loader(self, split: str) -> Iterable[Any]:
        """The dataloader (any iterable) of ``split``: ``"train"``, ``"val"``, ``"test"`` or ``"predict"``."""
        raise NotImplementedError(f"{type(self).__name__} must implement `loader(split)`.")

    # ------------------------------------------------------------- data parallelism
    @property
    def data_shard(self) -> DataParallelShard:
        """This process's data-parallel ``(rank, world_size)``: the one place a data module
        reads it.

        The attached Trainer's strategy gives it
        (:func:`~lightgraph.data.loader.data_parallel.data_parallel_shard`, Lightning's
        ``distributed_sampler_kwargs``); ``(0, 1)`` on one device or without a Trainer. Set
        it explicitly (a ``(rank, world_size)`` pair; ``None`` unsets it) to iterate one
        rank's share without a Trainer.
        """
        if self._data_shard is not None:
            return self._data_shard
        return data_parallel_shard(self.trainer)

    @data_shard.setter
    def data_shard(self, value: Any) -> None:
        owner = type(self).__name__
        if value is None:
            self._data_shard = None
            return
        if not isinstance(value, tuple) or len(value) != 2:
            raise ValueError(
                f"{owner}: expected `data_shard` to be a (rank, world_size) pair or None but got "
                f"{value!r}."
            )
        self._data_shard = check_shard(owner, *value)

    def checked_data_shard(self) -> DataParallelShard:
        """:attr:`data_shard`, checked against the Trainer's when both are given."""
        shard = self.data_shard
        if self._data_shard is not None and self.trainer is not None:
            running = data_parallel_shard(self.trainer)
            if running.world_size > 1 and running != self._data_shard:
                raise ValueError(
                    f"{type(self).__name__}: `data_shard` was set to {tuple(self._data_shard)} but the "
                    f"Trainer runs data parallel as (rank, world_size)={tuple(running)}; unset "
                    f"`data_shard` (the Trainer's strategy gives it) or make them equal."
                )
        return shard

    def rank_and_world_size(self) -> tuple[int, int]:
        """``(rank, world_size)`` passed to :meth:`load`: the Trainer's global ones, ``(0, 1)`` without."""
        trainer = self.trainer
        if trainer is None:
            return 0, 1
        return int(trainer.global_rank), int(trainer.world_size)

    def is_loaded(self) -> bool:
        """Whether :meth:`load` already ran (``setup`` then returns at once)."""
        return self._cache_loaded

    # ------------------------------------------------------------------------ the cache
    def cache_path_for(self, key: Mapping[str, Any], name: str) -> str:
        """``<cache_dir>/<name>-<digest of key>``."""
        return os.path.join(self.cache_dir, f"{name}-{fingerprint_digest(key)}")

    def cache_path(self) -> str:
        """The cache directory of this configuration."""
        return self.cache_path_for(self.fingerprint(), self.cache_name())

    def verify_cache(self, deep: bool | None = None) -> CacheProblem | None:
        """``None`` if the cache is complete, else what is wrong (see :func:`check_cache`).

        Args:
            deep: compare SHA-1s too; ``None`` follows :attr:`cache_verify`.
        """
        if deep is None:
            deep = self._verify_mode() == "checksum"
        return check_cache(self.cache_path(), deep=deep)

    def _verify_mode(self) -> str:
        mode = self.cache_verify
        if mode not in VERIFY_MODES:
            raise ValueError(
                f"{type(self).__name__}: expected `cache_verify` to be one of {VERIFY_MODES} "
                f"but got {mode!r}."
            )
        return mode

    # ------------------------------------------------------------------ Lightning hooks
    def prepare_data(self) -> None:
        path = self.cache_path()
        deep = self._verify_mode() == "checksum"
        problem = check_cache(path, deep=deep)
        if problem is None:
            return
        owner = type(self).__name__
        if not problem.missing:
            log.warning(
                "%s: the cache file %s is %s; rebuilding the cache in %s.",
                owner,
                problem.path,
                problem.reason,
                path,
            )
        build_cache(path, self.build, owner=owner, deep=deep)

    def setup(self, stage: str | None = None) -> None:
        if self.is_loaded():
            return
        path = self.cache_path()
        _, problem = read_manifest(path)
        if problem is not None and problem.kind in ("missing", "incomplete"):
            # No finished cache (prepare_data never ran, as without a Trainer): build it.
            # A finished but damaged cache is not rebuilt here, while other ranks may
            # read it: the reader raises CorruptCacheError naming the file and the fix.
            self.prepare_data()
        cache = CacheReader(path, type(self).__name__)
        rank, world_size = self.rank_and_world_size()
        self.load(cache, rank, world_size)
        self._cache_loaded = True

    def _checked_loader(self, split: str) -> Iterable[Any]:
        if not self.is_loaded():
            raise RuntimeError(
                f"{type(self).__name__}: call `setup()` before requesting dataloaders."
            )
        return self.loader(split)

    def train_dataloader(self) -> Any:
        return self._checked_loader("train")

    def val_dataloader(self) -> Any:
        return self._checked_loader("val")

    def test_dataloader(self) -> Any:
        return self._checked_loader("test")

    def predict_dataloader(self) -> Any:
        return self._checked_loader("predict")
