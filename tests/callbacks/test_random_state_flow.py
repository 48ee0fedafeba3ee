"""RandomStateCheckpoint on the pipeline strategy (``flow_parallel``): UniTG (an LM and a
deep GNN trained together, the GNN as 2 pipeline stages) resumed from an epoch-boundary
checkpoint equals the uninterrupted run bit for bit -- with the LM's jobs interleaved in
the pipeline bubbles -- and without the callback it does not."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from lightgraph.callbacks import ModalitySync  # noqa: E402
from lightgraph.data import SyntheticGraph, SyntheticTextGraph, TextGraphDataModule  # noqa: E402
from lightgraph.models import UniTGModule  # noqa: E402
from lightgraph.models.unitg_module import RANK_STATE_KEY  # noqa: E402
from lightgraph.nn import EarlyExitEncoder, LMEncoder, RevGCN  # noqa: E402
from lightgraph.strategies import FlowParallelStrategy  # noqa: E402
from lightgraph.utilities import seed_global_rngs  # noqa: E402
from tests.callbacks.test_random_state import (  # noqa: E402
    EPOCHS,
    STATE_KEY,
    Run,
    _check_resume,
    assert_identical,
)
from tests.callbacks.test_random_state import (
    _fit as fit,
)
from tests.distributed.test_flow_pipeline import slow_fork_rng  # noqa: E402

CLASSES, FEATURES = 4, 16
PIPELINE_KEY = "parallel_context.flow_pipeline"
CACHE_KEYS = ("lm_cache", "lm_cache_exit", "lm_stamp")


def _datamodule(cache: str) -> TextGraphDataModule:
    graph = SyntheticGraph(num_nodes=120, num_classes=CLASSES, num_features=FEATURES, seed=3)
    text = SyntheticTextGraph(graph, words_per_node=6, vocab_per_class=4, noise_vocab_size=20)
    return TextGraphDataModule(text, serve="graph", cache_dir=cache)


def _module(bubble: bool) -> UniTGModule:
    seed_global_rngs(0)  # every run starts alike, as under seed_everything
    lm = EarlyExitEncoder(
        LMEncoder(
            vocab_size=64,
            hidden_size=16,
            num_layers=4,
            num_heads=2,
            intermediate_size=32,
            max_position=16,
            dropout=0.1,  # hidden and attention dropout, drawn on the LM's thread
        ),
        num_classes=CLASSES,
        dropout=0.2,
    )
    gnn = RevGCN(FEATURES, 16, CLASSES, num_layers=4, dropout=0.3)  # the stages' dropout
    return UniTGModule(
        gnn,
        CLASSES,
        lm=lm,
        lm_epochs=2,
        lm_batch_size=16,
        encode_batch_size=16,
        lm_share=1.0,  # LM jobs in every epoch, before and after the resume
        bubble_interleave=bubble,
        total_epochs=EPOCHS,  # the half run spreads the LM jobs like the full one
        lr=0.01,
        lm_lr=0.01,
    )


def _fit(tmp_path, name: str, epochs: int, ckpt: str | None, callback: bool, bubble: bool) -> Run:
    return fit(
        tmp_path,
        name,
        _module(bubble),
        _datamodule(str(tmp_path / "cache")),
        FlowParallelStrategy(num_microbatches=2, start_method="fork"),
        devices=2,
        epochs=epochs,
        ckpt_path=ckpt,
        callback=callback,
        extra_callbacks=(ModalitySync(total_epochs=EPOCHS, patience=1),),
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("bubble", [True, False], ids=["bubble-interleave", "in-line"])
def test_flow_parallel_unitg_resume_is_bit_exact(tmp_path, monkeypatch, bubble: bool) -> None:
    # torch's pipeline schedule initialises its stage in its first step, between
    # save and restore of the default generator (fork_rng); made slow here (the ranks are
    # forked), so that an LM worker running meanwhile would surely draw in it. Its draws
    # were undone then, at a different epoch in the uninterrupted and the resumed run.
    monkeypatch.setattr(torch.random, "fork_rng", slow_fork_rng)

    def run(name: str, epochs: int, ckpt: str | None = None, callback: bool = True) -> Run:
        return _fit(tmp_path, name, epochs, ckpt, callback, bubble)

    def same_lm_caches(a: dict, b: dict) -> None:
        assert_identical(
            a[RANK_STATE_KEY]["lm_caches"], b[RANK_STATE_KEY]["lm_caches"], "LM caches"
        )

    final = _check_resume(
        run, ("train_loss", "lm_loss", "val_acc", "encoded_fraction"), also=same_lm_caches
    )
    # Each rank's pipeline stage draws its dropout masks from its own generator, saved
    # per rank; the LM's draws come from torch's global generator.
    ranks = final["callbacks"][STATE_KEY]["ranks"]
    stage_generators = [r["owned"][PIPELINE_KEY]["generator"]["state"] for r in ranks]
    assert not torch.equal(stage_generators[0], stage_generators[1])


def test_lm_caches_of_another_world_size_are_merged_on_rank_zero() -> None:
    """Resumed on one process, a 2-rank checkpoint's LM caches are merged (the latest
    stamp of each node wins), so the next sync counts every cached embedding once."""
    module = _module(bubble=False)
    hidden = module.lm_cache.size(1)
    caches = []
    for rank, stamps in enumerate(([4, -1, 2], [1, 6, -1])):
        stamp = torch.tensor(stamps)
        caches.append(
            {
                "lm_cache": torch.full((3, hidden), float(rank + 1)),
                "lm_cache_exit": torch.full((3,), rank),
                "lm_stamp": stamp,
            }
        )
    state_dict = {k: v.clone() for k, v in caches[0].items()}
    state_dict["encoded"] = torch.tensor([True, False, True, False])
    checkpoint = {
        "state_dict": state_dict,
        RANK_STATE_KEY: {"world_size": 2, "lm_caches": caches, "totals": {"lm_time": 2.5}},
    }
    module.on_load_checkpoint(checkpoint)
    assert torch.equal(state_dict["lm_stamp"], torch.tensor([4, 6, 2]))
    assert torch.equal(state_dict["lm_cache_exit"], torch.tensor([0, 1, 0]))
    assert state_dict["lm_cache"][:, 0].tolist() == [1.0, 2.0, 1.0]
    assert module.totals["lm_time"] == 2.5 and module.encoded_fraction == 0.5
