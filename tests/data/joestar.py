"""Tests' shorthand for JOESTAR's data module: one flat set of keyword arguments, split into
the first-stage sampler's and the module's (the parametrised tests sweep both at once)."""

from __future__ import annotations

from typing import Any

from lightgraph.data import MultistageDataModule
from lightgraph.data.loader import LargeBatchSampler, PartitionBatchSampler

_SAMPLER_ARGS = {
    "lbs": (LargeBatchSampler, ("ratio", "second_stage_fanouts", "num_sampler_threads")),
    "pbs": (PartitionBatchSampler, ("num_parts", "parts_per_batch", "history")),
}


def joestar_module(dataset: Any, first_stage: str = "lbs", **kwargs: Any) -> MultistageDataModule:
    """``MultistageDataModule(dataset, first_stage=<sampler>(...), ...)`` with the sampler's
    arguments taken out of ``kwargs``."""
    cls, names = _SAMPLER_ARGS[first_stage]
    sampler = cls(**{name: kwargs.pop(name) for name in names if name in kwargs})
    return MultistageDataModule(dataset, first_stage=sampler, **kwargs)
