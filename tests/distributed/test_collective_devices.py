"""Every tensor lightgraph hands to ``torch.distributed`` lies on the process's compute device.

NCCL rejects host tensors, so a collective given a CPU tensor while the module trains on a
GPU fails there (and only there). Each test runs a tiny two-rank fit with a recorder that
wraps the tensor collectives of ``torch.distributed`` inside every rank: it notes each
call's name, its call site in lightgraph and the devices of its tensors, then forwards it.
The test checks that (a) the code paths it is meant to exercise issued collectives (so the
check cannot pass without looking) and (b) every recorded tensor was on the compute
device. Values logged with ``sync_dist=True`` are recorded too: Lightning all-reduces them
on the device they were logged on.

On CPU every tensor is a CPU tensor, so (b) holds by construction: the CPU run checks the
code paths and the recorder. The ``cuda`` variant runs both ranks on ``cuda:0`` over gloo
(NCCL refuses two ranks on one GPU). There the recorder stands in for NCCL: it stages
every CUDA tensor through host memory for the real gloo call (gloo's point-to-point
operations take no CUDA tensors), and lightgraph's own ``dist.get_backend`` answers
``"nccl"``, so code that picks a device by backend takes the multi-GPU branch; (b) is then
the check NCCL would make. What it cannot show, and only several GPUs with NCCL do: NCCL's
own errors (one device per rank, ``torch.cuda.set_device`` before object collectives,
which pick the current device), stream ordering of NCCL's asynchronous work against the
exchanger's side streams, and hangs from collectives issued in a different order on
different ranks. Object collectives (``all_gather_object``, ``broadcast_object_list``,
``gather_object``) take no tensors and are not recorded.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.pytorch.strategies import DDPStrategy
from torch import Tensor

import lightgraph
from tests.distributed_helpers import run_distributed

#: The tensor collectives of ``torch.distributed`` the recorder wraps.
TENSOR_COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "broadcast",
    "reduce",
    "all_to_all_single",
    "all_to_all",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
)
#: Point-to-point operations: ``P2POp`` checks its ``op`` against these names of
#: ``distributed_c10d``, so they are replaced there too.
_P2P = ("isend", "irecv")
_P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})
#: Parameters that receive data (copied back after a staged call).
_OUTPUTS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("tensor",),
    "broadcast": ("tensor",),
    "reduce": ("tensor",),
    "all_gather": ("tensor_list",),
    "all_gather_into_tensor": ("output_tensor",),
    "all_to_all_single": ("output",),
    "all_to_all": ("output_tensor_list",),
    "reduce_scatter": ("output",),
    "reduce_scatter_tensor": ("output",),
    "gather": ("gather_list",),
    "scatter": ("tensor",),
    "recv": ("tensor",),
    "irecv": ("tensor",),
    "send": (),
    "isend": (),
}

_LIGHTGRAPH = os.path.dirname(os.path.abspath(lightgraph.__file__)) + os.sep
_TORCH_DIST = os.path.dirname(os.path.abspath(dist.__file__)) + os.sep
_HERE = os.path.abspath(__file__)
_WORLD = 2


def _tensors(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, dist.P2POp):
        yield value.tensor
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def _short(path: str) -> str:
    marker = os.sep + "site-packages" + os.sep
    return path.split(marker, 1)[1] if marker in path else os.path.basename(path)


def _call_sites() -> tuple[str, str, tuple[str, ...]]:
    """``(site, via, chain)`` of the calling stack: the innermost frame in lightgraph
    (``"-"`` when none), the innermost frame outside ``torch.distributed`` and this file
    (who called the collective), and every lightgraph file on the stack, innermost first."""
    frame = sys._getframe(2)
    site, via, chain = "-", "", []
    top = os.path.dirname(_LIGHTGRAPH.rstrip(os.sep))
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path.startswith(_LIGHTGRAPH):
            rel = os.path.relpath(path, top)
            if site == "-":
                site = f"{rel}:{frame.f_lineno}"
            if rel not in chain:
                chain.append(rel)
        if not via and not path.startswith(_TORCH_DIST) and path != _HERE:
            via = f"{_short(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return site, via, tuple(chain)


class _DoneWork:
    """A finished collective: what an ``async_op=True`` call returns after a staged call."""

    def __init__(self, outputs: list[Tensor]) -> None:
        self._outputs = outputs

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list[Tensor]:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        devices = sorted({t.device for t in self._outputs if t.device.type != "cpu"}, key=str)
        future: torch.futures.Future = torch.futures.Future(devices=devices or None)
        future.set_result(self._outputs)
        return future


class _StagedP2P:
    """Point-to-point transfers of host copies; waiting on any of them waits on all and
    copies what was received back (as a coalesced NCCL batch completes as one)."""

    def __init__(self, works: list[Any], copies: list[tuple[Tensor, Tensor]]) -> None:
        self.works, self.copies, self.done = works, copies, False

    def wait(self) -> None:
        if self.done:
            return
        for work in self.works:
            work.wait()
        with torch.no_grad():
            for target, host in self.copies:
                target.copy_(host)
        self.done = True


class _StagedWork:
    def __init__(self, group: _StagedP2P) -> None:
        self.group = group

    def wait(self, timeout: Any = None) -> bool:
        self.group.wait()
        return True

    def is_completed(self) -> bool:
        return self.group.done


class CollectiveRecorder:
    """Wraps the tensor collectives of ``torch.distributed`` in this process.

    Every call is recorded as ``(name, site, via, lightgraph files, devices)`` and
    forwarded to the real function. ``LightningModule.log`` calls with ``sync_dist=True``
    and a tensor value are recorded as ``"log(sync_dist)"``. Nested calls (a wrapper
    calling another) are recorded once.

    Args:
        stage_to_host: ``"device"``: a call holding non-CPU tensors runs the real function
            on host copies and copies the received data back (asynchronous collectives
            complete before they return; point-to-point transfers when waited on), for
            gloo, which has no CUDA path for some operations; ``"all"``: every call is
            staged so (a check of the staging itself on CPU); ``None``: none.
        nccl_view: lightgraph's own ``dist.get_backend`` calls answer ``"nccl"``, so code
            that picks a device by backend takes the branch a multi-GPU run takes.
    """

    def __init__(self, stage_to_host: str | None = None, nccl_view: bool = False) -> None:
        self.stage_to_host = stage_to_host
        self.nccl_view = nccl_view
        self.records: Counter[tuple[Any, ...]] = Counter()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._saved: list[tuple[Any, str, Any]] = []

    # ------------------------------------------------------------------ install
    def install(self) -> CollectiveRecorder:
        for name in TENSOR_COLLECTIVES:
            real = getattr(dist, name)
            wrapper = self._wrap(name, real)
            self._replace(dist, name, wrapper)
            if name in _P2P:
                self._replace(c10d, name, wrapper)
        self._replace(pl.LightningModule, "log", self._wrap_log(pl.LightningModule.log))
        if self.nccl_view:
            self._replace(dist, "get_backend", _nccl_for_lightgraph(dist.get_backend))
        return self

    def uninstall(self) -> None:
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()

    def _replace(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    # ------------------------------------------------------------------ records
    def _record(self, name: str, tensors: list[Tensor]) -> None:
        site, via, chain = _call_sites()
        devices = tuple(sorted({str(t.device) for t in tensors}))
        with self._lock:
            self.records[(name, site, via, chain, devices)] += 1

    def summary(self) -> list[dict[str, Any]]:
        """The calls, one entry per (name, site, caller, lightgraph files, devices)."""
        return [
            {
                "op": op,
                "site": site,
                "via": via,
                "chain": list(chain),
                "devices": list(devices),
                "count": count,
            }
            for (op, site, via, chain, devices), count in sorted(self.records.items())
        ]

    # ------------------------------------------------------------------ wrappers
    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(real)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._local, "depth", 0)
            if depth:
                return real(*args, **kwargs)
            tensors = list(_tensors(args)) + list(_tensors(tuple(kwargs.values())))
            self._record(name, tensors)
            self._local.depth = 1
            try:
                if self.stage_to_host == "all" or (
                    self.stage_to_host == "device" and any(t.device.type != "cpu" for t in tensors)
                ):
                    return self._staged(name, real, signature, args, kwargs)
                return real(*args, **kwargs)
            finally:
                self._local.depth = 0

        wrapper.__name__ = wrapper.__qualname__ = name
        wrapper.__wrapped__ = real  # type: ignore[attr-defined]
        return wrapper

    def _wrap_log(self, real: Callable[..., Any]) -> Callable[..., Any]:
        recorder = self

        def log(module: pl.LightningModule, name: str, value: Any, *args: Any, **kw: Any) -> Any:
            if kw.get("sync_dist") and isinstance(value, Tensor):
                recorder._record("log(sync_dist)", [value])
            return real(module, name, value, *args, **kw)

        return log

    # ------------------------------------------------------------------ host staging
    def _staged(
        self,
        name: str,
        real: Callable[..., Any],
        signature: inspect.Signature,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if name == "batch_isend_irecv":
            return self._staged_batch(real, args, kwargs)
        bound = signature.bind(*args, **kwargs)
        copies: list[tuple[Tensor, Tensor]] = []

        def to_host(value: Any, output: bool) -> Any:
            if isinstance(value, Tensor):
                host = value.detach().to("cpu", copy=True)
                if output:
                    copies.append((value, host))
                return host
            if isinstance(value, list | tuple):
                return type(value)(to_host(v, output) for v in value)
            return value

        outputs = _OUTPUTS[name]
        for key, value in list(bound.arguments.items()):
            bound.arguments[key] = to_host(value, key in outputs)
        asynchronous = bool(bound.arguments.get("async_op", False))
        if "async_op" in signature.parameters:
            bound.arguments["async_op"] = False
        result = real(*bound.args, **bound.kwargs)
        if name in _P2P:  # a pending transfer: copy back once it completes
            return _StagedWork(_StagedP2P([result], copies))
        with torch.no_grad():
            for target, host in copies:
                target.copy_(host)
        if asynchronous:
            return _DoneWork([target for target, _ in copies])
        return result

    def _staged_batch(
        self, real: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[_StagedWork]:
        ops = args[0] if args else kwargs["p2p_op_list"]
        copies: list[tuple[Tensor, Tensor]] = []
        host_ops = []
        for op in ops:
            host = op.tensor.detach().to("cpu", copy=True)
            if op.op is c10d.irecv:
                copies.append((op.tensor, host))
            # One of `peer` (global) and `group_peer`: P2POp refuses both.
            if op.peer is not None:
                host_ops.append(dist.P2POp(op.op, host, op.peer, op.group, op.tag))
            else:
                host_ops.append(
                    dist.P2POp(op.op, host, None, op.group, op.tag, group_peer=op.group_peer)
                )
        group = _StagedP2P(real(host_ops), copies)
        return [_StagedWork(group) for _ in ops]


def _nccl_for_lightgraph(real: Callable[..., Any]) -> Callable[..., Any]:
    def get_backend(group: Any = None) -> Any:
        backend = real(group)
        caller = os.path.abspath(sys._getframe(1).f_code.co_filename)
        return "nccl" if caller.startswith(_LIGHTGRAPH) else backend

    return get_backend


class _JoinedGroup(ClusterEnvironment):
    """The process group exists already (``run_distributed`` made it): Lightning joins it."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return "127.0.0.1"

    @property
    def main_port(self) -> int:
        return 0

    @staticmethod
    def detect() -> bool:
        return False

    def world_size(self) -> int:
        return dist.get_world_size()

    def set_world_size(self, size: int) -> None:
        pass

    def global_rank(self) -> int:
        return dist.get_rank()

    def set_global_rank(self, rank: int) -> None:
        pass

    def local_rank(self) -> int:
        return dist.get_rank()

    def node_rank(self) -> int:
        return 0


