"""RevGCN / RevGAT (reversible) and ResGEN (res+ DeeperGCN) against hand-written references."""

from __future__ import annotations

import weakref

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch_geometric.utils import erdos_renyi_graph

from lightgraph.nn.models.rev_gnn import (
    DEEP_GNN_PRESETS,
    ResGEN,
    RevGAT,
    RevGCN,
    SharedDropout,
    deep_gnn_preset,
)


def _graph(num_nodes: int = 40, in_channels: int = 6, seed: int = 0) -> tuple[Tensor, Tensor]:
    torch.manual_seed(seed)
    return torch.randn(num_nodes, in_channels), erdos_renyi_graph(num_nodes, 0.1)


def _plain_forward(model, x: Tensor, edge_index: Tensor) -> Tensor:
    """The reversible model's computation written as a plain loop (activations kept): the
    same modules and weights, and the dropout masks the last ``model(...)`` call drew."""
    h = model.lin_in(x)
    for block in model.blocks:
        groups = list(block.convs)
        xs = h.chunk(len(groups), dim=-1)
        carry = xs[1]
        for part in xs[2:]:
            carry = carry + part
        ys = []
        for i, group in enumerate(groups):
            carry = xs[i] + group(carry, edge_index)
            ys.append(carry)
        h = torch.cat(ys, dim=-1)
    h = model.out_dropout(model.act(model.norm_out(h)))
    return model.lin_out(h)


def _grads(loss: Tensor, inputs: list[Tensor]) -> list[Tensor]:
    return list(torch.autograd.grad(loss, inputs))


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [(RevGCN, {"num_groups": 2}), (RevGCN, {"num_groups": 3}), (RevGAT, {"heads": 2})],
)
def test_reversible_gradients_equal_plain_loop(cls, kwargs) -> None:
    x, edge_index = _graph()
    torch.manual_seed(1)
    model = cls(6, 12, 3, num_layers=4, dropout=0.3, **kwargs).double().train()
    x = x.double().requires_grad_()
    weight = torch.randn(40, 3, dtype=torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]

    out = model(x, edge_index)
    got = _grads((out * weight).sum(), [x, *params])
    masks = [d.mask for d in model.block_dropouts]
    assert all(m is not None and (m == 0).any() and (m != 0).any() for m in masks)

    ref_out = _plain_forward(model, x, edge_index)  # masks are kept: no reset in between
    assert all(d.mask is m for d, m in zip(model.block_dropouts, masks, strict=True))
    torch.testing.assert_close(ref_out, out, rtol=1e-12, atol=1e-12)
    want = _grads((ref_out * weight).sum(), [x, *params])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


