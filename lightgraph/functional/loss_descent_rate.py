"""Sylvie's Loss Descent Rate (LDR), the training-status signal of §V-A and §V-B."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from lightgraph.utilities.checks import check_choice, check_rate


def check_window(owner: str, window: int) -> int:
    """Validate Sylvie's comparison range :math:`\\delta` (an integer >= 1)."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"{owner}: expected `window` to be an integer >= 1 but got {window!r}.")
    return window


def check_smoothing(owner: str, smoothing: float) -> float:
    """Validate Sylvie's running-average factor :math:`\\lambda` (in ``[0, 1)``)."""
    return check_rate(owner, "smoothing", smoothing)


#: Raise precision when the loss now falls more *slowly* than :math:`\delta` epochs ago
#: (signed :math:`LDR_t > LDR_{t-\delta}`): Sylvie's and TorchGT's prose.
SLOWS = "more_precision_when_descent_slows"
#: Raise precision when the loss now falls *faster* than :math:`\delta` epochs ago
#: (signed :math:`LDR_t < LDR_{t-\delta}`): Sylvie's Eq. 5 and TorchGT's formula, read literally.
SPEEDS_UP = "more_precision_when_descent_speeds_up"
#: The two readings of the Eq. 5 comparison, named by what they do.
READINGS: tuple[str, ...] = (SLOWS, SPEEDS_UP)
#: The reading every LDR-driven callback uses unless told otherwise (see docs/callbacks.md).
DEFAULT_READING = SLOWS


def check_reading(owner: str, reading: str) -> str:
    """Validate the reading of the Eq. 5 comparison (one of :data:`READINGS`)."""
    return check_choice(owner, "reading", reading, READINGS)


