"""raw_attention: the same function as dense_attention, argument checks."""

from __future__ import annotations

import pytest
import torch

from lightgraph.functional.attention import dense_attention, raw_attention
from tests.functional.attention.common import DT, assert_close, bad_input, qkv


def test_dense_kinds_agree_without_mask() -> None:
    q, k, v = qkv(11, 2, 4)
    bias = torch.randn(2, 11, 11, dtype=DT)
    assert_close(dense_attention(q, k, v), raw_attention(q, k, v))
    assert_close(dense_attention(q, k, v, bias=bias), raw_attention(q, k, v, bias=bias))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda q, k, v, ei: raw_attention(q[0], k, v), "`q` of shape"),
        (lambda q, k, v, ei: raw_attention(q, k, v, bias=torch.ones(4, 4)), "`bias` of shape"),
    ],
)
def test_bad_input(call, match) -> None:
    bad_input(call, match)
