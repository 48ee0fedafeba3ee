"""Quantised sequence-parallel all-to-alls: token plans, error bounds, unbiasedness, bytes.

Every quantised row (one token's values for one peer's heads) must dequantise to within
the quantiser's step ``(max - min) / (2^b - 1)`` of the FP32 exchange (the step actually
sent is at most one bfloat16 ulp, ``2^-7`` relative, above that), stochastic rounding
must be unbiased, the local block must be exact, and the byte counters must match
``ceil(n D b / 8)`` code bytes plus 4 parameter bytes per row (+2 per wide-offset row).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor

from lightgraph.distributed import SequenceParallel
from lightgraph.distributed.sequence_parallel import token_importance
from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.sequence_parallel import (
    shard_range,
    shard_sizes,
    token_plan,
)
from lightgraph.quant import DegreeAwareBits, FixedBits, RandomBits, VarianceAwareBits
from lightgraph.strategies.graph_parallel import GraphParallelStrategy
from tests.distributed_helpers import run_distributed

S, H, D = 11, 4, 3  # 11 tokens: uneven shards on 2 and 4 ranks
STEP_SLACK = 1 + 2.0**-7  # the sent step is at most one bf16 ulp above the ideal one


def _full(seed: int, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _bf16_exact(seed: int, *shape: int) -> Tensor:
    """Values k/8 with |k| <= 64: every row's min is a bfloat16 value (no wide-offset row)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-64, 65, shape, generator=g).float() / 8


def _steps(rows: Tensor, bits: Tensor) -> Tensor:
    """Ideal quantiser step of every row: ``(max - min) / (2^b - 1)``."""
    flat = rows.reshape(rows.size(0), -1)
    span = flat.max(dim=1).values - flat.min(dim=1).values
    return span / (2.0 ** bits.double() - 1).float()


def _check_rows(got: Tensor, exact: Tensor, bits: Tensor, what: str) -> float:
    """|got - exact| within the step of each row; returns the largest error / step."""
    assert got.shape == exact.shape and bits.numel() == got.size(0), what
    step = _steps(exact, bits) * STEP_SLACK
    err = (got - exact).reshape(got.size(0), -1).abs().max(dim=1).values
    bound = step * (1 + 1e-5) + 1e-6
    assert bool((err <= bound).all()), f"{what}: error {err} over bound {bound}"
    return float((err / step.clamp_min(1e-12)).max())


# --------------------------------------------------------------------- token plans
@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("kind", ["heads", "sequence"])
def test_token_plans_match_between_sender_and_receiver(kind: str, world: int) -> None:
    plans = [token_plan(kind, S, world, r) for r in range(world)]
    sizes = shard_sizes(S, world)
    for r, plan in enumerate(plans):
        assert plan.send_counts[r] == plan.halo_counts[r] == 0  # the local block stays
        expected_inner = sizes[r] if kind == "heads" else S
        assert plan.num_inner == expected_inner
        sent = plan.global_ids[plan.send_index].split(plan.send_counts)
        for q, other in enumerate(plans):
            if q == r:
                continue
            # what r sends to q is, row for row, what q receives from r
            assert plan.send_counts[q] == other.halo_counts[r]
            halo = other.global_ids[other.num_inner :].split(other.halo_counts)
            assert torch.equal(sent[q], halo[r])
            tokens = torch.arange(*shard_range(S, world, r if kind == "heads" else q))
            assert torch.equal(sent[q], tokens)


def test_token_plan_by_hand_and_importance() -> None:
    plan = token_plan("sequence", 5, 2, 1, importance=torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0]))
    # rank 1 holds tokens 3, 4; it sends tokens 0-2 of its heads to rank 0 and receives
    # its own two tokens of rank 0's heads.
    assert (plan.num_inner, plan.send_counts, plan.halo_counts) == (5, [3, 0], [2, 0])
    assert plan.send_index.tolist() == [0, 1, 2]
    assert plan.global_ids.tolist() == [0, 1, 2, 3, 4, 3, 4]
    assert plan.importance.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 0.75, 1.0]
    with pytest.raises(ValueError, match=r"`kind` in \('heads', 'sequence'\) but got 'qkv'"):
        token_plan("qkv", 5, 2, 0)
    with pytest.raises(ValueError, match=r"`importance` of shape \[num_tokens=5\]"):
        token_plan("heads", 5, 2, 0, importance=torch.zeros(4))


