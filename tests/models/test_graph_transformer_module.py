"""GraphTransformerModule: single-process fits, and graph parallelism equal to one process."""

from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from lightgraph.data import GraphSetDataModule, SyntheticGraphSet
from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.data.lightning.node_sequence import NodeSequenceDataModule
from lightgraph.distributed import ParallelContext, SequenceParallel
from lightgraph.models.graph_transformer_module import GraphTransformerModule
from lightgraph.nn.models.graphormer import Graphormer
from lightgraph.nn.models.gt import GT
from lightgraph.strategies.graph_parallel import GraphParallelStrategy

FEATURES, CLASSES = 8, 3


class History(pl.Callback):
    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.epochs.append({k: float(v) for k, v in trainer.callback_metrics.items()})


def _sequences(tmp_path, pe_dim: int = 0) -> NodeSequenceDataModule:
    graph = SyntheticGraph(
        num_nodes=120, avg_degree=6, num_features=FEATURES, num_classes=CLASSES, seed=3
    )
    # Two sequences of 61 tokens (global token included): uneven shards on 2 ranks.
    return NodeSequenceDataModule(
        graph, sequence_length=60, pe_dim=pe_dim, cache_dir=str(tmp_path / "cache")
    )


def _trainer(tmp_path, epochs: int, devices: int = 1, callbacks=()) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=GraphParallelStrategy(start_method="fork") if devices > 1 else "auto",
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        default_root_dir=tmp_path,
    )


@pytest.mark.timeout(60)
def test_fit_node_sequences_single_process(tmp_path) -> None:
    torch.manual_seed(0)
    model = Graphormer(FEATURES, CLASSES, hidden_channels=16, heads=4, num_layers=2, dropout=0.0)
    module = GraphTransformerModule(model, num_classes=CLASSES, lr=1e-2)
    history = History()
    trainer = _trainer(tmp_path, epochs=8, callbacks=[history])
    trainer.fit(module, _sequences(tmp_path))
    losses = [e["train_loss"] for e in history.epochs]
    assert losses[-1] < 0.7 * losses[0]
    metrics = trainer.callback_metrics
    for key in ("val_acc", "test_acc", "val_loss", "train_step_time", "attention_threshold"):
        assert key in metrics, key
    assert float(metrics["attention_dense"]) == 0.0  # sparse kind
    assert float(metrics["attention_dense_fraction"]) == 0.0


@pytest.mark.timeout(60)
def test_dual_logs_its_dense_steps_per_step_and_per_epoch(tmp_path) -> None:
    """Two sequences per epoch and a dense step every 3: steps 0 and 3 of 0..5 are dense,
    so the epochs run 1/2, 1/2 and 0 of their steps dense (the sequences meet C1-C3)."""

    class Recorder(Logger):
        """Keeps every logged metric of every step."""

        name, version = "recorder", 0

        def __init__(self) -> None:
            super().__init__()
            self.rows: list[dict[str, float]] = []

        @rank_zero_only
        def log_metrics(self, metrics, step=None) -> None:
            self.rows.append(dict(metrics))

        def log_hyperparams(self, params, *args, **kwargs) -> None:
            pass

    torch.manual_seed(0)
    model = Graphormer(
        FEATURES, CLASSES, hidden_channels=8, heads=2, num_layers=2, kind="dual", dense_every=3
    )
    module = GraphTransformerModule(model, num_classes=CLASSES, lr=1e-2)
    history, recorder = History(), Recorder()
    data = _sequences(tmp_path)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=recorder,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        callbacks=[history],
        default_root_dir=tmp_path,
    )
    trainer.fit(module, data)
    assert all(all(item.graph.conditions().values()) for item in data.sequences)
    per_step = [row["attention_dense"] for row in recorder.rows if "attention_dense" in row]
    assert per_step == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    per_epoch = [
        row["attention_dense_fraction"]
        for row in recorder.rows
        if "attention_dense_fraction" in row
    ]
    assert per_epoch == [0.5, 0.5, 0.0]
    assert [e["attention_dense_fraction"] for e in history.epochs] == [0.5, 0.5, 0.0]


