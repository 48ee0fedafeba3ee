"""BubbleInterleaver: LM jobs on a worker thread run only in the bubbles of a pipeline stage.

A tiny random BERT is the LM; the main thread plays one GPipe stage (computes bracketed by
``compute_begin`` / ``compute_end``, sleeps for bubbles, a drain between steps). The
Timeline is the evidence: with the gate no LM segment overlaps a GNN interval; without it
(``enabled=False``, the negative control) the same workload overlaps.

Forced rendezvous make the interesting interleavings deterministic: a test hook holds the
LM inside a chosen job's forward (or backward) until the stage starts computing, so that
the worker must park at a pause point in the middle of that job.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable

import pytest
import torch
from torch import nn

from lightgraph.distributed import BubbleInterleaver, Timeline

WAIT = 5.0  # seconds any test waits for the other thread before failing


def tiny_bert(seed: int = 0) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        # The default CPU generator is process-wide: dropout draws would interleave with the
        # stage's draws and make the gradient comparison meaningless.
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertModel(config)


def batches(n: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 50, (4, 16), generator=g) for _ in range(n)]


class Rendezvous:
    """Holds the LM at chosen points until the stage computes (or the compute is over).

    ``points[i] = (job, phase)``: before the stage's ``i``-th compute, the main thread waits
    until job ``job`` (1-based) has reached ``phase`` (``"forward"``: the forward of encoder
    layer 1; ``"backward"``: the gradient of encoder layer 2's output). The LM then waits
    there until the gate closes (gated: it parks at its next pause point, mid-job) or, with
    the gate off, until that compute has ended (so LM and GNN surely overlap).
    """

    def __init__(self, interleaver: BubbleInterleaver, points: list[tuple[int, str]]) -> None:
        self.interleaver = interleaver
        self.points = points
        self.reached = {p: threading.Event() for p in points}
        self.released = {p: threading.Event() for p in points}

    def hold(self, job: int, phase: str) -> None:  # worker thread
        key = (job, phase)
        if key not in self.reached:
            return
        self.reached[key].set()
        deadline = time.monotonic() + WAIT
        while self.interleaver.gate_open and not self.released[key].wait(0.001):
            if time.monotonic() > deadline:
                break

    def before_compute(self, i: int) -> None:  # main thread
        if i < len(self.points):
            assert self.reached[self.points[i]].wait(WAIT), f"LM never reached {self.points[i]}"

    def after_compute(self, i: int) -> None:
        if i < len(self.points):
            self.released[self.points[i]].set()


class LMJob:
    """One LM batch per call: forward, squared-mean loss, backward (gradients accumulate)."""

    def __init__(self, lm: nn.Module, data: list[torch.Tensor], limit: int | None = None) -> None:
        self.lm, self.data, self.limit = lm, data, limit
        self.started = 0
        self.completed = 0
        self.phase = "idle"
        self.thread: threading.Thread | None = None
        self.rendezvous: Rendezvous | None = None
        lm.encoder.layer[1].register_forward_pre_hook(self._forward_point)
        lm.encoder.layer[2].register_forward_hook(self._backward_point)

    def _forward_point(self, module: nn.Module, args: object) -> None:
        if self.rendezvous is not None and threading.current_thread() is self.thread:
            self.rendezvous.hold(self.started, "forward")

    def _backward_point(self, module: nn.Module, args: object, out: torch.Tensor) -> None:
        if self.rendezvous is not None and threading.current_thread() is self.thread:
            job, rv = self.started, self.rendezvous
            out.register_hook(lambda grad: rv.hold(job, "backward"))

    def __call__(self) -> bool:
        self.thread = threading.current_thread()
        self.started += 1
        ids = self.data[(self.started - 1) % len(self.data)]
        self.phase = "forward"
        loss = self.lm(input_ids=ids).last_hidden_state.pow(2).mean()
        self.phase = "backward"
        loss.backward()
        self.phase = "idle"
        self.completed += 1
        return self.limit is None or self.completed < self.limit


def gnn_compute(x: torch.Tensor, w: torch.Tensor, kind: str) -> None:
    """A few ms of a stage's work on the main thread, with autograd in the backward."""
    if kind == "forward":
        with torch.no_grad():
            for _ in range(40):
                x = torch.tanh(x @ w)
    else:
        w = w.detach().requires_grad_()
        y = x
        for _ in range(20):
            y = torch.tanh(y @ w)
        y.sum().backward()


def run_stage(
    interleaver: BubbleInterleaver,
    steps: int = 3,
    microbatches: int = 2,
    bubble_s: float = 0.004,
    rendezvous: Rendezvous | None = None,
    during_compute: Callable[[int], None] | None = None,
    between_steps: Callable[[], None] | None = None,
) -> None:
    """GPipe F-then-B on one stage: ``microbatches`` forwards, then as many backwards, a
    bubble after each compute, and a drain (the LM optimizer's turn) after every step."""
    x, w = torch.randn(64, 128), torch.randn(128, 128) / 12
    i = 0
    for _ in range(steps):
        for kind in ("forward", "backward"):
            for _ in range(microbatches):
                if rendezvous is not None:
                    rendezvous.before_compute(i)
                interleaver.compute_begin(kind)
                if during_compute is not None:
                    during_compute(i)
                gnn_compute(x, w, kind)
                interleaver.compute_end(kind)
                if rendezvous is not None:
                    rendezvous.after_compute(i)
                i += 1
                time.sleep(bubble_s)
        with interleaver.drained():
            if between_steps is not None:
                between_steps()


def snapshot_job(job: LMJob, seen: list[tuple[str, int]]) -> Callable[[int], None]:
    def during(i: int) -> None:
        seen.append((job.phase, job.completed))

    return during


def wait_finished(interleaver: BubbleInterleaver) -> None:
    deadline = time.monotonic() + WAIT
    while interleaver.worker_state != "finished" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert interleaver.worker_state == "finished"


# ---------------------------------------------------------------------------- exclusion
@pytest.mark.timeout(30)
@pytest.mark.filterwarnings("ignore:Full backward hook")
@pytest.mark.parametrize("backward", ["tensor", "module"])
def test_lm_runs_only_in_bubbles_and_parks_mid_forward_and_mid_backward(backward: str) -> None:
    lm = tiny_bert()
    job = LMJob(lm, batches(8))
    interleaver = BubbleInterleaver(timeline=Timeline())
    assert interleaver.attach(lm, backward=backward) == 55  # every leaf of the tiny BERT
    job.rendezvous = Rendezvous(interleaver, [(1, "forward"), (2, "backward")])
    seen: list[tuple[str, int]] = []
    interleaver.start(job)
    run_stage(interleaver, rendezvous=job.rendezvous, during_compute=snapshot_job(job, seen))
    interleaver.stop()

    # The stage's 1st compute found job 1 parked inside its forward, the 2nd found job 2
    # parked inside its backward: the hooks fire, and park, on the worker thread.
    assert seen[0] == ("forward", 0)
    assert seen[1] == ("backward", 1)
    assert interleaver.pauses >= 2

    timeline = interleaver.timeline
    lm_segments, gnn = timeline.intervals("lm"), timeline.intervals("gnn")
    assert len(gnn) == 3 * 4 and {i.label for i in gnn} == {"forward", "backward"}
    assert len(lm_segments) > interleaver.jobs_done  # jobs were split at pause points
    assert timeline.overlaps("lm", "gnn") == []
    assert interleaver.jobs_done > 0 and interleaver.jobs_done == job.completed
    assert interleaver.lm_bubble_seconds > 0
    assert interleaver.lm_bubble_seconds + interleaver.lm_drain_seconds == pytest.approx(
        timeline.busy_time("lm")
    )


@pytest.mark.timeout(30)
def test_negative_control_without_the_gate_the_timeline_shows_overlap() -> None:
    lm = tiny_bert()
    job = LMJob(lm, batches(8))
    interleaver = BubbleInterleaver(enabled=False)
    interleaver.attach(lm)
    job.rendezvous = Rendezvous(interleaver, [(1, "forward"), (2, "backward")])
    seen: list[tuple[str, int]] = []
    interleaver.start(job)
    run_stage(interleaver, rendezvous=job.rendezvous, during_compute=snapshot_job(job, seen))
    interleaver.stop()

    assert seen[0] == ("forward", 0) and seen[1] == ("backward", 1)  # LM busy during GNN
    assert interleaver.pauses == 0 and interleaver.gate_wait_seconds == 0
    pairs = interleaver.timeline.overlaps("lm", "gnn")
    gnn = interleaver.timeline.intervals("gnn")
    overlapped = {y for _, y in pairs}
    assert gnn[0] in overlapped and gnn[1] in overlapped
    assert {x.label for x, _ in pairs} >= {"job 1", "job 2"}


@pytest.mark.timeout(30)
def test_pausing_does_not_change_the_lm_gradients() -> None:
    data = batches(4)
    reference = tiny_bert()
    gated = copy.deepcopy(reference)

    plain = LMJob(reference, data, limit=4)
    while plain():
        pass

    job = LMJob(gated, data, limit=4)
    interleaver = BubbleInterleaver()
    interleaver.attach(gated)
    job.rendezvous = Rendezvous(interleaver, [(1, "forward"), (2, "backward")])
    interleaver.start(job)
    run_stage(interleaver, steps=1, rendezvous=job.rendezvous)
    wait_finished(interleaver)  # the remaining jobs run after the pipeline's last step
    interleaver.stop()

    assert job.completed == plain.completed == 4 and interleaver.pauses >= 2
    assert interleaver.timeline.overlaps() == []
    for (name, p), (_, q) in zip(
        reference.named_parameters(), gated.named_parameters(), strict=True
    ):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad), name


