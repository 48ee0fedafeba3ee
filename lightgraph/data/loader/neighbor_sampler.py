"""Uniform neighbour sampling behind PyG's ``BaseSampler``, and a ``NeighborLoader`` twin.

PyG's ``NeighborLoader`` needs pyg-lib or torch-sparse for its sampler. Here the sampler
is :func:`lightgraph.functional.neighbor_sampling.sample_neighbors` (pure, vectorised
torch, CPU or CUDA), wrapped as a ``torch_geometric.sampler.BaseSampler`` so that
``torch_geometric.loader.NodeLoader`` (and ``LinkLoader``) turn its output into ordinary
``Data`` mini-batches, with ``n_id``, ``e_id``, ``batch_size``, ``input_id`` and the
``num_sampled_nodes``/``num_sampled_edges`` that PyG's models take as
``num_sampled_nodes_per_hop``/``num_sampled_edges_per_hop`` to trim their layers::

    loader = neighbor_loader(data, fanouts=[15, 10, 5], input_nodes=data.train_mask,
                             batch_size=1024, shuffle=True, seed=0)
    for batch in loader:
        out = model(batch.x, batch.edge_index,
                    num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)

from lightgraph.data.datasets.graph_dataset import ensure_edge_index
from lightgraph.functional.neighbor_sampling import (
    NODE_BUFFER_MAX_NODES,
    check_fanouts,
    make_node_buffer,
    sample_neighbors,
    to_csc,
)
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_int,
    check_optional_int,
    check_type,
    describe,
)
from lightgraph.utilities.imports import WITH_PYG_LIB, WITH_TORCH_SPARSE
from lightgraph.utilities.random_state import (
    check_rng_state,
    generator_state,
    restore_generator,
)

__all__ = ["BACKENDS", "UniformNeighborSampler", "neighbor_loader"]

#: Sampling backends: lightgraph's vectorised torch sampler, or PyG's compiled one.
BACKENDS: tuple[str, ...] = ("torch", "pyg")


class UniformNeighborSampler(BaseSampler):
    """Uniform multi-hop neighbour sampler for ``torch_geometric.loader.NodeLoader``.

    Named apart from PyG's ``torch_geometric.sampler.NeighborSampler`` (which it can
    delegate to with ``backend="pyg"``). With ``backend="torch"`` sampling runs
    :func:`~lightgraph.functional.neighbor_sampling.sample_neighbors` on the device of
    the graph; its output follows PyG's conventions (seeds first, then the nodes of hop
    1, 2, ...; ``row -> col`` message direction; edges grouped by hop).

    Args:
        graph: a ``Data`` (its ``edge_index``, or a sparse ``adj_t``, is converted to CSC
            once, on its device), or ``(indptr, indices, num_nodes)`` in CSC form (see
            :func:`~lightgraph.functional.neighbor_sampling.to_csc`), ``int32`` or
            ``int64``, possibly backed by a ``numpy.memmap``: only sampled rows are read.
        fanouts: neighbours per node for each hop, a positive integer or ``-1`` (all).
        replace: sample with replacement.
        seed: seed of the sampler's own ``torch.Generator``, on the graph's device
            (reproducible batches).
        generator: a ``torch.Generator`` to draw from instead (not with ``seed``).
            Neither: the global torch RNG. In ``DataLoader`` workers a seeded
            generator is re-seeded from the worker's seed (``DataLoader``'s
            ``generator`` makes that reproducible), so workers draw different samples.
        backend: ``"torch"`` or ``"pyg"`` (PyG's ``NeighborSampler``; needs pyg-lib or
            torch-sparse and a ``Data`` graph; its RNG is torch's global one).
        edge_permutation: with a CSC ``graph``, the original edge id of every CSC edge
            (``e_id`` and edge attributes of the batches follow it); ``None``: the CSC
            position is the edge id.
        node_buffer: relabel through an ``int64 [num_nodes]`` scratch buffer (faster; 8
            bytes per node). ``None``: when ``num_nodes <= NODE_BUFFER_MAX_NODES``
            (``2**25``; :mod:`lightgraph.functional.neighbor_sampling`).

    Raises:
        ValueError: bad fanouts, backend, or graph tensors (the message names them).
        ImportError: ``backend="pyg"`` without pyg-lib and torch-sparse.
    """

    def __init__(
        self,
        graph: Data | tuple[Tensor, Tensor, int],
        fanouts: Sequence[int],
        replace: bool = False,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        backend: str = "torch",
        edge_permutation: Tensor | None = None,
        node_buffer: bool | None = None,
    ) -> None:
        owner = type(self).__name__
        self.fanouts = check_fanouts(owner, fanouts)
        self.replace = check_bool(owner, "replace", replace)
        self.backend = check_choice(owner, "backend", backend, BACKENDS)
        self.seed = check_optional_int(owner, "seed", seed, low=0)
        if generator is not None:
            check_type(owner, "generator", generator, torch.Generator)
            if seed is not None:
                raise ValueError(
                    f"{owner}: expected one of `seed` and `generator` but got both (seed={seed!r})."
                )
        if node_buffer is not None:
            check_bool(owner, "node_buffer", node_buffer)
        self._pyg_sampler: BaseSampler | None = None
        self._perm: Tensor | None = None

        if isinstance(graph, Data):
            graph = ensure_edge_index(graph)
            self.num_nodes = int(graph.num_nodes)
            if self.backend == "pyg":
                self._pyg_sampler = _pyg_neighbor_sampler(owner, graph, self.fanouts, replace)
                self.indptr = self.indices = None
            else:
                if edge_permutation is not None:
                    raise ValueError(
                        f"{owner}: expected `edge_permutation` only with a CSC `graph` "
                        f"(indptr, indices, num_nodes) but got it with a Data."
                    )
                self.indptr, self.indices, perm = to_csc(
                    graph.edge_index, self.num_nodes, return_perm=True
                )
                identity = torch.equal(perm, torch.arange(perm.numel(), device=perm.device))
                self._perm = None if identity else perm
        elif isinstance(graph, (tuple, list)) and len(graph) == 3:
            if self.backend == "pyg":
                raise ValueError(
                    f"{owner}: expected `graph` to be a Data with backend='pyg' but got a CSC "
                    f"tuple (indptr, indices, num_nodes); use backend='torch'."
                )
            self.indptr, self.indices, num_nodes = graph
            self.num_nodes = check_int(owner, "num_nodes", num_nodes, low=0)
            for name, t in (("indptr", self.indptr), ("indices", self.indices)):
                check_type(owner, name, t, torch.Tensor, "int32 or int64")
                if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
                    raise ValueError(
                        f"{owner}: expected `{name}` to be a 1-D torch.int32 or torch.int64 "
                        f"tensor but got {describe(t)}."
                    )
            if self.indptr.numel() != self.num_nodes + 1:
                raise ValueError(
                    f"{owner}: expected `indptr` of num_nodes + 1 = {self.num_nodes + 1} "
                    f"entries but got {self.indptr.numel()}."
                )
            if edge_permutation is not None:
                check_type(owner, "edge_permutation", edge_permutation, torch.Tensor)
                if edge_permutation.shape != self.indices.shape:
                    raise ValueError(
                        f"{owner}: expected `edge_permutation` of shape "
                        f"{tuple(self.indices.shape)} (one id per CSC edge) but got "
                        f"{describe(edge_permutation)}."
                    )
            self._perm = edge_permutation
        else:
            raise TypeError(
                f"{owner}: expected `graph` to be a torch_geometric.data.Data or a tuple "
                f"(indptr, indices, num_nodes) but got {type(graph).__name__}."
            )

        if generator is None and self.seed is not None:
            device = self.indptr.device if self.indptr is not None else torch.device("cpu")
            generator = torch.Generator(device=device).manual_seed(self.seed)
        self.generator = generator
        self._worker_seed: int | None = None
        if node_buffer is None:
            node_buffer = self.num_nodes <= NODE_BUFFER_MAX_NODES
        self.use_node_buffer = node_buffer
        self._buffer: Tensor | None = None

    # ----------------------------------------------------------------- BaseSampler API
    @property
    def edge_permutation(self) -> Tensor | None:
        """Original edge id of every CSC edge (``None``: the identity)."""
        if self._pyg_sampler is not None:
            return self._pyg_sampler.edge_permutation
        return self._perm

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs: Any) -> SamplerOutput:
        """Sample the neighbourhood of ``inputs.node`` (seeds first in ``node``)."""
        if self._pyg_sampler is not None:
            return self._pyg_sampler.sample_from_nodes(inputs, **kwargs)
        owner = type(self).__name__
        if inputs.input_type is not None:
            raise ValueError(
                f"{owner}: expected homogeneous inputs (`input_type` None) but got "
                f"input_type={inputs.input_type!r}; heterogeneous graphs need backend='pyg'."
            )
        if inputs.time is not None:
            raise ValueError(
                f"{owner}: temporal sampling is not supported; expected `time` None but got "
                f"{describe(inputs.time)}."
            )
        out = self._sample(inputs.node)
        out.metadata = (inputs.input_id, inputs.time)
        return out

    def sample_from_edges(
        self, inputs: EdgeSamplerInput, neg_sampling: NegativeSampling | None = None
    ) -> SamplerOutput:
        """Sample the neighbourhood of both ends of seed links (for ``LinkLoader``)."""
        if self._pyg_sampler is not None:
            return self._pyg_sampler.sample_from_edges(inputs, neg_sampling)
        from torch_geometric.sampler.neighbor_sampler import edge_sample

        if inputs.time is not None:
            raise ValueError(
                f"{type(self).__name__}: temporal sampling is not supported; expected "
                f"`time` None but got {describe(inputs.time)}."
            )
        return edge_sample(inputs, self._sample, self.num_nodes, False, None, neg_sampling)

    # ------------------------------------------------------------------------ sampling
    def _sample(
        self, seed: Tensor, seed_time: Tensor | None = None, **kwargs: Any
    ) -> SamplerOutput:
        self._reseed_in_worker()
        buffer = None
        if self.use_node_buffer:
            if self._buffer is None:
                self._buffer = make_node_buffer(self.num_nodes, self.indptr.device)
            buffer = self._buffer
        out = sample_neighbors(
            self.indptr,
            self.indices,
            seed,
            self.fanouts,
            replace=self.replace,
            generator=self.generator,
            node_buffer=buffer,
        )
        return SamplerOutput(
            node=out.node,
            row=out.row,
            col=out.col,
            edge=out.edge,
            num_sampled_nodes=out.num_sampled_nodes,
            num_sampled_edges=out.num_sampled_edges,
        )

    # ------------------------------------------------------------------- random state
    def rng_state(self) -> dict[str, Any]:
        """The state of the sampler's generator (``None``: it draws from torch's global
        generator), for :class:`~lightgraph.callbacks.RandomStateCheckpoint`.

        Only draws made in this process are captured: ``DataLoader`` workers re-seed
        their copies from the worker seed, which follows the loader's ``generator``.
        """
        return {"generator": generator_state(self.generator)}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Continue sampling from :meth:`rng_state` (the generator is set in place)."""
        owner = f"{type(self).__name__}.set_rng_state"
        check_rng_state(owner, state, ("generator",), f"{type(self).__name__}.rng_state()")
        self.generator = restore_generator(
            state["generator"], self.generator, owner, "state['generator']"
        )

    def _reseed_in_worker(self) -> None:
        """Give every ``DataLoader`` worker its own stream of a seeded generator."""
        info = torch.utils.data.get_worker_info()
        if info is None or self.generator is None or self._worker_seed == info.seed:
            return
        self._worker_seed = info.seed
        base = self.seed if self.seed is not None else self.generator.initial_seed()
        self.generator.manual_seed((base * 0x9E3779B97F4A7C15 + info.seed) % (1 << 63))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_buffer"] = None  # re-allocated where it is used (e.g. a spawned worker)
        return state

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_nodes={self.num_nodes}, fanouts={self.fanouts}, "
            f"replace={self.replace}, backend={self.backend!r})"
        )


