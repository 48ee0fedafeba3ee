"""GraphCompile: padded, bucketed, compiled training steps equal the eager ones.

The compiled steps use the ``aot_eager`` backend (dynamo + AOTAutograd, the inductor
path without code generation) or ``eager`` (dynamo only) so the tests stay fast on a CPU;
inductor compiles a 3-layer GraphSAGE in tens of seconds there, too slow for a unit test.
"""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader
from torch_geometric.nn.models import GraphSAGE

from lightgraph.callbacks.graph_compile import GraphCompile
from lightgraph.data.loader.minibatch import sample_minibatch
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.models.minibatch_classifier import MiniBatchNodeClassifier
from lightgraph.utilities.random_state import make_generator

NUM_NODES = 300
FANOUTS = [4, 3]


@pytest.fixture(scope="module")
def graph():
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, NUM_NODES, (2, 2000), generator=g)
    x = torch.randn(NUM_NODES, 8, generator=g)
    y = torch.randint(0, 3, (NUM_NODES,), generator=g)
    indptr, indices = to_csc(edge_index, NUM_NODES)
    return indptr, indices, x, y


def _batch(graph, i: int, size: int = 16, history: bool = False):
    indptr, indices, x, y = graph
    seeds = torch.randperm(NUM_NODES, generator=torch.Generator().manual_seed(i))[:size]
    batch = sample_minibatch(indptr, indices, x, y, seeds, FANOUTS, make_generator(0, i))
    if history:  # halo rows of hidden layer 0 (hop-1 nodes), pushed rows
        g = torch.Generator().manual_seed(100 + i)
        n0, n1 = batch.num_sampled_nodes[:2]
        halo = n0 + torch.randperm(n1, generator=g)[: max(1, n1 // 3)]
        batch.halo_index = [halo]
        batch.hist = [torch.randn(halo.numel(), 16, generator=g)]
        batch.push_index = [torch.arange(n0)]
        batch.push_ids = [batch.n_id[:n0]]
    return batch


def _module(trim: bool = True) -> MiniBatchNodeClassifier:
    torch.manual_seed(0)
    return MiniBatchNodeClassifier(GraphSAGE(8, 16, 2, out_channels=3), num_classes=3, trim=trim)


@pytest.fixture(scope="module")
def compiled(graph):
    """A module and a GraphCompile warmed up on plain and history batches (the history
    ones run :func:`lightgraph.nn.destination.destination_forward`), compiled."""
    module = _module().train()
    cb = GraphCompile(num_buckets=2, round_to=8, margin=0.1, backend="aot_eager")
    module.model_runner = cb.run
    for i in range(4):
        module.run_model(_batch(graph, i))
        module.run_model(_batch(graph, i, history=True))
    assert cb.warming_up and cb.padded_batches == 0
    cb.finish_warmup(module)
    return module, cb


def _grads(module, out, rows):
    module.zero_grad()
    out[:rows].square().sum().backward()
    return {k: p.grad.clone() for k, p in module.named_parameters()}


def test_compiled_padded_steps_equal_eager(graph, compiled):
    module, cb = compiled
    assert set(cb.levels) == {(2, 0), (2, 1)}  # plain and history batches
    assert all(1 <= len(v) <= 2 for v in cb.levels.values())
    before = cb.padded_batches
    for i, size, history in [(10, 16, False), (11, 5, False), (12, 16, True), (13, 16, False)]:
        batch = _batch(graph, i, size=size, history=history)
        out, hidden = module.run_model(batch)
        ref, ref_hidden = module.model_step(batch)
        assert out.shape == ref.shape
        torch.testing.assert_close(out[:size], ref[:size], rtol=1e-5, atol=1e-6)
        for h, r, rows in zip(hidden, ref_hidden, getattr(batch, "push_index", []), strict=True):
            torch.testing.assert_close(h[rows], r[rows], rtol=1e-5, atol=1e-6)
        got = _grads(module, out, size)
        want = _grads(module, ref, size)
        for key, grad in want.items():
            torch.testing.assert_close(got[key], grad, rtol=1e-5, atol=1e-6, msg=key)
    assert cb.padded_batches - before == 4 and cb.fallbacks == 0
    assert 1 <= cb.compiles <= 4 and cb.recompiles == cb.compiles - 1  # one per bucket
    assert 0.0 < cb.pad_fraction < 1.0 and cb.eager_drops == 0


def test_a_batch_over_the_largest_bucket_falls_back_to_eager(graph, compiled):
    module, cb = compiled
    big = _batch(graph, 20, size=64)  # 4x the seeds of every warm-up batch
    fallbacks, padded, compiles = cb.fallbacks, cb.padded_batches, cb.compiles
    out, _ = module.run_model(big)
    torch.testing.assert_close(out, module.model_step(big)[0])
    assert cb.fallbacks == fallbacks + 1 and cb.padded_batches == padded
    assert cb.compiles == compiles
    module.eval()  # evaluation batches run eager and are not counted
    try:
        module.run_model(big)
    finally:
        module.train()
    assert cb.fallbacks == fallbacks + 1


def test_torch_dropping_a_bucket_to_eager_is_detected(graph):
    # Past its recompile limit torch runs a frame eager, silently. Here the limit is 1
    # compiled graph, so the second bucket runs eager: counted and warned about.
    module = _module().train()
    cb = GraphCompile(num_buckets=2, round_to=8, backend="eager")
    cb.on_train_start(None, module)  # type: ignore[arg-type]  # installs the log handler
    module.model_runner = cb.run
    for i, size in enumerate([16, 16, 5]):
        module.run_model(_batch(graph, i, size=size))
    cb.finish_warmup(module)
    assert len(cb.levels[(2, 0)]) == 2
    cb._compiled = torch.compile(
        module.model_step, backend=cb._counter, recompile_limit=1, isolate_recompiles=True
    )
    small, big = _batch(graph, 3, size=5), _batch(graph, 4, size=16)
    module.run_model(small)
    assert cb.compiles == 1 and cb.eager_drops == 0
    with pytest.warns(UserWarning, match="recompile_limit"):
        out, _ = module.run_model(big)
    torch.testing.assert_close(out, module.model_step(big)[0])
    module.run_model(big)
    assert cb.compiles == 1 and cb.eager_drops == 2 and cb.padded_batches == 3
    cb.teardown(None, module, "fit")  # type: ignore[arg-type]
    assert module.model_runner is None


def test_state_dict_round_trip_skips_the_warm_up(graph, compiled):
    _, cb = compiled
    state = cb.state_dict()
    other = GraphCompile(num_buckets=2, round_to=8, backend="aot_eager")
    assert other.warming_up
    other.load_state_dict(state)
    assert not other.warming_up
    assert other.levels == cb.levels and other.low == cb.low and other.high == cb.high
    assert other.padded_batches == cb.padded_batches and other.epochs_seen == cb.epochs_seen
    assert other.state_dict() == state
    with pytest.raises(ValueError, match="GraphCompile: expected a state_dict of version 1"):
        other.load_state_dict({**state, "version": 0})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"warmup_epochs": 0}, "`warmup_epochs` to be a positive integer but got 0"),
        ({"margin": -0.1}, "`margin` >= 0 but got -0.1"),
        ({"num_buckets": 0}, "`num_buckets` to be a positive integer but got 0"),
        ({"round_to": 2.5}, "`round_to` to be a positive integer but got 2.5"),
        ({"mode": "fast"}, "`mode` to be one of .* but got 'fast'"),
        ({"dynamic": 1}, r"`dynamic` to be one of \(True, False\) but got 1"),
        ({"enabled": "yes"}, "`enabled` to be one of"),
        ({"backend": "no-such-backend"}, "`backend` to be one of .* but got 'no-such-backend'"),
        ({"backend": "eager", "mode": "max-autotune"}, "`mode` to be None with backend 'eager'"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=f"GraphCompile: expected {match}"):
        GraphCompile(**kwargs)