@pytest.mark.timeout(60)
def test_fit_graph_set_single_process(tmp_path) -> None:
    torch.manual_seed(0)
    data = GraphSetDataModule(
        SyntheticGraphSet(num_graphs=96, num_features=4), batch_size=16, pe_dim=4
    )
    model = GT(4, 2, hidden_channels=16, heads=4, num_layers=2, pe_dim=4, task="graph")
    module = GraphTransformerModule(model, num_classes=2, task="graph", lr=5e-3, warmup_epochs=2)
    history = History()
    trainer = _trainer(tmp_path, epochs=6, callbacks=[history])
    trainer.fit(module, data)
    losses = [e["train_loss"] for e in history.epochs]
    assert losses[-1] < losses[0]
    assert "val_acc" in trainer.callback_metrics
    trainer.test(module, data, verbose=False)
    assert "test_acc" in trainer.callback_metrics


@pytest.mark.timeout(60)
def test_graph_regression_logs_mae(tmp_path) -> None:
    torch.manual_seed(0)
    data = GraphSetDataModule(
        SyntheticGraphSet(num_graphs=32, task="regression", num_features=4), batch_size=8
    )
    model = Graphormer(4, 1, hidden_channels=8, heads=2, num_layers=1, task="graph", kind="dense")
    module = GraphTransformerModule(model, num_classes=None, task="graph")
    trainer = _trainer(tmp_path, epochs=1)
    trainer.fit(module, data)
    assert "val_mae" in trainer.callback_metrics
    assert float(trainer.callback_metrics["attention_dense"]) == 1.0
    assert float(trainer.callback_metrics["attention_dense_fraction"]) == 1.0


def test_configure_model_checks_heads_against_the_graph_parallel_ranks() -> None:
    sp = SequenceParallel()
    sp.world_size = 3  # a stand-in for three graph-parallel ranks
    module = GraphTransformerModule(
        Graphormer(FEATURES, CLASSES, hidden_channels=8, heads=4, num_layers=1), CLASSES
    )
    module.attach_parallel_context(ParallelContext(sequence_parallel=sp))
    with pytest.raises(ValueError, match="`num_heads` to be a multiple of the sequence-parallel"):
        module.configure_model()
    sp.world_size = 2
    module.configure_model()
    assert all(a.sequence_parallel is sp for a in module.attention_layers)
    module.teardown("fit")
    assert all(a.sequence_parallel is None for a in module.attention_layers)


def test_bad_arguments() -> None:
    model = Graphormer(FEATURES, CLASSES, hidden_channels=8, heads=2, num_layers=1)
    with pytest.raises(ValueError, match="model's task to match `task`='graph'"):
        GraphTransformerModule(model, CLASSES, task="graph")
    with pytest.raises(ValueError, match="`num_classes` to be an integer >= 2"):
        GraphTransformerModule(model, 1)
    with pytest.raises(ValueError, match=r"`task` to be one of \('node', 'graph'\)"):
        GraphTransformerModule(model, CLASSES, task="edge")  # type: ignore[arg-type]


def _fit_parallel(tmp_path, devices: int, model: torch.nn.Module) -> GraphTransformerModule:
    module = GraphTransformerModule(model, num_classes=CLASSES, lr=1e-2)
    data = _sequences(tmp_path, pe_dim=getattr(model, "pe_dim", 0))
    _trainer(tmp_path, epochs=2, devices=devices).fit(module, data)
    return module


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_graph_parallel_ranks_match_one_process(tmp_path) -> None:
    """Node sequences sharded over 2 gloo ranks (Ulysses all-to-all, synchronised batch
    norm for GT) train to the same float64 weights as one process."""

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.ModuleList(
            [
                Graphormer(
                    FEATURES,
                    CLASSES,
                    hidden_channels=8,
                    heads=2,
                    num_layers=2,
                    dropout=0.0,
                    attention_dropout=0.0,
                ),
                GT(FEATURES, CLASSES, hidden_channels=8, heads=2, num_layers=2, pe_dim=3),
            ]
        ).double()

    for index in range(2):
        initial = build()[index]
        single = _fit_parallel(tmp_path / f"single{index}", 1, build()[index])
        multi = _fit_parallel(tmp_path / f"multi{index}", 2, build()[index])
        for (name, p1), p2, p0 in zip(
            single.model.named_parameters(),
            multi.model.parameters(),
            initial.parameters(),
            strict=True,
        ):
            assert not torch.equal(p1, p0), f"{name} did not train"
            torch.testing.assert_close(p2, p1, rtol=1e-7, atol=1e-9, msg=f"{name} differs")


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_dense_kind_without_buckets_trains_on_two_ranks(tmp_path) -> None:
    """Sequences longer than `dense_limit` carry no dense buckets, so a dense kind never
    reads the spatial bias table; DDP must still get a (zero) gradient for it."""
    graph = SyntheticGraph(
        num_nodes=120, avg_degree=6, num_features=FEATURES, num_classes=CLASSES, seed=3
    )
    data = NodeSequenceDataModule(
        graph, sequence_length=60, dense_limit=0, cache_dir=str(tmp_path / "cache")
    )
    torch.manual_seed(0)
    model = Graphormer(FEATURES, CLASSES, hidden_channels=8, heads=2, num_layers=2, kind="dense")
    table = model.layers[0].attn.bias_table.detach().clone()
    module = GraphTransformerModule(model, num_classes=CLASSES, lr=1e-2)
    trainer = _trainer(tmp_path, epochs=2, devices=2)
    trainer.fit(module, data)
    assert trainer.state.finished
    # Never read, so never moved (a zero gradient leaves Adam's parameter unchanged).
    torch.testing.assert_close(module.model.layers[0].attn.bias_table.detach(), table)


