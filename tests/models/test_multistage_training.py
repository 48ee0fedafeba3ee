"""JOESTAR end to end: PBS with historical embeddings under the Trainer, and resume."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch_geometric.nn.models import GAT, GraphSAGE

from lightgraph.callbacks import RandomStateCheckpoint
from lightgraph.data import MultistageDataModule, SyntheticGraph
from lightgraph.data.loader.multistage import MultistageLoader
from lightgraph.models import MiniBatchNodeClassifier
from tests.data.joestar import joestar_module

DATASET = SyntheticGraph(num_nodes=600, avg_degree=6, num_features=8, train_ratio=0.3, seed=5)


def _trainer(tmp_path, epochs: int, **kwargs) -> pl.Trainer:
    args = dict(
        accelerator="cpu",
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
    )
    args.update(kwargs)
    return pl.Trainer(**args)


def _data(tmp_path, **kwargs) -> MultistageDataModule:
    args = dict(
        first_stage="pbs",
        num_parts=6,
        parts_per_batch=2,
        batch_size=40,
        fanouts=[-1, -1, -1],
        aot=True,
        cache_dir=str(tmp_path / "cache"),
    )
    args.update(kwargs)
    return joestar_module(DATASET, **args)


def _exact_hidden(model: torch.nn.Module, dm: MultistageDataModule) -> list[torch.Tensor]:
    """Every hidden layer's output over the whole graph by PyG's own full-graph forward
    (eval mode), in store order: the independent reference of the history tables."""
    data = DATASET.load()
    outs: list[torch.Tensor] = []
    handle = model.act.register_forward_hook(lambda m, i, o: outs.append(o.detach()))
    was = model.training
    model.eval()
    with torch.no_grad():
        model(data.x, data.edge_index)
    model.train(was)
    handle.remove()
    ids = dm.store.node_ids.long()
    return [h[ids] for h in outs]


def test_with_lr_zero_the_pushed_history_stays_exact(tmp_path):
    torch.manual_seed(0)
    dm = _data(tmp_path)
    gnn = GraphSAGE(DATASET.num_features, 16, 3, DATASET.num_classes, dropout=0.0)
    module = MiniBatchNodeClassifier(gnn, DATASET.num_classes, lr=0.0)
    _trainer(tmp_path, 1, limit_val_batches=0).fit(module, dm)
    table = module.history
    assert table.filled and table.num_layers() == 2
    assert table.stats["bytes_pushed"] > 0  # training pushed rows back
    # Pushes of stale or wrongly placed rows (pre-activation, halo rows, trimmed rows
    # computed from a partial neighbourhood) would move the table off the exact values.
    for got, want in zip(table.tables, _exact_hidden(gnn, dm), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_history_moves_with_training_and_survives_a_resume(tmp_path):
    torch.manual_seed(1)
    dm = _data(tmp_path, fanouts=[4, 4])
    gnn = GAT(DATASET.num_features, 16, 2, DATASET.num_classes, heads=2)
    # No refresh by validation: the table holds only the warm fill and training's pushes.
    module = MiniBatchNodeClassifier(gnn, DATASET.num_classes, lr=0.01, refresh_history=False)
    trainer = _trainer(tmp_path, 2, enable_checkpointing=True)
    trainer.fit(module, dm)
    saved = [t.clone() for t in module.history.tables]
    exact = _exact_hidden(gnn, dm)
    assert not torch.allclose(saved[0], exact[0])  # trained rows are stale, as they should be
    ckpt = trainer.checkpoint_callback.best_model_path
    assert ckpt
    fresh = MiniBatchNodeClassifier(
        GAT(DATASET.num_features, 16, 2, DATASET.num_classes, heads=2), DATASET.num_classes
    )
    # Resuming at the end: the table is restored, not warm-filled again.
    _trainer(tmp_path, 2).fit(fresh, _data(tmp_path, fanouts=[4, 4]), ckpt_path=ckpt)
    assert fresh.history is not None and fresh.history.filled
    for got, want in zip(fresh.history.tables, saved, strict=True):
        assert torch.equal(got, want)


def test_history_needs_one_hop_per_layer(tmp_path):
    dm = _data(tmp_path, fanouts=[4, 4])
    module = MiniBatchNodeClassifier(
        GraphSAGE(DATASET.num_features, 16, 3, DATASET.num_classes), DATASET.num_classes
    )
    try:
        _trainer(tmp_path, 1).fit(module, dm)
    except ValueError as err:
        assert "num_layers=3" in str(err) and "2 hops" in str(err)
    else:  # pragma: no cover - the check must fire
        raise AssertionError("a 3-layer model over 2-hop samples must be rejected")


def test_exact_validation_refreshes_every_history_row(tmp_path):
    tables = {}
    for refresh in (True, False):
        torch.manual_seed(2)
        dm = _data(tmp_path, fanouts=[4, 4])
        gnn = GraphSAGE(DATASET.num_features, 16, 2, DATASET.num_classes)
        module = MiniBatchNodeClassifier(gnn, DATASET.num_classes, lr=0.01, refresh_history=refresh)
        _trainer(tmp_path, 2).fit(module, dm)  # validation (exact, layer-wise) ends each epoch
        exact = _exact_hidden(gnn, dm)
        tables[refresh] = torch.allclose(module.history.tables[0], exact[0], atol=1e-5)
    # Refreshed: every row holds the final model's exact embedding (validation ran last);
    # without the refresh, rows no step pushed keep older values.
    assert tables == {True: True, False: False}


# --------------------------------------------------------------- one epoch, one pass
class _Seeds(pl.Callback):
    """The seeds (original node ids) every Lightning epoch trained on, in order."""

    def __init__(self) -> None:
        self.epochs: dict[int, list[int]] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        seeds = batch.n_id[: batch.batch_size].tolist()
        self.epochs.setdefault(trainer.current_epoch, []).extend(seeds)


def _training_nodes() -> list[int]:
    """The training set in original ids, from the dataset's own mask."""
    return DATASET.load().train_mask.nonzero().view(-1).tolist()