def _fit(
    device: torch.device,
    root: str,
    module: pl.LightningModule,
    data: pl.LightningDataModule,
    strategy: DDPStrategy,
    callbacks: list[pl.Callback],
    max_epochs: int = 2,
    checkpoint: bool = False,
) -> pl.LightningModule:
    """Fit on this rank of the existing group, ``_WORLD`` ranks on ``device``'s type;
    returns the trained module."""
    strategy.cluster_environment = _JoinedGroup()
    strategy.parallel_devices = [device] * _WORLD
    trainer = pl.Trainer(
        accelerator=device.type,
        devices=1,
        strategy=strategy,
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=checkpoint,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=callbacks,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, data)
    return module


# ---------------------------------------------------------------------- scenarios


def _partitioned(root: str) -> Any:
    from lightgraph.data import PartitionedGraphDataModule, SyntheticGraph

    graph = SyntheticGraph(num_nodes=200, avg_degree=6, num_classes=4, num_features=8, seed=3)
    return PartitionedGraphDataModule(graph, partitioner="metis", cache_dir=f"{root}/cache")


def _node_classifier() -> Any:
    from lightgraph.models import NodeClassifier
    from lightgraph.nn import GCN

    torch.manual_seed(0)
    return NodeClassifier(GCN(8, 4, hidden_channels=8, num_layers=2, dropout=0.0), 4, lr=0.02)


