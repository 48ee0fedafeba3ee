"""AdaQP's variance–time bi-objective bit-width assignment, solved as a MILP with HiGHS."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix
from torch import Tensor

from lightgraph.utilities.checks import BITS

ALLOWED_BITS: tuple[int, ...] = BITS
NORMALIZATIONS: tuple[str, ...] = ("nadir_utopia", "magnitude", "none")
FALLBACKS: tuple[str, ...] = ("max_bits", "greedy")
METHODS: tuple[str, ...] = ("milp", "greedy")

ArrayLike = Sequence[float] | Sequence[int] | np.ndarray | Tensor


@dataclass(frozen=True)
class BitAssignment:
    """The result of :func:`solve_bit_assignment`.

    Attributes:
        bits: the width of every message group, ``int64`` of shape ``[K]``.
        objective: the normalised objective of ``bits``,
            ``λ · V_norm + (1 − λ) · Z_norm`` (see :func:`solve_bit_assignment`),
            recomputed from ``bits`` rather than read from the solver.
        variance_term: the raw variance term :math:`V = \\sum_k \\beta_k / (2^{b_k} - 1)^2`.
        time_term: the raw time term :math:`Z` in seconds — the predicted time of the
            slowest device pair (with ``round_of_pair``: the sum over rounds of each
            round's slowest pair), recomputed from ``bits``.
        status: starts with ``"optimal"``, ``"time_limit"`` (the best feasible assignment
            found before the limit) or ``"fallback"`` (HiGHS found no solution; see
            ``fallback`` of :func:`solve_bit_assignment`). HiGHS's own message follows.
        solve_seconds: wall-clock seconds spent in this call (building and solving).
        optimal: ``True`` when HiGHS proved the assignment optimal up to ``mip_rel_gap``.
        round_times: the predicted makespan :math:`Z_r` of every round, shape ``[R]``.
        dual_bound: HiGHS's reported dual bound, shifted to the scale of ``objective``;
            NaN when HiGHS was not run or reported none. An estimate of how far
            ``objective`` is from optimal, not a certificate: on 20,000+ groups the
            greedy assignment was seen scoring up to 3e-4 (relative, un-shifted) below
            it, beyond HiGHS's tolerances.
    """

    bits: np.ndarray
    objective: float
    variance_term: float
    time_term: float
    status: str
    solve_seconds: float
    optimal: bool
    round_times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dual_bound: float = math.nan


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def _as_float_array(owner: str, name: str, value: ArrayLike) -> np.ndarray:
    if isinstance(value, Tensor):
        value = value.detach().cpu().double().numpy()
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
    return arr


def _as_int_array(owner: str, name: str, value: Sequence[int] | np.ndarray | Tensor) -> np.ndarray:
    if isinstance(value, Tensor):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise ValueError(f"{owner}: expected `{name}` to be 1-D but got shape {tuple(arr.shape)}.")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        try:
            as_float = arr.astype(np.float64)
        except (TypeError, ValueError):
            as_float = None
        if (
            arr.dtype == bool
            or as_float is None
            or not np.all(np.isfinite(as_float))
            or not np.all(as_float == np.round(as_float))
        ):
            raise TypeError(
                f"{owner}: expected `{name}` to hold integers but got {arr.tolist()!r}."
            )
    return arr.astype(np.int64)


def _check_bits(owner: str, bits: Sequence[int]) -> np.ndarray:
    values = tuple(bits)
    if not values:
        raise ValueError(
            f"{owner}: expected a non-empty `bits` from {ALLOWED_BITS} but got {values!r}."
        )
    for b in values:
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or int(b) not in ALLOWED_BITS:
            raise ValueError(
                f"{owner}: expected every entry of `bits` to be one of {ALLOWED_BITS} but got {values!r}."
            )
    if len(set(int(b) for b in values)) != len(values):
        raise ValueError(f"{owner}: expected distinct `bits` but got {values!r}.")
    return np.array(sorted(int(b) for b in values), dtype=np.int64)


@dataclass
class _Problem:
    """Validated arrays of one assignment problem plus its normalisation constants."""

    beta: np.ndarray  # [K]
    dims: np.ndarray  # [K]
    pair: np.ndarray  # [K] pair id of every group
    theta: np.ndarray  # [P] seconds per bit
    gamma: np.ndarray  # [P] seconds
    rnd: np.ndarray  # [P] round id of every pair
    num_rounds: int
    lam: float
    bits: np.ndarray  # [J] sorted candidate widths
    normalization: str

    @property
    def num_groups(self) -> int:
        return int(self.beta.size)

    def variance(self, group_bits: np.ndarray) -> float:
        return float(np.sum(self.beta / (np.exp2(group_bits.astype(np.float64)) - 1.0) ** 2))

    def round_times(self, group_bits: np.ndarray) -> np.ndarray:
        volume = np.bincount(
            self.pair, weights=self.dims * group_bits.astype(np.float64), minlength=self.theta.size
        )
        pair_time = self.theta * volume + self.gamma
        out = np.full(self.num_rounds, -np.inf)
        np.maximum.at(out, self.rnd, pair_time)
        return out

    def time(self, group_bits: np.ndarray) -> float:
        return float(np.sum(self.round_times(group_bits)))

    def uniform(self, b: int) -> np.ndarray:
        return np.full(self.num_groups, b, dtype=np.int64)

    @cached_property
    def _scales(self) -> tuple[float, float, float, float]:
        return self._compute_scales()

    def scales(self) -> tuple[float, float, float, float]:
        """(variance offset, variance scale, time offset, time scale) of the normalisation."""
        return self._scales

    def _compute_scales(self) -> tuple[float, float, float, float]:
        lo, hi = int(self.bits[0]), int(self.bits[-1])
        v_nadir, v_utopia = self.variance(self.uniform(lo)), self.variance(self.uniform(hi))
        z_nadir, z_utopia = self.time(self.uniform(hi)), self.time(self.uniform(lo))
        if self.normalization == "none":
            return 0.0, 1.0, 0.0, 1.0
        if self.normalization == "magnitude":
            return 0.0, v_nadir if v_nadir > 0 else 1.0, 0.0, z_nadir if z_nadir > 0 else 1.0
        dv, dz = v_nadir - v_utopia, z_nadir - z_utopia
        return (
            v_utopia,
            dv if dv > 0 else (v_nadir if v_nadir > 0 else 1.0),
            z_utopia,
            dz if dz > 0 else (z_nadir if z_nadir > 0 else 1.0),
        )

    def evaluate(self, group_bits: np.ndarray) -> tuple[float, float, float, np.ndarray]:
        v0, vs, z0, zs = self.scales()
        var = self.variance(group_bits)
        rounds = self.round_times(group_bits)
        z = float(np.sum(rounds))
        obj = self.lam * (var - v0) / vs + (1.0 - self.lam) * (z - z0) / zs
        return obj, var, z, rounds


def _hull_steps(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Upgrade steps along the lower convex hull of (width, 1 / (2^b - 1)^2).

    Every group has the same hull up to the factors β_k (variance) and D_k (bits), so
    the steps are computed once: ``(from_index, to_index, efficiency)`` with efficiency
    = variance saved per extra bit for β = D = 1, decreasing along the hull.
    """
    coef = 1.0 / (np.exp2(bits.astype(np.float64)) - 1.0) ** 2
    frm, to, eff = [], [], []
    cur = 0
    while cur < bits.size - 1:
        slopes = (coef[cur] - coef[cur + 1 :]) / (bits[cur + 1 :] - bits[cur])
        nxt = cur + 1 + int(np.argmax(slopes))
        frm.append(cur)
        to.append(nxt)
        eff.append(float(slopes[nxt - cur - 1]))
        cur = nxt
    return np.array(frm, dtype=np.int64), np.array(to, dtype=np.int64), np.array(eff)


def _greedy_assignment(prob: _Problem) -> np.ndarray:
    """A fast near-optimal assignment (used as a fallback and to check HiGHS's incumbent).

    The objective separates over rounds, and for a fixed makespan :math:`Z_r` every pair
    of round :math:`r` is a multiple-choice knapsack with capacity
    :math:`(Z_r - \\gamma_i) / \\theta_i` bits. Each pair applies its hull upgrades in
    order of variance saved per bit (the LP-relaxation order); sweeping :math:`Z_r`
    over the points where one more upgrade fits and keeping the best objective gives,
    for every swept :math:`Z_r`, an assignment within one upgrade per pair of the
    LP-relaxation optimum.
    """
    k, p = prob.num_groups, prob.theta.size
    frm, to, eff = _hull_steps(prob.bits)
    base = np.zeros(k, dtype=np.int64)
    if frm.size == 0:
        return prob.bits[base]
    _, v_scale, _, z_scale = prob.scales()
    bits_f = prob.bits.astype(np.float64)
    coef = 1.0 / (np.exp2(bits_f) - 1.0) ** 2
    s_count = frm.size
    group = np.repeat(np.arange(k), s_count)
    step = np.tile(np.arange(s_count), k)
    gain = prob.beta[group] * (coef[frm] - coef[to])[step]
    dbits = prob.dims[group] * (bits_f[to] - bits_f[frm])[step]
    efficiency = prob.beta[group] / prob.dims[group] * eff[step]
    pair = prob.pair[group]
    # Order every pair's steps by efficiency (ties: by group, then step — keeps prefixes).
    order = np.lexsort((step, group, -efficiency, pair))
    gain, dbits, pair, group, to_idx = (
        gain[order],
        dbits[order],
        pair[order],
        group[order],
        to[step[order]],
    )
    cum = np.cumsum(dbits)
    starts = np.searchsorted(pair, np.arange(p))
    pair_offset = np.concatenate([[0.0], cum])[starts]
    base_bits = np.bincount(prob.pair, weights=prob.dims * bits_f[0], minlength=p)
    z_event = prob.gamma[pair] + prob.theta[pair] * (base_bits[pair] + cum - pair_offset[pair])
    z_base = prob.gamma + prob.theta * base_bits  # [P] all-narrowest pair times
    z0 = np.full(prob.num_rounds, -np.inf)
    np.maximum.at(z0, prob.rnd, z_base)
    rnd = prob.rnd[pair]
    position = np.arange(order.size)
    order2 = np.lexsort((position, z_event, rnd))
    gain, rnd, z_event, group, to_idx = (
        gain[order2],
        rnd[order2],
        z_event[order2],
        group[order2],
        to_idx[order2],
    )
    # Per round: objective change after applying the first e events of the round.
    cum_gain = np.cumsum(gain)
    r_starts = np.searchsorted(rnd, np.arange(prob.num_rounds))
    gain_offset = np.concatenate([[0.0], cum_gain])[r_starts]
    round_gain = cum_gain - gain_offset[rnd]
    z_cand = np.maximum(z0[rnd], z_event)
    delta = -prob.lam * round_gain / v_scale + (1.0 - prob.lam) * (z_cand - z0[rnd]) / z_scale
    # Best prefix per round (the empty prefix has delta 0).
    best_e = np.full(prob.num_rounds, -1, dtype=np.int64)
    best_delta = np.zeros(prob.num_rounds)
    for r in range(prob.num_rounds):
        lo = r_starts[r]
        hi = r_starts[r + 1] if r + 1 < prob.num_rounds else rnd.size
        if hi > lo:
            e = int(np.argmin(delta[lo:hi]))
            if delta[lo + e] < best_delta[r]:
                best_delta[r], best_e[r] = delta[lo + e], lo + e
    applied = position <= best_e[rnd]
    np.maximum.at(base, group[applied], to_idx[applied])
    return prob.bits[base]


def _build_problem(
    owner: str,
    beta: ArrayLike,
    dims: ArrayLike,
    pair_of_group: Sequence[int] | np.ndarray | Tensor,
    theta: ArrayLike,
    gamma: ArrayLike,
    lam: float,
    bits: Sequence[int],
    normalization: str,
    round_of_pair: Sequence[int] | np.ndarray | Tensor | None,
) -> _Problem:
    beta_a = _as_float_array(owner, "beta", beta)
    dims_a = _as_float_array(owner, "dims", dims)
    pair_a = _as_int_array(owner, "pair_of_group", pair_of_group)
    theta_a = _as_float_array(owner, "theta", theta)
    gamma_a = _as_float_array(owner, "gamma", gamma)
    k = beta_a.size
    if k == 0:
        raise ValueError(f"{owner}: expected at least one message group but `beta` is empty.")
    if dims_a.size != k or pair_a.size != k:
        raise ValueError(
            f"{owner}: expected `beta`, `dims` and `pair_of_group` to have the same length but got "
            f"{k}, {dims_a.size} and {pair_a.size}."
        )
    if np.any(beta_a < 0):
        raise ValueError(f"{owner}: expected `beta` >= 0 but got minimum {beta_a.min()!r}.")
    if np.any(dims_a <= 0):
        raise ValueError(f"{owner}: expected `dims` > 0 but got minimum {dims_a.min()!r}.")
    p = theta_a.size
    if p == 0 or gamma_a.size != p:
        raise ValueError(
            f"{owner}: expected `theta` and `gamma` to be non-empty with the same length but got "
            f"{p} and {gamma_a.size}."
        )
    if np.any(theta_a <= 0):
        raise ValueError(
            f"{owner}: expected `theta` > 0 (seconds per bit) but got minimum {theta_a.min()!r}."
        )
    if np.any(gamma_a < 0):
        raise ValueError(
            f"{owner}: expected `gamma` >= 0 (seconds) but got minimum {gamma_a.min()!r}."
        )
    if pair_a.min() < 0 or pair_a.max() >= p:
        raise ValueError(
            f"{owner}: expected `pair_of_group` in [0, {p - 1}] (one id per entry of `theta`) but got "
            f"values in [{pair_a.min()}, {pair_a.max()}]."
        )
    if isinstance(lam, bool) or not isinstance(lam, int | float) or not 0.0 <= float(lam) <= 1.0:
        raise ValueError(f"{owner}: expected `lam` in [0, 1] but got {lam!r}.")
    if normalization not in NORMALIZATIONS:
        raise ValueError(
            f"{owner}: expected `normalization` to be one of {NORMALIZATIONS} but got {normalization!r}."
        )
    bits_a = _check_bits(owner, bits)
    if round_of_pair is None:
        rnd = np.zeros(p, dtype=np.int64)
    else:
        rnd = _as_int_array(owner, "round_of_pair", round_of_pair)
        if rnd.size != p:
            raise ValueError(
                f"{owner}: expected `round_of_pair` to have one entry per pair ({p}) but got {rnd.size}."
            )
        if rnd.min() < 0:
            raise ValueError(f"{owner}: expected `round_of_pair` >= 0 but got minimum {rnd.min()}.")
        missing = sorted(set(range(int(rnd.max()) + 1)) - set(rnd.tolist()))
        if missing:
            raise ValueError(
                f"{owner}: expected `round_of_pair` to use every round id in [0, {rnd.max()}] but "
                f"rounds {missing} have no pair."
            )
    return _Problem(
        beta=beta_a,
        dims=dims_a,
        pair=pair_a,
        theta=theta_a,
        gamma=gamma_a,
        rnd=rnd,
        num_rounds=int(rnd.max()) + 1,
        lam=float(lam),
        bits=bits_a,
        normalization=normalization,
    )


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def evaluate_bit_assignment(
    group_bits: Sequence[int] | np.ndarray | Tensor,
    beta: ArrayLike,
    dims: ArrayLike,
    pair_of_group: Sequence[int] | np.ndarray | Tensor,
    theta: ArrayLike,
    gamma: ArrayLike,
    lam: float = 0.5,
    bits: Sequence[int] = (2, 4, 8),
    normalization: str = "nadir_utopia",
    round_of_pair: Sequence[int] | np.ndarray | Tensor | None = None,
) -> tuple[float, float, float]:
    """AdaQP Eq. 12: the value of a given assignment — ``(objective, variance_term, time_term)``.

    The arguments mean the same as in :func:`solve_bit_assignment`, which minimises this
    ``objective``; use it to score other policies (e.g. uniform random widths) on the
    same scale.

    Raises:
        ValueError: on invalid problem data, or if ``group_bits`` has the wrong length or
            a width outside ``bits``.
    """
    owner = "evaluate_bit_assignment"
    prob = _build_problem(
        owner, beta, dims, pair_of_group, theta, gamma, lam, bits, normalization, round_of_pair
    )
    gb = _as_int_array(owner, "group_bits", group_bits)
    if gb.size != prob.num_groups:
        raise ValueError(
            f"{owner}: expected `group_bits` to have one entry per group ({prob.num_groups}) but got {gb.size}."
        )
    if not np.all(np.isin(gb, prob.bits)):
        raise ValueError(
            f"{owner}: expected `group_bits` values in {tuple(prob.bits.tolist())} but got "
            f"{sorted(set(gb.tolist()))}."
        )
    obj, var, z, _ = prob.evaluate(gb)
    return obj, var, z


def _result(
    prob: _Problem,
    group_bits: np.ndarray,
    status: str,
    optimal: bool,
    start: float,
    dual_bound: float = math.nan,
) -> BitAssignment:
    obj, var, z, rounds = prob.evaluate(group_bits)
    return BitAssignment(
        bits=group_bits.astype(np.int64),
        objective=obj,
        variance_term=var,
        time_term=z,
        status=status,
        solve_seconds=time.perf_counter() - start,
        optimal=optimal,
        round_times=rounds,
        dual_bound=dual_bound,
    )


def _solve_highs(prob: _Problem, time_limit: float, mip_rel_gap: float) -> Any:
    """Build the MILP of Eq. 12 in scipy's form and solve it with HiGHS."""
    k, j_count, p, r_count = prob.num_groups, prob.bits.size, prob.theta.size, prob.num_rounds
    _, v_scale, _, z_scale = prob.scales()
    # Time is measured internally in units of the all-widest makespan of the worst pair,
    # so the constraint coefficients are O(1) whatever the scale of theta.
    bits_f = prob.bits.astype(np.float64)
    t_unit = float(
        np.max(
            prob.theta * np.bincount(prob.pair, weights=prob.dims, minlength=p) * bits_f[-1]
            + prob.gamma
        )
    )
    if not t_unit > 0:
        t_unit = 1.0

    # Variables: x[k, j] at column k * J + j, then z[r] at column K * J + r.
    n_x = k * j_count
    var_cost = prob.beta[:, None] / (np.exp2(bits_f)[None, :] - 1.0) ** 2  # [K, J]
    c = np.concatenate(
        [
            (prob.lam / v_scale) * var_cost.ravel(),
            np.full(r_count, (1.0 - prob.lam) * t_unit / z_scale),
        ]
    )
    # Assignment rows: sum_j x[k, j] = 1.
    cols_x = np.arange(n_x)
    assign_rows = np.repeat(np.arange(k), j_count)
    # Pair rows: sum theta_i D_k b_j x[k, j] / t_unit - z[r(i)] <= -gamma_i / t_unit.
    pair_rows = k + np.repeat(prob.pair, j_count)
    pair_vals = ((prob.theta[prob.pair] * prob.dims)[:, None] * bits_f[None, :] / t_unit).ravel()
    z_rows = k + np.arange(p)
    z_cols = n_x + prob.rnd
    rows = np.concatenate([assign_rows, pair_rows, z_rows])
    cols = np.concatenate([cols_x, cols_x, z_cols])
    vals = np.concatenate([np.ones(n_x), pair_vals, -np.ones(p)])
    a = coo_matrix((vals, (rows, cols)), shape=(k + p, n_x + r_count)).tocsr()
    lower = np.concatenate([np.ones(k), np.full(p, -np.inf)])
    upper = np.concatenate([np.ones(k), -prob.gamma / t_unit])
    integrality = np.concatenate([np.ones(n_x), np.zeros(r_count)])
    var_bounds = Bounds(
        np.zeros(n_x + r_count), np.concatenate([np.ones(n_x), np.full(r_count, np.inf)])
    )
    return milp(
        c,
        integrality=integrality,
        bounds=var_bounds,
        constraints=LinearConstraint(a, lower, upper),
        options={"time_limit": time_limit, "mip_rel_gap": float(mip_rel_gap)},
    )


def solve_bit_assignment(
    beta: ArrayLike,
    dims: ArrayLike,
    pair_of_group: Sequence[int] | np.ndarray | Tensor,
    theta: ArrayLike,
    gamma: ArrayLike,
    lam: float = 0.5,
    bits: Sequence[int] = (2, 4, 8),
    time_limit: float = 5.0,
    mip_rel_gap: float = 1e-3,
    normalization: str = "nadir_utopia",
    round_of_pair: Sequence[int] | np.ndarray | Tensor | None = None,
    fallback: str = "max_bits",
    method: str = "milp",
) -> BitAssignment:
    """AdaQP (MLSys'23) Eq. 10–12: variance–time bi-objective bit-width assignment.

    For one layer and one direction, message group :math:`k` (a block of rows one rank
    sends to another, see :func:`group_messages`) carries :math:`D_k` values and adds
    variance :math:`\\beta_k / (2^{b_k} - 1)^2` to the weight gradients when sent with
    :math:`b_k` bits (Theorems 1 and 3). Every group belongs to one device pair
    :math:`i` whose transfer takes :math:`\\theta_i \\sum_{k \\in i} D_k b_k + \\gamma_i`
    seconds. With binary :math:`x_{k,b}` (:math:`b_k = b \\iff x_{k,b} = 1`):

    .. math::

        \\min_{x, Z}\\; \\lambda \\frac{V(x) - V^{u}}{V^{n} - V^{u}}
            + (1 - \\lambda) \\frac{\\sum_r Z_r - Z^{u}}{Z^{n} - Z^{u}}, \\qquad
        V(x) = \\sum_k \\sum_{b \\in B} \\frac{\\beta_k}{(2^b - 1)^2} x_{k,b}

        \\text{s.t.}\\; \\theta_i \\sum_{k \\in i} \\sum_{b \\in B} D_k\\, b\\, x_{k,b}
            + \\gamma_i \\le Z_{r(i)} \\;\\forall i, \\qquad
        \\sum_{b \\in B} x_{k,b} = 1 \\;\\forall k, \\qquad x_{k,b} \\in \\{0, 1\\}.

    Without ``round_of_pair`` all pairs form one round and :math:`Z` is the makespan of
    the slowest pair (Eq. 10–12 as written). With it, pair :math:`i` belongs to round
    :math:`r(i)` of the ring all-to-all (AdaQP Fig. 8, round :math:`r` sends to the
    :math:`r`-hop neighbour; see :func:`~lightgraph.quant.cost_model.ring_schedule`) and
    the time term is the sum of the rounds' makespans, since rounds run one after another.

    **Normalisation.** The paper scalarises the two objectives with a weighted sum and
    does not state a scaling; AdaQP's reference implementation normalises both between
    their utopia and nadir values, so λ weighs *relative* improvements and does not
    depend on the units of β or θ. ``"nadir_utopia"`` (default) does the same with
    :math:`V^{u}` = all groups at ``max(bits)``, :math:`V^{n}` = all at ``min(bits)``,
    :math:`Z^{u}` = all at ``min(bits)`` (the smallest achievable time), :math:`Z^{n}` =
    all at ``max(bits)``; both normalised terms then lie in [0, 1].
    ``"magnitude"`` divides by :math:`V^{n}` and :math:`Z^{n}` only (no offsets);
    ``"none"`` uses the raw terms (λ then trades units of β against seconds). A zero
    range (e.g. all β = 0 or a single candidate width) falls back to dividing by the
    nadir value, or by 1. The offsets do not change the minimiser; HiGHS minimises the
    un-shifted, scaled objective, so ``mip_rel_gap`` is relative to that value.

    Args:
        beta: :math:`\\beta_k \\ge 0` of every group, shape ``[K]``:
            :math:`\\sum_v \\alpha^2_{k,v} D_k (\\max - \\min)^2 / 6` summed over the group's
            rows (computed by the caller).
        dims: :math:`D_k > 0`, the number of *values* group :math:`k` carries
            (rows × feature dimension), shape ``[K]``. The wire size of the group's codes
            is ``D_k · b_k`` bits. Bit-independent bytes (per-row scale and zero point)
            belong in ``gamma`` (add :math:`\\theta_i \\cdot 32 \\cdot \\text{rows}_i` for bf16
            parameters).
        pair_of_group: the device pair id (index into ``theta``/``gamma``) of every group.
        theta: :math:`\\theta_i > 0` of every pair, in **seconds per bit**.
        gamma: :math:`\\gamma_i \\ge 0` of every pair, in seconds. A pair without groups
            still bounds the time term by :math:`\\gamma_i`.
        lam: λ in [0, 1]: 1 minimises variance only (every group gets ``max(bits)``),
            0 minimises time only (ties between equally fast assignments are broken
            arbitrarily by the solver). AdaQP uses 0.5.
        bits: candidate widths, a subset of (1, 2, 4, 8); AdaQP uses (2, 4, 8).
        time_limit: HiGHS wall-clock limit in seconds (> 0).
        mip_rel_gap: HiGHS's relative MIP gap at which to stop (>= 0), relative to the
            un-shifted objective HiGHS minimises (so the gap on the reported, shifted
            ``objective`` can be a few times larger; see ``dual_bound``). Gaps below
            1e-3 can take minutes on thousands of groups.
        normalization: ``"nadir_utopia"``, ``"magnitude"`` or ``"none"`` (see above).
        round_of_pair: optional round id of every pair (ids ``0..R-1``, each used).
        fallback: what to return when HiGHS finds no solution within ``time_limit``:
            ``"max_bits"`` (default) or ``"greedy"``.
        method: ``"milp"`` (default: HiGHS, checked against the greedy assignment) or
            ``"greedy"`` (skip HiGHS: milliseconds for 20,000 groups, ``optimal=False``;
            on the instances of ``docs/adaqp.md`` within 1% of the optimum at 200 groups
            and within 1e-3 at 2,000 or more).

    Returns:
        The :class:`BitAssignment`. If HiGHS stops at the time limit with a feasible
        solution it is returned with ``optimal=False``. Whenever HiGHS returns a
        solution it is compared with a greedy assignment (hull upgrades in order of
        variance saved per bit, swept over the makespan; :math:`O(K \\log K)`), and the
        greedy one is kept if it scores strictly better — ``status`` says so. If HiGHS
        returns no solution, ``fallback`` decides: ``"max_bits"`` gives every group
        ``max(bits)`` (always feasible since :math:`Z` is free; the variance-safe width
        training starts with before the first assignment), ``"greedy"`` the greedy
        assignment; ``status``
        starts with ``"fallback"`` and ``optimal`` is ``False``. ``objective``,
        ``variance_term`` and ``time_term`` are always recomputed from ``bits``.

    Raises:
        ValueError: on mismatched lengths, negative β, non-positive ``dims`` or ``theta``,
            negative ``gamma``, ``lam`` outside [0, 1], widths outside (1, 2, 4, 8), pair
            or round ids out of range, non-positive ``time_limit``, negative
            ``mip_rel_gap`` or an unknown ``normalization`` / ``fallback`` / ``method``.
        TypeError: on non-numeric inputs.
    """
    owner = "solve_bit_assignment"
    start = time.perf_counter()
    prob = _build_problem(
        owner, beta, dims, pair_of_group, theta, gamma, lam, bits, normalization, round_of_pair
    )
    if (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, int | float)
        or not (math.isfinite(time_limit) and time_limit > 0)
    ):
        raise ValueError(f"{owner}: expected `time_limit` > 0 (seconds) but got {time_limit!r}.")
    if (
        isinstance(mip_rel_gap, bool)
        or not isinstance(mip_rel_gap, int | float)
        or not (math.isfinite(mip_rel_gap) and mip_rel_gap >= 0)
    ):
        raise ValueError(f"{owner}: expected `mip_rel_gap` >= 0 but got {mip_rel_gap!r}.")
    if method not in METHODS:
        raise ValueError(f"{owner}: expected `method` to be one of {METHODS} but got {method!r}.")
    if fallback not in FALLBACKS:
        raise ValueError(
            f"{owner}: expected `fallback` to be one of {FALLBACKS} but got {fallback!r}."
        )

    if method == "greedy":
        return _result(prob, _greedy_assignment(prob), "greedy (HiGHS not run)", False, start)
    remaining = max(time_limit - (time.perf_counter() - start), 1e-3)
    res = _solve_highs(prob, remaining, float(mip_rel_gap))
    k, j_count = prob.num_groups, prob.bits.size
    message = str(getattr(res, "message", "")).strip()
    if res.x is not None:
        x = np.asarray(res.x[: k * j_count]).reshape(k, j_count)
        group_bits = prob.bits[np.argmax(x, axis=1)]
        optimal = res.status == 0
        status = (
            f"optimal (HiGHS: {message})"
            if optimal
            else f"time_limit: best feasible solution found by HiGHS (HiGHS: {message})"
        )
        # A cheap safeguard: keep the greedy assignment if it scores better (possible
        # within ``mip_rel_gap`` or when HiGHS stopped early with a weak incumbent).
        candidate = _greedy_assignment(prob)
        if prob.evaluate(candidate)[0] < prob.evaluate(group_bits)[0] - 1e-12:
            group_bits = candidate
            status += "; the greedy assignment scored better and was kept"
    elif fallback == "greedy":
        group_bits = _greedy_assignment(prob)
        optimal = False
        status = f"fallback: HiGHS returned no solution, greedy assignment (HiGHS: {message})"
    else:
        group_bits = prob.uniform(int(prob.bits[-1]))
        optimal = False
        status = (
            f"fallback: HiGHS returned no solution, all groups at {int(prob.bits[-1])} bits "
            f"(HiGHS: {message})"
        )

    # HiGHS minimised the un-shifted objective; shift its dual bound like ``objective``.
    v0, vs, z0, zs = prob.scales()
    dual = getattr(res, "mip_dual_bound", None)
    dual_bound = (
        float(dual) - prob.lam * v0 / vs - (1.0 - prob.lam) * z0 / zs
        if dual is not None and math.isfinite(float(dual))
        else math.nan
    )
    return _result(prob, group_bits, status, optimal, start, dual_bound)


