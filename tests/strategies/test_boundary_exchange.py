"""BoundaryExchangeStrategy through the Trainer: equals one process, checkpoints resume."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import StrategyRegistry

from lightgraph.data import PartitionedGraphDataModule, PartitionPlan, SyntheticGraph
from lightgraph.models import NodeClassifier
from lightgraph.nn import GCN
from lightgraph.strategies import BoundaryExchangeStrategy


def tiny_dataset() -> SyntheticGraph:
    return SyntheticGraph(num_nodes=400, avg_degree=8, num_classes=4, num_features=16, seed=3)


def make_module() -> NodeClassifier:
    torch.manual_seed(0)
    ds = tiny_dataset()
    return NodeClassifier(
        GCN(ds.num_features, ds.num_classes, hidden_channels=16, num_layers=2, dropout=0.0),
        ds.num_classes,
        lr=0.02,
    )


def make_trainer(tmp_path, devices: int, max_epochs: int, **kwargs) -> pl.Trainer:
    strategy = BoundaryExchangeStrategy(start_method="fork") if devices > 1 else "auto"
    return pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy,
        max_epochs=max_epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        **kwargs,
    )


def fit(tmp_path, devices: int, max_epochs: int, **kwargs) -> tuple[pl.Trainer, NodeClassifier]:
    module = make_module()
    dm = PartitionedGraphDataModule(
        tiny_dataset(), partitioner="metis", cache_dir=str(tmp_path / "cache")
    )
    trainer = make_trainer(tmp_path, devices, max_epochs, enable_checkpointing=False, **kwargs)
    trainer.fit(module, dm)
    return trainer, module


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_two_processes_match_one_process(tmp_path) -> None:
    single, single_module = fit(tmp_path / "single", devices=1, max_epochs=15)
    multi, multi_module = fit(tmp_path / "multi", devices=2, max_epochs=15)
    # Same weights, same (global) loss and gradients: the runs agree up to float rounding.
    for (name, p1), p2 in zip(
        single_module.named_parameters(), multi_module.parameters(), strict=True
    ):
        torch.testing.assert_close(p2, p1, atol=1e-4, rtol=1e-4, msg=f"parameter {name} differs")
    for key in ("train_loss", "val_loss"):
        torch.testing.assert_close(
            multi.callback_metrics[key], single.callback_metrics[key], atol=1e-4, rtol=1e-4
        )
    for key in ("val_acc", "test_acc"):
        assert float(multi.callback_metrics[key]) == pytest.approx(
            float(single.callback_metrics[key]), abs=1e-6
        )
    assert float(single.callback_metrics["test_acc"]) > 0.5  # it learned something
    assert "comm_bytes" not in single.callback_metrics
    # Exact bytes: per halo node, layer 0 sends 16 input floats forward (no gradient comes
    # back: the features need none) and layer 1 sends 16 hidden floats forward and 16
    # gradient floats backward, all float32.
    dm = PartitionedGraphDataModule(tiny_dataset(), cache_dir=str(tmp_path / "multi" / "cache"))
    halo = sum(
        PartitionPlan.load(os.path.join(dm.cache_path(2), f"part{r}.pt")).num_halo for r in range(2)
    )
    assert halo > 0
    assert float(multi.callback_metrics["comm_bytes"]) == halo * (16 + 16 + 16) * 4
    assert float(multi.callback_metrics["comm/layer0_forward_bytes"]) == halo * 16 * 4
    assert "comm/layer0_backward_bytes" not in multi.callback_metrics


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_checkpoint_resume_continues_training(tmp_path) -> None:
    reference, ref_module = fit(tmp_path / "straight", devices=2, max_epochs=6)

    ckpt_dir = tmp_path / "ckpt"
    module = make_module()
    dm = PartitionedGraphDataModule(tiny_dataset(), cache_dir=str(tmp_path / "cache"))
    first = make_trainer(
        tmp_path, 2, 3, callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_last=True)]
    )
    first.fit(module, dm)
    last = os.path.join(ckpt_dir, "last.ckpt")
    assert os.path.exists(last)
    assert torch.load(last, weights_only=False)["epoch"] == 2

    resumed_module = make_module()
    dm = PartitionedGraphDataModule(tiny_dataset(), cache_dir=str(tmp_path / "cache"))
    second = make_trainer(tmp_path, 2, 6, enable_checkpointing=False)
    second.fit(resumed_module, dm, ckpt_path=last)
    saved = torch.load(last, weights_only=False)["state_dict"]
    assert not torch.allclose(
        resumed_module.model.convs[0].conv.lin.weight, saved["model.convs.0.conv.lin.weight"]
    )
    # Weights and Adam state were restored: 3 + 3 epochs equal 6 uninterrupted epochs.
    for p_ref, p in zip(ref_module.parameters(), resumed_module.parameters(), strict=True):
        torch.testing.assert_close(p, p_ref, atol=1e-5, rtol=1e-5)


def test_registered_names() -> None:
    for name, method in (
        ("boundary_exchange", "popen"),
        ("boundary_exchange_spawn", "spawn"),
        ("boundary_exchange_fork", "fork"),
    ):
        assert name in StrategyRegistry
        strategy = StrategyRegistry.get(name)
        assert isinstance(strategy, BoundaryExchangeStrategy)
        assert strategy._start_method == method


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            {"transport": "carrier_pigeon"},
            "`transport` to be one of \\('all_to_all', 'ring'\\) but got 'carrier_pigeon'",
        ),
        ({"start_method": "teleport"}, "`start_method` in"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        BoundaryExchangeStrategy(**kwargs)


def test_exchanger_before_setup_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="once the Trainer has set up"):
        _ = BoundaryExchangeStrategy().exchanger


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_partitioned_data_with_plain_ddp_is_rejected(tmp_path) -> None:
    module = make_module()
    dm = PartitionedGraphDataModule(tiny_dataset(), cache_dir=str(tmp_path / "cache"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_fork",
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    with pytest.raises(Exception, match="needs an `exchanger`"):
        trainer.fit(module, dm)


def _fit_with(
    tmp_path, name: str, strategy: BoundaryExchangeStrategy, epochs: int = 15
) -> tuple[pl.Trainer, NodeClassifier]:
    module = make_module()
    dm = PartitionedGraphDataModule(tiny_dataset(), cache_dir=str(tmp_path / "cache"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        default_root_dir=tmp_path / name,
    )
    trainer.fit(module, dm)
    return trainer, module


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_quantisation_off_is_bit_identical_and_8_bit_is_close(tmp_path) -> None:
    from lightgraph.quant import FixedBits

    vanilla, v_mod = _fit_with(tmp_path, "vanilla", BoundaryExchangeStrategy(start_method="fork"))
    off, off_mod = _fit_with(
        tmp_path,
        "off",
        BoundaryExchangeStrategy(start_method="fork", quantization=None, mode="sync"),
    )
    for p, q in zip(v_mod.parameters(), off_mod.parameters(), strict=True):
        assert torch.equal(p, q)
    q8, q8_mod = _fit_with(
        tmp_path, "q8", BoundaryExchangeStrategy(start_method="fork", quantization=FixedBits(8))
    )
    # 8-bit stochastic rounding perturbs each exchanged value by less than range/255 (≈0.4% of
    # a row's range), without bias; over 15 epochs of Adam the weights drift by well under 1%
    # of their scale and the global metrics stay within 0.01.
    for p, q in zip(v_mod.parameters(), q8_mod.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=2e-2, rtol=2e-2)
    assert float(q8.callback_metrics["train_loss"]) == pytest.approx(
        float(vanilla.callback_metrics["train_loss"]), rel=0.02
    )
    assert float(q8.callback_metrics["test_acc"]) == pytest.approx(
        float(vanilla.callback_metrics["test_acc"]), abs=0.01
    )
    # Exact bytes: FP32 sends 3 x 16 floats per halo node and epoch (see above); 8 bits send
    # 16 one-byte codes plus 4 bytes of bf16 scale and zero point per row instead, and 2 more
    # bytes (the low half of a float32 zero point) for each wide-offset row.
    fp32 = float(vanilla.callback_metrics["comm_bytes"])
    halo = fp32 / (3 * 16 * 4)
    assert halo == int(halo) > 0
    q8_bytes = float(q8.callback_metrics["comm_bytes"])
    extra = q8_bytes - halo * 3 * (16 + 4)
    assert 0 <= extra <= halo * 3 * 2 and extra % 2 == 0
