"""Utilities every floor may use: argument checks, optional-dependency flags, random states."""

from lightgraph.utilities.checks import (
    BITS,
    check_bits,
    check_bool,
    check_choice,
    check_int,
    check_non_empty_str,
    check_non_negative,
    check_optional_int,
    check_positive,
    check_probability,
    check_rate,
    check_type,
)
from lightgraph.utilities.imports import (
    WITH_PYG_LIB,
    WITH_TORCH_SPARSE,
    WITH_TRANSFORMERS,
    require,
    require_torch_sparse,
    resolve_model_path,
)
from lightgraph.utilities.random_state import (
    check_rng_state,
    generator_state,
    global_rng_state,
    restore_generator,
    restore_global_rng_state,
    seed_global_rngs,
)

__all__ = [
    "BITS",
    "WITH_PYG_LIB",
    "WITH_TORCH_SPARSE",
    "WITH_TRANSFORMERS",
    "check_bits",
    "check_bool",
    "check_choice",
    "check_int",
    "check_non_empty_str",
    "check_non_negative",
    "check_optional_int",
    "check_positive",
    "check_probability",
    "check_rate",
    "check_rng_state",
    "check_type",
    "generator_state",
    "global_rng_state",
    "require",
    "require_torch_sparse",
    "resolve_model_path",
    "restore_generator",
    "restore_global_rng_state",
    "seed_global_rngs",
]
