"""Optional dependencies are probed through lightgraph.utilities.imports only."""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Iterator

import pytest

from lightgraph.utilities import imports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_require_names_the_feature_and_the_install_command(monkeypatch) -> None:
    monkeypatch.setattr(imports, "WITH_TRANSFORMERS", False)
    with pytest.raises(ImportError) as info:
        imports.require("transformers", "LM + GNN co-training")
    msg = str(info.value)
    assert msg.startswith("LM + GNN co-training needs the optional `transformers` package")
    assert "pip install lightgraph[lm]" in msg


@pytest.mark.parametrize(
    "package,flag,install",
    [
        ("torch_sparse", "WITH_TORCH_SPARSE", "pip install lightgraph[sparse]"),
        ("transformers", "WITH_TRANSFORMERS", "pip install lightgraph[lm]"),
        ("pyg_lib", "WITH_PYG_LIB", "PyG wheel index"),
    ],
)
def test_require_every_package(monkeypatch, package, flag, install) -> None:
    monkeypatch.setattr(imports, flag, False)
    with pytest.raises(ImportError, match=f"^thing needs the optional `{package}` package: .*"):
        imports.require(package, "thing")
    with pytest.raises(ImportError, match=install.replace("[", "\\[").replace("]", "\\]")):
        imports.require(package, "thing")
    monkeypatch.setattr(imports, flag, True)
    assert imports.require(package, "thing") is None


def test_require_torch_sparse(monkeypatch) -> None:
    monkeypatch.setattr(imports, "WITH_TORCH_SPARSE", False)
    with pytest.raises(
        ImportError, match="^PartitionPlan.sparse_tensor needs .*lightgraph\\[sparse\\]"
    ):
        imports.require_torch_sparse("PartitionPlan.sparse_tensor")


def test_require_unknown_package() -> None:
    with pytest.raises(
        ValueError,
        match="require: expected `package` to be one of \\('torch_sparse', 'transformers', "
        "'pyg_lib'\\) but got 'torch-sparse'",
    ):
        imports.require("torch-sparse", "thing")


def test_flags_match_the_environment() -> None:
    assert imports.WITH_TRANSFORMERS == (importlib.util.find_spec("transformers") is not None)
    assert imports.WITH_TORCH_SPARSE == (importlib.util.find_spec("torch_sparse") is not None)
    assert imports.WITH_PYG_LIB == (importlib.util.find_spec("pyg_lib") is not None)


def test_transformers_is_an_optional_extra() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]

    def names(requirements: list[str]) -> set[str]:
        return {
            r.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip() for r in requirements
        }

    assert "transformers" not in names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert "transformers" in names(extras["lm"])
    assert "transformers" not in names(extras["test"])  # [test] stays light


def _import_time_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported (not inside functions)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _import_time_imports(node)


def test_lightgraph_never_imports_transformers_at_import_time() -> None:
    # What keeps transformers optional: features `require` it and import it lazily. (A
    # runtime check is not possible: torchmetrics imports transformers when installed.)
    offenders = []
    for root, _, files in os.walk(os.path.join(ROOT, "lightgraph")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in _import_time_imports(tree):
                modules = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                )
                if any((m or "").split(".")[0] == "transformers" for m in modules):
                    offenders.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not offenders, f"module-level transformers imports: {offenders}"
