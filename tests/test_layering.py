"""The import directions of docs/contributing.md hold: no module imports a floor above its own.

Floors, lowest first (a module may import its own floor and the floors below)::

    0  lightgraph.utilities, lightgraph.typing
    1  lightgraph.functional      pure math, kernels, autograd functions, plans
    2  lightgraph.data            datasets, partitioners, data modules
    3  lightgraph.nn, lightgraph.quant
    4  lightgraph.distributed     runtime owning process groups, no Lightning
    5  lightgraph.strategies, lightgraph.models, lightgraph.callbacks
    6  lightgraph.cli, lightgraph (the package root)

Every import counts, at module level or inside a function, except those inside an
``if TYPE_CHECKING:`` block (annotations only, never run). There is no exception list.

Besides the floors, modules do not import each other in a circle: an import ``A -> B``
counts as an edge to the module it names (``from lightgraph.x.y import z`` names
``lightgraph.x.y``, or ``lightgraph.x.y.z`` when that is a module), and the module graph
has no cycle.
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
        # ``from package import name``: the names, which may be submodules.
        self.names: list[tuple[int, str]] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
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
            self.names.extend((node.lineno, f"{target}.{a.name}") for a in node.names)


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


def _module_graph(
    modules: dict[str, list[tuple[int, str]]],
    names: dict[str, list[tuple[int, str]]],
) -> dict[str, dict[str, int]]:
    """``module -> {imported module: line}`` for the lightgraph modules of ``modules``."""
    graph: dict[str, dict[str, int]] = {}
    for module, imports in modules.items():
        edges = graph.setdefault(module, {})
        named: dict[tuple[int, str], list[str]] = {}
        for line, full in names[module]:
            named.setdefault((line, full.rsplit(".", 1)[0]), []).append(full)
        for line, target in imports:
            submodules = [n for n in named.get((line, target), []) if n in modules]
            for dst in submodules or [target]:
                if dst in modules and dst != module:
                    edges.setdefault(dst, line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    cycles = []
    for component in components:
        members = set(component)
        # Walk from the first module inside the component until a module repeats.
        path, seen, node = [], {}, component[0]
        while node not in seen:
            seen[node] = len(path)
            path.append(node)
            node = min(n for n in graph[node] if n in members)
        cycles.append(path[seen[node] :] + [node])
    return cycles


def _module_imports() -> tuple[dict[str, list[tuple[int, str]]], dict[str, list[tuple[int, str]]]]:
    found, names = {}, {}
    for module, path in _modules():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        found[module], names[module] = visitor.found, visitor.names
    return found, names


def test_modules_import_each_other_without_cycles() -> None:
    graph = _module_graph(*_module_imports())
    lines = []
    for cycle in _cycles(graph):
        lines.append(
            " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False))
            + f" -> {cycle[-1]}"
        )
    assert not lines, "module import cycles:\n" + "\n".join(lines)


def test_the_cycle_check_sees_function_level_imports_only_outside_type_checking() -> None:
    # Two modules of one package importing each other, once inside a function: a cycle.
    # The same with one side under TYPE_CHECKING: none. ``from package import module``
    # is an edge to the module.
    sources = {
        "lightgraph.functional.a": "from lightgraph.functional.b import f\n",
        "lightgraph.functional.b": "def f():\n    from lightgraph.functional import a\n",
        "lightgraph.functional.c": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from lightgraph.functional.d import D\n"
        ),
        "lightgraph.functional.d": "from .c import x\n",
        "lightgraph.functional.e": "from lightgraph.functional import c, d\n",
    }
    found, names = {}, {}
    for module, source in sources.items():
        visitor = _Imports(module, is_package=False)
        visitor.visit(ast.parse(source))
        found[module], names[module] = visitor.found, visitor.names
    graph = _module_graph(found, names)
    assert graph == {
        "lightgraph.functional.a": {"lightgraph.functional.b": 1},
        "lightgraph.functional.b": {"lightgraph.functional.a": 2},
        "lightgraph.functional.c": {},
        "lightgraph.functional.d": {"lightgraph.functional.c": 1},
        "lightgraph.functional.e": {"lightgraph.functional.c": 1, "lightgraph.functional.d": 1},
    }
    assert _cycles(graph) == [
        ["lightgraph.functional.a", "lightgraph.functional.b", "lightgraph.functional.a"]
    ]


def test_the_checker_counts_imports_in_a_module_getattr() -> None:
    # A lazy alias is still an import of the floor it reaches: no exemption.
    visitor = _Imports("lightgraph.functional.example", is_package=False)
    visitor.visit(
        ast.parse(
            "def __getattr__(name):\n"
            "    from lightgraph.distributed.sequence_parallel import SequenceParallel\n"
            "    return SequenceParallel\n"
        )
    )
    assert [t for _, t in visitor.found] == ["lightgraph.distributed.sequence_parallel"]


def _data_modules() -> set[str]:
    """The ``lightgraph.data`` modules that define a ``LightningDataModule``, and the
    package-level names of those classes (``lightgraph.data.<Class>``)."""
    import importlib
    import inspect

    from lightning.pytorch import LightningDataModule

    out = set()
    for module, _ in _modules():
        if _package(module) != "data" or module == "lightgraph.data":
            continue
        for name, obj in vars(importlib.import_module(module)).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, LightningDataModule)
                and obj.__module__ == module
            ):
                out |= {module, f"lightgraph.data.{name}"}
    return out


def test_strategies_import_no_data_module() -> None:
    # A strategy tells data modules what they need through a property they read from
    # `trainer.strategy` (Lightning's `distributed_sampler_kwargs` convention, and
    # `sequence_parallel_kwargs`); it never imports or probes a data module type.
    forbidden = _data_modules()
    assert {
        "lightgraph.data.lightning.node_sequence",
        "lightgraph.data.NodeSequenceDataModule",
    } <= forbidden
    found, names = _module_imports()
    violations = [
        f"{module}:{line} imports {target}"
        for module in sorted(found)
        if _package(module) == "strategies"
        for line, target in found[module] + names[module]
        if target in forbidden
    ]
    assert not violations, "strategies importing data modules:\n" + "\n".join(violations)


def _imports_lightning(path: Path) -> bool:
    """Whether the module at ``path`` imports ``lightning`` itself (any level)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "lightning" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lightning":
            return True
    return False


