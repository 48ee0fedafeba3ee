"""Link prediction with neighbour sampling: lightgraph's NS against DGL 2.1's, interleaved.

lightgraph trains ``recipes/link_ns.yaml`` (a 2-layer GraphSAGE-mean encoder, dot decoder,
binary cross-entropy, one uniform negative per positive, seed edges and their reverses
excluded from every batch) through the Trainer, as a user runs it. After every lightgraph
epoch, in the same process and with the same threads, one epoch of the DGL baseline
trains: DGL's link-prediction recipe, ``dgl.dataloading.as_edge_prediction_sampler(
NeighborSampler([...]), exclude="reverse_id", reverse_eids=..., negative_sampler=
negative_sampler.Uniform(k))`` over ``dgl.dataloading.DataLoader``, ``dgl.nn.SAGEConv(...,
"mean")`` layers, ``u_dot_v`` scores and the same loss, on the same graph, split, training
message-passing graph, fanouts, batch size, negatives per positive, learning rate and
initial weights (copied from the lightgraph encoder and checked to give the same
embeddings). Both are evaluated the same way after every epoch: every node's embedding
over the test split's message-passing graph (train + val edges), then every test edge
ranked against the same 100 uniform negatives (lightgraph's ranking code for both, OGB's
MRR definition).

Reported: seconds per training epoch (mean after the first), their ratio, and test MRR
after the last epoch. Run::

    python benchmarks/bench_link.py                      # 50k nodes, 3 epochs, 1 thread
    python benchmarks/bench_link.py --num-nodes 2000 --epochs 2   # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class DGLLinkSage:
    """GraphSAGE-mean link prediction trained as DGL's link-prediction example trains it."""

    def __init__(self, dgl: Any, dm: Any, pyg_model: Any, lr: float, seed: int) -> None:
        import torch
        from torch_geometric.nn import SAGEConv as PygSAGEConv

        self.dgl = dgl
        split = dm.split
        convs = [m for m in pyg_model.modules() if isinstance(m, PygSAGEConv)]
        self.layers = torch.nn.ModuleList(
            dgl.nn.SAGEConv(c.in_channels, c.out_channels, "mean") for c in convs
        )
        with torch.no_grad():
            for conv, layer in zip(convs, self.layers, strict=True):
                layer.fc_neigh.weight.copy_(conv.lin_l.weight)
                layer.fc_self.weight.copy_(conv.lin_r.weight)
                bias = layer.fc_self.bias if layer.fc_self.bias is not None else layer.bias
                bias.copy_(conv.lin_l.bias)
        # The training graph: the positive pairs (u, v), then their reverses, then the rest;
        # seed edges are the first E, edge e's reverse is e + E (and back).
        pos = split.train
        e = pos.size(1)
        other = split.other
        src = torch.cat([pos[0], pos[1], other[0]])
        dst = torch.cat([pos[1], pos[0], other[1]])
        self.graph = dgl.graph((src, dst), num_nodes=split.num_nodes)
        reverse = torch.cat(
            [torch.arange(e, 2 * e), torch.arange(0, e), torch.arange(2 * e, src.numel())]
        )
        self.x = dm._x
        dgl.seed(seed)
        torch.manual_seed(seed)
        sampler = dgl.dataloading.as_edge_prediction_sampler(
            dgl.dataloading.NeighborSampler(list(reversed(dm.fanouts))),
            exclude="reverse_id",
            reverse_eids=reverse,
            negative_sampler=dgl.dataloading.negative_sampler.Uniform(
                dm.negative_sampler.num_negatives
            ),
        )
        self.loader = dgl.dataloading.DataLoader(
            self.graph,
            torch.arange(e),
            sampler,
            batch_size=dm.batch_size,
            shuffle=True,
            drop_last=False,
            num_workers=0,
        )
        self.optimizer = torch.optim.Adam(self.layers.parameters(), lr=lr)
        self.epoch_s: list[float] = []

    def encode(self, blocks: list[Any], x: Any) -> Any:
        import torch.nn.functional as F

        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, h)
            if i + 1 < len(self.layers):
                h = F.relu(h)
        return h

    def train_epoch(self) -> None:
        import dgl.function as fn
        import torch
        import torch.nn.functional as F

        tic = time.perf_counter()
        self.layers.train()
        for _, pair_graph, neg_graph, blocks in self.loader:
            h = self.encode(blocks, self.x[blocks[0].srcdata[self.dgl.NID]])
            with pair_graph.local_scope():
                pair_graph.ndata["h"] = h
                pair_graph.apply_edges(fn.u_dot_v("h", "h", "s"))
                pos = pair_graph.edata["s"].view(-1)
            with neg_graph.local_scope():
                neg_graph.ndata["h"] = h
                neg_graph.apply_edges(fn.u_dot_v("h", "h", "s"))
                neg = neg_graph.edata["s"].view(-1)
            logits = torch.cat([pos, neg])
            target = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
            loss = F.binary_cross_entropy_with_logits(logits, target)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        self.epoch_s.append(time.perf_counter() - tic)

    def full_graph_embeddings(self, edge_index: Any, x: Any) -> Any:
        import torch

        graph = self.dgl.graph((edge_index[0], edge_index[1]), num_nodes=x.size(0))
        self.layers.eval()
        with torch.no_grad():
            return self.encode([graph] * len(self.layers), x)


