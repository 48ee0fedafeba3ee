"""Attention forward+backward time and peak memory against sequence length (TorchGT, ch. 4).

Every attention kind of :func:`lightgraph.functional.attention.attend` runs on one token sequence of
``S`` tokens, Graphormer-slim shape (hidden 64 = 8 heads x head dim 8), float32, ``[S, H, D]``
tensors, no attention bias and no dropout:

* ``dense``: full attention with ``scaled_dot_product_attention`` (on CPU the flash kernel:
  no ``S x S`` matrix; "GP-Flash");
* ``raw``: full attention with the ``[H, S, S]`` scores materialised ("GP-Raw");
* ``sparse``: topology-induced attention over the pattern's entries ("GP-Sparse");
* ``cluster_sparse``: the cluster-sparse tile kernel, threshold 0 (exactly the pattern);
* ``cluster_sparse:F``: the cluster-sparse kernel with transfer threshold ``F`` times the
  pattern's global density :math:`\\beta_G = E / S^2` (sparse off-diagonal cluster blocks
  become dense sub-blocks; TorchGT's elastic computation reformation). Default ``F = 5``.
* ``cluster_flex`` / ``cluster_flex:F``: the same layouts computed by FlexAttention
  (``cluster_sparse_attention(..., implementation="flex")``, compiled; the first call,
  which compiles, is the warm-up). **On the CPU these are forward only** (torch's CPU
  FlexAttention has no backward): the inputs do not require grad, the forward runs under
  ``torch.no_grad()``, the JSON says ``"measures": "forward"`` and the table marks the
  row ``[forward only]``; never compare them with the forward+backward rows. On CUDA
  they are forward+backward like the others.
* ``dual`` / ``dual:SPARSE_KIND``: TorchGT's dual-interleaved attention, ``attend(...,
  kind="dual", sparse_kind=SPARSE_KIND, dense_every=--dense-every, step=i)`` with
  ``SPARSE_KIND`` ``sparse`` (default), ``cluster_sparse`` or ``auto``: dense every
  ``--dense-every`` steps (10), the sparse kind between. Its time is the mean
  forward+backward time per step over one dense period (``dense_every`` consecutive steps,
  one of them dense -- all of them where the pattern fails C1-C3 with ``--num-layers``
  layers, 4 as in Graphormer-slim; ``dense_steps_per_period`` in the JSON says which);
  the JSON also has the median dense and sparse step. Where even the warm-up period
  leaves no time for a timed one (``"warmup_only": true``), ``time_s`` is only the
  warm-up's time per step and says little; read the dense and sparse rows instead.

The cluster count is :func:`~lightgraph.functional.attention.default_num_clusters` of the
hidden size (the fixed nominal 6 MiB cache: 8 at hidden 64, the same on every machine; at most
``S``), the sub-block side ``--block-size`` (16). The cluster kinds record their layout in
the JSON: ``tile_fill`` (:attr:`ClusterSparseLayout.tile_fill`: attended pairs per computed
score), ``tiles`` (computed tiles), ``scores`` (computed scores per head), the hub strips
and the rule's tile counts; every pattern-based row also carries ``pattern_tile_fill`` and
``pattern_tiles``, those of the threshold-0 layout (computed once per pattern, when it is
built).

Pattern (``--pattern``), built once per ``S`` in its own subprocess:

* ``metis`` (default): a :class:`lightgraph.data.SyntheticGraph` of ``S - 1`` nodes
  (``--avg-degree`` 10, i.e. about 10 entries per query), reordered with
  :func:`~lightgraph.data.partition.sequences.metis_order` into ``--metis-parts`` (8, the data
  module's clusters per sequence) contiguous parts, then turned into the sequence's pattern
  by :func:`~lightgraph.data.partition.sequences.build_sequence`: the graph edges, one self-loop per
  token and a global token 0 that attends to and is attended by every token -- exactly what
  ``NodeSequenceDataModule`` feeds the model for one sequence. Note the synthetic graph's only
  structure is its communities (edges inside a community are random), so the METIS order
  gives dense-ish cluster blocks but little locality *inside* them: the cluster-sparse
  kernel's tiles are sparsely filled (see ``tile_fill`` in the JSON).
* ``local``: a documented local generator with locality at every scale: ``S - 1`` nodes,
  ``avg_degree / 2`` undirected edges per node, a share ``1 - --local-far`` (90 %) of them
  to a node at a distance drawn from an exponential law of mean ``--local-scale`` (16)
  tokens and ``--local-far`` (10 %) to a uniformly random node, symmetrised; then the same
  ``build_sequence`` (self-loops, global token 0).
* ``blocky``: communities of ``--community`` (32) consecutive nodes: each of the
  ``avg_degree / 2`` undirected edges per node goes to a uniformly random node of its own
  community, a share ``--local-far`` to a uniformly random node; symmetrised, then
  ``build_sequence``. Intra-community density is about ``avg_degree / community``: the
  dial for realistic, dense cluster-local blocks (``--avg-degree 16 --community 32`` gives
  half-full communities).

``dense`` and ``raw`` do not depend on the pattern and run on a self-loop-only graph.

Measurement. Every (kind, S) runs in a fresh subprocess
(``python benchmarks/bench_attention.py --worker KIND S ...``), so an out-of-memory kill or a
slow case cannot take the run down; each has a wall-clock limit of ``--timeout`` s. A kind
that timed out or ran out of memory at some ``S`` is skipped at larger ``S``. The worker
uses ``torch.set_num_threads(--threads)``, builds ``q, k, v`` (leaf tensors that require
grad, except for forward-only cases) and the pattern, then records the baseline
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (the RSS high-water mark once the inputs exist).
It then builds the kind's cached structure (cluster layout; timed as ``layout_s``), runs
one warm-up forward+backward (``attend(...).backward(grad)``) and ``--repeats`` timed ones;
time is their median. If the warm-up shows that all repeats cannot fit in the time left,
fewer are run (at least one; if not even one fits, the warm-up itself is reported,
``warmup_only``). Peak memory is the final ``ru_maxrss`` minus the baseline: the growth of
the process's RSS high-water mark during attention -- autograd's saved tensors, the
gradients of ``q, k, v``, the cached layout/CSR structures built on first use and the
allocator's caches. (The inputs themselves are not counted; ``baseline_gib`` in the JSON has
them. Because the baseline is a high-water mark too, an input-building transient larger
than the attention's own use would hide the latter; the inputs here are built with small
transients.)

Memory cap ``--max-gb`` (GiB): ``raw`` cases whose ``[H, S, S]`` scores and their gradients
(about four such matrices) cannot fit are skipped and reported as "skipped (needs N GiB)";
``dense`` (flash kernel, ``O(S)`` memory) is estimated the same way but never needs an
``S x S`` matrix. Every worker also limits its address space (``RLIMIT_AS``) to its size
after building the inputs plus ``--max-gb``, so an over-budget case fails with an
allocation error ("out of memory") instead of swapping or invoking the OOM killer (not for
the ``cluster_flex`` kinds: compiling needs more address space than it uses). The summary
gives, per kind, the longest ``S`` trained (completed within ``--timeout``) within
``--max-gb``.

On ``--device cuda`` the inputs and the pattern live on the GPU, times are taken between
``torch.cuda.synchronize`` calls and peak memory is ``torch.cuda.max_memory_allocated``
minus the inputs (no address-space limit is set; ``--max-gb`` still skips ``raw`` cases
that cannot fit).

Usage::

    python benchmarks/bench_attention.py                       # S = 4K .. 1M, default kinds
    python benchmarks/bench_attention.py --sizes 1024 4096 --repeats 3 --out attn.json
    python benchmarks/bench_attention.py --kinds sparse cluster_sparse cluster_sparse:5 \\
        --sizes 65536 262144 --pattern local --threads 2 --timeout 300 --max-gb 16
    python benchmarks/bench_attention.py --kinds sparse cluster_sparse cluster_flex \\
        --sizes 4096 16384 --pattern blocky --avg-degree 16 --community 32
    python benchmarks/bench_attention.py --kinds sparse dual dual:cluster_sparse \\
        --sizes 4096 16384 --dense-every 10
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

from harness import run_worker, tagged

HIDDEN, HEADS = 64, 8
HEAD_DIM = HIDDEN // HEADS
DEFAULT_KINDS = ("dense", "raw", "sparse", "cluster_sparse", "cluster_sparse:5")
DEFAULT_SIZES = (4096, 16384, 65536, 262144, 1048576)
RAW_SCORE_COPIES = 3  # [H, S, S] float32 matrices alive at raw's peak: measured 3.0 at S = 4096
DENSE_ROW_BYTES = 64 * HIDDEN  # generous per-token working set of the flash kernel
RESULT_TAG = "RESULT "
SETUP_TAG = "SETUP_DONE "
GIB = 1 << 30


CLUSTER_KINDS = ("cluster_sparse", "cluster_flex")
DUAL_SPARSE_KINDS = ("sparse", "cluster_sparse", "auto")


def parse_kind(kind: str) -> tuple[str, float | str]:
    """``"cluster_sparse:5"`` -> ``("cluster_sparse", 5.0)`` (also ``cluster_flex``),
    ``"dual:cluster_sparse"`` -> ``("dual", "cluster_sparse")`` (``"dual"``: over
    ``"sparse"``), other kinds -> ``(kind, 0.0)``."""
    base, sep, option = kind.partition(":")
    try:
        if base in ("dense", "raw", "sparse") and not sep:
            return base, 0.0
        if base in CLUSTER_KINDS:
            return base, float(option) if sep else 0.0
        if base == "dual" and (option or "sparse") in DUAL_SPARSE_KINDS:
            return base, option or "sparse"
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"expected a kind among dense, raw, sparse, cluster_sparse, cluster_sparse:FACTOR, "
        f"cluster_flex, cluster_flex:FACTOR, dual, dual:{{{','.join(DUAL_SPARSE_KINDS)}}} "
        f"but got {kind!r}"
    )


def forward_only(kind: str, device: str) -> bool:
    """Whether ``kind`` is timed without its backward (FlexAttention on the CPU)."""
    return parse_kind(kind)[0] == "cluster_flex" and device == "cpu"


def estimate_gib(kind: str, S: int) -> float:
    """Memory a dense kind needs beyond its inputs (0 for the sparse kinds: not estimated)."""
    base, _ = parse_kind(kind)
    if base == "raw":
        return RAW_SCORE_COPIES * HEADS * S * S * 4 / GIB
    if base == "dense":
        return S * DENSE_ROW_BYTES / GIB
    return 0.0


# ----------------------------------------------------------------------- subprocesses
def _maxrss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def _vm_size_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _local_edges(n: int, avg_degree: float, seed: int, scale: float = 16.0, far: float = 0.1):
    """``local`` pattern generator (see the module docstring): ``[2, E]`` undirected edges."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    m = max(1, round(n * avg_degree / 2))
    src = torch.randint(0, n, (m,), generator=gen)
    is_far = torch.rand(m, generator=gen) < far
    dist = torch.empty(m).exponential_(1 / scale, generator=gen).ceil().long()
    sign = torch.randint(0, 2, (m,), generator=gen) * 2 - 1
    dst = (src + sign * dist).clamp_(0, n - 1)
    dst = torch.where(is_far, torch.randint(0, n, (m,), generator=gen), dst)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    return torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])


