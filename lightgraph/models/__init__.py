"""LightningModules."""

from lightgraph.models.graph_transformer_module import GraphTransformerModule
from lightgraph.models.minibatch_classifier import MiniBatchNodeClassifier
from lightgraph.models.node_classifier import NodeClassifier

__all__ = ["GraphTransformerModule", "MiniBatchNodeClassifier", "NodeClassifier"]
