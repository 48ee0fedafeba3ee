"""Compatibility module: :class:`HaloExchanger` lives in :mod:`lightgraph.distributed`."""

from lightgraph.distributed.halo_exchanger import MODES, HaloExchanger

__all__ = ["MODES", "HaloExchanger"]
