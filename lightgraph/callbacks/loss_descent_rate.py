"""Compatibility module: the LDR tracker lives in :mod:`lightgraph.functional.loss_descent_rate`."""

from lightgraph.functional.loss_descent_rate import LossDescentRate, check_smoothing, check_window

__all__ = ["LossDescentRate", "check_smoothing", "check_window"]
