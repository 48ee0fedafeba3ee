"""UniTG end to end: co-training makespan and accuracy, the Lazy Tuner, microbatches,
affinity reordering and the deepest reversible GNN under a memory budget (thesis ch. 5).

Five parts (``--parts``, default all), each run in fresh worker subprocesses:

* ``e2e``: ``recipes/lm_then_gnn.yaml`` (sequential LM-then-GNN baseline),
  ``recipes/unitg_single.yaml`` (UniTG, one process) and ``recipes/unitg.yaml``
  (``FlowParallelStrategy``, P = 2 processes, M = 2 METIS microbatches) with and without
  the bubble interleaver. Same LM, GNN, data and ``--epochs``. Two more one-process UniTG
  runs change one thing each: ``unitg_single_full3`` (the baseline's LM settings: full
  depth, 3 LM epochs; collaborative vs sequential with nothing else changed) and
  ``unitg_single_lazy3`` (the Lazy Tuner with 3 LM epochs instead of the recipe's 6). *makespan*: wall seconds of
  ``Trainer.fit`` (for P = 2 it includes forking the two ranks and setting up the process
  group); *train s*: ``on_train_start`` -> ``on_train_end`` on rank 0. Test accuracy after
  the last epoch and at the epoch of best validation accuracy; ``lm_time_total``,
  ``gnn_time_total``, ``lm_bubble_time_total`` as the module logs them.
* ``lazy``: the LM fine-tuning time with and without the Lazy Tuner, on the sequential
  schedule (the LM is fine-tuned completely in the first step, so its time is not mixed
  with the GNN's): full depth 3 / 6 LM epochs, Lazy Tuner 3 / 6 LM epochs. *fine-tune s*
  is ``lm_time_total`` minus the one ``encode_all`` pass (the same for every run: every
  node at the last layer). Accuracy: test accuracy of the GNN trained on the LM's
  embeddings (last epoch, at best val), and of the LM's own exit heads (each test node at
  its degree group's exit for the Lazy Tuner, at the last layer for full depth).
* ``m``: GNN only (``UniTGModule(lm=None)``, RevGCN 8 x 64) with ``FlowParallelStrategy``
  on ``--m-devices`` processes (default 1: one stage running the M microbatches) for
  M in ``--m-values``, on graphs where the structure matters (``SyntheticGraph``, 5,000
  nodes, average degree 10, homophily 0.8, feature noise 2.0) with 8 communities (one
  per class, 625 nodes each) and 32 (the generator's default, 156 nodes each); METIS
  microbatches on both, random ones (``reorder="random"``) on the first. 100 epochs;
  evaluation runs on the same cut graph, as training does. Reported with the cut
  fraction, the share of same-class edges among the cut ones, and the homophily of the
  kept edges.
* ``reorder``: seconds of one full-graph GNN epoch (forward, backward, Adam step) of
  RevGCN, RevGAT and ResGEN on a 200,000-node graph whose node ids are METIS-ordered
  (:func:`~lightgraph.data.partition.affinity_microbatches` with one microbatch: clusters of ~64
  nodes contiguous) or randomly permuted (the generator's own ids are random with respect
  to the communities, like the permutation). Edges are sorted by (target, source) in
  both orderings, so only the id locality differs. Median of ``--reorder-repeats`` epochs
  after one untimed epoch, the two orderings interleaved. Also the aggregation alone
  (width ``--reorder-hidden``, sum over in-edges): PyG's edge-list path (gather the
  ``[E, C]`` messages, scatter-add) and a fused CSR ``torch.sparse.mm``.
* ``memory``: the deepest RevGCN (hidden 128 and 256) whose one training step (forward,
  backward, Adam step on a 500-node graph of average degree 5, small so that steps of
  thousands of layers stay cheap) stays within ``--mem-budget-mib`` (default 128 MiB) of
  **peak tracked tensor memory**: the peak of the live bytes of the tensor storages created from
  the model's construction to the end of the Adam step (parameters, gradients, Adam
  moments, activations, the pipeline's padded buffers; not the graph loaded before, not
  the Python / torch runtime), single process (full graph) vs P = 2 pipeline stages
  (``FlowPipeline``, M = 2, 1 thread per process, the larger of the two ranks' peaks).
  Doubling from 16 layers, then bisection until the bracket is within
  1/``--mem-resolution`` of its lower end; a probe ends as soon as its peak passes the
  budget. The peak RSS rise of each probe is kept in the JSON for information
  (the probes run with ``MALLOC_MMAP_THRESHOLD_=131072``, as bench_rev_memory.py, so that
  freed activations go back to the OS; with glibc's adaptive default the RSS of a
  2,000-layer model rose by many GiB while its live tensors stayed under 256 MiB).

``--baseline glem`` (the ``glem`` part; not in the default ``--parts``): PyG's GLEM
(``torch_geometric.llm.models.GLEM``) driven as PyG's ``examples/llm/glem.py`` drives it
(``em_order="gnn"``: LM pre-training on the training labels, then a GNN phase on the LM's
pseudo-labels plus gold, then an LM phase on the GNN's; ``GLEM.train`` /
``GLEM.inference``; pseudo-labels on ``0.5 * |train|`` random test nodes), on the
recipes' data, LM and GNN: the LM is ``lm_then_gnn.yaml``'s BERT-style encoder built by
the CLI from the same seed (UniTG's initial weights), saved with ``save_pretrained`` and
loaded by GLEM as ``lm_to_use`` (float32, no LoRA; GLEM adds a pooler and classifier),
its inputs the token ids of lightgraph's offline tokenizer; the GNN is the recipe's class
and sizes, passed to ``gnn_to_use`` as is (RevGCN / RevGAT take ``(x, edge_index)`` and
have ``out_channels``), trained full-graph (one batch per epoch, like UniTG; PyG's example
uses a ``NeighborLoader``). Runs (``--glem-runs``): ``glem_raw`` (the GNN on the numeric
features, GLEM as shipped), ``glem`` (on the LM's pooled last-layer embeddings, recomputed
before each GNN phase, as in the GLEM paper), ``glem_es`` (``glem`` with the example's
early stopping: from a phase's 5th epoch on, stop after more than ``--glem-patience``
(3) evaluated epochs without a better validation accuracy). GLEM's GNN phase runs
``--epochs`` epochs, its LM stages ``--glem-lm-epochs`` (3, as ``lm_then_gnn.yaml``).
Two settings (``--settings``): ``small`` (the recipes) and ``deep`` (``--deep-gnn``
RevGCN / RevGAT of ``--deep-layers`` x ``--deep-hidden`` in every run, so that the GNN is
most of a sequential run: the table prints the GNN share of ``lm_then_gnn``). Each
setting runs ``--glem-e2e-runs``
(``lm_then_gnn``, ``unitg_single``, ``unitg_p2_bubble`` = ``unitg.yaml`` as shipped)
interleaved with the GLEM runs, and prints one table: makespan, test accuracy (GNN's after
the last epoch; for GLEM the model it picks by validation accuracy, its last GNN's, and
the example's "best test acc", the max with the pre-trained LM's), LM and GNN seconds,
GLEM's phases (epochs, seconds) and GLEM / UniTG makespan and accuracy difference
(UniTG: the P = 2 row). GLEM's makespan runs from the data set-up to the final
prediction (saving and loading the LM, every inference and LM re-encoding included).
``--dry-run``: 200 nodes, 2 GNN epochs, 1 LM epoch everywhere, ``small``, ``glem_es``.

Threads: one-process runs use ``--threads`` (default 2: both cores for one job); the
P = 2 runs one thread per process (``OMP_NUM_THREADS=1``), so both layouts use the two
cores.

Usage::

    python benchmarks/bench_unitg.py [--parts e2e,lazy,m,reorder,memory] [--epochs 100]
    python benchmarks/bench_unitg.py --parts e2e,lazy --seeds 1 2 --tag _seeds12 \
        --e2e-runs lm_then_gnn unitg_single unitg_single_full3 unitg_single_lazy3 unitg_p2

    python benchmarks/bench_unitg.py --baseline glem [--dry-run]      # the GLEM tables
    python benchmarks/bench_unitg.py --baseline glem --glem-device cuda --accelerator gpu \
        --glem-e2e-runs lm_then_gnn unitg_single --threads 1    # one GPU

About 22 minutes for all parts on a quiet 2-core machine (e2e 2, lazy 1.5, m 6.5,
reorder 4.5, memory 7.5). Writes ``benchmarks/results/unitg_<part><tag>.json`` per part and
merges every part into ``benchmarks/results/unitg.json`` (key ``<part><tag>``).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
PARTS = ("e2e", "lazy", "m", "reorder", "memory")
#: every part: ``glem`` runs only when asked for (``--baseline glem`` or ``--parts glem``)
ALL_PARTS = (*PARTS, "glem")

# name -> (recipe, overrides, processes)
E2E_RUNS: dict[str, tuple[str, list[str], int]] = {
    "lm_then_gnn": ("lm_then_gnn.yaml", [], 1),
    "unitg_single": ("unitg_single.yaml", [], 1),
    "unitg_p2": ("unitg.yaml", ["--model.init_args.bubble_interleave=false"], 2),
    "unitg_p2_bubble": ("unitg.yaml", [], 2),
    # UniTG one process with the baseline's LM settings (full depth, 3 LM epochs): the
    # collaborative schedule against the sequential one with nothing else changed (F7).
    "unitg_single_full3": (
        "unitg_single.yaml",
        ["--model.init_args.lazy_tuner=false", "--model.init_args.lm_epochs=3"],
        1,
    ),
    # The Lazy Tuner with the baseline's 3 LM epochs, collaborative (the recipe uses 6).
    "unitg_single_lazy3": ("unitg_single.yaml", ["--model.init_args.lm_epochs=3"], 1),
    # Early stopping on a plateau of val_acc (patience ES_PATIENCE): UniTG through
    # CoTrainingEarlyStopping (the LM's remaining steps run first), the sequential baseline
    # through Lightning's EarlyStopping (its LM is done after epoch 0).
    "lm_then_gnn_es": ("lm_then_gnn.yaml", ["ES"], 1),
    "unitg_single_es": ("unitg_single.yaml", ["CO_ES"], 1),
    "unitg_p2_bubble_es": ("unitg.yaml", ["CO_ES"], 2),
    # The LM front-loaded into the first tenth of the planned epochs, so that early
    # stopping may end the run soon after it (the recipes spread it over half).
    "unitg_single_front_es": ("unitg_single.yaml", ["--model.init_args.lm_share=0.1", "CO_ES"], 1),
    "unitg_p2_bubble_front_es": ("unitg.yaml", ["--model.init_args.lm_share=0.1", "CO_ES"], 2),
}
ES_PATIENCE = 10
_EARLY_STOPPING = {
    "ES": "lightning.pytorch.callbacks.EarlyStopping",
    "CO_ES": "lightgraph.callbacks.CoTrainingEarlyStopping",
}


def _expand_overrides(overrides: list[str], patience: int = ES_PATIENCE) -> list[str]:
    """``"ES"`` / ``"CO_ES"`` in a run's overrides: append that early-stopping callback
    (``patience`` epochs)."""
    out: list[str] = []
    for item in overrides:
        if item in _EARLY_STOPPING:
            out += [
                f"--trainer.callbacks+={_EARLY_STOPPING[item]}",
                "--trainer.callbacks.monitor=val_acc",
                "--trainer.callbacks.mode=max",
                f"--trainer.callbacks.patience={patience}",
            ]
        else:
            out.append(item)
    return out


# name -> (lazy_tuner, lm_epochs); all on recipes/lm_then_gnn.yaml (sequential schedule)
LAZY_RUNS: dict[str, tuple[bool, int]] = {
    "full_3": (False, 3),
    "lazy_6": (True, 6),
    "lazy_3": (True, 3),
    "full_6": (False, 6),
}


# ----------------------------------------------------------------------------- helpers
def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


def _reset_hwm() -> int:
    """Reset the peak-RSS mark (``VmHWM``) to the current RSS; returns that RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _metrics(workdir: str, name: str) -> list[dict[str, str]]:
    (path,) = glob.glob(os.path.join(workdir, name, "version_*", "metrics.csv"))
    with open(path) as f:
        return list(csv.DictReader(f))


