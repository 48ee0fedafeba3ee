"""Every data module's type hints accept exactly what its run-time checks accept.

LightningCLI validates a recipe against the constructor's type hints before the
constructor's own checks run, so a ``str`` hint lets a typo through to a later error, and
a ``Literal`` narrower than the check rejects a value Python accepts. Each ``Literal``
argument of every data module ``lightgraph.data`` exports is parsed through LightningCLI's
parser and instantiated with every allowed value, and an unknown value is refused by both.
"""

from __future__ import annotations

import inspect
import typing

import lightning.pytorch as pl
import pytest
from lightning.pytorch.cli import LightningArgumentParser

import lightgraph.data as data

GRAPH = {
    "class_path": "lightgraph.data.SyntheticGraph",
    "init_args": {"num_nodes": 120, "num_features": 4},
}
# Arguments a module needs besides the one under test (the other mode's are left unset).
REQUIRED: dict[str, dict] = {
    "LinkMacroBatchDataModule": {"dataset": GRAPH},
    "LinkNeighborSamplingDataModule": {"dataset": GRAPH},
    "MacroBatchDataModule": {"dataset": GRAPH},
    "MultistageDataModule": {"dataset": GRAPH},
    "NeighborSamplingDataModule": {"dataset": GRAPH},
    "PartitionStoreDataModule": {"dataset": GRAPH},
    "PartitionedGraphDataModule": {"dataset": GRAPH},
    "PartitionedLinkDataModule": {"dataset": GRAPH},
}


def _data_modules() -> list[type]:
    out = []
    for name in data.__all__:
        obj = getattr(data, name)
        if inspect.isclass(obj) and issubclass(obj, pl.LightningDataModule):
            out.append(obj)
    return out


def _literal_values(hint: typing.Any) -> tuple | None:
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    for arg in typing.get_args(hint):  # Optional[Literal[...]]
        if typing.get_origin(arg) is typing.Literal:
            return typing.get_args(arg)
    return None


def _choices() -> list[tuple[type, str, tuple]]:
    found = []
    for cls in _data_modules():
        for name, hint in typing.get_type_hints(cls.__init__).items():
            values = _literal_values(hint)
            if values is not None:
                found.append((cls, name, values))
    return found


CHOICES = _choices()


def test_the_modules_with_choices_are_found():
    names = {(cls.__name__, arg) for cls, arg, _ in CHOICES}
    assert {
        ("PartitionedGraphDataModule", "partitioner"),
        ("MacroBatchDataModule", "rank_share"),
        ("MultistageDataModule", "first_stage"),
        ("NeighborSamplingDataModule", "storage"),
        ("NeighborSamplingDataModule", "eval_mode"),
        ("TextGraphDataModule", "serve"),
        ("NodeSequenceDataModule", "reorder"),
    } <= names


def test_partitioned_graph_module_takes_num_parts_and_every_partitioner():
    values = dict(((c.__name__, a), v) for c, a, v in CHOICES)
    assert values[("PartitionedGraphDataModule", "partitioner")] == ("metis", "random", "gap")
    assert "num_parts" in inspect.signature(data.PartitionedGraphDataModule).parameters


def _parse(cls: type, args: dict) -> typing.Any:
    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_lightning_class_args(cls, "data", subclass_mode=False)
    cfg = parser.parse_object({"data": args})
    return parser.instantiate_classes(cfg).data


@pytest.mark.parametrize(
    ("cls", "arg", "value"),
    [(c, a, v) for c, a, values in CHOICES for v in values],
    ids=lambda x: x.__name__ if isinstance(x, type) else str(x),
)
def test_every_allowed_value_parses_and_constructs(cls, arg, value):
    module = _parse(cls, {**REQUIRED.get(cls.__name__, {}), arg: value})
    assert isinstance(module, cls)


@pytest.mark.parametrize(
    ("cls", "arg"), [(c, a) for c, a, _ in CHOICES], ids=lambda x: getattr(x, "__name__", x)
)
def test_an_unknown_value_is_refused_by_the_parser_and_the_constructor(cls, arg):
    required = REQUIRED.get(cls.__name__, {})
    with pytest.raises(Exception, match="bogus"):
        _parse(cls, {**required, arg: "bogus"})
    kwargs = {k: data.SyntheticGraph(num_nodes=120, num_features=4) for k in required}
    with pytest.raises(ValueError, match=rf"`{arg}`.*'bogus'"):
        cls(**kwargs, **{arg: "bogus"})
