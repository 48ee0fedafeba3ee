"""AdaQP's per-device-pair communication cost model ``t = θ · bits + γ`` and its profiling."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch.distributed as dist

#: The smallest θ (seconds per bit, i.e. 1 Pbit/s) a fit may return: θ must stay > 0.
MIN_THETA: float = 1e-15
#: Message sizes (bytes) timed by :meth:`CommCostModel.profile` by default: 4 KiB – 4 MiB.
DEFAULT_PROFILE_SIZES: tuple[int, ...] = (1 << 12, 1 << 15, 1 << 18, 1 << 20, 1 << 22)
_FORMAT = "lightgraph.CommCostModel"


def _vector(owner: str, name: str, value: Sequence[float] | np.ndarray) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{owner}: expected `{name}` to be a 1-D sequence of numbers but got {type(value).__name__}."
        ) from exc
    if arr.ndim != 1:
        raise ValueError(f"{owner}: expected `{name}` to be 1-D but got shape {tuple(arr.shape)}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{owner}: expected `{name}` to be finite but it contains NaN or inf.")
    if np.any(arr < 0):
        raise ValueError(f"{owner}: expected `{name}` >= 0 but got minimum {arr.min()!r}.")
    return arr


def fit_cost_model(
    sizes_bytes: Sequence[float] | np.ndarray, seconds: Sequence[float] | np.ndarray
) -> tuple[float, float]:
    """AdaQP Eq. 10 cost model (Sarvotham et al., 2001): least squares for ``t = θ·bits + γ``.

    The measured message sizes are given in **bytes**; the model is fitted on
    ``bits = 8 · sizes_bytes`` so that the returned θ is in **seconds per bit**, the unit
    of :func:`~lightgraph.quant.milp_assignment.solve_bit_assignment`'s constraint
    :math:`\\theta_i \\sum_k D_k b_k + \\gamma_i`. The fit minimises

    .. math::

        \\min_{\\theta \\ge \\theta_{min},\\, \\gamma \\ge 0}
            \\sum_n \\left(\\theta \\cdot 8 s_n + \\gamma - t_n\\right)^2

    with :math:`\\theta_{min}` = :data:`MIN_THETA`: if the unconstrained line has a
    negative intercept or a non-positive slope (noise on very fast links), the best line
    on the boundary of the box is returned instead (exact for this convex problem).
    Repeated sizes are allowed (several samples per size).

    Args:
        sizes_bytes: message sizes in bytes (>= 0), at least two distinct values.
        seconds: the measured transfer time of each message, seconds (>= 0).

    Returns:
        ``(theta, gamma)``: seconds per bit (> 0) and seconds (>= 0).

    Raises:
        ValueError: on mismatched lengths, negative or non-finite values, or fewer than 2
            distinct sizes.
    """
    owner = "fit_cost_model"
    x = _vector(owner, "sizes_bytes", sizes_bytes) * 8.0
    y = _vector(owner, "seconds", seconds)
    if x.size != y.size:
        raise ValueError(
            f"{owner}: expected `sizes_bytes` and `seconds` to have the same length but got "
            f"{x.size} and {y.size}."
        )
    distinct = np.unique(x / 8.0)
    if distinct.size < 2:
        raise ValueError(
            f"{owner}: expected at least 2 distinct `sizes_bytes` to fit a line but got "
            f"{distinct.size} ({distinct.tolist()!r})."
        )

    def sse(theta: float, gamma: float) -> float:
        return float(np.sum((theta * x + gamma - y) ** 2))

    x_mean, y_mean = float(x.mean()), float(y.mean())
    dx = x - x_mean
    slope = float(np.dot(dx, y - y_mean) / np.dot(dx, dx))
    intercept = y_mean - slope * x_mean
    if slope >= MIN_THETA and intercept >= 0.0:
        return slope, intercept
    # The optimum lies on the boundary: the best line through the origin (γ = 0), or the
    # best intercept for the smallest slope (θ = MIN_THETA); each clamped to the box.
    theta0 = max(MIN_THETA, float(np.dot(x, y) / np.dot(x, x)))
    gamma1 = max(0.0, float(np.mean(y - MIN_THETA * x)))
    if sse(theta0, 0.0) <= sse(MIN_THETA, gamma1):
        return theta0, 0.0
    return MIN_THETA, gamma1


def ring_schedule(world_size: int) -> tuple[list[tuple[int, int]], list[int]]:
    """AdaQP Fig. 8: the ordered device pairs of a ring all-to-all and their rounds.

    In round :math:`r \\in \\{1, \\dots, N-1\\}` every rank :math:`s` sends to
    :math:`(s + r) \\bmod N`. Pairs are listed round by round, by sender within a round;
    the round ids (``r - 1``) are what
    :func:`~lightgraph.quant.milp_assignment.solve_bit_assignment` takes as
    ``round_of_pair``, and :meth:`CommCostModel.params` turns the pairs into ``theta``
    and ``gamma``.

    Args:
        world_size: number of ranks (>= 1).

    Returns:
        ``(pairs, round_of_pair)``: ``N (N - 1)`` ``(src, dst)`` pairs and their round ids.

    Raises:
        ValueError: if ``world_size`` is not a positive integer.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(
            f"ring_schedule: expected `world_size` to be a positive integer but got {world_size!r}."
        )
    pairs = [(s, (s + r) % world_size) for r in range(1, world_size) for s in range(world_size)]
    rounds = [r - 1 for r in range(1, world_size) for _ in range(world_size)]
    return pairs, rounds