def _mrr(module: Any, batch: Any, h: Any) -> float:
    from lightgraph.models.link_metrics import MeanReciprocalRank

    metric = MeanReciprocalRank()
    metric.update(module.rank_queries(h, batch))
    return float(metric.compute())


def run(args: argparse.Namespace) -> dict[str, Any]:
    import lightning.pytorch as pl
    import torch
    from bench_joestar import import_dgl

    from lightgraph.cli import build_cli

    torch.set_num_threads(args.threads)
    dgl = None if args.no_dgl else import_dgl()
    cache = args.cache or tempfile.mkdtemp(prefix="bench_link_")
    cli = build_cli(
        [
            "--config",
            os.path.join(ROOT, "recipes", args.recipe),
            f"--data.init_args.dataset.init_args.num_nodes={args.num_nodes}",
            f"--data.init_args.dataset.init_args.avg_degree={args.avg_degree}",
            f"--data.init_args.batch_size={args.batch_size}",
            f"--data.init_args.cache_dir={cache}",
            f"--seed_everything={args.seed}",
            f"--trainer.max_epochs={args.epochs}",
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.limit_val_batches=0",
            f"--trainer.default_root_dir={cache}",
        ],
        run=False,
    )
    trainer, module, dm = cli.trainer, cli.model, cli.datamodule
    dm.prepare_data()
    dm.setup("fit")
    val, test = dm.eval_batch("val"), dm.eval_batch("test")

    class Interleave(pl.Callback):
        def __init__(self) -> None:
            self.epoch_s: list[float] = []
            self.mrr: list[float] = []
            self.val_mrr: list[float] = []
            self.baseline: DGLLinkSage | None = None
            self.dgl_mrr: list[float] = []
            self.dgl_val_mrr: list[float] = []
            self.max_diff = float("nan")

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if dgl is None or self.baseline is not None:
                return
            self.baseline = DGLLinkSage(
                dgl, dm, pl_module.model, float(pl_module.hparams.lr), args.seed
            )
            h_lg = pl_module.node_embeddings(test)
            h_dgl = self.baseline.full_graph_embeddings(dm.split.message_edges("test"), dm._x)
            self.max_diff = float((h_lg - h_dgl).abs().max())
            if not self.max_diff < 1e-4:
                raise RuntimeError(f"DGL baseline: embeddings differ by {self.max_diff} at start")

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self._tic = time.perf_counter()

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self.epoch_s.append(time.perf_counter() - self._tic)
            self.val_mrr.append(_mrr(pl_module, val, pl_module.node_embeddings(val)))
            self.mrr.append(_mrr(pl_module, test, pl_module.node_embeddings(test)))
            if self.baseline is not None:
                self.baseline.train_epoch()
                for batch, out in ((val, self.dgl_val_mrr), (test, self.dgl_mrr)):
                    edges = dm.split.message_edges(batch.split)
                    h = self.baseline.full_graph_embeddings(edges, dm._x)
                    out.append(_mrr(pl_module, batch, h))
            print(
                f"epoch {len(self.epoch_s) - 1}: lightgraph {self.epoch_s[-1]:.2f} s MRR "
                f"{self.mrr[-1]:.4f}"
                + (
                    f" | DGL {self.baseline.epoch_s[-1]:.2f} s MRR {self.dgl_mrr[-1]:.4f}"
                    if self.baseline is not None
                    else ""
                ),
                flush=True,
            )

    cb = Interleave()
    trainer.callbacks.insert(0, cb)
    trainer.fit(module, dm)
    later = cb.epoch_s[1:] or cb.epoch_s
    result: dict[str, Any] = {
        "recipe": args.recipe,
        "num_nodes": args.num_nodes,
        "avg_degree": args.avg_degree,
        "train_edges": int(dm.split.train.size(1)),
        "test_edges": int(dm.split.test.size(1)),
        "batch_size": args.batch_size,
        "fanouts": list(dm.fanouts),
        "threads": torch.get_num_threads(),
        "epochs": args.epochs,
        "lightgraph": {
            "epoch_s": statistics.mean(later),
            "epoch_s_all": cb.epoch_s,
            "val_mrr": cb.val_mrr,
            "test_mrr": cb.mrr,
        },
    }
    if cb.baseline is not None:
        dgl_later = cb.baseline.epoch_s[1:] or cb.baseline.epoch_s
        result["dgl"] = {
            "version": dgl.__version__,
            "epoch_s": statistics.mean(dgl_later),
            "epoch_s_all": cb.baseline.epoch_s,
            "val_mrr": cb.dgl_val_mrr,
            "test_mrr": cb.dgl_mrr,
            "max_embedding_diff_at_start": cb.max_diff,
        }
        result["epoch_ratio_vs_dgl"] = result["lightgraph"]["epoch_s"] / result["dgl"]["epoch_s"]
        result["test_mrr_gap_points"] = 100 * (cb.mrr[-1] - cb.dgl_mrr[-1])
    return result


