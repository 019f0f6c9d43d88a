"""Update detection's neighbour search at scale: one product and sort per leaf against blocks.

    python bench/neighbours.py [--leaves 10000 100000] [--new 256] [--vectors NPZ ...]

For each size, a cache of that many leaf vectors (10% more rows as summaries, which the search skips)
is searched for the 33 closest leaves (``versions.read_for()``) of ``--new`` leaves, as a scan of
new leaves asks: by ``versions.nearest_leaves`` one leaf at a time (a matrix-vector product over every
leaf and a full sort: what every leaf cost before) and by ``versions.Neighbours`` (blocks of leaves
against every leaf by one matrix product, ``argpartition``; near-ties answered by the reference), in
the same process, alternating. Every leaf's chosen set is compared; a row differing fails the bench.

Vectors: ``--vectors`` embedding caches (``.npz`` with a ``vectors`` array, e.g. the ones
``bench/variants.py --embed-cache`` writes: a sentence model's vectors of real chat turns), repeated
with a little noise (then normalised) when more rows are asked than they hold, a tenth of them twice
over exactly (the same text said again); without ``--vectors``, clustered random unit vectors.
Reported: milliseconds per new leaf (median of ``--rounds``), the speed-up, the rows the reference
answered, and what a first run over that many leaves would spend on the search alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).parent))
from _common import table

from vaultmem import versions
from vaultmem.vectors import VectorCache


def vectors(paths: list[Path], rows: int, dim: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """``rows`` unit vectors: from the caches when given (see the module's text), else clustered."""
    if paths:
        base = np.vstack([np.load(p)["vectors"].astype(np.float32) for p in paths])
        dim = base.shape[1]
        take = base[rng.integers(0, len(base), rows)] if rows > len(base) else base[:rows]
        if rows > len(base):
            take[: len(base)] = base
            take[len(base) :] += rng.normal(0, 0.3 / np.sqrt(dim), (rows - len(base), dim)).astype(np.float32)
    else:
        topics = rng.normal(size=(max(8, rows // 200), dim))
        take = 0.5 * rng.normal(size=dim) + topics[rng.integers(0, len(topics), rows)]
        take = (take + 1.2 * rng.normal(size=(rows, dim))).astype(np.float32)
    again = rng.integers(0, rows, rows // 10)
    take[rng.integers(0, rows, rows // 10)] = take[again]
    out = take / np.linalg.norm(take, axis=1, keepdims=True)
    return np.ascontiguousarray(out, dtype=np.float32)


def cache_of(matrix: npt.NDArray[np.float32], summaries: int) -> VectorCache:
    cache = VectorCache("bench", matrix.shape[1])
    cache.ids = [f"s{i:07x}" if i < summaries else f"{i:012x}" for i in range(len(matrix))]
    cache.pos = {row_id: i for i, row_id in enumerate(cache.ids)}
    cache.matrix = matrix
    cache.seq = 1
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--new", type=int, default=256, help="new leaves searched per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vectors", type=Path, nargs="*", default=[])
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    n = versions.read_for()
    rows = []
    for leaves in args.leaves:
        summaries = leaves // 10
        cache = cache_of(vectors(args.vectors, leaves + summaries, 384, rng), summaries)
        leaf_ids = cache.ids[summaries:]
        before: list[float] = []
        after: list[float] = []
        exact: list[int] = []
        differ = 0
        for r in range(args.rounds):
            new = [leaf_ids[i] for i in rng.choice(len(leaf_ids), args.new, replace=False)]
            for which in ("before", "after") if r % 2 == 0 else ("after", "before"):
                t = time.perf_counter()
                if which == "before":
                    one = [versions.nearest_leaves(cache, cache.pos[x], n) for x in new]
                    before.append((time.perf_counter() - t) / len(new))
                else:
                    nearest = versions.Neighbours(cache, new, n)
                    blocked = [nearest(x) for x in new]
                    after.append((time.perf_counter() - t) / len(new))
                    exact.append(nearest.exact)
            differ += sum(
                b is None or set(a.tolist()) != set(b.tolist()) for a, b in zip(one, blocked, strict=True)
            )
        b, a = statistics.median(before) * 1e3, statistics.median(after) * 1e3
        rows.append(
            [
                f"{leaves:,}",
                f"{b:.2f}",
                f"{a:.2f}",
                f"{b / a:.1f}x",
                f"{sum(exact)}/{args.rounds * args.new}",
                f"{b * leaves / 1e3:,.0f} -> {a * leaves / 1e3:,.0f}",
                differ,
            ]
        )
        if differ:
            print(f"{differ} leaves got other neighbours at {leaves:,} leaves", file=sys.stderr)
    source = ", ".join(p.name for p in args.vectors) or "clustered random"
    print(f"\n33 nearest leaves of {args.new} new leaves, median of {args.rounds} rounds; vectors: {source}")
    print(
        table(
            [
                "leaves",
                "per leaf ms: one product each",
                "in blocks",
                "speed-up",
                "answered by the reference",
                "a first run's search s",
                "leaves differing",
            ],
            rows,
        )
    )
    if any(r[-1] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