def _summarise(rows: list[dict[str, str]]) -> dict[str, Any]:
    """Final / best-val accuracies and the last value of every time total."""

    def col(key: str) -> list[tuple[int, float]]:
        return [(int(r["epoch"]), float(r[key])) for r in rows if r.get(key) not in (None, "")]

    val, test = col("val_acc"), dict(col("test_acc"))
    out: dict[str, Any] = {"epochs": len(val)}
    if val:
        best_epoch, best_val = max(val, key=lambda ev: (ev[1], -ev[0]))
        last_epoch = val[-1][0]
        out.update(
            final_val_acc=val[-1][1],
            final_test_acc=test.get(last_epoch),
            best_val_acc=best_val,
            best_val_epoch=best_epoch,
            test_acc_at_best_val=test.get(best_epoch),
        )
    for key in ("lm_time_total", "gnn_time_total", "lm_bubble_time_total"):
        values = col(key)
        if values:
            out[key] = values[-1][1]
    gnn = [v for _, v in col("gnn_time")]
    if gnn:
        out["gnn_time_median"] = statistics.median(gnn)
    return out


def _run_worker(argv: list[str], env: dict[str, str], log: str, timeout: float) -> dict[str, Any]:
    """Run ``bench_unitg.py --worker ...``; returns its RESULT (or an ``error``)."""
    cmd = [sys.executable, os.path.abspath(__file__), *argv]
    with open(log, "w") as out:
        try:
            proc = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=ROOT
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s (log {log})"}
    with open(log) as f:
        text = f.read()
    lines = [s for s in text.splitlines() if s.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}: " + text[-3000:], "returncode": proc.returncode}
    return json.loads(lines[-1][len("RESULT ") :])


def _env(threads: int, **extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


# ----------------------------------------------------------------------------- in-run probes
def _stopwatch(path: str):  # noqa: ANN202 - a Lightning callback, built lazily
    import lightning.pytorch as pl
    import torch

    class Stopwatch(pl.Callback):
        """Train-loop times, threads, microbatches and interleaver counters per rank."""

        def __init__(self) -> None:
            self.info: dict[str, Any] = {}
            #: (start, end) of every training pipeline step, on the interleaver's clock
            self.steps: list[tuple[float, float]] = []

        def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self.info["fit_start"] = time.time()

        def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self.info["train_start"] = time.time()
            self.info["torch_threads"] = torch.get_num_threads()
            context = getattr(pl_module, "parallel_context", None)
            pipe = getattr(context, "flow_pipeline", None)
            if pipe is not None:
                inter = getattr(pl_module, "interleaver", None)
                clock = inter.timeline.now if inter is not None else time.perf_counter
                step = pipe.step

                def timed_step(*args: Any, **kwargs: Any) -> Any:
                    start = clock()
                    try:
                        return step(*args, **kwargs)
                    finally:
                        self.steps.append((start, clock()))

                pipe.step = timed_step  # the instance attribute shadows the method

        def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            info = self.info
            info["train_end"] = time.time()
            info["train_s"] = info["train_end"] - info["train_start"]
            info["rank"] = trainer.global_rank
            info["world"] = trainer.world_size
            totals = getattr(pl_module, "totals", None)
            if isinstance(totals, dict):  # UniTGModule's running time sums, this rank's
                info["totals"] = {k: float(v) for k, v in totals.items()}
            context = getattr(pl_module, "parallel_context", None)
            pipe = getattr(context, "flow_pipeline", None)
            if pipe is not None and pipe.built:
                mb = pipe.microbatches
                edges = mb.num_kept_edges + mb.num_cut_edges
                info["pipeline"] = {
                    "stages": pipe.num_stages,
                    "microbatches": mb.num_microbatches,
                    "n_max": mb.n_max,
                    "cut_edges": mb.num_cut_edges,
                    "edges": edges,
                    "cut_fraction": mb.num_cut_edges / max(edges, 1),
                }
                graph = getattr(pl_module, "_graph", None)
                if graph is not None:
                    part = mb.microbatch_of()
                    src, dst = graph.edge_index
                    cut = part[src] != part[dst]
                    same = graph.y[src] == graph.y[dst]
                    info["pipeline"]["edge_homophily"] = float(same.float().mean())
                    info["pipeline"]["cut_same_class_share"] = float(
                        (cut & same).sum() / cut.sum().clamp_min(1)
                    )
                    info["pipeline"]["kept_edge_homophily"] = float(
                        (~cut & same).sum() / (~cut).sum().clamp_min(1)
                    )
            if self.steps:
                info["pipeline_steps"] = len(self.steps)
                info["pipeline_step_s_total"] = sum(e - s for s, e in self.steps)
            inter = getattr(pl_module, "interleaver", None)
            if inter is not None:
                tl = inter.timeline
                # LM run time inside the pipeline steps (the bubbles, and the gate waits)
                # and outside them: the end of the job in progress when a step ended, which
                # stop() lets finish (BubbleInterleaver counts it as bubble time too).
                inside = 0.0
                steps = sorted(self.steps)
                for iv in tl.intervals("lm"):
                    for s0, s1 in steps:
                        if s0 >= iv.end:
                            break
                        inside += max(0.0, min(iv.end, s1) - max(iv.start, s0))
                info["lm_inside_steps_s"] = inside
                info["lm_after_steps_s"] = tl.busy_time("lm") - inside
                info["interleaver"] = {
                    "jobs_done": inter.jobs_done,
                    "pauses": inter.pauses,
                    "lm_bubble_s": inter.lm_bubble_seconds,
                    "lm_drain_s": inter.lm_drain_seconds,
                    "gate_wait_s": inter.gate_wait_seconds,
                    "timeline_intervals": len(tl),
                    "gnn_busy_s": tl.busy_time("gnn"),
                    "lm_busy_s": tl.busy_time("lm"),
                    "overlaps": len(tl.overlaps("lm", "gnn")),
                }
            with open(f"{path}.rank{trainer.global_rank}.json", "w") as f:
                json.dump(info, f)

    return Stopwatch()


def _read_ranks(path: str) -> list[dict[str, Any]]:
    out = []
    for p in sorted(glob.glob(f"{path}.rank*.json")):
        with open(p) as f:
            out.append(json.load(f))
    return out


# ----------------------------------------------------------------------------- workers
def worker_e2e(args: argparse.Namespace, kind: str, name: str) -> dict[str, Any]:
    import torch

    from lightgraph.cli import build_cli

    seed_overrides = [
        f"--seed_everything={args.seed}",
        f"--model.init_args.seed={args.seed}",
    ]
    if kind == "e2e":
        recipe, overrides, procs = E2E_RUNS[name]
    else:
        lazy, lm_epochs = LAZY_RUNS[name]
        recipe, procs = "lm_then_gnn.yaml", 1
        overrides = [
            f"--model.init_args.lazy_tuner={str(lazy).lower()}",
            f"--model.init_args.lm_epochs={lm_epochs}",
        ]
    overrides = [*_expand_overrides(overrides, args.es_patience), *seed_overrides]
    overrides += _setting_overrides(args, args.setting)
    if args.accelerator and procs == 1:
        overrides.append(f"--trainer.accelerator={args.accelerator}")
    if procs > 1:
        overrides = [*overrides, "--trainer.strategy.init_args.start_method=fork"]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    workdir = args.workdir
    cli = build_cli(
        args=[
            "--config",
            os.path.join(ROOT, "recipes", recipe),
            *overrides,
            f"--trainer.max_epochs={args.epochs}",
            f"--trainer.logger.init_args.save_dir={workdir}",
            f"--trainer.logger.init_args.name={name}_seed{args.seed}",
            f"--data.init_args.cache_dir={os.path.join(args.cache_root, 'text_cache')}",
            "--trainer.enable_checkpointing=false",
        ],
        run=False,
    )
    probe = os.path.join(workdir, f"{name}_seed{args.seed}.stopwatch")
    cli.trainer.callbacks.append(_stopwatch(probe))  # type: ignore[attr-defined]
    module = cli.model
    encode_s = [0.0]
    if kind == "lazy":
        original = module.encode_all

        def timed_encode_all() -> None:
            start = time.perf_counter()
            original()
            encode_s[0] += time.perf_counter() - start

        module.encode_all = timed_encode_all  # type: ignore[method-assign]
    start = time.perf_counter()
    cli.trainer.fit(module, datamodule=cli.datamodule)
    makespan = time.perf_counter() - start
    result: dict[str, Any] = {
        "name": name,
        "recipe": recipe,
        "overrides": overrides,
        "processes": procs,
        "makespan_s": makespan,
        **_summarise(_metrics(workdir, f"{name}_seed{args.seed}")),
    }
    ranks = _read_ranks(probe)
    if ranks:
        result["train_s"] = max(r["train_s"] for r in ranks)
        result["torch_threads"] = [r.get("torch_threads") for r in ranks]
        if "pipeline" in ranks[0]:
            result["pipeline"] = ranks[0]["pipeline"]
        inter = [r["interleaver"] for r in ranks if "interleaver" in r]
        if inter:
            result["interleaver_per_rank"] = inter
        for key in ("pipeline_step_s_total", "lm_inside_steps_s", "lm_after_steps_s"):
            values = [r[key] for r in ranks if key in r]
            if values:
                result[key + "_per_rank"] = values
    # ModalitySync's syncs and the store refresh by the finished LM (inside
    # lm_time_total), the slowest rank's: the "sync" of the GLEM table's time breakdown.
    # Read from the ranks' own modules (a spawned rank 0 is not this process's module).
    totals = [r["totals"] for r in ranks if "totals" in r] or [module.totals]
    result["sync_s"] = max(float(t.get("sync_time", 0.0)) for t in totals)
    result["refresh_s"] = max(float(t.get("refresh_time", 0.0)) for t in totals)
    if kind == "lazy":
        result["encode_all_s"] = encode_s[0]
        result["lm_finetune_s"] = result.get("lm_time_total", 0.0) - encode_s[0]
        result.update(_lm_head_accuracy(module, cli.datamodule))
        result["lazy_tuner"], result["lm_epochs"] = LAZY_RUNS[name]
    return result


def _lm_head_accuracy(module: Any, datamodule: Any) -> dict[str, Any]:
    """Test accuracy of the LM's own exit heads (the Lazy Tuner: each node at its group's
    exit; full depth: the last layer)."""
    import torch
    from torch_geometric.utils import degree as node_degree

    from lightgraph.nn.early_exit import degree_groups

    lm = module.lm
    graph = datamodule.graph()
    tokens = datamodule.tokens()
    n = int(graph.num_nodes)
    test = graph.test_mask.nonzero().view(-1)
    if module.lazy_tuner:
        deg = node_degree(graph.edge_index[1], n)
        groups = degree_groups(deg, torch.arange(n), lm.num_groups)[test]
    else:
        groups = torch.full_like(test, lm.num_groups - 1)
    lm.eval()
    correct = 0
    with torch.no_grad():
        for g in range(lm.num_groups):
            nodes = test[groups == g]
            if nodes.numel() == 0:
                continue
            emb = lm.embed(
                tokens["input_ids"][nodes], tokens["attention_mask"][nodes], lm.exit_layers[g]
            )
            pred = lm.heads[g](emb).argmax(-1)
            correct += int((pred == graph.y[nodes]).sum())
    return {"lm_head_test_acc": correct / max(test.numel(), 1)}


def _identity(batch: Any) -> Any:
    return batch


def _graph_dm(data: Any):  # noqa: ANN202
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    class GraphDataModule(pl.LightningDataModule):
        """The whole graph as the one batch of every split (what UniTGModule needs)."""

        def __init__(self) -> None:
            super().__init__()
            self._graph = data

        def graph(self) -> Any:
            return self._graph

        def _loader(self) -> DataLoader:
            graphs: Any = [self._graph]  # a list is a map-style dataset
            return DataLoader(graphs, batch_size=None, collate_fn=_identity)

        def train_dataloader(self) -> DataLoader:
            return self._loader()

        def val_dataloader(self) -> DataLoader:
            return self._loader()

    return GraphDataModule()


def worker_m(args: argparse.Namespace, m: int, reorder: str, communities: int) -> dict[str, Any]:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import CSVLogger

    from lightgraph.data import SyntheticGraph
    from lightgraph.models import UniTGModule
    from lightgraph.nn import RevGCN
    from lightgraph.strategies import FlowParallelStrategy

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    pl.seed_everything(0, verbose=False)
    data = SyntheticGraph(
        num_nodes=args.m_nodes,
        avg_degree=args.m_avg_degree,
        homophily=args.m_homophily,
        feature_noise=args.m_feature_noise,
        num_communities=communities,
        seed=0,
    ).load()
    gnn = RevGCN(data.x.size(1), 64, int(data.y.max()) + 1, num_layers=8, dropout=0.2)
    module = UniTGModule(gnn, int(data.y.max()) + 1, lm=None, lr=5e-3)
    devices = args.m_devices
    name = f"m{m}_{reorder}_c{communities}"
    strategy = FlowParallelStrategy(
        num_microbatches=m, reorder=reorder, start_method="fork" if devices > 1 else "popen"
    )
    probe = os.path.join(args.workdir, f"{name}.stopwatch")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy,
        max_epochs=args.m_epochs,
        logger=CSVLogger(args.workdir, name=name),
        callbacks=[_stopwatch(probe)],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule=_graph_dm(data))
    result: dict[str, Any] = {
        "M": m,
        "reorder": reorder,
        "communities": communities,
        "devices": devices,
        "makespan_s": time.perf_counter() - start,
        **_summarise(_metrics(args.workdir, name)),
    }
    ranks = _read_ranks(probe)
    if ranks:
        result["train_s"] = max(r["train_s"] for r in ranks)
        result.update(ranks[0].get("pipeline", {}))
    return result


