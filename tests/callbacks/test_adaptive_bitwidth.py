"""AdaptiveBitWidth: Sylvie's Eq. 5 trajectory, by hand, through a Trainer, on 2 ranks, resumed.

The module-level helpers (scripted losses and times, fake exchange strategies, the tiny
module) are shared with ``test_pipeline_adaptor.py``.
"""

from __future__ import annotations

import json
import os
import warnings
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from torch.utils.data import DataLoader, TensorDataset

from lightgraph.callbacks.adaptive_bitwidth import AdaptiveBitWidth
from lightgraph.distributed.context import ParallelContext, ParallelContextHolder
from lightgraph.functional.loss_descent_rate import LossDescentRate

# ----------------------------------------------------------------------------- script
# Scripted run with smoothing lambda = 0.5 and window delta = 2. The running average F_t is
# chosen (dyadic numbers: exact in float32 and float64) and the losses are derived from it:
# F_t = 0.5 F_{t-1} + 0.5 L_t  <=>  L_t = 2 F_t - F_{t-1}  (F_0 = L_0).
SMOOTHING = 0.5
WINDOW = 2
F = [96, 80, 64, 48, 44, 40, 24, 20, 18, 14, 13, 12.5, 12, 11.75, 11.5, 11.25, 11]
LOSSES = [float(F[0])] + [2.0 * F[t] - F[t - 1] for t in range(1, len(F))]
TIMES = [1.0] * 6 + [2.0] + [1.0] * 10  # et_t; epoch 6 takes twice as long
EPOCHS = len(LOSSES)  # 17
# descent_rate_t = (F_{t-1} - F_t) / et_t for t = 1..16:
#   16, 16, 16, 4, 4, 8 (=16/2), 4, 2, 4, 1, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25
# degraded(t) = rate_t < rate_{t-2}, defined for t > 2:
#   t=3: 16 < 16 F | t=4: 4 < 16 T | t=5: 4 < 16 T | t=6: 8 < 4 F | t=7: 4 < 4 F
#   t=8: 2 < 8 T | t=9: 4 < 4 F | t=10: 1 < 2 T | t=11: 0.5 < 4 T | t=12: 0.5 < 1 T
#   t=13: 0.25 < 0.5 T | t=14: 0.25 < 0.5 T | t=15: 0.25 < 0.25 F
DEGRADED = [None, None, None, False, True, True, False, False, True, False, True, True, True]
DEGRADED += [True, True, False, False]

# Eq. 5 with b_min = 1, b_max = 8; the width of epoch t+1 follows degraded(t):
#   epoch 0: b_0 = b_min = 1; epochs 1-3: t <= delta, unchanged (1)
#   epoch 4: degraded(3) False -> max(1 / 2, 1) = 1 (clamped at b_min)
#   epoch 5: degraded(4) True -> 2; epoch 6: True -> 4; epoch 7: degraded(6) False -> 2
#   epoch 8: False -> 1; epoch 9: degraded(8) True -> 2; epoch 10: False -> 1
#   epochs 11-13: True -> 2, 4, 8; epochs 14, 15: True -> min(16, 8) = 8 (clamped at b_max)
#   epoch 16: degraded(15) False -> 4
EXPECTED_BITS = [1, 1, 1, 1, 1, 2, 4, 2, 1, 2, 1, 2, 4, 8, 8, 8, 4]
# The same with b_min = 2, b_max = 4.
EXPECTED_BITS_2_4 = [2, 2, 2, 2, 2, 4, 4, 2, 2, 4, 2, 4, 4, 4, 4, 4, 2]
# Rank 1 of the two-rank test sees other losses and times (its own would give another
# schedule: epoch 4 at 0.25 s makes its descent rate 16, so degraded(4) is False).
RANK1_LOSS_OFFSET = 0.375
RANK1_TIMES = TIMES[:4] + [0.25] + TIMES[5:]


