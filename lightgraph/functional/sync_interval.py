"""UniTG's Modality Collaborator schedule (§5.3.3): when to copy LM embeddings to the GNN.

UniTG is ch. 5 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); section numbers and "the thesis" refer to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lightgraph.functional.loss_descent_rate import LossDescentRate, check_smoothing
from lightgraph.utilities.checks import check_int

#: UniTG's ladder of sync intervals, as fractions of the number of GNN epochs :math:`J`.
DEFAULT_LADDER: tuple[float, ...] = (0.3, 0.2, 0.1, 0.02)


def check_ladder(owner: str, ladder: Any) -> tuple[float, ...]:
    """Validate a ladder of interval fractions: non-empty, each in ``(0, 1]``, strictly decreasing."""
    allowed = "a non-empty, strictly decreasing sequence of fractions in (0, 1]"
    if isinstance(ladder, (str, bytes)) or not isinstance(ladder, Sequence) or not ladder:
        raise ValueError(f"{owner}: expected `ladder` to be {allowed} but got {ladder!r}.")
    for i, fraction in enumerate(ladder):
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, (int, float))
            or not 0.0 < fraction <= 1.0
        ):
            raise ValueError(
                f"{owner}: expected `ladder[{i}]` to be a fraction in (0, 1] but got {fraction!r} "
                f"(ladder={ladder!r})."
            )
    out = tuple(float(f) for f in ladder)
    for i in range(1, len(out)):
        if not out[i] < out[i - 1]:
            raise ValueError(
                f"{owner}: expected `ladder` to be {allowed} but got {ladder!r} "
                f"(ladder[{i}]={ladder[i]!r} is not below ladder[{i - 1}]={ladder[i - 1]!r})."
            )
    return out


class SyncIntervalSchedule:
    """UniTG's Modality Collaborator (thesis §5.3.3): the sync interval :math:`\\Delta t` over GNN epochs.

    While a language model (LM) and a GNN train together, the LM's current node embeddings
    are copied into the GNN's input store every :math:`\\Delta t` GNN epochs. Early
    embeddings are poor, so syncs start rare and become more frequent while the GNN loss
    keeps falling. After every finished GNN epoch :math:`j` (``j = 0, 1, ...``) with loss
    :math:`L_j`, the Running Average Loss is tracked by the shared
    :class:`~lightgraph.functional.loss_descent_rate.LossDescentRate` (unit epoch time, so
    its signed LDR is :math:`F_j - F_{j-1}`):

    .. math::

        F_0 = L_0, \\qquad F_j = \\lambda F_{j-1} + (1 - \\lambda) L_j \\quad (j \\ge 1),
        \\qquad \\lambda = 0.8.

    Epoch :math:`j \\ge 1` is a *fall* when :math:`F_j < F_{j-1}` (strictly; a flat
    :math:`F` is not a fall, and epoch 0 has no :math:`F_{-1}` and is never one). The fall
    streak :math:`s_j` counts consecutive falls and restarts whenever the ladder steps:

    .. math::

        s_j = \\begin{cases} s_{j-1} + 1 & F_j < F_{j-1} \\\\ 0 & \\text{otherwise}
        \\end{cases}, \\qquad
        s_j = P \\implies \\ell \\leftarrow \\min(\\ell + 1, K - 1),\\; s_j \\leftarrow 0,

    with ``patience`` :math:`P = 20` and the ladder :math:`(r_0, \\dots, r_{K-1}) =`
    ``(0.3, 0.2, 0.1, 0.02)``. The interval at ladder level :math:`\\ell` is
    :math:`\\Delta t = \\max(1, \\operatorname{round}(r_\\ell J))` epochs (Python's
    ``round``, ties to even), :math:`J` = ``total_epochs``. At the last level the streak
    still restarts after :math:`P` falls but :math:`\\Delta t` stays. With :math:`F_0 = L_0`
    and a loss that falls every epoch, the first step happens at epoch :math:`j = P`
    (falls at epochs :math:`1, \\dots, P`), the next at :math:`2P`, and so on.

    **Decision order** within :meth:`update` for epoch :math:`j`:

    1. :math:`F_j` and the fall streak are updated;
    2. if the streak reaches :math:`P`, the ladder steps down (and the streak restarts);
    3. the epochs since the last sync (or since the start) go up by one, and the schedule
       syncs when that count has *reached the interval just computed in step 2*:

       .. math::

           \\text{sync}_j \\iff c_j \\ge \\Delta t_j, \\qquad
           c_j = c_{j-1} + 1, \\quad c_{-1} = 0, \\quad c_j \\leftarrow 0 \\text{ after a sync}.

    So a ladder step takes effect for the sync decision of the *same* epoch: if it leaves
    the count at or above the new, shorter interval, the sync happens at once (the LM
    embeddings are already "overdue" under the new interval). With :math:`J = 100` and a
    loss that falls every epoch: :math:`\\Delta t = 30` for epochs 0-19; the step at epoch
    20 makes it 20 and, 21 epochs after the start, syncs at epoch 20; then 10 from epoch
    40 (sync at 40, 50), 2 from epoch 60 (sync at 60, 62, ..., 98). Without steps, the
    syncs are at epochs 29, 59, 89.

    Epochs are counted by calls to :meth:`update` (one per finished GNN epoch); the
    ``epoch`` ids only label :attr:`history` and must increase strictly.

    Args:
        total_epochs: :math:`J`, the number of GNN epochs of the run (>= 1).
        ladder: the fractions of :math:`J`, strictly decreasing in ``(0, 1]``.
        patience: :math:`P`, consecutive falls of :math:`F_j` that step the ladder (>= 1).
        smoothing: :math:`\\lambda` of the running average, in ``[0, 1)``.
    """

    def __init__(
        self,
        total_epochs: int,
        ladder: Sequence[float] = DEFAULT_LADDER,
        patience: int = 20,
        smoothing: float = 0.8,
    ) -> None:
        owner = type(self).__name__
        self.total_epochs = check_int(owner, "total_epochs", total_epochs)
        self.ladder = check_ladder(owner, ladder)
        self.patience = check_int(owner, "patience", patience)
        self.smoothing = check_smoothing(owner, smoothing)
        #: :math:`\\Delta t` in epochs at every ladder level.
        self.intervals: tuple[int, ...] = tuple(
            max(1, round(fraction * self.total_epochs)) for fraction in self.ladder
        )
        # F_j and its signed LDR (F_j - F_{j-1} with unit epoch times); `window` is unused.
        self.tracker = LossDescentRate(smoothing=self.smoothing, window=1)
        self._level = 0
        self._streak = 0  # consecutive falls of F_j since the last reset or ladder step
        self._since_sync = 0  # epochs since the last sync (or since the start)
        self._last_epoch: int | None = None
        self._history: list[tuple[int, int, bool]] = []

    # ---------------------------------------------------------------- state
    @property
    def interval(self) -> int:
        """:math:`\\Delta t` in epochs at the current ladder level."""
        return self.intervals[self._level]

    @property
    def level(self) -> int:
        """The current ladder index (0: ``ladder[0]``)."""
        return self._level

    @property
    def streak(self) -> int:
        """Consecutive falls of :math:`F_j` counted towards the next ladder step."""
        return self._streak

    @property
    def epochs_since_sync(self) -> int:
        """Epochs finished since the last sync (or since the start)."""
        return self._since_sync

    @property
    def last_epoch(self) -> int | None:
        """The ``epoch`` of the latest :meth:`update` (``None`` before any)."""
        return self._last_epoch

    @property
    def smoothed_loss(self) -> float | None:
        """:math:`F_j` of the latest epoch (``None`` before any)."""
        return self.tracker.smoothed

    @property
    def history(self) -> list[tuple[int, int, bool]]:
        """``(epoch, interval, synced)`` for every :meth:`update`: :math:`\\Delta t` used for its decision."""
        return list(self._history)

    # ---------------------------------------------------------------- update
    def update(self, epoch: int, loss: float) -> bool:
        """Record GNN epoch ``epoch``'s loss :math:`L_j`; returns whether to sync at its end.

        Args:
            epoch: the finished epoch's id (an integer >= 0, above the previous one).
            loss: its GNN training loss :math:`L_j` (finite).

        Returns:
            ``True`` when the LM embeddings should be copied to the GNN now (see the
            decision order in the class docstring).
        """
        owner = type(self).__name__
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"{owner}: expected `epoch` to be an integer >= 0 but got {epoch!r}.")
        if self._last_epoch is not None and epoch <= self._last_epoch:
            raise ValueError(
                f"{owner}: expected `epoch` > {self._last_epoch} (the previous update) but got "
                f"{epoch!r}; call `update` once per finished epoch."
            )
        value = float(loss)
        if not math.isfinite(value):
            raise ValueError(f"{owner}: expected a finite `loss` but got {loss!r} (epoch {epoch}).")
        self.tracker.update(value, 1.0)
        ldr = self.tracker.ldr  # F_j - F_{j-1}; None for the first epoch
        self._streak = self._streak + 1 if ldr is not None and ldr < 0.0 else 0
        if self._streak >= self.patience:
            self._streak = 0
            self._level = min(self._level + 1, len(self.intervals) - 1)
        self._since_sync += 1
        sync = self._since_sync >= self.interval
        if sync:
            self._since_sync = 0
        self._last_epoch = epoch
        self._history.append((epoch, self.interval, sync))
        return sync

    # ---------------------------------------------------------------- checkpointing
    def settings(self) -> dict[str, Any]:
        """The constructor arguments (plain Python)."""
        return {
            "total_epochs": self.total_epochs,
            "ladder": list(self.ladder),
            "patience": self.patience,
            "smoothing": self.smoothing,
        }

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python state: settings, the :math:`F_j` tracker, level, counters and history."""
        return {
            **self.settings(),
            "tracker": self.tracker.state_dict(),
            "level": self._level,
            "streak": self._streak,
            "since_sync": self._since_sync,
            "last_epoch": self._last_epoch,
            "history": [[epoch, interval, synced] for epoch, interval, synced in self._history],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the settings must match this schedule's."""
        owner = type(self).__name__
        keys = {"total_epochs", "ladder", "patience", "smoothing", "tracker", "level", "streak"}
        keys |= {"since_sync", "last_epoch", "history"}
        missing = keys - set(state)
        if missing:
            raise KeyError(f"{owner}: state is missing the keys {sorted(missing)}.")
        saved = {
            "total_epochs": state["total_epochs"],
            "ladder": [float(f) for f in state["ladder"]],
            "patience": state["patience"],
            "smoothing": float(state["smoothing"]),
        }
        if saved != self.settings():
            mine = ", ".join(f"{k}={v!r}" for k, v in self.settings().items())
            theirs = ", ".join(f"{k}={v!r}" for k, v in saved.items())
            raise ValueError(
                f"{owner}: the state was saved with {theirs} but this schedule has {mine}; "
                "resume with the same settings."
            )
        level, streak, since = int(state["level"]), int(state["streak"]), int(state["since_sync"])
        last_epoch = state["last_epoch"]
        history = [(int(e), int(i), bool(s)) for e, i, s in state["history"]]
        if (
            not 0 <= level < len(self.intervals)
            or not 0 <= streak < self.patience
            or not 0 <= since < self.intervals[level]
            or (last_epoch is None) != (not history)
            or (history and history[-1][0] != last_epoch)
        ):
            raise ValueError(
                f"{owner}: inconsistent state: level={level}, streak={streak}, "
                f"since_sync={since}, last_epoch={last_epoch!r} with {len(history)} history "
                f"entries (intervals {self.intervals}, patience {self.patience})."
            )
        self.tracker.load_state_dict(state["tracker"])
        self._level, self._streak, self._since_sync = level, streak, since
        self._last_epoch = None if last_epoch is None else int(last_epoch)
        self._history = history

    def __repr__(self) -> str:
        return (
            f"SyncIntervalSchedule(total_epochs={self.total_epochs}, ladder={self.ladder}, "
            f"patience={self.patience}, smoothing={self.smoothing}, level={self._level}, "
            f"interval={self.interval})"
        )
