"""JOESTAR end to end: NS vs JOESTAR-I (LBS) vs JOESTAR-II (PBS + history + AoT), eager
and compiled, on one graph with ~1% training nodes (thesis §5.4, Tables 5.5-5.7).

Every run trains the same 3-layer GraphSAGE (hidden 128, fanouts 15/10/5, batch 1000,
lr 3e-3, dropout 0.5 -- ``recipes/ns.yaml``, ``recipes/joestar.yaml``,
``recipes/joestar_pbs.yaml``) for ``--epochs`` epochs, in its own process, and reports:

* ``epoch_s``: training time per epoch (sampling, transfer and model; no evaluation), the
  mean of the epochs after the first (the first holds compilation and warm-up);
* ``test_acc@best_val``: test accuracy at the epoch of best validation accuracy, both
  computed exactly (layer-wise inference over the whole graph) after every epoch;
* ``h2d_MB``: bytes handed to the compute device per epoch (``io/h2d_bytes``);
* ``working_set``: nodes brought in per training target (``io/normalized_working_set``);
* compile warm-up seconds, recompiles and eager fallbacks (compiled runs).

A separate loader-only pass (no model) counts the bytes one epoch moves for NS, LBS,
PBS and PBS+AoT, the thesis's Fig. 5.13 comparison. NS with PyG's own sampler
(``torch_geometric.loader.NeighborLoader``) runs only where pyg-lib or torch-sparse is
installed.

**DGL baseline** (optional: only where ``import dgl`` works; DGL is no dependency of
lightgraph, see docs/benchmarks.md for its installation). Inside every run, after each
lightgraph epoch, one epoch of a GraphSAGE trained as DGL's own node-classification example
trains one (``dgl.dataloading.NeighborSampler``, ``dgl.dataloading.DataLoader``,
``dgl.nn.SAGEConv(..., "mean")``, Adam) on the same graph, training nodes, fanouts, batch
size, learning rate and dropout, starting from the same initial weights (copied from the
lightgraph model and checked to give the same logits), in the same process with the same
threads: the epochs interleave, so both see the same machine. Its seconds per epoch and
test accuracy at its best validation epoch (exact full-graph inference, as for lightgraph)
are reported next to the run's. DGL lists fanouts input layer first (its last fanout is
the one of the seeds), lightgraph and PyG seeds first: ``[15, 10, 5]`` here is
``NeighborSampler([5, 10, 15])`` there.

Run (about 40 min on the two shared CPU cores of the development machine, more with DGL)::

    python benchmarks/bench_joestar.py
    python benchmarks/bench_joestar.py --num-nodes 100000 --train-ratio 0.1 --runs ns
    python benchmarks/bench_joestar.py --dry-run      # tiny smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: name -> (recipe, compiled, extra CLI overrides)
RUNS: dict[str, tuple[str, bool, list[str]]] = {
    "ns": ("ns.yaml", False, []),
    "ns_pyg": ("ns.yaml", False, []),
    "joestar_i": ("joestar.yaml", False, []),
    "joestar_i_compiled": ("joestar.yaml", True, []),
    "joestar_ii": ("joestar_pbs.yaml", False, []),
    "joestar_ii_compiled": ("joestar_pbs.yaml", True, []),
}
LABELS = {
    "ns": "NS (lightgraph sampler)",
    "ns_pyg": "NS (PyG NeighborLoader)",
    "joestar_i": "JOESTAR-I (LBS), eager",
    "joestar_i_compiled": "JOESTAR-I (LBS), compiled",
    "joestar_ii": "JOESTAR-II (PBS+hist+AoT), eager",
    "joestar_ii_compiled": "JOESTAR-II (PBS+hist+AoT), compiled",
}


def overrides(args: argparse.Namespace, cache: str) -> list[str]:
    out = [
        f"--data.init_args.dataset.init_args.num_nodes={args.num_nodes}",
        f"--data.init_args.dataset.init_args.avg_degree={args.avg_degree}",
        f"--data.init_args.dataset.init_args.train_ratio={args.train_ratio}",
        f"--data.init_args.cache_dir={cache}",
    ]
    return out


def recipe_args(name: str, args: argparse.Namespace, cache: str) -> list[str]:
    recipe, compiled, extra = RUNS[name]
    out = ["--config", os.path.join(ROOT, "recipes", recipe)]
    if compiled:
        out += ["--config", os.path.join(ROOT, "callbacks", "graph_compile.yaml")]
    out += overrides(args, cache) + extra + [f"--seed_everything={getattr(args, 'seed', 0)}"]
    if recipe == "joestar.yaml":
        out.append(f"--data.init_args.first_stage.init_args.ratio={args.lbs_ratio}")
    if recipe == "joestar_pbs.yaml":
        out += [
            f"--data.init_args.first_stage.init_args.num_parts={args.num_parts}",
            f"--data.init_args.first_stage.init_args.parts_per_batch={args.parts_per_batch}",
        ]
    return out


# ----------------------------------------------------------------------- DGL baseline
def import_dgl() -> Any:
    """``dgl``, or ``None`` where it does not import.

    DGL 2.1's ``dgl.graphbolt`` loads a library built for one torch version and fails on
    others; nothing here uses it, so an empty module stands in for it before the import.
    """
    import types

    os.environ.setdefault("DGLBACKEND", "pytorch")
    sys.modules.setdefault("dgl.graphbolt", types.ModuleType("dgl.graphbolt"))
    try:
        import dgl
        import dgl.dataloading  # noqa: F401
        import dgl.nn  # noqa: F401
    except Exception:  # a missing or broken DGL: the arm is skipped
        return None
    return dgl


class DGLSage:
    """GraphSAGE-mean trained the way DGL's node-classification example trains it.

    Layers ``dgl.nn.SAGEConv(.., "mean")`` with ReLU and dropout between them, a
    ``NeighborSampler``/``DataLoader`` over the training nodes, cross-entropy and Adam.

    Args:
        dgl: the imported ``dgl`` module.
        data: the graph (``x``, ``y``, ``edge_index``, ``train_mask``/``val_mask``/``test_mask``).
        pyg_model: the lightgraph run's PyG ``GraphSAGE``: its weights are copied.
        fanouts: neighbours per hop, seeds first (lightgraph's order).
        batch_size, lr, weight_decay, seed: as the lightgraph run's.
    """

    def __init__(
        self,
        dgl: Any,
        data: Any,
        pyg_model: Any,
        fanouts: list[int],
        batch_size: int,
        lr: float,
        weight_decay: float,
        seed: int,
    ) -> None:
        import torch
        from torch_geometric.nn import SAGEConv as PygSAGEConv

        self.dgl, self.data = dgl, data
        convs = [m for m in pyg_model.modules() if isinstance(m, PygSAGEConv)]
        if not convs or any(c.aggr != "mean" or c.project or c.normalize for c in convs):
            raise ValueError("DGLSage: expected a PyG GraphSAGE with mean aggregation")
        self.layers = torch.nn.ModuleList(
            dgl.nn.SAGEConv(c.in_channels, c.out_channels, "mean") for c in convs
        )
        self.copy_weights(convs)
        dropout = next((m.p for m in pyg_model.modules() if isinstance(m, torch.nn.Dropout)), 0.0)
        self.dropout = torch.nn.Dropout(dropout)
        src, dst = data.edge_index
        self.graph = dgl.graph((src, dst), num_nodes=data.num_nodes)
        self.split = {s: data[f"{s}_mask"].nonzero().view(-1) for s in ("train", "val", "test")}
        dgl.seed(seed)
        torch.manual_seed(seed)
        # DGL's fanouts are listed input layer first: the last one expands the seeds.
        self.sampler = dgl.dataloading.NeighborSampler(list(reversed(fanouts)))
        self.loader = dgl.dataloading.DataLoader(
            self.graph,
            self.split["train"],
            self.sampler,
            batch_size=batch_size,
            shuffle=True,
            drop_last=False,
            num_workers=0,
        )
        self.optimizer = torch.optim.Adam(
            self.layers.parameters(), lr=lr, weight_decay=weight_decay
        )
        self.epoch_s: list[float] = []
        self.val: list[float] = []
        self.test: list[float] = []

    def copy_weights(self, convs: list[Any]) -> None:
        """PyG's ``lin_l`` (neighbour mean, with the bias) and ``lin_r`` (root) are DGL's
        ``fc_neigh`` and ``fc_self`` (DGL 2.1 keeps the bias in ``fc_self``)."""
        import torch

        with torch.no_grad():
            for conv, layer in zip(convs, self.layers, strict=True):
                layer.fc_neigh.weight.copy_(conv.lin_l.weight)
                layer.fc_self.weight.copy_(conv.lin_r.weight)
                bias = layer.fc_self.bias if layer.fc_self.bias is not None else layer.bias
                bias.copy_(conv.lin_l.bias)

    def forward(self, blocks: list[Any], x: Any) -> Any:
        import torch.nn.functional as F

        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, h)
            if i + 1 < len(self.layers):
                h = self.dropout(F.relu(h))
        return h

    def full_graph_logits(self, graph: Any = None, x: Any = None) -> Any:
        """Exact inference over the whole graph, layer by layer (no sampling)."""
        import torch

        graph = self.graph if graph is None else graph
        x = self.data.x if x is None else x
        self.layers.eval()
        self.dropout.eval()
        with torch.no_grad():
            logits = self.forward([graph] * len(self.layers), x)
        self.layers.train()
        self.dropout.train()
        return logits

    def check_same_logits(self, pyg_model: Any, num_nodes: int = 2000) -> float:
        """The largest logit difference from the PyG model on one identical input: the
        subgraph of the first ``num_nodes`` nodes, every neighbour, in eval mode."""
        import torch
        from torch_geometric.utils import subgraph

        nodes = torch.arange(min(num_nodes, self.data.num_nodes))
        edge_index, _ = subgraph(nodes, self.data.edge_index, num_nodes=self.data.num_nodes)
        sub = self.dgl.graph((edge_index[0], edge_index[1]), num_nodes=nodes.numel())
        ours = self.full_graph_logits(sub, self.data.x[nodes])
        was = pyg_model.training
        pyg_model.eval()
        with torch.no_grad():
            theirs = pyg_model(self.data.x[nodes], edge_index)
        pyg_model.train(was)
        return float((ours - theirs).abs().max())

    def train_epoch(self) -> None:
        import torch
        import torch.nn.functional as F
        from torchmetrics.functional import accuracy

        x, y = self.data.x, self.data.y
        tic = time.perf_counter()
        with torch.enable_grad():
            for input_nodes, output_nodes, blocks in self.loader:
                loss = F.cross_entropy(self.forward(blocks, x[input_nodes]), y[output_nodes])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        self.epoch_s.append(time.perf_counter() - tic)
        logits = self.full_graph_logits()
        classes = int(y.max()) + 1
        for split, out in (("val", self.val), ("test", self.test)):
            nodes = self.split[split]
            acc = accuracy(logits[nodes], y[nodes], task="multiclass", num_classes=classes)
            out.append(float(acc))

    def result(self) -> dict[str, Any]:
        best = max(range(len(self.val)), key=self.val.__getitem__)
        later = self.epoch_s[1:] or self.epoch_s
        return {
            "epoch_s": statistics.mean(later),
            "epoch_s_all": self.epoch_s,
            "val_acc": self.val,
            "test_acc": self.test,
            "best_epoch": best,
            "test_acc_at_best_val": self.test[best],
            "dgl_version": self.dgl.__version__,
            "dgl_fanouts": list(self.sampler.fanouts),
        }


# ---------------------------------------------------------------------- one run (child)
def run_one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    import lightning.pytorch as pl
    import torch
    from torchmetrics.functional import accuracy

    from lightgraph.callbacks import IOMonitor
    from lightgraph.cli import build_cli

    torch.set_num_threads(args.threads)
    dgl = import_dgl() if args.dgl else None

    if name == "ns_pyg":
        import torch_geometric.typing as pyg_typing

        if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
            return {"skipped": "neither pyg-lib nor torch-sparse is installed"}

    cli = build_cli(
        recipe_args(name, args, args.cache)
        + [
            f"--trainer.max_epochs={args.epochs}",
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.limit_val_batches=0",
            f"--trainer.default_root_dir={args.workdir}",
        ],
        run=False,
    )
    trainer, module, dm = cli.trainer, cli.model, cli.datamodule

    class Measure(pl.Callback):
        """Training epoch time, then exact val/test accuracy over the whole graph."""

        def __init__(self) -> None:
            self.epoch_s: list[float] = []
            self.val: list[float] = []
            self.test: list[float] = []

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            self._tic = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            self.epoch_s.append(time.perf_counter() - self._tic)
            graph = dm.full_graph()
            logits = pl_module._full_graph_logits(graph, refresh=True)  # as validation does
            for split, out in (("val", self.val), ("test", self.test)):
                nodes = graph.nodes(split)
                acc = accuracy(
                    logits[nodes],
                    graph.y[nodes],
                    task="multiclass",
                    num_classes=dm.num_classes,
                )
                out.append(float(acc))

    class Interleave(pl.Callback):
        """One DGL epoch after every lightgraph epoch (after its measurement)."""

        def __init__(self) -> None:
            self.baseline: DGLSage | None = None
            self.max_logit_diff = float("nan")

        def on_train_start(self, trainer, pl_module) -> None:
            if self.baseline is None:  # the lightgraph model's initial weights, untrained
                self.baseline = DGLSage(
                    dgl,
                    dm.dataset.load(),
                    pl_module.model,
                    list(dm.fanouts),
                    int(dm.batch_size),
                    float(pl_module.hparams.lr),
                    float(pl_module.hparams.weight_decay),
                    seed=args.seed,
                )
                self.max_logit_diff = self.baseline.check_same_logits(pl_module.model)
                if not self.max_logit_diff < 1e-4:
                    raise RuntimeError(
                        f"DGL baseline: its logits differ from lightgraph's by "
                        f"{self.max_logit_diff} on the same input and weights"
                    )

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            assert self.baseline is not None
            self.baseline.train_epoch()

    measure = Measure()
    trainer.callbacks.insert(0, measure)
    interleave = Interleave() if dgl is not None else None
    if interleave is not None:
        trainer.callbacks.insert(1, interleave)
    if name == "ns_pyg":
        from torch_geometric.loader import NeighborLoader

        dm.prepare_data()
        dm.setup("fit")
        data = dm.dataset.load()
        loader = NeighborLoader(
            data,
            num_neighbors=list(dm.fanouts),
            batch_size=dm.batch_size,
            input_nodes=data.train_mask,
            shuffle=True,
        )
        trainer.fit(module, train_dataloaders=loader)
    else:
        trainer.fit(module, dm)
    io = next((c for c in trainer.callbacks if isinstance(c, IOMonitor)), None)
    compile_cb = next((c for c in trainer.callbacks if type(c).__name__ == "GraphCompile"), None)
    best = max(range(len(measure.val)), key=measure.val.__getitem__)
    later = measure.epoch_s[1:] or measure.epoch_s
    result: dict[str, Any] = {
        "epoch_s": statistics.mean(later),
        "epoch_s_all": measure.epoch_s,
        "val_acc": measure.val,
        "test_acc": measure.test,
        "best_epoch": best,
        "test_acc_at_best_val": measure.test[best],
        "torch_threads": torch.get_num_threads(),
    }
    if interleave is not None and interleave.baseline is not None:
        result["dgl"] = interleave.baseline.result()
        result["dgl"]["max_logit_diff_at_start"] = interleave.max_logit_diff
        result["vs_dgl"] = result["epoch_s"] / result["dgl"]["epoch_s"]
    elif args.dgl:
        result["dgl"] = {"skipped": "dgl does not import"}
    if io is not None and io.history:
        last = io.history[1:] or io.history
        for key in ("h2d_bytes", "normalized_working_set", "stage1_seconds", "wait_seconds"):
            values = [h[key] for h in last if key in h]
            if values:
                result[key] = statistics.mean(values)
    if compile_cb is not None:
        result["compile"] = {
            k: getattr(compile_cb, k)
            for k in (
                "compiles",
                "recompiles",
                "fallbacks",
                "padded_batches",
                "eager_drops",
                "compile_seconds",
            )
            if hasattr(compile_cb, k)
        }
    return result


# ------------------------------------------------------------------ bytes-only pass
def bytes_pass(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """One epoch of each loader without a model: bytes handed to the device, nodes moved."""
    import torch

    from lightgraph.cli import build_cli

    class ZeroHistory:  # the shape of the real table's rows (hidden 128, fp32)
        def pull(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
            return torch.zeros(ids.numel(), 128)

    cpu = torch.device("cpu")
    out: dict[str, dict[str, float]] = {}
    variants = {
        "NS": ("ns", []),
        "LBS": ("joestar_i", []),
        "PBS": ("joestar_ii", ["--data.init_args.aot=false"]),
        "PBS+AoT": ("joestar_ii", []),
    }
    for ratio in args.lbs_sweep:  # the normalised working set against |B_L| (Fig. 5.2)
        variants[f"LBS ratio {ratio:g}"] = (
            "joestar_i",
            [f"--data.init_args.first_stage.init_args.ratio={ratio}"],
        )
    for label, (run, extra) in variants.items():
        cli = build_cli(recipe_args(run, args, args.cache) + extra, run=False)
        dm = cli.datamodule
        dm.prepare_data()
        dm.setup("fit")
        tic = time.perf_counter()
        loader = dm.train_loader()
        nbytes, targets, steps = 0.0, 0, 0
        for item in loader:
            if label == "NS":
                nbytes += sum(v.numel() * v.element_size() for _, v in item if torch.is_tensor(v))
                targets += int(item.batch_size)
            else:
                dm.to_device(item, cpu, ZeroHistory())
                targets += int(item.seeds.numel())
            steps += 1
        if label != "NS":
            nbytes = dm.h2d_bytes
            stats = dm.io_stats()
            working = stats["nodes_loaded"] / max(1, stats["targets"])
            moved = stats["nodes_moved"] / max(1, stats["targets"])
        else:
            stats = loader.stats
            working = moved = stats["nodes_loaded"] / max(1, stats["targets"])
        out[label] = {
            "h2d_bytes": nbytes,
            "targets": targets,
            "mini_batches": steps,
            "nodes_per_target": working,
            "nodes_moved_per_target": moved,
            "seconds": time.perf_counter() - tic,
        }
        if hasattr(loader, "close"):
            loader.close()
    return out


# ----------------------------------------------------------------------------- driver
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-nodes", type=int, default=1_000_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--train-ratio", type=float, default=0.01)
    p.add_argument("--lbs-ratio", type=float, default=0.5)
    p.add_argument("--num-parts", type=int, default=128)
    p.add_argument("--parts-per-batch", type=int, default=16)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed_everything of every run and the DGL baseline's seed (the graph stays seed 0's)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of every run")
    p.add_argument(
        "--no-dgl",
        dest="dgl",
        action="store_false",
        help="skip the interleaved DGL baseline (it runs only where dgl imports)",
    )
    p.add_argument(
        "--lbs-sweep",
        type=float,
        nargs="*",
        default=[0.125, 0.25, 1.0],
        help="extra LBS ratios for the bytes-only pass",
    )
    p.add_argument("--bytes-only", action="store_true", help="only the loader-only pass")
    p.add_argument("--no-bytes", dest="bytes", action="store_false", help="skip that pass")
    p.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    p.add_argument("--workdir", default=None)
    p.add_argument("--cache", default=None)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "joestar.json"))
    p.add_argument("--dry-run", action="store_true", help="tiny graph, 2 epochs")
    p.add_argument("--run-one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dry_run:
        args.num_nodes, args.epochs, args.train_ratio = 20_000, 2, 0.05
        args.lbs_ratio, args.num_parts, args.parts_per_batch = 0.5, 16, 4
        if args.out.endswith("joestar.json"):
            args.out = os.path.join(tempfile.gettempdir(), "joestar_dry_run.json")
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench_joestar_")
    args.cache = args.cache or os.path.join(args.workdir, "cache")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.run_one:
        result = run_one(args.run_one, args)
        with open(args.result, "w") as f:
            json.dump(result, f)
        return
    report: dict[str, Any] = {
        "config": {
            k: getattr(args, k)
            for k in (
                "num_nodes",
                "avg_degree",
                "train_ratio",
                "lbs_ratio",
                "num_parts",
                "parts_per_batch",
                "epochs",
                "threads",
                "seed",
            )
        },
        "machine": f"{os.cpu_count()} CPU cores, torch CPU",
    }
    report["bytes"] = {}
    if args.bytes or args.bytes_only:
        print("bytes-only pass ...", flush=True)
        report["bytes"] = bytes_pass(args)
    for label, row in report["bytes"].items():
        print(
            f"  {label:8s} {row['h2d_bytes'] / 2**20:10.1f} MB/epoch  "
            f"{row['nodes_per_target']:7.1f} nodes/target  "
            f"{row['nodes_moved_per_target']:7.1f} moved/target",
            flush=True,
        )
    report["runs"] = {}
    if args.bytes_only:
        args.runs = []
        if args.out.endswith("joestar.json"):
            args.out = args.out.replace("joestar.json", "joestar_bytes.json")
    for name in args.runs:
        path = os.path.join(args.workdir, f"{name}.json")
        cmd = [
            sys.executable,
            __file__,
            "--run-one",
            name,
            "--result",
            path,
            "--workdir",
            args.workdir,
            "--cache",
            args.cache,
            "--num-nodes",
            str(args.num_nodes),
            "--avg-degree",
            str(args.avg_degree),
            "--train-ratio",
            str(args.train_ratio),
            "--lbs-ratio",
            str(args.lbs_ratio),
            "--num-parts",
            str(args.num_parts),
            "--parts-per-batch",
            str(args.parts_per_batch),
            "--epochs",
            str(args.epochs),
            "--threads",
            str(args.threads),
            "--seed",
            str(args.seed),
        ] + ([] if args.dgl else ["--no-dgl"])
        tic = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            report["runs"][name] = {"error": proc.stderr[-3000:]}
            print(f"{name}: FAILED\n{proc.stderr[-3000:]}", flush=True)
            continue
        with open(path) as f:
            result = json.load(f)
        result["wall_s"] = time.perf_counter() - tic
        report["runs"][name] = result
        if "skipped" in result:
            print(f"{LABELS[name]:40s} skipped: {result['skipped']}", flush=True)
            continue
        print(
            f"{LABELS[name]:40s} {result['epoch_s']:7.2f} s/epoch  "
            f"test@best-val {100 * result['test_acc_at_best_val']:.2f}  "
            f"h2d {result.get('h2d_bytes', float('nan')) / 2**20:8.1f} MB  "
            f"{result.get('compile', '')}",
            flush=True,
        )
        dgl_row = result.get("dgl", {})
        if "epoch_s" in dgl_row:
            print(
                f"{'  DGL ' + dgl_row['dgl_version'] + ', interleaved':40s} "
                f"{dgl_row['epoch_s']:7.2f} s/epoch  "
                f"test@best-val {100 * dgl_row['test_acc_at_best_val']:.2f}  "
                f"lightgraph/DGL {result['vs_dgl']:.2f}x",
                flush=True,
            )
    base = report["runs"].get("ns", {})
    if "epoch_s" in base:
        report["speedup_vs_ns"] = {
            name: base["epoch_s"] / r["epoch_s"]
            for name, r in report["runs"].items()
            if "epoch_s" in r
        }
        report["acc_delta_vs_ns_points"] = {
            name: 100 * (r["test_acc_at_best_val"] - base["test_acc_at_best_val"])
            for name, r in report["runs"].items()
            if "test_acc_at_best_val" in r
        }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