def test_token_importance_is_the_key_degree_percentile() -> None:
    # keys (row 0) 0, 0, 0, 1, 2, 2 and self-loops: key degrees 4, 2, 3, 1
    edges = torch.tensor([[0, 0, 0, 1, 2, 2, 0, 1, 2, 3], [1, 2, 3, 3, 0, 1, 0, 1, 2, 3]])
    graph = SimpleNamespace(num_tokens=4, edge_index=edges, cache={})
    imp = token_importance(graph)
    # degrees 4, 2, 3, 1 -> ranks 3, 1, 2, 0 of 3; the largest gets 1
    assert imp.tolist() == pytest.approx([1.0, 1 / 3, 2 / 3, 0.0])
    assert token_importance(graph) is imp  # cached on the graph


# ------------------------------------------------------------------ validation
def test_policies_are_validated() -> None:
    sp = SequenceParallel()
    assert sp.policy is None and not sp.quantizes("train")
    with pytest.raises(TypeError, match="VarianceAwareBits cannot size the token all-to-alls"):
        sp.set_policy(VarianceAwareBits())
    with pytest.raises(TypeError, match="VarianceAwareBits cannot size the token all-to-alls"):
        SequenceParallel(policy=VarianceAwareBits())
    with pytest.raises(TypeError, match="VarianceAwareBits cannot size"):
        GraphParallelStrategy(quantization=VarianceAwareBits())
    with pytest.raises(TypeError, match="`policy` to be a lightgraph.quant.BitWidthPolicy"):
        sp.set_policy(4)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`quantization` to be a lightgraph.quant.BitWidthPolicy"):
        GraphParallelStrategy(quantization="fixed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`seed` to be an integer"):
        GraphParallelStrategy(seed=1.5)  # type: ignore[arg-type]
    policy = FixedBits(4)
    strategy = GraphParallelStrategy(quantization=policy, seed=3)
    assert strategy.quantization is policy and strategy.seed == 3
    sp.set_policy(policy)
    assert sp.policy is policy and "FixedBits(base_bits=4)" in repr(sp)
    # one process: the identity, nothing quantised, nothing sent
    x = _full(0, 5, 2, 3)
    assert sp.to_heads(x, 5) is x and sp.stats.total() == 0
    # a degree-aware policy needs the token importance
    sp.set_policy(DegreeAwareBits(2))
    assert sp.needs_token_importance
    with pytest.raises(RuntimeError, match="DegreeAwareBits sizes token rows by their importance"):
        sp.message_bits("heads", 5, "qkv", "forward")
    with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
        sp.set_token_importance(torch.tensor([0.5, 2.0]))
    sp.set_token_importance(torch.linspace(0, 1, 4))
    with pytest.raises(ValueError, match="importance holds 4 tokens but the exchange has"):
        sp.message_bits("heads", 5, "qkv", "forward")
    plan = sp.plan("heads", 4)
    assert plan.importance.tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1])
    sp.set_token_importance(torch.linspace(0, 1, 4))  # equal values (a batch's new copy)
    assert sp.plan("heads", 4) is plan
    sp.set_token_importance(torch.linspace(0, 0.5, 4))
    assert sp.plan("heads", 4) is not plan


