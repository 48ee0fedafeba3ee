"""The GPU headline measurements of ``benchmarks/gpu_check.py``: five comparisons, one run.

Each headline is a function ``fn(device, small) -> dict`` listed in :data:`HEADLINES`;
``benchmarks/gpu_check.py`` imports this module (``import gpu_headlines`` with
``benchmarks/`` on ``sys.path``) and calls them, and it runs alone too::

    python benchmarks/gpu_headlines.py                 # on the GPU, full sizes
    python benchmarks/gpu_headlines.py --cpu           # on the CPU, small sizes
    python benchmarks/gpu_headlines.py --json out.json --only quantize sampler

Every headline returns a JSON-able dict::

    {"ok": bool, "metrics": {...}, "goal": str | None, "goal_met": bool | None,
     "notes": str, "seconds": float, "warnings": [str, ...]}

``ok`` is ``False`` only for an error or a wrong result (a numeric check against an
independent reference failed); a goal that is missed sets ``goal_met = False`` and leaves
``ok`` alone. ``goal_met`` is ``None`` where the goal cannot be judged (a GPU-against-CPU
goal measured on the CPU). ``seconds`` is the headline's wall time, warm-up and
compilation included; ``warnings`` the distinct warnings it raised (a kernel falling back
to its eager path warns, so read them).

Timing: the compared arms alternate within one loop (A, B, A, B, ...) after untimed
warm-up rounds, every call is bracketed by a device synchronisation, and the medians are
reported (:func:`median_time`).

Headlines (sizes: CUDA / ``small``):

1. ``quantize``: ``pack_rows`` (quantise + pack) and ``unpack_rows`` (unpack +
   dequantise) of 2M x 128 / 20k x 64 float32 rows against one device copy of the rows
   (``x.clone()``), for 2, 4 and 8 bits and mixed per-row widths, on every path of the
   device (CUDA: ``path="triton"``, the fused kernels and the default, and
   ``path="torch"``, the reference with its compiled counter core). Goal, on the fused
   path: each at most 2x the copy at one width, 3x mixed, and the 2-bit exchange of the
   block over a 25 GB/s link (pack + message / bandwidth + unpack, computed from the
   measured times) faster than sending the float32 rows. Checked: every dequantised element within one quantisation step of its
   input (the step bound of the quantiser's docs: at most one bfloat16 ulp above
   ``(max - min) / (2^b - 1)``), the mean error unbiased within 6 standard errors, and
   on CUDA the message bytes equal the CPU path's for the same seed (first 16k rows).
2. ``sampler``: ``sample_neighbors`` (fanouts 15/10/5, 1000 seeds) on a random
   graph of 1M / 20k nodes, average in-degree 15, on the device (with a CUDA generator,
   and with a CPU generator as stage 2 uses) against the CPU, per batch. Checked: with
   one CPU generator the device sample equals the CPU sample; every sampled edge is an
   edge of the graph; every expanded node keeps ``min(deg, k)`` distinct in-edges.
3. ``joestar_stage2``: per mini-batch, NS on the host (``sample_minibatch`` on the CPU,
   which samples and gathers ``x``/``y``, then the batch's copy to the device) against
   JOESTAR's stage 2 on the device (``stage_two`` over a ``DeviceMacroBatch``: sampling
   and gathering on the device) plus the one-off macro-batch transfer amortised over its
   mini-batches; also a training step (3-layer GraphSAGE, hidden 128, destination-only
   layers, Adam) on either batch, so the ratio is also given per training step.
   Stage 2 with ``node_ids`` (what ``MultistageDataModule`` passes) is timed apart.
   Checked: the device mini-batch equals the host's stage-2 sample of the same
   macro-batch; its rows are ``x[n_id]``; every edge of both arms is a graph edge.
4. ``attention``: forward + backward of FlexAttention over the cluster-sparse layout
   (``cluster_sparse_attention(..., implementation="flex")``) against the CSR kernel
   (``attend(..., kind="sparse")``), S = 64K / 2K tokens, 8 heads of dimension 8, a
   local pattern of about 16 entries per query. Checked: outputs and gradients agree
   (relative error < 1e-3); at S <= 4K both against a float64 dense masked softmax.
   Where FlexAttention cannot run forward + backward (the CPU) it is reported skipped.
5. ``resume``: a tiny neighbour-sampled GraphSAGE training run (dropout 0.5 on the
   device, so every step draws from the device's generator) with
   :class:`~lightgraph.callbacks.RandomStateCheckpoint`: 4 epochs straight against 2
   epochs and a resume from the checkpoint; final weights and optimiser state must be
   bitwise equal (``Trainer(deterministic="warn")``: CUDA's deterministic kernels where
   it has them; the process-wide flags are restored afterwards). A resume without the callback must differ (else nothing random was
   drawn and the check proves nothing); a second straight run tells a
   non-deterministic kernel from a bad resume when they differ.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch_geometric.nn.models import GraphSAGE

from lightgraph.callbacks import RandomStateCheckpoint
from lightgraph.data import SyntheticGraph
from lightgraph.data.loader.minibatch import sample_minibatch
from lightgraph.data.loader.multistage import (
    DeviceMacroBatch,
    StageOneBatch,
    lbs_stage_one,
    stage_two,
    stage_two_generator,
)
from lightgraph.data.loader.neighbor_sampler import neighbor_loader
from lightgraph.functional.attention import (
    AttentionGraph,
    attend,
    cluster_sparse_attention,
    default_num_clusters,
    flex_available,
)
from lightgraph.functional.neighbor_sampling import make_node_buffer, sample_neighbors, to_csc
from lightgraph.functional.quantize import BITS, pack_rows, unpack_rows
from lightgraph.models import MiniBatchNodeClassifier
from lightgraph.nn.destination import destination_forward
from lightgraph.utilities import seed_global_rngs
from lightgraph.utilities.random_state import make_generator

Result = dict[str, Any]
Headline = Callable[[torch.device, bool], Result]

FANOUTS = [15, 10, 5]
AVG_DEGREE = 15


# ------------------------------------------------------------------------------ helpers
def device_sync(device: torch.device) -> Callable[[], None]:
    """A function that waits for ``device``'s queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        return functools.partial(torch.cuda.synchronize, device)
    return lambda: None


