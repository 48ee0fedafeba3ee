"""Callbacks: LDR-driven tuning of the exchange, monitors, console summaries."""

from lightgraph.callbacks.adaptive_bitwidth import AdaptiveBitWidth
from lightgraph.callbacks.bitwidth_reassigner import BitWidthReassigner
from lightgraph.callbacks.cluster_sparsity_tuner import ClusterSparsityTuner
from lightgraph.callbacks.communication_monitor import CommunicationMonitor
from lightgraph.callbacks.epoch_summary import EpochSummary
from lightgraph.callbacks.loss_descent_rate import LossDescentRate
from lightgraph.callbacks.pipeline_adaptor import PipelineAdaptor

__all__ = [
    "AdaptiveBitWidth",
    "BitWidthReassigner",
    "ClusterSparsityTuner",
    "CommunicationMonitor",
    "EpochSummary",
    "LossDescentRate",
    "PipelineAdaptor",
]
