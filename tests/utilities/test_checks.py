"""Every check in lightgraph.utilities.checks: it accepts valid values (returning them,
normalised) and rejects invalid ones with a message naming the component, the argument,
the allowed values and the value received."""

from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest
import torch

from lightgraph.utilities import checks
from lightgraph.utilities.checks import (
    BITS,
    check_bias_table,
    check_bits,
    check_bool,
    check_callable,
    check_choice,
    check_divisible,
    check_edge_ids,
    check_fanouts,
    check_fraction,
    check_graph_edge_index,
    check_index_tensor,
    check_int,
    check_non_empty_str,
    check_non_negative,
    check_optional_int,
    check_positive,
    check_probability,
    check_qkv,
    check_rate,
    check_type,
    describe,
)

OWNER = "Component"


def rejects(error, call, *args, name: str, allowed: str, got: str, **kwargs) -> str:
    """``call(OWNER, ...)`` raises ``error`` whose message names all four parts.

    ``allowed`` is a regular expression (so wording variants can be listed); ``got`` is
    the received value as the message prints it (usually ``repr``).
    """
    with pytest.raises(error) as info:
        call(OWNER, *args, **kwargs)
    msg = str(info.value)
    assert msg.startswith(f"{OWNER}: expected "), msg
    assert f"`{name}`" in msg, msg
    assert re.search(allowed, msg), (allowed, msg)
    assert got in msg, (got, msg)
    return msg


POSITIVE_INT = r"to be (a positive integer|an integer >= 1)"


# ----------------------------------------------------------------------------- scalars
def test_check_int() -> None:
    assert check_int(OWNER, "n", 5) == 5 and type(check_int(OWNER, "n", 5)) is int
    assert check_int(OWNER, "n", 0, low=0) == 0
    assert check_int(OWNER, "n", 3, low=1, high=3) == 3
    for bad in (0, -2, True, 2.0, "3", None):
        rejects(ValueError, check_int, "n", bad, name="n", allowed=POSITIVE_INT, got=repr(bad))
    rejects(ValueError, check_int, "n", -1, low=0, name="n", allowed="an integer >= 0", got="-1")
    rejects(ValueError, check_int, "n", 6, low=1, high=5, name="n", allowed=r"in \[1, 5\]", got="6")


def test_check_optional_int() -> None:
    assert check_optional_int(OWNER, "k", None) is None
    assert check_optional_int(OWNER, "k", 4) == 4
    assert check_optional_int(OWNER, "k", 0, low=0) == 0
    for bad in (0, True, 1.5, "2"):
        rejects(
            ValueError,
            check_optional_int,
            "k",
            bad,
            name="k",
            allowed="None or an integer >= 1",
            got=repr(bad),
        )


def test_check_positive() -> None:
    assert check_positive(OWNER, "lr", 1) == 1.0 and isinstance(
        check_positive(OWNER, "lr", 1), float
    )
    assert check_positive(OWNER, "lr", 1e-9) == 1e-9
    for bad in (0, -1.0, True, "1", None, math.nan):
        rejects(ValueError, check_positive, "lr", bad, name="lr", allowed="> 0", got=repr(bad))


def test_check_non_negative() -> None:
    assert check_non_negative(OWNER, "decay", 0) == 0.0
    assert check_non_negative(OWNER, "decay", 2.5) == 2.5
    for bad in (-0.1, True, "0", math.nan):
        rejects(
            ValueError,
            check_non_negative,
            "decay",
            bad,
            name="decay",
            allowed=">= 0",
            got=repr(bad),
        )


def test_check_rate() -> None:
    assert check_rate(OWNER, "dropout", 0) == 0.0
    assert check_rate(OWNER, "dropout", 0.99) == 0.99
    for bad in (1.0, -0.1, True, None):
        rejects(
            ValueError,
            check_rate,
            "dropout",
            bad,
            name="dropout",
            allowed=r"in \[0, 1\)",
            got=repr(bad),
        )


def test_check_probability() -> None:
    assert check_probability(OWNER, "p", 1.0) == 1.0
    assert check_probability(OWNER, "p", 0.25) == 0.25
    assert check_probability(OWNER, "p", None, optional=True) is None
    for bad in (0, 1.5, True, None):
        rejects(
            ValueError, check_probability, "p", bad, name="p", allowed=r"in \(0, 1\]", got=repr(bad)
        )
    rejects(
        ValueError,
        check_probability,
        "p",
        0.0,
        optional=True,
        name="p",
        allowed=r"in \(0, 1\] or None",
        got="0.0",
    )