#: Set by :func:`headline` for a small run on the CPU (``gpu_check.py --cpu``, as in the
#: suite): :func:`median_time` then makes at most one warm-up and two timed rounds.
_QUICK = False


def median_time(
    fns: Sequence[Callable[[], Any]],
    reps: int,
    sync: Callable[[], None],
    warmup: int = 1,
    budget_s: float | None = None,
) -> list[float]:
    """Median seconds of every ``fn`` in ``fns``, the calls interleaved.

    Runs ``warmup`` untimed rounds, then ``reps`` timed ones; each round calls every
    ``fn`` once, in order (A, B, A, B, ...), so all arms see the same machine state. Each
    call is bracketed by ``sync()`` (e.g. ``torch.cuda.synchronize``) before the clock is
    read. With ``budget_s``, the timed rounds stop once they have taken that long (after
    at least 3, or ``reps`` if fewer), so a slow machine cannot overrun a time limit.
    """
    if reps < 1:
        raise ValueError(f"median_time: expected `reps` >= 1 but got {reps}.")
    if _QUICK:  # the small CPU mode: the timed loops only show that they run
        warmup, reps = min(warmup, 1), min(reps, 2)
    times: list[list[float]] = [[] for _ in fns]
    started = None
    for rnd in range(warmup + reps):
        if rnd == warmup:
            started = time.perf_counter()
        elif (
            budget_s is not None
            and started is not None
            and rnd - warmup >= min(3, reps)
            and time.perf_counter() - started > budget_s
        ):
            break
        for i, fn in enumerate(fns):
            sync()
            tic = time.perf_counter()
            fn()
            sync()
            if rnd >= warmup:
                times[i].append(time.perf_counter() - tic)
    return [statistics.median(t) for t in times]


def _result(
    ok: bool,
    metrics: dict[str, Any],
    goal: str | None = None,
    goal_met: bool | None = None,
    notes: str = "",
) -> Result:
    return {"ok": ok, "metrics": metrics, "goal": goal, "goal_met": goal_met, "notes": notes}


def _ms(seconds: float) -> float:
    return round(1e3 * seconds, 4)


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """``max |got - want| / max |want|`` (in float64)."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    scale = float(want.abs().max()) or 1.0
    return float((got - want).abs().max()) / scale


def headline(fn: Headline) -> Headline:
    """Wrap a headline: time it, record its warnings, turn an exception into ``ok=False``
    (with the traceback's tail in ``notes``) and free the device's cached memory."""

    @functools.wraps(fn)
    def run(device: torch.device, small: bool) -> Result:
        global _QUICK
        device = torch.device(device)
        _QUICK = small and device.type == "cpu"
        tic = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = fn(device, small)
            except Exception as err:  # noqa: BLE001 - reported, never raised
                tail = "".join(traceback.format_exception(err)[-6:])
                out = _result(False, {}, notes=f"error: {err!r}\n{tail}")
        out["seconds"] = round(time.perf_counter() - tic, 3)
        seen: dict[str, None] = {}
        for w in caught:
            seen.setdefault(f"{w.category.__name__}: {str(w.message)[:300]}", None)
        out["warnings"] = list(seen)[:20]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        return out

    return run


def random_csc(
    num_nodes: int, avg_degree: int, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """CSC ``(indptr, indices)`` of a uniform random graph, ``avg_degree * num_nodes``
    edges (built on ``device`` with :func:`~lightgraph.functional.neighbor_sampling.to_csc`)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    num_edges = avg_degree * num_nodes
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen, device=device)
    indptr, indices = to_csc(edge_index, num_nodes)  # type: ignore[misc]
    return indptr, indices


def missing_edges(
    indptr: torch.Tensor, indices: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
) -> int:
    """How many of the edges ``src -> dst`` (global ids) the CSC graph lacks (CPU).

    ``to_csc`` sorts the sources of every destination, so the keys ``dst * N + src`` of
    the CSC's edges are ascending and a binary search finds each edge.
    """
    indptr, indices, src, dst = (t.cpu().long() for t in (indptr, indices, src, dst))
    n = indptr.numel() - 1
    deg = indptr[1:] - indptr[:-1]
    keys = torch.repeat_interleave(torch.arange(n), deg) * n + indices
    want = dst * n + src
    pos = torch.searchsorted(keys, want).clamp(max=max(keys.numel() - 1, 0))
    found = keys.numel() > 0 and keys[pos] == want
    return int(want.numel() - (found.sum() if isinstance(found, torch.Tensor) else 0))


