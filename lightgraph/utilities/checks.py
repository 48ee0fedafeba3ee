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
        if high is None:
            kind = "a positive integer" if low == 1 else f"an integer >= {low}"
        else:
            kind = f"an integer in [{low}, {high}]"
        raise ValueError(f"{owner}: expected `{name}` to be {kind} but got {value!r}.")
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
        raise ValueError(
            f"{owner}: expected `{name}` to be one of (True, False) but got {value!r}."
        )
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


def _public_name(cls: type) -> str:
    """``lightgraph.quant.BitWidthPolicy`` for lightgraph classes (their public import path)."""
    parts = cls.__module__.split(".")
    if parts[0] == "lightgraph" and len(parts) > 2:
        return f"{parts[0]}.{parts[1]}.{cls.__name__}"
    return cls.__name__


def check_type(
    owner: str, name: str, value: Any, expected: type | tuple[type, ...], hint: str = ""
) -> Any:
    """An instance of ``expected``; ``hint`` names examples of what to pass."""
    if not isinstance(value, expected):
        names = " or ".join(
            _public_name(t) for t in ((expected,) if isinstance(expected, type) else expected)
        )
        extra = f" ({hint})" if hint else ""
        raise TypeError(
            f"{owner}: expected `{name}` to be a {names}{extra} but got {type(value).__name__}."
        )
    return value


