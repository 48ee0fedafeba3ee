"""JOESTAR's multistage data module under data parallelism: each rank's share of LBS and
PBS epochs, checked against the single-process loader and the partition store itself."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from torch_geometric.nn.models import GraphSAGE

from lightgraph.data import MultistageDataModule, SyntheticGraph
from lightgraph.data.loader import PartitionBatchSampler
from lightgraph.data.loader.data_parallel import DataParallelShard
from lightgraph.models import MiniBatchNodeClassifier
from tests.data.joestar import joestar_module

DATASET = SyntheticGraph(num_nodes=800, avg_degree=6, num_features=8, train_ratio=0.3, seed=3)
CPU = torch.device("cpu")


def _module(tmp_path, shard=None, seed=0, **kwargs) -> MultistageDataModule:
    if kwargs.get("first_stage", "lbs") == "lbs":
        args: dict = dict(batch_size=10, ratio=0.25, fanouts=[3, 3])
    else:
        args = dict(batch_size=20, num_parts=8, parts_per_batch=2, history=False, fanouts=[3, 3])
    args.update(kwargs)
    dm = joestar_module(DATASET, cache_dir=str(tmp_path), prefetch=False, seed=seed, **args)
    dm.prepare_data()
    dm.setup("fit")
    if shard is not None:
        dm.data_shard = shard
    return dm


def _epoch(dm: MultistageDataModule) -> list[list[int]]:
    """One pass of the training loader: the seeds (store ids) of every step."""
    return [step.macro.node[step.seeds].tolist() for step in dm.train_loader()]


def _ranks(tmp_path, world: int, epochs: int = 1, **kwargs) -> list[list[list[list[int]]]]:
    """``out[r][e]``: rank ``r``'s steps in epoch ``e``."""
    out = []
    for r in range(world):
        dm = _module(tmp_path, shard=(r, world), **kwargs)
        out.append([_epoch(dm) for _ in range(epochs)])
    return out


# ---------------------------------------------------------------------------------- LBS
@pytest.mark.parametrize(("world", "batch", "ratio"), [(2, 16, 0.25), (3, 7, 0.13), (2, 5, 0.2)])
def test_lbs_rank_steps_are_slices_of_the_single_process_steps(tmp_path, world, batch, ratio):
    """Rank r's mini-batch i is the r-th of ``world`` equal slices of the single process's
    mini-batch i with batch world * batch; the len % world last seeds of each are nobody's."""
    single = _module(tmp_path, ratio=ratio, batch_size=world * batch)
    shard = _module(tmp_path, shard=(0, world), ratio=ratio, batch_size=batch)
    ranks = _ranks(tmp_path, world, epochs=2, ratio=ratio, batch_size=batch)
    for epoch in range(2):
        want: list[list[list[int]]] = [[] for _ in range(world)]
        dropped = 0
        for seeds in _epoch(single):
            per = len(seeds) // world
            assert per <= batch
            dropped += len(seeds) - world * per  # at most world - 1 per step
            if per:
                for r in range(world):
                    want[r].append(seeds[r * per : (r + 1) * per])
        for r in range(world):
            assert ranks[r][epoch] == want[r], (epoch, r)
        assert shard.dropped_targets(epoch) == dropped


@pytest.mark.parametrize("world", [2, 3])
def test_lbs_shards_are_disjoint_cover_the_epoch_and_have_equal_steps(tmp_path, world):
    train = set(_module(tmp_path).split_nodes("train").tolist())
    ratio = 0.13  # macro-batches of 32 seeds (and one of 16): 3 ranks drop some
    dms = [_module(tmp_path, shard=(r, world), ratio=ratio) for r in range(world)]
    # Each global mini-batch (one process, batch world * 10) drops its len % world last seeds.
    single = _module(tmp_path, ratio=ratio, batch_size=world * 10)
    dropped = sum(len(seeds) % world for seeds in _epoch(single))
    splits = []
    for epoch in range(2):
        shares = [[v for step in _epoch(dm) for v in step] for dm in dms]
        steps = [len(dm.train_loader()) for dm in dms]
        assert len(set(steps)) == 1  # equal steps: DDP hangs otherwise
        for r, share in enumerate(shares):
            assert len(set(share)) == len(share)
            for other in shares[r + 1 :]:
                assert not set(share) & set(other)
        union = set().union(*map(set, shares))
        assert union <= train and len(train - union) == dropped
        splits.append([sorted(s) for s in shares])
        for dm in dms:
            assert dm.io_stats()["dropped_targets"] == dropped * (epoch + 1)
    assert splits[0] != splits[1]  # reshuffled every epoch
    # The same seed gives the same split.
    again = [
        sorted(v for step in _epoch(_module(tmp_path, shard=(r, world), ratio=ratio)) for v in step)
        for r in range(world)
    ]
    assert again == splits[0]
    other_seed = [
        sorted(
            v
            for step in _epoch(_module(tmp_path, shard=(r, world), ratio=ratio, seed=1))
            for v in step
        )
        for r in range(world)
    ]
    assert other_seed != splits[0]


