"""UniTG co-training schedule: syncs, LM step count, grouping, store refresh, LM accuracy,
early stopping (issue 29), each against a reference computed here."""

from __future__ import annotations

import math
import os

import lightning.pytorch as pl
import pytest
import torch
from torch_geometric.utils import degree

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from lightgraph.callbacks import CoTrainingEarlyStopping, ModalitySync  # noqa: E402
from lightgraph.data import SyntheticGraph, SyntheticTextGraph, TextGraphDataModule  # noqa: E402
from lightgraph.models import UniTGModule  # noqa: E402
from lightgraph.nn import RevGCN, degree_groups  # noqa: E402
from tests.models.test_unitg_module import _lm, _trainer  # noqa: E402

NUM_CLASSES = 4
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _datamodule(tmp_path, words: int = 6) -> TextGraphDataModule:
    graph = SyntheticGraph(num_nodes=120, num_classes=NUM_CLASSES, num_features=16, seed=3)
    text = SyntheticTextGraph(graph, words_per_node=words, vocab_per_class=4, noise_vocab_size=20)
    return TextGraphDataModule(text, serve="graph", cache_dir=str(tmp_path / "cache"))


def _module(**kwargs) -> UniTGModule:
    torch.manual_seed(0)
    args = {"lm_epochs": 2, "lm_batch_size": 16, "encode_batch_size": 16, "lm_lr": 0.01}
    args.update(kwargs)
    return UniTGModule(RevGCN(16, 16, NUM_CLASSES, num_layers=2), NUM_CLASSES, lm=_lm(), **args)


def _val_acc(module: UniTGModule) -> float:
    """The GNN's validation accuracy on the module's current input, computed here."""
    graph = module._graph
    module.model.eval()
    with torch.no_grad():
        pred = module.model(module.gnn_input(), graph.edge_index).argmax(dim=-1)
    module.model.train()
    return float((pred[graph.val_mask] == graph.y[graph.val_mask]).float().mean())


class _Probe(pl.Callback):
    """Validation accuracy at the end of every epoch, placed before / after ModalitySync."""

    def __init__(self, out: dict[int, list[float]]) -> None:
        self.out = out

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.out.setdefault(trainer.current_epoch, []).append(_val_acc(pl_module))


def _reference_embeddings(module: UniTGModule, dm: TextGraphDataModule) -> torch.Tensor:
    """Every node's [CLS] state at its exit, from the HF model's own hidden states."""
    lm = module.lm
    tokens = dm.tokens()
    with torch.no_grad():
        hidden = lm.backbone.eval()(**tokens, output_hidden_states=True).hidden_states
    exits = torch.tensor(lm.exit_layers)[_reference_groups(module, dm)]
    return torch.stack([hidden[int(k)][v, 0] for v, k in enumerate(exits)])


def _reference_groups(module: UniTGModule, dm: TextGraphDataModule) -> torch.Tensor:
    """Quartiles of the training nodes' degrees (numpy), applied to every node."""
    graph = dm.graph()
    deg = degree(graph.edge_index[1], graph.num_nodes).double().numpy()
    import numpy as np

    bounds = np.quantile(deg[graph.train_mask.numpy()], [0.25, 0.5, 0.75])
    return torch.from_numpy((deg[:, None] > bounds[None, :]).sum(1)).long()


def test_a_sync_never_lowers_validation_accuracy(tmp_path) -> None:
    out: dict[int, list[float]] = {}
    module = _module(lm_share=1.0, sync_ramp_epochs=3)
    sync = ModalitySync(ladder=(0.2, 0.1), patience=2)
    _trainer(12, callbacks=[_Probe(out), sync, _Probe(out)]).fit(module, _datamodule(tmp_path))
    synced = [epoch for epoch, _, done in sync.history if done]
    assert synced  # the syncs happened
    assert [c[0] for c in module.sync_checks] == synced
    for epoch, before, after, kept in module.sync_checks:
        measured_before, measured_after = out[epoch]
        assert measured_before == pytest.approx(before)
        if kept:
            assert measured_after >= measured_before
            assert after == pytest.approx(measured_after)
        else:  # reverted: the input is the one before the sync
            assert measured_after == pytest.approx(measured_before)
    assert module.encoded.any()


def test_first_encoded_nodes_enter_with_weight_zero(tmp_path) -> None:
    module = _module(lm_share=1.0, sync_ramp_epochs=4, sync_check=False)
    _trainer(1).fit(module, _datamodule(tmp_path))
    before = module.gnn_input().detach().clone()
    module.sync_embeddings()  # epoch 0's end: new nodes blend in from epoch 1 at 1/4
    assert module.encoded.any()
    torch.testing.assert_close(module.gnn_input().detach(), before)


