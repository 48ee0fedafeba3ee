"""Memory budgets: how many bytes a bounded-memory (out-of-core) pass may hold at once.

Preparation from a graph on disk (the CSC, the partition store, ...) reads its inputs in
chunks whose working set is sized by a ``memory_budget`` in bytes.
:func:`default_memory_budget` picks one from the process's memory limit:

* the limit of the process's control group, when it has one (cgroup v2 ``memory.max``,
  cgroup v1 ``memory.limit_in_bytes``; the smallest along the path from the process's
  cgroup up to the root of the hierarchy, since every ancestor's limit applies too), less
  the process's resident anonymous memory when the budget is taken (not its mapped file
  pages, which the kernel reclaims), times :data:`CGROUP_FRACTION`:
  the per-node arrays of a pass share the rest with the chunks;
* otherwise (no limit, or one at least as large as the physical memory, which is how an
  unlimited cgroup v1 reads) :data:`RAM_FRACTION` of the physical memory.

:func:`rows_per_chunk` turns a budget into a chunk length.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from lightgraph.utilities.checks import check_int

__all__ = [
    "CGROUP_FRACTION",
    "RAM_FRACTION",
    "cgroup_memory_limit",
    "check_memory_budget",
    "default_memory_budget",
    "physical_memory",
    "resident_memory",
    "rows_per_chunk",
]

#: Share of a cgroup memory limit that :func:`default_memory_budget` gives the chunks.
CGROUP_FRACTION = 0.5
#: Share of the physical memory that :func:`default_memory_budget` gives the chunks when
#: the process has no cgroup memory limit.
RAM_FRACTION = 0.25

# Where the hierarchies are mounted: cgroup v2 alone at /sys/fs/cgroup, or next to v1
# ("hybrid") at /sys/fs/cgroup/unified; the v1 memory controller at /sys/fs/cgroup/memory.
_V2_MOUNTS = ("sys/fs/cgroup", "sys/fs/cgroup/unified")
_V1_MOUNT = "sys/fs/cgroup/memory"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _up(mount: str, cgroup: str) -> Iterator[str]:
    """The directories from the cgroup ``cgroup`` up to the hierarchy's root, under ``mount``."""
    parts = [p for p in cgroup.split("/") if p and p not in (".", "..")]
    for depth in range(len(parts), -1, -1):
        yield os.path.join(mount, *parts[:depth])


def _smallest(mount: str, cgroup: str, name: str) -> int | None:
    found = []
    for directory in _up(mount, cgroup):
        text = _read(os.path.join(directory, name))
        if text is not None and text.isdigit():  # "max" (v2): no limit
            found.append(int(text))
    return min(found) if found else None