def sample_errors(
    indptr: torch.Tensor, indices: torch.Tensor, sample: Any, fanouts: Sequence[int]
) -> list[str]:
    """What is wrong with a ``NeighborSample`` of the CSC graph (empty: nothing): edges
    that are not graph edges, expanded nodes without ``min(deg, k)`` distinct in-edges."""
    errors: list[str] = []
    indptr, indices = indptr.cpu().long(), indices.cpu().long()
    node, row, col, edge = (t.cpu().long() for t in sample[:4])
    src, dst = node[row], node[col]
    if int(edge.min()) < 0 or int(edge.max()) >= indices.numel():
        errors.append("edge ids out of range")
        return errors
    if not torch.equal(indices[edge], src):
        errors.append("indices[edge] != source of the sampled edge")
    if not bool(((indptr[dst] <= edge) & (edge < indptr[dst + 1])).all()):
        errors.append("a sampled edge id lies outside its destination's CSC range")
    if missing_edges(indptr, indices, src, dst):
        errors.append("sampled edges missing from the graph")
    if torch.unique(edge).numel() != edge.numel():
        errors.append("an edge was sampled twice (sampling is without replacement)")
    starts = [0, *itertools.accumulate(sample.num_sampled_nodes)]
    e0 = 0
    for hop, k in enumerate(fanouts):
        lo, hi = starts[hop], starts[hop + 1]  # the frontier expanded at this hop
        e1 = e0 + sample.num_sampled_edges[hop]
        got = torch.bincount(col[e0:e1] - lo, minlength=hi - lo)
        if got.numel() != hi - lo:
            errors.append(f"hop {hop}: edges into nodes outside its frontier")
            break
        deg = indptr[node[lo:hi] + 1] - indptr[node[lo:hi]]
        want = deg if k < 0 else deg.clamp(max=k)
        if not torch.equal(got, want):
            errors.append(f"hop {hop}: in-edges per node != min(deg, {k})")
        e0 = e1
    return errors


# --------------------------------------------------------------------------- quantize
LINK_GBPS = 25.0  # the GPU link of the exchange estimate (docs/quantization.md)


def _quantize_paths(device: torch.device) -> list[str]:
    """The paths timed: on CUDA the fused Triton kernels and the torch reference (with its
    compiled counter core); elsewhere the default path."""
    if device.type != "cuda":
        return ["auto"]
    from lightgraph.functional.quantize import fused_triton

    paths = ["torch"]
    if fused_triton.triton_unavailable() is None:
        paths.insert(0, "triton")
    return paths