def test_lbs_stage_one_samples_only_the_ranks_own_seeds(tmp_path):
    single = _module(tmp_path).plan(0)
    dm = _module(tmp_path, shard=(1, 2))
    macros = {s.macro.index: s.macro for s in dm.train_loader()}
    assert len(macros) == len(single)
    for k, macro in macros.items():
        mine = torch.cat(macro.batches)
        # Half of the global macro-batch's seeds, and they are the first (local) nodes of
        # the macro-batch stage 1 sampled: no other seed was expanded.
        assert macro.num_seeds == mine.numel() == len(single[k]) // 2
        assert sorted(mine.tolist()) == list(range(mine.numel()))
        assert set(macro.node[mine].tolist()) < set(single[k].tolist())


@pytest.mark.parametrize("world", [2, 3])
def test_lbs_ranks_with_all_neighbours_train_the_single_process_weights(tmp_path, world):
    """The exactness anchor: with fanout -1 in both stages, ``world`` ranks with batch b
    (gradients averaged, as DDP does) take the SGD steps of one process with batch
    ``world * b``."""
    b = 10  # macro-batches of 60 seeds: whole global batches of 20 and 30
    fan = dict(fanouts=[-1, -1], ratio=0.25)
    single = _module(tmp_path, batch_size=world * b, **fan)
    ranks = [_module(tmp_path, shard=(r, world), batch_size=b, **fan) for r in range(world)]
    torch.manual_seed(0)
    model = GraphSAGE(DATASET.num_features, 8, 2, DATASET.num_classes).double()
    reference = GraphSAGE(DATASET.num_features, 8, 2, DATASET.num_classes).double()
    reference.load_state_dict(model.state_dict())

    def grads(net, dm, step):
        batch = dm.sample_on_device(dm.to_device(step, CPU))
        net.zero_grad()
        out = net(
            batch.x.double(),
            batch.edge_index,
            num_sampled_nodes_per_hop=batch.num_sampled_nodes,
            num_sampled_edges_per_hop=batch.num_sampled_edges,
        )[: batch.batch_size]
        F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
        return [p.grad.clone() for p in net.parameters()]

    steps = 0
    for _ in range(2):
        iters = [iter(dm.train_loader()) for dm in ranks]
        for step in single.train_loader():
            want = grads(reference, single, step)
            got = [grads(model, dm, next(it)) for dm, it in zip(ranks, iters, strict=True)]
            with torch.no_grad():
                for p, q, g, *rest in zip(
                    reference.parameters(), model.parameters(), want, *got, strict=True
                ):
                    p -= 0.5 * g
                    q -= 0.5 * sum(rest) / world
            steps += 1
        for it in iters:
            assert next(it, None) is None
    assert steps == 2 * 240 // (world * b)
    for p, q in zip(reference.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q, p)


def test_one_process_is_unchanged_by_an_explicit_shard(tmp_path):
    plain = _epoch(_module(tmp_path))
    assert _epoch(_module(tmp_path, shard=(0, 1))) == plain
    assert _epoch(_module(tmp_path, shard=DataParallelShard(0, 1))) == plain


# ---------------------------------------------------------------------------------- PBS
def _partition_of(dm) -> torch.Tensor:
    ptr = dm.store.part_ptr
    part = torch.empty(int(ptr[-1]), dtype=torch.long)
    for p in range(dm.num_parts):
        part[int(ptr[p]) : int(ptr[p + 1])] = p
    return part


