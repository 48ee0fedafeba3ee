"""`time_source`: the LDR callbacks' epoch cost et_t measured ("wall") or counted ("steps",
"bytes"), and what a resumed schedule replays.

Hook by hook (one process): the counted sources ignore the clock and count exactly the
batches, or the bytes the exchange records between ``on_train_batch_start`` and
``on_train_batch_end``; bad values, missing byte counters and a changed source on resume
are clear errors. On 2 ranks, with ``recipes/sylvie_deterministic.yaml`` shrunk to a
300-node graph: two runs slowed down at random take identical readings and schedules with
``"steps"`` and ``"bytes"`` (and different readings with ``"wall"``, so the comparison can
fail), and a run resumed mid-schedule -- before a synchronous epoch, before an
asynchronous one (which computes with the halo rows and gradients the checkpoint
carries), and between two asynchronous ones (those rows in flight when the checkpoint was
written) -- logs the same ``bitwidth``, ``pipeline_sync`` and ``train_loss`` in every
remaining epoch as the uninterrupted run and ends with the same weights and optimiser
state; without the carried rows the first resumed asynchronous epoch differs.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import random
import re
import time
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback

from lightgraph.callbacks import AdaptiveBitWidth, ClusterSparsityTuner, PipelineAdaptor
from lightgraph.callbacks.ldr_schedule import TIME_SOURCES, LDRSchedule, exchange_stats
from lightgraph.distributed.context import ParallelContext, ParallelContextHolder
from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.loss_descent_rate import LossDescentRate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYLVIE = os.path.join(ROOT, "recipes", "sylvie.yaml")
SYLVIE_DETERMINISTIC = os.path.join(ROOT, "recipes", "sylvie_deterministic.yaml")

LOSSES = [10.0, 8.0, 7.0, 6.5, 3.0, 2.9, 2.0, 1.9]
BATCHES = [2, 1, 3, 1, 2, 4, 1, 2]  # training batches per epoch
OWNERS = (AdaptiveBitWidth, PipelineAdaptor, ClusterSparsityTuner)


# ----------------------------------------------------------------------------- hook level
class Counter(LDRSchedule[int]):
    """A minimal schedule: +1 after an epoch that asks for more precision, -1 otherwise."""

    _log_key = "counter"

    def __init__(self, time_source: Any = "wall", window: int = 1) -> None:
        super().__init__(window, 0.0, "train_loss", False, time_source=time_source)

    def _target(self, trainer: Any, pl_module: Any) -> Any:
        return pl_module.target

    def _apply(self, target: Any, setting: int) -> None:
        target.append(setting)

    def _initial(self) -> int:
        return 0

    def _next(self, setting: int, more_precision: bool | None) -> int:
        return setting if more_precision is None else setting + (1 if more_precision else -1)

    def _check_setting(self, setting: Any) -> int:
        return int(setting)

    def _log_value(self, setting: int) -> float:
        return float(setting)


class Module(ParallelContextHolder):
    """Stands in for the LightningModule: a target, and optionally an exchange's counters."""

    def __init__(self, stats: ExchangeStats | None = None) -> None:
        self.target: list[int] = []
        if stats is not None:
            self.attach_parallel_context(
                ParallelContext(halo_exchanger=SimpleNamespace(stats=stats))  # type: ignore[arg-type]
            )


def record_feed(callback: LDRSchedule) -> list[tuple[float, float, float | None]]:
    """Wraps the tracker: every ``(loss, cost, LDR)`` it is fed, in order."""
    fed: list[tuple[float, float, float | None]] = []
    update = callback.tracker.update

    def recording(loss: float, epoch_time: float) -> float | None:
        ldr = update(loss, epoch_time)
        fed.append((float(loss), float(epoch_time), ldr))
        return ldr

    callback.tracker.update = recording  # type: ignore[method-assign]
    return fed


