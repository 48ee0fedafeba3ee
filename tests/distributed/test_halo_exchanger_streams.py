"""CUDA: quantisation and communication on the exchanger's side stream (AdaQP §3.2)."""

from __future__ import annotations

import pytest
import torch

import lightgraph.distributed.halo_exchanger as hx
from lightgraph.distributed import HaloExchanger
from lightgraph.functional.halo_exchange import PendingBytes
from lightgraph.functional.quantize import pack_rows, unpack_rows
from lightgraph.quant import FixedBits

needs_cuda = pytest.mark.cuda


class _Loopback:
    """``start_exchange_bytes`` to oneself: what one rank of a world of one would receive."""

    def __init__(self) -> None:
        self.streams: list[torch.cuda.Stream] = []

    def __call__(self, send, send_counts, group=None, transport="all_to_all", executor=None):  # noqa: ANN001, ANN204
        self.streams.append(torch.cuda.current_stream(send.device))
        return PendingBytes(_Done(send.clone()), [int(c) for c in send_counts])


class _Done:
    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    def wait(self) -> torch.Tensor:
        return self.value


@needs_cuda
def test_side_stream_quantisation_is_ordered_with_the_compute_stream(monkeypatch) -> None:  # noqa: ANN001
    loop = _Loopback()
    monkeypatch.setattr(hx, "start_exchange_bytes", loop)
    ex = HaloExchanger(policy=FixedBits(4), seed=3)
    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev)
    bits = torch.full((512,), 4, dtype=torch.long, device=dev)
    for _ in range(3):
        # a long kernel queue on the compute stream produces the rows right before `_start`
        big = a
        for _ in range(8):
            big = big @ a / 2048
        rows = big[:512, :64].contiguous()
        pending = ex._start(rows, [512], [512], bits, bits, "l", "forward")
        del rows, big  # the side stream must still read the rows' memory safely
        got = pending.wait() * 1.0  # used on the compute stream at once
        # the side stream, not the caller's, issued the transfer
        assert loop.streams[-1] != torch.cuda.current_stream(dev)
    torch.cuda.synchronize()
    # reference: the same three messages quantised synchronously on the compute stream
    gen = torch.Generator(device=dev).manual_seed(3 * 1_000_003)
    big = a
    for _ in range(8):
        big = big @ a / 2048
    rows = big[:512, :64].contiguous()
    for _ in range(2):
        pack_rows(rows, bits, gen)  # the first two draws
    ref = unpack_rows(pack_rows(rows, bits, gen), bits, 64, rows.dtype)
    torch.testing.assert_close(got, ref, atol=0, rtol=0)
    assert ex.stats.total("train", kind="params") >= 3 * 4 * 512


def test_cpu_rows_never_touch_a_stream(monkeypatch) -> None:  # noqa: ANN001
    def loopback(send, counts, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        return PendingBytes(_Done(send.clone()), [int(c) for c in counts])

    monkeypatch.setattr(hx, "start_exchange_bytes", loopback)
    ex = HaloExchanger(policy=FixedBits(8), seed=2)
    rows = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    bits = torch.full((16,), 8, dtype=torch.long)
    pending = ex._start(rows, [16], [16], bits, bits, "l", "forward")
    out = pending.wait()
    assert out.device.type == "cpu" and ex._streams is None
    assert pending.wait() is out  # decoded once
    ref = unpack_rows(
        pack_rows(rows, bits, torch.Generator().manual_seed(2 * 1_000_003)), bits, 8, rows.dtype
    )
    torch.testing.assert_close(out, ref, atol=0, rtol=0)
