"""Edge splits for link prediction: positive train / val / test edges and the graph each split
may pass messages over.

The meaning is PyG's ``RandomLinkSplit`` (``is_undirected`` for symmetric graphs,
``add_negative_train_samples=False``): the positive edges of a split are never in the
graph its model passes messages over at that split --

* training passes messages over the training edges (and, per batch, not over the batch's
  own positive edges: that exclusion is the loader's, see
  :mod:`lightgraph.data.loader.link_neighbor`);
* validation over the training edges;
* test over the training and validation edges.

On an undirected (symmetric) graph a positive edge is one unordered pair, stored once as
``(u, v)`` with ``u < v``, and both directions leave or join the message-passing graph
together. On a directed graph a positive edge is one ordered pair; with ``remove_reverse``
(the default) an edge and its reverse, where the graph has both, always fall in the same
split (both are positives of it), so a held-out edge's reverse never gives it away in a
message-passing graph. Self-loops are never positives: they stay in every
message-passing graph.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import GraphDataset, ensure_edge_index
from lightgraph.utilities.checks import check_bool, check_choice, check_graph_edge_index, check_int
from lightgraph.utilities.random_state import make_generator

LinkSplitName = Literal["train", "val", "test"]
LINK_SPLITS: tuple[str, ...] = get_args(LinkSplitName)
LinkSplitMode = Literal["transductive", "inductive"]
LINK_SPLIT_MODES: tuple[str, ...] = get_args(LinkSplitMode)


def edge_keys(src: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """One ``int64`` key per ordered pair: ``src * num_nodes + dst``."""
    return src.long() * num_nodes + dst.long()


def is_symmetric(edge_index: Tensor, num_nodes: int) -> bool:
    """Whether every edge ``(u, v)`` of ``edge_index`` has its reverse ``(v, u)``."""
    keys = edge_keys(edge_index[0], edge_index[1], num_nodes).unique()
    reverse = edge_keys(edge_index[1], edge_index[0], num_nodes)
    return bool(torch.isin(reverse, keys).all())


def pair_relations(
    splits: list[Tensor], edge_index: Tensor, edge_type: Tensor, num_nodes: int, undirected: bool
) -> list[Tensor]:
    """``[P]`` the relation type of every edge of each of ``splits`` (edges of
    ``edge_index``), from one sorted lookup of the graph's edges.

    A pair carries one relation type: the same pair listed twice with two types (a
    multi-relational pair) is an error, and so, on an undirected graph, is an edge whose
    reverse carries another type.
    """
    owner = "random_link_split"
    if edge_type.dim() != 1 or edge_type.numel() != edge_index.size(1):
        raise ValueError(
            f"{owner}: expected `edge_type` to give one relation type per edge "
            f"({edge_index.size(1)}) but got shape {tuple(edge_type.shape)}."
        )
    if edge_type.is_floating_point() or edge_type.dtype == torch.bool:
        raise ValueError(f"{owner}: expected integer `edge_type` but got {edge_type.dtype}.")
    if edge_type.numel() and int(edge_type.min()) < 0:
        raise ValueError(
            f"{owner}: expected `edge_type` >= 0 but got the value {int(edge_type.min())}."
        )
    keys = edge_keys(edge_index[0], edge_index[1], num_nodes)
    keys, order = keys.sort()
    types = edge_type.long()[order]
    clash = (keys[1:] == keys[:-1]) & (types[1:] != types[:-1])
    if bool(clash.any()):
        u, v = divmod(int(keys[1:][clash][0]), num_nodes)
        raise ValueError(
            f"{owner}: the edge ({u}, {v}) is listed with two relation types; a pair carries "
            f"one relation type here (multi-relational pairs are not supported)."
        )

    def lookup(src: Tensor, dst: Tensor) -> Tensor:
        at = torch.searchsorted(keys, edge_keys(src, dst, num_nodes)).clamp_(max=keys.numel() - 1)
        return types[at]

    out = []
    for edges in splits:
        rel = lookup(edges[0], edges[1])
        if undirected and edges.size(1):
            differ = lookup(edges[1], edges[0]) != rel
            if bool(differ.any()):
                i = int(differ.nonzero()[0])
                raise ValueError(
                    f"{owner}: the undirected edge ({int(edges[0, i])}, {int(edges[1, i])}) "
                    f"carries different relation types in its two directions."
                )
        out.append(rel)
    return out


@dataclass
class LinkSplit:
    """Positive edges of the train, validation and test splits and the rest of the graph.

    Attributes:
        num_nodes: nodes of the graph.
        undirected: positives are unordered pairs (stored ``u < v``) whose two directions
            leave and join the message-passing graphs together.
        train, val, test: ``[2, E_split]`` positive edges, global node ids.
        other: ``[2, E_other]`` edges of the graph that are never positives (self-loops),
            in every message-passing graph.
        remove_reverse: directed graphs: an edge and its reverse are in the same split
            (checked: no unordered pair in two splits).
        graph_keys: sorted keys (:func:`edge_keys`) of every directed edge of the graph.
        val_observed, test_observed: inductive splits: ``[2, E]`` edges of the nodes new
            at validation (test) that the model may pass messages over from that split
            on -- the rest of their edges are the split's positives (empty when
            transductive).
        check_disjoint: reject an edge in two splits (a benchmark's own split is taken as
            it is: ``False``).
        train_rel, val_rel, test_rel: ``[E_split]`` the relation type of every positive
            edge, when the graph's edges carry one (``None`` otherwise).
        num_relations: relation types (``0``: the edges carry none).

    Raises:
        ValueError: ids outside ``[0, num_nodes)``, an edge in two splits, or relation types
            that do not match the positives.
    """

    num_nodes: int
    undirected: bool
    train: Tensor
    val: Tensor
    test: Tensor
    other: Tensor
    remove_reverse: bool
    graph_keys: Tensor
    val_observed: Tensor | None = None
    test_observed: Tensor | None = None
    check_disjoint: bool = True
    train_rel: Tensor | None = None
    val_rel: Tensor | None = None
    test_rel: Tensor | None = None
    num_relations: int = 0

    def __post_init__(self) -> None:
        owner = "LinkSplit"
        n = self.num_nodes
        self._check_relations(owner)
        empty = torch.empty(2, 0, dtype=torch.long)
        if self.val_observed is None:
            self.val_observed = empty
        if self.test_observed is None:
            self.test_observed = empty
        for name in ("train", "val", "test", "other", "val_observed", "test_observed"):
            setattr(self, name, check_graph_edge_index(owner, name, getattr(self, name), n))
        seen: dict[str, Tensor] = {}
        checked = (*LINK_SPLITS, "val_observed", "test_observed") if self.check_disjoint else ()
        for name in checked:
            keys = self._canonical_keys(getattr(self, name))
            for other_name, other in seen.items():
                both = keys[torch.isin(keys, other)]
                if both.numel():
                    u, v = divmod(int(both[0]), n)
                    raise ValueError(
                        f"{owner}: expected the {other_name!r} and {name!r} positive edges to "
                        f"be disjoint but {both.numel()} edge(s) are in both, e.g. ({u}, {v})"
                        + (
                            " (as an unordered pair)"
                            if self.undirected or self.remove_reverse
                            else ""
                        )
                        + "."
                    )
            seen[name] = keys

    def _check_relations(self, owner: str) -> None:
        given = [getattr(self, f"{name}_rel") is not None for name in LINK_SPLITS]
        if not any(given):
            if self.num_relations:
                raise ValueError(
                    f"{owner}: `num_relations={self.num_relations}` but no relation types were "
                    f"given (train_rel, val_rel, test_rel)."
                )
            return
        check_int(owner, "num_relations", self.num_relations, low=1)
        for name in LINK_SPLITS:
            rel = getattr(self, f"{name}_rel")
            edges = getattr(self, name)
            if rel is None or rel.dim() != 1 or rel.numel() != edges.size(1):
                raise ValueError(
                    f"{owner}: expected `{name}_rel` to give the relation type of each of the "
                    f"{edges.size(1)} {name} edges but got "
                    f"{None if rel is None else tuple(rel.shape)}."
                )
            if rel.numel() and (int(rel.min()) < 0 or int(rel.max()) >= self.num_relations):
                raise ValueError(
                    f"{owner}: expected `{name}_rel` in [0, {self.num_relations - 1}] but got "
                    f"values in [{int(rel.min())}, {int(rel.max())}]."
                )

    def relations(self, split: str) -> Tensor | None:
        """``[E]`` the relation types of ``split``'s positives, or ``None``."""
        self.positives(split)  # checks the name
        return getattr(self, f"{split}_rel")

    def state_dict(self) -> dict[str, Any]:
        """Every field, for ``LinkSplit(**state)`` (what the caches save)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def _canonical_keys(self, edges: Tensor) -> Tensor:
        src, dst = edges
        if self.undirected or self.remove_reverse:
            src, dst = torch.minimum(src, dst), torch.maximum(src, dst)
        return edge_keys(src, dst, self.num_nodes)

    def positives(self, split: str) -> Tensor:
        """``[2, E]`` positive edges of ``split`` (``"train"``, ``"val"``, ``"test"``)."""
        if split not in LINK_SPLITS:
            raise ValueError(
                f"LinkSplit: expected `split` in {list(LINK_SPLITS)} but got {split!r}."
            )
        return getattr(self, split)

    def _both_ways(self, edges: Tensor) -> Tensor:
        return torch.cat([edges, edges.flip(0)], dim=1) if self.undirected else edges

    @property
    def inductive(self) -> bool:
        """Whether validation and test bring nodes training never saw."""
        return bool(self.val_observed.size(1) or self.test_observed.size(1))

    def message_edges(self, split: str) -> Tensor:
        """``[2, M]`` directed edges ``split``'s model passes messages over: the training
        edges (train, val) plus the validation edges (test), both directions on an
        undirected graph, plus :attr:`other`; inductive splits add the observed edges of
        the new nodes of validation (val, test) and of test (test)."""
        if split not in LINK_SPLITS:
            raise ValueError(
                f"LinkSplit: expected `split` in {list(LINK_SPLITS)} but got {split!r}."
            )
        visible = {
            "train": ["train"],
            "val": ["train", "val_observed"],
            "test": ["train", "val", "val_observed", "test_observed"],
        }[split]
        parts = [self._both_ways(getattr(self, s)) for s in visible] + [self.other]
        return torch.cat(parts, dim=1)

    def __repr__(self) -> str:
        return (
            f"LinkSplit(num_nodes={self.num_nodes}, undirected={self.undirected}, "
            f"train={self.train.size(1)}, val={self.val.size(1)}, test={self.test.size(1)}"
            + (", inductive" if self.inductive else "")
            + ")"
        )


@dataclass
class OfficialLinkSplit:
    """A benchmark's own split: the positive edges and the evaluation negatives.

    Attributes:
        split: the positive edges (validation and test edges may repeat training pairs,
            as ``ogbl-collab``'s do across years: the benchmark's split is taken as it is).
        negatives: per evaluation split (``"val"``, ``"test"``), ``[2, M]`` shared negative
            pairs or ``[Q, K]`` negative destinations per query.
        shared: whether the negatives are shared pairs.
        metric: the benchmark's metric name (e.g. ``"hits@50"``, ``"mrr"``).
    """

    split: LinkSplit
    negatives: dict[str, Tensor]
    shared: bool
    metric: str


def random_link_split(
    edge_index: Tensor,
    num_nodes: int,
    val_ratio: float = 0.05,
    test_ratio: float = 0.1,
    undirected: bool | None = None,
    remove_reverse: bool = True,
    seed: int = 0,
    mode: LinkSplitMode = "transductive",
    observed_ratio: float = 0.5,
    edge_type: Tensor | None = None,
) -> LinkSplit:
    """Split the edges of a graph at random into train / val / test positives.

    ``mode="transductive"`` (PyG's ``RandomLinkSplit``): every node is seen in training,
    ``val_ratio`` and ``test_ratio`` of the edges are held out. ``mode="inductive"`` (by
    node): ``val_ratio`` and ``test_ratio`` of the *nodes* are new at validation and at
    test. Training sees only the edges among the other nodes. Every edge that touches a
    new node belongs to the split that makes it new (the later split, for an edge between
    a validation and a test node); of those, ``observed_ratio`` are observed -- the model
    passes messages over them from that split on -- and the rest are the split's
    positives. So validation ranks edges of nodes the trained model never saw, given some
    of their edges, and test the same for its own new nodes, given the validation graph
    too.

    Args:
        edge_index: ``[2, E]`` directed edges (an undirected graph lists both directions).
        num_nodes: nodes of the graph.
        val_ratio, test_ratio: fractions of the positive edges (unordered pairs on an
            undirected graph) held out for validation and test; ``val_ratio + test_ratio
            < 1``. Each held-out split gets ``floor(ratio * E)`` edges.
        undirected: treat the graph as undirected; ``None`` decides from the graph
            (symmetric or not). ``True`` on a graph that is not symmetric is an error.
        remove_reverse: directed graphs: split unordered pairs, so an edge and its reverse
            (where the graph has both) fall in the same split.
        seed: seed of the split.
        mode: ``"transductive"`` or ``"inductive"``.
        observed_ratio: inductive: fraction of a new node's edges that are observed, in
            [0, 1).
        edge_type: ``[E]`` the relation type of every edge (integers from 0), for decoders
            that score a pair under its relation (``DistMultDecoder``). A pair carries one
            type (both directions the same on an undirected graph).

    Returns:
        A :class:`LinkSplit` (with relation types when ``edge_type`` is given). Duplicate
        edges count once.
    """
    owner = "random_link_split"
    num_nodes = check_int(owner, "num_nodes", num_nodes, low=1)
    edge_index = check_graph_edge_index(owner, "edge_index", edge_index, num_nodes)
    for name, value in (("val_ratio", val_ratio), ("test_ratio", test_ratio)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{owner}: expected `{name}` in [0, 1) but got {value!r}.")
    if val_ratio + test_ratio >= 1:
        raise ValueError(
            f"{owner}: expected `val_ratio + test_ratio` < 1 (training needs edges) but got "
            f"{val_ratio} + {test_ratio} = {val_ratio + test_ratio}."
        )
    remove_reverse = check_bool(owner, "remove_reverse", remove_reverse)
    mode = check_choice(owner, "mode", mode, LINK_SPLIT_MODES)
    if (
        isinstance(observed_ratio, bool)
        or not isinstance(observed_ratio, (int, float))
        or not 0 <= observed_ratio < 1
    ):
        raise ValueError(
            f"{owner}: expected `observed_ratio` in [0, 1) (the rest of a new node's edges "
            f"are its positives) but got {observed_ratio!r}."
        )
    symmetric = is_symmetric(edge_index, num_nodes)
    if undirected is None:
        undirected = symmetric
    elif check_bool(owner, "undirected", undirected) and not symmetric:
        raise ValueError(
            f"{owner}: `undirected=True` needs a symmetric graph (every edge (u, v) with its "
            f"reverse (v, u)) but `edge_index` is not; pass undirected=False or None."
        )
    keys = edge_keys(edge_index[0], edge_index[1], num_nodes).unique()  # sorted, distinct
    src, dst = keys // num_nodes, keys % num_nodes
    loop = src == dst
    other = torch.stack([src[loop], dst[loop]])
    if undirected:
        keep = src < dst
    else:
        keep = ~loop
    pos = torch.stack([src[keep], dst[keep]])
    # The unit of the split: an unordered pair (undirected graphs, or directed ones with
    # remove_reverse) or an ordered one.
    if undirected or not remove_reverse:
        unit = torch.arange(pos.size(1))
    else:
        lo, hi = torch.minimum(pos[0], pos[1]), torch.maximum(pos[0], pos[1])
        unit = torch.unique(edge_keys(lo, hi, num_nodes), return_inverse=True)[1]
    count = int(unit.max()) + 1 if unit.numel() else 0
    gen = make_generator(seed, "link-split")
    val_observed = test_observed = None
    if mode == "inductive":
        # New nodes: the first val_ratio / test_ratio of a node permutation.
        node_perm = torch.randperm(num_nodes, generator=gen)
        n_val, n_test = int(val_ratio * num_nodes), int(test_ratio * num_nodes)
        stage = torch.zeros(num_nodes, dtype=torch.long)  # 0 train, 1 val, 2 test
        stage[node_perm[:n_val]] = 1
        stage[node_perm[n_val : n_val + n_test]] = 2
        # An edge belongs to the latest stage of its endpoints; a unit to its edges'.
        edge_stage = torch.maximum(stage[pos[0]], stage[pos[1]])
        unit_stage = torch.zeros(count, dtype=torch.long).scatter_reduce_(
            0, unit, edge_stage, reduce="amax"
        )
        unit_observed = torch.rand(count, generator=gen) < observed_ratio
        which = torch.where(unit_stage == 0, 0, 2 * unit_stage - unit_observed.long())
        split_of = which[unit]
        perm = torch.randperm(count, generator=gen)
        rank = torch.empty(count, dtype=torch.long)
        rank[perm] = torch.arange(count)
        order = torch.argsort(rank[unit], stable=True)
        pos, split_of = pos[:, order], split_of[order]
        # 2 * stage - observed: 1 = val observed, 2 = val positive, 3 = test observed,
        # 4 = test positive.
        train = pos[:, split_of == 0]
        val_observed, val = pos[:, split_of == 1], pos[:, split_of == 2]
        test_observed, test = pos[:, split_of == 3], pos[:, split_of == 4]
    else:
        perm = torch.randperm(count, generator=gen)
        n_val, n_test = int(val_ratio * count), int(test_ratio * count)
        which = torch.empty(count, dtype=torch.long)
        which[perm[:n_val]] = 1
        which[perm[n_val : n_val + n_test]] = 2
        which[perm[n_val + n_test :]] = 0
        split_of = which[unit]
        # Each split's edges in the order of the draw (the training order of the loader is
        # drawn again every epoch; this one only makes the split reproducible).
        rank = torch.empty(count, dtype=torch.long)
        rank[perm] = torch.arange(count)
        order = torch.argsort(rank[unit], stable=True)
        pos, split_of = pos[:, order], split_of[order]
        train, val, test = (pos[:, split_of == k] for k in range(3))
    rel: dict[str, Any] = {}
    if edge_type is not None:
        types = pair_relations(
            [train, val, test], edge_index, edge_type, num_nodes, bool(undirected)
        )
        rel = dict(zip(("train_rel", "val_rel", "test_rel"), types, strict=True))
        rel["num_relations"] = int(edge_type.max()) + 1 if edge_type.numel() else 1
    return LinkSplit(
        num_nodes=num_nodes,
        undirected=bool(undirected),
        train=train,
        val=val,
        test=test,
        other=other,
        remove_reverse=remove_reverse,
        graph_keys=keys,
        val_observed=val_observed,
        test_observed=test_observed,
        **rel,
    )


def check_link_split(owner: str, value: Any) -> LinkSplit:
    """``value`` as a :class:`LinkSplit` (a clear error otherwise)."""
    if not isinstance(value, LinkSplit):
        raise TypeError(f"{owner}: expected a LinkSplit but got {type(value).__name__}.")
    return value


class LinkTrainingGraph(GraphDataset):
    """The training graph of a link task, as a dataset: what an on-disk store is built from.

    The edges of ``dataset`` are split once (its official split, else
    :func:`random_link_split` with these arguments) and :meth:`load` returns the training
    message-passing graph: the features, no labels (``y`` zeros, empty masks) and only the
    training edges, so a partition store built from it (HANOI) never holds a validation
    or test edge. :meth:`split` gives the split itself. The split is computed from
    ``dataset.load()``: in memory.

    Args:
        dataset: the graph.
        val_ratio, test_ratio, undirected, remove_reverse, seed: the random split.
    """

    def __init__(
        self,
        dataset: GraphDataset,
        val_ratio: float = 0.05,
        test_ratio: float = 0.1,
        undirected: bool | None = None,
        remove_reverse: bool = True,
        seed: int = 0,
    ) -> None:
        if not isinstance(dataset, GraphDataset):
            raise TypeError(
                f"LinkTrainingGraph: expected `dataset` to be a GraphDataset but got "
                f"{type(dataset).__name__}."
            )
        self.dataset = dataset
        self.val_ratio, self.test_ratio = val_ratio, test_ratio
        self.undirected, self.remove_reverse, self.seed = undirected, remove_reverse, seed
        self._split: LinkSplit | None = None
        self._data: Data | None = None

    @property
    def num_features(self) -> int:
        return self.dataset.num_features

    @property
    def num_classes(self) -> int:
        return 1

    @property
    def multilabel(self) -> bool:
        return False

    def fingerprint(self) -> str:
        return (
            f"LinkTrainingGraph({self.dataset.fingerprint()},val={self.val_ratio},"
            f"test={self.test_ratio},undirected={self.undirected},"
            f"remove_reverse={self.remove_reverse},seed={self.seed})"
        )

    def _graph(self) -> Data:
        if self._data is None:
            self._data = ensure_edge_index(self.dataset.load())
        return self._data

    def split(self) -> LinkSplit:
        """The split (the dataset's official one, else a random one), computed once."""
        if self._split is None:
            official = self.dataset.official_link_split()
            if official is not None:
                self._split = official.split
            else:
                data = self._graph()
                self._split = random_link_split(
                    data.edge_index, int(data.num_nodes), self.val_ratio, self.test_ratio,
                    undirected=self.undirected, remove_reverse=self.remove_reverse,
                    seed=self.seed, edge_type=getattr(data, "edge_type", None),
                )  # fmt: skip
        return self._split

    def load(self) -> Data:
        data = self._graph()
        n = int(data.num_nodes)
        empty = torch.zeros(n, dtype=torch.bool)
        return Data(
            x=data.x, y=torch.zeros(n, dtype=torch.long),
            edge_index=self.split().message_edges("train"),
            train_mask=empty, val_mask=empty.clone(), test_mask=empty.clone(), num_nodes=n,
        )  # fmt: skip