@headline
def quantize_headline(device: torch.device, small: bool) -> Result:
    """Quantise+pack and unpack(+dequantise) against a device copy of the rows, per path."""
    rows, dim = (20_000, 64) if small else (2_000_000, 128)
    reps = 5 if small else 10
    sync = device_sync(device)
    gen = torch.Generator().manual_seed(0)
    on_device = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, dim, generator=on_device, device=device)
    x.mul_(torch.rand(rows, 1, generator=on_device, device=device) * 4 + 0.01)  # row ranges
    cases: dict[str, torch.Tensor] = {str(b): torch.full((rows,), b) for b in (2, 4, 8)}
    cases["mixed"] = torch.tensor(BITS).repeat(-(-rows // len(BITS)))[:rows][
        torch.randperm(rows, generator=gen)
    ]
    cases = {k: v.to(device) for k, v in cases.items()}
    paths = _quantize_paths(device)

    metrics: dict[str, Any] = {"rows": rows, "dim": dim, "paths": paths}
    errors: list[str] = []
    for path in paths:
        tic = time.perf_counter()
        first = pack_rows(x, cases["mixed"], path=path)  # compiles the kernels
        unpack_rows(first, cases["mixed"], dim, path=path)
        sync()
        metrics[f"first_call_s[{path}]"] = round(time.perf_counter() - tic, 3)
        del first

    worst: dict[str, list[float]] = {path: [] for path in paths}
    for case, rb in cases.items():
        fns: list[Callable[[], Any]] = [lambda: x.clone()]
        for path in paths:
            buf = pack_rows(x, rb, path=path)
            fns.append(lambda rb=rb, path=path: pack_rows(x, rb, path=path))
            fns.append(lambda rb=rb, buf=buf, path=path: unpack_rows(buf, rb, dim, path=path))
        times = median_time(fns, reps, sync, warmup=2, budget_s=3.0 * len(paths))
        copy_s = times[0]
        entry: dict[str, Any] = {"copy_ms": _ms(copy_s), "fp32_bytes": rows * dim * 4}
        for i, path in enumerate(paths):
            pack_s, unpack_s = times[1 + 2 * i], times[2 + 2 * i]
            buf = pack_rows(x, rb, path=path)
            out = unpack_rows(buf, rb, dim, path=path)
            # Independent bound: the step of a row is at most one bfloat16 ulp (2^-7) above
            # (max - min) / (2^b - 1); stochastic rounding errs by less than one step.
            mn, mx = x.aminmax(dim=1)
            qmax = (2 ** rb.double()) - 1
            step = (mx.double() - mn.double()) / qmax * (1 + 2**-7)
            err = out.double() - x.double()
            slack = step[:, None] * 1e-6 + x.double().abs() * 2**-22
            excess = float((err.abs() - step[:, None] - slack).max())
            if excess > 0:
                errors.append(
                    f"{path}/{case}: an element errs by more than one step ({excess:.3g})"
                )
            # Unbiased: per-element variance <= step^2 / 4.
            se = math.sqrt(float((step**2).mean()) / 4 / err.numel())
            bias = float(err.mean())
            if abs(bias) > 6 * se:
                errors.append(f"{path}/{case}: mean error {bias:.3g} exceeds 6 s.e. ({se:.3g})")
            # The exchange of one layer's halo over a LINK_GBPS link, computed from the
            # measured kernel times: FP32 sends the rows; quantised packs, sends, unpacks.
            link = LINK_GBPS * 1e9
            fp32_exchange = rows * dim * 4 / link
            quant_exchange = pack_s + buf.numel() / link + unpack_s
            entry[path] = {
                "pack_ms": _ms(pack_s),
                "unpack_ms": _ms(unpack_s),
                "pack_vs_copy": round(pack_s / copy_s, 3),
                "unpack_vs_copy": round(unpack_s / copy_s, 3),
                "message_bytes": int(buf.numel()),
                "mean_error": bias,
                "mean_error_se_bound": se,
                "exchange_ms_fp32_computed": _ms(fp32_exchange),
                "exchange_ms_quantised_computed": _ms(quant_exchange),
            }
            worst[path] += [pack_s / copy_s, unpack_s / copy_s]
            del buf, out, err
        metrics[case] = entry

    if device.type == "cuda":  # the same seed gives the same bytes on every path
        part, rb = x[: 1 << 14], cases["mixed"][: 1 << 14]
        cpu_buf = pack_rows(part.cpu(), rb.cpu(), torch.Generator().manual_seed(5))
        for path in paths:
            dev_buf = pack_rows(part, rb, torch.Generator().manual_seed(5), path=path)
            same = torch.equal(dev_buf.cpu(), cpu_buf)
            metrics[f"cuda_bytes_equal_cpu[{path}]"] = same
            if not same:
                errors.append(f"{path}: the CUDA message differs from the CPU message")

    fused = paths[0]
    single = max(
        max(metrics[c][fused]["pack_vs_copy"], metrics[c][fused]["unpack_vs_copy"])
        for c in ("2", "4", "8")
    )
    mixed = max(metrics["mixed"][fused]["pack_vs_copy"], metrics["mixed"][fused]["unpack_vs_copy"])
    two_bit = metrics["2"][fused]
    faster = two_bit["exchange_ms_quantised_computed"] < two_bit["exchange_ms_fp32_computed"]
    metrics["worst_ratio_vs_copy"] = {p: round(max(v), 3) for p, v in worst.items()}
    metrics["headline_path"] = fused
    return _result(
        not errors,
        metrics,
        goal=(
            f"path {fused}: quantise+pack and unpack <= 2x a device copy at 2/4/8 bits, "
            f"<= 3x mixed; 2-bit exchange faster than FP32 at {LINK_GBPS:g} GB/s (computed)"
        ),
        goal_met=single <= 2.0 and mixed <= 3.0 and faster,
        notes="; ".join(errors)
        or (
            "copy = one x.clone() of the float32 rows on the device; exchange times are "
            "computed from the measured kernel times and the message sizes, not measured "
            "over a link"
        ),
    )


# ---------------------------------------------------------------------------- sampler
@headline
def sampler_headline(device: torch.device, small: bool) -> Result:
    """``sample_neighbors`` on the device against the CPU, same graph, per batch."""
    num_nodes, batch = (20_000, 1000) if small else (1_000_000, 1000)
    reps, num_batches = (4, 4) if small else (10, 8)
    sync = device_sync(device)
    indptr_d, indices_d = random_csc(num_nodes, AVG_DEGREE, device)
    indptr_c, indices_c = indptr_d.cpu(), indices_d.cpu()
    if int(indices_d.sum()) != int(indices_c.sum()) or not torch.equal(indptr_d.cpu(), indptr_c):
        return _result(False, {}, notes="the CPU copy of the graph differs from the device's")
    gen = torch.Generator().manual_seed(1)
    seeds = torch.randperm(num_nodes, generator=gen)[: batch * num_batches].view(num_batches, -1)
    seeds_d = seeds.to(device)
    buf_c, buf_d = make_node_buffer(num_nodes), make_node_buffer(num_nodes, device)

    # Correctness on one batch: with one CPU generator the two devices draw the same.
    cpu = sample_neighbors(
        indptr_c,
        indices_c,
        seeds[0],
        FANOUTS,
        generator=torch.Generator().manual_seed(7),
        node_buffer=buf_c,
    )
    dev = sample_neighbors(
        indptr_d,
        indices_d,
        seeds_d[0],
        FANOUTS,
        generator=torch.Generator().manual_seed(7),
        node_buffer=buf_d,
    )
    errors = sample_errors(indptr_c, indices_c, cpu, FANOUTS)
    same = all(torch.equal(a.cpu(), b) for a, b in zip(dev[:4], cpu[:4], strict=True))
    same = same and list(dev[4:]) == list(cpu[4:])
    if not same:
        errors.append("the device sample differs from the CPU sample for one CPU generator")
    if not bool((buf_d == -1).all()) or not bool((buf_c == -1).all()):
        errors.append("a node buffer was not reset to -1")

    g_cpu, g_dev, g_mix = (torch.Generator().manual_seed(2), None, torch.Generator().manual_seed(3))
    if device.type == "cuda":
        g_dev = torch.Generator(device=device).manual_seed(2)
    order = {name: itertools.cycle(range(num_batches)) for name in ("c", "d", "m")}

    def on_cpu() -> Any:
        b = next(order["c"])
        return sample_neighbors(
            indptr_c, indices_c, seeds[b], FANOUTS, generator=g_cpu, node_buffer=buf_c
        )

    def on_device() -> Any:
        b = next(order["d"])
        return sample_neighbors(
            indptr_d, indices_d, seeds_d[b], FANOUTS, generator=g_dev, node_buffer=buf_d
        )

    def on_device_cpu_gen() -> Any:
        b = next(order["m"])
        return sample_neighbors(
            indptr_d, indices_d, seeds_d[b], FANOUTS, generator=g_mix, node_buffer=buf_d
        )

    t_cpu, t_dev, t_mix = median_time(
        [on_cpu, on_device, on_device_cpu_gen], reps, sync, warmup=2, budget_s=8.0
    )
    metrics = {
        "num_nodes": num_nodes,
        "num_edges": int(indices_c.numel()),
        "batch": batch,
        "fanouts": FANOUTS,
        "sampled_nodes": int(cpu.node.numel()),
        "sampled_edges": int(cpu.row.numel()),
        "cpu_ms": _ms(t_cpu),
        "device_ms": _ms(t_dev),
        "device_cpu_generator_ms": _ms(t_mix),
        "cpu_over_device": round(t_cpu / t_dev, 3),
        "cpu_over_device_cpu_generator": round(t_cpu / t_mix, 3),
        "cpu_threads": torch.get_num_threads(),
    }
    on_gpu = device.type == "cuda"
    return _result(
        not errors,
        metrics,
        goal="sampler faster on the GPU than on the CPU (cpu_over_device > 1)",
        goal_met=(t_cpu / t_dev > 1) if on_gpu else None,
        notes="; ".join(errors)
        or "sample_neighbors runs with intra_op_threads=1 (its default) on the CPU"
        + ("" if on_gpu else "; both arms on the CPU here"),
    )


# --------------------------------------------------------------------- JOESTAR stage 2
@headline
def joestar_stage2_headline(device: torch.device, small: bool) -> Result:
    """JOESTAR's stage 2 on the device against NS on the host, per mini-batch."""
    if small:
        num_nodes, features, batch, per_macro, rounds = 20_000, 32, 200, 4, 2
    else:  # 10 mini-batches per macro-batch: ratio 0.125 of 8 % training nodes
        num_nodes, features, batch, per_macro, rounds = 1_000_000, 128, 1000, 10, 2
    classes, seed = 16, 0
    second_stage = [-1] * len(FANOUTS)  # LBS's default: all neighbours in the macro-batch
    sync = device_sync(device)
    build = device if device.type == "cuda" else torch.device("cpu")
    indptr, indices = (t.cpu() for t in random_csc(num_nodes, AVG_DEGREE, build, seed=1))
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(
        num_nodes, features, generator=torch.Generator(build).manual_seed(2), device=build
    ).cpu()
    y = torch.randint(0, classes, (num_nodes,), generator=gen)
    node_ids = torch.arange(num_nodes)  # what a store hands stage 2 (here the identity)
    macro_seeds = torch.randperm(num_nodes, generator=gen)[: batch * per_macro]

    # Stage 1 on the host (in training: a background thread, one macro-batch ahead).
    tic = time.perf_counter()
    node, m_indptr, m_indices, mx, my = lbs_stage_one(
        indptr,
        indices,
        x,
        y,
        macro_seeds,
        FANOUTS,
        generator=make_generator(seed, "stage1", 0, 0),
        num_threads=2,
        node_buffer=make_node_buffer(num_nodes),
    )
    stage1_s = time.perf_counter() - tic
    assert mx is not None and my is not None
    local = torch.arange(macro_seeds.numel())
    macro = StageOneBatch(
        epoch=0,
        index=0,
        node=node,
        x=mx,
        y=my,
        indptr=m_indptr,
        indices=m_indices,
        num_inner=node.numel(),
        batches=list(local.split(batch)),
        num_seeds=macro_seeds.numel(),
        num_nodes_sampled=node.numel(),
    )

    def transfer() -> DeviceMacroBatch:  # as MultistageDataModule.to_device does
        moved = [
            t.to(device, non_blocking=True)
            for t in (macro.node, macro.x, macro.y, macro.indptr, macro.indices)
        ]
        return DeviceMacroBatch(macro, *moved)  # type: ignore[arg-type]

    (transfer_s,) = median_time([transfer], 3, sync, warmup=1)
    on_device = transfer()
    sync()

    model = GraphSAGE(features, 128, num_layers=3, out_channels=classes, dropout=0.5)
    model = model.to(device)
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)

    def train_step(data: Any) -> None:
        out, _ = destination_forward(
            model, data.x, data.edge_index, data.num_sampled_nodes, data.num_sampled_edges
        )
        loss = F.cross_entropy(out[: data.batch_size], data.y[: data.batch_size])
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()

    ns_buffer = make_node_buffer(num_nodes)
    ns_gen = torch.Generator().manual_seed(3)
    state: dict[str, Any] = {}
    steps = {k: itertools.cycle(range(per_macro)) for k in ("ns", "s2", "ids")}

    def ns() -> None:
        b = next(steps["ns"])
        data = sample_minibatch(
            indptr,
            indices,
            x,
            y,
            macro.node[macro.batches[b]],
            FANOUTS,
            generator=ns_gen,
            node_buffer=ns_buffer,
        )
        state["ns"] = data.to(device, non_blocking=True)

    def s2() -> None:
        state["s2"] = stage_two(on_device, next(steps["s2"]), second_stage, seed)

    def s2_ids() -> None:
        stage_two(on_device, next(steps["ids"]), second_stage, seed, node_ids=node_ids)

    t_ns, t_ns_model, t_s2, t_s2_model, t_ids = median_time(
        [ns, lambda: train_step(state["ns"]), s2, lambda: train_step(state["s2"]), s2_ids],
        rounds * per_macro,
        sync,
        warmup=2,
        budget_s=12.0,
    )

    # Checks on one mini-batch of each arm.
    errors: list[str] = []
    b = 1 % per_macro
    data = stage_two(on_device, b, second_stage, seed)
    ref = sample_neighbors(
        m_indptr,
        m_indices,
        macro.batches[b],
        second_stage,
        generator=stage_two_generator(seed, 0, 0, b),
    )
    n_id = data.n_id.cpu()
    if not torch.equal(n_id, node[ref.node]):
        errors.append("stage 2's nodes differ from the host's stage-2 sample")
    if not torch.equal(data.edge_index.cpu(), torch.stack([ref.row, ref.col])):
        errors.append("stage 2's edges differ from the host's stage-2 sample")
    if not torch.equal(data.x.cpu(), x[n_id]) or not torch.equal(data.y.cpu(), y[n_id]):
        errors.append("stage 2's rows are not x[n_id], y[n_id]")
    ei = data.edge_index.cpu()
    if missing_edges(indptr, indices, n_id[ei[0]], n_id[ei[1]]):
        errors.append("a stage-2 edge is not a graph edge")
    nsb = state["ns"]
    ns_id, ns_ei = nsb.n_id.cpu(), nsb.edge_index.cpu()
    if missing_edges(indptr, indices, ns_id[ns_ei[0]], ns_id[ns_ei[1]]):
        errors.append("an NS edge is not a graph edge")

    amortised = transfer_s / per_macro
    device_mb = t_s2 + amortised
    metrics = {
        "num_nodes": num_nodes,
        "features": features,
        "batch": batch,
        "mini_batches_per_macro": per_macro,
        "macro_nodes": int(node.numel()),
        "macro_edges": int(m_indices.numel()),
        "ns_batch_nodes": int(nsb.n_id.numel()),
        "stage2_batch_nodes": int(n_id.numel()),
        "stage1_host_s": round(stage1_s, 4),
        "macro_transfer_ms": _ms(transfer_s),
        "macro_transfer_amortised_ms": _ms(amortised),
        "ns_host_ms": _ms(t_ns),
        "stage2_device_ms": _ms(t_s2),
        "stage2_device_with_node_ids_ms": _ms(t_ids),
        "stage2_plus_amortised_ms": _ms(device_mb),
        "ns_over_stage2": round(t_ns / device_mb, 3),
        "model_step_ns_batch_ms": _ms(t_ns_model),
        "model_step_stage2_batch_ms": _ms(t_s2_model),
        "ns_over_stage2_per_training_step": round(
            (t_ns + t_ns_model) / (device_mb + t_s2_model), 3
        ),
    }
    on_gpu = device.type == "cuda"
    return _result(
        not errors,
        metrics,
        goal="stage 2 on the device (+ amortised transfer) faster than NS on the host",
        goal_met=(t_ns > device_mb) if on_gpu else None,
        notes="; ".join(errors)
        or (
            "NS = sample_minibatch on the CPU + Data.to(device); stage 1 (host, background "
            "thread in training) not counted per mini-batch"
            + ("" if on_gpu else "; both arms on the CPU here")
        ),
    )


