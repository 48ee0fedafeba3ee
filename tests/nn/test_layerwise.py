"""Layer-wise inference equals the full-graph forward pass of PyG models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn.models import GAT, GCN, GraphSAGE
from torch_geometric.utils import to_undirected

from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.nn.layerwise import layerwise_inference


def _graph(n: int = 300, e: int = 1500, f: int = 12, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    edge_index = to_undirected(torch.randint(0, n, (2, e), generator=g), num_nodes=n)
    return torch.randn(n, f, generator=g), edge_index


@pytest.mark.parametrize("cls", [GraphSAGE, GAT])
@pytest.mark.parametrize("chunk_size", [1, 37, 1000])
def test_layerwise_equals_full_graph_forward(cls, chunk_size):
    torch.manual_seed(0)
    x, edge_index = _graph()
    model = cls(12, 16, num_layers=3, out_channels=5, dropout=0.5).eval()
    expected = model(x, edge_index)
    indptr, indices = to_csc(edge_index, x.size(0))
    out = layerwise_inference(model, indptr, indices, x, chunk_size=chunk_size)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def _chunked_square_reference(model, x, edge_index, chunk_size):
    """Every chunk's destinations from the square graph of the chunk (destinations plus
    their in-neighbours, only the edges into the destinations), layer by layer."""
    n = x.size(0)
    h = x
    for i, conv in enumerate(model.convs):
        out = []
        for start in range(0, n, chunk_size):
            dst = list(range(start, min(start + chunk_size, n)))
            keep = (edge_index[1] >= start) & (edge_index[1] < start + len(dst))
            src, tgt = edge_index[:, keep]
            others = sorted(set(src.tolist()) - set(dst))
            pos = {v: k for k, v in enumerate(dst + others)}
            local = torch.tensor([[pos[int(u)] for u in src], [pos[int(v)] for v in tgt]])
            out.append(conv(h[dst + others], local.view(2, -1))[: len(dst)])
        h = torch.cat(out)
        if i < model.num_layers - 1:
            h = model.act(h)
    return h


def test_layerwise_gcn_keeps_its_chunked_normalisation_and_computes_chunk_rows_only():
    """GCN's chunked result is unchanged (sources outside the chunk are normalised with a
    self-loop degree, as on the chunk's square graph); message passing fills only the
    chunk's destination rows."""
    torch.manual_seed(0)
    x, edge_index = _graph(n=60, e=200, f=6)
    model = GCN(6, 8, num_layers=2, out_channels=3).eval()
    indptr, indices = to_csc(edge_index, x.size(0))
    rows: list[int] = []
    handles = [
        conv.register_propagate_forward_hook(lambda m, i, o: rows.append(o.size(0)))
        for conv in model.convs
    ]
    out = layerwise_inference(model, indptr, indices, x, chunk_size=25)
    for h in handles:
        h.remove()
    assert rows == [25, 25, 10] * 2
    with torch.no_grad():
        expected = _chunked_square_reference(model, x, edge_index, 25)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_layerwise_reads_memory_mapped_int32_graph(tmp_path):
    torch.manual_seed(0)
    x, edge_index = _graph()
    model = GraphSAGE(12, 8, num_layers=2, out_channels=3, jk="last").eval()
    expected = model(x, edge_index)
    indptr, indices = to_csc(edge_index, x.size(0))
    files = {}
    for name, t in (
        ("indptr", indptr.to(torch.int64)),
        ("indices", indices.to(torch.int32)),
        ("x", x),
    ):
        path = tmp_path / f"{name}.npy"
        np.save(path, t.numpy())
        files[name] = torch.from_numpy(np.load(path, mmap_mode="c"))
    out = layerwise_inference(model, files["indptr"], files["indices"], files["x"], chunk_size=50)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_layerwise_restores_training_mode_and_rejects_bad_input():
    x, edge_index = _graph(n=20, e=40, f=4)
    model = GraphSAGE(4, 8, num_layers=2, out_channels=2).train()
    indptr, indices = to_csc(edge_index, 20)
    layerwise_inference(model, indptr, indices, x)
    assert model.training
    with pytest.raises(ValueError, match="chunk_size"):
        layerwise_inference(model, indptr, indices, x, chunk_size=0)
    with pytest.raises(ValueError, match="one row per node"):
        layerwise_inference(model, indptr, indices, x[:10])
    with pytest.raises(TypeError, match="BasicGNN"):
        layerwise_inference(torch.nn.Linear(4, 2), indptr, indices, x)
    with pytest.raises(ValueError, match="jk"):
        layerwise_inference(
            GraphSAGE(4, 8, num_layers=2, out_channels=2, jk="cat"), indptr, indices, x
        )


@pytest.mark.parametrize("jk", [None, "last"])
def test_shares_of_the_rows_with_an_exchange_equal_the_full_graph_forward(jk):
    # Three "ranks" (threads) each compute a share of every layer's rows -- the last one
    # none -- and exchange the layer through shared memory at a barrier, as processes
    # would all-gather it; every one ends with every node's output.
    import threading

    torch.manual_seed(0)
    x, edge_index = _graph(n=90, e=400, f=6)
    model = GraphSAGE(6, 8, num_layers=3, out_channels=4, jk=jk).eval()
    expected = model(x, edge_index)
    indptr, indices = to_csc(edge_index, x.size(0))
    shares = [(0, 50), (50, 90), (90, 90)]
    barrier = threading.Barrier(len(shares))
    written: dict[tuple[int, int], torch.Tensor] = {}
    results: list[torch.Tensor | None] = [None] * len(shares)
    computed: list[list[int]] = [[] for _ in shares]

    def run(rank: int) -> None:
        def exchange(layer: int, out: torch.Tensor) -> None:
            start, stop = shares[rank]
            computed[rank].append(layer)
            written[(layer, rank)] = out[start:stop].clone()
            barrier.wait()
            for r, (a, b) in enumerate(shares):
                out[a:b] = written[(layer, r)]
            barrier.wait()

        results[rank] = layerwise_inference(
            model, indptr, indices, x, chunk_size=16, rows=shares[rank], exchange=exchange
        )

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(shares))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert computed == [[0, 1, 2]] * 3
    for out in results:
        assert out is not None
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_rows_need_an_exchange_and_lie_in_the_graph():
    x, edge_index = _graph(n=20, e=40, f=4)
    model = GraphSAGE(4, 8, num_layers=2, out_channels=2)
    indptr, indices = to_csc(edge_index, 20)
    with pytest.raises(ValueError, match="`rows` and `exchange` together"):
        layerwise_inference(model, indptr, indices, x, rows=(0, 10))
    with pytest.raises(ValueError, match="`rows` and `exchange` together"):
        layerwise_inference(model, indptr, indices, x, exchange=lambda layer, out: None)
    with pytest.raises(ValueError, match=r"`rows` to be \(start, stop\) with 0 <= start"):
        layerwise_inference(model, indptr, indices, x, rows=(5, 21), exchange=lambda i, o: None)
