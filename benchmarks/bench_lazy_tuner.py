"""LM fine-tuning time per epoch: full depth vs UniTG's centrality-guided early exit.

A small random BERT (default 8 layers, hidden 256, 4 heads, FFN 1024) is fine-tuned on
random token sequences (default 4,000 of length 32, 10 random classes) for one epoch at a
time (forward + backward + AdamW step for every mini-batch), median of ``--repeats`` epochs
after a few untimed warm-up steps per group:

* ``full``: every batch runs all ``L`` layers (exit head ``φ_G``);
* ``early_exit``: :func:`~lightgraph.nn.early_exit.degree_groups` splits the nodes into
  ``G = 4`` groups by the quartiles of a synthetic power-law degree vector; batches of
  one group (:class:`~lightgraph.data.loader.GroupBatchSampler`) exit after
  ``ceil(g·L/G)`` layers, loss Eq. 5.1;
* ``early_exit_rank``: the same with ``ties="rank"`` (four equal groups), the case of the
  ``(1+2+3+4)/16 = 62.5 %`` bound.

The same batch size and shuffle are used by every variant. ``expected_fraction`` is the
layer-count fraction ``Σ_g n_g·exit_g / (n·L)`` (the best speed-up is its inverse).

Usage::

    python benchmarks/bench_lazy_tuner.py [--num-seqs 4000] [--layers 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from lightgraph.data.loader import GroupBatchSampler
from lightgraph.nn.early_exit import (
    EarlyExitEncoder,
    degree_groups,
    early_exit_loss,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def power_law_degree(n: int, alpha: float, seed: int) -> torch.Tensor:
    """``n`` degrees ``>= 1`` with ``P(d) ∝ d^-alpha`` (inverse-CDF of a Pareto, floored)."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=gen).clamp_min(1e-12)
    return (u ** (-1.0 / (alpha - 1.0))).floor().long()


def build(args: argparse.Namespace, num_groups: int) -> EarlyExitEncoder:
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.hidden,
        vocab_size=args.vocab,
        max_position_embeddings=max(64, args.seq_len),
    )
    model = transformers.BertModel(config, add_pooling_layer=False)
    return EarlyExitEncoder(model, num_classes=args.num_classes, num_groups=num_groups)


def run_variant(
    name: str,
    args: argparse.Namespace,
    groups: torch.Tensor,
    ids: torch.Tensor,
    mask: torch.Tensor,
    labels: torch.Tensor,
    full_depth: bool,
) -> dict:
    enc = build(args, args.groups).train()
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-4)
    sampler = GroupBatchSampler(groups, args.batch_size, seed=args.seed)
    last = enc.num_groups - 1

    def epoch() -> tuple[float, float]:
        total, steps = 0.0, 0
        start = time.perf_counter()
        for g, idx in sampler.batches():
            group = last if full_depth else g
            opt.zero_grad(set_to_none=True)
            loss = early_exit_loss(enc(ids[idx], mask[idx], group=group), labels[idx])
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
        sampler.set_epoch(sampler.epoch + 1)
        return time.perf_counter() - start, total / max(steps, 1)

    # warm-up: a few steps per group (allocator, kernels), not timed
    start = time.perf_counter()
    for g in range(enc.num_groups):
        for _ in range(args.warmup_steps):
            idx = torch.nonzero(groups == g).flatten()[: args.batch_size]
            if idx.numel() == 0:
                continue
            opt.zero_grad(set_to_none=True)
            out = enc(ids[idx], mask[idx], group=last if full_depth else g)
            early_exit_loss(out, labels[idx]).backward()
            opt.step()
    warm = time.perf_counter() - start
    times, losses = [], []
    for _ in range(args.repeats):
        t, loss = epoch()
        times.append(t)
        losses.append(loss)
    layers = [enc.exit_layers[last if full_depth else int(g)] for g in groups]
    result = {
        "name": name,
        "epoch_time_s": statistics.median(times),
        "epoch_times_s": times,
        "warmup_s": warm,
        "mean_loss_last_epoch": losses[-1],
        "exit_layers": list(enc.exit_layers),
        "expected_fraction": sum(layers) / (len(layers) * enc.num_layers),
    }
    print(
        f"{name:>16}: {result['epoch_time_s']:.2f} s/epoch (median of {args.repeats}, "
        f"{[round(t, 2) for t in times]}), layer fraction {result['expected_fraction']:.3f}",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-seqs", type=int, default=4000)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--alpha", type=float, default=2.5, help="power-law exponent")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed steps per group")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--variants",
        default="full,early_exit,early_exit_rank",
        help="comma-separated subset of full, early_exit, early_exit_rank",
    )
    parser.add_argument(
        "--out", default=os.path.join(ROOT, "benchmarks", "results", "lazy_tuner.json")
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(args.seed)
    n = args.num_seqs
    ids = torch.randint(1, args.vocab, (n, args.seq_len), generator=gen)
    mask = torch.ones(n, args.seq_len, dtype=torch.long)
    labels = torch.randint(0, args.num_classes, (n,), generator=gen)
    degree = power_law_degree(n, args.alpha, args.seed)
    nodes = torch.arange(n)
    by_value = degree_groups(degree, nodes, args.groups, ties="value")
    by_rank = degree_groups(degree, nodes, args.groups, ties="rank")
    print(
        f"degrees: min {int(degree.min())}, median {float(degree.median()):.0f}, "
        f"max {int(degree.max())}; group sizes (value ties) "
        f"{torch.bincount(by_value, minlength=args.groups).tolist()}, "
        f"(rank ties) {torch.bincount(by_rank, minlength=args.groups).tolist()}; "
        f"torch threads {torch.get_num_threads()}",
        flush=True,
    )
    variants = {
        "full": (by_value, True),
        "early_exit": (by_value, False),
        "early_exit_rank": (by_rank, False),
    }
    results = []
    for name in args.variants.split(","):
        groups, full = variants[name]
        results.append(run_variant(name, args, groups, ids, mask, labels, full))
    base = next((r for r in results if r["name"] == "full"), None)
    if base is not None:
        for r in results:
            r["speedup_vs_full"] = base["epoch_time_s"] / r["epoch_time_s"]
            r["max_speedup_from_layers"] = 1.0 / r["expected_fraction"]
            print(
                f"{r['name']:>16}: speed-up {r['speedup_vs_full']:.2f}x "
                f"(layer-count bound {r['max_speedup_from_layers']:.2f}x)"
            )
    out = {
        "config": vars(args),
        "group_sizes_value": torch.bincount(by_value, minlength=args.groups).tolist(),
        "group_sizes_rank": torch.bincount(by_rank, minlength=args.groups).tolist(),
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "device": "cpu",
        },
        "results": results,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
