"""Callbacks: LDR-driven tuning of the exchange, monitors, console summaries, exact resume."""

from lightgraph.callbacks.adaptive_bitwidth import AdaptiveBitWidth
from lightgraph.callbacks.aggregation_order import AggregationOrder
from lightgraph.callbacks.bitwidth_reassigner import BitWidthReassigner
from lightgraph.callbacks.cluster_sparsity_tuner import ClusterSparsityTuner
from lightgraph.callbacks.co_training_early_stopping import CoTrainingEarlyStopping
from lightgraph.callbacks.communication_monitor import CommunicationMonitor
from lightgraph.callbacks.epoch_summary import EpochSummary
from lightgraph.callbacks.graph_compile import GraphCompile
from lightgraph.callbacks.io_monitor import IOMonitor
from lightgraph.callbacks.ldr_schedule import LDRSchedule
from lightgraph.callbacks.modality_sync import ModalitySync
from lightgraph.callbacks.pipeline_adaptor import PipelineAdaptor
from lightgraph.callbacks.random_state import RandomStateCheckpoint

__all__ = [
    "AdaptiveBitWidth",
    "AggregationOrder",
    "BitWidthReassigner",
    "ClusterSparsityTuner",
    "CoTrainingEarlyStopping",
    "CommunicationMonitor",
    "EpochSummary",
    "GraphCompile",
    "IOMonitor",
    "LDRSchedule",
    "ModalitySync",
    "PipelineAdaptor",
    "RandomStateCheckpoint",
]
