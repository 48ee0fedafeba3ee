"""UniTG's evaluation: the GNN on its current input and the LM by its exit heads.

:class:`UniTGEvaluation` is the evaluation part of
:class:`~lightgraph.models.UniTGModule` (a mixin: it reads the module's graph, GNN, LM,
store and parallel context). ``val_acc``/``test_acc`` are the GNN's;
``lm_val_acc``/``lm_test_acc`` the LM's own, each node classified at its group's exit.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

__all__ = ["UniTGEvaluation"]


class UniTGEvaluation:
    """Validation and test steps of :class:`~lightgraph.models.UniTGModule`."""

    # Provided by the module.
    _graph: Data | None
    model: Any
    lm: Any

    def _gnn_val_accuracy(self) -> float:
        """The GNN's validation accuracy on the current store (eval mode, no randomness)."""
        stats = self._gnn_eval_stats()
        return float(stats[0] / stats[1].clamp_min(1.0))

    @torch.no_grad()
    def _gnn_eval_stats(self) -> Tensor:
        """``[correct_val, n_val, correct_test, n_test, val_loss_sum]`` of the GNN on its
        current input, in eval mode (float64 on the module's device, summed over the
        pipeline's stages: only the last one has logits)."""
        graph = self._graph
        assert graph is not None
        was_training = self.model.training
        self.model.eval()
        pipe = self.parallel_context.flow_pipeline
        if pipe is None:
            logits: Tensor | None = self.model(self.gnn_input(), graph.edge_index)
        else:
            logits = pipe.forward_eval(self.gnn_input() if pipe.is_first else None)
        self.model.train(was_training)
        if logits is None:
            stats = torch.zeros(5, dtype=torch.float64, device=self.device)
        else:
            pred = logits.argmax(dim=-1)
            val, test = graph.val_mask, graph.test_mask
            parts = [
                (pred[val] == graph.y[val]).sum(),
                val.sum(),
                (pred[test] == graph.y[test]).sum(),
                test.sum(),
                F.cross_entropy(logits[val], graph.y[val], reduction="sum"),
            ]
            stats = torch.stack([t.to(torch.float64) for t in parts])
        _, world = self._rank_world()
        if world > 1 and pipe is not None:
            dist.all_reduce(stats)  # on the compute device
        return stats

    @torch.no_grad()
    def _evaluate(self, stage: str) -> None:
        self._follow_device()
        correct_val, n_val, correct_test, n_test, loss_val = self._gnn_eval_stats().tolist()
        _, world = self._rank_world()
        sync = {"batch_size": 1, "reduce_fx": "max", "sync_dist": world > 1}
        if self.lm is not None:
            lm_val, lm_test = self.lm_accuracy()
            if stage == "val":
                self.log("lm_val_acc", lm_val, **sync)  # type: ignore[arg-type]
            self.log("lm_test_acc", lm_test, **sync)  # type: ignore[arg-type]
        if stage == "val":
            self.log("val_loss", loss_val / max(n_val, 1.0), **sync)  # type: ignore[arg-type]
            self.log("val_acc", correct_val / max(n_val, 1.0), prog_bar=True, **sync)  # type: ignore[arg-type]
        self.log("test_acc", correct_test / max(n_test, 1.0), prog_bar=True, **sync)  # type: ignore[arg-type]

    @torch.no_grad()
    def lm_accuracy(self) -> tuple[float, float]:
        """The LM's own ``(validation, test)`` accuracy: each node classified by the exit
        head of its group at that group's exit layer (the grouping fine-tuning uses).

        Recomputed only after an LM update; under flow parallelism every stage classifies
        a share of the nodes and the counts are summed.
        """
        lm = self.lm
        graph = self._graph
        assert lm is not None and graph is not None and self._exit_groups is not None
        assert self._input_ids is not None and self._attention_mask is not None
        if self._lm_acc_cache is not None and self._lm_acc_cache[0] == self._lm_version:
            val_acc, test_acc = self._lm_acc_cache[1]
            return val_acc, test_acc
        rank, world = self._rank_world()
        split = world if self.parallel_context.flow_pipeline is not None else 1
        stats = torch.zeros(4, dtype=torch.float64, device=self.device)  # all-reduced below
        was_training = lm.training
        lm.eval()
        for i, mask in enumerate((graph.val_mask, graph.test_mask)):
            nodes = mask.nonzero().view(-1)
            stats[2 * i + 1] = float(nodes.numel())
            mine = nodes[rank::split] if split > 1 else nodes
            groups = self._exit_groups.to(mine.device)[mine]
            for group in range(lm.num_groups):
                rows = mine[groups == group]
                if rows.numel() == 0:
                    continue
                for chunk in rows.split(max(1, self.encode_batch_size * 4)):
                    emb = lm.embed(
                        self._input_ids[chunk], self._attention_mask[chunk], lm.exit_layers[group]
                    )
                    pred = lm.heads[group](emb).argmax(dim=-1)
                    stats[2 * i] += float((pred == graph.y[chunk]).sum())
        lm.train(was_training)
        if split > 1:
            correct = stats[0::2].clone()
            dist.all_reduce(correct)
            stats[0::2] = correct
        values = [
            float(stats[0] / stats[1].clamp_min(1.0)),
            float(stats[2] / stats[3].clamp_min(1.0)),
        ]
        self._lm_acc_cache = (self._lm_version, values)
        return values[0], values[1]

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate("val")

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._evaluate("test")
