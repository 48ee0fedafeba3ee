"""FlowPipeline: GPipe over affinity microbatches equals single-process training on the
graph without the cut edges (loss, every gradient, an input projection's gradient)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from lightgraph.distributed import (
    COMPUTE_KINDS,
    BubbleInterleaver,
    ComputeObserver,
    FlowPipeline,
    ParallelContext,
)
from lightgraph.nn import GCN, ResGEN, RevGCN
from lightgraph.nn.partitioned_graph import PartitionedGraph
from tests.distributed_helpers import run_distributed

NODES, FEATURES, HIDDEN, CLASSES, EDGES = 48, 5, 8, 3, 200


def _graph() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, NODES, (2, EDGES), generator=gen)
    x = torch.randn(NODES, FEATURES, generator=gen, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (NODES,), generator=gen)
    # Uneven: the first half of the ids is mostly training nodes, the second half rarely.
    p = torch.where(torch.arange(NODES) < NODES // 2, 0.8, 0.2)
    train_mask = torch.rand(NODES, generator=gen) < p
    return edge_index, x, y, train_mask


def _models(
    kind: str, layers: int = 4, dropout: float = 0.0, **kwargs: Any
) -> tuple[nn.Module, nn.Module]:
    """The GNN and an input projection outside the pipeline, identical on every call."""
    torch.manual_seed(0)
    proj = nn.Linear(FEATURES, FEATURES)
    if kind == "RevGCN":
        model: nn.Module = RevGCN(
            FEATURES, HIDDEN, CLASSES, num_layers=layers, dropout=dropout, **kwargs
        )
    elif kind == "GCN":
        model = GCN(FEATURES, CLASSES, hidden_channels=HIDDEN, num_layers=layers, dropout=dropout)
    else:
        model = ResGEN(FEATURES, HIDDEN, CLASSES, num_layers=layers, dropout=dropout, **kwargs)
    return model.double(), proj.double()


def _reference(kind: str, order: Tensor, bounds: Tensor) -> dict[str, Any]:
    """Single-process training on the reordered graph without the edges between microbatches
    (the edge list filtered by microbatch membership, written here independently)."""
    edge_index, x, y, train_mask = _graph()
    model, proj = _models(kind)
    position = torch.empty_like(order)
    position[order] = torch.arange(NODES)
    member = torch.zeros(NODES, dtype=torch.long)  # by new position
    for m in range(bounds.numel() - 1):
        member[bounds[m] : bounds[m + 1]] = m
    src, dst = position[edge_index[0]], position[edge_index[1]]
    keep = member[src] == member[dst]
    reordered = torch.stack([src[keep], dst[keep]])
    graph: Any = reordered
    if kind == "GCN":  # partition-aware layers take the whole graph as one partition
        every = torch.ones(NODES, dtype=torch.bool)
        data = Data(
            x=x, edge_index=reordered, y=y, train_mask=every, val_mask=every, test_mask=every
        )
        graph = PartitionedGraph.from_data(data)
    logits = model(proj(x)[order], graph)
    mask = train_mask[order]
    loss = F.cross_entropy(logits[mask], y[order][mask])
    loss.backward()
    model.eval()
    with torch.no_grad():
        eval_logits = torch.empty_like(logits)
        eval_logits[order] = model(proj(x)[order], graph)
    return {
        "loss": loss.detach(),
        "grads": {n: p.grad for n, p in model.named_parameters()},
        "proj_grads": {n: p.grad for n, p in proj.named_parameters()},
        "logits": eval_logits,
        "cut": int((~keep).sum()),
    }


class Recorder:
    """A ComputeObserver that records the calls and the thread they come from."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.threads: set[int] = set()

    def compute_begin(self, kind: str) -> None:
        self.events.append(("begin", kind))
        self.threads.add(threading.get_ident())

    def compute_end(self, kind: str) -> None:
        self.events.append(("end", kind))


def _computes(events: list[tuple[str, str]]) -> list[str]:
    """The kinds in order, checking that every begin is closed before the next one."""
    kinds = []
    for i in range(0, len(events), 2):
        (b, kind), (e, kind2) = events[i], events[i + 1]
        assert (b, e) == ("begin", "end") and kind == kind2, events
        kinds.append(kind)
    return kinds


