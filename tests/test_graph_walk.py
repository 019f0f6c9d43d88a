"""``LeafGraph.walk`` sums each leaf's share of the walk without an array over every node; the ranking is
the one the whole-array version gave, to the last bit."""

from __future__ import annotations

import random

import numpy as np

from vaultmem import graph as graph_mod
from vaultmem.graph import HUB_EDGES, RESTART, STEPS, LeafGraph


def _whole_array_walk(g: LeafGraph, leaves: dict[str, float], entities: dict[str, float], limit: int) -> list:
    """The walk as it was written before (one array of every node, ``flatnonzero`` at the end)."""
    seed = {p: w for i, w in leaves.items() if (p := g.leaf_pos.get(i)) is not None}
    for entity, weight in entities.items():
        pos = g.entity_pos.get(entity)
        if pos is not None:
            seed[pos] = seed.get(pos, 0.0) + weight
    total = sum(seed.values())
    if total <= 0:
        return []
    nodes = np.fromiter(seed, dtype=np.intp, count=len(seed))
    mass = np.fromiter(seed.values(), dtype=np.float64, count=len(seed)) / total
    found = np.zeros(len(g._ids))
    share = RESTART
    for step in range(STEPS + 1):
        on_leaf = g._is_leaf[nodes]
        found[nodes[on_leaf]] += share * mass[on_leaf]
        if step == STEPS:
            break
        degree = g._degree[nodes]
        keep = (degree > 0) & (degree <= HUB_EDGES)
        nodes, mass, degree = nodes[keep], mass[keep] / degree[keep], degree[keep]
        if not len(nodes):
            break
        offsets = np.arange(int(degree.sum())) - np.repeat(np.cumsum(degree) - degree, degree)
        reached = g._next[np.repeat(g._start[nodes], degree) + offsets]
        nodes, inverse = np.unique(reached, return_inverse=True)
        mass = np.asarray(np.bincount(inverse, weights=np.repeat(mass, degree)), dtype=np.float64)
        share *= 1.0 - RESTART
    hit = np.flatnonzero(found)
    if len(hit) > limit:
        hit = hit[np.argpartition(-found[hit], limit - 1)[:limit]]
    ids = g._ids
    best = sorted(hit.tolist(), key=lambda p: (-found[p], ids[p] or ""))
    return [(ids[p], float(found[p])) for p in best]


def test_the_walk_ranks_and_scores_as_the_whole_array_walk_did() -> None:
    rng = random.Random(7)
    g = LeafGraph()
    rows = [(f"l{i:04d}", f"src{i % 5}", f"s{i // 40}") for i in range(1200)]
    entities = [f"person:p{j}" for j in range(150)] + ["topic:everywhere"]
    mentions = [(rng.choice(entities[:150]), leaf) for leaf, _, _ in rows for _ in range(rng.randint(0, 3))]
    mentions += [("topic:everywhere", leaf) for leaf, _, _ in rows[:300]]  # a hub the walk skips
    g._add(rows, mentions)
    for trial in range(40):
        seeds = {f"l{rng.randrange(1200):04d}": rng.random() for _ in range(rng.randint(1, 30))}
        named = {rng.choice(entities): 1.0 for _ in range(rng.randint(0, 2))}
        if trial == 0:
            seeds = {"l0001": 0.0, "l0002": 1.0}  # a seed of weight 0 is not found
        limit = rng.choice([5, 20, 100, 5000])
        expected = _whole_array_walk(g, seeds, named, limit)
        ranked = g.walk(seeds, named, limit)
        assert ranked == [i for i, _ in expected]
    assert graph_mod.LeafGraph().walk({"nobody": 1.0}, {}, 10) == []
