"""Grouping nodes by embedding similarity: the compactor's clustering, pure and deterministic.

Owns how a batch of leaves becomes buckets and how sibling buckets become parents: scikit-learn's
agglomerative clustering (cosine distance, average linkage) with the number of clusters set from a
target size, then caps (leaves and tokens per bucket) and a minimum size enforced afterwards. Batches are
bounded by the caller, so the quadratic cost of agglomerative clustering never grows with the vault.
Never touches files or the index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Caps:
    target: int  # aim for groups of about this many members
    min_size: int  # smaller groups join their nearest neighbour group when it has room
    max_size: int  # never more members than this
    max_tokens: int  # never more tokens than this (a single member over the cap stays alone)


def centroid(vectors: Matrix, weights: Sequence[float] | None = None) -> npt.NDArray[np.float32]:
    """Normalised (weighted) mean direction of ``vectors``."""
    w = np.ones(len(vectors), dtype=np.float32) if weights is None else np.asarray(weights, np.float32)
    mean = (vectors * w[:, None]).sum(axis=0)
    norm = float(np.linalg.norm(mean))
    out: npt.NDArray[np.float32] = (mean / norm if norm > 0 else mean).astype(np.float32)
    return out


def group(vectors: Matrix, tokens: Sequence[int], caps: Caps) -> list[list[int]]:
    """Partition row indices of ``vectors`` (in their given, chronological order) into groups.

    Every index appears in exactly one group; groups and their members keep the input order."""
    n = len(vectors)
    if n == 0:
        return []
    if n == 1:
        return [[0]]
    k = min(n, max(1, math.ceil(n / max(1, caps.target))))
    if k == 1:
        labels = np.zeros(n, dtype=np.int64)
    elif k == n:
        labels = np.arange(n)
    else:
        # Imported here: scikit-learn takes ~0.5 s to import and most commands never cluster.
        from sklearn.cluster import AgglomerativeClustering

        model = AgglomerativeClustering(n_clusters=k, metric="cosine", linkage="average")
        labels = model.fit_predict(_safe(vectors))
    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(int(label), []).append(i)
    split: list[list[int]] = []
    for members in groups.values():
        split.extend(_split_to_caps(members, tokens, caps))
    merged = _merge_small(split, vectors, tokens, caps)
    return sorted((sorted(g) for g in merged), key=lambda g: g[0])


def _safe(vectors: Matrix) -> Matrix:
    # Cosine distance is undefined for a zero vector; nudge such rows so they cluster together.
    norms = np.linalg.norm(vectors, axis=1)
    if np.all(norms > 0):
        return vectors
    fixed = vectors.copy()
    fixed[norms == 0, 0] = 1.0
    return fixed


def _split_to_caps(members: list[int], tokens: Sequence[int], caps: Caps) -> list[list[int]]:
    out: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i in members:
        if current and (len(current) >= caps.max_size or used + tokens[i] > caps.max_tokens):
            out.append(current)
            current, used = [], 0
        current.append(i)
        used += tokens[i]
    if current:
        out.append(current)
    return out


def _merge_small(
    groups: list[list[int]], vectors: Matrix, tokens: Sequence[int], caps: Caps
) -> list[list[int]]:
    groups = [list(g) for g in groups]
    while True:
        small = [g for g in groups if len(g) < caps.min_size]
        if not small or len(groups) == 1:
            return groups
        small.sort(key=lambda g: (len(g), g[0]))
        moved = False
        for g in small:
            if g not in groups:
                continue
            here = centroid(vectors[g])
            best: tuple[float, int] | None = None
            for j, other in enumerate(groups):
                if other is g:
                    continue
                if len(other) + len(g) > caps.max_size:
                    continue
                if sum(tokens[i] for i in other) + sum(tokens[i] for i in g) > caps.max_tokens:
                    continue
                sim = float(centroid(vectors[other]) @ here)
                if best is None or sim > best[0]:
                    best = (sim, j)
            if best is not None:
                groups[best[1]].extend(g)
                groups.remove(g)
                moved = True
                break
        if not moved:
            return groups