class Clock:
    """A fake wall clock the tiny module advances by each epoch's scripted time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeExchanger:
    """The part of ``HaloExchanger`` the callbacks drive: ``mode``, ``policy``, ``set_policy``."""

    def __init__(self, policy: Any = None) -> None:
        self.mode = "sync"
        self._policy = policy

    @property
    def policy(self) -> Any:
        return self._policy

    def set_policy(self, policy: Any) -> None:
        self._policy = policy


def fake_exchanger() -> FakeExchanger:
    return FakeExchanger(policy=SimpleNamespace(base_bits=8))


def fake_context(exchanger: Any) -> ParallelContext:
    return ParallelContext(halo_exchanger=exchanger)


class _AttachFake:
    """Hands ``self.fake`` to the module the way ``ExchangeGroupStrategy`` hands its context."""

    fake: FakeExchanger

    def setup_environment(self) -> None:
        super().setup_environment()  # type: ignore[misc]
        module = self.lightning_module  # type: ignore[attr-defined]
        if isinstance(module, ParallelContextHolder):
            module.attach_parallel_context(fake_context(self.fake))

    def teardown(self) -> None:
        module = self.lightning_module  # type: ignore[attr-defined]
        if isinstance(module, ParallelContextHolder):
            module.attach_parallel_context(None)
        super().teardown()  # type: ignore[misc]


class FakeExchangeSingle(_AttachFake, SingleDeviceStrategy):
    """One process; the module's context holds a fake exchanger the callbacks drive."""

    def __init__(self) -> None:
        super().__init__(device=torch.device("cpu"))
        self.fake = fake_exchanger()


class FakeExchangeDDP(_AttachFake, DDPStrategy):
    """``ddp_fork``; every rank's module context holds a fake exchanger the callbacks drive."""

    def __init__(self) -> None:
        super().__init__(start_method="fork")
        self.fake = fake_exchanger()


class DriverModule(ParallelContextHolder):
    """Stands in for the LightningModule in :func:`drive`: a context and ``log``."""

    def __init__(self, exchanger: Any, logged: list[tuple[str, float]]) -> None:
        self.attach_parallel_context(fake_context(exchanger))
        self.logged = logged

    def log(self, name: str, value: float, **kwargs: Any) -> None:
        self.logged.append((name, value))


class ScriptedModule(ParallelContextHolder, pl.LightningModule):
    """Logs the scripted epoch loss as ``train_loss`` and spends the scripted time."""

    def __init__(
        self,
        clock: Clock,
        losses: list[float] = LOSSES,
        times: list[float] = TIMES,
        rank1_losses: list[float] | None = None,
        rank1_times: list[float] | None = None,
    ) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.clock = clock
        self.losses, self.times = losses, times
        self.rank1_losses, self.rank1_times = rank1_losses, rank1_times
        self.seen: list[tuple[int, int, str]] = []  # (epoch, base_bits, mode) during training

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        epoch, rank = self.current_epoch, self.global_rank
        losses = self.rank1_losses if rank == 1 and self.rank1_losses else self.losses
        times = self.rank1_times if rank == 1 and self.rank1_times else self.times
        self.clock.now += times[epoch]
        exchanger = self.parallel_context.halo_exchanger
        self.seen.append((epoch, exchanger.policy.base_bits, exchanger.mode))
        self.log("train_loss", losses[epoch], on_step=False, on_epoch=True, batch_size=1)
        return self.layer(batch[0]).sum() * 0.0

    def train_dataloader(self) -> DataLoader:
        # One batch per rank and epoch.
        return DataLoader(TensorDataset(torch.ones(self.trainer.world_size, 1)), batch_size=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


class DumpHistories(Callback):
    """Writes every rank's callback histories and observed settings to ``out_dir``."""

    def __init__(self, out_dir: str, watched: list[Callback]) -> None:
        self.out_dir, self.watched = out_dir, watched

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        record = {
            "histories": [[list(item) for item in cb.history] for cb in self.watched],
            "seen": [list(item) for item in pl_module.seen],
        }
        path = os.path.join(self.out_dir, f"rank{trainer.global_rank}.json")
        with open(path, "w") as f:
            json.dump(record, f)


def make_trainer(
    tmp_path: Any, max_epochs: int, callbacks: list[Callback], strategy: Any = None, **kwargs: Any
) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=2 if isinstance(strategy, DDPStrategy) else 1,
        strategy=strategy if strategy is not None else FakeExchangeSingle(),
        max_epochs=max_epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        callbacks=callbacks,
        **kwargs,
    )


def attach_clock(callbacks: list[Any], clock: Clock) -> None:
    for cb in callbacks:
        cb._clock = clock


