"""Every GPU path of lightgraph exercised in one short run; run it first whenever a GPU is at hand.

    python benchmarks/gpu_check.py                 # the full check on one CUDA GPU (<= 8 min)
    python benchmarks/gpu_check.py --cpu           # what runs without a GPU, small sizes (< 1 min)
    python benchmarks/gpu_check.py --out DIR --recipes all --skip headlines

Three parts, each recorded even when another fails:

1. ``tests``: every test marked ``cuda`` (``pytest -m cuda tests``); with ``--cpu`` the marked
   tests are only collected (they must import).
2. ``recipes``: every recipe in ``recipes/`` for a few steps on the GPU, each in its own
   ``lightgraph fit`` process on a small graph. A recipe written for several processes
   (``devices: 2`` or more) runs twice: once as one process on its strategy's own CUDA
   backend (NCCL), which rejects any collective handed a host tensor, and once as two
   processes sharing the one GPU over gloo (NCCL refuses two ranks on one device), which
   runs the real boundary exchange, all-to-all and pipeline between ranks.
3. ``headlines``: the GPU ratios side by side in one process (``benchmarks/gpu_headlines.py``):
   quantise+pack and unpack against a device copy, the sampler on the GPU against the CPU,
   JOESTAR's stage 2 on the device against NS on the host, flex against CSR attention at 64K
   tokens, and resume bit-exactness with the CUDA generator.

It writes ``gpu_check.json`` (everything), ``gpu_check.md`` (the summary printed last) and
``gpu_check_logs.txt`` (the output of whatever failed) into ``--out`` (``$OUT`` when set,
else ``benchmarks/results/gpu_check``), and exits non-zero when anything failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import datetime
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from typing import Any

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
SHARE_ENV = "LIGHTGRAPH_GPU_CHECK_SHARE"  # "<processes>:<device>": ranks that share one device
# What `--cpu` runs by default: one full-graph and one sampled recipe, one of them on two
# processes (the sharing path); `--recipes all` runs every recipe.
CPU_RECIPES = ("single.yaml", "ns.yaml")
PARTS = ("tests", "recipes", "headlines")
# Two processes cannot share one GPU over gloo where a recipe sends point to point: gloo has
# no send/recv for CUDA tensors (a rank aborts, "writev ... Bad address"; seen on an H200,
# torch 2.11), and NCCL refuses two ranks on one device. These need two GPUs and NCCL.
NEEDS_TWO_GPUS = {
    "sylvie.yaml": "ring transport: point-to-point sends",
    "sylvie_deterministic.yaml": "ring transport: point-to-point sends",
    "adaqp.yaml": "ring transport: point-to-point sends",
    "unitg.yaml": "pipeline stages: point-to-point sends",
}
# Recipes whose one-process run on the GPU is not meaningful, and why.
ONE_PROCESS_SKIPS = {
    "sylvie_deterministic.yaml": "AdaptiveBitWidth(time_source='bytes') needs 2 or more ranks: "
    "its clock is the bytes sent to other ranks (sylvie.yaml runs the same code on 1 process)",
}
# Extra GPU runs of a recipe: (recipe, mode, arguments added after the recipe's own).
GPU_VARIANTS = (
    (
        "joestar.yaml",
        "1 process + callbacks/graph_compile.yaml (CUDA graphs from epoch 2)",
        [
            "--config",
            os.path.join(ROOT, "callbacks", "graph_compile.yaml"),
            "--trainer.max_epochs=2",
        ],
    ),
)


# --------------------------------------------------------------------------- recipe runner


def _share_one_device(spec: str) -> None:
    """Make every DDP-family strategy of this process run ``n`` ranks on one device over gloo.

    Lightning refuses a device list with repeats (``devices=[0, 0]``), but takes a strategy's
    own ``parallel_devices``; setting them (and the gloo backend, as NCCL refuses two ranks on
    one GPU) in ``DDPStrategy.__init__`` reaches lightgraph's strategies, which all derive from
    it, and the registered names (``graph_parallel``, ``ddp``) alike. The launcher re-runs this
    script in each rank, so each rank applies the same patch.
    """
    import torch
    from lightning.pytorch.strategies import DDPStrategy

    count, device = spec.split(":", 1)
    devices = [torch.device(device)] * int(count)
    original = DDPStrategy.__init__

    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.parallel_devices = list(devices)
        self._process_group_backend = "gloo"

    DDPStrategy.__init__ = patched  # type: ignore[method-assign]


def run_fit(args: list[str]) -> None:
    """``gpu_check.py _fit ARGS``: ``lightgraph fit ARGS`` in this process (after the patch)."""
    spec = os.environ.get(SHARE_ENV)
    if spec:
        _share_one_device(spec)
    from lightgraph.cli import main

    # sys.argv stays ``gpu_check.py _fit ...``: Lightning's launcher re-runs it for each rank.
    main(["fit", *args])


# --------------------------------------------------------------------------- recipes


def tiny_overrides(recipe: str, cpu: bool) -> list[str]:
    """CLI overrides that shrink ``recipe`` to a few steps on a small graph."""
    with open(recipe) as f:
        config = yaml.safe_load(f)
    data = config.get("data", {}).get("init_args", {})
    dataset = data.get("dataset", {}).get("init_args", {})
    nodes = 800 if cpu else 3000
    out = ["--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    if "num_nodes" in dataset:
        out.append(f"--data.init_args.dataset.init_args.num_nodes={nodes}")
    elif "graph" in dataset:
        out.append(f"--data.init_args.dataset.init_args.graph.init_args.num_nodes={nodes}")
    elif "num_graphs" in dataset:
        out.append("--data.init_args.dataset.init_args.num_graphs=200")
    if "sequence_length" in data:
        out.append("--data.init_args.sequence_length=256")
    if "num_parts" in data and "parts_per_batch" in data and "partitioner" in data:
        out += ["--data.init_args.num_parts=8", "--data.init_args.parts_per_batch=2"]
    model = config.get("model", {}).get("init_args", {})
    if "lm_epochs" in model:
        # UniTG: the LM's epoch and a modality sync must fall inside the short run.
        out += [
            "--model.init_args.lm_epochs=1",
            "--model.init_args.model.init_args.num_layers=2",
            "--trainer.max_epochs=3",
        ]
    else:
        out += ["--trainer.max_epochs=1", "--trainer.limit_train_batches=4"]
    return out


def recipe_runs(names: list[str], cpu: bool) -> list[dict[str, Any]]:
    """One run per single-process recipe, two per multi-process recipe (see the module doc)."""
    runs: list[dict[str, Any]] = []
    accelerator = "cpu" if cpu else "gpu"
    device = "cpu" if cpu else "cuda:0"
    for name in names:
        path = os.path.join(ROOT, "recipes", name)
        with open(path) as f:
            trainer = yaml.safe_load(f).get("trainer", {})
        devices = trainer.get("devices", 1)
        multi = isinstance(devices, int) and devices > 1
        base = {"recipe": name, "path": path, "accelerator": accelerator, "extra": []}
        if not cpu:
            runs += [
                {**base, "mode": mode, "share": None, "extra": list(extra)}
                for recipe, mode, extra in GPU_VARIANTS
                if recipe == name
            ]
        if not multi:
            runs.append({**base, "mode": "1 process", "share": None})
            continue
        if not cpu:
            one = {**base, "mode": "1 process, strategy's backend", "share": None}
            if name in ONE_PROCESS_SKIPS:
                one["skip"] = ONE_PROCESS_SKIPS[name]
            runs.append(one)
        share = {**base, "mode": "2 processes on one device, gloo", "share": f"2:{device}"}
        if not cpu and name in NEEDS_TWO_GPUS:
            share["skip"] = (
                f"needs 2 GPUs with NCCL ({NEEDS_TWO_GPUS[name]}; gloo has no CUDA send/recv)"
            )
        runs.append(share)
    return runs


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_recipe(run: dict[str, Any], cpu: bool, timeout: float, workdir: str) -> dict[str, Any]:
    if run.get("skip"):
        return {
            "recipe": run["recipe"],
            "mode": run["mode"],
            "ok": True,
            "skipped": run["skip"],
            "returncode": None,
            "seconds": 0.0,
        }
    tag = re.sub(r"[^A-Za-z0-9]+", "_", f"{run['recipe']}_{run['mode']}").strip("_")
    root = os.path.join(workdir, tag)
    os.makedirs(root, exist_ok=True)
    with open(run["path"]) as f:
        data_args = yaml.safe_load(f).get("data", {}).get("init_args", {})
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "_fit",
        "--config",
        run["path"],
        *tiny_overrides(run["path"], cpu),
        f"--trainer.accelerator={run['accelerator']}",
        "--trainer.devices=1",
        f"--trainer.default_root_dir={root}",
    ]
    if "cache_dir" in data_args:
        cmd.append(f"--data.init_args.cache_dir={os.path.join(root, 'cache')}")
    cmd += run.get("extra", [])
    env = dict(os.environ)
    env.pop(SHARE_ENV, None)
    if run["share"]:
        env[SHARE_ENV] = run["share"]
    env.setdefault("OMP_NUM_THREADS", "2")
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    seconds = time.perf_counter() - start
    result = {
        "recipe": run["recipe"],
        "mode": run["mode"],
        "ok": code == 0,
        "returncode": code,
        "seconds": round(seconds, 1),
        "command": " ".join(cmd[2:]),
    }
    if code is None:
        result["error"] = f"timed out after {timeout:.0f} s"
    elif code == 0 and run["share"]:
        # Lightning logs "MEMBER: r/n" as each rank joins: both ranks must have run.
        ranks = int(run["share"].split(":")[0])
        joined = set(re.findall(rf"MEMBER: (\d+)/{ranks}", out + err))
        result["ranks"] = len(joined)
        if len(joined) != ranks:
            code = result["returncode"] = -1
            result["ok"] = False
            result["error"] = f"expected {ranks} ranks to join, saw {len(joined)}"
    if code != 0:
        result["log"] = _tail(out, 10) + "\n" + _tail(err, 60)
        result.setdefault("error", _last_error(err))
    return result


def _last_error(stderr: str) -> str:
    """The last exception line of a traceback (``SomeError: message``), else the last line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b.*", line.strip()):
            return line.strip()[:400]
    return lines[-1][:400] if lines else ""


