"""The LM's learning rate across LM sizes: constant against linear warm-up and decay.

UniTG's LM is fine-tuned from a random initialisation here (no weights can be
downloaded), and a learning rate that trains one LM width or depth may leave another at
chance. This benchmark fine-tunes the LM of ``recipes/lm_then_gnn.yaml`` alone (the
sequential schedule's first step: every LM step, then one GNN epoch) and reports the
LM's own test accuracy (``lm_test_acc``: each test node classified by its exit head)
for every combination of

* LM width: hidden 64 (the recipes' LM, 32-word texts) and hidden 128 (64-word texts,
  ``max_position`` 72), 4 layers, intermediate size twice the hidden size;
* full depth (3 LM epochs) and the Lazy Tuner (6 LM epochs, as the recipes give them);
* ``lm_lr`` and ``lm_schedule`` (``"constant"`` or ``"linear"``: 10 % warm-up, then
  linear decay; ``UniTGModule(lm_schedule=...)``);
* seeds (``seed_everything``: the LM's initialisation and the batch order).

Run::

    python benchmarks/bench_unitg_lm_lr.py                    # ≈ 9 min on 2 cores
    python benchmarks/bench_unitg_lm_lr.py --lrs 3e-3 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "unitg_lm_lr.json")
#: LM hidden size -> words per node (the texts grow with the LM, as in issue 29's runs)
WIDTHS = {64: 32, 128: 64}


def run_one(hidden: int, lazy: bool, lr: float, schedule: str, seed: int, scratch: str) -> dict:
    words = WIDTHS[hidden]
    name = f"h{hidden}_{'lazy' if lazy else 'full'}_{lr:g}_{schedule}_s{seed}"
    out = os.path.join(scratch, name)
    lm = "--model.init_args.lm.init_args.model.init_args"
    cmd = [
        sys.executable, "-m", "lightgraph", "fit",
        "--config", os.path.join(ROOT, "recipes", "lm_then_gnn.yaml"),
        "--trainer.max_epochs=1", "--trainer.callbacks=[]",
        "--trainer.enable_checkpointing=false",
        f"--trainer.logger.init_args.save_dir={out}",
        f"--data.init_args.cache_dir={os.path.join(scratch, 'cache')}",
        f"--data.init_args.dataset.init_args.words_per_node={words}",
        f"{lm}.hidden_size={hidden}", f"{lm}.intermediate_size={2 * hidden}",
        f"{lm}.max_position={words + 8}",
        f"--model.init_args.lazy_tuner={str(lazy).lower()}",
        f"--model.init_args.lm_epochs={6 if lazy else 3}",
        f"--model.init_args.lm_lr={lr}", f"--model.init_args.lm_schedule={schedule}",
        f"--seed_everything={seed}", f"--model.init_args.seed={seed}",
    ]  # fmt: skip
    tic = time.perf_counter()
    proc = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True)
    wall = time.perf_counter() - tic
    row: dict[str, Any] = dict(
        hidden=hidden, words_per_node=words, lazy_tuner=lazy, lm_epochs=6 if lazy else 3,
        lm_lr=lr, lm_schedule=schedule, seed=seed, wall_s=wall,
    )  # fmt: skip
    if proc.returncode != 0:
        row["error"] = proc.stderr[-2000:]
        return row
    rows: list[dict[str, str]] = []
    for path in glob.glob(os.path.join(out, "**", "metrics.csv"), recursive=True):
        with open(path) as f:
            rows += list(csv.DictReader(f))
    values = [float(r["lm_test_acc"]) for r in rows if r.get("lm_test_acc")]
    row["lm_test_acc"] = values[-1] if values else None
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, nargs="+", default=list(WIDTHS), choices=list(WIDTHS))
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-3])
    p.add_argument("--schedules", nargs="+", default=["constant", "linear"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_lm_lr_") as scratch:
        for seed in args.seeds:
            for hidden in args.hidden:
                for lazy in (False, True):
                    for lr in args.lrs:
                        for schedule in args.schedules:
                            row = run_one(hidden, lazy, lr, schedule, seed, scratch)
                            rows.append(row)
                            acc = row.get("lm_test_acc")
                            shown = "ERROR" if "error" in row else f"{100 * acc:6.2f}"
                            print(
                                f"hidden {hidden:3d}  {'lazy' if lazy else 'full'}  lr {lr:g}  "
                                f"{schedule:8s}  seed {seed}  lm test acc {shown}  "
                                f"({row['wall_s']:.1f} s)",
                                flush=True,
                            )
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "rows": rows}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
