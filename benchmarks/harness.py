"""Shared launcher of the benchmarks: run a recipe (+ overrides) and read its metrics.

Every benchmark run is a ``lightgraph fit`` in a subprocess, so what is measured is what a
user gets from the command line. ``network="netns"`` starts one process per rank, each in
its own Linux network namespace from ``benchmarks/netns_link.sh`` (the ranks then talk over
a ``tc``-rate-limited bridge, e.g. 1 Gbit/s).
"""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = os.path.join(ROOT, "benchmarks", "netns_link.sh")
_RANK_VARS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "GLOO_SOCKET_IFNAME",
    "OMP_NUM_THREADS",
)


def link_up(world: int, rate: str) -> None:
    subprocess.run(["bash", LINK, "up", str(world), rate], check=True)


def link_down(world: int) -> None:
    subprocess.run(["bash", LINK, "down", str(world)], check=False)


def fit(
    name: str,
    recipe: str,
    override: dict | None,
    workdir: str,
    *,
    epochs: int,
    num_nodes: int,
    network: str = "loopback",
    world: int = 4,
    single: bool = False,
    extra: Sequence[str] = (),
) -> tuple[list[dict[str, Any]], float]:
    """Run ``lightgraph fit`` on ``recipes/<recipe>`` (+ ``override``); returns (CSV rows, wall s)."""
    config = [os.path.join(ROOT, "recipes", recipe)]
    if override is not None:
        path = os.path.join(workdir, f"{name}.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(override, f)
        config.append(path)
    common = [
        sys.executable,
        "-m",
        "lightgraph",
        "fit",
        *[a for c in config for a in ("--config", c)],
        f"--trainer.max_epochs={epochs}",
        f"--trainer.logger.init_args.save_dir={workdir}",
        f"--trainer.logger.init_args.name={name}",
        f"--data.init_args.dataset.init_args.num_nodes={num_nodes}",
        f"--data.init_args.cache_dir={os.path.join(workdir, 'cache')}",
        "--trainer.enable_checkpointing=false",
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    if single or network == "loopback":
        cmds = [common]
    else:
        port = str(
            29600
            + len(glob.glob(os.path.join(workdir, "*.yaml")))
            + len(glob.glob(os.path.join(workdir, "*", "version_*")))
        )
        cmds = []
        for r in range(world):
            rank_env = {
                **env,
                "MASTER_ADDR": "10.77.0.1",
                "MASTER_PORT": port,
                "NODE_RANK": str(r),
                "LOCAL_RANK": "0",
                "WORLD_SIZE": str(world),
                "GLOO_SOCKET_IFNAME": f"lgv{r}",
            }
            cmds.append(
                [
                    "ip",
                    "netns",
                    "exec",
                    f"lgns{r}",
                    "env",
                    *[f"{k}={v}" for k, v in rank_env.items() if k in _RANK_VARS],
                    *common,
                    f"--trainer.num_nodes={world}",
                    "--trainer.devices=1",
                ]
            )
    procs = [
        subprocess.Popen(
            cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for cmd in cmds
    ]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - start
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{err[-4000:]}")
    (metrics_file,) = glob.glob(os.path.join(workdir, name, "version_*", "metrics.csv"))
    with open(metrics_file) as f:
        rows = list(csv.DictReader(f))
    return rows, wall


def column(rows: list[dict[str, Any]], key: str) -> list[float]:
    """Every logged value of ``key``, in epoch order."""
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")]


def strategy(**init_args: object) -> dict:
    return {"class_path": "lightgraph.strategies.BoundaryExchangeStrategy", "init_args": init_args}


def run_worker(cmd: list[str], timeout: float, threads: int) -> tuple[int | None, str, str]:
    """Run a benchmark's worker subprocess with ``OMP_NUM_THREADS=threads``; returns (return
    code, or ``None`` when it ran past ``timeout`` seconds, stdout, stderr)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return None, out, ""
    return proc.returncode, proc.stdout, proc.stderr


def tagged(text: str, tag: str) -> str | None:
    """The rest of the last line of ``text`` that starts with ``tag`` (``None``: no such line)."""
    lines = [line[len(tag) :] for line in text.splitlines() if line.startswith(tag)]
    return lines[-1] if lines else None
