"""Pad a sampled mini-batch to fixed per-hop sizes without changing its real rows' results.

A neighbour-sampled mini-batch (PyG ``NeighborLoader`` layout, see
:func:`lightgraph.data.loader.minibatch.sample_minibatch`) has a different number of nodes and
edges in every hop of every batch, so a ``torch.compile``d model with static shapes would
recompile on every batch. :func:`pad_minibatch` pads every hop's node block and every
hop's edge block *in place* to a given size (a bucket), so the shapes -- and the per-hop
counts BasicGNN trims with -- depend only on the bucket:

* node block ``h`` (hop ``h``, the seeds for ``h = 0``) keeps its real rows first, then
  zero feature rows up to ``node_bounds[h]``; real rows after block 0 therefore move
  (``layout.node_map`` gives the new position of every old row);
* edge block ``h`` keeps its real edges (endpoints remapped), then padding edges up to
  ``edge_bounds[h]`` whose source *and* destination are padding rows of block 0 (the
  padded seed block always has at least one padding row), spread round-robin over them.

No message reaches a real row, so everything computed for real rows is unchanged: sums,
means and maxima over their in-edges, their in-degrees (GCN normalisation), GAT's
softmax over their in-edges, self-loops added by a layer, and PyG's per-layer trimming
(``trim_to_layer``) -- padding rows of block 0 are never trimmed, and every padding edge
of hop ``h`` satisfies the sampler's invariant (destination in a hop ``< h``, source in a
hop ``<= h``). Padding rows receive messages only from padding rows.

Batches with historical embeddings (``halo_index``, ``hist``, ``push_index``, one entry
per hidden layer) are remapped to the padded layout, and every ``halo_index[l]`` is padded
to ``halo_bounds[l]`` entries that point at padding seed rows, with zero ``hist`` rows.

:func:`unpad_rows` maps a model output in the padded layout (all rows, or a trimmed
prefix of the hops) back to the unpadded layout; :func:`bucket_levels` and
:func:`select_level` pick the bucket sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lightgraph.utilities.checks import check_int, check_non_negative, check_type, describe

__all__ = [
    "PaddedMiniBatch",
    "PaddingLayout",
    "bucket_levels",
    "pad_minibatch",
    "required_sizes",
    "select_level",
    "split_sizes",
    "unpad_rows",
]


@dataclass(frozen=True)
class PaddingLayout:
    """Where the real rows of a padded mini-batch lie.

    Attributes:
        real_nodes: real nodes per hop (``[seeds, hop 1, ...]``).
        padded_nodes: padded block size per hop (the bucket).
        real_edges: real edges per hop.
        padded_edges: padded edge block size per hop.
        node_map: ``int64 [sum(real_nodes)]``: padded position of every unpadded row.
    """

    real_nodes: tuple[int, ...]
    padded_nodes: tuple[int, ...]
    real_edges: tuple[int, ...]
    padded_edges: tuple[int, ...]
    node_map: Tensor

    @property
    def num_nodes(self) -> int:
        """Rows of the padded batch."""
        return sum(self.padded_nodes)

    @property
    def num_padding_nodes(self) -> int:
        """Padding rows of the padded batch."""
        return sum(self.padded_nodes) - sum(self.real_nodes)

    @property
    def num_padding_edges(self) -> int:
        """Padding edges of the padded batch."""
        return sum(self.padded_edges) - sum(self.real_edges)

    @property
    def padding_rows(self) -> Tensor:
        """Positions of the padding rows of block 0 (the ones padding edges use)."""
        n0, s0 = self.real_nodes[0], self.padded_nodes[0]
        return torch.arange(n0, s0, device=self.node_map.device)


@dataclass(frozen=True)
class PaddedMiniBatch:
    """A mini-batch padded by :func:`pad_minibatch` (attribute names of the PyG batch).

    ``num_sampled_nodes``/``num_sampled_edges`` are the padded block sizes (what a
    BasicGNN trims with); ``batch_size`` is the padded seed block. ``halo_index``,
    ``hist`` and ``push_index`` are ``None`` for batches without historical embeddings;
    ``push_index`` is remapped, not padded.
    """

    x: Tensor
    edge_index: Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    batch_size: int
    layout: PaddingLayout
    halo_index: list[Tensor] | None = None
    hist: list[Tensor] | None = None
    push_index: list[Tensor] | None = None


def _counts(owner: str, name: str, value: Sequence[int] | Tensor, length: int | None) -> list[int]:
    if isinstance(value, Tensor):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(
            f"{owner}: expected `{name}` to be a list of non-negative integers but got {value!r}."
        )
    out = [check_int(owner, f"{name}[{i}]", v, low=0) for i, v in enumerate(value)]
    if length is not None and len(out) != length:
        raise ValueError(
            f"{owner}: expected `{name}` to hold {length} entries (one per hop) but got "
            f"{len(out)}: {out}."
        )
    return out


def required_sizes(
    num_sampled_nodes: Sequence[int],
    num_sampled_edges: Sequence[int],
    halo_sizes: Sequence[int] = (),
) -> tuple[int, ...]:
    """The smallest bucket a batch fits, as one flat tuple.

    ``(seeds + 1, nodes of hop 1, ..., edges of hop 1, ..., halo entries of layer 0, ...)``:
    the seed block needs one padding row more than its real rows (padding edges point
    there). :func:`bucket_levels` and :func:`select_level` work on such tuples and
    :func:`split_sizes` turns one back into ``(node_bounds, edge_bounds, halo_bounds)``.
    """
    nodes = [int(v) for v in num_sampled_nodes]
    return (nodes[0] + 1, *nodes[1:], *(int(v) for v in num_sampled_edges), *map(int, halo_sizes))


def split_sizes(sizes: Sequence[int], num_hops: int) -> tuple[list[int], list[int], list[int]]:
    """``(node_bounds, edge_bounds, halo_bounds)`` of a flat bucket (see :func:`required_sizes`)."""
    sizes = [int(v) for v in sizes]
    nodes = sizes[: num_hops + 1]
    edges = sizes[num_hops + 1 : 2 * num_hops + 1]
    halos = sizes[2 * num_hops + 1 :]
    return nodes, edges, halos


def bucket_levels(
    low: Sequence[int],
    high: Sequence[int],
    num_buckets: int,
    margin: float = 0.0,
    round_to: int = 1,
) -> list[tuple[int, ...]]:
    """Bucket sizes: ``num_buckets`` levels spread evenly from ``low`` to ``high * (1 + margin)``.

    Every entry (a hop's nodes or edges, a halo list) gets its own sizes, but the levels
    are joint: level ``k`` is one tuple, so a padded batch has one of at most
    ``num_buckets`` shapes (one compiled graph each). Level ``k`` of entry ``i`` is
    ``low[i] + (top[i] - low[i]) * (k + 1) / num_buckets`` rounded up to a multiple of
    ``round_to`` with ``top = ceil(high * (1 + margin))``; the last level holds every size
    up to ``top``. Repeated levels are dropped.

    Args:
        low, high: smallest and largest sizes seen (e.g. over a warm-up epoch), per entry.
        num_buckets: levels (>= 1).
        margin: slack over ``high`` for batches larger than any seen (>= 0).
        round_to: every size is a multiple of it (>= 1; e.g. 64 for aligned kernels).

    Returns:
        The levels, smallest first, each a tuple of ``len(high)`` sizes.
    """
    owner = "bucket_levels"
    num_buckets = check_int(owner, "num_buckets", num_buckets)
    margin = check_non_negative(owner, "margin", margin)
    round_to = check_int(owner, "round_to", round_to)
    low = _counts(owner, "low", low, None)
    high = _counts(owner, "high", high, len(low))
    if any(lo > hi for lo, hi in zip(low, high, strict=True)):
        raise ValueError(f"{owner}: expected `low` <= `high` entrywise but got {low} and {high}.")

    def up(v: float) -> int:
        return int(math.ceil(v / round_to - 1e-9)) * round_to

    top = [int(math.ceil(hi * (1.0 + margin) - 1e-9)) for hi in high]
    levels: list[tuple[int, ...]] = []
    for k in range(num_buckets):
        frac = (k + 1) / num_buckets
        level = tuple(
            up(lo + (t - lo) * frac) if k + 1 < num_buckets else up(t)
            for lo, t in zip(low, top, strict=True)
        )
        if not levels or level != levels[-1]:
            levels.append(level)
    return levels


def select_level(levels: Sequence[Sequence[int]], sizes: Sequence[int]) -> int | None:
    """Index of the first (smallest) level that every entry of ``sizes`` fits, else ``None``."""
    for k, level in enumerate(levels):
        if len(level) == len(sizes) and all(s <= b for s, b in zip(sizes, level, strict=True)):
            return k
    return None


def pad_minibatch(
    x: Tensor,
    edge_index: Tensor,
    num_sampled_nodes: Sequence[int] | Tensor,
    num_sampled_edges: Sequence[int] | Tensor,
    node_bounds: Sequence[int],
    edge_bounds: Sequence[int],
    *,
    halo_index: Sequence[Tensor] | None = None,
    hist: Sequence[Tensor] | None = None,
    halo_bounds: Sequence[int] | None = None,
    push_index: Sequence[Tensor] | None = None,
) -> PaddedMiniBatch:
    """Pad every hop of a sampled mini-batch to fixed sizes (see the module docstring).

    Args:
        x: ``[N, ...]`` node features, rows grouped by hop (seeds first).
        edge_index: ``[2, E]`` local edges (``edge_index[0] -> edge_index[1]``) grouped by
            hop.
        num_sampled_nodes: nodes per hop (``L + 1`` entries, seeds first).
        num_sampled_edges: edges per hop (``L`` entries).
        node_bounds: padded size of every node block; ``node_bounds[0]`` must exceed the
            seeds (one padding seed row at least), the others hold their hop.
        edge_bounds: padded size of every edge block.
        halo_index: per hidden layer, local rows whose output history replaces.
        hist: per hidden layer, the history rows (aligned with ``halo_index``).
        halo_bounds: padded length of every ``halo_index`` list (default: unpadded).
        push_index: per hidden layer, local rows pushed to the history (remapped only).

    Returns:
        A :class:`PaddedMiniBatch`; its ``layout`` unpads outputs (:func:`unpad_rows`).
    """
    owner = "pad_minibatch"
    check_type(owner, "x", x, Tensor)
    check_type(owner, "edge_index", edge_index, Tensor)
    nodes = _counts(owner, "num_sampled_nodes", num_sampled_nodes, None)
    if len(nodes) < 1:
        raise ValueError(f"{owner}: expected `num_sampled_nodes` to hold >= 1 entries but got [].")
    hops = len(nodes) - 1
    edges = _counts(owner, "num_sampled_edges", num_sampled_edges, hops)
    nb = _counts(owner, "node_bounds", node_bounds, hops + 1)
    eb = _counts(owner, "edge_bounds", edge_bounds, hops)
    if x.dim() < 1 or x.size(0) != sum(nodes):
        raise ValueError(
            f"{owner}: expected `x` with sum(num_sampled_nodes) = {sum(nodes)} rows but got "
            f"{describe(x)}."
        )
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.size(1) != sum(edges):
        raise ValueError(
            f"{owner}: expected `edge_index` of shape [2, sum(num_sampled_edges) = "
            f"{sum(edges)}] but got {describe(edge_index)}."
        )
    if nb[0] <= nodes[0]:
        raise ValueError(
            f"{owner}: expected `node_bounds[0]` > {nodes[0]} (the seeds plus >= 1 padding row "
            f"for padding edges) but got {nb[0]}."
        )
    for name, real, bound in (("node_bounds", nodes, nb), ("edge_bounds", edges, eb)):
        for h, (r, b) in enumerate(zip(real, bound, strict=True)):
            if b < r:
                raise ValueError(
                    f"{owner}: expected `{name}[{h}]` >= {r} (the batch's real size) but got {b}."
                )

    device = x.device
    n0, pad0 = nodes[0], nb[0] - nodes[0]
    # One pass per output: blocks of real rows/edges interleaved with padding blocks.
    real_off = [0, *_cumsum(nodes)]
    pad_off = [0, *_cumsum(nb)]
    node_map = torch.cat(
        [
            torch.arange(pad_off[h], pad_off[h] + n, device=device, dtype=torch.long)
            for h, n in enumerate(nodes)
        ]
    )
    x_blocks: list[Tensor] = []
    for h, n in enumerate(nodes):
        x_blocks.append(x[real_off[h] : real_off[h] + n])
        if nb[h] > n:
            x_blocks.append(x.new_zeros((nb[h] - n, *x.shape[1:])))
    x_pad = torch.cat(x_blocks)

    # Real edges keep their order (endpoints remapped); every padding slot is a self-loop
    # on a padding seed row, round-robin over them.
    mapped = node_map[edge_index.long()]
    e_off = [0, *_cumsum(edges)]
    e_blocks: list[Tensor] = []
    for h, n in enumerate(edges):
        e_blocks.append(mapped[:, e_off[h] : e_off[h] + n])
        if eb[h] > n:
            e_blocks.append(_pad_rows(n0, pad0, eb[h] - n, device).expand(2, -1))
    edge_pad = torch.cat(e_blocks, dim=1) if e_blocks else mapped

    layout = PaddingLayout(tuple(nodes), tuple(nb), tuple(edges), tuple(eb), node_map)
    halo_pad = hist_pad = push_pad = None
    if halo_index is not None or hist is not None:
        if halo_index is None or hist is None or len(halo_index) != len(hist):
            raise ValueError(
                f"{owner}: expected `halo_index` and `hist` together, one entry per hidden "
                f"layer each, but got {_lens(halo_index)} and {_lens(hist)} entries."
            )
        sizes = [int(h.numel()) for h in halo_index]
        hb = (
            sizes if halo_bounds is None else _counts(owner, "halo_bounds", halo_bounds, len(sizes))
        )
        halo_pad, hist_pad = [], []
        for layer, idx in enumerate(halo_index):
            rows, size, cap = hist[layer], sizes[layer], hb[layer]
            if cap < size:
                raise ValueError(
                    f"{owner}: expected `halo_bounds[{layer}]` >= {size} (the batch's halo "
                    f"rows) but got {cap}."
                )
            if rows.size(0) != size:
                raise ValueError(
                    f"{owner}: expected `hist[{layer}]` with len(halo_index[{layer}]) = {size} "
                    f"rows but got {describe(rows)}."
                )
            extra = _pad_rows(n0, pad0, cap - size, device)
            halo_pad.append(torch.cat([node_map[idx.long()], extra]))
            hist_pad.append(torch.cat([rows, rows.new_zeros((cap - size, *rows.shape[1:]))]))
    if push_index is not None:
        push_pad = [node_map[idx.long()] for idx in push_index]
    return PaddedMiniBatch(
        x=x_pad,
        edge_index=edge_pad,
        num_sampled_nodes=nb,
        num_sampled_edges=eb,
        batch_size=nb[0],
        layout=layout,
        halo_index=halo_pad,
        hist=hist_pad,
        push_index=push_pad,
    )


def unpad_rows(t: Tensor, layout: PaddingLayout) -> Tensor:
    """Rows of ``t`` (padded layout) in the unpadded layout, padding rows dropped.

    ``t`` holds one row per padded node of the first ``k`` hops (``k = L + 1`` for an
    untrimmed output, fewer for the output of a trimmed layer: 1 for a BasicGNN's
    trimmed logits); the result holds the real rows of those hops, in their unpadded
    order -- what the unpadded batch would have produced. Differentiable (a gather).
    """
    owner = "unpad_rows"
    check_type(owner, "t", t, Tensor)
    padded = list(_cumsum(layout.padded_nodes))
    real = list(_cumsum(layout.real_nodes))
    rows = t.size(0) if t.dim() else -1
    for k in range(len(padded)):
        if padded[k] == rows:
            return t.index_select(0, layout.node_map[: real[k]])
    raise ValueError(
        f"{owner}: expected `t` with as many rows as a prefix of the padded hops, one of "
        f"{tuple(padded)}, but got {describe(t)}."
    )


def _pad_rows(first: int, count: int, n: int, device: torch.device) -> Tensor:
    """``n`` positions cycling over the ``count`` padding seed rows starting at ``first``."""
    return first + torch.arange(n, device=device) % count


def _cumsum(values: Sequence[int]) -> list[int]:
    out, total = [], 0
    for v in values:
        total += int(v)
        out.append(total)
    return out


def _lens(value: Sequence[Tensor] | None) -> int | None:
    return None if value is None else len(value)
