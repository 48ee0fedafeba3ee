"""BitWidthReassigner: period, identical widths on all ranks, checkpoint resume."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lightgraph.callbacks import BitWidthReassigner
from lightgraph.data import PartitionedGraphDataModule, SyntheticGraph
from lightgraph.distributed.context import ParallelContext, ParallelContextHolder, parallel_context
from lightgraph.models import NodeClassifier
from lightgraph.nn import GCN
from lightgraph.quant import FixedBits, RandomBits, VarianceAwareBits
from lightgraph.strategies import BoundaryExchangeStrategy

COST = {"theta": 1e-9, "gamma": 1e-6}


def _dataset() -> SyntheticGraph:
    return SyntheticGraph(num_nodes=400, avg_degree=8, num_classes=4, num_features=16, seed=3)


class Record(Callback):
    """Saves, per rank, what the reassigner did and the widths in force each epoch."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.epochs: list[dict[str, Any]] = []
        self.restored: dict[str, Any] | None = None

    def _policy(self, pl_module: pl.LightningModule) -> Any:
        exchanger = parallel_context(pl_module).halo_exchanger
        assert exchanger is not None
        return exchanger.policy

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        policy = self._policy(pl_module)
        if hasattr(policy, "state_dict"):
            self.restored = policy.state_dict()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        policy = self._policy(pl_module)
        self.epochs.append(
            {
                "epoch": trainer.current_epoch,
                "tracing": bool(getattr(policy, "tracing", False)),
                "version": int(policy.version),
            }
        )

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        reassigner = next(c for c in trainer.callbacks if isinstance(c, BitWidthReassigner))
        policy = self._policy(pl_module)
        torch.save(
            {
                "epochs": self.epochs,
                "reassigned": reassigner.reassigned,
                "state": policy.state_dict() if hasattr(policy, "state_dict") else None,
                "restored": self.restored,
                "histogram": policy.histogram() if hasattr(policy, "histogram") else None,
                "observations": [r.observations for r in getattr(policy, "reports", [])],
                "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            },
            os.path.join(self.out_dir, f"rank{trainer.global_rank}.pt"),
        )


def _fit(
    tmp_path,
    name: str,
    policy: Any,
    epochs: int,
    period: int,
    ckpt_path: str | None = None,
    checkpoint_dir: str | None = None,
) -> list[dict]:
    out = tmp_path / name
    out.mkdir()
    torch.manual_seed(0)
    ds = _dataset()
    module = NodeClassifier(
        GCN(ds.num_features, ds.num_classes, hidden_channels=16, num_layers=2, dropout=0.0),
        ds.num_classes,
        lr=0.02,
    )
    callbacks: list[Callback] = [BitWidthReassigner(period=period), Record(str(out))]
    if checkpoint_dir is not None:
        callbacks.append(ModelCheckpoint(dirpath=checkpoint_dir, save_last=True))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=BoundaryExchangeStrategy(
            start_method="fork", transport="ring", quantization=policy
        ),
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        enable_checkpointing=checkpoint_dir is not None,
        default_root_dir=out,
        callbacks=callbacks,
    )
    dm = PartitionedGraphDataModule(ds, cache_dir=str(tmp_path / "cache"))
    trainer.fit(module, dm, ckpt_path=ckpt_path)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def _same_state(a: dict, b: dict) -> bool:
    if a["version"] != b["version"] or a["assignment"].keys() != b["assignment"].keys():
        return False
    return all(
        torch.equal(t, b["assignment"][name][k])
        for name, table in a["assignment"].items()
        for k, t in table.items()
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_period_is_honoured_and_ranks_agree(tmp_path) -> None:
    records = _fit(
        tmp_path, "run", VarianceAwareBits(cost_model=COST, group_size=8), epochs=5, period=2
    )
    for rec in records:
        # Traced in every epoch, re-assigned when a period ends ...
        assert [e["tracing"] for e in rec["epochs"]] == [True] * 5
        assert rec["reassigned"] == [1, 3]
        # ... from the ranges of both epochs of the period, for every layer and direction.
        keys = {"layer0/forward", "layer1/forward", "layer1/backward"}
        assert rec["observations"] == [dict.fromkeys(keys, 2)] * 2
        assert [e["version"] for e in rec["epochs"]] == [0, 0, 1, 1, 2]
        assert rec["metrics"]["assign_seconds"] > 0
        # Layer 0 receives raw features (no backward exchange); layer 1 both ways.
        assert set(rec["histogram"]) == {"layer0/forward", "layer1/forward", "layer1/backward"}
    assert _same_state(records[0]["state"], records[1]["state"])
    shares = [v for k, v in records[0]["metrics"].items() if k.startswith("bits/layer1_forward/")]
    assert sum(shares) == pytest.approx(1.0)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_resume_restores_the_assignment_and_the_schedule(tmp_path) -> None:
    ckpt = str(tmp_path / "ckpt")
    first = _fit(
        tmp_path,
        "first",
        VarianceAwareBits(cost_model=COST, group_size=8),
        epochs=3,
        period=2,
        checkpoint_dir=ckpt,
    )
    last = os.path.join(ckpt, "last.ckpt")
    assert torch.load(last, weights_only=False)["epoch"] == 2
    resumed = _fit(
        tmp_path,
        "resumed",
        VarianceAwareBits(cost_model=COST, group_size=8),
        epochs=6,
        period=2,
        ckpt_path=last,
    )
    for rec in resumed:
        # The widths of the checkpoint are in force from the first resumed step ...
        assert _same_state(rec["restored"], first[0]["state"])
        assert rec["restored"]["version"] == 1
        # ... and the schedule continues: epochs 3..5, re-assigned after 3 and 5.
        assert [e["epoch"] for e in rec["epochs"]] == [3, 4, 5]
        assert [e["tracing"] for e in rec["epochs"]] == [True, True, True]
        assert rec["reassigned"] == [1, 3, 5]
        # The period interrupted by the checkpoint (epochs 2-3) averages the epoch traced
        # since the resume; the next one (4-5) both of its epochs.
        keys = {"layer0/forward", "layer1/forward", "layer1/backward"}
        assert rec["observations"] == [dict.fromkeys(keys, 1), dict.fromkeys(keys, 2)]
    assert _same_state(resumed[0]["state"], resumed[1]["state"])


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_random_bits_are_redrawn_every_period(tmp_path) -> None:
    records = _fit(tmp_path, "random", RandomBits(seed=1), epochs=4, period=2)
    for rec in records:
        assert rec["reassigned"] == [1, 3]
        assert [e["version"] for e in rec["epochs"]] == [0, 0, 1, 1]
        assert not any(e["tracing"] for e in rec["epochs"])


class _Holder(ParallelContextHolder):
    """A module with a context attached, as a lightgraph strategy leaves it."""

    def __init__(self, context: ParallelContext | None) -> None:
        self.attach_parallel_context(context)


def test_needs_a_reassignable_policy() -> None:
    cb = BitWidthReassigner()
    trainer = SimpleNamespace(strategy=SimpleNamespace())
    for policy in (None, FixedBits(4)):
        module = _Holder(ParallelContext(halo_exchanger=SimpleNamespace(policy=policy)))  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="VarianceAwareBits"):
            cb.setup(trainer, module, "fit")  # type: ignore[arg-type]
    # No exchanger at all: a module without a context, an empty context, no holder.
    for module in (_Holder(None), _Holder(ParallelContext()), None):
        with pytest.raises(RuntimeError, match="VarianceAwareBits"):
            cb.setup(trainer, module, "fit")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"period": 0}, "`period`"),
        ({"period": 2.5}, "`period`"),
        ({"log": "yes"}, "`log`"),
        ({"verbose": 1}, "`verbose`"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BitWidthReassigner(**kwargs)
