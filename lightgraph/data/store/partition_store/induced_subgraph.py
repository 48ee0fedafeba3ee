"""A macro-batch as :meth:`~lightgraph.data.PartitionStore.read_macro_batch` returns it."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor
from torch_geometric.data import Data


@dataclass
class MacroBatch:
    """One HANOI macro-batch: the induced subgraph on some partitions plus every hub.

    Node order: the nodes of ``parts`` (partition by partition in the given order, store
    order inside each), then the hubs not inside those partitions (by original id).

    Attributes:
        x: ``[n, F]`` float32 features.
        y: ``[n]`` long labels, or ``[n, C]`` float32 for multi-label graphs.
        edge_index: ``[2, m]`` local ids, source to destination: every edge of the graph
            between two nodes of the macro-batch, once.
        node_ids: ``[n]`` original node ids.
        store_ids: ``[n]`` store ids.
        is_hub: ``[n]`` whether the node is a hub.
        train_mask: ``[n]`` training targets; never a hub.
        val_mask, test_mask: ``[n]`` evaluation targets among the partitions' nodes
            (hubs appended from other partitions are ``False``, so every node is
            evaluated with its own partition only).
        parts: the partitions, in the order given.
        num_part_nodes: nodes of ``parts`` (the first rows).
    """

    x: Tensor
    y: Tensor
    edge_index: Tensor
    node_ids: Tensor
    store_ids: Tensor
    is_hub: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    parts: tuple[int, ...]
    num_part_nodes: int

    @property
    def num_nodes(self) -> int:
        return int(self.x.size(0))

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.size(1))

    def to_data(self) -> Data:
        """A ``torch_geometric.data.Data``; ``n_id`` holds the original node ids."""
        return Data(
            x=self.x,
            y=self.y,
            edge_index=self.edge_index,
            train_mask=self.train_mask,
            val_mask=self.val_mask,
            test_mask=self.test_mask,
            n_id=self.node_ids,
            store_id=self.store_ids,
            is_hub=self.is_hub,
            num_nodes=self.num_nodes,
        )
