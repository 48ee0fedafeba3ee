"""Graphormer, GT and their attention layer: shapes, masked-dense references, gradients."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor

from lightgraph.data.graph_set import GraphSetDataModule, SyntheticGraphSet
from lightgraph.data.node_sequence import TokenBatch, build_sequence
from lightgraph.nn.attention import KINDS
from lightgraph.nn.graph_transformer import (
    GT,
    Graphormer,
    MultiheadGraphAttention,
    SequenceBatchNorm,
)
from tests.distributed_helpers import run_distributed

F_IN, OUT = 5, 3


def _sequence(n: int = 24, seed: int = 0, pe_dim: int = 4, **kwargs) -> TokenBatch:
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, 3 * n), generator=gen)
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    x = torch.randn(n, F_IN, generator=gen, dtype=torch.float64)
    item = build_sequence(x, edge_index, y=torch.randint(0, OUT, (n,), generator=gen), **kwargs)
    item.lap_pe = torch.randn(item.num_tokens, pe_dim, generator=gen, dtype=torch.float64)
    return item


def _graph_batch(batch_size: int = 4) -> TokenBatch:
    dm = GraphSetDataModule(
        SyntheticGraphSet(num_graphs=8, num_features=F_IN, feature_noise=1.0),
        batch_size=batch_size,
        laplacian_pe=4,
    )
    dm.setup()
    return next(iter(dm._loader("train", shuffle=False)))


def _models(kind: str, task: str = "node", **kwargs) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    size = {"hidden_channels": 16, "num_layers": 2, "heads": 4}
    return [
        Graphormer(
            F_IN, OUT, kind=kind, task=task, dropout=0.0, attention_dropout=0.0, **size, **kwargs
        ).double(),
        GT(F_IN, OUT, kind=kind, task=task, pe_dim=4, **size, **kwargs).double(),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_forward_shapes_and_gradients(kind: str) -> None:
    item, batch = _sequence(), _graph_batch()
    for task, data, rows in (("node", item, item.num_tokens), ("graph", batch, batch.num_graphs)):
        for model in _models(kind, task):
            out = model(data)
            assert out.shape == (rows, OUT) and out.dtype == torch.float64
            out.square().sum().backward()
            missing = [n for n, p in model.named_parameters() if p.grad is None]
            assert not missing, f"{type(model).__name__}: no gradient for {missing}"
            assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def _reference(attn: MultiheadGraphAttention, x: Tensor, batch: TokenBatch, masked: bool) -> Tensor:
    """Materialised softmax attention: the pattern as a mask and its buckets as bias, or
    (``masked=False``) every pair with its ``dense_bucket`` bias."""
    graph = batch.graph
    S, H, D = x.size(0), attn.heads, attn.head_channels
    q, k, v = (p(x).view(S, H, D) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    table = attn.full_bias_table()
    if masked:
        src, dst = graph.edge_index
        bias = torch.full((H, S, S), float("-inf"), dtype=x.dtype)
        bias[:, dst, src] = table[graph.edge_bucket].t()
    else:
        bias = table[graph.dense_bucket].permute(2, 0, 1)
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(D) + bias
    out = torch.einsum("hij,jhd->ihd", scores.softmax(-1), v)
    return attn.out_proj(out.reshape(S, H * D))


def _attention(kind: str, **kwargs) -> MultiheadGraphAttention:
    torch.manual_seed(1)
    attn = MultiheadGraphAttention(8, 4, kind=kind, num_buckets=9, **kwargs).double()
    torch.nn.init.normal_(attn.bias_table, std=1.0)  # a bias large enough to matter
    return attn


@pytest.mark.parametrize("kind", ["sparse", "cluster_sparse"])
def test_sparse_kinds_equal_dense_attention_under_the_pattern_mask(kind: str) -> None:
    item = _sequence(n=40, dense_limit=0)
    x = torch.randn(item.num_tokens, 8, dtype=torch.float64)
    attn = _attention(kind, num_clusters=3, block_size=4)  # threshold 0: exact layout
    torch.testing.assert_close(attn(x, item.graph), _reference(attn, x, item, masked=True))


@pytest.mark.parametrize("kind", ["dense", "raw"])
def test_dense_kinds_use_the_dense_buckets(kind: str) -> None:
    item = _sequence(n=30)
    x = torch.randn(item.num_tokens, 8, dtype=torch.float64)
    attn = _attention(kind)
    torch.testing.assert_close(attn(x, item.graph), _reference(attn, x, item, masked=False))
    assert attn.last_dense


@pytest.mark.parametrize("kind", ["dense", "raw", "sparse", "cluster_sparse"])
def test_graph_batches_never_attend_across_graphs(kind: str) -> None:
    batch, single = _graph_batch(batch_size=3), _graph_batch(batch_size=1)
    model = _models(kind, "graph", num_clusters=4)[0].eval()
    # The first graph alone gives the same output as inside the batch.
    torch.testing.assert_close(model(batch)[:1], model(single))


@pytest.mark.parametrize("kind", ["dense", "sparse", "cluster_sparse"])
def test_node_outputs_are_permutation_equivariant(kind: str) -> None:
    n = 20
    gen = torch.Generator().manual_seed(4)
    edge_index = torch.randint(0, n, (2, 50), generator=gen)
    x = torch.randn(n, F_IN, generator=gen, dtype=torch.float64)
    perm = torch.randperm(n, generator=gen)  # new node p is old node perm[p]
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n)
    a = build_sequence(x, edge_index)
    b = build_sequence(x[perm], inverse[edge_index])
    a.lap_pe = torch.randn(n + 1, 4, generator=gen, dtype=torch.float64)
    b.lap_pe = torch.cat([a.lap_pe[:1], a.lap_pe[1:][perm]])
    for model in _models(kind, num_clusters=1):
        model.eval()
        out_a, out_b = model(a), model(b)
        torch.testing.assert_close(out_b[1:], out_a[1:][perm])
        torch.testing.assert_close(out_b[0], out_a[0])


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
    # A random graph fails C2/C3: dual falls back to dense on every step.
    model.train()
    model(_sequence(n=30))
    assert model.attention_layers[0].last_dense


def test_presets_follow_table_4_4() -> None:
    slim = Graphormer(F_IN, OUT, preset="slim")
    assert (slim.num_layers, slim.hidden_channels, slim.heads) == (4, 64, 8)
    large = Graphormer(F_IN, OUT, preset="large", num_layers=12)
    assert (large.num_layers, large.hidden_channels, large.heads) == (12, 768, 32)
    gt = GT(F_IN, OUT)
    assert (gt.num_layers, gt.hidden_channels, gt.heads) == (4, 128, 8)
    assert gt.requires_laplacian_pe and not slim.requires_laplacian_pe
    # One spatial-bias table shared by all Graphormer layers (thesis Eq. 2.5).
    tables = {id(layer.attn.bias_table) for layer in slim.layers}
    assert len(tables) == 1


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"`kind` to be one of \('dense', 'raw', 'sparse'"):
        Graphormer(F_IN, OUT, kind="flash")
    with pytest.raises(ValueError, match=r"`heads` to divide the hidden channels \(64\)"):
        Graphormer(F_IN, OUT, heads=6)
    with pytest.raises(ValueError, match="preset 'slim' sets `hidden_channels`=64"):
        Graphormer(F_IN, OUT, preset="slim", hidden_channels=32)
    with pytest.raises(ValueError, match="`preset` to be one of"):
        Graphormer(F_IN, OUT, preset="base")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`task` to be one of \('node', 'graph'\)"):
        GT(F_IN, OUT, task="edge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`norm` to be one of \('layer', 'batch'\)"):
        GT(F_IN, OUT, norm="group")  # type: ignore[arg-type]
    attn = MultiheadGraphAttention(8, 2)
    with pytest.raises(ValueError, match="`threshold` in \\[0, 1\\]"):
        attn.threshold = 1.5
    with pytest.raises(ValueError, match="`kind` to be one of"):
        attn.kind = "linear"
    item = _sequence()
    with pytest.raises(ValueError, match="built for 9 bias buckets .* model has 10"):
        Graphormer(F_IN, OUT, max_distance=6).double()(item)
    item.lap_pe = None
    with pytest.raises(ValueError, match="`batch.lap_pe` of shape \\[tokens, pe_dim=4\\]"):
        GT(F_IN, OUT, pe_dim=4).double()(item)
    with pytest.raises(ValueError, match="expected all 25 tokens .* got 10"):
        MultiheadGraphAttention(8, 2)(torch.randn(10, 8), _sequence().graph)
    big = _graph_batch()
    big.graph.dense_bucket = None
    with pytest.raises(ValueError, match="needs the batch's `dense_bucket`"):
        Graphormer(F_IN, OUT, task="graph", kind="dense", hidden_channels=8, heads=2)(big)


def test_sequence_batch_norm_without_sharding_is_batch_norm() -> None:
    x = torch.randn(30, 6)
    norm, reference = SequenceBatchNorm(6), torch.nn.BatchNorm1d(6)
    torch.testing.assert_close(norm(x, sharded=False), reference(x))
    torch.testing.assert_close(norm.running_var, reference.running_var)


def _graph_parallel_worker(rank: int, world_size: int) -> dict[str, Tensor]:
    from lightgraph.functional.sequence_parallel import SequenceParallel

    item = _sequence(n=22)  # 23 tokens: uneven shards
    shard = item.select_shard(world_size, rank)
    start, end = shard.token_range
    weight = torch.randn(
        item.num_tokens, OUT, generator=torch.Generator().manual_seed(9), dtype=torch.float64
    )
    result = {}
    for model in _models("sparse"):  # GT: batch norm, synchronised over the shards
        name = type(model).__name__
        full = model(item)
        (full * weight).sum().backward()
        full_grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        if isinstance(model, GT):
            model.flips = 0  # the same eigenvector signs as the full pass
        sp = SequenceParallel()
        for m in model.modules():
            if isinstance(m, (MultiheadGraphAttention, SequenceBatchNorm)):
                m.sequence_parallel = sp
        out = model(shard)
        (out * weight[start:end]).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        for g in grads:
            torch.distributed.all_reduce(g)
        result[name] = {"full": full[start:end].detach(), "shard": out.detach()}
        result[name + "_grads"] = list(zip(full_grads, grads, strict=True))
    return result


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2])
def test_graph_parallel_shards_equal_one_process(world_size: int) -> None:
    """Ulysses all-to-all attention and synchronised batch norm on 2 gloo ranks: outputs
    and summed gradients equal the single-process model's."""
    for result in run_distributed(_graph_parallel_worker, world_size):
        for name in ("Graphormer", "GT"):
            torch.testing.assert_close(result[name]["shard"], result[name]["full"])
            for full, summed in result[name + "_grads"]:
                torch.testing.assert_close(summed, full)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_forward_and_gradients_match_cpu(kind: str) -> None:
    item = _sequence()
    for model in _models(kind):
        model.eval()  # no dropout; GT's batch norm uses its running statistics
        out = model(item)
        out.square().sum().backward()
        gpu = copy.deepcopy(model).cuda()
        gpu.zero_grad()
        out_gpu = gpu(item.to("cuda"))
        out_gpu.square().sum().backward()
        torch.testing.assert_close(out_gpu.cpu(), out, rtol=1e-9, atol=1e-9)
        for (name, p), p_gpu in zip(model.named_parameters(), gpu.parameters(), strict=True):
            torch.testing.assert_close(p_gpu.grad.cpu(), p.grad, rtol=1e-8, atol=1e-9, msg=name)