@pytest.mark.timeout(30)
def test_lm_called_from_the_main_thread_does_not_park() -> None:
    lm = tiny_bert()
    interleaver = BubbleInterleaver(timeout=2.0)
    interleaver.attach(lm)
    interleaver.start(LMJob(lm, batches(2)))
    interleaver.compute_begin("forward")
    out = lm(input_ids=batches(1)[0]).last_hidden_state  # e.g. embeddings for the GNN
    out.sum().backward()  # hooks fire on this thread too, and pass
    interleaver.compute_end("forward")
    interleaver.stop()
    assert interleaver.timeline.overlaps() == []


# ---------------------------------------------------------------------------- drain
class SlowJob:
    """Job 1 waits for ``release`` (no pause point); counts starts and completions."""

    def __init__(self) -> None:
        self.started = 0
        self.completed = 0
        self.inside = threading.Event()
        self.release = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self) -> bool:
        self.thread = threading.current_thread()
        self.started += 1
        self.inside.set()
        assert self.release.wait(WAIT)
        time.sleep(0.001)
        self.completed += 1
        return True


@pytest.mark.timeout(15)
def test_drain_finishes_the_current_job_and_holds_until_resume() -> None:
    job = SlowJob()
    interleaver = BubbleInterleaver()
    interleaver.drain()  # nothing started: returns at once
    interleaver.resume()
    interleaver.start(job)
    assert job.inside.wait(WAIT)
    timer = threading.Timer(0.05, job.release.set)
    timer.start()
    interleaver.drain()  # waits for job 1 (released by the timer)
    timer.join()
    assert job.started == job.completed == interleaver.jobs_started == interleaver.jobs_done == 1
    assert interleaver.held and interleaver.worker_state == "parked"
    # The held worker starts nothing, computes or not.
    interleaver.compute_begin("forward")
    interleaver.compute_end("forward")
    time.sleep(0.05)
    assert job.started == job.completed == 1
    interleaver.drain()  # idempotent
    lm = interleaver.timeline.intervals("lm")
    assert [i.label for i in lm] == ["job 1", "job 1 (drain)"]  # split where drain began
    assert interleaver.lm_drain_seconds > 0
    assert interleaver.lm_drain_seconds == pytest.approx(lm[1].duration)

    interleaver.resume()
    deadline = time.monotonic() + WAIT
    while interleaver.jobs_done < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert interleaver.jobs_done >= 3
    with interleaver.drained():
        assert job.started == job.completed == interleaver.jobs_done
    thread = job.thread
    interleaver.stop()
    assert thread is not None and not thread.is_alive()
    assert interleaver.worker_state == "idle"
    assert job.started == job.completed  # stop also lets the current job finish


