"""SequenceParallel: shard arithmetic, all-to-all layouts, gradients, bytes, attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
from torch import Tensor, nn

from lightgraph.distributed import SequenceParallel
from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.sequence_parallel import shard_range, shard_sizes
from tests.distributed_helpers import run_distributed


def _full(seed: int, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------- shard arithmetic
def test_shard_sizes_and_ranges_cover_the_sequence_in_order() -> None:
    for num_tokens in range(1, 25):
        for world in range(1, num_tokens + 1):
            sizes = shard_sizes(num_tokens, world)
            assert len(sizes) == world and sum(sizes) == num_tokens
            # Uneven S: the first S % P ranks hold one token more.
            extra = num_tokens % world
            assert sizes == [num_tokens // world + (r < extra) for r in range(world)]
            ranges = [shard_range(num_tokens, world, r) for r in range(world)]
            assert ranges[0][0] == 0 and ranges[-1][1] == num_tokens
            for r, (start, end) in enumerate(ranges):
                assert end - start == sizes[r]
                if r:
                    assert start == ranges[r - 1][1]
    assert shard_sizes(11, 3) == [4, 4, 3]
    assert shard_range(11, 3, 2) == (8, 11)


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: shard_sizes(2, 3),
            "`num_tokens` to be at least `world_size` \\(3\\).*got num_tokens=2",
        ),
        (lambda: shard_sizes(5, 0), "`world_size` to be a positive integer but got 0"),
        (lambda: shard_sizes(5.0, 2), "`num_tokens` to be an integer but got 5.0"),
        (lambda: shard_range(5, 2, 2), "`rank` to be an integer in \\[0, 2\\) but got 2"),
    ],
)
def test_shard_bad_input(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------ single process
def test_single_process_is_the_identity_and_sends_nothing() -> None:
    sp = SequenceParallel()
    assert (sp.world_size, sp.rank) == (1, 0)
    x = _full(0, 5, 3, 2).requires_grad_()
    assert sp.to_heads(x, 5) is x
    assert sp.to_sequence(x, 5) is x
    assert torch.equal(sp.gather_tokens(x, 5), x)
    assert sp.head_slice(3) == slice(0, 3)
    sp.check_heads(7)
    assert sp.stats.total() == 0
    with pytest.raises(ValueError, match="expected `x` to hold 6 tokens .* but got 5"):
        sp.to_heads(x, 6)
    with pytest.raises(ValueError, match="`num_heads` to be a positive integer but got 0"):
        sp.check_heads(0)
    with pytest.raises(TypeError, match="`stats` to be an ExchangeStats"):
        SequenceParallel(stats={})  # type: ignore[arg-type]


# ---------------------------------------------------------- layouts and gradients
def _layouts(rank: int, world: int, num_tokens: int, heads: int, dim: int) -> dict:
    sp = SequenceParallel(stats=ExchangeStats())
    assert (sp.world_size, sp.rank) == (world, rank)
    full = _full(0, num_tokens, heads, dim)
    start, end = shard_range(num_tokens, world, rank)
    hs = sp.head_slice(heads)
    assert hs == slice(rank * heads // world, (rank + 1) * heads // world)

    # to_heads equals slicing the full tensor; to_sequence undoes it.
    x = full[start:end].clone().requires_grad_()
    h = sp.to_heads(x, num_tokens, layer="qkv")
    torch.testing.assert_close(h, full[:, hs], rtol=0, atol=0)
    back = sp.to_sequence(h, num_tokens, layer="out")
    torch.testing.assert_close(back, x, rtol=0, atol=0)
    assert torch.equal(sp.gather_tokens(x, num_tokens), full)

    # Gradients: the global loss sum_r <w[:, heads_r], to_heads(x_r)> = <w, full>.
    sp.stats.reset()
    w = _full(1, num_tokens, heads, dim)
    x = full[start:end].clone().requires_grad_()
    (w[:, hs] * sp.to_heads(x, num_tokens, layer="qkv")).sum().backward()
    torch.testing.assert_close(x.grad, w[start:end], rtol=0, atol=0)
    # ... and sum_r <w[shard_r], to_sequence(y_r)> = <w, full> for y_r = full[:, heads_r].
    y = full[:, hs].clone().requires_grad_()
    (w[start:end] * sp.to_sequence(y, num_tokens, layer="out")).sum().backward()
    torch.testing.assert_close(y.grad, w[:, hs], rtol=0, atol=0)
    return {"bytes": sp.stats.by_layer("train")}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world", [2, 3])
def test_layouts_gradients_and_bytes_with_uneven_shards(world: int) -> None:
    num_tokens, heads, dim = 11, 6, 4  # 11 tokens: uneven shards on 2 and 3 ranks
    results = run_distributed(_layouts, world, num_tokens, heads, dim, timeout=50)
    row = heads // world * dim * 8  # float64 bytes of one token's local heads
    for rank, result in enumerate(results):
        local = shard_sizes(num_tokens, world)[rank]
        # to_heads sends its tokens of the other ranks' heads; to_sequence sends the other
        # ranks' tokens of its heads; each backward is the other's forward.
        to_heads_bytes = (world - 1) * local * row
        to_sequence_bytes = (num_tokens - local) * row
        assert result["bytes"] == {
            ("out", "backward", "data"): to_heads_bytes,
            ("out", "forward", "data"): to_sequence_bytes,
            ("qkv", "backward", "data"): to_sequence_bytes,
            ("qkv", "forward", "data"): to_heads_bytes,
        }
    if world == 3:  # literal numbers: rank 0 holds 4 tokens, 2 heads x 4 dims of float64
        assert results[0]["bytes"][("qkv", "forward", "data")] == 2 * 4 * 64 == 512
        assert results[0]["bytes"][("qkv", "backward", "data")] == 7 * 64 == 448


def _indivisible_heads(rank: int, world: int) -> str:
    sp = SequenceParallel()
    with pytest.raises(ValueError) as info:
        sp.to_heads(torch.zeros(shard_sizes(10, world)[rank], 3, 2), 10)
    with pytest.raises(ValueError):
        sp.head_slice(5)
    sp.check_heads(4)
    return str(info.value)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_heads_not_divisible_by_world_size_are_rejected() -> None:
    messages = run_distributed(_indivisible_heads, 2, timeout=50)
    for message in messages:
        assert "`num_heads` to be a multiple of the sequence-parallel world size 2" in message
        assert "but got 3" in message
        assert "(1, 3)" in message  # the world sizes 3 heads allow


# ------------------------------------------------------ graph-parallel attention
def reference_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, mask: Tensor) -> Tensor:
    """Dense softmax attention: ``q, k, v: [S, h, D]``, ``bias: [h, S, S]``, ``mask: [S, S]``."""
    scores = torch.einsum("shd,thd->hst", q, k) / math.sqrt(q.size(-1)) + bias
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hst,thd->shd", scores.softmax(dim=-1), v)


class TinyAttention(nn.Module):
    """Projections on local tokens, attention over all tokens with this rank's heads."""

    def __init__(self, channels: int = 5, heads: int = 6, head_dim: int = 3) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.q = nn.Linear(channels, heads * head_dim)
        self.k = nn.Linear(channels, heads * head_dim)
        self.v = nn.Linear(channels, heads * head_dim)
        self.out = nn.Linear(heads * head_dim, channels)

    def forward(self, x: Tensor, bias: Tensor, mask: Tensor, sp: SequenceParallel, num_tokens: int):
        def split(t: Tensor) -> Tensor:
            return sp.to_heads(t.view(-1, self.heads, self.head_dim), num_tokens, layer="qkv")

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        o = reference_attention(q, k, v, bias[sp.head_slice(self.heads)], mask)
        o = sp.to_sequence(o, num_tokens, layer="out")
        return self.out(o.reshape(-1, self.heads * self.head_dim))