@pytest.mark.parametrize("world", [2, 3])
def test_pbs_shards_are_whole_partitions_disjoint_with_equal_steps(tmp_path, world):
    kwargs = dict(first_stage="pbs", batch_size=20)
    dms = [_module(tmp_path, shard=(r, world), **kwargs) for r in range(world)]
    train = set(dms[0].split_nodes("train").tolist())
    part = _partition_of(dms[0])
    splits = []
    for _ in range(2):
        shares, parts, steps = [], [], []
        for dm in dms:
            seen = [(s.macro, s.macro.node[s.seeds].tolist()) for s in dm.train_loader()]
            steps.append(len(seen))
            shares.append([v for _, seeds in seen for v in seeds])
            macros = {id(m): m for m, _ in seen}.values()
            # A macro-batch is whole partitions: its inner nodes are every node of them.
            owned: set[int] = set()
            for m in macros:
                inner = m.node[: m.num_inner]
                chosen = set(part[inner].tolist())
                assert len(chosen) <= dm.first_stage.parts_per_batch
                assert int(inner.numel()) == sum(int((part == p).sum()) for p in chosen)
                owned |= chosen
            parts.append(owned)
        assert len(set(steps)) == 1, steps  # equal steps: DDP hangs otherwise
        for r in range(world):
            assert len(set(shares[r])) == len(shares[r])
            for s in range(r + 1, world):
                assert not set(shares[r]) & set(shares[s])
                assert not parts[r] & parts[s]  # a partition belongs to one rank
        # Every training node is trained once, on one rank: none is left out.
        assert sorted(sum(shares, [])) == sorted(train)
        for dm in dms:
            assert dm.io_stats()["dropped_targets"] == 0
        splits.append([sorted(s) for s in shares])
    assert splits[0] != splits[1]  # reshuffled every epoch
    again = [
        sorted(v for step in _epoch(_module(tmp_path, shard=(r, world), **kwargs)) for v in step)
        for r in range(world)
    ]
    assert again == splits[0]


@pytest.mark.parametrize("first_stage", ["lbs", "pbs"])
def test_a_resumed_rank_continues_from_rank_zeros_state(tmp_path, first_stage):
    """Lightning saves rank 0's loader state and every rank restores it: the state must name
    the same position on every rank."""
    world = 2
    kwargs = dict(first_stage=first_stage)
    dms = [_module(tmp_path, shard=(r, world), **kwargs) for r in range(world)]
    full = [_epoch(dm) for dm in dms]
    stop = 3
    stopped = _module(tmp_path, shard=(0, world), **kwargs).train_loader()
    it = iter(stopped)
    for _ in range(stop):
        next(it)
    state = stopped.state_dict()
    for r in range(world):
        fresh = _module(tmp_path, shard=(r, world), **kwargs)
        fresh.train_loader().load_state_dict(state)
        assert _epoch(fresh) == full[r][stop:], r


def test_bad_shard_is_named(tmp_path):
    dm = _module(tmp_path)
    with pytest.raises(ValueError, match=r"`rank`.*\[0, 1\].*2"):
        dm.data_shard = (2, 2)
    with pytest.raises(ValueError, match="world_size"):
        dm.data_shard = (0, 0)


def test_the_shard_comes_from_the_trainers_strategy(tmp_path):
    class Strategy:
        distributed_sampler_kwargs = {"num_replicas": 3, "rank": 2}

    class Trainer:
        strategy = Strategy()

    explicit = _epoch(_module(tmp_path, shard=(2, 3)))
    dm = _module(tmp_path)
    dm.trainer = Trainer()
    assert dm.data_shard == (2, 3)
    assert _epoch(dm) == explicit
    clash = _module(tmp_path, shard=(0, 3))
    clash.trainer = Trainer()
    with pytest.raises(ValueError, match=r"`data_shard`.*\(0, 3\).*\(2, 3\)"):
        clash.train_loader()


