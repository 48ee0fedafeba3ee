"""ClusterSparsityTuner: the ladder trajectory from a scripted loss sequence, thresholds, resume."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from lightgraph.callbacks import ClusterSparsityTuner
from lightgraph.nn import MultiheadGraphAttention
from tests.callbacks.test_adaptive_bitwidth import LOSSES, SMOOTHING, TIMES, WINDOW, Clock

# Ladder position of epoch t + 1 follows degraded(t) (see DEGRADED in the Sylvie tests):
#   start at 1 (beta_G); None keeps, False moves up, True moves down (clamped to [0, 6]).
#   t=3 F->2, t=4 T->1, t=5 T->0, t=6 F->1, t=7 F->2, t=8 T->1, t=9 F->2, t=10 T->1,
#   t=11 T->0, t=12..14 T->0 (clamped), t=15 F->1
EXPECTED = [1, 1, 1, 1, 2, 1, 0, 1, 2, 1, 2, 1, 0, 0, 0, 0, 1]
BETA_G = 40 / 20**2  # the scripted batch's pattern: 40 entries over 20 tokens


class Module(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = MultiheadGraphAttention(8, 2, kind="cluster_sparse")
        self.b = MultiheadGraphAttention(8, 2, kind="cluster_sparse")
        self.logged: list[tuple[str, float]] = []

    def log(self, name: str, value: float, **kwargs: Any) -> None:  # noqa: A003
        self.logged.append((name, value))


def _run(cb: ClusterSparsityTuner, epochs: range, losses=LOSSES, times=TIMES, module=None):
    clock = Clock()
    cb._clock = clock
    module = module or Module()
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(broadcast=lambda obj, src=0: obj),
        callback_metrics={},
        current_epoch=0,
        lightning_module=module,
    )
    batch = SimpleNamespace(graph=SimpleNamespace(edge_index=torch.zeros(2, 40), num_tokens=20))
    cb.setup(trainer, module, "fit")
    cb.on_train_start(trainer, module)
    seen = []
    for epoch in epochs:
        trainer.current_epoch = epoch
        if epoch > epochs[0]:
            trainer.callback_metrics = {"train_loss": torch.tensor(losses[epoch - 1])}
        cb.on_train_epoch_start(trainer, module)
        cb.on_train_batch_start(trainer, module, batch, 0)
        clock.now += times[epoch]
        seen.append((module.a.threshold, module.b.threshold))
        cb.on_train_batch_end(trainer, module, None, batch, 0)
        cb.on_train_epoch_end(trainer, module)
    trainer.callback_metrics = {"train_loss": torch.tensor(losses[epochs[-1]])}
    return seen, trainer, module


def test_ladder_trajectory_and_thresholds() -> None:
    cb = ClusterSparsityTuner(window=WINDOW, smoothing=SMOOTHING)
    seen, _, module = _run(cb, range(len(LOSSES)))
    assert [level for _, level in cb.history] == EXPECTED
    ladder = [0.0, BETA_G, 1.5 * BETA_G, 5 * BETA_G, 7 * BETA_G, 10 * BETA_G, 1.0]
    assert [a for a, _ in seen] == pytest.approx([ladder[level] for level in EXPECTED])
    assert all(a == b for a, b in seen)  # every attention layer gets the same threshold
    assert [v for k, v in module.logged if k == "sparsity_level"] == [float(x) for x in EXPECTED]


def test_climbs_to_absolute_one_when_never_degraded() -> None:
    cb = ClusterSparsityTuner(window=1, smoothing=0.5, beta_g=0.01)
    losses = [2.0**-t for t in range(12)]  # halving loss: the descent rate halves too...
    times = [0.5**t for t in range(12)]  # ...but the epochs get faster: rate stays flat
    seen, _, _ = _run(cb, range(12), losses, times)
    levels = [level for _, level in cb.history]
    assert levels[-1] == 6 and seen[-1][0] == 1.0
    assert levels == sorted(levels)


def test_resume_continues_the_trajectory() -> None:
    first = ClusterSparsityTuner(window=WINDOW, smoothing=SMOOTHING)
    _, trainer, module = _run(first, range(8))
    checkpoint = {"callbacks": {first.state_key: first.state_dict()}}
    first.on_save_checkpoint(trainer, module, checkpoint)  # stores epoch 7's loss
    resumed = ClusterSparsityTuner(window=WINDOW, smoothing=SMOOTHING)
    resumed.load_state_dict(checkpoint["callbacks"][first.state_key])
    _run(resumed, range(8, len(LOSSES)))
    assert [level for _, level in resumed.history] == EXPECTED


def test_needs_attention_layers() -> None:
    cb = ClusterSparsityTuner()
    trainer = SimpleNamespace(lightning_module=nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="MultiheadGraphAttention"):
        cb.setup(trainer, None, "fit")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"beta_g": 0.0}, "`beta_g`"), ({"beta_g": 2.0}, "`beta_g`"), ({"window": 0}, "window")],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ClusterSparsityTuner(**kwargs)


def test_bad_checkpoint_level() -> None:
    cb = ClusterSparsityTuner()
    state = cb.state_dict()
    state["setting"] = 9
    with pytest.raises(ValueError, match="ladder position"):
        cb.load_state_dict(state)
