"""TextGraphDataModule: a text-attributed graph served as token ids (LM) or as a graph (GNN)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any, Literal, get_args

import torch
from torch import Tensor
from torch.utils.data import DataLoader
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import DatasetSizes, GraphDataset
from lightgraph.data.datasets.text_graph import (
    SyntheticTextGraph,
    Tokenizer,
    build_tokenizer,
    load_tokenizer,
    require_lm,
)
from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.store.cache import CacheReader, CacheWriter
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_int,
    check_optional_int,
    check_type,
)
from lightgraph.utilities.imports import resolve_model_path

__all__ = ["TextGraphDataModule"]

_CACHE_FORMAT = 1  # bump when the cache layout of TextGraphDataModule changes
_TOKENIZER_DIR = "tokenizer"
_SPLITS = ("train", "val", "test", "all")
Serve = Literal["tokens", "graph"]
_SERVE: tuple[str, ...] = get_args(Serve)


class _NodeTokens:
    """Collates a list of node ids into ``{node, input_ids, attention_mask, y}`` (picklable)."""

    def __init__(self, input_ids: Tensor, attention_mask: Tensor, y: Tensor) -> None:
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        self.y = y

    def __call__(self, nodes: Sequence[int]) -> dict[str, Tensor]:
        node = torch.as_tensor(nodes, dtype=torch.long)
        return {
            "node": node,
            "input_ids": self.input_ids[node].long(),
            "attention_mask": self.attention_mask[node].long(),
            "y": self.y[node],
        }


def _identity(item: Any) -> Any:
    return item


class TextGraphDataModule(DatasetSizes, CachedDataModule):
    """Token ids of every node of a text-attributed graph, cached once, plus the graph.

    ``prepare_data`` (one process per node) loads the graph and its texts, builds the
    tokenizer (:func:`build_tokenizer`) and tokenizes every text once, into the cache
    ``<cache_dir>/TextGraphDataModule-<digest>`` keyed by the dataset's fingerprint and
    ``max_length``:

    * ``graph.pt``: the graph's tensors (``x``, ``y``, ``edge_index``, masks, ...);
    * ``input_ids.pt`` (``torch.int32``) and ``attention_mask.pt`` (``torch.int8``),
      ``[num_nodes, max_length]``;
    * ``tokenizer/``: the ``save_pretrained`` directory (:attr:`tokenizer_path`).

    ``setup`` loads them (needing neither ``transformers`` nor ``tokenizers``). The
    dataloaders are node-level language-model batches, dicts
    ``{"node", "input_ids", "attention_mask", "y"}`` (ids as ``torch.long``):
    ``train_dataloader`` shuffles the training nodes, ``val``/``test`` walk their nodes in
    order, ``predict`` walks every node (to embed them all). The UniTG module combines
    these batches with :meth:`graph` (the full graph, on which the GNN runs): ``node``
    says where a batch's LM embeddings go in the node-embedding table; for other
    schedules use :meth:`lm_dataloader` and :meth:`tokens` directly.

    Args:
        dataset: the text-attributed graph (default: ``SyntheticTextGraph()``); anything
            with ``load()``, ``texts(data)``, ``vocabulary()``, ``fingerprint()`` and the
            :class:`GraphDataset` sizes.
        max_length: tokens per node, ``[CLS]`` and ``[SEP]`` included (>= 3); ``None``:
            ``dataset.words_per_node + 2`` (no text is truncated).
        batch_size: nodes per batch of the default dataloaders.
        num_workers: dataloader worker processes.
        seed: seed of the training shuffle.
        cache_dir: the directory holding every configuration's cache.
        tokenizer: ``None`` builds the word-level tokenizer of the dataset's vocabulary
            (:func:`build_tokenizer`); otherwise a saved tokenizer's directory or an
            installed model package's name (see :class:`~lightgraph.nn.LMEncoder`), to
            feed a pretrained language model its own vocabulary.
        serve: what the Trainer's dataloaders yield: ``"tokens"`` (the node-level
            language-model batches above) or ``"graph"`` (the whole graph, one batch per
            epoch, for full-graph modules such as :class:`~lightgraph.models.UniTGModule`,
            which read the token ids through :meth:`tokens`).
    """

    def __init__(
        self,
        dataset: SyntheticTextGraph | None = None,
        max_length: int | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
        cache_dir: str = "lightgraph_cache",
        serve: Serve = "tokens",
        tokenizer: str | None = None,
    ) -> None:
        super().__init__(cache_dir)
        owner = "TextGraphDataModule"
        self.serve = check_choice(owner, "serve", serve, _SERVE)
        if tokenizer is not None and not (isinstance(tokenizer, str) and tokenizer):
            raise TypeError(
                f"{owner}: expected `tokenizer` to be None, a tokenizer directory or an "
                f"installed model package's name but got {tokenizer!r}."
            )
        self.pretrained_tokenizer = tokenizer
        if dataset is None:
            dataset = SyntheticTextGraph()
        self.dataset: GraphDataset = check_type(
            owner, "dataset", dataset, GraphDataset, "e.g. SyntheticTextGraph()"
        )
        for method in ("texts", "vocabulary"):
            if not callable(getattr(self.dataset, method, None)):
                raise TypeError(
                    f"{owner}: expected `dataset` to have a `{method}()` method (a text-"
                    f"attributed graph such as SyntheticTextGraph) but "
                    f"{type(self.dataset).__name__} has none."
                )
        max_length = check_optional_int(owner, "max_length", max_length, low=3)
        if max_length is None:
            words = getattr(self.dataset, "words_per_node", None)
            if words is None:
                raise ValueError(
                    f"{owner}: `max_length=None` needs a dataset with `words_per_node`; "
                    f"pass `max_length` (>= 3) for {type(self.dataset).__name__}."
                )
            max_length = int(words) + 2
        self.max_length: int = max_length
        self.batch_size = check_int(owner, "batch_size", batch_size)
        self.num_workers = check_int(owner, "num_workers", num_workers, low=0)
        self.seed = check_int(owner, "seed", seed, low=0)
        self._graph: Data | None = None
        self._input_ids: Tensor | None = None
        self._attention_mask: Tensor | None = None
        self._tokenizer_path: str | None = None
        self._meta: dict[str, Any] = {}

    # ------------------------------------------------------------------ cache hooks
    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": _CACHE_FORMAT,
            "dataset": self.dataset.fingerprint(),
            "max_length": self.max_length,
            "tokenizer": self.pretrained_tokenizer or "wordlevel-whitespace-cls-sep",
        }

    def build(self, writer: CacheWriter) -> dict[str, Any]:
        start = time.perf_counter()
        require_lm("TextGraphDataModule.prepare_data")
        data = self.dataset.load()
        texts = self.dataset.texts(data)  # type: ignore[attr-defined]
        if len(texts) != data.num_nodes:
            raise ValueError(
                f"TextGraphDataModule: the dataset gave {len(texts)} texts for a graph of "
                f"{data.num_nodes} nodes; expected one text per node."
            )
        with tempfile.TemporaryDirectory() as tmp:
            if self.pretrained_tokenizer is None:
                tokenizer = build_tokenizer(
                    self.dataset.vocabulary(),  # type: ignore[attr-defined]
                    self.max_length,
                    path=tmp,
                )
            else:
                source = resolve_model_path(
                    "TextGraphDataModule", "tokenizer", self.pretrained_tokenizer
                )
                tokenizer = load_tokenizer(source)
                tokenizer.save_pretrained(tmp)
            for name in sorted(os.listdir(tmp)):
                with (
                    writer.path(f"{_TOKENIZER_DIR}/{name}") as target,
                    open(os.path.join(tmp, name), "rb") as src,
                    open(target, "wb") as dst,
                ):
                    dst.write(src.read())
        enc = tokenizer(
            texts,
            padding="max_length",
            truncation=True,
            max_length=self.max_length,
            return_attention_mask=True,
            return_token_type_ids=False,
            return_tensors="pt",
        )
        input_ids = enc["input_ids"].to(torch.int32)
        attention_mask = enc["attention_mask"].to(torch.int8)
        graph = {key: value for key, value in data.items() if isinstance(value, Tensor)}
        writer.save("graph.pt", graph)
        writer.save("input_ids.pt", input_ids)
        writer.save("attention_mask.pt", attention_mask)
        words = torch.tensor([len(t.split()) for t in texts])
        return {
            "num_nodes": int(data.num_nodes),
            "vocab_size": len(tokenizer),
            "max_length": self.max_length,
            "pad_token_id": int(tokenizer.pad_token_id),
            "num_truncated": int((words > self.max_length - 2).sum()),
            "build_seconds": round(time.perf_counter() - start, 3),
        }

    def load(self, cache: CacheReader, rank: int, world_size: int) -> None:
        graph = cache.load("graph.pt")
        self._graph = Data(**graph, num_nodes=int(cache.meta["num_nodes"]))
        self._input_ids = cache.load("input_ids.pt")
        self._attention_mask = cache.load("attention_mask.pt")
        prefix = f"{_TOKENIZER_DIR}/"
        for name in cache.files:
            if name.startswith(prefix):
                cache.path(name)  # size-checked against the manifest
        self._tokenizer_path = os.path.join(cache.directory, _TOKENIZER_DIR)
        self._meta = dict(cache.meta)

    def is_loaded(self) -> bool:
        return self._graph is not None

    def loader(self, split: str) -> DataLoader:
        if self.serve == "graph":
            # A torch DataLoader, not FixedBatchLoader: its iterator draws a seed from
            # torch's global generator every epoch, and UniTG's dropout stream (its recipes'
            # results, bit for bit) depends on that draw.
            return DataLoader([self.graph()], batch_size=None, collate_fn=_identity)
        if split == "predict":
            return self.lm_dataloader("all", shuffle=False)
        return self.lm_dataloader(split, shuffle=split == "train")

    # ----------------------------------------------------------------------- serving
    def _loaded(self, what: str) -> None:
        if not self.is_loaded():
            raise RuntimeError(f"TextGraphDataModule: call `setup()` before `{what}`.")

    @property
    def words_per_node(self) -> int | None:
        """Words per node text of the dataset, ``None`` when it does not say (real texts)."""
        words = getattr(self.dataset, "words_per_node", None)
        return None if words is None else int(words)

    def graph(self) -> Data:
        """The graph (``x``, ``y``, ``edge_index``, masks, ...), after ``setup``."""
        self._loaded("graph()")
        assert self._graph is not None
        return self._graph

    @property
    def tokenizer_path(self) -> str:
        """The cached tokenizer directory (for :func:`load_tokenizer`), after ``setup``."""
        self._loaded("tokenizer_path")
        assert self._tokenizer_path is not None
        return self._tokenizer_path

    @property
    def vocab_size(self) -> int:
        """Token vocabulary size (specials included): a language model's ``vocab_size``."""
        self._loaded("vocab_size")
        return int(self._meta["vocab_size"])

    @property
    def pad_token_id(self) -> int:
        """Id of ``[PAD]`` (0)."""
        self._loaded("pad_token_id")
        return int(self._meta["pad_token_id"])

    def tokenizer(self) -> Tokenizer:
        """The cached tokenizer (needs ``transformers``)."""
        return load_tokenizer(self.tokenizer_path)

    def node_ids(self, split: str) -> Tensor:
        """Node ids of ``split`` (``"train"``, ``"val"``, ``"test"`` or ``"all"``), ascending."""
        check_choice("TextGraphDataModule", "split", split, _SPLITS)
        graph = self.graph()
        if split == "all":
            return torch.arange(graph.num_nodes)
        return graph[f"{split}_mask"].nonzero().view(-1)

    def tokens(self, node_ids: Tensor | Sequence[int] | None = None) -> dict[str, Tensor]:
        """``{"input_ids", "attention_mask"}`` (``torch.long``, ``[len(node_ids), max_length]``).

        Args:
            node_ids: node ids (a 1-D integer tensor or a sequence); ``None``: every node.
        """
        self._loaded("tokens()")
        assert self._input_ids is not None and self._attention_mask is not None
        if node_ids is None:
            return {
                "input_ids": self._input_ids.long(),
                "attention_mask": self._attention_mask.long(),
            }
        ids = torch.as_tensor(node_ids)
        if ids.dim() != 1 or ids.dtype == torch.bool or ids.is_floating_point():
            raise ValueError(
                f"TextGraphDataModule.tokens: expected `node_ids` to be a 1-D integer tensor or "
                f"sequence but got shape {tuple(ids.shape)} and dtype {ids.dtype}."
            )
        n = self._input_ids.size(0)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise ValueError(
                f"TextGraphDataModule.tokens: expected node ids in [0, {n - 1}] but got values "
                f"in [{int(ids.min())}, {int(ids.max())}]."
            )
        ids = ids.long()
        return {
            "input_ids": self._input_ids[ids].long(),
            "attention_mask": self._attention_mask[ids].long(),
        }

    def lm_dataloader(
        self, split: str = "train", batch_size: int | None = None, shuffle: bool | None = None
    ) -> DataLoader:
        """Batches of ``split``'s nodes: dicts ``{"node", "input_ids", "attention_mask", "y"}``.

        Args:
            split: ``"train"``, ``"val"``, ``"test"`` or ``"all"``.
            batch_size: nodes per batch (default: the module's ``batch_size``).
            shuffle: reshuffle every epoch (default: only for ``"train"``); the order is
                deterministic for the module's ``seed``.
        """
        owner = "TextGraphDataModule.lm_dataloader"
        batch_size = (
            self.batch_size if batch_size is None else check_int(owner, "batch_size", batch_size)
        )
        shuffle = split == "train" if shuffle is None else check_bool(owner, "shuffle", shuffle)
        nodes = self.node_ids(split).tolist()
        assert self._input_ids is not None and self._attention_mask is not None
        return DataLoader(
            nodes,  # type: ignore[arg-type]
            batch_size=batch_size,
            shuffle=shuffle,
            collate_fn=_NodeTokens(self._input_ids, self._attention_mask, self.graph().y),
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(self.seed) if shuffle else None,
        )