def _steps(dm: MultistageDataModule, epoch: int) -> int:
    return sum(-(-len(seeds) // dm.batch_size) for seeds in dm.plan(epoch))


def _multistage(tmp_path, **kwargs) -> MultistageDataModule:
    return joestar_module(DATASET, cache_dir=str(tmp_path / "cache"), **kwargs)


# PBS: the 6 partitions in 2 groups of 3, 40 seeds per step: the draws of epochs 0..3 give
# 5, 6, 6 and 6 steps.
_PBS = dict(first_stage="pbs", num_parts=6, parts_per_batch=3, batch_size=40, fanouts=[3, 3])
_LBS = dict(first_stage="lbs", ratio=0.25, batch_size=40, fanouts=[3, 3])


@pytest.mark.parametrize(
    "kwargs",
    [dict(_PBS, history=False), dict(_PBS, history=True), _LBS],
    ids=["pbs", "pbs-history", "lbs"],
)
def test_every_lightning_epoch_trains_each_training_node_once(tmp_path, kwargs):
    torch.manual_seed(0)
    epochs = 4
    dm = _multistage(tmp_path, **kwargs)
    seeds = _Seeds()
    gnn = GraphSAGE(DATASET.num_features, 16, 2, DATASET.num_classes)
    module = MiniBatchNodeClassifier(gnn, DATASET.num_classes, lr=0.01)
    trainer = _trainer(
        tmp_path, epochs, limit_val_batches=0, callbacks=[RandomStateCheckpoint(), seeds]
    )
    trainer.fit(module, dm)
    if kwargs["first_stage"] == "pbs":  # the draw changes the number of steps
        assert len({_steps(dm, e) for e in range(epochs)}) > 1
    train = sorted(_training_nodes())
    assert sorted(seeds.epochs) == list(range(epochs))
    for epoch, got in seeds.epochs.items():
        assert sorted(got) == train, f"epoch {epoch}"
    assert dm.train_loader().epoch == epochs  # the loader's epochs are Lightning's


def test_a_run_stopped_mid_epoch_resumes_with_the_rest_of_that_epoch(tmp_path):
    torch.manual_seed(0)
    first = _Seeds()
    save = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="mid", every_n_train_steps=8)
    gnn = GraphSAGE(DATASET.num_features, 16, 2, DATASET.num_classes)
    module = MiniBatchNodeClassifier(gnn, DATASET.num_classes, lr=0.01)
    trainer = _trainer(
        tmp_path,
        3,
        max_steps=8,
        limit_val_batches=0,
        enable_checkpointing=True,
        callbacks=[RandomStateCheckpoint(), first, save],
    )
    trainer.fit(module, _multistage(tmp_path, history=False, **_PBS))
    assert sorted(first.epochs) == [0, 1]  # stopped inside epoch 1 (5 + 3 steps)
    assert len(first.epochs[1]) < len(first.epochs[0])

    rest = _Seeds()
    gnn = GraphSAGE(DATASET.num_features, 16, 2, DATASET.num_classes)
    module = MiniBatchNodeClassifier(gnn, DATASET.num_classes, lr=0.01)
    trainer = _trainer(tmp_path, 3, limit_val_batches=0, callbacks=[RandomStateCheckpoint(), rest])
    dm = _multistage(tmp_path, history=False, **_PBS)
    trainer.fit(module, dm, ckpt_path=save.best_model_path)
    train = sorted(_training_nodes())
    assert sorted(first.epochs[0]) == train
    assert sorted(first.epochs[1] + rest.epochs[1]) == train  # nothing repeated or skipped
    assert sorted(rest.epochs[2]) == train


def test_an_epoch_cut_short_by_the_trainer_is_not_continued_in_the_next(tmp_path):
    torch.manual_seed(0)
    seeds = _Seeds()
    dm = _multistage(tmp_path, history=False, **_PBS)
    gnn = GraphSAGE(DATASET.num_features, 16, 2, DATASET.num_classes)
    module = MiniBatchNodeClassifier(gnn, DATASET.num_classes, lr=0.01)
    trainer = _trainer(tmp_path, 3, limit_train_batches=2, limit_val_batches=0, callbacks=[seeds])
    trainer.fit(module, dm)
    assert dm.train_loader().epoch == 2  # the third pass, cut after two steps
    ids = dm.store.node_ids.long()
    for epoch in range(3):  # Lightning epoch e trains the first two steps of loader epoch e
        alone = MultistageLoader(dm.build_macro_batch, dm.plan, dm.batch_size, prefetch=False)
        alone.load_state_dict({"epoch": epoch, "step": 0, "position": [0, 0]})
        steps = iter(alone)
        want = [ids[s.macro.node[s.seeds]].tolist() for s in (next(steps), next(steps))]
        assert seeds.epochs[epoch] == want[0] + want[1], f"epoch {epoch}"