def _relabel(data: Any, order: Any) -> tuple[Any, Any, Any, Any]:
    """``x, y, train_mask, edge_index`` with node ``order[i]`` renamed ``i``; edges sorted by
    (target, source)."""
    import torch

    n = order.numel()
    position = torch.empty_like(order)
    position[order] = torch.arange(n)
    ei = position[data.edge_index]
    key = ei[1] * n + ei[0]
    ei = ei[:, torch.argsort(key)]
    return data.x[order].contiguous(), data.y[order], data.train_mask[order], ei.contiguous()


def worker_reorder(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from lightgraph.data import SyntheticGraph
    from lightgraph.data.partition import affinity_microbatches
    from lightgraph.nn.models.rev_gnn import ResGEN, RevGAT, RevGCN

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    start = time.perf_counter()
    data = SyntheticGraph(
        num_nodes=args.reorder_nodes, avg_degree=args.reorder_avg_degree, seed=0
    ).load()
    gen_s = time.perf_counter() - start
    n = int(data.num_nodes)
    start = time.perf_counter()
    metis_order = affinity_microbatches(data.edge_index, n, 1, "metis").order
    metis_s = time.perf_counter() - start
    orders = {
        "metis": metis_order,
        "random": torch.randperm(n, generator=torch.Generator().manual_seed(1)),
    }
    graphs = {k: _relabel(data, o) for k, o in orders.items()}
    # Locality of the edge list: share of edges whose ends are fewer than 64 ids apart
    # (one METIS sub-cluster) and fewer than N / communities ids apart (one community).
    community_size = n // int(data.community.max() + 1)
    locality = {}
    for k, g in graphs.items():
        gap = (g[3][0] - g[3][1]).abs()
        locality[k] = {
            "edges_within_64_ids": float((gap < 64).float().mean()),
            f"edges_within_{community_size}_ids": float((gap < community_size).float().mean()),
        }
    classes = int(data.y.max()) + 1
    layers, hidden = args.reorder_layers, args.reorder_hidden

    def build(model: str) -> torch.nn.Module:
        torch.manual_seed(0)
        f = data.x.size(1)
        if model == "RevGCN":
            return RevGCN(f, hidden, classes, layers, dropout=0.1)
        if model == "RevGAT":
            return RevGAT(f, hidden, classes, layers, heads=2, dropout=0.1)
        return ResGEN(f, hidden, classes, layers, dropout=0.1)

    rows = []
    for model_name in args.reorder_models:
        models = {k: build(model_name).train() for k in orders}
        opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3) for k, m in models.items()}
        times: dict[str, list[float]] = {k: [] for k in orders}

        def epoch(model: torch.nn.Module, opt: torch.optim.Optimizer, k: str) -> float:
            x, y, mask, ei = graphs[k]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x, ei)[mask], y[mask])
            loss.backward()
            opt.step()
            return time.perf_counter() - t0

        for k in orders:  # warm-up, untimed
            epoch(models[k], opts[k], k)
        for _ in range(args.reorder_repeats):  # interleaved: load drifts hit all orders
            for k in orders:
                times[k].append(epoch(models[k], opts[k], k))
        for k in orders:
            rows.append(
                {
                    "model": model_name,
                    "order": k,
                    "epoch_s": statistics.median(times[k]),
                    "epoch_times_s": times[k],
                }
            )
        print(
            f"{model_name}: "
            + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in times.items()),
            flush=True,
        )
    # The aggregation alone, width = hidden: PyG's edge-list path (gather the [E, C]
    # messages, scatter-add them) and a fused CSR SpMM, median of 5.
    kernels = []
    x = torch.randn(n, hidden, generator=torch.Generator().manual_seed(2))
    for k in orders:
        src, dst = graphs[k][3]
        with warnings.catch_warnings():  # "sparse CSR support is in beta" and the like
            warnings.simplefilter("ignore")
            csr = torch.sparse_coo_tensor(
                torch.stack([dst, src]), torch.ones(src.numel()), (n, n)
            ).to_sparse_csr()
        for kernel in ("gather_scatter", "csr_spmm"):
            times_k = []
            for _ in range(5):
                t0 = time.perf_counter()
                if kernel == "csr_spmm":
                    torch.sparse.mm(csr, x)
                else:
                    torch.zeros_like(x).index_add_(0, dst, x.index_select(0, src))
                times_k.append(time.perf_counter() - t0)
            kernels.append({"kernel": kernel, "order": k, "s": statistics.median(times_k)})
    return {
        "aggregation_kernels": kernels,
        "num_nodes": n,
        "num_edges": int(data.edge_index.size(1)),
        "layers": layers,
        "hidden": hidden,
        "generate_s": gen_s,
        "metis_order_s": metis_s,
        "edge_locality": locality,
        "rows": rows,
    }


def _tensor_meter(budget: int, flag: str | None):  # noqa: ANN202 - a dispatch mode
    """A ``TorchDispatchMode`` that follows the storages created inside it: live bytes,
    their peak, and the end of the process (exit code 3) once the peak passes ``budget``.

    Incremental (unlike bench_rev_memory.py's meter, which re-sums every live storage at
    every op and is too slow for thousands of layers): a storage is added when an op
    returns it and removed by a weakref callback when it is freed;
    ``UntypedStorage.resize_`` (what the reversible blocks call to free and restore their
    inputs) is patched to report the new size.
    """
    import functools
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class TensorMeter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.sizes: dict[int, int] = {}
            self.refs: dict[int, Any] = {}
            self.current = 0
            self.peak = 0

        def _check(self) -> None:
            if self.current > self.peak:
                self.peak = self.current
                if self.peak > budget and flag is not None:
                    with open(flag, "w") as f:
                        f.write(str(self.peak))
                    os._exit(3)

        def _freed(self, key: int, _ref: Any) -> None:
            self.refs.pop(key, None)
            self.current -= self.sizes.pop(key, 0)

        def add(self, storage: Any) -> None:
            key = id(storage)
            if key in self.sizes:
                return
            nbytes = storage.nbytes()
            self.sizes[key] = nbytes
            self.refs[key] = weakref.ref(storage, functools.partial(self._freed, key))
            self.current += nbytes
            self._check()

        def resized(self, storage: Any) -> None:
            key = id(storage)
            if key in self.sizes:
                nbytes = storage.nbytes()
                self.current += nbytes - self.sizes[key]
                self.sizes[key] = nbytes
                self._check()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.add(t.untyped_storage())
            return out

    meter = TensorMeter()
    original = torch.UntypedStorage.resize_

    def resize_(self: Any, size: int) -> Any:
        result = original(self, size)
        meter.resized(self)
        return result

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
    return meter


