"""Attention forward+backward time and peak memory against sequence length (TorchGT, ch. 4).

Every attention kind of :func:`lightgraph.functional.attention.attend` runs on one token sequence of
``S`` tokens, Graphormer-slim shape (hidden 64 = 8 heads x head dim 8), float32, ``[S, H, D]``
tensors, no attention bias and no dropout:

* ``dense``: full attention with ``scaled_dot_product_attention`` (on CPU the flash kernel:
  no ``S x S`` matrix; "GP-Flash");
* ``raw``: full attention with the ``[H, S, S]`` scores materialised ("GP-Raw");
* ``sparse``: topology-induced attention over the pattern's entries ("GP-Sparse");
* ``cluster_sparse``: the cluster-sparse kernel, threshold 0 (exactly the pattern);
* ``cluster_sparse:F``: the cluster-sparse kernel with transfer threshold ``F`` times the
  pattern's global density :math:`\\beta_G = E / S^2` (sparse off-diagonal cluster blocks
  become dense sub-blocks; TorchGT's elastic computation reformation). Default ``F = 5``.

The cluster count is :func:`~lightgraph.functional.attention.default_num_clusters` of the
hidden size (the fixed nominal 6 MiB cache: 8 at hidden 64, the same on every machine; at most
``S``), the sub-block side ``--block-size`` (16).

Pattern (``--pattern``), built once per ``S`` in its own subprocess:

* ``metis`` (default): a :class:`lightgraph.data.SyntheticGraph` of ``S - 1`` nodes
  (``--avg-degree`` 10, i.e. about 10 entries per query), reordered with
  :func:`~lightgraph.data.sequences.metis_order` into ``--metis-parts`` (8, the data
  module's clusters per sequence) contiguous parts, then turned into the sequence's pattern
  by :func:`~lightgraph.data.sequences.build_sequence`: the graph edges, one self-loop per
  token and a global token 0 that attends to and is attended by every token -- exactly what
  ``NodeSequenceDataModule`` feeds the model for one sequence. Note the synthetic graph's only
  structure is its communities (edges inside a community are random), so the METIS order
  gives dense-ish cluster blocks but little locality *inside* them: the cluster-sparse
  kernel's tiles are sparsely filled (see ``tile_fill`` in the JSON).
* ``local``: a documented local generator with locality at every scale: ``S - 1`` nodes,
  ``avg_degree / 2`` undirected edges per node, 90 % of them to a node at a distance drawn
  from an exponential law of mean 16 tokens and 10 % to a uniformly random node, symmetrised;
  then the same ``build_sequence`` (self-loops, global token 0).

``dense`` and ``raw`` do not depend on the pattern and run on a self-loop-only graph.

Measurement. Every (kind, S) runs in a fresh subprocess
(``python benchmarks/bench_attention.py --worker KIND S ...``), so an out-of-memory kill or a
slow case cannot take the run down; each has a wall-clock limit of ``--timeout`` s. A kind
that timed out or ran out of memory at some ``S`` is skipped at larger ``S``. The worker
uses ``torch.set_num_threads(--threads)``, builds ``q, k, v`` (leaf tensors that require
grad) and the pattern, then records the baseline ``resource.getrusage(RUSAGE_SELF).ru_maxrss``
(the RSS high-water mark once the inputs exist). It then builds the kind's cached structure
(cluster layout; timed as ``layout_s``), runs one warm-up forward+backward
(``attend(...).backward(grad)``) and ``--repeats`` timed ones; time is their median. If the
warm-up shows that all repeats cannot fit in the time left, fewer are run (at least one; if
not even one fits, the warm-up itself is reported, ``warmup_only``). Peak memory is the
final ``ru_maxrss`` minus the baseline: the growth of the process's RSS high-water mark
during attention -- autograd's saved tensors, the gradients of ``q, k, v``, the cached
layout/CSR structures built on first use and the allocator's caches. (The inputs
themselves are not counted; ``baseline_gib`` in the JSON has them. Because the baseline is
a high-water mark too, an input-building transient larger than the attention's own use
would hide the latter; the inputs here are built with small transients.)

Memory cap ``--max-gb`` (GiB): ``raw`` cases whose ``[H, S, S]`` scores and their gradients
(about four such matrices) cannot fit are skipped and reported as "skipped (needs N GiB)";
``dense`` (flash kernel, ``O(S)`` memory) is estimated the same way but never needs an
``S x S`` matrix. Every worker also limits its address space (``RLIMIT_AS``) to its size
after building the inputs plus ``--max-gb``, so an over-budget case fails with an
allocation error ("out of memory") instead of swapping or invoking the OOM killer. The
summary gives, per kind, the longest ``S`` trained (completed within ``--timeout``) within
``--max-gb``.

On ``--device cuda`` the inputs and the pattern live on the GPU, times are taken between
``torch.cuda.synchronize`` calls and peak memory is ``torch.cuda.max_memory_allocated``
minus the inputs (no address-space limit is set; ``--max-gb`` still skips ``raw`` cases
that cannot fit).

Usage::

    python benchmarks/bench_attention.py                       # S = 4K .. 1M, all kinds
    python benchmarks/bench_attention.py --sizes 1024 4096 --repeats 3 --out attn.json
    python benchmarks/bench_attention.py --kinds sparse cluster_sparse cluster_sparse:5 \\
        --sizes 65536 262144 --pattern local --threads 2 --timeout 300 --max-gb 16
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HIDDEN, HEADS = 64, 8
HEAD_DIM = HIDDEN // HEADS
DEFAULT_KINDS = ("dense", "raw", "sparse", "cluster_sparse", "cluster_sparse:5")
DEFAULT_SIZES = (4096, 16384, 65536, 262144, 1048576)
RAW_SCORE_COPIES = 3  # [H, S, S] float32 matrices alive at raw's peak: measured 3.0 at S = 4096
DENSE_ROW_BYTES = 64 * HIDDEN  # generous per-token working set of the flash kernel
RESULT_TAG = "RESULT "
SETUP_TAG = "SETUP_DONE "
GIB = 1 << 30


def parse_kind(kind: str) -> tuple[str, float]:
    """``"cluster_sparse:5"`` -> ``("cluster_sparse", 5.0)``; other kinds -> ``(kind, 0.0)``."""
    base, _, factor = kind.partition(":")
    if base not in ("dense", "raw", "sparse", "cluster_sparse") or (
        factor and base != "cluster_sparse"
    ):
        raise argparse.ArgumentTypeError(
            f"expected a kind among dense, raw, sparse, cluster_sparse, cluster_sparse:FACTOR "
            f"but got {kind!r}"
        )
    return base, float(factor or 0.0)


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


def _local_edges(n: int, avg_degree: float, seed: int):
    """``local`` pattern generator (see the module docstring): ``[2, E]`` undirected edges."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    m = max(1, round(n * avg_degree / 2))
    src = torch.randint(0, n, (m,), generator=gen)
    far = torch.rand(m, generator=gen) < 0.1
    dist = torch.empty(m).exponential_(1 / 16.0, generator=gen).ceil().long()
    sign = torch.randint(0, 2, (m,), generator=gen) * 2 - 1
    dst = (src + sign * dist).clamp_(0, n - 1)
    dst = torch.where(far, torch.randint(0, n, (m,), generator=gen), dst)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    return torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])


