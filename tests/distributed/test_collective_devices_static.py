"""No host tensor built without ``device=`` flows straight into a collective (a static scan).

The companion of ``test_collective_devices.py``, which records the devices of every
collective of a few real runs: this scan reads every function of lightgraph and reports a
tensor made by a factory (``torch.tensor``, ``torch.zeros``, ...) without ``device=`` that
reaches, in the same function, a tensor argument of a ``torch.distributed`` collective,
of lightgraph's ``all_gather_rows``, of ``trainer.strategy.reduce``, of a ``P2POp`` or of a
``log(..., sync_dist=True)`` (Lightning all-reduces a logged tensor where it lies). Such a
tensor is on the host whatever the module's device, and NCCL rejects it. "Reaches" follows
assignments in statement order: a name is tainted by an expression holding a device-less
factory call or a tainted name, unless the expression moves it (``.to(...)``,
``.cuda()``) or makes a Python number of it (``int``, ``float``, ``.item()``,
``.tolist()``, ...). An explicit ``device=...`` (even ``"cpu"``) is a choice and passes.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass

import lightgraph

ROOT = os.path.dirname(os.path.abspath(lightgraph.__file__))

#: Factories that put a new tensor on the default (host) device unless told otherwise.
FACTORIES = frozenset(
    {
        "tensor",
        "as_tensor",
        "zeros",
        "ones",
        "empty",
        "full",
        "arange",
        "linspace",
        "eye",
        "rand",
        "randn",
        "randint",
        "randperm",
    }
)
#: Collectives and the positions of their tensor arguments.
COLLECTIVES: dict[str, tuple[int, ...]] = {
    "all_reduce": (0,),
    "broadcast": (0,),
    "reduce": (0,),
    "all_gather": (0, 1),
    "all_gather_into_tensor": (0, 1),
    "all_gather_rows": (0, 1),
    "all_to_all_single": (0, 1),
    "all_to_all": (0, 1),
    "reduce_scatter": (0, 1),
    "reduce_scatter_tensor": (0, 1),
    "gather": (0, 1),
    "scatter": (0, 1),
    "send": (0,),
    "recv": (0,),
    "isend": (0,),
    "irecv": (0,),
    "P2POp": (1,),
}
#: Keyword names of tensor arguments.
TENSOR_KEYWORDS = frozenset(
    {"tensor", "tensor_list", "output", "input", "output_tensor", "input_tensor", "out", "rows"}
)
#: Calls whose result is no longer a tensor (or no longer on the host).
CLEANSERS = frozenset(
    {"int", "float", "bool", "len", "item", "tolist", "numel", "to", "cuda", "str", "repr"}
)
#: Attributes of a tensor that are not a tensor.
METADATA = frozenset({"device", "dtype", "shape", "ndim", "is_cuda", "layout"})
#: Modules through which the collectives are called (``dist.all_reduce``).
DIST_MODULES = frozenset({"dist", "distributed", "c10d"})


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    call: str
    argument: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.call}({self.argument}, ...)"


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _factory(call: ast.Call) -> bool | None:
    """``True`` for a torch factory call without ``device=``, ``False`` with one, ``None``
    for any other call."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in FACTORIES
        and isinstance(func.value, ast.Name)
        and func.value.id == "torch"
    ):
        return None
    return not any(k.arg == "device" for k in call.keywords)


def _collective(call: ast.Call) -> tuple[str, tuple[int, ...]] | None:
    """The collective ``call`` makes and the positions of its tensor arguments, if any."""
    func = call.func
    name = _name(func)
    if isinstance(func, ast.Attribute):
        owner = func.value
        if name == "log" and any(
            k.arg == "sync_dist" and not (isinstance(k.value, ast.Constant) and not k.value.value)
            for k in call.keywords
        ):
            return "log(sync_dist)", (1,)
        if name == "reduce" and _name(owner) == "strategy":
            return "strategy.reduce", (0,)
        if name in COLLECTIVES and _name(owner) in DIST_MODULES:
            return name, COLLECTIVES[name]
        return None
    if name in ("all_gather_rows", "all_reduce", "P2POp"):  # imported by name
        return name, COLLECTIVES[name]
    return None


