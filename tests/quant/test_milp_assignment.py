"""AdaQP's bi-objective bit-width assignment (Eq. 10–12) against exhaustive search."""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import lightgraph.quant.milp_assignment as ma
from lightgraph.quant.milp_assignment import (
    BitAssignment,
    evaluate_bit_assignment,
    group_messages,
    solve_bit_assignment,
)


def _instance(seed: int, k: int = 5, pairs: int = 2) -> dict[str, Any]:
    """A small instance whose optimum mixes widths: lognormal β, uneven pair volumes."""
    rng = np.random.default_rng(seed)
    pair = np.concatenate([np.arange(pairs), rng.integers(0, pairs, k - pairs)])
    return {
        "beta": rng.lognormal(0.0, 1.5, k),
        "dims": rng.integers(20, 200, k).astype(float) * 64,
        "pair_of_group": pair,
        "theta": rng.uniform(0.5, 2.0, pairs) * 1e-9,
        "gamma": rng.uniform(0.0, 2e-4, pairs),
    }


def _brute_force(
    inst: dict[str, Any],
    lam: float,
    bits: tuple[int, ...] = (2, 4, 8),
    normalization: str = "nadir_utopia",
    round_of_pair: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every assignment's (objective, V, Z) by direct enumeration — independent code."""
    beta, dims = np.asarray(inst["beta"]), np.asarray(inst["dims"])
    pair, theta, gamma = inst["pair_of_group"], np.asarray(inst["theta"]), np.asarray(inst["gamma"])
    rounds = [0] * len(theta) if round_of_pair is None else round_of_pair
    k = len(beta)

    def terms(assign: tuple[int, ...]) -> tuple[float, float]:
        v = sum(beta[g] / (2 ** assign[g] - 1) ** 2 for g in range(k))
        pair_time = [
            theta[i] * sum(dims[g] * assign[g] for g in range(k) if pair[g] == i) + gamma[i]
            for i in range(len(theta))
        ]
        z = sum(
            max(pair_time[i] for i in range(len(theta)) if rounds[i] == r)
            for r in range(max(rounds) + 1)
        )
        return v, z

    assigns = list(itertools.product(sorted(bits), repeat=k))
    vz = np.array([terms(a) for a in assigns])
    v_lo, _ = terms((max(bits),) * k)
    v_hi, z_lo = terms((min(bits),) * k)
    _, z_hi = terms((max(bits),) * k)
    if normalization == "nadir_utopia":
        v0, vs, z0, zs = v_lo, v_hi - v_lo, z_lo, z_hi - z_lo
    elif normalization == "magnitude":
        v0, vs, z0, zs = 0.0, v_hi, 0.0, z_hi
    else:
        v0, vs, z0, zs = 0.0, 1.0, 0.0, 1.0
    obj = lam * (vz[:, 0] - v0) / vs + (1 - lam) * (vz[:, 1] - z0) / zs
    return obj, vz[:, 0], vz[:, 1], np.array(assigns)


def _pair_times(inst: dict[str, Any], bits: np.ndarray) -> np.ndarray:
    pair = np.asarray(inst["pair_of_group"])
    return np.array(
        [
            inst["theta"][i] * np.sum(inst["dims"][pair == i] * bits[pair == i]) + inst["gamma"][i]
            for i in range(len(inst["theta"]))
        ]
    )


@pytest.mark.parametrize("normalization", ["nadir_utopia", "magnitude", "none"])
@pytest.mark.parametrize("lam", [0.2, 0.5, 0.8])
def test_matches_brute_force(normalization: str, lam: float) -> None:
    mixed = 0
    for seed in range(4):
        inst = _instance(seed)
        obj, _, _, assigns = _brute_force(inst, lam, normalization=normalization)
        res = solve_bit_assignment(**inst, lam=lam, mip_rel_gap=0.0, normalization=normalization)
        assert isinstance(res, BitAssignment)
        assert res.optimal and res.status.startswith("optimal")
        assert "greedy" not in res.status  # HiGHS found the optimum itself
        best = float(obj.min())
        assert res.dual_bound == pytest.approx(best, abs=1e-6)
        assert res.objective == pytest.approx(best, abs=1e-6, rel=1e-9)
        # The reported objective is the objective of the returned bits.
        mine = obj[np.flatnonzero((assigns == res.bits).all(axis=1))[0]]
        assert res.objective == pytest.approx(mine, abs=1e-12, rel=1e-9)
        second = np.partition(obj, 1)[1]
        if second - best > 1e-5:  # unique optimum: the same assignment
            np.testing.assert_array_equal(res.bits, assigns[int(np.argmin(obj))])
        mixed += len(set(res.bits.tolist())) > 1
    if normalization != "none":
        assert mixed > 0, "instances should exercise mixed-width optima"


@pytest.mark.parametrize("bits", [(1, 2, 4, 8), (2, 8), (4,)])
def test_matches_brute_force_other_width_sets(bits: tuple[int, ...]) -> None:
    for seed in range(3):
        inst = _instance(10 + seed, k=5, pairs=3)
        res = solve_bit_assignment(**inst, bits=bits, mip_rel_gap=0.0)
        assert set(res.bits.tolist()) <= set(bits)
        if len(bits) == 1:  # zero ranges: a single assignment at the utopia point
            assert res.objective == 0.0
            continue
        obj, _, _, _ = _brute_force(inst, 0.5, bits=bits)
        assert res.objective == pytest.approx(float(obj.min()), abs=1e-6)


def test_matches_brute_force_with_ring_rounds() -> None:
    # 3 ranks -> 6 ordered pairs in 2 rounds; the time term is the sum of round makespans.
    rounds = [0, 0, 0, 1, 1, 1]
    for seed in range(3):
        inst = _instance(20 + seed, k=7, pairs=6)
        for lam in (0.3, 0.7):
            obj, _, _, _ = _brute_force(inst, lam, round_of_pair=rounds)
            res = solve_bit_assignment(**inst, lam=lam, mip_rel_gap=0.0, round_of_pair=rounds)
            assert res.objective == pytest.approx(float(obj.min()), abs=1e-6)
            times = _pair_times(inst, res.bits)
            expected = [times[:3].max(), times[3:].max()]
            np.testing.assert_allclose(res.round_times, expected, rtol=1e-12)
            assert res.time_term == pytest.approx(sum(expected), rel=1e-12)


def test_lambda_one_is_all_widest() -> None:
    for seed in range(3):
        inst = _instance(seed, k=6, pairs=2)
        res = solve_bit_assignment(**inst, lam=1.0)
        np.testing.assert_array_equal(res.bits, np.full(6, 8))
        _, v, _, _ = _brute_force(inst, 1.0)
        assert res.variance_term == pytest.approx(v.min(), rel=1e-12)


def test_lambda_zero_minimises_the_makespan() -> None:
    for seed in range(3):
        inst = _instance(seed, k=6, pairs=2)
        res = solve_bit_assignment(**inst, lam=0.0, mip_rel_gap=0.0)
        _, _, z, _ = _brute_force(inst, 0.0)
        # Several assignments may tie on Z; the makespan must be the minimum (all 2-bit's).
        assert res.time_term == pytest.approx(z.min(), rel=1e-9)
        assert _pair_times(inst, res.bits).max() <= res.time_term * (1 + 1e-12)
        assert res.time_term == pytest.approx(_pair_times(inst, np.full(6, 2)).max(), rel=1e-9)


def test_returned_terms_satisfy_the_constraints() -> None:
    inst = _instance(7, k=40, pairs=4)
    res = solve_bit_assignment(**inst)
    times = _pair_times(inst, res.bits)
    assert np.all(times <= res.time_term * (1 + 1e-12))
    assert res.time_term == pytest.approx(times.max(), rel=1e-12)
    assert res.variance_term == pytest.approx(
        float(np.sum(inst["beta"] / (2.0**res.bits - 1) ** 2)), rel=1e-12
    )
    assert res.bits.dtype == np.int64 and res.bits.shape == (40,)
    assert 0.0 <= res.objective <= 1.0
    assert res.solve_seconds > 0
    # evaluate_bit_assignment scores any assignment on the same scale
    obj, v, z = evaluate_bit_assignment(res.bits, **inst)
    assert (obj, v, z) == pytest.approx((res.objective, res.variance_term, res.time_term))
    for b in (2, 4, 8):
        assert evaluate_bit_assignment(np.full(40, b), **inst)[0] >= res.objective - 1e-9


def test_torch_inputs_are_accepted() -> None:
    inst = _instance(3)
    as_torch = {
        "beta": torch.tensor(inst["beta"]),
        "dims": torch.tensor(inst["dims"], dtype=torch.float32),
        "pair_of_group": torch.tensor(inst["pair_of_group"]),
        "theta": list(inst["theta"]),
        "gamma": tuple(inst["gamma"]),
    }
    a = solve_bit_assignment(**inst, mip_rel_gap=0.0)
    b = solve_bit_assignment(**as_torch, mip_rel_gap=0.0)
    np.testing.assert_array_equal(a.bits, b.bits)


def _large(k: int = 2000, world: int = 4, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    p = world * (world - 1)
    w = rng.lognormal(0, 0.7, p)
    return {
        "beta": rng.lognormal(0, 1.5, k) * 100,
        "dims": np.full(k, 100 * 256.0),
        "pair_of_group": rng.choice(p, size=k, p=w / w.sum()),
        "theta": rng.uniform(0.8, 1.2, p) / 25e9,
        "gamma": rng.uniform(50e-6, 150e-6, p),
    }


def test_large_instance_respects_the_time_limit() -> None:
    inst = _large()
    limit = 0.2
    start = time.perf_counter()
    res = solve_bit_assignment(**inst, time_limit=limit)
    elapsed = time.perf_counter() - start
    assert elapsed < limit + 2.0  # HiGHS checks the limit between phases; generous slack
    assert res.status.split(":")[0].split(" ")[0] in ("optimal", "time_limit", "fallback")
    assert res.bits.shape == (2000,) and set(res.bits.tolist()) <= {2, 4, 8}
    assert np.isfinite(res.objective)
    assert _pair_times(inst, res.bits).max() <= res.time_term * (1 + 1e-12)
    assert res.objective <= evaluate_bit_assignment(np.full(2000, 8), **inst)[0] + 1e-12


def test_greedy_method_is_near_optimal_and_fast() -> None:
    inst = _large()
    start = time.process_time()  # CPU seconds: a busy machine's other jobs do not count
    greedy = solve_bit_assignment(**inst, method="greedy")
    assert time.process_time() - start < 2.0  # loose: milliseconds-scale work, a busy machine
    assert greedy.status.startswith("greedy") and not greedy.optimal
    assert np.isnan(greedy.dual_bound)
    exact = solve_bit_assignment(**inst, mip_rel_gap=1e-3, time_limit=30)
    assert greedy.objective >= exact.objective * (1 - 1e-3) - 1e-12
    assert greedy.objective <= exact.objective * 1.01
    # On tiny instances the greedy is never worse than the uniform assignments it sweeps past.
    for seed in range(5):
        small = _instance(seed)
        g = solve_bit_assignment(**small, method="greedy")
        obj, _, _, _ = _brute_force(small, 0.5)
        assert (
            obj.min() - 1e-12
            <= g.objective
            <= min(evaluate_bit_assignment(np.full(5, b), **small)[0] for b in (2, 8))
        )


def test_fallback_when_highs_finds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_solution(*args: Any, **kwargs: Any) -> SimpleNamespace:
        return SimpleNamespace(x=None, status=1, message="Time limit reached.")

    monkeypatch.setattr(ma, "milp", no_solution)
    inst = _instance(1, k=8, pairs=2)
    res = solve_bit_assignment(**inst)
    assert res.status.startswith("fallback") and "8 bits" in res.status
    assert not res.optimal
    np.testing.assert_array_equal(res.bits, np.full(8, 8))
    res_g = solve_bit_assignment(**inst, fallback="greedy")
    assert res_g.status.startswith("fallback") and "greedy" in res_g.status
    assert res_g.objective <= res.objective


def test_time_limit_incumbent_is_returned_unless_greedy_beats_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inst = _instance(2, k=6, pairs=2)
    j = 3

    def incumbent(bit_index: int) -> Any:
        def fake(c: np.ndarray, **kwargs: Any) -> SimpleNamespace:
            x = np.zeros_like(c)
            x[bit_index : 6 * j : j] = 1.0
            return SimpleNamespace(x=x, status=1, message="Time limit reached.")

        return fake

    obj, _, _, assigns = _brute_force(inst, 0.5)
    best = assigns[int(np.argmin(obj))]
    # The true optimum as incumbent: returned as it is, but not proven optimal.
    idx = {2: 0, 4: 1, 8: 2}
    monkeypatch.setattr(ma, "milp", lambda c, **kw: _fake_from_bits(c, best, idx))
    res = solve_bit_assignment(**inst)
    assert res.status.startswith("time_limit") and not res.optimal
    np.testing.assert_array_equal(res.bits, best)
    # A poor incumbent (all 2-bit) is replaced by the greedy assignment.
    monkeypatch.setattr(ma, "milp", incumbent(0))
    res = solve_bit_assignment(**inst)
    assert res.status.startswith("time_limit") and "greedy" in res.status
    assert res.objective < evaluate_bit_assignment(np.full(6, 2), **inst)[0]


def _fake_from_bits(c: np.ndarray, bits: np.ndarray, idx: dict[int, int]) -> SimpleNamespace:
    x = np.zeros_like(c)
    for g, b in enumerate(bits):
        x[g * len(idx) + idx[int(b)]] = 1.0
    return SimpleNamespace(x=x, status=1, message="Time limit reached.")


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"lam": 1.5}, r"expected `lam` in \[0, 1\] but got 1.5"),
        ({"lam": -0.1}, r"`lam` in \[0, 1\]"),
        ({"beta": [1.0, -1.0, 1.0, 1.0, 1.0]}, r"`beta` >= 0"),
        ({"beta": [1.0, 1.0]}, "same length"),
        ({"dims": [1.0, 0.0, 1.0, 1.0, 1.0]}, r"`dims` > 0"),
        ({"theta": [1e-9, 0.0]}, r"`theta` > 0"),
        ({"gamma": [0.0, -1.0]}, r"`gamma` >= 0"),
        ({"gamma": [0.0]}, "same length"),
        ({"pair_of_group": [0, 1, 2, 0, 1]}, r"`pair_of_group` in \[0, 1\]"),
        ({"pair_of_group": [0, 1, -1, 0, 1]}, "pair_of_group"),
        ({"bits": (2, 3)}, "`bits` to be one of"),
        ({"bits": ()}, "non-empty `bits`"),
        ({"bits": (2, 2)}, "distinct `bits`"),
        ({"time_limit": 0.0}, r"`time_limit` > 0"),
        ({"mip_rel_gap": -1e-3}, r"`mip_rel_gap` >= 0"),
        ({"normalization": "minmax"}, "`normalization` to be one of"),
        ({"fallback": "uniform"}, "`fallback` to be one of"),
        ({"method": "cbc"}, "`method` to be one of"),
        ({"round_of_pair": [0]}, "one entry per pair"),
        ({"round_of_pair": [0, 2]}, "rounds \\[1\\] have no pair"),
        ({"beta": [float("nan")] * 5}, "finite"),
        ({"beta": [], "dims": [], "pair_of_group": []}, "at least one message group"),
    ],
)
def test_bad_inputs_raise(override: dict[str, Any], match: str) -> None:
    kwargs = {**_instance(0), **override}
    with pytest.raises(ValueError, match=match) as info:
        solve_bit_assignment(**kwargs)
    assert str(info.value).startswith("solve_bit_assignment:")


