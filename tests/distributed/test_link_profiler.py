"""Link profiling for AdaQP's cost model (collective) and the cost-model resolution."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch.distributed as dist

from lightgraph.distributed import profile_links, resolve_cost_model
from lightgraph.quant.cost_model import CommCostModel
from tests.distributed_helpers import run_distributed


@pytest.mark.skipif(dist.is_available() and dist.is_initialized(), reason="needs no process group")
def test_profile_needs_a_process_group() -> None:
    with pytest.raises(RuntimeError, match="profile_links: torch.distributed"):
        profile_links()


def _profile(rank: int, world: int) -> dict[str, Any]:
    model = profile_links(sizes_bytes=(1 << 10, 1 << 14, 1 << 18, 1 << 20), repeats=3)
    with pytest.raises(ValueError, match="2 distinct positive"):
        profile_links(sizes_bytes=(1024, 1024))
    return model.to_dict()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_profile_two_ranks_returns_the_same_model() -> None:
    results = run_distributed(_profile, 2, timeout=50)
    assert results[0] == results[1]
    model = CommCostModel.from_dict(results[0])
    assert model.world_size == 2
    assert model.theta[0, 1] > 0 and model.theta[1, 0] > 0
    assert model.gamma[0, 1] >= 0 and model.gamma[1, 0] >= 0
    # a loopback link moves 4 MiB in well under a second
    assert model.predict(0, 1, 8 * (1 << 22)) < 1.0


def _resolve(rank: int, world: int, path: str) -> dict[str, Any]:
    # A mapping is expanded to the group's size; a cached file is reused, not re-profiled.
    from_mapping = resolve_cost_model({"theta": 1e-9, "gamma": 1e-4}, None)
    profiled = resolve_cost_model(None, None, cache_path=path, sizes_bytes=(1 << 10, 1 << 16))
    dist.barrier()
    reused = resolve_cost_model(None, None, cache_path=path, sizes_bytes=(1 << 10, 1 << 16))
    with pytest.raises(ValueError, match="for 3 ranks but the exchange has 2"):
        resolve_cost_model(CommCostModel.from_config(1e-9, world_size=3), None)
    return {
        "mapping": from_mapping.to_dict(),
        "profiled": profiled.to_dict(),
        "reused": reused.to_dict(),
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_resolve_cost_model_expands_mappings_and_reuses_the_cache(tmp_path) -> None:
    path = str(tmp_path / "links.json")
    results = run_distributed(_resolve, 2, path, timeout=50)
    for result in results:
        mapping = CommCostModel.from_dict(result["mapping"])
        assert mapping.world_size == 2 and mapping.theta[0, 1] == pytest.approx(1e-9)
        assert result["reused"] == results[0]["profiled"]  # rank 0's saved model, read back
    with open(path) as f:
        assert CommCostModel.from_dict(json.load(f)) == CommCostModel.from_dict(
            results[0]["profiled"]
        )
