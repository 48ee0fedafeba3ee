"""Callbacks."""

from lightgraph.callbacks.communication_monitor import CommunicationMonitor
from lightgraph.callbacks.epoch_summary import EpochSummary

__all__ = ["CommunicationMonitor", "EpochSummary"]
