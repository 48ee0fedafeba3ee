"""Link mini-batches: seed-edge exclusion, exactness against full-graph PyG, resume, shards."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.utils import to_undirected

from lightgraph.data.loader import LinkNeighborSamplingLoader, NegativeSampler
from lightgraph.data.loader.link_neighbor import sample_link_minibatch
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.models import LinkPredictor


def _graph(n: int = 120, m: int = 500, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=gen)
    return to_undirected(ei[:, ei[0] != ei[1]], num_nodes=n)


def _loader(ei, n, x, fanouts, batch_size=16, **kwargs) -> LinkNeighborSamplingLoader:
    indptr, indices = to_csc(ei, n)
    pos = ei[:, ei[0] < ei[1]]
    return LinkNeighborSamplingLoader(
        indptr, indices, x, pos, fanouts, batch_size, NegativeSampler("uniform", 3), **kwargs
    )


def _global_edges(batch) -> set[tuple[int, int]]:
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    return set(zip(src.tolist(), dst.tolist(), strict=True))


@pytest.mark.parametrize("fanouts", [[3, 3], [-1, -1], [5, 2, 2]])
def test_no_sampled_block_holds_a_seed_edge_or_its_reverse(fanouts):
    n = 120
    ei = _graph(n)
    loader = _loader(ei, n, torch.randn(n, 4), fanouts)
    graph = set(zip(ei[0].tolist(), ei[1].tolist(), strict=True))
    checked = 0
    for batch in loader:
        seen = _global_edges(batch)
        assert seen <= graph
        u, v = batch.n_id[batch.src], batch.n_id[batch.dst]
        for a, b in zip(u.tolist(), v.tolist(), strict=True):
            assert (a, b) not in seen and (b, a) not in seen
            checked += 1
        # The per-hop counts still describe the kept edges.
        assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)
    assert checked == loader.pos.size(1)


def test_without_exclusion_the_seed_edges_are_sampled():
    """The exclusion test above can fail: with exclude=False and all neighbours the seed
    edges are in the sample."""
    n = 120
    ei = _graph(n)
    batch = next(iter(_loader(ei, n, torch.randn(n, 4), [-1, -1], exclude=False)))
    seen = _global_edges(batch)
    u, v = batch.n_id[batch.src], batch.n_id[batch.dst]
    assert all((a, b) in seen for a, b in zip(u.tolist(), v.tolist(), strict=True))


def test_the_pairs_to_score_point_at_the_right_nodes():
    n = 60
    ei = _graph(n, 200, 3)
    indptr, indices = to_csc(ei, n)
    pos = ei[:, :10]
    neg = torch.randint(0, n, (10, 4))
    batch = sample_link_minibatch(indptr, indices, torch.randn(n, 3), pos, neg, [2, 2])
    assert torch.equal(batch.n_id[batch.src], pos[0]) and torch.equal(batch.n_id[batch.dst], pos[1])
    assert torch.equal(batch.n_id[batch.neg], neg)
    seeds = batch.batch_size
    assert int(torch.cat([batch.src, batch.dst, batch.neg.view(-1)]).max()) < seeds
    assert batch.n_id[:seeds].unique().numel() == seeds


@pytest.mark.parametrize("loss", ["bce", "softmax"])
def test_all_neighbours_equal_full_graph_pyg_without_the_seed_edges(loss):
    """fanout -1: the sampled step's loss and gradients equal full-graph PyG (float64) on
    the graph without the batch's positive edges and their reverses."""
    torch.manual_seed(0)
    n = 80
    ei = _graph(n, 300, 5)
    x = torch.randn(n, 6, dtype=torch.float64)
    loader = _loader(ei, n, x, [-1, -1], batch_size=12)
    batch = next(iter(loader))
    encoder = GraphSAGE(6, 16, 2, 8).double()
    reference = copy.deepcopy(encoder)
    module = LinkPredictor(encoder, loss=loss)
    pos_logits, neg_logits = module(batch)
    got = module._loss(pos_logits, neg_logits)
    got.backward()

    # The reference: full-graph PyG on the graph minus the batch's positives (both ways).
    src, dst = batch.n_id[batch.src], batch.n_id[batch.dst]
    drop = set(zip(src.tolist(), dst.tolist(), strict=True))
    drop |= {(b, a) for a, b in drop}
    keep = torch.tensor([(a, b) not in drop for a, b in ei.t().tolist()])
    h = reference(x, ei[:, keep])
    neg = batch.n_id[batch.neg]
    pos = (h[src] * h[dst]).sum(-1)
    negs = (h[src].unsqueeze(1) * h[neg]).sum(-1)
    if loss == "bce":
        logits = torch.cat([pos, negs.reshape(-1)])
        target = torch.cat([torch.ones_like(pos), torch.zeros(negs.numel(), dtype=torch.float64)])
        want = F.binary_cross_entropy_with_logits(logits, target)
    else:
        want = F.cross_entropy(
            torch.cat([pos.view(-1, 1), negs], 1), torch.zeros(len(pos), dtype=torch.long)
        )
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for (name, a), b in zip(encoder.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-12, msg=name)


def _batches(loader) -> list[tuple[list[int], list[int]]]:
    return [(b.n_id[b.src].tolist(), b.n_id[b.neg].view(-1).tolist()) for b in loader]


def test_a_resumed_loader_draws_the_rest_of_the_epoch_exactly():
    n = 120
    ei = _graph(n)
    x = torch.randn(n, 4)
    full = _batches(_loader(ei, n, x, [3, 3], seed=7))
    first = _loader(ei, n, x, [3, 3], seed=7)
    it = iter(first)
    for _ in range(4):
        next(it)
    state = first.state_dict()
    resumed = _loader(ei, n, x, [3, 3], seed=7)
    resumed.load_state_dict(state)
    assert _batches(resumed) == full[4:]


def test_data_parallel_ranks_split_the_seed_edges_disjointly():
    n = 120
    ei = _graph(n)
    x = torch.randn(n, 4)
    world = 3
    shares = [_loader(ei, n, x, [2], batch_size=8, rank=r, world_size=world) for r in range(world)]
    steps = {len(list(s)) for s in shares}
    assert len(steps) == 1  # equal steps: DDP would hang otherwise
    seen = []
    for loader in shares:
        for batch in loader:
            seen += list(
                zip(batch.n_id[batch.src].tolist(), batch.n_id[batch.dst].tolist(), strict=True)
            )
    total = loader.pos.size(1)
    assert len(seen) == len(set(seen)) == total // world * world
