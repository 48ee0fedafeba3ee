"""Collectives shared by the runtime, written once against torch.distributed's stable API."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from torch import Tensor


def all_gather_rows(out: Tensor, rows: Tensor, group: Any = None) -> Tensor:
    """Gather every rank's ``rows`` (the same shape on every rank) into ``out``, rank ``r``'s
    at ``out[r * len(rows) : (r + 1) * len(rows)]``; returns ``out``.

    The list form of ``all_gather`` writing into views of ``out`` (contiguous slices along
    dim 0): the same bytes as ``all_gather_into_tensor``, which torch deprecates, on gloo
    and NCCL alike, without a copy.
    """
    world = dist.get_world_size(group)
    dist.all_gather(list(out.chunk(world)), rows.contiguous(), group=group)
    return out
