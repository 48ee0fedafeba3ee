"""check_conditions (C1-C3) on hand-made graphs, the direction of C3, scaling."""

from __future__ import annotations

import pytest
import torch

from lightgraph.functional.attention import check_conditions
from tests.functional.attention.common import bad_input


def undirected(pairs, n, loops=True):
    e = torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1)
    e = torch.cat([e, e.flip(0)], dim=1)
    if loops:
        e = torch.cat([e, torch.arange(n).repeat(2, 1)], dim=1)
    return e


N = 6
PATH = [(i, i + 1) for i in range(N - 1)]
SHUFFLED_PATH = [(0, 2), (2, 4), (4, 1), (1, 3), (3, 5)]
STAR = [(0, i) for i in range(1, N)]
CYCLE = PATH + [(N - 1, 0)]
COMPLETE = [(i, j) for i in range(N) for j in range(i + 1, N)]
BIPARTITE = [(i, j) for i in range(3) for j in range(3, 6)]  # K_{3,3}: Dirac, order is no path
TRIANGLES = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]


@pytest.mark.parametrize(
    "edge_index,num_layers,expected",
    [
        (undirected(PATH, N), 5, (True, True, True)),  # the token order is the path
        (undirected(PATH, N), 4, (True, True, False)),  # diameter 5
        (undirected(SHUFFLED_PATH, N), 5, (True, False, True)),  # path exists, not certified
        (undirected(STAR, N), 2, (True, False, True)),  # no Hamiltonian path; hub certificate
        (undirected(STAR, N), 1, (True, False, False)),
        (undirected(CYCLE, N), 3, (True, True, True)),
        (undirected(CYCLE, N), 2, (True, True, False)),
        (undirected(COMPLETE, N), 1, (True, True, True)),
        (undirected(BIPARTITE, N), 2, (True, True, True)),  # Dirac: min degree 3 >= 6 / 2
        (undirected(TRIANGLES, N), 8, (True, False, False)),  # disconnected
        (undirected(COMPLETE, N, loops=False), 1, (False, True, True)),  # no self-loops
        (undirected(COMPLETE, N)[:, :-1], 1, (False, True, True)),  # token 5 lacks its loop
        (torch.tensor([[0], [0]]), 1, (True, True, True)),  # a single token
    ],
)
def test_conditions_on_hand_made_graphs(edge_index, num_layers, expected) -> None:
    n = int(edge_index.max()) + 1
    got = check_conditions(edge_index, n, num_layers)
    assert (got["c1"], got["c2"], got["c3"]) == expected


@pytest.mark.parametrize("num_layers,expected", [(5, True), (4, False)])
def test_c3_follows_the_direction_of_attention(num_layers, expected) -> None:
    # Directed cycle 0 -> 1 -> ... -> 5 -> 0: key j reaches query j+1 only; no hub shortcut.
    src = torch.arange(N)
    ei = torch.cat([torch.stack([src, (src + 1) % N]), src.repeat(2, 1)], dim=1)
    assert check_conditions(ei, N, num_layers)["c3"] is expected


def test_conditions_scale_to_100k_tokens() -> None:
    S = 100_000
    src = torch.arange(S)
    ring = torch.stack([src, (src + 1) % S])
    ei = torch.cat([ring, ring.flip(0), src.repeat(2, 1)], dim=1)
    assert check_conditions(ei, S, num_layers=4) == {"c1": True, "c2": True, "c3": False}
    hub = torch.stack([torch.zeros(S, dtype=torch.long), src])  # token 0 as a global token
    ei = torch.cat([ei, hub, hub.flip(0)], dim=1)
    assert check_conditions(ei, S, num_layers=2)["c3"] is True


def test_bad_input() -> None:
    bad_input(lambda q, k, v, ei: check_conditions(ei, 4, 0), "`num_layers` >= 1")
