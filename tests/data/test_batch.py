"""FullGraphBatch."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data.batch import FullGraphBatch


def _batch() -> FullGraphBatch:
    indptr = torch.tensor([0, 1, 3, 3, 4])
    indices = torch.tensor([1, 0, 3, 2])
    masks = {
        "train": torch.tensor([True, False, True, False]),
        "val": torch.tensor([False, True, False, False]),
    }
    return FullGraphBatch(indptr, indices, torch.randn(4, 2), torch.tensor([0, 1, 0, 1]), masks)


def test_nodes_of_a_split_and_identity_ids():
    batch = _batch()
    assert batch.num_nodes == 4
    assert batch.nodes("train").tolist() == [0, 2]
    assert batch.nodes("val").tolist() == [1]
    assert batch.nodes("predict").tolist() == [0, 1, 2, 3]
    assert batch.node_ids.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="`split` in"):
        batch.nodes("test")


def test_bad_shapes_and_names_are_rejected():
    indptr = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="`x` to have one row per node \\(2\\)"):
        FullGraphBatch(indptr, torch.tensor([1, 0]), torch.randn(3, 2), torch.zeros(2), {})
    with pytest.raises(ValueError, match="mask names"):
        FullGraphBatch(
            indptr,
            torch.tensor([1, 0]),
            torch.randn(2, 2),
            torch.zeros(2),
            {"dev": torch.ones(2, dtype=torch.bool)},
        )
