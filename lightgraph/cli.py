"""The ``lightgraph`` command: a LightningCLI over lightgraph's components."""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from typing import Any

import lightning.pytorch as pl
from jsonargparse import Namespace
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

import lightgraph.strategies  # noqa: F401  (registers the strategy names)
from lightgraph.data.datasets.graph_dataset import GraphDataset
from lightgraph.data.datasets.npy_graph_writer import from_pyg


class LightgraphCLI(LightningCLI):
    """``lightgraph fit --config recipes/vanilla.yaml``.

    Sizes known only from the data (feature size, number of classes, multi-label) are
    linked from the data module into the model when both are instantiated.
    """

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        """Parse ``args`` (``None``: ``sys.argv``) into ``self.config``.

        LightningCLI warns whenever ``args`` is given while ``sys.argv`` holds arguments
        too, a guard against mixing the two by mistake. The ``lightgraph`` command hands
        LightningCLI exactly the arguments it was run with (less ``prepare`` or
        ``convert``), so the
        warning would fire on every command; lightgraph parses them without it.
        """
        if isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments(
            "data.num_features",
            "model.init_args.model.init_args.in_channels",
            apply_on="instantiate",
        )
        parser.link_arguments(
            "data",
            "model.init_args.model.init_args.out_channels",
            compute_fn=_num_outputs,
            apply_on="instantiate",
        )
        parser.link_arguments(
            "data.num_classes", "model.init_args.num_classes", apply_on="instantiate"
        )
        parser.link_arguments(
            "data.multilabel", "model.init_args.multilabel", apply_on="instantiate"
        )


def _num_outputs(data: Any) -> int:
    """Outputs of the model's head: ``num_outputs`` (e.g. 1 for regression) or ``num_classes``."""
    outputs = getattr(data, "num_outputs", None)
    return int(outputs) if outputs is not None else data.num_classes


def build_cli(args: list[str] | None = None, run: bool = True) -> LightgraphCLI:
    """Build (and by default run) the CLI; ``args=None`` reads ``sys.argv``."""
    return LightgraphCLI(
        pl.LightningModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=args,
        run=run,
    )


def prepare(args: list[str]) -> str:
    """``lightgraph prepare --config RECIPE``: run the data module's ``prepare_data`` only.

    Builds what training would build first -- a partition store, a partition cache --
    without a Trainer run, e.g. once on a machine with more memory, and prints where it
    is. Returns that directory (``""`` if the data module has no cache).
    ``--memory_budget SIZE`` (bytes, or e.g. ``512MB``, ``1.5GiB``) is short for
    ``--data.init_args.memory_budget``: the anonymous memory each stage may add.
    """
    cli = build_cli(args=_budget_argument(args), run=False)
    module = cli.datamodule
    module.prepare_data()
    path_fn = getattr(module, "cache_path", None)
    path = str(path_fn()) if callable(path_fn) else ""
    print(f"{type(module).__name__}: prepared {path or '(no cache)'}")
    return path


_SIZE_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip


def parse_size(text: str) -> int:
    """Bytes of a size such as ``"1048576"``, ``"512MB"`` or ``"1.5GiB"`` (case-insensitive)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS or float(match.group(1)) * _SIZE_UNITS[unit] < 1:
        raise ValueError(
            f"lightgraph prepare: expected `--memory_budget` to be a positive size in bytes, "
            f"optionally with a unit ({', '.join(u for u in _SIZE_UNITS if u)}), e.g. 512MB or "
            f"1.5GiB, but got {text!r}."
        )
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def _budget_argument(args: list[str]) -> list[str]:
    """``args`` with ``--memory_budget SIZE`` (or ``=SIZE``) turned into
    ``--data.init_args.memory_budget=<bytes>``."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--memory_budget" or arg.startswith("--memory_budget="):
            if arg == "--memory_budget":
                if i + 1 >= len(args):
                    raise ValueError(
                        "lightgraph prepare: `--memory_budget` needs a size, e.g. "
                        "`--memory_budget 1GiB`."
                    )
                i += 1
                value = args[i]
            else:
                value = arg.split("=", 1)[1]
            out.append(f"--data.init_args.memory_budget={parse_size(value)}")
        else:
            out.append(arg)
        i += 1
    return out


def convert(args: list[str]) -> str:
    """``lightgraph convert --config RECIPE --out DIR``: write the recipe's dataset as an
    :class:`~lightgraph.data.NpyGraph` directory.

    Loads the data module's ``dataset`` once (e.g. a ``RealDataset`` downloaded through
    OGB or PyG) and writes it to ``DIR`` in chunks with :func:`~lightgraph.data.from_pyg`,
    so later runs read it memory-mapped (``--data.init_args.dataset.class_path=
    lightgraph.data.NpyGraph --data.init_args.dataset.init_args.root=DIR``) and the
    preparation streams it. ``--overwrite`` replaces a graph already in ``DIR``. Every other
    argument goes to the recipe as in ``lightgraph fit``. Returns ``DIR``.
    """
    parser = argparse.ArgumentParser(prog="lightgraph convert", add_help=False, allow_abbrev=False)
    parser.add_argument("--out", required=True, help="directory to write the graph to")
    parser.add_argument("--overwrite", action="store_true", help="replace a graph in --out")
    own, rest = parser.parse_known_args(args)
    cli = build_cli(args=rest, run=False)
    module = cli.datamodule
    dataset = getattr(module, "dataset", None)
    if not isinstance(dataset, GraphDataset):
        raise ValueError(
            f"lightgraph convert: expected the recipe's data module to wrap one GraphDataset "
            f"(its `dataset` argument) but {type(module).__name__} has "
            f"{type(dataset).__name__ if dataset is not None else 'no `dataset`'}."
        )
    try:
        graph = from_pyg(
            dataset.load(),
            own.out,
            num_classes=dataset.num_classes,
            name=dataset.fingerprint(),
            overwrite=own.overwrite,
        )
    except FileExistsError as exc:
        raise FileExistsError(
            f"lightgraph convert: {exc} (on the command line: --overwrite)"
        ) from exc
    print(
        f"{type(dataset).__name__}: wrote {graph.num_nodes} nodes, {graph.num_edges} edges "
        f"to {graph.root}"
    )
    return graph.root


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``lightgraph`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    with warnings.catch_warnings():
        # Lightning's own pytree helper calls a torch API that torch deprecated; the
        # warning concerns Lightning's code, not the user's run.
        warnings.filterwarnings(
            "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated"
        )
        if argv and argv[0] == "prepare":
            prepare(argv[1:])
            return
        if argv and argv[0] == "convert":
            convert(argv[1:])
            return
        build_cli(args=argv)


if __name__ == "__main__":
    main()
