from __future__ import annotations

import math
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist

from lightgraph.callbacks import CommunicationMonitor
from lightgraph.data import PartitionedGraphDataModule, SyntheticGraph
from lightgraph.data.partition import build_partition_plans
from lightgraph.distributed import HaloExchanger, ParallelContext, ParallelContextHolder
from lightgraph.models import NodeClassifier
from lightgraph.nn import GCN
from lightgraph.quant import FixedBits
from lightgraph.strategies import BoundaryExchangeStrategy
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph


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


class _Module(ParallelContextHolder):
    """The parts of a LightningModule the monitor touches: the context, device and log."""

    device = torch.device("cpu")

    def __init__(self, exchanger: HaloExchanger) -> None:
        self.attach_parallel_context(ParallelContext(halo_exchanger=exchanger))
        self.logged: dict[str, float] = {}

    def log(self, key: str, value: torch.Tensor, **kwargs: object) -> None:
        self.logged[key] = float(value)


def _summed(t: torch.Tensor, reduce_op: str) -> torch.Tensor:
    assert reduce_op == "sum"
    dist.all_reduce(t)
    return t


def _monitored_epoch(rank: int, world: int) -> dict:
    import lightgraph.distributed.halo_exchanger as exchanger_module

    sent: list[tuple[int, int, int, int]] = []  # (bytes, rows, width, bits) of each message
    pack_rows = exchanger_module.pack_rows

    def recording(x: torch.Tensor, row_bits: torch.Tensor, *args: object, **kw: object):
        buf = pack_rows(x, row_bits, *args, **kw)
        assert bool((row_bits == row_bits[0]).all())
        sent.append((buf.numel(), x.shape[0], x.shape[1], int(row_bits[0])))
        return buf

    exchanger_module.pack_rows = recording  # this forked rank only
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    ex = HaloExchanger(policy=FixedBits(2))
    ex.start_epoch(0)
    x = data.x[plan.global_ids[: plan.num_inner]].float()
    x[::2] = 1000.0 + 0.01 * x[::2]  # far from zero for their range: wide-offset rows
    x.requires_grad_()
    y = ex(x, plan, "train", "layer0")
    (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()  # gradients travel back
    module = _Module(ex)
    trainer = SimpleNamespace(world_size=world, strategy=SimpleNamespace(reduce=_summed))
    CommunicationMonitor().on_train_epoch_end(trainer, module)  # type: ignore[arg-type]
    ex.drain()
    return {"logged": module.logged, "sent": sent}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_bytes_equal_the_packed_messages_with_wide_rows() -> None:
    # The monitor's bytes are the lengths of the packed messages, wide-offset trailers
    # included, and nothing else (not the per-peer size announcements sent before them).
    results = run_distributed(_monitored_epoch, 2, timeout=100)
    sent = [m for r in results for m in r["sent"] if m[1]]
    total = sum(nbytes for nbytes, _, _, _ in sent)
    codes = sum(math.ceil(rows * width * bits / 8) for _, rows, width, bits in sent)
    rows = sum(rows for _, rows, _, _ in sent)
    wide_bytes = total - codes - 4 * rows  # 2 bytes per wide-offset row
    assert wide_bytes > 0 and wide_bytes % 2 == 0
    for r in results:  # summed over ranks: every rank logs the same values
        logged = r["logged"]
        assert logged["comm/data_bytes"] == codes
        assert logged["comm/params_bytes"] == 4 * rows + wide_bytes
        assert logged["comm/data_bytes"] + logged["comm/params_bytes"] == total
        assert logged["comm/forward_bytes"] + logged["comm/backward_bytes"] == total
        assert logged["comm/params_share"] == pytest.approx((total - codes) / total)
