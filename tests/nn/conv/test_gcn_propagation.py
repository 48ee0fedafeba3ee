import torch
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from lightgraph.nn import GCNPropagation, PartitionAware, PartitionedGraph
from tests.graphs import tricky_graph


def test_equals_normalised_adjacency_product() -> None:
    data, _ = tricky_graph(1)
    n = data.x.size(0)
    (row, col), w = gcn_norm(data.edge_index, None, n, add_self_loops=True, dtype=torch.float64)
    a_hat = torch.zeros(n, n, dtype=torch.float64).index_put_((col, row), w, accumulate=True)
    graph = PartitionedGraph.from_data(data)
    for adjacency in ("adj_t", "edge_index"):
        prop = PartitionAware(GCNPropagation(), normalization="gcn", adjacency=adjacency)
        torch.testing.assert_close(prop(data.x, graph), a_hat @ data.x)


def test_unweighted_sum_without_normalisation() -> None:
    data, _ = tricky_graph(1)
    out = GCNPropagation()(data.x, data.edge_index)
    ref = torch.zeros_like(data.x).index_add_(0, data.edge_index[1], data.x[data.edge_index[0]])
    torch.testing.assert_close(out, ref)