def _sylvie(device: torch.device, root: str) -> pl.LightningModule:
    """Sylvie: ring transport, degree-aware widths, one-epoch-stale pipeline, adapted."""
    from lightgraph.callbacks import (
        AdaptiveBitWidth,
        CommunicationMonitor,
        EpochSummary,
        IOMonitor,
        PipelineAdaptor,
        RandomStateCheckpoint,
    )
    from lightgraph.quant import DegreeAwareBits
    from lightgraph.strategies import BoundaryExchangeStrategy

    strategy = BoundaryExchangeStrategy(
        transport="ring",
        quantization=DegreeAwareBits(base_bits=2),
        mode="async",
        process_group_backend="gloo",
    )
    callbacks = [
        RandomStateCheckpoint(),
        AdaptiveBitWidth(window=1),
        PipelineAdaptor(window=1),
        CommunicationMonitor(),
        EpochSummary(),
        IOMonitor(),
    ]
    return _fit(device, root, _node_classifier(), _partitioned(root), strategy, callbacks, 3, True)


def _adaqp(device: torch.device, root: str) -> pl.LightningModule:
    """AdaQP: profiled links, variance-aware widths re-assigned, overlapped exchange."""
    from lightgraph.callbacks import BitWidthReassigner, CommunicationMonitor
    from lightgraph.quant import VarianceAwareBits
    from lightgraph.strategies import BoundaryExchangeStrategy

    policy = VarianceAwareBits(
        bits=(2, 4, 8), group_size=8, time_limit=1.0, profile_sizes=(256, 4096)
    )
    strategy = BoundaryExchangeStrategy(
        transport="all_to_all", quantization=policy, mode="overlap", process_group_backend="gloo"
    )
    callbacks = [BitWidthReassigner(period=1, verbose=False), CommunicationMonitor()]
    return _fit(device, root, _node_classifier(), _partitioned(root), strategy, callbacks)


