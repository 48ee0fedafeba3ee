"""MiniBatchNodeClassifier evaluation split over data-parallel ranks equals one process.

Layer-wise inference: each rank computes every layer for its contiguous share of the
nodes and all-gathers it, so every rank ends with every node's logits (and, with
historical embeddings, every node's hidden rows); the metrics are reduced over the ranks.
Sampled evaluation: the data module gives every rank a share of the evaluation nodes,
none dropped. References: the plain PyG forward pass over the whole graph, exact counts
(``fractions.Fraction``) and the same evaluation in one process.
"""

from __future__ import annotations

import os
import warnings
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch_geometric.nn.models import GraphSAGE

import lightgraph.models.minibatch_classifier as minibatch_classifier
from lightgraph.data import FullGraphBatch, NeighborSamplingDataModule, SyntheticGraph
from lightgraph.data.loader import FixedBatchLoader
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.models import MiniBatchNodeClassifier
from lightgraph.nn.history import HistoricalEmbeddings

DATASET = SyntheticGraph(num_nodes=303, avg_degree=6, num_features=8, homophily=0.6, seed=5)
LAYERS, HIDDEN, CHUNK = 3, 16, 37  # 37-row chunks: several all-gather rounds per layer

_CALLS: list[dict[str, Any]] = []  # what layerwise_inference was asked, in this process


def _graph():
    data = DATASET.load()
    # Validation nodes only among the first 40 % of the rows: with 3 ranks the last
    # rank's share holds none (it must still take part in the reductions).
    val = data.val_mask.clone()
    val[int(0.4 * data.num_nodes) :] = False
    val[:20] = True
    return data, val


class FullGraphData(pl.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        data, val = _graph()
        indptr, indices = to_csc(data.edge_index, data.num_nodes)
        masks = {"train": data.train_mask, "val": val, "test": data.test_mask}
        self.batch = FullGraphBatch(indptr, indices, data.x, data.y, masks)

    def val_dataloader(self) -> FixedBatchLoader:
        return FixedBatchLoader([self.batch])

    def test_dataloader(self) -> FixedBatchLoader:
        return FixedBatchLoader([self.batch])


class Recorded(MiniBatchNodeClassifier):
    """Keeps the logits of layer-wise inference and the seeds of sampled batches."""

    def _full_graph_logits(self, batch: FullGraphBatch, refresh: bool = False) -> torch.Tensor:
        logits = super()._full_graph_logits(batch, refresh)
        self.__dict__["logits"] = logits.clone()
        return logits

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if not isinstance(batch, FullGraphBatch):
            self.__dict__.setdefault("seeds", []).append(batch.n_id[: batch.batch_size].clone())
        super().validation_step(batch, batch_idx)


class Dump(pl.Callback):
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def _dump(self, trainer: pl.Trainer, module: Recorded, stage: str) -> None:
        history = module.history
        record = {
            "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            "logits": module.__dict__.get("logits"),
            "seeds": module.__dict__.get("seeds"),
            "tables": None if history is None else [t.clone() for t in history.tables],
            "calls": list(_CALLS),
        }
        torch.save(record, os.path.join(self.out_dir, f"{stage}{trainer.global_rank}.pt"))

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._dump(trainer, module, "val")  # type: ignore[arg-type]

    def on_test_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._dump(trainer, module, "test")  # type: ignore[arg-type]


def _module(history: bool = False) -> Recorded:
    torch.manual_seed(0)
    gnn = GraphSAGE(
        DATASET.num_features, HIDDEN, num_layers=LAYERS, out_channels=DATASET.num_classes
    )
    module = Recorded(gnn, DATASET.num_classes, inference_chunk_size=CHUNK)
    if history:
        data = DATASET.load()
        indptr, indices = to_csc(data.edge_index, data.num_nodes)
        table = HistoricalEmbeddings(data.num_nodes)
        table.fill(module.model, indptr, indices, data.x, chunk_size=CHUNK)
        for t in table.tables:
            t.zero_()  # validation's refresh must rewrite every row, on every rank
        module.history = table
    return module


def _run(tmp_path, stage: str, devices: int, datamodule: Any, history: bool = False) -> list[dict]:
    out_dir = tmp_path / f"{stage}-{devices}"
    out_dir.mkdir(exist_ok=True)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp_fork" if devices > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        callbacks=[Dump(str(out_dir))],
    )
    _CALLS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        getattr(trainer, stage)(_module(history), datamodule=datamodule)
    prefix = "val" if stage == "validate" else stage
    return [
        torch.load(out_dir / f"{prefix}{rank}.pt", weights_only=False) for rank in range(devices)
    ]


