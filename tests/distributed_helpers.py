"""Run a function on several gloo ranks (forked or spawned processes) with a hard timeout."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import traceback
from collections.abc import Callable
from typing import Any, Literal

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
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    context: Literal["fork", "spawn"] = "fork",
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks.

    ``context="fork"`` (fast) forks this process; ``"spawn"`` starts fresh interpreters,
    which ranks that use CUDA need when this process has initialised it (a forked child
    cannot use CUDA then). Under spawn ``fn`` and ``args`` must be picklable (``fn``
    defined at module level).

    Returns the per-rank results; raises if a rank fails or the run exceeds ``timeout``.
    """
    if context not in ("fork", "spawn"):
        raise ValueError(
            f"run_distributed: expected `context` in ('fork', 'spawn') but got {context!r}."
        )
    ctx = mp.get_context(context)
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
        results, errors = [], []
        for r in range(world_size):
            path = os.path.join(tmp, f"rank{r}.pt")
            if not os.path.exists(path):
                errors.append(f"rank {r} exited with code {procs[r].exitcode} without a result")
                continue
            payload = torch.load(path, weights_only=False)
            if not payload["ok"]:
                errors.append(f"rank {r} failed:\n{payload['error']}")
            results.append(payload["result"] if payload["ok"] else None)
        if errors:  # every rank's: the first to fail is not always the first rank
            raise RuntimeError("\n".join(errors))
        return results
