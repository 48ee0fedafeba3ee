"""Lightning strategies for partition-parallel and graph-parallel training."""

from lightning.pytorch.strategies import StrategyRegistry

from lightgraph.strategies.boundary_exchange import BoundaryExchangeStrategy
from lightgraph.strategies.graph_parallel import GraphParallelStrategy
from lightgraph.strategies.halo_exchanger import HaloExchanger

BoundaryExchangeStrategy.register_strategies(StrategyRegistry)
GraphParallelStrategy.register_strategies(StrategyRegistry)

__all__ = ["BoundaryExchangeStrategy", "GraphParallelStrategy", "HaloExchanger"]