def test_setup_asks_for_the_data_modules_pe_dim(tmp_path) -> None:
    module = GraphTransformerModule(
        GT(FEATURES, CLASSES, hidden_channels=8, heads=2, num_layers=1, pe_dim=3), CLASSES
    )
    module._trainer = SimpleNamespace(datamodule=_sequences(tmp_path))  # pe_dim=0
    with pytest.raises(ValueError, match="`data.init_args.pe_dim: 3`"):
        module.setup("fit")
    module._trainer = SimpleNamespace(datamodule=_sequences(tmp_path, pe_dim=3))
    module.setup("fit")
    # Graphormer reads no PE: any pe_dim of the data is fine.
    module = GraphTransformerModule(
        Graphormer(FEATURES, CLASSES, hidden_channels=8, heads=2, num_layers=1), CLASSES
    )
    module._trainer = SimpleNamespace(datamodule=_sequences(tmp_path, pe_dim=3))
    module.setup("fit")


def _resume_trainer(tmp_path, epochs: int) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[
            pl.callbacks.ModelCheckpoint(
                dirpath=tmp_path / "ckpt", filename="{epoch}", save_top_k=-1, every_n_epochs=1
            )
        ],
        default_root_dir=tmp_path,
    )


def _gt_module() -> GraphTransformerModule:
    torch.manual_seed(0)
    model = GT(FEATURES, CLASSES, hidden_channels=8, heads=2, num_layers=2, pe_dim=3).double()
    return GraphTransformerModule(model, num_classes=CLASSES, lr=1e-2)


@pytest.mark.timeout(120)
def test_resumed_gt_run_equals_an_uninterrupted_one(tmp_path) -> None:
    """GT's eigenvector sign flips continue from the checkpoint (a persistent buffer), so 4
    epochs resumed after epoch 2 end with the weights of 4 uninterrupted epochs."""
    straight = _gt_module()
    _resume_trainer(tmp_path / "straight", 4).fit(straight, _sequences(tmp_path, pe_dim=3))
    ckpt = tmp_path / "straight" / "ckpt" / "epoch=1.ckpt"
    state = torch.load(ckpt, weights_only=False)["state_dict"]
    assert int(state["model.flips"]) == 2 * 2  # 2 epochs of 2 sequences
    assert int(straight.model.flips) == 4 * 2
    resumed = _gt_module()
    resumed.model.flips.fill_(123)  # overwritten by the checkpoint
    _resume_trainer(tmp_path / "resumed", 4).fit(
        resumed, _sequences(tmp_path, pe_dim=3), ckpt_path=str(ckpt)
    )
    assert int(resumed.model.flips) == 4 * 2
    for (name, p1), p2 in zip(
        straight.model.named_parameters(), resumed.model.parameters(), strict=True
    ):
        torch.testing.assert_close(p2, p1, rtol=0, atol=0, msg=f"{name} differs")
    for (name, b1), b2 in zip(straight.model.named_buffers(), resumed.model.buffers(), strict=True):
        torch.testing.assert_close(b2, b1, rtol=0, atol=0, msg=f"{name} differs")
