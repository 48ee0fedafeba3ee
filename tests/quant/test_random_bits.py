"""RandomBits: one independent draw per message (node, device pair), identical on both ends."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data.partition import build_partition_plans
from lightgraph.distributed import HaloExchanger
from lightgraph.quant import RandomBits
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph

DIRECTIONS = ("forward", "backward")


def _plans(parts: int, num_nodes: int = 3000, seed: int = 0):
    data, part = tricky_graph(parts, num_nodes=num_nodes, seed=seed)
    return build_partition_plans(data, part, parts)


def _messages(plans, policy: RandomBits, layer: str, direction: str) -> dict:
    """Every message seen from both ends: ``{(owner, holder): (global ids, owner's widths,
    holder's ids, holder's widths)}``, each rank evaluated on its own plan only."""
    views = [policy.message_bits(p, layer, direction) for p in plans]
    out = {}
    for o, plan_o in enumerate(plans):
        offset = 0
        for h, count in enumerate(plan_o.send_counts):
            if h == o:
                continue
            plan_h = plans[h]
            start = sum(plan_h.halo_counts[:o])
            out[(o, h)] = (
                plan_o.global_ids[plan_o.send_index[offset : offset + count]],
                views[o][0][offset : offset + count],
                plan_h.global_ids[plan_h.num_inner + start : plan_h.num_inner + start + count],
                views[h][1][start : start + count],
            )
            offset += count
    return out


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("parts", [2, 3])
def test_both_ends_of_every_message_agree(parts: int, direction: str) -> None:
    plans = _plans(parts)
    policy = RandomBits(seed=4)
    for p in plans:
        send, recv = policy.message_bits(p, "layer1", direction)
        assert send.shape == (p.send_index.numel(),) and recv.shape == (p.num_halo,)
        assert send.dtype == recv.dtype == torch.long
    for (o, h), (ids_o, bits_o, ids_h, bits_h) in _messages(
        plans, policy, "layer1", direction
    ).items():
        assert torch.equal(ids_o, ids_h), (o, h)  # the same rows, in the same order ...
        assert torch.equal(bits_o, bits_h), (o, h)  # ... with the same widths at both ends


def test_a_node_sent_to_two_peers_gets_independent_widths() -> None:
    plans = _plans(3)
    policy = RandomBits(seed=1)
    width: dict[tuple[int, int], int] = {}  # (global node, holder) -> width
    for (_, h), (ids, bits, _, _) in _messages(plans, policy, "layer0", "forward").items():
        for node, b in zip(ids.tolist(), bits.tolist(), strict=True):
            width[(node, h)] = b
    by_node: dict[int, list[int]] = {}
    for (node, _), b in width.items():
        by_node.setdefault(node, []).append(b)
    twice = [bits for bits in by_node.values() if len(bits) == 2]
    assert len(twice) > 300  # the graph has many nodes held by both other ranks
    differ = sum(a != b for a, b in twice) / len(twice)
    # Independent uniform draws from 3 widths differ with probability 2/3; a per-node draw
    # would never differ. Binomial sd at n > 300 is < 0.03.
    assert abs(differ - 2 / 3) < 0.12


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize(
    ("choices", "probabilities"),
    [((2, 4, 8), None), ((1, 2, 4, 8), (0.1, 0.2, 0.3, 0.4)), ((2, 8), (0.75, 0.25))],
)
def test_the_draw_follows_the_configured_probabilities(choices, probabilities) -> None:
    plans = _plans(3)
    policy = RandomBits(choices=choices, probabilities=probabilities, seed=7)
    bits = torch.cat(
        [
            bits_o
            for direction in DIRECTIONS
            for _, bits_o, _, _ in _messages(plans, policy, "layer1", direction).values()
        ]
    )
    assert bits.numel() > 3000
    counts = torch.stack([(bits == b).sum() for b in choices]).double()
    probs = torch.tensor(
        probabilities if probabilities is not None else [1 / len(choices)] * len(choices),
        dtype=torch.float64,
    )
    # chi-square at p = 0.001 with k - 1 degrees of freedom (1: 10.8, 2: 13.8, 3: 16.3).
    bound = {2: 10.83, 3: 13.82, 4: 16.27}[len(choices)]
    assert _chi_square(counts, probs) < bound


def test_a_zero_probability_width_is_never_drawn() -> None:
    plans = _plans(2)
    policy = RandomBits(choices=(2, 4, 8), probabilities=(0.5, 0.0, 0.5))
    send, recv = policy.message_bits(plans[0], "l", "forward")
    assert set(torch.cat([send, recv]).tolist()) == {2, 8}


def test_deterministic_and_independent_across_layers_directions_redraws_and_seeds() -> None:
    plan = _plans(2)[0]
    policy = RandomBits()
    a = policy.message_bits(plan, "layer0", "forward")[0]
    assert torch.equal(a, RandomBits().message_bits(plan, "layer0", "forward")[0])
    assert not torch.equal(a, policy.message_bits(plan, "layer1", "forward")[0])
    assert not torch.equal(a, policy.message_bits(plan, "layer0", "backward")[0])
    assert not torch.equal(a, RandomBits(seed=1).message_bits(plan, "layer0", "forward")[0])
    policy.redraw()
    assert policy.version == 1
    assert not torch.equal(a, policy.message_bits(plan, "layer0", "forward")[0])
    assert set(a.tolist()) == {2, 4, 8}


def test_the_stream_is_the_documented_one() -> None:
    """Independent reference: the message o -> h is the first `count` draws of the stream
    seeded from (seed, version, layer, direction, o, h), mapped through the cumulative
    probabilities."""
    import hashlib

    plan = _plans(2)[1]  # rank 1 sends to 0 and holds rows of 0
    policy = RandomBits(choices=(2, 4, 8), probabilities=(0.2, 0.3, 0.5), seed=9)
    policy.redraw()

    def reference(owner: int, holder: int, count: int) -> list[int]:
        key = f"9\x1f1\x1fconv\x1fbackward\x1f{owner}\x1f{holder}".encode()
        s = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1
        u = torch.rand(count, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
        return [2 if x < 0.2 else 4 if x < 0.5 else 8 for x in u.tolist()]

    send, recv = policy.message_bits(plan, "conv", "backward")
    assert send.tolist() == reference(1, 0, plan.send_counts[0])
    assert recv.tolist() == reference(0, 1, plan.halo_counts[0])


def test_row_bits_is_refused_with_a_pointer() -> None:
    with pytest.raises(TypeError, match="message_bits"):
        RandomBits().row_bits(_plans(2, 60)[0], torch.arange(3), "l", "forward")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"choices": (2, 3)},
            "RandomBits: expected `choices` to be one of \\(1, 2, 4, 8\\) but got 3",
        ),
        ({"choices": ()}, "non-empty `choices`"),
        ({"probabilities": (0.5, 0.5)}, "expected `probabilities` to hold 3"),
        ({"probabilities": (0.5, -0.1, 0.6)}, "finite non-negative"),
        ({"probabilities": (0.5, 0.5, 0.5)}, "sum to 1 .*sum 1.5"),
        ({"seed": 1.5}, "`seed` to be an integer but got 1.5"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RandomBits(**kwargs)


def _exchange_rows(rank: int, world: int) -> dict:
    """A real quantised exchange both ways: received rows must dequantise to the sent ones."""
    data, part = tricky_graph(world, num_nodes=200, seed=2)
    plan = build_partition_plans(data, part, world)[rank]
    ex = HaloExchanger(policy=RandomBits(choices=(2, 4, 8), seed=3), seed=1)
    x = data.x[plan.global_ids[: plan.num_inner]].clone().requires_grad_(True)
    out = ex(x, plan, stage="train", layer="l0")
    halo = out[plan.num_inner :].detach()
    # d loss / d halo row = a known function of (global id, holder rank).
    weight = torch.randn(data.num_nodes, data.x.size(1), generator=torch.Generator().manual_seed(5))
    (
        out[plan.num_inner :] * weight[plan.global_ids[plan.num_inner :]].double() * (rank + 1)
    ).sum().backward()
    recv_bits = ex.policy.message_bits(plan.halo, "l0", "forward")[1]
    # Backward, the owner receives its rows' gradients: widths aligned with send_index.
    grad_bits = ex.policy.message_bits(plan.halo, "l0", "backward")[0]
    return {"halo": halo, "grad": x.grad, "recv_bits": recv_bits, "grad_bits": grad_bits}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_real_exchange_decodes_with_per_message_widths() -> None:
    world = 3
    results = run_distributed(_exchange_rows, world)
    data, part = tricky_graph(world, num_nodes=200, seed=2)
    plans = build_partition_plans(data, part, world)
    weight = torch.randn(data.num_nodes, data.x.size(1), generator=torch.Generator().manual_seed(5))
    for plan, r in zip(plans, results, strict=True):
        ids = plan.global_ids[plan.num_inner :]
        truth = data.x[ids]
        # One quantisation step of the row's own width bounds the error: a wrong width at
        # either end would decode garbage (or fail to exchange at all).
        step = (truth.amax(1) - truth.amin(1)) / (2 ** r["recv_bits"].double() - 1)
        err = (r["halo"] - truth).abs().amax(1)
        assert bool((err <= step * 1.1 + 1e-9).all())
        # Backward: every holder's gradient of an owned row, quantised at the holder's width.
        expected = torch.zeros(plan.num_inner, data.x.size(1), dtype=torch.float64)
        bound = torch.zeros(plan.num_inner, dtype=torch.float64)
        for h, plan_h in enumerate(plans):
            if h == plan.rank:
                continue
            start = plan_h.num_inner + sum(plan_h.halo_counts[: plan.rank])
            held = plan_h.global_ids[start : start + plan_h.halo_counts[plan.rank]]
            g = weight[held].double() * (h + 1)
            offset = sum(plan.send_counts[:h])
            local = plan.send_index[offset : offset + plan.send_counts[h]]
            bits = r["grad_bits"][offset : offset + plan.send_counts[h]].double()
            expected.index_add_(0, local, g)
            bound.index_add_(0, local, (g.amax(1) - g.amin(1)) / (2**bits - 1))
        err = (r["grad"] - expected).abs().amax(1)
        assert bool((err <= bound * 1.1 + 1e-9).all())
        # Both widths present from more than one peer: the test is not degenerate.
        assert set(r["recv_bits"].tolist()) == {2, 4, 8}