def test_check_fraction() -> None:
    assert check_fraction(OWNER, "density", 0) == 0.0
    assert check_fraction(OWNER, "density", 1) == 1.0
    for bad in (1.01, -0.01, True, "0.5"):
        rejects(
            ValueError,
            check_fraction,
            "density",
            bad,
            name="density",
            allowed=r"in \[0, 1\]",
            got=repr(bad),
        )


def test_check_bool() -> None:
    assert check_bool(OWNER, "flag", True) is True
    assert check_bool(OWNER, "flag", False) is False
    for bad in (1, 0, "yes", None):
        rejects(
            ValueError,
            check_bool,
            "flag",
            bad,
            name="flag",
            allowed=r"one of \(True, False\)",
            got=repr(bad),
        )


def test_check_choice() -> None:
    assert check_choice(OWNER, "mode", "a", ("a", "b")) == "a"
    assert check_choice(OWNER, "k", 2, [1, 2]) == 2
    for bad, allowed in (("c", ("a", "b")), (True, (1, 2)), ([1], ("a",)), (None, ("a",))):
        rejects(
            ValueError,
            check_choice,
            "mode",
            bad,
            allowed,
            name="mode",
            allowed=re.escape(f"one of {tuple(allowed)}"),
            got=repr(bad),
        )


def test_check_bits() -> None:
    assert BITS == (1, 2, 4, 8)
    for b in BITS:
        assert check_bits(OWNER, "bits", b) == b
    assert check_bits(OWNER, "bits", 2, allowed=(2, 4)) == 2
    for bad in (3, 16, 0, True, 4.0):
        rejects(
            ValueError,
            check_bits,
            "bits",
            bad,
            name="bits",
            allowed=r"one of \(1, 2, 4, 8\)",
            got=repr(bad),
        )
    rejects(
        ValueError,
        lambda owner, name, value: check_bits(owner, name, value, allowed=(2, 4)),
        "bits",
        8,
        name="bits",
        allowed=r"one of \(2, 4\)",
        got="8",
    )


def test_check_non_empty_str() -> None:
    assert check_non_empty_str(OWNER, "metric", "val_acc") == "val_acc"
    for bad in ("", 3, None):
        rejects(
            ValueError,
            check_non_empty_str,
            "metric",
            bad,
            name="metric",
            allowed="a non-empty string",
            got=repr(bad),
        )


def test_check_divisible() -> None:
    assert check_divisible(OWNER, "hidden_channels", 10, "heads", 5) == 10
    msg = rejects(
        ValueError,
        check_divisible,
        "hidden_channels",
        10,
        "heads",
        4,
        name="hidden_channels",
        allowed=re.escape("pick `heads` in (1, 2, 5, 10)"),
        got="(10)",
    )
    assert "`heads` (4)" in msg
    rejects(
        ValueError,
        check_divisible,
        "hidden_channels",
        10,
        "heads",
        0,
        name="heads",
        allowed=POSITIVE_INT,
        got="0",
    )
    rejects(
        ValueError,
        check_divisible,
        "hidden_channels",
        -10,
        "heads",
        2,
        name="hidden_channels",
        allowed=POSITIVE_INT,
        got="-10",
    )
    # Attention heads of a hidden size: every divisor is accepted, the message lists them.
    for heads in (1, 2, 4, 8):
        assert check_divisible(OWNER, "channels", 8, "heads", heads) == 8
    msg = rejects(
        ValueError,
        check_divisible,
        "channels",
        8,
        "heads",
        3,
        name="heads",
        allowed=re.escape("pick `heads` in (1, 2, 4, 8)"),
        got="`heads` (3)",
    )
    assert "`channels` (8)" in msg
    rejects(
        ValueError,
        check_divisible,
        "channels",
        8,
        "heads",
        16,
        name="heads",
        allowed=re.escape("(1, 2, 4, 8)"),
        got="`heads` (16)",
    )
    for bad in (True, 2.0):
        rejects(
            ValueError,
            check_divisible,
            "channels",
            8,
            "heads",
            bad,
            name="heads",
            allowed=POSITIVE_INT,
            got=repr(bad),
        )


# ------------------------------------------------------------------------------- types
def test_check_type() -> None:
    from lightgraph.data import GraphDataset

    assert check_type(OWNER, "x", 3, int) == 3
    assert check_type(OWNER, "x", "s", (int, str)) == "s"
    rejects(
        TypeError, check_type, "x", 1.5, int, name="x", allowed="to be a int", got="but got float"
    )
    rejects(
        TypeError,
        check_type,
        "x",
        None,
        (int, str),
        name="x",
        allowed="int or str",
        got="but got NoneType",
    )
    msg = rejects(
        TypeError,
        check_type,
        "dataset",
        "Reddit",
        GraphDataset,
        hint="e.g. SyntheticGraph",
        name="dataset",
        allowed="GraphDataset",
        got="but got str",
    )
    assert "(e.g. SyntheticGraph)" in msg


