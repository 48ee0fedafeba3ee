from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from lightgraph.callbacks import CommunicationMonitor
from lightgraph.data import PartitionedGraphDataModule, SyntheticGraph
from lightgraph.models import NodeClassifier
from lightgraph.nn import GCN
from lightgraph.quant import FixedBits
from lightgraph.strategies import BoundaryExchangeStrategy


def _fit(tmp_path, quantization) -> dict:
    ds = SyntheticGraph(num_nodes=400, avg_degree=8, num_classes=4, num_features=16, seed=3)
    torch.manual_seed(0)
    module = NodeClassifier(
        GCN(16, 4, hidden_channels=16, num_layers=2, dropout=0.0), num_classes=4
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        strategy=BoundaryExchangeStrategy(start_method="fork", quantization=quantization),
        callbacks=[CommunicationMonitor()],
        default_root_dir=tmp_path,
    )
    trainer.fit(module, PartitionedGraphDataModule(ds, cache_dir=str(tmp_path / "cache")))
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_data_and_parameter_bytes_add_up(tmp_path) -> None:
    fp32 = _fit(tmp_path / "fp32", None)
    assert fp32["comm/params_bytes"] == 0 and fp32["comm/params_share"] == 0
    assert fp32["comm/data_bytes"] == fp32["comm_bytes"]
    q2 = _fit(tmp_path / "q2", FixedBits(2))
    halo_rows = fp32["comm_bytes"] / (16 * 4)  # rows sent per epoch (3 transfers per halo node)
    # 4 bytes of bf16 scale and zero point per row, plus 2 per wide-offset row
    extra = q2["comm/params_bytes"] - 4 * halo_rows
    assert 0 <= extra <= 2 * halo_rows and extra % 2 == 0
    assert q2["comm/data_bytes"] == halo_rows * 16 * 2 / 8
    assert q2["comm/data_bytes"] + q2["comm/params_bytes"] == q2["comm_bytes"]
    assert q2["comm/forward_bytes"] + q2["comm/backward_bytes"] == q2["comm_bytes"]
    assert q2["comm/params_share"] == pytest.approx(q2["comm/params_bytes"] / q2["comm_bytes"])
    assert q2["comm/quant_seconds"] > 0