def _fixed_sync(device: torch.device, root: str) -> pl.LightningModule:
    """Synchronous all-to-all exchange of 4-bit messages (quantised vanilla)."""
    from lightgraph.quant import FixedBits
    from lightgraph.strategies import BoundaryExchangeStrategy

    strategy = BoundaryExchangeStrategy(
        quantization=FixedBits(4), mode="sync", process_group_backend="gloo"
    )
    return _fit(device, root, _node_classifier(), _partitioned(root), strategy, [])


def _torchgt(device: torch.device, root: str) -> pl.LightningModule:
    """TorchGT: graph parallelism with quantised all-to-alls and sequence batch norm."""
    from lightgraph.callbacks import ClusterSparsityTuner
    from lightgraph.data import NodeSequenceDataModule, SyntheticGraph
    from lightgraph.models import GraphTransformerModule
    from lightgraph.nn import GT
    from lightgraph.quant import FixedBits
    from lightgraph.strategies import GraphParallelStrategy

    graph = SyntheticGraph(num_nodes=120, avg_degree=6, num_features=8, num_classes=3, seed=3)
    data = NodeSequenceDataModule(graph, sequence_length=60, pe_dim=4, cache_dir=f"{root}/cache")
    torch.manual_seed(0)
    model = GT(8, 3, hidden_channels=16, num_layers=2, heads=4, pe_dim=4, norm="batch")
    module = GraphTransformerModule(model, num_classes=3, lr=1e-2)
    strategy = GraphParallelStrategy(quantization=FixedBits(4), process_group_backend="gloo")
    return _fit(device, root, module, data, strategy, [ClusterSparsityTuner()])