def check_fraction(owner: str, name: str, value: Any) -> float:
    """A real number in ``[0, 1]`` (thresholds, densities)."""
    if not _is_real(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{owner}: expected `{name}` in [0, 1] but got {value!r}.")
    return float(value)


def check_divisible(owner: str, name: str, value: Any, divisor_name: str, divisor: Any) -> int:
    """A positive integer ``value`` that the positive integer ``divisor`` divides.

    E.g. a hidden size split evenly over attention heads:
    ``check_divisible("GAT", "hidden_channels", 10, "heads", 4)`` raises
    ``"GAT: expected `hidden_channels` (10) to be divisible by `heads` (4); pick `heads` in
    (1, 2, 5, 10)."``
    """
    check_int(owner, name, value)
    check_int(owner, divisor_name, divisor)
    if value % divisor:
        divisors = tuple(d for d in range(1, value + 1) if value % d == 0)
        raise ValueError(
            f"{owner}: expected `{name}` ({value}) to be divisible by `{divisor_name}` "
            f"({divisor}); pick `{divisor_name}` in {divisors}."
        )
    return int(value)


def check_callable(owner: str, name: str, value: Any, hint: str = "") -> Any:
    """A callable (an activation function, a factory); ``hint`` names examples."""
    if not callable(value):
        extra = f" ({hint})" if hint else ""
        raise TypeError(
            f"{owner}: expected `{name}` to be a callable{extra} but got {type(value).__name__}."
        )
    return value


# ------------------------------------------------------------------------ tensor arguments
# torch is imported inside the checks, so the scalar checks above never need it.
import typing  # noqa: E402

if typing.TYPE_CHECKING:
    from torch import Tensor


def describe(value: Any) -> str:
    """``"shape (...), dtype ..."`` of a tensor, ``repr`` of anything else (for messages)."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"shape {tuple(value.shape)}, dtype {value.dtype}"
    return repr(value)


def check_qkv(owner: str, q: Tensor, k: Tensor, v: Tensor) -> tuple[int, int, int]:
    """``q``, ``k``, ``v`` of shape ``[S, H, D]`` that belong together.

    ``v`` may have its own last dimension; all three share one floating dtype and one
    device. Returns ``(S, H, D)`` of ``q``.
    """
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{owner}: expected `{name}` of shape [S, H, D] but got {shape}.")
    if k.shape != q.shape or v.shape[:2] != q.shape[:2]:
        raise ValueError(
            f"{owner}: expected `q` and `k` of the same shape [S, H, D] and `v` of shape "
            f"[S, H, D_v], but got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}."
        )
    if not (q.dtype == k.dtype == v.dtype) or not q.is_floating_point():
        raise ValueError(
            f"{owner}: expected `q`, `k`, `v` of one floating dtype but got {q.dtype}, {k.dtype}, "
            f"{v.dtype}."
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"{owner}: expected `q`, `k`, `v` on one device but got {q.device}, {k.device}, "
            f"{v.device}."
        )
    return q.shape[0], q.shape[1], q.shape[2]


def check_bias_table(owner: str, bias_table: Tensor, num_heads: int, q: Tensor) -> Tensor:
    """A ``[num_buckets, num_heads]`` bias table with the dtype and device of ``q``."""
    import torch

    if (
        not isinstance(bias_table, torch.Tensor)
        or bias_table.dim() != 2
        or bias_table.shape[1] != num_heads
    ):
        shape = tuple(bias_table.shape) if isinstance(bias_table, torch.Tensor) else bias_table
        raise ValueError(
            f"{owner}: expected `bias_table` of shape [num_buckets, H={num_heads}] but got {shape!r}."
        )
    if bias_table.dtype != q.dtype or bias_table.device != q.device:
        raise ValueError(
            f"{owner}: expected `bias_table` with the dtype and device of `q` ({q.dtype}, {q.device}) "
            f"but got ({bias_table.dtype}, {bias_table.device})."
        )
    return bias_table


def check_graph_edge_index(
    owner: str,
    name: str,
    value: Any,
    num_nodes: int,
    *,
    unit: str = "node",
    require_long: bool = False,
) -> Tensor:
    """A ``[2, num_edges]`` integer tensor of ids in ``[0, num_nodes)`` (a graph's or an
    attention pattern's ``edge_index``); returned as ``torch.long``.

    Args:
        unit: what the ids count, for the message: ``"node"`` (a graph) or ``"token"``
            (an attention pattern over ``num_tokens`` tokens).
        require_long: reject other integer dtypes instead of converting them (kernels that
            must not copy the pattern on every call).

    Raises:
        TypeError: if ``value`` is not a tensor.
        ValueError: for another shape, a non-integer dtype (any dtype but ``torch.long``
            with ``require_long``) or ids outside ``[0, num_nodes)``.
    """
    import torch

    kind = "a" if require_long else "an integer"
    dtype = " and dtype torch.long" if require_long else ""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{owner}: expected `{name}` to be {kind} torch.Tensor of shape [2, num_edges]{dtype} "
            f"but got {type(value).__name__}."
        )
    if (
        value.dim() != 2
        or value.size(0) != 2
        or value.dtype == torch.bool
        or value.is_floating_point()
        or value.is_complex()
        or (require_long and value.dtype != torch.long)
    ):
        raise ValueError(
            f"{owner}: expected `{name}` to be {kind} tensor of shape [2, num_edges]{dtype} but "
            f"got shape {tuple(value.shape)} and dtype {value.dtype}."
        )
    if value.numel():
        lo, hi = int(value.min()), int(value.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"{owner}: expected {unit} ids in `{name}` to lie in [0, {num_nodes - 1}] "
                f"(num_{unit}s = {num_nodes}) but found values in [{lo}, {hi}]."
            )
    return value.long()


def check_edge_ids(owner: str, start: int, src: Any, dst: Any, num_nodes: int) -> None:
    """Node ids of a chunk of edges (NumPy ``src``/``dst``, edges ``start..``) in
    ``[0, num_nodes)``; the error names the first edge outside, by its index in the
    whole edge list."""
    import numpy as np

    if not len(src):
        return
    low, high = min(int(src.min()), int(dst.min())), max(int(src.max()), int(dst.max()))
    if low < 0 or high >= num_nodes:
        bad = np.flatnonzero((src < 0) | (src >= num_nodes) | (dst < 0) | (dst >= num_nodes))
        e = start + int(bad[0])
        raise ValueError(
            f"{owner}: expected node ids in `edge_index` to lie in [0, {num_nodes - 1}] "
            f"(num_nodes = {num_nodes}) but found values in [{low}, {high}]; edge {e} is "
            f"({int(src[bad[0]])}, {int(dst[bad[0]])})."
        )


def check_index_tensor(owner: str, name: str, value: Any) -> Any:
    """A 1-D integer tensor of node ids (any integer dtype), returned as ``torch.long``."""
    import torch

    check_type(owner, name, value, torch.Tensor, "a 1-D integer tensor of node ids")
    if value.dim() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
        raise ValueError(
            f"{owner}: expected `{name}` to be a 1-D integer tensor of node ids but got "
            f"{describe(value)}."
        )
    return value.long()


def check_fanouts(owner: str, fanouts: Any, name: str = "fanouts") -> list[int]:
    """A non-empty list of fanouts (one per hop), each a positive integer or ``-1`` (all neighbours)."""
    from numbers import Integral

    if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, Sequence) or not fanouts:
        raise ValueError(
            f"{owner}: expected `{name}` to be a non-empty list of positive integers or -1 "
            f"(one per hop) but got {fanouts!r}."
        )
    out = []
    for i, k in enumerate(fanouts):
        if isinstance(k, bool) or not isinstance(k, Integral) or (k < 1 and k != -1):
            raise ValueError(
                f"{owner}: expected `{name}[{i}]` to be a positive integer or -1 (all "
                f"neighbours) but got {k!r}."
            )
        out.append(int(k))
    return out
