"""JOESTAR's large-batch sampling for link prediction: exclusion, exactness, epochs, shards."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GraphSAGE

from lightgraph.data import LinkNeighborSamplingDataModule, SyntheticGraph
from lightgraph.data.loader import LargeBatchSampler
from lightgraph.data.loader.data_parallel import DataParallelShard
from lightgraph.models import LinkPredictor

DATASET = SyntheticGraph(num_nodes=300, avg_degree=6, num_features=6, seed=3)


def _module(tmp_path, fanouts=(3, 3), ratio=0.25, **kwargs) -> LinkNeighborSamplingDataModule:
    second = kwargs.pop("second_stage_fanouts", None)
    dm = LinkNeighborSamplingDataModule(
        DATASET,
        fanouts=list(fanouts),
        batch_size=kwargs.pop("batch_size", 32),
        num_negatives=2,
        first_stage=LargeBatchSampler(ratio=ratio, second_stage_fanouts=second),
        cache_dir=str(tmp_path),
        **kwargs,
    )
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _steps(dm):
    loader = dm.train_loader()
    return [(step, dm.stage_two(step)) for step in loader]


def test_no_block_holds_a_mini_batch_edge_or_its_reverse(tmp_path):
    dm = _module(tmp_path, fanouts=(-1, -1))
    graph = dm.split.message_edges("train")
    graph_edges = set(zip(graph[0].tolist(), graph[1].tolist(), strict=True))
    for _, batch in _steps(dm):
        seen = set(
            zip(
                batch.n_id[batch.edge_index[0]].tolist(),
                batch.n_id[batch.edge_index[1]].tolist(),
                strict=True,
            )
        )
        assert seen <= graph_edges
        u, v = batch.n_id[batch.src].tolist(), batch.n_id[batch.dst].tolist()
        for a, b in zip(u, v, strict=True):
            assert (a, b) not in seen and (b, a) not in seen
        # ... while the neighbourhood is not empty: the exclusion removed only those.
        assert seen


def test_every_training_edge_is_trained_once_per_epoch(tmp_path):
    dm = _module(tmp_path)
    train = {tuple(e) for e in dm.split.train.t().tolist()}
    loader = dm.train_loader()
    plan = dm._epoch_plan(0, dm.data_shard)
    assert len(loader) == sum(m.steps(dm.batch_size) for m in plan.macros)
    for _ in range(2):
        seen = []
        for _, batch in _steps(dm):
            seen += list(
                zip(batch.n_id[batch.src].tolist(), batch.n_id[batch.dst].tolist(), strict=True)
            )
        assert len(seen) == len(set(seen)) == len(train) and set(seen) == train


@pytest.mark.parametrize("loss", ["bce", "softmax"])
def test_all_neighbours_in_both_stages_equal_full_graph_pyg(tmp_path, loss):
    dm = _module(tmp_path, fanouts=(-1, -1), ratio=0.5)
    dm._x = dm._x.double()
    step, batch = _steps(dm)[1]
    torch.manual_seed(0)
    encoder = GraphSAGE(6, 12, 2, 8).double()
    reference = copy.deepcopy(encoder)
    module = LinkPredictor(encoder, loss=loss)
    got = module._loss(*module(batch))
    got.backward()
    src, dst = batch.n_id[batch.src], batch.n_id[batch.dst]
    drop = set(zip(src.tolist(), dst.tolist(), strict=True))
    drop |= {(b, a) for a, b in drop}
    graph = dm.split.message_edges("train")
    keep = torch.tensor([(a, b) not in drop for a, b in graph.t().tolist()])
    h = reference(dm._x, graph[:, keep])
    neg = batch.n_id[batch.neg]
    pos = (h[src] * h[dst]).sum(-1)
    negs = (h[src].unsqueeze(1) * h[neg]).sum(-1)
    if loss == "bce":
        want = F.binary_cross_entropy_with_logits(
            torch.cat([pos, negs.reshape(-1)]),
            torch.cat([torch.ones_like(pos), torch.zeros(negs.numel(), dtype=torch.float64)]),
        )
    else:
        want = F.cross_entropy(
            torch.cat([pos[:, None], negs], 1), torch.zeros(len(pos), dtype=torch.long)
        )
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for a, b in zip(encoder.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-12)


def _pairs(dm) -> list[tuple[list[int], list[int]]]:
    return [(b.n_id[b.src].tolist(), b.n_id[b.neg].view(-1).tolist()) for _, b in _steps(dm)]


def test_a_resumed_loader_continues_the_epoch_exactly(tmp_path):
    full = _pairs(_module(tmp_path, prefetch=False))
    dm = _module(tmp_path)
    it = iter(dm.train_loader())
    for _ in range(5):
        dm.stage_two(next(it))
    state = dm.train_loader().state_dict()
    other = _module(tmp_path)
    other.train_loader().load_state_dict(state)
    assert _pairs(other) == full[5:]


def test_data_parallel_ranks_train_disjoint_edges_in_equal_steps(tmp_path):
    world = 2
    seen, steps = [], []
    for rank in range(world):
        dm = _module(tmp_path, batch_size=16)
        dm.data_shard = (rank, world)
        pairs = [
            p
            for b in _steps(dm)
            for p in zip(b[1].n_id[b[1].src].tolist(), b[1].n_id[b[1].dst].tolist(), strict=True)
        ]
        steps.append(len(dm.train_loader()))
        seen += pairs
    assert len(set(steps)) == 1
    assert len(seen) == len(set(seen))
    total = dm.split.train.size(1)
    assert total - len(seen) == dm._epoch_plan(0, DataParallelShard(0, world)).dropped
    assert (
        total - len(seen)
        < world * len(dm._epoch_plan(0, DataParallelShard(0, world)).macros) * steps[0]
    )


def test_a_second_stage_below_the_first_is_named(tmp_path):
    with pytest.raises(
        ValueError, match=r"LinkNeighborSamplingDataModule.*second_stage_fanouts\[0\]"
    ):
        LinkNeighborSamplingDataModule(
            DATASET, fanouts=[5, 5], first_stage=LargeBatchSampler(second_stage_fanouts=[3, 5]),
            cache_dir=str(tmp_path),
        )  # fmt: skip
