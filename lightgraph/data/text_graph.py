"""Offline text-attributed graphs (TAGs) for language model + GNN co-training (UniTG).

Three pieces, none of which needs a download:

* :class:`SyntheticTextGraph` gives every node of a :class:`SyntheticGraph` a short
  synthetic text. Each of its ``words_per_node`` words comes, with probability
  ``signal``, from the vocabulary of the node's class (``vocab_per_class`` words per
  class, spelled ``"c3w17"``: class 3, word 17) and otherwise from a shared noise
  vocabulary (``noise_vocab_size`` words, spelled ``"n402"``). A text holds no class word
  at all with probability ``(1 - signal) ** words_per_node``, so the text alone is
  informative but noisy; the graph adds signal through homophily.
* :func:`build_tokenizer` turns a vocabulary into a word-level
  ``transformers.PreTrainedTokenizerFast`` (specials ``[PAD] [UNK] [CLS] [SEP] [MASK]``,
  ``[CLS] ... [SEP]`` around every text, truncation and padding to ``max_length``) that
  ``save_pretrained`` writes and :func:`load_tokenizer` reads back offline.
* :class:`TextGraphDataModule` builds, once per configuration, a fingerprinted cache
  (see :class:`~lightgraph.data.CachedDataModule`) holding the graph, the tokenizer
  directory and every node's token ids, and serves token batches of nodes.

``transformers`` and ``tokenizers`` are optional (``pip install "lightgraph[lm]"``): they
are imported only inside :func:`build_tokenizer`, :func:`load_tokenizer` and the cache
build; generating texts and loading a built cache need neither.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, get_args

import torch
from torch import Tensor
from torch.utils.data import DataLoader
from torch_geometric.data import Data

from lightgraph.data.cached_data_module import CachedDataModule
from lightgraph.data.graph_dataset import DatasetSizes, GraphDataset
from lightgraph.data.store.cache import CacheReader, CacheWriter
from lightgraph.data.synthetic_graph import SyntheticGraph
from lightgraph.utilities.checks import (
    check_bool,
    check_choice,
    check_fraction,
    check_int,
    check_optional_int,
    check_type,
)
from lightgraph.utilities.imports import require, resolve_model_path

#: A ``transformers.PreTrainedTokenizerFast`` (transformers is imported lazily, never here).
Tokenizer = Any

__all__ = [
    "SPECIAL_TOKENS",
    "SyntheticTextGraph",
    "TextGraphDataModule",
    "build_tokenizer",
    "load_tokenizer",
]

#: The special tokens of :func:`build_tokenizer`, in id order (``[PAD]`` is id 0).
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))

_TEXT_VERSION = 1  # bump when the texts generated for given arguments change
_CACHE_FORMAT = 1  # bump when the cache layout of TextGraphDataModule changes
_TEXT_SEED_SALT = 0x7E47_0001  # decorrelates the text stream from the graph's
_LM_INSTALL = 'pip install "lightgraph[lm]"'
_TOKENIZER_DIR = "tokenizer"
_SPLITS = ("train", "val", "test", "all")
Serve = Literal["tokens", "graph"]
_SERVE: tuple[str, ...] = get_args(Serve)


def _require_lm(feature: str) -> None:
    """ImportError naming ``feature`` and the extra if ``transformers`` or ``tokenizers`` is missing."""
    require("transformers", feature)
    if importlib.util.find_spec("tokenizers") is None:
        raise ImportError(
            f"{feature} needs the optional `tokenizers` package: `{_LM_INSTALL}` "
            f"(or `pip install tokenizers`)."
        )


# ----------------------------------------------------------------------- the dataset
class SyntheticTextGraph(GraphDataset):
    """A :class:`SyntheticGraph` whose nodes carry short synthetic texts.

    The graph (edges, communities, labels, masks, numeric features ``x``) is exactly the
    wrapped ``graph``'s. Node ``v`` of class ``c`` gets ``words_per_node`` words separated
    by single spaces; each is, independently, with probability ``signal`` a uniform word
    of class ``c``'s vocabulary ``c{c}w0 ... c{c}w{vocab_per_class - 1}`` and otherwise a
    uniform word of the noise vocabulary ``n0 ... n{noise_vocab_size - 1}``. In a
    multi-label graph a class word comes from one of the node's labels, chosen uniformly
    (a node without labels gets only noise words). Texts are drawn from a local generator
    seeded by ``graph.seed``: the same arguments always give the same texts.

    Args:
        graph: the graph (default: ``SyntheticGraph(num_nodes=2000, avg_degree=10.0)``).
        words_per_node: words per text (>= 1).
        vocab_per_class: words of each class's vocabulary (>= 1).
        noise_vocab_size: words of the shared noise vocabulary (>= 1).
        signal: probability that a word comes from the class vocabulary, in ``[0, 1]``
            (0: texts carry no class information; 1: only class words).

    Raises:
        ValueError: for an argument out of range (the message names it).
        TypeError: if ``graph`` is not a :class:`SyntheticGraph`.
    """

    def __init__(
        self,
        graph: SyntheticGraph | None = None,
        words_per_node: int = 32,
        vocab_per_class: int = 32,
        noise_vocab_size: int = 1024,
        signal: float = 0.05,
    ) -> None:
        owner = "SyntheticTextGraph"
        if graph is None:
            graph = SyntheticGraph(num_nodes=2000, avg_degree=10.0)
        self.graph: SyntheticGraph = check_type(
            owner, "graph", graph, SyntheticGraph, "e.g. SyntheticGraph(num_nodes=2000)"
        )
        self.words_per_node = check_int(owner, "words_per_node", words_per_node)
        self.vocab_per_class = check_int(owner, "vocab_per_class", vocab_per_class)
        self.noise_vocab_size = check_int(owner, "noise_vocab_size", noise_vocab_size)
        self.signal = check_fraction(owner, "signal", signal)

    # ------------------------------------------------------------------ GraphDataset
    @property
    def num_features(self) -> int:
        return self.graph.num_features

    @property
    def num_classes(self) -> int:
        return self.graph.num_classes

    @property
    def multilabel(self) -> bool:
        return self.graph.multilabel

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    def load(self) -> Data:
        """The wrapped graph (``x``, ``y``, ``edge_index``, masks, ``community``); texts via :meth:`texts`."""
        return self.graph.load()

    def text_config(self) -> dict[str, int | float]:
        """The text arguments, normalised."""
        return {
            "words_per_node": self.words_per_node,
            "vocab_per_class": self.vocab_per_class,
            "noise_vocab_size": self.noise_vocab_size,
            "signal": self.signal,
        }

    def fingerprint(self) -> str:
        """The graph's fingerprint plus the text arguments and the text generator version."""
        args = ",".join(f"{key}={value!r}" for key, value in self.text_config().items())
        return f"SyntheticTextGraph(t{_TEXT_VERSION},{self.graph.fingerprint()},{args})"

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in self.text_config().items())
        return f"SyntheticTextGraph(graph={self.graph!r}, {args})"

    # ------------------------------------------------------------------------ texts
    @property
    def vocab_size(self) -> int:
        """Number of distinct words (class words plus noise words)."""
        return self.num_classes * self.vocab_per_class + self.noise_vocab_size

    def vocabulary(self) -> list[str]:
        """Every word, in word-id order: class 0's words, class 1's, ..., then the noise words."""
        words = [f"c{c}w{j}" for c in range(self.num_classes) for j in range(self.vocab_per_class)]
        words += [f"n{k}" for k in range(self.noise_vocab_size)]
        return words

    def word_ids(self, data: Data | None = None) -> Tensor:
        """Word ids ``[num_nodes, words_per_node]`` (``torch.long``) into :meth:`vocabulary`.

        Args:
            data: the graph :meth:`load` returned (loaded here if ``None``); only its
                labels are read.
        """
        if data is None:
            data = self.load()
        y: Tensor = data.y
        n, w = int(y.size(0)), self.words_per_node
        gen = torch.Generator().manual_seed((self.graph.seed ^ _TEXT_SEED_SALT) % 2**63)
        is_signal = torch.rand(n, w, generator=gen) < self.signal
        word = torch.randint(self.vocab_per_class, (n, w), generator=gen)
        noise = torch.randint(self.noise_vocab_size, (n, w), generator=gen)
        if self.multilabel:
            labels = y.to(torch.float64)
            has = labels.sum(dim=1) > 0
            # Rows without labels draw from a uniform stand-in and are masked to noise below.
            probs = torch.where(has[:, None], labels, torch.ones_like(labels))
            cls = torch.multinomial(probs, w, replacement=True, generator=gen)
            is_signal &= has[:, None]
        else:
            cls = y.long()[:, None].expand(n, w)
        class_word = cls * self.vocab_per_class + word
        noise_word = self.num_classes * self.vocab_per_class + noise
        return torch.where(is_signal, class_word, noise_word)

    def iter_texts(self, data: Data | None = None) -> Iterator[str]:
        """The texts one at a time, in node order (see :meth:`texts`)."""
        vocab = self.vocabulary()
        for row in self.word_ids(data).tolist():
            yield " ".join(vocab[i] for i in row)

    def texts(self, data: Data | None = None) -> list[str]:
        """The text of every node, in node order (deterministic for the configuration).

        Args:
            data: the graph :meth:`load` returned (loaded here if ``None``).
        """
        return list(self.iter_texts(data))


