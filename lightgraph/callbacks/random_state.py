"""Every rank's random generators in each checkpoint, continued exactly on resume."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import lightning.pytorch as pl
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader
from torch_geometric.loader import LinkLoader, NodeLoader
from typing_extensions import override

from lightgraph.distributed.context import parallel_context
from lightgraph.typing import RandomStateful
from lightgraph.utilities.checks import check_choice
from lightgraph.utilities.random_state import (
    check_rng_state,
    generator_state,
    global_rng_state,
    restore_generator,
    restore_global_rng_state,
    seed_global_rngs,
)

log = logging.getLogger(__name__)

#: What a checkpoint written by a different number of processes does on resume.
ON_WORLD_SIZE_MISMATCH: tuple[str, ...] = ("error", "reseed")

_FORMAT = 1
_LOADER_KEYS: tuple[str, ...] = ("train_dataloader.", "val_dataloader.")


class RandomStateCheckpoint(Callback):
    """Saves every rank's random generators in each checkpoint and continues them on resume.

    Lightning restores weights, optimiser, schedulers, loop progress and callback states
    on ``fit(ckpt_path=...)``, but not random generators: a resumed run draws different
    dropout masks, quantisation noise and shuffles than the uninterrupted run would have.
    With this callback a run resumed from a checkpoint written at an epoch boundary (what
    :class:`~lightning.pytorch.callbacks.ModelCheckpoint` writes by default) equals the
    uninterrupted run bit for bit. See ``docs/resume.md`` for what is and is not exact.

    Saved, for every rank (the callback gathers them, so the checkpoint that rank 0
    writes holds ``{"world_size": W, "ranks": [state_0, ..., state_{W-1}]}``):

    * torch's CPU generator, the CUDA generators (when CUDA is initialised), NumPy's
      global generator and Python's :mod:`random`;
    * every :class:`~lightgraph.typing.RandomStateful` object of the run: the runtime of
      the strategy (the :class:`~lightgraph.distributed.ParallelContext`: the
      :class:`~lightgraph.distributed.HaloExchanger`'s and
      :class:`~lightgraph.distributed.SequenceParallel`'s quantisation noise, the
      :class:`~lightgraph.distributed.FlowPipeline`'s stage stream, and the
      halo rows and gradients the exchanger's asynchronous pipeline carries into the next
      epoch), the strategy itself, every submodule of the LightningModule, the
      DataModule, and the training dataloaders, their samplers and
      :class:`~lightgraph.data.loader.UniformNeighborSampler`\\ s;
    * the ``generator`` of every training ``DataLoader`` (its shuffle and worker seeds).

    Restored: not when the checkpoint is loaded -- start-up (data set-up, model
    configuration) may draw random numbers the uninterrupted run drew before the
    checkpoint -- but at the first ``on_train_epoch_start`` of the resumed run, on every
    rank from its own state. If Lightning built the epoch's training iterator before that
    hook (it does when the loop resumes), the iterator is rebuilt after the restore, so
    its draws (a ``DataLoader``'s base seed) come from the restored generators as in the
    uninterrupted run. Put the callback first in ``callbacks`` when other callbacks draw
    random numbers in ``on_train_epoch_start``. A checkpoint written mid-epoch is
    restored at ``on_train_start`` (best effort: Lightning does not resume a
    ``DataLoader`` mid-epoch exactly).

    Random states are per rank: a checkpoint written by a different number of processes
    raises a ``ValueError`` (``on_world_size_mismatch="error"``, the default) or, with
    ``"reseed"``, is resumed without its random states: every rank seeds torch, NumPy and
    :mod:`random` from ``(seed_everything's seed, resumed epoch, rank)`` and lightgraph's
    own generators start from their seeds, as in a fresh run (reproducible, not equal to
    any uninterrupted run).

    Collective: every rank must save checkpoints together (as ``ModelCheckpoint`` and
    ``Trainer.save_checkpoint`` do), since the states are gathered with
    ``torch.distributed.all_gather_object`` on the default process group.

    Args:
        on_world_size_mismatch: ``"error"`` or ``"reseed"`` (see above).
    """

    def __init__(self, on_world_size_mismatch: Literal["error", "reseed"] = "error") -> None:
        self.on_world_size_mismatch = check_choice(
            "RandomStateCheckpoint",
            "on_world_size_mismatch",
            on_world_size_mismatch,
            ON_WORLD_SIZE_MISMATCH,
        )
        self._trainer: pl.Trainer | None = None
        #: the payload read from a checkpoint, until it is applied
        self._loaded: dict[str, Any] | None = None

    # ------------------------------------------------------------------ Lightning hooks
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._trainer = trainer

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._trainer = None
            self._loaded = None

    @override
    def state_dict(self) -> dict[str, Any]:
        if self._loaded is not None:
            # Loaded but not applied yet (Lightning re-runs the end of the checkpointed
            # epoch first): the run continues from the loaded states, so they are the ones
            # to save.
            return dict(self._loaded)
        trainer = self._trainer
        if trainer is None:
            rank_zero_warn(
                "RandomStateCheckpoint: a checkpoint saved outside `Trainer.fit` holds no random "
                "state; a run resumed from it is not bit-exact."
            )
            return {}
        local = {
            "global": global_rng_state(),
            "owned": {key: obj.rng_state() for key, obj in _owners(trainer).items()},
        }
        ranks = _gather(local, trainer.world_size)
        return {"format": _FORMAT, "world_size": trainer.world_size, "ranks": ranks}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = _check_payload(state_dict)
        if self._trainer is not None:
            self._rank_state(self._trainer)  # a world-size mismatch fails before training

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.state_key not in checkpoint.get("callbacks", {}):
            rank_zero_warn(
                "RandomStateCheckpoint: the checkpoint holds no random states (it was saved "
                "without this callback); the resumed run continues from this run's own seeds "
                "and is not bit-exact."
            )

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Resumed mid-epoch, Lightning skips `on_train_epoch_start` of the unfinished epoch.
        if self._loaded is not None and trainer.fit_loop.restarted_mid_epoch:
            self._apply(trainer, rebuild_iterator=False)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._loaded is not None:
            self._apply(trainer, rebuild_iterator=True)

    # ------------------------------------------------------------------ internals
    def _rank_state(self, trainer: pl.Trainer) -> dict[str, Any] | None:
        """This rank's saved state; ``None`` when a world-size mismatch is to be reseeded."""
        assert self._loaded is not None
        saved, world = self._loaded["world_size"], trainer.world_size
        if saved == world:
            return self._loaded["ranks"][trainer.global_rank]
        if self.on_world_size_mismatch == "error":
            raise ValueError(
                f"RandomStateCheckpoint: the checkpoint holds the random states of {saved} "
                f"processes (world_size={saved}) but this run has world_size={world}. Random "
                "states are per rank and cannot be mapped onto a different number of "
                f"processes: resume with {saved} processes (devices x num_nodes), or pass "
                "`RandomStateCheckpoint(on_world_size_mismatch='reseed')` to continue with "
                "reseeded generators (not bit-exact)."
            )
        return None

    def _apply(self, trainer: pl.Trainer, rebuild_iterator: bool) -> None:
        state = self._rank_state(trainer)
        self._loaded = None
        if state is None:
            rank_zero_warn(
                "RandomStateCheckpoint: the checkpoint was written by a different number of "
                "processes; its random states are not used and every rank's generators are "
                "reseeded (on_world_size_mismatch='reseed')."
            )
            seed_global_rngs(_reseed(trainer.current_epoch, trainer.global_rank))
            return
        owners, saved = _owners(trainer), dict(state["owned"])
        # A run that rebuilds its dataloaders at this epoch starts them afresh, as the
        # uninterrupted run did: their generators keep their new state.
        reload = trainer.reload_dataloaders_every_n_epochs
        if reload and trainer.current_epoch % reload == 0:
            owners = {k: v for k, v in owners.items() if not k.startswith(_LOADER_KEYS)}
            saved = {k: v for k, v in saved.items() if not k.startswith(_LOADER_KEYS)}
        for key in sorted(set(saved) & set(owners)):
            owners[key].set_rng_state(saved[key])
        missing, extra = sorted(set(saved) - set(owners)), sorted(set(owners) - set(saved))
        if missing or extra:
            rank_zero_warn(
                "RandomStateCheckpoint: the checkpoint and this run own different generators "
                f"(only in the checkpoint: {missing}; only in this run: {extra}); those keep "
                "their fresh state and the resumed run is not bit-exact."
            )
        restore_global_rng_state(state["global"], owner="RandomStateCheckpoint")
        if rebuild_iterator:
            _rebuild_train_iterator(trainer)
        log.debug(
            "RandomStateCheckpoint: rank %d restored its random states at epoch %d",
            trainer.global_rank,
            trainer.current_epoch,
        )


class _LoaderGenerator:
    """:class:`~lightgraph.typing.RandomStateful` view of a ``DataLoader``'s ``generator``."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def rng_state(self) -> dict[str, Any]:
        return {"generator": generator_state(self.loader.generator)}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        owner = "RandomStateCheckpoint"
        check_rng_state(owner, state, ("generator",), "a DataLoader's generator state")
        # In place: the loader's sampler holds the same generator object.
        restore_generator(state["generator"], self.loader.generator, owner, "DataLoader.generator")


def _leaves(loaders: Any) -> Iterator[Any]:
    if isinstance(loaders, Mapping):
        for key in sorted(loaders, key=str):
            yield from _leaves(loaders[key])
    elif isinstance(loaders, list | tuple):
        for loader in loaders:
            yield from _leaves(loader)
    elif loaders is not None:
        yield loaders


def _owners(trainer: pl.Trainer) -> dict[str, RandomStateful]:
    """Every generator owner of the run, by a key that is stable across runs."""
    found: dict[str, Any] = {}
    if isinstance(trainer.strategy, RandomStateful):
        found["strategy"] = trainer.strategy
    module = trainer.lightning_module
    context = parallel_context(module)
    for field in dataclasses.fields(context):
        found[f"parallel_context.{field.name}"] = getattr(context, field.name)
    for name, sub in module.named_modules():
        found[f"module.{name}" if name else "module"] = sub
    found["datamodule"] = trainer.datamodule
    # Validation loaders too: Lightning saves the state of training iterables only, and a
    # sampled validation draws from its own generators epoch after epoch.
    for kind, loaders in (
        ("train_dataloader", trainer.train_dataloader),
        ("val_dataloader", trainer.val_dataloaders),
    ):
        for i, loader in enumerate(_leaves(loaders)):
            prefix = f"{kind}.{i}"
            found[prefix] = loader
            if isinstance(loader, DataLoader):
                if loader.generator is not None:
                    found[f"{prefix}.generator"] = _LoaderGenerator(loader)
                found[f"{prefix}.sampler"] = loader.sampler
                found[f"{prefix}.batch_sampler"] = loader.batch_sampler
            if isinstance(loader, NodeLoader):
                found[f"{prefix}.node_sampler"] = loader.node_sampler
            if isinstance(loader, LinkLoader):
                found[f"{prefix}.link_sampler"] = loader.link_sampler
    owners: dict[str, RandomStateful] = {}
    seen: set[int] = set()
    for key, obj in found.items():
        # An object reachable twice (a sampler of the data module and of its loader) is
        # saved once, under the first key.
        if isinstance(obj, RandomStateful) and id(obj) not in seen:
            owners[key] = obj
            seen.add(id(obj))
    return owners


def _gather(state: dict[str, Any], world_size: int) -> list[dict[str, Any]]:
    """Every rank's ``state``, in rank order (collective on the default group)."""
    if world_size == 1 or not (dist.is_available() and dist.is_initialized()):
        return [state]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, state)
    return out


def _rebuild_train_iterator(trainer: pl.Trainer) -> None:
    """Re-create this epoch's training iterator if Lightning built it before the restore.

    The epoch loop builds it after ``on_train_epoch_start`` except on the first epoch of
    a fit and when it resumes (``training_epoch_loop.on_run_start``); then the
    iterator was built at the start of ``fit`` and drew from the generators before they
    were restored.
    """
    fit_loop = trainer.fit_loop
    if (
        trainer.current_epoch > 0
        and not fit_loop.is_resuming
        and not fit_loop.epoch_loop.restarting
    ):
        return  # the epoch loop builds it after this hook
    fetcher = getattr(fit_loop, "_data_fetcher", None)  # Lightning keeps it private
    if fetcher is not None:
        iter(fetcher)


def _reseed(epoch: int, rank: int) -> int:
    base = os.environ.get("PL_GLOBAL_SEED", "0")
    key = f"lightgraph-reseed\x1f{base}\x1f{epoch}\x1f{rank}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def _check_payload(state: Any) -> dict[str, Any]:
    owner = "RandomStateCheckpoint.load_state_dict"
    if not isinstance(state, Mapping) or not {"format", "world_size", "ranks"} <= set(state):
        got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise TypeError(
            f"{owner}: expected a mapping with the keys ['format', 'ranks', 'world_size'] (a "
            f"RandomStateCheckpoint.state_dict()) but got {got}."
        )
    if state["format"] != _FORMAT:
        raise ValueError(
            f"{owner}: expected `format` {_FORMAT} but got {state['format']!r}; the checkpoint "
            "was written by another version of lightgraph."
        )
    world, ranks = state["world_size"], state["ranks"]
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"{owner}: expected `world_size` >= 1 but got {world!r}.")
    if not isinstance(ranks, list | tuple) or len(ranks) != world:
        count = len(ranks) if isinstance(ranks, list | tuple) else type(ranks).__name__
        raise ValueError(
            f"{owner}: expected `ranks` to be a list of world_size={world} states but got {count}."
        )
    for r, rank_state in enumerate(ranks):
        if (
            not isinstance(rank_state, Mapping)
            or set(rank_state) != {"global", "owned"}
            or not isinstance(rank_state["owned"], Mapping)
        ):
            keys = sorted(rank_state) if isinstance(rank_state, Mapping) else None
            raise TypeError(
                f"{owner}: expected the state of rank {r} to be a mapping with the keys "
                f"['global', 'owned'] but got {keys if keys is not None else type(rank_state).__name__}."
            )
    return {"format": _FORMAT, "world_size": world, "ranks": list(ranks)}
