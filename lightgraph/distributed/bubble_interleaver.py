"""UniTG's Bubble Interleaver (thesis §5.3.4): language-model tuning in pipeline bubbles.

The thesis is Zhang's (*Algorithm and System Co-design for Efficient and Scalable Graph
Learning*, NTU 2026), ch. 5.

A GNN trained with GPipe pipeline parallelism leaves every stage idle while it waits for
the activations and gradients of the other stages. UniTG fills these bubbles with
language-model (LM) fine-tuning on the same device, pausing and resuming the LM through
hooks on its operations so that LM work never runs while the stage computes.

:class:`BubbleInterleaver` does this inside one process: an LM worker thread runs a unit of
LM work (``job``) again and again; the pipeline runtime calls :meth:`compute_begin` /
:meth:`compute_end` around each stage compute (the ``ComputeObserver`` protocol of the
pipeline runtime), which closes a gate and waits until the worker is parked at a pause
point, then re-opens it. Intervals of both go to a :class:`Timeline` that proves exclusion.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from lightgraph.distributed.timeline import Timeline
from lightgraph.utilities.checks import (
    check_bool,
    check_callable,
    check_choice,
    check_int,
    check_non_empty_str,
    check_positive,
    check_type,
)

#: Named pause-point granularities of :meth:`BubbleInterleaver.attach`.
GRANULARITIES: tuple[str, ...] = ("leaf", "all")
#: How :meth:`BubbleInterleaver.attach` places pause points in the LM's backward pass.
BACKWARD_HOOKS: tuple[str, ...] = ("tensor", "module", "none")

# Worker states.
_IDLE = "idle"  # no worker thread (never started, or stopped)
_RUNNING = "running"  # between pause points (inside a job or between jobs)
_PARKED = "parked"  # waiting at a pause point
_FINISHED = "finished"  # the thread has ended (job returned False, stop() or an error)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """Tensors in a module output (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):  # also transformers' ModelOutput
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)


