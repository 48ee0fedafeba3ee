"""LMEncoder: a fresh BERT of the given sizes, or a saved model from a directory or a package."""

from __future__ import annotations

import os
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from lightgraph.data import SyntheticGraph, SyntheticTextGraph, TextGraphDataModule  # noqa: E402
from lightgraph.data.datasets.text_graph import build_tokenizer  # noqa: E402
from lightgraph.nn import EarlyExitEncoder, LMEncoder  # noqa: E402
from lightgraph.utilities import resolve_model_path  # noqa: E402


def _saved_model(directory: str) -> transformers.BertModel:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    model = transformers.BertModel(config)
    model.save_pretrained(directory)
    return model


def test_fresh_bert_has_the_requested_sizes() -> None:
    enc = LMEncoder(vocab_size=50, hidden_size=32, num_layers=3, num_heads=4, dropout=0.0)
    assert enc.vocab_size == 50
    assert enc.base_model.config.num_hidden_layers == 3
    wrapped = EarlyExitEncoder(enc, num_classes=3, num_groups=3)
    assert wrapped.num_layers == 3 and wrapped.backbone is enc.base_model


def test_loads_a_saved_model_from_a_directory_and_from_a_package(tmp_path, monkeypatch) -> None:
    model_dir = tmp_path / "pkgroot" / "fake_lm_pkg" / "model"
    model_dir.mkdir(parents=True)
    reference = _saved_model(str(model_dir)).eval()
    init = model_dir.parent / "__init__.py"
    init.write_text(
        "import os\n\ndef get_model_path():\n"
        "    return os.path.join(os.path.dirname(__file__), 'model')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "pkgroot"))
    ids = torch.randint(0, 40, (2, 7))
    for source in (str(model_dir), "fake_lm_pkg"):
        enc = LMEncoder(path=source).eval()
        with torch.no_grad():
            torch.testing.assert_close(
                enc(ids).last_hidden_state, reference(input_ids=ids).last_hidden_state
            )
    assert resolve_model_path("t", "path", "fake_lm_pkg") == os.fspath(model_dir)
    sys.modules.pop("fake_lm_pkg", None)


def test_missing_model_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="`path`.*cannot be downloaded"):
        LMEncoder(path=str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="`path`"):
        LMEncoder(path="no_such_model_package_here")
    with pytest.raises(ValueError, match="num_heads"):
        LMEncoder(hidden_size=30, num_heads=4)


def test_text_graph_with_a_saved_tokenizer(tmp_path) -> None:
    text = SyntheticTextGraph(
        SyntheticGraph(num_nodes=50, num_classes=3, num_features=8, seed=1),
        words_per_node=5,
        vocab_per_class=3,
        noise_vocab_size=10,
    )
    # A tokenizer saved elsewhere (here: the word-level one, with a longer max_length).
    saved = tmp_path / "tok"
    tokenizer = build_tokenizer(text.vocabulary(), max_length=12, path=saved)
    dm = TextGraphDataModule(text, tokenizer=str(saved), max_length=12, cache_dir=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    expected = tokenizer(text.texts(), padding="max_length", truncation=True, max_length=12)
    assert dm.tokens()["input_ids"].tolist() == expected["input_ids"]
    with pytest.raises(FileNotFoundError, match="`tokenizer`"):
        bad = TextGraphDataModule(text, tokenizer=str(tmp_path / "none"), cache_dir=str(tmp_path))
        bad.prepare_data()
