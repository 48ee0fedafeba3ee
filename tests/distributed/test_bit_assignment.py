"""reassign_bits: AdaQP's re-assignment round (gather the traces on the group's first rank,
solve there, broadcast, apply everywhere) gives every rank exactly what the pure
``VarianceAwareBits.solve`` returns when called directly on the same traces."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from lightgraph.data.partition.partition_plan import build_partition_plans
from lightgraph.distributed import reassign_bits
from lightgraph.quant import CommCostModel, FixedBits, VarianceAwareBits, aggregation_coefficients
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph

# Asymmetric links, so that the ring schedule and one all-to-all give different problems.
THETA = [[0.0, 1e-9, 6e-9], [3e-9, 0.0, 1e-9], [1e-9, 5e-9, 0.0]]
GAMMA = 1e-6
EPOCH = 7


def make_policy(world: int) -> VarianceAwareBits:
    theta = np.asarray(THETA)[:world, :world]
    cost = CommCostModel.from_config(theta, GAMMA, world_size=world)
    return VarianceAwareBits(cost_model=cost, group_size=4, method="greedy", num_workers=1)


def make_traces(policy: VarianceAwareBits, rank: int, world: int) -> None:
    """Trace one forward and one backward exchange of ``rank``'s plan (no exchange needed)."""
    data, partition = tricky_graph(world, seed=3)
    plan = build_partition_plans(data, partition, world)[rank]
    gen = torch.Generator().manual_seed(100 + rank)
    sent = plan.x[plan.send_index] * (rank + 1)  # forward: the inner rows sent to peers
    alpha2 = aggregation_coefficients(plan.halo, plan.edge_index, "gcn", plan.gcn_degree)
    policy.observe(plan.halo, "l0", "forward", sent, alpha2)
    grads = torch.randn(plan.num_halo, plan.x.size(1), generator=gen, dtype=torch.float64)
    policy.observe(plan.halo, "l0", "backward", grads, None)  # backward: halo gradients


def direct_traces(world: int) -> list[dict]:
    """Every rank's traces, built in this process."""
    out = []
    for rank in range(world):
        policy = make_policy(world)
        make_traces(policy, rank, world)
        out.append(policy.traces)
    return out


def _as_lists(table: dict) -> dict:
    return {key: {pair: bits.tolist() for pair, bits in t.items()} for key, t in table.items()}


def _round(rank: int, world: int) -> dict:
    results = {}
    # 1. The whole world, ring transport.
    policy = make_policy(world)
    make_traces(policy, rank, world)
    traced = sorted(policy.traces)
    report = reassign_bits(policy, group=None, transport="ring", epoch=EPOCH)
    results["world"] = {
        "traced": traced,
        "assignment": _as_lists(policy.assignment),
        "histogram": report.histogram,
        "predicted": report.predicted_seconds,
        "epoch": report.epoch,
        "seconds": report.seconds,
        "version": policy.version,
        "traces_after": dict(policy.traces),
        "reports": len(policy.reports),
    }
    # 2. A sub-group without global rank 0: its first rank (global 1) gathers and solves.
    group = dist.new_group([1, 2])
    if rank in (1, 2):
        sub = make_policy(2)
        make_traces(sub, rank - 1, 2)
        report = reassign_bits(sub, group=group, transport="all_to_all", epoch=EPOCH)
        results["sub"] = {
            "assignment": _as_lists(sub.assignment),
            "predicted": report.predicted_seconds,
        }
    return results


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_every_rank_applies_what_the_pure_solve_returns() -> None:
    results = run_distributed(_round, 3, timeout=90)

    # Independent expectation: the pure policy solve on the same traces, in rank order.
    traces = direct_traces(3)
    table, report = make_policy(3).solve(traces, 3, ring=True, epoch=EPOCH)
    _, all_to_all = make_policy(3).solve(traces, 3, ring=False, epoch=EPOCH)
    assert report.predicted_seconds != all_to_all.predicted_seconds  # the transport matters
    assert set(table) == {("l0", "forward"), ("l0", "backward")}
    for rank, r in enumerate(results):
        got = r["world"]
        assert got["traced"] == [("l0", "backward"), ("l0", "forward")]
        assert got["assignment"] == _as_lists(table), f"rank {rank} applied other widths"
        assert got["histogram"] == report.histogram
        assert got["predicted"] == pytest.approx(report.predicted_seconds)
        assert got["epoch"] == EPOCH and got["seconds"] > 0.0
        # Applied: the traces are consumed, the version bumped, the report kept.
        assert got["traces_after"] == {} and got["version"] == 1 and got["reports"] == 1
    # Not a degenerate instance: some rows get fewer than 8 bits.
    forward = report.histogram["l0/forward"]
    assert forward[8] < sum(forward.values())

    sub_table, sub_report = make_policy(2).solve(direct_traces(2), 2, ring=False, epoch=EPOCH)
    assert "sub" not in results[0]
    for r in results[1:]:
        assert r["sub"]["assignment"] == _as_lists(sub_table)
        assert r["sub"]["predicted"] == pytest.approx(sub_report.predicted_seconds)


def test_only_variance_aware_policies_are_reassigned() -> None:
    # Checked before any collective: no process group is needed.
    with pytest.raises(
        TypeError,
        match="^reassign_bits: expected `policy` to be a VarianceAwareBits but got FixedBits",
    ):
        reassign_bits(FixedBits(4))  # type: ignore[arg-type]
