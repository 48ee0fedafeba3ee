"""SequenceBatchNorm without sharding (the sharded case: tests/nn/models/test_graph_transformer_base.py)."""

from __future__ import annotations

import torch

from lightgraph.nn.norm import SequenceBatchNorm


def test_sequence_batch_norm_without_sharding_is_batch_norm() -> None:
    x = torch.randn(30, 6)
    norm, reference = SequenceBatchNorm(6), torch.nn.BatchNorm1d(6)
    torch.testing.assert_close(norm(x, sharded=False), reference(x))
    torch.testing.assert_close(norm.running_var, reference.running_var)
