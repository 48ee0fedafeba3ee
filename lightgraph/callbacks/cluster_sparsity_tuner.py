"""TorchGT's Auto Tuner: move the cluster-sparse transfer threshold along a ladder by the LDR.

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from typing_extensions import override

from lightgraph.callbacks.ldr_schedule import DEFAULT_TIME_SOURCE, LDRSchedule
from lightgraph.functional.loss_descent_rate import DEFAULT_READING

#: The threshold ladder of TorchGT (thesis §4.3.4), in units of the pattern's global
#: density β_G; the last step is the absolute threshold 1 (every sparse block transferred).
LADDER: tuple[float, ...] = (0.0, 1.0, 1.5, 5.0, 7.0, 10.0)
_ABSOLUTE_ONE = len(LADDER)  # index of the final step, β_thre = 1


def _layers(module: Any) -> list[Any]:
    from lightgraph.nn.attention import MultiheadGraphAttention

    modules = getattr(module, "modules", None)
    if modules is None:
        return []
    return [m for m in modules() if isinstance(m, MultiheadGraphAttention)]


class ClusterSparsityTuner(LDRSchedule[int]):
    """TorchGT's transfer-threshold tuner (thesis §4.3.4, "Auto Tuner").

    The cluster-sparse attention (``kind="cluster_sparse"``) transfers every off-diagonal
    cluster block whose density is below :math:`\\beta_{thre}` into compact dense
    sub-blocks: faster, but the pattern changes. The tuner picks :math:`\\beta_{thre}`
    each epoch from the ladder

    .. math::
        \\{0,\\ \\beta_G,\\ 1.5\\beta_G,\\ 5\\beta_G,\\ 7\\beta_G,\\ 10\\beta_G,\\ 1\\}

    starting at :math:`\\beta_G` (the global density :math:`E / S^2` of the sequence's
    attention pattern). With the shared
    :class:`~lightgraph.functional.loss_descent_rate.LossDescentRate` tracker (running loss
    :math:`F_t = \\lambda F_{t-1} + (1 - \\lambda) L_t`, :math:`LDR_t = (F_t - F_{t-1}) / et_t`):
    when the tracker asks for more precision
    (:meth:`~lightgraph.functional.loss_descent_rate.LossDescentRate.more_precision`), the
    threshold moves one step down (fewer transferred blocks: a more exact pattern);
    otherwise one step up (more speed). No move while fewer than :math:`\\delta + 2`
    epochs are known. With ``reading="more_precision_when_descent_slows"`` more precision
    means the loss now falls more slowly than :math:`\\delta` epochs ago (signed
    :math:`LDR_t > LDR_{t-\\delta}`: convergence or too much pattern error, the thesis's
    prose); with ``reading="more_precision_when_descent_speeds_up"`` it means the loss
    falls faster (signed :math:`LDR_t < LDR_{t-\\delta}`, the thesis's inequality read
    literally).

    :math:`\\beta_G` is read from each training batch's ``graph`` (an
    :class:`~lightgraph.nn.AttentionGraph`: ``edge_index.size(1) / num_tokens**2``) unless
    ``beta_g`` fixes it; the threshold is written to every
    :class:`~lightgraph.nn.MultiheadGraphAttention` of the module before each training
    batch. Decisions use rank 0's loss and time and are identical on all ranks; the
    ladder position is checkpointed. Logged per epoch: ``sparsity_level`` (ladder index
    0–6); the module logs the threshold itself as ``attention_threshold``.

    Args:
        window: :math:`\\delta` (TorchGT: 10).
        smoothing: :math:`\\lambda` of the running loss (TorchGT: 0.9).
        beta_g: fixed :math:`\\beta_G`; ``None`` reads it from the batch.
        monitor: the logged epoch-level training loss.
        log: log ``sparsity_level``.
        reading: when to step down, ``"more_precision_when_descent_slows"`` or
            ``"more_precision_when_descent_speeds_up"`` (see above).
        time_source: what :math:`et_t` counts: ``"wall"`` (seconds of the epoch's training
            batches, the paper's), ``"steps"`` (their number) or ``"bytes"`` (bytes rank
            0's exchange sent during them); the counted ones replay exactly (see
            :class:`~lightgraph.callbacks.LDRSchedule` and ``docs/callbacks.md``).
    """

    _log_key = "sparsity_level"

    def __init__(
        self,
        window: int = 10,
        smoothing: float = 0.9,
        beta_g: float | None = None,
        monitor: str = "train_loss",
        log: bool = True,
        reading: str = DEFAULT_READING,
        time_source: str = DEFAULT_TIME_SOURCE,
    ) -> None:
        if beta_g is not None and (
            isinstance(beta_g, bool)
            or not isinstance(beta_g, int | float)
            or not 0.0 < beta_g <= 1.0
        ):
            raise ValueError(
                f"ClusterSparsityTuner: expected `beta_g` in (0, 1] or None but got {beta_g!r}."
            )
        super().__init__(
            window=window,
            smoothing=smoothing,
            monitor=monitor,
            log=log,
            reading=reading,
            time_source=time_source,
        )
        self.beta_g = None if beta_g is None else float(beta_g)
        self._module: Any = None

    def threshold(self, level: int, beta_g: float) -> float:
        """The threshold of ladder position ``level`` for a pattern of density ``beta_g``."""
        if level == _ABSOLUTE_ONE:
            return 1.0
        return min(1.0, LADDER[level] * beta_g)

    @override
    def _target(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Any:
        module = pl_module
        if not _layers(module):
            raise RuntimeError(
                "ClusterSparsityTuner needs a LightningModule with lightgraph.nn.MultiheadGraphAttention "
                f"layers (e.g. GraphTransformerModule(Graphormer(...))); got {type(module).__name__}."
            )
        return module

    @override
    def _apply(self, target: Any, setting: int) -> None:
        self._module = target

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        beta_g = self.beta_g
        if beta_g is None:
            graph = getattr(batch, "graph", None)
            if graph is None:
                raise RuntimeError(
                    "ClusterSparsityTuner: the batch has no `graph` to read the density beta_G "
                    "from; pass `beta_g`."
                )
            beta_g = graph.edge_index.size(1) / float(graph.num_tokens) ** 2
        level = self.setting if self.setting is not None else self._initial()
        value = self.threshold(level, beta_g)
        for layer in _layers(pl_module):
            layer.threshold = value

    @override
    def _initial(self) -> int:
        return 1  # beta_G

    @override
    def _next(self, setting: int, more_precision: bool | None) -> int:
        if more_precision is None:
            return setting
        if more_precision:
            return max(setting - 1, 0)
        return min(setting + 1, _ABSOLUTE_ONE)

    @override
    def _check_setting(self, setting: Any) -> int:
        if (
            isinstance(setting, bool)
            or not isinstance(setting, int)
            or not 0 <= setting <= _ABSOLUTE_ONE
        ):
            raise ValueError(
                f"ClusterSparsityTuner: expected the checkpointed ladder position in "
                f"[0, {_ABSOLUTE_ONE}] but got {setting!r}."
            )
        return setting

    @override
    def _log_value(self, setting: int) -> float:
        return float(setting)
