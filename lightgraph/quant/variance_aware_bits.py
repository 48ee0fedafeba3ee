"""AdaQP's adaptive bit-widths: per device pair and message group, from a variance–time MILP."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.functional.quantize import PARAM_BYTES_PER_ROW
from lightgraph.quant.bit_width_policy import BitWidthPolicy
from lightgraph.quant.cost_model import DEFAULT_PROFILE_SIZES, CommCostModel, ring_schedule
from lightgraph.quant.milp_assignment import (
    METHODS,
    NORMALIZATIONS,
    BitAssignment,
    group_messages,
    solve_bit_assignment,
)
from lightgraph.utilities.checks import BITS, check_bits, check_choice, check_type, describe

#: How a layer weighs a received halo row in its aggregation (see :func:`aggregation_coefficients`).
AGGREGATIONS: tuple[str, ...] = ("gcn", "mean", "sum")
DIRECTIONS: tuple[str, ...] = ("forward", "backward")

Key = tuple[str, str]  # (layer, direction)
Pair = tuple[int, int]  # (owner, holder) of the rows of a message


def aggregation_coefficients(
    plan: HaloPlan, edge_index: Tensor, aggregation: str, gcn_degree: Tensor | None = None
) -> Tensor:
    """:math:`\\sum_v \\alpha^2_{k,v}` of every halo row ``k`` over the inner nodes ``v`` that aggregate it.

    The coefficients are the receiver's, from its local in-edges ``edge_index`` (in the
    plan's local numbering: row 0 the source, any local row; row 1 the destination, an
    inner row): ``"gcn"`` uses the symmetric GCN weights
    :math:`1/\\sqrt{\\tilde d_k \\tilde d_v}` from the global degrees ``gcn_degree`` (what
    :class:`~lightgraph.nn.PartitionAware` feeds GCN layers), ``"mean"`` weighs every
    in-edge of ``v`` by :math:`1/\\deg(v)` (GraphSAGE's mean; also used for attention,
    whose weights average :math:`1/\\deg(v)`), ``"sum"`` by 1. Parallel edges add up to
    one coefficient before squaring, as they do in the aggregation.

    A :class:`~lightgraph.data.PartitionPlan` holds all three:
    ``aggregation_coefficients(plan.halo, plan.edge_index, aggregation, plan.gcn_degree)``.

    Args:
        plan: the receiver's exchange topology (its halo rows are the ones weighed).
        edge_index: ``[2, E]`` the receiver's local in-edges.
        aggregation: one of :data:`AGGREGATIONS`.
        gcn_degree: ``[num_local]`` global GCN degree of every local row (in-neighbours
            without self-loops, plus one); needed for ``"gcn"`` only.

    Returns:
        ``[num_halo]`` float64.
    """
    owner = "aggregation_coefficients"
    check_type(owner, "plan", plan, HaloPlan, hint="a PartitionPlan's `.halo`")
    check_choice(owner, "aggregation", aggregation, AGGREGATIONS)
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(
            f"{owner}: expected `edge_index` of shape [2, E] but got {describe(edge_index)}."
        )
    src, dst = edge_index
    weight = torch.ones(src.numel(), dtype=torch.float64, device=src.device)
    if aggregation == "gcn":
        if gcn_degree is None:
            raise ValueError(
                f"{owner}: expected `gcn_degree` (the global degree of every local row) with "
                f"aggregation='gcn' but got None."
            )
        if not isinstance(gcn_degree, Tensor) or gcn_degree.shape != (plan.num_local,):
            raise ValueError(
                f"{owner}: expected `gcn_degree` of shape [num_local={plan.num_local}] but got "
                f"{describe(gcn_degree)}."
            )
        inv_sqrt = gcn_degree.to(torch.float64).pow(-0.5)
        weight = inv_sqrt[src] * inv_sqrt[dst]
    elif aggregation == "mean":
        deg = torch.bincount(dst, minlength=plan.num_inner).to(torch.float64)
        weight = weight / deg[dst]
    n = plan.num_inner
    halo = src >= n
    src, dst, weight = src[halo], dst[halo], weight[halo]
    # Coalesce parallel edges: their coefficients add before squaring.
    pair_id, inverse = torch.unique(src * n + dst, return_inverse=True)
    alpha = torch.zeros(pair_id.numel(), dtype=torch.float64, device=src.device)
    alpha.index_add_(0, inverse, weight)
    out = torch.zeros(plan.num_halo, dtype=torch.float64, device=src.device)
    out.index_add_(0, pair_id // n - n, alpha.square())
    return out


@dataclass
class AssignmentReport:
    """What one re-assignment did (rank 0 solved it; every rank holds a copy)."""

    epoch: int | None
    seconds: float  # wall clock of the whole re-assignment (gather, solve, broadcast)
    solve_seconds: dict[str, float] = field(default_factory=dict)  # per "layer/direction"
    status: dict[str, str] = field(default_factory=dict)
    histogram: dict[str, dict[int, int]] = field(default_factory=dict)  # rows per width
    predicted_seconds: dict[str, float] = field(default_factory=dict)  # time term Z
    predicted_seconds_max_bits: dict[str, float] = field(default_factory=dict)
    #: exchanges averaged into the traces per "layer/direction" (the fewest of any rank)
    observations: dict[str, int] = field(default_factory=dict)


def _pair_rows(
    contributions: Sequence[Mapping[Key, Any]], key: Key
) -> dict[Pair, tuple[np.ndarray, np.ndarray]] | None:
    """Merge the ranks' traces of one layer/direction into ``(range², Σα²)`` per pair."""
    world = len(contributions)
    layer, direction = key
    if any(key not in c for c in contributions):
        return None
    out: dict[Pair, tuple[np.ndarray, np.ndarray]] = {}
    for owner in range(world):
        for holder in range(world):
            if owner == holder:
                continue
            if direction == "forward":  # owner sends its rows; the holder aggregates them
                ranges = contributions[owner][key]["ranges2"][holder]
                alpha2 = contributions[holder][key]["alpha2"][owner]
            else:
                # The holder sends the gradient of its halo row k, already aggregated
                # (sum_v alpha_{k,v} dL/dz_v), and the owner adds it to the gradient of its
                # row: the quantisation noise enters with coefficient 1 (see
                # VarianceAwareBits, "Backward messages"). Weighting by sum_v alpha^2 again
                # would count the coefficients twice.
                ranges = contributions[holder][key]["ranges2"][owner]
                alpha2 = np.ones_like(ranges)
            if ranges.shape != alpha2.shape:
                raise RuntimeError(
                    f"VarianceAwareBits: traces of {layer}/{direction} disagree on the rows of pair "
                    f"{owner}->{holder}: {ranges.shape[0]} vs {alpha2.shape[0]} rows."
                )
            out[(owner, holder)] = (ranges, alpha2)
    return out