# ------------------------------------------------------------ error bounds (P ranks)
def _bounds(rank: int, world: int, policy_name: str) -> dict:
    policies = {
        "fixed2": lambda: FixedBits(2),
        "fixed8": lambda: FixedBits(8),
        "random": lambda: RandomBits(choices=(1, 2, 4, 8)),
        "degree": lambda: DegreeAwareBits(1),
    }
    sp = SequenceParallel(stats=ExchangeStats(), policy=policies[policy_name](), seed=7)
    if policy_name == "degree":
        sp.set_token_importance(torch.linspace(0, 1, S))
    full = _full(0, S, H, 3, D)  # stacked q, k, v as the attention layer sends them
    start, end = shard_range(S, world, rank)
    hs = sp.head_slice(H)
    sizes = shard_sizes(S, world)
    ranges = [shard_range(S, world, q) for q in range(world)]
    h = H // world

    # forward of to_heads: rows of peer q are the tokens of q's shard, this rank's heads
    x = full[start:end].clone().requires_grad_()
    y = sp.to_heads(x, S, layer="qkv")
    exact = full[:, hs]
    _, recv = sp.message_bits("heads", S, "qkv", "forward")
    worst = 0.0
    for q in range(world):
        a, b = ranges[q]
        if q == rank:
            assert torch.equal(y[a:b], exact[a:b]), "local block must be exact"
        else:
            worst = max(worst, _check_rows(y[a:b], exact[a:b], recv[q], f"to_heads from {q}"))
    # backward of to_heads: the gradient of this rank's tokens for q's heads comes from q
    w = _full(1, S, H, 3, D)
    (w[:, hs] * y).sum().backward()
    sent_bw, _ = sp.message_bits("heads", S, "qkv", "backward")
    for q in range(world):
        cols = slice(q * h, (q + 1) * h)
        got, want = x.grad[:, cols], w[start:end, cols]
        if q == rank:
            assert torch.equal(got, want)
        else:
            worst = max(worst, _check_rows(got, want, sent_bw[q], f"to_heads grad from {q}"))

    # forward of to_sequence from the exact head shard
    z_in = full[:, hs, 0].clone().requires_grad_()
    z = sp.to_sequence(z_in, S, layer="out")
    _, recv_seq = sp.message_bits("sequence", S, "out", "forward")
    for q in range(world):
        cols = slice(q * h, (q + 1) * h)
        got, want = z[:, cols], full[start:end, cols, 0]
        if q == rank:
            assert torch.equal(got, want)
        else:
            worst = max(worst, _check_rows(got, want, recv_seq[q], f"to_sequence from {q}"))
    # backward of to_sequence: the gradient of shard q's tokens (this rank's heads) from q
    v = _full(2, S, H, D)
    (v[start:end] * z).sum().backward()
    sent_seq_bw, _ = sp.message_bits("sequence", S, "out", "backward")
    for q in range(world):
        a, b = ranges[q]
        got, want = z_in.grad[a:b], v[a:b, hs]
        if q == rank:
            assert torch.equal(got, want)
        else:
            worst = max(worst, _check_rows(got, want, sent_seq_bw[q], f"to_sequence grad {q}"))
    assert sizes[rank] == end - start
    widths = torch.cat([t for t in recv + sent_bw + recv_seq + sent_seq_bw if t.numel()])
    return {"worst": worst, "widths": sorted(set(widths.tolist()))}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("policy", ["fixed2", "fixed8", "random", "degree"])
def test_quantised_exchanges_stay_within_the_step(world: int, policy: str) -> None:
    results = run_distributed(_bounds, world, policy, timeout=50)
    widths = sorted({b for r in results for b in r["widths"]})
    if policy == "fixed2":
        assert widths == [2]
    elif policy == "fixed8":
        assert widths == [8]
    else:
        assert len(widths) >= 3  # mixed widths (1..8 bits) on the wire
    # stochastic rounding moves values by less than one step, and does use most of it
    assert all(0.0 < r["worst"] <= STEP_SLACK for r in results)


def _eight_bits(rank: int, world: int) -> float:
    sp = SequenceParallel(policy=FixedBits(8))
    full = _full(0, S, H, 3, D)
    start, end = shard_range(S, world, rank)
    y = sp.to_heads(full[start:end], S, layer="qkv")
    exact = full[:, sp.head_slice(H)]
    return float((y - exact).norm() / exact.norm())


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_eight_bits_are_close() -> None:
    for rel in run_distributed(_eight_bits, 2, timeout=50):
        assert rel < 5e-3  # 8-bit steps of a ~4-wide row: ~1.6e-2, errors ~1/4 of that


