from __future__ import annotations

import os

import pytest
import torch

from lightgraph.data.datasets.synthetic_graph import SyntheticGraph
from lightgraph.data.datasets.text_graph import (
    SPECIAL_TOKENS,
    SyntheticTextGraph,
    build_tokenizer,
    load_tokenizer,
)
from lightgraph.data.lightning.text_graph import TextGraphDataModule


def small_graph(**kwargs) -> SyntheticGraph:
    args = dict(num_nodes=600, avg_degree=5.0, num_classes=4, num_features=8, seed=3)
    args.update(kwargs)
    return SyntheticGraph(**args)


def text_graph(signal: float = 0.15, graph: SyntheticGraph | None = None, **kwargs):
    args = dict(words_per_node=8, vocab_per_class=6, noise_vocab_size=60, signal=signal)
    args.update(kwargs)
    return SyntheticTextGraph(small_graph() if graph is None else graph, **args)


def bag_of_words(ds: SyntheticTextGraph, texts: list[str]) -> torch.Tensor:
    index = {w: i for i, w in enumerate(ds.vocabulary())}
    bow = torch.zeros(len(texts), len(index))
    for row, text in enumerate(texts):
        for word in text.split():
            bow[row, index[word]] += 1
    return bow


def nearest_centroid_accuracy(feats, y, train, test, num_classes) -> float:
    centroids = torch.stack([feats[train & (y == c)].mean(0) for c in range(num_classes)])
    feats = torch.nn.functional.normalize(feats, dim=1)
    centroids = torch.nn.functional.normalize(centroids, dim=1)
    pred = (feats[test] @ centroids.T).argmax(1)
    return float((pred == y[test]).float().mean())


# --------------------------------------------------------------------------- texts
def test_texts_are_deterministic_and_well_formed() -> None:
    ds = text_graph()
    data = ds.load()
    texts = ds.texts(data)
    assert texts == text_graph().texts()  # same seed, same texts (graph loaded inside)
    assert list(ds.iter_texts(data)) == texts
    other = text_graph(graph=small_graph(seed=4)).texts()
    assert other != texts
    vocab = ds.vocabulary()
    assert len(vocab) == len(set(vocab)) == ds.vocab_size == 4 * 6 + 60
    assert len(texts) == data.num_nodes
    words = set(vocab)
    for text, label in zip(texts, data.y.tolist(), strict=True):
        tokens = text.split(" ")
        assert len(tokens) == 8 and set(tokens) <= words
        # every class word belongs to the node's own class
        assert all(t.startswith(f"c{label}w") for t in tokens if t.startswith("c"))
    # the graph is the wrapped SyntheticGraph's
    ref = small_graph().load()
    assert torch.equal(data.edge_index, ref.edge_index) and torch.equal(data.x, ref.x)
    assert torch.equal(data.train_mask, ref.train_mask)
    assert (ds.num_features, ds.num_classes, ds.multilabel) == (8, 4, False)


def test_signal_extremes() -> None:
    assert all(w.startswith("n") for t in text_graph(signal=0.0).texts() for w in t.split())
    assert all(w.startswith("c") for t in text_graph(signal=1.0).texts() for w in t.split())


def test_multilabel_class_words_come_from_the_nodes_labels() -> None:
    ds = text_graph(signal=0.5, graph=small_graph(multilabel=True))
    data = ds.load()
    for text, labels in zip(ds.texts(data), data.y, strict=True):
        classes = {int(w[1 : w.index("w")]) for w in text.split() if w.startswith("c")}
        assert classes <= set(labels.nonzero().view(-1).tolist())


def test_text_alone_is_informative_but_noisy_and_the_graph_adds_signal() -> None:
    ds = text_graph(signal=0.15)  # P(no class word) = 0.85 ** 8 ~ 0.27
    data = ds.load()
    bow = bag_of_words(ds, ds.texts(data))
    y, train, test = data.y, data.train_mask, data.test_mask
    text_acc = nearest_centroid_accuracy(bow, y, train, test, 4)
    assert 0.5 < text_acc < 0.92, text_acc  # chance is 0.25
    # one round of neighbour averaging (homophily 0.8) helps
    src, dst = data.edge_index
    agg = torch.zeros_like(bow).index_add_(0, dst, bow[src])
    graph_acc = nearest_centroid_accuracy(bow + agg, y, train, test, 4)
    assert graph_acc > text_acc + 0.03, (text_acc, graph_acc)