def _mem_step(data: Any, hidden: int, layers: int, pipelined: bool, meter: Any = None) -> dict:
    """Build a RevGCN (and its P = 2 pipeline) and run one training step under ``meter``;
    the peak of live tensor bytes and the rise of the peak RSS."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from lightgraph.distributed.flow_pipeline import FlowPipeline
    from lightgraph.nn import RevGCN

    before = _reset_hwm()
    start = time.perf_counter()
    out: dict[str, Any] = {}
    with meter if meter is not None else contextlib.nullcontext():
        torch.manual_seed(0)
        model = RevGCN(data.x.size(1), hidden, 8, layers, dropout=0.1).train()
        if pipelined:
            pipe = FlowPipeline(None, num_microbatches=2, reorder="metis")
            pipe.build(model, data.edge_index, int(data.num_nodes))
            out["stage_params"] = sum(p.numel() for p in pipe.stage_parameters())
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # as UniTGModule: all parameters
        if meter is not None:
            out["tensor_bytes_after_build"] = meter.current
        mask = data.train_mask
        if pipelined:
            x = data.x if pipe.is_first else None
            loss = pipe.step(x, data.y, mask)
            pipe.close()
        else:
            loss = F.cross_entropy(model(data.x, data.edge_index)[mask], data.y[mask])
            loss.backward()
        opt.step()
    out["step_s"] = time.perf_counter() - start
    if meter is not None:
        out["peak_tensor_bytes"] = meter.peak
    out["peak_rss_rise"] = _status("VmHWM") - before
    out["loss"] = None if loss is None else float(loss.detach())
    out["model_params"] = sum(p.numel() for p in model.parameters())
    return out


def _warm_up(data: Any, hidden: int, pipelined: bool) -> None:
    """One step of a 2-layer model first: one-time costs (lazy imports, PyG's generated
    propagate code, thread pools, the pipeline runtime) are not the model's memory."""
    import gc

    _mem_step(data, hidden, 2, pipelined)
    gc.collect()


def _mem_rank(rank: int, args: argparse.Namespace, data: Any, out: str) -> None:
    """One rank of the P = 2 memory probe (forked by :func:`worker_memory`)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.mem_port}", rank=rank, world_size=2
    )
    _warm_up(data, args.mem_hidden, pipelined=True)
    meter = _tensor_meter(int(args.mem_budget_mib * 2**20), f"{out}.over{rank}")
    result = _mem_step(data, args.mem_hidden, args.mem_layers, True, meter)
    with open(f"{out}.rank{rank}", "w") as f:
        json.dump({"rank": rank, **result}, f)
    dist.barrier()
    dist.destroy_process_group()


def worker_memory(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from lightgraph.data import SyntheticGraph
    from lightgraph.nn import RevGCN

    data = SyntheticGraph(num_nodes=args.mem_nodes, avg_degree=args.mem_avg_degree, seed=0).load()
    budget = int(args.mem_budget_mib * 2**20)
    out = os.path.join(args.workdir, f"mem_{args.mem_mode}_{args.mem_hidden}_{args.mem_layers}")
    params = sum(
        p.numel() for p in RevGCN(data.x.size(1), args.mem_hidden, 8, 2).blocks[0].parameters()
    )
    base = {
        "mode": args.mem_mode,
        "hidden": args.mem_hidden,
        "layers": args.mem_layers,
        "params_per_layer": params,
    }
    if args.mem_mode == "single":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        _warm_up(data, args.mem_hidden, pipelined=False)
        meter = _tensor_meter(budget, f"{out}.over0")
        result = _mem_step(data, args.mem_hidden, args.mem_layers, False, meter)
        return {**base, "fits": True, **result}
    import torch.multiprocessing as mp

    torch.set_num_threads(1)
    try:
        mp.start_processes(
            _mem_rank, args=(args, data, out), nprocs=2, join=True, start_method="fork"
        )
    except Exception as err:  # noqa: BLE001 - a rank passed the budget, or failed
        over = [p for p in glob.glob(f"{out}.over*")]
        if over:
            return {**base, "fits": False, "over_ranks": len(over)}
        raise RuntimeError(f"P=2 memory probe failed: {err}") from err
    ranks = []
    for r in range(2):
        with open(f"{out}.rank{r}") as f:
            ranks.append(json.load(f))
    return {
        **base,
        "fits": True,
        "peak_tensor_bytes": max(r["peak_tensor_bytes"] for r in ranks),
        "tensor_bytes_after_build": max(r["tensor_bytes_after_build"] for r in ranks),
        "peak_rss_rise": max(r["peak_rss_rise"] for r in ranks),
        "model_params": ranks[0]["model_params"],
        "per_rank": ranks,
        "step_s": max(r["step_s"] for r in ranks),
    }


# ----------------------------------------------------------------------------- parts
def _workdir(args: argparse.Namespace, part: str) -> str:
    path = os.path.join(args.scratch, part)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def _common(args: argparse.Namespace, workdir: str) -> list[str]:
    return [
        "--workdir", workdir, "--scratch", args.scratch, "--epochs", str(args.epochs),
        "--es-patience", str(args.es_patience),
    ]  # fmt: skip


def part_e2e(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    workdir = _workdir(args, kind)
    runs = args.e2e_runs if kind == "e2e" else args.lazy_runs
    table = E2E_RUNS if kind == "e2e" else LAZY_RUNS
    rows = []
    for seed in args.seeds:
        for name in runs:
            procs = table[name][2] if kind == "e2e" else 1  # type: ignore[misc]
            threads = 1 if procs > 1 else args.threads
            env = _env(threads)
            row = _run_worker(
                ["--worker", kind, name, "--seed", str(seed), *_common(args, workdir)],
                env,
                os.path.join(workdir, f"{name}_seed{seed}.log"),
                timeout=args.timeout,
            )
            row.setdefault("name", name)
            row["seed"] = seed
            row["threads_per_process"] = threads
            rows.append(row)
            _print_e2e_row(kind, row)
    out: dict[str, Any] = {"seeds": args.seeds, "rows": rows}
    for seed in args.seeds:
        out[f"seed{seed}"] = _e2e_verdicts(kind, [r for r in rows if r["seed"] == seed])
    if len(args.seeds) > 1:
        out["mean_over_seeds"] = _mean_rows(rows)
        for name, m in out["mean_over_seeds"].items():
            print(
                f"mean over seeds {args.seeds}: {name:<18} final test {m['final_test_acc']:.4f}"
                f"  @best val {m['test_acc_at_best_val']:.4f}",
                flush=True,
            )
    return out


def _mean_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per run name, the mean (and spread) of the accuracies over the seeds."""
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r["name"] for r in rows):
        mine = [r for r in rows if r["name"] == name and "error" not in r]
        if not mine:
            continue
        entry: dict[str, float] = {"runs": len(mine)}
        for key in ("final_test_acc", "test_acc_at_best_val", "makespan_s"):
            values = [r[key] for r in mine if r.get(key) is not None]
            entry[key] = statistics.fmean(values)
            entry[key + "_min"] = min(values)
            entry[key + "_max"] = max(values)
        out[name] = entry
    return out


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def _print_e2e_row(kind: str, r: dict[str, Any]) -> None:
    label = r["name"] + (f" s{r['seed']}" if r.get("seed") else "")
    if "error" in r:
        print(f"{label:<18} ERROR {r['error'][-800:]}", flush=True)
        return
    if kind == "e2e":
        print(
            f"{label:<18} P={r['processes']} makespan {r['makespan_s']:7.1f} s  train "
            f"{_fmt(r.get('train_s'), '.1f')} s  test {r.get('final_test_acc', 0):.4f} "
            f"(@best val {r.get('test_acc_at_best_val', 0):.4f}, ep {r.get('best_val_epoch')})  "
            f"lm {_fmt(r.get('lm_time_total'))} s  gnn {_fmt(r.get('gnn_time_total'))} s  "
            f"bubble {_fmt(r.get('lm_bubble_time_total'))} s",
            flush=True,
        )
        if "pipeline_step_s_total_per_rank" in r:
            line = "    pipeline steps s/rank " + ", ".join(
                f"{v:.2f}" for v in r["pipeline_step_s_total_per_rank"]
            )
            if "lm_inside_steps_s_per_rank" in r:
                line += "; LM inside steps s/rank " + ", ".join(
                    f"{v:.2f}" for v in r["lm_inside_steps_s_per_rank"]
                )
                line += "; LM after steps (job tails) s/rank " + ", ".join(
                    f"{v:.2f}" for v in r["lm_after_steps_s_per_rank"]
                )
            print(line, flush=True)
    else:
        print(
            f"{label:<8} fine-tune {r['lm_finetune_s']:6.2f} s (encode_all "
            f"{r['encode_all_s']:.2f} s)  GNN test {r.get('final_test_acc', 0):.4f} "
            f"(@best val {r.get('test_acc_at_best_val', 0):.4f})  LM head test "
            f"{r['lm_head_test_acc']:.4f}  makespan {r['makespan_s']:.1f} s",
            flush=True,
        )


def _e2e_verdicts(kind: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = {r["name"]: r for r in rows if "error" not in r}
    out: dict[str, Any] = {}
    if kind == "e2e" and "lm_then_gnn" in ok:
        base = ok["lm_then_gnn"]
        ratios = {}
        for name, r in ok.items():
            ratios[name] = {
                "makespan_speedup_vs_lm_then_gnn": base["makespan_s"] / r["makespan_s"],
                "train_speedup_vs_lm_then_gnn": (
                    base["train_s"] / r["train_s"] if r.get("train_s") else None
                ),
                "final_test_acc_delta_points": 100 * (r["final_test_acc"] - base["final_test_acc"]),
                "best_val_test_acc_delta_points": 100
                * (r["test_acc_at_best_val"] - base["test_acc_at_best_val"]),
            }
        out["vs_lm_then_gnn"] = ratios
    if kind == "lazy" and "full_3" in ok:
        base = ok["full_3"]
        out["lm_speedup_vs_full_3"] = {
            name: base["lm_finetune_s"] / r["lm_finetune_s"] for name, r in ok.items()
        }
    return out


def part_m(args: argparse.Namespace) -> dict[str, Any]:
    workdir = _workdir(args, "m")
    threads = 1 if args.m_devices > 1 else args.threads
    rows = []
    # Random microbatches on the first graph only (they ignore the communities anyway).
    settings = [(c, "metis") for c in args.m_communities]
    settings.insert(1, (args.m_communities[0], "random"))
    settings = [(c, r) for c, r in settings if r in args.m_reorders]
    for communities, reorder in settings:
        for m in args.m_values:
            row = _run_worker(
                ["--worker", "m", str(m), reorder, str(communities), *_common(args, workdir),
                 *_m_flags(args)],
                _env(threads),
                os.path.join(workdir, f"m{m}_{reorder}_c{communities}.log"),
                timeout=args.timeout,
            )  # fmt: skip
            row.setdefault("M", m)
            row.setdefault("reorder", reorder)
            row.setdefault("communities", communities)
            rows.append(row)
            tag = f"{communities:>2} comm. M={m:<3} {reorder:<7}"
            if "error" in row:
                print(f"{tag} ERROR {row['error'][-800:]}", flush=True)
                continue
            print(
                f"{tag} cut {row.get('cut_fraction', 0):6.1%} (same-class share of the cut "
                f"{row.get('cut_same_class_share', 0):5.1%}, kept-edge homophily "
                f"{row.get('kept_edge_homophily', 0):.3f})  test {row['final_test_acc']:.4f} "
                f"(@best val {row['test_acc_at_best_val']:.4f})  train "
                f"{row.get('train_s', 0):.1f} s",
                flush=True,
            )
    return {
        "graph": {
            "num_nodes": args.m_nodes,
            "avg_degree": args.m_avg_degree,
            "homophily": args.m_homophily,
            "feature_noise": args.m_feature_noise,
            "communities": args.m_communities,
        },
        "model": "RevGCN(64 -> 64 x 8 layers, dropout 0.2), Adam lr 5e-3",
        "epochs": args.m_epochs,
        "devices": args.m_devices,
        "threads_per_process": threads,
        "rows": rows,
    }


def _m_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--m-nodes", str(args.m_nodes),
        "--m-avg-degree", str(args.m_avg_degree),
        "--m-homophily", str(args.m_homophily),
        "--m-feature-noise", str(args.m_feature_noise),
        "--m-epochs", str(args.m_epochs),
        "--m-devices", str(args.m_devices),
        "--m-communities", *map(str, args.m_communities),
    ]  # fmt: skip


