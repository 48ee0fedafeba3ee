"""AdaQP's communication cost model: the line fit, the per-pair model and its profiling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch.distributed as dist

from lightgraph.quant.cost_model import (
    MIN_THETA,
    CommCostModel,
    fit_cost_model,
    ring_schedule,
)
from lightgraph.quant.milp_assignment import solve_bit_assignment

SIZES = np.array([1 << 12, 1 << 15, 1 << 18, 1 << 20, 1 << 22], dtype=float)


def test_fit_is_exact_on_noiseless_data() -> None:
    theta, gamma = 4e-11, 3e-4  # 25 Gbit/s, 300 µs
    seconds = theta * 8 * SIZES + gamma
    fit_theta, fit_gamma = fit_cost_model(SIZES, seconds)
    assert fit_theta == pytest.approx(theta, rel=1e-9)
    assert fit_gamma == pytest.approx(gamma, rel=1e-9)
    # theta is per *bit*: predicting a size in bits reproduces the timing
    assert fit_theta * 8 * SIZES[2] + fit_gamma == pytest.approx(seconds[2], rel=1e-9)


def test_fit_recovers_parameters_from_noisy_timings() -> None:
    rng = np.random.default_rng(0)
    theta, gamma = 1e-10, 2e-4
    sizes = np.repeat(np.linspace(1 << 14, 1 << 22, 12), 5)
    seconds = (theta * 8 * sizes + gamma) * rng.normal(1.0, 0.02, sizes.size)
    fit_theta, fit_gamma = fit_cost_model(sizes.tolist(), seconds.tolist())
    assert fit_theta == pytest.approx(theta, rel=0.03)
    assert fit_gamma == pytest.approx(gamma, rel=0.05)


def test_fit_clamps_to_a_positive_slope_and_nonnegative_intercept() -> None:
    sizes = np.array([1000.0, 2000.0, 3000.0])
    x = sizes * 8
    # Through the origin with a negative fitted intercept -> gamma = 0, best slope through 0.
    through_origin = np.array([0.9e-6, 2.0e-6, 3.05e-6])
    theta, gamma = fit_cost_model(sizes, through_origin)
    assert gamma == 0.0
    assert theta == pytest.approx(float(x @ through_origin / (x @ x)), rel=1e-12)
    # Times that shrink with size (pure noise) -> theta at its floor, gamma = mean time.
    shrinking = np.array([3e-4, 2e-4, 1e-4])
    theta, gamma = fit_cost_model(sizes, shrinking)
    assert theta == MIN_THETA
    assert gamma == pytest.approx(float(np.mean(shrinking - MIN_THETA * x)), rel=1e-12)
    # Both are the box-constrained least-squares optimum (checked on a grid of the box).
    grid_t = np.concatenate([[MIN_THETA], np.linspace(1e-12, 3e-10, 600)])
    grid_g = np.linspace(0.0, 4e-4, 801)
    for seconds in (through_origin, shrinking):
        theta, gamma = fit_cost_model(sizes, seconds)
        sse = ((grid_t[:, None, None] * x + grid_g[None, :, None] - seconds) ** 2).sum(-1)
        assert float(((theta * x + gamma - seconds) ** 2).sum()) <= float(sse.min()) * (1 + 1e-9)


@pytest.mark.parametrize(
    ("sizes", "seconds", "match"),
    [
        ([4096, 4096, 4096], [1e-3, 1.1e-3, 0.9e-3], "at least 2 distinct `sizes_bytes`"),
        ([4096], [1e-3], "at least 2 distinct"),
        ([1, 2, 3], [1.0, 2.0], "same length"),
        ([1, -2, 3], [1.0, 2.0, 3.0], r"`sizes_bytes` >= 0"),
        ([1, 2, 3], [1.0, float("nan"), 3.0], "finite"),
        ([1, 2, 3], [1.0, -2.0, 3.0], r"`seconds` >= 0"),
    ],
)
def test_fit_bad_inputs(sizes: list[float], seconds: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        fit_cost_model(sizes, seconds)
    assert str(info.value).startswith("fit_cost_model:")


def test_ring_schedule() -> None:
    pairs, rounds = ring_schedule(3)
    assert pairs == [(0, 1), (1, 2), (2, 0), (0, 2), (1, 0), (2, 1)]
    assert rounds == [0, 0, 0, 1, 1, 1]
    assert ring_schedule(1) == ([], [])
    with pytest.raises(ValueError, match="ring_schedule: expected `world_size`"):
        ring_schedule(0)


def test_model_from_config_params_and_dict_round_trip(tmp_path: Path) -> None:
    model = CommCostModel.from_config(theta=1 / 25e9, gamma=1e-4, world_size=3)
    assert model.world_size == 3
    assert model.theta[0, 0] == 0.0 and model.theta[0, 1] == pytest.approx(4e-11)
    assert model.predict(0, 2, 25e9) == pytest.approx(1.0 + 1e-4)
    pairs, rounds = ring_schedule(3)
    theta, gamma = model.params(pairs)
    assert theta.shape == gamma.shape == (6,)
    # The pair list + rounds drive the solver directly.
    res = solve_bit_assignment(
        beta=[5.0, 1.0, 0.2, 3.0],
        dims=[6400.0] * 4,
        pair_of_group=[0, 1, 3, 5],
        theta=theta,
        gamma=gamma,
        round_of_pair=rounds,
    )
    assert res.round_times.shape == (2,)

    data = model.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["theta_unit"] == "seconds per bit"
    again = CommCostModel.from_dict(json.loads(json.dumps(data)))
    assert again == model and again.to_dict() == data
    path = tmp_path / "cost.json"
    model.save(path)
    assert CommCostModel.load(path) == model

    rng = np.random.default_rng(0)
    full = CommCostModel(rng.uniform(1e-11, 1e-10, (4, 4)), rng.uniform(0, 1e-3, (4, 4)))
    assert CommCostModel.from_dict(full.to_dict()) == full
    assert np.all(np.diag(full.theta) == 0)
    matrix = CommCostModel.from_config(theta=full.theta.tolist(), gamma=0.0)
    assert matrix.world_size == 4 and np.array_equal(matrix.theta, full.theta)
    assert "world_size=4" in repr(full)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: CommCostModel([[0.0, 0.0], [1e-9, 0.0]], [[0, 0], [0, 0]]), r"`theta` > 0"),
        (lambda: CommCostModel([[0, 1e-9], [1e-9, 0]], [[0, -1], [0, 0]]), r"`gamma` >= 0"),
        (lambda: CommCostModel([[0, 1e-9, 1e-9]], [[0, 0, 0]]), "square"),
        (lambda: CommCostModel([[0, 1e-9], [1e-9, 0]], np.zeros((3, 3))), "shape"),
        (lambda: CommCostModel.from_dict({"theta": [[0]]}), "are missing"),
        (
            lambda: CommCostModel.from_dict({"world_size": 3, "theta": [[0]], "gamma": [[0]]}),
            "shape",
        ),
        (lambda: CommCostModel.from_config(theta=-1.0, world_size=2), r"`theta` > 0"),
        (lambda: CommCostModel.from_config(theta=1e-9, world_size=0), "`world_size`"),
        (
            lambda: CommCostModel.from_config(1e-9, world_size=2).predict(0, 0, 1.0),
            "`src` != `dst`",
        ),
        (lambda: CommCostModel.from_config(1e-9, world_size=2).params([(0, 2)]), r"`dst` in"),
    ],
)
def test_model_bad_inputs(build: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        build()
    assert str(info.value).startswith("CommCostModel")


@pytest.mark.skipif(dist.is_available() and dist.is_initialized(), reason="needs no process group")
def test_config_needs_a_process_group_or_world_size() -> None:
    with pytest.raises(ValueError, match="CommCostModel.from_config: expected `world_size`"):
        CommCostModel.from_config(theta=1e-9)
