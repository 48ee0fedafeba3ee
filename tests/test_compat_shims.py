"""The compatibility modules left at the old import paths re-export the very objects of
the modules they moved to (not copies), and nothing else but documented wrappers."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

# shim -> {name: the module the name lives in now}. Written out by hand from the moves.
MOVES: dict[str, dict[str, str]] = {
    "lightgraph.nn.graph_transformer": {
        "MultiheadGraphAttention": "lightgraph.nn.attention.multihead_graph_attention",
        "SequenceBatchNorm": "lightgraph.nn.norm.sequence_batch_norm",
        "GraphTransformerLayer": "lightgraph.nn.models.graph_transformer_layer",
        "Graphormer": "lightgraph.nn.models.graphormer",
        "GRAPHORMER_PRESETS": "lightgraph.nn.models.graphormer",
        "GT": "lightgraph.nn.models.gt",
    },
    "lightgraph.nn.cluster_sparse": {
        "CHUNK_ELEMENTS": "lightgraph.functional.attention.cluster_sparse",
        "ClusterSparseLayout": "lightgraph.functional.attention.cluster_sparse",
        "cluster_sparse_attention": "lightgraph.functional.attention.cluster_sparse",
        "check_bias_table": "lightgraph.utilities.checks",
        "check_qkv": "lightgraph.utilities.checks",
    },
    "lightgraph.strategies.halo_exchanger": {
        "HaloExchanger": "lightgraph.distributed.halo_exchanger",
        "MODES": "lightgraph.distributed.halo_exchanger",
    },
    "lightgraph.callbacks.loss_descent_rate": {
        "LossDescentRate": "lightgraph.functional.loss_descent_rate",
        "check_smoothing": "lightgraph.functional.loss_descent_rate",
        "check_window": "lightgraph.functional.loss_descent_rate",
    },
}

# Old names whose signature changed: kept as thin wrappers, tested for behaviour below.
WRAPPERS: dict[str, set[str]] = {
    "lightgraph.nn.cluster_sparse": {"check_dropout", "check_edge_index"},
}


@pytest.mark.parametrize("shim", sorted(MOVES))
def test_shim_re_exports_the_same_objects(shim: str) -> None:
    old = importlib.import_module(shim)
    for name, home in MOVES[shim].items():
        new = importlib.import_module(home)
        obj = getattr(new, name)
        assert getattr(old, name) is obj, f"{shim}.{name} is not {home}.{name}"
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__ == home, f"{name} is defined in {obj.__module__}, not {home}"


@pytest.mark.parametrize("shim", sorted(MOVES))
def test_shim_exports_only_moved_names_and_wrappers(shim: str) -> None:
    old = importlib.import_module(shim)
    assert set(old.__all__) == set(MOVES[shim]) | WRAPPERS.get(shim, set())


def test_package_level_names_are_the_moved_objects_too() -> None:
    import lightgraph.callbacks
    import lightgraph.distributed
    import lightgraph.nn
    import lightgraph.strategies
    from lightgraph.callbacks.loss_descent_rate import LossDescentRate
    from lightgraph.nn.graph_transformer import GT, Graphormer, MultiheadGraphAttention
    from lightgraph.strategies.halo_exchanger import HaloExchanger

    assert (
        lightgraph.strategies.HaloExchanger is HaloExchanger is lightgraph.distributed.HaloExchanger
    )
    assert lightgraph.callbacks.LossDescentRate is LossDescentRate
    assert lightgraph.nn.GT is GT and lightgraph.nn.Graphormer is Graphormer
    assert lightgraph.nn.MultiheadGraphAttention is MultiheadGraphAttention


def test_cluster_sparse_wrappers_keep_their_old_signatures() -> None:
    from lightgraph.nn.cluster_sparse import check_dropout, check_edge_index

    assert check_dropout("Old", 0.25) == 0.25
    with pytest.raises(ValueError, match=r"^Old: expected `dropout_p` in \[0, 1\) but got 1\.0"):
        check_dropout("Old", 1.0)

    ei = torch.tensor([[0, 1, 2], [2, 0, 1]])
    assert check_edge_index("Old", ei, 3) is ei  # (owner, edge_index, num_tokens), as before
    with pytest.raises(ValueError, match=r"token ids in `edge_index` to lie in \[0, 1\]"):
        check_edge_index("Old", ei, 2)
    with pytest.raises(ValueError, match="dtype torch.long but got .* dtype torch.int32"):
        check_edge_index("Old", ei.int(), 3)  # the attention kernels take torch.long only
