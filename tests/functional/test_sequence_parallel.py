"""lightgraph.functional.sequence_parallel: the token split of a sequence-parallel group,
checked against hand arithmetic."""

from __future__ import annotations

import pytest

from lightgraph.functional.sequence_parallel import shard_range, shard_sizes

# (num_tokens, world_size) -> sizes, worked out by hand: q, r = divmod(S, P); the first
# r ranks hold q + 1 tokens, the others q.
SIZES = {
    (1, 1): [1],
    (7, 1): [7],
    (5, 5): [1, 1, 1, 1, 1],
    (6, 4): [2, 2, 1, 1],  # 6 = 4 * 1 + 2
    (10, 5): [2, 2, 2, 2, 2],
    (11, 3): [4, 4, 3],  # 11 = 3 * 3 + 2
    (13, 4): [4, 3, 3, 3],  # 13 = 4 * 3 + 1
    (4096, 3): [1366, 1365, 1365],  # 4096 = 3 * 1365 + 1
}

# (num_tokens, world_size, rank) -> [start, end), from the sizes above.
RANGES = {
    (11, 3, 0): (0, 4),
    (11, 3, 1): (4, 8),
    (11, 3, 2): (8, 11),
    (6, 4, 0): (0, 2),
    (6, 4, 1): (2, 4),
    (6, 4, 2): (4, 5),
    (6, 4, 3): (5, 6),
    (13, 4, 3): (10, 13),
    (7, 1, 0): (0, 7),
}


@pytest.mark.parametrize("num_tokens,world_size", sorted(SIZES))
def test_shard_sizes_by_hand(num_tokens: int, world_size: int) -> None:
    assert shard_sizes(num_tokens, world_size) == SIZES[(num_tokens, world_size)]


@pytest.mark.parametrize("num_tokens,world_size,rank", sorted(RANGES))
def test_shard_range_by_hand(num_tokens: int, world_size: int, rank: int) -> None:
    assert shard_range(num_tokens, world_size, rank) == RANGES[(num_tokens, world_size, rank)]


def test_ranges_tile_the_sequence_and_differ_by_at_most_one() -> None:
    for num_tokens in range(1, 25):
        for world_size in range(1, num_tokens + 1):
            ranges = [shard_range(num_tokens, world_size, r) for r in range(world_size)]
            covered = [t for start, end in ranges for t in range(start, end)]
            assert covered == list(range(num_tokens)), (num_tokens, world_size)
            lengths = [end - start for start, end in ranges]
            assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1
            assert lengths == sorted(lengths, reverse=True)  # the longer shards come first


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: shard_sizes(3, 4), ValueError, r"`num_tokens` to be at least `world_size` \(4\)"),
        (lambda: shard_sizes(0, 1), ValueError, "but got num_tokens=0"),
        (lambda: shard_sizes(4, 0), ValueError, "`world_size` to be a positive integer but got 0"),
        (lambda: shard_sizes(4, True), ValueError, "`world_size` to be a positive integer"),
        (lambda: shard_sizes(True, 1), ValueError, "`num_tokens` to be an integer but got True"),
        (lambda: shard_sizes("8", 2), ValueError, "`num_tokens` to be an integer but got '8'"),
        (lambda: shard_range(8, 2, -1), ValueError, r"`rank` to be an integer in \[0, 2\)"),
        (lambda: shard_range(8, 2, 2), ValueError, r"`rank` to be an integer in \[0, 2\)"),
        (lambda: shard_range(8, 2, False), ValueError, "but got False"),
        (lambda: shard_range(8, 2, 1.0), ValueError, "but got 1.0"),
    ],
)
def test_bad_arguments(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()
