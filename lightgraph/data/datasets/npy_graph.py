"""A graph the user brings as NumPy files: :class:`NpyGraph`, read memory-mapped.

The layout is a directory of ``.npy`` files (see :data:`NPY_LAYOUT`), the arrays of the
:class:`~lightgraph.data.GraphDataset` layout. :class:`NpyGraph` opens them with
``numpy.load(..., mmap_mode="r")``: preparation streams them in chunks through
:meth:`NpyGraph.on_disk`, and only :meth:`NpyGraph.load` (the in-memory path) reads the
graph whole. :mod:`lightgraph.data.datasets.npy_graph_writer` writes the layout.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.lib.format as npy_format
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import MASK_NAMES, GraphDataset, validate_graph
from lightgraph.data.datasets.link_split import (
    LinkSplit,
    OfficialLinkSplit,
    edge_keys,
    is_symmetric,
)
from lightgraph.data.datasets.on_disk import OnDiskGraph
from lightgraph.utilities.checks import check_graph_edge_index, check_int

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "FINGERPRINT_BLOCKS",
    "FINGERPRINT_BLOCK_BYTES",
    "NPY_LAYOUT",
    "NpyGraph",
]

_FORMAT_VERSION = 1  # bump when the layout or the fingerprint's recipe changes
DEFAULT_CHUNK_BYTES = 64 * 2**20
"""Bytes of one chunk of the chunked checks, reads and writes (64 MiB)."""
FINGERPRINT_BLOCKS = 64
"""Blocks sampled at evenly spaced offsets of every file by :meth:`NpyGraph.fingerprint`."""
FINGERPRINT_BLOCK_BYTES = 4096
"""Bytes of one sampled block."""

ARRAY_NAMES = ("edge_index", "x", "y", *MASK_NAMES)
META_FILE = "meta.json"
META_KEYS = ("name", "num_classes")
INDEX_DTYPES = ("int32", "int64")
FEATURE_DTYPES = ("float16", "float32")

LINK_SPLIT_FILES = ("link_train", "link_val", "link_test")
LINK_FILES = (*LINK_SPLIT_FILES, "link_val_neg", "link_test_neg")

NPY_LAYOUT = (
    (
        "edge_index.npy",
        "int32 or int64 [2, E]: row 0 sources, row 1 targets (messages flow 0 -> 1)",
    ),
    ("x.npy", "float16 or float32 [N, F]: node features"),
    ("y.npy", "int64 [N], or float16/float32 0/1 [N, C] (multi-label): labels"),
    ("train_mask.npy", "bool [N]"),
    ("val_mask.npy", "bool [N]"),
    ("test_mask.npy", "bool [N]"),
    ("meta.json", '(optional) {"name": "...", "num_classes": C}'),
)
"""The files of an :class:`NpyGraph` directory and what each holds."""


def layout_text() -> str:
    """The expected layout, one file a line (for error messages)."""
    width = max(len(name) for name, _ in NPY_LAYOUT)
    return "\n".join(f"  {name.ljust(width)}  {what}" for name, what in NPY_LAYOUT)


@dataclass(frozen=True)
class _Header:
    """What a ``.npy`` header declares."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    offset: int


def _read_header(owner: str, path: str) -> _Header:
    """The header of ``path``, checked against the file's size; named errors otherwise."""
    name = os.path.basename(path)
    try:
        with open(path, "rb") as f:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = npy_format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = npy_format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
            offset = f.tell()
    except OSError:
        raise
    except Exception as exc:  # numpy's header parser raises several kinds on a bad header
        raise ValueError(
            f"{owner}: `{name}` is not a readable .npy file ({exc}); the file is corrupted or "
            f"was not written by numpy.save. Rewrite it, e.g. with numpy.save({name!r}, array)."
        ) from exc
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = os.path.getsize(path)
    if size < expected:
        raise ValueError(
            f"{owner}: `{name}` is truncated: it has {size} bytes but its header declares "
            f"shape {tuple(shape)} of {dtype}, which needs {expected} bytes. The file was cut "
            f"short (an interrupted copy or write?); copy or write it again."
        )
    if size > expected:
        raise ValueError(
            f"{owner}: `{name}` has {size - expected} bytes more than its header declares "
            f"(shape {tuple(shape)} of {dtype}: {expected} bytes); the file is corrupted. "
            f"Write it again with numpy.save."
        )
    return _Header(tuple(int(s) for s in shape), dtype, bool(fortran), offset)


