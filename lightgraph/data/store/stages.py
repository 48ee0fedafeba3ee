"""The stages of a long preparation: what each does, how far it is, what it cost, and
where a killed or interrupted run picks up again.

A partition store of a graph on disk is built in stages (validate, partition, hubs,
write). :class:`PrepareStages` runs them and, for each one:

* prints its name when it starts and, when it ends, its time and its peak resident
  memory (``VmHWM`` of ``/proc/self/status``, reset at the start of the stage where the
  kernel allows it, so the peak is the stage's own; else the process's peak so far,
  and the line says so);
* shows a progress bar with rate and ETA for every pass over the edges
  (:func:`pass_progress`, used by :func:`~lightgraph.utilities.arrays.edge_chunks`)
  while the stage runs, for graphs of at least :data:`BAR_MIN_EDGES` edges;
* checks, before it starts, that the stage's minimum working set (the bytes it holds
  whatever the budget, e.g. its per-node arrays) fits in what the memory limit leaves
  (the cgroup's, else the physical memory, less the process's resident anonymous
  memory), and otherwise raises an error naming the stage, the bytes it needs, the
  bytes left and the option to change, instead of running into the kernel's OOM kill;
* saves the result of a resumable stage (:meth:`PrepareStages.cached`: the partition,
  the hubs) in a work directory next to the cache with a record of its size, SHA-1 and
  the cache key, so that a later run of the same configuration takes it instead of
  running the stage again. A saved result that fails its check (a run killed while
  writing it, a damaged file) is named on the console and computed again, never used.
  :meth:`PrepareStages.finish` removes the directory once the store is published.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import numpy as np

from lightgraph.data.store.cache import atomic_path, atomic_write, check_file, file_sha1
from lightgraph.utilities.memory import (
    cgroup_memory_limit,
    physical_memory,
    resident_memory,
)
from lightgraph.utilities.progress import BAR_MIN_EDGES, current_stage, pass_progress

__all__ = [
    "AnonymousPeak",
    "BAR_MIN_EDGES",
    "PrepareStages",
    "StageMemoryError",
    "SAMPLE_SECONDS",
    "StageRecord",
    "pass_progress",
    "peak_resident_memory",
]


class StageMemoryError(MemoryError):
    """A stage's minimum working set does not fit in the memory the process has left."""


@dataclass
class StageRecord:
    """What one stage cost: wall time, peak resident bytes, whether it was resumed."""

    name: str
    seconds: float
    peak_rss: int | None
    peak_is_stage: bool
    resumed: bool = False
    #: The stage's peak anonymous memory (``RssAnon + RssShmem``, sampled every
    #: :data:`SAMPLE_SECONDS`) above what the process held when the stage began: the
    #: memory the stage itself took and the kernel cannot reclaim (mapped file pages,
    #: which it can, are not in it). ``None`` where unknown.
    peak_anon_added: int | None = None


