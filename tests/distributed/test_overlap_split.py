"""The split path in overlap mode: exact, one transform per row, backward sent early."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data.partition import build_partition_plans
from lightgraph.distributed import HaloExchanger
from lightgraph.quant import FixedBits
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph

F, C = 6, 3
MODELS = ("gcn", "sage", "gat", "gcnii", "jknet", "sgc", "dagnn")


def _model(name: str) -> torch.nn.Module:
    from lightgraph.nn import DAGNN, GAT, GCN, GCNII, SGC, GraphSAGE, JKNet

    torch.manual_seed(0)
    small = {"hidden_channels": 8, "dropout": 0.0}
    model = {
        "gcn": lambda: GCN(F, C, num_layers=3, **small),
        "sage": lambda: GraphSAGE(F, C, num_layers=3, **small),
        "gat": lambda: GAT(F, C, num_layers=3, heads=2, **small),
        "gcnii": lambda: GCNII(F, C, num_layers=3, **small),
        "jknet": lambda: JKNet(F, C, num_layers=3, **small),
        "sgc": lambda: SGC(F, C, num_layers=3),
        "dagnn": lambda: DAGNN(F, C, num_layers=3, **small),
    }[name]()
    return model.double()


def _no_fallback() -> None:
    """Make the double-pass fallback fail loudly: these models must take the split path."""
    from lightgraph.nn import PartitionAware

    def refuse(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        raise AssertionError(f"{self.name}: took the fallback instead of the split path")

    PartitionAware._overlapped = refuse  # this forked rank only


def _overlap_vs_sync(rank: int, world: int, transport: str) -> dict:
    from lightgraph.nn import PartitionedGraph

    _no_fallback()
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    coeff = torch.randn(
        data.num_nodes, C, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )[plan.global_ids[: plan.num_inner]]
    out = {}
    for bits in (None, 2, 8):
        for name in MODELS:
            for mode in ("sync", "overlap"):
                model = _model(name)
                policy = None if bits is None else FixedBits(bits)
                ex = HaloExchanger(transport=transport, policy=policy, mode=mode, seed=1)
                x = data.x[plan.global_ids[: plan.num_inner]].clone().requires_grad_()
                y = model(x, PartitionedGraph(plan, ex, "train"))
                (y * coeff).sum().backward()
                out[(bits, name, mode)] = {
                    "y": y.detach(),
                    "x_grad": x.grad,
                    "grads": {k: p.grad.clone() for k, p in model.named_parameters()},
                    "bytes": ex.stats.total("train"),
                    "params": ex.stats.total("train", kind="params"),
                    "left": len([v for v in ex._buffers.values() if not hasattr(v[0], "value")]),
                }
                ex.close()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize("world,transport", [(2, "all_to_all"), (4, "all_to_all"), (4, "ring")])
def test_split_overlap_equals_sync(world: int, transport: str) -> None:
    """Every split-path model, FP32 and FixedBits(2 / 8): bit-identical forward, equal gradients.

    Both modes run the same two halves in the same order and quantise the same rows with
    the same generator draws, so the forward outputs are identical bit for bit. Gradients
    are compared to float64 round-off (they come out identical here as well: the same
    autograd graph is differentiated, only the wait for the halo gradients moves).
    """
    results = run_distributed(_overlap_vs_sync, world, transport, timeout=220)
    for r in results:
        for bits in (None, 2, 8):
            for name in MODELS:
                sync, over = r[(bits, name, "sync")], r[(bits, name, "overlap")]
                label = f"{name}, bits={bits}"
                assert torch.equal(sync["y"], over["y"]), label
                torch.testing.assert_close(
                    over["x_grad"], sync["x_grad"], atol=1e-12, rtol=0, msg=label
                )
                for key, g in sync["grads"].items():
                    torch.testing.assert_close(
                        over["grads"][key], g, atol=1e-12, rtol=0, msg=f"{label}: {key}"
                    )
                assert sync["bytes"] == over["bytes"] > 0, label
                assert sync["params"] == over["params"], label
                assert (sync["params"] > 0) == (bits is not None), label
                assert over["left"] == 0, label  # nothing left in flight after the step


def _rows_through_linear(rank: int, world: int) -> dict:
    from lightgraph.nn import GAT, GCN, GraphSAGE, PartitionedGraph

    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    out: dict = {"n": plan.num_inner, "local": plan.num_local}
    for name, cls, kwargs in (
        ("gcn", GCN, {}),
        ("gat", GAT, {"heads": 2}),
        ("sage", GraphSAGE, {}),
    ):
        for split in (True, False):
            torch.manual_seed(0)
            model = cls(F, C, hidden_channels=8, num_layers=2, dropout=0.0, **kwargs).double()
            counts: dict[str, int] = {}

            def count(label: str, counts: dict[str, int] = counts):  # noqa: ANN202
                def hook(module, args, output) -> None:  # noqa: ANN001
                    counts[label] = counts.get(label, 0) + args[0].size(0)

                return hook

            for i, wrapped in enumerate(model.convs):
                wrapped.split = split
                for attr in ("lin", "lin_l", "lin_r"):
                    lin = getattr(wrapped.conv, attr, None)
                    if lin is not None:
                        lin.register_forward_hook(count(f"{i}.{attr}"))
            ex = HaloExchanger(mode="overlap")
            x = data.x[plan.global_ids[: plan.num_inner]].clone().requires_grad_()
            model(x, PartitionedGraph(plan, ex, "train")).sum().backward()
            out[(name, split)] = counts
            ex.close()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_overlap_transforms_every_row_once() -> None:
    for r in run_distributed(_rows_through_linear, 2, timeout=100):
        n, local = r["n"], r["local"]
        for i in (0, 1):
            # GCN / GAT: W x once per inner row and once per halo row
            assert r[("gcn", True)][f"{i}.lin"] == local
            assert r[("gat", True)][f"{i}.lin"] == local
            # SAGE: the dense part once per output row
            assert r[("sage", True)][f"{i}.lin_l"] == n
            assert r[("sage", True)][f"{i}.lin_r"] == n
            # the double-pass fallback runs everything twice (GAT's bipartite call: 2n + halo)
            assert r[("gcn", False)][f"{i}.lin"] == 2 * local
            assert r[("gat", False)][f"{i}.lin"] == 2 * (local + n)
            assert r[("sage", False)][f"{i}.lin_l"] == 2 * n


def _event_order(rank: int, world: int, mode: str, bits: int | None) -> list:
    from lightgraph.nn import GCN, PartitionedGraph

    events: list[tuple] = []
    original = HaloExchanger._start

    def logged(self, rows, counts_out, counts_in, bits_out, bits_in, layer, direction, plan=None):  # noqa: ANN001, ANN202
        events.append(("start", layer, direction))
        pending = original(
            self, rows, counts_out, counts_in, bits_out, bits_in, layer, direction, plan
        )
        wait = pending.wait
        seen = []

        def logged_wait():  # noqa: ANN202
            if not seen:
                seen.append(True)
                events.append(("wait", layer, direction))
            return wait()

        pending.wait = logged_wait
        return pending

    HaloExchanger._start = logged  # this forked rank only
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    torch.manual_seed(0)
    model = GCN(F, C, hidden_channels=8, num_layers=2, dropout=0.0).double()
    for i, wrapped in enumerate(model.convs):

        def hook(module, args, output, i=i) -> None:  # noqa: ANN001
            # the first call transforms the inner rows; its gradient comes from the inner
            # aggregation's backward (the central work)
            if not getattr(module, "_seen", False):
                module._seen = True
                output.register_hook(lambda g: events.append(("inner_grad", f"layer{i}")))

        wrapped.conv.lin.register_forward_hook(hook)
    policy = None if bits is None else FixedBits(bits)
    ex = HaloExchanger(mode=mode, policy=policy)
    x = data.x[plan.global_ids[: plan.num_inner]].clone().requires_grad_()
    y = model(x, PartitionedGraph(plan, ex, "train"))
    events.append(("backward",))
    y.sum().backward()
    ex.close()
    return events


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("bits", [None, 8])
def test_overlap_sends_halo_gradients_before_the_inner_backward(bits: int | None) -> None:
    over = run_distributed(_event_order, 2, "overlap", bits, timeout=100)
    for events in over:
        back = events[events.index(("backward",)) :]
        for layer in ("layer0", "layer1"):
            start = back.index(("start", layer, "backward"))
            inner = back.index(("inner_grad", layer))
            wait = back.index(("wait", layer, "backward"))
            assert start < inner < wait, (layer, back)
        # the forward exchange is also waited for only after the inner half was started
        assert events.index(("start", "layer1", "forward")) < events.index(
            ("wait", "layer1", "forward")
        )
    if bits is not None:  # sync (quantised, so it runs through the same `_start`)
        for events in run_distributed(_event_order, 2, "sync", bits, timeout=100):
            back = events[events.index(("backward",)) :]
            for layer in ("layer0", "layer1"):
                start = back.index(("start", layer, "backward"))
                wait = back.index(("wait", layer, "backward"))
                inner = back.index(("inner_grad", layer))
                assert start < wait < inner, (layer, back)


def _fallback_exact(rank: int, world: int) -> dict:
    from torch_geometric.nn import GraphConv, SAGEConv

    from lightgraph.nn import PartitionAware, PartitionedGraph
    from lightgraph.nn.conv.split import split_layer

    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    w = torch.randn(data.num_nodes, 5, generator=torch.Generator().manual_seed(3)).double()
    w = w[plan.global_ids[: plan.num_inner]]
    out = {}
    for name, make in (
        ("graph-conv", lambda i: GraphConv(i, 5)),
        ("sage-project", lambda i: SAGEConv(i, 5, project=True)),
    ):
        for mode in ("sync", "overlap"):
            torch.manual_seed(0)
            conv = make(F).double()
            layers = torch.nn.ModuleList(
                [PartitionAware(conv, name="a"), PartitionAware(make(5).double(), name="b")]
            )
            assert split_layer(conv, layers[0].adjacency, layers[0].normalization, {}) is None
            ex = HaloExchanger(mode=mode)
            graph = PartitionedGraph(plan, ex, "train")
            x = data.x[plan.global_ids[: plan.num_inner]].clone()
            h = layers[0](x, graph).relu().requires_grad_()
            h.retain_grad()
            y = layers[1](h, graph)
            (y * w).sum().backward()
            out[(name, mode)] = (
                y.detach(),
                h.grad,
                {k: p.grad.clone() for k, p in layers.named_parameters()},
            )
            ex.close()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_fallback_for_layers_without_a_split_path_stays_exact() -> None:
    for r in run_distributed(_fallback_exact, 2, timeout=100):
        for name in ("graph-conv", "sage-project"):
            (y_s, g_s, p_s), (y_o, g_o, p_o) = r[(name, "sync")], r[(name, "overlap")]
            assert torch.equal(y_s, y_o), name
            torch.testing.assert_close(g_o, g_s, atol=1e-12, rtol=0)
            for key, g in p_s.items():
                torch.testing.assert_close(p_o[key], g, atol=1e-12, rtol=0, msg=f"{name}.{key}")


def _unfinished_backward(rank: int, world: int, bits: int | None) -> dict:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    w = torch.randn(plan.num_halo, F, generator=torch.Generator().manual_seed(rank)).double()
    policy = None if bits is None else FixedBits(bits)
    ex = HaloExchanger(mode="overlap", transport="ring", policy=policy)
    x = data.x[plan.global_ids[: plan.num_inner]].clone().requires_grad_()
    transfer = ex.start_halo(x, plan, "train", "l")
    halo = transfer.halo()
    loss = (halo * w).sum() + transfer.inner.sum()
    # Gradient with respect to the joined input only: autograd runs the halo rows'
    # backward (the transfer starts) but never the join that would wait for it.
    torch.autograd.grad(loss, [transfer.inner])
    pending = ex._buffers[("l", "backward")][0]
    in_flight = not hasattr(pending, "value")
    ex.close()  # completes the transfer before the group goes away
    left = dict(ex._buffers)
    # the exchanger still works afterwards: a complete step
    x.grad = None
    transfer = ex.start_halo(x, plan, "train", "l")
    ((transfer.halo() * w).sum() + transfer.inner.sum()).backward()
    ex.close()
    return {"in_flight": in_flight, "left": left, "grad": x.grad}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("bits", [None, 4])
def test_close_completes_a_backward_that_never_reached_the_join(bits: int | None) -> None:
    results = run_distributed(_unfinished_backward, 2, bits, timeout=100)
    for r in results:
        assert r["in_flight"] and r["left"] == {}
        assert r["grad"] is not None and bool((r["grad"] != 0).any())


def _padded_messages(rank: int, world: int, transport: str) -> dict:
    """Quantised rows whose packed buffers are longer than the formula (e.g. wide-offset rows)."""
    import lightgraph.distributed.halo_exchanger as hx
    import lightgraph.distributed.halo_messages as hm

    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    x = data.x[plan.global_ids[: plan.num_inner]]
    out = {}
    real_pack, real_unpack = hx.pack_rows, hm.unpack_rows
    for padded in (False, True):
        if padded:
            # Every message carries 2 extra bytes per row (as wide-offset rows would); only
            # the sender knows how many, so the receiver must learn the sizes.
            def pack(rows, bits, gen, compiled=False):  # noqa: ANN001, ANN202
                buf = real_pack(rows, bits, gen, compiled=compiled)
                return torch.cat([buf, buf.new_full((2 * rows.size(0),), 0xAB)])

            def unpack(buf, bits, dim, dtype, compiled=False, out=None):  # noqa: ANN001, ANN202
                assert bool((buf[-2 * bits.numel() :] == 0xAB).all())
                return real_unpack(
                    buf[: -2 * bits.numel()], bits, dim, dtype, compiled=compiled, out=out
                )

            hx.pack_rows, hm.unpack_rows = pack, unpack
        ex = HaloExchanger(transport=transport, policy=FixedBits(4), seed=5)
        y = ex(x, plan, "train", "l")
        out[padded] = {
            "halo": y[plan.num_inner :],
            "data": ex.stats.total("train", kind="data"),
            "params": ex.stats.total("train", kind="params"),
            "rows": sum(ex.messages(plan, "l", "forward").send_counts),
        }
        ex.close()
    hx.pack_rows, hm.unpack_rows = real_pack, real_unpack
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world,transport", [(3, "all_to_all"), (3, "ring")])
def test_receivers_learn_message_sizes_from_the_senders(world: int, transport: str) -> None:
    for r in run_distributed(_padded_messages, world, transport, timeout=100):
        plain, padded = r[False], r[True]
        assert torch.equal(plain["halo"], padded["halo"])  # same draws, same rows
        assert padded["data"] == plain["data"]  # code bytes
        assert padded["params"] == plain["params"] + 2 * r[True]["rows"]  # extra = params


def _wide_offset_rows(rank: int, world: int, transport: str) -> dict:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    # rows far from zero relative to their range: wide-offset rows carry 2 extra bytes
    x = (data.x * 1e-3 + 1000.0)[plan.global_ids[: plan.num_inner]].float()
    ex = HaloExchanger(transport=transport, policy=FixedBits(8), seed=5)
    y = ex(x, plan, "train", "l")
    truth = (data.x * 1e-3 + 1000.0)[plan.global_ids[plan.num_inner :]].float()
    out = {
        "err": (y[plan.num_inner :] - truth).abs().max().item() if plan.num_halo else 0.0,
        "params": ex.stats.total("train", kind="params"),
        "rows": sum(ex.messages(plan, "l", "forward").send_counts),
    }
    ex.close()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["all_to_all", "ring"])
def test_wide_offset_messages_round_trip(transport: str) -> None:
    import importlib

    if not hasattr(importlib.import_module("lightgraph.functional.quantize"), "wide_rows"):
        pytest.skip("pack_rows without wide-offset rows")
    for r in run_distributed(_wide_offset_rows, 2, transport, timeout=100):
        assert r["err"] < 2e-5  # the 8-bit step of a ~6e-3 range, not of bf16(1000)
        assert r["params"] > 4 * r["rows"]


def _async_split_vs_whole(rank: int, world: int) -> dict:
    from lightgraph.nn import GCN, PartitionedGraph

    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    out = {}
    for split in (True, False):
        torch.manual_seed(0)
        model = GCN(F, C, hidden_channels=8, num_layers=2, dropout=0.0).double()
        for wrapped in model.convs:
            wrapped.split = split
        ex = HaloExchanger(mode="async", policy=FixedBits(8), seed=4)
        ys, grads = [], []
        for t, mode in enumerate(["async", "async", "sync", "async"]):
            ex.mode = mode
            ex.start_epoch(t)
            x = (data.x[plan.global_ids[: plan.num_inner]] * (t + 1)).requires_grad_()
            y = model(x, PartitionedGraph(plan, ex, "train"))
            y.square().sum().backward()
            ys.append(y.detach())
            grads.append(x.grad)
        ex.close()
        out[split] = (ys, grads)
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_async_epochs_on_the_split_path_see_the_same_stale_rows() -> None:
    for r in run_distributed(_async_split_vs_whole, 2, timeout=100):
        for a, b in zip(r[True][0] + r[True][1], r[False][0] + r[False][1], strict=True):
            torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def _sampled(rank: int, world: int) -> dict:
    from lightgraph.nn import PartitionedGraph

    _no_fallback()
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    out = {}
    for name in ("gcn", "sage", "gat"):
        for mode in ("sync", "overlap"):
            model = _model(name)
            ex = HaloExchanger(policy=FixedBits(4), mode=mode, boundary_sampling=0.5, seed=7)
            ex.start_epoch(3)
            x = data.x[plan.global_ids[: plan.num_inner]].clone().requires_grad_()
            y = model(x, PartitionedGraph(plan, ex, "train"))
            y.square().sum().backward()
            out[(name, mode)] = (y.detach(), x.grad, ex.stats.total("train"))
            ex.close()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_sampled_quantised_overlap_equals_sync() -> None:
    """BNS sampling + 4-bit rows: the same kept rows and draws in both modes."""
    for r in run_distributed(_sampled, 3, timeout=100):
        for name in ("gcn", "sage", "gat"):
            (y_s, g_s, b_s), (y_o, g_o, b_o) = r[(name, "sync")], r[(name, "overlap")]
            assert torch.equal(y_s, y_o), name
            torch.testing.assert_close(g_o, g_s, atol=1e-12, rtol=0)
            assert b_s == b_o > 0