class LossDescentRate:
    """Sylvie's Loss Descent Rate (ICDE'24, §V-A) and the Eq. 5 comparison over ``window`` epochs.

    After every training epoch :math:`t` the global training loss :math:`L_t` and the
    epoch's training time :math:`et_t` are fed to :meth:`update`, which tracks the running
    average loss and the paper's LDR:

    .. math::

        F_0 = L_0, \\qquad F_t = \\lambda F_{t-1} + (1 - \\lambda) L_t \\quad (t \\ge 1),
        \\qquad LDR_t = \\frac{F_t - F_{t-1}}{et_t} \\quad (t \\ge 1).

    **Initialisation.** The paper does not say what :math:`F_{-1}` is. Here the running
    average starts at the first loss, :math:`F_0 = L_0` (not at 0, which would make the
    first few :math:`F_t` rise towards the loss and look like a diverging run), and
    :math:`LDR_0` is undefined (``None``): there is no :math:`F_{-1}` to subtract.

    **Sign convention** (do not flip it). The loss decreases while training improves, so
    :math:`F_t - F_{t-1} < 0` and the paper's :math:`LDR_t` is *negative*; a *more
    negative* LDR means *faster* descent. This class also exposes the positive descent
    rate

    .. math::

        \\mathit{descent\\_rate}_t = -LDR_t = \\frac{F_{t-1} - F_t}{et_t}
        \\qquad (> 0 \\text{ while the loss falls})

    and calls epoch :math:`t` *degraded* when the loss now falls more slowly than
    ``window`` = :math:`\\delta` epochs ago (a fact about the run, whatever the reading):

    .. math::

        \\mathrm{degraded}(t) \\iff \\mathit{descent\\_rate}_t < \\mathit{descent\\_rate}_{t-\\delta}
        \\iff LDR_t > LDR_{t-\\delta} \\quad \\text{(signed LDR)}, \\qquad t > \\delta.

    **Two readings of Eq. 5.** Sylvie's Eq. 5 (and TorchGT's threshold rule) raises
    precision when :math:`LDR_t < LDR_{t-\\delta}`, which with the signed LDR means the
    loss now falls *faster*; the papers' prose says the opposite ("the training is about
    to converge or too many errors are introduced ... increase b", i.e. the descent
    slowed). ``reading`` chooses which one :meth:`more_precision` answers:

    * ``"more_precision_when_descent_slows"``: more precision exactly when
      :math:`\\mathrm{degraded}(t)` (signed :math:`LDR_t > LDR_{t-\\delta}`);
    * ``"more_precision_when_descent_speeds_up"``: more precision exactly when
      :math:`\\mathit{descent\\_rate}_t > \\mathit{descent\\_rate}_{t-\\delta}` (signed
      :math:`LDR_t < LDR_{t-\\delta}`, Eq. 5 taken literally).

    A tie (equal rates) asks for *less* precision under both readings, Eq. 5's
    ":math:`\\ge`" branch. "More precision" is a wider bit-width for
    :class:`~lightgraph.callbacks.AdaptiveBitWidth`, a synchronous epoch for
    :class:`~lightgraph.callbacks.PipelineAdaptor` and a lower transfer threshold for
    :class:`~lightgraph.callbacks.ClusterSparsityTuner`. For :math:`t \\le \\delta` there
    is not enough history (Eq. 5's :math:`t > \\delta`) and both :meth:`degraded` and
    :meth:`more_precision` return ``None``. Since :math:`LDR_0` is undefined,
    :math:`t > \\delta` is exactly the condition for both :math:`LDR_t` and
    :math:`LDR_{t-\\delta}` to exist.

    Only the last ``window + 1`` LDR values are kept.

    Args:
        smoothing: :math:`\\lambda`, weight of the previous running average; Sylvie
            suggests 0.9.
        window: :math:`\\delta`, the epoch distance of the comparison; Sylvie suggests 5
            (higher model quality) to 20 (faster).
        reading: which comparison asks for more precision, one of
            ``"more_precision_when_descent_slows"`` and
            ``"more_precision_when_descent_speeds_up"`` (see above; the default is
            :data:`DEFAULT_READING`).
    """

    def __init__(
        self, smoothing: float = 0.9, window: int = 5, reading: str = DEFAULT_READING
    ) -> None:
        self.smoothing = check_smoothing("LossDescentRate", smoothing)
        self.window = check_window("LossDescentRate", window)
        self.reading = check_reading("LossDescentRate", reading)
        self.t = -1  # index of the latest epoch passed to `update` (-1: none yet)
        self.smoothed: float | None = None  # F_t
        self._ldr: deque[float | None] = deque(maxlen=window + 1)  # LDR_{t-window} .. LDR_t

    def update(self, loss: float, epoch_time: float) -> float | None:
        """Record epoch :math:`t` (the next one) and return the paper's signed :math:`LDR_t`.

        Args:
            loss: the epoch's global training loss :math:`L_t`.
            epoch_time: the epoch's training time :math:`et_t` in seconds (> 0).

        Returns:
            :math:`LDR_t = (F_t - F_{t-1}) / et_t` (negative while the loss falls), or
            ``None`` for the first epoch (:math:`t = 0`).
        """
        loss = float(loss)
        epoch_time = float(epoch_time)
        if not math.isfinite(loss):
            raise ValueError(f"LossDescentRate: expected a finite `loss` but got {loss!r}.")
        if not (math.isfinite(epoch_time) and epoch_time > 0.0):
            raise ValueError(
                f"LossDescentRate: expected a finite `epoch_time` > 0 but got {epoch_time!r}."
            )
        previous = self.smoothed
        if previous is None:
            self.smoothed = loss
            ldr = None
        else:
            self.smoothed = self.smoothing * previous + (1.0 - self.smoothing) * loss
            ldr = (self.smoothed - previous) / epoch_time
        self.t += 1
        self._ldr.append(ldr)
        return ldr

    @property
    def ldr(self) -> float | None:
        """The paper's signed :math:`LDR_t` of the latest epoch (negative while the loss falls)."""
        return self._ldr[-1] if self._ldr else None

    @property
    def descent_rate(self) -> float | None:
        """:math:`-LDR_t = (F_{t-1} - F_t) / et_t` of the latest epoch (positive while the loss falls)."""
        ldr = self.ldr
        return None if ldr is None else -ldr

    def _rates(self) -> tuple[float, float] | None:
        """``(descent_rate_t, descent_rate_{t-window})``, or ``None`` while :math:`t \\le \\delta`."""
        if self.t <= self.window:
            return None
        now, then = self._ldr[-1], self._ldr[0]
        if now is None or then is None:  # unreachable: t - window >= 1, so both exist
            return None
        return -now, -then

    def degraded(self) -> bool | None:
        """Whether the latest epoch :math:`t` descends more slowly than epoch :math:`t - \\delta`.

        Independent of :attr:`reading`.

        Returns:
            ``descent_rate_t < descent_rate_{t-window}`` (i.e. signed
            ``LDR_t > LDR_{t-window}``), or ``None`` while :math:`t \\le \\delta`.
        """
        rates = self._rates()
        return None if rates is None else rates[0] < rates[1]

    def more_precision(self) -> bool | None:
        """Whether :attr:`reading` asks for more precision after the latest epoch :math:`t`.

        Returns:
            With ``"more_precision_when_descent_slows"``:
            ``descent_rate_t < descent_rate_{t-window}``; with
            ``"more_precision_when_descent_speeds_up"``:
            ``descent_rate_t > descent_rate_{t-window}``; ``None`` while
            :math:`t \\le \\delta`. Equal rates give ``False`` under both readings.
        """
        rates = self._rates()
        if rates is None:
            return None
        now, then = rates
        return now < then if self.reading == SLOWS else now > then

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python state: settings, epoch counter, :math:`F_t` and the kept LDR values."""
        return {
            "smoothing": self.smoothing,
            "window": self.window,
            "reading": self.reading,
            "t": self.t,
            "smoothed": self.smoothed,
            "ldr": list(self._ldr),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the settings must match this tracker's.

        A state without ``"reading"`` (saved before the option existed) was produced with
        ``"more_precision_when_descent_slows"``, the only behaviour there was.
        """
        missing = {"smoothing", "window", "t", "smoothed", "ldr"} - set(state)
        if missing:
            raise KeyError(f"LossDescentRate: state is missing the keys {sorted(missing)}.")
        reading = state.get("reading", SLOWS)
        if (
            state["window"] != self.window
            or state["smoothing"] != self.smoothing
            or reading != self.reading
        ):
            raise ValueError(
                "LossDescentRate: the state was saved with "
                f"window={state['window']!r}, smoothing={state['smoothing']!r}, "
                f"reading={reading!r} but this tracker has window={self.window!r}, "
                f"smoothing={self.smoothing!r}, reading={self.reading!r}; resume with the "
                "same settings."
            )
        t, ldr = int(state["t"]), list(state["ldr"])
        if t < -1 or len(ldr) != min(t + 1, self.window + 1):
            raise ValueError(
                f"LossDescentRate: inconsistent state: t={t} with {len(ldr)} LDR values "
                f"(expected {min(t + 1, self.window + 1)})."
            )
        self.t = t
        self.smoothed = None if state["smoothed"] is None else float(state["smoothed"])
        self._ldr = deque((None if v is None else float(v) for v in ldr), maxlen=self.window + 1)

    def __repr__(self) -> str:
        return (
            f"LossDescentRate(smoothing={self.smoothing}, window={self.window}, "
            f"reading={self.reading!r}, t={self.t})"
        )