def test_fingerprint_covers_text_and_graph_settings() -> None:
    base = text_graph().fingerprint()
    assert base == text_graph().fingerprint()
    assert "signal=0.15" in base and "SyntheticGraph(" in base
    assert text_graph(signal=0.2).fingerprint() != base
    assert text_graph(words_per_node=9).fingerprint() != base
    assert text_graph(vocab_per_class=7).fingerprint() != base
    assert text_graph(noise_vocab_size=61).fingerprint() != base
    assert text_graph(graph=small_graph(seed=5)).fingerprint() != base


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"signal": -0.1}, "`signal` in \\[0, 1\\]"),
        ({"signal": 1.5}, "`signal` in \\[0, 1\\]"),
        ({"words_per_node": 0}, "`words_per_node`"),
        ({"vocab_per_class": 0}, "`vocab_per_class`"),
        ({"noise_vocab_size": 0}, "`noise_vocab_size`"),
    ],
)
def test_bad_text_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        text_graph(**kwargs)


def test_bad_graph_and_module_arguments(tmp_path) -> None:
    with pytest.raises(TypeError, match="`graph`"):
        SyntheticTextGraph(graph="cora")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`max_length` to be None or an integer >= 3"):
        TextGraphDataModule(text_graph(), max_length=2, cache_dir=str(tmp_path))
    with pytest.raises(TypeError, match="`texts\\(\\)`"):
        TextGraphDataModule(small_graph(), max_length=8, cache_dir=str(tmp_path))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`batch_size`"):
        TextGraphDataModule(text_graph(), batch_size=0, cache_dir=str(tmp_path))


