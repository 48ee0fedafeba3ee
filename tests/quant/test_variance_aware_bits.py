"""VarianceAwareBits: traced β, rank-0 MILP per pair and group, both ends agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from lightgraph.data.partition_plan import build_partition_plans
from lightgraph.functional.quantize import PARAM_BYTES_PER_ROW, packed_nbytes
from lightgraph.quant import (
    CommCostModel,
    VarianceAwareBits,
    aggregation_coefficients,
    solve_exchange,
)
from lightgraph.distributed import HaloExchanger
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph

COST = {"theta": 1e-9, "gamma": 1e-6}


def _dense_coefficients(data, aggregation: str) -> torch.Tensor:
    """Independent reference: the whole graph's aggregation matrix A[dst, src] (dense)."""
    n = data.num_nodes
    if aggregation == "gcn":
        edge_index, weight = gcn_norm(
            data.edge_index, None, n, add_self_loops=True, dtype=torch.float64
        )
    else:
        edge_index = data.edge_index
        weight = torch.ones(edge_index.size(1), dtype=torch.float64)
        if aggregation == "mean":
            deg = torch.bincount(edge_index[1], minlength=n).double()
            weight = weight / deg[edge_index[1]]
    a = torch.zeros(n, n, dtype=torch.float64)
    a.index_put_((edge_index[1], edge_index[0]), weight, accumulate=True)
    return a


@pytest.mark.parametrize("aggregation", ["gcn", "mean", "sum"])
@pytest.mark.parametrize("parts", [2, 3])
def test_aggregation_coefficients_match_the_dense_matrix(aggregation: str, parts: int) -> None:
    data, partition = tricky_graph(parts)
    a = _dense_coefficients(data, aggregation)
    for plan in build_partition_plans(data, partition, parts):
        got = aggregation_coefficients(plan, aggregation)
        inner = plan.global_ids[: plan.num_inner]
        halo = plan.global_ids[plan.num_inner :]
        expected = a[inner][:, halo].square().sum(0)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)
        assert (got > 0).all()  # every halo row is aggregated by someone


def _plans(parts: int):
    data, partition = tricky_graph(parts)
    return build_partition_plans(data, partition, parts)