def _train(rank: int, world: int, kind: str, num_microbatches: int, reorder: str) -> dict[str, Any]:
    edge_index, x, y, train_mask = _graph()
    model, proj = _models(kind)
    recorder = Recorder()
    pipe = FlowPipeline(observer=recorder)
    assert (pipe.rank, pipe.num_stages) == (rank, world)
    mb = pipe.build(model, edge_index, NODES, num_microbatches=num_microbatches, reorder=reorder)
    calls: list[int] = []
    pipe.stage.register_forward_hook(lambda *_: calls.append(1))
    x_in = proj(x) if pipe.is_first else None
    loss = pipe.step(
        x_in, y if pipe.is_last else None, train_mask if pipe.is_last else None, keep_logits=True
    )
    events = list(recorder.events)
    stage_calls = len(calls)
    everywhere = pipe.broadcast_loss(loss)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    proj_grads = {n: p.grad.clone() for n, p in proj.named_parameters()} if pipe.is_first else None
    # A second step: the schedule is initialised, the observer sees every compute.
    recorder.events.clear()
    x_in = proj(x) if pipe.is_first else None
    pipe.step(x_in, y if pipe.is_last else None, train_mask if pipe.is_last else None)
    later_events = list(recorder.events)
    stage_params = {id(p) for p in pipe.stage_parameters()}
    trained_here = {n for n, p in model.named_parameters() if id(p) in stage_params}
    model.eval()
    logits = pipe.forward_eval(proj(x).detach() if pipe.is_first else None)
    return {
        "loss": loss,
        "everywhere": everywhere,
        "grads": grads,
        "trained_here": trained_here,
        "proj_grads": proj_grads,
        "logits": logits,
        "last_logits": pipe.last_logits,
        "order": mb.order,
        "bounds": mb.bounds,
        "cut": mb.num_cut_edges,
        "events": events,
        "later_events": later_events,
        "stage_calls": stage_calls,
        "threads": recorder.threads,
        "main": threading.get_ident(),
    }


def _check_against_reference(results: list[dict[str, Any]], kind: str, world: int, m: int) -> None:
    first, last = results[0], results[-1]
    for r in results:  # every rank agrees on the microbatches
        assert torch.equal(r["order"], first["order"]) and torch.equal(r["bounds"], first["bounds"])
    assert first["bounds"].numel() - 1 == m
    if m == 1:  # the whole graph, in its own order
        ref = _reference(kind, torch.arange(NODES), torch.tensor([0, NODES]))
        assert first["cut"] == ref["cut"] == 0
    else:
        ref = _reference(kind, first["order"], first["bounds"])
        assert first["cut"] == ref["cut"] > 0
    # Loss: on the last stage, and on every rank through broadcast_loss.
    torch.testing.assert_close(last["loss"], ref["loss"], rtol=1e-12, atol=1e-12)
    for r in results[:-1]:
        assert r["loss"] is None and r["logits"] is None
    for r in results:
        torch.testing.assert_close(r["everywhere"], ref["loss"], rtol=1e-12, atol=1e-12)
    # Every parameter's gradient comes from exactly one rank (its stage) and is right.
    seen: dict[str, int] = {}
    for rank, r in enumerate(results):
        assert set(r["grads"]) == r["trained_here"]
        for name, grad in r["grads"].items():
            assert name not in seen, f"{name} has a gradient on ranks {seen[name]} and {rank}"
            seen[name] = rank
            torch.testing.assert_close(grad, ref["grads"][name], rtol=1e-9, atol=1e-12, msg=name)
    assert set(seen) == set(ref["grads"])
    # The input projection outside the pipeline got its gradient back through stage 0.
    for name, grad in first["proj_grads"].items():
        torch.testing.assert_close(grad, ref["proj_grads"][name], rtol=1e-9, atol=1e-12, msg=name)
    # Evaluation logits in original node order; the step's logits (training mode = eval
    # mode here, no dropout).
    torch.testing.assert_close(last["logits"], ref["logits"], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(last["last_logits"], ref["logits"], rtol=1e-10, atol=1e-12)
    # The observer: on the schedule's thread, never nested. The schedule's first step is
    # one compute (torch initialises the stage in it); later, M forwards then M backwards.
    for rank, r in enumerate(results):
        # Static shapes: no extra shape-inference forward pass in the first step.
        assert r["stage_calls"] == m
        assert r["threads"] == {r["main"]}
        x_grad = ["backward"] if rank == 0 else []  # x's gradient, after the schedule
        kinds = _computes(r["later_events"])
        expected = ["forward", "loss"] * m if rank == world - 1 else ["forward"] * m
        expected += ["backward"] * m + x_grad
        assert kinds == expected, (rank, kinds)
        # One process runs no torch schedule: its first step is like the others.
        first = ["first_step", *x_grad] if world > 1 else expected
        assert _computes(r["events"]) == first, rank


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "world,kind,num_microbatches,reorder",
    [
        (2, "RevGCN", 1, "metis"),
        (2, "ResGEN", 3, "metis"),
        (4, "RevGCN", 3, "random"),
        (4, "ResGEN", 1, "metis"),
        (4, "ResGEN", 4, "metis"),
        (2, "GCN", 2, "metis"),
    ],
)
def test_pipeline_equals_single_process_on_the_cut_graph(
    world, kind, num_microbatches, reorder
) -> None:
    results = run_distributed(_train, world, kind, num_microbatches, reorder, timeout=50)
    _check_against_reference(results, kind, world, num_microbatches)


