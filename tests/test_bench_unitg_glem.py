"""benchmarks/bench_unitg.py's GLEM baseline: PyG's ``GLEM`` driven on lightgraph's LM,
GNN and text graph (tiny, so the benchmark's driver cannot rot)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os

import pytest
import torch

pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_unitg.py")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_unitg", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _saved_lm(bench, tmp_path):
    """A tiny lightgraph LM and the directory GLEM loads it from."""
    from lightgraph.nn import LMEncoder

    torch.manual_seed(0)
    ours = LMEncoder(
        vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
        max_position=12,
    ).base_model  # fmt: skip
    return ours, bench.glem_lm_dir(ours, str(tmp_path / "lm"))


def test_glem_loads_our_lm_with_identical_weights(bench, tmp_path) -> None:
    from torch_geometric.nn.models import GCN

    ours, directory = _saved_lm(bench, tmp_path)
    glem = bench.build_glem(directory, GCN(4, 8, 2, out_channels=3), num_classes=3)
    theirs = glem.lm.base_model.state_dict()
    mine = ours.state_dict()
    assert set(mine) <= set(theirs)
    for key, value in mine.items():
        assert torch.equal(value, theirs[key]), key
    assert glem.lm.dtype == torch.float32
    # Same function, not only the same tensors: the encoders agree on a batch.
    ids = torch.randint(5, 50, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0
    ours.eval()
    glem.lm.eval()
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=mask).last_hidden_state
        b = glem.lm.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert bench.lm_weight_diff(ours, glem.lm) == 0.0


def test_glem_pooler_starts_as_identity_or_as_hugging_face_draws_it(bench, tmp_path) -> None:
    from torch_geometric.nn.models import GCN

    ours, directory = _saved_lm(bench, tmp_path)
    ids = torch.randint(5, 50, (3, 12))
    ours.eval()
    with torch.no_grad():
        cls = ours(input_ids=ids).last_hidden_state[:, 0]
    pooled = {}
    for pooler in ("identity", "random"):
        glem = bench.build_glem(directory, GCN(4, 8, 2, out_channels=3), 3, pooler=pooler)
        with torch.no_grad():
            pooled[pooler] = glem.lm.eval().base_model(input_ids=ids).pooler_output
    # The classifier reads tanh(h_cls) with the identity pooler, something else without.
    torch.testing.assert_close(pooled["identity"], torch.tanh(cls))
    assert not torch.allclose(pooled["random"], torch.tanh(cls), atol=1e-3)
    with pytest.raises(ValueError, match=r"`pooler`.*identity.*random.*'eye'"):
        bench.build_glem(directory, GCN(4, 8, 2, out_channels=3), 3, pooler="eye")


def test_full_graph_loader_gives_the_full_graph_outputs(bench) -> None:
    from torch_geometric.data import Data
    from torch_geometric.nn.models import GCN

    torch.manual_seed(0)
    n = 30
    edge_index = torch.randint(0, n, (2, 90))
    data = Data(x=torch.randn(n, 5), edge_index=edge_index, y=torch.randint(0, 3, (n,)))
    data.is_gold = torch.rand(n) < 0.5
    inputs = torch.tensor([7, 2, 19, 11])
    (batch,) = list(bench._FullGraphLoader(data, inputs))
    assert batch.batch_size == 4
    assert torch.equal(batch.n_id[:4], inputs)
    assert torch.equal(batch.is_gold[:4], data.is_gold[inputs])
    gnn = GCN(5, 8, 3, out_channels=3).eval()
    with torch.no_grad():
        reference = gnn(data.x, data.edge_index)[inputs]
        out = gnn(batch.x, batch.edge_index)[: batch.batch_size]
    torch.testing.assert_close(out, reference)


@pytest.mark.timeout(120)
def test_glem_driver_runs_on_the_recipe_setting(bench, tmp_path) -> None:
    args = argparse.Namespace(
        seed=0, setting="small", nodes=200, cache_root=str(tmp_path), workdir=str(tmp_path),
        epochs=1, glem_lm_epochs=1, glem_em_iters=1, glem_patience=3, glem_lm_lr=None,
        glem_device="cpu", glem_pooler="identity", glem_lm_schedule=None,
        recipe_lm_epochs=None, deep_gnn="RevGCN", deep_layers=4, deep_hidden=16, deep_heads=2,
    )  # fmt: skip
    torch.set_num_threads(1)
    result = bench.worker_glem(args, "glem_es")
    assert math.isfinite(result["makespan_s"]) and result["makespan_s"] > 0
    assert result["lm_weights_max_abs_diff"] == 0.0
    assert result["num_nodes"] == 200
    assert [p["phase"] for p in result["phases"]] == ["lm_pretrain", "gnn", "lm"]
    assert all(p["epochs"] == 1 for p in result["phases"])
    for key in ("gnn_test_acc", "chosen_test_acc", "glem_final_test_acc"):
        assert 0.0 <= result[key] <= 1.0
    assert result["glem_final_test_acc"] >= result["chosen_test_acc"]
    assert result["makespan_s"] >= result["lm_time_total"] + result["gnn_time_total"]
    # The table's time breakdown: disjoint parts that add up to the makespan.
    parts = bench._breakdown({**result, "kind": "glem"})
    assert set(parts) == {"lm", "gnn", "sync", "bubbles", "other"}
    assert all(v >= 0.0 for v in parts.values()) and parts["bubbles"] == 0.0
    assert parts["sync"] > 0.0  # the GNN input's encoding and the pseudo-label inferences
    total = parts["lm"] + parts["gnn"] + parts["sync"] + parts["other"]
    assert total == pytest.approx(result["makespan_s"])
