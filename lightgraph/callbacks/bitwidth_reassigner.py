"""AdaQP's periodic bit-width re-assignment."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightgraph.distributed.context import parallel_context
from lightgraph.distributed.halo_exchanger import HaloExchanger
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.quant.random_bits import RandomBits
from lightgraph.quant.variance_aware_bits import VarianceAwareBits
from lightgraph.utilities.checks import check_bool, check_int


class BitWidthReassigner(Callback):
    """Re-assign the exchange's bit-widths every ``period`` epochs (AdaQP, §3.3 and §4.2).

    With :class:`~lightgraph.quant.VarianceAwareBits` the policy traces the rows sent in
    every training epoch (AdaQP's assigner "keeps tracing all GNN layers' inputs" and
    solves on the "traced data from the last period", §3.3): each row's range² is
    averaged over all the exchanges of the period
    (:meth:`~lightgraph.quant.VarianceAwareBits.observe`). When the last epoch of a period
    ends (epochs ``period - 1``, ``2 period - 1``, ...), every rank sends its traces to
    rank 0, which solves the variance–time MILP of every layer and direction, and
    broadcasts the widths — so they are identical on all ranks and used from the next
    epoch on; the traces then start afresh for the next period. Until the first
    re-assignment every row uses the policy's ``initial_bits`` (AdaQP: 8). With
    :class:`~lightgraph.quant.RandomBits` (AdaQP's Table 6 baseline) the callback redraws
    the random widths (a new independent draw per message) at the same times instead.

    Logged per epoch (``log=True``): ``assign_seconds`` (wall clock spent re-assigning so
    far, all ranks waiting included) and, for variance-aware policies, the share of rows
    at every width per layer and direction as ``bits/<layer>_<direction>/<b>bit``. A
    one-line histogram is printed on rank 0 after every re-assignment (``verbose``).

    The assignment and the re-assignment count are part of the checkpoint: a resumed run
    sends exactly the widths the uninterrupted run would have sent. The traces of a
    period interrupted by the checkpoint are not (each rank holds its own, and Lightning
    saves the callback state of rank 0 only): the first re-assignment after resuming
    averages the epochs traced since the resume.

    Args:
        period: epochs between re-assignments (AdaQP: 50; its Fig. 11 found a moderate
            period best — short ones re-solve often, long ones use stale ranges).
        log: log the metrics above.
        verbose: print the histogram after each re-assignment.
    """

    def __init__(self, period: int = 50, log: bool = True, verbose: bool = True) -> None:
        owner = "BitWidthReassigner"
        self.period = check_int(owner, "period", period)
        # Not `self.log`: Lightning overwrites every callback's `log` attribute with the
        # LightningModule's `log` method when the fit starts.
        self.log_metrics = check_bool(owner, "log", log)
        self.verbose = check_bool(owner, "verbose", verbose)
        #: epochs after which widths were re-assigned (across resumes)
        self.reassigned: list[int] = []
        #: total wall-clock seconds spent re-assigning
        self.seconds = 0.0
        self._exchanger: HaloExchanger | None = None
        self._restore: dict[str, Any] | None = None

    # ------------------------------------------------------------------------- hooks
    def _find_exchanger(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> HaloExchanger:
        exchanger = parallel_context(pl_module).halo_exchanger
        policy = exchanger.policy if exchanger is not None else None
        if exchanger is None or not isinstance(policy, VarianceAwareBits | RandomBits):
            raise RuntimeError(
                "BitWidthReassigner needs a halo exchanger whose policy can be re-assigned "
                "(lightgraph.quant.VarianceAwareBits) or redrawn (lightgraph.quant.RandomBits); "
                f"got {type(policy).__name__ if policy is not None else 'no policy (FP32 exchange)'} "
                f"on {type(trainer.strategy).__name__}."
            )
        return exchanger

    @property
    def _policy(self) -> BitWidthPolicy | None:
        return self._exchanger.policy if self._exchanger is not None else None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._exchanger = self._find_exchanger(trainer, pl_module)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._exchanger = self._find_exchanger(trainer, pl_module)
        policy = self._policy
        if self._restore is not None:
            state, self._restore = self._restore, None
            if isinstance(policy, VarianceAwareBits) and "policy" in state:
                policy.load_state_dict(state["policy"])
            elif isinstance(policy, RandomBits):
                policy.version = int(state.get("version", 0))

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        policy = self._policy
        if isinstance(policy, VarianceAwareBits):
            policy.tracing = True  # every epoch of the period (the exchanger stops it to solve)
        if not self.log_metrics:
            return
        log = {"assign_seconds": self.seconds}
        if isinstance(policy, VarianceAwareBits):
            for name, counts in policy.histogram().items():
                total = sum(counts.values()) or 1
                for b, n in counts.items():
                    log[f"bits/{name.replace('/', '_')}/{b}bit"] = n / total
        for key, value in log.items():
            pl_module.log(
                key,
                float(value),
                on_step=False,
                on_epoch=True,
                reduce_fx="max",
                sync_dist=True,
                batch_size=1,
            )

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch
        if (epoch + 1) % self.period != 0 or epoch in self.reassigned:
            return
        assert self._exchanger is not None  # set in setup / on_train_start
        tic = time.perf_counter()
        report = self._exchanger.reassign(epoch=epoch)
        if report is not None:
            if self.verbose:
                parts = []
                for name, counts in sorted(report.histogram.items()):
                    hist = " ".join(f"{b}b:{n}" for b, n in counts.items())
                    parts.append(f"{name} [{hist}]")
                traced = min(report.observations.values(), default=0)
                rank_zero_info(
                    f"BitWidthReassigner: epoch {epoch}: widths re-assigned in {report.seconds:.3f}s "
                    f"(solver {sum(report.solve_seconds.values()):.3f}s, ranges averaged over "
                    f"{traced} traced exchanges): " + "; ".join(parts)
                )
        self.seconds += time.perf_counter() - tic
        self.reassigned.append(epoch)

    # ------------------------------------------------------------------------- state
    @override
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "period": self.period,
            "reassigned": list(self.reassigned),
            "seconds": self.seconds,
        }
        policy = self._policy
        if isinstance(policy, VarianceAwareBits):
            state["policy"] = policy.state_dict()
        if policy is not None:
            state["version"] = int(policy.version)
        return state

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.reassigned = [int(e) for e in state_dict["reassigned"]]
        self.seconds = float(state_dict["seconds"])
        self._restore = dict(state_dict)
