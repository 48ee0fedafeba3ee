"""Bit-width policies for quantised boundary exchanges."""

from lightgraph.quant.bit_width_policy import BITS, BitWidthPolicy
from lightgraph.quant.degree_aware_bits import DegreeAwareBits
from lightgraph.quant.fixed_bits import FixedBits

__all__ = ["BITS", "BitWidthPolicy", "DegreeAwareBits", "FixedBits"]
