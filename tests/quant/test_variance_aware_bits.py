"""VarianceAwareBits: traced β, rank-0 MILP per pair and group, both ends agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from lightgraph.data.partition.partition_plan import build_partition_plans
from lightgraph.distributed import HaloExchanger
from lightgraph.functional.quantize import PARAM_BYTES_PER_ROW, packed_nbytes
from lightgraph.quant import (
    AssignmentReport,
    CommCostModel,
    VarianceAwareBits,
    aggregation_coefficients,
    solve_exchange,
)
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
        # The exchange topology (a HaloPlan) and the receiver's local in-edges are enough.
        got = aggregation_coefficients(plan.halo, plan.edge_index, aggregation, plan.gcn_degree)
        inner = plan.global_ids[: plan.num_inner]
        halo = plan.global_ids[plan.num_inner :]
        expected = a[inner][:, halo].square().sum(0)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)
        assert (got > 0).all()  # every halo row is aggregated by someone


def _alpha2(plan, aggregation: str) -> torch.Tensor:
    return aggregation_coefficients(plan.halo, plan.edge_index, aggregation, plan.gcn_degree)


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


def test_aggregation_coefficients_bad_arguments() -> None:
    plan = _plans(2)[0]
    with pytest.raises(ValueError, match="`aggregation`"):
        aggregation_coefficients(plan.halo, plan.edge_index, "max")
    with pytest.raises(
        TypeError, match=r"`plan` to be a lightgraph\.functional\.HaloPlan .*got Partit"
    ):
        aggregation_coefficients(plan, plan.edge_index, "sum")
    with pytest.raises(ValueError, match="`gcn_degree`.*aggregation='gcn'"):
        aggregation_coefficients(plan.halo, plan.edge_index, "gcn")
    with pytest.raises(ValueError, match=r"`gcn_degree` of shape \[num_local=\d+\]"):
        aggregation_coefficients(plan.halo, plan.edge_index, "gcn", plan.gcn_degree[1:])
    with pytest.raises(ValueError, match=r"`edge_index` of shape \[2, E\]"):
        aggregation_coefficients(plan.halo, plan.edge_index[0], "sum")


# ----------------------------------------------------------------------------------------
# β on a hand-built plan, and the period's traces.
#
# The graph (6 nodes; rank 0 owns 0-2, rank 1 owns 3-5; ``u -> v`` = message from u to v):
#
#     3 -> 0   3 -> 1   4 -> 1   1 -> 0   2 -> 1   0 -> 4   5 -> 4   4 -> 3
#
# Global in-degrees: d0 = 2, d1 = 3, d2 = 0, d3 = 1, d4 = 2, d5 = 0. Rank 0 holds the
# halo rows [3, 4] (both owned by rank 1): 3 feeds inner nodes 0 and 1, 4 feeds 1. Rank 1
# holds [0] (owned by rank 0), which feeds 4. The holder's coefficients:
#
#   mean (1/d_v):                 Σα²(3) = 1/2² + 1/3² = 13/36, Σα²(4) = 1/9, Σα²(0) = 1/4
#   gcn (1/√((d_k+1)(d_v+1))):    Σα²(3) = 1/6 + 1/8 = 7/24,    Σα²(4) = 1/12, Σα²(0) = 1/9
#
# Forward messages: 0 -> 1 carries row 0, 1 -> 0 carries rows [3, 4]. Backward the holders
# send the gradients of those halo rows back, already aggregated: weight 1.
TINY_EDGES = [(3, 0), (3, 1), (4, 1), (1, 0), (2, 1), (0, 4), (5, 4), (4, 3)]
TINY_ALPHA2 = {
    "mean": {"3": 13 / 36, "4": 1 / 9, "0": 1 / 4},
    "gcn": {"3": 7 / 24, "4": 1 / 12, "0": 1 / 9},
}


def _tiny():
    from torch_geometric.data import Data

    n = 6
    data = Data(
        x=torch.zeros(n, 4, dtype=torch.float64),
        y=torch.zeros(n, dtype=torch.long),
        edge_index=torch.tensor(TINY_EDGES).t().contiguous(),
        train_mask=torch.ones(n, dtype=torch.bool),
        val_mask=torch.zeros(n, dtype=torch.bool),
        test_mask=torch.zeros(n, dtype=torch.bool),
    )
    return data, build_partition_plans(data, torch.tensor([0, 0, 0, 1, 1, 1]), 2)


def _row(width: float) -> list[float]:
    """A 4-value row whose range is ``width``."""
    return [0.5, 0.5 + width, 0.5, 0.5 + width / 2]


@pytest.mark.parametrize("aggregation", ["mean", "gcn"])
def test_beta_of_a_hand_built_plan(aggregation: str) -> None:
    data, plans = _tiny()
    assert plans[0].global_ids.tolist() == [0, 1, 2, 3, 4] and plans[0].halo_counts == [0, 2]
    assert plans[1].global_ids.tolist() == [3, 4, 5, 0] and plans[1].halo_counts == [1, 0]
    policies = [VarianceAwareBits(cost_model=COST) for _ in plans]
    rows = {  # per rank and direction: the rows sent in two epochs (ranges listed)
        (0, "forward"): [[3.0], [2.0]],  # row 0 to rank 1: range² 9, 4 -> mean 6.5
        (1, "forward"): [[2.0, 1.0], [4.0, 1.0]],  # rows 3, 4 to rank 0: means 10, 1
        (0, "backward"): [[0.5, 1.0], [1.5, 1.0]],  # grads of halo 3, 4: means 1.25, 1
        (1, "backward"): [[3.0], [1.0]],  # grad of halo 0: mean 5
    }
    for epoch in range(2):
        for rank, plan in enumerate(plans):
            for direction in ("forward", "backward"):
                sent = torch.tensor([_row(w) for w in rows[(rank, direction)][epoch]])
                alpha2 = _alpha2(plan, aggregation)
                policies[rank].observe(
                    plan.halo, "l", direction, sent, alpha2 if direction == "forward" else None
                )
    traces = [p.traces for p in policies]
    assert traces[0][("l", "forward")]["observations"] == 2
    cost = CommCostModel.from_config(COST["theta"], COST["gamma"], world_size=2)
    solver = VarianceAwareBits(cost_model=cost)
    solver.solve(traces, 2, ring=True)
    a = TINY_ALPHA2[aggregation]
    expected = {
        ("l", "forward"): {(0, 1): ([6.5], [a["0"]]), (1, 0): ([10.0, 1.0], [a["3"], a["4"]])},
        ("l", "backward"): {(0, 1): ([5.0], [1.0]), (1, 0): ([1.25, 1.0], [1.0, 1.0])},
    }
    assert set(solver.last_problems) == set(expected)
    for key, pairs in expected.items():
        merged, dim = solver.last_problems[key]
        assert dim == 4
        for pair, (ranges2, alpha2) in pairs.items():
            np.testing.assert_allclose(merged[pair][0], ranges2, rtol=1e-12)
            np.testing.assert_allclose(merged[pair][1], alpha2, rtol=1e-12)
        # β_k = Σα² · D · range² / 6; all rows at 2 bits: V = Σ_k β_k / 3².
        beta = sum(r * w * 4 / 6 for r2, a2 in pairs.values() for r, w in zip(r2, a2, strict=True))
        _, result, _ = solve_exchange(merged, 4, key[1], cost, 2, bits=(2,), group_size=1)
        assert result.variance_term == pytest.approx(beta / 9, rel=1e-12)


@pytest.mark.parametrize("aggregation", ["mean", "gcn"])
def test_beta_is_the_noise_each_message_adds_where_it_is_used(aggregation: str) -> None:
    """Independent check of both coefficients: quantise the actual messages many times and
    measure the variance they add — forward to the holder's aggregates z = A h (dense A of
    the whole graph), backward to the owner's gradient (the holder's autograd gradient of
    its halo row, added with coefficient 1) — against β / (2^b - 1)²."""
    from lightgraph.functional.quantize import dequantize, quantize

    data, plans = _tiny()
    dim, trials, bits = 512, 200, 4
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(data.num_nodes, dim, generator=gen, dtype=torch.float64)
    upstream = torch.randn(data.num_nodes, dim, generator=gen, dtype=torch.float64)  # dL/dz
    a = _dense_coefficients(data, aggregation)  # a[v, u]: weight of u's row in z_v

    def noise2(row: torch.Tensor) -> float:
        """E ||q(row) - row||² over `trials` stochastic roundings of `row`."""
        batch = row.expand(trials, -1).contiguous()
        err = dequantize(quantize(batch, bits, gen), dtype=torch.float64) - batch
        return float(err.square().sum(1).mean())

    policies = [VarianceAwareBits(cost_model=COST) for _ in plans]
    measured = {"forward": 0.0, "backward": 0.0}
    for rank, plan in enumerate(plans):
        ids = plan.global_ids
        inner, n = ids[: plan.num_inner], plan.num_inner
        # Forward message: this rank's rows for its peers.
        policies[rank].observe(
            plan.halo,
            "l",
            "forward",
            h[ids[plan.send_index]],
            _alpha2(plan, aggregation),
        )
        # Backward message: the holder's gradient of each halo row, by autograd.
        x = h[ids].clone().requires_grad_(True)
        ((a[inner][:, ids] @ x) * upstream[inner]).sum().backward()
        grads = x.grad[n:]
        policies[rank].observe(plan.halo, "l", "backward", grads, None)
        for j, k in enumerate(ids[n:].tolist()):
            # The received row's noise e_k enters z_v as a[v, k] e_k on this (holding) rank.
            measured["forward"] += float(a[inner, k].square().sum()) * noise2(h[k])
            # Its gradient travels back and is added to the owner's gradient as is.
            measured["backward"] += noise2(grads[j])
    cost = CommCostModel.from_config(COST["theta"], COST["gamma"], world_size=2)
    solver = VarianceAwareBits(cost_model=cost)
    solver.solve([p.traces for p in policies], 2, ring=True)
    for direction in ("forward", "backward"):
        merged, d = solver.last_problems[("l", direction)]
        _, result, _ = solve_exchange(merged, d, direction, cost, 2, bits=(bits,), group_size=1)
        # D·S²/6 assumes uniformly spread fractions; bf16 scales are rounded up (< 2 %).
        assert result.variance_term == pytest.approx(measured[direction], rel=0.08), direction


def test_traces_average_every_exchange_of_the_period() -> None:
    plans = _plans(3)
    plan = plans[1]
    policy = VarianceAwareBits(cost_model=COST)
    gen = torch.Generator().manual_seed(3)
    alpha2 = _alpha2(plan, "mean")
    sent = [torch.randn(plan.send_index.numel(), 5, generator=gen) * (e + 1) for e in range(3)]
    grads = [torch.randn(plan.num_halo, 5, generator=gen) * (3 - e) for e in range(3)]
    for e in range(3):  # three epochs of one period
        policy.observe(plan.halo, "l", "forward", sent[e], alpha2)
        policy.observe(plan.halo, "l", "backward", grads[e], None)

    def mean_range2(batches: list[torch.Tensor]) -> np.ndarray:
        return np.mean([((b.amax(1) - b.amin(1)).double() ** 2).numpy() for b in batches], axis=0)

    traces = policy.traces
    for direction, batches, counts in (
        ("forward", sent, plan.send_counts),
        ("backward", grads, plan.halo_counts),
    ):
        entry = traces[("l", direction)]
        assert entry["observations"] == 3 and entry["dim"] == 5
        want = np.split(mean_range2(batches), np.cumsum(counts)[:-1])
        assert set(entry["ranges2"]) == {0, 2}
        for q in (0, 2):
            np.testing.assert_allclose(entry["ranges2"][q], want[q], rtol=1e-6)
    coeff = np.split(alpha2.numpy(), np.cumsum(plan.halo_counts)[:-1])
    for q in (0, 2):
        np.testing.assert_array_equal(traces[("l", "forward")]["alpha2"][q], coeff[q])
    assert "alpha2" not in traces[("l", "backward")]
    # Every epoch counts: the traced mean differs from any single epoch's ranges.
    for e in range(3):
        assert not np.allclose(
            np.concatenate(list(traces[("l", "forward")]["ranges2"].values())),
            mean_range2([sent[e]]),
        )
    # A re-assignment consumes the period: the next one starts afresh.
    policy.apply({}, AssignmentReport(epoch=2, seconds=0.0))
    assert policy.traces == {}
    policy.observe(plan.halo, "l", "forward", sent[2], alpha2)
    fresh = policy.traces[("l", "forward")]
    assert fresh["observations"] == 1
    np.testing.assert_allclose(
        np.concatenate([fresh["ranges2"][0], fresh["ranges2"][2]]),
        mean_range2([sent[2]]),
        rtol=1e-6,
    )


def test_observe_refuses_rows_that_change_within_a_period() -> None:
    plan = _plans(2)[0]
    policy = VarianceAwareBits(cost_model=COST)
    rows = torch.randn(plan.send_index.numel(), 4)
    alpha2 = _alpha2(plan, "sum")
    policy.observe(plan.halo, "l", "forward", rows, alpha2)
    with pytest.raises(RuntimeError, match="changed within a period"):
        policy.observe(plan.halo, "l", "forward", torch.randn(plan.send_index.numel(), 3), alpha2)
    with pytest.raises(ValueError, match=f"expected {plan.send_index.numel()} rows for l/forward"):
        policy.observe(plan.halo, "l", "forward", rows[1:], alpha2)
    with pytest.raises(ValueError, match="`alpha2`"):
        policy.observe(plan.halo, "l", "forward", rows, None)
    with pytest.raises(ValueError, match="`direction`"):
        policy.observe(plan.halo, "l", "sideways", rows, alpha2)
