"""Scoring node pairs across partitions equals single-process PyG (2 gloo ranks)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import to_undirected

from lightgraph.distributed.remote_rows import fetch_rows, partitioned_pair_scores
from tests.distributed_helpers import run_distributed

N = 60


def _graph() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, N, (2, 240), generator=gen)
    ei = to_undirected(ei[:, ei[0] != ei[1]], num_nodes=N)
    owner = torch.randint(0, 2, (N,), generator=gen)
    owner_local = torch.empty(N, dtype=torch.long)
    for r in range(2):
        mine = (owner == r).nonzero().view(-1)
        owner_local[mine] = torch.arange(mine.numel())
    return ei, owner, owner_local


def _pairs(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(10 + rank)
    src = torch.randint(0, N, (25,), generator=gen)
    neg = torch.randint(0, N, (25, 4), generator=gen)
    return src, neg


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1)


def _exact_rows(rank: int, world: int) -> dict:
    """h_inner is the owner's slice of one full matrix: the fetched rows, the scores and
    the gradients must be those of the full matrix."""
    _, owner, owner_local = _graph()
    full = torch.randn(N, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    mine = (owner == rank).nonzero().view(-1)
    h_inner = full[mine].clone().requires_grad_(True)
    src, neg = _pairs(rank)
    rows = fetch_rows(h_inner, neg.view(-1), owner, owner_local)
    assert torch.equal(rows, full[neg.view(-1)])
    scores = partitioned_pair_scores(h_inner, src.view(-1, 1), neg, _dot, owner, owner_local)
    scores.square().sum().backward()
    return {"scores": scores.detach(), "grad": h_inner.grad, "mine": mine}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_fetched_rows_scores_and_gradients_equal_one_matrix() -> None:
    results = run_distributed(_exact_rows, 2, timeout=90)
    full = torch.randn(N, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    full.requires_grad_(True)
    total = 0
    for rank in range(2):
        src, neg = _pairs(rank)
        want = _dot(full[src].unsqueeze(1), full[neg])
        torch.testing.assert_close(results[rank]["scores"], want.detach())
        total = total + want.square().sum()
    total.backward()
    # Every rank's pairs' gradients reached the owners' rows.
    grad = torch.zeros(N, 5, dtype=torch.float64)
    for rank in range(2):
        grad[results[rank]["mine"]] = results[rank]["grad"]
    torch.testing.assert_close(grad, full.grad)


def _model_scores(rank: int, world: int) -> torch.Tensor:
    from torch_geometric.data import Data

    from lightgraph.data.partition import build_partition_plans
    from lightgraph.distributed import HaloExchanger
    from lightgraph.nn import GraphSAGE
    from lightgraph.nn.partitioned_graph import PartitionedGraph

    ei, owner, owner_local = _graph()
    x = torch.randn(N, 6, generator=torch.Generator().manual_seed(4))
    empty = torch.zeros(N, dtype=torch.bool)
    data = Data(x=x, y=torch.zeros(N, dtype=torch.long), edge_index=ei, train_mask=empty,
                val_mask=empty, test_mask=empty)  # fmt: skip
    plan = build_partition_plans(data, owner, 2)[rank]
    torch.manual_seed(0)
    model = GraphSAGE(6, 4, hidden_channels=8, num_layers=2)
    model.eval()
    exchanger = HaloExchanger()
    exchanger.setup()
    h_inner = model(plan.x, PartitionedGraph(plan, exchanger, "val"))
    src, neg = _pairs(rank)
    return partitioned_pair_scores(h_inner, src.view(-1, 1), neg, _dot, owner, owner_local).detach()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_partition_parallel_pair_scores_equal_one_process() -> None:
    """A partition-parallel GNN's scores of pairs across partitions equal the same GNN's
    on the whole graph in one process."""
    from torch_geometric.data import Data

    from lightgraph.nn import GraphSAGE
    from lightgraph.nn.partitioned_graph import PartitionedGraph

    results = run_distributed(_model_scores, 2, timeout=90)
    ei, _, _ = _graph()
    x = torch.randn(N, 6, generator=torch.Generator().manual_seed(4))
    torch.manual_seed(0)
    model = GraphSAGE(6, 4, hidden_channels=8, num_layers=2)
    model.eval()
    empty = torch.zeros(N, dtype=torch.bool)
    data = Data(x=x, y=torch.zeros(N, dtype=torch.long), edge_index=ei, train_mask=empty,
                val_mask=empty, test_mask=empty)  # fmt: skip
    h = model(x, PartitionedGraph.from_data(data))
    for rank in range(2):
        src, neg = _pairs(rank)
        want = _dot(h[src].unsqueeze(1), h[neg]).detach()
        torch.testing.assert_close(results[rank], want, rtol=1e-5, atol=1e-6)


def test_one_process_reads_its_own_rows() -> None:
    h = torch.randn(7, 3)
    owner_local = torch.arange(7)
    rows = fetch_rows(h, torch.tensor([3, 3, 0, 6]), torch.zeros(7, dtype=torch.long), owner_local)
    assert torch.equal(rows, h[[3, 3, 0, 6]])