def _blocky_edges(n: int, avg_degree: float, seed: int, community: int = 32, far: float = 0.1):
    """``blocky`` pattern generator (see the module docstring): ``[2, E]`` undirected edges."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    m = max(1, round(n * avg_degree / 2))
    src = torch.randint(0, n, (m,), generator=gen)
    start = src // community * community
    size = (n - start).clamp_(max=community)
    dst = start + (torch.rand(m, generator=gen) * size).long()
    is_far = torch.rand(m, generator=gen) < far
    dst = torch.where(is_far, torch.randint(0, n, (m,), generator=gen), dst)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    return torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])


def _layout_stats(layout) -> dict:
    """What the JSON records of a cluster-sparse layout."""
    return {
        "tile_fill": layout.tile_fill,
        "tiles": layout.num_tiles,
        "scores": layout.num_scores,
        "hub_rows": int(layout.hub_rows.numel()),
        "hub_cols": int(layout.hub_cols.numel()),
        "tiles_kept": layout.num_tiles_kept,
        "tiles_transferred": layout.num_tiles_transferred,
        "rows_computed": layout.num_rows_computed,
        "row_groups": layout.num_row_groups,
        "key_columns": layout.num_key_columns,
        "global_density": layout.global_density,
        "entries_attended": layout.num_entries,
        "entries_added": layout.num_entries_added,
        "entries_dropped": layout.num_entries_dropped,
    }


def prepare(S: int, path: str, args: argparse.Namespace) -> None:
    """Build the pattern of an ``S``-token sequence and save it to ``path``."""
    import torch

    from lightgraph.data import SyntheticGraph
    from lightgraph.data.partition.sequences import build_sequence, metis_order, split_sequences

    torch.set_num_threads(args.threads)
    n, clock = S - 1, time.perf_counter()
    if args.pattern == "metis":
        data = SyntheticGraph(
            num_nodes=n, avg_degree=args.avg_degree, num_features=1, seed=args.seed
        ).load()
        order = metis_order(data.edge_index, n, min(args.metis_parts, n), args.seed)
        _, (edges,) = split_sequences(data.edge_index, order, n)
    elif args.pattern == "local":
        edges = _local_edges(n, args.avg_degree, args.seed, args.local_scale, args.local_far)
    else:
        edges = _blocky_edges(n, args.avg_degree, args.seed, args.community, args.local_far)
    seq = build_sequence(torch.zeros(n, 1), edges, global_token=True, dense_limit=0)
    edge_index = seq.graph.edge_index
    torch.save({"num_tokens": S, "edge_index": edge_index.clone()}, path)
    build_s = time.perf_counter() - clock
    from lightgraph.functional.attention import AttentionGraph, default_num_clusters

    layout = AttentionGraph(S, edge_index).cluster_layout(
        min(default_num_clusters(HIDDEN), S), args.block_size, 0.0
    )
    info = {"entries": edge_index.shape[1], "build_s": round(build_s, 2)}
    info.update(pattern_tile_fill=layout.tile_fill, pattern_tiles=layout.num_tiles)
    print(RESULT_TAG + json.dumps(info), flush=True)


def worker(kind: str, S: int, args: argparse.Namespace) -> dict:
    """Time and measure one (kind, S) case in this process; returns its result."""
    start = time.perf_counter()
    import inspect

    import torch

    from lightgraph.functional.attention import (
        AttentionGraph,
        attend,
        cluster_sparse_attention,
        default_num_clusters,
    )

    base, option = parse_kind(kind)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    fwd_only = forward_only(kind, device.type)
    if base in ("dense", "raw"):
        graph = AttentionGraph(S, torch.arange(S).repeat(2, 1))  # unused by full attention
    else:
        edge_index = torch.load(args.pattern_file, mmap=True)["edge_index"]
        graph = AttentionGraph(S, edge_index, num_layers=args.num_layers)
    graph = graph.to(device)
    graph.validate()
    gen = torch.Generator().manual_seed(args.seed)
    q, k, v = (
        torch.randn(S, HEADS, HEAD_DIM, generator=gen).to(device).requires_grad_(not fwd_only)
        for _ in range(3)
    )
    grad_out = torch.randn(S, HEADS, HEAD_DIM, generator=gen).to(device)
    E = graph.edge_index.shape[1]
    result: dict = {"kind": kind, "S": S, "entries": E if base not in ("dense", "raw") else S * S}
    result["device"] = torch.cuda.get_device_name(device) if cuda else "cpu"
    result["measures"] = "forward" if fwd_only else "forward+backward"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device) >> 10
    else:
        baseline = _maxrss_kib()
    # CUDA reserves address space far beyond its use, and so does compiling FlexAttention.
    if args.max_gb > 0 and not cuda and base != "cluster_flex":
        cap = _vm_size_bytes() + int(args.max_gb * GIB)
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    print(SETUP_TAG + f"{time.perf_counter() - start:.3f}", flush=True)

    clusters = min(default_num_clusters(HIDDEN), S)

    def run_step(i: int) -> None:
        """One attention call (and its backward unless forward only)."""
        if base in CLUSTER_KINDS:
            implementation = "flex" if base == "cluster_flex" else "tiles"
            if fwd_only:
                with torch.no_grad():
                    cluster_sparse_attention(q, k, v, layout, implementation=implementation)
                return
            out = cluster_sparse_attention(q, k, v, layout, implementation=implementation)
        elif base == "dual":
            out = attend(q, k, v, graph, "dual", step=i, **options)
        else:
            out = attend(q, k, v, graph, base)
        out.backward(grad_out)

    options: dict = {}
    try:
        if base in CLUSTER_KINDS:
            threshold = min(1.0, option * E / S**2)
            clock = time.perf_counter()
            layout = graph.cluster_layout(clusters, args.block_size, threshold)
            result.update(
                layout_s=time.perf_counter() - clock,
                num_clusters=clusters,
                threshold=threshold,
                **_layout_stats(layout),
            )
        elif base == "dual":
            options = {"dense_every": args.dense_every}
            if "sparse_kind" in inspect.signature(attend).parameters:
                options.update(
                    sparse_kind=option,
                    num_clusters=clusters,
                    block_size=args.block_size,
                    threshold=0.0,
                )
            elif option != "sparse":
                result.update(status="unsupported", note="attend() takes no `sparse_kind`")
                return result
            result.update(dense_every=args.dense_every, sparse_kind=option)
            if option in ("cluster_sparse", "auto"):
                clock = time.perf_counter()
                layout = graph.cluster_layout(clusters, args.block_size, 0.0)
                result.update(layout_s=time.perf_counter() - clock, **_layout_stats(layout))

        def peak_kib() -> int:
            return (torch.cuda.max_memory_allocated(device) >> 10) if cuda else _maxrss_kib()

        def step(i: int = 1) -> float:
            q.grad = k.grad = v.grad = None
            if cuda:
                torch.cuda.synchronize(device)
            clock = time.perf_counter()
            run_step(i)
            if cuda:
                torch.cuda.synchronize(device)
            return time.perf_counter() - clock

        if base == "dual":
            # One dense period per repeat: steps 0 .. dense_every - 1 (step 0 dense).
            from lightgraph.functional.attention.dispatch import dual_uses_dense

            period = max(1, args.dense_every)
            dense_at = [dual_uses_dense(graph, i, args.dense_every) for i in range(period)]
            warm = step(0) + (step(1) if period > 1 else 0.0)
            left = 0.9 * args.timeout - (time.perf_counter() - start)
            n = min(args.repeats, int(left // (warm * period))) if warm > 0 else args.repeats
            runs = [[step(i) for i in range(period)] for _ in range(max(0, n))]
            result["warmup_only"] = not runs
            means = [statistics.mean(r) for r in runs] or [warm / min(2, period)]
            dense_steps = [t for r in runs for t, d in zip(r, dense_at, strict=True) if d]
            sparse_steps = [t for r in runs for t, d in zip(r, dense_at, strict=True) if not d]
            result.update(
                status="ok",
                time_s=statistics.median(means),
                times_s=means,
                warmup_s=warm,
                dense_steps_per_period=sum(dense_at),
                dense_step_s=statistics.median(dense_steps) if dense_steps else None,
                sparse_step_s=statistics.median(sparse_steps) if sparse_steps else None,
                peak_gib=(peak_kib() - baseline) / (1 << 20),
                baseline_gib=baseline / (1 << 20),
            )
            return result

        warm = step()
        left = 0.9 * args.timeout - (time.perf_counter() - start)
        n = min(args.repeats, int(left // warm)) if warm > 0 else args.repeats
        times = [step() for _ in range(max(0, n))]
        result["warmup_only"] = not times
        times = times or [warm]
        result.update(
            status="ok",
            time_s=statistics.median(times),
            times_s=times,
            warmup_s=warm,
            peak_gib=(peak_kib() - baseline) / (1 << 20),
            baseline_gib=baseline / (1 << 20),
        )
    except (MemoryError, RuntimeError) as exc:
        text = str(exc)
        if isinstance(exc, MemoryError) or "alloc" in text.lower() or "out of memory" in text:
            result.update(status="oom", note=f"out of memory (> {args.max_gb:g} GiB)")
        else:
            raise
    return result


def _common_flags(args: argparse.Namespace) -> list[str]:
    return [
        f"--threads={args.threads}",
        f"--timeout={args.timeout}",
        f"--max-gb={args.max_gb}",
        f"--repeats={args.repeats}",
        f"--seed={args.seed}",
        f"--block-size={args.block_size}",
        f"--pattern={args.pattern}",
        f"--avg-degree={args.avg_degree}",
        f"--local-scale={args.local_scale}",
        f"--local-far={args.local_far}",
        f"--community={args.community}",
        f"--dense-every={args.dense_every}",
        f"--num-layers={args.num_layers}",
        f"--metis-parts={args.metis_parts}",
        f"--device={args.device}",
    ]


def build_pattern(S: int, path: str, args: argparse.Namespace) -> dict:
    if os.path.exists(path):
        return {"status": "ok", "cached": True}
    cmd = [sys.executable, os.path.abspath(__file__), "--prepare", str(S), path]
    code, out, err = run_worker(cmd + _common_flags(args), args.timeout, args.threads)
    if code is None:
        return {"status": f"pattern build timed out (> {args.timeout:g} s)"}
    line = tagged(out, RESULT_TAG)
    if code != 0 or line is None:
        return {"status": f"pattern build failed (rc {code}): {err.strip()[-300:]}"}
    return {"status": "ok", **json.loads(line)}


def run_case(kind: str, S: int, pattern_file: str | None, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, str(S)]
    cmd += _common_flags(args)
    if pattern_file:
        cmd.append(f"--pattern-file={pattern_file}")
    clock = time.perf_counter()
    code, out, err = run_worker(cmd, args.timeout, args.threads)
    wall = time.perf_counter() - clock
    line = tagged(out, RESULT_TAG)
    if code is None:
        setup = tagged(out, SETUP_TAG)
        result = {"kind": kind, "S": S, "status": "timeout"}
        result["note"] = f"timed out (> {args.timeout:g} s)"
        if setup is not None:  # the warm-up alone ran past the rest of the limit
            result["time_lower_bound_s"] = args.timeout - float(setup)
        return {**result, "wall_s": wall}
    if code == 0 and line is not None:
        return {**json.loads(line), "wall_s": wall}
    note = f"killed by signal {-code} (likely out of memory)" if code < 0 else f"failed (rc {code})"
    return {"kind": kind, "S": S, "status": "error", "note": note, "stderr": err.strip()[-2000:]}


# ----------------------------------------------------------------------------- driver
def _format_row(r: dict, dense: dict | None) -> str:
    kind, S = r["kind"], r["S"]
    if r["status"] != "ok":
        return f"{kind:<22} {S:>8d}  {r.get('note', r['status'])}"
    t = r["time_s"]
    fwd_only = r.get("measures") == "forward"
    speed = "-"
    if fwd_only:
        pass  # not comparable with dense's forward+backward
    elif dense and dense.get("status") == "ok":
        speed = f"{dense['time_s'] / t:.1f}x"
    elif dense and "time_lower_bound_s" in dense:
        speed = f">{dense['time_lower_bound_s'] / t:.1f}x"
    fill = r.get("tile_fill", r.get("pattern_tile_fill"))
    fill = f"{fill:.3f}" if fill is not None else "-"
    flag = " (warm-up only)" if r.get("warmup_only") else ""
    flag += " [forward only]" if fwd_only else ""
    if r["kind"].startswith("dual"):
        flag += f" [mean step over a period of {r['dense_every']}]"
    return f"{kind:<22} {S:>8d} {t:>11.3f} {r['peak_gib']:>9.3f} {speed:>9} {fill:>9}{flag}"


def _describe(args: argparse.Namespace) -> str:
    """The pattern in words, for the summary."""
    text = f"{args.pattern} (avg degree {args.avg_degree:g}"
    if args.pattern == "local":
        text += f", mean distance {args.local_scale:g}, far share {args.local_far:g}"
    elif args.pattern == "blocky":
        text += f", communities of {args.community}, far share {args.local_far:g}"
    return text + ", self-loops, global token)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--kinds", nargs="+", default=list(DEFAULT_KINDS))
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after one warm-up")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--max-gb", type=float, default=22.0, help="memory cap per case (GiB)")
    parser.add_argument("--pattern", choices=("metis", "local", "blocky"), default="metis")
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument(
        "--local-scale", type=float, default=16.0, help="local: mean distance of near edges"
    )
    parser.add_argument(
        "--local-far", type=float, default=0.1, help="local, blocky: share of random far edges"
    )
    parser.add_argument("--community", type=int, default=32, help="blocky: community size")
    parser.add_argument(
        "--dense-every", type=int, default=10, help="dual: period of the dense steps"
    )
    parser.add_argument(
        "--num-layers", type=int, default=4, help="model depth for condition C3 (dual)"
    )
    parser.add_argument("--metis-parts", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=16, help="cluster-sparse tile side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda to time the GPU kernels")
    parser.add_argument("--cache-dir", default=None, help="keep the built patterns here")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "S"), help=argparse.SUPPRESS)
    parser.add_argument("--prepare", nargs=2, metavar=("S", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--pattern-file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.prepare:
        prepare(int(args.prepare[0]), args.prepare[1], args)
        return
    if args.worker:
        print(RESULT_TAG + json.dumps(worker(args.worker[0], int(args.worker[1]), args)))
        return
    for kind in args.kinds:
        try:
            parse_kind(kind)
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
    if min(args.sizes) < 11:
        parser.error("expected every size >= 11 (the synthetic graph needs 10 nodes)")

    results: list[dict] = []
    failed: dict[str, str] = {}  # kind -> why larger S are skipped
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or tmp
        os.makedirs(cache, exist_ok=True)
        for S in sorted(args.sizes):
            tag = f"{args.pattern}-S{S}-deg{args.avg_degree:g}-p{args.metis_parts}-seed{args.seed}"
            if args.pattern == "local":
                tag += f"-scale{args.local_scale:g}-far{args.local_far:g}"
            elif args.pattern == "blocky":
                tag += f"-c{args.community}-far{args.local_far:g}"
            tag += f"-db{args.block_size}"
            path = os.path.join(cache, f"pattern-{tag}.pt")
            built: dict | None = None
            for kind in args.kinds:
                base, _ = parse_kind(kind)
                need = estimate_gib(kind, S)
                if kind in failed:
                    r = {"kind": kind, "S": S, "status": "skipped", "note": failed[kind]}
                elif args.max_gb > 0 and need > args.max_gb:
                    r = {"kind": kind, "S": S, "status": "skipped"}
                    r["note"] = f"skipped (needs {need:.0f} GiB)"
                else:
                    pattern_file = None
                    if base not in ("dense", "raw"):
                        built = built or build_pattern(S, path, args)
                        pattern_file = path
                    if built is not None and built["status"] != "ok" and pattern_file:
                        r = {"kind": kind, "S": S, "status": "skipped", "note": built["status"]}
                    else:
                        r = run_case(kind, S, pattern_file, args)
                        if built and "build_s" in built:
                            r["pattern_build_s"] = built["build_s"]
                        if built and pattern_file:
                            for key in ("pattern_tile_fill", "pattern_tiles"):
                                if key in built:
                                    r[key] = built[key]
                    if r["status"] in ("timeout", "oom", "error"):
                        failed[kind] = f"skipped ({r['status']} at S={S})"
                results.append(r)
                shown = {k: v for k, v in r.items() if k not in ("times_s", "stderr")}
                print(json.dumps(shown), flush=True)

    print(
        f"\nAttention forward+backward (rows marked [forward only]: forward alone): hidden "
        f"{HIDDEN} = {HEADS} heads x {HEAD_DIM}, float32, no bias; pattern {_describe(args)}; "
        f"{args.threads} threads; median of {args.repeats} after 1 warm-up; "
        f"limits {args.timeout:g} s, {args.max_gb:g} GiB per case"
    )
    print(f"{'kind':<22} {'S':>8} {'time s':>11} {'peak GiB':>9} {'vs dense':>9} {'tile fill':>9}")
    dense_at = {r["S"]: r for r in results if r["kind"] == "dense"}
    for r in results:
        print(_format_row(r, dense_at.get(r["S"])))
    longest: dict[str, int | None] = {}
    for kind in args.kinds:
        ok = [
            r["S"]
            for r in results
            if r["kind"] == kind and r["status"] == "ok" and r["peak_gib"] <= args.max_gb
        ]
        longest[kind] = max(ok) if ok else None
    print(f"\nlongest S trained within {args.max_gb:g} GiB (and {args.timeout:g} s):")
    for kind, S in longest.items():
        note = " (forward only)" if forward_only(kind, args.device) else ""
        print(f"  {kind:<22} {S if S is not None else 'none'}{note}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "results": results, "longest_s": longest}, f, indent=2)


if __name__ == "__main__":
    main()
