"""The one resumable loader base of lightgraph's sampled systems.

Every training loader -- neighbour sampling over the whole graph (NS), the macro-batches of
an on-disk partition store (HANOI) and the multistage loader (JOESTAR's LBS and PBS) -- is a
:class:`ResumableLoader`: the base owns the epoch, the position, the hand-over of batches
to training, the background prefetch thread, :meth:`~ResumableLoader.state_dict` and the
counters; a subclass only says which batches an epoch has (:meth:`~ResumableLoader._epoch`),
as PyG's ``NodeLoader`` is driven by a sampler and DGL's ``DataLoader`` by a ``Sampler``.

**One meaning of every key.** ``state_dict()`` is ``{"epoch", "step", "position"}``:

* ``epoch``: the epoch the next batch belongs to;
* ``step``: mini-batches of that epoch handed over to training so far -- the same integer
  on every data-parallel rank (every rank takes the same number of steps);
* ``position``: the loader's own coordinates of the next batch (e.g. ``[batch]`` for NS,
  ``[macro-batch, pass, mini-batch]`` for HANOI), a list of ints.

Lightning saves rank 0's state and every rank loads it: one process resumes from
``position``, a rank of several from ``step`` (:meth:`~ResumableLoader._locate` finds its own
position from it).

**Hand-over.** A batch counts as trained -- the position moves past it and its counters
(``mini_batches``, ``targets``, ...) are added to :attr:`~ResumableLoader.stats` -- when it
is *handed over*: as it is yielded (``handover="on-yield"``, the default, for a loader
iterated by hand), or, under a Trainer (``handover="reported"``, set by the data module),
when the data module moves it to the device and calls :meth:`~ResumableLoader.hand_over`.
Lightning fetches a batch ahead of training from a loader without a length, and a
checkpoint must not count that batch as trained; the counters then also count exactly the
batches trained, every epoch.

**Passes.** Each pass over the loader (``iter()``) continues the epoch from the last batch
handed over; a pass abandoned inside its epoch after at least one of its batches was handed
over (``limit_train_batches``) is not continued: the next pass starts the next epoch, as a
new pass over a ``DataLoader`` does. A state loaded with :meth:`load_state_dict` is
continued.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from lightgraph.utilities.checks import check_choice, check_int
from lightgraph.utilities.random_state import check_rng_state

HANDOVERS: tuple[str, ...] = ("on-yield", "reported")

Position = tuple[int, ...]


@dataclass
class LoaderStats:
    """Cumulative counters of one loader (callbacks take differences between epochs).

    Counted when a batch is handed over (so, under a Trainer, exactly the batches trained):
    ``mini_batches``, ``targets`` (the batches' seeds), ``dropped_targets`` (training
    targets no data-parallel rank trains, the whole job's count on every rank) and, for
    loaders that sample per mini-batch, ``nodes_loaded``. Counted when the data is read or
    built (the I/O happened whether or not its batches train): ``macro_batches``,
    ``passes``, ``read_seconds``, ``wait_seconds`` (waiting for the prefetch thread),
    ``stage1_seconds`` and, per macro-batch, ``nodes_loaded`` / ``nodes_moved``.
    """

    mini_batches: int = 0
    targets: int = 0
    nodes_loaded: int = 0
    dropped_targets: int = 0
    macro_batches: int = 0
    passes: int = 0
    nodes_moved: int = 0
    read_seconds: float = 0.0
    wait_seconds: float = 0.0
    stage1_seconds: float = 0.0
    #: passes taken over every macro-batch so far (HANOI's reuse)
    passes_per_macro_batch: list[int] = field(default_factory=list)

    def add(self, counts: Mapping[str, float]) -> None:
        """Add ``counts`` (field name -> increment)."""
        for key, value in counts.items():
            setattr(self, key, getattr(self, key) + value)

    def as_dict(self, keys: tuple[str, ...] | None = None) -> dict[str, float]:
        """The scalar counters (``keys`` only, if given) as floats."""
        names = [f.name for f in fields(self) if f.name != "passes_per_macro_batch"]
        return {k: float(getattr(self, k)) for k in names if keys is None or k in keys}


class Emit(NamedTuple):
    """One batch of an epoch, as :meth:`ResumableLoader._epoch` yields it."""

    batch: Any
    #: the position of the batch after it; ``None``: it is the epoch's last batch
    after: Position | None
    #: counters added to ``stats`` when the batch is handed over
    counts: Mapping[str, float] = {}


class Moved(NamedTuple):
    """The point after the last batch emitted is also ``after`` (of the same epoch and
    step): the start of the next pass or macro-batch, where a resume should begin."""

    after: Position


class Prefetcher:
    """One background thread that builds what the next steps need (double buffering)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=self.name)
        return self._pool.submit(fn, *args)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class ResumableLoader:
    """Base of the resumable training loaders (see the module's docstring).

    A subclass implements :meth:`_epoch` (the batches of an epoch from a position) and,
    when it can be one of several data-parallel ranks, :meth:`_locate`; it names the
    counters it reports in :attr:`STATS_KEYS` and the length of its position in
    :attr:`POSITION_SIZE`.
    """

    #: the counters :meth:`stats_dict` reports (and :class:`~lightgraph.callbacks.IOMonitor` logs)
    STATS_KEYS: tuple[str, ...] = ("mini_batches", "targets")
    #: how many ints a position has
    POSITION_SIZE: int = 1

    def __init__(self, *, world_size: int = 1, prefetch: bool = True) -> None:
        self.world_size = world_size
        self.prefetch = prefetch
        self.epoch = 0
        self.step = 0  # mini-batches of the epoch handed over so far
        self._position: Position = self._start()
        self._handover = "on-yield"
        # (epoch, position, step) after every batch yielded and not yet handed over, with
        # the batch's counters
        self._pending: deque[tuple[tuple[int, Position, int], Mapping[str, float]]] = deque()
        self._handed_in_pass = 0
        self._pass_ended = True
        self.stats = LoaderStats()
        self.prefetcher = Prefetcher(f"lightgraph-{type(self).__name__}")

    # ------------------------------------------------------------------ subclass API
    def _start(self) -> Position:
        """The position of an epoch's first batch."""
        return (0,) * self.POSITION_SIZE

    def _epoch(self, epoch: int, position: Position) -> Iterator[Emit | Moved]:
        """The batches of ``epoch`` from ``position`` on."""
        raise NotImplementedError

    def _locate(self, epoch: int, step: int) -> Position:
        """This rank's position after ``step`` mini-batches of ``epoch`` (data-parallel
        resume from another rank's state)."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot resume a data-parallel rank from a step count."
        )

    def _reset(self) -> None:
        """Forget anything built ahead for a position that is no longer next."""

    # ------------------------------------------------------------------ hand-over
    @property
    def handover(self) -> str:
        """``"on-yield"``: a batch counts as trained when it is yielded; ``"reported"``:
        when :meth:`hand_over` says so (set by the data modules under a Trainer)."""
        return self._handover

    @handover.setter
    def handover(self, value: str) -> None:
        self._handover = check_choice(type(self).__name__, "handover", value, HANDOVERS)

    def hand_over(self) -> None:
        """Record that the oldest batch yielded and not yet handed over went to training:
        count it and move :meth:`state_dict` past it (``handover="reported"``; a no-op when
        nothing is pending)."""
        if self._pending:
            state, counts = self._pending.popleft()
            self._commit(state, counts)

    def _commit(self, state: tuple[int, Position, int], counts: Mapping[str, float]) -> None:
        self.epoch, self._position, self.step = state
        self.stats.add(counts)
        self._handed_in_pass += 1

    def _move(self, state: tuple[int, Position, int]) -> None:
        """The point after the last batch yielded is also ``state``."""
        if self._pending:
            self._pending[-1] = (state, self._pending[-1][1])
        else:
            self.epoch, self._position, self.step = state

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Any]:
        self._pending.clear()  # fetched ahead, never trained: they come again
        if self._handed_in_pass and not self._pass_ended:
            # The previous pass was left inside its epoch after training on some of it.
            self.epoch, self._position, self.step = self.epoch + 1, self._start(), 0
            self._reset()
        self._handed_in_pass = 0
        self._pass_ended = False
        epoch, step = self.epoch, self.step
        on_yield = self._handover == "on-yield"
        for item in self._epoch(epoch, self._position):
            if isinstance(item, Moved):
                self._move((epoch, tuple(item.after), step))
                continue
            step += 1
            if item.after is None:
                # The epoch is over once its last batch is out: Lightning may never ask again.
                self._pass_ended = True
                state = (epoch + 1, self._start(), 0)
            else:
                state = (epoch, tuple(item.after), step)
            if on_yield:
                self._commit(state, item.counts)
            else:
                self._pending.append((state, item.counts))
            yield item.batch
        if not self._pass_ended:  # nothing (more) to yield this epoch
            self._pass_ended = True
            self._move((epoch + 1, self._start(), 0))

    # ------------------------------------------------------------------ state
    # Lightning saves and restores iterables that have these two methods (mid-epoch resume).
    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "step", "position"}`` after the last batch handed over."""
        return {"epoch": self.epoch, "step": self.step, "position": list(self._position)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict` (of this loader, or of rank 0's loader)."""
        missing = [k for k in ("epoch", "step", "position") if k not in state]
        if missing:
            raise KeyError(
                f"{type(self).__name__}.load_state_dict: expected a state with keys "
                f"'epoch', 'step' and 'position' (ResumableLoader.state_dict()) but "
                f"{sorted(state)} lacks {missing}."
            )
        self._pending.clear()
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])
        if self.world_size == 1:
            self._position = tuple(int(v) for v in state["position"])
        else:  # another rank's state: find this rank's own position from the step count
            self._position = self._locate(self.epoch, self.step)
        self._handed_in_pass = 0
        self._pass_ended = True
        self._reset()

    # Every draw follows from (seed, epoch, position): the position is the random state. It
    # matters for validation loaders, whose state Lightning does not save
    # (:class:`~lightgraph.callbacks.RandomStateCheckpoint` does).
    def rng_state(self) -> dict[str, Any]:
        """The position (:meth:`state_dict`) that seeds the next batches."""
        return self.state_dict()

    def set_rng_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`rng_state`, checked."""
        owner = f"{type(self).__name__}.set_rng_state"
        check_rng_state(
            owner, state, ("epoch", "step", "position"), f"{type(self).__name__}.rng_state()"
        )
        check_int(owner, "state['epoch']", state["epoch"], low=0)
        check_int(owner, "state['step']", state["step"], low=0)
        position = state["position"]
        if not isinstance(position, (list, tuple)) or len(position) != self.POSITION_SIZE:
            raise ValueError(
                f"{owner}: expected state['position'] to be a list of {self.POSITION_SIZE} "
                f"int(s) but got {position!r}."
            )
        for i, value in enumerate(position):
            check_int(owner, f"state['position'][{i}]", value, low=0)
        self.load_state_dict(state)

    def stats_dict(self) -> dict[str, float]:
        """The counters this loader reports (:attr:`STATS_KEYS`)."""
        return self.stats.as_dict(self.STATS_KEYS)

    def close(self) -> None:
        """Stop the prefetch thread."""
        self._reset()
        self.prefetcher.close()

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.prefetcher.close()
        except Exception:
            pass
