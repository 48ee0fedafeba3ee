"""pad_minibatch against the unpadded eager forward of PyG GraphSAGE, GAT and GCN.

The reference is the model run on the sampled batch as the sampler produced it (trimmed
per layer with the real per-hop counts, or untrimmed); the padded batch must give the
same outputs for every real row and the same parameter gradients, in eval mode.
"""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from lightgraph.data.loader.minibatch import sample_minibatch
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.functional.padding import (
    bucket_levels,
    pad_minibatch,
    required_sizes,
    select_level,
    split_sizes,
    unpad_rows,
)
from lightgraph.utilities.random_state import make_generator

FANOUTS = [4, 3, 2]


def _batch(seed: int = 0, n: int = 200, e: int = 1200, num_seeds: int = 12):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    x = torch.randn(n, 8, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    indptr, indices = to_csc(edge_index, n)
    seeds = torch.randperm(n, generator=g)[:num_seeds]
    return sample_minibatch(indptr, indices, x, y, seeds, FANOUTS, make_generator(seed, "b"))


def _bounds(batch, extra_nodes=(3, 5, 0, 7), extra_edges=(6, 0, 9)):
    nb = [n + d for n, d in zip(batch.num_sampled_nodes, extra_nodes, strict=True)]
    eb = [n + d for n, d in zip(batch.num_sampled_edges, extra_edges, strict=True)]
    return nb, eb


MODELS = {
    "sage": lambda: GraphSAGE(8, 16, 3, out_channels=5),
    "gat": lambda: GAT(8, 16, 3, out_channels=5, heads=2),
    "gcn": lambda: GCN(8, 16, 3, out_channels=5),
}


def _run(model, x, edge_index, nodes, edges, trim):
    if trim:
        return model(
            x, edge_index, num_sampled_nodes_per_hop=nodes, num_sampled_edges_per_hop=edges
        )
    return model(x, edge_index)


def _grads(model, out, weight):
    model.zero_grad()
    (out * weight).sum().backward()
    return {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("trim", [True, False])
def test_padded_forward_and_gradients_match_the_unpadded_batch(name, trim):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    batch = _batch()
    nodes, edges = list(batch.num_sampled_nodes), list(batch.num_sampled_edges)
    ref = _run(model, batch.x, batch.edge_index, nodes, edges, trim)
    padded = pad_minibatch(batch.x, batch.edge_index, nodes, edges, *_bounds(batch))
    assert padded.x.size(0) == sum(padded.num_sampled_nodes) > batch.num_nodes
    out = _run(
        model, padded.x, padded.edge_index, padded.num_sampled_nodes, padded.num_sampled_edges, trim
    )
    got = unpad_rows(out, padded.layout)
    assert got.shape == ref.shape  # seeds only when trimmed, every row otherwise
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    weight = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    ref_grads = _grads(model, ref, weight)
    got_grads = _grads(model, got, weight)
    for key, grad in ref_grads.items():
        torch.testing.assert_close(got_grads[key], grad, rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_the_check_notices_padding_edges_that_reach_real_rows(name):
    # Same padded batch, but its padding edges deliver to real seeds (from padding rows):
    # the comparison above must fail for it, or it would not test anything.
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    batch = _batch()
    nodes, edges = list(batch.num_sampled_nodes), list(batch.num_sampled_edges)
    ref = model(batch.x, batch.edge_index)
    padded = pad_minibatch(batch.x, batch.edge_index, nodes, edges, *_bounds(batch))
    real = torch.zeros(padded.edge_index.size(1), dtype=torch.bool)
    offsets = [0, *torch.tensor(padded.num_sampled_edges).cumsum(0).tolist()]
    for h, n in enumerate(edges):
        real[offsets[h] : offsets[h] + n] = True
    bad = padded.edge_index.clone()
    bad[1, ~real] = torch.arange(int((~real).sum())) % nodes[0]  # destinations: real seeds
    good = unpad_rows(model(padded.x, padded.edge_index), padded.layout)
    wrong = unpad_rows(model(padded.x, bad), padded.layout)
    torch.testing.assert_close(good, ref, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(wrong[: nodes[0]], ref[: nodes[0]], rtol=1e-5, atol=1e-6)


def test_layout_rows_edges_and_the_sampler_invariant():
    batch = _batch()
    nodes, edges = list(batch.num_sampled_nodes), list(batch.num_sampled_edges)
    nb, eb = _bounds(batch)
    p = pad_minibatch(batch.x, batch.edge_index, nodes, edges, nb, eb)
    assert p.num_sampled_nodes == nb and p.num_sampled_edges == eb and p.batch_size == nb[0]
    assert p.edge_index.shape == (2, sum(eb))
    lay = p.layout
    assert lay.num_padding_nodes == sum(nb) - sum(nodes) and lay.num_padding_edges == sum(eb) - sum(
        edges
    )
    torch.testing.assert_close(p.x[lay.node_map], batch.x)
    pad_rows = torch.ones(sum(nb), dtype=torch.bool)
    pad_rows[lay.node_map] = False
    assert p.x[pad_rows].abs().sum() == 0
    # Real edges keep their endpoints; padding edges are self-loops on padding seed rows.
    torch.testing.assert_close(
        p.edge_index[:, : edges[0]], lay.node_map[batch.edge_index[:, : edges[0]]]
    )
    n_off = [0, *torch.tensor(nb).cumsum(0).tolist()]
    e_off = [0, *torch.tensor(eb).cumsum(0).tolist()]
    for h in range(len(edges)):
        block = p.edge_index[:, e_off[h] : e_off[h + 1]]
        real, pad = block[:, : edges[h]], block[:, edges[h] :]
        assert bool((real[1] < n_off[h + 1]).all()) and bool((real[0] < n_off[h + 2]).all())
        assert bool((pad[0] == pad[1]).all())
        assert bool(((pad >= nodes[0]) & (pad < nb[0])).all())


def test_history_lists_are_remapped_and_padded():
    batch = _batch()
    nodes, edges = list(batch.num_sampled_nodes), list(batch.num_sampled_edges)
    nb, eb = _bounds(batch)
    halo = [torch.tensor([nodes[0] + 1, nodes[0] + nodes[1] + 2]), torch.tensor([nodes[0]])]
    hist = [torch.randn(2, 16), torch.randn(1, 16)]
    push = [torch.tensor([0, nodes[0] + nodes[1]]), torch.tensor([1])]
    p = pad_minibatch(
        batch.x,
        batch.edge_index,
        nodes,
        edges,
        nb,
        eb,
        halo_index=halo,
        hist=hist,
        halo_bounds=[4, 3],
        push_index=push,
    )
    node_map = p.layout.node_map
    assert [h.numel() for h in p.halo_index] == [4, 3] and [h.size(0) for h in p.hist] == [4, 3]
    for layer in range(2):
        n = halo[layer].numel()
        assert p.halo_index[layer][:n].tolist() == node_map[halo[layer]].tolist()
        assert bool(
            ((p.halo_index[layer][n:] >= nodes[0]) & (p.halo_index[layer][n:] < nb[0])).all()
        )
        torch.testing.assert_close(p.hist[layer][:n], hist[layer])
        assert p.hist[layer][n:].abs().sum() == 0
        assert p.push_index[layer].tolist() == node_map[push[layer]].tolist()


def _history_forward(model, x, edge_index, nodes, edges, halo_index, hist):
    # The history splice of lightgraph.nn.destination_forward for a BasicGNN: rows
    # halo_index[l] of hidden layer l's output are replaced by hist[l].
    hidden = []
    for i, conv in enumerate(model.convs):
        x, edge_index, _ = model._trim(i, nodes, edges, x, edge_index)
        x = conv(x, edge_index)
        if i < model.num_layers - 1:
            x = model.act(x)
            x = x.index_put((halo_index[i],), hist[i])
            hidden.append(x)
    return x, hidden


def test_padded_history_forward_matches_for_out_and_pushed_rows():
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 3, out_channels=5).eval()
    batch = _batch()
    nodes, edges = list(batch.num_sampled_nodes), list(batch.num_sampled_edges)
    halo = [torch.tensor([nodes[0] + 1, nodes[0] + 3]), torch.tensor([1, nodes[0] + 2])]
    hist = [torch.randn(2, 16), torch.randn(2, 16)]
    push = [torch.arange(nodes[0] + nodes[1]), torch.arange(nodes[0])]
    ref, ref_hidden = _history_forward(model, batch.x, batch.edge_index, nodes, edges, halo, hist)
    p = pad_minibatch(
        batch.x,
        batch.edge_index,
        nodes,
        edges,
        *_bounds(batch),
        halo_index=halo,
        hist=hist,
        halo_bounds=[5, 4],
        push_index=push,
    )
    out, hidden = _history_forward(
        model, p.x, p.edge_index, p.num_sampled_nodes, p.num_sampled_edges, p.halo_index, p.hist
    )
    torch.testing.assert_close(unpad_rows(out, p.layout), ref)
    for layer in range(2):
        got = unpad_rows(hidden[layer], p.layout)
        torch.testing.assert_close(got[push[layer]], ref_hidden[layer][push[layer]])
        torch.testing.assert_close(
            hidden[layer][p.push_index[layer]], ref_hidden[layer][push[layer]]
        )


def test_bucket_levels_and_selection():
    levels = bucket_levels([10, 0], [100, 50], num_buckets=3, margin=0.1, round_to=8)
    assert levels == [(48, 24), (80, 40), (112, 56)]
    assert select_level(levels, [40, 30]) == 1  # 30 > 24
    assert select_level(levels, [112, 1]) == 2 and select_level(levels, [113, 1]) is None
    assert bucket_levels([5], [5], num_buckets=4, round_to=4) == [(8,)]  # repeats dropped
    sizes = required_sizes([3, 4, 5], [6, 7], [8])
    assert sizes == (4, 4, 5, 6, 7, 8)
    assert split_sizes(sizes, 2) == ([4, 4, 5], [6, 7], [8])


def test_bad_arguments_are_named():
    batch = _batch()
    nodes, edges = list(batch.num_sampled_nodes), list(batch.num_sampled_edges)
    nb, eb = _bounds(batch)
    with pytest.raises(ValueError, match=r"pad_minibatch: expected `node_bounds\[0\]` > "):
        pad_minibatch(batch.x, batch.edge_index, nodes, edges, [nodes[0]] + nb[1:], eb)
    with pytest.raises(ValueError, match=r"`edge_bounds\[2\]` >= "):
        pad_minibatch(batch.x, batch.edge_index, nodes, edges, nb, eb[:2] + [edges[2] - 1])
    with pytest.raises(ValueError, match="`edge_bounds` to hold 3 entries"):
        pad_minibatch(batch.x, batch.edge_index, nodes, edges, nb, eb[:2])
    with pytest.raises(ValueError, match="`x` with sum"):
        pad_minibatch(batch.x[1:], batch.edge_index, nodes, edges, nb, eb)
    with pytest.raises(ValueError, match="`halo_index` and `hist` together"):
        pad_minibatch(
            batch.x, batch.edge_index, nodes, edges, nb, eb, halo_index=[torch.tensor([0])]
        )
    with pytest.raises(ValueError, match="unpad_rows: expected `t`"):
        p = pad_minibatch(batch.x, batch.edge_index, nodes, edges, nb, eb)
        unpad_rows(torch.zeros(nb[0] + 1, 2), p.layout)
    with pytest.raises(ValueError, match="bucket_levels: expected `num_buckets`"):
        bucket_levels([1], [2], num_buckets=0)