def _pyg_neighbor_sampler(owner: str, data: Data, fanouts: list[int], replace: bool) -> BaseSampler:
    if not (WITH_PYG_LIB or WITH_TORCH_SPARSE):
        raise ImportError(
            f"{owner}: backend='pyg' runs PyG's compiled neighbour sampler, which needs "
            f"`pyg-lib` or `torch-sparse`, and neither is installed: install pyg-lib from the "
            f"PyG wheel index that matches your torch build, or torch-sparse "
            f"(`pip install lightgraph[sparse]`), or use backend='torch'."
        )
    from torch_geometric.sampler import NeighborSampler

    return NeighborSampler(data, num_neighbors=list(fanouts), replace=replace)


def neighbor_loader(
    data: Data,
    fanouts: Sequence[int],
    input_nodes: Tensor | None = None,
    batch_size: int = 1000,
    shuffle: bool = False,
    seed: int = 0,
    backend: str = "torch",
    replace: bool = False,
    **loader_kwargs: Any,
) -> NodeLoader:
    """A ``NodeLoader`` of neighbour-sampled ``Data`` mini-batches (PyG's ``NeighborLoader``).

    Every batch holds the sampled subgraph of ``batch_size`` seeds with ``x``, ``y`` and
    the other node and edge attributes gathered by ``n_id``/``e_id`` (only those rows are
    read, so ``data.x`` may be a memmap-backed tensor), the seeds first
    (``batch.batch_size`` of them), and ``num_sampled_nodes``/``num_sampled_edges`` for
    PyG's layer trimming.

    Args:
        data: the graph (``edge_index`` or ``adj_t``).
        fanouts: neighbours per node for each hop (positive or ``-1`` for all).
        input_nodes: seed nodes: ids, a boolean mask, or ``None`` (all nodes).
        batch_size: seeds per batch.
        shuffle: reshuffle the seeds every epoch (drawn from ``seed``, unless
            ``loader_kwargs`` holds a ``generator``).
        seed: seed of the sampler (and of the shuffling and worker seeds).
        backend: ``"torch"`` (lightgraph's sampler) or ``"pyg"`` (needs pyg-lib or
            torch-sparse).
        replace: sample with replacement.
        **loader_kwargs: more ``NodeLoader``/``DataLoader`` arguments (``num_workers``,
            ``drop_last``, ``transform``, ...).
    """
    owner = "neighbor_loader"
    check_type(owner, "data", data, Data)
    check_int(owner, "batch_size", batch_size)
    check_bool(owner, "shuffle", shuffle)
    check_int(owner, "seed", seed, low=0)
    sampler = UniformNeighborSampler(data, fanouts, replace=replace, seed=seed, backend=backend)
    loader_kwargs.setdefault("generator", torch.Generator().manual_seed(seed))
    return NodeLoader(
        data,
        node_sampler=sampler,
        input_nodes=input_nodes,
        batch_size=batch_size,
        shuffle=shuffle,
        **loader_kwargs,
    )