def _unitg(device: torch.device, root: str) -> pl.LightningModule:
    """UniTG: flow-parallel RevGCN stages, a tiny LM, modality syncs; a checkpoint."""
    from lightgraph.callbacks import ModalitySync
    from lightgraph.data import SyntheticGraph, SyntheticTextGraph, TextGraphDataModule
    from lightgraph.models import UniTGModule
    from lightgraph.nn import EarlyExitEncoder, LMEncoder, RevGCN
    from lightgraph.strategies import FlowParallelStrategy

    graph = SyntheticGraph(num_nodes=80, num_classes=4, num_features=16, seed=3)
    text = SyntheticTextGraph(graph, words_per_node=6, vocab_per_class=4, noise_vocab_size=20)
    data = TextGraphDataModule(text, serve="graph", cache_dir=f"{root}/cache")
    torch.manual_seed(1)
    encoder = LMEncoder(
        vocab_size=64,
        hidden_size=16,
        num_layers=4,
        num_heads=2,
        intermediate_size=32,
        max_position=16,
        dropout=0.0,
    )
    lm = EarlyExitEncoder(encoder, num_classes=4)
    torch.manual_seed(0)
    module = UniTGModule(
        RevGCN(16, 16, 4, num_layers=4, dropout=0.0),
        4,
        lm=lm,
        lm_epochs=2,
        lm_batch_size=16,
        encode_batch_size=16,
        lm_share=1.0,
        lr=0.01,
        lm_lr=0.01,
    )
    strategy = FlowParallelStrategy(num_microbatches=1, process_group_backend="gloo")
    return _fit(device, root, module, data, strategy, [ModalitySync()], 3, True)


def _sampled(first_stage: str | None) -> Callable[[torch.device, str], pl.LightningModule]:
    def run(device: torch.device, root: str) -> pl.LightningModule:
        from torch_geometric.nn.models import GraphSAGE

        from lightgraph.callbacks import EpochSummary, IOMonitor
        from lightgraph.data import (
            MultistageDataModule,
            NeighborSamplingDataModule,
            SyntheticGraph,
        )
        from lightgraph.data.loader import PartitionBatchSampler
        from lightgraph.models import MiniBatchNodeClassifier

        graph = SyntheticGraph(num_nodes=240, avg_degree=6, num_features=8, seed=5)
        data: pl.LightningDataModule
        if first_stage is None:  # NS
            data = NeighborSamplingDataModule(graph, fanouts=[3, 3], batch_size=40)
        else:  # JOESTAR with PBS and historical embeddings
            data = MultistageDataModule(
                graph,
                first_stage=PartitionBatchSampler(num_parts=6, parts_per_batch=3, history=True),
                batch_size=20,
                fanouts=[3, 3],
                cache_dir=f"{root}/cache",
            )
        torch.manual_seed(0)
        gnn = GraphSAGE(8, 16, 2, graph.num_classes)
        # "step": the history's per-step all-gather (with validation every epoch, "auto"
        # would take the epoch refresh, whose gathers are layer-wise inference's).
        module = MiniBatchNodeClassifier(gnn, graph.num_classes, lr=0.01, history_sync="step")
        strategy = DDPStrategy(process_group_backend="gloo")
        return _fit(device, root, module, data, strategy, [IOMonitor(), EpochSummary()])

    return run


SCENARIOS: dict[str, Callable[[torch.device, str], pl.LightningModule]] = {
    "sylvie": _sylvie,
    "adaqp": _adaqp,
    "fixed_sync": _fixed_sync,
    "torchgt": _torchgt,
    "unitg": _unitg,
    "ns": _sampled(None),
    "joestar_pbs_history": _sampled("pbs"),
}