def part_reorder(args: argparse.Namespace) -> dict[str, Any]:
    workdir = _workdir(args, "reorder")
    flags = [
        "--reorder-nodes", str(args.reorder_nodes),
        "--reorder-avg-degree", str(args.reorder_avg_degree),
        "--reorder-layers", str(args.reorder_layers),
        "--reorder-hidden", str(args.reorder_hidden),
        "--reorder-repeats", str(args.reorder_repeats),
        "--reorder-models", *args.reorder_models,
    ]  # fmt: skip
    res = _run_worker(
        ["--worker", "reorder", *_common(args, workdir), *flags],
        _env(args.threads),
        os.path.join(workdir, "reorder.log"),
        timeout=args.timeout,
    )
    if "error" in res:
        print(f"reorder ERROR {res['error'][-800:]}")
        return res
    res["threads"] = args.threads
    by = {(r["model"], r["order"]): r["epoch_s"] for r in res["rows"]}
    res["random_over_metis"] = {
        m: by[(m, "random")] / by[(m, "metis")] for m in args.reorder_models
    }
    print(f"{'model':<8} {'METIS s':>8} {'random s':>9} {'random/METIS':>13}")
    for m in args.reorder_models:
        print(
            f"{m:<8} {by[(m, 'metis')]:>8.2f} {by[(m, 'random')]:>9.2f} "
            f"{res['random_over_metis'][m]:>12.2f}x"
        )
    print(f"edge locality: {res['edge_locality']}")
    kern = {(r["kernel"], r["order"]): r["s"] for r in res["aggregation_kernels"]}
    res["kernel_random_over_metis"] = {
        k: kern[(k, "random")] / kern[(k, "metis")] for k in ("gather_scatter", "csr_spmm")
    }
    for k in ("gather_scatter", "csr_spmm"):
        print(
            f"aggregation {k:<15} METIS {kern[(k, 'metis')] * 1000:6.0f} ms  random "
            f"{kern[(k, 'random')] * 1000:6.0f} ms  {res['kernel_random_over_metis'][k]:.2f}x"
        )
    return res