def _random_table(plans, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    table = {}
    for plan in plans:
        offset = 0
        for q, count in enumerate(plan.send_counts):
            if q != plan.rank:
                table[(plan.rank, q)] = (
                    torch.tensor([2, 4, 8])[torch.randint(0, 3, (count,), generator=gen)]
                    .numpy()
                    .astype(np.int8)
                )
            offset += count
    return table


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_sender_and_receiver_agree_on_every_row(parts: int) -> None:
    plans = _plans(parts)
    policy = VarianceAwareBits(cost_model=COST)
    # Before the first assignment: uniform initial_bits.
    send, recv = policy.message_bits(plans[0], "l", "forward")
    assert set(send.tolist()) | set(recv.tolist()) == {8}
    policy.assignment[("l", "forward")] = _random_table(plans, 0)
    views = [policy.message_bits(plan, "l", "forward") for plan in plans]
    for a, plan_a in enumerate(plans):
        send_bits = views[a][0]
        offset = 0
        for b, count in enumerate(plan_a.send_counts):
            # Rows a sends to b are, in the same order, b's halo rows owned by a.
            plan_b = plans[b]
            start = sum(plan_b.halo_counts[:a])
            assert torch.equal(
                plan_a.global_ids[plan_a.send_index[offset : offset + count]],
                plan_b.global_ids[plan_b.num_inner + start : plan_b.num_inner + start + count],
            )
            assert torch.equal(
                send_bits[offset : offset + count], views[b][1][start : start + count]
            )
            offset += count


def test_a_table_for_another_partitioning_is_refused() -> None:
    plans = _plans(2)
    policy = VarianceAwareBits(cost_model=COST)
    table = _random_table(plans, 0)
    table[(0, 1)] = table[(0, 1)][:-1]
    policy.assignment[("l", "forward")] = table
    with pytest.raises(RuntimeError, match="another partitioning"):
        policy.message_bits(plans[0], "l", "forward")


def _rows_for_solver(n_rows: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    rows = {}
    for pair in [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)]:
        r2 = torch.rand(n_rows, generator=gen, dtype=torch.float64).square().numpy() * 4
        a2 = torch.rand(n_rows, generator=gen, dtype=torch.float64).numpy()
        rows[pair] = (r2, a2)
    return rows


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_solve_exchange_extremes_and_grouping(direction: str) -> None:
    rows = _rows_for_solver(30, 1)
    cost = CommCostModel.from_config(1e-9, 1e-6, world_size=3)
    widest, result, max_time = solve_exchange(rows, 16, direction, cost, 3, lam=1.0, group_size=7)
    assert all(set(b.tolist()) == {8} for b in widest.values())
    assert result.time_term == pytest.approx(max_time)
    cheapest, result0, _ = solve_exchange(rows, 16, direction, cost, 3, lam=0.0, group_size=7)
    # Time only: the makespan equals the all-2-bit one (the time-optimal value).
    _, result2, _ = solve_exchange(rows, 16, direction, cost, 3, lam=0.0, group_size=7, bits=(2,))
    assert result0.time_term == pytest.approx(result2.time_term)
    mixed, _, _ = solve_exchange(rows, 16, direction, cost, 3, lam=0.5, group_size=7)
    for pair, (r2, a2) in rows.items():
        bits = mixed[pair]
        assert bits.shape == (30,)
        # Rows sharing a group share a width: at most ceil(30 / 7) distinct runs by beta.
        order = np.argsort(-(a2 * r2), kind="stable")
        runs = bits[order]
        for g in range(0, 30, 7):
            assert len(set(runs[g : g + 7].tolist())) == 1


def _trace_and_assign(rank: int, world: int, parts_seed: int) -> dict:
    data, partition = tricky_graph(world, seed=parts_seed)
    plan = build_partition_plans(data, partition, world)[rank]
    policy = VarianceAwareBits(cost_model=COST, group_size=4, num_workers=2)
    ex = HaloExchanger(transport="ring", policy=policy, seed=5)
    ex.setup()
    ex.set_aggregation("l0", "gcn")
    gen = torch.Generator().manual_seed(11)
    grad_weights = torch.randn(data.num_nodes, plan.x.size(1), generator=gen, dtype=torch.float64)

    def step() -> None:
        x = plan.x.clone().requires_grad_(True)
        out = ex(x, plan, stage="train", layer="l0")
        # d loss / d halo row k = grad_weights[g_k] * (rank + 1): a known backward message.
        (out * grad_weights[plan.global_ids] * (rank + 1)).sum().backward()

    policy.tracing = True
    step()
    report = ex.reassign(epoch=0)
    ex.stats.reset()
    step()  # sent with the new widths
    send_bits, recv_bits = policy.message_bits(plan, "l0", "forward")
    return {
        "state": policy.state_dict(),
        "problems": policy.last_problems if rank == 0 else None,
        "histogram": report.histogram,
        "send_bits": send_bits,
        "recv_bits": recv_bits,
        "forward_bytes": ex.stats.by_layer("train").get(("l0", "forward", "data")),
        "dim": plan.x.size(1),
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [2, 3])
def test_traced_beta_and_assignment_are_identical_on_every_rank(world: int) -> None:
    results = run_distributed(_trace_and_assign, world, 0)
    data, partition = tricky_graph(world, seed=0)
    plans = build_partition_plans(data, partition, world)
    gen = torch.Generator().manual_seed(11)
    grad_weights = torch.randn(data.num_nodes, data.x.size(1), generator=gen, dtype=torch.float64)
    a = _dense_coefficients(data, "gcn")
    problems = results[0]["problems"]
    assert set(problems) == {("l0", "forward"), ("l0", "backward")}
    for (layer, direction), (rows, dim) in problems.items():
        assert dim == data.x.size(1)
        for (owner, holder), (ranges2, alpha2) in rows.items():
            # The message rows of the pair, in message order: the holder's halo rows from owner.
            plan_h = plans[holder]
            start = plan_h.num_inner + sum(plan_h.halo_counts[:owner])
            g = plan_h.global_ids[start : start + plan_h.halo_counts[owner]]
            if direction == "forward":
                values = data.x[g]
                inner_h = plan_h.global_ids[: plan_h.num_inner]
                expected_alpha2 = a[inner_h][:, g].square().sum(0)
            else:
                values = grad_weights[g] * (holder + 1)
                expected_alpha2 = torch.ones(len(g), dtype=torch.float64)
            expected_r2 = (values.amax(1) - values.amin(1)).square()
            np.testing.assert_allclose(ranges2, expected_r2.numpy(), rtol=1e-12)
            np.testing.assert_allclose(alpha2, expected_alpha2.numpy(), rtol=1e-12)
        # Rank 0's widths are exactly the solver's answer on these rows.
        cost = CommCostModel.from_config(COST["theta"], COST["gamma"], world_size=world)
        expected, _, _ = solve_exchange(rows, dim, direction, cost, world, ring=True, group_size=4)
        table = results[0]["state"]["assignment"][f"{layer}\x1f{direction}"]
        for (owner, holder), bits in expected.items():
            assert np.array_equal(table[f"{owner}-{holder}"].numpy(), bits)
    # Every rank holds the same assignment...
    for r in results[1:]:
        for name, table in results[0]["state"]["assignment"].items():
            assert all(torch.equal(v, r["state"]["assignment"][name][k]) for k, v in table.items())
    # ... uses it, and sends exactly the bytes its widths take.
    for r, plan in zip(results, plans, strict=True):
        # One buffer per peer, each padded to whole bytes per width.
        segments = torch.split(r["send_bits"], plan.send_counts)
        expected_bytes = sum(packed_nbytes(seg, r["dim"]) for seg in segments if seg.numel())
        assert r["forward_bytes"] == expected_bytes - PARAM_BYTES_PER_ROW * r["send_bits"].numel()
    # Something below 8 bits was chosen (the instance is not degenerate).
    hist = results[0]["histogram"]["l0/forward"]
    assert hist[8] < sum(hist.values())


def test_state_dict_round_trip() -> None:
    plans = _plans(3)
    policy = VarianceAwareBits(cost_model=COST)
    policy.assignment[("l", "backward")] = _random_table(plans, 3)
    policy.version = 4
    other = VarianceAwareBits(cost_model=COST)
    other.load_state_dict(policy.state_dict())
    assert other.version == 4
    for plan in plans:
        for x, y in zip(
            other.message_bits(plan, "l", "backward"),
            policy.message_bits(plan, "l", "backward"),
            strict=True,
        ):
            assert torch.equal(x, y)


def test_row_bits_is_refused_with_a_pointer() -> None:
    with pytest.raises(TypeError, match="message_bits"):
        VarianceAwareBits().row_bits(_plans(2)[0], torch.arange(3), "l", "forward")


def _profile_setup(rank: int, world: int, path: str) -> tuple:
    ex = HaloExchanger(policy=VarianceAwareBits(cost_model_path=path, profile_sizes=(1024, 65536)))
    ex.setup()
    first = ex.policy.cost_model
    again = HaloExchanger(policy=VarianceAwareBits(cost_model_path=path))
    dist.barrier()
    again.setup()  # reads the cache written by rank 0: no profiling
    return first.theta, again.policy.cost_model.theta


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_profiling_at_setup_is_cached(tmp_path) -> None:
    path = str(tmp_path / "cost.json")
    results = run_distributed(_profile_setup, 2, path)
    assert (tmp_path / "cost.json").exists()
    for first, again in results:
        assert np.array_equal(first, results[0][0])  # rank 0 fitted, everyone got it
        assert np.array_equal(again, first)
        assert first[0, 1] > 0 and first[1, 0] > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bits": ()}, "non-empty `bits`"),
        ({"bits": (3,)}, "`bits`"),
        ({"lam": 1.5}, "`lam`"),
        ({"group_size": 0}, "`group_size`"),
        ({"initial_bits": 16}, "`initial_bits`"),
        ({"method": "exact"}, "`method`"),
        ({"normalization": "zscore"}, "`normalization`"),
        ({"time_limit": 0}, "`time_limit`"),
        ({"num_workers": 0}, "`num_workers`"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        VarianceAwareBits(**kwargs)


def test_bad_cost_model_type() -> None:
    with pytest.raises(TypeError, match="`cost_model`"):
        VarianceAwareBits(cost_model=3.0)  # type: ignore[arg-type]


def test_unknown_aggregation() -> None:
    with pytest.raises(ValueError, match="`aggregation`"):
        aggregation_coefficients(_plans(2)[0], "max")
