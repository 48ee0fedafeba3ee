"""Normalisation layers."""

from lightgraph.nn.norm.sequence_batch_norm import SequenceBatchNorm

__all__ = ["SequenceBatchNorm"]
