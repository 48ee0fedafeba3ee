"""Longest sequence Graphormer-slim trains end to end: whole-model training steps against S.

``bench_attention.py`` times one attention layer. This benchmark measures a whole training
step of the model TorchGT trains -- ``lightgraph.nn.Graphormer(preset="slim", task="node")``:
4 pre-LN layers, hidden 64, 8 heads, FFN, the shared spatial bias table, degree
(centrality) encoding, global token, dropout 0.1 -- on ONE node sequence of ``S`` tokens,
for ``S`` doubling (default 64K .. 2M), and reports per attention kind the longest ``S``
that completed within a memory cap and a time limit.

Sequence. For each ``S`` a preparation subprocess builds exactly what
``NodeSequenceDataModule`` feeds the model for a graph of ``S - 1`` nodes cut into one
sequence (``sequence_length = S - 1``): a :class:`lightgraph.data.SyntheticGraph` of
``S - 1`` nodes (``--avg-degree`` 20 and ``--homophily`` 0.5 as in ``recipes/torchgt.yaml``,
64 features, 8 classes, optionally ``--locality``), reordered by the data module
(``--reorder metis``: 8 METIS parts, the data module's 8 clusters per sequence; or
``none``) and turned into the sequence by ``NodeSequenceDataModule.build_sequences``
(``lightgraph.data.partition.sequences.build_sequence``): graph edges, self-loops, the global token
0 linked both ways to every node, the token-order path when the data module adds it
(``--token-path``; the data module's default otherwise), the bias bucket of every entry
and the in/out-degrees. No ``[S, S]`` shortest-path table is built (``S`` is above the
data module's ``dense_limit``), so dense attention runs without spatial bias, as in
training. The sequence is saved in the data module's cache format and reused by every
kind at that ``S`` (``--cache-dir`` keeps it across runs). The seconds of every
preparation phase (graph generation, METIS reorder, sequence build) are reported
(``prepare`` in the JSON): METIS is single-threaded, so if it is too slow at some ``S``,
``--reorder none`` (or ``--fallback-none``, which rebuilds without METIS when the METIS
build times out or fails) keeps the node ids in generator order -- same edges and
degrees, only the pattern's layout (and with it ``cluster_sparse``'s tile fill) changes.

Training step. Each (kind, ``S``) runs in a fresh subprocess (``--worker``) with
``torch.set_num_threads(--threads)``. It records the RSS high-water mark after the imports
(``baseline_gib``), then limits its address space (``RLIMIT_AS``) to its size at that point
plus ``--max-gb``, so the sequence, the model, autograd's saved tensors, the optimiser
state and the kernels' cached structures must all fit in ``--max-gb``; an over-budget
case fails with an allocation error and is reported as ``oom`` instead of swapping or
invoking the OOM killer (the cap counts address space, which is at least the resident
memory). It loads the sequence (``inputs_gib``: RSS high-water mark after loading), builds
the model (``kind``; ``cluster_sparse`` with ``num_clusters=8``, ``block_size=16`` as in
the recipe and threshold ``--threshold-factor`` times the pattern's global density
``beta_G = E / S^2``, default 1: the ``ClusterSparsityTuner``'s starting rung) and
``torch.optim.AdamW(lr=1e-3, weight_decay=0)`` -- what ``GraphTransformerModule``
configures (i.e. Adam) -- and runs training steps the way ``GraphTransformerModule`` does,
in a plain loop without Lightning: set every attention layer's ``step`` to the step
count, ``out = model(batch, "train")``, loss = cross-entropy summed over the training
tokens divided by their count, ``zero_grad``, ``backward``, ``optimizer.step``. One
warm-up step (it also builds the CSR / cluster-sparse structures, cached for later
steps) and ``--steps`` timed ones; the step time is their median. If the warm-up shows
that the timed steps cannot all fit in the time left, fewer are run (if none fits, the
warm-up is reported, ``warmup_only``). ``peak_gib`` is the final RSS high-water mark of
the process (``ru_maxrss``: everything, inputs included) -- the number to hold against
the machine's memory; ``train_peak_gib`` is its growth over ``inputs_gib``.

Dense attention and dropout. Graphormer's default ``attention_dropout=0.1`` (what the
recipes train with, ``--attention-dropout``) makes PyTorch's CPU
``scaled_dot_product_attention`` leave its flash kernel for the math kernel, which
materialises the ``[H, S, S]`` scores: measured on one layer at ``S = 4096`` (8 heads x 8,
1 thread), forward + backward took 6.1 s and 2.2 GiB with dropout 0.1 against 1.15 s and
0.23 GiB with dropout 0; the whole model at ``S = 4096`` (1 thread) took 23.3 s a step
and 7.2 GiB peak RSS against 3.3 s and 0.63 GiB. So ``dense`` here is "GP-Flash as
trained"; run with ``--attention-dropout 0`` for the flash kernel's own limits.

GPU. ``--device cuda`` moves the sequence and the model to the GPU and synchronises after
each step; ``--max-gb`` then caps the GPU's caching allocator
(``torch.cuda.set_per_process_memory_fraction``: ``--max-gb 24`` behaves as a 24 GB card)
instead of the address space, and ``peak_gib`` is ``torch.cuda.max_memory_allocated``
(``peak_rss_gib`` keeps the host's RSS).

Every case also has a wall-clock limit (``--timeout`` s, the subprocess is killed past
it). A kind that timed out, ran out of memory or failed at some ``S`` is not run at
larger ``S``. The summary gives, per kind, the longest ``S`` that completed, its step
time and peak RSS; ``--out`` writes every case as JSON.

Usage::

    # the measurement (idle machine; hours): 64K .. 2M tokens, sparse / cluster_sparse / dense
    python benchmarks/bench_torchgt_length.py --out benchmarks/results/torchgt_length.json \\
        --cache-dir /tmp/torchgt_length
    # smoke run
    python benchmarks/bench_torchgt_length.py --sizes 4096 16384 --steps 1 --timeout 120 \\
        --max-gb 8 --out /tmp/length_smoke.json
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

DEFAULT_SIZES = (65536, 131072, 262144, 524288, 1048576, 2097152)
DEFAULT_KINDS = ("sparse", "cluster_sparse", "dense")
NUM_FEATURES, NUM_CLASSES = 64, 8
NUM_CLUSTERS, BLOCK_SIZE = 8, 16  # recipes/torchgt.yaml
RESULT_TAG = "RESULT "
SETUP_TAG = "SETUP_DONE "
GIB = 1 << 30


def _maxrss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)  # KiB on Linux


def _vm_size_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _limit_address_space(max_gb: float) -> None:
    if max_gb > 0:
        cap = _vm_size_bytes() + int(max_gb * GIB)
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or "alloc" in text or "out of memory" in text


# -------------------------------------------------------------------- subprocess: prepare
def prepare(S: int, path: str, reorder: str, args: argparse.Namespace) -> dict:
    """Build the one-sequence TokenBatch of ``S`` tokens as the data module does; save it."""
    import torch

    from lightgraph.data import NodeSequenceDataModule, SyntheticGraph
    from lightgraph.data.lightning.node_sequence import _to_state

    torch.set_num_threads(args.threads)
    _limit_address_space(args.max_gb)
    clock = time.perf_counter()
    graph_args: dict = {
        "num_nodes": S - 1,
        "avg_degree": args.avg_degree,
        "homophily": args.homophily,
        "num_features": NUM_FEATURES,
        "num_classes": NUM_CLASSES,
        "seed": args.seed,
    }
    if args.locality > 0:
        graph_args.update(locality=args.locality, locality_scale=args.locality_scale)
    module_args: dict = {"sequence_length": S - 1, "reorder": reorder, "seed": args.seed}
    if args.token_path is not None:
        module_args["token_path"] = args.token_path == "on"
    module = NodeSequenceDataModule(
        SyntheticGraph(**graph_args), cache_dir=os.path.dirname(path), **module_args
    )
    (item,) = module.build_sequences()
    if item.num_tokens != S:
        raise RuntimeError(f"expected a sequence of {S} tokens but built {item.num_tokens}")
    torch.save(_to_state(item), path)
    info = {
        "S": S,
        "reorder": reorder,
        "token_path": bool(getattr(module, "token_path", False)),
        "dataset": module.dataset.fingerprint(),
        "entries": int(item.graph.edge_index.size(1)),
        "entries_per_token": round(item.graph.edge_index.size(1) / S, 2),
        "seconds": {k: round(v, 2) for k, v in module.build_seconds.items()},
        "total_s": round(time.perf_counter() - clock, 2),
        "peak_gib": round(_maxrss_gib(), 3),
    }
    with open(path + ".json", "w") as f:
        json.dump(info, f)
    return info


# --------------------------------------------------------------------- subprocess: worker
def worker(kind: str, S: int, args: argparse.Namespace) -> dict:
    """Time whole-model training steps of one (kind, S) case in this process."""
    start = time.perf_counter()
    import torch
    import torch.nn.functional as F

    from lightgraph.data.lightning.node_sequence import _from_state
    from lightgraph.nn import Graphormer, MultiheadGraphAttention

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cuda = args.device == "cuda"
    result: dict = {"kind": kind, "S": S, "threads": args.threads, "device": args.device}
    result["baseline_gib"] = _maxrss_gib()
    if cuda:  # the cap is on the GPU's allocator: --max-gb of its memory, like a smaller card
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.max_gb * GIB / total))
        result["gpu"] = torch.cuda.get_device_name(0)
    else:
        _limit_address_space(args.max_gb)
    print(SETUP_TAG + f"{time.perf_counter() - start:.3f}", flush=True)

    def peak() -> float:  # GPU: the allocator's high-water mark; CPU: the process's RSS
        return torch.cuda.max_memory_allocated() / GIB if cuda else _maxrss_gib()

    try:
        batch = _from_state(args.pattern_file, 1, 0)
        if cuda:
            batch = batch.to("cuda")
        graph = batch.graph
        E = int(graph.edge_index.size(1))
        result.update(entries=E, inputs_gib=peak())
        options: dict = {}
        if kind == "cluster_sparse":
            options = {
                "num_clusters": NUM_CLUSTERS,
                "block_size": BLOCK_SIZE,
                "threshold": min(1.0, args.threshold_factor * E / float(S) ** 2),
            }
            result["threshold"] = options["threshold"]
        model = Graphormer(
            NUM_FEATURES,
            NUM_CLASSES,
            preset="slim",
            kind=kind,
            task="node",
            attention_dropout=args.attention_dropout,
            **options,
        ).to(args.device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        layers = [m for m in model.modules() if isinstance(m, MultiheadGraphAttention)]
        mask = batch.train_mask
        count = max(batch.global_counts.get("train_mask", int(mask.sum())), 1)
        model.train()
        steps_done = 0

        def step() -> tuple[float, float]:
            nonlocal steps_done
            clock = time.perf_counter()
            for layer in layers:
                layer.step = steps_done  # GraphTransformerModule: the optimiser step count
            out = model(batch, "train")
            loss = F.cross_entropy(out[mask], batch.y[mask].long(), reduction="sum") / count
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if cuda:
                torch.cuda.synchronize()
            steps_done += 1
            return time.perf_counter() - clock, float(loss.detach())

        warm, loss0 = step()
        left = 0.9 * args.timeout - (time.perf_counter() - start)
        n = min(args.steps, int(left // warm)) if warm > 0 else args.steps
        timed = [step() for _ in range(max(0, n))]
        times = [t for t, _ in timed] or [warm]
        if kind == "cluster_sparse":
            layout = graph.cluster_layout(NUM_CLUSTERS, BLOCK_SIZE, options["threshold"])
            result.update(tiles=layout.num_tiles, tile_fill=layout.tile_fill)
        result.update(
            status="ok",
            warmup_only=not timed,
            step_s=statistics.median(times),
            steps_s=times,
            warmup_s=warm,
            losses=[loss0] + [loss for _, loss in timed],
            last_step_dense=any(layer.last_dense for layer in layers),
            peak_gib=peak(),
            peak_rss_gib=_maxrss_gib(),
        )
        result["train_peak_gib"] = result["peak_gib"] - result["inputs_gib"]
    except (MemoryError, RuntimeError) as exc:
        if not _is_oom(exc):
            raise
        what = "GPU memory" if cuda else "address space"
        result.update(status="oom", note=f"out of memory (> {args.max_gb:g} GiB {what})")
        result["peak_gib"] = peak()
    return result


# --------------------------------------------------------------------------------- driver
def _common_flags(args: argparse.Namespace) -> list[str]:
    flags = [
        f"--threads={args.threads}",
        f"--timeout={args.timeout}",
        f"--max-gb={args.max_gb}",
        f"--steps={args.steps}",
        f"--seed={args.seed}",
        f"--avg-degree={args.avg_degree}",
        f"--homophily={args.homophily}",
        f"--locality={args.locality}",
        f"--locality-scale={args.locality_scale}",
        f"--threshold-factor={args.threshold_factor}",
        f"--attention-dropout={args.attention_dropout}",
        f"--device={args.device}",
    ]
    if args.token_path is not None:
        flags.append(f"--token-path={args.token_path}")
    return flags


def _pattern_path(cache: str, S: int, reorder: str, args: argparse.Namespace) -> str:
    tag = f"S{S}-deg{args.avg_degree:g}-h{args.homophily:g}-{reorder}-seed{args.seed}"
    if args.locality > 0:
        tag += f"-loc{args.locality:g}x{args.locality_scale:g}"
    if args.token_path is not None:
        tag += f"-path{args.token_path}"
    return os.path.join(cache, f"sequence-{tag}.pt")


def build_sequence_file(S: int, cache: str, args: argparse.Namespace) -> dict:
    """Prepare (or reuse) the sequence of ``S`` tokens; falls back to ``reorder=none``."""
    reorders = [args.reorder]
    if args.reorder == "metis" and args.fallback_none:
        reorders.append("none")
    notes = []
    for reorder in reorders:
        path = _pattern_path(cache, S, reorder, args)
        if os.path.exists(path) and os.path.exists(path + ".json"):
            with open(path + ".json") as f:
                return {"status": "ok", "path": path, "cached": True, **json.load(f)}
        cmd = [sys.executable, os.path.abspath(__file__), "--prepare", str(S), path, reorder]
        clock = time.perf_counter()
        code, out, err = run_worker(cmd + _common_flags(args), args.prepare_timeout, args.threads)
        line = tagged(out, RESULT_TAG)
        if code == 0 and line is not None:
            return {"status": "ok", "path": path, **json.loads(line), "notes": notes}
        if code is None:
            why = f"{reorder} build timed out (> {args.prepare_timeout:g} s)"
        elif code < 0:
            why = f"{reorder} build killed by signal {-code} (likely out of memory)"
        else:
            why = f"{reorder} build failed (rc {code}): {err.strip()[-300:]}"
        notes.append(f"{why} after {time.perf_counter() - clock:.0f} s")
        for leftover in (path, path + ".json"):
            if os.path.exists(leftover):
                os.remove(leftover)
    return {"status": "; ".join(notes)}


def run_case(kind: str, S: int, pattern_file: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, str(S)]
    cmd += _common_flags(args) + [f"--pattern-file={pattern_file}"]
    clock = time.perf_counter()
    code, out, err = run_worker(cmd, args.timeout, args.threads)
    wall = time.perf_counter() - clock
    line = tagged(out, RESULT_TAG)
    if code is None:
        result = {"kind": kind, "S": S, "status": "timeout"}
        result["note"] = f"timed out (> {args.timeout:g} s)"
        return {**result, "wall_s": wall}
    if code == 0 and line is not None:
        return {**json.loads(line), "wall_s": wall}
    note = f"killed by signal {-code} (likely out of memory)" if code < 0 else f"failed (rc {code})"
    return {"kind": kind, "S": S, "status": "error", "note": note, "stderr": err.strip()[-2000:]}


def _format_row(r: dict) -> str:
    head = f"{r['kind']:<16} {r['S']:>9d}"
    if r["status"] != "ok":
        return f"{head}  {r.get('note', r['status'])}"
    flag = " (warm-up only)" if r.get("warmup_only") else ""
    return (
        f"{head} {r['step_s']:>9.2f} {r['warmup_s']:>9.2f} {r['peak_gib']:>9.2f} "
        f"{r['inputs_gib']:>9.2f}{flag}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--kinds", nargs="+", default=list(DEFAULT_KINDS))
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    parser.add_argument("--prepare-timeout", type=float, default=3600.0)
    parser.add_argument("--max-gb", type=float, default=22.0, help="address space per case (GiB)")
    parser.add_argument("--avg-degree", type=float, default=20.0)
    parser.add_argument("--homophily", type=float, default=0.5)
    parser.add_argument("--locality", type=float, default=0.0)
    parser.add_argument("--locality-scale", type=float, default=16.0)
    parser.add_argument("--reorder", choices=("metis", "none"), default="metis")
    parser.add_argument(
        "--fallback-none",
        action="store_true",
        help="rebuild with reorder=none when the METIS build times out or fails",
    )
    parser.add_argument(
        "--token-path",
        choices=("on", "off"),
        default=None,
        help="the data module's token_path (default: its own default)",
    )
    parser.add_argument(
        "--threshold-factor",
        type=float,
        default=1.0,
        help="cluster_sparse threshold in units of beta_G (1: the tuner's start; 0: exact)",
    )
    parser.add_argument(
        "--attention-dropout",
        type=float,
        default=0.1,
        help="Graphormer's attention_dropout (0.1: its default, the recipes'); see the docstring",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: train on the GPU; --max-gb then caps the GPU allocator "
        "(torch.cuda.set_per_process_memory_fraction) and peak GiB is its high-water mark",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None, help="keep the built sequences here")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "S"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--prepare", nargs=3, metavar=("S", "PATH", "REORDER"), help=argparse.SUPPRESS
    )
    parser.add_argument("--pattern-file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.prepare:
        S, path, reorder = int(args.prepare[0]), args.prepare[1], args.prepare[2]
        print(RESULT_TAG + json.dumps(prepare(S, path, reorder, args)), flush=True)
        return
    if args.worker:
        print(RESULT_TAG + json.dumps(worker(args.worker[0], int(args.worker[1]), args)))
        return
    if min(args.sizes) < 12:
        parser.error("expected every size >= 12 (the synthetic graph needs 11 nodes)")
    if args.steps < 1:
        parser.error(f"expected --steps >= 1 but got {args.steps}")

    results: list[dict] = []
    prepared: list[dict] = []
    failed: dict[str, str] = {}  # kind -> why larger S are skipped
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or tmp
        os.makedirs(cache, exist_ok=True)
        for S in sorted(args.sizes):
            todo = [k for k in args.kinds if k not in failed]
            for kind in args.kinds:
                if kind in failed:
                    r = {"kind": kind, "S": S, "status": "skipped", "note": failed[kind]}
                    results.append(r)
                    print(json.dumps(r), flush=True)
            if not todo:
                continue
            built = build_sequence_file(S, cache, args)
            prepared.append({k: v for k, v in built.items() if k != "path"})
            print(json.dumps({"prepare": prepared[-1]}), flush=True)
            for kind in todo:
                if built["status"] != "ok":
                    r = {"kind": kind, "S": S, "status": "skipped", "note": built["status"]}
                else:
                    r = run_case(kind, S, built["path"], args)
                    r["reorder"] = built["reorder"]
                    if r["status"] in ("timeout", "oom", "error"):
                        failed[kind] = f"skipped ({r['status']} at S={S})"
                results.append(r)
                shown = {k: v for k, v in r.items() if k not in ("steps_s", "stderr", "losses")}
                print(json.dumps(shown), flush=True)
            if not args.cache_dir:  # the temporary sequence of this S is not needed again
                for p in os.listdir(tmp):
                    os.remove(os.path.join(tmp, p))

    print(
        f"\nGraphormer-slim whole training step (4 layers, hidden 64, 8 heads, FFN, spatial "
        f"bias, degree encoding, AdamW) on one sequence of S tokens: SyntheticGraph "
        f"(avg degree {args.avg_degree:g}, homophily {args.homophily:g}"
        + (f", locality {args.locality:g}" if args.locality > 0 else "")
        + f"), reorder {args.reorder}; {args.threads} threads; median of {args.steps} steps "
        f"after 1 warm-up; limits {args.timeout:g} s, {args.max_gb:g} GiB per case"
    )
    print(f"{'kind':<16} {'S':>9} {'step s':>9} {'warm-up s':>9} {'peak GiB':>9} {'input GiB':>9}")
    for r in results:
        print(_format_row(r))
    longest: dict[str, dict | None] = {}
    for kind in args.kinds:
        ok = [r for r in results if r["kind"] == kind and r["status"] == "ok"]
        best = max(ok, key=lambda r: r["S"]) if ok else None
        longest[kind] = (
            None
            if best is None
            else {"S": best["S"], "step_s": best["step_s"], "peak_gib": best["peak_gib"]}
        )
    print(f"\nlongest S trained end to end within {args.max_gb:g} GiB and {args.timeout:g} s:")
    for kind, best in longest.items():
        if best is None:
            print(f"  {kind:<16} none")
        else:
            print(
                f"  {kind:<16} S = {best['S']:,} (step {best['step_s']:.2f} s, "
                f"peak {'GPU memory' if args.device == 'cuda' else 'RSS'} "
                f"{best['peak_gib']:.2f} GiB)"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {"config": vars(args), "prepare": prepared, "results": results, "longest": longest},
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