#: ``(operation, file)`` pairs each scenario must show, the file anywhere on the calling
#: stack: the code paths it exercises.
EXPECTED: dict[str, set[tuple[str, str]]] = {
    "sylvie": {
        ("batch_isend_irecv", "lightgraph/functional/halo_exchange.py"),
        ("all_reduce", "lightgraph/strategies/exchange_group.py"),
        ("all_reduce", "lightgraph/callbacks/communication_monitor.py"),
        ("all_reduce", "lightgraph/callbacks/io_monitor.py"),
        ("log(sync_dist)", "lightgraph/callbacks/communication_monitor.py"),
        ("log(sync_dist)", "lightgraph/callbacks/io_monitor.py"),
        ("log(sync_dist)", "lightgraph/models/node_classifier.py"),
    },
    "adaqp": {
        ("all_to_all_single", "lightgraph/functional/halo_exchange.py"),
        ("batch_isend_irecv", "lightgraph/distributed/link_profiler.py"),
        ("all_reduce", "lightgraph/distributed/link_profiler.py"),
        ("broadcast", "lightgraph/distributed/link_profiler.py"),
        ("all_reduce", "lightgraph/strategies/exchange_group.py"),
        ("all_reduce", "lightgraph/callbacks/communication_monitor.py"),
    },
    "fixed_sync": {
        ("all_to_all_single", "lightgraph/functional/halo_exchange.py"),
        ("all_reduce", "lightgraph/strategies/exchange_group.py"),
        ("log(sync_dist)", "lightgraph/models/node_classifier.py"),
    },
    "torchgt": {
        ("all_to_all_single", "lightgraph/functional/halo_exchange.py"),
        ("all_reduce", "lightgraph/nn/norm/sequence_batch_norm.py"),
        ("all_reduce", "lightgraph/strategies/exchange_group.py"),
    },
    "unitg": {
        ("all_reduce", "lightgraph/models/unitg_module.py"),
        ("broadcast", "lightgraph/distributed/flow_pipeline.py"),
        ("p2p", "lightgraph/distributed/flow_pipeline.py"),  # torch's pipeline stage
    },
    "ns": {
        ("all_gather", "lightgraph/utilities/collectives.py"),
        ("all_gather", "lightgraph/models/minibatch_classifier.py"),
        ("all_reduce", "lightgraph/callbacks/io_monitor.py"),
    },
    "joestar_pbs_history": {
        ("all_gather", "lightgraph/nn/history.py"),
        ("all_gather", "lightgraph/models/minibatch_classifier.py"),
        ("all_reduce", "lightgraph/callbacks/io_monitor.py"),
    },
}


def _rank(
    rank: int, world_size: int, scenario: str, device_type: str, root: str, stage: str | None
) -> dict:
    device = torch.device(device_type, 0) if device_type == "cuda" else torch.device("cpu")
    recorder = CollectiveRecorder(stage_to_host=stage, nccl_view=device.type == "cuda")
    recorder.install()
    try:
        module = SCENARIOS[scenario](device, os.path.join(root, "run"))
    finally:
        recorder.uninstall()
    return {
        "device": str(device),
        "records": recorder.summary(),
        "state": {k: v.detach().cpu() for k, v in module.state_dict().items()},
    }


#: Forked ranks cannot use CUDA once this process has touched it (even through
#: `torch.cuda.is_available()`, and Lightning reads the CUDA random state whenever a GPU is
#: present): spawn them on a machine with a GPU, fork them (fast) elsewhere.
_CONTEXT = "spawn" if torch.cuda.is_available() else "fork"

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize("device_type", DEVICES)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_collectives_get_tensors_on_the_compute_device(
    tmp_path, scenario: str, device_type: str
) -> None:
    results = run_distributed(
        _rank,
        _WORLD,
        scenario,
        device_type,
        str(tmp_path),
        "device" if device_type == "cuda" else None,
        timeout=200,
        context=_CONTEXT,
    )
    for rank, result in enumerate(results):
        records = result["records"]
        seen = {(r["op"], path) for r in records for path in r["chain"]}
        seen |= {("p2p", path) for op, path in seen if op in _P2P_OPS}
        missing = EXPECTED[scenario] - seen
        assert not missing, (
            f"rank {rank}: {scenario} issued none of {sorted(missing)}; seen: {sorted(seen)}"
        )
        offenders = [
            f"  {r['op']} at {r['site']} (called from {r['via']}): {r['devices']} x{r['count']}"
            for r in records
            if any(d != result["device"] for d in r["devices"])
        ]
        assert not offenders, (
            f"rank {rank}: collectives given tensors off the compute device {result['device']}:\n"
            + "\n".join(offenders)
        )


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario", ["fixed_sync", "torchgt", "unitg"])
def test_host_staging_changes_no_result(tmp_path, scenario: str) -> None:
    """The recorder's host staging (what the CUDA variant runs on) is transparent: every
    call staged through host copies -- asynchronous all-to-alls, DDP's gradient hook,
    point-to-point pipeline transfers, broadcasts -- trains bit for bit the same model."""
    root = str(tmp_path)
    plain = run_distributed(_rank, _WORLD, scenario, "cpu", root + "/a", None, context=_CONTEXT)
    staged = run_distributed(_rank, _WORLD, scenario, "cpu", root + "/b", "all", context=_CONTEXT)
    for rank in range(_WORLD):
        want, got = plain[rank]["state"], staged[rank]["state"]
        assert want.keys() == got.keys()
        for key, value in want.items():
            assert torch.equal(got[key], value), f"rank {rank}: {key} differs"
        # The same calls were made, in the same places.
        assert plain[rank]["records"] == staged[rank]["records"]