def group_messages(beta_per_row: Tensor, group_size: int = 100) -> tuple[Tensor, Tensor]:
    """AdaQP §4.2 (message grouping): sort rows by β and cut them into groups.

    To keep the MILP of :func:`solve_bit_assignment` small, AdaQP orders the messages of
    one device pair (one layer, one direction) by their :math:`\\beta` and lets blocks of
    ``group_size`` consecutive messages share one width. Rows are sorted by
    ``beta_per_row`` in **descending** order (a stable sort, so ties keep their row order
    and every rank computes the same grouping); the rows at sorted positions
    ``[g · group_size, (g + 1) · group_size)`` form group ``g``. The last group holds the
    remaining ``N mod group_size`` rows when ``N`` is not a multiple. Variances of
    independent rows add, so a group's β is the sum of its rows' β.

    Call it once per device pair (per layer and direction) so that groups never straddle
    pairs, and offset the group ids when concatenating pairs for the solver. A group's
    ``dims`` is its row count times the feature dimension:
    ``torch.bincount(group_id, minlength=len(group_beta)) * D``. The width of row ``n`` is
    then ``assignment.bits[group_id[n]]``.

    Args:
        beta_per_row: :math:`\\beta` of every row of one pair, 1-D, finite and >= 0.
        group_size: rows per group (> 0). AdaQP's Table 8 uses 100–2000 depending on the
            graph; smaller groups give finer assignments and larger MILPs.

    Returns:
        ``(group_id, group_beta)``: ``group_id[n]`` (``int64``, shape ``[N]``) is the
        group of row ``n``; ``group_beta[g]`` (dtype of ``beta_per_row``, shape
        ``[ceil(N / group_size)]``) is the sum of its rows' β. Group 0 holds the largest β.

    Raises:
        ValueError: if ``beta_per_row`` is not 1-D, not finite or negative, or
            ``group_size`` is not a positive integer.
    """
    owner = "group_messages"
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise ValueError(
            f"{owner}: expected `group_size` to be a positive integer but got {group_size!r}."
        )
    if not isinstance(beta_per_row, Tensor):
        raise TypeError(
            f"{owner}: expected `beta_per_row` to be a Tensor but got {type(beta_per_row).__name__}."
        )
    if beta_per_row.dim() != 1:
        raise ValueError(
            f"{owner}: expected `beta_per_row` to be 1-D but got shape {tuple(beta_per_row.shape)}."
        )
    if not beta_per_row.is_floating_point():
        beta_per_row = beta_per_row.double()
    n = beta_per_row.numel()
    if n and not bool(torch.isfinite(beta_per_row).all()):
        raise ValueError(
            f"{owner}: expected `beta_per_row` to be finite but it contains NaN or inf."
        )
    if n and bool((beta_per_row < 0).any()):
        raise ValueError(
            f"{owner}: expected `beta_per_row` >= 0 but got minimum {beta_per_row.min().item()!r}."
        )
    order = torch.sort(beta_per_row, descending=True, stable=True).indices
    positions = torch.arange(n, device=beta_per_row.device)
    group_id = torch.empty(n, dtype=torch.long, device=beta_per_row.device)
    group_id[order] = positions // group_size
    num_groups = (n + group_size - 1) // group_size
    group_beta = torch.zeros(num_groups, dtype=beta_per_row.dtype, device=beta_per_row.device)
    group_beta.index_add_(0, group_id, beta_per_row)
    return group_id, group_beta
