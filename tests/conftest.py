"""Suite-wide pytest hooks."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` skip on a machine without a CUDA device.

    ``python benchmarks/gpu_check.py`` runs exactly these tests (``pytest -m cuda``) when a
    GPU is at hand; here they are collected, so they stay importable, and reported skipped.
    """
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (benchmarks/gpu_check.py runs it)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
