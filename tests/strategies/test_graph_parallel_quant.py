"""GraphParallelStrategy(quantization=...): a graph transformer trains on 2 ranks with
quantised all-to-alls, close to FP32 at 8 bits, and 2-bit codes are 1/16 of FP32's bytes."""

from __future__ import annotations

import json
import os
import warnings

import lightning.pytorch as pl
import pytest
import torch

from lightgraph.cli import build_cli
from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.data.lightning.node_sequence import NodeSequenceDataModule
from lightgraph.distributed import parallel_context
from lightgraph.functional.sequence_parallel import shard_sizes
from lightgraph.models.graph_transformer_module import GraphTransformerModule
from lightgraph.nn.models.graphormer import Graphormer
from lightgraph.quant import DegreeAwareBits, FixedBits, RandomBits
from lightgraph.strategies.graph_parallel import GraphParallelStrategy

FEATURES, CLASSES, HIDDEN, HEADS = 8, 3, 16, 4
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class DumpExchange(pl.Callback):
    """Every rank writes its all-to-all byte counters and the policy it ended with."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.losses: list[float] = []

    def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if "train_loss" in trainer.callback_metrics:  # the previous epoch's global loss
            self.losses.append(float(trainer.callback_metrics["train_loss"]))

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        sp = parallel_context(module).sequence_parallel
        assert sp is not None
        record = {
            "train": {"|".join(k): v for k, v in sp.stats.by_layer("train").items()},
            "val": {"|".join(k): v for k, v in sp.stats.by_layer("val").items()},
            "policy": repr(sp.policy),
            "losses": self.losses + [float(trainer.callback_metrics["train_loss"])],
        }
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(record, f)


def _data(tmp_path) -> NodeSequenceDataModule:
    graph = SyntheticGraph(
        num_nodes=120, avg_degree=6, num_features=FEATURES, num_classes=CLASSES, seed=3
    )
    # Two sequences of 61 tokens (global token included): uneven shards on 2 ranks.
    return NodeSequenceDataModule(graph, sequence_length=60, cache_dir=str(tmp_path / "cache"))


def fit(tmp_path, name: str, quantization, epochs: int = 5) -> list[dict]:
    out_dir = tmp_path / name
    out_dir.mkdir()
    torch.manual_seed(0)
    model = Graphormer(
        FEATURES, CLASSES, hidden_channels=HIDDEN, heads=HEADS, num_layers=2, dropout=0.0
    )
    module = GraphTransformerModule(model, num_classes=CLASSES, lr=1e-2)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=GraphParallelStrategy(quantization=quantization, start_method="fork"),
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        callbacks=[DumpExchange(str(out_dir))],
        default_root_dir=tmp_path,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, _data(tmp_path))
    records = []
    for rank in range(2):
        with open(out_dir / f"rank{rank}.json") as f:
            records.append(json.load(f))
    return records


def _dim(key: str) -> int:
    """Values of one token row: the rank's 2 heads of 4 channels, times 3 for Q, K, V."""
    layer = key.split("|")[0]
    per_head = HIDDEN // HEADS
    return HEADS // 2 * per_head * (3 if layer.endswith(".qkv") else 1)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_eight_bits_train_like_fp32_and_two_bits_cut_bytes_sixteenfold(tmp_path) -> None:
    fp32 = fit(tmp_path, "fp32", None)
    eight = fit(tmp_path, "eight", FixedBits(8))
    two = fit(tmp_path, "two", FixedBits(2))

    # Training: the loss falls, and 8-bit all-to-alls follow the FP32 run closely.
    for run in (fp32, eight, two):
        losses = run[0]["losses"]
        assert losses[-1] < 0.85 * losses[0], losses
    for a, b in zip(fp32[0]["losses"], eight[0]["losses"], strict=True):
        assert abs(a - b) <= 0.01 * a, (fp32[0]["losses"], eight[0]["losses"])
    assert fp32[0]["losses"] != eight[0]["losses"]  # it did quantise

    for rank in range(2):
        exact, q2, q8 = fp32[rank]["train"], two[rank]["train"], eight[rank]["train"]
        assert {k.rsplit("|", 1)[0] for k in q2} == {k.rsplit("|", 1)[0] for k in exact}
        layers = {k.split("|")[0] for k in exact}
        assert len(layers) == 4  # 2 attention layers x (qkv, out)
        for key, fp_bytes in exact.items():
            assert key.endswith("|data")
            base = key.rsplit("|", 1)[0]
            rows, rem = divmod(fp_bytes, 4 * _dim(key))
            assert rem == 0
            # codes: exactly 1/16 (resp. 1/4) of FP32 (rows of 24 or 8 values fill whole bytes)
            assert q2[base + "|data"] * 16 == fp_bytes
            assert q8[base + "|data"] * 4 == fp_bytes
            # parameters: bf16 scale + zero point per row, +2 bytes per wide-offset row
            for q in (q2, q8):
                assert 4 * rows <= q[base + "|params"] <= 6 * rows
        total_fp = sum(exact.values())
        total_2 = sum(q2.values())
        assert 1 / 16 < total_2 / total_fp < 0.2  # 1/16 plus the per-row parameters
        # evaluation all-to-alls stay FP32
        assert two[rank]["val"] == fp32[rank]["val"] and fp32[rank]["val"]


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_random_and_degree_aware_widths_train(tmp_path) -> None:
    epochs, tokens, sequences = 3, 61, 2
    for name, policy in (("random", RandomBits(seed=1)), ("degree", DegreeAwareBits(2))):
        run = fit(tmp_path, name, policy, epochs=epochs)
        assert run[0]["losses"][-1] < run[0]["losses"][0]
        assert type(policy).__name__ in run[0]["policy"]
        for rank in range(2):
            local = shard_sizes(tokens, 2)[rank]
            for key, value in run[rank]["train"].items():
                if not key.endswith("|data"):
                    continue
                own = key.endswith(("qkv|forward|data", "out|backward|data"))
                rows = epochs * sequences * (local if own else tokens - local)
                mean_bits = value * 8 / (rows * _dim(key))
                # widths from {2, 4, 8} per row (random; degree-aware at b_t = 2): a mix
                assert 2.5 < mean_bits < 7.5, (name, key, mean_bits)


def test_strategy_yaml_takes_a_policy(tmp_path) -> None:
    recipe = os.path.join(ROOT, "recipes", "torchgt.yaml")
    cli = build_cli(
        [
            "--config",
            recipe,
            f"--data.init_args.cache_dir={tmp_path}",
            "--trainer.strategy=lightgraph.strategies.GraphParallelStrategy",
            "--trainer.strategy.init_args.quantization=lightgraph.quant.FixedBits",
            "--trainer.strategy.init_args.quantization.init_args.base_bits=4",
            "--trainer.strategy.init_args.seed=5",
        ],
        run=False,
    )
    strategy = cli.trainer.strategy
    assert isinstance(strategy, GraphParallelStrategy)
    assert isinstance(strategy.quantization, FixedBits) and strategy.quantization.base_bits == 4
    assert strategy.seed == 5
