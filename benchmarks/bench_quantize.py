"""Quantize+pack and unpack+dequantize of one message against a plain copy of its rows.

For ``x`` = ``[--rows, --dim]`` float32 (default 50,000 x 128) and per-row widths ``b`` in
{1, 2, 4, 8} (every row the same width) and ``mixed`` (25 % of the rows of each width, in
random order), the time of ``pack_rows(x, row_bits)`` + ``unpack_rows(buf, row_bits, D)``
is compared with the time of two ``x.clone()`` (the copies a send and a receive of the FP32
rows would make at least). Paths:

* ``default``: what ``pack_rows`` / ``unpack_rows`` run with no flag — on CPU the fused
  numba kernels, split over ``torch.get_num_threads()`` threads (``--threads``);
* ``1-thread``: the same kernels on one thread (``--single-thread``);
* ``reference``: the eager torch reference (``--reference``, on by default), i.e. the
  path taken without numba;
* ``cuda``: ``x`` on the GPU when ``torch.cuda.is_available()`` (the torch.compile
  counter core, compiled before timing).

Median of ``--reps`` interleaved repetitions (each: copy, pack, unpack of every case)
after ``--warmup`` untimed ones. Cold JIT time: ``warmup()`` in a fresh interpreter with
an empty numba cache directory, then again in a second interpreter that loads the cache
(the numba import is timed separately).

The fraction of wide-offset rows (rows sent with a float32 zero point, 2 extra bytes) is
counted on synthetic but realistic rows: ReLU activations, Gaussian gradients of
log-uniform scale, LayerNorm outputs, sigmoid outputs and pre-activations with a per-row
offset.

Results go to ``benchmarks/results/quantize.json``.

Usage::

    python benchmarks/bench_quantize.py [--rows 50000] [--dim 128] [--reps 9]
        [--threads N] [--single-thread] [--no-reference] [--no-cold]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from lightgraph.functional.quantize import backend, fused, reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the module (lightgraph.functional re-exports the function `quantize` under its name)
Q: Any = importlib.import_module("lightgraph.functional.quantize")
BITS = Q.BITS

_COLD = """
import json, time
t0 = time.perf_counter()
import numba  # noqa: F401
t1 = time.perf_counter()
from lightgraph.functional.quantize import warmup
t2 = time.perf_counter()
w = warmup()
print(json.dumps({"numba_import_s": t1 - t0, "module_import_s": t2 - t1, "warmup_s": w}))
"""


def cold_jit() -> dict[str, Any]:
    """``warmup()`` with an empty numba cache, then with the cache it wrote."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for key in ("cold", "cached"):
            res = subprocess.run(
                [sys.executable, "-c", _COLD],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            out[key] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def widths(n: int, case: str, gen: torch.Generator) -> torch.Tensor:
    if case == "mixed":
        return torch.tensor(BITS).repeat_interleave(-(-n // 4))[:n][
            torch.randperm(n, generator=gen)
        ]
    return torch.full((n,), int(case))


class _TorchPath:
    """Context: pack_rows / unpack_rows take the eager torch reference."""

    def __enter__(self) -> None:
        self.saved = backend._kernels
        backend._kernels = lambda: None

    def __exit__(self, *exc: object) -> None:
        backend._kernels = self.saved


class _OneThread:
    """Context: the kernels run on the calling thread only."""

    def __enter__(self) -> None:
        self.saved = fused._MAX_THREADS
        fused._MAX_THREADS = 1

    def __exit__(self, *exc: object) -> None:
        fused._MAX_THREADS = self.saved


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def timed(sync: bool, fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """``(seconds, fn(*args))``, synchronising CUDA around the call when ``sync``."""
    if sync:
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn(*args)
    if sync:
        torch.cuda.synchronize()
    return time.perf_counter() - t, out


def _two_clones(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.clone(), x.clone()


def run_timings(args: argparse.Namespace) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(args.seed)
    x_cpu = torch.randn(args.rows, args.dim, generator=gen)
    paths: list[tuple[str, torch.device, Any]] = [("default", torch.device("cpu"), _Nothing)]
    if args.single_thread:
        paths.append(("1-thread", torch.device("cpu"), _OneThread))
    if args.reference:
        paths.append(("reference", torch.device("cpu"), _TorchPath))
    if torch.cuda.is_available() and not args.no_cuda:
        paths.append(("cuda", torch.device("cuda"), _Nothing))
    cases = [str(b) for b in BITS] + ["mixed"]
    rows_of = {c: widths(args.rows, c, gen) for c in cases}
    xs = {torch.device("cpu"): x_cpu}
    if any(p[1].type == "cuda" for p in paths):
        xs[torch.device("cuda")] = x_cpu.cuda()
    # keys: (path, case) -> lists of seconds
    pack: dict[tuple[str, str], list[float]] = {}
    unpack: dict[tuple[str, str], list[float]] = {}
    copy: dict[str, list[float]] = {p[0]: [] for p in paths}
    bufs: dict[tuple[str, str], torch.Tensor] = {}
    for rep in range(args.warmup + args.reps):
        for path, device, ctx in paths:
            x = xs[device]
            sync = device.type == "cuda"
            t, _ = timed(sync, _two_clones, x)
            if rep >= args.warmup:
                copy[path].append(t)
            for case in cases:
                rb = rows_of[case].to(device)
                with ctx():
                    tp, buf = timed(sync, Q.pack_rows, x, rb)
                    tu, _ = timed(sync, Q.unpack_rows, buf, rb, args.dim)
                bufs[path, case] = buf
                if rep >= args.warmup:
                    pack.setdefault((path, case), []).append(tp)
                    unpack.setdefault((path, case), []).append(tu)
    results = []
    for path, _, _ in paths:
        c = statistics.median(copy[path])
        for case in cases:
            p = statistics.median(pack[path, case])
            u = statistics.median(unpack[path, case])
            tot = [a + b for a, b in zip(pack[path, case], unpack[path, case], strict=True)]
            results.append(
                {
                    "path": path,
                    "case": case,
                    "pack_ms": 1e3 * p,
                    "unpack_ms": 1e3 * u,
                    "total_ms": 1e3 * statistics.median(tot),
                    "copy_ms": 1e3 * c,
                    "ratio_vs_copy": statistics.median(tot) / c,
                    "best_total_ms": 1e3 * min(tot),
                    "best_copy_ms": 1e3 * min(copy[path]),
                    "best_ratio_vs_copy": min(tot) / min(copy[path]),
                    "message_bytes": int(bufs[path, case].numel()),
                    "fp32_bytes": args.rows * args.dim * 4,
                }
            )
    return results


def realistic_rows(n: int, d: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Synthetic rows shaped like what an exchange sends."""

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    scale = 10.0 ** (torch.rand(n, 1, generator=gen) * 4 - 6)  # 1e-6 .. 1e-2
    pre = randn(n, d) * randn(n, 1).abs() + randn(n, 1)
    return {
        "relu_activations": torch.relu(pre),
        "gaussian_gradients": randn(n, d) * scale,
        "layernorm_outputs": torch.nn.functional.layer_norm(randn(n, d) * 3 + 1, (d,)),
        "sigmoid_outputs": torch.sigmoid(pre),
        "offset_preactivations": randn(n, 1) * 4 + 0.1 * randn(n, d),
    }


def wide_fractions(args: argparse.Namespace) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(args.seed + 1)
    out = []
    n, d = min(args.rows, 20000), args.dim
    for name, x in realistic_rows(n, d, gen).items():
        for b in BITS:
            rb = torch.full((n,), b)
            buf = Q.pack_rows(x, rb, gen)
            w = Q.wide_rows(buf, rb, d)
            # rows whose bfloat16 zero point alone would miss the 1 % step bound
            mn, mx = x.aminmax(dim=1)
            z16 = reference._to_param(mn, -float("inf")).float()
            s16 = reference._scale_search("bench", mn, mx, z16, b)
            ideal = (mx.double() - mn.double()) / ((1 << b) - 1)
            needed = float((s16.double() > 1.01 * ideal).double().mean())
            out.append(
                {
                    "rows": name,
                    "bits": b,
                    "wide_fraction": w / n,
                    "extra_bytes_fraction": 2 * w / buf.numel(),
                    "fraction_over_1pct_with_bf16_zero": needed,
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2, help="untimed repetitions")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--single-thread", action="store_true", help="also time the kernels on one thread"
    )
    parser.add_argument("--no-reference", dest="reference", action="store_false")
    parser.add_argument("--no-cuda", action="store_true")
    parser.add_argument("--no-cold", dest="cold", action="store_false")
    parser.add_argument(
        "--out", default=os.path.join(ROOT, "benchmarks", "results", "quantize.json")
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cold = cold_jit() if args.cold else None
    tic = time.perf_counter()
    warm = Q.warmup()  # this process: compiled or loaded from the cache
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"x [{args.rows}, {args.dim}] float32, median of {args.reps} (+{args.warmup} warm-up)"
    )
    if cold is not None:
        for key in ("cold", "cached"):
            c = cold[key]
            print(
                f"warmup() {key:6s}: {c['warmup_s']:6.2f} s  (numba import "
                f"{c['numba_import_s']:.2f} s, module import {c['module_import_s']:.2f} s)"
            )
    print(f"warmup() in this process: {warm:.2f} s ({time.perf_counter() - tic:.2f} s)")
    results = run_timings(args)
    print(
        f"{'path':>9} {'bits':>5} {'pack ms':>9} {'unpack ms':>10} {'total ms':>9} "
        f"{'2x clone ms':>11} {'ratio':>6} | {'best tot':>8} {'best copy':>9} {'ratio':>6} "
        f"{'bytes':>9}"
    )
    for r in results:
        print(
            f"{r['path']:>9} {r['case']:>5} {r['pack_ms']:9.2f} {r['unpack_ms']:10.2f} "
            f"{r['total_ms']:9.2f} {r['copy_ms']:11.2f} {r['ratio_vs_copy']:6.2f} | "
            f"{r['best_total_ms']:8.2f} {r['best_copy_ms']:9.2f} "
            f"{r['best_ratio_vs_copy']:6.2f} {r['message_bytes']:9d}"
        )
    print("(medians; after '|' the best of the repetitions, less sensitive to other jobs)")
    wide = wide_fractions(args)
    print(f"{'rows':>22} " + " ".join(f"{'b=' + str(b):>20}" for b in BITS))
    for name in dict.fromkeys(w["rows"] for w in wide):
        cells = [w for w in wide if w["rows"] == name]
        print(
            f"{name:>22} "
            + " ".join(
                f"{100 * w['wide_fraction']:5.1f}% +{100 * w['extra_bytes_fraction']:3.1f}%B "
                f"[{100 * w['fraction_over_1pct_with_bf16_zero']:4.1f}%]"
                for w in cells
            )
        )
    print(
        "(wide-offset rows in % of rows, +their bytes in % of the message, [rows whose "
        "bf16 zero point alone would give a step > 1.01x the ideal])"
    )
    out = {
        "config": vars(args),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "load_average": os.getloadavg(),
        },
        "jit": {"cold": cold, "warmup_this_process_s": warm},
        "results": results,
        "wide_rows": wide,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