def _open(owner: str, path: str) -> np.ndarray:
    """``path`` memory-mapped read-only (numpy's errors wrapped in a named one)."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(
            f"{owner}: `{os.path.basename(path)}` could not be memory-mapped ({exc})."
        ) from exc


def rows_per_chunk(row_bytes: int, chunk_bytes: int) -> int:
    """Rows of ``row_bytes`` each in a chunk of about ``chunk_bytes`` (at least one)."""
    return max(1, chunk_bytes // max(1, row_bytes))


def chunk_spans(total: int, step: int) -> Iterator[tuple[int, int]]:
    """``(lo, hi)`` of consecutive chunks of ``step`` rows covering ``[0, total)``."""
    for lo in range(0, total, step):
        yield lo, min(total, lo + step)


def _column_range(array: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """Smallest and largest value of ``array[:, lo:hi]`` (one chunk of the edge check)."""
    block = array[:, lo:hi]
    return int(block.min()), int(block.max())


def _sample_digest(path: str, digest: Any) -> None:
    """Feed ``digest`` the file's first block and ``FINGERPRINT_BLOCKS`` evenly spaced blocks.

    A file no longer than those blocks together is read whole.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        block = FINGERPRINT_BLOCK_BYTES
        if size <= (FINGERPRINT_BLOCKS + 1) * block:
            digest.update(os.pread(fd, size, 0))
            return
        last = size - block
        offsets = [0] + [i * last // (FINGERPRINT_BLOCKS - 1) for i in range(FINGERPRINT_BLOCKS)]
        for offset in offsets:
            digest.update(os.pread(fd, block, offset))
    finally:
        os.close(fd)


class NpyGraph(GraphDataset):
    """A graph stored as a directory of NumPy files, read memory-mapped.

    The directory holds (``N`` nodes, ``E`` edges, ``F`` features, ``C`` labels):

    ======================  ===================================================
    ``edge_index.npy``      ``int32`` or ``int64`` ``[2, E]``: row 0 sources, row 1 targets
    ``x.npy``               ``float16`` or ``float32`` ``[N, F]``
    ``y.npy``               ``int64`` ``[N]``, or ``float16``/``float32`` 0/1 ``[N, C]``
                            (multi-label)
    ``train_mask.npy``      ``bool`` ``[N]`` (likewise ``val_mask.npy``, ``test_mask.npy``)
    ``meta.json``           optional: ``{"name": ..., "num_classes": ...}``
    ``link_train.npy``      optional, link prediction: ``int32``/``int64`` ``[2, E_t]``
                            training positives (likewise ``link_val.npy``,
                            ``link_test.npy``: all three or none)
    ``link_val_neg.npy``    optional: ``[Q_val, K]`` negative destinations per validation
                            query (likewise ``link_test_neg.npy``); drawn when absent
    ======================  ===================================================

    With the ``link_*`` files the graph poses a link-prediction task with that split
    (:meth:`official_link_split`), which the link data modules use instead of a random
    one; the split is undirected when ``edge_index`` is symmetric.

    Construction reads the six ``.npy`` headers and ``meta.json`` only, and checks every
    dtype, shape, row count and file size against the headers (a missing, truncated or
    corrupted file raises an error naming it). ``num_features`` and ``multilabel`` come
    from the headers; ``num_classes`` from ``meta.json``, else ``C`` (multi-label), else
    ``y.max() + 1`` computed once in chunks.

    The values are checked in chunks of ``chunk_bytes`` (bounded memory) by
    :meth:`check_edges` (every node id in ``[0, N)``) and :meth:`check_labels` (class ids
    in ``[0, num_classes)``, multi-label entries 0 or 1). :meth:`on_disk` runs both the
    first time it is called on an instance, so preparation never streams a graph with
    dangling edges; :meth:`load` checks the loaded graph with
    :func:`~lightgraph.data.datasets.validate_graph`.

    Args:
        root: the directory.
    """

    def __init__(self, root: str) -> None:
        owner = type(self).__name__
        if not isinstance(root, (str, os.PathLike)):
            raise TypeError(
                f"{owner}: expected `root` to be a directory path (str) but got "
                f"{type(root).__name__}."
            )
        self.root = os.fspath(root)
        self._owner = owner
        self._headers = self._read_headers()
        self._meta = self._read_meta()
        self._maps: dict[str, np.ndarray] = {}
        self._label_range: tuple[int, int] | None = None
        self._checked = False
        if self.multilabel and "num_classes" in self._meta:
            width = self._headers["y"].shape[1]
            if self._meta["num_classes"] != width:
                raise ValueError(
                    f"{owner}: `meta.json` declares `num_classes` {self._meta['num_classes']} "
                    f"but the multi-label `y.npy` has {width} label columns; fix or drop "
                    f"`num_classes` in {os.path.join(self.root, META_FILE)}."
                )

    def __repr__(self) -> str:
        return f"{self._owner}(root={self.root!r})"

    def __getstate__(self) -> dict[str, Any]:
        # A pickled memmap carries its whole array: send the path, reopen on the other side.
        state = self.__dict__.copy()
        state["_maps"] = {}
        return state

    # ----------------------------------------------------------------- the headers
    def _path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def _read_headers(self) -> dict[str, _Header]:
        owner = self._owner
        if not os.path.isdir(self.root):
            raise FileNotFoundError(
                f"{owner}: there is no directory {self.root!r}. Expected a directory with\n"
                f"{layout_text()}"
            )
        missing = [f"{n}.npy" for n in ARRAY_NAMES if not os.path.isfile(self._path(f"{n}.npy"))]
        if missing:
            names = ", ".join(f"`{m}`" for m in missing)
            raise FileNotFoundError(
                f"{owner}: {names} missing in {self.root!r}. Expected a directory with\n"
                f"{layout_text()}\n(write one from a PyG Data with lightgraph.data.from_pyg, "
                f"or from a recipe's dataset with `lightgraph convert`)."
            )
        headers = {n: _read_header(owner, self._path(f"{n}.npy")) for n in ARRAY_NAMES}

        def fail(name: str, expected: str, header: _Header) -> ValueError:
            return ValueError(
                f"{owner}: expected `{name}.npy` in {self.root!r} to be {expected} but found "
                f"shape {header.shape} and dtype {header.dtype}."
            )

        ei = headers["edge_index"]
        if len(ei.shape) != 2 or ei.shape[0] != 2:
            raise fail("edge_index", "a 2-D [2, E] array (row 0 sources, row 1 targets)", ei)
        if ei.dtype.name not in INDEX_DTYPES or not ei.dtype.isnative:
            raise fail("edge_index", "int32 or int64 (native byte order)", ei)
        x = headers["x"]
        if len(x.shape) != 2:
            raise fail("x", "a 2-D [N, F] array", x)
        if x.dtype.name not in FEATURE_DTYPES or not x.dtype.isnative:
            raise fail("x", "float16 or float32 (e.g. x.astype(numpy.float32))", x)
        if x.shape[0] < 1 or x.shape[1] < 1:
            raise fail("x", "an array with at least one node (row) and one feature (column)", x)
        y = headers["y"]
        if len(y.shape) == 1:
            if y.dtype.name != "int64" or not y.dtype.isnative:
                raise fail("y", "int64 class ids [N] (e.g. y.astype(numpy.int64))", y)
        elif len(y.shape) == 2:
            if y.dtype.name not in FEATURE_DTYPES or not y.dtype.isnative or y.shape[1] < 1:
                raise fail("y", "float16 or float32 0/1 labels [N, C >= 1] (multi-label)", y)
        else:
            raise fail("y", "int64 [N] or float16/float32 0/1 [N, C] (multi-label)", y)
        for name in MASK_NAMES:
            if len(headers[name].shape) != 1 or headers[name].dtype != np.bool_:
                raise fail(name, "a bool [N] array", headers[name])
        n = x.shape[0]
        for name in ("y", *MASK_NAMES):
            if headers[name].shape[0] != n:
                raise ValueError(
                    f"{owner}: `{name}.npy` has {headers[name].shape[0]} rows but `x.npy` has "
                    f"{n}: every per-node array needs one row per node."
                )
        return headers

    def _read_meta(self) -> dict[str, Any]:
        path = self._path(META_FILE)
        if not os.path.isfile(path):
            return {}
        owner = self._owner
        try:
            with open(path, encoding="utf-8") as f:
                meta = json.load(f)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"{owner}: `meta.json` in {self.root!r} is not valid JSON ({exc})."
            ) from exc
        if not isinstance(meta, dict):
            raise ValueError(
                f"{owner}: expected `meta.json` to hold a JSON object "
                f'({{"name": ..., "num_classes": ...}}) but got {type(meta).__name__}.'
            )
        for key in meta:
            if key not in META_KEYS:
                raise ValueError(
                    f"{owner}: `meta.json` has an unknown key {key!r}; allowed keys are {META_KEYS}."
                )
        if "num_classes" in meta:
            value = meta["num_classes"]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"{owner}: expected `num_classes` in `meta.json` to be a positive integer "
                    f"but got {value!r}."
                )
        if "name" in meta and not isinstance(meta["name"], str):
            raise ValueError(
                f"{owner}: expected `name` in `meta.json` to be a string but got {meta['name']!r}."
            )
        return meta

    def _array(self, name: str) -> np.ndarray:
        if name not in self._maps:
            self._maps[name] = _open(self._owner, self._path(f"{name}.npy"))
        return self._maps[name]

    # ----------------------------------------------------------------- the sizes
    @property
    def name(self) -> str | None:
        """``meta.json``'s ``name``, if any."""
        return self._meta.get("name")

    @property
    def num_nodes(self) -> int:
        return self._headers["x"].shape[0]

    @property
    def num_edges(self) -> int:
        return self._headers["edge_index"].shape[1]

    @property
    def num_features(self) -> int:
        return self._headers["x"].shape[1]

    @property
    def multilabel(self) -> bool:
        return len(self._headers["y"].shape) == 2

    @property
    def num_classes(self) -> int:
        """``meta.json``'s ``num_classes``, else ``C`` (multi-label), else ``y.max() + 1``."""
        if "num_classes" in self._meta:
            return int(self._meta["num_classes"])
        if self.multilabel:
            return self._headers["y"].shape[1]
        return self._labels_range()[1] + 1

    def _labels_range(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> tuple[int, int]:
        """Smallest and largest class id of a single-label ``y`` (chunked, computed once)."""
        if self._label_range is None:
            y = self._array("y")
            lo, hi = None, None
            for a, b in chunk_spans(y.shape[0], rows_per_chunk(y.itemsize, chunk_bytes)):
                block = y[a:b]
                lo = int(block.min()) if lo is None else min(lo, int(block.min()))
                hi = int(block.max()) if hi is None else max(hi, int(block.max()))
            assert lo is not None and hi is not None  # x has >= 1 row, so y does
            self._label_range = (lo, hi)
        return self._label_range

    # ----------------------------------------------------------------- the checks
    def check_edges(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        """Check that every node id of ``edge_index.npy`` lies in ``[0, N)``.

        Reads the edges in chunks of about ``chunk_bytes`` (bounded memory).

        Raises:
            ValueError: naming the file, the allowed range and the first bad column.
        """
        chunk_bytes = check_int(self._owner, "chunk_bytes", chunk_bytes)
        edges = self._array("edge_index")
        n = self.num_nodes
        step = rows_per_chunk(2 * edges.itemsize, chunk_bytes)
        for lo, hi in chunk_spans(edges.shape[1], step):
            small, large = _column_range(edges, lo, hi)
            if small < 0 or large >= n:
                block = edges[:, lo:hi]
                column = lo + int(np.flatnonzero(((block < 0) | (block >= n)).any(axis=0))[0])
                raise ValueError(
                    f"{self._owner}: expected the node ids of `edge_index.npy` to lie in "
                    f"[0, {n - 1}] (N = {n} rows of `x.npy`) but column {column} holds "
                    f"{edges[:, column].tolist()}."
                )

    def check_labels(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        """Check that class ids lie in ``[0, num_classes)`` (multi-label: entries 0 or 1).

        Reads ``y.npy`` in chunks of about ``chunk_bytes`` (bounded memory).
        """
        chunk_bytes = check_int(self._owner, "chunk_bytes", chunk_bytes)
        y = self._array("y")
        if self.multilabel:
            step = rows_per_chunk(y.itemsize * max(1, y.shape[1]), chunk_bytes)
            for lo, hi in chunk_spans(y.shape[0], step):
                block = y[lo:hi]
                bad = (block != 0) & (block != 1)
                if bad.any():
                    row, col = (int(i[0]) for i in np.nonzero(bad))
                    raise ValueError(
                        f"{self._owner}: expected the multi-label `y.npy` to hold 0 or 1 but "
                        f"row {lo + row}, column {col} holds {float(block[row, col])}."
                    )
            return
        small, large = self._labels_range(chunk_bytes)
        c = self.num_classes
        if small < 0 or large >= c:
            bad_value = small if small < 0 else large
            raise ValueError(
                f"{self._owner}: expected the class ids of `y.npy` to lie in [0, {c - 1}] "
                f"(num_classes = {c}) but found {bad_value}."
            )

    # ----------------------------------------------------------------- the graph
    def on_disk(self) -> OnDiskGraph:
        """The memory-mapped arrays (read-only), checked once with :meth:`check_edges` and
        :meth:`check_labels`."""
        if not self._checked:
            self.check_edges()
            self.check_labels()
            self._checked = True
        arrays = {name: self._array(name) for name in ARRAY_NAMES}
        return OnDiskGraph(
            num_nodes=self.num_nodes,
            num_classes=self.num_classes,
            multilabel=self.multilabel,
            **arrays,
        )

    def load(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Data:
        """The whole graph as a PyG ``Data`` (``edge_index`` ``long``, ``x`` ``float32``,
        ``y`` ``long`` or ``float32``, boolean masks), copied in chunks."""

        def read(name: str, dtype: torch.dtype) -> Tensor:
            source = self._array(name)
            out = torch.empty(source.shape, dtype=dtype)
            target = out.numpy()
            if source.ndim == 2 and name == "edge_index":
                step = rows_per_chunk(2 * source.itemsize, chunk_bytes)
                for lo, hi in chunk_spans(source.shape[1], step):
                    target[:, lo:hi] = source[:, lo:hi]
            else:
                row = source.itemsize * int(np.prod(source.shape[1:], dtype=np.int64))
                for lo, hi in chunk_spans(source.shape[0], rows_per_chunk(row, chunk_bytes)):
                    target[lo:hi] = source[lo:hi]
            return out

        data = Data(
            x=read("x", torch.float32),
            y=read("y", torch.float32 if self.multilabel else torch.long),
            edge_index=read("edge_index", torch.long),
            **{name: read(name, torch.bool) for name in MASK_NAMES},
        )
        try:
            validate_graph(data, self.num_classes, self.multilabel)
        except ValueError as exc:
            raise ValueError(f"{self._owner} at {self.root!r}: {exc}") from exc
        return data

    def official_link_split(self) -> OfficialLinkSplit | None:
        """The link split of the ``link_*`` files, or ``None`` when there are none."""
        present = [os.path.isfile(self._path(f"{n}.npy")) for n in LINK_SPLIT_FILES]
        if not any(present):
            return None
        owner = "NpyGraph"
        if not all(present):
            missing = [f"{n}.npy" for n, p in zip(LINK_SPLIT_FILES, present, strict=True) if not p]
            raise ValueError(
                f"{owner}: a link split needs link_train.npy, link_val.npy and link_test.npy "
                f"in {self.root!r}, but {missing} are missing."
            )
        n = self.num_nodes
        edges = {}
        for name, split in zip(LINK_SPLIT_FILES, ("train", "val", "test"), strict=True):
            array = torch.from_numpy(np.load(self._path(f"{name}.npy")).astype(np.int64))
            edges[split] = check_graph_edge_index(owner, f"{name}.npy", array, n)
        graph = torch.from_numpy(np.asarray(self._array("edge_index"), dtype=np.int64))
        keys = edge_keys(graph[0], graph[1], n).unique()
        split = LinkSplit(
            num_nodes=n,
            undirected=is_symmetric(graph, n),
            train=edges["train"],
            val=edges["val"],
            test=edges["test"],
            other=torch.empty(2, 0, dtype=torch.long),
            remove_reverse=True,
            graph_keys=keys,
        )
        negatives = {}
        for split_name in ("val", "test"):
            path = self._path(f"link_{split_name}_neg.npy")
            if os.path.isfile(path):
                neg = torch.from_numpy(np.load(path).astype(np.int64))
                queries = split.positives(split_name).size(1)
                if neg.dim() != 2 or neg.size(0) != queries:
                    raise ValueError(
                        f"{owner}: expected link_{split_name}_neg.npy to hold [{queries}, K] "
                        f"negative destinations (one row per link_{split_name}.npy edge) but "
                        f"got shape {tuple(neg.shape)}."
                    )
                if neg.numel() and (int(neg.min()) < 0 or int(neg.max()) >= n):
                    raise ValueError(
                        f"{owner}: expected node ids in link_{split_name}_neg.npy to lie in "
                        f"[0, {n - 1}] but found values in [{int(neg.min())}, {int(neg.max())}]."
                    )
                negatives[split_name] = neg
        return OfficialLinkSplit(split, negatives, shared=False, metric="mrr")

    def fingerprint(self) -> str:
        """A cache key that notices a changed file without reading the files whole.

        It covers the layout version and, for each of the six ``.npy`` files and
        ``meta.json`` (when present): the file's name, size and modification time (ns), and
        a SHA-256 of a fixed sample of its bytes -- the first ``FINGERPRINT_BLOCK_BYTES``
        (4 KiB, which hold the ``.npy`` header with dtype and shape) and
        ``FINGERPRINT_BLOCKS`` (64) blocks of 4 KiB at evenly spaced offsets from the start
        to the end of the file (a file under 260 KiB is read whole). At most 260 KiB are
        read per file. A rewrite is noticed through the size, the mtime or the sample; an
        edit that keeps size and mtime and touches no sampled byte is not. The directory's
        path is not part of it: a copy that keeps the mtimes (``cp -p``, ``rsync -a``)
        keeps the fingerprint, and the caches built from it.
        """
        digest = hashlib.sha256()
        names = [f"{n}.npy" for n in ARRAY_NAMES]
        if os.path.isfile(self._path(META_FILE)):
            names.append(META_FILE)
        names += [f"{n}.npy" for n in LINK_FILES if os.path.isfile(self._path(f"{n}.npy"))]
        for name in names:
            path = self._path(name)
            stat = os.stat(path)
            digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
            _sample_digest(path, digest)
        return (
            f"NpyGraph(v{_FORMAT_VERSION},N={self.num_nodes},E={self.num_edges},"
            f"F={self.num_features},sha256={digest.hexdigest()[:32]})"
        )
