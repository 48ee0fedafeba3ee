"""The on-disk cache every prepared artefact of lightgraph lives in (no Lightning here).

A cache directory ``<cache_dir>/<name>-<digest>`` is built once by :func:`build_cache`
through a :class:`CacheWriter` (atomic files in a private staging directory, published
whole with one :func:`os.replace`, a manifest ``meta.json`` with every file's size and
SHA-1 written last) and read by a :class:`CacheReader`, which turns a missing, truncated
or corrupt file into a :class:`CorruptCacheError` naming the file and the fix.
:class:`~lightgraph.data.lightning.cached_data_module.CachedDataModule` is the Lightning side;
the partition store (:mod:`lightgraph.data.store.partition_store`) is written and read through
this module without importing Lightning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)

#: The file a cache's completeness hinges on: metadata plus manifest, written last.
META_FILE = "meta.json"
#: Version of the ``"manifest"`` entry of :data:`META_FILE`.
MANIFEST_FORMAT = 1
_MANIFEST_KEY = "manifest"
_TMP_SUFFIX = ".tmp"
_CHUNK = 1 << 20
VERIFY_MODES: tuple[str, ...] = ("size", "checksum")


class CorruptCacheError(RuntimeError):
    """A cache file is missing, truncated or unreadable although the manifest lists it.

    Attributes:
        path: the offending file.
        directory: the cache directory (delete it to rebuild everything).
    """

    def __init__(self, message: str, path: str, directory: str) -> None:
        super().__init__(message)
        self.path = path
        self.directory = directory


# ----------------------------------------------------------------------------- digests
def fingerprint_digest(key: Mapping[str, Any]) -> str:
    """16 hex digits identifying ``key`` (SHA-1 of its sorted JSON)."""
    try:
        text = json.dumps(key, sort_keys=True)
    except TypeError as err:
        raise TypeError(
            f"fingerprint_digest: expected a JSON-serialisable cache key (str, int, float, bool, "
            f"None, lists and dicts of them) but got {key!r}; hash tensors with "
            f"`tensor_digest` first ({err})."
        ) from err
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def tensor_digest(tensor: Tensor) -> str:
    """SHA-1 of a tensor's contents (for cache keys that depend on a tensor argument)."""
    return hashlib.sha1(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def file_sha1(path: str | os.PathLike) -> str:
    """SHA-1 of a file's bytes, read in chunks."""
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ------------------------------------------------------------------------ atomic writes
def _fsync_file(path: str) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(directory: str) -> None:
    # Makes the renames durable on POSIX; directories cannot be opened on every platform.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success fsync it and move it onto ``path``.

    For writers that want a path (``torch.save``, ``numpy.save``, ``PartitionPlan.save``).
    The temporary file lives in the same directory (so :func:`os.replace` is an atomic
    rename) and is removed if the block raises; ``path`` is then left untouched.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(
        directory, f".{os.path.basename(path)}.{os.getpid()}-{uuid.uuid4().hex[:8]}{_TMP_SUFFIX}"
    )
    # O_EXCL: a fresh file; mode 0o666 & ~umask, as a plain open() would give the file.
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file for writing; on success fsync it and move it onto ``path``."""
    if mode not in ("w", "wb", "wt"):
        raise ValueError(
            f"atomic_write: expected `mode` to be one of ('w', 'wb', 'wt') but got {mode!r}."
        )
    with atomic_path(path) as tmp:
        with open(tmp, mode) as f:
            yield f


# --------------------------------------------------------------------- cache inspection
@dataclass(frozen=True)
class CacheProblem:
    """Why a cache directory cannot be used as it is.

    Attributes:
        path: the offending file (or the directory when the whole cache is missing).
        reason: what is wrong with it, for messages.
        kind: ``"missing"`` (nothing was ever written there: build it, no warning),
            ``"incomplete"`` (no manifest: a build never finished; build it) or
            ``"corrupt"`` (a finished cache was damaged afterwards).
    """

    path: str
    reason: str
    kind: str = "corrupt"

    @property
    def missing(self) -> bool:
        return self.kind == "missing"


def _visible_entries(directory: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [n for n in names if not (n.startswith(".") and n.endswith(_TMP_SUFFIX))]


def read_manifest(directory: str) -> tuple[dict[str, Any] | None, CacheProblem | None]:
    """``(meta, None)`` for a finished cache, ``(None, problem)`` otherwise.

    ``meta`` is the parsed :data:`META_FILE`, its ``"manifest"`` entry included.
    """
    meta_path = os.path.join(directory, META_FILE)
    if not os.path.exists(meta_path):
        if not _visible_entries(directory):
            return None, CacheProblem(directory, "missing", "missing")
        return None, CacheProblem(
            meta_path,
            "missing: the cache is half-written (the manifest is written last)",
            "incomplete",
        )
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as err:
        return None, CacheProblem(meta_path, f"unreadable ({type(err).__name__}: {err})")
    manifest = meta.get(_MANIFEST_KEY) if isinstance(meta, dict) else None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != MANIFEST_FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        return None, CacheProblem(
            meta_path,
            "without a manifest of its files (half-written, or written by an older lightgraph)",
            "incomplete",
        )
    return meta, None


def check_file(path: str, record: Mapping[str, Any], deep: bool = False) -> CacheProblem | None:
    """Compare one file with its manifest record (size; SHA-1 too with ``deep``)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return CacheProblem(path, "missing")
    expected = record.get("bytes")
    if size != expected:
        return CacheProblem(
            path, f"truncated or overwritten ({size} bytes where the manifest lists {expected})"
        )
    if deep and file_sha1(path) != record.get("sha1"):
        return CacheProblem(path, "corrupt (its SHA-1 differs from the manifest's)")
    return None


def check_cache(directory: str, deep: bool = False) -> CacheProblem | None:
    """``None`` if ``directory`` holds a complete cache, else the first problem found.

    Args:
        directory: a cache directory (:meth:`CachedDataModule.cache_path`).
        deep: also compare every file's SHA-1 with the manifest (reads the whole cache);
            by default only the sizes are compared.
    """
    meta, problem = read_manifest(directory)
    if problem is not None:
        return problem
    assert meta is not None
    for name, record in sorted(meta[_MANIFEST_KEY]["files"].items()):
        problem = check_file(os.path.join(directory, name), record, deep)
        if problem is not None:
            return problem
    return None


def _hidden_sibling(path: str, tag: str) -> str:
    """A hidden, unique name next to ``path`` that inspections and readers ignore."""
    parent, base = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{base}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}{_TMP_SUFFIX}")