# ----------------------------------------------------------------------- the tokenizer
def _check_vocabulary(owner: str, vocabulary: Iterable[str]) -> list[str]:
    if isinstance(vocabulary, str):
        raise TypeError(
            f"{owner}: expected `vocabulary` to be a sequence of words but got a str "
            f"({vocabulary[:20]!r}...)."
        )
    words = list(vocabulary)
    if not words:
        raise ValueError(f"{owner}: expected a non-empty `vocabulary` but got no words.")
    seen: set[str] = set()
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word or any(ch.isspace() for ch in word):
            raise ValueError(
                f"{owner}: expected `vocabulary[{i}]` to be a non-empty string without "
                f"whitespace but got {word!r}."
            )
        if word in SPECIAL_TOKENS:
            raise ValueError(
                f"{owner}: `vocabulary[{i}]` is the special token {word!r}; the tokenizer "
                f"adds {SPECIAL_TOKENS} itself."
            )
        if word in seen:
            raise ValueError(f"{owner}: `vocabulary[{i}]` = {word!r} appears twice.")
        seen.add(word)
    return words


def build_tokenizer(
    vocabulary: Iterable[str], max_length: int = 64, path: str | os.PathLike | None = None
) -> Tokenizer:
    """A word-level fast tokenizer over ``vocabulary``, optionally saved to ``path``.

    Ids: the :data:`SPECIAL_TOKENS` ``[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4``, then
    the words in the given order. Texts are split on whitespace; unknown words become
    ``[UNK]``; every encoding is ``[CLS] words... [SEP]`` (a pair: ``[CLS] A [SEP] B
    [SEP]``). ``model_max_length`` is ``max_length``, so
    ``tokenizer(texts, padding="max_length", truncation=True)`` gives ``max_length`` ids
    per text (``[SEP]`` kept when truncating), padded on the right with ``[PAD]``.

    Args:
        vocabulary: distinct non-empty words without whitespace (no special tokens).
        max_length: tokens per encoded text, specials included (>= 3: ``[CLS]``, one
            word, ``[SEP]``).
        path: if given, ``save_pretrained(path)``; read it back with :func:`load_tokenizer`
            or ``AutoTokenizer.from_pretrained(path, local_files_only=True)``.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` (``len(tokenizer)`` is the vocabulary
        size a language model needs).

    Raises:
        ImportError: without ``transformers`` / ``tokenizers`` (``pip install "lightgraph[lm]"``).
        ValueError: for a bad ``vocabulary`` or ``max_length``.
    """
    owner = "build_tokenizer"
    max_length = check_int(owner, "max_length", max_length, low=3)
    words = _check_vocabulary(owner, vocabulary)
    _require_lm(owner)
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *words))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)],
    )
    backend.enable_truncation(max_length=max_length)
    backend.enable_padding(pad_id=PAD_ID, pad_token="[PAD]", length=max_length)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_length,
        padding_side="right",
        truncation_side="right",
    )
    if path is not None:
        tokenizer.save_pretrained(os.fspath(path))
    return tokenizer


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """``AutoTokenizer.from_pretrained(path, local_files_only=True)`` (a saved :func:`build_tokenizer`)."""
    owner = "load_tokenizer"
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{owner}: expected `path` to be a tokenizer directory but got {path!r}."
        )
    _require_lm(owner)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return tokenizer


# ----------------------------------------------------------------------- the data module
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
        _require_lm("TextGraphDataModule.prepare_data")
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