def test_reversible_flag_gives_same_gradients() -> None:
    x, edge_index = _graph()
    torch.manual_seed(2)
    rev = RevGCN(6, 8, 3, num_layers=3).double()
    plain = RevGCN(6, 8, 3, num_layers=3, reversible=False).double()
    plain.load_state_dict(rev.state_dict())
    x = x.double()
    rev(x, edge_index).square().sum().backward()
    plain(x, edge_index).square().sum().backward()
    for (name, a), b in zip(rev.named_parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_eval_and_no_grad_match_plain_stack() -> None:
    x, edge_index = _graph()
    torch.manual_seed(7)
    rev = RevGAT(6, 8, 3, num_layers=3, heads=2, dropout=0.5).eval()
    plain = RevGAT(6, 8, 3, num_layers=3, heads=2, dropout=0.5, reversible=False).eval()
    plain.load_state_dict(rev.state_dict())
    with torch.no_grad():
        a, b = rev(x, edge_index), rev(x, edge_index)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(a, plain(x, edge_index), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [RevGCN, RevGAT])
def test_block_inverse_is_exact(cls) -> None:
    x, edge_index = _graph()
    torch.manual_seed(3)
    model = cls(6, 12, 3, num_layers=2, dropout=0.4).double().train()
    h = torch.randn(40, 12, dtype=torch.float64)
    block = model.blocks[0]
    model.reset_dropout()
    with torch.no_grad():
        y = block(h.clone(), edge_index)  # the reversible block frees its input's storage
        back = block.inverse(y.clone(), edge_index)
    assert not torch.allclose(y, h)
    torch.testing.assert_close(back, h, rtol=1e-12, atol=1e-12)


def test_shared_dropout_reuses_mask_until_reset() -> None:
    drop = SharedDropout(0.5).train()
    x = torch.ones(20, 4)
    a, b = drop(x), drop(x)
    assert torch.equal(a, b) and (a == 0).any() and (a == 2).any()
    drop.reset()
    torch.manual_seed(123)
    c = drop(x)
    drop.reset()
    torch.manual_seed(123)
    assert torch.equal(c, drop(x))
    assert torch.equal(drop.eval()(x), x)


class _PeakTensorMemory(TorchDispatchMode):
    """Peak bytes of the tensor storages created inside the mode and alive at once."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, weakref.ref] = {}
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor):
                storage = t.untyped_storage()
                key = id(storage)
                if key not in self.live:
                    self.live[key] = weakref.ref(storage, lambda _, k=key: self.live.pop(k, None))
        total = sum(s.nbytes() for r in list(self.live.values()) if (s := r()) is not None)
        self.peak = max(self.peak, total)
        return out


def _peak(model, x: Tensor, edge_index: Tensor) -> int:
    with _PeakTensorMemory() as meter:
        model(x, edge_index).sum().backward()
    return meter.peak


@pytest.mark.parametrize("cls", [RevGCN, RevGAT])
def test_reversible_memory_is_flat_in_depth(cls) -> None:
    x, edge_index = _graph(num_nodes=300, in_channels=8)
    depths = (2, 4, 10)
    rev, plain = [], []
    for depth in depths:
        torch.manual_seed(4)
        rev.append(_peak(cls(8, 16, 2, num_layers=depth, dropout=0.1), x, edge_index))
        torch.manual_seed(4)
        model = cls(8, 16, 2, num_layers=depth, dropout=0.1, reversible=False)
        plain.append(_peak(model, x, edge_index))
    # The plain stack keeps every block's activations: linear growth in depth.
    assert plain[2] > 3 * plain[0]
    slope_a = (plain[1] - plain[0]) / (depths[1] - depths[0])
    slope_b = (plain[2] - plain[1]) / (depths[2] - depths[1])
    assert slope_b == pytest.approx(slope_a, rel=0.1)
    # The reversible one only grows by its parameter gradients (a few KB per layer).
    assert rev[2] < 1.05 * rev[0]
    assert (rev[2] - rev[0]) < 0.1 * (plain[2] - plain[0])


def test_resgen_shapes_and_backward() -> None:
    x, edge_index = _graph()
    model = ResGEN(6, 16, 3, num_layers=5, dropout=0.2).train()
    out = model(x, edge_index)
    assert out.shape == (40, 3)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert model.lin_in.weight.grad.abs().sum() > 0


def test_resgen_equals_hand_written_res_plus() -> None:
    x, edge_index = _graph()
    torch.manual_seed(5)
    model = ResGEN(6, 8, 3, num_layers=2, dropout=0.0).double()
    x = x.double()
    first, second = model.layers
    h = first.conv(model.lin_in(x), edge_index)
    h = h + second.conv(F.relu(second.norm(h)), edge_index)
    want = model.lin_out(F.relu(first.norm(h)))
    torch.testing.assert_close(model(x, edge_index), want, rtol=1e-12, atol=1e-12)


def test_resgen_checkpoint_gives_same_gradients() -> None:
    x, edge_index = _graph()
    torch.manual_seed(6)
    a = ResGEN(6, 8, 3, num_layers=3).double()
    b = ResGEN(6, 8, 3, num_layers=3, checkpoint=True).double()
    b.load_state_dict(a.state_dict())
    x = x.double().requires_grad_()
    a(x, edge_index).square().sum().backward()
    b(x, edge_index).square().sum().backward()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12)


def test_presets_follow_table_5_4() -> None:
    assert deep_gnn_preset("RevGCN", "ogbn-arxiv") == {"num_layers": 112, "hidden_channels": 224}
    assert deep_gnn_preset("RevGCN", "cora") == {"num_layers": 448, "hidden_channels": 80}
    assert deep_gnn_preset("RevGAT", "ogbn-products") == {"num_layers": 20, "hidden_channels": 256}
    assert deep_gnn_preset("RevGAT", "pubmed") == {"num_layers": 40, "hidden_channels": 768}
    assert deep_gnn_preset("ResGEN", "ogbn-arxiv") == {"num_layers": 56, "hidden_channels": 128}
    assert deep_gnn_preset("ResGEN", "cora") == {"num_layers": 112, "hidden_channels": 64}
    assert DEEP_GNN_PRESETS["RevGAT"]["ogbn-arxiv"]["epochs"] == 2000
    model = ResGEN.from_preset("pubmed", 500, 3)
    assert (model.num_layers, model.hidden_channels) == (112, 64)
    model = RevGCN.from_preset("ogbn-arxiv", 128, 40)
    assert (model.num_layers, model.hidden_channels, len(model.blocks)) == (112, 224, 112)
    assert isinstance(RevGAT.from_preset("cora", 1433, 7, heads=3), RevGAT)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"RevGCN: expected `num_layers` to be a positive"):
        RevGCN(6, 8, 3, num_layers=0)
    with pytest.raises(ValueError, match=r"ResGEN: expected `num_layers`.* but got 0"):
        ResGEN(6, 8, 3, num_layers=0)
    with pytest.raises(ValueError, match=r"`hidden_channels` \(15\) to be divisible by"):
        RevGCN(6, 15, 3, num_layers=2, num_groups=2)
    with pytest.raises(ValueError, match=r"`num_groups` to be an integer >= 2 but got 1"):
        RevGCN(6, 8, 3, num_layers=2, num_groups=1)
    with pytest.raises(ValueError, match=r"divisible by `num_groups \* heads` \(8\)"):
        RevGAT(6, 12, 3, num_layers=2, num_groups=2, heads=4)
    with pytest.raises(ValueError, match=r"RevGCN: expected `dataset` to be one of \('ogbn-arxiv'"):
        RevGCN.from_preset("ogbn-papers100M", 6, 3)
    with pytest.raises(ValueError, match=r"expected `model` to be one of \('RevGCN', 'RevGAT'"):
        deep_gnn_preset("GCN", "cora")
    with pytest.raises(ValueError, match=r"preset 'cora' sets `num_layers`=112"):
        ResGEN.from_preset("cora", 6, 3, num_layers=4)
    with pytest.raises(ValueError, match=r"`norm` to be one of \('layer', None\)"):
        RevGCN(6, 8, 3, num_layers=2, norm="batch")
    with pytest.raises(ValueError, match=r"SharedDropout: expected `p` in \[0, 1\)"):
        SharedDropout(1.0)
