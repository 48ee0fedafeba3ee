"""Callbacks."""

from lightgraph.callbacks.epoch_summary import EpochSummary

__all__ = ["EpochSummary"]
