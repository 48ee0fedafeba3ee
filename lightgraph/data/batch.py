"""The evaluation batches of exact layer-wise inference: the whole graph, left where it is
(node tasks), and the graph with its query edges (link prediction)."""

from __future__ import annotations

import torch
from torch import Tensor

from lightgraph.utilities.random_state import make_generator

_SPLITS = ("train", "val", "test")


class FullGraphBatch:
    """The whole graph in CSC form for exact layer-wise evaluation of a mini-batch model.

    Sampled-training data modules yield one of these from their validation/test loaders
    when asked for exact evaluation; :class:`~lightgraph.models.MiniBatchNodeClassifier`
    then runs :func:`~lightgraph.nn.layerwise.layerwise_inference` over it. The tensors
    may be memory-mapped (an on-disk store): nothing here copies them, and the class is
    deliberately not a dataclass or ``Data`` so Lightning's device transfer leaves the
    graph where it is (the layers move one chunk at a time).

    Attributes:
        indptr: CSC row pointers ``[num_nodes + 1]`` (in-neighbours of each node).
        indices: CSC sources.
        x: node features ``[num_nodes, num_features]``.
        y: labels ``[num_nodes]`` (or ``[num_nodes, num_classes]`` multi-label).
        masks: ``{"train"|"val"|"test": bool [num_nodes]}``.
        node_ids: the original node id of every row (identity when ``None``).
    """

    def __init__(
        self,
        indptr: Tensor,
        indices: Tensor,
        x: Tensor,
        y: Tensor,
        masks: dict[str, Tensor],
        node_ids: Tensor | None = None,
    ) -> None:
        num_nodes = int(indptr.numel()) - 1
        for name, value in (("x", x), ("y", y)):
            if value.size(0) != num_nodes:
                raise ValueError(
                    f"FullGraphBatch: expected `{name}` to have one row per node ({num_nodes}) "
                    f"but got {value.size(0)}."
                )
        unknown = set(masks) - set(_SPLITS)
        if unknown:
            raise ValueError(
                f"FullGraphBatch: expected mask names in {_SPLITS} but got {sorted(unknown)}."
            )
        self.indptr = indptr
        self.indices = indices
        self.x = x
        self.y = y
        self.masks = masks
        self.node_ids = torch.arange(num_nodes) if node_ids is None else node_ids

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel()) - 1

    def nodes(self, split: str) -> Tensor:
        """Row indices of the nodes of ``split`` (``"train"``, ``"val"``, ``"test"``; ``"predict"`` = all)."""
        if split == "predict":
            return torch.arange(self.num_nodes)
        if split not in self.masks:
            raise ValueError(
                f"FullGraphBatch: expected `split` in {tuple(self.masks) + ('predict',)} but got "
                f"{split!r}."
            )
        return self.masks[split].nonzero().view(-1)

    def __repr__(self) -> str:
        return (
            f"FullGraphBatch(num_nodes={self.num_nodes}, num_edges={int(self.indices.numel())}, "
            f"num_features={self.x.size(1)})"
        )