def _attention_inputs(num_tokens: int = 11, channels: int = 5, heads: int = 6):
    x = _full(0, num_tokens, channels)
    bias = _full(1, heads, num_tokens, num_tokens)
    mask = torch.rand(num_tokens, num_tokens, generator=torch.Generator().manual_seed(2)) < 0.4
    mask |= torch.eye(num_tokens, dtype=torch.bool)  # every token attends to itself
    weight = _full(3, num_tokens, channels)
    torch.manual_seed(0)
    model = TinyAttention(channels, heads).double()
    return x, bias, mask, weight, model


def _parallel_attention(rank: int, world: int) -> dict:
    x, bias, mask, weight, model = _attention_inputs()
    num_tokens = x.size(0)
    start, end = shard_range(num_tokens, world, rank)
    sp = SequenceParallel()
    out = model(x[start:end], bias, mask, sp, num_tokens)
    (out * weight[start:end]).sum().backward()
    grads = {}
    for name, p in model.named_parameters():
        dist.all_reduce(p.grad)  # sum: each rank holds its share of the global gradient
        grads[name] = p.grad
    return {"out": out.detach(), "grads": grads}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world", [2, 3])
def test_graph_parallel_attention_equals_single_process(world: int) -> None:
    x, bias, mask, weight, model = _attention_inputs()
    num_tokens = x.size(0)
    out = model(x, bias, mask, SequenceParallel(), num_tokens)
    (out * weight).sum().backward()
    results = run_distributed(_parallel_attention, world, timeout=50)
    for rank, result in enumerate(results):
        start, end = shard_range(num_tokens, world, rank)
        torch.testing.assert_close(result["out"], out[start:end].detach(), rtol=1e-12, atol=1e-12)
        for name, p in model.named_parameters():
            torch.testing.assert_close(
                result["grads"][name], p.grad, rtol=1e-10, atol=1e-12, msg=f"grad of {name}"
            )


def test_rng_state_round_trips_and_recreates_the_lazy_generator() -> None:
    sp = SequenceParallel(seed=2)
    assert sp.rng_state() == {"generator": None}
    torch.rand(3, generator=sp._rng())
    state = sp.rng_state()
    expected = torch.rand(4, generator=sp._rng())
    resumed = SequenceParallel(seed=2)
    resumed.set_rng_state(state)
    assert torch.equal(torch.rand(4, generator=resumed._rng()), expected)
    assert not torch.equal(torch.rand(4, generator=SequenceParallel(seed=2)._rng()), expected)
    with pytest.raises(TypeError, match="SequenceParallel.set_rng_state: expected `state`"):
        resumed.set_rng_state({"generators": None})