# ------------------------------------------------------------------- under a Trainer
class _Record(Callback):
    """Perturbs each rank's weights before DDP wraps the model (DDP broadcasts rank 0's),
    records every step's seeds and, at the end, the history tables."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.seeds: list[list[int]] = []

    def setup(self, trainer, pl_module, stage) -> None:
        with torch.no_grad():
            for p in pl_module.parameters():
                p.add_(0.1 * trainer.global_rank)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == 0:  # the warm fill, before any push
            self.filled = [t.clone() for t in pl_module.history.tables]
        self.seeds.append(batch.n_id[: batch.batch_size].tolist())

    def on_train_end(self, trainer, pl_module) -> None:
        tables = [t.clone() for t in pl_module.history.tables]
        torch.save(
            {
                "seeds": self.seeds,
                "filled": self.filled,
                "tables": tables,
                "stats": dict(pl_module.history.stats),
                "weights": {k: v.clone() for k, v in pl_module.model.state_dict().items()},
            },
            os.path.join(self.out_dir, f"rank{trainer.global_rank}.pt"),
        )


def _pbs_ddp_run(tmp_path, **module_kwargs) -> tuple[MultistageDataModule, list[dict]]:
    """Two ``ddp_fork`` ranks train one PBS epoch with history, no validation; what each
    rank's ``_Record`` saved."""
    out = tmp_path / "out"
    out.mkdir()
    dm = MultistageDataModule(
        SyntheticGraph(num_nodes=400, avg_degree=5, num_features=8, train_ratio=0.5, seed=2),
        first_stage=PartitionBatchSampler(num_parts=6, parts_per_batch=2),
        batch_size=25,
        fanouts=[4, 4],
        cache_dir=str(tmp_path / "cache"),
    )
    torch.manual_seed(0)
    module = MiniBatchNodeClassifier(
        GraphSAGE(8, 16, 2, dm.dataset.num_classes),
        dm.dataset.num_classes,
        lr=0.05,
        **module_kwargs,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_fork",
        max_epochs=1,
        limit_val_batches=0,  # no refresh by validation: only the pushes move the tables
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
        callbacks=[_Record(str(out))],
    )
    trainer.fit(module, dm)
    return dm, [torch.load(out / f"rank{r}.pt") for r in range(2)]


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_two_ddp_ranks_train_disjoint_seeds_with_identical_history(tmp_path):
    _, ranks = _pbs_ddp_run(tmp_path)
    seeds = [{v for step in rec["seeds"] for v in step} for rec in ranks]
    assert seeds[0] and seeds[1] and not seeds[0] & seeds[1]
    assert len(ranks[0]["seeds"]) == len(ranks[1]["seeds"])
    for key in ("filled", "tables"):  # the warm fill, then every push, on both replicas
        for a, b in zip(ranks[0][key], ranks[1][key], strict=True):
            assert torch.equal(a, b), key
    assert not torch.equal(ranks[0]["filled"][0], ranks[0]["tables"][0])  # training moved it


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_epoch_sync_exchanges_nothing_per_step_and_meets_at_the_exact_embeddings(tmp_path):
    """``history_sync="epoch"``: no all-gather during the epoch; at its end (no validation
    ran) both replicas hold the exact hidden layer of the final weights, checked against
    PyG's own forward over the whole graph."""
    dm, ranks = _pbs_ddp_run(tmp_path, history_sync="epoch")
    for rec in ranks:
        assert rec["stats"]["bytes_gathered"] == 0 and rec["stats"]["gather_seconds"] == 0
        assert rec["stats"]["refresh_seconds"] > 0
    for a, b in zip(ranks[0]["tables"], ranks[1]["tables"], strict=True):
        assert torch.equal(a, b)
    model = GraphSAGE(8, 16, 2, dm.dataset.num_classes)
    model.load_state_dict(ranks[0]["weights"])
    model.eval()
    dm.prepare_data()
    dm.setup("fit")
    graph = dm.full_graph()  # store order, CSC: the in-edges of node v are indices[ptr[v]:ptr[v+1]]
    dst = torch.repeat_interleave(
        torch.arange(graph.indptr.numel() - 1), graph.indptr[1:] - graph.indptr[:-1]
    )
    edge_index = torch.stack([graph.indices.long(), dst])
    with torch.no_grad():
        hidden = model.act(model.convs[0](graph.x, edge_index))
    torch.testing.assert_close(ranks[0]["tables"][0], hidden, rtol=1e-5, atol=1e-5)


def test_epoch_sync_needs_the_refresh():
    with pytest.raises(ValueError, match="history_sync.*refresh_history=False"):
        MiniBatchNodeClassifier(
            GraphSAGE(8, 16, 2, 3), 3, history_sync="epoch", refresh_history=False
        )
    with pytest.raises(ValueError, match="history_sync"):
        MiniBatchNodeClassifier(GraphSAGE(8, 16, 2, 3), 3, history_sync="batch")


@pytest.mark.parametrize(
    ("trainer_kwargs", "eval_mode", "want"),
    [
        ({}, "layerwise", "epoch"),  # exact validation after every epoch refreshes anyway
        ({"limit_val_batches": 0}, "layerwise", "step"),
        ({"check_val_every_n_epoch": 2}, "layerwise", "step"),
        ({}, "sampled", "step"),  # sampled validation computes no table rows
    ],
)
def test_auto_history_sync_follows_the_validation(tmp_path, trainer_kwargs, eval_mode, want):
    dm = _module(tmp_path, first_stage="pbs", history=True, eval_mode=eval_mode)
    module = MiniBatchNodeClassifier(GraphSAGE(8, 16, 2, DATASET.num_classes), DATASET.num_classes)
    module.trainer = pl.Trainer(logger=False, **trainer_kwargs)
    assert module._history_sync(dm) == want
    explicit = MiniBatchNodeClassifier(
        GraphSAGE(8, 16, 2, DATASET.num_classes), DATASET.num_classes, history_sync="step"
    )
    explicit.trainer = module.trainer
    assert explicit._history_sync(dm) == "step"
