"""JOESTAR's multistage data module: LBS and PBS macro-batches, stage 2, AoT filtering."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GraphSAGE

from lightgraph.data import MultistageDataModule, SyntheticGraph
from lightgraph.data.loader import LargeBatchSampler, PartitionBatchSampler
from lightgraph.data.loader.multistage import MultistageLoader, StagedStep, StageOneBatch
from tests.data.concurrency import check_graph_copied_once_under_concurrent_first_use
from tests.data.joestar import joestar_module

DATASET = SyntheticGraph(num_nodes=800, avg_degree=6, num_features=8, train_ratio=0.3, seed=3)
CPU = torch.device("cpu")


def _module(tmp_path, **kwargs) -> MultistageDataModule:
    if kwargs.get("first_stage", "lbs") == "lbs":
        args: dict = dict(batch_size=50, ratio=0.25)
    else:
        args = dict(batch_size=50, num_parts=8, parts_per_batch=2, history=False)
    args.update(kwargs)
    dm = joestar_module(DATASET, cache_dir=str(tmp_path), **args)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _batches(dm: MultistageDataModule, loader: MultistageLoader | None = None):
    loader = loader if loader is not None else dm.train_loader()
    for step in loader:
        yield step, dm.sample_on_device(dm.to_device(step, CPU))


def _edges_global(dm) -> set[tuple[int, int]]:
    """The graph's edges in store ids, from the dataset itself (not the store's CSC)."""
    data = DATASET.load()
    ids = dm.store.node_ids.long()
    store_of = torch.empty_like(ids)
    store_of[ids] = torch.arange(ids.numel())
    src, dst = store_of[data.edge_index[0]], store_of[data.edge_index[1]]
    return set(zip(src.tolist(), dst.tolist(), strict=True))


def _macro_edges(macro) -> set[tuple[int, int]]:
    deg = macro.indptr[1:] - macro.indptr[:-1]
    dst = torch.repeat_interleave(torch.arange(macro.num_nodes), deg)
    node = macro.node
    return set(zip(node[macro.indices].tolist(), node[dst].tolist(), strict=True))


# ---------------------------------------------------------------------------------- LBS
def test_lbs_seeds_come_from_the_macro_batch_each_once(tmp_path):
    dm = _module(tmp_path, first_stage="lbs")
    train = set(dm.split_nodes("train").tolist())
    per_macro: dict[int, list[int]] = {}
    plan = dm.plan(0)
    for step, batch in _batches(dm):
        seeds = batch.n_id[: batch.batch_size]
        store_ids = step.macro.node[step.seeds]
        per_macro.setdefault(step.macro.index, []).extend(store_ids.tolist())
        # n_id holds the original ids; the seeds are the macro-batch's B_L members.
        assert torch.equal(seeds, dm.store.node_ids[store_ids].long())
    assert len(per_macro) == len(plan) == 4  # ratio 1/4
    seen: list[int] = []
    for k, seeds in per_macro.items():
        assert sorted(seeds) == sorted(plan[k].tolist())  # every B_L seed exactly once
        seen.extend(seeds)
    assert sorted(seen) == sorted(train)  # an epoch covers the training set once
    assert len(plan[0]) == -(-len(train) // 4)


def test_lbs_second_stage_stays_inside_the_macro_subgraph(tmp_path):
    dm = _module(tmp_path, first_stage="lbs", second_stage_fanouts=[20, 10, 5])
    graph = _edges_global(dm)
    for step, batch in _batches(dm):
        macro_edges = _macro_edges(step.macro)
        assert macro_edges <= graph  # stage 1 only samples real edges
        # Map the batch's local edges back to store ids through the macro-batch.
        local_store = dm.to_device(step, CPU).macro.node
        sampled_local = batch.edge_index
        # n_id is original ids: translate back to store ids.
        ids = dm.store.node_ids.long()
        store_of = torch.empty_like(ids)
        store_of[ids] = torch.arange(ids.numel())
        nodes = store_of[batch.n_id]
        edges = set(
            zip(nodes[sampled_local[0]].tolist(), nodes[sampled_local[1]].tolist(), strict=True)
        )
        assert edges <= macro_edges
        assert set(nodes.tolist()) <= set(local_store.tolist())


def test_lbs_all_fanouts_ratio_one_equals_full_neighbourhood_training(tmp_path):
    dm = _module(tmp_path, first_stage="lbs", ratio=1.0, fanouts=[-1, -1], batch_size=64)
    data = DATASET.load()
    torch.manual_seed(0)
    model = GraphSAGE(DATASET.num_features, 16, 2, DATASET.num_classes).double()
    reference = GraphSAGE(DATASET.num_features, 16, 2, DATASET.num_classes).double()
    reference.load_state_dict(model.state_dict())
    step, batch = next(_batches(dm))
    seeds = batch.n_id[: batch.batch_size]  # original ids
    out = model(
        batch.x.double(),
        batch.edge_index,
        num_sampled_nodes_per_hop=batch.num_sampled_nodes,
        num_sampled_edges_per_hop=batch.num_sampled_edges,
    )[: batch.batch_size]
    F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
    # Reference: the whole graph, loss over the same seeds.
    full = reference(data.x.double(), data.edge_index)[seeds]
    F.cross_entropy(full, data.y[seeds]).backward()
    torch.testing.assert_close(out, full)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


# ---------------------------------------------------------------------------------- PBS
def test_pbs_halo_is_the_exact_one_hop_of_the_chosen_partitions(tmp_path):
    dm = _module(tmp_path, first_stage="pbs")
    graph = _edges_global(dm)
    ptr = dm.store.part_ptr
    for k in range(dm.num_parts // dm.first_stage.parts_per_batch):
        macro = dm.build_macro_batch(0, k)
        inner = set(macro.node[: macro.num_inner].tolist())
        chosen = [p for p in range(dm.num_parts) if int(ptr[p]) in inner]
        assert len(chosen) == dm.first_stage.parts_per_batch
        want_inner = {v for p in chosen for v in range(int(ptr[p]), int(ptr[p + 1]))}
        assert inner == want_inner
        want_halo = {u for u, v in graph if v in inner and u not in inner}
        assert set(macro.node[macro.num_inner :].tolist()) == want_halo
        # Inner nodes keep all their in-edges; halo nodes have none.
        want_edges = {(u, v) for u, v in graph if v in inner}
        assert _macro_edges(macro) == want_edges
        deg = macro.indptr[1:] - macro.indptr[:-1]
        assert int(deg[macro.num_inner :].sum()) == 0
        # The seeds are the inner training nodes.
        seeds = torch.cat(macro.batches)
        train = set(dm.split_nodes("train").tolist())
        assert sorted(macro.node[seeds].tolist()) == sorted(inner & train)


def test_pbs_history_batches_carry_halo_and_push_rows(tmp_path):
    dm = _module(tmp_path, first_stage="pbs", history=True, fanouts=[5, 5, 5])

    class Table:  # a stand-in history: row r of layer l holds (l, r)
        def pull(self, layer, ids):
            return torch.stack([torch.full_like(ids, layer), ids], 1).double()

    step = next(iter(dm.train_loader()))
    batch = dm.sample_on_device(dm.to_device(step, CPU, Table()))
    ends = torch.cumsum(torch.tensor(batch.num_sampled_nodes), 0).tolist()
    macro = step.macro
    ids = dm.store.node_ids.long()
    store_of = torch.empty_like(ids)
    store_of[ids] = torch.arange(ids.numel())
    nodes = store_of[batch.n_id]
    inner = set(macro.node[: macro.num_inner].tolist())
    is_halo = torch.tensor([v not in inner for v in nodes.tolist()])
    assert not is_halo[: batch.batch_size].any()
    for layer in range(2):
        rows = ends[2 - layer]
        assert torch.equal(batch.halo_index[layer], is_halo[:rows].nonzero().view(-1))
        want = torch.stack(
            [torch.full_like(batch.halo_index[layer], layer), nodes[batch.halo_index[layer]]], 1
        ).double()
        assert torch.equal(batch.hist[layer], want)
        pushed = (~is_halo[:rows]).nonzero().view(-1)
        assert torch.equal(batch.push_index[layer], pushed)
        assert torch.equal(batch.push_ids[layer], nodes[pushed])
    # Halo nodes are leaves: no sampled edge points into them.
    assert not is_halo[batch.edge_index[1]].any()


def test_pbs_history_needs_a_table(tmp_path):
    dm = _module(tmp_path, first_stage="pbs", history=True)
    step = next(iter(dm.train_loader()))
    with pytest.raises(RuntimeError, match="history"):
        dm.to_device(step, CPU)


# ---------------------------------------------------------------------------------- AoT
class _StubHistory:
    """Row r of layer l holds (l, r): pulled rows name themselves."""

    def pull(self, layer, ids):
        return torch.stack([torch.full_like(ids, layer), ids], 1).double()


@pytest.mark.parametrize(
    ("first_stage", "history"), [("lbs", False), ("pbs", False), ("pbs", True)]
)
def test_aot_filtering_does_not_change_the_mini_batches(tmp_path, first_stage, history):
    mode = dict(first_stage=first_stage, **(dict(history=history) if first_stage == "pbs" else {}))
    plain = _module(tmp_path, **mode)
    aot = _module(tmp_path, aot=True, **mode)
    table = _StubHistory()

    def batches(dm):
        for step in dm.train_loader():
            yield step, dm.sample_on_device(dm.to_device(step, CPU, table))

    count = 0
    for (_, a), (step, b) in zip(batches(plain), batches(aot), strict=True):
        for key in ("x", "y", "edge_index", "n_id"):
            assert torch.equal(getattr(a, key), getattr(b, key)), key
        assert a.num_sampled_nodes == b.num_sampled_nodes
        assert a.num_sampled_edges == b.num_sampled_edges
        if history:
            for key in ("halo_index", "hist", "push_index", "push_ids"):
                for u, v in zip(getattr(a, key), getattr(b, key), strict=True):
                    assert torch.equal(u, v), key
        assert step.macro.indptr is None  # the device got samples, not a graph to sample
        count += 1
    assert count > 0
    # Only the touched rows moved (LBS's stage 2 takes all neighbours: it touches all).
    moved, total = aot.io_stats()["nodes_moved"], plain.io_stats()["nodes_moved"]
    assert moved <= total if first_stage == "lbs" else moved < total
    if history:  # fewer history rows than halo nodes: last-hop halo nodes need none
        assert aot.h2d_bytes < plain.h2d_bytes


def test_aot_moves_fewer_bytes_for_pbs_with_few_training_nodes(tmp_path):
    sparse = SyntheticGraph(num_nodes=3000, avg_degree=6, num_features=32, train_ratio=0.02, seed=4)
    sizes = {}
    for aot in (False, True):
        dm = MultistageDataModule(
            sparse,
            first_stage=PartitionBatchSampler(num_parts=8, parts_per_batch=2, history=False),
            batch_size=50,
            aot=aot,
            fanouts=[5, 5],
            cache_dir=str(tmp_path),
        )
        dm.prepare_data()
        dm.setup("fit")
        for _ in _batches(dm):
            pass
        sizes[aot] = dm.io_stats()["h2d_bytes"]
    assert sizes[True] < 0.7 * sizes[False]


# ------------------------------------------------------------------ node buffers
@pytest.mark.parametrize(
    ("first_stage", "aot"), [("lbs", False), ("lbs", True), ("pbs", False), ("pbs", True)]
)
def test_multistage_relabels_through_node_buffers(tmp_path, monkeypatch, first_stage, aot):
    """Stage 1, AoT and stage 2 run without ``torch.unique`` (node buffers), and every
    mini-batch is the sample ``sample_neighbors`` draws without a buffer (the sorting
    relabel) from the same generator inside the same macro-batch."""
    from lightgraph.data.loader.multistage import stage_two_generator
    from lightgraph.functional.neighbor_sampling import sample_neighbors

    mode = dict(history=True) if first_stage == "pbs" else {}
    plain = _module(tmp_path, first_stage=first_stage, prefetch=False, **mode)
    reference = []
    for step in plain.train_loader():
        macro = step.macro
        sample = sample_neighbors(
            macro.indptr,
            macro.indices,
            step.seeds,
            plain.stage_two_fanouts,
            generator=stage_two_generator(plain.seed, macro.epoch, macro.index, step.step),
        )
        reference.append((macro.node[sample.node], torch.stack([sample.row, sample.col])))

    def fail(*args, **kwargs):
        raise AssertionError("torch.unique was called")

    monkeypatch.setattr(torch, "unique", fail)
    dm = _module(tmp_path, first_stage=first_stage, prefetch=False, aot=aot, **mode)
    table = _StubHistory()
    store_of = torch.empty_like(dm.store.node_ids.long())
    store_of[dm.store.node_ids.long()] = torch.arange(store_of.numel())
    count = 0
    for (node, edge_index), step in zip(reference, dm.train_loader(), strict=True):
        batch = dm.sample_on_device(dm.to_device(step, CPU, table))
        assert torch.equal(store_of[batch.n_id], node)
        assert torch.equal(batch.edge_index, edge_index)
        count += 1
    assert count > 0


def test_aot_gathers_only_the_kept_feature_rows(tmp_path, monkeypatch):
    """With AoT, stage 1 reads from the graph's features only the rows that reach the
    device (not every macro-batch row, then the kept ones again)."""
    import lightgraph.data.loader.multistage as multistage

    gathered: list[int] = []
    real = multistage.gather_rows

    def counting(x, node, *args, **kwargs):
        gathered.append(int(node.numel()))
        return real(x, node, *args, **kwargs)

    monkeypatch.setattr(multistage, "gather_rows", counting)
    dm = _module(tmp_path, first_stage="pbs", aot=True, prefetch=False)
    kept, sampled = 0, 0
    for step in dm.train_loader():
        if step.step == 0:
            kept += step.macro.num_nodes
            sampled += step.macro.num_nodes_sampled
    assert kept < sampled  # AoT dropped some rows
    assert sum(gathered) == kept


# ------------------------------------------------------------------- loader mechanics
@pytest.mark.parametrize("first_stage", ["lbs", "pbs"])
def test_prefetching_serial_and_resumed_loaders_agree(tmp_path, first_stage):
    dm = _module(tmp_path, first_stage=first_stage)
    serial = MultistageLoader(dm.build_macro_batch, dm.plan, dm.batch_size, prefetch=False)

    def signature(loader):
        return [
            (step.macro.index, step.step, batch.n_id.tolist(), batch.edge_index.sum().item())
            for step, batch in _batches(dm, loader)
        ]

    two_epochs = signature(dm.train_loader()) + signature(dm.train_loader())
    assert signature(serial) + signature(serial) == two_epochs
    assert dm.train_loader().epoch == 2
    # Stop after 3 steps of epoch 0, save, resume in a fresh loader.
    fresh = MultistageLoader(dm.build_macro_batch, dm.plan, dm.batch_size)
    it = iter(fresh)
    for _ in range(3):
        next(it)
    state = fresh.state_dict()
    resumed = MultistageLoader(dm.build_macro_batch, dm.plan, dm.batch_size)
    resumed.load_state_dict(state)
    assert signature(resumed) == two_epochs[3 : len(two_epochs) // 2]
    fresh.close()
    resumed.close()
    serial.close()


def test_epochs_reshuffle_and_count_targets(tmp_path):
    dm = _module(tmp_path, first_stage="lbs")
    first = [s.macro.node[s.seeds].tolist() for s in dm.train_loader()]
    second = [s.macro.node[s.seeds].tolist() for s in dm.train_loader()]
    assert first != second
    stats = dm.io_stats()
    assert stats["targets"] == 2 * len(dm.split_nodes("train"))
    assert stats["macro_batches"] == 8
    assert stats["nodes_loaded"] / stats["targets"] > 1  # the normalised working set


def test_staged_steps_are_what_the_loader_yields(tmp_path):
    dm = _module(tmp_path, first_stage="lbs", prefetch=False)
    step = next(iter(dm.train_loader()))
    assert isinstance(step, StagedStep)
    assert len(dm.train_loader()) == sum(-(-len(s) // 50) for s in dm.plan(1))


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(ratio=0), r"LargeBatchSampler: .*`ratio`.*\(0, 1\].*0"),
        (dict(ratio=1.5), r"`ratio`.*1.5"),
        (dict(ratio=True), r"`ratio`"),
        (dict(first_stage="pbs", num_parts=4, parts_per_batch=5), r"`parts_per_batch`.*\[1, 4\]"),
        (dict(first_stage="pbs", num_parts=0), r"PartitionBatchSampler: .*`num_parts`"),
        (dict(first_stage="pbs", history=1), r"`history`"),
        (dict(second_stage_fanouts=[10, 10, 10]), r"second_stage_fanouts\[0\].*15.*10"),
        (dict(second_stage_fanouts=[50, 50]), r"one entry per hop"),
        (dict(fanouts=[-1, 5], second_stage_fanouts=[50, 5]), r"second_stage_fanouts\[0\]"),
        (dict(batch_size=0), r"`batch_size`"),
        (dict(num_sampler_threads=0), r"`num_sampler_threads`"),
    ],
)
def test_bad_input_is_named(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        joestar_module(DATASET, cache_dir=str(tmp_path), **kwargs)


@pytest.mark.parametrize("value", ["xyz", 3, None, LargeBatchSampler])
def test_a_first_stage_that_is_not_a_sampler_is_named(tmp_path, value):
    match = r"`first_stage`.*LargeBatchSampler.*PartitionBatchSampler.*'lbs', 'pbs'.*" + re.escape(
        repr(value)
    )
    with pytest.raises(ValueError, match=match):
        MultistageDataModule(DATASET, first_stage=value, cache_dir=str(tmp_path))


# ------------------------------------------------------------ one sampler per first stage
def test_each_first_stage_has_only_its_own_arguments():
    """LBS and PBS are two samplers: an argument of the other one is not accepted at all."""
    with pytest.raises(TypeError, match="num_parts"):
        LargeBatchSampler(num_parts=8)
    with pytest.raises(TypeError, match="ratio"):
        PartitionBatchSampler(ratio=0.5)


def test_a_first_stage_name_is_that_sampler_with_its_defaults(tmp_path):
    lbs = MultistageDataModule(DATASET, first_stage="lbs", cache_dir=str(tmp_path))
    assert isinstance(lbs.first_stage, LargeBatchSampler)
    sampler = lbs.first_stage
    assert (sampler.ratio, sampler.num_sampler_threads, sampler.second_stage_fanouts) == (
        0.125,
        1,
        None,
    )
    assert lbs.stage_two_fanouts == [-1] * 3 and lbs.history_layers == 0
    assert (lbs.num_parts, lbs.partitioner) == (1, "random")  # the NS-Mem store
    pbs = MultistageDataModule(DATASET, first_stage="pbs", cache_dir=str(tmp_path))
    assert isinstance(pbs.first_stage, PartitionBatchSampler)
    sampler = pbs.first_stage
    assert (sampler.num_parts, sampler.parts_per_batch, sampler.history) == (128, 16, True)
    assert (pbs.num_parts, pbs.partitioner) == (128, "gap")  # the store follows the sampler
    assert pbs.history_layers == 2 and pbs.stage_two_fanouts == [15, 10, 5]


# ------------------------------------------------------------------------- the graph
def test_the_graph_is_read_into_memory_once_under_concurrent_first_use(tmp_path, monkeypatch):
    check_graph_copied_once_under_concurrent_first_use(
        _module(tmp_path, first_stage="lbs"), monkeypatch
    )


# ------------------------------------------------------------------- epoch length
def test_a_pbs_loader_has_no_length_and_each_pass_is_one_whole_epoch(tmp_path):
    dm = _module(tmp_path, first_stage="pbs", num_parts=8, parts_per_batch=3, batch_size=40)
    loader = dm.train_loader()
    with pytest.raises(TypeError, match="partition draw"):
        len(loader)
    train = sorted(dm.split_nodes("train").tolist())
    for epoch in range(3):
        seeds = [v for s in loader for v in s.macro.node[s.seeds].tolist()]
        assert sorted(seeds) == train, f"epoch {epoch}"
    assert loader.epoch == 3


def _stub_loader(sizes: list[int]) -> MultistageLoader:
    """A loader over macro-batches of ``sizes`` seeds (mini-batches of 2), no graph."""

    def plan(epoch):
        return [torch.arange(n) for n in sizes]

    def build(epoch, k):
        seeds = torch.arange(sizes[k])
        return StageOneBatch(
            epoch=epoch,
            index=k,
            node=seeds,
            x=seeds,
            y=seeds,
            indptr=None,
            indices=None,
            num_inner=sizes[k],
            batches=[seeds[i : i + 2] for i in range(0, sizes[k], 2)],
        )

    return MultistageLoader(build, plan, batch_size=2, prefetch=False, sized=False)


def test_handing_over_moves_the_position_past_empty_macro_batches():
    loader = _stub_loader([3, 0, 2, 0])  # PBS groups without training nodes have no steps
    loader.handover = "reported"
    positions = []
    for _ in loader:  # fetched steps do not move the position; handed-over ones do
        assert loader.state_dict() == (
            positions[-1] if positions else {"epoch": 0, "step": 0, "position": [0, 0]}
        )
        loader.hand_over()
        positions.append(loader.state_dict())
    # "step" counts the epoch's steps handed over; "position" is (macro-batch, mini-batch)
    assert positions == [
        {"epoch": 0, "step": 1, "position": [0, 1]},
        {"epoch": 0, "step": 2, "position": [2, 0]},
        {"epoch": 1, "step": 0, "position": [0, 0]},
    ]