@pytest.mark.parametrize("kind,num_microbatches", [("RevGCN", 1), ("RevGCN", 3), ("ResGEN", 2)])
def test_one_process_runs_every_microbatch_through_one_stage(kind, num_microbatches) -> None:
    results = [_train(0, 1, kind, num_microbatches, "metis")]
    _check_against_reference(results, kind, 1, num_microbatches)


def _train_after_eval(rank: int, world: int, kind: str, num_microbatches: int) -> dict[str, Any]:
    """A training step after an evaluation pass that followed a training step (the Trainer's
    order without a sanity check): the evaluation schedule's first step comes after the
    training schedule's, on the same pipeline stage."""
    edge_index, x, y, train_mask = _graph()
    model, proj = _models(kind)
    pipe = FlowPipeline()
    mb = pipe.build(model, edge_index, NODES, num_microbatches=num_microbatches)
    pipe.step(proj(x) if pipe.is_first else None, y, train_mask)
    model.eval()
    pipe.forward_eval(proj(x).detach() if pipe.is_first else None)
    model.train()
    model.zero_grad(set_to_none=True)
    proj.zero_grad(set_to_none=True)
    # What every forward pass's input is like, and the gradient each input gets back.
    inputs: list[bool] = []
    input_grads: list[float] = []
    handles: list[Any] = []

    def watch(_module: nn.Module, args: tuple[Any, ...]) -> None:
        h = args[0]
        inputs.append(h.requires_grad)
        if h.requires_grad:
            handles.append(h.register_hook(lambda g: input_grads.append(float(g.abs().sum()))))

    hook = pipe.stage.register_forward_pre_hook(watch)
    pipe.step(proj(x) if pipe.is_first else None, y, train_mask)
    hook.remove()
    for handle in handles:
        handle.remove()
    return {
        "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        "proj_grads": {n: p.grad for n, p in proj.named_parameters()} if pipe.is_first else None,
        "inputs": inputs,
        "input_grads": input_grads,
        "order": mb.order,
        "bounds": mb.bounds,
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world,kind,num_microbatches", [(2, "RevGCN", 2), (3, "ResGEN", 3)])
def test_training_after_evaluation_sends_every_input_gradient(
    world, kind, num_microbatches
) -> None:
    """Every non-first stage's input gets a gradient in a training step that follows an
    evaluation pass, and every stage's parameters (stage 0's, the input projection's) get
    the one-process gradient -- not the zeros of a gradient that never reached them."""
    results = run_distributed(_train_after_eval, world, kind, num_microbatches, timeout=50)
    first = results[0]
    ref = _reference(kind, first["order"], first["bounds"])
    for rank, r in enumerate(results):
        assert len(r["inputs"]) == num_microbatches, rank
        if rank == 0:  # the leaf x_pad slices: their gradient flows after the schedule
            continue
        assert all(r["inputs"]), (rank, r["inputs"])
        assert len(r["input_grads"]) == num_microbatches, (rank, r["input_grads"])
        assert all(g > 0 for g in r["input_grads"]), (rank, r["input_grads"])
    seen: set[str] = set()
    for r in results:
        assert not seen & set(r["grads"])
        seen |= set(r["grads"])
        for name, grad in r["grads"].items():
            torch.testing.assert_close(grad, ref["grads"][name], rtol=1e-9, atol=1e-12, msg=name)
    assert seen == set(ref["grads"])
    for name, grad in first["proj_grads"].items():
        torch.testing.assert_close(grad, ref["proj_grads"][name], rtol=1e-9, atol=1e-12, msg=name)


def test_uneven_training_nodes_give_the_global_mean() -> None:
    """The loss is the sum over microbatches divided by the global count, not a mean of means."""
    edge_index, x, y, train_mask = _graph()
    model, _ = _models("RevGCN")
    pipe = FlowPipeline()
    mb = pipe.build(model, edge_index, NODES, num_microbatches=3, reorder="none")
    counts = [int(train_mask[mb.order[mb.bounds[m] : mb.bounds[m + 1]]].sum()) for m in range(3)]
    assert len(set(counts)) > 1, counts  # the graph makes them uneven
    loss = pipe.step(x, y, train_mask, keep_logits=True)
    logits = pipe.last_logits
    per_node = F.cross_entropy(logits, y, reduction="none")
    torch.testing.assert_close(loss, per_node[train_mask].sum() / train_mask.sum())
    means = [
        per_node[mb.order[mb.bounds[m] : mb.bounds[m + 1]]][
            train_mask[mb.order[mb.bounds[m] : mb.bounds[m + 1]]]
        ].mean()
        for m in range(3)
    ]
    assert abs(float(loss) - float(torch.stack(means).mean())) > 1e-6


def _dropout(rank: int, world: int, reversible: bool) -> list[dict[str, Tensor]]:
    edge_index, x, y, train_mask = _graph()
    model, _ = _models("RevGCN", dropout=0.4, reversible=reversible)
    pipe = FlowPipeline()
    pipe.build(model, edge_index, NODES, num_microbatches=3)
    torch.manual_seed(100 + rank)
    out = []
    for _ in range(2):
        model.zero_grad()
        pipe.step(x if pipe.is_first else None, y, train_mask)
        out.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_dropout_masks_survive_until_the_reversible_recomputation() -> None:
    """With dropout, the reversible blocks' backward recomputation must see the masks of the
    same microbatch's forward pass: the gradients equal those of the same blocks run
    without reversibility (same random stream)."""
    reversible = run_distributed(_dropout, 2, True, timeout=50)
    plain = run_distributed(_dropout, 2, False, timeout=50)
    for rank in range(2):
        for step_rev, step_plain in zip(reversible[rank], plain[rank], strict=True):
            assert step_rev.keys() == step_plain.keys() and step_rev
            for name in step_rev:
                torch.testing.assert_close(step_rev[name], step_plain[name], rtol=1e-9, atol=1e-12)


def test_each_microbatch_draws_its_own_dropout_mask() -> None:
    edge_index, x, y, train_mask = _graph()
    model, _ = _models("RevGCN", dropout=0.5)
    pipe = FlowPipeline()
    pipe.build(model, edge_index, NODES, num_microbatches=2, reorder="none")
    pipe.step(x, y, train_mask)
    runner = pipe._runner
    assert runner is not None
    first, second = runner._masks[0], runner._masks[1]
    assert all(a is not None and b is not None for a, b in zip(first, second, strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(first, second, strict=True))


class _DefaultStreamJob:
    """An LM-like worker job: draws from torch's default generator, then a pause point."""

    def __init__(self, interleaver: BubbleInterleaver) -> None:
        self.interleaver = interleaver
        self.draws: list[Tensor] = []

    def __call__(self) -> bool:
        self.draws.append(torch.rand(3))
        self.interleaver.pause_point()
        time.sleep(0.001)
        return True


@contextlib.contextmanager
def slow_fork_rng(*args: Any, **kwargs: Any) -> Iterator[None]:
    """``torch.random.fork_rng`` that, while a bubble worker thread is alive, lingers until
    some thread has drawn from the default generator (at most 0.5 s): what a slow main
    thread inside the schedule's stage initialisation looks like to the worker."""
    with _FORK_RNG(*args, **kwargs):
        worker = any(t.name == "lightgraph-bubble-lm" for t in threading.enumerate())
        entered = torch.get_rng_state()
        deadline = time.monotonic() + 0.5
        while worker and torch.equal(torch.get_rng_state(), entered):
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        yield


_FORK_RNG = torch.random.fork_rng
_SEED = 1234


def _worker_draws(rank: int, world: int) -> dict[str, Any]:
    edge_index, x, y, train_mask = _graph()
    model, _ = _models("RevGCN", dropout=0.3)
    pipe = FlowPipeline()
    pipe.build(model, edge_index, NODES, num_microbatches=2)
    interleaver = BubbleInterleaver()
    job = _DefaultStreamJob(interleaver)
    torch.random.fork_rng = slow_fork_rng  # a forked rank: nothing to restore
    torch.manual_seed(_SEED + rank)
    for _ in range(2):
        interleaver.start(job)
        pipe.step(x if pipe.is_first else None, y, train_mask, observer=interleaver)
        interleaver.stop()
    return {"draws": job.draws, "stream": pipe.rng_state()["generator"]}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_worker_draws_are_not_undone_by_the_schedules_first_step() -> None:
    """torch's schedule initialises its stage in its first step inside
    ``torch.random.fork_rng``, which saves torch's default generator and restores it on
    exit. A bubble worker drawing meanwhile had its draws undone (the next draws repeated
    them), so a run's LM dropout depended on thread timing. The worker's draws must be
    the default generator's sequence, none repeated, however slow that initialisation."""
    results = run_distributed(_worker_draws, 2, timeout=50)
    for rank, r in enumerate(results):
        draws = r["draws"]
        assert draws, "the worker drew nothing"
        reference = torch.Generator().manual_seed(_SEED + rank)
        expected = [torch.rand(3, generator=reference) for _ in draws]
        for i, (got, want) in enumerate(zip(draws, expected, strict=True)):
            assert torch.equal(got, want), f"rank {rank}: draw {i} is not the generator's next"
        assert r["stream"] is not None  # the stages drew from their own stream


def _checkpoint(rank: int, world: int) -> dict[str, Any]:
    edge_index, x, y, train_mask = _graph()
    model, _ = _models("ResGEN", layers=4)
    pipe = FlowPipeline()
    pipe.build(model, edge_index, NODES, num_microbatches=1)
    opt = torch.optim.SGD(pipe.stage_parameters(), lr=0.5)  # a rank steps its own stage
    for _ in range(2):
        opt.zero_grad()
        pipe.step(x if pipe.is_first else None, y, train_mask)
        opt.step()
    gathered = pipe.state_dict_of_stages()
    local = {k: v.clone() for k, v in model.state_dict().items()}
    pipe.sync_stages()
    synced = {k: v.clone() for k, v in model.state_dict().items()}
    # A fresh model loads the gathered state (every rank) and continues identically.
    fresh, _ = _models("ResGEN", layers=4)
    pipe.load_state_dict_of_stages(fresh, gathered)
    return {"gathered": gathered, "local": local, "synced": synced, "fresh": fresh.state_dict()}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_state_dict_of_stages_gathers_the_whole_trained_model() -> None:
    results = run_distributed(_checkpoint, 2, timeout=50)
    # Reference: two SGD steps of the whole model in one process.
    edge_index, x, y, train_mask = _graph()
    model, _ = _models("ResGEN", layers=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x, edge_index)[train_mask], y[train_mask]).backward()
        opt.step()
    expected = model.state_dict()
    initial = _models("ResGEN", layers=4)[0].state_dict()
    for rank, r in enumerate(results):
        for name, value in expected.items():
            for which in ("gathered", "synced", "fresh"):
                torch.testing.assert_close(
                    r[which][name], value, rtol=1e-10, atol=1e-12, msg=f"{which} {name}"
                )
        # Before the sync a rank holds its own stage only: the other stage is untrained.
        stale = [
            n
            for n in expected
            if torch.equal(r["local"][n], initial[n]) and not torch.equal(expected[n], initial[n])
        ]
        assert stale, f"rank {rank} should not have trained the other stage"


# ------------------------------------------------------------------ bad input
def _bad_build(rank: int, world: int) -> list[str]:
    edge_index, *_ = _graph()
    messages = []
    model, _ = _models("RevGCN", layers=1)  # fewer layers than stages
    try:
        FlowPipeline().build(model, edge_index, NODES)
    except ValueError as err:
        messages.append(str(err))
    model, _ = _models("RevGCN")
    try:
        FlowPipeline().build(model, edge_index, NODES, num_microbatches=NODES + 1)
    except ValueError as err:
        messages.append(str(err))
    pipe = FlowPipeline()
    mb = pipe.build(model, edge_index, NODES)  # default M = min(16, P)
    messages.append(str(mb.num_microbatches))
    return messages


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_bad_builds_fail_on_every_rank() -> None:
    for messages in run_distributed(_bad_build, 2, timeout=50):
        # Named in the runtime's terms (its process group), not split_stages' `num_stages`.
        assert "expected a `group` of at most 1 ranks (the RevGCN has 1 layers)" in messages[0]
        assert "got 2 ranks" in messages[0] and "num_stages" not in messages[0]
        assert f"`num_microbatches` to be an integer in [1, {NODES}]" in messages[1]
        assert messages[2] == "2"


def test_bad_arguments() -> None:
    edge_index, x, y, train_mask = _graph()
    model, _ = _models("RevGCN")
    pipe = FlowPipeline()
    with pytest.raises(
        RuntimeError, match="FlowPipeline.step: call build\\(model, edge_index, num_nodes\\) first"
    ):
        pipe.step(x, y, train_mask)
    with pytest.raises(
        ValueError, match="`num_microbatches` to be an integer in \\[1, 48\\].*got 0"
    ):
        pipe.build(model, edge_index, NODES, num_microbatches=0)
    with pytest.raises(
        ValueError, match="`reorder` to be one of \\('metis', 'random', 'none'\\) but got 'rcm'"
    ):
        pipe.build(model, edge_index, NODES, reorder="rcm")
    with pytest.raises(
        ValueError,
        match="FlowPipeline: expected `num_microbatches` to be None or an integer >= 1 but got 0",
    ):
        FlowPipeline(num_microbatches=0)
    with pytest.raises(ValueError, match="FlowPipeline: expected `reorder` to be one of"):
        FlowPipeline(reorder="bfs")
    with pytest.raises(TypeError, match="`observer` to be a ComputeObserver"):
        FlowPipeline(observer=object())  # type: ignore[arg-type]
    with pytest.raises(
        RuntimeError, match="got a process `group` but torch.distributed is not initialised"
    ):
        FlowPipeline(group=object())  # type: ignore[arg-type]
    pipe.build(model, edge_index, NODES, num_microbatches=2)
    with pytest.raises(
        ValueError,
        match=r"expects `x` of shape \[num_nodes, in_channels\] = \[48, 5\].*got \(48, 4\)",
    ):
        pipe.step(x[:, :4], y, train_mask)
    with pytest.raises(ValueError, match="with the model's dtype and device"):
        pipe.step(x.float(), y, train_mask)
    with pytest.raises(ValueError, match="`y`, integer class ids of shape \\[48\\]"):
        pipe.step(x, y.double(), train_mask)
    with pytest.raises(ValueError, match="`train_mask`, a boolean tensor of shape \\[48\\]"):
        pipe.step(x, y, train_mask.long())
    with pytest.raises(ValueError, match="selects no node"):
        pipe.step(x, y, torch.zeros_like(train_mask))
    with pytest.raises(TypeError, match="FlowPipeline.build: expected `model` to be one of"):
        pipe.build(nn.Linear(3, 3), edge_index, NODES)


def test_observer_protocol_and_kinds() -> None:
    assert isinstance(Recorder(), ComputeObserver)
    assert COMPUTE_KINDS == ("forward", "backward", "loss", "first_step")
    edge_index, x, y, train_mask = _graph()
    model, _ = _models("ResGEN")
    pipe = FlowPipeline()
    pipe.build(model, edge_index, NODES, num_microbatches=2)
    once = Recorder()
    pipe.step(x, y, train_mask, observer=once)  # this call only
    assert _computes(once.events) == ["forward", "loss", "forward", "loss", "backward", "backward"]
    assert pipe.observer is None
    pipe.forward_eval(x, observer=once)
    assert _computes(once.events)[-2:] == ["forward", "forward"]


def test_parallel_context_carries_the_pipeline() -> None:
    pipe = FlowPipeline()
    assert ParallelContext(flow_pipeline=pipe).require_flow_pipeline("UniTG") is pipe
    with pytest.raises(
        RuntimeError, match="^UniTG needs flow parallelism.*strategy='flow_parallel'"
    ):
        ParallelContext().require_flow_pipeline("UniTG")