def _status(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` in bytes (``None`` off Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


#: Seconds between two readings of a stage's anonymous memory.
SAMPLE_SECONDS = 0.002


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _release_free_heap() -> None:
    """Give the C heap's free memory back to the kernel (glibc's ``malloc_trim``)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


# glibc's mallopt parameter: allocations from this size on get their own mapping.
_M_MMAP_THRESHOLD = -3
#: Inside a stage, arrays of at least this many bytes are mapped on their own and given
#: back to the kernel when freed (glibc otherwise raises the threshold up to 32 MiB after
#: the first large free and keeps later buffers in its heap once freed).
STAGE_MMAP_THRESHOLD = 1 << 20
# glibc's largest dynamic threshold on 64-bit: the setting restored after a stage.
_GLIBC_MAX_MMAP_THRESHOLD = 32 << 20


@contextlib.contextmanager
def _returned_heap() -> Iterator[None]:
    """Large buffers freed inside the block go back to the kernel at once, so a stage's
    anonymous memory is what it holds, not what it once held."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        yield
        return
    libc.mallopt(_M_MMAP_THRESHOLD, STAGE_MMAP_THRESHOLD)
    try:
        yield
    finally:
        libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_MAX_MMAP_THRESHOLD)


class AnonymousPeak:
    """Sample the process's resident memory the kernel cannot reclaim
    (:func:`~lightgraph.utilities.memory.resident_memory`: anonymous and shared) in a
    thread while the ``with`` block runs; :attr:`added` is the peak above the reading at entry (``None``
    off Linux). Sampling can miss a spike shorter than :data:`SAMPLE_SECONDS`."""

    def __init__(self, interval: float = SAMPLE_SECONDS) -> None:
        self.interval = interval
        self.start: int | None = None
        self.peak: int | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        while not self._done.wait(self.interval):
            now = resident_memory() or None
            if now is not None and (self.peak is None or now > self.peak):
                self.peak = now

    def __enter__(self) -> AnonymousPeak:
        _release_free_heap()  # memory freed earlier would otherwise hide the stage's use
        self.start = self.peak = resident_memory() or None
        if self.start is not None:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        now = resident_memory() or None
        if now is not None and self.peak is not None:
            self.peak = max(self.peak, now)

    @property
    def added(self) -> int | None:
        if self.start is None or self.peak is None:
            return None
        return self.peak - self.start


def peak_resident_memory() -> int | None:
    """The process's peak resident set (``VmHWM``) in bytes, ``None`` where unknown."""
    return _status("VmHWM")


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current resident set (Linux >= 4.0); ``False`` if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _fmt(nbytes: int | None) -> str:
    if nbytes is None:
        return "unknown"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


class PrepareStages:
    """The stages of one preparation (module docstring).

    Args:
        owner: name used in messages (e.g. the data module's class).
        workdir: directory for the saved stage results (created; removed by
            :meth:`finish`). Keep it next to the cache it belongs to.
        key: the cache key (fingerprint digest) a saved result must carry to be reused.
        option: how the user changes the budget, named in a :class:`StageMemoryError`
            (e.g. ``"--data.init_args.memory_budget"``).
        stream: where the stage lines and bars go (default: standard error).
    """

    def __init__(
        self,
        owner: str,
        workdir: str,
        key: str,
        option: str = "memory_budget",
        stream: TextIO | None = None,
    ) -> None:
        self.owner = owner
        self.workdir = workdir
        self.key = key
        self.option = option
        self.stream = stream if stream is not None else sys.stderr
        self.records: list[StageRecord] = []
        os.makedirs(workdir, exist_ok=True)

    # ------------------------------------------------------------------ running
    def _say(self, text: str) -> None:
        print(f"{self.owner}: {text}", file=self.stream, flush=True)

    def check_working_set(self, name: str, need: int, what: str) -> None:
        """Raise :class:`StageMemoryError` if ``need`` bytes (``what`` they are) do not fit
        in what the memory limit leaves beside the process's resident memory."""
        limit = cgroup_memory_limit()
        source = "the cgroup memory limit"
        if limit is None:
            limit, source = physical_memory(), "the physical memory"
        held = resident_memory()
        left = limit - held
        if need > left:
            raise StageMemoryError(
                f"{self.owner}: stage '{name}' needs at least {_fmt(need)} ({what}) but only "
                f"{_fmt(max(left, 0))} are left ({source} {_fmt(limit)} less {_fmt(held)} "
                f"this process holds). Run the preparation with more memory (e.g. "
                f"`lightgraph prepare` on a larger machine, then train with the cache), or "
                f"lower {self.option} (the stage then reads smaller chunks, in more passes)."
            )

    @contextlib.contextmanager
    def stage(self, name: str, need: int = 0, what: str = "") -> Iterator[None]:
        """Run the block as stage ``name`` (its lines, bars, memory check and record)."""
        if need:
            self.check_working_set(name, need, what)
        self._say(f"{name} ...")
        own_peak = _reset_peak()
        tic = time.perf_counter()
        with current_stage(name, self.stream), _returned_heap(), AnonymousPeak() as anon:
            yield
        record = StageRecord(
            name,
            time.perf_counter() - tic,
            peak_resident_memory(),
            own_peak,
            peak_anon_added=anon.added,
        )
        self.records.append(record)
        scope = "" if own_peak else " (process peak so far)"
        self._say(
            f"{name} done in {record.seconds:.1f} s, peak resident memory "
            f"{_fmt(record.peak_rss)}{scope}, of which the stage added "
            f"{_fmt(record.peak_anon_added)} anonymous"
        )

    # ------------------------------------------------------------------ resuming
    def _paths(self, name: str) -> tuple[str, str]:
        base = os.path.join(self.workdir, name.replace(" ", "_"))
        return base + ".npy", base + ".json"

    def _load(self, name: str) -> np.ndarray | None:
        """The saved result of ``name`` if its record matches, else ``None`` (said why)."""
        array_path, record_path = self._paths(name)
        if not os.path.exists(record_path):
            return None
        try:
            with open(record_path) as f:
                record = json.load(f)
        except (OSError, ValueError) as err:
            problem: str | None = f"its record cannot be read ({err})"
        else:
            if record.get("key") != self.key:
                problem = "it belongs to another configuration"
            else:
                found = check_file(array_path, record, deep=True)
                problem = None if found is None else f"{array_path} is {found.reason}"
        if problem is not None:
            self._say(f"{name}: the result saved by an earlier run is not used: {problem}")
            return None
        return np.load(array_path, mmap_mode="c")  # file pages, as the stage's own result

    def cached(
        self, name: str, compute: Callable[[], np.ndarray], need: int = 0, what: str = ""
    ) -> np.ndarray:
        """The result of stage ``name``: saved by an earlier run of the same configuration
        (checked), or computed now by ``compute()`` as a stage and saved."""
        saved = self._load(name)
        if saved is not None:
            self.records.append(StageRecord(name, 0.0, None, False, resumed=True))
            self._say(f"{name}: resumed from the result an earlier run saved")
            return saved
        with self.stage(name, need, what):
            result = np.ascontiguousarray(compute())
        array_path, record_path = self._paths(name)
        with contextlib.suppress(FileNotFoundError):
            os.remove(record_path)  # no record vouches for the file while it is replaced
        with atomic_path(array_path) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, result)
        record = {
            "key": self.key,
            "bytes": os.path.getsize(array_path),
            "sha1": file_sha1(array_path),
            "stage": asdict(self.records[-1]),
        }
        with atomic_write(record_path, "w") as f:  # the record last: it vouches for the file
            json.dump(record, f)
        return result

    def summary(self) -> list[dict[str, Any]]:
        """The records as JSON-serialisable dictionaries (for the cache's ``meta.json``)."""
        return [asdict(r) for r in self.records]

    def finish(self) -> None:
        """Remove the saved results (the store they built is published)."""
        shutil.rmtree(self.workdir, ignore_errors=True)
