"""Bit-width policies for quantised boundary exchanges."""

from lightgraph.quant.bit_width_policy import BITS, BitWidthPolicy
from lightgraph.quant.degree_aware_bits import DegreeAwareBits
from lightgraph.quant.fixed_bits import FixedBits
from lightgraph.quant.random_bits import RandomBits

__all__ = ["BITS", "BitWidthPolicy", "DegreeAwareBits", "FixedBits", "RandomBits"]
