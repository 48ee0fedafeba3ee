"""Byte counters for boundary exchanges."""

from __future__ import annotations

from collections import defaultdict

DIRECTIONS = ("forward", "backward")


class ExchangeStats:
    """Counts the exact bytes a rank sends, per stage, layer and direction.

    Keys are ``(stage, layer, direction)`` with ``direction`` one of ``"forward"``
    (embeddings) or ``"backward"`` (embedding gradients). Only payload bytes that leave
    the rank are counted: rows a rank would "send" to itself are never materialised.
    Components that send side information (e.g. quantisation scales) record it under
    their own ``kind`` so data and overhead can be reported apart.
    """

    def __init__(self) -> None:
        self._bytes: dict[tuple[str, str, str, str], int] = defaultdict(int)
        self._seconds: dict[tuple[str, str], float] = defaultdict(float)

    def record_time(self, stage: str, what: str, seconds: float) -> None:
        """Accumulate wall time spent on ``what`` (e.g. ``"quantize"``, ``"dequantize"``)."""
        self._seconds[(stage, what)] += float(seconds)

    def seconds(self, stage: str, what: str | None = None) -> float:
        return sum(
            v for (s, w), v in self._seconds.items() if s == stage and (what is None or w == what)
        )

    def record(
        self, stage: str, layer: str, direction: str, num_bytes: int, kind: str = "data"
    ) -> None:
        if direction not in DIRECTIONS:
            raise ValueError(
                f"ExchangeStats.record: expected `direction` in {DIRECTIONS} but got {direction!r}."
            )
        self._bytes[(stage, layer, direction, kind)] += int(num_bytes)

    def total(
        self, stage: str | None = None, direction: str | None = None, kind: str | None = None
    ) -> int:
        return sum(
            v
            for (s, _, d, k), v in self._bytes.items()
            if (stage is None or s == stage)
            and (direction is None or d == direction)
            and (kind is None or k == kind)
        )

    def by_layer(self, stage: str) -> dict[tuple[str, str, str], int]:
        """``{(layer, direction, kind): bytes}`` for one stage."""
        return {
            (layer, d, k): v for (s, layer, d, k), v in sorted(self._bytes.items()) if s == stage
        }

    def reset(self, stage: str | None = None) -> None:
        if stage is None:
            self._bytes.clear()
            self._seconds.clear()
        else:
            for key in [k for k in self._bytes if k[0] == stage]:
                del self._bytes[key]
            for tkey in [k for k in self._seconds if k[0] == stage]:
                del self._seconds[tkey]

    def state_dict(self) -> dict[str, int]:
        return {"|".join(k): v for k, v in self._bytes.items()}

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(total={self.total()} bytes)"
