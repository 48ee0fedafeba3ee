"""Graphormer: the dual schedule inside the model, presets, argument checks."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data.partition.sequences import build_sequence
from lightgraph.nn.models.graphormer import GRAPHORMER_PRESETS, Graphormer
from tests.nn.models.transformer_checks import F_IN, OUT, sequence


def test_dual_interleaves_dense_steps_when_the_conditions_hold() -> None:
    n = 12
    path = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    item = build_sequence(torch.randn(n, F_IN), torch.cat([path, path.flip(0)], 1))
    model = Graphormer(
        F_IN, OUT, hidden_channels=8, heads=2, num_layers=2, kind="dual", dense_every=3
    )
    assert item.graph.num_layers == 1
    used = []
    for _ in range(7):
        model(item)
        used.append(model.attention_layers[0].last_dense)
    assert item.graph.num_layers == 2 and all(item.graph.conditions().values())
    assert used == [True, False, False, True, False, False, True]
    model.eval()
    model(item)
    assert not model.attention_layers[0].last_dense  # evaluation: only the conditions count
    # Two triangles without a global token or the token path fail C2 and C3: dual falls
    # back to dense on every step.
    triangles = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 0, 4, 5, 3]])
    apart = build_sequence(
        torch.randn(6, F_IN),
        torch.cat([triangles, triangles.flip(0)], 1),
        global_token=False,
        token_path=False,
    )
    model.train()
    for _ in range(3):
        model(apart)
        assert model.attention_layers[0].last_kind == "dense"
    assert apart.graph.conditions() == {"c1": True, "c2": False, "c3": False}


def test_sparse_kind_reaches_every_layer() -> None:
    n = 12
    path = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    item = build_sequence(torch.randn(n, F_IN), path)  # directed path + token path + global
    model = Graphormer(
        F_IN,
        OUT,
        hidden_channels=8,
        heads=2,
        num_layers=2,
        kind="dual",
        sparse_kind="cluster_sparse",
        num_clusters=2,
    )
    assert all(
        a.sparse_kind == "cluster_sparse" and a.dense_every == 11 for a in model.attention_layers
    )
    kinds = []
    for _ in range(13):
        model(item)
        kinds.append({a.last_kind for a in model.attention_layers})
    assert kinds == [{"dense"}] + [{"cluster_sparse"}] * 10 + [{"dense"}, {"cluster_sparse"}]
    with pytest.raises(ValueError, match="Graphormer: expected `sparse_kind` to be one of"):
        Graphormer(F_IN, OUT, kind="dual", sparse_kind="dense")


def test_presets_follow_table_4_4() -> None:
    slim = Graphormer(F_IN, OUT, preset="slim")
    assert (slim.num_layers, slim.hidden_channels, slim.heads) == (4, 64, 8)
    large = Graphormer(F_IN, OUT, preset="large", num_layers=12)
    assert (large.num_layers, large.hidden_channels, large.heads) == (12, 768, 32)
    assert GRAPHORMER_PRESETS == {"slim": (4, 64, 8), "large": (12, 768, 32)}
    assert not slim.requires_laplacian_pe
    # One spatial-bias table shared by all Graphormer layers (thesis Eq. 2.5).
    tables = {id(layer.attn.bias_table) for layer in slim.layers}
    assert len(tables) == 1


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"`kind` to be one of \('dense', 'raw', 'sparse'"):
        Graphormer(F_IN, OUT, kind="flash")
    with pytest.raises(
        ValueError, match=r"`hidden_channels` \(64\) to be divisible by `heads` \(6\)"
    ):
        Graphormer(F_IN, OUT, heads=6)
    with pytest.raises(ValueError, match="preset 'slim' sets `hidden_channels`=64"):
        Graphormer(F_IN, OUT, preset="slim", hidden_channels=32)
    with pytest.raises(ValueError, match="`preset` to be one of"):
        Graphormer(F_IN, OUT, preset="base")  # type: ignore[arg-type]
    item = sequence()
    with pytest.raises(ValueError, match="built for 9 bias buckets .* model has 10"):
        Graphormer(F_IN, OUT, max_distance=6).double()(item)
