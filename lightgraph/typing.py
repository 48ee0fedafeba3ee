"""Shared type aliases and protocols (optional-dependency flags live in :mod:`lightgraph.utilities.imports`)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from lightgraph.utilities.imports import WITH_TORCH_SPARSE, require_torch_sparse

#: Node-level tensors are indexed by local node id: inner nodes first, then halo nodes.
NodeTensor = Tensor


@runtime_checkable
class HaloExchange(Protocol):
    """What partition-aware layers need from an exchanger (:class:`~lightgraph.distributed.HaloExchanger`).

    Lower floors (``lightgraph.nn``) depend on this protocol, not on the runtime class.
    An exchanger may also offer ``start_halo(x, plan, layer)`` (see
    :meth:`lightgraph.distributed.HaloExchanger.start_halo`), which the split path of
    :class:`~lightgraph.nn.PartitionAware` uses to transform every row once; without it
    :class:`~lightgraph.nn.PartitionedGraph` falls back to :meth:`start` / :meth:`finish`.
    """

    def __call__(self, x: Tensor, plan: Any, stage: str = "train", layer: str = "layer") -> Tensor:
        """``[x; halo rows]``: this rank's rows followed by the rows fetched from the peers."""
        ...

    def overlaps(self, stage: str) -> bool:
        """Whether layers should compute central rows while the exchange is in flight."""
        ...

    def start(self, x: Tensor, plan: Any, layer: str) -> Any:
        """Start the forward exchange of ``x`` (overlap mode); returns a handle."""
        ...

    def finish(self, handle: Any, x: Tensor, plan: Any) -> Tensor:
        """``[x; halo rows]`` once the exchange started by :meth:`start` is done."""
        ...

    def set_aggregation(self, layer: str, aggregation: str) -> None:
        """Record how ``layer`` weighs halo rows (``"gcn"``, ``"mean"`` or ``"sum"``)."""
        ...


@runtime_checkable
class EmbeddingSyncTarget(Protocol):
    """What :class:`~lightgraph.callbacks.ModalitySync` drives: a LightningModule co-training an LM and a GNN.

    UniTG's Modality Collaborator (M. Zhang, *Algorithm and System Co-design for Efficient
    and Scalable Graph Learning*, PhD thesis, NTU 2026, §5.3.3) copies the LM's node
    embeddings into the GNN's input store every :math:`\\Delta t` GNN epochs, and chooses
    :math:`\\Delta t` from the GNN training loss.
    """

    def sync_embeddings(self) -> float:
        """Copy the LM's current node embeddings into the GNN's input store.

        Returns the fraction of nodes encoded so far (in ``[0, 1]``). Under several
        processes this is a collective: every rank calls it at the same point.
        """
        ...

    @property
    def epoch_gnn_loss(self) -> float | None:
        """The GNN training loss of the last finished epoch, identical on every rank (``None`` before any)."""
        ...


@runtime_checkable
class RandomStateful(Protocol):
    """An object that owns random generators a resumed run must continue exactly.

    The state may also hold what the object carries from one epoch into the next that is
    neither in the weights nor in a callback's state, since it must be saved and restored
    per rank at the same points as the generators: the
    :class:`~lightgraph.distributed.HaloExchanger` adds the rows of its asynchronous
    pipeline (the previous epoch's halo rows and gradients, which an asynchronous epoch
    computes with) under ``"buffers"``.

    :class:`~lightgraph.callbacks.RandomStateCheckpoint` saves :meth:`rng_state` of every
    such object it finds (the strategy's runtime in the
    :class:`~lightgraph.distributed.ParallelContext`, the strategy, every submodule of the
    LightningModule, the DataModule, the training and validation dataloaders and their
    samplers) in each checkpoint, per rank, and hands it back to :meth:`set_rng_state` on
    resume. Implemented by
    :class:`~lightgraph.distributed.HaloExchanger` (quantisation noise, and the halo rows
    and gradients it carries into the next epoch),
    :class:`~lightgraph.distributed.SequenceParallel` (quantisation noise),
    :class:`~lightgraph.distributed.FlowPipeline` (its stages' random stream),
    :class:`~lightgraph.data.loader.UniformNeighborSampler` (neighbour draws) and
    :class:`~lightgraph.data.loader.minibatch.NeighborSamplingLoader` (its position, which seeds its
    draws; Lightning saves it for training loaders only).

    Randomness derived from counters that are already checkpointed (a seed and the
    epoch, or a step counter kept in a persistent buffer) needs no such state.
    """

    def rng_state(self) -> dict[str, Any]:
        """The state of every running generator the object owns (tensors, ints, strings,
        lists, ``None`` -- what :func:`torch.load` reads with ``weights_only=True``), and
        any carried state as above; a generator not created yet is ``None``.
        :func:`lightgraph.utilities.generator_state` writes one generator. Called on every
        rank when a checkpoint is saved."""
        ...

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (a :meth:`rng_state` of the same kind of object).

        A generator that is created lazily is created from the saved state; ``None``
        returns it to its not-yet-created (freshly seeded) state.
        """
        ...


__all__ = [
    "EmbeddingSyncTarget",
    "HaloExchange",
    "NodeTensor",
    "RandomStateful",
    "WITH_TORCH_SPARSE",
    "require_torch_sparse",
]
