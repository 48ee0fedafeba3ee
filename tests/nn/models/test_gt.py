"""GT: sizes, the Laplacian-PE check, and sign flips that live in the state dict."""

from __future__ import annotations

import pytest
import torch

from lightgraph.nn.models.graphormer import Graphormer
from lightgraph.nn.models.gt import GT
from tests.nn.models.transformer_checks import F_IN, OUT, sequence


def test_sizes_follow_table_4_4() -> None:
    gt = GT(F_IN, OUT)
    assert (gt.num_layers, gt.hidden_channels, gt.heads) == (4, 128, 8)
    assert gt.requires_laplacian_pe and not Graphormer(F_IN, OUT).requires_laplacian_pe


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"`task` to be one of \('node', 'graph'\)"):
        GT(F_IN, OUT, task="edge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`norm` to be one of \('layer', 'batch'\)"):
        GT(F_IN, OUT, norm="group")  # type: ignore[arg-type]
    item = sequence()
    item.lap_pe = None
    with pytest.raises(ValueError, match="`batch.lap_pe` of shape \\[tokens, pe_dim=4\\]") as info:
        GT(F_IN, OUT, pe_dim=4).double()(item)
    assert "--data.init_args.pe_dim=4" in str(info.value)


def test_dual_options_reach_every_layer() -> None:
    gt = GT(F_IN, OUT, num_layers=2, kind="dual", dense_every=4, sparse_kind="auto")
    layers = [layer.attn for layer in gt.layers]
    assert all(a.kind == "dual" and a.dense_every == 4 for a in layers)
    assert all(a.sparse_kind == "auto" for a in layers)
    with pytest.raises(ValueError, match="GT: expected `sparse_kind` to be one of"):
        GT(F_IN, OUT, sparse_kind="raw")


def _model() -> GT:
    torch.manual_seed(0)
    return GT(F_IN, OUT, hidden_channels=8, heads=2, num_layers=1, pe_dim=4).double()


def test_flips_are_a_persistent_buffer() -> None:
    item = sequence()
    model = _model()
    assert "flips" in dict(model.named_buffers())
    for _ in range(3):
        model(item)
    model.eval()
    model(item)  # evaluation draws no signs
    state = model.state_dict()
    assert int(state["flips"]) == 3
    # A model restored from the state dict draws the signs the original draws next.
    restored = _model()
    restored.load_state_dict(state)
    model.train()
    restored.train()
    torch.testing.assert_close(restored(item), model(item), rtol=0, atol=0)
    assert int(restored.flips) == int(model.flips) == 4
    # ... and a fresh model (flips 0) draws other signs.
    fresh = _model()
    fresh.load_state_dict({**state, "flips": torch.tensor(0)})
    fresh.train()
    model.flips.fill_(3)
    assert not torch.equal(fresh(item), model(item))


def test_flips_keep_their_dtype() -> None:
    model = _model().float()
    assert model.flips.dtype == torch.long
