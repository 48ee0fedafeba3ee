"""Profile the links between ranks for AdaQP's communication cost model (collective)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from lightgraph.quant.cost_model import DEFAULT_PROFILE_SIZES, CommCostModel, fit_cost_model

log = logging.getLogger(__name__)

CostModelSpec = CommCostModel | Mapping[str, Any] | str | os.PathLike[str] | None


def profile_links(
    group: dist.ProcessGroup | None = None,
    sizes_bytes: Sequence[int] = DEFAULT_PROFILE_SIZES,
    repeats: int = 3,
    warmup: int = 1,
    device: torch.device | str | None = None,
) -> CommCostModel:
    """AdaQP §4.2: profile θ and γ of every ordered rank pair with real transfers.

    Collective: every rank of ``group`` must call it with the same arguments. The
    transfers follow the ring all-to-all of AdaQP Fig. 8 so that links are loaded as
    in training: in round ``r`` every rank sends a ``size``-byte ``uint8`` buffer to
    ``rank + r`` and receives one from ``rank - r`` (``isend``/``irecv``). A sample of
    pair ``(src, dst)`` is the time at ``dst`` from leaving a barrier to the receive's
    completion; ``warmup`` unrecorded and ``repeats`` recorded transfers are made per
    round and size, and the median of the recorded ones is kept. The samples are
    summed over ranks (each pair is timed by one receiver) with an ``all_reduce``;
    rank 0 fits :func:`fit_cost_model` per pair and broadcasts θ and γ, so every rank
    returns the same model.

    Args:
        group: the process group (default: the world). Ranks in the model are ranks
            in this group.
        sizes_bytes: message sizes in bytes, at least two distinct positive values.
            Cover the sizes training sends (one pair's codes of one layer).
        repeats: recorded transfers per round and size (>= 1).
        warmup: unrecorded transfers before them (>= 0).
        device: where the buffers live; default ``cuda:<current>`` for NCCL, else CPU.

    Returns:
        The fitted model (``world_size`` of the group; a single rank gets a 1×1 model).

    Raises:
        RuntimeError: if ``torch.distributed`` is not initialised.
        ValueError: on invalid ``sizes_bytes``, ``repeats`` or ``warmup``.
    """
    owner = "profile_links"
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"{owner}: torch.distributed is not initialised; call dist.init_process_group first."
        )
    sizes = list(sizes_bytes)
    if any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in sizes) or (
        len(set(sizes)) < 2
    ):
        raise ValueError(
            f"{owner}: expected `sizes_bytes` to hold at least 2 distinct positive integers "
            f"but got {tuple(sizes)!r}."
        )
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"{owner}: expected `repeats` to be an integer >= 1 but got {repeats!r}.")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"{owner}: expected `warmup` to be an integer >= 0 but got {warmup!r}.")
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if world == 1:
        return CommCostModel(np.zeros((1, 1)), np.zeros((1, 1)))
    if device is None:
        backend = str(dist.get_backend(group)).lower()
        device = (
            torch.device("cuda", torch.cuda.current_device())
            if "nccl" in backend
            else torch.device("cpu")
        )
    device = torch.device(device)

    def global_rank(r: int) -> int:
        return r if group is None else dist.get_global_rank(group, r)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    send_buf = torch.zeros(max(sizes), dtype=torch.uint8, device=device)
    recv_buf = torch.empty(max(sizes), dtype=torch.uint8, device=device)
    samples = torch.zeros(world, world, len(sizes), dtype=torch.float64, device=device)
    for r in range(1, world):
        dst, src = (rank + r) % world, (rank - r) % world
        for si, size in enumerate(sizes):
            recorded: list[float] = []
            for it in range(warmup + repeats):
                sync()
                dist.barrier(group=group)
                start = time.perf_counter()
                ops = [
                    dist.P2POp(dist.irecv, recv_buf[:size], global_rank(src), group),
                    dist.P2POp(dist.isend, send_buf[:size], global_rank(dst), group),
                ]
                reqs = dist.batch_isend_irecv(ops)
                reqs[0].wait()
                sync()
                elapsed = time.perf_counter() - start
                for req in reqs[1:]:
                    req.wait()
                if it >= warmup:
                    recorded.append(elapsed)
            samples[src, rank, si] = float(np.median(recorded))
    dist.all_reduce(samples, group=group)
    theta = torch.zeros(world, world, dtype=torch.float64, device=device)
    gamma = torch.zeros(world, world, dtype=torch.float64, device=device)
    if rank == 0:
        table = samples.cpu().numpy()
        for s in range(world):
            for d in range(world):
                if s != d:
                    th, ga = fit_cost_model(sizes, table[s, d])
                    theta[s, d], gamma[s, d] = th, ga
    dist.broadcast(theta, src=global_rank(0), group=group)
    dist.broadcast(gamma, src=global_rank(0), group=group)
    return CommCostModel(theta.cpu().numpy(), gamma.cpu().numpy())


def resolve_cost_model(
    spec: CostModelSpec,
    group: dist.ProcessGroup | None = None,
    cache_path: str | os.PathLike[str] | None = None,
    sizes_bytes: Sequence[int] = DEFAULT_PROFILE_SIZES,
) -> CommCostModel:
    """The cost model a configuration asks for (collective when it profiles).

    Args:
        spec: a :class:`~lightgraph.quant.CommCostModel` (used as is), a mapping
            ``{theta, gamma}`` (seconds per bit, seconds; scalars or matrices), a JSON path
            written by :meth:`CommCostModel.save <lightgraph.quant.CommCostModel.save>`, or
            ``None``: profile the links with :func:`profile_links`, reusing ``cache_path``
            when it holds a model for the same world size and writing it otherwise (rank 0).
        group: the exchange's process group.
        cache_path: where a profiled model is cached (``None``: not cached).
        sizes_bytes: message sizes timed when profiling.

    Raises:
        ValueError: if the model's world size differs from the group's.
    """
    world = dist.get_world_size(group)
    if isinstance(spec, CommCostModel):
        model = spec
    elif isinstance(spec, Mapping):
        model = CommCostModel.from_config(
            spec.get("theta"), spec.get("gamma", 0.0), world_size=world
        )
    elif isinstance(spec, str | os.PathLike):
        model = CommCostModel.load(spec)
    else:
        cached = None
        if cache_path is not None and os.path.exists(cache_path):
            cached = CommCostModel.load(cache_path)
            if cached.world_size != world:
                cached = None
        if cached is not None:
            model = cached
        else:
            tic = time.perf_counter()
            model = profile_links(group, sizes_bytes=sizes_bytes)
            log.info("resolve_cost_model: profiled %s in %.2fs", model, time.perf_counter() - tic)
            if cache_path is not None and dist.get_rank(group) == 0:
                os.makedirs(os.path.dirname(os.path.abspath(cache_path)), exist_ok=True)
                model.save(cache_path)
    if model.world_size != world:
        raise ValueError(
            f"resolve_cost_model: the cost model is for {model.world_size} ranks but the exchange "
            f"has {world}."
        )
    return model
