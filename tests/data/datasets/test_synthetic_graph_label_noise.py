"""SyntheticGraph(label_noise=...): redrawn labels on a graph that is otherwise unchanged."""

from __future__ import annotations

import pytest
import torch

from lightgraph.data import SyntheticGraph
from lightgraph.data.datasets import generate_synthetic_graph

SMALL = {"num_nodes": 3000, "avg_degree": 10.0, "num_classes": 10, "num_features": 16}


def test_zero_label_noise_is_the_graph_without_the_option() -> None:
    plain = generate_synthetic_graph(**SMALL)
    zero = generate_synthetic_graph(**SMALL, label_noise=0.0)
    for key in plain.keys():
        value = plain[key]
        assert torch.equal(value, zero[key]) if torch.is_tensor(value) else value == zero[key]
    # Neither the config nor the cache key mention the option at its default.
    assert "label_noise" not in SyntheticGraph(**SMALL).config()
    assert (
        SyntheticGraph(**SMALL).fingerprint()
        == SyntheticGraph(**SMALL, label_noise=0.0).fingerprint()
    )


def test_only_the_labels_change_and_about_the_expected_share() -> None:
    clean = generate_synthetic_graph(**SMALL)
    noisy = generate_synthetic_graph(**SMALL, label_noise=0.4)
    for key in ("x", "edge_index", "train_mask", "val_mask", "test_mask", "community"):
        assert torch.equal(clean[key], noisy[key]), key
    # A redrawn label equals the true class with probability 1 / C.
    kept = (noisy.y == clean.y).double().mean().item()
    assert kept == pytest.approx(1.0 - 0.4 * (1.0 - 1.0 / 10), abs=0.03)
    assert noisy.y.dtype == torch.long and 0 <= int(noisy.y.min()) and int(noisy.y.max()) < 10
    again = generate_synthetic_graph(**SMALL, label_noise=0.4)
    assert torch.equal(again.y, noisy.y)  # seeded


def test_the_option_enters_config_and_fingerprint() -> None:
    graph = SyntheticGraph(**SMALL, label_noise=0.25)
    assert graph.config()["label_noise"] == 0.25
    assert "label_noise=0.25" in graph.fingerprint()
    assert graph.fingerprint() != SyntheticGraph(**SMALL).fingerprint()
    assert torch.equal(graph.load().y, generate_synthetic_graph(**SMALL, label_noise=0.25).y)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"label_noise": 1.0}, r"expected `label_noise` in \[0, 1\) but got 1.0"),
        ({"label_noise": -0.1}, r"expected `label_noise` in \[0, 1\) but got -0.1"),
        ({"label_noise": "0.1"}, r"expected `label_noise` in \[0, 1\) but got '0.1'"),
        (
            {"label_noise": 0.1, "multilabel": True},
            r"expected `label_noise` to be 0 with multilabel=True",
        ),
    ],
)
def test_bad_label_noise(kwargs, match) -> None:
    with pytest.raises(ValueError, match=rf"^SyntheticGraph: {match}"):
        SyntheticGraph(**kwargs)
    with pytest.raises(ValueError, match=match):
        generate_synthetic_graph(num_nodes=100, **kwargs)
