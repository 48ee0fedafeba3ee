"""AggregationOrder: profiles the first training batch, sets every layer, resumes its choice."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from lightgraph.callbacks.aggregation_order import AggregationOrder
from lightgraph.data.loader.minibatch import sample_minibatch
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.models import MiniBatchNodeClassifier
from lightgraph.nn.aggregation_order import (
    AGGREGATE_FIRST,
    ORDERS,
    TRANSFORM_FIRST,
    conv_layers,
    get_order,
    native_order,
)
from lightgraph.utilities.random_state import make_generator

NUM_CLASSES = 3


def _batches(num: int = 2, dim: int = 8):
    g = torch.Generator().manual_seed(0)
    n = 200
    edge_index = torch.randint(0, n, (2, 1600), generator=g)
    x, y = torch.randn(n, dim, generator=g), torch.randint(0, NUM_CLASSES, (n,), generator=g)
    indptr, indices = to_csc(edge_index, n)
    return [
        sample_minibatch(
            indptr,
            indices,
            x,
            y,
            torch.arange(20 * b, 20 * b + 20),
            [4, 3, 2],
            make_generator(0, b),
        )
        for b in range(num)
    ]


def _loader(num: int = 2):
    return DataLoader(_batches(num), batch_size=None, shuffle=False)


def _module(cls=GraphSAGE, **kwargs):
    torch.manual_seed(0)
    gnn = cls(8, 16, num_layers=3, out_channels=NUM_CLASSES, **kwargs)
    return MiniBatchNodeClassifier(gnn, NUM_CLASSES, lr=1e-2)


def _trainer(callback, **kwargs):
    options = {
        "accelerator": "cpu",
        "max_epochs": 1,
        "limit_train_batches": 2,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    options.update(kwargs)
    return pl.Trainer(callbacks=[callback], **options)


class _FakeClock:
    """A clock that each call of layer ``i`` advances by ``cost[i][its current order]``."""

    def __init__(self, cost):
        self.cost = cost
        self.now = 0.0
        self.reads = 0

    def attach(self, model):
        # Every way of running a layer (its module call, or the destination-only GCN block,
        # which calls `propagate` directly) propagates once.
        for i, conv in enumerate(conv_layers(model)):
            conv.register_propagate_forward_hook(lambda m, a, o, i=i: self._tick(i, m))

    def _tick(self, i, conv):
        self.now += self.cost[i][get_order(conv)]

    def __call__(self):
        self.reads += 1
        return self.now


def _costs(faster):
    return [{ORDERS[f]: 0.001, ORDERS[1 - f]: 0.003} for f in faster]


def _never():
    raise AssertionError("profiled although the choice was known")


@pytest.mark.parametrize(
    ("cls", "faster"), [(GraphSAGE, (1, 0, 1)), (GCN, (0, 1, 1))], ids=["sage", "gcn"]
)
def test_callback_profiles_the_first_batch_and_sets_every_layer(cls, faster):
    module = _module(cls)
    clock = _FakeClock(_costs(faster))
    clock.attach(module.model)
    callback = AggregationOrder(timer=clock, repeats=2)
    trainer = _trainer(callback)
    trainer.fit(module, _loader())
    expected = [ORDERS[f] for f in faster]
    assert callback.orders == expected and callback.profiled == 1
    assert [get_order(c) for c in module.model.convs] == expected
    metrics = trainer.callback_metrics
    for i, f in enumerate(faster):
        assert metrics[f"aggregation_order/layer{i}"] == float(f)
        torch.testing.assert_close(
            metrics[f"aggregation_order/layer{i}/{ORDERS[f]}_ms"].double(),
            torch.tensor(1.0, dtype=torch.float64),
        )
        torch.testing.assert_close(
            metrics[f"aggregation_order/layer{i}/{ORDERS[1 - f]}_ms"].double(),
            torch.tensor(3.0, dtype=torch.float64),
        )
    reads = clock.reads
    # The state round trip keeps the choice: a resumed run applies it without profiling.
    state = callback.state_dict()
    resumed = AggregationOrder(timer=_never)
    resumed.load_state_dict(state)
    assert resumed.orders == expected and resumed.profiled == 1
    fresh = _module(cls)
    assert all(get_order(c) == native_order(c) for c in fresh.model.convs)
    trainer = _trainer(resumed)
    trainer.fit(fresh, _loader())
    assert [get_order(c) for c in fresh.model.convs] == expected
    assert trainer.callback_metrics["aggregation_order/layer0"] == float(faster[0])
    assert clock.reads == reads
    # state_dict keys of the model never change
    assert list(fresh.state_dict()) == list(_module(cls).state_dict())


def test_a_run_resumed_from_a_checkpoint_keeps_the_choice(tmp_path):
    module = _module()
    clock = _FakeClock(_costs((1, 0, 1)))
    clock.attach(module.model)
    trainer = _trainer(AggregationOrder(timer=clock, repeats=1))
    trainer.fit(module, _loader())
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    fresh = _module()
    resumed = AggregationOrder(timer=_never)
    _trainer(resumed, max_epochs=2).fit(fresh, _loader(), ckpt_path=path)
    expected = [TRANSFORM_FIRST, AGGREGATE_FIRST, TRANSFORM_FIRST]
    assert resumed.orders == expected
    assert [get_order(c) for c in fresh.model.convs] == expected


def test_profile_batches_sums_over_several_batches():
    module = _module()
    clock = _FakeClock(_costs((0, 0, 1)))
    clock.attach(module.model)
    callback = AggregationOrder(profile_batches=2, timer=clock, repeats=1, warmup=0)
    _trainer(callback).fit(module, _loader())
    assert callback.profiled == 2
    assert callback.orders == [AGGREGATE_FIRST, AGGREGATE_FIRST, TRANSFORM_FIRST]
    torch.testing.assert_close(callback.times[2][AGGREGATE_FIRST], 0.006)


def test_an_epoch_shorter_than_profile_batches_still_decides():
    module = _module()
    clock = _FakeClock(_costs((1, 1, 1)))
    clock.attach(module.model)
    callback = AggregationOrder(profile_batches=5, timer=clock, repeats=1, warmup=0)
    _trainer(callback).fit(module, _loader())
    assert callback.profiled == 2 and callback.orders == [TRANSFORM_FIRST] * 3


def test_forced_orders_are_applied_without_profiling():
    module = _module(GCN)
    forced = [AGGREGATE_FIRST, TRANSFORM_FIRST, AGGREGATE_FIRST]
    callback = AggregationOrder(orders=forced, timer=_never)
    trainer = _trainer(callback)
    trainer.fit(module, _loader())
    assert [get_order(c) for c in module.model.convs] == forced
    assert trainer.callback_metrics["aggregation_order/layer1"] == 1.0
    # A forced choice wins over a checkpointed one.
    callback.load_state_dict({"orders": [TRANSFORM_FIRST] * 3, "times": {}, "profiled": 1})
    assert callback.orders == forced


def test_layers_that_cannot_be_reordered_are_left_alone():
    module = _module(GAT)
    callback = AggregationOrder(timer=_never)  # nothing to time: no layer is reorderable
    _trainer(callback).fit(module, _loader())
    assert callback.orders == [None, None, None]
    with pytest.raises(ValueError, match=r"AggregationOrder: expected `orders\[0\]` to be None"):
        _trainer(AggregationOrder(orders=[AGGREGATE_FIRST, None, None])).fit(
            _module(GAT), _loader()
        )


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="AggregationOrder: expected `profile_batches`"):
        AggregationOrder(profile_batches=0)
    with pytest.raises(ValueError, match="AggregationOrder: expected `repeats`"):
        AggregationOrder(repeats=0)
    with pytest.raises(TypeError, match="AggregationOrder: expected `timer` to be a callable"):
        AggregationOrder(timer="perf_counter")
    with pytest.raises(ValueError, match="AggregationOrder: expected `orders` to be a non-empty"):
        AggregationOrder(orders=AGGREGATE_FIRST)
    with pytest.raises(ValueError, match=r"expected `orders\[1\]` to be one of .*'sideways'"):
        AggregationOrder(orders=[AGGREGATE_FIRST, "sideways"])
    with pytest.raises(ValueError, match=r"one entry per layer of the model \(3\) but got 2"):
        _trainer(AggregationOrder(orders=[AGGREGATE_FIRST] * 2)).fit(_module(), _loader())

    class NoModel(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

    with pytest.raises(TypeError, match="AggregationOrder: expected the LightningModule to hold"):
        AggregationOrder().setup(None, NoModel(), "fit")


@pytest.mark.parametrize("trim", [True, False])
def test_the_profiled_batch_is_the_training_batch_with_its_trimming(monkeypatch, trim):
    import lightgraph.callbacks.aggregation_order as module_under_test

    calls = []

    def spy_on(name):
        profile = getattr(module_under_test, name)

        def spy(model, x, edge_index, nodes=None, edges=None, **kwargs):
            calls.append((name, model, x, edge_index, nodes, edges))
            return profile(model, x, edge_index, nodes, edges, **kwargs)

        monkeypatch.setattr(module_under_test, name, spy)

    spy_on("profile_layer_orders")
    spy_on("profile_destination_orders")
    module = _module()
    module.hparams.trim = trim
    batches = _batches()
    _trainer(AggregationOrder(repeats=1)).fit(module, DataLoader(batches, batch_size=None))
    ((name, model, x, edge_index, nodes, edges),) = calls
    # A trimming module runs destination-only layers, and they are profiled as such.
    assert name == ("profile_destination_orders" if trim else "profile_layer_orders")
    assert model is module.model
    assert torch.equal(x, batches[0].x) and torch.equal(edge_index, batches[0].edge_index)
    if trim:
        assert nodes == batches[0].num_sampled_nodes and edges == batches[0].num_sampled_edges
    else:
        assert nodes is None and edges is None


@pytest.mark.parametrize("log", [True, False])
def test_log_false_logs_nothing_in_a_real_fit(log):
    """Lightning sets every callback's ``log`` attribute to the module's ``log`` method at
    fit start; the switch must survive that (it once read the overwritten attribute)."""
    module = _module(GCN)
    forced = [AGGREGATE_FIRST, TRANSFORM_FIRST, AGGREGATE_FIRST]
    trainer = _trainer(AggregationOrder(orders=forced, timer=_never, log=log))
    trainer.fit(module, _loader())
    logged = [k for k in trainer.callback_metrics if k.startswith("aggregation_order/")]
    assert bool(logged) is log


@pytest.mark.parametrize("cls", [GraphSAGE, GCN])
def test_layers_are_profiled_on_the_destination_rows_training_gives_them(cls):
    """Each layer is timed on the destination-only block training runs (its aggregation
    writes only the destinations' rows), not on the whole trimmed subgraph."""
    module = _module(cls)
    batch = _batches(1)[0]
    nodes, hops = list(batch.num_sampled_nodes), len(batch.num_sampled_edges)
    callback = AggregationOrder(repeats=1, warmup=0, log=False)
    _trainer(callback, limit_train_batches=1).fit(module, DataLoader([batch], batch_size=None))
    rows: dict[int, set[int]] = {i: set() for i in range(3)}
    for i, conv in enumerate(module.model.convs):
        conv.register_propagate_forward_hook(
            lambda m, inputs, out, i=i: rows[i].add(int(out.size(0)))
        )
    callback._profile(module, batch)
    for i in range(3):
        assert rows[i] == {sum(nodes[: hops - i])}, f"layer {i}"
