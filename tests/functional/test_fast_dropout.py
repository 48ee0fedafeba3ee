"""lightgraph.functional.dropout: torch's dropout semantics with a one-pass CPU mask.

References: the binomial law of the number of dropped elements (and of every keep pattern
of the three elements sharing one random word), torch's kept value ``x * (1 / (1 - p))``
computed as torch computes it, and autograd through an explicit mask product."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lightgraph.functional import dropout
from lightgraph.functional import fast_dropout as fd
from lightgraph.nn import Dropout

needs_kernels = pytest.mark.skipif(fd._kernels() is None, reason="numba is not installed")


def _x(n: int = 30_001, dtype=torch.float32) -> torch.Tensor:
    x = torch.randn(n, generator=torch.Generator().manual_seed(0), dtype=dtype)
    return torch.where(x == 0, torch.ones_like(x), x)  # no zero inputs: zeros mean dropped


def _z(count: float, n: int, q: float) -> float:
    return (count - n * q) / math.sqrt(n * q * (1 - q))


@needs_kernels
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 1 / 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_drop_rate_and_kept_values(p, dtype):
    x = _x(dtype=dtype)
    torch.manual_seed(1)
    y = dropout(x, p)
    dropped = y == 0
    assert abs(_z(float(dropped.sum()), x.numel(), p)) < 5
    scale = torch.ones((), dtype=dtype).div_(1 - p)  # as torch's dropout scales
    torch.testing.assert_close(y[~dropped], x[~dropped] * scale, rtol=0, atol=0)
    assert y.dtype == dtype and y.shape == x.shape


@needs_kernels
def test_the_three_lanes_of_a_word_are_independent():
    """Elements 3w, 3w+1, 3w+2 read one random word: each of the 8 keep patterns must
    appear with its product probability (binomial |z| < 5 for every pattern)."""
    p, words = 0.3, 100_000
    torch.manual_seed(3)
    kept = (dropout(torch.ones(3 * words), p) != 0).view(words, 3).long()
    pattern = kept[:, 0] * 4 + kept[:, 1] * 2 + kept[:, 2]
    counts = torch.bincount(pattern, minlength=8)
    for code in range(8):
        ones = bin(code).count("1")
        q = (1 - p) ** ones * p ** (3 - ones)
        assert abs(_z(float(counts[code]), words, q)) < 5, (code, int(counts[code]))
    # and consecutive words are not correlated: element 3w+2 vs 3w+3
    a, b = kept[:-1, 2], kept[1:, 0]
    both = float((a & b).sum())
    assert abs(_z(both, words - 1, (1 - p) ** 2)) < 5


@needs_kernels
def test_gradient_is_the_same_mask_and_scale():
    x = _x(1_000, torch.float64).view(100, 10).requires_grad_()
    w = torch.randn(100, 10, dtype=torch.float64)
    torch.manual_seed(4)
    y = dropout(x, 0.4)
    (grad,) = torch.autograd.grad((y * w).sum(), x)
    mask = (y != 0).double() / 0.6
    torch.testing.assert_close(grad, w * mask)
    # non-contiguous input and gradient
    xt = x.detach().t().requires_grad_()
    torch.manual_seed(4)
    yt = dropout(xt, 0.4)
    (gt,) = torch.autograd.grad((yt * w.t()).sum(), xt)
    torch.testing.assert_close(gt, w.t() * (yt != 0).double() / 0.6)


@needs_kernels
def test_seeded_and_fresh_per_call():
    x = _x(999)
    torch.manual_seed(7)
    a, b = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(7)
    assert torch.equal(dropout(x, 0.5), a)
    assert not torch.equal(a, b)


@needs_kernels
def test_sizes_not_a_multiple_of_three():
    for n in (1, 2, 4, 5):
        torch.manual_seed(0)
        y = dropout(torch.full((n,), 2.0), 0.5)
        assert set(y.tolist()) <= {0.0, 4.0}
    torch.manual_seed(0)
    ys = torch.stack([dropout(torch.ones(2), 0.5) for _ in range(4000)])
    for col in range(2):  # the last word's lanes are used too, at the same rate
        assert abs(_z(float((ys[:, col] == 0).sum()), 4000, 0.5)) < 5


def test_identity_zero_and_fallbacks():
    x = _x(300)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    h = x.to(torch.bfloat16)
    torch.manual_seed(2)
    y = dropout(h, 0.5)  # torch's dropout serves bfloat16
    torch.manual_seed(2)
    assert torch.equal(y, F.dropout(h, 0.5))
    assert dropout(torch.empty(0), 0.5).numel() == 0


@pytest.mark.parametrize("p", [-0.1, 1.5, "0.5", True])
def test_bad_p_is_named(p):
    with pytest.raises(ValueError, match=r"expected `p` in \[0, 1\] but got"):
        dropout(torch.ones(3), p)


def test_module_follows_train_and_eval():
    m = Dropout(0.5)
    x = _x(3_000)
    torch.manual_seed(0)
    y = m(x)
    assert 0 < int((y == 0).sum()) < x.numel()
    m.eval()
    assert m(x) is x


def test_inside_compile_it_is_torchs_dropout():
    """Traced by dynamo it is torch's dropout (a numba call cannot be traced)."""
    calls = []

    def fn(x):
        calls.append(torch.compiler.is_compiling())
        return dropout(x, 0.5)

    compiled = torch.compile(fn, backend="eager")
    y = compiled(torch.ones(64))
    assert set(y.tolist()) <= {0.0, 2.0}
    assert calls and all(calls)