class _Tainted:
    """Whether an expression holds a device-less factory call or a tainted name."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def __call__(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Call):
            callee = _name(node.func)
            if callee in CLEANSERS:
                return False
            factory = _factory(node)
            if factory is not None:
                return factory
            parts: list[ast.AST] = [*node.args, *(k.value for k in node.keywords)]
            if isinstance(node.func, ast.Attribute):
                parts.append(node.func.value)  # a method of a tainted tensor: x.clone()
            return any(self(p) for p in parts)
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute) and node.attr in METADATA:
            return False  # x.device, x.shape: not the tensor
        if isinstance(node, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        return any(self(child) for child in ast.iter_child_nodes(node))


def _targets(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Tuple | ast.List):
        for elt in node.elts:
            yield from _targets(elt)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements in source order, into compound statements (not into nested functions)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list):
                yield from _statements(inner)  # type: ignore[arg-type]


def _own_calls(node: ast.AST) -> Iterator[ast.Call]:
    """Calls inside one statement's own expressions (not inside nested blocks)."""
    stack = [
        child
        for field, child in ast.iter_fields(node)
        if field not in ("body", "orelse", "finalbody", "handlers")
        for child in (child if isinstance(child, list) else [child])
        if isinstance(child, ast.AST)
    ]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Call):
            yield item
        if not isinstance(item, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef):
            stack.extend(ast.iter_child_nodes(item))


def scan_function(func: ast.FunctionDef | ast.AsyncFunctionDef, path: str) -> list[Finding]:
    tainted: set[str] = set()
    is_tainted = _Tainted(tainted)
    findings: list[Finding] = []
    for stmt in _statements(func.body):
        for call in _own_calls(stmt):
            found = _collective(call)
            if found is None:
                continue
            name, positions = found
            args = [call.args[i] for i in positions if i < len(call.args)]
            args += [k.value for k in call.keywords if k.arg in TENSOR_KEYWORDS]
            for arg in args:
                if is_tainted(arg):
                    findings.append(Finding(path, call.lineno, name, ast.unparse(arg)))
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            dirty = is_tainted(stmt.value)
            for target in targets:
                for name in _targets(target):
                    (tainted.add if dirty else tainted.discard)(name)
        elif isinstance(stmt, ast.AugAssign) and is_tainted(stmt.value):
            tainted.update(_targets(stmt.target))
    return findings


def scan_source(source: str, path: str) -> list[Finding]:
    tree = ast.parse(source, filename=path)
    return [
        finding
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for finding in scan_function(node, path)
    ]


def _lightgraph_files() -> Iterator[str]:
    for folder, _, files in os.walk(ROOT):
        for file in sorted(files):
            if file.endswith(".py"):
                yield os.path.join(folder, file)


def test_no_device_less_factory_tensor_reaches_a_collective() -> None:
    findings = []
    count = 0
    for path in _lightgraph_files():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        rel = os.path.relpath(path, os.path.dirname(ROOT))
        findings += scan_source(source, rel)
        count += "dist." in source
    assert count >= 10  # the scan read the modules that call collectives
    assert not findings, (
        "tensors made without `device=` reach collectives (they stay on the host, which "
        "NCCL rejects): create them on the compute device (e.g. `device=self.device`) or "
        "move them first:\n" + "\n".join(f"  {f}" for f in findings)
    )


_EXAMPLE = """
import torch
import torch.distributed as dist

def flags_with_gradients(params, grads):
    flat = torch.cat(grads + [torch.tensor([1.0, 0.0])])
    dist.all_reduce(flat)  # 1: a host flag tensor inside the concatenation

def derived(self):
    stats = torch.zeros(5, dtype=torch.float64)
    sums = stats[:2].clone()
    dist.all_reduce(sums, op=dist.ReduceOp.SUM)  # 2: derived from a host tensor
    count = int(stats.sum())
    dist.broadcast(torch.empty(3), src=count)  # 3: a factory right in the call

def logged(self, value):
    self.log("x", torch.tensor(float(value)), sync_dist=True)  # 4
    self.log("y", torch.tensor(float(value)), sync_dist=False)
    self.log("z", float(value), sync_dist=True)

def reduced(trainer):
    values = torch.tensor([1.0])
    trainer.strategy.reduce(values, reduce_op="sum")  # 5
    rows = torch.ones(2, 3)
    all_gather_rows(torch.empty(4, 3, device=rows.device), rows)  # 6 (rows), not the output

def fine(self, x):
    a = torch.zeros(3, device=x.device)
    dist.all_reduce(a)
    b = torch.tensor([1.0]).to(x.device)
    dist.all_reduce(b)
    c = torch.tensor([2.0])
    c = c.cuda()
    dist.all_reduce(c)
    dist.all_reduce(x.new_zeros(3))
    dist.all_reduce(torch.zeros_like(x))
    d = torch.tensor([3.0], device="cpu")  # an explicit choice
    dist.all_reduce(d)
"""


def test_the_scan_finds_host_tensors_and_passes_device_tensors() -> None:
    findings = scan_source(_EXAMPLE, "example.py")
    got = sorted((f.call, f.argument) for f in findings)
    assert got == sorted(
        [
            ("all_reduce", "flat"),
            ("all_reduce", "sums"),
            ("broadcast", "torch.empty(3)"),
            ("log(sync_dist)", "torch.tensor(float(value))"),
            ("strategy.reduce", "values"),
            ("all_gather_rows", "rows"),
        ]
    ), got