def test_check_callable() -> None:
    assert check_callable(OWNER, "act", torch.relu) is torch.relu
    assert check_callable(OWNER, "act", int) is int
    msg = rejects(
        TypeError,
        check_callable,
        "act",
        "relu",
        hint="e.g. torch.relu",
        name="act",
        allowed="a callable",
        got="but got str",
    )
    assert "(e.g. torch.relu)" in msg


# ----------------------------------------------------------------------------- tensors
def test_describe() -> None:
    assert describe(torch.zeros(2, 3)) == "shape (2, 3), dtype torch.float32"
    assert describe([1, 2]) == "[1, 2]" and describe("a") == "'a'"


def test_check_qkv() -> None:
    q, k = torch.randn(5, 2, 4), torch.randn(5, 2, 4)
    assert check_qkv(OWNER, q, k, torch.randn(5, 2, 3)) == (5, 2, 4)  # v has its own D
    rejects(ValueError, check_qkv, q[0], k, k, name="q", allowed=r"\[S, H, D\]", got="(2, 4)")
    rejects(ValueError, check_qkv, q, "k", k, name="k", allowed=r"\[S, H, D\]", got="str")
    rejects(
        ValueError, check_qkv, q, k[:4], k, name="k", allowed="the same shape", got="k (4, 2, 4)"
    )
    rejects(
        ValueError, check_qkv, q, k, k[:, :1], name="v", allowed=r"\[S, H, D_v\]", got="v (5, 1, 4)"
    )
    rejects(
        ValueError,
        check_qkv,
        q,
        k.double(),
        k,
        name="k",
        allowed="one floating dtype",
        got="torch.float64",
    )
    ints = torch.ones(5, 2, 4, dtype=torch.long)
    rejects(
        ValueError,
        check_qkv,
        ints,
        ints,
        ints,
        name="q",
        allowed="one floating dtype",
        got="torch.int64",
    )
    meta = torch.empty(5, 2, 4, device="meta")
    rejects(ValueError, check_qkv, q, meta, k, name="k", allowed="on one device", got="meta")


def test_check_graph_edge_index() -> None:
    ei = torch.tensor([[0, 1, 2], [2, 0, 1]])
    assert torch.equal(check_graph_edge_index(OWNER, "edge_index", ei, 3), ei)
    as_long = check_graph_edge_index(OWNER, "edge_index", ei.int(), 3)
    assert as_long.dtype == torch.long and torch.equal(as_long, ei)
    empty = torch.empty(2, 0, dtype=torch.long)
    assert check_graph_edge_index(OWNER, "edge_index", empty, 0).shape == (2, 0)
    shape = r"an integer (torch\.Tensor|tensor) of shape \[2, num_edges\]"
    rejects(
        TypeError,
        check_graph_edge_index,
        "edge_index",
        [[0], [1]],
        3,
        name="edge_index",
        allowed=shape,
        got="but got list",
    )
    rejects(
        ValueError,
        check_graph_edge_index,
        "edge_index",
        ei[0],
        3,
        name="edge_index",
        allowed=shape,
        got="shape (3,)",
    )
    rejects(
        ValueError,
        check_graph_edge_index,
        "edge_index",
        ei.float(),
        3,
        name="edge_index",
        allowed=shape,
        got="dtype torch.float32",
    )
    rejects(
        ValueError,
        check_graph_edge_index,
        "edge_index",
        ei > 0,
        3,
        name="edge_index",
        allowed=shape,
        got="dtype torch.bool",
    )
    for bad, found in ((ei + 1, "[1, 3]"), (ei - 1, "[-1, 1]")):
        rejects(
            ValueError,
            check_graph_edge_index,
            "edge_index",
            bad,
            3,
            name="edge_index",
            allowed=re.escape("to lie in [0, 2] (num_nodes = 3)"),
            got=f"found values in {found}",
        )


