from __future__ import annotations

import pytest
import torch

from lightgraph.data import PartitionPlan
from lightgraph.data.partition import build_partition_plans
from tests.graphs import tricky_graph


@pytest.mark.parametrize("num_parts", [1, 2, 4])
def test_plans_cover_the_graph_exactly(num_parts: int) -> None:
    data, part = tricky_graph(num_parts)
    plans = build_partition_plans(data, part, num_parts)
    inner = torch.cat([p.global_ids[: p.num_inner] for p in plans])
    assert torch.equal(inner.sort().values, torch.arange(data.num_nodes))
    # Every edge appears exactly once, on the rank owning its destination.
    rebuilt = torch.cat([p.global_ids[p.edge_index] for p in plans], dim=1)
    key = lambda ei: (ei[0] * data.num_nodes + ei[1]).sort().values  # noqa: E731
    assert torch.equal(key(rebuilt), key(data.edge_index))
    for p in plans:
        assert p.halo_counts[p.rank] == 0 and p.send_counts[p.rank] == 0
        owners = part[p.global_ids[p.num_inner :]]
        assert torch.equal(owners, owners.sort().values)  # halo grouped by owner
        assert torch.equal(owners.bincount(minlength=num_parts), torch.tensor(p.halo_counts))
        assert bool((p.edge_index[1] < p.num_inner).all())
        assert torch.equal(p.x, data.x[p.global_ids[: p.num_inner]])


@pytest.mark.parametrize("num_parts", [2, 4])
def test_send_lists_match_peer_halos(num_parts: int) -> None:
    data, part = tricky_graph(num_parts)
    plans = build_partition_plans(data, part, num_parts)
    for r, p in enumerate(plans):
        offsets = torch.tensor([0] + p.send_counts).cumsum(0)
        for q, peer in enumerate(plans):
            sent = p.global_ids[p.send_index[offsets[q] : offsets[q + 1]]]
            recv_off = torch.tensor([0] + peer.halo_counts).cumsum(0)
            expected = peer.global_ids[
                peer.num_inner + recv_off[r] : peer.num_inner + recv_off[r + 1]
            ]
            assert torch.equal(sent, expected)


def test_marginal_nodes_and_global_degrees() -> None:
    data, part = tricky_graph(2)
    plans = build_partition_plans(data, part, 2)
    src, dst = data.edge_index
    in_deg = torch.bincount(dst, minlength=data.num_nodes)
    gcn_deg = torch.bincount(dst[src != dst], minlength=data.num_nodes) + 1
    remote_in = torch.zeros(data.num_nodes, dtype=torch.bool)
    remote_in[dst[part[src] != part[dst]]] = True
    for p in plans:
        ids = p.global_ids
        assert torch.equal(p.in_degree, in_deg[ids])
        assert torch.equal(p.gcn_degree, gcn_deg[ids])
        assert torch.equal(p.marginal_mask, remote_in[ids[: p.num_inner]])
        assert torch.equal(p.central_mask, ~p.marginal_mask)
    # node 0 only has remote in-neighbours
    p0 = plans[0]
    assert bool(p0.marginal_mask[0])


def test_save_load_roundtrip(tmp_path) -> None:
    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[1]
    plan.save(tmp_path / "p.pt")
    loaded = PartitionPlan.load(tmp_path / "p.pt")
    for key, value in plan.state_dict().items():
        other = getattr(loaded, key)
        assert torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other


def test_to_same_device_keeps_cache() -> None:
    data, _ = tricky_graph(1)
    plan = PartitionPlan.from_data(data)
    adj = plan.adj_t()
    assert plan.to("cpu") is plan and plan.adj_t() is adj


def test_gcn_views_agree() -> None:
    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[0]
    (src, dst), w = plan.gcn_edge_index(torch.float64)
    dense = torch.zeros(plan.num_inner, plan.num_local, dtype=torch.float64).index_put_(
        (dst, src), w, accumulate=True
    )
    torch.testing.assert_close(plan.gcn_adj_t(torch.float64).to_dense(), dense)
    assert torch.equal(plan.transposed(plan.adj_t()).to_dense(), plan.adj_t().to_dense().t())


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d, p: (d, p[:-1]), "`partition` to be an integer tensor of shape \\[60\\]"),
        (lambda d, p: (d, p + 5), "`partition` values in \\[0, 1\\]"),
        (lambda d, p: (d, torch.zeros_like(p)), "partitions \\[1\\] are empty"),
        (
            lambda d, p: (d.update({"edge_index": d.edge_index + 100}) or d, p),
            "`edge_index` to lie in \\[0, 59\\]",
        ),
        (lambda d, p: (d.update({"train_mask": None}) or d, p), "has no `train_mask`"),
        (
            lambda d, p: (d.update({"y": d.y[:10]}) or d, p),
            "`y` to have one entry per node \\(60\\) but got 10",
        ),
        (
            lambda d, p: (d.update({"val_mask": d.val_mask[:5]}) or d, p),
            "`val_mask` to be a boolean tensor of shape \\[60\\]",
        ),
    ],
)
def test_bad_input(mutate, match) -> None:
    data, part = tricky_graph(2)
    data, part = mutate(data, part)
    with pytest.raises(ValueError, match=match):
        build_partition_plans(data, part, 2)


def test_more_partitions_than_nodes() -> None:
    data, part = tricky_graph(2)
    with pytest.raises(ValueError, match="`num_parts` <= num_nodes \\(60\\) but got 61"):
        build_partition_plans(data, part, 61)
