"""Before/after check of a refactor: the first epochs' training losses of the main recipes.

``record`` runs each recipe as a user would (``lightgraph fit --config recipes/<name>.yaml``,
its own seed, a fresh cache directory) for ``--epochs`` epochs and writes every training
step's loss, and every epoch's logged ``train_loss``, of every rank as exact float64 hex
strings; ``compare`` reports whether two such files are bit-identical, recipe by recipe::

    python benchmarks/behaviour_check.py record --out /tmp/before.json
    # ... change the code ...
    python benchmarks/behaviour_check.py record --out /tmp/after.json
    python benchmarks/behaviour_check.py compare /tmp/before.json /tmp/after.json

A refactor claims "behaviour unchanged" only when ``compare`` prints ``identical`` for every
recipe (exit code 0); it exits 1 and names the first step that differs otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import lightning.pytorch as pl
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = ("ns", "hanoi", "joestar", "joestar_pbs", "unitg_single", "vanilla")
#: Overrides that make a recipe's run independent of timing: HANOI's adaptive reuse stops
#: reusing a macro-batch when the next one has loaded, so its steps follow the disk.
OVERRIDES = {"hanoi": ["--data.init_args.adaptive_reuse=false"]}


class LossRecorder(pl.Callback):
    """Writes every training step's loss and every epoch's ``train_loss`` of this rank."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.steps: list[str] = []
        self.epochs: list[str] = []

    @staticmethod
    def _hex(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            value = value.detach().double().item()
        return float(value).hex()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.steps.append(self._hex(loss))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        loss = trainer.callback_metrics.get("train_loss")
        self.epochs.append(self._hex(loss) if loss is not None else "none")
        with open(f"{self.path}.rank{trainer.global_rank}", "w") as f:
            json.dump({"steps": self.steps, "epochs": self.epochs}, f)


def run(recipe: str, epochs: int, workdir: str) -> dict[str, Any]:
    out = os.path.join(workdir, recipe)
    cmd = [
        sys.executable,
        "-m",
        "lightgraph",
        "fit",
        "--config",
        os.path.join(ROOT, "recipes", f"{recipe}.yaml"),
        f"--trainer.max_epochs={epochs}",
        f"--trainer.logger.init_args.save_dir={os.path.join(workdir, 'logs')}",
        f"--data.init_args.cache_dir={os.path.join(workdir, 'cache')}",
        "--trainer.callbacks+=behaviour_check.LossRecorder",
        f"--trainer.callbacks.path={out}",
        *OVERRIDES.get(recipe, []),
    ]
    # The checkout this script lives in, whatever lightgraph the environment has installed
    # (so a worktree of an older commit records that commit).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "benchmarks")]))
    tic = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - tic
    if proc.returncode != 0:
        raise RuntimeError(f"{recipe} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    ranks = {}
    for path in sorted(glob.glob(f"{out}.rank*")):
        with open(path) as f:
            ranks[path.rsplit(".rank", 1)[1]] = json.load(f)
    return {"wall_seconds": wall, "ranks": ranks}


def record(args: argparse.Namespace) -> None:
    results: dict[str, Any] = {"epochs": args.epochs, "recipes": {}}
    for recipe in args.recipes:
        with tempfile.TemporaryDirectory(prefix=f"behaviour-{recipe}-") as workdir:
            results["recipes"][recipe] = run(recipe, args.epochs, workdir)
        ranks = results["recipes"][recipe]["ranks"]
        steps = {r: len(v["steps"]) for r, v in ranks.items()}
        print(
            f"{recipe}: {results['recipes'][recipe]['wall_seconds']:.1f} s, steps per rank {steps}"
        )
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


def compare(args: argparse.Namespace) -> int:
    with open(args.before) as f:
        before = json.load(f)["recipes"]
    with open(args.after) as f:
        after = json.load(f)["recipes"]
    failed = 0
    for recipe in sorted(set(before) | set(after)):
        a, b = before.get(recipe), after.get(recipe)
        if a is None or b is None:
            print(f"{recipe}: missing in {'before' if a is None else 'after'}")
            failed += 1
            continue
        diff = None
        if set(a["ranks"]) != set(b["ranks"]):
            diff = f"ranks {sorted(a['ranks'])} vs {sorted(b['ranks'])}"
        for rank in sorted(a["ranks"]):
            if diff is not None:
                break
            for kind in ("steps", "epochs"):
                x, y = a["ranks"][rank][kind], b["ranks"].get(rank, {}).get(kind, [])
                if x != y:
                    i = next(
                        (i for i, (u, v) in enumerate(zip(x, y, strict=False)) if u != v),
                        min(len(x), len(y)),
                    )
                    diff = f"rank {rank} {kind}[{i}] of {len(x)}/{len(y)}: " + (
                        f"{float.fromhex(x[i])!r} vs {float.fromhex(y[i])!r}"
                        if i < min(len(x), len(y))
                        else "lengths differ"
                    )
                    break
        n = sum(len(v["steps"]) for v in a["ranks"].values())
        m = sum(len(v["epochs"]) for v in a["ranks"].values())
        if diff is None:
            print(
                f"{recipe}: identical ({n} step and {m} epoch losses over "
                f"{len(a['ranks'])} rank(s))"
            )
        else:
            print(f"{recipe}: DIFFERENT -- {diff}")
            failed += 1
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--out", required=True)
    rec.add_argument("--epochs", type=int, default=3)
    rec.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("before")
    cmp_.add_argument("after")
    args = parser.parse_args()
    if args.command == "record":
        record(args)
    else:
        sys.exit(compare(args))


if __name__ == "__main__":
    main()
