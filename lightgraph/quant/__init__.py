"""Bit-width policies for quantised boundary exchanges, and AdaQP's assignment solver."""

from lightgraph.quant.bit_width_policy import BITS, BitWidthPolicy
from lightgraph.quant.cost_model import CommCostModel, fit_cost_model, ring_schedule
from lightgraph.quant.degree_aware_bits import DegreeAwareBits
from lightgraph.quant.fixed_bits import FixedBits
from lightgraph.quant.milp_assignment import (
    BitAssignment,
    evaluate_bit_assignment,
    group_messages,
    solve_bit_assignment,
)
from lightgraph.quant.random_bits import RandomBits
from lightgraph.quant.variance_aware_bits import (
    AssignmentReport,
    VarianceAwareBits,
    aggregation_coefficients,
    solve_exchange,
)

__all__ = [
    "BITS",
    "AssignmentReport",
    "BitAssignment",
    "BitWidthPolicy",
    "CommCostModel",
    "DegreeAwareBits",
    "FixedBits",
    "RandomBits",
    "VarianceAwareBits",
    "aggregation_coefficients",
    "evaluate_bit_assignment",
    "fit_cost_model",
    "group_messages",
    "ring_schedule",
    "solve_bit_assignment",
    "solve_exchange",
]
