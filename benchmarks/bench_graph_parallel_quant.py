"""Quantised graph parallelism: all-to-all bytes and accuracy of TorchGT under Sylvie's widths.

Every run is ``lightgraph fit`` on ``recipes/torchgt.yaml`` (Graphormer-slim: 4 layers,
hidden 64, 8 heads; METIS-reordered node sequences of ``--sequence-length`` tokens plus a
global token; graph parallelism on ``--devices`` processes) with ``kind=sparse`` attention,
the same seed, data and epochs; only the all-to-alls' quantisation differs:

* ``fp32``: ``GraphParallelStrategy()`` (the plain FP32 all-to-alls);
* ``fixed4`` / ``fixed2``: ``GraphParallelStrategy(quantization=FixedBits(4 | 2))``;
* ``adaptive``: an FP32 strategy plus ``AdaptiveBitWidth(b_min, b_max, window)``, which
  installs ``FixedBits(b_min)`` and moves its width by the Loss Descent Rate (Sylvie's
  time-adaptive :math:`b_t`);
* ``random``: ``RandomBits()`` (AdaQP's baseline, a width from {2, 4, 8} per token row);
* ``degree``: ``DegreeAwareBits(2)`` (widths by the tokens' key degree in the pattern).

Measured per run: the bytes the ranks send in the training all-to-alls (summed over
ranks), per epoch and per direction (``forward``: Q/K/V out and attention outputs back;
``backward``: their gradients), codes (``data``) and quantisation parameters (``params``:
bf16 scale and zero point per row, +2 bytes per wide-offset row) apart, and their ratio to
the FP32 run; the final and best validation accuracy, the test accuracy at the best
validation epoch, the final training loss, the median training-step time of the slowest
rank (CPU, gloo: the quantisation cost is included, a real link's saving is not) and the
width trajectory of ``adaptive``. The byte counts come from a small callback defined here
(:class:`SequenceParallelBytes`), which the subprocesses import from this directory.

Usage::

    python benchmarks/bench_graph_parallel_quant.py --out graph_parallel_quant.json
    python benchmarks/bench_graph_parallel_quant.py --epochs 10 --runs fp32 fixed2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = ("forward_data", "forward_params", "backward_data", "backward_params")


class SequenceParallelBytes(Callback):
    """Logs the training all-to-all bytes of the epoch, summed over the ranks.

    ``a2a/<direction>_<kind>`` for ``direction`` in (forward, backward) and ``kind`` in
    (data, params), from the strategy's ``SequenceParallel.stats`` (stage ``"train"``).
    """

    def __init__(self) -> None:
        self._last = dict.fromkeys(KEYS, 0)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from lightgraph.distributed import parallel_context

        sp = parallel_context(pl_module).sequence_parallel
        if sp is None:
            return
        for key in KEYS:
            direction, kind = key.split("_")
            total = sp.stats.total("train", direction=direction, kind=kind)
            value = torch.tensor(float(total - self._last[key]), dtype=torch.float64)
            self._last[key] = total
            summed = trainer.strategy.reduce(value.to(pl_module.device), reduce_op="sum")
            pl_module.log(f"a2a/{key}", summed, sync_dist=True, reduce_fx="max")


def runs(b_min: int, b_max: int, window: int) -> dict[str, tuple[dict | None, list[dict]]]:
    """name -> (quantization policy or None, extra callbacks)."""

    def policy(cls: str, **init_args: object) -> dict:
        return {"class_path": f"lightgraph.quant.{cls}", "init_args": init_args}

    adaptive = {
        "class_path": "lightgraph.callbacks.AdaptiveBitWidth",
        "init_args": {"b_min": b_min, "b_max": b_max, "window": window, "smoothing": 0.9},
    }
    return {
        "fp32": (None, []),
        "fixed4": (policy("FixedBits", base_bits=4), []),
        "fixed2": (policy("FixedBits", base_bits=2), []),
        "adaptive": (None, [adaptive]),
        "random": (policy("RandomBits", seed=0), []),
        "degree": (policy("DegreeAwareBits", base_bits=2), []),
    }


def summarise(name: str, rows: list[dict], wall: float, column) -> dict:
    val = column(rows, "val_acc")
    test = column(rows, "test_acc")
    best = max(range(len(val)), key=val.__getitem__) if val else None
    steps = column(rows, "train_step_time")
    per_epoch = {key: column(rows, f"a2a/{key}") for key in KEYS}
    epochs = len(per_epoch["forward_data"])
    mean = {key: (sum(v) / len(v) if v else None) for key, v in per_epoch.items()}
    loss = column(rows, "train_loss")
    return {
        "name": name,
        "epochs": epochs,
        "bytes_per_epoch": mean,
        "forward_bytes_per_epoch": (mean["forward_data"] or 0) + (mean["forward_params"] or 0),
        "backward_bytes_per_epoch": (mean["backward_data"] or 0) + (mean["backward_params"] or 0),
        "bytes_by_epoch": per_epoch,
        "bitwidth": column(rows, "bitwidth"),
        "val_acc": val[-1] if val else None,
        "best_val_acc": val[best] if best is not None else None,
        "test_acc_at_best_val": test[best] if best is not None and best < len(test) else None,
        "train_loss": loss[-1] if loss else None,
        "step_s": statistics.median(steps[1:] or steps) if steps else None,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--num-nodes", type=int, default=2000)
    parser.add_argument("--sequence-length", type=int, default=512)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--kind", default="sparse", help="attention kind of the Graphormer")
    parser.add_argument("--b-min", type=int, default=2, help="AdaptiveBitWidth b_min")
    parser.add_argument("--b-max", type=int, default=8, help="AdaptiveBitWidth b_max")
    parser.add_argument("--window", type=int, default=3, help="AdaptiveBitWidth delta")
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["fp32", "fixed4", "fixed2", "adaptive"],
        choices=list(runs(1, 8, 1)),
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error(f"expected --epochs >= 2 but got {args.epochs}")

    sys.path.insert(0, HERE)
    from harness import column, fit  # noqa: E402

    # The subprocesses import SequenceParallelBytes from this directory.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [HERE, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    table = runs(args.b_min, args.b_max, args.window)
    results = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.runs:
            quantization, callbacks = table[name]
            override = {
                "trainer": {
                    "strategy": {
                        "class_path": "lightgraph.strategies.GraphParallelStrategy",
                        "init_args": {"quantization": quantization},
                    },
                    "callbacks": [
                        {"class_path": "bench_graph_parallel_quant.SequenceParallelBytes"},
                        *callbacks,
                    ],
                }
            }
            rows, wall = fit(
                name,
                "torchgt.yaml",
                override,
                work,
                epochs=args.epochs,
                num_nodes=args.num_nodes,
                extra=[
                    f"--trainer.devices={args.devices}",
                    f"--data.init_args.sequence_length={args.sequence_length}",
                    f"--model.init_args.model.init_args.kind={args.kind}",
                ],
            )
            results.append(summarise(name, rows, wall, column))
            shown = {k: v for k, v in results[-1].items() if k != "bytes_by_epoch"}
            print(json.dumps(shown), flush=True)

    fp32 = next((r for r in results if r["name"] == "fp32"), None)
    for r in results:
        for d in ("forward", "backward"):
            base = fp32[f"{d}_bytes_per_epoch"] if fp32 else 0
            r[f"{d}_vs_fp32"] = r[f"{d}_bytes_per_epoch"] / base if base else None
    sequences = -(-args.num_nodes // args.sequence_length)
    print(
        f"\nGraphormer-slim ({args.kind}), {sequences} sequences of {args.sequence_length} tokens "
        f"({args.num_nodes} nodes), {args.devices} ranks, {args.epochs} epochs; bytes per epoch "
        "summed over ranks"
    )
    print(
        f"{'run':<9} {'fwd bytes':>11} {'bwd bytes':>11} {'fwd/fp32':>9} {'bwd/fp32':>9} "
        f"{'params %':>8} {'val acc':>8} {'best val':>9} {'loss':>7} {'step s':>7}"
    )

    def fmt(x: float | None, spec: str) -> str:
        return format(x, spec) if x is not None else "-"

    for r in results:
        b = r["bytes_per_epoch"]
        total = sum(v or 0 for v in b.values())
        params = ((b["forward_params"] or 0) + (b["backward_params"] or 0)) / total if total else 0
        print(
            f"{r['name']:<9} {r['forward_bytes_per_epoch']:>11.0f} "
            f"{r['backward_bytes_per_epoch']:>11.0f} {fmt(r['forward_vs_fp32'], '.4f'):>9} "
            f"{fmt(r['backward_vs_fp32'], '.4f'):>9} {100 * params:>7.1f}% "
            f"{fmt(r['val_acc'], '.4f'):>8} {fmt(r['best_val_acc'], '.4f'):>9} "
            f"{fmt(r['train_loss'], '.4f'):>7} {fmt(r['step_s'], '.3f'):>7}"
        )
    for r in results:
        if r["bitwidth"]:
            print(
                f"bit-width trajectory ({r['name']}): {' '.join(f'{b:g}' for b in r['bitwidth'])}"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