# --------------------------------------------------------------------------- tests


def run_tests(cpu: bool, timeout: float, workdir: str, extra: list[str] = ()) -> dict[str, Any]:
    xml = os.path.join(workdir, "cuda_tests.xml")
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "tests", "-q", "-p", "no:cacheprovider"]
    cmd += list(extra)
    # A hung CUDA test must not eat the lease: 90 s each at most.
    cmd += ["--co"] if cpu else [f"--junitxml={xml}", "-rfEs", "--timeout=90"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        code, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    result: dict[str, Any] = {
        "command": " ".join(cmd[1:]),
        "seconds": round(time.perf_counter() - start, 1),
        "returncode": code,
    }
    if cpu:
        collected = re.search(r"(\d+)(?:/\d+)? tests? collected", out)
        result["collected"] = int(collected.group(1)) if collected else 0
        result["ok"] = code == 0 and result["collected"] > 0
        if not result["ok"]:
            result["log"] = _tail(out, 60)
        return result
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failures: list[dict[str, str]] = []
    if os.path.exists(xml):
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            failed = case.find("failure")
            errored = case.find("error")
            skipped = case.find("skipped")
            if failed is not None or errored is not None:
                node = failed if failed is not None else errored
                counts["failed" if failed is not None else "errors"] += 1
                message = (node.get("message") or "").strip().splitlines()
                failures.append({"test": name, "message": message[0][:400] if message else ""})
            elif skipped is not None:
                counts["skipped"] += 1
                reason = (skipped.get("message") or "")[:200]
                result.setdefault("skip_reasons", {})[name] = reason
            else:
                counts["passed"] += 1
    result.update(counts)
    result["failures"] = failures
    result["ok"] = code == 0 and counts["passed"] > 0
    if not result["ok"]:
        result["log"] = _tail(out, 120)
    return result


# --------------------------------------------------------------------------- headlines


HEADLINE_NAMES = ("quantize", "sampler", "joestar_stage2", "attention", "resume")


def run_headline(name: str, device_name: str, small: bool, path: str) -> None:
    """``gpu_check.py _headline NAME DEVICE small|full PATH``: one headline, its dict to PATH."""
    import torch

    sys.path.insert(0, HERE)
    import gpu_headlines

    fn = dict(gpu_headlines.HEADLINES)[name]
    try:
        entry = fn(torch.device(device_name), small)
    except Exception:  # noqa: BLE001 - recorded; the driver goes on with the next headline
        entry = {"ok": False, "error": traceback.format_exc()[-3000:]}
    with open(path, "w") as f:
        json.dump(entry, f, default=str)


def run_headlines(
    device_name: str, small: bool, deadline: float, workdir: str
) -> list[dict[str, Any]]:
    """Each headline in its own process: a CUDA fault or hang in one spoils none of the others."""
    out = []
    for name in HEADLINE_NAMES:
        left = deadline - time.perf_counter()
        if left < 10:
            out.append({"name": name, "ok": False, "error": "not run: out of time", "seconds": 0})
            continue
        path = os.path.join(workdir, f"headline_{name}.json")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "_headline",
            name,
            device_name,
            "small" if small else "full",
            path,
        ]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=min(left, 120.0))
            log = proc.stdout + proc.stderr
            if os.path.exists(path):
                with open(path) as f:
                    entry = {"name": name, **json.load(f)}
            else:
                entry = {"name": name, "ok": False, "error": _last_error(log) or "no result"}
        except subprocess.TimeoutExpired:
            entry = {
                "name": name,
                "ok": False,
                "error": f"timed out after {min(left, 120.0):.0f} s",
            }
        entry["seconds"] = round(time.perf_counter() - start, 1)
        out.append(entry)
        print(f"[headline] {name}: ok={entry.get('ok')} ({entry['seconds']} s)", flush=True)
    return out


