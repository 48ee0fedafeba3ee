"""ExchangeGroupStrategy, the base of lightgraph's DDP strategies: start-method check, the
registered aliases, the ParallelContext hand-off and summed (not averaged) gradients."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
from lightning.fabric.strategies import _StrategyRegistry
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lightgraph.distributed import ParallelContext, ParallelContextHolder, SequenceParallel
from lightgraph.strategies import ExchangeGroupStrategy
from lightgraph.strategies.exchange_group import START_METHODS

X = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
W0 = torch.tensor([0.25, 0.5, -1.0], dtype=torch.float64)


class TinyGroupStrategy(ExchangeGroupStrategy):
    """The smallest concrete strategy: a SequenceParallel runtime on the exchange group."""

    strategy_name = "lg_test_tiny_group"
    strategy_description = "test strategy"

    def build_context(self, group: dist.ProcessGroup) -> ParallelContext:
        return ParallelContext(sequence_parallel=SequenceParallel(group))


class RankScaledLoss(ParallelContextHolder, pl.LightningModule):
    """Rank r's loss is (r + 1) * w . x, so its gradient is (r + 1) * x (known by hand)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(W0.clone())

    def training_step(self, batch: tuple[Tensor], batch_idx: int) -> Tensor:
        (x,) = batch
        if isinstance(self.trainer.strategy, TinyGroupStrategy):
            # The hand-off: the runtime built on the strategy's own group is attached.
            sp = self.parallel_context.sequence_parallel
            assert isinstance(sp, SequenceParallel), self.parallel_context
            assert sp.world_size == 2 and sp.group is not None
            assert sp.group is self.trainer.strategy._exchange_group
        return (self.global_rank + 1) * (x[0] @ self.w)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1.0)


def one_step(tmp_path, strategy) -> Tensor:
    module = RankScaledLoss()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_steps=1,
        use_distributed_sampler=False,  # both ranks see the same batch
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, DataLoader(TensorDataset(X), batch_size=1))
    return module.w.detach()  # rank 0's weights, returned by the fork launcher


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "strategy,rank_sum",
    [
        # Plain DDP averages the ranks' gradients (1 x + 2 x) / 2.
        ("ddp_fork", 1.5),
        # The sum hook adds them: 1 x + 2 x.
        (TinyGroupStrategy(start_method="fork"), 3.0),
    ],
    ids=["ddp_averages", "exchange_group_sums"],
)
def test_gradients_are_summed_over_the_ranks(tmp_path, strategy, rank_sum: float) -> None:
    w = one_step(tmp_path, strategy)
    torch.testing.assert_close(w, W0 - rank_sum * X[0], rtol=0, atol=1e-12)


def test_start_method_is_checked() -> None:
    for method in START_METHODS:
        assert TinyGroupStrategy(start_method=method)._start_method == method
    with pytest.raises(
        ValueError,
        match=r"^TinyGroupStrategy: expected `start_method` in \('popen', 'spawn', 'fork', "
        r"'forkserver'\) but got 'teleport'\.$",
    ):
        TinyGroupStrategy(start_method="teleport")  # type: ignore[arg-type]


def test_the_base_is_abstract() -> None:
    with pytest.raises(TypeError, match="build_context"):
        ExchangeGroupStrategy()  # type: ignore[abstract]


def test_runtime_before_setup_is_a_clear_error() -> None:
    with pytest.raises(
        RuntimeError, match=r"^TinyGroupStrategy\.parallel_context is available once"
    ):
        _ = TinyGroupStrategy().parallel_context


def test_aliases_are_registered_once_with_their_start_methods() -> None:
    registry = _StrategyRegistry()
    TinyGroupStrategy.register_strategies(registry)
    TinyGroupStrategy.register_strategies(registry)  # again: no duplicate-name error
    expected = {
        "lg_test_tiny_group": "popen",
        "lg_test_tiny_group_spawn": "spawn",
        "lg_test_tiny_group_fork": "fork",
    }
    assert sorted(registry.available_strategies()) == sorted(expected)
    for name, method in expected.items():
        strategy = registry.get(name)
        assert type(strategy) is TinyGroupStrategy
        assert strategy._start_method == method
        assert registry[name]["description"] == f"test strategy (start_method={method!r})"