# -------------------------------------------------------------------------- attention
def local_pattern(num_tokens: int, seed: int = 0) -> torch.Tensor:
    """A topology-like attention pattern with locality: per token 8 edges, 90 %
    to a token at an exponentially distributed distance (mean 16), 10 % to a uniformly
    random token; symmetrised, with self-loops, each pair once (about 16 entries per
    query; ``[2, E]``, CPU)."""
    S, per = num_tokens, 8
    gen = torch.Generator().manual_seed(seed)
    src = torch.arange(S).repeat_interleave(per)
    dist = (torch.empty(S * per).exponential_(1 / 16, generator=gen)).long() + 1
    sign = torch.randint(0, 2, (S * per,), generator=gen) * 2 - 1
    near = (src + sign * dist).clamp(0, S - 1)
    far = torch.randint(0, S, (S * per,), generator=gen)
    dst = torch.where(torch.rand(S * per, generator=gen) < 0.9, near, far)
    loops = torch.arange(S)
    a = torch.cat([src, dst, loops])
    b = torch.cat([dst, src, loops])
    key = torch.unique(b * S + a)
    return torch.stack([key % S, key // S])


def dense_reference(q, k, v, edge_index):  # type: ignore[no-untyped-def]
    """Masked softmax attention with materialised ``[H, S, S]`` scores (no pair: zeros)."""
    S, H, D = q.shape
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
    mask = torch.zeros(S, S, dtype=torch.bool, device=q.device)
    mask[edge_index[1], edge_index[0]] = True
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", probs, v)


def flex_unavailable(device: torch.device) -> str | None:
    """Why FlexAttention cannot run forward + backward on ``device`` (``None``: it can)."""
    if device.type != "cuda":
        return "FlexAttention has no backward on the CPU"
    if not flex_available(device):
        return "FlexAttention unavailable on this device (Triton or torch.compile missing)"
    return None


@headline
def attention_headline(device: torch.device, small: bool) -> Result:
    """Flex vs CSR sparse attention, forward + backward, same pattern and inputs."""
    S, H, D = (2048, 8, 8) if small else (65536, 8, 8)
    reps = 5 if small else 10
    sync = device_sync(device)
    edge_index = local_pattern(S)
    graph = AttentionGraph(S, edge_index.to(device))
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(S, H, D, generator=gen) for _ in range(3)]
    weight = torch.randn(S, H, D, generator=gen).to(device)
    inputs = [t.to(device).requires_grad_() for t in base]

    def step(fn: Callable[..., torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        for t in inputs:
            t.grad = None
        out = fn(*inputs)
        (out * weight).sum().backward()
        return out.detach(), [t.grad for t in inputs]  # type: ignore[misc]

    def csr(q, k, v):  # type: ignore[no-untyped-def]
        return attend(q, k, v, graph, "sparse")

    num_clusters = min(default_num_clusters(H * D), S)
    metrics: dict[str, Any] = {
        "tokens": S,
        "heads": H,
        "head_dim": D,
        "entries_per_query": round(edge_index.shape[1] / S, 2),
        "num_clusters": num_clusters,
    }
    errors: list[str] = []
    notes: list[str] = []
    tol = 1e-3
    csr_out, csr_grads = step(csr)
    if S <= 4096:  # dense float64 reference
        ref_in = [t.detach().double().requires_grad_() for t in base]
        ref = dense_reference(*ref_in, edge_index)
        (ref * weight.double().cpu()).sum().backward()
        err = max(
            _rel_err(a, b)
            for a, b in zip([csr_out, *csr_grads], [ref, *(t.grad for t in ref_in)], strict=True)
        )
        metrics["csr_vs_dense_rel_err"] = err
        if err > tol:
            errors.append(f"CSR differs from the dense reference (rel. error {err:.3g})")

    why = flex_unavailable(device)
    if why is not None:
        (t_csr,) = median_time([lambda: step(csr)], reps, sync, warmup=1)
        metrics["csr_ms"] = _ms(t_csr)
        metrics["flex"] = "skipped"
        notes.append(f"flex skipped: {why}")
        return _result(not errors, metrics, notes="; ".join(errors + notes))

    tic = time.perf_counter()
    layout = graph.cluster_layout(num_clusters, block_size=16, threshold=0.0)
    sync()
    metrics["layout_s"] = round(time.perf_counter() - tic, 3)
    metrics["tiles"] = int(layout.num_tiles)
    metrics["tile_fill"] = float(layout.tile_fill)

    def flex(q, k, v):  # type: ignore[no-untyped-def]
        return cluster_sparse_attention(q, k, v, layout, implementation="flex")

    tic = time.perf_counter()
    try:
        flex_out, flex_grads = step(flex)  # compiles forward and backward
        sync()
    except Exception as err:  # noqa: BLE001 - the CSR numbers are still worth reporting
        (t_csr,) = median_time([lambda: step(csr)], reps, sync, warmup=1)
        metrics["csr_ms"] = _ms(t_csr)
        tail = "".join(traceback.format_exception(err)[-4:])
        return _result(False, metrics, notes=f"flex failed: {err!r}\n{tail}")
    metrics["flex_first_step_s"] = round(time.perf_counter() - tic, 3)
    err = max(
        _rel_err(a, b) for a, b in zip([flex_out, *flex_grads], [csr_out, *csr_grads], strict=True)
    )
    metrics["flex_vs_csr_rel_err"] = err
    if err > tol:
        errors.append(f"flex differs from CSR (rel. error {err:.3g})")
    del flex_out, flex_grads, csr_out, csr_grads

    t_flex, t_csr = median_time(
        [lambda: step(flex), lambda: step(csr)], reps, sync, warmup=1, budget_s=5.0
    )
    metrics["flex_ms"] = _ms(t_flex)
    metrics["csr_ms"] = _ms(t_csr)
    metrics["csr_over_flex"] = round(t_csr / t_flex, 3)
    if device.type == "cuda":
        metrics["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    return _result(
        not errors,
        metrics,
        goal="flex faster than CSR (csr_over_flex > 1), forward + backward",
        goal_met=t_csr > t_flex,
        notes="; ".join(errors) or "fp32; flex = cluster_sparse_attention(implementation='flex')",
    )


# ----------------------------------------------------------------------------- resume
@contextlib.contextmanager
def _global_flags() -> Iterator[None]:
    """Restore what ``Trainer(deterministic=...)`` changes process-wide."""
    det = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    env = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn
        if env is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = env


def _resume_runs(device: torch.device, root: str) -> dict[str, Any]:
    """Straight, half, resumed, resumed without the callback (and, when the resumed run
    differs, straight again): their final checkpoints, loaded on the CPU."""
    features, classes = 16, 4
    data = SyntheticGraph(
        num_nodes=300, avg_degree=8, num_classes=classes, num_features=features, seed=3
    ).load()

    class Sampled(pl.LightningDataModule):
        def train_dataloader(self) -> Any:
            return neighbor_loader(
                data, [4, 3], input_nodes=data.train_mask, batch_size=64, shuffle=True, seed=1
            )

    class SeedEachRun(pl.Callback):
        def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
            seed_global_rngs(0)

    accelerator = "gpu" if device.type == "cuda" else "cpu"
    devices: Any = [device.index or 0] if device.type == "cuda" else 1

    def fit(name: str, epochs: int, ckpt: str | None = None, callback: bool = True) -> str:
        seed_global_rngs(0)
        model = GraphSAGE(features, 16, num_layers=2, out_channels=classes, dropout=0.5)
        module = MiniBatchNodeClassifier(model, classes, lr=0.01)
        callbacks: list[pl.Callback] = [SeedEachRun()]
        if callback:
            callbacks.append(RandomStateCheckpoint())
        dirpath = os.path.join(root, name)
        callbacks.append(ModelCheckpoint(dirpath=dirpath, save_last=True))
        trainer = pl.Trainer(
            accelerator=accelerator,
            devices=devices,
            max_epochs=epochs,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            deterministic="warn",  # deterministic kernels where CUDA has them
            default_root_dir=dirpath,
            callbacks=callbacks,
        )
        trainer.fit(module, Sampled(), ckpt_path=ckpt)
        return os.path.join(dirpath, "last.ckpt")

    def load(path: str) -> dict[str, Any]:
        return torch.load(path, map_location="cpu", weights_only=True)

    epochs, half = 4, 2
    out: dict[str, Any] = {}
    straight = load(fit("straight", epochs))
    half_ckpt = fit("half", half)
    resumed = load(fit("resumed", epochs, half_ckpt))
    out["straight"], out["resumed"] = straight, resumed
    out["plain"] = load(fit("plain", epochs, half_ckpt, callback=False))
    if not _same_run(straight, resumed):
        out["straight_again"] = load(fit("straight_again", epochs))
    return out


def _same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    sa, sb = a["state_dict"], b["state_dict"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Same step count, bitwise equal weights and optimiser state."""
    if a["global_step"] != b["global_step"] or not _same_weights(a, b):
        return False
    for oa, ob in zip(a["optimizer_states"], b["optimizer_states"], strict=True):
        for sa, sb in zip(oa["state"].values(), ob["state"].values(), strict=True):
            for key in sa:
                va, vb = sa[key], sb[key]
                same = torch.equal(va, vb) if isinstance(va, torch.Tensor) else va == vb
                if not same:
                    return False
    return True


@headline
def resume_headline(device: torch.device, small: bool) -> Result:
    """Resume bit-exactness with the device's generator (dropout on the device)."""
    with tempfile.TemporaryDirectory() as root, _global_flags(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers, deterministic ops
        runs = _resume_runs(device, root)
    straight, resumed, plain = runs["straight"], runs["resumed"], runs["plain"]
    exact = _same_run(straight, resumed)
    drew = not _same_weights(straight, plain)
    again = runs.get("straight_again")
    metrics: dict[str, Any] = {
        "epochs": 4,
        "resumed_at_epoch": 2,
        "global_step": int(straight["global_step"]),
        "bit_exact": exact,
        "resume_without_callback_differs": drew,
        "device_generator_saved": bool(
            device.type != "cuda"
            or straight["callbacks"]["RandomStateCheckpoint"]["ranks"][0]["global"]["cuda"]
        ),
    }
    notes = []
    if again is not None:
        deterministic = _same_run(straight, again)
        metrics["straight_runs_identical"] = deterministic
        notes.append(
            "resumed run differs from the straight run"
            + (
                ""
                if deterministic
                else " -- but so do two straight runs: a non-deterministic kernel, not the resume"
            )
        )
    if not drew:
        notes.append("a resume without the callback did not differ: the check drew nothing random")
    if not metrics["device_generator_saved"]:
        notes.append("the checkpoint holds no CUDA generator state")
    ok = exact and drew and metrics["device_generator_saved"]
    return _result(
        ok,
        metrics,
        notes="; ".join(notes)
        or f"straight 4 epochs == 2 + resume, bitwise ({'CUDA' if device.type == 'cuda' else 'CPU'} generator)",
    )


HEADLINES: list[tuple[str, Headline]] = [
    ("quantize", quantize_headline),
    ("sampler", sampler_headline),
    ("joestar_stage2", joestar_stage2_headline),
    ("attention", attention_headline),
    ("resume", resume_headline),
]


def run_all(
    device: torch.device, small: bool, only: Sequence[str] | None = None
) -> dict[str, Result]:
    """Every headline (or those named in ``only``), in order, printed as they finish."""
    out: dict[str, Result] = {}
    for name, fn in HEADLINES:
        if only and name not in only:
            continue
        out[name] = res = fn(device, small)
        print(summary_line(name, res), flush=True)
    return out


def summary_line(name: str, res: Result) -> str:
    """One line per headline: status, goal, the ratios, time."""
    status = "ok" if res["ok"] else "FAIL"
    goal = {True: "goal met", False: "goal MISSED", None: "no goal"}[res["goal_met"]]
    m = res["metrics"]
    keys = [k for k in m if any(w in k for w in ("_over_", "ratio", "_ms", "bit_exact"))]
    shown = ", ".join(f"{k}={m[k]}" for k in keys[:8])
    return (
        f"{name:>15}: {status:4} {goal:11} {res['seconds']:6.1f} s | {shown} | {res['notes'][:200]}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU at small sizes")
    parser.add_argument("--json", default=None, help="write the results to this file")
    parser.add_argument("--only", nargs="+", choices=[n for n, _ in HEADLINES], default=None)
    args = parser.parse_args(argv)
    use_cuda = torch.cuda.is_available() and not args.cpu
    if not use_cuda and not args.cpu:
        print("no CUDA device: running the small CPU sizes (as --cpu)", file=sys.stderr)
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    small = not use_cuda
    tic = time.perf_counter()
    results = run_all(device, small, args.only)
    report = {
        "device": torch.cuda.get_device_name(device) if use_cuda else platform.processor() or "cpu",
        "small": small,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - tic, 3),
        "headlines": results,
    }
    print(f"total {report['seconds']:.1f} s on {report['device']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=str)
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