def test_drain_inside_a_compute_is_an_error() -> None:
    interleaver = BubbleInterleaver()
    interleaver.compute_begin("backward")
    with pytest.raises(RuntimeError, match=r"drain\(\) called inside the stage compute 'backward'"):
        interleaver.drain()
    interleaver.compute_end("backward")


# ---------------------------------------------------------------------------- errors
class FailingJob:
    def __init__(self, fail_at: int, gate: threading.Event | None = None) -> None:
        self.calls = 0
        self.fail_at = fail_at
        self.gate = gate

    def __call__(self) -> bool:
        self.calls += 1
        if self.calls == self.fail_at:
            if self.gate is not None:
                assert self.gate.wait(WAIT)
            raise ValueError(f"boom in LM job {self.calls}")
        return True


@pytest.mark.timeout(15)
@pytest.mark.parametrize("where", ["compute_begin", "drain", "stop"])
def test_an_exception_in_the_job_surfaces_in_the_caller(where: str) -> None:
    interleaver = BubbleInterleaver()
    interleaver.start(FailingJob(fail_at=3))
    wait_finished(interleaver)
    call = {
        "compute_begin": lambda: interleaver.compute_begin("forward"),
        "drain": interleaver.drain,
        "stop": interleaver.stop,
    }[where]
    with pytest.raises(ValueError, match="^boom in LM job 3$"):
        call()
    interleaver.stop()  # raised once: a later call no longer raises
    assert interleaver.jobs_done == 2 and interleaver.jobs_started == 3


