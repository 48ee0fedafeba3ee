"""RandomStateCheckpoint: a run resumed from an epoch-boundary checkpoint equals the
uninterrupted run bit for bit (weights, optimiser state, every rank's final random states,
logged metrics of the remaining epochs) -- and without the callback it does not."""

from __future__ import annotations

import csv
import glob
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch_geometric.nn.models import GraphSAGE

from lightgraph.callbacks import RandomStateCheckpoint
from lightgraph.data import NodeSequenceDataModule, PartitionedGraphDataModule, SyntheticGraph
from lightgraph.data.loader.neighbor_sampler import neighbor_loader
from lightgraph.models import GraphTransformerModule, MiniBatchNodeClassifier, NodeClassifier
from lightgraph.nn import GCN, GT
from lightgraph.quant import FixedBits
from lightgraph.strategies import BoundaryExchangeStrategy, GraphParallelStrategy
from lightgraph.utilities import seed_global_rngs

FEATURES, CLASSES = 16, 4
EPOCHS, HALF = 4, 2
STATE_KEY = "RandomStateCheckpoint"


def _dataset() -> SyntheticGraph:
    return SyntheticGraph(
        num_nodes=300, avg_degree=8, num_classes=CLASSES, num_features=FEATURES, seed=3
    )


# ---------------------------------------------------------------------- comparisons
def assert_identical(a: Any, b: Any, path: str = "checkpoint") -> None:
    """Bit-for-bit equality of nested checkpoint contents (tensors with ``torch.equal``)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, path
        assert torch.equal(a, b), f"{path} differs"
    elif isinstance(a, Mapping):
        assert isinstance(b, Mapping) and set(a) == set(b), f"{path}: keys differ"
        for key in a:
            assert_identical(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _metrics(run_dir: str, first_epoch: int) -> dict[tuple[int, str, str], str]:
    """Logged values of epochs ``>= first_epoch`` (wall-clock metrics left out)."""
    (path,) = glob.glob(os.path.join(run_dir, "version_*", "metrics.csv"))
    out: dict[tuple[int, str, str], str] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if not row.get("epoch") or int(row["epoch"]) < first_epoch:
                continue
            for key, value in row.items():
                if value and key not in ("epoch", "step") and "time" not in key:
                    out[(int(row["epoch"]), row["step"], key)] = value
    return out


class SeedEachProcess(pl.Callback):
    """``seed_everything`` in every process, as a ``popen``/``torchrun`` launch does: a
    forked rank inherits torch's and NumPy's states but Python re-seeds ``random`` from
    the OS in every child (``os.register_at_fork``), so two forked runs would otherwise
    start from different Python states."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        seed_global_rngs(0)


class Run:
    def __init__(self, root: str) -> None:
        self.root = root
        self.last = os.path.join(root, "ckpt", "last.ckpt")

    def checkpoint(self) -> dict[str, Any]:
        return torch.load(self.last, weights_only=True)


def _fit(
    tmp_path,
    name: str,
    module: pl.LightningModule,
    data: pl.LightningDataModule,
    strategy: Any,
    devices: int,
    epochs: int,
    ckpt_path: str | None = None,
    callback: bool = True,
    extra_callbacks: tuple[pl.Callback, ...] = (),
    **trainer_kwargs: Any,
) -> Run:
    root = str(tmp_path / name)
    callbacks: list[pl.Callback] = [SeedEachProcess()]
    if callback:
        callbacks.append(RandomStateCheckpoint())
    callbacks.extend(extra_callbacks)
    callbacks.append(ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy,
        max_epochs=epochs,
        logger=CSVLogger(str(tmp_path), name=name),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=callbacks,
        **trainer_kwargs,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, data, ckpt_path=ckpt_path)
    return Run(root)