def solve_exchange(
    rows: Mapping[Pair, tuple[np.ndarray, np.ndarray]],
    dim: int,
    direction: str,
    cost_model: CommCostModel,
    world_size: int,
    ring: bool = True,
    bits: Sequence[int] = (2, 4, 8),
    lam: float = 0.5,
    group_size: int = 100,
    time_limit: float = 5.0,
    mip_rel_gap: float = 1e-3,
    method: str = "milp",
    normalization: str = "nadir_utopia",
) -> tuple[dict[Pair, np.ndarray], BitAssignment, float]:
    """AdaQP Eq. 12 for one layer and direction of a whole exchange.

    Every message row ``k`` (a node of ``owner`` held as a halo row by ``holder``) gets
    :math:`\\beta_k = \\sum_v \\alpha^2_{k,v} D (\\max h_k - \\min h_k)^2 / 6`; the rows of
    every pair are sorted by β and grouped (:func:`group_messages`), and
    :func:`solve_bit_assignment` picks one width per group. Data flows ``owner -> holder``
    forward and ``holder -> owner`` backward; with ``ring`` the pairs are grouped into
    the rounds of the ring all-to-all and the time term is the sum of the rounds'
    makespans. Per-row scale/zero bytes enter γ.

    Args:
        rows: ``(range², Σα²)`` arrays (one entry per row, in message order) per
            ``(owner, holder)``.
        dim: feature dimension :math:`D` of a row.

    Returns:
        ``(row_bits per pair, solver result, makespan with every group at max(bits))``.
    """
    if ring:
        pairs, rounds = ring_schedule(world_size)
        round_of_pair: list[int] | None = rounds
    else:
        pairs = [(s, d) for s in range(world_size) for d in range(world_size) if s != d]
        round_of_pair = None
    pair_id = {p: i for i, p in enumerate(pairs)}
    theta, gamma = cost_model.params(pairs)
    gamma = gamma.copy()
    betas, dims, pair_of_group, layout = [], [], [], []
    offset = 0
    for (owner, holder), (ranges2, alpha2) in sorted(rows.items()):
        n = ranges2.shape[0]
        if n == 0:
            continue
        flow = (owner, holder) if direction == "forward" else (holder, owner)
        i = pair_id[flow]
        gamma[i] += theta[i] * 8 * PARAM_BYTES_PER_ROW * n
        beta = torch.from_numpy(alpha2 * float(dim) * ranges2 / 6.0)
        gid, gbeta = group_messages(beta, group_size)
        betas.append(gbeta.numpy())
        dims.append(torch.bincount(gid, minlength=gbeta.numel()).numpy() * float(dim))
        pair_of_group.append(np.full(gbeta.numel(), i, dtype=np.int64))
        layout.append(((owner, holder), gid.numpy() + offset))
        offset += gbeta.numel()
    if not betas:
        raise ValueError("solve_exchange: no message rows to assign.")
    result = solve_bit_assignment(
        np.concatenate(betas),
        np.concatenate(dims),
        np.concatenate(pair_of_group),
        theta,
        gamma,
        lam=lam,
        bits=bits,
        time_limit=time_limit,
        mip_rel_gap=mip_rel_gap,
        normalization=normalization,
        round_of_pair=round_of_pair,
        fallback="greedy",
        method=method,
    )
    out = {pair: result.bits[gid].astype(np.int8) for pair, gid in layout}
    for pair in rows:
        out.setdefault(pair, np.zeros(0, dtype=np.int8))
    # The uniform-widest time, to report what the assignment saves.
    all_dims = np.concatenate(dims)
    all_pairs = np.concatenate(pair_of_group)
    per_pair = (
        theta * np.bincount(all_pairs, weights=all_dims, minlength=len(pairs)) * max(bits) + gamma
    )
    if round_of_pair is None:
        widest = float(per_pair.max())
    else:
        r = np.asarray(round_of_pair)
        widest = float(sum(per_pair[r == k].max() for k in range(r.max() + 1)))
    return out, result, widest


