"""Writing the :class:`~lightgraph.data.NpyGraph` layout: :class:`NpyGraphWriter` block by
block (a graph far larger than memory), :func:`from_pyg` from a PyG ``Data`` in memory."""

from __future__ import annotations

import json
import os
from types import TracebackType
from typing import Any

import numpy as np
import numpy.lib.format as npy_format
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import MASK_NAMES, ensure_edge_index, validate_graph
from lightgraph.data.datasets.npy_graph import (
    ARRAY_NAMES,
    DEFAULT_CHUNK_BYTES,
    FEATURE_DTYPES,
    INDEX_DTYPES,
    META_FILE,
    NpyGraph,
    chunk_spans,
    rows_per_chunk,
)
from lightgraph.utilities.checks import check_bool, check_choice, check_int

__all__ = ["NpyGraphWriter", "from_pyg"]


class _Coverage:
    """The rows written so far, as sorted disjoint half-open intervals."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.spans: list[list[int]] = []

    def add(self, lo: int, hi: int) -> None:
        if lo >= hi:
            return
        spans = self.spans
        merged = [lo, hi]
        keep = []
        for span in spans:
            if span[1] < merged[0] or span[0] > merged[1]:
                keep.append(span)
            else:
                merged = [min(merged[0], span[0]), max(merged[1], span[1])]
        keep.append(merged)
        keep.sort()
        self.spans = keep

    def first_gap(self) -> tuple[int, int] | None:
        position = 0
        for lo, hi in self.spans:
            if lo > position:
                return position, lo
            position = max(position, hi)
        return (position, self.total) if position < self.total else None


def _pwrite_all(fd: int, array: np.ndarray, offset: int) -> None:
    view = np.ascontiguousarray(array).data.cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


class NpyGraphWriter:
    """Writes an :class:`NpyGraph` directory block by block, in bounded memory.

    Every array is created at its full size up front (a sparse file with the ``.npy``
    header) under a temporary name; ``write_*`` put a block of rows (edges: columns) at an
    offset with ``os.pwrite``, any number of times and in any order. :meth:`close` checks
    that every row was written, flushes the files, renames them to their final names and
    writes ``meta.json``: an interrupted writer never leaves a readable half-written graph.
    As a context manager it closes on success and :meth:`abort` s (removes its temporary
    files) on an exception.

    Args:
        root: the directory (created if needed).
        num_nodes: ``N``.
        num_edges: ``E``.
        num_features: ``F``.
        num_classes: classes (``C`` labels if ``multilabel``), written to ``meta.json``.
        multilabel: ``y`` is ``[N, C]`` 0/1 instead of ``[N]`` class ids.
        index_dtype: ``"int64"`` or ``"int32"`` (``N`` must then be below ``2**31``).
        feature_dtype: ``"float32"`` or ``"float16"``.
        label_dtype: dtype of a multi-label ``y``: ``"float32"`` or ``"float16"``.
        name: ``meta.json``'s ``name`` (optional).
        overwrite: replace the files of an existing graph in ``root``.
    """

    def __init__(
        self,
        root: str,
        num_nodes: int,
        num_edges: int,
        num_features: int,
        num_classes: int,
        multilabel: bool = False,
        index_dtype: str = "int64",
        feature_dtype: str = "float32",
        label_dtype: str = "float32",
        name: str | None = None,
        overwrite: bool = False,
    ) -> None:
        owner = self._owner = type(self).__name__
        if not isinstance(root, (str, os.PathLike)):
            raise TypeError(
                f"{owner}: expected `root` to be a directory path (str) but got "
                f"{type(root).__name__}."
            )
        self.root = os.fspath(root)
        self.num_nodes = check_int(owner, "num_nodes", num_nodes)
        self.num_edges = check_int(owner, "num_edges", num_edges, low=0)
        self.num_features = check_int(owner, "num_features", num_features)
        self.num_classes = check_int(owner, "num_classes", num_classes)
        self.multilabel = check_bool(owner, "multilabel", multilabel)
        index_dtype = check_choice(owner, "index_dtype", index_dtype, INDEX_DTYPES)
        feature_dtype = check_choice(owner, "feature_dtype", feature_dtype, FEATURE_DTYPES)
        label_dtype = check_choice(owner, "label_dtype", label_dtype, FEATURE_DTYPES)
        if index_dtype == "int32" and self.num_nodes > np.iinfo(np.int32).max:
            raise ValueError(
                f"{owner}: `index_dtype` 'int32' holds node ids below 2**31 but `num_nodes` is "
                f"{self.num_nodes}; use 'int64'."
            )
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}: expected `name` to be a string or None but got {name!r}.")
        self.name = name
        overwrite = check_bool(owner, "overwrite", overwrite)
        n, c = self.num_nodes, self.num_classes
        self._specs: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
            "edge_index": (np.dtype(index_dtype), (2, self.num_edges)),
            "x": (np.dtype(feature_dtype), (n, self.num_features)),
            "y": (np.dtype(label_dtype), (n, c)) if self.multilabel else (np.dtype("int64"), (n,)),
            **{mask: (np.dtype(bool), (n,)) for mask in MASK_NAMES},
        }
        os.makedirs(self.root, exist_ok=True)
        existing = [
            f
            for f in [*(f"{a}.npy" for a in ARRAY_NAMES), META_FILE]
            if os.path.exists(os.path.join(self.root, f))
        ]
        if existing and not overwrite:
            raise FileExistsError(
                f"{owner}: {self.root!r} already holds {', '.join(existing)}; pass "
                f"overwrite=True to replace them."
            )
        self._fds: dict[str, int] = {}
        self._offsets: dict[str, int] = {}
        self._coverage = {
            "edge_index": _Coverage(self.num_edges),
            "x": _Coverage(n),
            "y": _Coverage(n),
            "masks": _Coverage(n),
        }
        self.graph: NpyGraph | None = None
        try:
            for array, (dtype, shape) in self._specs.items():
                self._create(array, dtype, shape)
        except BaseException:
            self.abort()
            raise

    def _temporary(self, array: str) -> str:
        return os.path.join(self.root, f".{array}.npy.partial")

    def _create(self, array: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        path = self._temporary(array)
        with open(path, "wb") as f:
            npy_format.write_array_header_1_0(
                f,
                {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape},
            )
            offset = f.tell()
            f.truncate(offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        self._offsets[array] = offset
        self._fds[array] = os.open(path, os.O_RDWR)

    # ----------------------------------------------------------------- the blocks
    def _block(self, what: str, block: Any, shape: str, ndim: int) -> np.ndarray:
        if isinstance(block, Tensor):
            block = block.detach().cpu()
            if block.dtype == torch.bfloat16:
                block = block.float()
            block = block.numpy()
        array = np.asarray(block)
        if array.ndim != ndim:
            raise ValueError(
                f"{self._owner}: expected a `{what}` block of shape {shape} but got shape "
                f"{array.shape}."
            )
        return array

    def _span(self, what: str, lo: Any, count: int, total: int) -> int:
        if isinstance(lo, np.integer):
            lo = int(lo)
        lo = check_int(self._owner, "lo", lo, low=0)
        if lo + count > total:
            raise ValueError(
                f"{self._owner}: a `{what}` block of {count} at `lo` = {lo} covers rows "
                f"[{lo}, {lo + count}) of {total}; blocks must lie inside [0, {total})."
            )
        return lo

    def _write_rows(self, array: str, lo: int, block: np.ndarray) -> None:
        dtype, shape = self._specs[array]
        row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        _pwrite_all(
            self._fds[array], block.astype(dtype, copy=False), self._offsets[array] + lo * row
        )

    def _check_open(self) -> None:
        if not self._fds:
            raise RuntimeError(f"{self._owner}: the writer is closed.")

    def write_edges(self, lo: int, block: Any) -> None:
        """Edges ``lo .. lo + b - 1``: ``block`` is ``[2, b]`` integer node ids in ``[0, N)``."""
        self._check_open()
        array = self._block("edge_index", block, "[2, b]", 2)
        if array.shape[0] != 2 or not np.issubdtype(array.dtype, np.integer):
            raise ValueError(
                f"{self._owner}: expected an `edge_index` block of shape [2, b] of integers but "
                f"got shape {array.shape} and dtype {array.dtype}."
            )
        b = array.shape[1]
        lo = self._span("edge_index", lo, b, self.num_edges)
        if b and (int(array.min()) < 0 or int(array.max()) >= self.num_nodes):
            raise ValueError(
                f"{self._owner}: expected node ids in [0, {self.num_nodes - 1}] but the "
                f"`edge_index` block holds values in [{int(array.min())}, {int(array.max())}]."
            )
        dtype, _ = self._specs["edge_index"]
        offset, size = self._offsets["edge_index"], dtype.itemsize
        for r in range(2):
            start = offset + (r * self.num_edges + lo) * size
            _pwrite_all(self._fds["edge_index"], array[r].astype(dtype, copy=False), start)
        self._coverage["edge_index"].add(lo, lo + b)

    def write_features(self, lo: int, block: Any) -> None:
        """Node features of rows ``lo .. lo + b - 1``: ``block`` is ``[b, F]`` floats."""
        self._check_open()
        array = self._block("x", block, f"[b, {self.num_features}]", 2)
        if array.shape[1] != self.num_features or not np.issubdtype(array.dtype, np.floating):
            raise ValueError(
                f"{self._owner}: expected an `x` block of shape [b, {self.num_features}] of "
                f"floats but got shape {array.shape} and dtype {array.dtype}."
            )
        lo = self._span("x", lo, array.shape[0], self.num_nodes)
        self._write_rows("x", lo, array)
        self._coverage["x"].add(lo, lo + array.shape[0])

    def write_labels(self, lo: int, block: Any) -> None:
        """Labels of rows ``lo .. lo + b - 1``: ``[b]`` class ids, or ``[b, C]`` 0/1 if
        multi-label."""
        self._check_open()
        c = self.num_classes
        if self.multilabel:
            array = self._block("y", block, f"[b, {c}]", 2)
            if array.shape[1] != c or not (
                np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_
            ):
                raise ValueError(
                    f"{self._owner}: expected a multi-label `y` block of shape [b, {c}] but got "
                    f"shape {array.shape} and dtype {array.dtype}."
                )
            if ((array != 0) & (array != 1)).any():
                raise ValueError(f"{self._owner}: expected multi-label `y` entries 0 or 1.")
        else:
            array = self._block("y", block, "[b]", 1)
            if not np.issubdtype(array.dtype, np.integer):
                raise ValueError(
                    f"{self._owner}: expected a `y` block of integer class ids but got dtype "
                    f"{array.dtype}."
                )
            if array.size and (int(array.min()) < 0 or int(array.max()) >= c):
                bad = int(array.min()) if int(array.min()) < 0 else int(array.max())
                raise ValueError(
                    f"{self._owner}: expected class ids in [0, {c - 1}] (num_classes = {c}) "
                    f"but the `y` block holds {bad}."
                )
        lo = self._span("y", lo, array.shape[0], self.num_nodes)
        self._write_rows("y", lo, array)
        self._coverage["y"].add(lo, lo + array.shape[0])

    def write_masks(self, lo: int, train: Any, val: Any, test: Any) -> None:
        """The three split masks of rows ``lo .. lo + b - 1`` (``bool [b]`` each)."""
        self._check_open()
        blocks = {}
        for mask, block in zip(MASK_NAMES, (train, val, test), strict=True):
            array = self._block(mask, block, "[b]", 1)
            if array.dtype != np.bool_:
                raise ValueError(
                    f"{self._owner}: expected a `{mask}` block of dtype bool but got {array.dtype}."
                )
            blocks[mask] = array
        sizes = {array.shape[0] for array in blocks.values()}
        if len(sizes) != 1:
            raise ValueError(
                f"{self._owner}: expected the three mask blocks to have the same length but got "
                f"{[array.shape[0] for array in blocks.values()]}."
            )
        b = sizes.pop()
        lo = self._span("masks", lo, b, self.num_nodes)
        for mask, array in blocks.items():
            self._write_rows(mask, lo, array)
        self._coverage["masks"].add(lo, lo + b)

    # ----------------------------------------------------------------- finishing
    def close(self) -> NpyGraph:
        """Publish the graph (every row must have been written) and return it."""
        if self.graph is not None:
            return self.graph
        self._check_open()
        for what, coverage in self._coverage.items():
            gap = coverage.first_gap()
            if gap is not None:
                files = (
                    "train_mask.npy, val_mask.npy, test_mask.npy"
                    if what == "masks"
                    else f"{what}.npy"
                )
                raise ValueError(
                    f"{self._owner}: rows [{gap[0]}, {gap[1]}) of {files} were never written; "
                    f"write every row before close() (or abort())."
                )
        for fd in self._fds.values():
            os.fsync(fd)
            os.close(fd)
        self._fds = {}
        meta: dict[str, Any] = {"num_classes": self.num_classes}
        if self.name is not None:
            meta["name"] = self.name
        meta_partial = os.path.join(self.root, f".{META_FILE}.partial")
        with open(meta_partial, "w", encoding="utf-8") as f:
            json.dump(meta, f)
        for array in self._specs:
            os.replace(self._temporary(array), os.path.join(self.root, f"{array}.npy"))
        os.replace(meta_partial, os.path.join(self.root, META_FILE))
        self.graph = NpyGraph(self.root)
        return self.graph

    def abort(self) -> None:
        """Drop the temporary files; nothing is published."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        for array in self._specs:
            path = self._temporary(array)
            if os.path.exists(path):
                os.remove(path)

    def __enter__(self) -> NpyGraphWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def from_pyg(
    data: Data,
    root: str,
    num_classes: int | None = None,
    name: str | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    overwrite: bool = False,
) -> NpyGraph:
    """Write a PyG ``Data`` already in memory as an :class:`NpyGraph` directory.

    ``data`` follows the :class:`~lightgraph.data.GraphDataset` layout (checked with
    :func:`~lightgraph.data.datasets.validate_graph`; an ``adj_t`` is turned into ``edge_index``).
    Arrays are written in chunks of about ``chunk_bytes`` through :class:`NpyGraphWriter`:
    ``edge_index`` as ``int64``, ``x`` (and a multi-label ``y``) as ``float16`` if it is
    ``float16``, else as ``float32``, ``y`` class ids as ``int64``.

    Args:
        data: the graph.
        root: the directory to write.
        num_classes: written to ``meta.json``; default ``y.max() + 1`` (multi-label: ``C``).
        name: written to ``meta.json`` (optional).
        chunk_bytes: bytes per written chunk.
        overwrite: replace an existing graph in ``root``.

    Returns:
        The written graph.
    """
    owner = "from_pyg"
    chunk_bytes = check_int(owner, "chunk_bytes", chunk_bytes)
    if not isinstance(data, Data):
        raise TypeError(
            f"{owner}: expected `data` to be a torch_geometric.data.Data but got "
            f"{type(data).__name__}."
        )
    data = ensure_edge_index(data)
    validate_graph(data, num_classes)
    y: Tensor = data.y
    multilabel = y.dim() == 2
    if num_classes is None:
        num_classes = int(y.size(1)) if multilabel else int(y.max()) + 1
    x: Tensor = data.x
    n, f = x.shape
    e = int(data.edge_index.size(1))
    with NpyGraphWriter(
        root,
        num_nodes=int(n),
        num_edges=e,
        num_features=int(f),
        num_classes=num_classes,
        multilabel=multilabel,
        feature_dtype="float16" if x.dtype == torch.float16 else "float32",
        label_dtype="float16" if y.dtype == torch.float16 else "float32",
        name=name,
        overwrite=overwrite,
    ) as writer:
        for lo, hi in chunk_spans(e, rows_per_chunk(16, chunk_bytes)):
            writer.write_edges(lo, data.edge_index[:, lo:hi])
        row = 4 * max(int(f), y.size(1) if multilabel else 2)
        for lo, hi in chunk_spans(int(n), rows_per_chunk(row, chunk_bytes)):
            writer.write_features(lo, x[lo:hi])
            writer.write_labels(lo, y[lo:hi])
            writer.write_masks(lo, *(getattr(data, mask)[lo:hi] for mask in MASK_NAMES))
    assert writer.graph is not None
    return writer.graph
