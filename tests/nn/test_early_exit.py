"""Centrality-guided early-exit encoder (UniTG's Lazy Tuner) against independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightgraph.nn.early_exit import (
    EarlyExitEncoder,
    degree_groups,
    early_exit_loss,
    exit_layers,
)

VOCAB = 100


def _bert(num_layers: int = 4) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=VOCAB,
    )
    return transformers.BertModel(config).eval()


def _distilbert() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(
        dim=32, n_layers=4, n_heads=2, hidden_dim=64, vocab_size=VOCAB
    )
    return transformers.DistilBertModel(config).eval()


def _batch(b: int = 3, s: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)
    mask[0, 4:] = 0  # padding in one row
    mask[2, 6:] = 0
    return ids, mask


# ------------------------------------------------------------------------ exits / encoder
def test_exit_layers() -> None:
    assert exit_layers(4, 4) == (1, 2, 3, 4)
    assert exit_layers(12, 4) == (3, 6, 9, 12)
    assert exit_layers(6, 4) == (2, 3, 5, 6)
    assert exit_layers(5, 1) == (5,)


@pytest.mark.parametrize("factory", [_bert, _distilbert], ids=["bert", "distilbert"])
def test_truncated_hidden_states_match_full_model(factory) -> None:
    model = factory()
    enc = EarlyExitEncoder(model, num_classes=3).eval()
    ids, mask = _batch()
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        assert len(ref) == enc.num_layers + 1
        for k in range(1, enc.num_layers + 1):
            torch.testing.assert_close(enc.hidden_states(ids, mask, k), ref[k])
        # embed: pooled state at the exit, default = full depth
        torch.testing.assert_close(enc.embed(ids, mask, exit_layer=2), ref[2][:, 0])
        torch.testing.assert_close(enc.embed(ids, mask), ref[-1][:, 0])
    # the layer list and pooler are restored
    assert len(enc.layers) == enc.num_layers


def test_mean_pooling_and_task_model() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=VOCAB,
        num_labels=3,
    )
    task = transformers.BertForSequenceClassification(config).eval()
    enc = EarlyExitEncoder(task, num_classes=3, pooling="mean").eval()
    assert enc.layer_path == "encoder.layer"
    ids, mask = _batch()
    with torch.no_grad():
        ref = task.bert(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        h = ref.hidden_states[3]
        m = mask.float().unsqueeze(-1)
        torch.testing.assert_close(enc.embed(ids, mask, 3), (h * m).sum(1) / m.sum(1))


def _count_layer_calls(enc: EarlyExitEncoder) -> list[int]:
    calls = [0] * enc.num_layers
    for i, layer in enumerate(enc.layers):
        layer.register_forward_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    return calls


def test_compute_is_skipped() -> None:
    enc = EarlyExitEncoder(_bert(num_layers=8), num_classes=3, num_groups=4)
    assert enc.exit_layers == (2, 4, 6, 8)
    calls = _count_layer_calls(enc)
    ids, mask = _batch()
    out = enc(ids, mask, group=0)
    assert calls == [1, 1, 0, 0, 0, 0, 0, 0]  # a group-1 (C_1) batch runs L/4 layers
    assert out[0].shape == (3, 3) and out[1:] == [None, None, None]
    out[0].sum().backward()  # backward through the truncated stack only
    assert enc.layers[7].output.dense.weight.grad is None
    assert enc.layers[0].output.dense.weight.grad is not None
    enc(ids, mask, group=2)
    assert calls == [2, 2, 1, 1, 1, 1, 0, 0]
    enc(ids, mask)  # default group: full depth
    assert calls == [3, 3, 2, 2, 2, 2, 1, 1]


def test_all_exits_uses_intermediate_states() -> None:
    model = _bert(num_layers=8)
    enc = EarlyExitEncoder(model, num_classes=3, num_groups=4).eval()
    calls = _count_layer_calls(enc)
    ids, mask = _batch()
    with torch.no_grad():
        out = enc(ids, mask, group=2, all_exits=True)
        ref = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert calls[:6] == [2] * 6 and calls[6:] == [1, 1]  # 6 by enc, 8 by the reference
    assert out[3] is None
    for i, layer in enumerate((2, 4, 6)):
        torch.testing.assert_close(out[i], enc.heads[i](ref[layer][:, 0]))


def test_embed_by_group() -> None:
    enc = EarlyExitEncoder(_bert(), num_classes=2).eval()
    ids, mask = _batch(b=6)
    groups = torch.tensor([3, 0, 1, 0, 2, 3])
    out = enc.embed_by_group(ids, mask, groups, batch_size=1)
    with torch.no_grad():
        for j, g in enumerate(groups.tolist()):
            ref = enc.embed(ids[j : j + 1], mask[j : j + 1], enc.exit_layers[g])
            torch.testing.assert_close(out[j : j + 1], ref)


def test_encoder_errors() -> None:
    model = _bert()
    with pytest.raises(ValueError, match=r"EarlyExitEncoder: expected `num_groups`.*\[1, 4\].*0"):
        EarlyExitEncoder(model, num_classes=2, num_groups=0)
    with pytest.raises(ValueError, match=r"`num_groups`.*\[1, 4\] but got 5"):
        EarlyExitEncoder(model, num_classes=2, num_groups=5)

    class NotAnEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2)])

    with pytest.raises(ValueError, match=r"encoder\.layer.*transformer\.layer.*NotAnEncoder"):
        EarlyExitEncoder(NotAnEncoder(), num_classes=2)
    enc = EarlyExitEncoder(model, num_classes=2)
    ids, mask = _batch()
    with pytest.raises(ValueError, match=r"`exit_layer`.*\[1, 4\] but got 5"):
        enc.embed(ids, mask, exit_layer=5)
    with pytest.raises(ValueError, match=r"`group`.*\[0, 3\] but got 4"):
        enc(ids, mask, group=4)
    with pytest.raises(ValueError, match=r"`pooling` to be one of \('cls', 'mean'\)"):
        EarlyExitEncoder(model, num_classes=2, pooling="max")


def test_no_transformers_import_at_module_level() -> None:
    import ast
    import inspect

    import lightgraph.nn.early_exit as mod

    tree = ast.parse(inspect.getsource(mod))
    names = [a.name for node in tree.body if isinstance(node, ast.Import) for a in node.names] + [
        node.module for node in tree.body if isinstance(node, ast.ImportFrom)
    ]
    assert not any(n and n.startswith("transformers") for n in names)


# ------------------------------------------------------------------------ grouping
def _quantile_reference(degree: torch.Tensor, train: torch.Tensor, g: int) -> torch.Tensor:
    d = degree[train].double()
    q = [torch.quantile(d, i / g).item() for i in range(1, g)]
    return torch.tensor([sum(1 for b in q if x > b) for x in d.tolist()])


def test_degree_groups_are_quartiles() -> None:
    gen = torch.Generator().manual_seed(0)
    degree = (torch.rand(500, generator=gen) ** -1.5).floor().long()  # power-law, many ties
    train = torch.randperm(500, generator=gen)[:301]
    groups = degree_groups(degree, train)
    assert groups.dtype == torch.long and groups.shape == train.shape
    assert torch.equal(groups, _quantile_reference(degree, train, 4))
    # lowest degree -> group 0 (exits earliest), highest -> last group
    d = degree[train]
    assert groups[d.argmin()] == 0 and groups[d.argmax()] == 3
    for a in range(3):  # monotone: every node of group a has degree <= every one of a + 1
        assert d[groups == a].max() <= d[groups == a + 1].min()
    # distinct degrees: four equal quartiles
    groups = degree_groups(torch.arange(400).flip(0), torch.arange(400))
    assert torch.bincount(groups).tolist() == [100] * 4
    assert torch.equal(groups[:100], torch.full((100,), 3))
    # other G, float centrality
    c = torch.rand(97, generator=gen)
    assert torch.equal(
        degree_groups(c, torch.arange(97), 3), _quantile_reference(c, torch.arange(97), 3)
    )
    assert torch.equal(degree_groups(c, torch.arange(97), 1), torch.zeros(97, dtype=torch.long))


def test_degree_groups_rank_ties_are_equal_sized_and_deterministic() -> None:
    degree = torch.tensor([1] * 10 + [5] * 2)
    train = torch.arange(12).flip(0)
    groups = degree_groups(degree, train, 4, ties="rank")
    assert torch.bincount(groups).tolist() == [3, 3, 3, 3]
    by_node = torch.empty(12, dtype=torch.long)
    by_node[train] = groups
    # equal degrees split by node id
    assert by_node.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert torch.equal(degree_groups(degree, train, 4, ties="rank"), groups)
    # value ties: all degree-1 nodes share a group
    value = degree_groups(degree, train, 4)
    assert value[train < 10].unique().numel() == 1


def test_degree_groups_assign_other_nodes_by_the_training_boundaries() -> None:
    gen = torch.Generator().manual_seed(5)
    degree = torch.randint(0, 30, (200,), generator=gen)
    train = torch.randperm(200, generator=gen)[:80]
    every = degree_groups(degree, train, 4, nodes=torch.arange(200))
    # Independent reference: the boundaries as NumPy's linear-interpolation quantiles.
    q = np.quantile(degree[train].double().numpy(), [0.25, 0.5, 0.75])
    ref = (degree.double().numpy()[:, None] > q[None, :]).sum(1)
    assert every.tolist() == ref.tolist()
    assert torch.equal(every[train], degree_groups(degree, train, 4))
    assert degree_groups(degree, train[:0], 4, nodes=torch.arange(5)).tolist() == [0] * 5
    with pytest.raises(ValueError, match=r"needs ties='value' but got ties='rank'"):
        degree_groups(degree, train, 4, ties="rank", nodes=torch.arange(3))


def test_degree_groups_errors() -> None:
    with pytest.raises(ValueError, match=r"degree_groups: expected `num_groups`.*got 0"):
        degree_groups(torch.ones(4), torch.arange(4), 0)
    with pytest.raises(ValueError, match=r"`ties` to be one of \('value', 'rank'\) but got 'x'"):
        degree_groups(torch.ones(4), torch.arange(4), ties="x")
    with pytest.raises(ValueError, match=r"`train_nodes` in \[0, 3\]"):
        degree_groups(torch.ones(4), torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"`train_nodes` to be a 1-D integer"):
        degree_groups(torch.ones(4), torch.ones(2))


def _ce(logits: list[list[float]], labels: list[int]) -> float:
    total = 0.0
    for row, y in zip(logits, labels, strict=True):
        total += math.log(sum(math.exp(v) for v in row)) - row[y]
    return total / len(labels)


def test_eq_5_1_by_hand() -> None:
    a = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]
    b = [[0.2, 0.1, 0.0], [2.0, 2.0, -2.0]]
    y = [1, 2]
    la, lb = _ce(a, y), _ce(b, y)
    logits = [torch.tensor(a), None, torch.tensor(b), None]
    # (L_1 + L_3) / |G| with |G| = 4 exits (absent exits add 0, the denominator stays |G|)
    got = early_exit_loss(logits, torch.tensor(y))
    assert got.item() == pytest.approx((la + lb) / 4, rel=1e-6)
    # one-group batch: L_g / |G|
    got = early_exit_loss([None, torch.tensor(a), None, None], torch.tensor(y))
    assert got.item() == pytest.approx(la / 4, rel=1e-6)
    # per-exit targets and all four exits: the plain mean of the four losses
    ys = [[0, 0], [1, 1], [2, 0], [1, 2]]
    ls = [torch.tensor(a), torch.tensor(b), torch.tensor(a), torch.tensor(b)]
    got = early_exit_loss(ls, [torch.tensor(t) for t in ys])
    ref = (_ce(a, ys[0]) + _ce(b, ys[1]) + _ce(a, ys[2]) + _ce(b, ys[3])) / 4
    assert got.item() == pytest.approx(ref, rel=1e-6)
    # custom loss_fn
    got = early_exit_loss([torch.tensor(a), None], torch.tensor(y), loss_fn=F.nll_loss)
    assert got.item() == pytest.approx(-(a[0][1] + a[1][2]) / 2 / 2, rel=1e-6)


def test_eq_5_1_errors() -> None:
    y = torch.tensor([0])
    with pytest.raises(ValueError, match="at least one exit"):
        early_exit_loss([None, None], y)
    with pytest.raises(ValueError, match=r"one entry per exit \(4\) but got 2"):
        early_exit_loss([torch.zeros(1, 2), None], y, num_exits=4)


def test_training_step_runs() -> None:
    enc = EarlyExitEncoder(_bert(), num_classes=2, num_groups=4).train()
    opt = torch.optim.SGD(enc.parameters(), lr=0.1)
    ids, mask = _batch()
    y = torch.tensor([0, 1, 1])
    loss = early_exit_loss(enc(ids, mask, group=1, all_exits=True), y)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    assert enc.heads[0][1].weight.grad is not None and enc.heads[2][1].weight.grad is None