def drive(
    callback: Any, losses: list[float] = LOSSES, times: list[float] = TIMES
) -> tuple[list[Any], FakeExchanger]:
    """Call the hooks in Lightning's order with a ``SimpleNamespace`` trainer.

    Returns the setting the exchanger held during every epoch, and the exchanger.
    """
    clock = Clock()
    callback._clock = clock
    exchanger = fake_exchanger()
    strategy = SimpleNamespace(broadcast=lambda obj, src=0: obj)
    trainer = SimpleNamespace(strategy=strategy, callback_metrics={}, current_epoch=0)
    logged: list[tuple[str, float]] = []
    module = DriverModule(exchanger, logged)
    callback.setup(trainer, module, "fit")
    callback.on_train_start(trainer, module)
    during = []
    for epoch, (loss, seconds) in enumerate(zip(losses, times, strict=True)):
        trainer.current_epoch = epoch
        callback.on_train_epoch_start(trainer, module)
        callback.on_train_batch_start(trainer, module, None, 0)
        clock.now += seconds
        during.append((exchanger.policy.base_bits, exchanger.mode))
        callback.on_train_batch_end(trainer, module, None, None, 0)
        callback.on_train_epoch_end(trainer, module)
        # Lightning publishes the epoch-level metrics after every epoch-end hook.
        trainer.callback_metrics = {"train_loss": torch.tensor(loss)}
    callback.on_train_end(trainer, module)
    if callback.log_metrics:
        assert [name for name, _ in logged] == [callback._log_key] * len(losses)
    return during, exchanger


# ----------------------------------------------------------------------------- tests
def test_script_matches_the_tracker() -> None:
    """The hand-derived degraded() table above is what LossDescentRate computes."""
    tracker = LossDescentRate(smoothing=SMOOTHING, window=WINDOW)
    got = []
    for loss, seconds in zip(LOSSES, TIMES, strict=True):
        tracker.update(loss, seconds)
        got.append(tracker.degraded())
    assert got == DEGRADED


@pytest.mark.parametrize("b_min,b_max,expected", [(1, 8, EXPECTED_BITS), (2, 4, EXPECTED_BITS_2_4)])
def test_trajectory_follows_eq5(b_min: int, b_max: int, expected: list[int]) -> None:
    cb = AdaptiveBitWidth(b_min=b_min, b_max=b_max, window=WINDOW, smoothing=SMOOTHING)
    during, exchanger = drive(cb)
    assert cb.history == list(enumerate(expected))
    assert [bits for bits, _ in during] == expected  # applied to the policy
    assert all(b_min <= bits <= b_max for _, bits in cb.history)
    assert exchanger.mode == "sync"  # untouched
    assert cb.tracker.t == EPOCHS - 2  # the last epoch's loss is consumed at the next start


def test_defaults_wait_for_more_than_five_epochs() -> None:
    cb = AdaptiveBitWidth()  # b_min=1, b_max=8, delta=5, lambda=0.9
    losses = [1.0] + [0.5] * 7
    drive(cb, losses, [1.0] * 8)
    # F_t = 0.5 + 0.5 * 0.9^t, so descent_rate_t = 0.05 * 0.9^(t-1) shrinks every epoch.
    # Epochs 0..6 use b_min; degraded(6) (the first t > 5) decides epoch 7: -> 2.
    assert [bits for _, bits in cb.history] == [1] * 7 + [2]


def test_real_trainer_gives_the_same_trajectory(tmp_path) -> None:
    clock = Clock()
    cb = AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING)
    attach_clock([cb], clock)
    module = ScriptedModule(clock)
    trainer = make_trainer(tmp_path, EPOCHS, [cb], enable_checkpointing=False)
    trainer.fit(module)
    assert cb.history == list(enumerate(EXPECTED_BITS))
    assert [(epoch, bits) for epoch, bits, _ in module.seen] == list(enumerate(EXPECTED_BITS))
    assert float(trainer.callback_metrics["bitwidth"]) == EXPECTED_BITS[-1]


def _resume_run(tmp_path, make_callbacks, n: int) -> tuple[list[list], list[list], list[list]]:
    """Histories of: 2n straight epochs; n epochs; n more resumed from the first's last.ckpt."""
    clock = Clock()
    straight = make_callbacks()
    attach_clock(straight, clock)
    make_trainer(tmp_path / "straight", 2 * n, straight, enable_checkpointing=False).fit(
        ScriptedModule(clock)
    )

    clock = Clock()
    first = make_callbacks()
    attach_clock(first, clock)
    ckpt_dir = tmp_path / "ckpt"
    make_trainer(
        tmp_path / "first", n, [*first, ModelCheckpoint(dirpath=ckpt_dir, save_last=True)]
    ).fit(ScriptedModule(clock))
    last = os.path.join(ckpt_dir, "last.ckpt")
    assert torch.load(last, weights_only=False)["epoch"] == n - 1

    clock = Clock()
    resumed = make_callbacks()
    attach_clock(resumed, clock)
    checkpoint = ModelCheckpoint(dirpath=ckpt_dir, save_last=True)
    make_trainer(tmp_path / "resumed", 2 * n, [*resumed, checkpoint]).fit(
        ScriptedModule(clock), ckpt_path=last
    )
    return (
        [cb.history for cb in straight],
        [cb.history for cb in first],
        [cb.history for cb in resumed],
    )