def test_group_messages_example() -> None:
    beta = torch.tensor([1.0, 5.0, 3.0, 5.0, 0.0, 2.0])
    group_id, group_beta = group_messages(beta, group_size=2)
    # sorted (stable, descending): rows 1, 3 | 5... -> 1,3 (5, 5) | 2, 5 (3, 2) | 0, 4 (1, 0)
    assert group_id.tolist() == [2, 0, 1, 0, 2, 1]
    assert group_id.dtype == torch.long
    assert group_beta.tolist() == [10.0, 5.0, 1.0]


def test_group_messages_properties() -> None:
    gen = torch.Generator().manual_seed(0)
    beta = torch.rand(1234, generator=gen, dtype=torch.float64) ** 3
    group_id, group_beta = group_messages(beta, group_size=100)
    assert group_beta.shape == (13,)
    counts = torch.bincount(group_id, minlength=13)
    assert counts[:-1].eq(100).all() and counts[-1] == 34
    torch.testing.assert_close(group_beta.sum(), beta.sum())
    for g in range(12):  # groups are ordered: every β of group g >= every β of group g + 1
        assert beta[group_id == g].min() >= beta[group_id == g + 1].max()
    # default group size, empty input, integer β
    assert group_messages(beta)[1].shape == (13,)
    gid, gb = group_messages(torch.zeros(0))
    assert gid.shape == (0,) and gb.shape == (0,)
    gid, gb = group_messages(torch.tensor([3, 1, 2]), group_size=2)
    assert gid.tolist() == [0, 1, 0] and gb.tolist() == [5.0, 1.0]


