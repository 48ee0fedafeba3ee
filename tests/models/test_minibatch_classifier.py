"""MiniBatchNodeClassifier: sampled training, exact and sampled evaluation."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch_geometric.nn.models import GraphSAGE
from torchmetrics.functional.classification import multiclass_accuracy

from lightgraph.data import (
    FullGraphBatch,
    MacroBatchDataModule,
    NeighborSamplingDataModule,
    SyntheticGraph,
)
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.models import MiniBatchNodeClassifier

DATASET = SyntheticGraph(num_nodes=1500, avg_degree=8, num_features=16, homophily=0.8, seed=2)


def _model(seed: int = 0) -> MiniBatchNodeClassifier:
    torch.manual_seed(seed)
    gnn = GraphSAGE(DATASET.num_features, 32, num_layers=2, out_channels=DATASET.num_classes)
    return MiniBatchNodeClassifier(gnn, DATASET.num_classes, lr=1e-2)


def _trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )


def test_exact_evaluation_equals_the_full_graph_model():
    data = DATASET.load()
    module = _model().eval()
    indptr, indices = to_csc(data.edge_index, data.num_nodes)
    masks = {"val": data.val_mask, "test": data.test_mask}
    batch = FullGraphBatch(indptr, indices, data.x, data.y, masks)
    module.test_step(batch, 0)
    with torch.no_grad():
        logits = module.model(data.x, data.edge_index)[data.test_mask]
    expected = multiclass_accuracy(
        logits, data.y[data.test_mask], DATASET.num_classes, average="micro"
    )
    torch.testing.assert_close(module.test_metric.compute(), expected)


def test_trimming_gives_the_same_seed_logits():
    data = DATASET.load()
    indptr, indices = to_csc(data.edge_index, data.num_nodes)
    from lightgraph.data.loader import sample_minibatch

    batch = sample_minibatch(indptr, indices, data.x, data.y, torch.arange(50), [5, 5])
    module = _model().eval()
    trimmed = module(batch)
    module.hparams.trim = False
    torch.testing.assert_close(module(batch), trimmed, atol=1e-5, rtol=1e-5)
    assert trimmed.shape == (50, DATASET.num_classes)


def test_model_step_computes_only_each_layers_destination_rows():
    """Layer l of L outputs hops 0..L-1-l only; the step's logits and gradients equal the
    untrimmed forward over the whole sampled subgraph."""
    data = DATASET.load()
    indptr, indices = to_csc(data.edge_index, data.num_nodes)
    from lightgraph.data.loader import sample_minibatch

    batch = sample_minibatch(indptr, indices, data.x, data.y, torch.arange(50), [5, 5])
    module = _model().double()
    batch.x = batch.x.double()
    rows: list[int] = []
    handles = [
        conv.register_propagate_forward_hook(lambda m, i, o: rows.append(o.size(0)))
        for conv in module.model.convs
    ]
    out, hidden = module.model_step(batch)
    nph = list(batch.num_sampled_nodes)
    assert rows == [nph[0] + nph[1], nph[0]] and out.shape == (50, DATASET.num_classes)
    assert hidden == []
    for h in handles:
        h.remove()
    out.square().sum().backward()
    grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    module.hparams.trim = False
    full, _ = module.model_step(batch)
    assert full.size(0) == batch.num_nodes
    full[:50].square().sum().backward()
    torch.testing.assert_close(out, full[:50])
    for got, want in zip(grads, [p.grad for p in module.parameters()], strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("kind", ["macro", "ns"])
def test_training_learns_beyond_chance(tmp_path, kind):
    if kind == "macro":
        dm = MacroBatchDataModule(
            DATASET,
            num_parts=8,
            parts_per_batch=4,
            fanouts=[10, 5],
            batch_size=200,
            cache_dir=str(tmp_path),
        )
    else:
        dm = NeighborSamplingDataModule(
            DATASET, fanouts=[10, 5], batch_size=200, cache_dir=str(tmp_path)
        )
    module = _model()
    trainer = _trainer(max_epochs=4)
    trainer.fit(module, dm)
    assert trainer.callback_metrics["train_step_time"] > 0
    acc = trainer.test(module, dm, verbose=False)[0]["test_acc"]
    assert acc > 2.0 / DATASET.num_classes  # chance is 1/8


def test_bad_arguments_are_named():
    gnn = GraphSAGE(4, 8, num_layers=2, out_channels=3)
    with pytest.raises(ValueError, match="num_classes"):
        MiniBatchNodeClassifier(gnn, 1)
    with pytest.raises(ValueError, match="lr"):
        MiniBatchNodeClassifier(
            gnn, 3, lr=-1e-3
        )  # lr = 0 is allowed (a frozen model, e.g. to audit histories)
    with pytest.raises(TypeError, match="model"):
        MiniBatchNodeClassifier("GraphSAGE", 3)
