"""Centrality-guided early-exit LM encoder: UniTG's *Lazy Tuner* (§5.3.3, Eq. 5.1).

UniTG is ch. 5 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); section numbers and "the thesis" refer to it.

UniTG fine-tunes the language model (LM) of an LM + GNN pipeline with early exits chosen by
node centrality: "not every node deserves the same depth of consideration". Each training
node gets its degree centrality; the training nodes are split into ``G`` groups
``C_1..C_G`` (``G = 4``: degree quartiles). **Nodes with the lowest centrality form
``C_1`` and leave the network earliest**, after ``L/G`` of the ``L`` transformer layers,
through an exit head ``φ_1``; ``C_2`` exits after ``2L/G`` layers, ..., and the
highest-centrality group ``C_G`` runs the full depth (thesis: "Nodes with the lowest
centrality ... are classified to group C_1, and those with the highest centrality ... to
C_4 ... the training of nodes in C_1 leaves earliest from a quarter of the network").

Pieces (group ids are 0-based here: group ``g`` is the thesis's ``C_{g+1}``):

* :func:`degree_groups` - group id per training node by degree quantile.
* :class:`~lightgraph.data.loader.GroupBatchSampler` - mini-batches that each hold nodes of ONE group (so the whole
  batch exits at the same layer), members and batch order reshuffled every epoch.
* :class:`EarlyExitEncoder` - wraps a Hugging Face encoder (BERT, RoBERTa, MiniLM,
  DistilBERT, ...); a batch runs only the first ``k`` layers: the layer list itself is
  truncated for the call, later layers are never computed.
* :func:`early_exit_loss` - Eq. 5.1, ``L = (Σ_i L_i^exit) / |G|``.

``transformers`` is optional: it is never imported here; the encoder only duck-types the
model it is given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_index_tensor,
    check_int,
    check_rate,
    check_type,
    describe,
)

__all__ = [
    "EarlyExitEncoder",
    "degree_groups",
    "early_exit_loss",
    "exit_layers",
]

#: Where :class:`EarlyExitEncoder` looks for the transformer layers, in this order
#: (attribute paths below the base model).
LAYER_PATHS: tuple[str, ...] = (
    "encoder.layer",  # BERT, RoBERTa, MiniLM, DeBERTa(-v2), ELECTRA, XLM-R
    "transformer.layer",  # DistilBERT
    "encoder.layers",  # e.g. ModernBERT-like / generic encoders
    "layers",
    "layer",
)
#: Where it looks for the embedding module (must exist: a sanity check of the structure).
EMBEDDING_PATHS: tuple[str, ...] = ("embeddings", "embed_tokens", "word_embeddings")
POOLINGS: tuple[str, ...] = ("cls", "mean")
TIES: tuple[str, ...] = ("value", "rank")


def exit_layers(num_layers: int, num_groups: int) -> tuple[int, ...]:
    """Layer counts after which each group exits: ``ceil(i·L/G)`` for ``i = 1..G``.

    With ``G | L`` these are exactly ``L/G, 2L/G, ..., L``; otherwise each exit is rounded
    up (a group never runs fewer layers than its share). The last exit is always ``L``.
    """
    owner = "exit_layers"
    num_layers = check_int(owner, "num_layers", num_layers)
    num_groups = check_int(owner, "num_groups", num_groups, low=1, high=num_layers)
    return tuple(-(-i * num_layers // num_groups) for i in range(1, num_groups + 1))


# --------------------------------------------------------------------------- grouping
def degree_groups(
    degree: Tensor,
    train_nodes: Tensor,
    num_groups: int = 4,
    ties: str = "value",
    nodes: Tensor | None = None,
) -> Tensor:
    """Group id (``0..G-1``, 0 = lowest centrality = earliest exit) per training node.

    The groups are the ``G``-quantiles (quartiles for ``G = 4``) of the training nodes'
    degrees: with boundaries ``q_i = quantile(degree[train_nodes], i/G)``
    (``torch.quantile``, linear interpolation), ``i = 1..G-1``, node ``v`` gets group
    ``#{i : q_i < degree[v]}``.

    Ties are deterministic and depend only on values and node ids:

    * ``ties="value"`` (default, exact quantiles): nodes of equal degree always share a
      group; a node whose degree equals a boundary goes to the lower group. Groups can be
      unequal (even empty) when many nodes share a degree, as in power-law graphs.
    * ``ties="rank"``: quantiles of the *rank* in the order (degree, node id): groups are
      equal-sized (sizes differ by at most one); equal degrees are split by node id.

    Args:
        degree: ``[N]`` degree (or any centrality score) of every node of the graph.
        train_nodes: ``[n]`` ids of the training nodes (rows of ``degree``).
        num_groups: ``G >= 1``.
        ties: ``"value"`` or ``"rank"``.
        nodes: the nodes to assign with the training nodes' boundaries (``ties="value"``
            only), e.g. every node of the graph; default ``train_nodes``. A node gets
            ``#{i : q_i < degree[v]}`` as above; with no training nodes, group 0.

    Returns:
        ``[n]`` LongTensor, aligned with ``train_nodes`` (or with ``nodes``).
    """
    owner = "degree_groups"
    check_type(owner, "degree", degree, Tensor, "a 1-D tensor of node degrees")
    if degree.dim() != 1 or degree.dtype == torch.bool or degree.dtype.is_complex:
        raise ValueError(
            f"{owner}: expected `degree` to be a 1-D real tensor but got {describe(degree)}."
        )
    train_nodes = check_index_tensor(owner, "train_nodes", train_nodes)
    num_groups = check_int(owner, "num_groups", num_groups)
    check_choice(owner, "ties", ties, TIES)
    if nodes is not None:
        nodes = check_index_tensor(owner, "nodes", nodes)
        if ties != "value":
            raise ValueError(
                f"{owner}: `nodes` is assigned by the training nodes' degree boundaries, "
                f"which needs ties='value' but got ties={ties!r}."
            )
    n = train_nodes.numel()
    if n == 0:
        size = 0 if nodes is None else nodes.numel()
        return torch.zeros(size, dtype=torch.long, device=degree.device)
    if int(train_nodes.min()) < 0 or int(train_nodes.max()) >= degree.numel():
        raise ValueError(
            f"{owner}: expected `train_nodes` in [0, {degree.numel() - 1}] (rows of `degree`) "
            f"but got ids in [{int(train_nodes.min())}, {int(train_nodes.max())}]."
        )
    deg = degree[train_nodes].double()
    if ties == "rank":
        # order by (degree, node id): stable sort on node id, then stable sort on degree.
        by_id = torch.argsort(train_nodes, stable=True)
        order = by_id[torch.argsort(deg[by_id], stable=True)]
        rank = torch.empty(n, dtype=torch.double, device=deg.device)
        rank[order] = torch.arange(n, dtype=torch.double, device=deg.device)
        deg = rank
    probs = torch.arange(1, num_groups, dtype=torch.double, device=deg.device) / num_groups
    bounds = torch.quantile(deg, probs) if num_groups > 1 else deg.new_empty(0)
    if nodes is not None:
        deg = degree[nodes].double()
    return torch.bucketize(deg, bounds, right=False)


def early_exit_loss(
    exit_logits: Sequence[Tensor | None],
    target: Tensor | Sequence[Tensor | None],
    num_exits: int | None = None,
    loss_fn: Callable[[Tensor, Tensor], Tensor] = F.cross_entropy,
) -> Tensor:
    r"""Eq. 5.1 of the thesis: :math:`\mathcal{L} = \frac{\sum_{i} \mathcal{L}_i^{exit}}{|\mathcal{G}|}`.

    Symbols: :math:`|\mathcal{G}|` is the number of exits (= number of centrality groups,
    ``num_exits``, default ``len(exit_logits)``); :math:`\mathcal{L}_i^{exit}` is a standard
    loss (``loss_fn``, default cross-entropy averaged over the nodes it sees) of exit
    head :math:`\varphi_i`'s outputs ``exit_logits[i]`` against their labels. The sum is
    divided by :math:`|\mathcal{G}|` - the *number of exits*, as the equation says - not by
    the number of exits that have nodes in the batch: an exit with no output in the batch
    (``None``) contributes :math:`\mathcal{L}_i^{exit} = 0`. So a batch of ONE group ``g``
    (:class:`~lightgraph.data.loader.GroupBatchSampler`) has loss :math:`\mathcal{L}_g^{exit} / |\mathcal{G}|`, and
    with ``EarlyExitEncoder(..., all_exits=True)`` outputs every exit passed on the way,
    ``0..g``, is summed. (The prose calls it "a weighted sum"; the equation's weights are
    all :math:`1/|\mathcal{G}|`, which is what is implemented.)

    Args:
        exit_logits: one entry per exit, ``[b_i, C]`` logits or ``None``.
        target: ``[b]`` labels shared by every exit (the usual one-group batch), or one
            entry per exit.
        num_exits: :math:`|\mathcal{G}|`; default ``len(exit_logits)``.
        loss_fn: ``loss_fn(logits, labels) -> scalar``.
    """
    owner = "early_exit_loss"
    exit_logits = list(exit_logits)
    num_exits = check_int(owner, "num_exits", len(exit_logits) if num_exits is None else num_exits)
    if len(exit_logits) != num_exits:
        raise ValueError(
            f"{owner}: expected `exit_logits` to hold one entry per exit ({num_exits}) but got "
            f"{len(exit_logits)}."
        )
    if isinstance(target, Tensor):
        targets: list[Tensor | None] = [target] * num_exits
    else:
        targets = list(target)
        if len(targets) != num_exits:
            raise ValueError(
                f"{owner}: expected `target` to be a tensor or hold one entry per exit "
                f"({num_exits}) but got {len(targets)}."
            )
    terms = []
    for i, (logits, y) in enumerate(zip(exit_logits, targets, strict=True)):
        if logits is None:
            continue
        if y is None:
            raise ValueError(f"{owner}: exit {i} has logits but its `target` entry is None.")
        terms.append(loss_fn(logits, y))
    if not terms:
        raise ValueError(f"{owner}: expected at least one exit with logits but all are None.")
    return torch.stack(terms).sum() / num_exits


# --------------------------------------------------------------------------- encoder
def _get_path(root: nn.Module, path: str) -> Any:
    obj: Any = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _set_path(root: nn.Module, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    obj: Any = root
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, last, value)


class EarlyExitEncoder(nn.Module):
    """A Hugging Face encoder whose batches run only their first ``k`` transformer layers.

    The wrapped model may be a bare encoder (``BertModel``) or a task model
    (``BertForSequenceClassification``: its ``base_model`` is used, the task head ignored).
    Its transformer layers are found as the first ``nn.ModuleList`` among
    :data:`LAYER_PATHS` below the base model (``encoder.layer`` for BERT/RoBERTa/MiniLM/
    DeBERTa, ``transformer.layer`` for DistilBERT), next to an embedding module
    (:data:`EMBEDDING_PATHS`). Running ``k`` layers swaps the layer list for its first ``k``
    entries for the duration of the call, so the model's own forward (its embeddings,
    attention-mask preparation, attention implementation) runs unchanged and layers
    ``k+1..L`` are never called. The model's ``pooler`` (if any) is skipped likewise.

    Exits: ``exit_layers[i] = ceil((i+1)·L/G)`` for groups ``i = 0..G-1`` (``L/4, L/2,
    3L/4, L`` for ``G = 4``); exit head ``φ_i`` pools the hidden states at that layer
    (``"cls"``: first token; ``"mean"``: mean over the attention mask) and maps them to
    ``num_classes`` logits with dropout + a linear layer.

    Args:
        model: a Hugging Face ``PreTrainedModel`` (or any module with that structure).
        num_classes: outputs of every exit head.
        num_groups: ``G``, centrality groups = exits, in ``[1, L]``.
        pooling: ``"cls"`` or ``"mean"``.
        dropout: dropout before each exit head's linear layer.
        layer_path: attribute path of the layer list below the base model (overrides the
            search), e.g. ``"encoder.layer"``.
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        num_groups: int = 4,
        pooling: str = "cls",
        dropout: float = 0.0,
        layer_path: str | None = None,
    ) -> None:
        super().__init__()
        owner = "EarlyExitEncoder"
        check_type(owner, "model", model, nn.Module, "a Hugging Face encoder, e.g. BertModel")
        self.num_classes = check_int(owner, "num_classes", num_classes)
        self.pooling = check_choice(owner, "pooling", pooling, POOLINGS)
        dropout = check_rate(owner, "dropout", dropout)
        base = getattr(model, "base_model", model)
        base = base if isinstance(base, nn.Module) else model
        paths = LAYER_PATHS if layer_path is None else (layer_path,)
        found = [p for p in paths if isinstance(_get_path(base, p), nn.ModuleList)]
        embeddings = [p for p in EMBEDDING_PATHS if isinstance(_get_path(base, p), nn.Module)]
        if not found or not embeddings or len(_get_path(base, found[0])) == 0:
            raise ValueError(
                f"{owner}: expected `model` to be a Hugging Face encoder with an embedding module "
                f"at one of {EMBEDDING_PATHS} and a non-empty nn.ModuleList of transformer layers "
                f"at one of {paths} (below its base model) but got a {type(model).__name__} "
                f"(embeddings found at {tuple(embeddings)}, layer lists at {tuple(found)}); "
                "pass `layer_path` for other structures."
            )
        self.backbone = base
        self.layer_path = found[0]
        self.embedding_path = embeddings[0]
        self.num_layers = len(_get_path(base, self.layer_path))
        self.num_groups = check_int(owner, "num_groups", num_groups, low=1, high=self.num_layers)
        self.exit_layers = exit_layers(self.num_layers, self.num_groups)
        hidden = self._hidden_size()
        self.heads = nn.ModuleList(
            nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, self.num_classes))
            for _ in range(self.num_groups)
        )

    def _hidden_size(self) -> int:
        config = getattr(self.backbone, "config", None)
        for key in ("hidden_size", "dim", "d_model"):
            value = getattr(config, key, None)
            if isinstance(value, int):
                return value
        emb = _get_path(self.backbone, self.embedding_path)
        for module in emb.modules():
            if isinstance(module, nn.Embedding):
                return module.embedding_dim
        raise ValueError(
            "EarlyExitEncoder: could not find the hidden size of `model` (config.hidden_size, "
            "config.dim, config.d_model or an nn.Embedding in its embeddings)."
        )

    @property
    def layers(self) -> nn.ModuleList:
        """The wrapped model's full list of transformer layers."""
        return _get_path(self.backbone, self.layer_path)

    @contextlib.contextmanager
    def _truncated(self, num_layers: int) -> Iterator[None]:
        full = self.layers
        pooler = getattr(self.backbone, "pooler", None)
        try:
            if num_layers < len(full):
                _set_path(self.backbone, self.layer_path, nn.ModuleList(list(full)[:num_layers]))
            if isinstance(pooler, nn.Module):
                self.backbone.pooler = None
            yield
        finally:
            _set_path(self.backbone, self.layer_path, full)
            if isinstance(pooler, nn.Module):
                self.backbone.pooler = pooler

    def _check_layers(self, name: str, num_layers: int | None) -> int:
        if num_layers is None:
            return self.num_layers
        return check_int("EarlyExitEncoder", name, num_layers, low=1, high=self.num_layers)

    def hidden_states(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        num_layers: int | None = None,
        **model_kwargs: Any,
    ) -> Tensor:
        """``[B, S, H]`` hidden states after the first ``num_layers`` layers (default all).

        Equals the full model's ``output_hidden_states[num_layers]`` for encoders without a
        final norm after the layer stack (BERT, RoBERTa, DistilBERT, ...).
        """
        k = self._check_layers("num_layers", num_layers)
        with self._truncated(k):
            out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **model_kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state

    def pool(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``[B, H]``: first-token state (``"cls"``) or masked mean (``"mean"``)."""
        if self.pooling == "cls":
            return hidden[:, 0]
        if attention_mask is None:
            return hidden.mean(dim=1)
        mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)

    def embed(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        exit_layer: int | None = None,
        **model_kwargs: Any,
    ) -> Tensor:
        """``[B, H]`` node embedding fed to the GNN: the pooled hidden state after
        ``exit_layer`` layers (any of ``1..L``; default ``L``, the full depth)."""
        k = self._check_layers("exit_layer", exit_layer)
        return self.pool(
            self.hidden_states(input_ids, attention_mask, k, **model_kwargs), attention_mask
        )

    @torch.no_grad()
    def embed_by_group(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        groups: Tensor,
        batch_size: int = 256,
    ) -> Tensor:
        """``[n, H]`` embeddings of ``n`` nodes, each at its own group's exit layer.

        What UniTG's Modality Collaborator hands to the GNN ("from the last or exit hidden
        layer"): node ``j`` is encoded with ``exit_layers[groups[j]]`` layers; nodes run in
        chunks of ``batch_size`` per group.
        """
        owner = "EarlyExitEncoder.embed_by_group"
        groups = check_index_tensor(owner, "groups", groups)
        if groups.numel() != input_ids.shape[0]:
            raise ValueError(
                f"{owner}: expected `groups` to hold one id per row of `input_ids` "
                f"({input_ids.shape[0]}) but got {groups.numel()}."
            )
        if groups.numel() and (int(groups.min()) < 0 or int(groups.max()) >= self.num_groups):
            raise ValueError(
                f"{owner}: expected `groups` in [0, {self.num_groups - 1}] but got ids in "
                f"[{int(groups.min())}, {int(groups.max())}]."
            )
        batch_size = check_int(owner, "batch_size", batch_size)
        out: Tensor | None = None
        for g in range(self.num_groups):
            rows = torch.nonzero(groups.to(input_ids.device) == g).flatten()
            for start in range(0, rows.numel(), batch_size):
                idx = rows[start : start + batch_size]
                mask = None if attention_mask is None else attention_mask[idx]
                emb = self.embed(input_ids[idx], mask, self.exit_layers[g])
                if out is None:
                    out = emb.new_zeros(input_ids.shape[0], emb.shape[-1])
                out[idx] = emb
        if out is None:
            return torch.zeros(0, self._hidden_size(), device=input_ids.device)
        return out

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        group: int | None = None,
        all_exits: bool = False,
        **model_kwargs: Any,
    ) -> list[Tensor | None]:
        """Exit logits of a batch whose nodes all belong to ``group`` (default: the last).

        Runs ``exit_layers[group]`` layers only. Returns one entry per exit (the input of
        :func:`early_exit_loss`): ``[B, num_classes]`` logits of head ``φ_group``, and
        ``None`` for the other exits, or - with ``all_exits=True`` - also the logits of the
        earlier exits ``0..group-1`` the batch passed on its way (their hidden states are
        taken at those layers; no extra layer is run).
        """
        owner = "EarlyExitEncoder"
        group = self.num_groups - 1 if group is None else group
        group = check_int(owner, "group", group, low=0, high=self.num_groups - 1)
        check_bool(owner, "all_exits", all_exits)
        logits: list[Tensor | None] = [None] * self.num_groups
        if not all_exits:
            emb = self.embed(input_ids, attention_mask, self.exit_layers[group], **model_kwargs)
            logits[group] = self.heads[group](emb)
            return logits
        # Capture the outputs of the earlier exit layers with forward hooks.
        captured: dict[int, Tensor] = {}
        handles = []
        layers = self.layers
        for i in range(group):
            layer = layers[self.exit_layers[i] - 1]

            def hook(_m: nn.Module, _a: Any, out: Any, i: int = i) -> None:
                captured[i] = out[0] if isinstance(out, (tuple, list)) else out

            handles.append(layer.register_forward_hook(hook))
        try:
            hidden = self.hidden_states(
                input_ids, attention_mask, self.exit_layers[group], **model_kwargs
            )
        finally:
            for h in handles:
                h.remove()
        for i in range(group):
            logits[i] = self.heads[i](self.pool(captured[i], attention_mask))
        logits[group] = self.heads[group](self.pool(hidden, attention_mask))
        return logits
