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

from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from lightgraph.utilities.checks import check_bool, check_graph_edge_index, check_int
from lightgraph.utilities.random_state import make_generator

LinkSplitName = Literal["train", "val", "test"]
LINK_SPLITS: tuple[str, ...] = get_args(LinkSplitName)


def edge_keys(src: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """One ``int64`` key per ordered pair: ``src * num_nodes + dst``."""
    return src.long() * num_nodes + dst.long()


def is_symmetric(edge_index: Tensor, num_nodes: int) -> bool:
    """Whether every edge ``(u, v)`` of ``edge_index`` has its reverse ``(v, u)``."""
    keys = edge_keys(edge_index[0], edge_index[1], num_nodes).unique()
    reverse = edge_keys(edge_index[1], edge_index[0], num_nodes)
    return bool(torch.isin(reverse, keys).all())


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

    Raises:
        ValueError: ids outside ``[0, num_nodes)``, or an edge in two splits.
    """

    num_nodes: int
    undirected: bool
    train: Tensor
    val: Tensor
    test: Tensor
    other: Tensor
    remove_reverse: bool
    graph_keys: Tensor

    def __post_init__(self) -> None:
        owner = "LinkSplit"
        n = self.num_nodes
        for name in ("train", "val", "test", "other"):
            setattr(self, name, check_graph_edge_index(owner, name, getattr(self, name), n))
        seen: dict[str, Tensor] = {}
        for name in LINK_SPLITS:
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

    def message_edges(self, split: str) -> Tensor:
        """``[2, M]`` directed edges ``split``'s model passes messages over: the training
        edges (train, val) plus the validation edges (test), both directions on an
        undirected graph, plus :attr:`other`."""
        if split not in LINK_SPLITS:
            raise ValueError(
                f"LinkSplit: expected `split` in {list(LINK_SPLITS)} but got {split!r}."
            )
        visible = ["train"] if split in ("train", "val") else ["train", "val"]
        parts = [self._both_ways(getattr(self, s)) for s in visible] + [self.other]
        return torch.cat(parts, dim=1)

    def __repr__(self) -> str:
        return (
            f"LinkSplit(num_nodes={self.num_nodes}, undirected={self.undirected}, "
            f"train={self.train.size(1)}, val={self.val.size(1)}, test={self.test.size(1)})"
        )


def random_link_split(
    edge_index: Tensor,
    num_nodes: int,
    val_ratio: float = 0.05,
    test_ratio: float = 0.1,
    undirected: bool | None = None,
    remove_reverse: bool = True,
    seed: int = 0,
) -> LinkSplit:
    """Split the edges of a graph at random into train / val / test positives.

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

    Returns:
        A :class:`LinkSplit`. Duplicate edges count once.
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
    perm = torch.randperm(count, generator=make_generator(seed, "link-split"))
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
    return LinkSplit(
        num_nodes=num_nodes,
        undirected=bool(undirected),
        train=train,
        val=val,
        test=test,
        other=other,
        remove_reverse=remove_reverse,
        graph_keys=keys,
    )


def check_link_split(owner: str, value: Any) -> LinkSplit:
    """``value`` as a :class:`LinkSplit` (a clear error otherwise)."""
    if not isinstance(value, LinkSplit):
        raise TypeError(f"{owner}: expected a LinkSplit but got {type(value).__name__}.")
    return value