def plot(result: dict[str, Any], path: str) -> None:
    """Validation MRR against cumulative training seconds, one line per system (SVG)."""
    from bench_ldr_readings import svg_chart

    series = []
    for name, color in (("lightgraph", "#1f77b4"), ("dgl", "#d62728")):
        run = result.get(name)
        if not run:
            continue
        t, x = 0.0, [0.0]
        for s in run["epoch_s_all"]:
            t += s
            x.append(t)
        system = "JOESTAR-I" if "joestar" in result["recipe"] else "NS"
        label = f"lightgraph {system}" if name == "lightgraph" else f"DGL {run['version']}"
        series.append({"label": label, "x": x, "y": [None, *run["val_mrr"]], "color": color})
    svg_chart(
        path,
        f"Link prediction, {result['num_nodes']:,} nodes: validation MRR",
        "training seconds (1 thread; evaluation excluded)",
        "validation MRR",
        series,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--recipe",
        default="link_ns.yaml",
        help="link_ns.yaml (NS) or link_joestar.yaml (JOESTAR-I over seed edges)",
    )
    p.add_argument("--num-nodes", type=int, default=50000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", default=None)
    p.add_argument("--no-dgl", action="store_true", help="skip the DGL baseline")
    p.add_argument("--out", default=None, help="write the result as JSON here")
    p.add_argument("--plot", default=None, help="write the validation-MRR plot (SVG) here")
    args = p.parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
