"""Padded, bucketed, ``torch.compile``d mini-batch training (JOESTAR's compiled runner)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from torch import Tensor, nn
from typing_extensions import override

from lightgraph.functional.padding import (
    bucket_levels,
    pad_minibatch,
    required_sizes,
    select_level,
    split_sizes,
    unpad_rows,
)
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_int,
    check_non_negative,
)

_OWNER = "GraphCompile"
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
METRICS = (
    "compiles",
    "recompiles",
    "fallbacks",
    "padded_batches",
    "pad_fraction",
    "eager_drops",
    "compile_seconds",
)
_VERSION = 1

#: ``(hops, hidden layers with history)``: batches of one signature share their buckets.
Signature = tuple[int, int]


class GraphCompile(Callback):
    """Train a sampled-mini-batch module through a ``torch.compile``d, padded ``model_step``.

    Neighbour-sampled batches change shape every step, so a compiled model would
    recompile on every batch (or fall back to dynamic shapes). This callback pads every
    training batch to one of a few fixed shapes (buckets) and runs the module's
    ``model_step`` compiled for them:

    1. **Warm-up** (``warmup_epochs`` epochs): the module runs eager through a runner
       that records, per hop, the smallest and largest numbers of nodes and edges (and
       of history halo rows, per hidden layer) of the training batches.
    2. At the end of warm-up the bucket sizes are fixed
       (:func:`~lightgraph.functional.padding.bucket_levels`: ``num_buckets`` joint
       levels from the smallest sizes seen to the largest plus ``margin``, rounded up to
       ``round_to``) and ``module.model_step`` is wrapped by ``torch.compile`` (compiled
       lazily, at the first call of every bucket).
    3. Afterwards every training batch is padded to the smallest bucket it fits
       (:func:`~lightgraph.functional.padding.pad_minibatch`: padding rows and edges
       never reach a real row), run compiled, and its outputs are unpadded
       (:func:`~lightgraph.functional.padding.unpad_rows`): ``out`` and every
       ``hidden[l]`` come back in the batch's own row layout. A batch larger than the
       largest bucket (or without per-hop counts) runs eager: a *fallback*.

    Evaluation batches (the module not in training mode, or gradients disabled) always
    run eager. Padding is exact for models whose layers treat rows independently apart
    from message passing (PyG ``GraphSAGE``/``GCN``/``GAT``/``GIN`` without
    normalisation, or with ``mode="node"`` norms); batch statistics (``BatchNorm``, PyG's
    graph-mode ``LayerNorm``) would see the padding rows, and a warning says so.

    The module must have a ``model_step(batch) -> (out, hidden)`` method and a
    ``model_runner`` attribute (:class:`~lightgraph.models.MiniBatchNodeClassifier`).

    Counters (attributes, cumulative over the run; logged per epoch as
    ``compile/<name>`` with the epoch's values):

    * ``compiles``: graphs compiled (calls of the compiler backend);
    * ``recompiles``: graphs compiled after the first compiled step (a new bucket, or a
      guard failure);
    * ``fallbacks``: training batches run eager after warm-up;
    * ``padded_batches``: training batches run padded and compiled;
    * ``pad_fraction``: padding rows / rows of the padded batches;
    * ``eager_drops``: compiled calls that torch ran eager after hitting its recompile
      limit (``torch._dynamo.config.recompile_limit``): a new bucket that compiled
      nothing, or a ``recompile_limit`` warning of dynamo -- a warning is issued;
    * ``compile_seconds``: wall seconds of the training steps that compiled something
      (tracing, forward and the lazily compiled backward, plus the step's own work).

    Args:
        warmup_epochs: eager epochs that measure the batch sizes (>= 1).
        margin: slack over the largest sizes seen, as a fraction (>= 0, e.g. 0.05).
        num_buckets: size levels (>= 1); every level is one compiled graph.
        round_to: every padded size is a multiple of it (>= 1, e.g. 64).
        mode: ``torch.compile`` mode of the inductor backend; ``None`` picks
            ``"reduce-overhead"`` (CUDA graphs) when the module is on CUDA and the default
            mode otherwise.
        dynamic: ``torch.compile``'s ``dynamic`` (``False``: one static graph per bucket).
        backend: ``torch.compile`` backend, ``"inductor"`` or another registered name
            (``"aot_eager"`` for quick checks) or a callable backend.
        fullgraph: ``torch.compile``'s ``fullgraph`` (error on graph breaks).
        enabled: ``False`` turns the callback into a no-op (the module runs eager).
    """

    def __init__(
        self,
        warmup_epochs: int = 1,
        margin: float = 0.05,
        num_buckets: int = 2,
        round_to: int = 64,
        mode: str | None = None,
        dynamic: bool = False,
        backend: str | Callable[..., Any] = "inductor",
        fullgraph: bool = False,
        enabled: bool = True,
    ) -> None:
        self.warmup_epochs = check_int(_OWNER, "warmup_epochs", warmup_epochs, low=1)
        self.margin = check_non_negative(_OWNER, "margin", margin)
        self.num_buckets = check_int(_OWNER, "num_buckets", num_buckets, low=1)
        self.round_to = check_int(_OWNER, "round_to", round_to, low=1)
        self.mode = check_choice(_OWNER, "mode", mode, MODES)
        self.dynamic = check_bool(_OWNER, "dynamic", dynamic)
        self.fullgraph = check_bool(_OWNER, "fullgraph", fullgraph)
        self.enabled = check_bool(_OWNER, "enabled", enabled)
        if isinstance(backend, str):
            known = tuple(torch._dynamo.list_backends(exclude_tags=()))
            check_choice(_OWNER, "backend", backend, known)
        elif not callable(backend):
            raise TypeError(
                f"{_OWNER}: expected `backend` to be a registered backend name (e.g. "
                f"'inductor', 'aot_eager') or a callable but got {type(backend).__name__}."
            )
        if mode is not None and backend != "inductor":
            raise ValueError(
                f"{_OWNER}: expected `mode` to be None with backend {backend!r} (modes are "
                f"options of backend='inductor') but got {mode!r}."
            )
        self.backend = backend

        #: Per batch signature ``(hops, history layers)``: smallest / largest sizes seen.
        self.low: dict[Signature, list[int]] = {}
        self.high: dict[Signature, list[int]] = {}
        #: Per signature: the bucket levels (flat size tuples, see ``required_sizes``).
        self.levels: dict[Signature, list[tuple[int, ...]]] = {}
        self.epochs_seen = 0
        self.compiles = 0
        self.recompiles = 0
        self.fallbacks = 0
        self.padded_batches = 0
        self.eager_drops = 0
        self.compile_seconds = 0.0
        self.padding_rows = 0
        self.padded_rows = 0
        #: The values logged for the last epoch (``compile/<name>`` without the prefix).
        self.epoch_metrics: dict[str, float] = {}
        #: The ``torch.compile`` mode used (resolved from ``mode`` and the device).
        self.compile_mode: str | None = None

        self._epoch = dict.fromkeys(METRICS, 0.0)
        self._epoch_rows = [0, 0]
        self._compiled: Callable[..., Any] | None = None
        self._counter: _CountingBackend | None = None
        self._first_call_done = False
        self._seen_keys: set[tuple[Signature, int]] = set()
        self._dropped_keys: set[tuple[Signature, int]] = set()
        self._step_compiled = False
        self._step_start = 0.0
        self._module: pl.LightningModule | None = None
        self._handler: _RecompileLimitHandler | None = None
        self._warned_empty = False

    # ------------------------------------------------------------------------- public
    @property
    def warming_up(self) -> bool:
        """Whether batches still run eager to measure sizes (no buckets yet)."""
        return not self.levels

    @property
    def pad_fraction(self) -> float:
        """Padding rows / rows of all padded batches so far."""
        return self.padding_rows / self.padded_rows if self.padded_rows else 0.0

    def run(self, module: Any, batch: Any) -> tuple[Tensor, list[Tensor]]:
        """The runner installed as ``module.model_runner``: ``module.model_step(batch)``,
        padded and compiled after warm-up (see the class docstring)."""
        if not (module.training and torch.is_grad_enabled()):
            return module.model_step(batch)
        sizes = _batch_sizes(batch)
        if self.warming_up:
            if sizes is not None:
                self._record(*sizes)
            return module.model_step(batch)
        if sizes is None:
            self._count("fallbacks")
            return module.model_step(batch)
        sig, required = sizes
        levels = self.levels.get(sig)
        level = None if levels is None else select_level(levels, required)
        if level is None or self._compiled is None:
            self._count("fallbacks")
            return module.model_step(batch)
        return self._run_compiled(module, batch, sig, level)

    # ----------------------------------------------------------------------- warm-up
    def _record(self, sig: Signature, sizes: tuple[int, ...]) -> None:
        low, high = self.low.get(sig), self.high.get(sig)
        if low is None or high is None:
            self.low[sig], self.high[sig] = list(sizes), list(sizes)
            return
        self.low[sig] = [min(a, b) for a, b in zip(low, sizes, strict=True)]
        self.high[sig] = [max(a, b) for a, b in zip(high, sizes, strict=True)]

    def _gather_stats(self, trainer: pl.Trainer) -> None:
        # All ranks pad to the same buckets: merge every rank's extremes.
        dist = torch.distributed
        if trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return
        stats: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(stats, (self.low, self.high))
        for low, high in stats:
            for sig in low:
                self._record(sig, tuple(low[sig]))
                self._record(sig, tuple(high[sig]))

    def finish_warmup(self, pl_module: Any) -> None:
        """Fix the buckets from the sizes recorded so far and compile ``model_step``.

        Called at the end of the last warm-up epoch (after merging the ranks' sizes); the
        graphs themselves compile at the first batch of every bucket.
        """
        if not self.high:
            raise RuntimeError(
                f"{_OWNER}: expected >= 1 sampled training batch recorded before "
                "`finish_warmup` but got none."
            )
        self._fix_buckets()
        self._build(pl_module)

    def _fix_buckets(self) -> None:
        self.levels = {
            sig: bucket_levels(
                self.low[sig], self.high[sig], self.num_buckets, self.margin, self.round_to
            )
            for sig in self.high
        }

    # ---------------------------------------------------------------------- compiled
    def _build(self, module: Any) -> None:
        if self.backend == "inductor":
            mode = self.mode
            if mode is None and module.device.type == "cuda":
                mode = "reduce-overhead"
            inner: Any = torch._TorchCompileInductorWrapper(mode, None, self.dynamic)
        else:
            mode = None
            inner = torch._TorchCompileWrapper(self.backend, None, None, self.dynamic)
        self.compile_mode = mode
        self._counter = _CountingBackend(inner)
        kwargs: dict[str, Any] = {}
        levels = sum(len(v) for v in self.levels.values())
        try:  # a per-call recompile limit (torch >= 2.12) that fits every bucket
            kwargs = {
                "recompile_limit": max(int(torch._dynamo.config.recompile_limit), 2 * levels + 2),
                "isolate_recompiles": True,
            }
            compiled = torch.compile(
                module.model_step,
                backend=self._counter,
                dynamic=self.dynamic,
                fullgraph=self.fullgraph,
                **kwargs,
            )
        except TypeError:
            compiled = torch.compile(
                module.model_step,
                backend=self._counter,
                dynamic=self.dynamic,
                fullgraph=self.fullgraph,
            )
        self._compiled = compiled
        self._module = module
        self._first_call_done = False
        self._seen_keys.clear()
        self._dropped_keys.clear()
        for name, warn in _row_coupled_norms(module):
            rank_zero_warn(f"{_OWNER}: {name} {warn}; padded batches change its results.")

    def _run_compiled(
        self, module: Any, batch: Any, sig: Signature, level: int
    ) -> tuple[Tensor, list[Tensor]]:
        assert self._compiled is not None and self._counter is not None
        if module is not self._module:
            raise RuntimeError(
                f"{_OWNER}: expected the runner to be called with the module it was compiled "
                f"for ({type(self._module).__name__} at {id(self._module):#x}) but got "
                f"{type(module).__name__} at {id(module):#x}."
            )
        nodes, edges, halos = split_sizes(self.levels[sig][level], sig[0])
        halo_index = getattr(batch, "halo_index", None)
        padded = pad_minibatch(
            batch.x,
            batch.edge_index,
            list(batch.num_sampled_nodes),
            list(batch.num_sampled_edges),
            nodes,
            edges,
            halo_index=None if halo_index is None else list(halo_index),
            hist=None if halo_index is None else list(batch.hist),
            halo_bounds=halos if halo_index is not None else None,
        )
        key = (sig, level)
        before = self._counter.count
        if self.compile_mode is not None and "reduce-overhead" in self.compile_mode:
            torch.compiler.cudagraph_mark_step_begin()
        handler = self._handler
        if handler is not None:
            handler.active = True
        try:
            out, hidden = self._compiled(padded)
        finally:
            if handler is not None:
                handler.active = False
        new = self._counter.count - before
        if new:
            self._step_compiled = True
            self.compiles += new
            self._epoch["compiles"] += new
            if self._first_call_done:
                self.recompiles += new
                self._epoch["recompiles"] += new
        self._first_call_done = True
        if key not in self._seen_keys:
            self._seen_keys.add(key)
            if not new:
                self._dropped_keys.add(key)
                rank_zero_warn(
                    f"{_OWNER}: torch ran bucket {level} {self.levels[sig][level]} eager: no "
                    "graph compiled for it (past dynamo's recompile_limit, "
                    f"torch._dynamo.config.recompile_limit = "
                    f"{torch._dynamo.config.recompile_limit}, or a guard that keeps failing). "
                    "Lower `num_buckets` or raise the limit; TORCH_LOGS=recompiles says why."
                )
        if key in self._dropped_keys or (handler is not None and handler.pop()):
            self._count("eager_drops")
        self._count("padded_batches")
        lay = padded.layout
        rows = lay.num_nodes
        self.padding_rows += lay.num_padding_nodes
        self.padded_rows += rows
        self._epoch_rows[0] += lay.num_padding_nodes
        self._epoch_rows[1] += rows
        return unpad_rows(out, lay), [unpad_rows(h, lay) for h in hidden]

    def _count(self, name: str) -> None:
        setattr(self, name, getattr(self, name) + 1)
        self._epoch[name] += 1

    # ------------------------------------------------------------------------- hooks
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not self.enabled or stage != "fit":
            return
        if not callable(getattr(pl_module, "model_step", None)) or not hasattr(
            type(pl_module), "model_runner"
        ):
            raise TypeError(
                f"{_OWNER}: expected a LightningModule with `model_step(batch)` and a "
                f"`model_runner` attribute (e.g. lightgraph.models.MiniBatchNodeClassifier) "
                f"but got {type(pl_module).__name__}."
            )

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.enabled:
            return
        current = pl_module.model_runner
        if current is not None and getattr(current, "__self__", None) is not self:
            raise RuntimeError(
                f"{_OWNER}: expected `model_runner` of {type(pl_module).__name__} to be None "
                f"(one runner at a time) but got {current!r}."
            )
        pl_module.model_runner = self.run
        self._handler = _RecompileLimitHandler()
        logging.getLogger("torch._dynamo").addHandler(self._handler)
        if self.levels:  # restored from a checkpoint: no second warm-up
            self._build(pl_module)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch = dict.fromkeys(METRICS, 0.0)
        self._epoch_rows = [0, 0]

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._step_compiled = False
        self._step_start = time.perf_counter()

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._step_compiled:
            seconds = time.perf_counter() - self._step_start
            self.compile_seconds += seconds
            self._epoch["compile_seconds"] += seconds
            self._step_compiled = False

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.enabled:
            return
        rows = self._epoch_rows
        self._epoch["pad_fraction"] = rows[0] / rows[1] if rows[1] else 0.0
        self.epoch_metrics = dict(self._epoch)
        for name, value in self.epoch_metrics.items():
            pl_module.log(
                f"compile/{name}", float(value), on_step=False, on_epoch=True, batch_size=1
            )
        if not self.warming_up:
            return
        self.epochs_seen += 1
        if self.epochs_seen < self.warmup_epochs:
            return
        self._gather_stats(trainer)
        if not self.high:
            if not self._warned_empty:
                rank_zero_warn(
                    f"{_OWNER}: no sampled training batch (with `num_sampled_nodes` and "
                    f"`num_sampled_edges`) in {self.epochs_seen} warm-up epoch(s); running eager."
                )
                self._warned_empty = True
            return
        self.finish_warmup(pl_module)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._release(pl_module)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._release(pl_module)

    def _release(self, pl_module: Any) -> None:
        runner = getattr(pl_module, "model_runner", None)
        if runner is not None and getattr(runner, "__self__", None) is self:
            pl_module.model_runner = None
        if self._handler is not None:
            logging.getLogger("torch._dynamo").removeHandler(self._handler)
            self._handler = None
        self._compiled = None
        self._module = None

    # ------------------------------------------------------------------------- state
    @override
    def state_dict(self) -> dict[str, Any]:
        def table(d: dict[Signature, Any]) -> list[Any]:
            return [
                [list(sig), [list(v) if isinstance(v, tuple) else v for v in vals]]
                for sig, vals in d.items()
            ]

        return {
            "version": _VERSION,
            "low": [[list(s), list(v)] for s, v in self.low.items()],
            "high": [[list(s), list(v)] for s, v in self.high.items()],
            "levels": table(self.levels),
            "epochs_seen": self.epochs_seen,
            "counters": {
                "compiles": self.compiles,
                "recompiles": self.recompiles,
                "fallbacks": self.fallbacks,
                "padded_batches": self.padded_batches,
                "eager_drops": self.eager_drops,
                "compile_seconds": self.compile_seconds,
                "padding_rows": self.padding_rows,
                "padded_rows": self.padded_rows,
            },
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        version = state_dict.get("version")
        if version != _VERSION:
            raise ValueError(
                f"{_OWNER}: expected a state_dict of version {_VERSION} but got version "
                f"{version!r}."
            )

        def sig(s: Any) -> Signature:
            return (int(s[0]), int(s[1]))

        self.low = {sig(s): [int(v) for v in vals] for s, vals in state_dict["low"]}
        self.high = {sig(s): [int(v) for v in vals] for s, vals in state_dict["high"]}
        self.levels = {
            sig(s): [tuple(int(v) for v in level) for level in levels]
            for s, levels in state_dict["levels"]
        }
        self.epochs_seen = int(state_dict["epochs_seen"])
        counters = state_dict.get("counters", {})
        for name in (
            "compiles",
            "recompiles",
            "fallbacks",
            "padded_batches",
            "eager_drops",
            "padding_rows",
            "padded_rows",
        ):
            setattr(self, name, int(counters.get(name, 0)))
        self.compile_seconds = float(counters.get("compile_seconds", 0.0))


# ----------------------------------------------------------------------------- helpers
def _batch_sizes(batch: Any) -> tuple[Signature, tuple[int, ...]] | None:
    """``(signature, required sizes)`` of a sampled batch, ``None`` if it cannot be padded."""
    nodes = getattr(batch, "num_sampled_nodes", None)
    edges = getattr(batch, "num_sampled_edges", None)
    if nodes is None or edges is None or getattr(batch, "x", None) is None:
        return None
    nodes, edges = [int(v) for v in nodes], [int(v) for v in edges]
    if len(nodes) != len(edges) + 1:
        return None
    halo_index = getattr(batch, "halo_index", None)
    halos = [] if halo_index is None else [int(h.numel()) for h in halo_index]
    return (len(edges), len(halos)), required_sizes(nodes, edges, halos)


class _CountingBackend:
    """A ``torch.compile`` backend that counts (and times) the graphs it compiles."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner
        self.count = 0
        self.seconds = 0.0
        self.__name__ = f"graph_compile_{getattr(inner, 'compiler_name', 'backend')}"

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
        self.count += 1
        start = time.perf_counter()
        try:
            return self.inner(gm, example_inputs, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def reset(self) -> None:
        reset = getattr(self.inner, "reset", None)
        if reset is not None:
            reset()


class _RecompileLimitHandler(logging.Handler):
    """Notices dynamo's ``hit config.recompile_limit`` warning (it then runs a frame eager)
    while ``active`` (during a compiled call of the callback)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.hits = 0
        self.active = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.active:
            return
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - never break logging
            return
        if "recompile_limit" in message and "hit config" in message:
            self.hits += 1

    def pop(self) -> bool:
        hit, self.hits = self.hits > 0, 0
        return hit


def _row_coupled_norms(module: nn.Module) -> list[tuple[str, str]]:
    """Submodules whose output for a row depends on other rows (batch statistics)."""
    found: list[tuple[str, str]] = []
    for name, m in module.named_modules():
        if any(name.startswith(n + ".") for n, _ in found):
            continue
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)):
            found.append((name, "normalises with batch statistics"))
        elif (
            type(m).__module__.startswith("torch_geometric.nn.norm")
            and getattr(m, "mode", "graph") != "node"
        ):
            found.append((name, f"({type(m).__name__}) normalises over all rows"))
    return found
