"""UniTGModule against independent references: plain PyG/HF training steps written out here."""

from __future__ import annotations

import copy
import csv
import glob
import os

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from lightgraph.data import SyntheticGraph, SyntheticTextGraph, TextGraphDataModule  # noqa: E402
from lightgraph.models import UniTGModule  # noqa: E402
from lightgraph.nn import EarlyExitEncoder, LMEncoder, ResGEN, RevGCN  # noqa: E402

NUM_CLASSES = 4


def _datamodule(tmp_path, **kwargs) -> TextGraphDataModule:
    graph = SyntheticGraph(num_nodes=120, num_classes=NUM_CLASSES, num_features=16, seed=3)
    text = SyntheticTextGraph(graph, words_per_node=6, vocab_per_class=4, noise_vocab_size=20)
    return TextGraphDataModule(text, serve="graph", cache_dir=str(tmp_path), **kwargs)


def _lm(vocab: int = 64, max_position: int = 16) -> EarlyExitEncoder:
    torch.manual_seed(1)
    enc = LMEncoder(
        vocab_size=vocab,
        hidden_size=16,
        num_layers=4,
        num_heads=2,
        intermediate_size=32,
        max_position=max_position,
        dropout=0.0,
    )
    return EarlyExitEncoder(enc, num_classes=NUM_CLASSES)


def _trainer(epochs: int, **kwargs) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )


def test_gnn_only_step_equals_plain_training(tmp_path) -> None:
    torch.manual_seed(0)
    gnn = ResGEN(16, 16, NUM_CLASSES, num_layers=3)
    reference = copy.deepcopy(gnn)
    dm = _datamodule(tmp_path)
    module = UniTGModule(gnn, NUM_CLASSES, lm=None, lr=0.01)
    _trainer(2).fit(module, dm)

    data = dm.graph()
    opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        out = reference(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
    for (name, p), q in zip(module.model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5, msg=name)


def test_sequential_fills_store_with_full_depth_embeddings(tmp_path) -> None:
    dm = _datamodule(tmp_path)
    lm = _lm()
    module = UniTGModule(
        RevGCN(16, 16, NUM_CLASSES, num_layers=2),
        NUM_CLASSES,
        lm=lm,
        schedule="sequential",
        lazy_tuner=False,
        lm_epochs=1,
        lm_batch_size=16,
    )
    _trainer(1).fit(module, dm)
    assert bool(module.encoded.all())
    assert module.encoded_fraction == 1.0
    # Independent reference: the Hugging Face model's own last hidden state, [CLS] row.
    tokens = dm.tokens()
    hf = lm.backbone.eval()
    with torch.no_grad():
        out = hf(**tokens, output_hidden_states=True)
    torch.testing.assert_close(module.store, out.hidden_states[-1][:, 0], atol=1e-5, rtol=1e-4)


def test_lm_update_is_one_step_on_the_epochs_summed_batches(tmp_path) -> None:
    dm = _datamodule(tmp_path)
    lm = _lm()
    reference = copy.deepcopy(lm)
    module = UniTGModule(
        RevGCN(16, 16, NUM_CLASSES, num_layers=2),
        NUM_CLASSES,
        lm=lm,
        lm_epochs=2,
        lm_batch_size=16,
        encode_batch_size=8,
        lm_share=1.0,
        lm_lr=0.01,
    )
    epochs = 3
    _trainer(epochs).fit(module, dm)

    # Every training batch of `lm_epochs` passes runs exactly once over the run.
    jobs = [job for step in range(module.num_lm_steps) for job in module.lm_jobs(step)]
    counts = torch.bincount(torch.cat([job.nodes for job in jobs]), minlength=120)
    train = dm.graph().train_mask
    assert bool((counts[train] == 2).all()) and bool((counts[~train] == 0).all())
    # Steps: `lm_batches_per_step` (2) consecutive batches of one LM epoch each.
    per_lm_epoch = len(jobs) // 2
    sizes = [min(2, per_lm_epoch - k) for k in range(0, per_lm_epoch, 2)] * 2
    assert [len(module.lm_jobs(s)) for s in range(module.num_lm_steps)] == sizes

    # Reference: plain Adam on the mean of each step's batch losses (Eq. 5.1 per batch).
    data = dm.graph()
    tokens = dm.tokens()
    opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    reference.train()
    for step in range(module.num_lm_steps):
        batch_jobs = module.lm_jobs(step)
        if not batch_jobs:
            continue
        opt.zero_grad()
        for job in batch_jobs:
            k = reference.exit_layers[job.group]
            hidden = reference.backbone(
                input_ids=tokens["input_ids"][job.nodes],
                attention_mask=tokens["attention_mask"][job.nodes],
                output_hidden_states=True,
            ).hidden_states[k][:, 0]
            loss = F.cross_entropy(reference.heads[job.group](hidden), data.y[job.nodes])
            (loss / reference.num_groups / len(batch_jobs)).backward()
        opt.step()
    for (name, p), r in zip(lm.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, r, atol=2e-5, rtol=1e-4, msg=name)


def test_gnn_input_mixes_features_and_projected_embeddings(tmp_path) -> None:
    dm = _datamodule(tmp_path)
    module = UniTGModule(
        RevGCN(16, 16, NUM_CLASSES, num_layers=2), NUM_CLASSES, lm=_lm(), encode_at="exit"
    )
    _trainer(1).fit(module, dm)
    x = dm.graph().x
    n = x.size(0)
    with torch.no_grad():
        module.store.normal_()
        module.encoded.zero_()
        module.encoded[: n // 2] = True
        module.store_exit.copy_(torch.arange(n) % 4)
        module.first_encoded.fill_(-100)  # encoded long ago: the blend has reached 1
        mixed = module.gnn_input()
    for v in (0, 1, 2, 3, n - 1):
        if v < n // 2:
            proj = module.lm_proj[v % 4]
            expected = module.store[v] @ proj.weight.T + proj.bias
        else:
            expected = x[v]
        torch.testing.assert_close(mixed[v], expected.detach())


def test_sync_copies_the_latest_cache(tmp_path) -> None:
    dm = _datamodule(tmp_path)
    module = UniTGModule(
        RevGCN(16, 16, NUM_CLASSES, num_layers=2), NUM_CLASSES, lm=_lm(), sync_check=False
    )
    _trainer(1).fit(module, dm)
    with torch.no_grad():
        module.encoded.zero_()
        module.lm_stamp.fill_(-1)
        module.lm_stamp[:30] = 5
        module.lm_cache.normal_()
    fraction = module.sync_embeddings()
    assert fraction == pytest.approx(30 / 120)
    torch.testing.assert_close(module.store[:30], module.lm_cache[:30])
    assert not bool(module.encoded[30:].any())


def test_collaborative_run_logs_and_encodes(tmp_path) -> None:
    from lightgraph.callbacks import ModalitySync

    dm = _datamodule(tmp_path)
    module = UniTGModule(
        RevGCN(16, 16, NUM_CLASSES, num_layers=2),
        NUM_CLASSES,
        lm=_lm(),
        lm_epochs=1,
        lm_batch_size=16,
        encode_batch_size=16,
    )
    trainer = _trainer(10, callbacks=[ModalitySync()])
    trainer.fit(module, dm)
    metrics = trainer.callback_metrics
    for key in ("train_loss", "val_acc", "test_acc", "lm_time_total", "gnn_time_total"):
        assert key in metrics
    assert float(metrics["sync_interval"]) == 3.0  # round(0.3 * 10), no ladder step yet
    assert 0.0 < module.encoded_fraction <= 1.0


def test_bad_input(tmp_path) -> None:
    gnn = RevGCN(16, 16, NUM_CLASSES, num_layers=2)
    with pytest.raises(ValueError, match="schedule"):
        UniTGModule(gnn, NUM_CLASSES, schedule="alternate")
    with pytest.raises(ValueError, match="num_classes"):
        UniTGModule(gnn, NUM_CLASSES + 1, lm=_lm())
    with pytest.raises(ValueError, match="multilabel"):
        UniTGModule(gnn, NUM_CLASSES, multilabel=True)
    with pytest.raises(ValueError, match="encode_at"):
        UniTGModule(gnn, NUM_CLASSES, encode_at="middle")
    with pytest.raises(FileNotFoundError, match="path"):
        LMEncoder(path=str(tmp_path / "no-such-model"))
    # An LM whose vocabulary is smaller than the tokenizer's ids.
    module = UniTGModule(gnn, NUM_CLASSES, lm=_lm(vocab=8))
    with pytest.raises(ValueError, match="vocab_size"):
        _trainer(1).fit(module, _datamodule(tmp_path))
    # A GNN whose input width is not the feature size.
    module = UniTGModule(RevGCN(8, 16, NUM_CLASSES, num_layers=2), NUM_CLASSES)
    with pytest.raises(ValueError, match="in_channels"):
        _trainer(1).fit(module, _datamodule(tmp_path))


def test_resume_continues_the_uninterrupted_run(tmp_path) -> None:
    from lightgraph.callbacks import ModalitySync

    def module() -> UniTGModule:
        torch.manual_seed(0)
        return UniTGModule(
            RevGCN(16, 16, NUM_CLASSES, num_layers=2),
            NUM_CLASSES,
            lm=_lm(),
            lm_epochs=2,
            lm_batch_size=16,
            encode_batch_size=16,
            lm_share=1.0,
            total_epochs=4,
        )

    full = module()
    _trainer(4, callbacks=[ModalitySync(total_epochs=4)]).fit(full, _datamodule(tmp_path))

    first = module()
    trainer = _trainer(2, callbacks=[ModalitySync(total_epochs=4)])
    trainer.fit(first, _datamodule(tmp_path))
    ckpt = tmp_path / "half.ckpt"
    trainer.save_checkpoint(ckpt)
    resumed = module()
    _trainer(4, callbacks=[ModalitySync(total_epochs=4)]).fit(
        resumed, _datamodule(tmp_path), ckpt_path=str(ckpt)
    )
    for name, value in full.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, msg=name)


def _logged(root) -> list[dict[str, str]]:
    """The epoch-level rows of the CSV logger's ``metrics.csv`` under ``root``."""
    (path,) = glob.glob(os.path.join(str(root), "**", "metrics.csv"), recursive=True)
    with open(path) as f:
        return [row for row in csv.DictReader(f) if row.get("epoch")]


@pytest.mark.parametrize("recipe", ["lm_then_gnn.yaml", "unitg_single.yaml"])
def test_recipes_log_encoded_fraction_every_epoch(tmp_path, recipe: str) -> None:
    """The module logs ``encoded_fraction`` (its store's share of LM-encoded nodes) every
    epoch, whether or not ``ModalitySync`` drives the syncs: the sequential baseline
    (``lm_then_gnn.yaml``, no ModalitySync) encodes every node in its first epoch."""
    from lightgraph.cli import build_cli

    epochs = 3
    cli = build_cli(
        args=[
            "--config",
            os.path.join(os.path.dirname(__file__), "..", "..", "recipes", recipe),
            "--data.init_args.dataset.init_args.graph.init_args.num_nodes=200",
            "--model.init_args.model.init_args.num_layers=2",
            "--model.init_args.lm_epochs=1",
            f"--trainer.max_epochs={epochs}",
            f"--trainer.logger.init_args.save_dir={tmp_path / 'logs'}",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    cli.trainer.fit(cli.model, cli.datamodule)
    n = int(cli.datamodule.graph().num_nodes)
    fractions = {
        int(row["epoch"]): float(row["encoded_fraction"])
        for row in _logged(tmp_path / "logs")
        if row.get("encoded_fraction")
    }
    assert sorted(fractions) == list(range(epochs))
    if recipe == "lm_then_gnn.yaml":
        assert fractions == dict.fromkeys(range(epochs), 1.0)  # every node, from epoch 0
    # The last value is the store's: nodes encoded over all nodes, counted here.
    assert fractions[epochs - 1] == int(cli.model.encoded.sum()) / n