def _publish(
    staging: str, path: str, deep: bool, replace: bool = False, owner: str = "CachedDataModule"
) -> bool:
    """Move the finished ``staging`` directory onto ``path``; ``False`` if another won.

    ``os.replace`` of a directory succeeds only where ``path`` is absent (or empty), so
    concurrent builders publish one complete copy each or none. A damaged or
    half-written cache at ``path`` is moved aside first and deleted; so is a complete one
    with ``replace`` (a cache the caller knows to be stale).
    """
    parent = os.path.dirname(os.path.abspath(path))
    for _ in range(8):
        try:
            os.replace(staging, path)
        except OSError:
            pass  # ``path`` exists and is not empty
        else:
            _fsync_dir(parent)
            return True
        if not replace and check_cache(path, deep=deep) is None:  # another builder won
            return False
        aside = _hidden_sibling(path, "old")
        try:
            os.replace(path, aside)
        except FileNotFoundError:  # another builder moved it already: retry
            continue
        shutil.rmtree(aside, ignore_errors=True)
    raise RuntimeError(
        f"{owner}: could not move the built cache {staging} onto {path}: another "
        f"process keeps replacing it. Delete {path} and re-run."
    )


def _fix(owner: str, path: str, directory: str) -> str:
    return (
        f"Delete {directory} (or just {os.path.basename(path)}) and re-run: "
        f"`{owner}.prepare_data()` (local rank 0) rebuilds it."
    )