def test_checkpoint_resume_continues_the_schedule(tmp_path) -> None:
    def make() -> list[Callback]:
        return [AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING)]

    n = 8
    [straight], [first], [resumed] = _resume_run(tmp_path, make, n)
    assert straight == list(enumerate(EXPECTED_BITS[: 2 * n]))
    assert first == straight[:n]
    # The resumed callback restored the first n entries and appended the next n.
    assert resumed[:n] == first
    assert first + resumed[n:] == straight


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_ranks_take_identical_decisions(tmp_path) -> None:
    # Sanity check of the test itself: rank 1's own inputs give another schedule.
    alone = AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING)
    drive(alone, [loss + RANK1_LOSS_OFFSET for loss in LOSSES], RANK1_TIMES)
    assert [bits for _, bits in alone.history] != EXPECTED_BITS

    records = run_two_ranks(
        tmp_path, lambda: [AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING)]
    )
    for record in records:
        assert record["histories"][0] == [list(item) for item in enumerate(EXPECTED_BITS)]
        assert [[epoch, bits] for epoch, bits, _ in record["seen"]] == [
            list(item) for item in enumerate(EXPECTED_BITS)
        ]


def run_two_ranks(tmp_path, make_callbacks) -> list[dict]:
    """Fit the scripted module on two forked ranks; returns every rank's record."""
    clock = Clock()
    callbacks = make_callbacks()
    attach_clock(callbacks, clock)
    module = ScriptedModule(
        clock,
        rank1_losses=[loss + RANK1_LOSS_OFFSET for loss in LOSSES],
        rank1_times=RANK1_TIMES,
    )
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    trainer = make_trainer(
        tmp_path,
        EPOCHS,
        [*callbacks, DumpHistories(str(out_dir), callbacks)],
        strategy=FakeExchangeDDP(),
        enable_checkpointing=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)
    records = []
    for rank in range(2):
        with open(out_dir / f"rank{rank}.json") as f:
            records.append(json.load(f))
    return records


def test_needs_an_exchanger(tmp_path) -> None:
    cb = AdaptiveBitWidth()
    trainer = SimpleNamespace(strategy=SimpleNamespace())
    # A module that takes no context, one without a context, one with an empty context.
    empty = DriverModule(None, [])
    for module in (None, ScriptedModule(Clock()), empty):
        with pytest.raises(
            RuntimeError,
            match=r"AdaptiveBitWidth needs the halo exchanger of a boundary-exchange strategy",
        ):
            cb.setup(trainer, module, "fit")
    cb.setup(trainer, None, "validate")  # only training is driven
    with pytest.raises(RuntimeError, match=r"e.g. BoundaryExchangeStrategy\(quantization=...\)"):
        pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=1,
            logger=False,
            enable_progress_bar=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            default_root_dir=str(tmp_path),
            callbacks=[cb],
        ).fit(ScriptedModule(Clock()))


def test_missing_monitor_is_a_clear_error() -> None:
    cb = AdaptiveBitWidth(monitor="loss")
    with pytest.raises(RuntimeError, match="did not log `loss` in training epoch 0"):
        drive(cb)


def test_state_dict_round_trip() -> None:
    cb = AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING)
    drive(cb)
    state = json.loads(json.dumps(cb.state_dict()))  # plain Python types
    other = AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING)
    other.load_state_dict(state)
    assert other.setting == cb.setting and other.history == cb.history
    assert other.state_dict() == cb.state_dict()
    narrower = AdaptiveBitWidth(b_max=2, window=WINDOW, smoothing=SMOOTHING)
    narrower.load_state_dict(state)
    assert narrower.setting == 2  # a restored 4 is clamped into the new range


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"b_min": 3}, r"AdaptiveBitWidth: expected `b_min` to be one of \(1, 2, 4, 8\) but got 3"),
        (
            {"b_max": 16},
            r"AdaptiveBitWidth: expected `b_max` to be one of \(1, 2, 4, 8\) but got 16",
        ),
        (
            {"b_min": 8, "b_max": 4},
            "AdaptiveBitWidth: expected `b_min` <= `b_max` but got b_min=8, b_max=4",
        ),
        ({"window": 0}, "AdaptiveBitWidth: expected `window` to be an integer >= 1 but got 0"),
        ({"smoothing": 1.5}, r"AdaptiveBitWidth: expected `smoothing` in \[0, 1\) but got 1.5"),
        ({"monitor": ""}, "AdaptiveBitWidth: expected `monitor` to be a non-empty metric name"),
        (
            {"log": "yes"},
            r"AdaptiveBitWidth: expected `log` to be one of \(True, False\) but got 'yes'",
        ),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        AdaptiveBitWidth(**kwargs)


