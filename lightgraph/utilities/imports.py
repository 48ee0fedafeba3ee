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

import importlib.util

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
