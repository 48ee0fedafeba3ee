"""Per-row stochastic integer quantization of boundary-node messages (Sylvie, ICDE'24, Eq. 3-4).

Each row ``h`` (one boundary node's embedding, or its embedding gradient) is sent as
``b``-bit integer codes plus two per-row parameters, a zero point and a scale:

.. math::

    \\hat h_i = \\left\\lfloor \\frac{h_i - z}{s} + u_i \\right\\rfloor,
    \\quad u_i \\sim U[0, 1), \\qquad
    \\tilde h_i = s \\, \\hat h_i + z.

One module per job:

* :mod:`~lightgraph.functional.quantize.reference`: the reference quantiser, how the
  bfloat16 scale and the zero point of a row are chosen (exactly, so no code is ever
  clipped) and the element-wise cores;
* :mod:`~lightgraph.functional.quantize.noise`: the counter-based rounding noise;
* :mod:`~lightgraph.functional.quantize.wire`: the wire format, bit packing, the message
  layout with its trailer of wide-offset rows, byte order and size;
* :mod:`~lightgraph.functional.quantize.fused`: the fused numba CPU path;
* :mod:`~lightgraph.functional.quantize.fused_triton`: the fused Triton path (CUDA, and
  CPU tensors under Triton's interpreter);
* :mod:`~lightgraph.functional.quantize.dispatch`: the entry points :func:`quantize`,
  :func:`dequantize`, :func:`pack_rows` and :func:`unpack_rows`, which take a fused
  path or the torch reference (same bytes either way; ``path=`` chooses);
* :mod:`~lightgraph.functional.quantize.backend` loads the numba kernels,
  :mod:`~lightgraph.functional.quantize.checks` checks arguments.
"""

from lightgraph.functional.quantize.dispatch import (
    PATHS,
    dequantize,
    pack_rows,
    quantize,
    unpack_rows,
)
from lightgraph.functional.quantize.fused import warmup
from lightgraph.functional.quantize.noise import SEED_HIGH, counter_noise
from lightgraph.functional.quantize.reference import PARAM_DTYPE, QuantizedRows
from lightgraph.functional.quantize.wire import (
    PARAM_BYTES_PER_ROW,
    WIDE_BYTES_PER_ROW,
    message_nbytes,
    pack_codes,
    packed_nbytes,
    unpack_codes,
    wide_rows,
)
from lightgraph.utilities.checks import BITS

__all__ = [
    "BITS",
    "PARAM_BYTES_PER_ROW",
    "PATHS",
    "PARAM_DTYPE",
    "SEED_HIGH",
    "WIDE_BYTES_PER_ROW",
    "QuantizedRows",
    "counter_noise",
    "dequantize",
    "message_nbytes",
    "pack_codes",
    "pack_rows",
    "packed_nbytes",
    "quantize",
    "unpack_codes",
    "unpack_rows",
    "warmup",
    "wide_rows",
]
