"""The typed hand-off from data module to model (lightgraph.data.contract)."""

from __future__ import annotations

import ast
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from lightgraph.data import MultistageDataModule, NeighborSamplingDataModule, SyntheticGraph
from lightgraph.data.contract import DataContract, data_contract
from lightgraph.data.loader import PartitionBatchSampler

DATASET = SyntheticGraph(num_nodes=300, avg_degree=5, num_features=4, train_ratio=0.3, seed=1)
ROOT = Path(__file__).resolve().parents[3] / "lightgraph"


class _Trainer:  # what data_contract reads of a Trainer
    def __init__(self, datamodule):
        self.datamodule = datamodule


def test_no_data_module_or_a_plain_one_declares_the_empty_contract():
    assert data_contract(None) == DataContract()
    assert data_contract(_Trainer(None)) == DataContract()
    assert data_contract(_Trainer(pl.LightningDataModule())) == DataContract()


def test_history_without_its_table_hook_or_row_count_is_refused():
    with pytest.raises(ValueError, match=r"`history_layers` >= 0 but got -1"):
        DataContract(history_layers=-1)
    with pytest.raises(ValueError, match=r"num_store_nodes=0 and attach_history=None"):
        DataContract(history_layers=2)
    with pytest.raises(ValueError, match=r"num_store_nodes=10 and attach_history=None"):
        DataContract(history_layers=1, num_store_nodes=10)


def test_a_missing_full_graph_names_the_owner_and_what_needs_it():
    with pytest.raises(RuntimeError, match=r"^Owner: the refresh needs the whole graph"):
        DataContract().require_full_graph("Owner", "the refresh")


def test_store_modules_declare_their_evaluation_and_graph(tmp_path):
    dm = NeighborSamplingDataModule(
        DATASET, fanouts=[3, 3], batch_size=32, eval_mode="sampled", cache_dir=str(tmp_path)
    )
    dm.setup("fit")
    contract = data_contract(_Trainer(dm))
    assert (contract.eval_mode, contract.history_layers, contract.attach_history) == (
        "sampled",
        0,
        None,
    )
    graph = contract.require_full_graph("test", "this check")
    assert graph.x.shape == (300, 4)
    assert int(graph.indptr[-1]) == int(graph.indices.numel())


def test_pbs_with_history_hands_the_table_to_the_data_module(tmp_path):
    dm = MultistageDataModule(
        DATASET,
        first_stage=PartitionBatchSampler(num_parts=4, parts_per_batch=2, history=True),
        fanouts=[3, 3, 3],
        batch_size=32,
        cache_dir=str(tmp_path),
    )
    dm.setup("fit")
    contract = dm.data_contract()
    assert (contract.history_layers, contract.num_store_nodes) == (2, 300)

    class Table:  # row r of layer l holds (l, r)
        def pull(self, layer, ids):
            return torch.stack([torch.full_like(ids, layer), ids], 1).double()

    step = next(iter(dm.train_loader()))
    with pytest.raises(RuntimeError, match=r"needs the model's history table"):
        dm.transfer_batch_to_device(step, torch.device("cpu"), 0)
    contract.attach_history(Table())
    moved = dm.transfer_batch_to_device(step, torch.device("cpu"), 0)
    for layer, rows in enumerate(moved.macro.hist):
        assert torch.all(rows[:, 0] == layer)
    dm.teardown("fit")


# --------------------------------------------------------------- no probing either way
def _calls(path: Path, names: set[str]) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in names:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_models_read_the_data_module_through_the_contract_only():
    """No getattr/hasattr on a data module in a model, no model attribute read in a data
    module, and no probe of PyG's private BasicGNN._trim anywhere."""
    problems = []
    for path in sorted((ROOT / "models").rglob("*.py")):
        for line, call in _calls(path, {"getattr", "hasattr"}):
            if "datamodule" in call:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {call}")
    for path in sorted((ROOT / "data").rglob("*.py")):
        text = path.read_text()
        if "lightning_module" in text:
            problems.append(f"{path.relative_to(ROOT)}: reads trainer.lightning_module")
    for path in sorted(ROOT.rglob("*.py")):
        for line, call in _calls(path, {"getattr", "hasattr"}):
            if "'_trim'" in call or '"_trim"' in call:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {call}")
    assert not problems, "\n".join(problems)
