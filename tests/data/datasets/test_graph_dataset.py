from __future__ import annotations

import pytest
import torch
from torch_geometric.transforms import ToSparseTensor

from lightgraph.data.datasets import validate_graph
from lightgraph.data.datasets.graph_dataset import ensure_edge_index
from lightgraph.data.partition import build_partition_plans
from lightgraph.typing import WITH_TORCH_SPARSE
from tests.graphs import tricky_graph


def test_validate_accepts_a_good_graph() -> None:
    data, _ = tricky_graph(2)
    validate_graph(data, num_classes=3, multilabel=False)


@pytest.mark.parametrize(
    "mutate,kwargs,match",
    [
        (lambda d: setattr(d, "x", d.x.long()), {}, "`x` to be a 2-D floating point tensor"),
        (
            lambda d: setattr(d, "edge_index", d.edge_index.float()),
            {},
            "`edge_index` to be a torch.long tensor",
        ),
        (
            lambda d: setattr(d, "edge_index", d.edge_index - 1),
            {},
            "`edge_index` to lie in \\[0, 59\\].*\\[-1,",
        ),
        (lambda d: setattr(d, "test_mask", None), {}, "has no `test_mask`"),
        (
            lambda d: setattr(d, "num_nodes", 70),
            {},
            "`x` to have one row per node \\(num_nodes = 70\\) but got 60",
        ),
        (lambda d: None, {"num_classes": 2}, "class labels in `y` to lie in \\[0, 1\\]"),
        (lambda d: None, {"multilabel": True}, "multi-label `y` of shape"),
    ],
)
def test_validate_rejects(mutate, kwargs, match) -> None:
    data, _ = tricky_graph(2)
    mutate(data)
    with pytest.raises(ValueError, match=match):
        validate_graph(data, **kwargs)


def test_torch_sparse_adj_t_input_is_accepted() -> None:
    data, part = tricky_graph(2)
    data.x = data.x.float()
    as_sparse = data.clone()
    del as_sparse.edge_index
    n = data.x.size(0)
    dense = torch.zeros(n, n).index_put_(
        (data.edge_index[1], data.edge_index[0]),
        torch.ones(data.edge_index.size(1)),
        accumulate=True,
    )
    as_sparse.adj_t = dense.to_sparse_csr()  # rows = destinations, as PyG's ToSparseTensor
    converted = ensure_edge_index(as_sparse)
    key = lambda ei: (ei[0] * n + ei[1]).unique()  # noqa: E731  (duplicates coalesce in a sparse matrix)
    assert torch.equal(key(converted.edge_index), key(data.edge_index))
    plans = build_partition_plans(as_sparse, part, 2)
    assert sum(p.num_inner for p in plans) == n


@pytest.mark.skipif(not WITH_TORCH_SPARSE, reason="optional torch-sparse not installed")
def test_torch_sparse_sparse_tensor_input_is_accepted() -> None:
    data, part = tricky_graph(2)
    data.x = data.x.float()
    sparse = ToSparseTensor()(data.clone())
    plans = build_partition_plans(sparse, part, 2)
    assert sum(p.num_inner for p in plans) == data.x.size(0)