# ----------------------------------------------------------------------- tokenizer
def test_tokenizer_round_trip_specials_padding_truncation(tmp_path) -> None:
    pytest.importorskip("transformers")
    words = ["c0w0", "c0w1", "n0", "n1", "n2"]
    tok = build_tokenizer(words, max_length=6, path=tmp_path / "tok")
    assert len(tok) == len(SPECIAL_TOKENS) + len(words)
    assert [tok.convert_tokens_to_ids(s) for s in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert (tok.pad_token, tok.cls_token, tok.sep_token) == ("[PAD]", "[CLS]", "[SEP]")
    texts = ["n0 c0w1 n2", "n0 n1 n2 c0w0 c0w1 n0 n1", "n0 zzz"]
    enc = tok(texts, padding="max_length", truncation=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert ids.shape == mask.shape == (3, 6)
    assert ids[0].tolist() == [2, 5 + 2, 6, 5 + 4, 3, 0]  # [CLS] n0 c0w1 n2 [SEP] [PAD]
    assert mask[0].tolist() == [1, 1, 1, 1, 1, 0]
    assert tok.decode(ids[0], skip_special_tokens=True) == "n0 c0w1 n2"
    assert tok.decode(ids[0]) == "[CLS] n0 c0w1 n2 [SEP] [PAD]"
    # truncated to max_length with [SEP] kept last
    assert tok.convert_ids_to_tokens(ids[1].tolist()) == [
        "[CLS]",
        "n0",
        "n1",
        "n2",
        "c0w0",
        "[SEP]",
    ]
    assert mask[1].tolist() == [1] * 6
    assert ids[2].tolist() == [2, 5 + 2, 1, 3, 0, 0]  # unknown word -> [UNK]
    # saved and reloaded offline with AutoTokenizer
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(str(tmp_path / "tok"), local_files_only=True)
    assert len(again) == len(tok) and again.model_max_length == 6
    re = again(["n0 c0w1 n2", "n0 n1 n2 c0w0 c0w1 n0 n1"], padding="max_length", truncation=True)
    assert re["input_ids"] == ids[:2].tolist()
    assert load_tokenizer(tmp_path / "tok").decode(ids[1], skip_special_tokens=True) == (
        "n0 n1 n2 c0w0"
    )


@pytest.mark.parametrize(
    "vocab, max_length, error, match",
    [
        (["a", "b"], 2, ValueError, "`max_length` to be an integer >= 3"),
        ([], 8, ValueError, "non-empty `vocabulary`"),
        (["a", "b c"], 8, ValueError, "without whitespace"),
        (["a", "a"], 8, ValueError, "appears twice"),
        (["a", "[PAD]"], 8, ValueError, "special token"),
        ("abc", 8, TypeError, "sequence of words"),
    ],
)
def test_build_tokenizer_rejects_bad_input(vocab, max_length, error, match) -> None:
    with pytest.raises(error, match=match):
        build_tokenizer(vocab, max_length=max_length)


def test_missing_optional_packages_name_the_extra(monkeypatch) -> None:
    import importlib.util

    import lightgraph.utilities.imports as imports

    monkeypatch.setattr(imports, "WITH_TRANSFORMERS", False)
    with pytest.raises(ImportError, match="lightgraph\\[lm\\]"):
        build_tokenizer(["a"], max_length=4)
    monkeypatch.setattr(imports, "WITH_TRANSFORMERS", True)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tokenizers" else real(name, *a),
    )
    with pytest.raises(ImportError, match='`tokenizers`.*pip install "lightgraph\\[lm\\]"'):
        build_tokenizer(["a"], max_length=4)


# --------------------------------------------------------------------- data module
class CountingModule(TextGraphDataModule):
    builds = 0

    def build(self, writer):
        type(self).builds += 1
        return super().build(writer)


def mtimes(path: str) -> dict[str, int]:
    out = {}
    for root, _, names in os.walk(path):
        for n in names:
            out[os.path.relpath(os.path.join(root, n), path)] = os.stat(
                os.path.join(root, n)
            ).st_mtime_ns
    return out


@pytest.fixture(scope="module")
def module(tmp_path_factory) -> TextGraphDataModule:
    pytest.importorskip("transformers")
    CountingModule.builds = 0
    dm = CountingModule(text_graph(), batch_size=16, cache_dir=str(tmp_path_factory.mktemp("c")))
    dm.prepare_data()
    dm.setup()
    return dm


def test_cache_is_built_once_and_reused(module) -> None:
    assert CountingModule.builds == 1
    path = module.cache_path()
    before = mtimes(path)
    assert {"graph.pt", "input_ids.pt", "attention_mask.pt", "meta.json"} <= set(before)
    assert os.path.join("tokenizer", "tokenizer.json") in before
    again = CountingModule(text_graph(), cache_dir=module.cache_dir)
    again.prepare_data()
    again.prepare_data()
    again.setup()
    assert CountingModule.builds == 1 and mtimes(path) == before
    assert torch.equal(again.tokens()["input_ids"], module.tokens()["input_ids"])
    # another text or tokenizer setting gets another cache
    assert (
        TextGraphDataModule(text_graph(), max_length=9, cache_dir=module.cache_dir).cache_path()
        != path
    )
    assert (
        TextGraphDataModule(text_graph(signal=0.3), cache_dir=module.cache_dir).cache_path() != path
    )


def test_module_serves_graph_tokens_and_tokenizer(module) -> None:
    ds = module.dataset
    ref = ds.load()
    graph = module.graph()
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(graph[key], ref[key])
    assert graph.num_nodes == 600 and module.max_length == 10
    assert module.vocab_size == 5 + ds.vocab_size and module.pad_token_id == 0
    texts = ds.texts(ref)
    toks = module.tokens(torch.tensor([0, 5, 7]))
    assert toks["input_ids"].shape == toks["attention_mask"].shape == (3, 10)
    assert toks["input_ids"].dtype == toks["attention_mask"].dtype == torch.long
    assert torch.equal(module.tokens([5])["input_ids"], toks["input_ids"][1:2])
    tok = load_tokenizer(module.tokenizer_path)
    assert len(tok) == module.vocab_size
    for row, node in enumerate([0, 5, 7]):
        assert tok.decode(toks["input_ids"][row], skip_special_tokens=True) == texts[node]
        assert toks["input_ids"][row, 0] == 2 and toks["input_ids"][row, -1] == 3
    with pytest.raises(ValueError, match="node ids in \\[0, 599\\]"):
        module.tokens([600])


def test_lm_dataloader_batches(module) -> None:
    train = module.lm_dataloader("train")
    batches = list(train)
    nodes = torch.cat([b["node"] for b in batches])
    assert sorted(nodes.tolist()) == module.graph().train_mask.nonzero().view(-1).tolist()
    assert not torch.equal(nodes, nodes.sort().values)  # shuffled ...
    again = torch.cat([b["node"] for b in module.lm_dataloader("train")])
    assert torch.equal(nodes, again)  # ... deterministically
    b = batches[0]
    assert set(b) == {"node", "input_ids", "attention_mask", "y"}
    assert b["input_ids"].shape == (16, 10) and torch.equal(b["y"], module.graph().y[b["node"]])
    assert torch.equal(b["input_ids"], module.tokens(b["node"])["input_ids"])
    test = list(module.lm_dataloader("test", batch_size=1000))
    assert len(test) == 1 and torch.equal(test[0]["node"], module.node_ids("test"))
    assert next(iter(module.train_dataloader()))["input_ids"].shape == (16, 10)
    predict = torch.cat([b["node"] for b in module.predict_dataloader()])
    assert torch.equal(predict, torch.arange(600))
    with pytest.raises(ValueError, match="`split`"):
        module.lm_dataloader("dev")


def test_tiny_bert_runs_on_a_batch(module) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=module.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=module.max_length,
        pad_token_id=module.pad_token_id,
    )
    model = transformers.BertModel(config).eval()
    batch = next(iter(module.lm_dataloader("val", batch_size=4)))
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert out.last_hidden_state.shape == (4, module.max_length, 32)
    assert torch.isfinite(out.last_hidden_state).all()
    cls = out.last_hidden_state[:, 0]  # the node embeddings the GNN would consume
    assert cls.shape == (4, 32)


def test_serving_before_setup_is_a_clear_error(tmp_path) -> None:
    dm = TextGraphDataModule(text_graph(), cache_dir=str(tmp_path))
    for call in (dm.graph, lambda: dm.tokenizer_path, lambda: dm.tokens([0]), dm.train_dataloader):
        with pytest.raises(RuntimeError, match="setup\\(\\)"):
            call()
