import pytest

import lightgraph.typing as lg_typing
import lightgraph.utilities.imports as lg_imports
from lightgraph.nn import PartitionAware


def test_require_torch_sparse_names_the_install(monkeypatch) -> None:
    monkeypatch.setattr(lg_imports, "WITH_TORCH_SPARSE", False)
    with pytest.raises(ImportError, match="pip install lightgraph\\[sparse\\]"):
        lg_typing.require_torch_sparse("thing")


def test_sparse_tensor_adjacency_without_torch_sparse(monkeypatch) -> None:
    from torch_geometric.nn import GCNConv

    monkeypatch.setattr(lg_imports, "WITH_TORCH_SPARSE", False)
    with pytest.raises(ImportError, match="PartitionAware\\(adjacency='sparse_tensor'\\)"):
        PartitionAware(GCNConv(2, 2), adjacency="sparse_tensor")
