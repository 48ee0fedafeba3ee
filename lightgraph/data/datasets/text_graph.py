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
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.graph_dataset import GraphDataset
from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.utilities.checks import (
    check_fraction,
    check_int,
    check_type,
)
from lightgraph.utilities.imports import require

#: A ``transformers.PreTrainedTokenizerFast`` (transformers is imported lazily, never here).
Tokenizer = Any

__all__ = [
    "SPECIAL_TOKENS",
    "SyntheticTextGraph",
    "build_tokenizer",
    "load_tokenizer",
]

#: The special tokens of :func:`build_tokenizer`, in id order (``[PAD]`` is id 0).
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))

_TEXT_VERSION = 1  # bump when the texts generated for given arguments change
_TEXT_SEED_SALT = 0x7E47_0001  # decorrelates the text stream from the graph's
_LM_INSTALL = 'pip install "lightgraph[lm]"'


def require_lm(feature: str) -> None:
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
    require_lm(owner)
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
    require_lm(owner)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return tokenizer


# ----------------------------------------------------------------------- the data module