# --------------------------------------------------------------------------- report


def environment(cpu: bool) -> dict[str, Any]:
    import lightning
    import torch
    import torch_geometric

    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": "cpu" if cpu else "cuda",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "lightning": lightning.__version__,
        "torch_geometric": torch_geometric.__version__,
        "cpu_count": os.cpu_count(),
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = props.name
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["gpu_capability"] = f"{props.major}.{props.minor}"
        env["gpu_count"] = torch.cuda.device_count()
    return env


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def summary(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# GPU check ({env['mode']}) — {env.get('gpu', 'no GPU')}, torch {env['torch']}, "
        f"{report['seconds']:.0f} s, "
        + (
            "PASSED" if report["ok"] else "FAILED" if report.get("complete", True) else "INCOMPLETE"
        ),
        "",
    ]
    tests = report.get("tests")
    if tests:
        lines.append("## CUDA tests")
        if "collected" in tests:
            lines.append(f"- collected {tests['collected']} (not run: `--cpu`)")
        else:
            lines.append(
                f"- {tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors,"
                f" {tests['skipped']} skipped in {tests['seconds']} s"
            )
            for failure in tests.get("failures", []):
                lines.append(f"  - FAIL {failure['test']}: {failure['message']}")
            for name, reason in tests.get("skip_reasons", {}).items():
                lines.append(f"  - skip {name}: {reason}")
        lines.append("")
    recipes = report.get("recipes")
    if recipes is not None:
        lines.append("## Recipes")
        lines.append("| recipe | mode | result | s |")
        lines.append("|---|---|---|---:|")
        for r in recipes:
            verdict = f"skipped: {r['skipped']}" if r.get("skipped") else "ok"
            if not r["ok"]:
                verdict = f"FAIL: {r.get('error', '')}"[:160]
            lines.append(f"| {r['recipe']} | {r['mode']} | {verdict} | {r['seconds']} |")
        lines.append("")
    headlines = report.get("headlines")
    if headlines is not None:
        lines.append("## Headlines")
        for h in headlines:
            if "error" in h:
                error = h["error"].strip().splitlines()
                lines.append(f"- {h['name']}: ERROR {error[-1] if error else ''}")
                continue
            goal = ""
            if h.get("goal"):
                met = h.get("goal_met")
                goal = (
                    f" — goal {h['goal']}: {'met' if met else 'not met' if met is False else '-'}"
                )
            lines.append(
                f"- {h['name']}: {'ok' if h.get('ok') else 'FAIL'}{goal} ({h['seconds']} s)"
            )
            for key, value in h.get("metrics", {}).items():
                lines.append(f"    - {key}: {_fmt(value)}")
            if h.get("notes"):
                lines.append(f"    - notes: {h['notes']}")
        lines.append("")
    return "\n".join(lines)