def test_check_graph_edge_index_of_a_token_pattern() -> None:
    # Attention kernels: only torch.long passes (no copy), the ids are token ids.
    ei = torch.tensor([[0, 1, 2], [2, 0, 1]])
    assert check_graph_edge_index(OWNER, "edge_index", ei, 3, require_long=True) is ei
    empty = torch.empty(2, 0, dtype=torch.long)
    assert check_graph_edge_index(OWNER, "edge_index", empty, 0, unit="token").numel() == 0
    strict = r"a (torch\.Tensor|tensor) of shape \[2, num_edges\] and dtype torch\.long"
    for bad, got in ((ei.int(), "dtype torch.int32"), (ei[0], "shape (3,)")):
        rejects(
            ValueError,
            check_graph_edge_index,
            "edge_index",
            bad,
            3,
            require_long=True,
            name="edge_index",
            allowed=strict,
            got=got,
        )
    rejects(
        TypeError,
        check_graph_edge_index,
        "edge_index",
        [[0], [1]],
        3,
        require_long=True,
        name="edge_index",
        allowed=strict,
        got="but got list",
    )
    for bad, found in ((ei, "[0, 2]"), (ei - 1, "[-1, 1]")):
        msg = rejects(
            ValueError,
            check_graph_edge_index,
            "edge_index",
            bad,
            2,
            unit="token",
            require_long=True,
            name="edge_index",
            allowed=re.escape("token ids in `edge_index` to lie in [0, 1] (num_tokens = 2)"),
            got=f"found values in {found}",
        )
        assert "node" not in msg


def test_check_bias_table() -> None:
    q = torch.randn(5, 2, 4)
    table = torch.zeros(7, 2)
    assert check_bias_table(OWNER, table, 2, q) is table
    rejects(
        ValueError,
        check_bias_table,
        torch.zeros(7, 3),
        2,
        q,
        name="bias_table",
        allowed=re.escape("[num_buckets, H=2]"),
        got="(7, 3)",
    )
    rejects(
        ValueError,
        check_bias_table,
        torch.zeros(7),
        2,
        q,
        name="bias_table",
        allowed=re.escape("[num_buckets, H=2]"),
        got="(7,)",
    )
    rejects(
        ValueError,
        check_bias_table,
        table.double(),
        2,
        q,
        name="bias_table",
        allowed=re.escape("(torch.float32, cpu)"),
        got="(torch.float64, cpu)",
    )


def test_check_edge_ids() -> None:
    src, dst = np.array([0, 1, 2]), np.array([1, 9, -1])
    with pytest.raises(
        ValueError, match=r"^own: .*\[0, 4\] \(num_nodes = 5\) .*\[-1, 9\]; edge 11 is \(1, 9\)"
    ):
        check_edge_ids("own", 10, src, dst, 5)
    check_edge_ids("own", 0, src[:1], dst[:1], 5)
    check_edge_ids("own", 0, src[:0], dst[:0], 5)


def test_check_index_tensor() -> None:
    assert check_index_tensor(OWNER, "nodes", torch.tensor([3, 1], dtype=torch.int32)).dtype == (
        torch.long
    )
    for bad in (torch.tensor([1.0]), torch.tensor([True]), torch.zeros(2, 2, dtype=torch.long)):
        with pytest.raises(ValueError, match=r"`nodes` to be a 1-D integer tensor of node ids"):
            check_index_tensor(OWNER, "nodes", bad)
    with pytest.raises(TypeError, match=r"`nodes`"):
        check_index_tensor(OWNER, "nodes", [1, 2])


# ------------------------------------------------------------------------- coverage
def test_check_fanouts() -> None:
    assert check_fanouts(OWNER, [15, 10, 5]) == [15, 10, 5]
    assert check_fanouts(OWNER, (-1, 3)) == [-1, 3]
    for bad in ([], "15,10", 15, None):
        with pytest.raises(ValueError, match="`fanouts` to be a non-empty list"):
            check_fanouts(OWNER, bad)
    for bad, shown in (([15, 0], "0"), ([-2], "-2"), ([2.5], "2.5"), ([True], "True")):
        with pytest.raises(
            ValueError, match=rf"`eval_fanouts\[\d\]` to be a positive integer or -1 .* got {shown}"
        ):
            check_fanouts(OWNER, bad, "eval_fanouts")


def test_every_check_is_covered_here() -> None:
    public = {
        name
        for name, fn in inspect.getmembers(checks, inspect.isfunction)
        if fn.__module__ == checks.__name__ and not name.startswith("_")
    }
    covered = {
        name[len("test_") :]
        for name, fn in globals().items()
        if name.startswith("test_") and callable(fn)
    }
    missing = sorted(public - covered)
    assert not missing, (
        f"lightgraph.utilities.checks gained {missing} without a test here: add a "
        f"`test_<name>` that accepts valid values and rejects invalid ones."
    )