@pytest.mark.parametrize(
    ("epochs", "share", "per_step"), [(3, 1.0, 1), (4, 0.5, 2), (20, 0.3, 3), (2, 0.1, 2)]
)
def test_lm_optimiser_steps_follow_lm_epochs(tmp_path, epochs, share, per_step) -> None:
    steps: list[int] = []

    class Count(pl.Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            trainer.optimizers[1].register_step_post_hook(lambda *_: steps.append(1))

    dm = _datamodule(tmp_path)
    module = _module(lm_share=share, lm_batches_per_step=per_step)
    _trainer(epochs, callbacks=[Count()]).fit(module, dm)
    # Reference: one LM epoch = one pass over the training nodes in batches of one degree
    # group each (ceil(|group| / lm_batch_size) per group), lm_batches_per_step per step.
    groups = _reference_groups(module, dm)[dm.graph().train_mask]
    batches = sum(math.ceil(int((groups == g).sum()) / 16) for g in range(4))
    expected = 2 * math.ceil(batches / per_step)
    assert len(steps) == expected == module.num_lm_steps == module.lm_steps_done
    # ...taken within the first ceil(lm_share * J) epochs.
    assert module.lm_steps_per_epoch == math.ceil(expected / math.ceil(share * epochs))


def test_one_grouping_for_fine_tuning_and_encoding(tmp_path) -> None:
    dm = _datamodule(tmp_path)
    module = _module(encode_at="exit", lm_share=1.0, encode_batch_size=40)
    _trainer(2).fit(module, dm)
    reference = _reference_groups(module, dm)
    graph = dm.graph()
    train = graph.train_mask.nonzero().view(-1)
    deg = degree(graph.edge_index[1], graph.num_nodes)
    torch.testing.assert_close(reference[train], degree_groups(deg, train))
    for step in range(module.num_lm_steps):
        for job in module.lm_jobs(step):
            assert bool((reference[job.nodes] == job.group).all())
    torch.testing.assert_close(module._encode_groups, reference)
    # Every cached embedding, whichever write came last, is at the node's one exit.
    seen = module.lm_stamp >= 0
    torch.testing.assert_close(module.lm_cache_exit[seen], reference[seen])


def test_store_is_refreshed_by_the_finished_lm(tmp_path) -> None:
    dm = _datamodule(tmp_path)
    module = _module(encode_at="exit", lm_share=0.5)
    _trainer(4).fit(module, dm)
    assert module.lm_finished and bool(module.encoded.all())
    torch.testing.assert_close(
        module.store, _reference_embeddings(module, dm), atol=1e-5, rtol=1e-4
    )


def test_lm_accuracy_is_logged_and_matches_a_reference(tmp_path) -> None:
    dm = _datamodule(tmp_path)
    module = _module(lm_share=1.0)
    trainer = _trainer(2)
    trainer.fit(module, dm)
    graph = dm.graph()
    groups = _reference_groups(module, dm)
    emb = _reference_embeddings(module, dm)
    with torch.no_grad():
        logits = torch.stack([module.lm.heads[int(g)](emb[v]) for v, g in enumerate(groups)])
    correct = logits.argmax(dim=-1) == graph.y
    val = float(correct[graph.val_mask].float().mean())
    test = float(correct[graph.test_mask].float().mean())
    assert float(trainer.callback_metrics["lm_val_acc"]) == pytest.approx(val)
    assert float(trainer.callback_metrics["lm_test_acc"]) == pytest.approx(test)


def test_texts_longer_than_the_lm_positions_are_refused_in_setup(tmp_path) -> None:
    module = UniTGModule(
        RevGCN(16, 16, NUM_CLASSES, num_layers=2), NUM_CLASSES, lm=_lm(max_position=16)
    )
    with pytest.raises(ValueError, match=r"words_per_node=20.*`max_position`.*16"):
        _trainer(1).fit(module, _datamodule(tmp_path, words=20))


def test_early_stopping_waits_for_the_lm_and_the_refresh(tmp_path) -> None:
    dm = _datamodule(tmp_path)
    module = _module(encode_at="exit", lm_share=1.0, lm_batches_per_step=1)
    # min_delta above any possible gain: a plateau from the first check on.
    patience = 2
    stop = CoTrainingEarlyStopping(monitor="val_acc", patience=patience, min_delta=2.0)
    epochs_trained: list[int] = []

    class Count(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module) -> None:
            epochs_trained.append(trainer.current_epoch)

    trainer = _trainer(30, callbacks=[ModalitySync(), stop, Count()])
    trainer.fit(module, dm)
    # The first check sets the best score; the plateau `patience` checks later, while the
    # LM had steps left.
    assert stop.plateau_epoch == patience
    # The next epoch runs all remaining LM steps and the refresh; the plateau is counted
    # afresh from there: `patience` epochs on the final embeddings, then the stop.
    assert stop.lm_finished_epoch == stop.plateau_epoch + 1
    assert epochs_trained[-1] == stop.lm_finished_epoch + patience - 1
    assert module.lm_steps_done == module.num_lm_steps > module.lm_steps_per_epoch * 3
    torch.testing.assert_close(
        module.store, _reference_embeddings(module, dm), atol=1e-5, rtol=1e-4
    )


def test_modality_sync_is_a_no_op_without_an_lm_through_the_cli(tmp_path, caplog) -> None:
    """docs/unitg.md's "no LM" command, with the recipe's callback list."""
    from lightgraph.cli import build_cli

    cli = build_cli(
        args=[
            "--config",
            os.path.join(ROOT, "recipes", "unitg_single.yaml"),
            "--data.init_args.dataset.init_args.graph.init_args.num_nodes=200",
            "--model.init_args.model.init_args.num_layers=2",
            "--model.init_args.lm=null",
            "--trainer.max_epochs=3",
            "--trainer.logger=false",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    (sync,) = [c for c in cli.trainer.callbacks if isinstance(c, ModalitySync)]
    with caplog.at_level("INFO"):
        cli.trainer.fit(cli.model, cli.datamodule)
    assert not sync.active and sync.history == []
    assert "no LM" in caplog.text
    assert cli.trainer.callback_metrics["val_acc"] > 0


def test_lm_learning_rate_schedule_values() -> None:
    from lightgraph.models.unitg_lm_jobs import lm_learning_rate

    # 10 steps, 20 % warm-up: 2 steps up to the peak, then 8 down to peak / 8.
    got = [lm_learning_rate(s, 10, 0.8, "linear", 0.2) for s in range(10)]
    expected = [0.4, 0.8] + [0.8 * k / 8 for k in range(8, 0, -1)]
    assert got == pytest.approx(expected)
    assert [lm_learning_rate(s, 10, 0.8, "constant", 0.2) for s in range(10)] == [0.8] * 10
    # No warm-up: the decay starts at the peak.
    assert lm_learning_rate(0, 4, 1.0, "linear", 0.0) == pytest.approx(1.0)
    assert lm_learning_rate(3, 4, 1.0, "linear", 0.0) == pytest.approx(0.25)


@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_lm_steps_take_the_scheduled_learning_rate(tmp_path, schedule) -> None:
    rates: list[float] = []

    class Record(pl.Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            opt = trainer.optimizers[1]
            opt.register_step_pre_hook(lambda o, *_: rates.append(o.param_groups[0]["lr"]))

    dm = _datamodule(tmp_path)
    module = _module(lm_schedule=schedule, lm_warmup=0.25, lm_share=1.0)
    _trainer(3, callbacks=[Record()]).fit(module, dm)
    total = module.num_lm_steps
    assert len(rates) == total > 4
    if schedule == "constant":
        assert rates == pytest.approx([0.01] * total)
    else:
        warm = math.ceil(0.25 * total)
        ramp = [0.01 * (s + 1) / warm for s in range(warm)]
        decay = [0.01 * (total - s) / (total - warm) for s in range(warm, total)]
        assert rates == pytest.approx(ramp + decay)
        assert max(rates) == pytest.approx(0.01)


def test_bad_lm_schedule_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"lm_schedule.*constant.*linear.*cosine"):
        _module(lm_schedule="cosine")
    with pytest.raises(ValueError, match=r"lm_warmup.*\[0, 1\).*1\.0"):
        _module(lm_warmup=1.0)
    with pytest.raises(ValueError, match="lm_warmup"):
        _module(lm_warmup=-0.1)


def test_sync_and_refresh_times_are_accounted(tmp_path) -> None:
    """``totals["sync_time"]`` sums the time inside ``sync_embeddings`` and
    ``totals["refresh_time"]`` the store refresh by the finished LM (part of LM time): a
    known delay injected into each is found in the sums, and the logged
    ``sync_time_total`` is the sum up to the logging epoch."""
    import time

    dm = _datamodule(tmp_path)
    module = _module(lm_share=0.5)
    delay = 0.05
    calls = {"sync": 0, "encode": 0}
    outer = {"sync": 0.0, "inside": False}
    sync, encode_all = module._sync, module.encode_all

    def slow_sync(check):
        # Delayed only inside sync_embeddings: encode_all's own copy is refresh time.
        if outer["inside"]:
            time.sleep(delay)
        return sync(check)

    def slow_encode_all():
        calls["encode"] += 1
        time.sleep(delay)
        encode_all()

    module._sync = slow_sync
    module.encode_all = slow_encode_all
    original = module.sync_embeddings

    def timed_sync_embeddings():
        calls["sync"] += 1
        outer["inside"] = True
        start = time.perf_counter()
        try:
            return original()
        finally:
            outer["sync"] += time.perf_counter() - start
            outer["inside"] = False

    module.sync_embeddings = timed_sync_embeddings
    at_start: list[float] = []

    class Record(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module) -> None:
            at_start.append(pl_module.totals["sync_time"])

    trainer = _trainer(4, callbacks=[ModalitySync(ladder=[0.25]), Record()])  # every epoch
    trainer.fit(module, dm)
    assert calls["sync"] >= 2 and calls["encode"] == 1  # one refresh: the LM finished
    assert delay * calls["sync"] <= module.totals["sync_time"] <= outer["sync"]
    assert module.totals["refresh_time"] >= delay
    assert float(trainer.callback_metrics["lm_time_total"]) >= module.totals["refresh_time"]
    assert float(trainer.callback_metrics["sync_time_total"]) == pytest.approx(at_start[-1])