def test_fp32_exchange_gets_the_purely_time_adaptive_policy() -> None:
    from types import SimpleNamespace

    from lightgraph.quant import FixedBits

    exchanger = FakeExchanger(policy=None)
    trainer = SimpleNamespace(strategy=SimpleNamespace())
    callback = AdaptiveBitWidth(b_min=2)
    policy = callback._target(trainer, DriverModule(exchanger, []))
    assert isinstance(policy, FixedBits) and exchanger.policy is policy and policy.base_bits == 2


# ------------------------------------------------- graph parallelism (sequence all-to-alls)
def test_sequence_parallel_exchange_is_driven_too() -> None:
    from lightgraph.distributed import SequenceParallel
    from lightgraph.quant import FixedBits, RandomBits

    trainer = SimpleNamespace(strategy=SimpleNamespace())
    callback = AdaptiveBitWidth(b_min=2)
    module = DriverModule(None, [])
    sp = SequenceParallel()  # an FP32 exchange gets the purely time-adaptive FixedBits(b_min)
    module.attach_parallel_context(ParallelContext(sequence_parallel=sp))
    policy = callback._target(trainer, module)
    assert isinstance(policy, FixedBits) and sp.policy is policy and policy.base_bits == 2
    callback._apply(policy, 8)
    assert sp.policy.base_bits == 8
    configured = RandomBits()
    sp.set_policy(configured)  # a configured policy is driven as it is
    assert callback._target(trainer, module) is configured


class ScriptedSequenceModule(ScriptedModule):
    """The scripted module, whose step sends a tiny token shard through ``to_heads``.

    8 tokens, 2 heads of 4 channels on 2 ranks: each rank sends its 4 tokens' 4 values of
    the other rank's head, 16 codes, i.e. ``2 b`` code bytes at ``b`` bits; ``seen``
    records the width the exchange actually used, read from its byte counter.
    """

    TOKENS, HEADS, DIM = 8, 2, 4

    def __init__(self, clock: Clock, **kwargs: Any) -> None:
        super().__init__(clock, **kwargs)
        self.proj = torch.nn.Linear(1, self.HEADS * self.DIM)

    def train_dataloader(self) -> DataLoader:
        # One batch per epoch: every graph-parallel rank holds a shard of the same sequence
        # (the strategy reports a single data-parallel replica).
        return DataLoader(TensorDataset(torch.ones(1, 1)), batch_size=1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        epoch, rank = self.current_epoch, self.global_rank
        losses = self.rank1_losses if rank == 1 and self.rank1_losses else self.losses
        times = self.rank1_times if rank == 1 and self.rank1_times else self.times
        self.clock.now += times[epoch]
        sp = self.parallel_context.sequence_parallel
        local = self.TOKENS // 2
        before = sp.stats.total("train", direction="forward", kind="data")
        x = self.proj(torch.arange(local, dtype=torch.float32).view(local, 1))
        y = sp.to_heads(x.view(local, self.HEADS, self.DIM), self.TOKENS, layer="probe")
        code_bytes = sp.stats.total("train", direction="forward", kind="data") - before
        self.seen.append((epoch, code_bytes * 8 // (local * self.DIM), type(sp.policy).__name__))
        self.log("train_loss", losses[epoch], on_step=False, on_epoch=True, batch_size=1)
        return (y.sum() + self.layer(batch[0]).sum()) * 0.0


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_graph_parallel_all_to_alls_follow_the_schedule(tmp_path) -> None:
    from lightgraph.strategies.graph_parallel import GraphParallelStrategy

    clock = Clock()
    callbacks = [AdaptiveBitWidth(window=WINDOW, smoothing=SMOOTHING)]
    attach_clock(callbacks, clock)
    module = ScriptedSequenceModule(
        clock,
        rank1_losses=[loss + RANK1_LOSS_OFFSET for loss in LOSSES],
        rank1_times=RANK1_TIMES,
    )
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    trainer = make_trainer(
        tmp_path,
        EPOCHS,
        [*callbacks, DumpHistories(str(out_dir), callbacks)],
        strategy=GraphParallelStrategy(start_method="fork"),  # FP32 until the callback acts
        enable_checkpointing=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)
    for rank in range(2):
        with open(out_dir / f"rank{rank}.json") as f:
            record = json.load(f)
        assert record["histories"][0] == [list(item) for item in enumerate(EXPECTED_BITS)]
        # the width on the wire, epoch by epoch, is the callback's decision
        assert record["seen"] == [[e, b, "FixedBits"] for e, b in enumerate(EXPECTED_BITS)]
