"""FlowParallelStrategy through the Trainer: 2 pipeline stages train like one process (M = 1),
checkpoints hold every stage, and training resumes from them on every rank."""

from __future__ import annotations

import os
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import StrategyRegistry
from torch import Tensor
from torch.utils.data import DataLoader

from lightgraph.distributed import FlowPipeline, ParallelContextHolder
from lightgraph.nn import RevGCN
from lightgraph.strategies import FlowParallelStrategy
from lightgraph.strategies.flow_parallel import RANK_STATES_KEY

NODES, FEATURES, HIDDEN, CLASSES = 40, 5, 8, 3


def _graph() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(NODES, FEATURES, generator=gen, dtype=torch.float64)
    edge_index = torch.randint(0, NODES, (2, 160), generator=gen)
    y = torch.randint(0, CLASSES, (NODES,), generator=gen)
    train_mask = torch.rand(NODES, generator=gen) < 0.6
    return x, edge_index, y, train_mask


class FlowModule(ParallelContextHolder, pl.LightningModule):
    """A RevGCN trained on the whole graph; through the strategy's FlowPipeline when there
    is one (manual optimisation: the pipeline runs forward and backward itself)."""

    def __init__(self, out_dir: str) -> None:
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.model = RevGCN(FEATURES, HIDDEN, CLASSES, num_layers=4).double()
        self.out_dir = out_dir
        self.losses: list[float] = []

    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> None:
        x, edge_index, y, train_mask = batch
        opt = self.optimizers()
        opt.zero_grad()
        pipe = self.parallel_context.flow_pipeline
        if pipe is None:
            loss = F.cross_entropy(self.model(x, edge_index)[train_mask], y[train_mask])
            self.manual_backward(loss)
        else:
            if not pipe.built:
                pipe.build(self.model, edge_index, x.size(0))  # M from the strategy
            loss = pipe.broadcast_loss(pipe.step(x if pipe.is_first else None, y, train_mask))
        opt.step()
        self.losses.append(float(loss.detach()))

    def on_train_end(self) -> None:
        pipe = self.parallel_context.flow_pipeline
        m = pipe.microbatches.num_microbatches if pipe is not None else 1
        torch.save(
            {"losses": self.losses, "m": m},
            os.path.join(self.out_dir, f"rank{self.global_rank}.pt"),
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.05)


def _fit(out: Path, devices: int, max_epochs: int, ckpt_path: str | None = None) -> FlowModule:
    out.mkdir(parents=True, exist_ok=True)
    module = FlowModule(str(out))
    strategy = (
        FlowParallelStrategy(num_microbatches=1, start_method="fork") if devices > 1 else "auto"
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy,
        max_epochs=max_epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=out / "ckpt", filename="{epoch}", save_top_k=-1)],
        num_sanity_val_steps=0,
        default_root_dir=out,
    )
    # One full-graph batch per epoch; every rank sees it (the strategy's sampler: 1 replica).
    trainer.fit(
        module, train_dataloaders=DataLoader([_graph()], batch_size=None), ckpt_path=ckpt_path
    )
    return module


def _state(path: Path) -> dict[str, Tensor]:
    return torch.load(path, weights_only=False)["state_dict"]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_stages_train_like_one_process_and_checkpoint_every_stage(tmp_path) -> None:
    single = _fit(tmp_path / "single", devices=1, max_epochs=4)
    multi = _fit(tmp_path / "multi", devices=2, max_epochs=3)
    ref_losses = single.losses
    assert len(ref_losses) == 4
    for rank in range(2):  # every rank logged the global loss of every step
        record = torch.load(tmp_path / "multi" / f"rank{rank}.pt")
        assert record["m"] == 1
        torch.testing.assert_close(record["losses"], ref_losses[:3], rtol=1e-9, atol=1e-12)
    # Every epoch's checkpoint holds both stages' trained parameters.
    initial = FlowModule(str(tmp_path)).state_dict()
    for epoch in range(3):
        got = _state(tmp_path / "multi" / "ckpt" / f"epoch={epoch}.ckpt")
        ref = _state(tmp_path / "single" / "ckpt" / f"epoch={epoch}.ckpt")
        assert got.keys() == ref.keys()
        for name in ref:
            torch.testing.assert_close(got[name], ref[name], rtol=1e-9, atol=1e-12, msg=name)
            if name.endswith("weight"):
                assert not torch.equal(got[name], initial[name]), f"{name} did not train"
        optimizer_state = torch.load(
            tmp_path / "multi" / "ckpt" / f"epoch={epoch}.ckpt", weights_only=False
        )["optimizer_states"][0]
        assert len(optimizer_state[RANK_STATES_KEY]) == 2
    # The main process got the whole trained model back (all stages synced at train end).
    ref = _state(tmp_path / "single" / "ckpt" / "epoch=2.ckpt")
    for name, value in multi.state_dict().items():
        torch.testing.assert_close(value, ref[name], rtol=1e-9, atol=1e-12, msg=name)

    # Resume from epoch 1 on 2 ranks: every rank gets its stage and its Adam state back.
    resumed = _fit(
        tmp_path / "resumed",
        devices=2,
        max_epochs=4,
        ckpt_path=str(tmp_path / "multi" / "ckpt" / "epoch=1.ckpt"),
    )
    for rank in range(2):
        record = torch.load(tmp_path / "resumed" / f"rank{rank}.pt")
        torch.testing.assert_close(record["losses"], ref_losses[2:], rtol=1e-9, atol=1e-12)
    final = single.state_dict()
    for name, value in resumed.state_dict().items():
        torch.testing.assert_close(value, final[name], rtol=1e-9, atol=1e-12, msg=name)


def test_registered_names_and_arguments() -> None:
    FlowParallelStrategy.register_strategies(StrategyRegistry)
    for name, method in (
        ("flow_parallel", "popen"),
        ("flow_parallel_spawn", "spawn"),
        ("flow_parallel_fork", "fork"),
    ):
        assert name in StrategyRegistry
        strategy = StrategyRegistry.get(name)
        assert isinstance(strategy, FlowParallelStrategy)
        assert strategy._start_method == method
    strategy = FlowParallelStrategy(num_microbatches=3, reorder="random", seed=4)
    context = strategy.build_context(None)  # type: ignore[arg-type]  # one process
    pipe = context.flow_pipeline
    assert isinstance(pipe, FlowPipeline)
    assert (pipe.num_microbatches, pipe.reorder, pipe.seed) == (3, "random", 4)
    # The module's build takes the strategy's settings.
    x, edge_index, _, _ = _graph()
    model = RevGCN(FEATURES, HIDDEN, CLASSES, num_layers=2).double()
    assert pipe.build(model, edge_index, NODES).num_microbatches == 3
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 1, "rank": 0}


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_microbatches": 0}, "`num_microbatches` to be None or an integer >= 1 but got 0"),
        (
            {"reorder": "bfs"},
            "`reorder` to be one of \\('metis', 'random', 'none'\\) but got 'bfs'",
        ),
        ({"start_method": "teleport"}, "`start_method` in .* but got 'teleport'"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match="FlowParallelStrategy: expected " + match):
        FlowParallelStrategy(**kwargs)


def test_flow_pipeline_before_setup_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="once the Trainer has set up"):
        _ = FlowParallelStrategy().flow_pipeline
