"""UniTG's embedding store: the LM's node embeddings as the GNN reads them.

:class:`UniTGEmbeddingStore` is the store part of :class:`~lightgraph.models.UniTGModule`
(a mixin: it reads the module's graph, LM and settings). The LM writes embeddings into a
per-rank cache as it encodes nodes; :meth:`~UniTGEmbeddingStore.sync_embeddings` (the
Modality Collaborator's sync) merges the ranks' caches into the store, optionally kept only
if the GNN's validation accuracy does not drop; :meth:`~UniTGEmbeddingStore.gnn_input`
blends the projected embeddings into the GNN's input features.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

__all__ = ["UniTGEmbeddingStore"]


class UniTGEmbeddingStore:
    """The embedding store of :class:`~lightgraph.models.UniTGModule`."""

    # Provided by the module.
    _graph: Data | None
    lm: Any
    lm_proj: Any

    def _allocate_store(self, num_nodes: int) -> None:
        """(Re)create the per-node buffers of the embedding store and the LM cache."""
        assert self.lm is not None
        hidden = self.lm._hidden_size()
        n = num_nodes
        self.register_buffer("store", torch.zeros(n, hidden))
        self.register_buffer("encoded", torch.zeros(n, dtype=torch.bool))
        self.register_buffer("first_encoded", torch.zeros(n, dtype=torch.long))
        self.register_buffer("store_exit", torch.zeros(n, dtype=torch.long))
        self.register_buffer("lm_cache", torch.zeros(n, hidden))
        self.register_buffer("lm_cache_exit", torch.zeros(n, dtype=torch.long))
        self.register_buffer("lm_stamp", torch.full((n,), -1, dtype=torch.long))

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # The store's size is the graph's, known once data is set up: a state saved after
        # set-up (a checkpoint, a worker's weights) sizes the buffers before they load.
        key = prefix + "store"
        if self.lm is not None and key in state_dict:
            n = int(state_dict[key].size(0))
            if self.store.size(0) != n:
                self._allocate_store(n)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def sync_embeddings(self) -> float:
        """Copy the LM's cached embeddings into the store (the Modality Collaborator's sync).

        A collective under several processes: every rank's cache is merged (for each node
        the embedding with the latest stamp wins). A node encoded for the first time enters
        the GNN input with weight 0, ramped up over ``sync_ramp_epochs`` epochs. With
        ``sync_check=True`` (collaborative schedule) the sync is kept only if the GNN's
        validation accuracy does not drop; otherwise the store is restored and the cache
        (which keeps the embeddings) is tried again at the next sync. Returns the encoded
        fraction.
        """
        if self.lm is None:
            raise RuntimeError("UniTGModule.sync_embeddings: there is no LM (lm=None).")
        start = time.perf_counter()
        try:
            return self._sync(check=self.sync_check and self.schedule == "collaborative")
        finally:
            self.totals["sync_time"] += time.perf_counter() - start

    @torch.no_grad()
    def _sync(self, check: bool) -> float:
        before = self._gnn_val_accuracy() if check else 0.0
        saved = (
            self.store.clone(),
            self.store_exit.clone(),
            self.encoded.clone(),
            self.first_encoded.clone(),
        )
        self._copy_cache()
        if check:
            after = self._gnn_val_accuracy()
            kept = after >= before
            self.sync_checks.append((int(self.current_epoch), before, after, kept))
            if not kept:
                self.store.copy_(saved[0])
                self.store_exit.copy_(saved[1])
                self.encoded.copy_(saved[2])
                self.first_encoded.copy_(saved[3])
        self.encoded_fraction = float(self.encoded.float().mean())
        return self.encoded_fraction

    @torch.no_grad()
    def _copy_cache(self) -> None:
        _, world = self._rank_world()
        stamp = self.lm_stamp
        cache = self.lm_cache
        exits = self.lm_cache_exit
        if world > 1:
            latest = stamp.clone()
            dist.all_reduce(latest, op=dist.ReduceOp.MAX)
            own = (stamp == latest) & (latest >= 0)
            cache = cache * own.unsqueeze(1).to(cache.dtype)
            dist.all_reduce(cache)
            exits = exits * own.long()
            dist.all_reduce(exits)
            stamp = latest
        seen = stamp >= 0
        # First encoded now: blended in from the next epoch on (see `_blend`).
        self.first_encoded[seen & ~self.encoded] = self.current_epoch + 1
        self.store[seen] = cache[seen]
        self.store_exit[seen] = exits[seen]
        self.encoded |= seen

    @torch.no_grad()
    def encode_all(self) -> None:
        """Encode every node with the current LM (at its group's exit) into the store."""
        assert self._graph is not None
        n = int(self._graph.num_nodes)
        rank, world = self._rank_world()
        nodes = torch.arange(n)[rank::world]
        for chunk in nodes.split(max(1, self.lm_batch_size * 8)):
            self._encode(chunk, 2 * (0 if self._lm_plan is None else self._lm_plan.total_jobs) + 1)
        # Unconditional (not checked): the sequential baseline's one fill, and the store's
        # refresh by the finished LM, whose embeddings are the ones the GNN must end on.
        self._sync(check=False)

    def gnn_input(self) -> Tensor:
        """``[N, in_channels]``: LM embeddings (projected) where encoded, features elsewhere."""
        assert self._graph is not None
        x = self._graph.x
        if self.lm_proj is None:
            return x
        # Each encoded row goes through its own exit's map only (one pass over the rows).
        out = x.clone()
        for group, proj in enumerate(self.lm_proj):
            rows = (self.encoded & (self.store_exit == group)).nonzero().view(-1)
            if rows.numel():
                alpha = self._blend(rows).unsqueeze(1)
                out = out.index_put((rows,), (1 - alpha) * x[rows] + alpha * proj(self.store[rows]))
        return out

    def _blend(self, rows: Tensor) -> Tensor:
        """Weight of the LM embedding in the GNN input of ``rows``: 0 at the sync that first
        encodes a node, then ``+1/sync_ramp_epochs`` per GNN epoch, up to 1."""
        if self.sync_ramp_epochs == 0 or self.schedule == "sequential":
            return torch.ones(rows.numel(), device=rows.device)
        since = self.current_epoch - self.first_encoded[rows] + 1
        return (since.float() / self.sync_ramp_epochs).clamp(0.0, 1.0)