class VarianceAwareBits(BitWidthPolicy):
    """AdaQP (MLSys'23, §4): adaptive widths per device pair and message group.

    Every message between two ranks (one layer, one direction) adds
    :math:`\\beta_k / (2^{b_k} - 1)^2` to the variance of the weight gradients, with
    :math:`\\beta_k = \\sum_v \\alpha^2_{k,v} D_k (\\max h_k - \\min h_k)^2 / 6` (Theorem 3),
    and makes its pair's transfer :math:`\\theta_i D_k b_k` seconds longer. Periodically
    (:class:`~lightgraph.callbacks.BitWidthReassigner`, AdaQP's default every 50 epochs)
    the policy

    1. traces the rows each rank sends in every exchange while :attr:`tracing` is on —
       :class:`~lightgraph.callbacks.BitWidthReassigner` keeps it on for every epoch of
       the period, as AdaQP's assigner "keeps tracing" and solves on "traced data from
       the last period" (§3.3) — keeping the running mean of every row's
       :math:`(\\max h_k - \\min h_k)^2` over the traced exchanges (:meth:`observe`), and
       computes the receivers' aggregation coefficients :math:`\\sum_v \\alpha^2_{k,v}`
       from the plan (:func:`aggregation_coefficients`; backward messages use
       coefficient 1, see below);
    2. the runtime (:func:`~lightgraph.distributed.reassign_bits`) gathers the traces
       (:attr:`traces`) on rank 0, where :meth:`solve` sorts each pair's messages by β,
       cuts them into groups of ``group_size`` and solves the bi-objective MILP of Eq. 12
       per layer and direction (:func:`~lightgraph.quant.solve_bit_assignment`, HiGHS),
       the problems in parallel threads;
    3. the runtime broadcasts the per-row widths and every rank :meth:`apply`-s them, so
       sender and receiver agree without metadata.

    The policy itself is pure: it owns no process group and makes no collective call.

    Until the first assignment every row is sent with ``initial_bits`` (AdaQP: 8).

    **Why a mean over the period.** β is the variance one exchange adds; the widths chosen
    now serve the whole next period, so the estimate is the average β of the period just
    traced. AdaQP's public code sums :math:`D (\\max - \\min)^2 / 6` over every traced
    exchange; the sum is the mean times the number of exchanges, the same for every row
    of a problem, so with the default normalisations (``"nadir_utopia"``,
    ``"magnitude"``, invariant to scaling β) both give the same widths, and the mean keeps
    β in per-exchange units for ``normalization="none"`` (where the time term is per
    exchange too). A maximum would let one outlier epoch decide the whole period.

    **Backward messages.** Forward, the owner sends row :math:`h_k` and the holder
    aggregates it into its inner rows, :math:`z_v \\mathrel{+}= \\alpha_{k,v} h_k`, so
    the noise of :math:`\\hat h_k` reaches the holder's aggregates with variance
    :math:`\\sum_v \\alpha^2_{k,v} \\mathrm{Var}[\\hat h_k]` — Theorem 3's
    :math:`N^2` term, with the coefficients the *holder* knows (its plan), paired with the
    range the *owner* traced. Backward, lightgraph sends the other way what autograd
    produced on the holder: the gradient of halo row :math:`k`,
    :math:`g_k = \\sum_v \\alpha_{k,v}\\, \\partial L / \\partial z_v`, already
    aggregated; the owner adds :math:`\\hat g_k` to the gradient of its row with
    coefficient 1. The traced range is that of :math:`g_k` itself, so the variance added
    to the aggregated gradient (Theorem 3's :math:`M^2` term,
    :math:`\\mathrm{Var}[\\sum_k \\alpha_{k,v}\\, \\partial L / \\partial \\hat h_k]`) is
    :math:`D (\\max g_k - \\min g_k)^2 / 6` per unit of :math:`1/(2^b-1)^2`: the
    coefficients are inside the message and weighting by :math:`\\sum_v \\alpha^2_{k,v}`
    again would scale β as :math:`\\alpha^4`. (AdaQP's code sends the other kind of
    backward message — each owner sends the *unaggregated* output gradients of its own
    rows, which the receiver aggregates over the reversed edges — and so weighs them by
    backward coefficients; both compute the same exact gradient and differ only in what
    is quantised.) AdaQP's code also squares the *sum* of a message's coefficients,
    :math:`(\\sum_v \\alpha_{k,v})^2`, where the paper's variance (Theorem 3, Eq. 12) has
    :math:`\\sum_v \\alpha^2_{k,v}`. One row's noise :math:`e_k` enters every aggregate
    :math:`z_v` it feeds; the paper's form is the noise variance summed over those
    aggregates (the weight-gradient variance when their upstream gradients are
    uncorrelated), the code's the variance of their sum (the worst case, all aligned).
    lightgraph uses the paper's :math:`\\sum_v \\alpha^2_{k,v}`.

    The pair costs :math:`\\theta_i, \\gamma_i` come from ``cost_model``: ``None``
    profiles real transfers when the exchanger starts
    (:func:`~lightgraph.distributed.resolve_cost_model`, about a second), reusing
    ``cost_model_path`` if that file exists for the same world size and writing it
    otherwise; a path loads a saved model; a mapping ``{theta: ..., gamma: ...}`` (seconds
    per bit, seconds; scalars or matrices) or a :class:`~lightgraph.quant.CommCostModel`
    overrides profiling.

    AdaQP's sensitivity study (§5.4, Fig. 11): the smallest group size (50) gave the best
    accuracy at a larger assignment cost; λ = 0 (time only) and λ = 1 (variance only) were
    both worse than a mix (0.5); a moderate period (50 epochs) was best.

    Args:
        bits: candidate widths (AdaQP: 2, 4, 8).
        lam: λ of Eq. 12 in [0, 1].
        group_size: messages per group (Appendix B uses 100–2000 by graph size).
        initial_bits: width of every row before the first assignment.
        time_limit: HiGHS time limit per problem, seconds.
        mip_rel_gap: HiGHS relative gap.
        method: ``"milp"`` (HiGHS) or ``"greedy"`` (fast heuristic).
        normalization: scaling of the two objectives (see
            :func:`~lightgraph.quant.solve_bit_assignment`).
        cost_model: ``None`` (profile), a JSON path, a mapping or a ``CommCostModel``.
        cost_model_path: where a profiled model is cached (``None``: not cached).
        profile_sizes: message sizes (bytes) timed when profiling.
        num_workers: threads solving layers in parallel on rank 0 (``None``: one per CPU,
            at most one per problem).
    """

    def __init__(
        self,
        bits: Sequence[int] = (2, 4, 8),
        lam: float = 0.5,
        group_size: int = 100,
        initial_bits: int = 8,
        time_limit: float = 5.0,
        mip_rel_gap: float = 1e-3,
        method: str = "milp",
        normalization: str = "nadir_utopia",
        cost_model: CommCostModel | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        cost_model_path: str | os.PathLike[str] | None = None,
        profile_sizes: Sequence[int] = DEFAULT_PROFILE_SIZES,
        num_workers: int | None = None,
    ) -> None:
        owner = type(self).__name__
        bits = tuple(bits)
        if not bits:
            raise ValueError(f"{owner}: expected a non-empty `bits` from {BITS} but got {bits!r}.")
        for b in bits:
            check_bits(owner, "bits", b)
        super().__init__(check_bits(owner, "initial_bits", initial_bits))
        if isinstance(lam, bool) or not isinstance(lam, int | float) or not 0.0 <= lam <= 1.0:
            raise ValueError(f"{owner}: expected `lam` in [0, 1] but got {lam!r}.")
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ValueError(
                f"{owner}: expected `group_size` to be a positive integer but got {group_size!r}."
            )
        if method not in METHODS:
            raise ValueError(
                f"{owner}: expected `method` to be one of {METHODS} but got {method!r}."
            )
        if normalization not in NORMALIZATIONS:
            raise ValueError(
                f"{owner}: expected `normalization` to be one of {NORMALIZATIONS} but got {normalization!r}."
            )
        if not (
            isinstance(time_limit, int | float) and math.isfinite(time_limit) and time_limit > 0
        ):
            raise ValueError(
                f"{owner}: expected `time_limit` > 0 (seconds) but got {time_limit!r}."
            )
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
            raise ValueError(
                f"{owner}: expected `num_workers` >= 1 or None but got {num_workers!r}."
            )
        if cost_model is not None and not isinstance(
            cost_model, CommCostModel | Mapping | str | os.PathLike
        ):
            raise TypeError(
                f"{owner}: expected `cost_model` to be None, a path, a mapping {{theta, gamma}} or a "
                f"CommCostModel but got {type(cost_model).__name__}."
            )
        self.bits = tuple(sorted(set(bits)))
        self.lam = float(lam)
        self.group_size = group_size
        self.initial_bits = initial_bits
        self.time_limit = float(time_limit)
        self.mip_rel_gap = float(mip_rel_gap)
        self.method = method
        self.normalization = normalization
        self.cost_model_spec = cost_model
        self.cost_model_path = None if cost_model_path is None else os.fspath(cost_model_path)
        self.profile_sizes = tuple(profile_sizes)
        self.num_workers = num_workers
        self.cost_model: CommCostModel | None = (
            cost_model if isinstance(cost_model, CommCostModel) else None
        )
        self.version = 0
        self.tracing = False
        #: per (layer, direction): per (owner, holder): widths of the pair's rows (int8)
        self.assignment: dict[Key, dict[Pair, np.ndarray]] = {}
        self.reports: list[AssignmentReport] = []
        self._traces: dict[Key, dict[str, Any]] = {}
        self.last_problems: dict[Key, tuple[dict[Pair, tuple[np.ndarray, np.ndarray]], int]] = {}

    # --------------------------------------------------------------- BitWidthPolicy API
    def row_bits(self, plan: HaloPlan, nodes: Tensor, layer: str, direction: str) -> Tensor:
        raise TypeError(
            "VarianceAwareBits: widths depend on the device pair a row travels between, not on the "
            "node alone; use message_bits(plan, layer, direction)."
        )

    def message_bits(self, plan: HaloPlan, layer: str, direction: str) -> tuple[Tensor, Tensor]:
        device = plan.send_index.device
        table = self.assignment.get((layer, direction))
        if table is None:
            return (
                torch.full(
                    (plan.send_index.numel(),), self.initial_bits, dtype=torch.long, device=device
                ),
                torch.full((plan.num_halo,), self.initial_bits, dtype=torch.long, device=device),
            )
        me = plan.rank
        send = [table[(me, q)] for q in range(plan.num_parts) if q != me]
        recv = [table[(q, me)] for q in range(plan.num_parts) if q != me]
        send_bits = torch.from_numpy(np.concatenate(send) if send else np.zeros(0, np.int8))
        recv_bits = torch.from_numpy(np.concatenate(recv) if recv else np.zeros(0, np.int8))
        if send_bits.numel() != plan.send_index.numel() or recv_bits.numel() != plan.num_halo:
            raise RuntimeError(
                f"VarianceAwareBits: the assignment of {layer}/{direction} has {send_bits.numel()} sent and "
                f"{recv_bits.numel()} received rows, the plan {plan.send_index.numel()} and {plan.num_halo}; "
                f"was it made for another partitioning?"
            )
        return send_bits.long().to(device), recv_bits.long().to(device)

    def observe(
        self, plan: HaloPlan, layer: str, direction: str, rows: Tensor, alpha2: Tensor | None
    ) -> None:
        """Add one exchange to the traces: every sent row's range² and, forward, the coefficients.

        Calls accumulate until :meth:`apply`: :attr:`traces` reports, per row, the mean of
        :math:`(\\max - \\min)^2` over every exchange observed for the layer and direction
        (all the epochs of the period while :attr:`tracing` stays on). The sums stay on the
        rows' device, so tracing adds no host synchronisation to an exchange.

        Args:
            plan: the calling rank's exchange topology.
            layer: the exchanging layer.
            direction: ``"forward"`` or ``"backward"``.
            rows: the rows this rank sends, in message order (the same rows every call).
            alpha2: ``[num_halo]`` :func:`aggregation_coefficients` of this rank's halo rows
                (needed forward: this rank is the receiver of those rows).
        """
        owner = "VarianceAwareBits.observe"
        if direction not in DIRECTIONS:
            raise ValueError(
                f"{owner}: expected `direction` to be one of {DIRECTIONS} but got {direction!r}."
            )
        counts = list(plan.send_counts if direction == "forward" else plan.halo_counts)
        flat = rows.detach().reshape(rows.size(0), -1)
        if flat.size(0) != sum(counts):
            raise ValueError(
                f"{owner}: expected {sum(counts)} rows for {layer}/{direction} (the plan's "
                f"{'send' if direction == 'forward' else 'halo'} rows) but got {flat.size(0)}."
            )
        if flat.size(0):
            ranges2 = (flat.amax(1) - flat.amin(1)).double().square()
        else:
            ranges2 = torch.zeros(0, dtype=torch.float64, device=flat.device)
        if direction == "forward" and alpha2 is None:
            raise ValueError(
                f"{owner}: expected `alpha2` (the receiver's aggregation coefficients) for a "
                "forward exchange but got None."
            )
        key = (layer, direction)
        acc = self._traces.get(key)
        if acc is None:
            acc = {
                "dim": int(flat.size(1)),
                "rank": plan.rank,
                "num_parts": plan.num_parts,
                "counts": counts,
                "halo_counts": list(plan.halo_counts),
                "sum": ranges2.clone(),
                "observations": 0,
            }
            self._traces[key] = acc
        elif acc["dim"] != int(flat.size(1)) or acc["counts"] != counts:
            raise RuntimeError(
                f"{owner}: the rows of {layer}/{direction} changed within a period "
                f"({acc['counts']} rows per peer of dimension {acc['dim']}, now {counts} of "
                f"dimension {int(flat.size(1))}); re-assign before changing the model or the plan."
            )
        else:
            acc["sum"] += ranges2.to(acc["sum"].device)
        acc["observations"] += 1
        if alpha2 is not None:
            acc["alpha2"] = alpha2  # a property of the plan: the latest is the value

    # ------------------------------------------------------------------ re-assignment
    @property
    def traces(self) -> dict[Key, dict[str, Any]]:
        """This rank's traces since the last :meth:`apply` (what the runtime gathers).

        Per ``(layer, direction)``: ``dim`` (:math:`D`), ``observations`` (exchanges
        traced), ``ranges2`` (per peer, the mean range² of the rows sent to it, in message
        order) and, forward, ``alpha2`` (per peer, :math:`\\sum_v \\alpha^2_{k,v}` of the halo
        rows received from it). Plain NumPy arrays, ready to pickle.
        """
        out: dict[Key, dict[str, Any]] = {}
        for key, acc in self._traces.items():
            me, parts = acc["rank"], acc["num_parts"]
            mean = (acc["sum"] / acc["observations"]).cpu().numpy()
            splits = np.split(mean, np.cumsum(acc["counts"])[:-1])
            entry: dict[str, Any] = {
                "dim": acc["dim"],
                "observations": acc["observations"],
                "ranges2": {q: splits[q] for q in range(parts) if q != me},
            }
            if "alpha2" in acc:
                a2 = acc["alpha2"].detach().double().cpu().numpy()
                blocks = np.split(a2, np.cumsum(acc["halo_counts"])[:-1])
                entry["alpha2"] = {q: blocks[q] for q in range(parts) if q != me}
            out[key] = entry
        return out

    def apply(self, table: Mapping[Key, dict[Pair, np.ndarray]], report: AssignmentReport) -> None:
        """Use the widths :meth:`solve` chose (on every rank); clears the traces, bumps :attr:`version`.

        Layers/directions missing from ``table`` keep their widths.
        """
        self.assignment.update(table)
        self.reports.append(report)
        self._traces = {}
        self.version += 1

    def solve(
        self,
        contributions: Sequence[Mapping[Key, Any]],
        world: int,
        ring: bool,
        epoch: int | None = None,
    ) -> tuple[dict[Key, dict[Pair, np.ndarray]], AssignmentReport]:
        """New widths from every rank's :attr:`traces` (``contributions[r]`` from rank ``r``).

        Pure: runs wherever the caller gathered the traces (rank 0). Layers/directions
        without a trace on every rank are left out of the returned table.

        Args:
            contributions: the ranks' traces, in rank order.
            world: number of ranks.
            ring: whether the exchange uses the ring transport (the time term sums the
                rounds' makespans) or one all-to-all.
            epoch: the epoch recorded in the report.
        """
        if self.cost_model is None:
            raise RuntimeError(
                "VarianceAwareBits.solve: no cost model; the halo exchanger resolves it at "
                "start-up (or pass `cost_model`)."
            )
        keys = sorted({k for c in contributions for k in c})
        jobs = []
        for key in keys:
            rows = _pair_rows(contributions, key)
            if rows is None or not any(r[0].size for r in rows.values()):
                continue
            dim = contributions[0][key]["dim"]
            jobs.append((key, rows, dim))
        #: rank 0 only: the merged ``(range², Σα²)`` rows and dims of the last solve
        self.last_problems = {key: (rows, dim) for key, rows, dim in jobs}
        cost_model = self.cost_model

        def run(
            job: tuple[Key, Any, int],
        ) -> tuple[Key, dict[Pair, np.ndarray], BitAssignment, float]:
            key, rows, dim = job
            out, result, widest = solve_exchange(
                rows,
                dim,
                key[1],
                cost_model,
                world,
                ring=ring,
                bits=self.bits,
                lam=self.lam,
                group_size=self.group_size,
                time_limit=self.time_limit,
                mip_rel_gap=self.mip_rel_gap,
                method=self.method,
                normalization=self.normalization,
            )
            return key, out, result, widest

        workers = self.num_workers or os.cpu_count() or 1
        workers = max(1, min(workers, len(jobs)))
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(run, jobs))
        else:
            results = [run(job) for job in jobs]
        table: dict[Key, dict[Pair, np.ndarray]] = {}
        report = AssignmentReport(epoch=epoch, seconds=0.0)
        for key, out, result, widest in results:
            name = f"{key[0]}/{key[1]}"
            table[key] = out
            allbits = np.concatenate(list(out.values())) if out else np.zeros(0, np.int8)
            report.histogram[name] = {b: int((allbits == b).sum()) for b in self.bits}
            report.solve_seconds[name] = result.solve_seconds
            report.status[name] = result.status
            report.predicted_seconds[name] = result.time_term
            report.predicted_seconds_max_bits[name] = widest
            report.observations[name] = min(
                int(c[key].get("observations", 1)) for c in contributions
            )
        return table, report

    def histogram(self) -> dict[str, dict[int, int]]:
        """Rows per width for every layer/direction (current widths; all ranks' messages)."""
        return {
            f"{layer}/{direction}": {
                b: int(sum((bits == b).sum() for bits in table.values())) for b in self.bits
            }
            for (layer, direction), table in sorted(self.assignment.items())
        }

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "assignment": {
                f"{layer}\x1f{direction}": {
                    f"{o}-{h}": torch.from_numpy(bits.copy()) for (o, h), bits in table.items()
                }
                for (layer, direction), table in self.assignment.items()
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        assignment: dict[Key, dict[Pair, np.ndarray]] = {}
        for name, table in state["assignment"].items():
            layer, direction = name.split("\x1f")
            assignment[(layer, direction)] = {
                (int(k.split("-")[0]), int(k.split("-")[1])): torch.as_tensor(v)
                .numpy()
                .astype(np.int8)
                for k, v in table.items()
            }
        self.assignment = assignment
        self.version = int(state["version"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(bits={self.bits}, lam={self.lam}, group_size={self.group_size}, "
            f"initial_bits={self.initial_bits}, method={self.method!r})"
        )
