import pytest
import torch

from lightgraph.data.partition import build_partition_plans
from lightgraph.data.partition.partition_plan import boundary_importance
from lightgraph.quant import DegreeAwareBits
from tests.graphs import tricky_graph


def _reference_importance(degrees: list[int]) -> list[float]:
    """Independent reference (brute force): the mid-rank of each degree among `degrees`,
    scaled to [0, 1], with the largest degree pinned to 1 (Sylvie §IV-A)."""
    n, top = len(degrees), max(degrees)
    out = []
    for d in degrees:
        lowest = sum(e < d for e in degrees)  # 0-based rank of the tie's first member
        highest = sum(e <= d for e in degrees) - 1  # ... and of its last
        out.append(1.0 if d == top else (lowest + highest) / 2 / max(n - 1, 1))
    return out


def test_importance_is_the_mid_rank_percentile_among_boundary_nodes() -> None:
    deg = torch.tensor([5, 1, 3, 3, 9, 0])
    p = boundary_importance(deg, torch.tensor([0, 1, 2, 3, 1]))
    # pool {0, 1, 2, 3} with degrees 5, 1, 3, 3 sorted 1, 3, 3, 5 (ranks 0..3): the two 3s
    # occupy ranks 1 and 2, mid-rank 1.5 -> 1.5 / 3; nodes 4 and 5 are not boundary nodes.
    torch.testing.assert_close(p, torch.tensor([1.0, 0.0, 0.5, 0.5, 0.0, 0.0]))


def test_a_run_of_equal_low_degrees_takes_its_mid_rank() -> None:
    # Eight boundary nodes, a long run of degree 1 (as on power-law graphs):
    #   degrees   1    1    1    1    2    3    3    7
    #   ranks     0    1    2    3    4    5    6    7    (|B| - 1 = 7)
    #   mid-rank  1.5  1.5  1.5  1.5  4    5.5  5.5  max
    #   p         3/14 3/14 3/14 3/14 4/7  11/14 11/14 1
    deg = torch.tensor([1, 1, 1, 1, 2, 3, 3, 7])
    p = boundary_importance(deg, torch.arange(8))
    want = [3 / 14] * 4 + [4 / 7, 11 / 14, 11 / 14, 1.0]
    torch.testing.assert_close(p, torch.tensor(want))
    # Base width 1, candidates {1, 2, 4, 8}, candidate floor(4p): the degree-1 run is in
    # the lowest quarter (1 bit) -- the highest rank of its tie, 3/7, would have put all
    # four in the second band (2 bits).
    plan = build_partition_plans(*tricky_graph(2), 2)[0]
    plan.importance = p
    bits = DegreeAwareBits(1).row_bits(plan, torch.arange(8), "l", "forward")
    assert bits.tolist() == [1, 1, 1, 1, 4, 8, 8, 8]


def test_the_largest_in_degree_is_importance_one_even_when_tied() -> None:
    # degrees 1, 2, 5, 5: the two 5s would have mid-rank 2.5 / 3; Sylvie pins them to 1.
    p = boundary_importance(torch.tensor([1, 2, 5, 5]), torch.arange(4))
    torch.testing.assert_close(p, torch.tensor([0.0, 1 / 3, 1.0, 1.0]))
    # A single boundary node, and a pool of equal degrees, are all "the largest".
    torch.testing.assert_close(
        boundary_importance(torch.tensor([4, 2]), torch.tensor([1])), torch.tensor([0.0, 1.0])
    )
    torch.testing.assert_close(
        boundary_importance(torch.tensor([3, 3, 3]), torch.arange(3)), torch.ones(3)
    )
    assert boundary_importance(torch.tensor([3, 3]), torch.tensor([], dtype=torch.long)).sum() == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_importance_matches_the_brute_force_reference(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, 6, (200,), generator=gen)  # few distinct values: many ties
    pool = torch.randint(0, 200, (150,), generator=gen)  # duplicates allowed
    nodes = sorted(set(pool.tolist()))
    want = torch.zeros(200)
    want[nodes] = torch.tensor(_reference_importance([int(deg[v]) for v in nodes]))
    torch.testing.assert_close(boundary_importance(deg, pool), want)


@pytest.mark.parametrize("parts", [2, 3])
def test_widths_on_a_partitioned_graph_follow_the_reference(parts: int) -> None:
    """End to end: global in-degrees and the boundary set from the raw graph, mid-ranks by
    brute force, widths floor(p k) of {b_t, ..., 8}; both ends of every message agree."""
    data, part = tricky_graph(parts, num_nodes=120)
    plans = build_partition_plans(data, part, parts)
    in_degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes).tolist()
    src, dst = data.edge_index
    boundary = sorted(set(src[part[src] != part[dst]].tolist()))
    # float32, as plans store it; the band index floor(p k) is taken in float32 too.
    ref = torch.tensor(_reference_importance([in_degree[v] for v in boundary]))
    p = dict(zip(boundary, ref.tolist(), strict=True))
    for base in (1, 2, 4):
        levels = [b for b in (1, 2, 4, 8) if b >= base]
        policy = DegreeAwareBits(base)
        for plan in plans:
            send, recv = policy.message_bits(plan, "l", "backward")
            for ids, bits in (
                (plan.global_ids[plan.send_index], send),
                (plan.global_ids[plan.num_inner :], recv),
            ):
                k = len(levels)
                band = [int(torch.tensor(p[v]) * k) for v in ids.tolist()]
                want = [levels[min(i, k - 1)] for i in band]
                assert bits.tolist() == want, (base, plan.rank)


@pytest.mark.parametrize(
    "base,expected",
    [
        (1, [1, 1, 2, 4, 8, 8]),  # candidates {1, 2, 4, 8}: quarter-wide importance bands
        (2, [2, 2, 2, 4, 8, 8]),  # candidates {2, 4, 8}: thirds
        (4, [4, 4, 4, 8, 8, 8]),
        (8, [8, 8, 8, 8, 8, 8]),  # base 8: everyone gets 8 bits regardless of importance
    ],
)
def test_levels_follow_importance_and_base(base: int, expected: list[int]) -> None:
    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[0]
    plan.importance = torch.tensor([0.0, 0.2, 0.3, 0.6, 0.8, 1.0])
    bits = DegreeAwareBits(base_bits=base).row_bits(plan, torch.arange(6), "l", "forward")
    assert bits.tolist() == expected


def test_more_important_nodes_never_get_fewer_bits() -> None:
    data, part = tricky_graph(4)
    for plan in build_partition_plans(data, part, 4):
        bits = DegreeAwareBits(1).row_bits(plan, plan.send_index, "l", "forward")
        imp = plan.importance[plan.send_index]
        order = torch.argsort(imp)
        assert bool((bits[order][1:] >= bits[order][:-1]).all())


def test_base_bits_is_validated() -> None:
    with pytest.raises(
        ValueError,
        match="DegreeAwareBits: expected `base_bits` to be one of \\(1, 2, 4, 8\\) but got 3",
    ):
        DegreeAwareBits(3)
    policy = DegreeAwareBits(1)
    with pytest.raises(ValueError, match="got 16"):
        policy.base_bits = 16
