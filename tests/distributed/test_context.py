"""ParallelContext, ParallelContextHolder and parallel_context: the typed hand-off from a
lightgraph strategy to the module it trains (no process group needed)."""

from __future__ import annotations

import dataclasses

import pytest
import torch.nn as nn

from lightgraph.distributed import (
    HaloExchanger,
    ParallelContext,
    ParallelContextHolder,
    SequenceParallel,
    parallel_context,
)


class Holder(ParallelContextHolder, nn.Module):
    """A module that accepts a strategy's runtime (the way NodeClassifier does)."""


def test_empty_context_holds_nothing_and_is_immutable() -> None:
    context = ParallelContext()
    assert context.halo_exchanger is None and context.sequence_parallel is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.halo_exchanger = HaloExchanger()  # type: ignore[misc]


def test_require_returns_the_runtime_that_is_there() -> None:
    exchanger, sp = HaloExchanger(), SequenceParallel()
    context = ParallelContext(halo_exchanger=exchanger, sequence_parallel=sp)
    assert context.require_halo_exchanger("MyModule") is exchanger
    assert context.require_sequence_parallel("MyModule") is sp


def test_require_names_the_owner_and_the_strategy_to_use() -> None:
    context = ParallelContext()
    with pytest.raises(RuntimeError, match="^MyModule needs a halo exchanger") as info:
        context.require_halo_exchanger("MyModule")
    assert "strategy='boundary_exchange'" in str(info.value)
    with pytest.raises(RuntimeError, match="^MyCallback needs sequence parallelism") as info:
        context.require_sequence_parallel("MyCallback")
    assert "strategy='graph_parallel'" in str(info.value)
    # One runtime present does not stand in for the other.
    only_sp = ParallelContext(sequence_parallel=SequenceParallel())
    with pytest.raises(RuntimeError, match="needs a halo exchanger"):
        only_sp.require_halo_exchanger("M")


def test_holder_starts_empty_then_attaches_and_detaches() -> None:
    module = Holder()
    before = module.parallel_context
    assert isinstance(before, ParallelContext)
    assert before.halo_exchanger is None and before.sequence_parallel is None
    context = ParallelContext(halo_exchanger=HaloExchanger())
    module.attach_parallel_context(context)
    assert module.parallel_context is context
    assert parallel_context(module) is context
    module.attach_parallel_context(None)  # what the strategy does in teardown
    after = module.parallel_context
    assert after is not context and after.halo_exchanger is None


def test_holders_do_not_share_an_attached_context() -> None:
    a, b = Holder(), Holder()
    context = ParallelContext(sequence_parallel=SequenceParallel())
    a.attach_parallel_context(context)
    assert a.parallel_context is context
    assert b.parallel_context.sequence_parallel is None


def test_attach_rejects_anything_but_a_context() -> None:
    module = Holder()
    with pytest.raises(
        TypeError, match=r"^Holder\.attach_parallel_context: .* but got HaloExchanger"
    ):
        module.attach_parallel_context(HaloExchanger())  # type: ignore[arg-type]
    assert module.parallel_context.halo_exchanger is None  # nothing was attached


def test_accessor_gives_an_empty_context_to_modules_that_take_none() -> None:
    for module in (nn.Linear(2, 2), object(), None):
        context = parallel_context(module)
        assert isinstance(context, ParallelContext)
        assert context.halo_exchanger is None and context.sequence_parallel is None