def prepare(S: int, path: str, args: argparse.Namespace) -> None:
    """Build the pattern of an ``S``-token sequence and save it to ``path``."""
    import torch

    from lightgraph.data import SyntheticGraph
    from lightgraph.data.sequences import build_sequence, metis_order, split_sequences

    torch.set_num_threads(args.threads)
    n, clock = S - 1, time.perf_counter()
    if args.pattern == "metis":
        data = SyntheticGraph(
            num_nodes=n, avg_degree=args.avg_degree, num_features=1, seed=args.seed
        ).load()
        order = metis_order(data.edge_index, n, min(args.metis_parts, n), args.seed)
        _, (edges,) = split_sequences(data.edge_index, order, n)
    else:
        edges = _local_edges(n, args.avg_degree, args.seed)
    seq = build_sequence(torch.zeros(n, 1), edges, global_token=True, dense_limit=0)
    edge_index = seq.graph.edge_index
    torch.save({"num_tokens": S, "edge_index": edge_index.clone()}, path)
    print(
        RESULT_TAG
        + json.dumps(
            {"entries": edge_index.shape[1], "build_s": round(time.perf_counter() - clock, 2)}
        ),
        flush=True,
    )


def worker(kind: str, S: int, args: argparse.Namespace) -> dict:
    """Time and measure one (kind, S) case in this process; returns its result."""
    start = time.perf_counter()
    import torch

    from lightgraph.functional.attention import AttentionGraph, attend, default_num_clusters

    base, factor = parse_kind(kind)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if base in ("dense", "raw"):
        graph = AttentionGraph(S, torch.arange(S).repeat(2, 1))  # unused by full attention
    else:
        graph = AttentionGraph(S, torch.load(args.pattern_file, mmap=True)["edge_index"])
    graph = graph.to(device)
    graph.validate()
    gen = torch.Generator().manual_seed(args.seed)
    q, k, v = (
        torch.randn(S, HEADS, HEAD_DIM, generator=gen).to(device).requires_grad_() for _ in range(3)
    )
    grad_out = torch.randn(S, HEADS, HEAD_DIM, generator=gen).to(device)
    E = graph.edge_index.shape[1]
    result: dict = {"kind": kind, "S": S, "entries": E if base not in ("dense", "raw") else S * S}
    result["device"] = torch.cuda.get_device_name(device) if cuda else "cpu"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device) >> 10
    else:
        baseline = _maxrss_kib()
    if args.max_gb > 0 and not cuda:  # CUDA reserves address space far beyond its use
        cap = _vm_size_bytes() + int(args.max_gb * GIB)
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    print(SETUP_TAG + f"{time.perf_counter() - start:.3f}", flush=True)

    options: dict = {}
    try:
        if base == "cluster_sparse":
            clusters = min(default_num_clusters(HIDDEN), S)
            threshold = min(1.0, factor * E / S**2)
            clock = time.perf_counter()
            layout = graph.cluster_layout(clusters, args.block_size, threshold)
            db2 = args.block_size**2
            result.update(
                layout_s=time.perf_counter() - clock,
                num_clusters=clusters,
                threshold=threshold,
                global_density=layout.global_density,
                tiles=layout.num_tiles,
                tiles_transferred=layout.num_tiles_transferred,
                entries_attended=layout.num_entries,
                entries_added=layout.num_entries_added,
                entries_dropped=layout.num_entries_dropped,
                tile_fill=layout.num_entries / max(1, layout.num_tiles * db2),
            )
            options = {
                "num_clusters": clusters,
                "block_size": args.block_size,
                "threshold": threshold,
            }

        def peak_kib() -> int:
            return (torch.cuda.max_memory_allocated(device) >> 10) if cuda else _maxrss_kib()

        def step() -> float:
            q.grad = k.grad = v.grad = None
            if cuda:
                torch.cuda.synchronize(device)
            clock = time.perf_counter()
            attend(q, k, v, graph, base, **options).backward(grad_out)
            if cuda:
                torch.cuda.synchronize(device)
            return time.perf_counter() - clock

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


