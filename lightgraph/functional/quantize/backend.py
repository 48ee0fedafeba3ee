"""The numba kernels of the quantiser: loaded on first use, dropped if they ever fail.

The kernels (:mod:`lightgraph.functional._quantize_kernels`) are imported on the first
call that can take the CPU fast path (importing them imports numba). Where numba is
missing, on a big-endian host (where they are untested), or once a kernel
call has failed, :data:`_KERNELS` is ``None`` and every call takes the torch reference,
which gives the same results.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

_KERNELS: ModuleType | None = None
_KERNELS_TRIED = False
_KERNELS_LOCK = threading.Lock()


def _kernels() -> ModuleType | None:
    """The numba kernel module, imported on first use; ``None`` where numba is missing."""
    global _KERNELS, _KERNELS_TRIED
    if _KERNELS_TRIED:
        return _KERNELS
    with _KERNELS_LOCK:
        if not _KERNELS_TRIED:
            if sys.byteorder == "little":  # the kernels are tested on little-endian hosts only
                try:
                    from lightgraph.functional import _quantize_kernels
                except ImportError:  # no numba: the eager torch reference serves
                    _quantize_kernels = None  # type: ignore[assignment]
                _KERNELS = _quantize_kernels
            _KERNELS_TRIED = True
    return _KERNELS


def _guarded(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a numba path; should numba itself fail (e.g. it cannot compile the kernels
    in this environment), warn once, disable the kernels and return ``None`` so that the
    caller takes the torch reference (same results)."""
    global _KERNELS
    try:
        return fn(*args)
    except Exception as err:
        if _KERNELS is None:  # pragma: no cover - already disabled by another thread
            return None
        _KERNELS = None
        warnings.warn(
            f"lightgraph.functional.quantize: the numba kernels failed ({err!r}); using the "
            "torch reference from now on (same results, slower).",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
