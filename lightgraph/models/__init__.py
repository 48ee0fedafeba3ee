"""LightningModules."""

from lightgraph.models.graph_transformer_module import GraphTransformerModule
from lightgraph.models.link_predictor import LinkPredictor
from lightgraph.models.minibatch_classifier import MiniBatchNodeClassifier
from lightgraph.models.node_classifier import NodeClassifier
from lightgraph.models.partitioned_link_predictor import PartitionedLinkPredictor
from lightgraph.models.unitg_lm_jobs import LMJob
from lightgraph.models.unitg_module import UniTGModule

__all__ = [
    "GraphTransformerModule",
    "LMJob",
    "LinkPredictor",
    "MiniBatchNodeClassifier",
    "NodeClassifier",
    "PartitionedLinkPredictor",
    "UniTGModule",
]