def _run(cmd: list[str], timeout: float, threads: int) -> tuple[int | None, str, str]:
    """Run ``cmd``; returns (return code or None on timeout, stdout, stderr)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return None, out, ""
    return proc.returncode, proc.stdout, proc.stderr


def _tagged(text: str, tag: str) -> str | None:
    lines = [line[len(tag) :] for line in text.splitlines() if line.startswith(tag)]
    return lines[-1] if lines else None


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
        f"--metis-parts={args.metis_parts}",
        f"--device={args.device}",
    ]


def build_pattern(S: int, path: str, args: argparse.Namespace) -> dict:
    if os.path.exists(path):
        return {"status": "ok", "cached": True}
    cmd = [sys.executable, os.path.abspath(__file__), "--prepare", str(S), path]
    code, out, err = _run(cmd + _common_flags(args), args.timeout, args.threads)
    if code is None:
        return {"status": f"pattern build timed out (> {args.timeout:g} s)"}
    line = _tagged(out, RESULT_TAG)
    if code != 0 or line is None:
        return {"status": f"pattern build failed (rc {code}): {err.strip()[-300:]}"}
    return {"status": "ok", **json.loads(line)}


def run_case(kind: str, S: int, pattern_file: str | None, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, str(S)]
    cmd += _common_flags(args)
    if pattern_file:
        cmd.append(f"--pattern-file={pattern_file}")
    clock = time.perf_counter()
    code, out, err = _run(cmd, args.timeout, args.threads)
    wall = time.perf_counter() - clock
    line = _tagged(out, RESULT_TAG)
    if code is None:
        setup = _tagged(out, SETUP_TAG)
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
        return f"{kind:<18} {S:>8d}  {r.get('note', r['status'])}"
    t = r["time_s"]
    speed = "-"
    if dense and dense.get("status") == "ok":
        speed = f"{dense['time_s'] / t:.1f}x"
    elif dense and "time_lower_bound_s" in dense:
        speed = f">{dense['time_lower_bound_s'] / t:.1f}x"
    flag = " (warm-up only)" if r.get("warmup_only") else ""
    return f"{kind:<18} {S:>8d} {t:>11.3f} {r['peak_gib']:>9.3f} {speed:>9}{flag}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--kinds", nargs="+", default=list(DEFAULT_KINDS))
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after one warm-up")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--max-gb", type=float, default=22.0, help="memory cap per case (GiB)")
    parser.add_argument("--pattern", choices=("metis", "local"), default="metis")
    parser.add_argument("--avg-degree", type=float, default=10.0)
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
                    if r["status"] in ("timeout", "oom", "error"):
                        failed[kind] = f"skipped ({r['status']} at S={S})"
                results.append(r)
                shown = {k: v for k, v in r.items() if k not in ("times_s", "stderr")}
                print(json.dumps(shown), flush=True)

    print(
        f"\nAttention forward+backward: hidden {HIDDEN} = {HEADS} heads x {HEAD_DIM}, float32, "
        f"no bias; pattern {args.pattern} (avg degree {args.avg_degree:g}, self-loops, global "
        f"token); {args.threads} threads; median of {args.repeats} after 1 warm-up; "
        f"limits {args.timeout:g} s, {args.max_gb:g} GiB per case"
    )
    print(f"{'kind':<18} {'S':>8} {'fwd+bwd s':>11} {'peak GiB':>9} {'vs dense':>9}")
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
        print(f"  {kind:<18} {S if S is not None else 'none'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "results": results, "longest_s": longest}, f, indent=2)


if __name__ == "__main__":
    main()