def test_group_then_solve_per_pair() -> None:
    """The intended use: group each pair's rows, solve once, map widths back to rows."""
    gen = torch.Generator().manual_seed(1)
    feat_dim, rows = 64, [530, 170]
    betas = [torch.rand(n, generator=gen, dtype=torch.float64) for n in rows]
    beta, dims, pair, row_groups, offset = [], [], [], [], 0
    for i, b in enumerate(betas):
        gid, gb = group_messages(b, group_size=100)
        beta.append(gb)
        dims.append(torch.bincount(gid, minlength=gb.numel()).double() * feat_dim)
        pair += [i] * gb.numel()
        row_groups.append(gid + offset)
        offset += gb.numel()
    res = solve_bit_assignment(
        torch.cat(beta),
        torch.cat(dims),
        pair,
        theta=[1e-9, 1e-9],
        gamma=[1e-4, 1e-4],
        mip_rel_gap=0.0,
    )
    row_bits = [res.bits[g.numpy()] for g in row_groups]
    assert [len(r) for r in row_bits] == rows
    assert len(set(res.bits.tolist())) > 1
    # Within a pair, full groups are β-ordered with equal D, so at the optimum a group
    # never has fewer bits than a later one (else swapping widths lowers the variance).
    for b, rb in zip(betas, row_bits, strict=True):
        order = torch.argsort(b, descending=True).numpy()[: (len(b) // 100) * 100]
        assert np.all(np.diff(rb[order]) <= 0)


@pytest.mark.parametrize(
    ("beta", "group_size", "match", "exc"),
    [
        (torch.ones(2, 2), 2, "1-D", ValueError),
        (torch.tensor([1.0, -1.0]), 2, ">= 0", ValueError),
        (torch.tensor([1.0, float("inf")]), 2, "finite", ValueError),
        (torch.ones(3), 0, "positive integer", ValueError),
        (torch.ones(3), 2.0, "positive integer", ValueError),
        (torch.ones(3), True, "positive integer", ValueError),
        ([1.0, 2.0], 2, "Tensor", TypeError),
    ],
)
def test_group_messages_bad_inputs(beta: Any, group_size: Any, match: str, exc: type) -> None:
    with pytest.raises(exc, match=match) as info:
        group_messages(beta, group_size)
    assert str(info.value).startswith("group_messages:")
