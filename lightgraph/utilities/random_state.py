"""Save and restore random generators as checkpoint-friendly dictionaries.

Every state here is made of tensors, integers, floats, strings, tuples and ``None`` only,
so a checkpoint holding it loads with ``torch.load(..., weights_only=True)`` (Lightning's
default when it resumes from a file). :class:`~lightgraph.callbacks.RandomStateCheckpoint`
builds on these functions; objects that own generators use :func:`generator_state` and
:func:`restore_generator` in their ``rng_state`` / ``set_rng_state``
(:class:`~lightgraph.typing.RandomStateful`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

_GLOBAL_KEYS: tuple[str, ...] = ("torch", "cuda", "numpy", "python")


def generator_state(generator: torch.Generator | None) -> dict[str, Any] | None:
    """``{"device": "cpu", "state": <uint8 tensor>}`` of ``generator``; ``None`` for ``None``.

    ``None`` stands for a generator that was not created yet (lazily created generators).
    """
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator_state: expected `generator` to be a torch.Generator or None but got "
            f"{type(generator).__name__}."
        )
    return {"device": str(generator.device), "state": generator.get_state()}


def check_rng_state(owner: str, state: Any, keys: Sequence[str], source: str) -> Mapping[str, Any]:
    """``state`` if it is a mapping with exactly ``keys``, else a TypeError naming ``source``.

    For ``set_rng_state`` implementations: ``check_rng_state("HaloExchanger.set_rng_state",
    state, ("generator",), "HaloExchanger.rng_state()")``.
    """
    if not isinstance(state, Mapping) or set(state) != set(keys):
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise TypeError(
            f"{owner}: expected `state` to be a mapping with the keys {sorted(keys)} (from "
            f"{source}) but got {got}."
        )
    return state


def _check_generator_state(owner: str, name: str, state: Any) -> tuple[torch.device, torch.Tensor]:
    if not isinstance(state, Mapping) or set(state) != {"device", "state"}:
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise TypeError(
            f"{owner}: expected `{name}` to be None or a generator state "
            f"{{'device': str, 'state': uint8 tensor}} (from lightgraph.utilities."
            f"generator_state) but got {got}."
        )
    device, tensor = state["device"], state["state"]
    if not isinstance(device, str) or not (
        isinstance(tensor, torch.Tensor) and tensor.dtype == torch.uint8 and tensor.dim() == 1
    ):
        raise TypeError(
            f"{owner}: expected `{name}` to hold a device name (str) and a 1-D uint8 tensor but "
            f"got device={device!r} and state of type {type(tensor).__name__}."
        )
    return torch.device(device), tensor.cpu()


def restore_generator(
    state: Mapping[str, Any] | None,
    generator: torch.Generator | None = None,
    owner: str = "restore_generator",
    name: str = "state",
) -> torch.Generator | None:
    """The generator continuing from ``state`` (a :func:`generator_state`); ``None`` for ``None``.

    When ``generator`` is given and lives on the saved device type, its state is set in
    place and it is returned: objects holding a reference to it (a ``DataLoader``, a
    sampler) follow. Otherwise a new generator is created on the saved device.

    Args:
        state: a :func:`generator_state`, or ``None`` (a generator not created yet).
        generator: an existing generator to set in place.
        owner, name: who restores what, for error messages.
    """
    if state is None:
        return None
    device, tensor = _check_generator_state(owner, name, state)
    if generator is not None and generator.device.type == device.type:
        generator.set_state(tensor)
        return generator
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"{owner}: `{name}` is the state of a generator on {device} but CUDA is not "
            "available here; resume on a machine with the same kind of device."
        )
    restored = torch.Generator(device=device)
    restored.set_state(tensor)
    return restored


def global_rng_state() -> dict[str, Any]:
    """The process-wide generators: torch CPU, CUDA (``None`` unless CUDA is initialised),
    NumPy's global ``RandomState`` and Python's :mod:`random`."""
    numpy_state = np.random.get_state(legacy=False)
    cuda = (
        [s.cpu() for s in torch.cuda.get_rng_state_all()]
        if torch.cuda.is_available() and torch.cuda.is_initialized()
        else None
    )
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "numpy": {
            "bit_generator": str(numpy_state["bit_generator"]),
            "key": torch.from_numpy(np.asarray(numpy_state["state"]["key"], dtype=np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "python": random.getstate(),
    }


def restore_global_rng_state(
    state: Mapping[str, Any], owner: str = "restore_global_rng_state"
) -> None:
    """Set the process-wide generators to ``state`` (a :func:`global_rng_state`).

    CUDA states are restored when the state has them and CUDA is available; a state
    saved without CUDA leaves the CUDA generators as they are.
    """
    if not isinstance(state, Mapping) or set(state) != set(_GLOBAL_KEYS):
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise TypeError(
            f"{owner}: expected a global random state with keys {list(_GLOBAL_KEYS)} (from "
            f"lightgraph.utilities.global_rng_state) but got {got}."
        )
    cpu = state["torch"]
    if not (isinstance(cpu, torch.Tensor) and cpu.dtype == torch.uint8):
        raise TypeError(
            f"{owner}: expected the 'torch' state to be a uint8 tensor but got "
            f"{type(cpu).__name__}."
        )
    numpy_state = state["numpy"]
    if not isinstance(numpy_state, Mapping) or not isinstance(numpy_state.get("key"), torch.Tensor):
        raise TypeError(
            f"{owner}: expected the 'numpy' state to be a mapping with a 'key' tensor but got "
            f"{type(numpy_state).__name__}."
        )
    python_state = state["python"]
    if not (isinstance(python_state, tuple | list) and len(python_state) == 3):
        raise TypeError(
            f"{owner}: expected the 'python' state to be the 3-tuple of random.getstate() but "
            f"got {type(python_state).__name__}."
        )
    torch.set_rng_state(cpu.cpu())
    cuda = state["cuda"]
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
    np.random.set_state(
        {
            "bit_generator": numpy_state["bit_generator"],
            "state": {
                "key": numpy_state["key"].numpy().astype(np.uint32),
                "pos": int(numpy_state["pos"]),
            },
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        }
    )
    version, internal, gauss = python_state
    random.setstate((int(version), tuple(int(v) for v in internal), gauss))


def seed_global_rngs(seed: int) -> None:
    """Seed torch (CPU and every CUDA device), NumPy's global generator and :mod:`random`."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed_global_rngs: expected `seed` >= 0 but got {seed!r}.")
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def make_generator(seed: int, *keys: Any) -> torch.Generator:
    """A CPU generator seeded from ``(seed, *keys)`` by a stable hash (not Python's ``hash``)."""
    digest = hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))
