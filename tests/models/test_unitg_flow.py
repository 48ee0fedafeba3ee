"""UniTG flow-parallel (2 pipeline stages, LM in the bubbles) equals the one-process run."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from lightgraph.callbacks import ModalitySync  # noqa: E402
from lightgraph.models import UniTGModule  # noqa: E402
from lightgraph.nn import RevGCN  # noqa: E402
from lightgraph.strategies import FlowParallelStrategy  # noqa: E402
from tests.models.test_unitg_module import NUM_CLASSES, _datamodule, _lm  # noqa: E402

EPOCHS = 4


class _SaveInterleaver(pl.Callback):
    """Saves each rank's bubble-interleaver record (the module drops it at teardown)."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, UniTGModule)
        inter = pl_module.interleaver
        if inter is None:
            return
        timeline = inter.timeline
        record = {
            "overlaps": len(timeline.overlaps("lm", "gnn")),
            "gnn": len(timeline.intervals("gnn")),
            "lm": len(timeline.intervals("lm")),
            "jobs_done": inter.jobs_done,
            "bubble_seconds": inter.lm_bubble_seconds,
        }
        torch.save(record, os.path.join(self.out_dir, f"rank{trainer.global_rank}.pt"))


def _module(bubble: bool) -> UniTGModule:
    torch.manual_seed(0)
    gnn = RevGCN(16, 16, NUM_CLASSES, num_layers=4, dropout=0.0)
    return UniTGModule(
        gnn,
        NUM_CLASSES,
        lm=_lm(),
        lm_epochs=2,
        lm_batch_size=16,
        encode_batch_size=16,
        lm_share=1.0,
        bubble_interleave=bubble,
        lr=0.01,
        lm_lr=0.01,
    )


def _fit(module: UniTGModule, dm, strategy, callbacks) -> pl.Trainer:
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2 if strategy is not None else 1,
        strategy=strategy if strategy is not None else "auto",
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[ModalitySync(), *callbacks],
    )
    trainer.fit(module, dm)
    return trainer


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize("bubble", [False, True])
def test_flow_parallel_unitg_equals_one_process(tmp_path, bubble: bool) -> None:
    dm = _datamodule(tmp_path / "cache")
    reference = _module(bubble=False)
    _fit(reference, dm, None, [])

    out = tmp_path / "records"
    out.mkdir()
    module = _module(bubble=bubble)
    strategy = FlowParallelStrategy(start_method="fork", num_microbatches=1)
    _fit(module, _datamodule(tmp_path / "cache"), strategy, [_SaveInterleaver(str(out))])

    # Same LM updates (jobs split over the stages, gradients summed), same GNN (M = 1: the
    # pipeline computes the whole graph), same store.
    local = {"lm_cache", "lm_cache_exit", "lm_stamp"}  # each rank's own LM work, by design
    for name, value in reference.state_dict().items():
        if name in local:
            continue
        torch.testing.assert_close(module.state_dict()[name], value, atol=5e-5, rtol=1e-4, msg=name)
    if bubble:
        records = [torch.load(out / f"rank{r}.pt") for r in range(2)]
        for record in records:
            assert record["overlaps"] == 0  # no LM segment inside a GNN compute interval
            assert record["gnn"] > 0
        # LM work ran inside the bubbles on at least one stage.
        assert sum(r["jobs_done"] for r in records) > 0
        assert sum(r["bubble_seconds"] for r in records) > 0.0


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_more_devices_than_gnn_layers_is_an_error_naming_devices(tmp_path) -> None:
    """One GNN stage per process: ``devices`` above the GNN's depth is refused with the
    Trainer argument the user set, not the stage splitter's ``num_stages``."""
    gnn = RevGCN(16, 16, NUM_CLASSES, num_layers=2)
    module = UniTGModule(gnn, NUM_CLASSES, lm=None, lr=0.01)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=3,
        strategy=FlowParallelStrategy(start_method="fork"),
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with pytest.raises(Exception) as info:  # noqa: PT011 - the launcher may wrap it
        trainer.fit(module, _datamodule(tmp_path))
    message = str(info.value)
    assert "expected the Trainer's `devices` to be at most 2" in message, message
    assert "RevGCN has 2 layers" in message and "got devices=3" in message, message
    assert "num_stages" not in message, message