def test_a_module_without_model_step_is_rejected():
    class Plain(pl.LightningModule):
        pass

    with pytest.raises(TypeError, match="GraphCompile: expected a LightningModule with"):
        GraphCompile().setup(None, Plain(), "fit")  # type: ignore[arg-type]


def _trainer(callback, epochs=2):
    return pl.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )


def test_trainer_run_logs_the_counters_and_resumes_without_warm_up(graph):
    batches = [_batch(graph, i, size=16 if i < 3 else 7) for i in range(4)]
    loader = DataLoader(batches, batch_size=None, collate_fn=lambda b: b)
    module = _module()
    cb = GraphCompile(num_buckets=2, round_to=8, margin=0.1, backend="eager")
    trainer = _trainer(cb)
    trainer.fit(module, train_dataloaders=loader)
    metrics = trainer.callback_metrics
    for name in ("compiles", "recompiles", "fallbacks", "padded_batches", "pad_fraction"):
        assert f"compile/{name}" in metrics
    assert float(metrics["compile/padded_batches"]) == 4  # epoch 1: every batch padded
    assert float(metrics["compile/fallbacks"]) == 0 and cb.epoch_metrics["padded_batches"] == 4
    assert cb.compiles >= 1 and cb.compile_seconds > 0 and 0 < cb.pad_fraction < 1
    assert module.model_runner is None  # released at the end of training
    # A resumed run with the saved buckets compiles from its first batch.
    resumed = GraphCompile(num_buckets=2, round_to=8, margin=0.1, backend="eager")
    resumed.load_state_dict(cb.state_dict())
    padded = resumed.padded_batches
    _trainer(resumed, epochs=1).fit(_module(), train_dataloaders=loader)
    assert resumed.padded_batches == padded + 4 and resumed.epoch_metrics["padded_batches"] == 4