def _reference() -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits and hidden-layer outputs of the plain full-graph PyG forward pass."""
    data = DATASET.load()
    model = _module().model.eval()
    with torch.no_grad():
        hidden, h = [], data.x
        for i in range(LAYERS - 1):
            h = model.act(model.norms[i](model.convs[i](h, data.edge_index)))
            hidden.append(h)
        return model(data.x, data.edge_index), hidden


def _accuracy(logits: torch.Tensor, mask: torch.Tensor) -> Fraction:
    y = DATASET.load().y
    return Fraction(int((logits.argmax(1)[mask] == y[mask]).sum()), int(mask.sum()))


@pytest.fixture
def record_calls(monkeypatch):
    inner = minibatch_classifier.layerwise_inference

    def recording(*args: Any, **kwargs: Any) -> torch.Tensor:
        _CALLS.append({"rows": kwargs.get("rows")})
        return inner(*args, **kwargs)

    _CALLS.clear()
    monkeypatch.setattr(minibatch_classifier, "layerwise_inference", recording)
    yield
    _CALLS.clear()


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize("world_size", [2, 3])
def test_layerwise_evaluation_splits_the_nodes_and_equals_one_process(
    tmp_path, record_calls, world_size: int
) -> None:
    data, val = _graph()
    num_nodes = data.num_nodes
    logits_ref, hidden_ref = _reference()
    single = _run(tmp_path, "validate", 1, FullGraphData(), history=True)[0]
    multi = _run(tmp_path, "validate", world_size, FullGraphData(), history=True)
    # The single process: every row, the independent reference.
    assert single["calls"] == [{"rows": None}]
    torch.testing.assert_close(single["logits"], logits_ref, rtol=1e-5, atol=1e-5)
    assert single["metrics"]["val_acc"] == pytest.approx(float(_accuracy(logits_ref, val)))
    bounds = [0]
    for rank, record in enumerate(multi):
        # This rank computed a contiguous share of the rows ...
        (call,) = record["calls"]
        start, stop = call["rows"]
        assert start == bounds[-1] and stop > start
        bounds.append(stop)
        # ... and holds every node's logits and hidden rows (gathered), as one process.
        torch.testing.assert_close(record["logits"], single["logits"], rtol=1e-5, atol=1e-5)
        for table, expected in zip(record["tables"], hidden_ref, strict=True):
            torch.testing.assert_close(table, expected, rtol=1e-5, atol=1e-5)
        # Logged values: the metric over every rank's share equals the one-process metric.
        assert record["metrics"]["val_acc"] == single["metrics"]["val_acc"], f"rank {rank}"
        assert record["metrics"]["val_loss"] == pytest.approx(
            single["metrics"]["val_loss"], rel=1e-5
        )
    assert bounds[-1] == num_nodes
    if world_size == 3:  # the last share holds no validation node: still exact, no hang
        assert not val[bounds[2] :].any()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_layerwise_test_metric_over_two_ranks_equals_one_process(tmp_path, record_calls) -> None:
    data, _ = _graph()
    single = _run(tmp_path, "test", 1, FullGraphData())[0]
    multi = _run(tmp_path, "test", 2, FullGraphData())
    logits_ref, _ = _reference()
    assert single["metrics"]["test_acc"] == pytest.approx(
        float(_accuracy(logits_ref, data.test_mask))
    )
    half = -(-data.num_nodes // 2)
    for rank, record in enumerate(multi):
        assert [c["rows"] for c in record["calls"]] == [[(0, half), (half, data.num_nodes)][rank]]
        assert record["metrics"]["test_acc"] == single["metrics"]["test_acc"]
        torch.testing.assert_close(record["logits"], logits_ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ sampled evaluation
def _sampled(tmp_path, batch_size: int = 16) -> NeighborSamplingDataModule:
    return NeighborSamplingDataModule(
        DATASET,
        fanouts=[5] * LAYERS,
        batch_size=32,
        eval_mode="sampled",
        eval_fanouts=[-1] * LAYERS,  # every neighbour: exact logits, comparable metrics
        eval_batch_size=batch_size,
        cache_dir=str(tmp_path / "cache"),
    )


def _strategy_with(world_size: int, rank: int) -> SimpleNamespace:
    kwargs = {"num_replicas": world_size, "rank": rank}
    return SimpleNamespace(strategy=SimpleNamespace(distributed_sampler_kwargs=kwargs))


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_sampled_evaluation_covers_every_node_exactly_once(tmp_path, world_size: int) -> None:
    dm = _sampled(tmp_path)
    dm.setup("fit")
    data = DATASET.load()
    for split, mask in (("val", data.val_mask), ("test", data.test_mask)):
        seeds = []
        for rank in range(world_size):
            dm.trainer = _strategy_with(world_size, rank)
            loader = dm.val_dataloader() if split == "val" else dm.test_dataloader()
            seeds.append(torch.cat([b.n_id[: b.batch_size] for b in loader]))
        assert torch.equal(torch.cat(seeds).sort().values, mask.nonzero().view(-1)), split
        sizes = [s.numel() for s in seeds]
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_sampled_evaluation_with_unequal_batch_counts_equals_one_process(tmp_path) -> None:
    dm = _sampled(tmp_path, batch_size=10)
    dm.prepare_data()
    val = DATASET.load().val_mask.nonzero().view(-1)
    shares = [s.numel() for s in torch.tensor_split(val, 2)]
    assert -(-shares[0] // 10) != -(-shares[1] // 10)  # the ranks run different step counts
    single = _run(tmp_path, "validate", 1, dm)[0]
    multi = _run(tmp_path, "validate", 2, _sampled(tmp_path, batch_size=10))
    seeds = torch.cat([torch.cat(record["seeds"]) for record in multi])
    assert torch.equal(seeds.sort().values, val)
    assert torch.equal(torch.cat(single["seeds"]), val)
    for record in multi:
        assert record["metrics"]["val_acc"] == single["metrics"]["val_acc"]
        assert record["metrics"]["val_loss"] == pytest.approx(
            single["metrics"]["val_loss"], rel=1e-5
        )