STORE_LAYER = ("lightgraph.data.store", "lightgraph.data.store.partition_store")


def test_the_store_layer_reaches_no_lightning_import() -> None:
    # The cache and the partition store sit below the data modules: opening, writing or
    # checking a store needs no Lightning, so every module they import (transitively)
    # must not import it either.
    found, names = _module_imports()
    graph = _module_graph(found, names)
    paths = dict(_modules())
    store = [m for m in graph if any(m == p or m.startswith(p + ".") for p in STORE_LAYER)]
    assert (
        "lightgraph.data.store.cache" in store
        and "lightgraph.data.store.partition_store.reader" in store
    )
    lightning: dict[str, bool] = {}  # module -> imports lightning (each file parsed once)
    violations = []
    for start in store:
        seen, todo = {start: [start]}, [start]
        while todo:
            module = todo.pop()
            for nxt in graph.get(module, {}):
                if nxt not in seen:
                    seen[nxt] = seen[module] + [nxt]
                    todo.append(nxt)
        for m, chain in seen.items():
            if m not in lightning:
                lightning[m] = _imports_lightning(paths[m])
            if lightning[m]:
                violations.append(" -> ".join(chain))
    assert not violations, "store modules reaching Lightning:\n" + "\n".join(violations)


def test_the_lightning_check_sees_an_import(tmp_path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from lightning.pytorch import Trainer\n")
    assert _imports_lightning(path)
    path.write_text("import torch\n")
    assert not _imports_lightning(path)
