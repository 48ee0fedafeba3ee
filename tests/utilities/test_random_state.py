"""lightgraph.utilities.random_state: generator and global states round-trip through a
checkpoint file (loaded with ``weights_only=True``) and continue the same draws."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch

from lightgraph.utilities.random_state import (
    check_rng_state,
    generator_state,
    global_rng_state,
    restore_generator,
    restore_global_rng_state,
    seed_global_rngs,
)


def _through_file(obj):
    """What a checkpoint does to ``obj``: ``torch.save`` then a ``weights_only`` load."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _draws() -> tuple:
    return (
        torch.rand(4),
        torch.randn(3),
        np.random.rand(4),
        np.random.randn(2),  # a second normal is cached inside NumPy's state
        random.random(),
        random.getrandbits(40),
    )


def _assert_same_draws(a: tuple, b: tuple) -> None:
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3])
    assert a[4:] == b[4:]


def test_generator_state_round_trips_in_place_and_into_a_new_generator() -> None:
    gen = torch.Generator().manual_seed(7)
    torch.rand(10, generator=gen)
    state = _through_file(generator_state(gen))
    expected = torch.rand(5, generator=gen)
    # In place: the same object (a DataLoader holding it follows).
    assert restore_generator(state, gen) is gen
    assert torch.equal(torch.rand(5, generator=gen), expected)
    # Into a new generator when there is none yet (lazily created generators).
    fresh = restore_generator(state)
    assert isinstance(fresh, torch.Generator) and fresh is not gen
    assert torch.equal(torch.rand(5, generator=fresh), expected)


def test_generator_state_none_stands_for_not_created() -> None:
    assert generator_state(None) is None
    assert restore_generator(None, torch.Generator()) is None


def test_global_state_round_trips_through_a_checkpoint_file() -> None:
    seed_global_rngs(3)
    _draws()  # the states are mid-stream, not freshly seeded
    np.random.randn()  # leaves a cached Gaussian in NumPy's state
    state = _through_file(global_rng_state())
    expected = _draws()
    seed_global_rngs(99)  # perturb every generator
    _draws()
    restore_global_rng_state(state)
    _assert_same_draws(_draws(), expected)


def test_perturbing_without_restoring_changes_the_draws() -> None:
    """The round trip above can fail: the perturbation really moves every generator."""
    seed_global_rngs(3)
    expected = _draws()
    seed_global_rngs(3)
    seed_global_rngs(99)
    other = _draws()
    assert not torch.equal(other[0], expected[0])
    assert not np.array_equal(other[2], expected[2])
    assert other[4] != expected[4]


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ([1, 2], TypeError, "expected `state` to be None or a generator state"),
        ({"device": "cpu"}, TypeError, r"but got \['device'\]"),
        (
            {"device": "cpu", "state": torch.zeros(4)},
            TypeError,
            "a device name \\(str\\) and a 1-D uint8 tensor",
        ),
    ],
)
def test_restore_generator_rejects_bad_states(state, error, match) -> None:
    with pytest.raises(error, match=match):
        restore_generator(state, owner="Thing", name="state")


def test_generator_state_rejects_a_non_generator() -> None:
    with pytest.raises(TypeError, match="expected `generator` to be a torch.Generator or None"):
        generator_state(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda s: s.pop("numpy"), r"keys \['torch', 'cuda', 'numpy', 'python'\]"),
        (lambda s: s.update(torch=[1, 2]), "the 'torch' state to be a uint8 tensor but got list"),
        (lambda s: s.update(numpy={"key": 1}), "the 'numpy' state to be a mapping with a 'key'"),
        (lambda s: s.update(python=(3, ())), "the 'python' state to be the 3-tuple"),
    ],
)
def test_restore_global_state_rejects_bad_states(mutate, match) -> None:
    state = global_rng_state()
    mutate(state)
    with pytest.raises(TypeError, match=match):
        restore_global_rng_state(state, owner="Thing")


def test_restore_global_state_rejects_a_non_mapping() -> None:
    with pytest.raises(TypeError, match="Thing: expected a global random state with keys"):
        restore_global_rng_state([1], owner="Thing")  # type: ignore[arg-type]


def test_check_rng_state_names_the_owner_keys_and_source() -> None:
    assert check_rng_state("Thing", {"generator": None}, ("generator",), "Thing.rng_state()")
    with pytest.raises(
        TypeError,
        match=r"Thing: expected `state` to be a mapping with the keys \['generator'\] \(from "
        r"Thing.rng_state\(\)\) but got \['other'\]",
    ):
        check_rng_state("Thing", {"other": None}, ("generator",), "Thing.rng_state()")


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_seed_global_rngs_rejects_bad_seeds(seed) -> None:
    with pytest.raises(ValueError, match="expected `seed` >= 0"):
        seed_global_rngs(seed)
