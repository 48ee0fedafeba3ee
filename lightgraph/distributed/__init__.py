"""Runtime that owns process groups but knows nothing of Lightning.

Strategies (:mod:`lightgraph.strategies`) build these objects on their dedicated process
group and hand them to modules in a :class:`ParallelContext`; they can equally be used
from plain ``torch.distributed`` code.
"""

from lightgraph.distributed.bit_assignment import reassign_bits
from lightgraph.distributed.bubble_interleaver import BubbleInterleaver
from lightgraph.distributed.context import (
    ParallelContext,
    ParallelContextHolder,
    parallel_context,
)
from lightgraph.distributed.flow_pipeline import COMPUTE_KINDS, ComputeObserver, FlowPipeline
from lightgraph.distributed.halo_exchanger import MODES, HaloExchanger
from lightgraph.distributed.link_profiler import profile_links, resolve_cost_model
from lightgraph.distributed.sequence_parallel import SequenceParallel
from lightgraph.distributed.timeline import Interval, Timeline

__all__ = [
    "COMPUTE_KINDS",
    "ComputeObserver",
    "FlowPipeline",
    "MODES",
    "BubbleInterleaver",
    "HaloExchanger",
    "Interval",
    "ParallelContext",
    "ParallelContextHolder",
    "SequenceParallel",
    "Timeline",
    "parallel_context",
    "profile_links",
    "reassign_bits",
    "resolve_cost_model",
]