def _matrix(owner: str, name: str, value: Any, world_size: int | None = None) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{owner}: expected `{name}` to be a square matrix of numbers but got {type(value).__name__}."
        ) from exc
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] < 1:
        raise ValueError(
            f"{owner}: expected `{name}` to be a non-empty square [world_size, world_size] matrix "
            f"but got shape {tuple(arr.shape)}."
        )
    if world_size is not None and arr.shape[0] != world_size:
        raise ValueError(
            f"{owner}: expected `{name}` of shape [{world_size}, {world_size}] but got {tuple(arr.shape)}."
        )
    return arr.copy()


class CommCostModel:
    """AdaQP Eq. 10: the cost model :math:`t_i = \\theta_i \\cdot \\text{bits} + \\gamma_i` of every device pair.

    Pair :math:`i` is the *ordered* pair ``(src, dst)`` of ranks (of the process group it
    was profiled on); ``theta[src, dst]`` is in **seconds per bit** and
    ``gamma[src, dst]`` in seconds, both ``[world_size, world_size]`` float64 arrays.
    The diagonal (a rank sending to itself) is unused and stored as 0. To feed
    :func:`~lightgraph.quant.milp_assignment.solve_bit_assignment`, list the pairs (e.g.
    with :func:`ring_schedule`) and call :meth:`params`; pair id ``i`` of the solver is
    then the position in that list.

    Build one with :meth:`profile` (timed transfers), :meth:`from_config` (one θ and γ
    for every pair, e.g. from a YAML recipe), :meth:`from_dict` / :meth:`load` (a cached
    JSON file written by :meth:`save`), or the constructor.

    Args:
        theta: ``[world_size, world_size]`` seconds per bit, > 0 off the diagonal.
        gamma: ``[world_size, world_size]`` seconds, >= 0 off the diagonal.

    Raises:
        ValueError: on non-square or mismatched shapes, non-finite values, θ <= 0 or γ < 0
            off the diagonal.
    """

    def __init__(self, theta: Any, gamma: Any) -> None:
        owner = "CommCostModel"
        theta_a = _matrix(owner, "theta", theta)
        gamma_a = _matrix(owner, "gamma", gamma, theta_a.shape[0])
        off = ~np.eye(theta_a.shape[0], dtype=bool)
        for name, arr in (("theta", theta_a), ("gamma", gamma_a)):
            if not np.all(np.isfinite(arr[off])):
                raise ValueError(
                    f"{owner}: expected `{name}` to be finite off the diagonal but it contains NaN or inf."
                )
        if off.any() and np.any(theta_a[off] <= 0):
            raise ValueError(
                f"{owner}: expected `theta` > 0 (seconds per bit) off the diagonal but got minimum "
                f"{theta_a[off].min()!r}."
            )
        if off.any() and np.any(gamma_a[off] < 0):
            raise ValueError(
                f"{owner}: expected `gamma` >= 0 (seconds) off the diagonal but got minimum "
                f"{gamma_a[off].min()!r}."
            )
        np.fill_diagonal(theta_a, 0.0)
        np.fill_diagonal(gamma_a, 0.0)
        self.theta = theta_a
        self.gamma = gamma_a

    @property
    def world_size(self) -> int:
        return int(self.theta.shape[0])

    def _check_pair(self, owner: str, src: int, dst: int) -> tuple[int, int]:
        w = self.world_size
        for name, v in (("src", src), ("dst", dst)):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 0 <= v < w:
                raise ValueError(f"{owner}: expected `{name}` in [0, {w - 1}] but got {v!r}.")
        if src == dst:
            raise ValueError(f"{owner}: expected `src` != `dst` (a device pair) but got {src}.")
        return int(src), int(dst)

    def predict(self, src: int, dst: int, bits: float) -> float:
        """Predicted seconds to send ``bits`` bits from ``src`` to ``dst``."""
        s, d = self._check_pair("CommCostModel.predict", src, dst)
        return float(self.theta[s, d] * bits + self.gamma[s, d])

    def params(self, pairs: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """``(theta, gamma)`` of the listed ``(src, dst)`` pairs, in that order, for the solver."""
        checked = [self._check_pair("CommCostModel.params", s, d) for s, d in pairs]
        src = np.array([s for s, _ in checked], dtype=np.int64)
        dst = np.array([d for _, d in checked], dtype=np.int64)
        return self.theta[src, dst].copy(), self.gamma[src, dst].copy()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (see :meth:`from_dict`)."""
        return {
            "format": _FORMAT,
            "version": 1,
            "world_size": self.world_size,
            "theta_unit": "seconds per bit",
            "gamma_unit": "seconds",
            "theta": self.theta.tolist(),
            "gamma": self.gamma.tolist(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommCostModel:
        """Rebuild a model from :meth:`to_dict`'s output.

        Raises:
            ValueError: if keys are missing, the format is foreign or the shapes disagree
                with ``world_size``.
        """
        owner = "CommCostModel.from_dict"
        if not isinstance(data, Mapping):
            raise TypeError(f"{owner}: expected a mapping but got {type(data).__name__}.")
        missing = [k for k in ("world_size", "theta", "gamma") if k not in data]
        if missing:
            raise ValueError(
                f"{owner}: expected keys 'world_size', 'theta', 'gamma' but {missing} are missing."
            )
        if data.get("format", _FORMAT) != _FORMAT:
            raise ValueError(f"{owner}: expected `format` {_FORMAT!r} but got {data['format']!r}.")
        w = data["world_size"]
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ValueError(
                f"{owner}: expected `world_size` to be a positive integer but got {w!r}."
            )
        return cls(
            _matrix(owner, "theta", data["theta"], w), _matrix(owner, "gamma", data["gamma"], w)
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_dict` as JSON to ``path``."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CommCostModel:
        """Read a model written by :meth:`save`."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    @classmethod
    def from_config(
        cls, theta: Any, gamma: Any = 0.0, world_size: int | None = None
    ) -> CommCostModel:
        """A model from configuration values instead of profiling.

        Args:
            theta: seconds per bit — one scalar for every pair (e.g. ``1 / 25e9`` for a
                25 Gbit/s link) or a ``[world_size, world_size]`` matrix.
            gamma: seconds — a scalar for every pair or a matrix.
            world_size: number of ranks; defaults to the initialised default process
                group's size (required otherwise when both values are scalars).

        Raises:
            ValueError: if ``world_size`` cannot be determined or the values are invalid.
        """
        owner = "CommCostModel.from_config"
        shapes = [np.shape(v) for v in (theta, gamma) if np.ndim(v) > 0]
        if world_size is None:
            if shapes:
                world_size = int(shapes[0][0]) if shapes[0] else 0
            elif dist.is_available() and dist.is_initialized():
                world_size = dist.get_world_size()
            else:
                raise ValueError(
                    f"{owner}: expected `world_size` (torch.distributed is not initialised) but got None."
                )
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(
                f"{owner}: expected `world_size` to be a positive integer but got {world_size!r}."
            )

        def expand(name: str, v: Any) -> np.ndarray:
            if np.ndim(v) == 0:
                try:
                    value = float(v)
                except (TypeError, ValueError) as exc:
                    raise TypeError(
                        f"{owner}: expected `{name}` to be a number or a matrix but got {v!r}."
                    ) from exc
                if not math.isfinite(value):
                    raise ValueError(f"{owner}: expected a finite `{name}` but got {v!r}.")
                return np.full((world_size, world_size), value)
            return _matrix(owner, name, v, world_size)

        return cls(expand("theta", theta), expand("gamma", gamma))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CommCostModel):
            return NotImplemented
        return bool(
            np.array_equal(self.theta, other.theta) and np.array_equal(self.gamma, other.gamma)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        off = ~np.eye(self.world_size, dtype=bool)
        if not off.any():
            return "CommCostModel(world_size=1)"
        return (
            f"CommCostModel(world_size={self.world_size}, "
            f"theta=[{self.theta[off].min():.3g}, {self.theta[off].max():.3g}] s/bit, "
            f"gamma=[{self.gamma[off].min():.3g}, {self.gamma[off].max():.3g}] s)"
        )