class LinkEvalBatch:
    """One link-prediction evaluation: the split's message-passing graph and its queries.

    :class:`~lightgraph.models.LinkPredictor` computes every node's embedding once, layer
    by layer over the graph (:func:`~lightgraph.nn.layerwise.layerwise_inference`), then
    ranks each query edge ``(src_i, dst_i)`` against its negatives in chunks sized by its
    memory budget: the full ``[Q, K]`` score matrix never exists. Like
    :class:`FullGraphBatch` it is not a ``Data``, so Lightning leaves it where it is.

    Negatives are either given (``neg``, ``[Q, K]``: e.g. OGB's 1,000 per positive) or
    drawn: ``num_negatives`` uniform destinations per query, from a generator keyed by
    ``(seed, split, block)`` for fixed blocks of :attr:`NEGATIVE_BLOCK` (256) queries, so they
    never depend on how the scoring is chunked and never need ``Q * K`` memory.

    A third kind, ``shared_neg`` (``[2, M]`` node pairs, OGB's ``ogbl-collab`` and
    ``ogbl-ppa``), is one set of negative pairs for every query: each query's rank is then
    one plus the number of shared negatives scoring at least as high (Hits@K as OGB
    computes it; no MRR).

    Attributes:
        split: ``"val"`` or ``"test"``.
        indptr, indices: CSC of the split's message-passing graph.
        x: node features.
        src, dst: ``[Q]`` the query (positive) edges.
        neg: ``[Q, K]`` given negative destinations, or ``None`` (drawn).
        num_negatives: ``K`` when drawn.
        seed: seed of the drawn negatives.
        shared_neg: ``[2, M]`` negative pairs shared by all queries (``neg`` and
            ``num_negatives`` unused).
        rel: ``[Q]`` the relation type of every query, when the edges carry one: each
            query's negatives are scored under its relation.
    """

    NEGATIVE_BLOCK = 256

    def __init__(
        self,
        split: str,
        indptr: Tensor,
        indices: Tensor,
        x: Tensor,
        src: Tensor,
        dst: Tensor,
        neg: Tensor | None = None,
        num_negatives: int = 100,
        seed: int = 0,
        shared_neg: Tensor | None = None,
        rel: Tensor | None = None,
    ) -> None:
        owner = "LinkEvalBatch"
        num_nodes = int(indptr.numel()) - 1
        if x.size(0) != num_nodes:
            raise ValueError(
                f"{owner}: expected `x` to have one row per node ({num_nodes}) but got {x.size(0)}."
            )
        if src.shape != dst.shape or src.dim() != 1:
            raise ValueError(
                f"{owner}: expected `src` and `dst` to be 1-D of equal length but got shapes "
                f"{tuple(src.shape)} and {tuple(dst.shape)}."
            )
        if neg is not None and (neg.dim() != 2 or neg.size(0) != src.numel() or neg.size(1) < 1):
            raise ValueError(
                f"{owner}: expected `neg` to be [num_queries={src.numel()}, K >= 1] negative "
                f"destinations but got shape {tuple(neg.shape)}."
            )
        if shared_neg is not None:
            if shared_neg.dim() != 2 or shared_neg.size(0) != 2 or shared_neg.size(1) < 1:
                raise ValueError(
                    f"{owner}: expected `shared_neg` to be [2, M >= 1] negative node pairs but "
                    f"got shape {tuple(shared_neg.shape)}."
                )
            num_negatives = int(shared_neg.size(1))
        if rel is not None:
            if rel.dim() != 1 or rel.numel() != src.numel():
                raise ValueError(
                    f"{owner}: expected `rel` to give the relation type of each of the "
                    f"{src.numel()} queries but got shape {tuple(rel.shape)}."
                )
            if shared_neg is not None:
                raise ValueError(
                    f"{owner}: shared negative pairs carry no relation type; `rel` and "
                    f"`shared_neg` cannot be given together."
                )
        if neg is None and (isinstance(num_negatives, bool) or num_negatives < 1):
            raise ValueError(
                f"{owner}: ranking needs negatives: expected `neg` or `num_negatives` >= 1 "
                f"but got num_negatives={num_negatives!r}."
            )
        self.split = split
        self.indptr, self.indices, self.x = indptr, indices, x
        self.src, self.dst = src.long(), dst.long()
        self.neg = None if neg is None else neg.long()
        self.num_negatives = int(neg.size(1)) if neg is not None else int(num_negatives)
        self.seed = int(seed)
        self.shared_neg = None if shared_neg is None else shared_neg.long()
        self.rel = None if rel is None else rel.long()

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel()) - 1

    @property
    def num_queries(self) -> int:
        return int(self.src.numel())

    def negatives(self, start: int, stop: int, out: Tensor | None = None) -> Tensor:
        """``[stop - start, K]`` negative destinations of queries ``[start, stop)``
        (written into ``out``, an ``int64`` tensor of at least that many rows, when given:
        evaluation reuses one buffer instead of allocating a block per chunk)."""
        rows = max(stop - start, 0)
        if self.neg is not None:
            if out is None:
                return self.neg[start:stop]
            return out[:rows].copy_(self.neg[start:stop])
        dest = (
            out[:rows]
            if out is not None
            else torch.empty(rows, self.num_negatives, dtype=torch.long)
        )
        block = self.NEGATIVE_BLOCK
        for b in range(start // block, (stop + block - 1) // block) if rows else ():
            lo, hi = b * block, min((b + 1) * block, self.num_queries)
            gen = make_generator(self.seed, "eval-negatives", self.split, b)
            a, z = max(start, lo), min(stop, hi)
            if (a, z) == (lo, hi):  # a whole block: drawn straight into place
                torch.randint(
                    0,
                    self.num_nodes,
                    (hi - lo, self.num_negatives),
                    generator=gen,
                    out=dest[a - start : z - start],
                )
            else:
                drawn = torch.randint(
                    0, self.num_nodes, (hi - lo, self.num_negatives), generator=gen
                )
                dest[a - start : z - start] = drawn[a - lo : z - lo]
        return dest

    def __repr__(self) -> str:
        return (
            f"LinkEvalBatch(split={self.split!r}, num_nodes={self.num_nodes}, "
            f"num_queries={self.num_queries}, num_negatives={self.num_negatives})"
        )
