"""Rows of any nodes from the ranks that own them: scoring node pairs across partitions.

In partition-parallel full-graph training each rank computes the embeddings of its own
(inner) nodes. A link-prediction pair ``(u, v)`` -- positive or negative -- may join nodes
of two ranks: :func:`fetch_rows` brings every row a rank needs from its owner (one request
round and one row round of ``all_to_all_single``, through
:func:`~lightgraph.functional.halo_exchange.halo_exchange`), and its backward sends each
row's gradient back to the owner, so the pair is scored -- and trained -- exactly as one
process would. :func:`partitioned_pair_scores` does it for a batch of pairs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor

from lightgraph.functional.halo_exchange import halo_exchange


def _rank_world(group: dist.ProcessGroup | None) -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def fetch_rows(
    h_inner: Tensor,
    ids: Tensor,
    owner: Tensor,
    owner_local: Tensor,
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    """The rows of the global nodes ``ids`` (``[n] -> [n, D]``), wherever they are owned.

    Args:
        h_inner: ``[num_inner, D]`` the embeddings of this rank's own nodes.
        ids: global node ids (any, repeats allowed).
        owner: ``[N]`` owning rank of every global node (the same on every rank).
        owner_local: ``[N]`` row of every global node in its owner's ``h_inner``.
        group: the process group of the partitions (default: the world).

    Every rank of ``group`` must call it (the collectives are matched), with its own
    ``ids``; a rank that needs nothing still answers the others' requests. Gradients of the
    returned rows reach the owners' ``h_inner``.
    """
    rank, world = _rank_world(group)
    unique, inverse = torch.unique(ids.long(), return_inverse=True)
    if world == 1:
        return h_inner.index_select(0, owner_local[unique].to(h_inner.device))[
            inverse.to(h_inner.device)
        ]
    who = owner[unique].long()
    remote = who != rank
    # Remote ids grouped by owner (ascending rank), and how many go to each. What crosses
    # the collectives lives on the rows' device (NCCL takes no host tensors).
    device = h_inner.device
    order = torch.argsort(who[remote], stable=True)
    wanted = unique[remote][order].to(device)
    want_counts = torch.bincount(who[remote], minlength=world).to(device)
    asked_counts = torch.empty(world, dtype=torch.long, device=device)
    dist.all_to_all_single(asked_counts, want_counts, group=group)
    asked = torch.empty(int(asked_counts.sum()), dtype=torch.long, device=device)
    dist.all_to_all_single(
        asked,
        wanted.contiguous(),
        output_split_sizes=asked_counts.tolist(),
        input_split_sizes=want_counts.tolist(),
        group=group,
    )
    # Rows I send are the ones asked of me; rows I receive come in the order I asked.
    send_index = owner_local[asked.cpu()].to(device)
    rows = halo_exchange(h_inner, send_index, asked_counts.tolist(), want_counts.tolist(), group)
    slot = torch.empty(unique.numel(), dtype=torch.long)
    slot[~remote] = owner_local[unique[~remote]]
    remote_slots = torch.empty(int(remote.sum()), dtype=torch.long)
    remote_slots[order] = h_inner.size(0) + torch.arange(wanted.numel())
    slot[remote] = remote_slots
    return rows.index_select(0, slot.to(device))[inverse.to(device)]


def partitioned_pair_scores(
    h_inner: Tensor,
    src: Tensor,
    dst: Tensor,
    score: Callable[[Tensor, Tensor], Tensor],
    owner: Tensor,
    owner_local: Tensor,
    group: dist.ProcessGroup | None = None,
) -> Tensor:
    """``score(h[src], h[dst])`` for global pairs whose endpoints may live on any rank.

    ``src`` and ``dst`` broadcast as the decoder does (e.g. ``[B, 1]`` sources against
    ``[B, k]`` negative destinations); one exchange brings all the rows the pairs need.
    """
    src_b, dst_b = torch.broadcast_tensors(src, dst)
    both = torch.cat([src_b.reshape(-1), dst_b.reshape(-1)])
    rows = fetch_rows(h_inner, both, owner, owner_local, group)
    n = src_b.numel()
    h_src = rows[:n].view(*src_b.shape, -1)
    h_dst = rows[n:].view(*dst_b.shape, -1)
    return score(h_src, h_dst)
