"""Lightning strategies for partition-parallel and graph-parallel training."""

from lightning.pytorch.strategies import StrategyRegistry

from lightgraph.strategies.boundary_exchange import BoundaryExchangeStrategy
from lightgraph.strategies.exchange_group import ExchangeGroupStrategy
from lightgraph.strategies.flow_parallel import FlowParallelStrategy
from lightgraph.strategies.graph_parallel import GraphParallelStrategy

BoundaryExchangeStrategy.register_strategies(StrategyRegistry)
GraphParallelStrategy.register_strategies(StrategyRegistry)
FlowParallelStrategy.register_strategies(StrategyRegistry)

__all__ = [
    "BoundaryExchangeStrategy",
    "ExchangeGroupStrategy",
    "FlowParallelStrategy",
    "GraphParallelStrategy",
]