def write(report: dict[str, Any], out_dir: str) -> None:
    """Write the JSON, the summary and the failure logs (again after every part)."""
    os.makedirs(out_dir, exist_ok=True)
    logs = []
    slim = json.loads(json.dumps(report, default=str))
    for r in slim.get("recipes") or []:
        if "log" in r:
            logs.append(f"===== recipe {r['recipe']} ({r['mode']})\n{r.pop('log')}\n")
    if slim.get("tests") and "log" in slim["tests"]:
        logs.append(f"===== tests\n{slim['tests'].pop('log')}\n")
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as f:
        json.dump(slim, f, indent=1)
    with open(os.path.join(out_dir, "gpu_check.md"), "w") as f:
        f.write(summary(report) + "\n")
    with open(os.path.join(out_dir, "gpu_check_logs.txt"), "w") as f:
        f.write("\n".join(logs))


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="no GPU: what runs on CPU, small sizes")
    parser.add_argument("--out", default=None, help="output folder (default: $OUT, else results)")
    parser.add_argument(
        "--recipes",
        default=None,
        help="comma-separated recipe file names, or 'all' (default: all; with --cpu: "
        + ", ".join(CPU_RECIPES)
        + ")",
    )
    parser.add_argument(
        "--skip", default="", help=f"comma-separated parts to leave out, of {', '.join(PARTS)}"
    )
    parser.add_argument("--jobs", type=int, default=None, help="recipe processes at a time")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run")
    parser.add_argument("--recipe-timeout", type=float, default=150.0)
    parser.add_argument(
        "--pytest-args", default="", help="extra arguments for the CUDA tests, e.g. '-n 6'"
    )
    args = parser.parse_args(argv)
    skip = [s for s in args.skip.split(",") if s]
    unknown = sorted(set(skip) - set(PARTS))
    if unknown:
        parser.error(f"--skip takes {', '.join(PARTS)}; got {', '.join(unknown)}")
    args.skip = set(skip)
    available = sorted(
        os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "recipes", "*.yaml"))
    )
    if args.recipes in (None, "all"):
        names = list(CPU_RECIPES) if args.cpu and args.recipes is None else available
    else:
        names = [n if n.endswith(".yaml") else f"{n}.yaml" for n in args.recipes.split(",") if n]
        missing = [n for n in names if n not in available]
        if missing:
            parser.error(f"--recipes: no such recipe {missing}; recipes: {', '.join(available)}")
    args.recipe_names = names
    if args.jobs is None:
        args.jobs = 1 if args.cpu else max(1, min(6, (os.cpu_count() or 2) // 2))
    if args.out is None:
        args.out = os.environ.get("OUT") or os.path.join(HERE, "results", "gpu_check")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_fit"]:
        run_fit(argv[1:])
        return 0
    if argv[:1] == ["_headline"]:
        name, device, size, path = argv[1:5]
        run_headline(name, device, size == "small", path)
        return 0
    args = parse_args(argv)
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --cpu for the CPU check", file=sys.stderr)
        return 2
    start = time.perf_counter()
    deadline = start + args.budget
    report: dict[str, Any] = {
        "environment": environment(args.cpu),
        "complete": False,  # until every part has run: a report written on the way says so
        "ok": False,
        "seconds": 0.0,
    }
    print(json.dumps(report["environment"]), flush=True)
    workdir = tempfile.mkdtemp(prefix="gpu_check_")
    failures: list[str] = []
    try:
        # Tests and recipes check correctness and run side by side; the timed headlines run
        # alone afterwards.
        with futures.ThreadPoolExecutor(max_workers=1 + args.jobs) as pool:
            test_future = None
            if "tests" not in args.skip:
                test_future = pool.submit(
                    run_tests,
                    args.cpu,
                    max(30.0, args.budget * 0.6),
                    workdir,
                    args.pytest_args.split(),
                )
            recipe_futures = []
            if "recipes" not in args.skip:
                runs = recipe_runs(args.recipe_names, args.cpu)
                recipe_futures = [
                    pool.submit(run_recipe, run, args.cpu, args.recipe_timeout, workdir)
                    for run in runs
                ]
                report["recipes"] = []
                for fut in futures.as_completed(recipe_futures):
                    r = fut.result()
                    report["recipes"].append(r)
                    verdict = f"skipped ({r['skipped']})" if r.get("skipped") else "ok"
                    if not r["ok"]:
                        verdict = f"FAIL {r.get('error', '')}"
                    print(
                        f"[recipe] {r['recipe']} ({r['mode']}): {verdict} ({r['seconds']} s)",
                        flush=True,
                    )
                    write(report, args.out)  # a run cut short keeps what finished
                report["recipes"].sort(key=lambda r: (r["recipe"], r["mode"]))
                failures += [
                    f"recipe {r['recipe']} ({r['mode']})" for r in report["recipes"] if not r["ok"]
                ]
                write(report, args.out)
            if test_future is not None:
                report["tests"] = test_future.result()
                print(
                    f"[tests] ok={report['tests']['ok']} ({report['tests']['seconds']} s)",
                    flush=True,
                )
                if not report["tests"]["ok"]:
                    failures.append("tests")
                write(report, args.out)
        if "headlines" not in args.skip:
            device = "cpu" if args.cpu else "cuda"
            report["headlines"] = run_headlines(device, args.cpu, deadline, workdir)
            failures += [f"headline {h['name']}" for h in report["headlines"] if not h.get("ok")]
    finally:
        report["seconds"] = round(time.perf_counter() - start, 1)
        report["failures"] = failures
        report["ok"] = not failures
        report["complete"] = True
        write(report, args.out)
        shutil.rmtree(workdir, ignore_errors=True)
    print(summary(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