def drive(
    callback: LDRSchedule,
    module: Module,
    seed: int,
    batch_bytes: list[list[int]] | None = None,
    losses: list[float] = LOSSES,
    batches: list[int] = BATCHES,
) -> list[tuple[float, float, float | None]]:
    """Runs the hooks in Lightning's order on a clock that jumps at random.

    Each batch spends a random time inside its window and outside it; the exchange (when
    the module has one) records ``batch_bytes[epoch][batch]`` training bytes inside the
    window, and training and validation bytes outside it that no source may count.
    Returns what the tracker was fed; the last epoch's loss is consumed at the end.
    """
    rng = random.Random(seed)
    now = [0.0]
    callback._clock = lambda: now[0]
    stats = exchange_stats(module)
    trainer = SimpleNamespace(
        current_epoch=0,
        callback_metrics={},
        strategy=SimpleNamespace(broadcast=lambda obj, src=0: obj),
    )
    fed = record_feed(callback)
    callback.setup(trainer, module, "fit")  # type: ignore[arg-type]
    callback.on_train_start(trainer, module)  # type: ignore[arg-type]
    for epoch, (loss, count) in enumerate(zip(losses, batches, strict=True)):
        trainer.current_epoch = epoch
        callback.on_train_epoch_start(trainer, module)  # type: ignore[arg-type]
        if stats is not None:
            stats.reset()  # what NodeClassifier.on_train_epoch_start does
        for b in range(count):
            now[0] += rng.uniform(0.0, 5.0)
            if stats is not None:
                stats.record("train", "layer0", "forward", 1000)  # outside the window
            callback.on_train_batch_start(trainer, module, None, b)  # type: ignore[arg-type]
            now[0] += rng.uniform(0.1, 2.0)
            if stats is not None and batch_bytes is not None and batch_bytes[epoch][b]:
                sent = batch_bytes[epoch][b]
                stats.record("train", "layer0", "forward", sent // 2)
                stats.record("train", "layer0", "backward", sent - sent // 2 - 4, kind="data")
                stats.record("train", "layer0", "backward", 4, kind="params")
            callback.on_train_batch_end(trainer, module, None, None, b)  # type: ignore[arg-type]
        if stats is not None:
            stats.record("val", "layer0", "forward", 777)  # evaluation: not training
        now[0] += rng.uniform(0.0, 5.0)
        trainer.callback_metrics = {"train_loss": loss}
        callback.on_train_epoch_end(trainer, module)  # type: ignore[arg-type]
    trainer.current_epoch = len(losses)
    callback.on_train_epoch_start(trainer, module)  # type: ignore[arg-type]
    return fed


def reference_settings(costs: list[float], window: int = 1) -> list[int]:
    """The Counter's settings for epochs 0..len(LOSSES) from the tracker fed (L_t, cost_t)."""
    tracker = LossDescentRate(smoothing=0.0, window=window)
    settings = [0]
    for loss, cost in zip(LOSSES, costs, strict=True):
        tracker.update(loss, cost)
        more = tracker.more_precision()
        settings.append(settings[-1] if more is None else settings[-1] + (1 if more else -1))
    return settings


def test_steps_count_the_training_batches_whatever_the_clock() -> None:
    runs = []
    for seed in (0, 1):
        callback = Counter("steps")
        fed = drive(callback, Module(), seed)
        runs.append((fed, callback.history))
    fed, history = runs[0]
    assert [(loss, cost) for loss, cost, _ in fed] == [
        (loss, float(n)) for loss, n in zip(LOSSES, BATCHES, strict=True)
    ]
    assert [setting for _, setting in history] == reference_settings([float(n) for n in BATCHES])
    assert runs[1] == runs[0]  # another clock: the same readings and decisions
    # The control: the wall time of the same hooks is what the clock said, run by run.
    walls = [[cost for _, cost, _ in drive(Counter("wall"), Module(), seed)] for seed in (0, 1)]
    assert walls[0] != walls[1] and walls[0] != [float(n) for n in BATCHES]


def test_bytes_count_what_the_exchange_sent_inside_the_training_batches() -> None:
    rng = random.Random(7)
    batch_bytes = [[rng.randrange(100, 10_000) for _ in range(n)] for n in BATCHES]
    runs = []
    for seed in (0, 1):
        callback = Counter("bytes")
        fed = drive(callback, Module(ExchangeStats()), seed, batch_bytes)
        runs.append((fed, callback.history))
    fed, history = runs[0]
    costs = [float(sum(sent)) for sent in batch_bytes]
    # payload and side information of both directions, inside the windows only
    assert [(loss, cost) for loss, cost, _ in fed] == list(zip(LOSSES, costs, strict=True))
    assert [setting for _, setting in history] == reference_settings(costs)
    assert reference_settings(costs) != reference_settings([float(n) for n in BATCHES])
    assert runs[1] == runs[0]


def test_the_sequence_parallel_counters_are_read_too() -> None:
    from lightgraph.distributed import SequenceParallel

    sp = SequenceParallel()
    module = Module()
    module.attach_parallel_context(ParallelContext(sequence_parallel=sp))
    assert exchange_stats(module) is sp.stats
    assert exchange_stats(Module()) is None
    assert exchange_stats(SimpleNamespace()) is None


def test_bytes_without_byte_counters_is_a_clear_error() -> None:
    trainer = SimpleNamespace(strategy=SimpleNamespace(), world_size=2)
    with pytest.raises(RuntimeError, match=r"Counter: time_source='bytes' reads the byte counters"):
        Counter("bytes").setup(trainer, Module(), "fit")  # type: ignore[arg-type]
    Counter("bytes").setup(trainer, Module(), "validate")  # type: ignore[arg-type]
    Counter("steps").setup(trainer, Module(), "fit")  # type: ignore[arg-type]
    one = SimpleNamespace(strategy=SimpleNamespace(), world_size=1)
    with pytest.raises(RuntimeError, match="a single process sends none; use time_source='steps'"):
        Counter("bytes").setup(one, Module(ExchangeStats()), "fit")  # type: ignore[arg-type]


def test_an_epoch_that_sent_no_bytes_is_a_clear_error() -> None:
    silent = [[0] * n for n in BATCHES]
    with pytest.raises(
        RuntimeError,
        match=r"Counter: training epoch 0 cost 0 bytes sent by rank 0's exchange "
        r"\(time_source='bytes'\)",
    ):
        drive(Counter("bytes"), Module(ExchangeStats()), 0, silent)


@pytest.mark.parametrize("owner", OWNERS, ids=lambda o: o.__name__)
@pytest.mark.parametrize("bad", ["Wall", "seconds", None, 1, True])
def test_a_bad_time_source_is_a_clear_error(owner, bad) -> None:
    expected = (
        f"{owner.__name__}: expected `time_source` to be one of ('wall', 'steps', 'bytes') "
        f"but got {bad!r}."
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        owner(time_source=bad)


@pytest.mark.parametrize("owner", OWNERS, ids=lambda o: o.__name__)
def test_the_callbacks_take_every_time_source(owner) -> None:
    assert owner().time_source == "wall"
    for source in TIME_SOURCES:
        callback = owner(time_source=source)
        assert callback.time_source == source
        assert callback.state_dict()["time_source"] == source


def test_resuming_with_another_time_source_is_an_error() -> None:
    callback = Counter("steps")
    drive(callback, Module(), 0)
    state = json.loads(json.dumps(callback.state_dict()))
    same = Counter("steps")
    same.load_state_dict(state)
    assert same.state_dict() == callback.state_dict()
    with pytest.raises(
        ValueError,
        match=r"Counter: the state was saved with time_source='steps' but this callback has "
        r"time_source='wall'; .* per batch, new ones would be per second",
    ):
        Counter("wall").load_state_dict(state)
    # A state saved before the option existed is a wall-clock one.
    del state["time_source"]
    Counter("wall").load_state_dict(state)
    with pytest.raises(ValueError, match="saved with time_source='wall'"):
        Counter("bytes").load_state_dict(state)


def test_the_deterministic_recipe_is_sylvie_with_a_counted_cost() -> None:
    with open(SYLVIE) as f:
        sylvie = yaml.safe_load(f)
    with open(SYLVIE_DETERMINISTIC) as f:
        deterministic = yaml.safe_load(f)
    ldr = [
        c
        for c in deterministic["trainer"]["callbacks"]
        if c["class_path"].rsplit(".", 1)[-1] in ("AdaptiveBitWidth", "PipelineAdaptor")
    ]
    assert len(ldr) == 2
    for callback in ldr:
        assert callback["init_args"].pop("time_source") == "bytes"
    assert deterministic["trainer"]["logger"]["init_args"].pop("name") == "sylvie_deterministic"
    sylvie["trainer"]["logger"]["init_args"].pop("name")
    assert deterministic == sylvie  # nothing else differs


# ----------------------------------------------------------------------------- 2 ranks
NUM_NODES = 300


class SlowDown(Callback):
    """Sleeps a random time inside every training batch's timed window (after the LDR
    callbacks' ``on_train_batch_start``), differently on every rank and run."""

    def __init__(self, seed: int, most: float = 0.03) -> None:
        self.seed, self.most = seed, most

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.rng = random.Random(1000 * self.seed + trainer.global_rank)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        time.sleep(self.rng.uniform(0.0, self.most))


class Record(Callback):
    """Per rank: what every LDR callback's tracker was fed, its history and final state."""

    def __init__(self, out_dir: str, watched: list[LDRSchedule]) -> None:
        self.out_dir, self.watched = out_dir, watched

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.fed = {type(cb).__name__: record_feed(cb) for cb in self.watched}

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        record = {
            "fed": self.fed,
            "history": {type(cb).__name__: cb.history for cb in self.watched},
            "tracker": {type(cb).__name__: cb.tracker.state_dict() for cb in self.watched},
        }
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(record, f)
        weights = {
            "state_dict": pl_module.state_dict(),
            "optimizer": trainer.optimizers[0].state_dict(),
        }
        torch.save(weights, os.path.join(self.out_dir, f"rank{trainer.global_rank}.pt"))


def sylvie_config(
    tmp_path: Any,
    name: str,
    epochs: int,
    time_source: str | None = None,
    checkpoints: str | None = None,
) -> str:
    """recipes/sylvie_deterministic.yaml on 2 forked ranks, a 300-node graph, ``epochs``."""
    with open(SYLVIE_DETERMINISTIC) as f:
        config = yaml.safe_load(f)
    trainer = config["trainer"]
    trainer["devices"] = 2
    trainer["strategy"]["init_args"]["start_method"] = "fork"
    trainer["max_epochs"] = epochs
    trainer["default_root_dir"] = str(tmp_path / name)
    trainer["logger"]["init_args"]["save_dir"] = str(tmp_path / name / "logs")
    callbacks = trainer["callbacks"]
    for callback in callbacks:
        if time_source is not None and "time_source" in callback.get("init_args", {}):
            callback["init_args"]["time_source"] = time_source
    if checkpoints is None:
        trainer["enable_checkpointing"] = False
    else:
        callbacks.append(
            {
                "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {
                    "dirpath": checkpoints,
                    "filename": "{epoch}",
                    "every_n_epochs": 1,
                    "save_top_k": -1,
                    "save_on_train_epoch_end": True,
                },
            }
        )
    config["data"]["init_args"]["dataset"]["init_args"]["num_nodes"] = NUM_NODES
    config["data"]["init_args"]["cache_dir"] = str(tmp_path / "cache")
    path = tmp_path / f"{name}.yaml"
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return str(path)


def fit(
    config: str, tmp_path: Any, name: str, slow_seed: int | None = None, ckpt_path: Any = None
) -> dict[str, Any]:
    """Builds the run as the CLI would and fits it through the Trainer API.

    Returns every rank's :class:`Record` and final weights and optimiser state, the
    schedule rank 0 logged per epoch (``(epoch, bitwidth, pipeline_sync)`` from the CSV
    logger), the training losses and the callbacks' sources.
    """
    from lightgraph.cli import build_cli

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = build_cli(["--config", config], run=False)
        ldr = [cb for cb in cli.trainer.callbacks if isinstance(cb, LDRSchedule)]
        out_dir = tmp_path / f"{name}_out"
        out_dir.mkdir()
        extra: list[Callback] = [Record(str(out_dir), ldr)]
        if slow_seed is not None:
            extra.append(SlowDown(slow_seed))
        cli.trainer.callbacks.extend(extra)  # after the LDR callbacks: inside their windows
        cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=ckpt_path)
    ranks, weights = [], []
    for rank in range(2):
        with open(out_dir / f"rank{rank}.json") as f:
            ranks.append(json.load(f))
        weights.append(torch.load(out_dir / f"rank{rank}.pt", weights_only=True))
    [metrics] = glob.glob(str(tmp_path / name / "logs" / "**" / "metrics.csv"), recursive=True)
    with open(metrics) as f:
        rows = [row for row in csv.DictReader(f) if row.get("bitwidth")]
    logged = [(int(r["epoch"]), float(r["bitwidth"]), float(r["pipeline_sync"])) for r in rows]
    losses = {int(r["epoch"]): float(r["train_loss"]) for r in rows if r.get("train_loss")}
    return {
        "ranks": ranks,
        "weights": weights,
        "logged": logged,
        "losses": losses,
        "sources": {type(cb).__name__: cb.time_source for cb in ldr},
    }


def changes(logged: list[tuple[int, float, float]]) -> list[int]:
    """The epochs whose width or mode differs from the previous epoch's."""
    return [logged[i][0] for i in range(1, len(logged)) if logged[i][1:] != logged[i - 1][1:]]


EPOCHS_A = 30  # the recipe's window 5, smoothing 0.9: first changes near epoch 17


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize("time_source", ["steps", "bytes", "wall"])
def test_counted_costs_replay_despite_random_slowdowns(tmp_path, time_source: str) -> None:
    runs = [
        fit(
            sylvie_config(tmp_path, f"run{seed}", EPOCHS_A, time_source=time_source),
            tmp_path,
            f"run{seed}",
            slow_seed=seed,
        )
        for seed in (1, 2)
    ]
    for run in runs:
        assert set(run["sources"].values()) == {time_source}
        assert run["ranks"][0] == run["ranks"][1]  # every rank fed and decided alike
    fed = [run["ranks"][0]["fed"] for run in runs]
    costs = [{name: [cost for _, cost, _ in f] for name, f in run_fed.items()} for run_fed in fed]
    if time_source == "wall":
        # The control: measured times differ from run to run, and so do the readings.
        assert costs[0] != costs[1]
        readings = [[ldr for _, _, ldr in f["AdaptiveBitWidth"]] for f in fed]
        assert readings[0] != readings[1]
        return
    assert fed[0] == fed[1]  # the same (loss, cost, LDR) in every epoch
    assert runs[0]["ranks"][0]["history"] == runs[1]["ranks"][0]["history"]
    assert runs[0]["logged"] == runs[1]["logged"]
    assert changes(runs[0]["logged"]), "no change of width or mode: nothing was replayed"
    bits = costs[0]["AdaptiveBitWidth"]
    assert len(bits) == EPOCHS_A - 1  # every epoch's cost but the last's is consumed
    if time_source == "steps":
        assert set(bits) == {1.0}  # one full-graph batch per epoch
    else:
        assert all(cost > 0 and cost == int(cost) for cost in bits)
        # the cost follows the width: an epoch at 8 bits sends more than one at 1 bit
        width = {epoch: b for epoch, b, _ in runs[0]["logged"]}
        by_width = {width[t]: bits[t] for t in range(len(bits))}
        assert len(by_width) > 1
        assert by_width[max(by_width)] > by_width[min(by_width)]


EPOCHS_B = 40  # changes of width and mode from epoch 17 on, through epoch 36


EXCHANGER = "parallel_context.halo_exchanger"


def _without_carried_rows(path: Any, out: Any) -> Any:
    """The checkpoint at ``path`` with the exchangers' carried rows removed (as saved before
    lightgraph kept them): the resumed run's first asynchronous epoch exchanges fresh rows."""
    checkpoint = torch.load(path, weights_only=True)
    for state in checkpoint["callbacks"]["RandomStateCheckpoint"]["ranks"]:
        assert state["owned"][EXCHANGER]["buffers"], "nothing carried: nothing to drop"
        del state["owned"][EXCHANGER]["buffers"]
    torch.save(checkpoint, out)
    return out


def _assert_same_tensors(a: Any, b: Any, path: str) -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert set(a) == set(b), path
        for key in a:
            _assert_same_tensors(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_tensors(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize("resume_at", ["before_sync", "before_async", "between_async"])
def test_deterministic_sylvie_resumed_mid_schedule_takes_the_same_trajectory(
    tmp_path, resume_at: str
) -> None:
    ckpt_dir = tmp_path / "ckpt"
    straight = fit(
        sylvie_config(tmp_path, "straight", EPOCHS_B, checkpoints=str(ckpt_dir)),
        tmp_path,
        "straight",
    )
    assert straight["sources"] == {"AdaptiveBitWidth": "bytes", "PipelineAdaptor": "bytes"}
    logged = straight["logged"]
    assert [epoch for epoch, _, _ in logged] == list(range(EPOCHS_B))
    changed = changes(logged)
    assert changed, "no change of width or mode: the test would resume nothing"

    def asynchronous(epoch: int) -> bool:
        return logged[epoch][2] == 0.0

    # Resume mid-schedule: at the first epoch boundary after a change of width or mode
    # that is followed by a synchronous epoch, by an asynchronous one, or by an
    # asynchronous one after an asynchronous one. An asynchronous epoch computes with the
    # halo rows and gradients of the checkpointed epoch -- received in it (after a
    # synchronous epoch) or still in flight when the checkpoint was written (after an
    # asynchronous one) -- and the checkpoint carries them.
    accept = {
        "before_sync": lambda e: not asynchronous(e + 1),
        "before_async": lambda e: asynchronous(e + 1),
        "between_async": lambda e: asynchronous(e) and asynchronous(e + 1),
    }[resume_at]
    boundary = next(e for e in range(changed[0], EPOCHS_B - 1) if accept(e))
    later = [e for e in changed if e > boundary + 1]
    assert later, "no change after the resumed epoch: nothing left to replay"
    resumed = fit(
        sylvie_config(tmp_path, "resumed", EPOCHS_B),
        tmp_path,
        "resumed",
        ckpt_path=ckpt_dir / f"epoch={boundary}.ckpt",
    )
    # The per-epoch logged width and mode of every remaining epoch ...
    assert resumed["logged"] == logged[boundary + 1 :]
    for rank in range(2):
        straight_rank, resumed_rank = straight["ranks"][rank], resumed["ranks"][rank]
        # ... the schedules, restored and continued, on both ranks ...
        assert resumed_rank["history"] == straight_rank["history"]
        # ... and, bit for bit, every (loss, bytes, LDR) fed after the resume (the loss
        # of the checkpointed epoch first) and the trackers' final state.
        for name, fed in resumed_rank["fed"].items():
            assert fed == straight_rank["fed"][name][boundary:]
        assert resumed_rank["tracker"] == straight_rank["tracker"]
    assert {e: resumed["losses"][e] for e in resumed["losses"]} == {
        e: straight["losses"][e] for e in range(boundary + 1, EPOCHS_B)
    }
    # ... and the final weights and optimiser state, on both ranks.
    for rank in range(2):
        _assert_same_tensors(straight["weights"][rank], resumed["weights"][rank], f"rank {rank}")
    if resume_at != "before_sync":
        # The control: without the carried rows the first resumed epoch exchanges fresh
        # ones, and its loss differs.
        stripped = _without_carried_rows(
            ckpt_dir / f"epoch={boundary}.ckpt", tmp_path / "stripped.ckpt"
        )
        dropped = fit(
            sylvie_config(tmp_path, "dropped", boundary + 2),
            tmp_path,
            "dropped",
            ckpt_path=stripped,
        )
        assert dropped["losses"][boundary + 1] != straight["losses"][boundary + 1]
