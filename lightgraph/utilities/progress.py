"""Progress of the passes over the edges inside a named stage (see
:mod:`lightgraph.data.store.stages`): a bar with rate and ETA per pass."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TextIO

__all__ = ["BAR_DELAY", "BAR_MIN_EDGES", "current_stage", "pass_progress"]

#: Passes over fewer edges than this show no progress bar (they take well under a second).
BAR_MIN_EDGES = 1 << 22
#: Seconds a pass runs before its bar appears (shorter passes show nothing).
BAR_DELAY = 1.0


class _Stage:
    def __init__(self, name: str, stream: TextIO) -> None:
        self.name = name
        self.stream = stream
        self.passes = 0


_CURRENT: ContextVar[_Stage | None] = ContextVar("lightgraph_stage", default=None)


@contextlib.contextmanager
def current_stage(name: str, stream: TextIO) -> Iterator[None]:
    """Within the block, passes report their progress as part of stage ``name``."""
    token = _CURRENT.set(_Stage(name, stream))
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def pass_progress(total: int, unit: str = "edges") -> Iterator[Callable[[int], None]]:
    """A progress bar (rate, ETA) for one pass of ``total`` units in the current stage;
    yields ``advance(n)``. Outside a stage, or for passes shorter than
    :data:`BAR_MIN_EDGES`, nothing is shown."""
    stage = _CURRENT.get()
    if stage is None or total < BAR_MIN_EDGES:
        yield lambda n: None
        return
    from tqdm.auto import tqdm

    stage.passes += 1
    tty = getattr(stage.stream, "isatty", lambda: False)()
    bar = tqdm(
        total=total,
        desc=f"{stage.name}: pass {stage.passes}",
        unit=unit,
        unit_scale=True,
        file=stage.stream,
        mininterval=0.5 if tty else 10.0,
        delay=BAR_DELAY,
        leave=not tty,  # a log keeps the final state of each pass (its rate)
        dynamic_ncols=tty,
    )
    try:
        yield bar.update
    finally:
        bar.close()
