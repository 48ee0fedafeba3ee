"""HaloExchanger modes: async staleness, boundary sampling, quantised messages."""

from __future__ import annotations

import math

import pytest
import torch

from lightgraph.data.partition import build_partition_plans
from lightgraph.distributed import HaloExchanger
from lightgraph.quant import DegreeAwareBits, FixedBits
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph

F = 6


def _weights(num_nodes: int) -> torch.Tensor:
    return torch.randn(
        num_nodes, F, generator=torch.Generator().manual_seed(11), dtype=torch.float64
    )


def _epochs(rank: int, world: int, kwargs: dict, modes: list[str]) -> list[dict]:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    ex = HaloExchanger(**kwargs)
    w = _weights(data.num_nodes)[plan.global_ids]
    ids = plan.global_ids
    out = []
    for t, mode in enumerate(modes):
        ex.mode = mode
        ex.start_epoch(t)
        x = (data.x[ids[: plan.num_inner]] + t).requires_grad_()
        y = ex(x, plan, "train", "l")
        (y * w * (t + 1)).sum().backward()
        msgs = ex.messages(plan, "l", "forward")
        out.append(
            {
                "halo": y[plan.num_inner :].detach(),
                "grad": x.grad,
                "ids": ids,
                "n": plan.num_inner,
                "send_counts": msgs.send_counts,
                "recv_counts": msgs.recv_counts,
                "fwd": ex.stats.total("train", "forward"),
                "fwd_params": ex.stats.total("train", "forward", kind="params"),
                "params": ex.stats.total("train", kind="params"),
            }
        )
        ex.stats.reset()
    ex.drain()
    return out


def _times_sent(world: int) -> torch.Tensor:
    """How many peers hold each node as halo."""
    data, part = tricky_graph(world)
    counts = torch.zeros(data.num_nodes, dtype=torch.float64)
    for p in build_partition_plans(data, part, world):
        counts.index_add_(
            0, p.global_ids[p.send_index], torch.ones(p.send_index.numel(), dtype=torch.float64)
        )
    return counts


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [2, 3])
def test_async_staleness_is_exactly_one_epoch(world: int) -> None:
    modes = ["async", "async", "async", "sync", "async"]
    results = run_distributed(_epochs, world, {"mode": "async"}, modes, timeout=100)
    data, _ = tricky_graph(world)
    w = _weights(data.num_nodes)
    sent = _times_sent(world)
    for r in results:
        for t, mode in enumerate(modes):
            e = r[t]
            ids, n = e["ids"], e["n"]
            # Epoch 0 has no previous epoch and runs synchronously; a sync epoch is fresh;
            # every other async epoch sees the previous epoch's rows and gradients.
            source = t if (t == 0 or mode == "sync") else t - 1
            torch.testing.assert_close(e["halo"], data.x[ids[n:]] + source)
            inner = ids[:n]
            expected = w[inner] * (t + 1) + w[inner] * (source + 1) * sent[inner].unsqueeze(1)
            torch.testing.assert_close(e["grad"], expected)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_boundary_sampling_both_ends_agree() -> None:
    world = 3
    results = run_distributed(
        _epochs, world, {"boundary_sampling": 0.5, "seed": 3}, ["sync", "sync"], timeout=100
    )
    data, part = tricky_graph(world)
    plans = build_partition_plans(data, part, world)
    for t in range(2):
        kept = total = 0
        for r, res in enumerate(results):
            e = res[t]
            for q in range(world):
                assert e["send_counts"][q] == results[q][t]["recv_counts"][r]
            ids, n = e["ids"], e["n"]
            nonzero = e["halo"].abs().sum(1) > 0
            assert int(nonzero.sum()) == sum(e["recv_counts"])
            torch.testing.assert_close(e["halo"][nonzero], data.x[ids[n:]][nonzero] + t)
            assert e["fwd"] == sum(e["send_counts"]) * F * 8
            kept += sum(e["send_counts"])
            total += sum(plans[r].send_counts)
        assert 0.25 < kept / total < 0.75
    # a different epoch draws a different sample
    assert any(results[r][0]["send_counts"] != results[r][1]["send_counts"] for r in range(world))


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_quantised_rows_and_exact_bytes(bits: int) -> None:
    results = run_distributed(_epochs, 2, {"policy": FixedBits(bits)}, ["sync"], timeout=100)
    data, _ = tricky_graph(2)
    for r in results:
        e = r[0]
        ids, n = e["ids"], e["n"]
        true = data.x[ids[n:]]
        span = (true.max(1).values - true.min(1).values).unsqueeze(1)
        # stochastic rounding moves a value by less than one grid step (+ bf16 rounding of the range)
        assert bool(((e["halo"] - true).abs() <= span / (2**bits - 1) * 1.02 + 1e-6).all())
        rows = sum(e["send_counts"])
        data_bytes = sum(math.ceil(c * F * bits / 8) for c in e["send_counts"])
        assert e["fwd"] - e["fwd_params"] == data_bytes
        # side information: bf16 scale + zero point per row, plus 2 bytes per wide-offset row
        extra = e["fwd_params"] - 4 * rows
        assert 0 <= extra <= 2 * rows and extra % 2 == 0
        back_extra = e["params"] - e["fwd_params"] - 4 * sum(e["recv_counts"])
        assert 0 <= back_extra <= 2 * sum(e["recv_counts"]) and back_extra % 2 == 0


