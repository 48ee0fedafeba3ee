from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from lightgraph.functional import ExchangeStats, exchange_rows, halo_exchange
from tests.distributed_helpers import run_distributed


def _plan(rank: int, world: int) -> tuple[torch.Tensor, list[int], list[int]]:
    """Rank r owns 5 rows; it sends rows [0, 1, 2] to every peer (so one row goes to
    several peers and must collect several gradients) and receives uneven counts."""
    send_counts = [0 if q == rank else 1 + (rank + q) % 3 for q in range(world)]
    send_index = torch.cat([torch.arange(c) for c in send_counts]).long()
    recv_counts = [0 if q == rank else 1 + (rank + q) % 3 for q in range(world)]
    return send_index, send_counts, recv_counts


def _exchange(rank: int, world: int, transport: str) -> dict:
    x = (torch.arange(5 * 3, dtype=torch.float64).view(5, 3) + 100 * rank).requires_grad_()
    send_index, send_counts, recv_counts = _plan(rank, world)
    stats = ExchangeStats()
    out = halo_exchange(
        x, send_index, send_counts, recv_counts, transport=transport, stats=stats, layer="l0"
    )
    weights = torch.arange(out.numel(), dtype=torch.float64).view_as(out) + 1000 * rank
    (out * weights).sum().backward()
    raw = exchange_rows(
        torch.full((sum(send_counts), 2), float(rank)),
        send_counts,
        recv_counts,
        transport=transport,
    )
    return {"out": out.detach(), "grad": x.grad, "stats": stats.by_layer("train"), "raw": raw}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [2, 3, 4])
def test_ring_equals_all_to_all_and_gradients_accumulate(world: int) -> None:
    a2a = run_distributed(_exchange, world, "all_to_all", timeout=100)
    ring = run_distributed(_exchange, world, "ring", timeout=100)
    for r in range(world):
        for key in ("out", "grad", "raw"):
            assert torch.equal(a2a[r][key], ring[r][key])
    # Independent reference: assemble what every rank should receive / accumulate.
    xs = [torch.arange(15, dtype=torch.float64).view(5, 3) + 100 * r for r in range(world)]
    plans = [_plan(r, world) for r in range(world)]
    for r in range(world):
        halo = [xs[q][: plans[q][1][r]] for q in range(world)]  # q sends its first rows to r
        torch.testing.assert_close(a2a[r]["out"], torch.cat([xs[r], *halo]))
        expected = torch.arange(15, dtype=torch.float64).view(5, 3) + 1000 * r  # own rows' weights
        for q in range(world):
            if q == r:
                continue
            # rows r sent to q appear in q's output after q's inner rows, in rank order
            offset = 5 + sum(plans[q][2][:r])
            count = plans[r][1][q]
            w_q = (
                torch.arange(a2a[q]["out"].numel(), dtype=torch.float64).view_as(a2a[q]["out"])
                + 1000 * q
            )
            expected[:count] += w_q[offset : offset + count]
        torch.testing.assert_close(a2a[r]["grad"], expected)
        # exact bytes: float64 rows of width 3, forward sends, backward returns halo rows
        sent = sum(plans[r][1]) * 3 * 8
        returned = sum(plans[r][2]) * 3 * 8
        assert a2a[r]["stats"] == {
            ("l0", "forward", "data"): sent,
            ("l0", "backward", "data"): returned,
        }
        assert torch.equal(
            a2a[r]["raw"],
            torch.cat([torch.full((plans[r][2][q], 2), float(q)) for q in range(world)]),
        )


def test_single_process_is_identity_and_halos_need_a_group() -> None:
    x = torch.randn(4, 2)
    assert halo_exchange(x, torch.empty(0, dtype=torch.long), [0], [0]) is x
    with pytest.raises(RuntimeError, match="torch.distributed is not initialised"):
        halo_exchange(x, torch.tensor([0]), [0, 1], [0, 1])


def test_unknown_transport() -> None:
    with pytest.raises(
        ValueError, match="`transport` to be one of \\('all_to_all', 'ring'\\) but got 'smoke'"
    ):
        halo_exchange(
            torch.randn(2, 2), torch.empty(0, dtype=torch.long), [0], [0], transport="smoke"
        )


def _mismatch(rank: int, world: int) -> str:
    try:
        halo_exchange(torch.randn(2, 2), torch.empty(0, dtype=torch.long), [0, 0, 0], [0, 0, 0])
    except ValueError as err:
        return str(err)
    return ""


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_counts_must_match_world_size() -> None:
    msgs = run_distributed(_mismatch, 2, timeout=50)
    assert all("one send and one receive count per rank (2)" in m for m in msgs)
    assert dist.is_initialized() is False