def physical_memory(root: str = "/") -> int:
    """Bytes of physical memory (``MemTotal`` of ``<root>/proc/meminfo``, else ``sysconf``)."""
    text = _read(os.path.join(root, "proc/meminfo"))
    for line in (text or "").splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1]) * 1024  # reported in kB
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def cgroup_memory_limit(root: str = "/") -> int | None:
    """The memory limit (bytes) of this process's control group, or ``None`` if it has none.

    Reads ``<root>/proc/self/cgroup`` and, for the cgroup it names, ``memory.max`` (v2,
    under ``<root>/sys/fs/cgroup`` or ``<root>/sys/fs/cgroup/unified``) or
    ``memory.limit_in_bytes`` (v1, under ``<root>/sys/fs/cgroup/memory``) of that cgroup and
    of each of its ancestors; the smallest applies. Inside a container, whose own cgroup is
    the root of what it sees, the path named in ``/proc/self/cgroup`` may not exist: the
    walk up then ends at the mounted root, the container's limit. A limit of at least the
    physical memory counts as none.

    Args:
        root: the file-system root to read ``proc`` and ``sys`` under (tests pass a fake one).
    """
    text = _read(os.path.join(root, "proc/self/cgroup"))
    limits = []
    for line in (text or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, cgroup = fields
        if hierarchy == "0" and controllers == "":
            for mount in _V2_MOUNTS:
                limit = _smallest(os.path.join(root, mount), cgroup, "memory.max")
                if limit is not None:
                    limits.append(limit)
        elif "memory" in controllers.split(","):
            limit = _smallest(os.path.join(root, _V1_MOUNT), cgroup, "memory.limit_in_bytes")
            if limit is not None:
                limits.append(limit)
    if not limits or min(limits) >= physical_memory(root):
        return None
    return min(limits)


def default_memory_budget(root: str = "/") -> int:
    """Bytes a bounded-memory pass may use by default (see the module docstring).

    ``CGROUP_FRACTION`` of what the cgroup memory limit leaves beside the process's
    resident anonymous memory (:func:`resident_memory`) at the time of the call (the
    interpreter and the libraries already loaded: about 0.6-0.7 GiB for a process that
    imported torch and Lightning) when the process has a limit, else ``RAM_FRACTION`` of
    the physical memory; at least 1 MiB.

    Args:
        root: the file-system root to read ``proc`` and ``sys`` under (tests pass a fake one).
    """
    limit = cgroup_memory_limit(root)
    if limit is not None:
        # What the limit leaves beside the process as it is now (interpreter, torch, ...).
        budget = max(limit - resident_memory(root), 0) * CGROUP_FRACTION
    else:
        budget = physical_memory(root) * RAM_FRACTION
    return max(int(budget), 1 << 20)


def resident_memory(root: str = "/") -> int:
    """Resident bytes of this process that its memory limit cannot give back: anonymous and
    shared memory (``RssAnon + RssShmem`` of ``/proc/self/status``).

    Pages of memory-mapped files (``RssFile``) are left out. They are page cache that the
    kernel reclaims under the limit, and a pass over a memory-mapped graph touches as many
    of them as the limit allows: counting them (``VmRSS``) once left a 1 GiB limit with no
    budget at all, and the CSC of an 808M-edge graph ran in chunks of 2,730 edges.
    Kernels without the split fields report ``VmRSS``. 0 when nothing can be read.
    """
    fields: dict[str, int] = {}
    try:
        with open(os.path.join(root, "proc", "self", "status")) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("RssAnon", "RssShmem", "VmRSS"):
                    fields[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    if "RssAnon" in fields:
        return fields["RssAnon"] + fields.get("RssShmem", 0)
    return fields.get("VmRSS", 0)


def check_memory_budget(owner: str, value: object) -> int:
    """A memory budget in bytes: a positive integer, or ``None`` for
    :func:`default_memory_budget`."""
    if value is None:
        return default_memory_budget()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{owner}: expected `memory_budget` to be a positive integer number of bytes or "
            f"None (the default: half the cgroup memory limit, else a quarter of the physical "
            f"memory) but got {value!r}."
        )
    return int(value)


def rows_per_chunk(
    memory_budget: int, bytes_per_row: int, reserved: int = 0, cap: int | None = None
) -> int:
    """Rows (edges, nodes) per chunk so that a chunk's working set fits ``memory_budget``.

    ``reserved`` bytes of the budget are held for the whole pass (its per-node arrays, say);
    the chunks get the rest, but never less than a quarter of the budget (a pass whose
    fixed arrays alone exceed the budget still makes progress, with small chunks). At
    least one row; at most ``cap``.

    Args:
        memory_budget: bytes (positive).
        bytes_per_row: bytes a chunk holds per row (its temporaries included).
        reserved: bytes of the budget the pass holds besides its chunks.
        cap: the largest chunk worth taking (``None``: no cap).
    """
    owner = "rows_per_chunk"
    memory_budget = check_int(owner, "memory_budget", memory_budget)
    bytes_per_row = check_int(owner, "bytes_per_row", bytes_per_row)
    reserved = check_int(owner, "reserved", reserved, low=0)
    available = max(memory_budget - reserved, memory_budget // 4)
    rows = max(1, available // bytes_per_row)
    if cap is not None:
        rows = min(rows, check_int(owner, "cap", cap))
    return rows


def tensor_bytes(*tensors: Any) -> int:
    """Bytes held by ``tensors`` (``None`` entries count 0)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
