"""Argument checks shared by every component (one home, as torchmetrics keeps its checks).

Every check raises a builtin exception whose message names the component (``owner``),
the argument, the allowed values and the value received, e.g.
``"AdaptiveBitWidth: expected `b_min` to be one of (1, 2, 4, 8) but got 3."``.
Each returns the validated (and normalised) value so that constructors can write
``self.window = check_int(owner, "window", window)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

#: Bit-widths a quantised message row may use (codes pack evenly into bytes).
BITS: tuple[int, ...] = (1, 2, 4, 8)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(owner: str, name: str, value: Any, low: int = 1, high: int | None = None) -> int:
    """An integer in ``[low, high]`` (``high=None``: unbounded)."""
    if not _is_int(value) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{owner}: expected `{name}` to be an integer {bound} but got {value!r}.")
    return int(value)


def check_optional_int(owner: str, name: str, value: Any, low: int = 1) -> int | None:
    """``None`` or an integer ``>= low``."""
    if value is None:
        return None
    if not _is_int(value) or value < low:
        raise ValueError(
            f"{owner}: expected `{name}` to be None or an integer >= {low} but got {value!r}."
        )
    return int(value)


def check_positive(owner: str, name: str, value: Any) -> float:
    """A real number ``> 0``."""
    if not _is_real(value) or not value > 0:
        raise ValueError(f"{owner}: expected `{name}` > 0 but got {value!r}.")
    return float(value)


def check_non_negative(owner: str, name: str, value: Any) -> float:
    """A real number ``>= 0``."""
    if not _is_real(value) or not value >= 0:
        raise ValueError(f"{owner}: expected `{name}` >= 0 but got {value!r}.")
    return float(value)


def check_rate(owner: str, name: str, value: Any) -> float:
    """A rate in ``[0, 1)`` (dropout, smoothing factors, restart probabilities)."""
    if not _is_real(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"{owner}: expected `{name}` in [0, 1) but got {value!r}.")
    return float(value)


def check_probability(owner: str, name: str, value: Any, optional: bool = False) -> float | None:
    """A keep-probability in ``(0, 1]`` (``None`` allowed with ``optional=True``)."""
    if value is None and optional:
        return None
    if not _is_real(value) or not 0.0 < value <= 1.0:
        allowed = "in (0, 1] or None" if optional else "in (0, 1]"
        raise ValueError(f"{owner}: expected `{name}` {allowed} but got {value!r}.")
    return float(value)


def check_bool(owner: str, name: str, value: Any) -> bool:
    """``True`` or ``False`` (not a truthy value)."""
    if not isinstance(value, bool):
        raise ValueError(f"{owner}: expected `{name}` to be one of (True, False) but got {value!r}.")
    return value


def check_choice(owner: str, name: str, value: T, allowed: Sequence[Any]) -> T:
    """One of ``allowed``."""
    if isinstance(value, bool) and not any(isinstance(a, bool) for a in allowed):
        ok = False
    else:
        try:
            ok = value in tuple(allowed)
        except TypeError:  # unhashable or incomparable values
            ok = False
    if not ok:
        raise ValueError(
            f"{owner}: expected `{name}` to be one of {tuple(allowed)} but got {value!r}."
        )
    return value


def check_bits(owner: str, name: str, value: Any, allowed: Sequence[int] = BITS) -> int:
    """A bit-width in ``allowed`` (default :data:`BITS`)."""
    if not _is_int(value) or value not in tuple(allowed):
        raise ValueError(
            f"{owner}: expected `{name}` to be one of {tuple(allowed)} but got {value!r}."
        )
    return int(value)


def check_non_empty_str(owner: str, name: str, value: Any) -> str:
    """A non-empty string (metric names, labels)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{owner}: expected `{name}` to be a non-empty string but got {value!r}.")
    return value


def check_type(owner: str, name: str, value: Any, expected: type | tuple[type, ...], hint: str = "") -> Any:
    """An instance of ``expected``; ``hint`` names examples of what to pass."""
    if not isinstance(value, expected):
        names = (
            expected.__name__
            if isinstance(expected, type)
            else " or ".join(t.__name__ for t in expected)
        )
        extra = f" ({hint})" if hint else ""
        raise TypeError(
            f"{owner}: expected `{name}` to be a {names}{extra} but got {type(value).__name__}."
        )
    return value
