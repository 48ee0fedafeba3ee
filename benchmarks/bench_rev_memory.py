"""Activation memory vs depth: reversible RevGCN / RevGAT against ResGEN and a plain GCN.

One training step (forward + ``sum().backward()``) of every model at every depth on a
synthetic 20,000-node graph (:class:`~lightgraph.data.SyntheticGraph`, 64 features,
average degree ``--avg-degree``, default 5: 100k edges, which keeps a depth-64 step on one
CPU thread under a minute), all with the same width (``--hidden``, default 64) and dropout 0.1:

* ``RevGCN`` / ``RevGAT``: :mod:`lightgraph.nn.models.rev_gnn`, 2 groups (RevGAT 2 heads);
* ``RevGCN-plain``: the same RevGCN blocks with ``reversible=False`` (activations kept);
* ``ResGEN``: the res+ DeeperGCN stack;
* ``GCN``: input linear, ``depth`` ``GCNConv(hidden, hidden)`` + ReLU, output linear.

Three measures of one step, each (model, depth) in a fresh subprocess:

* ``peak_tensor_bytes``: the peak total of the tensor storages created during the step and
  alive at the same time (a ``TorchDispatchMode`` that follows every storage until it is
  freed or resized); deterministic. It includes the parameter gradients (a few KB per
  layer).
* ``saved_bytes``: bytes autograd saves for the backward pass
  (``torch.autograd.graph.saved_tensors_hooks``, each storage counted once). PyG's
  reversible function keeps what it needs on its context instead, so for the reversible
  models this counts only the input / output layers: use ``peak_tensor_bytes``.
* ``peak_rss_delta``: rise of the process's peak RSS (``VmHWM``, reset through
  ``/proc/self/clear_refs``) during the step; allocator-dependent (the workers run with
  ``MALLOC_MMAP_THRESHOLD_=131072`` unless it is set: with glibc's adaptive threshold,
  heap fragmentation made the reversible models' RSS grow with depth although their live
  tensors did not).

All three come from one traced step (``step_s`` includes the tracing overhead).

Results go to ``benchmarks/results/rev_memory.json``.

The non-reversible models grow linearly: ResGEN needs about 165 MiB per layer here (about
10.5 GiB at depth 64), so the stored results measure it at depths 4, 16 and 32 (a second
run with ``--append --models ResGEN --depths 32``).

Usage::

    OMP_NUM_THREADS=1 nice python benchmarks/bench_rev_memory.py [--depths 4 16 64]
        [--models RevGCN ...] [--append]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch_geometric.nn import GCNConv

from lightgraph.data import SyntheticGraph
from lightgraph.nn.models.rev_gnn import ResGEN, RevGAT, RevGCN

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("RevGCN", "RevGCN-plain", "GCN", "RevGAT", "ResGEN")


class PlainGCN(nn.Module):
    """Input linear, ``num_layers`` GCNConv + ReLU layers of one width, output linear."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int) -> None:
        super().__init__()
        self.lin_in = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(GCNConv(hidden, hidden) for _ in range(num_layers))
        self.lin_out = nn.Linear(hidden, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = self.lin_in(x)
        for conv in self.convs:
            h = F.dropout(F.relu(conv(h, edge_index)), 0.1, self.training)
        return self.lin_out(h)


def build(name: str, in_channels: int, hidden: int, out_channels: int, depth: int) -> nn.Module:
    if name == "RevGCN":
        return RevGCN(in_channels, hidden, out_channels, depth, dropout=0.1)
    if name == "RevGAT":
        return RevGAT(in_channels, hidden, out_channels, depth, heads=2, dropout=0.1)
    if name == "RevGCN-plain":
        return RevGCN(in_channels, hidden, out_channels, depth, dropout=0.1, reversible=False)
    if name == "ResGEN":
        return ResGEN(in_channels, hidden, out_channels, depth, dropout=0.1)
    return PlainGCN(in_channels, hidden, out_channels, depth)


class PeakTensorMemory(TorchDispatchMode):
    """Peak bytes of the storages created inside the mode and alive at once."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, weakref.ref] = {}
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor):
                storage = t.untyped_storage()
                key = id(storage)
                if key not in self.live:
                    self.live[key] = weakref.ref(storage, lambda _, k=key: self.live.pop(k, None))
        total = sum(s.nbytes() for r in list(self.live.values()) if (s := r()) is not None)
        self.peak = max(self.peak, total)
        return out


def saved_bytes(model: nn.Module, x: Tensor, edge_index: Tensor) -> int:
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x, edge_index).sum()
    loss.backward()
    return sum(seen.values())


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


def worker(name: str, depth: int, hidden: int, num_nodes: int, avg_degree: float) -> dict[str, Any]:
    torch.manual_seed(0)
    data = SyntheticGraph(num_nodes=num_nodes, avg_degree=avg_degree).load()
    x, edge_index = data.x, data.edge_index
    model = build(name, x.size(1), hidden, int(data.y.max()) + 1, depth).train()

    # One traced step: peak RSS (high-water mark reset first where Linux allows), live
    # storages and saved tensors are measured together (the meters hold no tensors).
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status("VmRSS")
    except OSError:
        before = -1
    start = time.perf_counter()
    with PeakTensorMemory() as meter:
        saved = saved_bytes(model, x, edge_index)
    step_s = time.perf_counter() - start
    rss = _status("VmHWM") - before if before >= 0 else -1
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "model": name,
        "depth": depth,
        "hidden": hidden,
        "num_nodes": num_nodes,
        "num_edges": int(edge_index.size(1)),
        "param_bytes": params,
        "peak_tensor_bytes": meter.peak,
        "saved_bytes": saved,
        "peak_rss_delta": rss,
        "step_s": round(step_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--num-nodes", type=int, default=20000)
    parser.add_argument("--avg-degree", type=float, default=5.0)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument(
        "--append", action="store_true", help="keep the other rows of an existing JSON"
    )
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "DEPTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, depth = args.worker[0], int(args.worker[1])
        row = worker(name, depth, args.hidden, args.num_nodes, args.avg_degree)
        print("RESULT " + json.dumps(row))
        return

    rows: list[dict[str, Any]] = []
    # A fixed mmap threshold makes glibc return freed tensor buffers to the OS, so the peak
    # RSS follows the live tensors instead of heap fragmentation (the reversible blocks
    # free and re-grow their inputs' storages).
    env = {"MALLOC_MMAP_THRESHOLD_": "131072", **os.environ}
    mib = 2.0**20
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "rev_memory.json")
    meta = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": os.environ.get("OMP_NUM_THREADS", str(torch.get_num_threads())),
        "hidden": args.hidden,
        "num_nodes": args.num_nodes,
        "avg_degree": args.avg_degree,
        "malloc_mmap_threshold": env["MALLOC_MMAP_THRESHOLD_"],
    }
    kept: list[dict[str, Any]] = []
    if args.append and os.path.exists(path):
        with open(path) as f:
            old = json.load(f)["rows"]
        todo = {(m, d) for m in args.models for d in args.depths}
        kept = [r for r in old if (r["model"], r["depth"]) not in todo]
    print(
        f"{'model':<13} {'depth':>5} {'peak tensors MiB':>17} {'saved MiB':>10} "
        f"{'peak RSS MiB':>13} {'params MiB':>11} {'step s':>7}"
    )
    for name in args.models:
        for depth in args.depths:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, str(depth)]
            cmd += ["--hidden", str(args.hidden), "--num-nodes", str(args.num_nodes)]
            cmd += ["--avg-degree", str(args.avg_degree)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT "))
            row = json.loads(line[len("RESULT ") :])
            rows.append(row)
            print(
                f"{name:<13} {depth:>5} {row['peak_tensor_bytes'] / mib:>17.1f} "
                f"{row['saved_bytes'] / mib:>10.1f} {row['peak_rss_delta'] / mib:>13.1f} "
                f"{row['param_bytes'] / mib:>11.2f} {row['step_s']:>7.2f}",
                flush=True,
            )
            with open(path, "w") as f:  # after every row: partial runs keep their results
                json.dump({"meta": meta, "rows": kept + rows}, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
