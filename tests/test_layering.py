"""The import directions of docs/contributing.md hold: no module imports a floor above its own.

Floors, lowest first (a module may import its own floor and the floors below)::

    0  lightgraph.utilities, lightgraph.typing
    1  lightgraph.functional      pure math, kernels, autograd functions, plans
    2  lightgraph.data            datasets, partitioners, data modules
    3  lightgraph.nn, lightgraph.quant
    4  lightgraph.distributed     runtime owning process groups, no Lightning
    5  lightgraph.strategies, lightgraph.models, lightgraph.callbacks
    6  lightgraph.cli, lightgraph (the package root)

Imports inside ``if TYPE_CHECKING:`` blocks and inside a module-level ``__getattr__``
(compatibility aliases for names that moved up a floor) are not runtime dependencies and
are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "lightgraph"

FLOORS: dict[str, int] = {
    "utilities": 0,
    "typing": 0,
    "functional": 1,
    "data": 2,
    "nn": 3,
    "quant": 3,
    "distributed": 4,
    "strategies": 5,
    "models": 5,
    "callbacks": 5,
    "cli": 6,
    "__init__": 6,
    "__main__": 6,
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts)
        out.append((name.removesuffix(".__init__") if name.endswith(".__init__") else name, path))
    return out


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.found: list[tuple[int, str]] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name == "__getattr__":
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.startswith("lightgraph"):
                self.found.append((node.lineno, alias.name))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.split(".")
            if not self.is_package:
                base = base[:-1]
            base = base[: len(base) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target == "lightgraph":
            self.found.extend((node.lineno, f"lightgraph.{a.name}") for a in node.names)
        elif target.startswith("lightgraph."):
            self.found.append((node.lineno, target))


def _imports() -> dict[str, list[tuple[int, str]]]:
    out = {}
    for module, path in _modules():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        out[module] = visitor.found
    return out


def test_every_package_has_a_floor() -> None:
    packages = {_package(m) for m, _ in _modules()}
    assert packages <= set(FLOORS), f"packages without a floor: {packages - set(FLOORS)}"


def test_no_module_imports_a_higher_floor() -> None:
    violations = []
    for module, imports in _imports().items():
        floor = FLOORS[_package(module)]
        for line, target in imports:
            if FLOORS[_package(target)] > floor:
                violations.append(f"{module}:{line} imports {target}")
    assert not violations, "upward imports:\n" + "\n".join(violations)


def test_packages_import_each_other_without_cycles() -> None:
    graph: dict[str, set[str]] = {}
    for module, imports in _imports().items():
        src = _package(module)
        for _, target in imports:
            dst = _package(target)
            if dst != src and src != "__init__":
                graph.setdefault(src, set()).add(dst)
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                pytest.fail("package import cycle: " + " -> ".join(path + [node, nxt]))
            if state.get(nxt) is None:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_the_checker_sees_an_upward_import(tmp_path) -> None:
    # The visitor must find both absolute and relative imports, or the test above is vacuous.
    visitor = _Imports("lightgraph.data.example", is_package=False)
    visitor.visit(
        ast.parse(
            "from lightgraph.nn import GCN\nfrom ..strategies import x\nimport lightgraph.models\n"
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lightgraph.cli import y\n"
        )
    )
    targets = [t for _, t in visitor.found]
    assert targets == ["lightgraph.nn", "lightgraph.strategies", "lightgraph.models"]
    assert [FLOORS[_package(t)] > FLOORS["data"] for t in targets] == [True, True, True]
