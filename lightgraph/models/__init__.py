"""LightningModules."""

from lightgraph.models.node_classifier import NodeClassifier

__all__ = ["NodeClassifier"]