def part_memory(args: argparse.Namespace) -> dict[str, Any]:
    workdir = _workdir(args, "memory")
    env_extra = {}
    if args.mem_mmap_threshold:
        env_extra["MALLOC_MMAP_THRESHOLD_"] = args.mem_mmap_threshold
    searches = []
    port = 29750
    for hidden in args.mem_hiddens:
        for mode in ("single", "p2"):
            threads = args.threads if mode == "single" else 1
            probes: list[dict[str, Any]] = []

            def probe(layers: int, mode: str = mode, hidden: int = hidden,
                      threads: int = threads, probes: list = probes) -> bool:  # fmt: skip
                nonlocal port
                port += 1
                flags = [
                    "--mem-mode", mode, "--mem-hidden", str(hidden),
                    "--mem-layers", str(layers), "--mem-budget-mib", str(args.mem_budget_mib),
                    "--mem-nodes", str(args.mem_nodes), "--mem-port", str(port),
                    "--mem-avg-degree", str(args.mem_avg_degree),
                ]  # fmt: skip
                r = _run_worker(
                    ["--worker", "memory", *_common(args, workdir), *flags],
                    _env(threads, **env_extra),
                    os.path.join(workdir, f"{mode}_{hidden}_{layers}.log"),
                    timeout=args.timeout,
                )
                if "error" in r:
                    # The single-process watchdog exits with code 3: over the budget.
                    fits = False
                    if r.get("returncode") != 3:
                        raise RuntimeError(f"memory probe failed: {r['error']}")
                    r = {"mode": mode, "hidden": hidden, "layers": layers, "fits": False}
                fits = bool(r["fits"])
                probes.append(r)
                mib = 2.0**20
                print(
                    f"  {mode:<6} hidden {hidden:>3} layers {layers:>5}: "
                    + (
                        f"fits, peak tensors {r['peak_tensor_bytes'] / mib:7.1f} MiB (after "
                        f"build {r['tensor_bytes_after_build'] / mib:.1f}; peak RSS rise "
                        f"{r['peak_rss_rise'] / mib:.1f}), step {r['step_s']:.1f} s"
                        if fits
                        else "over budget"
                    ),
                    flush=True,
                )
                return fits

            lo, hi, layers = 0, None, args.mem_start_layers
            while layers <= args.mem_max_layers:
                if probe(layers):
                    lo = layers
                    layers *= 2
                else:
                    hi = layers
                    break
            if hi is not None:
                while hi - lo > max(1, lo // args.mem_resolution):
                    mid = max((lo + hi) // 2, 2)  # P = 2 stages need 2 layers
                    if mid >= hi:
                        break
                    if probe(mid):
                        lo = mid
                    else:
                        hi = mid
            best = next((p for p in probes if p.get("fits") and p["layers"] == lo), None)
            searches.append(
                {
                    "mode": mode,
                    "hidden": hidden,
                    "max_layers": lo,
                    "first_over": hi,
                    "capped": hi is None,
                    "peak_tensor_bytes_at_max": None if best is None else best["peak_tensor_bytes"],
                    "peak_rss_rise_at_max": None if best is None else best["peak_rss_rise"],
                    "step_s_at_max": None if best is None else best["step_s"],
                    "probes": probes,
                }
            )
            print(
                f"{mode:<6} hidden {hidden}: deepest fitting RevGCN {lo} layers (first over: {hi})",
                flush=True,
            )
    by = {(s["mode"], s["hidden"]): s["max_layers"] for s in searches}
    ratios = {
        h: (by[("p2", h)] / by[("single", h)] if by.get(("single", h)) else None)
        for h in args.mem_hiddens
    }
    return {
        "budget_mib": args.mem_budget_mib,
        "measure": (
            "peak live bytes of the tensor storages created from the model's construction to "
            "the end of its first Adam step (per process; P = 2: the larger rank)"
        ),
        "num_nodes": args.mem_nodes,
        "avg_degree": args.mem_avg_degree,
        "malloc_mmap_threshold": args.mem_mmap_threshold or "glibc default",
        "searches": searches,
        "p2_over_single_layers": ratios,
    }


# ----------------------------------------------------------------------------- GLEM baseline
# name -> (GNN input, early-stopping patience; None: every phase runs all its epochs)
GLEM_RUNS: dict[str, tuple[str, int | None]] = {
    "glem_raw": ("raw", None),  # PyG's GLEM as shipped: the GNN on the numeric features
    "glem": ("lm", None),  # the GNN on the LM's node embeddings, refreshed after each LM phase
    "glem_es": ("lm", -1),  # ... and each phase stops early (--glem-patience)
}
#: UniTG / sequential rows the GLEM table runs in the same invocation (E2E_RUNS names)
GLEM_E2E_RUNS = ("lm_then_gnn", "unitg_single", "unitg_p2_bubble")


def _setting_overrides(args: argparse.Namespace, setting: str) -> list[str]:
    """Recipe overrides of a ``--baseline glem`` setting (both systems get the same)."""
    out = []
    if args.nodes is not None:
        out.append(f"--data.init_args.dataset.init_args.graph.init_args.num_nodes={args.nodes}")
    if args.recipe_lm_epochs is not None:
        out.append(f"--model.init_args.lm_epochs={args.recipe_lm_epochs}")
    if setting == "deep":
        init: dict[str, Any] = {
            "hidden_channels": args.deep_hidden,
            "num_layers": args.deep_layers,
            "dropout": 0.2,
        }
        if args.deep_gnn == "RevGAT":
            init["heads"] = args.deep_heads
        spec = {"class_path": f"lightgraph.nn.{args.deep_gnn}", "init_args": init}
        out.append("--model.init_args.model=" + json.dumps(spec))
    return out


class _FullGraphLoader:
    """GLEM's GNN loader interface (``NeighborLoader``'s ``input_nodes``, ``len()`` and
    batches with ``x, edge_index, y, is_gold, n_id, batch_size``) over the whole graph:
    one batch per epoch, the input nodes relabelled first, every edge kept.

    UniTG trains its GNN full-graph; a ``NeighborLoader`` with all neighbours over as many
    hops as a deep GNN has layers reaches the whole 2,000-node graph anyway, but drops the
    in-edges of the last hop's nodes (GCN's degree normalisation then differs). ``x`` is
    read at every iteration, so an LM re-encoding between phases is seen.
    """

    def __init__(self, data: Any, input_nodes: Any) -> None:
        import torch

        n = int(data.num_nodes)
        self.data = data
        self.input_nodes = input_nodes
        rest = torch.ones(n, dtype=torch.bool)
        rest[input_nodes] = False
        self._order = torch.cat([input_nodes, rest.nonzero().view(-1)])
        position = torch.empty_like(self._order)
        position[self._order] = torch.arange(n)
        self._edge_index = position[data.edge_index]

    def __len__(self) -> int:
        return 1

    def __iter__(self):  # noqa: ANN204
        from torch_geometric.data import Data

        d, order = self.data, self._order
        yield Data(
            x=d.x[order],
            edge_index=self._edge_index,
            y=d.y[order],
            is_gold=d.is_gold[order],
            n_id=order,
            batch_size=int(self.input_nodes.numel()),
            num_nodes=int(order.numel()),
        )


def _node_texts(tokens: dict[str, Any], y: Any, is_gold: Any):  # noqa: ANN202
    """GLEM's text dataset: item ``i`` is ``{"input": {input_ids, attention_mask},
    "labels", "is_gold", "n_id"}`` (what ``GLEM.train_lm`` / ``inference_lm`` read)."""
    from torch.utils.data import Dataset

    class NodeTexts(Dataset):
        def __len__(self) -> int:
            return int(y.numel())

        def __getitem__(self, i: Any) -> dict[str, Any]:
            return {
                "input": {
                    "input_ids": tokens["input_ids"][i],
                    "attention_mask": tokens["attention_mask"][i],
                },
                "labels": y[i],
                "is_gold": is_gold[i],
                "n_id": i,
            }

    return NodeTexts()


def glem_lm_dir(lm_backbone: Any, directory: str) -> str:
    """Save lightgraph's LM (the Hugging Face model an ``EarlyExitEncoder`` wraps) with
    ``save_pretrained`` for GLEM's ``lm_to_use``; returns the directory."""
    os.makedirs(directory, exist_ok=True)
    lm_backbone.save_pretrained(directory)
    return directory


def build_glem(
    lm_dir: str, gnn: Any, num_classes: int, device: str = "cpu", pooler: str = "identity"
) -> Any:
    """PyG's ``GLEM`` on our saved LM and GNN: full fine-tuning in float32 (no LoRA).

    GLEM classifies with the LM's sequence-classification head: a pooler (``tanh(W h_cls
    + b)``) and a linear classifier. lightgraph's encoder has neither, so ``from_pretrained``
    initialises both. A pretrained BERT ships a trained pooler; a *random* one made GLEM's
    LM fine-tuning a lottery on this data: after GLEM's 3 pre-training epochs at lr 1e-3,
    26.5-96.5 % test accuracy over 2 seeds and the 2 settings, against 95.5-98.5 % over 3
    seeds with the pooler below (``benchmarks/results/glem_lm_pretrain.json``;
    docs/benchmarks.md, "UniTG against PyG's GLEM"). ``pooler="identity"`` (default) starts the pooler at ``W = I,
    b = 0`` -- the classifier then reads ``tanh(h_cls)``, close to what lightgraph's exit
    heads read; ``"random"`` keeps Hugging Face's initialisation.
    """
    import contextlib
    import io

    import torch
    from torch_geometric.llm.models import GLEM

    if pooler not in ("identity", "random"):
        raise ValueError(
            f"build_glem: expected `pooler` in ('identity', 'random') but got {pooler!r}."
        )
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        # from_pretrained reports the sequence-classification head (pooler, classifier)
        # it initialises: lightgraph's encoder has neither.
        warnings.simplefilter("ignore")
        model = GLEM(
            lm_to_use=lm_dir,
            gnn_to_use=gnn,
            out_channels=num_classes,
            lm_use_lora=False,
            lm_dtype=torch.float32,
            device=torch.device(device),
        )
    dense = getattr(getattr(model.lm.base_model, "pooler", None), "dense", None)
    if pooler == "identity" and isinstance(dense, torch.nn.Linear):
        with torch.no_grad():
            dense.weight.copy_(torch.eye(*dense.weight.shape))
            dense.bias.zero_()
    return model


def lm_weight_diff(ours: Any, glem_lm: Any) -> float:
    """Largest absolute difference between our LM's parameters and buffers and the same
    tensors of GLEM's sequence-classification model (``inf`` if a tensor is missing)."""
    theirs = glem_lm.base_model.state_dict()
    worst = 0.0
    for key, value in ours.state_dict().items():
        other = theirs.get(key)
        if other is None or other.shape != value.shape:
            return float("inf")
        if value.numel():
            gap = (value.double() - other.double().to(value.device)).abs().max()
            worst = max(worst, float(gap))
    return worst


def glem_run(
    datamodule: Any,
    lm_backbone: Any,
    make_gnn: Any,
    workdir: str,
    *,
    gnn_input: str = "lm",
    patience: int | None = None,
    lm_epochs: int = 3,
    gnn_epochs: int = 100,
    lm_lr: float = 3e-3,
    lm_schedule: str = "constant",
    lm_warmup: float = 0.1,
    gnn_lr: float = 5e-3,
    lm_batch_size: int = 32,
    pooling: str = "cls",
    num_em_iters: int = 1,
    pl_ratio: float = 0.5,
    seed: int = 0,
    device: str = "cpu",
    pooler: str = "identity",
) -> dict[str, Any]:
    """GLEM's EM loop as PyG's ``examples/llm/glem.py`` runs it with ``em_order="gnn"``:
    pre-train the LM on the gold (training) labels, then ``2 * num_em_iters`` phases,
    GNN first: each trains on the gold labels plus the other model's pseudo-labels of
    ``pl_ratio * |train|`` test nodes, through ``GLEM.train`` / ``GLEM.inference``.

    ``datamodule`` is a set-up :class:`~lightgraph.data.TextGraphDataModule`;
    ``lm_backbone`` lightgraph's Hugging Face encoder (saved and loaded by GLEM);
    ``make_gnn(in_channels)`` builds the GNN. ``gnn_input="raw"``: the GNN reads the
    graph's numeric features (GLEM as PyG ships it); ``"lm"``: the LM's pooled
    last-layer embeddings of every node, recomputed at the start of every GNN phase
    (timed as LM work). ``lm_schedule`` / ``lm_warmup``: the LM's learning rate over each
    LM phase's optimiser steps, as ``UniTGModule`` moves its own
    (:func:`~lightgraph.models.unitg_lm_jobs.lm_learning_rate`; the worker passes the
    recipe's). ``pooler``: the initial pooler of GLEM's LM head (:func:`build_glem`).
    ``patience``: the example's early stopping (from a
    phase's 5th epoch on, stop after more than ``patience`` epochs without a better
    validation accuracy); ``None`` runs every epoch. Every epoch from the 5th on is
    evaluated (as the example does), so the best validation accuracy is known either way.

    Returns the makespan (wall seconds from the data set-up to the final prediction),
    the test accuracies and the seconds of every phase.
    """
    import torch
    from torch.utils.data import DataLoader, Subset

    from lightgraph.models.unitg_lm_jobs import lm_learning_rate

    if gnn_input not in ("raw", "lm"):
        raise ValueError(f"glem_run: expected `gnn_input` in ('raw', 'lm') but got {gnn_input!r}.")
    start = time.perf_counter()
    datamodule.prepare_data()
    datamodule.setup("fit")
    graph = datamodule.graph()
    tokens = datamodule.tokens()
    n = int(graph.num_nodes)
    y = graph.y.view(-1)
    num_classes = int(y.max()) + 1
    gold = graph.train_mask.nonzero().view(-1)
    val_idx = graph.val_mask.nonzero().view(-1)
    test_idx = graph.test_mask.nonzero().view(-1)
    gen = torch.Generator().manual_seed(seed)
    picked = torch.randperm(test_idx.numel(), generator=gen)[: int(gold.numel() * pl_ratio)]
    train_idx = torch.cat([gold, test_idx[picked]])  # gold + pseudo-labelled nodes

    hidden = int(lm_backbone.config.hidden_size)
    torch.manual_seed(seed)
    gnn = make_gnn(hidden if gnn_input == "lm" else int(graph.x.size(1)))
    lm_dir = glem_lm_dir(lm_backbone, os.path.join(workdir, "glem_lm"))
    model = build_glem(lm_dir, gnn, num_classes, device, pooler)
    weight_diff = lm_weight_diff(lm_backbone, model.lm)
    if weight_diff != 0.0:
        raise RuntimeError(
            f"glem_run: GLEM's LM differs from ours after save_pretrained / from_pretrained "
            f"(largest difference {weight_diff})."
        )
    model.lm.to(device)
    model.gnn.to(device)

    is_gold = graph.train_mask.clone()
    texts = _node_texts(tokens, y, is_gold)

    def text_loader(idx: Any, shuffle: bool, batch: int) -> DataLoader:
        # A last batch of one node would be squeezed to a 0-d label by GLEM: drop it.
        drop = shuffle and idx.numel() % batch == 1
        return DataLoader(
            Subset(texts, idx), batch_size=batch, shuffle=shuffle, drop_last=drop,
            generator=torch.Generator().manual_seed(seed) if shuffle else None,
        )  # fmt: skip

    text_pretrain = text_loader(gold, True, lm_batch_size)
    text_train = text_loader(train_idx, True, lm_batch_size)
    text_all = text_loader(torch.arange(n), False, lm_batch_size * 4)
    data = graph.clone()
    data.y = y
    data.is_gold = is_gold
    graph_train = _FullGraphLoader(data, train_idx)
    graph_all = _FullGraphLoader(data, torch.arange(n))
    loaders = {"lm": (text_train, text_all), "gnn": (graph_train, graph_all)}

    def accuracy(out: Any, idx: Any) -> float:
        return float((out.argmax(-1).cpu()[idx] == y[idx]).float().mean())

    @torch.no_grad()
    def encode() -> float:
        """The GNN's input: every node's pooled last-layer LM embedding."""
        t0 = time.perf_counter()
        base = model.lm.base_model
        base.eval()
        chunks = []
        for lo in range(0, n, lm_batch_size * 4):
            ids = tokens["input_ids"][lo : lo + lm_batch_size * 4].to(device)
            mask = tokens["attention_mask"][lo : lo + lm_batch_size * 4].to(device)
            h = base(input_ids=ids, attention_mask=mask).last_hidden_state
            if pooling == "cls":
                chunks.append(h[:, 0])
            else:
                m = mask.to(h.dtype).unsqueeze(-1)
                chunks.append((h * m).sum(1) / m.sum(1).clamp_min(1.0))
        data.x = torch.cat(chunks).float().cpu()
        return time.perf_counter() - t0

    if gnn_input == "raw":
        data.x = data.x.float()

    def phase(kind: str, loader: Any, eval_loader: Any, epochs: int, pseudo: Any,
              augmented: bool) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        params = model.lm.parameters() if kind == "lm" else model.gnn.parameters()
        opt = torch.optim.Adam(params, lr=lm_lr if kind == "lm" else gnn_lr)
        if kind == "lm":
            # GLEM's train_lm takes one optimiser step per batch: set each step's rate.
            total, taken = epochs * len(loader), [0]

            def scheduled(optimizer: Any, *_: Any) -> None:
                rate = lm_learning_rate(taken[0], total, lm_lr, lm_schedule, lm_warmup)
                for group in optimizer.param_groups:
                    group["lr"] = rate
                taken[0] += 1

            opt.register_step_pre_hook(scheduled)
        rec: dict[str, Any] = {"phase": kind, "train_s": 0.0, "eval_s": 0.0}
        if kind == "gnn" and gnn_input == "lm":
            # The GNN reads the current LM's embeddings; the GNN's final prediction keeps
            # the ones it was trained on (an LM phase after it does not re-encode).
            rec["encode_s"] = encode()
        best_val, bad, ran = 0.0, 0, 0
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            model.train(kind, loader, opt, pseudo, epoch, augmented, False)
            rec["train_s"] += time.perf_counter() - t0
            ran = epoch
            if epoch >= 5 or epoch == epochs:
                t0 = time.perf_counter()
                val = accuracy(model.inference(kind, eval_loader), val_idx)
                rec["eval_s"] += time.perf_counter() - t0
                if val <= best_val:
                    bad += 1
                    if patience is not None and bad > patience:
                        break
                else:
                    best_val = val
        t0 = time.perf_counter()
        preds = model.inference(kind, eval_loader).cpu()
        rec["infer_s"] = time.perf_counter() - t0
        rec.update(
            epochs=ran,
            best_val_acc=best_val,
            val_acc=accuracy(preds, val_idx),
            test_acc=accuracy(preds, test_idx),
        )
        rec["s"] = rec["train_s"] + rec["eval_s"] + rec["infer_s"] + rec.get("encode_s", 0.0)
        return preds, rec

    setup_s = time.perf_counter() - start
    preds, pre = phase("lm", text_pretrain, text_all, lm_epochs, None, False)
    pre["phase"] = "lm_pretrain"
    phases = [pre]
    lm_test_acc = pre["test_acc"]  # the example keeps the pre-trained LM's test accuracy
    best = {"gnn": 0.0, "lm": 0.0}
    em_phase = "gnn"
    for _ in range(2 * num_em_iters):
        train_loader, eval_loader = loaders[em_phase]
        epochs = gnn_epochs if em_phase == "gnn" else lm_epochs
        preds, rec = phase(em_phase, train_loader, eval_loader, epochs, preds.argmax(-1), True)
        phases.append(rec)
        best[em_phase] = max(best[em_phase], rec["best_val_acc"])
        em_phase = "lm" if em_phase == "gnn" else "gnn"
    # The final model: the one with the better best validation accuracy (the example then
    # runs the last phase's loader, a text loader for a GNN pick; the right one here).
    chosen = "gnn" if best["gnn"] > best["lm"] else "lm"
    t0 = time.perf_counter()
    final = model.inference(chosen, loaders[chosen][1]).cpu()
    final_s = time.perf_counter() - t0
    makespan = time.perf_counter() - start
    chosen_test = accuracy(final, test_idx)
    gnn_phases = [p for p in phases if p["phase"] == "gnn"]
    return {
        "makespan_s": makespan,
        "gnn_input": gnn_input,
        "patience": patience,
        "lm_weights_max_abs_diff": weight_diff,
        "gnn_test_acc": gnn_phases[-1]["test_acc"] if gnn_phases else None,
        "chosen_model": chosen,
        "chosen_test_acc": chosen_test,
        # the example's "Best test acc": the max over the pre-trained LM and the chosen model
        "glem_final_test_acc": max(lm_test_acc, chosen_test),
        "lm_pretrain_test_acc": lm_test_acc,
        "setup_s": setup_s,
        "final_inference_s": final_s,
        # LM work: its stages and its encodings of the GNN's input
        "lm_time_total": sum(
            p["s"] if p["phase"] != "gnn" else p.get("encode_s", 0.0) for p in phases
        ),  # fmt: skip
        "gnn_time_total": sum(p["s"] - p.get("encode_s", 0.0) for p in gnn_phases),
        "phases": phases,
        "num_nodes": n,
        "pseudo_labelled_nodes": int(picked.numel()),
        "gnn": repr(gnn),
    }


def worker_glem(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """One GLEM run on the recipe's data, LM and GNN (``recipes/lm_then_gnn.yaml``: the
    full-depth LM; its weights are UniTG's initial ones, from the same seed)."""
    import torch

    from lightgraph.cli import build_cli

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    recipe = "lm_then_gnn.yaml"
    overrides = [
        f"--seed_everything={args.seed}",
        f"--model.init_args.seed={args.seed}",
        *_setting_overrides(args, args.setting),
    ]
    cli = build_cli(
        args=[
            "--config", os.path.join(ROOT, "recipes", recipe), *overrides,
            f"--data.init_args.cache_dir={os.path.join(args.cache_root, 'text_cache')}",
            f"--trainer.logger.init_args.save_dir={args.workdir}",
            "--trainer.enable_checkpointing=false",
        ],
        run=False,
    )  # fmt: skip
    module = cli.model
    spec = cli.config.model.init_args.model
    cls = type(module.model)
    init = {
        **{k: v for k, v in spec.init_args.as_dict().items() if k != "in_channels"},
        "out_channels": int(module.model.out_channels),
    }

    def make_gnn(in_channels: int) -> torch.nn.Module:
        return cls(in_channels=in_channels, **init)

    gnn_input, patience = GLEM_RUNS[name]
    if patience is not None:
        patience = args.glem_patience
    workdir = os.path.join(args.workdir, f"{name}_seed{args.seed}")
    result = glem_run(
        cli.datamodule,
        module.lm.backbone,
        make_gnn,
        workdir,
        gnn_input=gnn_input,
        patience=patience,
        lm_epochs=args.glem_lm_epochs,
        gnn_epochs=args.epochs,
        lm_lr=float(module.hparams.lm_lr if args.glem_lm_lr is None else args.glem_lm_lr),
        lm_schedule=args.glem_lm_schedule or module.lm_schedule,
        lm_warmup=module.lm_warmup,
        gnn_lr=float(module.hparams.lr),
        lm_batch_size=int(module.lm_batch_size),
        pooling=module.lm.pooling,
        num_em_iters=args.glem_em_iters,
        seed=args.seed,
        device=args.glem_device,
        pooler=args.glem_pooler,
    )
    shutil.rmtree(workdir, ignore_errors=True)
    return {"name": name, "processes": 1, "recipe": recipe, "overrides": overrides, **result}


def _glem_order(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(kind, name) of one seed and setting, GLEM runs interleaved with the others so a
    drift of the machine's load hits both systems."""
    others = [("e2e", r) for r in args.glem_e2e_runs]
    glem = [("glem", r) for r in args.glem_runs]
    out = []
    for i in range(max(len(others), len(glem))):
        out += others[i : i + 1] + glem[i : i + 1]
    return out


def part_glem(args: argparse.Namespace) -> dict[str, Any]:
    """``--baseline glem``: PyG's GLEM and lightgraph's UniTG / sequential runs on each
    setting, one table per setting with GLEM / UniTG ratios."""
    workdir = _workdir(args, "glem")
    rows = []
    for seed in args.seeds:
        for setting in args.settings:
            sub = os.path.join(workdir, setting)
            os.makedirs(sub, exist_ok=True)
            common = [*_common(args, sub), *_glem_flags(args, setting)]
            for kind, name in _glem_order(args):
                procs = E2E_RUNS[name][2] if kind == "e2e" else 1
                threads = 1 if procs > 1 else args.threads
                row = _run_worker(
                    ["--worker", kind, name, "--seed", str(seed), *common],
                    _env(threads),
                    os.path.join(sub, f"{kind}_{name}_seed{seed}.log"),
                    timeout=args.timeout,
                )
                row.setdefault("name", name)
                row.update(seed=seed, setting=setting, kind=kind, threads_per_process=threads)
                rows.append(row)
                if "error" in row:
                    print(f"{setting} {name} ERROR {row['error'][-800:]}", flush=True)
                else:
                    print(
                        f"{setting:<5} {name:<16} makespan {row['makespan_s']:7.1f} s  test "
                        f"{_glem_test(row):.4f}",
                        flush=True,
                    )
    tables = {}
    for seed in args.seeds:
        for setting in args.settings:
            mine = [r for r in rows if r["seed"] == seed and r["setting"] == setting]
            tables[f"{setting}_seed{seed}"] = _glem_table(mine, setting, seed, args)
    return {
        "seeds": args.seeds,
        "settings": {s: _setting_overrides(args, s) for s in args.settings},
        "glem_lm_epochs": args.glem_lm_epochs,
        "glem_em_iters": args.glem_em_iters,
        "glem_patience": args.glem_patience,
        "glem_device": args.glem_device,
        "rows": rows,
        "tables": tables,
    }


def _glem_flags(args: argparse.Namespace, setting: str) -> list[str]:
    flags = [
        "--setting", setting,
        "--glem-lm-epochs", str(args.glem_lm_epochs),
        "--glem-em-iters", str(args.glem_em_iters),
        "--glem-patience", str(args.glem_patience),
        "--glem-device", args.glem_device,
        "--glem-pooler", args.glem_pooler,
        "--deep-gnn", args.deep_gnn,
        "--deep-layers", str(args.deep_layers),
        "--deep-hidden", str(args.deep_hidden),
        "--deep-heads", str(args.deep_heads),
    ]  # fmt: skip
    if args.glem_lm_lr is not None:
        flags += ["--glem-lm-lr", str(args.glem_lm_lr)]
    if args.glem_lm_schedule is not None:
        flags += ["--glem-lm-schedule", args.glem_lm_schedule]
    if args.nodes is not None:
        flags += ["--nodes", str(args.nodes)]
    if args.recipe_lm_epochs is not None:
        flags += ["--recipe-lm-epochs", str(args.recipe_lm_epochs)]
    if args.accelerator:
        flags += ["--accelerator", args.accelerator]
    return flags


def _glem_test(row: dict[str, Any]) -> float:
    """The row's test accuracy: GNN's after the last epoch (UniTG, sequential) or the
    model GLEM picks by validation accuracy."""
    if row.get("kind") == "glem":
        return float(row["chosen_test_acc"])
    return float(row.get("final_test_acc") or 0.0)


def _breakdown(row: dict[str, Any]) -> dict[str, float]:
    """Where a row's makespan goes, in seconds: ``lm`` (LM training, its steps in pipeline
    bubbles included), ``gnn`` (GNN training), ``sync`` (moving one model's outputs to the
    other: UniTG's ModalitySync syncs and the store refresh by the finished LM, the
    sequential baseline's encoding; GLEM's encodings of the GNN input and the inference
    passes whose predictions the other model trains on), ``bubbles`` (the LM work that ran
    inside pipeline bubbles, part of ``lm``) and ``other`` (the rest: set-up, process
    start, validation, final inference)."""
    if row.get("kind") == "glem":
        phases = row["phases"]
        lm = sum(p["train_s"] for p in phases if p["phase"] != "gnn")
        gnn = sum(p["train_s"] for p in phases if p["phase"] == "gnn")
        sync = sum(p.get("infer_s", 0.0) + p.get("encode_s", 0.0) for p in phases)
        bubbles = 0.0
    else:
        refresh = float(row.get("refresh_s", 0.0))
        lm = float(row.get("lm_time_total") or 0.0) - refresh
        gnn = float(row.get("gnn_time_total") or 0.0)
        sync = float(row.get("sync_s", 0.0)) + refresh
        bubbles = float(row.get("lm_bubble_time_total") or 0.0)
    other = float(row["makespan_s"]) - lm - gnn - sync
    return {"lm": lm, "gnn": gnn, "sync": sync, "bubbles": bubbles, "other": other}


def _glem_table(
    rows: list[dict[str, Any]], setting: str, seed: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Print one setting's table; returns its ratios."""
    ok = {r["name"]: r for r in rows if "error" not in r}
    # The reference: the fastest UniTG row of the setting (any schedule).
    candidates = [r for n, r in ok.items() if n.startswith("unitg")]
    unitg = min(candidates, key=lambda r: r["makespan_s"]) if candidates else None
    print(
        f"\n{setting} setting, seed {seed} (reference UniTG row: "
        f"{unitg['name'] if unitg else 'none'}; "
        + ("the GNN phase's share of lm_then_gnn: "
           f"{ok['lm_then_gnn']['gnn_time_total'] / max(ok['lm_then_gnn']['makespan_s'], 1e-9):.0%}"
           if "lm_then_gnn" in ok and ok["lm_then_gnn"].get("gnn_time_total") else "")
        + ")"
    )  # fmt: skip
    head = (
        f"| {'run':<16} | P | makespan s | test acc % | GNN test % | GLEM final % | LM s | "
        f"GNN s | sync s | LM in bubbles s | other s | phases (epochs, s) | "
        f"GLEM / UniTG makespan | acc - UniTG (points) |"
    )
    print(head)
    print("|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|")
    out: dict[str, Any] = {}
    for r in rows:
        if "error" in r:
            print(f"| {r['name']:<16} | ERROR: {r['error'][-200:]!r} |")
            continue
        glem = r.get("kind") == "glem"
        test = _glem_test(r)
        ratio = r["makespan_s"] / unitg["makespan_s"] if unitg else None
        delta = 100 * (test - _glem_test(unitg)) if unitg else None
        parts = _breakdown(r)
        out[r["name"]] = {
            "makespan_over_unitg": ratio,
            "test_acc_minus_unitg_points": delta,
            "breakdown_s": parts,
        }
        phases = (
            ", ".join(f"{p['phase']} {p['epochs']} ep {p['s']:.1f}" for p in r["phases"])
            if glem
            else "—"
        )
        print(
            f"| {r['name']:<16} | {r['processes']} | {r['makespan_s']:.1f} | {100 * test:.1f} | "
            f"{_fmt(100 * r['gnn_test_acc'] if glem else None, '.1f')} | "
            f"{_fmt(100 * r['glem_final_test_acc'] if glem else None, '.1f')} | "
            f"{parts['lm']:.1f} | {parts['gnn']:.1f} | {parts['sync']:.1f} | "
            f"{parts['bubbles']:.1f} | {parts['other']:.1f} | "
            f"{phases} | {_fmt(ratio, '.2f')} | {_fmt(delta, '+.1f')} |",
            flush=True,
        )
    return out


def _save(part: str, result: dict[str, Any], args: argparse.Namespace) -> None:
    import torch

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "threads_one_process": args.threads,
        "load_average_after": os.getloadavg(),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
    }
    result = {"meta": meta, **result}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"unitg_{part}.json"), "w") as f:
        json.dump(result, f, indent=1)
    merged_path = os.path.join(args.out, "unitg.json")
    merged: dict[str, Any] = {}
    if os.path.exists(merged_path):
        with open(merged_path) as f:
            merged = json.load(f)
    merged[part] = result
    with open(merged_path, "w") as f:
        json.dump(merged, f, indent=1)


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset")
    parser.add_argument("--epochs", type=int, default=100, help="GNN epochs (e2e, lazy)")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="e2e / lazy: seed_everything and the LM shuffle seed (the data stays the same)",
    )
    parser.add_argument(
        "--tag", default="", help="suffix of the part's JSON key and file (unitg_<part><tag>)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads, one-process runs")
    parser.add_argument("--e2e-runs", nargs="+", default=list(E2E_RUNS), choices=list(E2E_RUNS))
    parser.add_argument("--lazy-runs", nargs="+", default=list(LAZY_RUNS), choices=list(LAZY_RUNS))
    parser.add_argument("--m-values", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--m-reorders", nargs="+", default=["metis", "random"])
    parser.add_argument("--m-devices", type=int, default=1)
    parser.add_argument("--m-nodes", type=int, default=5000)
    parser.add_argument("--m-avg-degree", type=float, default=10.0)
    parser.add_argument("--m-homophily", type=float, default=0.8)
    parser.add_argument("--m-feature-noise", type=float, default=2.0)
    parser.add_argument("--m-epochs", type=int, default=100)
    parser.add_argument(
        "--m-communities",
        type=int,
        nargs="+",
        default=[8, 32],
        help="SyntheticGraph num_communities, one graph each (8: one per class)",
    )
    parser.add_argument("--reorder-nodes", type=int, default=200_000)
    parser.add_argument("--reorder-avg-degree", type=float, default=10.0)
    parser.add_argument("--reorder-layers", type=int, default=3)
    parser.add_argument("--reorder-hidden", type=int, default=64)
    parser.add_argument("--reorder-repeats", type=int, default=3)
    parser.add_argument("--reorder-models", nargs="+", default=["RevGCN", "RevGAT", "ResGEN"])
    parser.add_argument("--mem-budget-mib", type=float, default=128.0)
    parser.add_argument("--mem-hiddens", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--mem-nodes", type=int, default=500)
    parser.add_argument("--mem-avg-degree", type=float, default=5.0)
    parser.add_argument("--mem-start-layers", type=int, default=16)
    parser.add_argument("--mem-max-layers", type=int, default=16384)
    parser.add_argument("--mem-resolution", type=int, default=8)
    parser.add_argument(
        "--mem-mmap-threshold",
        default="131072",
        help="MALLOC_MMAP_THRESHOLD_ of the memory probes ('': glibc's adaptive default, "
        "whose heap grew to many GiB of RSS for 2,000-layer models)",
    )
    parser.add_argument(
        "--baseline",
        choices=["glem"],
        help="glem: PyG's GLEM against UniTG / lm_then_gnn on the same data, LM and GNN "
        "(the `glem` part alone)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="tiny: 200 nodes, 2 GNN epochs, 1 LM epoch (GLEM and recipes), small setting, "
        "GLEM with early stopping only",
    )
    parser.add_argument(
        "--settings", nargs="+", default=["small", "deep"], choices=["small", "deep"],
        help="glem: the recipes' GNN (small) and a deep one (--deep-*)",
    )  # fmt: skip
    parser.add_argument("--glem-runs", nargs="+", default=list(GLEM_RUNS), choices=list(GLEM_RUNS))
    parser.add_argument(
        "--glem-e2e-runs", nargs="+", default=list(GLEM_E2E_RUNS), choices=list(E2E_RUNS)
    )
    parser.add_argument(
        "--glem-lm-epochs", type=int, default=3,
        help="GLEM's LM epochs, pre-training and each LM phase (lm_then_gnn.yaml: 3)",
    )  # fmt: skip
    parser.add_argument("--glem-em-iters", type=int, default=1, help="GLEM EM iterations")
    parser.add_argument(
        "--es-patience", type=int, default=ES_PATIENCE,
        help="patience of the *_es rows of lightgraph (EarlyStopping / CoTrainingEarlyStopping)",
    )  # fmt: skip
    parser.add_argument(
        "--glem-lm-lr", type=float, default=None, help="GLEM's LM lr (default: the recipe's)"
    )
    parser.add_argument(
        "--glem-patience", type=int, default=3, help="glem_es: the example's patience (3)"
    )
    parser.add_argument("--glem-device", default="cpu", help="GLEM's device (cuda on a GPU)")
    parser.add_argument(
        "--glem-lm-schedule", default=None, choices=["constant", "linear"],
        help="GLEM's LM learning-rate schedule (default: the recipe's lm_schedule)",
    )  # fmt: skip
    parser.add_argument(
        "--glem-pooler", default="identity", choices=["identity", "random"],
        help="initial pooler of GLEM's LM head (lightgraph's LM has none; see build_glem)",
    )  # fmt: skip
    parser.add_argument("--deep-gnn", default="RevGCN", choices=["RevGCN", "RevGAT"])
    parser.add_argument("--deep-layers", type=int, default=32)
    parser.add_argument("--deep-hidden", type=int, default=64)
    parser.add_argument("--deep-heads", type=int, default=2, help="RevGAT heads")
    parser.add_argument(
        "--nodes", type=int, default=None, help="graph nodes (glem; default: the recipe's)"
    )
    parser.add_argument(
        "--recipe-lm-epochs", type=int, default=None,
        help="glem: the recipes' lm_epochs for the UniTG / lm_then_gnn rows (default: theirs)",
    )  # fmt: skip
    parser.add_argument(
        "--accelerator", default=None,
        help="one-process recipe runs' --trainer.accelerator (e.g. gpu; default the recipe's)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per worker")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--scratch", default=None, help="work directory (default: a temp dir)")
    # worker-only
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--mem-mode", help=argparse.SUPPRESS)
    parser.add_argument("--mem-hidden", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mem-layers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mem-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--setting", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dry_run:
        args.nodes, args.epochs, args.glem_lm_epochs, args.recipe_lm_epochs = 200, 2, 1, 1
        args.settings, args.glem_runs, args.seeds = ["small"], ["glem_es"], [0]

    if args.worker:
        args.cache_root = args.scratch
        kind = args.worker[0]
        if kind in ("e2e", "lazy"):
            result = worker_e2e(args, kind, args.worker[1])
        elif kind == "m":
            result = worker_m(args, int(args.worker[1]), args.worker[2], int(args.worker[3]))
        elif kind == "reorder":
            result = worker_reorder(args)
        elif kind == "memory":
            result = worker_memory(args)
        elif kind == "glem":
            result = worker_glem(args, args.worker[1])
        else:
            raise SystemExit(f"unknown worker {kind}")
        print("RESULT " + json.dumps(result), flush=True)
        return

    parts = ["glem"] if args.baseline == "glem" else [p for p in args.parts.split(",") if p]
    for p in parts:
        if p not in ALL_PARTS:
            parser.error(f"--parts: unknown part {p!r} (choose from {', '.join(ALL_PARTS)})")
    own_scratch = args.scratch is None
    if own_scratch:
        args.scratch = tempfile.mkdtemp(prefix="bench_unitg_")
    print(
        f"bench_unitg: parts {parts}, {os.cpu_count()} CPUs, one-process runs on "
        f"{args.threads} threads, P = 2 runs on 1 thread per process; load average "
        f"{os.getloadavg()[0]:.2f}; scratch {args.scratch}",
        flush=True,
    )
    total = time.perf_counter()
    for part in parts:
        start = time.perf_counter()
        print(f"\n== {part} ==", flush=True)
        if part in ("e2e", "lazy"):
            result = part_e2e(args, part)
        elif part == "m":
            result = part_m(args)
        elif part == "reorder":
            result = part_reorder(args)
        elif part == "glem":
            result = part_glem(args)
        else:
            result = part_memory(args)
        result["part_wall_s"] = time.perf_counter() - start
        _save(part + args.tag, result, args)
        print(f"({part}: {result['part_wall_s']:.0f} s)", flush=True)
    print(f"\nwrote {args.out}/unitg.json; total {time.perf_counter() - total:.0f} s")
    if own_scratch:
        shutil.rmtree(args.scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