@pytest.mark.timeout(15)
def test_an_exception_while_compute_begin_waits_surfaces_there() -> None:
    gate = threading.Event()
    interleaver = BubbleInterleaver()
    interleaver.start(FailingJob(fail_at=1, gate=gate))
    timer = threading.Timer(0.05, gate.set)
    timer.start()
    with pytest.raises(ValueError, match="boom in LM job 1"):
        interleaver.compute_begin("forward")
    timer.join()
    assert interleaver.gate_open
    interleaver.stop()


@pytest.mark.timeout(15)
def test_a_job_returning_no_bool_is_an_error() -> None:
    interleaver = BubbleInterleaver()
    interleaver.start(lambda: None)  # type: ignore[arg-type, return-value]
    wait_finished(interleaver)
    with pytest.raises(
        TypeError, match="expected `job` to return True .* but it returned NoneType"
    ):
        interleaver.stop()


@pytest.mark.timeout(15)
def test_compute_begin_times_out_on_a_job_without_pause_points() -> None:
    job = SlowJob()
    interleaver = BubbleInterleaver(timeout=0.2)
    interleaver.start(job)
    assert job.inside.wait(WAIT)
    t0 = time.monotonic()
    with pytest.raises(
        TimeoutError,
        match=r"^BubbleInterleaver: compute_begin\('forward'\) waited `timeout`=0.2 s for the LM "
        r"worker to reach a pause point, but it is still running job 1",
    ):
        interleaver.compute_begin("forward")
    assert time.monotonic() - t0 >= 0.19
    assert interleaver.gate_open  # re-opened: no compute_end needed
    with pytest.raises(TimeoutError, match=r"drain\(\) waited `timeout`=0.05 s for LM job 1"):
        interleaver.drain(timeout=0.05)
    job.release.set()
    interleaver.drain()
    interleaver.resume()
    interleaver.stop()
    assert interleaver.timeline.intervals("gnn") == []


@pytest.mark.timeout(15)
def test_observer_calls_from_the_worker_thread_are_refused() -> None:
    interleaver = BubbleInterleaver()

    def job() -> bool:
        interleaver.compute_begin("forward")
        return False

    interleaver.start(job)
    wait_finished(interleaver)
    with pytest.raises(RuntimeError, match="compute_begin called from the LM worker thread"):
        interleaver.stop()