# ------------------------------------------------------------------ unbiasedness
def _mean_error(rank: int, world: int, draws: int) -> dict:
    sp = SequenceParallel(policy=FixedBits(1), seed=rank + 11)
    full = _full(0, S, H, D)
    start, end = shard_range(S, world, rank)
    exact = full[:, sp.head_slice(H)]
    total = torch.zeros_like(exact, dtype=torch.float64)
    single = 0.0
    for _ in range(draws):
        err = (sp.to_heads(full[start:end], S, layer="qkv") - exact).double()
        total += err
        single = max(single, float(err.abs().mean()))
    mean = total / draws
    step = _steps(exact.reshape(S, -1), torch.ones(S, dtype=torch.long)).double()
    # every element's error has variance <= step^2 / 4: sigma of the mean <= step / (2 sqrt N)
    sigma = (step / (2 * math.sqrt(draws))).view(S, 1, 1).expand_as(mean)
    mine = torch.zeros(S, dtype=torch.bool)
    mine[start:end] = True
    remote = ~mine
    z = (mean[remote].abs() / sigma[remote]).max()
    return {
        "z": float(z),
        "mean_abs": float(mean[remote].abs().mean()),
        "single": single,
        "local": float(mean[mine].abs().max()),
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_stochastic_rounding_is_unbiased() -> None:
    draws = 400
    for r in run_distributed(_mean_error, 2, draws, timeout=50):
        assert r["local"] == 0.0
        assert r["z"] < 5.0  # no element's mean error beyond 5 sigma of an unbiased rounding
        # averaging removes the error: 1-bit rounding errors are large one at a time
        assert r["mean_abs"] < 0.1 * r["single"]


# ------------------------------------------------------------------ reproducibility
def _seeded(rank: int, world: int) -> dict:
    full = _full(0, S, H, D)
    start, end = shard_range(S, world, rank)
    outs = {}
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        sp = SequenceParallel(policy=FixedBits(2), seed=seed)
        outs[name] = sp.to_heads(full[start:end], S, layer="qkv")
    # evaluation stays FP32 even with a policy
    sp = SequenceParallel(policy=FixedBits(2))
    exact = SequenceParallel().to_heads(full[start:end], S, stage="val")
    val = sp.to_heads(full[start:end], S, stage="val")
    return {
        "same": torch.equal(outs["a"], outs["b"]),
        "differ": not torch.equal(outs["a"], outs["c"]),
        "val_exact": torch.equal(val, exact),
        "val_bytes": sp.stats.by_layer("val"),
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_seeded_noise_is_reproducible_and_evaluation_is_fp32() -> None:
    for rank, r in enumerate(run_distributed(_seeded, 2, timeout=50)):
        assert r["same"] and r["differ"] and r["val_exact"]
        local = shard_sizes(S, 2)[rank]
        assert r["val_bytes"] == {("attention", "forward", "data"): local * (H // 2) * D * 4}


# --------------------------------------------------------------------------- bytes
def _bytes(rank: int, world: int) -> dict:
    # None: FP32; 0: RandomBits; else FixedBits(bits)
    return {bits: _bytes_of(rank, world, bits) for bits in (None, 1, 2, 4, 8, 0)}


def _bytes_of(rank: int, world: int, bits: int | None) -> dict:
    policy = None if bits is None else (RandomBits(seed=3) if bits == 0 else FixedBits(bits))
    sp = SequenceParallel(stats=ExchangeStats(), policy=policy)
    full = _bf16_exact(0, S, H, 3, D)
    start, end = shard_range(S, world, rank)
    # every exchange gets bf16-exact rows (its input, or its upstream gradient)
    x = full[start:end].clone().requires_grad_()
    y = sp.to_heads(x, S, layer="qkv")
    (y * _bf16_exact(1, S, H // world, 3, D)).sum().backward()
    z = _bf16_exact(2, S, H // world, D).requires_grad_()
    out = sp.to_sequence(z, S, layer="out")
    (out * _bf16_exact(3, end - start, H, D)).sum().backward()
    widths = {}
    if policy is not None:
        for kind, layer in (("heads", "qkv"), ("sequence", "out")):
            for direction in ("forward", "backward"):
                widths[(layer, direction)] = sp.message_bits(kind, S, layer, direction)
    return {"bytes": sp.stats.by_layer("train"), "widths": widths}


def _code_bytes(bits: Tensor, dim: int) -> int:
    return sum(-(-int((bits == b).sum()) * dim * b // 8) for b in (1, 2, 4, 8))


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
@pytest.mark.parametrize("world", [2, 4])
def test_bytes_match_the_formula(world: int) -> None:
    runs = run_distributed(_bytes, world, timeout=50)
    fp32 = [run[None] for run in runs]
    sizes = shard_sizes(S, world)
    h = H // world
    dims = {"qkv": h * 3 * D, "out": h * D}
    for bits in (1, 2, 4, 8, 0):  # 0: RandomBits
        results = [run[bits] for run in runs]
        for rank, result in enumerate(results):
            local = sizes[rank]
            got = result["bytes"]
            for layer, direction in (("qkv", "forward"), ("out", "backward")):
                rows = (world - 1) * local  # this rank's tokens, to every peer
                assert fp32[rank]["bytes"][(layer, direction, "data")] == rows * dims[layer] * 4
                # the same rows quantised: codes per peer message, 4 parameter bytes per row
                sent, received = result["widths"][(layer, direction)]
                peers = sent if direction == "forward" else received
                if bits:
                    expected = sum(-(-local * dims[layer] * bits // 8) for _ in range(world - 1))
                else:
                    expected = sum(_code_bytes(b, dims[layer]) for b in peers)
                assert got[(layer, direction, "data")] == expected, (bits, layer, direction)
                assert got[(layer, direction, "params")] == 4 * rows  # no wide-offset rows
                if bits:  # codes are b/32 of FP32 up to the byte padding of each message
                    fp = fp32[rank]["bytes"][(layer, direction, "data")]
                    assert abs(expected * 32 / bits - fp) <= 32 / bits * 8 * (world - 1)
            for layer, direction in (("qkv", "backward"), ("out", "forward")):
                rows = S - local  # the other ranks' tokens, each to its owner
                assert fp32[rank]["bytes"][(layer, direction, "data")] == rows * dims[layer] * 4
                sent, received = result["widths"][(layer, direction)]
                peers = sent if direction == "forward" else received
                if bits:
                    expected = sum(
                        -(-sizes[q] * dims[layer] * bits // 8) for q in range(world) if q != rank
                    )
                else:
                    expected = sum(_code_bytes(b, dims[layer]) for b in peers)
                assert got[(layer, direction, "data")] == expected, (bits, layer, direction)
                assert got[(layer, direction, "params")] == 4 * rows


def _wide_rows(rank: int, world: int) -> dict:
    # rows far from zero relative to their range need float32 zero points: +2 bytes each
    sp = SequenceParallel(policy=FixedBits(4))
    full = 1000.0 + _full(0, S, H, D) * 1e-2
    start, end = shard_range(S, world, rank)
    y = sp.to_heads(full[start:end], S)
    err = float((y - full[:, sp.head_slice(H)]).abs().max())
    return {"bytes": sp.stats.by_layer("train"), "err": err}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_wide_offset_rows_are_counted_as_parameters() -> None:
    for rank, r in enumerate(run_distributed(_wide_rows, 2, timeout=50)):
        rows = shard_sizes(S, 2)[rank]
        params = r["bytes"][("attention", "forward", "params")]
        assert 4 * rows < params <= 6 * rows and (params - 4 * rows) % 2 == 0
        assert r["bytes"][("attention", "forward", "data")] == -(-rows * (H // 2) * D * 4 // 8)
        assert r["err"] < 0.02  # a 4-bit step of a ~0.06-wide row, not of 1000
