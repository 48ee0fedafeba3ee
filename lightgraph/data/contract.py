"""What a data module declares to the model it feeds: one typed hand-off, no probing.

:class:`~lightgraph.distributed.context.ParallelContext` is what a strategy hands a module;
:class:`DataContract` is what a data module hands it. A module reads the contract of the
Trainer's data module through :func:`data_contract`; a data module that declares nothing
(any plain ``LightningDataModule``, or none at all) yields the empty contract, under which a
module trains from its batches alone. Neither side reads the other's attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lightgraph.data.batch import FullGraphBatch

__all__ = ["DataContract", "DataContractProvider", "HistoryTable", "data_contract"]


class HistoryTable(Protocol):
    """The model's historical-embedding table as a data module reads it (pull rows)."""

    def pull(self, layer: int, nodes: Any) -> Any: ...


@dataclass(frozen=True)
class DataContract:
    """What the model needs of the data, declared once by the data module.

    Attributes:
        history_layers: hidden layers whose halo rows come from historical embeddings
            (JOESTAR-II, PBS with ``history=True``); ``0`` for none.
        num_store_nodes: rows of the history table (the store's node count); ``0`` when
            ``history_layers`` is ``0``.
        eval_mode: how the module evaluates: ``"layerwise"`` (exact inference over
            :attr:`full_graph`), ``"sampled"``, or ``None`` when the data module does not
            say.
        full_graph: the whole graph for exact layer-wise inference and history refreshes
            (``None``: the data module cannot give it).
        attach_history: called by the module with the history table it owns (created or
            restored at train start), so the data module can pull halo rows when it moves
            a macro-batch to the device; ``None`` when no history is used.
    """

    history_layers: int = 0
    num_store_nodes: int = 0
    eval_mode: str | None = None
    full_graph: Callable[[], FullGraphBatch] | None = None
    attach_history: Callable[[HistoryTable | None], None] | None = None

    def __post_init__(self) -> None:
        if self.history_layers < 0:
            raise ValueError(
                f"DataContract: expected `history_layers` >= 0 but got {self.history_layers}."
            )
        if self.history_layers and (self.num_store_nodes <= 0 or self.attach_history is None):
            raise ValueError(
                "DataContract: `history_layers` > 0 needs `num_store_nodes` > 0 and "
                f"`attach_history`; got num_store_nodes={self.num_store_nodes} and "
                f"attach_history={self.attach_history!r}."
            )

    def require_full_graph(self, owner: str, why: str) -> FullGraphBatch:
        """The whole graph, or a RuntimeError telling ``owner``'s user which data module has it."""
        if self.full_graph is None:
            raise RuntimeError(
                f"{owner}: {why} needs the whole graph from the data module, but the "
                "Trainer's data module declares none; train with a data module that gives "
                "it (MultistageDataModule, MacroBatchDataModule, NeighborSamplingDataModule)."
            )
        return self.full_graph()


_EMPTY = DataContract()


class DataContractProvider:
    """Mixin for data modules that declare a :class:`DataContract` to the model."""

    def data_contract(self) -> DataContract:
        """This data module's contract (override; the default declares nothing)."""
        return _EMPTY


def data_contract(trainer: Any) -> DataContract:
    """The contract of ``trainer``'s data module, empty without one or for a plain module."""
    datamodule = None if trainer is None else trainer.datamodule
    if isinstance(datamodule, DataContractProvider):
        return datamodule.data_contract()
    return _EMPTY
