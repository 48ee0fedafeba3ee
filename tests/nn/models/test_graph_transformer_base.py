"""Graphormer and GT together (their shared plumbing): shapes, gradients, no attention
across graphs, permutation equivariance, graph parallelism equal to one process, CUDA."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

from lightgraph.data.partition.sequences import build_sequence
from lightgraph.functional.attention import KINDS
from lightgraph.nn.attention import MultiheadGraphAttention
from lightgraph.nn.models.graphormer import Graphormer
from lightgraph.nn.models.gt import GT
from lightgraph.nn.norm import SequenceBatchNorm
from tests.distributed_helpers import run_distributed
from tests.nn.models.transformer_checks import F_IN, OUT, graph_batch, models, sequence


@pytest.mark.parametrize("kind", KINDS)
def test_forward_shapes_and_gradients(kind: str) -> None:
    item, batch = sequence(), graph_batch()
    for task, data, rows in (("node", item, item.num_tokens), ("graph", batch, batch.num_graphs)):
        for model in models(kind, task):
            out = model(data)
            assert out.shape == (rows, OUT) and out.dtype == torch.float64
            out.square().sum().backward()
            missing = [n for n, p in model.named_parameters() if p.grad is None]
            assert not missing, f"{type(model).__name__}: no gradient for {missing}"
            assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("kind", ["dense", "raw", "sparse", "cluster_sparse"])
def test_graph_batches_never_attend_across_graphs(kind: str) -> None:
    batch, single = graph_batch(batch_size=3), graph_batch(batch_size=1)
    model = models(kind, "graph", num_clusters=4)[0].eval()
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
    # The token path follows the token order, so it is left out: the graph pattern alone
    # is equivariant.
    a = build_sequence(x, edge_index, token_path=False)
    b = build_sequence(x[perm], inverse[edge_index], token_path=False)
    a.lap_pe = torch.randn(n + 1, 4, generator=gen, dtype=torch.float64)
    b.lap_pe = torch.cat([a.lap_pe[:1], a.lap_pe[1:][perm]])
    for model in models(kind, num_clusters=1):
        model.eval()
        out_a, out_b = model(a), model(b)
        torch.testing.assert_close(out_b[1:], out_a[1:][perm])
        torch.testing.assert_close(out_b[0], out_a[0])


def test_dense_kinds_need_dense_buckets_for_graph_batches() -> None:
    big = graph_batch()
    big.graph.dense_bucket = None
    with pytest.raises(ValueError, match="needs the batch's `dense_bucket`"):
        Graphormer(F_IN, OUT, task="graph", kind="dense", hidden_channels=8, heads=2)(big)


def _graph_parallel_worker(rank: int, world_size: int) -> dict[str, Tensor]:
    from lightgraph.distributed import SequenceParallel

    item = sequence(n=22)  # 23 tokens: uneven shards
    shard = item.select_shard(world_size, rank)
    start, end = shard.token_range
    weight = torch.randn(
        item.num_tokens, OUT, generator=torch.Generator().manual_seed(9), dtype=torch.float64
    )
    result = {}
    for model in models("sparse"):  # GT: batch norm, synchronised over the shards
        name = type(model).__name__
        full = model(item)
        (full * weight).sum().backward()
        full_grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        if isinstance(model, GT):
            model.flips.zero_()  # the same eigenvector signs as the full pass
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


@pytest.mark.cuda
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_forward_and_gradients_match_cpu(kind: str) -> None:
    item = sequence()
    for model in models(kind):
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