class BubbleInterleaver:
    """Runs LM work on a worker thread only while the pipeline stage is not computing.

    One per process (pipeline stage). The pipeline runtime calls :meth:`compute_begin` and
    :meth:`compute_end` on its schedule thread around every stage compute; everything else
    is the training loop's::

        interleaver = BubbleInterleaver()
        interleaver.attach(lm)                # pause points on the LM's modules
        interleaver.start(lm_job)             # lm_job() -> bool: one LM batch, fwd + bwd
        for step in range(steps):
            pipeline.step(observer=interleaver)   # compute_begin / compute_end per compute
            with interleaver.drained():       # no LM job half done in here
                all_reduce_lm_grads(); lm_optimizer.step(); lm_optimizer.zero_grad()
        interleaver.stop()

    **Gate.** :meth:`compute_begin` closes the gate and blocks until the worker is parked:
    at a pause point inside a job, between two jobs, or gone (not started, finished).
    :meth:`compute_end` re-opens it and the worker resumes. Between the two, no LM code runs
    on the worker thread.

    **Pause points.** (1) Between jobs. (2) Hooks that :meth:`attach` registers on the LM's
    modules: a forward pre-hook (before the module's forward) and, with ``backward="tensor"``,
    a hook on each output tensor that fires when the gradient with respect to it has been
    computed, i.e. before the module's own backward ops (``backward="module"`` uses
    ``register_full_backward_pre_hook`` instead, which fires at the same point). A hook parks
    only on the worker thread: the LM may be called from other threads (inference for the
    GNN's inputs) without effect. On CPU, autograd runs ``backward()`` in the calling
    thread, so backward hooks fire on the worker and the backward pass pauses layer by
    layer. With accelerators, autograd runs backward on per-device threads (shared with the
    main thread's backward, so parking there would stall the GNN; there the hooks do
    nothing and a job's backward would run to its end unpaused); ``backward_on_worker=True``
    therefore runs jobs under ``torch.autograd.set_multithreading_enabled(False)``, which is
    thread-local and moves the worker's backward onto the worker thread.

    **Drain.** :meth:`drain` (main thread, between pipeline steps, never inside a compute)
    lets the worker finish its current job with the gate open, then holds it parked between
    jobs until :meth:`resume`; the hold outlasts any number of computes (a stage compute
    neither lifts nor needs it). :meth:`drained` is ``drain(); yield; resume()``. LM time is
    accounted to bubbles (:attr:`lm_bubble_seconds`) except while a hold is set
    (:attr:`lm_drain_seconds`: the end of the job drain waited for).

    **Errors.** An exception raised by ``job`` ends the worker; it is re-raised (the same
    object) by the next :meth:`compute_begin`, :meth:`drain` or :meth:`stop` of any thread,
    once.

    **Timeline.** GNN computes are recorded on lane ``"gnn"`` (label: the kind) from after
    the worker parked to :meth:`compute_end`; LM run segments on lane ``"lm"`` (label
    ``"job <n>"``, ``"job <n> (drain)"`` under a hold) from the moment the worker starts or
    resumes a job to the moment it parks or the job returns. The worker stamps a segment's
    end before it signals that it parked, and :meth:`compute_begin` stamps the GNN start
    after seeing that signal (and :meth:`compute_end` stamps the GNN end before re-opening
    the gate), so :meth:`Timeline.overlaps("lm", "gnn") <Timeline.overlaps>` is empty
    exactly when the exclusion held.

    Exclusion is between threads of this process: kernels a job enqueued on an accelerator
    may still run after the worker parked unless ``synchronize`` waits for them.

    Args:
        timeline: where intervals are recorded (a new :class:`Timeline` when ``None``); its
            clock stamps everything, including the time accounting.
        enabled: ``False`` turns the gate off: computes are recorded but never wait, and the
            worker runs freely (a negative control: the timeline then shows overlaps).
            Drain still works.
        timeout: seconds :meth:`compute_begin`, :meth:`drain` and :meth:`stop` wait for the
            worker before raising a ``TimeoutError`` (an LM op that runs longer than this
            without a pause point).
        synchronize: called on the worker thread before it reports parked, e.g.
            ``torch.cuda.current_stream().synchronize`` so that queued LM kernels finish
            before the stage computes. ``None``: nothing.
        backward_on_worker: run each job under
            ``torch.autograd.set_multithreading_enabled(False)`` (thread-local: the worker
            only), so that its backward runs, and pauses, on the worker thread on any
            device. ``False``: autograd's default threads.
    """

    def __init__(
        self,
        timeline: Timeline | None = None,
        enabled: bool = True,
        timeout: float = 300.0,
        synchronize: Callable[[], None] | None = None,
        backward_on_worker: bool = True,
    ) -> None:
        owner = "BubbleInterleaver"
        if timeline is not None:
            check_type(owner, "timeline", timeline, Timeline)
        if synchronize is not None:
            check_callable(owner, "synchronize", synchronize, "e.g. torch.cuda.synchronize")
        self.timeline = timeline if timeline is not None else Timeline()
        self.enabled = check_bool(owner, "enabled", enabled)
        self.timeout = check_positive(owner, "timeout", timeout)
        self.synchronize = synchronize
        self.backward_on_worker = check_bool(owner, "backward_on_worker", backward_on_worker)

        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._worker_ident: int | None = None
        self._state = _IDLE
        self._stop = False
        self._error: BaseException | None = None
        # Gate and hold.
        self._computing: str | None = None  # kind of the stage compute in progress
        self._gate_closed = False  # a compute is in progress and the gate is enabled
        self._gnn_start = 0.0
        self._hold = False
        # The job in progress and its open run segment.
        self._in_job = False
        self._segment_start: float | None = None
        self._segment_drain = False
        # Counters.
        self._jobs_started = 0
        self._jobs_done = 0
        self._pauses = 0
        self._lm_seconds = {"bubble": 0.0, "drain": 0.0}
        self._gate_wait_seconds = 0.0
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(enabled={self.enabled}, state={self._state!r}, "
            f"jobs_done={self._jobs_done}, hooked_modules={len(self._handles)})"
        )

    # ------------------------------------------------------------------ pause points
    def attach(
        self,
        lm: nn.Module,
        granularity: str | int | type[nn.Module] | tuple[type[nn.Module], ...] = "leaf",
        backward: str = "tensor",
    ) -> int:
        """Register pause points on ``lm``'s modules; returns how many modules got hooks.

        Args:
            lm: the language model (any ``nn.Module``). May be called more than once, also
                for other modules; :meth:`detach` removes every hook.
            granularity: which modules get pause points: ``"leaf"`` (modules without
                children), ``"all"`` (every module), an integer ``d >= 0`` (every module at
                depth ``<= d``, ``lm`` being depth 0), or a module type or tuple of types
                (every instance, e.g. ``BertLayer``). Finer means a shorter wait in
                :meth:`compute_begin`.
            backward: pause points in the backward pass: ``"tensor"`` (a gradient hook on
                each output tensor of a hooked module, registered during the forward),
                ``"module"`` (``register_full_backward_pre_hook``; it wraps outputs in a
                custom autograd function, which breaks in-place ops on them and warns when
                no input requires grad) or ``"none"``.

        Raises:
            TypeError: if ``lm`` is not an ``nn.Module``.
            ValueError: for another ``granularity`` or ``backward``, or one that selects no
                module.
        """
        owner = "BubbleInterleaver.attach"
        check_type(owner, "lm", lm, nn.Module)
        check_choice(owner, "backward", backward, BACKWARD_HOOKS)
        modules = self._select(owner, lm, granularity)
        for module in modules:
            self._handles.append(module.register_forward_pre_hook(self._forward_pre_hook))
            if backward == "tensor":
                self._handles.append(module.register_forward_hook(self._tensor_hook_installer))
            elif backward == "module":
                self._handles.append(
                    module.register_full_backward_pre_hook(self._backward_pre_hook)
                )
        return len(modules)

    def detach(self) -> None:
        """Remove every hook :meth:`attach` registered (gradient hooks already placed on
        tensors of a running backward stay until that graph is freed)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    @staticmethod
    def _select(owner: str, lm: nn.Module, granularity: Any) -> list[nn.Module]:
        allowed = "'leaf', 'all', an integer depth >= 0, or an nn.Module type or tuple of types"
        if isinstance(granularity, str) and granularity in GRANULARITIES:
            if granularity == "all":
                modules = list(lm.modules())
            else:
                modules = [m for m in lm.modules() if next(m.children(), None) is None]
        elif isinstance(granularity, int) and not isinstance(granularity, bool):
            depth = check_int(owner, "granularity", granularity, low=0)
            modules = [m for name, m in lm.named_modules() if _depth(name) <= depth]
        elif _is_module_types(granularity):
            modules = [m for m in lm.modules() if isinstance(m, granularity)]
        else:
            raise ValueError(
                f"{owner}: expected `granularity` to be one of {allowed} but got {granularity!r}."
            )
        if not modules:
            raise ValueError(
                f"{owner}: expected `granularity` to select at least one module of "
                f"{type(lm).__name__} but `granularity`={granularity!r} selects none; use "
                f"{allowed}."
            )
        return modules

    def _forward_pre_hook(self, module: nn.Module, args: Any) -> None:
        self.pause_point()

    def _backward_pre_hook(self, module: nn.Module, grad_output: Any) -> None:
        self.pause_point()

    def _grad_hook(self, grad: torch.Tensor) -> None:
        self.pause_point()

    def _tensor_hook_installer(self, module: nn.Module, args: Any, output: Any) -> None:
        if not torch.is_grad_enabled() or threading.get_ident() != self._worker_ident:
            return
        for t in _tensors(output):
            # Non-leaf tensors only: a hook on a leaf (a parameter returned as is) would
            # outlive the graph and pile up over the calls.
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(self._grad_hook)

    def pause_point(self) -> None:
        """Park here while the gate is closed, if called on the worker thread (else no-op).

        The hooks of :meth:`attach` call this; a job may call it too (e.g. between the
        forward and the optimizer step of a hand-written LM loop).
        """
        if threading.get_ident() != self._worker_ident:
            return
        with self._cond:
            if not self._gate_closed or self._stop or not self._in_job:
                return
            self._park_locked()
            self._pauses += 1
            while self._gate_closed and not self._stop:
                self._cond.wait()
            self._state = _RUNNING
            self._begin_segment_locked()

    # ------------------------------------------------------------------ worker
    def start(self, job: Callable[[], bool]) -> None:
        """Start the LM worker: it calls ``job()`` until it returns ``False`` (or :meth:`stop`).

        ``job`` is one unit of LM work (e.g. one batch: forward, backward, gradient
        accumulation) and returns whether more work is left (anything but a ``bool`` is an
        error). The worker's first job waits for an open gate and no :meth:`drain` hold.

        Raises:
            TypeError: if ``job`` is not callable.
            RuntimeError: if a worker is already running.
        """
        check_callable("BubbleInterleaver", "job", job, "one unit of LM work returning a bool")
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                raise RuntimeError(
                    "BubbleInterleaver: start() called while the LM worker is running; call "
                    "stop() first."
                )
            self._stop = False
            self._state = _RUNNING
            self._thread = threading.Thread(
                target=self._worker_main, args=(job,), name="lightgraph-bubble-lm", daemon=True
            )
            self._thread.start()
            self._worker_ident = self._thread.ident

    def _worker_main(self, job: Callable[[], bool]) -> None:
        try:
            with self._cond:
                self._worker_ident = threading.get_ident()
                self._wait_between_jobs_locked()
                go = not self._stop
                if go:
                    self._begin_job_locked()
            while go:
                if self.backward_on_worker:
                    with torch.autograd.set_multithreading_enabled(False):
                        more = job()
                else:
                    more = job()
                if not isinstance(more, bool):
                    raise TypeError(
                        f"BubbleInterleaver: expected `job` to return True (more work) or False "
                        f"(done) but it returned {type(more).__name__}."
                    )
                with self._cond:
                    self._end_segment_locked()
                    self._in_job = False
                    self._jobs_done += 1
                    if not more:
                        break
                    self._wait_between_jobs_locked()
                    go = not self._stop
                    if go:
                        self._begin_job_locked()
        except BaseException as exc:  # re-raised in the caller, never swallowed
            with self._cond:
                self._end_segment_locked()
                self._in_job = False
                self._error = exc
        finally:
            with self._cond:
                self._state = _FINISHED
                self._worker_ident = None
                self._cond.notify_all()

    def _begin_job_locked(self) -> None:
        self._jobs_started += 1
        self._in_job = True
        self._begin_segment_locked()

    def _wait_between_jobs_locked(self) -> None:
        def blocked() -> bool:
            return not self._stop and (self._gate_closed or self._hold)

        if blocked():
            self._park_locked()
            while blocked():
                self._cond.wait()
            self._state = _RUNNING

    def _park_locked(self) -> None:
        """Close the open run segment, then report parked (in this order: see the class doc)."""
        if self.synchronize is not None:
            self.synchronize()
        self._end_segment_locked()
        self._state = _PARKED
        self._cond.notify_all()

    def _begin_segment_locked(self) -> None:
        self._segment_start = self.timeline.now()
        self._segment_drain = self._hold

    def _end_segment_locked(self, now: float | None = None) -> None:
        if self._segment_start is None:
            return
        end = self.timeline.now() if now is None else now
        kind = "drain" if self._segment_drain else "bubble"
        label = f"job {self._jobs_started}" + (" (drain)" if self._segment_drain else "")
        self.timeline.record("lm", label, self._segment_start, end)
        self._lm_seconds[kind] += end - self._segment_start
        self._segment_start = None

    def _raise_error_locked(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _worker_busy_locked(self) -> bool:
        """Whether the worker thread is running LM code (not parked, not gone)."""
        return self._state == _RUNNING

    def _check_not_worker(self, method: str) -> None:
        if self._worker_ident is not None and threading.get_ident() == self._worker_ident:
            raise RuntimeError(
                f"BubbleInterleaver: {method} called from the LM worker thread (inside a job); "
                "it would wait for itself."
            )

    def _wait_locked(self, done: Callable[[], bool], timeout: float) -> bool:
        return self._cond.wait_for(lambda: done() or self._error is not None, _finite(timeout))

    # ------------------------------------------------------------------ ComputeObserver
    def compute_begin(self, kind: str) -> None:
        """The stage starts computing: close the gate, wait until the worker is parked.

        Args:
            kind: what the stage computes (``FlowPipeline`` reports ``"forward"``,
                ``"loss"``, ``"backward"``, and ``"first_step"`` for a schedule's whole
                first step); the label of the recorded GNN interval.

        Raises:
            ValueError: if ``kind`` is not a non-empty string.
            RuntimeError: if a compute is already in progress (``compute_begin`` twice), or
                when called from the worker thread.
            TimeoutError: if the worker does not park within ``timeout`` seconds (the gate
                is re-opened first, so the caller need not call :meth:`compute_end`).
            BaseException: the exception ``job`` raised, if it raised.
        """
        check_non_empty_str("BubbleInterleaver.compute_begin", "kind", kind)
        self._check_not_worker("compute_begin")
        with self._cond:
            self._raise_error_locked()
            if self._computing is not None:
                raise RuntimeError(
                    f"BubbleInterleaver: compute_begin({kind!r}) called while the compute "
                    f"{self._computing!r} is in progress; call compute_end({self._computing!r}) "
                    "first."
                )
            self._computing = kind
            if self.enabled:
                self._gate_closed = True
                t0 = self.timeline.now()
                parked = self._wait_locked(lambda: not self._worker_busy_locked(), self.timeout)
                self._gate_wait_seconds += self.timeline.now() - t0
                if self._error is not None or not parked:
                    self._computing, self._gate_closed = None, False
                    self._cond.notify_all()
                    self._raise_error_locked()
                if not parked:
                    raise TimeoutError(
                        f"BubbleInterleaver: compute_begin({kind!r}) waited `timeout`="
                        f"{self.timeout:g} s for the LM worker to reach a pause point, but it "
                        f"is still running job {self._jobs_started}; attach() the LM with a "
                        "finer `granularity`, call pause_point() in the job, or raise `timeout`."
                    )
            # Stamped after the worker reported parked (and closed its segment).
            self._gnn_start = self.timeline.now()

    def compute_end(self, kind: str) -> None:
        """The stage finished computing: stamp the GNN interval, re-open the gate.

        Raises:
            ValueError: if ``kind`` is not a non-empty string.
            RuntimeError: if no compute of this ``kind`` is in progress.
        """
        check_non_empty_str("BubbleInterleaver.compute_end", "kind", kind)
        with self._cond:
            if self._computing != kind:
                raise RuntimeError(
                    f"BubbleInterleaver: compute_end({kind!r}) called but the compute in "
                    f"progress is {self._computing!r}; expected a matching compute_begin."
                )
            self.timeline.record("gnn", kind, self._gnn_start, self.timeline.now())
            self._computing, self._gate_closed = None, False
            self._cond.notify_all()

    # ------------------------------------------------------------------ drain, stop
    def drain(self, timeout: float | None = None) -> None:
        """Let the worker finish its current job, then hold it parked until :meth:`resume`.

        Call between pipeline steps (no stage compute in progress). Returns once no job is
        half done: the worker is parked between jobs, finished, or was never started. While
        held, the worker starts no job; :meth:`compute_begin` / :meth:`compute_end` leave the
        hold in place.

        Args:
            timeout: seconds to wait for the job (default: the interleaver's ``timeout``).

        Raises:
            RuntimeError: if called inside a stage compute, or from the worker thread.
            TimeoutError: if the job does not end in time (the hold stays set: call
                ``drain`` again to keep waiting, or :meth:`resume`).
            BaseException: the exception ``job`` raised, if it raised.
        """
        owner = "BubbleInterleaver.drain"
        wait = self.timeout if timeout is None else check_positive(owner, "timeout", timeout)
        self._check_not_worker("drain")
        with self._cond:
            self._raise_error_locked()
            if self._gate_closed:
                raise RuntimeError(
                    f"BubbleInterleaver: drain() called inside the stage compute "
                    f"{self._computing!r}; the job cannot finish while the gate is closed. "
                    "Call it between pipeline steps, after compute_end."
                )
            if not self._hold:
                self._hold = True
                if self._segment_start is not None and self._state == _RUNNING:
                    # The rest of the current job runs for the drain, not in a bubble.
                    now = self.timeline.now()
                    self._end_segment_locked(now)
                    self._segment_start, self._segment_drain = now, True
            done = self._wait_locked(lambda: not self._in_job, wait)
            self._raise_error_locked()
            if not done:
                raise TimeoutError(
                    f"BubbleInterleaver: drain() waited `timeout`={wait:g} s for LM job "
                    f"{self._jobs_started} to finish; it is still running (the hold stays set)."
                )

    def resume(self) -> None:
        """Lift the hold of :meth:`drain`; the worker starts its next job (no-op if none)."""
        with self._cond:
            self._hold = False
            self._cond.notify_all()

    @contextmanager
    def drained(self, timeout: float | None = None) -> Iterator[None]:
        """``drain(timeout)`` on entry, :meth:`resume` on exit (also on an exception)."""
        self.drain(timeout)
        try:
            yield
        finally:
            self.resume()

    def stop(self, timeout: float | None = None) -> None:
        """Let the current job finish, then end the worker.

        The gate and the hold no longer apply to the worker: a job parked inside a stage
        compute (``stop`` called before :meth:`compute_end`) runs on to its end.

        Idempotent; :meth:`start` may be called again afterwards.

        Args:
            timeout: seconds to wait for the thread (default: the interleaver's ``timeout``).

        Raises:
            RuntimeError: when called from the worker thread.
            TimeoutError: if the thread does not end in time.
            BaseException: the exception ``job`` raised, if it raised and was not re-raised
                yet.
        """
        wait = (
            self.timeout
            if timeout is None
            else check_positive("BubbleInterleaver.stop", "timeout", timeout)
        )
        self._check_not_worker("stop")
        with self._cond:
            thread = self._thread
            self._stop = True
            self._cond.notify_all()
        if thread is not None:
            thread.join(_finite(wait))
            if thread.is_alive():
                raise TimeoutError(
                    f"BubbleInterleaver: stop() waited `timeout`={wait:g} s for LM job "
                    f"{self._jobs_started} to finish; the worker thread is still running."
                )
        with self._cond:
            self._thread = None
            self._worker_ident = None
            self._state = _IDLE
            self._raise_error_locked()

    # ------------------------------------------------------------------ state, accounting
    @property
    def gate_open(self) -> bool:
        """``False`` while a stage compute is in progress (with ``enabled=True``)."""
        with self._cond:
            return not self._gate_closed

    @property
    def held(self) -> bool:
        """Whether a :meth:`drain` hold is set."""
        with self._cond:
            return self._hold

    @property
    def worker_state(self) -> str:
        """``"idle"``, ``"running"``, ``"parked"`` or ``"finished"``."""
        with self._cond:
            return self._state

    @property
    def jobs_started(self) -> int:
        """Calls of ``job`` begun so far (all runs of the worker)."""
        with self._cond:
            return self._jobs_started

    @property
    def jobs_done(self) -> int:
        """Calls of ``job`` that returned (not those that raised)."""
        with self._cond:
            return self._jobs_done

    @property
    def pauses(self) -> int:
        """Times the worker parked inside a job (at a hook or :meth:`pause_point`)."""
        with self._cond:
            return self._pauses

    @property
    def lm_bubble_seconds(self) -> float:
        """Seconds the LM ran with no hold set: inside the stage's bubbles."""
        with self._cond:
            return self._lm_seconds["bubble"]

    @property
    def lm_drain_seconds(self) -> float:
        """Seconds the LM ran under a :meth:`drain` hold: outside the bubbles."""
        with self._cond:
            return self._lm_seconds["drain"]

    @property
    def gate_wait_seconds(self) -> float:
        """Seconds :meth:`compute_begin` waited for the worker to park (the GNN's cost)."""
        with self._cond:
            return self._gate_wait_seconds


def _finite(timeout: float) -> float | None:
    """``None`` (wait forever) for an infinite timeout, which ``threading`` rejects."""
    return None if timeout == float("inf") else timeout


def _depth(qualified_name: str) -> int:
    return 0 if not qualified_name else qualified_name.count(".") + 1


def _is_module_types(value: Any) -> bool:
    if isinstance(value, type):
        return issubclass(value, nn.Module)
    return (
        isinstance(value, tuple)
        and len(value) > 0
        and all(isinstance(t, type) and issubclass(t, nn.Module) for t in value)
    )
