"""benchmarks/gpu_check.py: its ``--cpu`` mode runs in the suite, so the GPU check cannot rot."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check.py")


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_cpu_mode_passes_and_writes_its_report(tmp_path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["ok"] and report["failures"] == []
    assert report["environment"]["mode"] == "cpu"
    # Every CUDA-marked test at least imports and is collected.
    assert report["tests"]["collected"] >= 20
    runs = {(r["recipe"], r["mode"]) for r in report["recipes"]}
    assert runs == {("single.yaml", "1 process"), ("ns.yaml", "1 process")}
    assert all(r["ok"] for r in report["recipes"])
    names = [h["name"] for h in report["headlines"]]
    assert names == ["quantize", "sampler", "joestar_stage2", "attention", "resume"]
    for headline in report["headlines"]:
        assert headline["ok"], headline
        assert headline["metrics"], headline
    summary = (out / "gpu_check.md").read_text()
    assert "PASSED" in summary and "## Headlines" in summary


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_processes_share_one_device_and_both_ranks_run(tmp_path) -> None:
    gpu_check = _module()
    [run] = gpu_check.recipe_runs(["vanilla.yaml"], cpu=True)
    assert run["share"] == "2:cpu"
    result = gpu_check.run_recipe(run, cpu=True, timeout=110, workdir=str(tmp_path))
    assert result["ok"], result.get("log")
    assert result["ranks"] == 2


def test_a_failing_recipe_is_reported_with_its_error(tmp_path) -> None:
    gpu_check = _module()
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "trainer:\n  accelerator: cpu\n  devices: 1\n"
        "model:\n  class_path: lightgraph.models.NoSuchModel\n"
        "data:\n  class_path: lightgraph.data.NoSuchData\n"
    )
    run = {
        "recipe": "bad.yaml",
        "path": str(bad),
        "accelerator": "cpu",
        "mode": "1 process",
        "share": None,
        "extra": [],
    }
    result = gpu_check.run_recipe(run, cpu=True, timeout=100, workdir=str(tmp_path))
    assert not result["ok"] and result["returncode"] not in (0, None)
    assert "NoSuchModel" in result["log"] or "NoSuchData" in result["log"]
    assert result["error"]


def test_multi_process_recipes_also_run_on_the_strategys_own_backend() -> None:
    gpu_check = _module()
    runs = gpu_check.recipe_runs(["sylvie.yaml", "ns.yaml", "joestar.yaml"], cpu=False)
    assert [(r["recipe"], r["share"], bool(r["extra"])) for r in runs] == [
        ("sylvie.yaml", None, False),
        ("sylvie.yaml", "2:cuda:0", False),
        ("ns.yaml", None, False),
        ("joestar.yaml", None, True),  # + GraphCompile: CUDA graphs
        ("joestar.yaml", None, False),
    ]
    assert all(r["accelerator"] == "gpu" for r in runs)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cpu", "--skip", "tests,bogus"], "--skip takes tests, recipes, headlines; got bogus"),
        (["--cpu", "--recipes", "nope"], "--recipes: no such recipe ['nope.yaml']"),
    ],
)
def test_bad_arguments_name_the_allowed_values(argv, message, capsys) -> None:
    gpu_check = _module()
    with pytest.raises(SystemExit):
        gpu_check.parse_args(argv)
    assert message in capsys.readouterr().err


def test_every_recipe_gets_small_overrides() -> None:
    """Each shipped recipe is shrunk (graph size, epochs) so the GPU run stays short."""
    gpu_check = _module()
    import glob

    for recipe in sorted(glob.glob(os.path.join(ROOT, "recipes", "*.yaml"))):
        overrides = gpu_check.tiny_overrides(recipe, cpu=True)
        assert any("max_epochs" in o for o in overrides), recipe
        assert any("num_nodes=" in o or "num_graphs=" in o for o in overrides), (
            f"{recipe}: no size override"
        )
