"""Historical embeddings (PBS / GNNAutoScale) against full-graph PyG references."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.nn import Dropout
from lightgraph.nn.destination import destination_forward
from lightgraph.nn.history import HistoricalEmbeddings
from tests.graphs import hop_ordered_sample

# Two partitions of 8 nodes: A = 0..7, B = 8..15; each a ring with chords, 4 cut edges.
PART_A = list(range(8))
_UNDIRECTED = (
    [(i, (i + 1) % 8) for i in range(8)]
    + [(8 + i, 8 + (i + 1) % 8) for i in range(8)]
    + [(0, 4), (2, 6), (9, 13), (10, 15)]
    + [(1, 9), (3, 12), (6, 14), (7, 8)]
)
NUM_NODES = 16
F_IN = 5


def _graph() -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    src = [u for u, v in _UNDIRECTED] + [v for u, v in _UNDIRECTED]
    dst = [v for u, v in _UNDIRECTED] + [u for u, v in _UNDIRECTED]
    return torch.randn(NUM_NODES, F_IN, generator=g), torch.tensor([src, dst])


def _model(cls, num_layers=3, **kwargs):
    torch.manual_seed(0)
    return cls(F_IN, 8, num_layers=num_layers, out_channels=3, **kwargs)


def _exact_hidden(model, x, edge_index) -> list[Tensor]:
    """Every hidden layer's output over the full graph, read from PyG's own forward pass
    (eval mode; the activation is the last step of a hidden layer when act_first=False)."""
    outs: list = []
    handle = model.act.register_forward_hook(lambda m, i, o: outs.append(o.detach()))
    was = model.training
    model.eval()
    with torch.no_grad():
        model(x, edge_index)
    model.train(was)
    handle.remove()
    return outs[: model.num_layers - 1]


def _pbs_sample(edge_index, seeds, inner, num_hops):
    """Full ``num_hops`` neighbourhood of ``seeds`` in the macro-batch ``inner`` + halo.

    The macro-batch keeps only the edges into inner nodes (halo nodes are leaves). Nodes
    are ordered by hop, edges grouped by the hop of their destination (PyG's layout).
    """
    inner_set = set(inner)
    edges = [(int(u), int(v)) for u, v in edge_index.t() if int(v) in inner_set]
    nodes, local, nodes_per_hop, edges_per_hop = hop_ordered_sample(edges, seeds, num_hops)
    order = nodes.tolist()
    is_halo = torch.tensor([n not in inner_set for n in order])
    return nodes, local, nodes_per_hop, edges_per_hop, is_halo


def _halo_index(is_halo, nodes_per_hop, num_layers):
    """Halo positions among hops 0..L-1-l for each hidden layer l."""
    out = []
    for layer in range(num_layers - 1):
        rows = sum(nodes_per_hop[: num_layers - layer])
        out.append(torch.nonzero(is_halo[:rows]).flatten())
    return out


# --------------------------------------------------------------------------- table
def test_push_pull_semantics():
    hist = HistoricalEmbeddings(6)
    assert hist.num_layers() == 0 and not hist.filled and hist.nbytes == 0
    with pytest.raises(ValueError, match="`layer`"):
        hist.pull(0, torch.tensor([0]))
    values = torch.arange(6.0, dtype=torch.float64).view(3, 2).requires_grad_()
    hist.push(0, torch.tensor([4, 0, 2]), values)  # lazily allocates table 0 (float32)
    table = hist.tables[0]
    assert table.dtype == torch.float32 and table.device.type == "cpu"
    assert not table.requires_grad
    expected = torch.zeros(6, 2)
    expected[[4, 0, 2]] = values.detach().float()
    torch.testing.assert_close(table, expected)
    assert hist.stats["bytes_pushed"] == 3 * 2 * 4
    pulled = hist.pull(0, torch.tensor([2, 4], dtype=torch.int32))
    torch.testing.assert_close(pulled, torch.tensor([[4.0, 5.0], [0.0, 1.0]]))
    pulled.add_(100)  # a copy: the table is unchanged
    torch.testing.assert_close(hist.tables[0], expected)
    assert hist.stats["bytes_pulled"] == 2 * 2 * 4
    assert hist.nbytes == 6 * 2 * 4

    hist.push(1, torch.tensor([1]), torch.ones(1, 3))  # next layer: allocated too
    assert hist.num_layers() == 2 and hist.tables[1].shape == (6, 3)
    with pytest.raises(ValueError, match=r"`layer`.*\[0, 2\].*got 3"):
        hist.push(3, torch.tensor([1]), torch.ones(1, 3))
    with pytest.raises(ValueError, match=r"`layer`.*\[0, 1\].*got 2"):
        hist.pull(2, torch.tensor([1]))
    with pytest.raises(ValueError, match="`values`.*width of table 1"):
        hist.push(1, torch.tensor([1]), torch.ones(1, 2))
    with pytest.raises(ValueError, match="`values`.*one row per id"):
        hist.push(1, torch.tensor([1, 2]), torch.ones(1, 3))
    with pytest.raises(IndexError, match=r"`ids`.*\[0, 6\)"):
        hist.pull(0, torch.tensor([6]))
    with pytest.raises(ValueError, match="`ids`.*integer"):
        hist.push(0, torch.tensor([0.0]), torch.ones(1, 2))
    with pytest.raises(ValueError, match="`num_nodes`"):
        HistoricalEmbeddings(0)
    with pytest.raises(ValueError, match="`dtype`"):
        HistoricalEmbeddings(3, dtype=torch.int64)

    half = HistoricalEmbeddings(4, dtype=torch.float16)
    half.push(0, torch.tensor([3]), torch.tensor([[1.5, -2.0]]))
    assert half.tables[0].dtype == torch.float16 and half.stats["bytes_pushed"] == 4
    hist.reset_stats()
    assert hist.stats == {
        "bytes_pulled": 0,
        "bytes_pushed": 0,
        "bytes_gathered": 0,
        "gather_seconds": 0.0,
        "refresh_seconds": 0.0,
    }


@pytest.mark.parametrize(
    "cls,kwargs,chunk_size",
    [
        (GraphSAGE, {}, 3),
        (GraphSAGE, {"norm": "batch_norm", "act_first": False}, 5),
        (GAT, {"heads": 2}, 4),
        (GCN, {}, NUM_NODES),  # GCN's normalisation is exact only in one chunk
    ],
)
def test_fill_equals_exact_hidden_embeddings(cls, kwargs, chunk_size):
    x, edge_index = _graph()
    model = _model(cls, **kwargs)
    if "norm" in kwargs:  # non-trivial running statistics
        model.train()
        model(x, edge_index)
    model.train()
    expected = _exact_hidden(model, x, edge_index)
    assert len(expected) == 2
    indptr, indices = to_csc(edge_index, NUM_NODES)
    hist = HistoricalEmbeddings(NUM_NODES)
    hist.fill(model, indptr, indices, x, chunk_size=chunk_size)
    assert hist.filled and hist.num_layers() == 2 and model.training
    for table, ref in zip(hist.tables, expected, strict=True):
        torch.testing.assert_close(table, ref, atol=1e-5, rtol=1e-5)

    low = HistoricalEmbeddings(NUM_NODES, dtype=torch.bfloat16)
    low.fill(model, indptr, indices, x, chunk_size=chunk_size)
    for table, ref in zip(low.tables, expected, strict=True):  # computed in float32, rounded once
        assert table.dtype == torch.bfloat16
        torch.testing.assert_close(table, ref.to(torch.bfloat16))


def test_fill_rejects_mismatched_graph_and_bad_model():
    x, edge_index = _graph()
    indptr, indices = to_csc(edge_index, NUM_NODES)
    with pytest.raises(ValueError, match="`indptr`.*num_nodes=10"):
        HistoricalEmbeddings(10).fill(_model(GraphSAGE), indptr, indices, x)
    with pytest.raises(ValueError, match="jk"):
        HistoricalEmbeddings(NUM_NODES).fill(_model(GraphSAGE, jk="cat"), indptr, indices, x)
    with pytest.raises(TypeError, match="BasicGNN"):
        HistoricalEmbeddings(NUM_NODES).fill(torch.nn.Linear(5, 2), indptr, indices, x)


def test_state_dict_round_trip_and_mismatch():
    x, edge_index = _graph()
    indptr, indices = to_csc(edge_index, NUM_NODES)
    hist = HistoricalEmbeddings(NUM_NODES)
    hist.fill(_model(GraphSAGE), indptr, indices, x)
    state = hist.state_dict()
    restored = HistoricalEmbeddings(NUM_NODES, dtype=torch.float64)
    restored.load_state_dict(state)
    assert restored.filled and restored.num_layers() == 2
    for a, b in zip(restored.tables, hist.tables, strict=True):
        assert a.dtype == torch.float64
        torch.testing.assert_close(a, b.double())
    hist.tables[0].zero_()  # the loaded table is a copy
    assert restored.tables[0].abs().sum() > 0
    empty = HistoricalEmbeddings(NUM_NODES)
    empty.load_state_dict(HistoricalEmbeddings(NUM_NODES).state_dict())
    assert not empty.filled and empty.num_layers() == 0
    with pytest.raises(ValueError, match=r"`state\['num_nodes'\]`.*num_nodes=15.*got 16"):
        HistoricalEmbeddings(15).load_state_dict(state)
    with pytest.raises(ValueError, match="lacks"):
        HistoricalEmbeddings(NUM_NODES).load_state_dict({"tables": []})


# ------------------------------------------------- destination_forward with history
SEEDS = [1, 3]  # every seed has a halo in-neighbour


def _setup(cls, kwargs, num_layers=3):
    x, edge_index = _graph()
    model = _model(cls, num_layers=num_layers, **kwargs).eval()
    exact = _exact_hidden(model, x, edge_index)
    with torch.no_grad():
        full_out = model(x, edge_index)
    nodes, local, nph, eph, is_halo = _pbs_sample(edge_index, SEEDS, PART_A, num_layers)
    assert is_halo.any() and nph[-1] > 0
    return x, model, exact, full_out, nodes, local, nph, eph, is_halo


@pytest.mark.parametrize(
    "cls,kwargs",
    [
        (GraphSAGE, {}),
        (GraphSAGE, {"jk": "last", "act_first": True}),
        (GAT, {"heads": 2}),
        (GAT, {"v2": True, "heads": 1, "dropout": 0.3}),
    ],
)
@pytest.mark.parametrize("trim", [False, True])
def test_history_splice_with_exact_history_equals_full_graph(cls, kwargs, trim):
    L = 3
    x, model, exact, full_out, nodes, local, nph, eph, is_halo = _setup(cls, kwargs, L)
    halo_index = _halo_index(is_halo, nph, L)
    hist = [exact[layer][nodes[idx]] for layer, idx in enumerate(halo_index)]
    args = (nph, eph) if trim else (None, None)
    with torch.no_grad():
        out, hidden = destination_forward(model, x[nodes], local, *args, halo_index, hist)
        plain = model(
            x[nodes],
            local,
            **(
                {"num_sampled_nodes_per_hop": nph, "num_sampled_edges_per_hop": eph} if trim else {}
            ),
        )
    n = len(SEEDS)
    torch.testing.assert_close(out[:n], full_out[SEEDS], atol=1e-5, rtol=1e-5)
    assert out.shape[0] == (n if trim else len(nodes))
    # Without the splice, the sample alone gets the seeds wrong (halo nodes are leaves).
    assert not torch.allclose(plain[:n], full_out[SEEDS], atol=1e-3)
    assert len(hidden) == L - 1
    for layer, h in enumerate(hidden):
        rows = sum(nph[: L - layer])  # hops 0..L-1-l: computed from full neighbourhoods
        assert h.shape[0] == (rows if trim else len(nodes))
        inner = torch.nonzero(~is_halo[:rows]).flatten()
        torch.testing.assert_close(h[inner], exact[layer][nodes[inner]], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(h[halo_index[layer]], hist[layer])

    # A wrong (zero) history changes the seeds' output, layer by layer.
    for layer in range(L - 1):
        wrong = [h.clone() for h in hist]
        wrong[layer].zero_()
        with torch.no_grad():
            bad, _ = destination_forward(model, x[nodes], local, *args, halo_index, wrong)
        assert not torch.allclose(bad[:n], full_out[SEEDS], atol=1e-3)


def test_history_splice_gradients_reach_parameters_not_history():
    L = 3
    x, model, exact, _, nodes, local, nph, eph, is_halo = _setup(GraphSAGE, {"dropout": 0.5}, L)
    halo_index = _halo_index(is_halo, nph, L)
    hist = [
        exact[layer][nodes[idx]].clone().requires_grad_() for layer, idx in enumerate(halo_index)
    ]
    model.train()
    out, hidden = destination_forward(model, x[nodes], local, nph, eph, halo_index, hist)
    assert all(h.requires_grad for h in hidden)
    out[: len(SEEDS)].sum().backward()
    assert all(h.grad is None for h in hist)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)


def test_history_splice_matches_basic_gnn_without_halo():
    """No halo rows: BasicGNN.forward's seeds (trimmed), and without per-hop counts its
    every row, also in train mode with the same dropout masks."""
    L = 2
    x, model, _, _, nodes, local, nph, eph, _ = _setup(GraphSAGE, {"dropout": 0.5}, L)
    empty = [torch.empty(0, dtype=torch.long)]
    out, hidden = destination_forward(model, x[nodes], local, nph, eph, empty, [torch.empty(0, 8)])
    ref = model(x[nodes], local, num_sampled_nodes_per_hop=nph, num_sampled_edges_per_hop=eph)
    torch.testing.assert_close(out, ref[: nph[0]])
    assert len(hidden) == 1 and hidden[0].size(0) == nph[0] + nph[1]
    model.train()
    torch.manual_seed(1)
    out, _ = destination_forward(model, x[nodes], local, None, None, empty, [torch.empty(0, 8)])
    # destination_forward runs the model's nn.Dropout as lightgraph's one-pass dropout:
    # PyG's forward with that dropout module draws the same masks.
    reference = copy.deepcopy(model)
    reference.dropout = Dropout(0.5)
    torch.manual_seed(1)
    torch.testing.assert_close(out, reference(x[nodes], local))


def test_history_splice_rejects_bad_arguments():
    x, edge_index = _graph()
    model = _model(GraphSAGE)
    idx, h = [torch.tensor([0]), torch.tensor([1])], [torch.zeros(1, 8), torch.zeros(1, 8)]
    with pytest.raises(ValueError, match="jk"):
        destination_forward(_model(GraphSAGE, jk="cat"), x, edge_index, None, None, idx, h)
    with pytest.raises(TypeError, match="BasicGNN"):
        destination_forward(torch.nn.Linear(5, 3), x, edge_index, None, None, idx, h)
    with pytest.raises(ValueError, match="`halo_index`.*\\(2\\) but got 1"):
        destination_forward(model, x, edge_index, None, None, idx[:1], h)
    with pytest.raises(ValueError, match=r"`hist\[1\]`.*\[1, d\]"):
        destination_forward(model, x, edge_index, None, None, idx, [h[0], torch.zeros(2, 8)])
    with pytest.raises(ValueError, match=r"`hist\[0\]`.*width"):
        destination_forward(model, x, edge_index, None, None, idx, [torch.zeros(1, 4), h[1]])
    with pytest.raises(ValueError, match="both given"):
        destination_forward(model, x, edge_index, [1, 2, 3, 4], None, idx, h)


def test_history_splice_compiles_to_one_graph():
    """Static shapes only: dynamo captures the whole forward (no graph break)."""
    torch._dynamo.reset()
    L = 3
    x, model, exact, full_out, nodes, local, nph, eph, is_halo = _setup(GraphSAGE, {}, L)
    halo_index = _halo_index(is_halo, nph, L)
    hist = [exact[layer][nodes[idx]] for layer, idx in enumerate(halo_index)]
    compiled = torch.compile(destination_forward, backend="eager", fullgraph=True, dynamic=False)
    with torch.no_grad():
        out, _ = compiled(model, x[nodes], local, nph, eph, halo_index, hist)
    torch.testing.assert_close(out[: len(SEEDS)], full_out[SEEDS], atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------- data-parallel replicas
SYNC_NODES = 30


def _rank_pushes(world: int) -> list[list[tuple[int, Tensor, Tensor]]]:
    """``pushes[step][rank] = (layer, ids, values)``: every rank's push of every step, from
    one script every rank knows. Row counts differ per rank (some push nothing, and in
    step 3 nobody does); ids overlap across ranks, so the order of arrival matters."""
    g = torch.Generator().manual_seed(7)
    widths = [3, 5]
    pushes = []
    for step in range(6):
        layer = step % 2
        row = []
        for rank in range(world):
            count = 0 if step == 3 or (rank + step) % 4 == 1 else 2 + (rank * 5 + step * 3) % 9
            ids = torch.randperm(SYNC_NODES, generator=g)[:count]
            row.append((layer, ids, torch.randn(count, widths[layer], generator=g)))
        pushes.append(row)
    return pushes


def _replica(rank: int, world: int, sync: str, dtype: torch.dtype) -> list[Tensor]:
    hist = HistoricalEmbeddings(SYNC_NODES, dtype=dtype, sync=sync)
    for row in _rank_pushes(world):
        hist.push(*row[rank])
    return [t.clone() for t in hist.tables]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_step_sync_replicas_equal_one_table_receiving_every_push_in_rank_order(world, dtype):
    from tests.distributed_helpers import run_distributed

    replicas = run_distributed(_replica, world, "step", dtype, timeout=90)
    reference = HistoricalEmbeddings(SYNC_NODES, dtype=dtype)
    for row in _rank_pushes(world):
        for push in row:
            reference.push(*push)
    for rank, tables in enumerate(replicas):
        assert len(tables) == 2
        for got, want in zip(tables, reference.tables, strict=True):
            assert torch.equal(got, want), rank


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_epoch_sync_replicas_keep_only_their_own_pushes():
    from tests.distributed_helpers import run_distributed

    world = 2
    replicas = run_distributed(_replica, world, "epoch", torch.float32, timeout=90)
    for rank, tables in enumerate(replicas):
        alone = HistoricalEmbeddings(SYNC_NODES)
        for row in _rank_pushes(world):
            alone.push(*row[rank])
        for got, want in zip(tables, alone.tables, strict=True):
            assert torch.equal(got, want), rank
    assert not torch.equal(replicas[0][0], replicas[1][0])


def test_sync_mode_is_checked_and_saved():
    with pytest.raises(ValueError, match=r"`sync`.*'step'.*'epoch'.*'always'"):
        HistoricalEmbeddings(4, sync="always")
    hist = HistoricalEmbeddings(4, sync="epoch")
    restored = HistoricalEmbeddings(4)
    assert restored.sync == "step"  # the default
    restored.load_state_dict(hist.state_dict())
    assert restored.sync == "epoch"