# ---------------------------------------------------------------------------- arguments
def test_observer_protocol_and_argument_errors() -> None:
    interleaver = BubbleInterleaver()
    with pytest.raises(
        ValueError,
        match=r"^BubbleInterleaver.compute_begin: expected `kind` to be a non-empty string but "
        r"got ''.$",
    ):
        interleaver.compute_begin("")
    with pytest.raises(RuntimeError, match=r"compute_end\('forward'\) called but the compute in "):
        interleaver.compute_end("forward")
    interleaver.compute_begin("forward")  # no worker: returns at once
    with pytest.raises(RuntimeError, match="while the compute 'forward' is in progress"):
        interleaver.compute_begin("backward")
    with pytest.raises(RuntimeError, match="the compute in progress is 'forward'"):
        interleaver.compute_end("backward")
    interleaver.compute_end("forward")
    interleaver.compute_begin("loss")  # FlowPipeline's last stage also reports its loss
    interleaver.compute_end("loss")
    assert [i.label for i in interleaver.timeline.intervals("gnn")] == ["forward", "loss"]

    with pytest.raises(ValueError, match=r"^BubbleInterleaver: expected `timeout` > 0 but got 0."):
        BubbleInterleaver(timeout=0)
    with pytest.raises(ValueError, match="expected `enabled` to be one of \\(True, False\\)"):
        BubbleInterleaver(enabled=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected `timeline` to be a"):
        BubbleInterleaver(timeline=[])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected `job` to be a callable"):
        interleaver.start(42)  # type: ignore[arg-type]


@pytest.mark.timeout(15)
def test_start_twice_is_an_error_and_stop_then_start_works() -> None:
    job = SlowJob()
    job.release.set()
    interleaver = BubbleInterleaver()
    interleaver.start(job)
    with pytest.raises(RuntimeError, match=r"start\(\) called while the LM worker is running"):
        interleaver.start(job)
    interleaver.stop()
    interleaver.stop()  # idempotent
    done = interleaver.jobs_done
    interleaver.start(job)
    deadline = time.monotonic() + WAIT
    while interleaver.jobs_done == done and time.monotonic() < deadline:
        time.sleep(0.001)
    interleaver.stop()
    assert interleaver.jobs_done > done


def test_attach_granularity_selects_modules_and_detach_removes_hooks() -> None:
    transformers = pytest.importorskip("transformers")
    lm = tiny_bert()
    interleaver = BubbleInterleaver()
    assert interleaver.attach(lm, granularity="all") == len(list(lm.modules()))
    interleaver.detach()
    assert interleaver.attach(lm, granularity=0) == 1
    interleaver.detach()
    assert interleaver.attach(lm, granularity=1) == 4  # BertModel + embeddings/encoder/pooler
    interleaver.detach()
    layer_type = transformers.models.bert.modeling_bert.BertLayer
    assert interleaver.attach(lm, granularity=layer_type, backward="none") == 4
    assert interleaver.attach(lm, granularity=(nn.Linear, nn.LayerNorm)) > 4
    interleaver.detach()
    assert all(
        not m._forward_pre_hooks and not m._forward_hooks and not m._backward_pre_hooks
        for m in lm.modules()
    )
    with pytest.raises(
        ValueError,
        match=r"^BubbleInterleaver.attach: expected `granularity` to be one of 'leaf', 'all', "
        r"an integer depth >= 0, or an nn.Module type or tuple of types but got 'leaves'.$",
    ):
        interleaver.attach(lm, granularity="leaves")
    with pytest.raises(ValueError, match="selects none"):
        interleaver.attach(lm, granularity=nn.Conv2d)
    with pytest.raises(
        ValueError, match=r"expected `backward` to be one of \('tensor', 'module', "
    ):
        interleaver.attach(lm, backward="full")
    with pytest.raises(TypeError, match="expected `lm` to be a"):
        interleaver.attach("bert")  # type: ignore[arg-type]


def test_satisfies_the_pipeline_runtimes_compute_observer_protocol() -> None:
    flow_pipeline = pytest.importorskip("lightgraph.distributed.flow_pipeline")
    assert isinstance(BubbleInterleaver(), flow_pipeline.ComputeObserver)