# ------------------------------------------------------------------------ writer, reader
class CacheWriter:
    """Writes the named files of one cache directory atomically and records them.

    :meth:`CachedDataModule.build` receives one; the base writes :data:`META_FILE` with
    the manifest of everything recorded here after ``build`` returns. Names are relative
    paths inside the cache directory (subdirectories allowed, no ``..``).

    Attributes:
        directory: where the files are written (the base's private staging directory).
        target: the cache directory it becomes once published (for log messages).
        files: the manifest so far, ``{name: {"bytes": ..., "sha1": ...}}``.
    """

    def __init__(
        self, directory: str, owner: str = "CachedDataModule", target: str | None = None
    ) -> None:
        self.directory = directory
        self.owner = owner
        self.target = directory if target is None else target
        self.files: dict[str, dict[str, Any]] = {}

    def _target(self, name: str) -> str:
        parts = name.replace("\\", "/").split("/") if isinstance(name, str) else []
        if (
            not parts
            or os.path.isabs(name)
            or any(p in ("", ".", "..") for p in parts)
            or name == META_FILE
            or (parts[-1].startswith(".") and parts[-1].endswith(_TMP_SUFFIX))
        ):
            raise ValueError(
                f"{self.owner}: expected a cache file name to be a relative path inside the "
                f"cache directory (no '..', not {META_FILE!r}, which the base writes) but got "
                f"{name!r}."
            )
        return os.path.join(self.directory, *parts)

    def _record(self, name: str, path: str) -> None:
        self.files[name.replace("\\", "/")] = {
            "bytes": os.path.getsize(path),
            "sha1": file_sha1(path),
        }

    @contextlib.contextmanager
    def path(self, name: str) -> Iterator[str]:
        """A temporary path to write ``name`` to (moved into place when the block ends)."""
        target = self._target(name)
        with atomic_path(target) as tmp:
            yield tmp
            self._record(name, tmp)

    @contextlib.contextmanager
    def open(self, name: str, mode: str = "wb") -> Iterator[IO[Any]]:
        """An open temporary file for ``name`` (moved into place when the block ends)."""
        with self.path(name) as tmp:
            with open(tmp, mode) as f:
                yield f

    def save(self, name: str, obj: Any) -> None:
        """``torch.save(obj)`` as ``name``."""
        with self.path(name) as tmp:
            torch.save(obj, tmp)

    def save_json(self, name: str, obj: Any) -> None:
        """``obj`` as JSON in ``name``."""
        with self.open(name, "w") as f:
            json.dump(obj, f, indent=2)

    def commit(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        """Write :data:`META_FILE`: ``meta`` plus the manifest. The base calls it last."""
        if _MANIFEST_KEY in meta:
            raise ValueError(
                f"{self.owner}: the metadata `build` returns must not use the key "
                f"{_MANIFEST_KEY!r} (the base stores the file manifest there)."
            )
        doc = dict(meta)
        doc[_MANIFEST_KEY] = {"format": MANIFEST_FORMAT, "files": dict(sorted(self.files.items()))}
        os.makedirs(self.directory, exist_ok=True)
        _fsync_dir(self.directory)  # the data files' renames first, then the manifest
        with atomic_write(os.path.join(self.directory, META_FILE), "w") as f:
            json.dump(doc, f, indent=2)
        _fsync_dir(self.directory)
        return doc


class CacheReader:
    """Reads the files of one finished cache, checked against its manifest.

    :meth:`CachedDataModule.load` receives one. Any failure while reading a file -- a
    missing or truncated file, garbage bytes -- becomes a :class:`CorruptCacheError` that
    names the file and the fix.

    Args:
        directory: the cache directory.
        owner: the component named in error messages.
        fix: the sentence telling how to repair a damaged cache (default: delete it and
            re-run ``<owner>.prepare_data()``); for caches built outside a data module.

    Attributes:
        directory: the cache directory.
        meta: the metadata ``build`` returned (without the manifest).
        files: the manifest, ``{name: {"bytes": ..., "sha1": ...}}``.
    """

    def __init__(
        self, directory: str, owner: str = "CachedDataModule", fix: str | None = None
    ) -> None:
        self.directory = directory
        self.owner = owner
        self.fix = fix
        meta, problem = read_manifest(directory)
        if problem is not None:
            raise self._error(problem.path, problem.reason)
        assert meta is not None
        self.files: dict[str, dict[str, Any]] = meta.pop(_MANIFEST_KEY)["files"]
        self.meta: dict[str, Any] = meta

    def _error(self, path: str, reason: str) -> CorruptCacheError:
        fix = self.fix if self.fix is not None else _fix(self.owner, path, self.directory)
        return CorruptCacheError(
            f"{self.owner}: the cache file {path} is {reason}. {fix}",
            path,
            self.directory,
        )

    def path(self, name: str, deep: bool = False) -> str:
        """The full path of ``name`` after checking it against the manifest (size; SHA-1 with ``deep``)."""
        path = os.path.join(self.directory, *name.split("/"))
        record = self.files.get(name)
        if record is None:
            raise self._error(path, f"not listed in the manifest of {self.directory}")
        problem = check_file(path, record, deep)
        if problem is not None:
            raise self._error(problem.path, problem.reason)
        return path

    @contextlib.contextmanager
    def reading(self, name: str) -> Iterator[str]:
        """Yield the checked path of ``name``; an error raised in the block names the file.

        Keep only the reading inside the block: every exception but ``MemoryError``
        becomes a :class:`CorruptCacheError` (chained to the original).
        """
        path = self.path(name)
        try:
            yield path
        except (CorruptCacheError, MemoryError):
            raise
        except Exception as err:
            raise self._error(path, f"unreadable ({type(err).__name__}: {err})") from err

    def load(self, name: str, **kwargs: Any) -> Any:
        """``torch.load`` of ``name`` (``weights_only=True`` unless given)."""
        kwargs.setdefault("weights_only", True)
        with self.reading(name) as path:
            return torch.load(path, **kwargs)

    def load_json(self, name: str) -> Any:
        with self.reading(name) as path, open(path) as f:
            return json.load(f)


def build_cache(
    path: str | os.PathLike,
    build: Callable[[CacheWriter], Mapping[str, Any] | None],
    *,
    owner: str = "CachedDataModule",
    deep: bool = False,
    replace: bool = False,
) -> bool:
    """Build the cache directory ``path`` with ``build`` and publish it atomically.

    The one code path of every cache build (:meth:`CachedDataModule.prepare_data` uses
    it; so do stores built outside a data module): ``build`` receives a
    :class:`CacheWriter` on a private staging directory next to ``path``; its return
    value plus the manifest is written to :data:`META_FILE` last; the staging directory
    is then moved onto ``path`` whole. If ``build`` raises, nothing is published and the
    staging directory is removed.

    Args:
        path: the cache directory to create.
        build: writes every file through the writer; returns JSON-serialisable metadata.
        owner: the component named in messages.
        deep: compare SHA-1s (not only sizes) when checking a cache found at ``path``.
        replace: also replace a *complete* cache found at ``path`` (one the caller knows
            to be stale); by default a complete cache found there is kept, as when
            another process finished the same build first.

    Returns:
        ``True`` if this call published its build, ``False`` if a complete cache that
        another process published meanwhile was kept.
    """
    path = os.fspath(path)
    start = time.perf_counter()
    staging = _hidden_sibling(path, "build")
    os.makedirs(os.path.dirname(staging), exist_ok=True)
    os.mkdir(staging, 0o777)  # the umask applies, as for a plain mkdir
    try:
        writer = CacheWriter(staging, owner, target=path)
        meta = build(writer)
        writer.commit(dict(meta or {}))
        published = _publish(staging, path, deep, replace=replace, owner=owner)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.debug(
        "%s: %s %s in %.2f s",
        owner,
        "wrote" if published else "another process wrote",
        path,
        time.perf_counter() - start,
    )
    return published
