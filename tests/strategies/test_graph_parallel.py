"""GraphParallelStrategy through the Trainer: 2 graph-parallel ranks equal one process."""

from __future__ import annotations

import math
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.strategies import StrategyRegistry
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lightgraph.data.loader.data_parallel import data_parallel_shard
from lightgraph.data.loader.token_batch import TokenShard, sequence_parallel_shard
from lightgraph.distributed import ParallelContextHolder, SequenceParallel
from lightgraph.functional.sequence_parallel import shard_range
from lightgraph.strategies.graph_parallel import GraphParallelStrategy

NUM_TOKENS, CHANNELS, HEADS, HEAD_DIM, NUM_SEQUENCES = 11, 5, 6, 3, 3


def _randn(seed: int, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, mask: Tensor) -> Tensor:
    """Dense softmax attention: ``q, k, v: [S, h, D]``, ``bias: [h, S, S]``, ``mask: [S, S]``."""
    scores = torch.einsum("shd,thd->hst", q, k) / math.sqrt(q.size(-1)) + bias
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hst,thd->shd", scores.softmax(dim=-1), v)


class GraphParallelRegressor(ParallelContextHolder, pl.LightningModule):
    """One attention layer whose tokens are sharded over the ranks of the strategy."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        width = HEADS * HEAD_DIM
        self.q, self.k, self.v = (nn.Linear(CHANNELS, width) for _ in range(3))
        self.out = nn.Linear(width, CHANNELS)
        self.double()
        # The full attention pattern and bias live on every rank.
        mask = torch.rand(NUM_TOKENS, NUM_TOKENS, generator=torch.Generator().manual_seed(1)) < 0.4
        self.register_buffer("mask", mask | torch.eye(NUM_TOKENS, dtype=torch.bool))
        self.register_buffer("bias", _randn(2, HEADS, NUM_TOKENS, NUM_TOKENS))

    def sequence_parallel(self) -> SequenceParallel:
        # Plain single-device strategies hand no runtime: one rank is the identity.
        sp = self.parallel_context.sequence_parallel
        return sp if sp is not None else SequenceParallel()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        sp = self.sequence_parallel()
        assert sp.world_size == self.trainer.world_size
        x, y = batch
        num_tokens = x.size(0)
        start, end = shard_range(num_tokens, sp.world_size, sp.rank)

        def heads(t: Tensor) -> Tensor:
            return sp.to_heads(t.view(-1, HEADS, HEAD_DIM), num_tokens, layer="qkv")

        local = x[start:end]
        q, k, v = heads(self.q(local)), heads(self.k(local)), heads(self.v(local))
        o = attention(q, k, v, self.bias[sp.head_slice(HEADS)], self.mask)
        o = sp.to_sequence(o, num_tokens, layer="out").reshape(-1, HEADS * HEAD_DIM)
        # The strategy sums gradients over ranks: the local sum over S is this rank's share
        # of the mean over all S tokens.
        sq = (self.out(o) - y[start:end]).pow(2).sum()
        return sq / num_tokens

    def on_train_epoch_end(self) -> None:
        self.log("a2a_bytes", float(self.sequence_parallel().stats.total("train")))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def dataloader() -> DataLoader:
    xs = _randn(3, NUM_SEQUENCES, NUM_TOKENS, CHANNELS)
    ys = _randn(4, NUM_SEQUENCES, NUM_TOKENS, CHANNELS)
    # batch_size=None: one unbatched [S, F] sequence per step, the full one on every rank.
    return DataLoader(TensorDataset(xs, ys), batch_size=None, shuffle=False)


def fit(tmp_path, devices: int) -> tuple[pl.Trainer, GraphParallelRegressor]:
    module = GraphParallelRegressor()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=GraphParallelStrategy(start_method="fork") if devices > 1 else "auto",
        max_epochs=2,
        use_distributed_sampler=False,  # every rank sees every sequence and keeps its shard
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, train_dataloaders=dataloader())
    return trainer, module


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_two_graph_parallel_ranks_match_one_process(tmp_path) -> None:
    initial = [p.detach().clone() for p in GraphParallelRegressor().parameters()]
    single, single_module = fit(tmp_path / "single", devices=1)
    multi, multi_module = fit(tmp_path / "multi", devices=2)
    for (name, p1), p2, p0 in zip(
        single_module.named_parameters(), multi_module.parameters(), initial, strict=True
    ):
        assert not torch.equal(p1, p0), f"{name} did not train"
        torch.testing.assert_close(p2, p1, rtol=1e-10, atol=1e-12, msg=f"parameter {name} differs")
    assert float(single.callback_metrics["a2a_bytes"]) == 0
    # Rank 0 holds 6 of 11 tokens; a token's local heads are 3 heads x 3 dims of float64.
    row, local = HEADS // 2 * HEAD_DIM * 8, 6
    to_heads, to_sequence = local * row, (NUM_TOKENS - local) * row
    per_step = 3 * (to_heads + to_sequence) + (to_sequence + to_heads)  # q, k, v + output
    assert float(multi.callback_metrics["a2a_bytes"]) == 2 * NUM_SEQUENCES * per_step


def test_registered_names() -> None:
    GraphParallelStrategy.register_strategies(StrategyRegistry)
    for name, method in (
        ("graph_parallel", "popen"),
        ("graph_parallel_spawn", "spawn"),
        ("graph_parallel_fork", "fork"),
    ):
        assert name in StrategyRegistry
        strategy = StrategyRegistry.get(name)
        assert isinstance(strategy, GraphParallelStrategy)
        assert strategy._start_method == method
    assert GraphParallelStrategy.strategy_name == "graph_parallel"


def test_bad_start_method() -> None:
    with pytest.raises(ValueError, match="`start_method` in .* but got 'teleport'"):
        GraphParallelStrategy(start_method="teleport")  # type: ignore[arg-type]


def test_ranks_are_one_data_parallel_replica() -> None:
    # Every rank holds a token shard of the same sequences: a sampled data module must not
    # split its batches over the graph-parallel ranks.
    strategy = GraphParallelStrategy()
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 1, "rank": 0}
    assert data_parallel_shard(SimpleNamespace(strategy=strategy)) == (0, 1)


def test_sequence_parallel_kwargs_name_this_ranks_token_shard() -> None:
    strategy = GraphParallelStrategy()
    with pytest.raises(RuntimeError, match="once the Trainer has set up"):
        _ = strategy.sequence_parallel_kwargs
    sp = SimpleNamespace(world_size=3, rank=2)
    context = SimpleNamespace(require_sequence_parallel=lambda owner: sp)
    strategy._context = context  # type: ignore[assignment]
    assert strategy.sequence_parallel_kwargs == {"world_size": 3, "rank": 2}
    assert sequence_parallel_shard(SimpleNamespace(strategy=strategy)) == TokenShard(3, 2)


def test_sequence_parallel_before_setup_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="once the Trainer has set up"):
        _ = GraphParallelStrategy().sequence_parallel