def _check_resume(
    run: Callable[..., Run],
    logged_keys: tuple[str, ...] = ("train_loss",),
    also: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Uninterrupted vs. resumed at the epoch boundary ``HALF``: identical (``also``
    compares more of the two final checkpoints), and every epoch after ``HALF`` logged
    ``logged_keys``. Without the callback the resumed run differs. Returns the final
    checkpoint."""
    straight = run("straight", EPOCHS)
    half = run("half", HALF)
    assert torch.load(half.last, weights_only=True)["epoch"] == HALF - 1
    resumed = run("resumed", EPOCHS, half.last)
    a, b = straight.checkpoint(), resumed.checkpoint()
    assert a["epoch"] == b["epoch"] == EPOCHS - 1 and a["global_step"] == b["global_step"]
    assert_identical(a["state_dict"], b["state_dict"], "state_dict")
    assert_identical(a["optimizer_states"], b["optimizer_states"], "optimizer_states")
    # Every rank's generators ended in the same state, too.
    assert_identical(a["callbacks"][STATE_KEY], b["callbacks"][STATE_KEY], "random states")
    if also is not None:
        also(a, b)
    logged, relogged = _metrics(straight.root, HALF), _metrics(resumed.root, HALF)
    expected = {(e, k) for e in range(HALF, EPOCHS) for k in logged_keys}
    assert {(e, k) for e, _, k in logged} >= expected, expected - {(e, k) for e, _, k in logged}
    assert logged == relogged
    # The same resume without the callback continues from fresh generators.
    plain = run("plain", EPOCHS, half.last, callback=False).checkpoint()
    assert any(
        not torch.equal(a["state_dict"][k], plain["state_dict"][k]) for k in a["state_dict"]
    ), "the resumed run without RandomStateCheckpoint should differ: nothing random was drawn"
    return a


# ------------------------------------------------------------ boundary exchange, 2 ranks
def _gcn(dropout: float) -> NodeClassifier:
    seed_global_rngs(0)  # every run starts alike, as under seed_everything
    return NodeClassifier(
        GCN(FEATURES, CLASSES, hidden_channels=16, num_layers=2, dropout=dropout), CLASSES, lr=0.02
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("dropout", "bits"),
    [(0.5, None), (0.5, 2), (0.0, 2)],
    ids=["fp32-dropout", "fixed2-dropout", "fixed2-only"],
)
def test_boundary_exchange_resume_is_bit_exact(tmp_path, dropout: float, bits: int | None) -> None:
    def run(name: str, epochs: int, ckpt: str | None = None, callback: bool = True) -> Run:
        data = PartitionedGraphDataModule(
            _dataset(), partitioner="metis", cache_dir=str(tmp_path / "cache")
        )
        strategy = BoundaryExchangeStrategy(
            quantization=None if bits is None else FixedBits(bits), start_method="fork"
        )
        return _fit(tmp_path, name, _gcn(dropout), data, strategy, 2, epochs, ckpt, callback)

    final = _check_resume(run)
    payload = final["callbacks"][STATE_KEY]
    assert payload["world_size"] == 2 and len(payload["ranks"]) == 2
    exchangers = [r["owned"]["parallel_context.halo_exchanger"] for r in payload["ranks"]]
    if bits is None:
        assert all(e["generator"] is None for e in exchangers)  # FP32 draws no noise
    else:  # one quantisation-noise stream per rank, saved per rank
        states = [e["generator"]["state"] for e in exchangers]
        assert not torch.equal(states[0], states[1])


# ------------------------------------------------------ PipeGCN (async exchange), 2 ranks
EXCHANGER_KEY = "parallel_context.halo_exchanger"


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_pipegcn_resume_is_bit_exact(tmp_path) -> None:
    """``mode="async"`` throughout (PipeGCN, FP32, dropout): every epoch after the first
    computes with the halo rows and gradients of the previous epoch. The checkpoint
    carries them (``HaloExchanger.rng_state()["buffers"]``), so the run resumed right
    before an asynchronous epoch equals the uninterrupted one; the same checkpoint
    without them (the resumed run's first epoch then exchanges fresh rows) differs."""

    def run(name: str, epochs: int, ckpt: str | None = None, callback: bool = True) -> Run:
        data = PartitionedGraphDataModule(
            _dataset(), partitioner="metis", cache_dir=str(tmp_path / "cache")
        )
        strategy = BoundaryExchangeStrategy(mode="async", start_method="fork")
        return _fit(tmp_path, name, _gcn(0.5), data, strategy, 2, epochs, ckpt, callback)

    final = _check_resume(run)
    half = Run(str(tmp_path / "half"))
    checkpoint = half.checkpoint()  # loads with weights_only=True
    ranks = checkpoint["callbacks"][STATE_KEY]["ranks"]
    for rank, state in enumerate(ranks):
        carried = state["owned"][EXCHANGER_KEY]["buffers"]
        # the rows of both directions, received while the checkpointed epoch trained
        assert {entry["direction"] for entry in carried} == {"forward", "backward"}, rank
        assert all(entry["rows"].numel() > 0 for entry in carried), rank
    # Rows of the next epoch were in flight at the end of the run; they were waited for.
    assert {len(r["owned"][EXCHANGER_KEY]["buffers"]) for r in ranks} == {
        len(r["owned"][EXCHANGER_KEY]["buffers"]) for r in final["callbacks"][STATE_KEY]["ranks"]
    }
    # The control: the same resume with the carried rows dropped from the checkpoint.
    for state in ranks:
        del state["owned"][EXCHANGER_KEY]["buffers"]  # as saved before they were carried
    stripped = str(tmp_path / "stripped.ckpt")
    torch.save(checkpoint, stripped)
    dropped = run("dropped", EPOCHS, stripped).checkpoint()
    assert any(
        not torch.equal(final["state_dict"][k], dropped["state_dict"][k])
        for k in final["state_dict"]
    ), "resumed without the carried rows, the first asynchronous epoch should differ"


# ----------------------------------------------------------- graph transformer, 2 ranks
@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_graph_transformer_resume_is_bit_exact(tmp_path) -> None:
    """GT under graph parallelism: dropout, attention dropout, eigenvector sign flips
    (a step counter in a buffer) and 4-bit quantised all-to-alls (per-rank noise)."""

    def run(name: str, epochs: int, ckpt: str | None = None, callback: bool = True) -> Run:
        seed_global_rngs(0)
        model = GT(
            FEATURES,
            CLASSES,
            hidden_channels=8,
            heads=2,
            num_layers=2,
            pe_dim=3,
            dropout=0.3,
            attention_dropout=0.2,
        )
        module = GraphTransformerModule(model, num_classes=CLASSES, lr=1e-2)
        data = NodeSequenceDataModule(
            _dataset(), sequence_length=100, pe_dim=3, cache_dir=str(tmp_path / "cache")
        )
        strategy = GraphParallelStrategy(quantization=FixedBits(4), start_method="fork")
        return _fit(tmp_path, name, module, data, strategy, 2, epochs, ckpt, callback)

    final = _check_resume(run)
    assert int(final["state_dict"]["model.flips"]) > 0
    ranks = final["callbacks"][STATE_KEY]["ranks"]
    sp = [r["owned"]["parallel_context.sequence_parallel"]["generator"] for r in ranks]
    assert sp[0] is not None and not torch.equal(sp[0]["state"], sp[1]["state"])


# ------------------------------------------------------------------ one process
class SampledGraph(pl.LightningDataModule):
    """Neighbour-sampled mini-batches: a shuffling DataLoader (its own generator, or
    torch's global one) and a sampler with a running generator, in training and in
    validation."""

    def __init__(self, own_generator: bool) -> None:
        super().__init__()
        self.own_generator = own_generator
        self.data = _dataset().load()

    def train_dataloader(self) -> Any:
        extra = {} if self.own_generator else {"generator": None}
        return neighbor_loader(
            self.data,
            [4, 3],
            input_nodes=self.data.train_mask,
            batch_size=64,
            shuffle=True,
            seed=1,
            **extra,
        )

    def val_dataloader(self) -> Any:
        return neighbor_loader(
            self.data, [4, 3], input_nodes=self.data.val_mask, batch_size=64, seed=2
        )


def _sage() -> MiniBatchNodeClassifier:
    seed_global_rngs(0)  # every run starts alike, as under seed_everything
    model = GraphSAGE(FEATURES, 16, num_layers=2, out_channels=CLASSES, dropout=0.5)
    return MiniBatchNodeClassifier(model, CLASSES, lr=0.01)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("own_generator", [True, False], ids=["loader-generator", "global"])
def test_single_process_resume_is_bit_exact(tmp_path, own_generator: bool) -> None:
    def run(name: str, epochs: int, ckpt: str | None = None, callback: bool = True) -> Run:
        module = _sage()
        return _fit(
            tmp_path, name, module, SampledGraph(own_generator), "auto", 1, epochs, ckpt, callback
        )

    final = _check_resume(run)
    owned = final["callbacks"][STATE_KEY]["ranks"][0]["owned"]
    assert "train_dataloader.0.node_sampler" in owned and "val_dataloader.0.node_sampler" in owned
    assert ("train_dataloader.0.generator" in owned) == own_generator


@pytest.mark.timeout(60)
def test_resume_with_dataloaders_rebuilt_every_epoch_is_bit_exact(tmp_path) -> None:
    """`reload_dataloaders_every_n_epochs=1`: the uninterrupted run starts every epoch with
    new loaders (fresh generators); the resumed run must not give them the old ones' states."""

    def run(name: str, epochs: int, ckpt: str | None = None, callback: bool = True) -> Run:
        return _fit(
            tmp_path,
            name,
            _sage(),
            SampledGraph(True),
            "auto",
            1,
            epochs,
            ckpt,
            callback,
            reload_dataloaders_every_n_epochs=1,
        )

    _check_resume(run)


# ------------------------------------------------------------------ world size, errors
def _one_epoch_checkpoint(tmp_path, callback: bool = True) -> str:
    return _fit(
        tmp_path, "source", _sage(), SampledGraph(True), "auto", 1, 1, callback=callback
    ).last


def _trainer(tmp_path, callback: RandomStateCheckpoint) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
        callbacks=[callback],
    )


def _as_two_ranks(path: str, out: str) -> str:
    checkpoint = torch.load(path, weights_only=True)
    payload = checkpoint["callbacks"][STATE_KEY]
    payload["world_size"], payload["ranks"] = 2, payload["ranks"] * 2
    torch.save(checkpoint, out)
    return out


@pytest.mark.timeout(60)
def test_a_checkpoint_of_another_world_size_is_a_clear_error(tmp_path) -> None:
    path = _as_two_ranks(_one_epoch_checkpoint(tmp_path), str(tmp_path / "two.ckpt"))
    trainer = _trainer(tmp_path, RandomStateCheckpoint())
    with pytest.raises(
        ValueError,
        match=r"holds the random states of 2 processes \(world_size=2\) but this run has "
        r"world_size=1\. Random states are per rank",
    ):
        trainer.fit(_sage(), SampledGraph(True), ckpt_path=path)


@pytest.mark.timeout(60)
def test_reseed_resumes_another_world_size_reproducibly(tmp_path) -> None:
    path = _as_two_ranks(_one_epoch_checkpoint(tmp_path), str(tmp_path / "two.ckpt"))
    weights = []
    for _ in range(2):
        module = _sage()
        trainer = _trainer(tmp_path, RandomStateCheckpoint(on_world_size_mismatch="reseed"))
        with pytest.warns(UserWarning, match="written by a different number of processes"):
            trainer.fit(module, SampledGraph(True), ckpt_path=path)
        weights.append({k: v.clone() for k, v in module.state_dict().items()})
    assert_identical(weights[0], weights[1], "reseeded weights")


@pytest.mark.timeout(60)
def test_a_checkpoint_without_random_states_warns(tmp_path) -> None:
    path = _one_epoch_checkpoint(tmp_path, callback=False)
    trainer = _trainer(tmp_path, RandomStateCheckpoint())
    with pytest.warns(UserWarning, match="the checkpoint holds no random states"):
        trainer.fit(_sage(), SampledGraph(True), ckpt_path=path)


def test_state_dict_outside_fit_warns_and_holds_nothing() -> None:
    with pytest.warns(UserWarning, match="saved outside `Trainer.fit` holds no random state"):
        assert RandomStateCheckpoint().state_dict() == {}


def test_bad_world_size_mode() -> None:
    with pytest.raises(
        ValueError,
        match=r"RandomStateCheckpoint: expected `on_world_size_mismatch` to be one of "
        r"\('error', 'reseed'\) but got 'ignore'",
    ):
        RandomStateCheckpoint(on_world_size_mismatch="ignore")  # type: ignore[arg-type]


_RANK = {"global": {}, "owned": {}}


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ([1], TypeError, r"a mapping with the keys \['format', 'ranks', 'world_size'\]"),
        (
            {"format": 1, "ranks": []},
            TypeError,
            r"a mapping with the keys .* but got \['format', 'ranks'\]",
        ),
        ({"format": 9, "world_size": 1, "ranks": [_RANK]}, ValueError, "`format` 1 but got 9"),
        ({"format": 1, "world_size": 0, "ranks": []}, ValueError, "`world_size` >= 1 but got 0"),
        (
            {"format": 1, "world_size": 2, "ranks": [_RANK]},
            ValueError,
            "`ranks` to be a list of world_size=2 states but got 1",
        ),
        (
            {"format": 1, "world_size": 1, "ranks": [{"global": {}}]},
            TypeError,
            r"the state of rank 0 to be a mapping with the keys \['global', 'owned'\]",
        ),
    ],
)
def test_load_state_dict_rejects_malformed_states(state, error, match) -> None:
    with pytest.raises(error, match=f"RandomStateCheckpoint.load_state_dict: expected {match}"):
        RandomStateCheckpoint().load_state_dict(state)