def _degree_aware(rank: int, world: int) -> dict:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    ex = HaloExchanger(policy=DegreeAwareBits(base_bits=1))
    msgs = ex.messages(plan, "l", "forward")
    return {
        "send": plan.global_ids[msgs.send_index],
        "send_bits": msgs.send_bits,
        "recv": plan.global_ids[plan.num_inner :],
        "recv_bits": msgs.recv_bits,
        "send_counts": msgs.send_counts,
        "recv_counts": msgs.recv_counts,
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_degree_aware_bits_agree_on_both_ends() -> None:
    results = run_distributed(_degree_aware, 2, timeout=50)
    a, b = results
    # rank 0 sends to rank 1 exactly the rows rank 1 receives from rank 0, with the same widths
    assert torch.equal(a["send"], b["recv"]) and torch.equal(a["send_bits"], b["recv_bits"])
    assert torch.equal(b["send"], a["recv"]) and torch.equal(b["send_bits"], a["recv_bits"])
    assert set(torch.cat([a["send_bits"], b["send_bits"]]).tolist()) <= {1, 2, 4, 8}
    assert len(set(a["send_bits"].tolist())) > 1


def test_bad_arguments() -> None:
    with pytest.raises(
        ValueError, match="`mode` to be one of \\('sync', 'async', 'overlap'\\) but got 'lazy'"
    ):
        HaloExchanger(mode="lazy")
    with pytest.raises(ValueError, match="`boundary_sampling` in \\(0, 1\\] or None but got 0"):
        HaloExchanger(boundary_sampling=0)
    with pytest.raises(TypeError, match="`policy` to be a lightgraph.quant.BitWidthPolicy"):
        HaloExchanger(policy=8)  # type: ignore[arg-type]
    ex = HaloExchanger()
    with pytest.raises(ValueError, match="`mode`"):
        ex.mode = "eventually"


def _plain_vs_pipelined(rank: int, world: int) -> dict:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    w = _weights(data.num_nodes)[plan.global_ids]
    out = {}
    for name in ("plain", "pipelined"):
        ex = HaloExchanger()
        if (
            name == "pipelined"
        ):  # one async epoch leaves buffers: later sync epochs take the pipelined path
            ex.mode = "async"
            x0 = data.x[plan.global_ids[: plan.num_inner]].clone().requires_grad_()
            (ex(x0, plan, "train", "l") * w).sum().backward()
            ex.mode = "sync"
            assert ex._buffers
        x = (data.x[plan.global_ids[: plan.num_inner]] * 3).requires_grad_()
        y = ex(x, plan, "train", "l")
        (y * w).sum().backward()
        out[name] = (y.detach(), x.grad)
        ex.drain()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_fp32_sync_is_bit_identical_on_both_paths() -> None:
    for r in run_distributed(_plain_vs_pipelined, 3, timeout=50):
        assert torch.equal(r["plain"][0], r["pipelined"][0])
        assert torch.equal(r["plain"][1], r["pipelined"][1])


def _overlap_vs_sync(rank: int, world: int, quantized: bool) -> dict:
    from lightgraph.nn import GAT, GCN, GraphSAGE, PartitionedGraph

    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    coeff = torch.randn(
        data.num_nodes, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    coeff = coeff[plan.global_ids[: plan.num_inner]]
    out = {}
    for name, cls in (("gcn", GCN), ("sage", GraphSAGE), ("gat", GAT)):
        for mode in ("sync", "overlap"):
            torch.manual_seed(0)
            model = cls(F, 3, hidden_channels=8, num_layers=3, dropout=0.0).double()
            ex = HaloExchanger(policy=FixedBits(4) if quantized else None, mode=mode, seed=1)
            x = data.x[plan.global_ids[: plan.num_inner]].clone().requires_grad_()
            y = model(x, PartitionedGraph(plan, ex, "train"))
            (y * coeff).sum().backward()
            out[(name, mode)] = {
                "y": y.detach(),
                "x_grad": x.grad,
                "grads": {k: p.grad.clone() for k, p in model.named_parameters()},
                "bytes": ex.stats.total("train"),
            }
            ex.drain()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world,quantized", [(2, False), (2, True), (4, False), (4, True)])
def test_overlap_equals_sync(world: int, quantized: bool) -> None:
    """AdaQP's key property: no staleness, the same rows (and quantisation draws) as sync.

    Forward outputs are bit-identical: both modes run the same split path (inner half,
    halo half), only the wait for the halo rows moves. Gradients are compared to float64
    rounding (layers without a split path run twice in overlap mode, and autograd then
    adds the two passes' weight gradients in another order).
    """
    for r in run_distributed(_overlap_vs_sync, world, quantized, timeout=100):
        for name in ("gcn", "sage", "gat"):
            sync, over = r[(name, "sync")], r[(name, "overlap")]
            assert torch.equal(sync["y"], over["y"]), name
            torch.testing.assert_close(over["x_grad"], sync["x_grad"], atol=1e-12, rtol=0)
            for key, g in sync["grads"].items():
                torch.testing.assert_close(
                    over["grads"][key], g, atol=1e-12, rtol=0, msg=f"{name}.{key}"
                )
            assert sync["bytes"] == over["bytes"] > 0


# ------------------------------------------------------------------ resume (issue 16)
RESUME_MODES = ["sync", "async", "overlap", "async", "async", "sync", "async"]
RESUME_AT = (2, 3, 4, 6)  # before overlap, async after overlap, async after async, async after sync


def _train(rank: int, world: int, kwargs: dict, resume: dict[int, str]) -> dict:
    """A 2-layer GCN trained by hand under ``RESUME_MODES``; at each epoch ``k`` of
    ``resume`` a new exchanger and model continue from the checkpoint data of the old ones
    (``"full"``: :meth:`HaloExchanger.rng_state` through ``torch.save``/``torch.load(
    weights_only=True)``; ``"generator"``: the state without its ``"buffers"``;
    ``"peek"``: the state is taken, as a checkpoint does, and the old ones go on)."""
    import io

    from lightgraph.nn import GCN, PartitionedGraph

    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    coeff = torch.randn(
        data.num_nodes, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )[plan.global_ids[: plan.num_inner]]
    torch.manual_seed(0)
    model = GCN(F, 3, hidden_channels=8, num_layers=2, dropout=0.0).double()
    ex = HaloExchanger(**kwargs)
    out: dict = {"epochs": [], "buffers": {}}
    for t, mode in enumerate(RESUME_MODES):
        if t in resume:
            buffer = io.BytesIO()
            torch.save((ex.rng_state(), model.state_dict()), buffer)
            buffer.seek(0)
            state, weights = torch.load(buffer, weights_only=True)  # as a checkpoint holds it
            out["buffers"][t] = [(b["layer"], b["direction"]) for b in state["buffers"]]
            if resume[t] == "generator":
                del state["buffers"]
        if t in resume and resume[t] != "peek":
            ex.drain()  # the killed run's exchanger goes away
            torch.manual_seed(1)  # the new run initialises its own weights ...
            model = GCN(F, 3, hidden_channels=8, num_layers=2, dropout=0.0).double()
            model.load_state_dict(weights)  # ... and the checkpoint's replace them
            ex = HaloExchanger(**kwargs)
            ex.set_rng_state(state)
        ex.mode = mode
        ex.start_epoch(t)
        x = (data.x[plan.global_ids[: plan.num_inner]] + t).double().requires_grad_()
        y = model(x, PartitionedGraph(plan, ex, "train"))
        model.zero_grad()
        (y * coeff).sum().backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
        out["epochs"].append({"y": y.detach(), "x_grad": x.grad})
    out["weights"] = {k: v.clone() for k, v in model.state_dict().items()}
    ex.drain()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"policy": FixedBits(2), "boundary_sampling": 0.5, "seed": 1, "transport": "ring"}],
    ids=["fp32", "2bit-sampled-ring"],
)
def test_a_restored_exchanger_continues_the_pipeline_exactly(kwargs: dict) -> None:
    """Resumed before an overlapped or asynchronous epoch (the previous epoch's halo rows
    and gradients, received or still in flight, are in the state) or after a synchronous
    one, the run equals the uninterrupted one bit for bit; restored without its
    ``"buffers"`` it differs from the first asynchronous epoch on."""
    straight = run_distributed(_train, 2, kwargs, {}, timeout=100)
    # Taking the state (it waits for transfers in flight) changes nothing ...
    peeked = run_distributed(_train, 2, kwargs, {k: "peek" for k in RESUME_AT}, timeout=100)
    runs = [(k, run_distributed(_train, 2, kwargs, {k: "full"}, timeout=100)) for k in RESUME_AT]
    # ... and a run resumed at any of these boundaries continues exactly.
    for k, resumed in [(None, peeked), *runs]:
        for a, b in zip(straight, resumed, strict=True):
            # every exchange of the 2 layers, both directions, was carried
            assert all(len(carried) == 4 for carried in b["buffers"].values()), b["buffers"]
            for t in range(len(RESUME_MODES)):
                for name in ("y", "x_grad"):
                    assert torch.equal(a["epochs"][t][name], b["epochs"][t][name]), (k, t, name)
            for name, w in a["weights"].items():
                assert torch.equal(w, b["weights"][name]), (k, name)
    # The control: the same resume before an asynchronous epoch without the carried rows.
    dropped = run_distributed(_train, 2, kwargs, {3: "generator"}, timeout=100)
    for a, b in zip(straight, dropped, strict=True):
        assert torch.equal(a["epochs"][2]["y"], b["epochs"][2]["y"])
        assert not torch.equal(a["epochs"][3]["y"], b["epochs"][3]["y"])
