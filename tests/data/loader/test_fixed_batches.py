"""FixedBatchLoader: the one loader of every epoch made of a fixed list of batches."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from lightgraph.data.loader import FixedBatchLoader


def test_every_epoch_yields_the_same_batches_in_order():
    batches = [torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)]
    loader = FixedBatchLoader(batches)
    assert len(loader) == 3
    for _ in range(2):
        got = list(loader)
        assert len(got) == 3 and all(a is b for a, b in zip(got, batches, strict=True))


def test_one_object_is_a_one_step_epoch():
    graph = {"x": torch.randn(4, 2)}
    loader = FixedBatchLoader([graph])
    assert len(loader) == 1 and list(loader) == [graph] and list(loader) == [graph]


@pytest.mark.parametrize("bad", [torch.zeros(3), "abc", {"a": 1}, 5])
def test_what_is_not_a_sequence_of_batches_is_named(bad):
    with pytest.raises(
        TypeError, match=r"FixedBatchLoader: .*`batches`.*sequence.*" + type(bad).__name__
    ):
        FixedBatchLoader(bad)


class _Sum(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[float] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(float(batch.sum()))
        return (self.w - batch.sum()) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_lightning_trains_one_step_per_batch_every_epoch():
    """A Trainer reads it as one dataloader of ``len`` steps (a bare list would be several)."""
    module = _Sum()
    batches = [torch.ones(2), torch.ones(3)]
    trainer = pl.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, train_dataloaders=FixedBatchLoader(batches))
    assert module.seen == [2.0, 3.0, 2.0, 3.0]
    assert trainer.num_training_batches == 2
