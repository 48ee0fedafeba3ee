"""Run a function on several gloo ranks (forked processes) with a hard timeout."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


def _worker(
    fn: Callable[..., Any], rank: int, world_size: int, init_file: str, out_dir: str, args: tuple
) -> None:
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
        )
        result = fn(rank, world_size, *args)
        dist.barrier()
        torch.save({"ok": True, "result": result}, os.path.join(out_dir, f"rank{rank}.pt"))
    except BaseException:  # noqa: BLE001 - reported to the parent
        torch.save(
            {"ok": False, "error": traceback.format_exc()}, os.path.join(out_dir, f"rank{rank}.pt")
        )
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    os._exit(0)


def run_distributed(
    fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 120.0
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` forked gloo ranks.

    Returns the per-rank results; raises if a rank fails or the run exceeds ``timeout``.
    """
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "store")
        procs = [
            ctx.Process(target=_worker, args=(fn, r, world_size, init_file, tmp, args), daemon=True)
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
        if hung:
            raise TimeoutError(f"ranks {hung} of {world_size} did not finish within {timeout} s")
        results = []
        for r in range(world_size):
            path = os.path.join(tmp, f"rank{r}.pt")
            if not os.path.exists(path):
                raise RuntimeError(
                    f"rank {r} exited with code {procs[r].exitcode} without a result"
                )
            payload = torch.load(path, weights_only=False)
            if not payload["ok"]:
                raise RuntimeError(f"rank {r} failed:\n{payload['error']}")
            results.append(payload["result"])
        return results
