"""Grouping nodes by embedding similarity: the compactor's clustering, pure and deterministic.

Owns how a batch of leaves becomes buckets and how sibling buckets become parents: scikit-learn's
agglomerative clustering (cosine distance, average linkage) with the number of clusters set from a
target size, then caps (leaves and tokens per bucket) and a minimum size enforced afterwards.

Given episodes (a conversation, a sitting), a group is one subject of one time span: an episode at least
a level's target size long is clustered on its own, and within it two clusters are not joined when they
are not clearly more alike than two members of the batch are anyway (the batch's own background: mean
pair cosine plus half a standard deviation, so the bar follows the embedder and the corpus); shorter
episodes are pooled and grouped by meaning; a group under the minimum size joins the closest group of its
own episode unless another is clearly closer in meaning (by ``EPISODE_BONUS``; half that for the episode
just before or after it). Batches are bounded by the caller, so the quadratic cost of agglomerative
clustering never grows with the vault.
Never touches files or the index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
EPISODE_BONUS = 0.2  # cosine a small group's own episode is worth when it joins another group


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


def group(
    vectors: Matrix,
    tokens: Sequence[int],
    caps: Caps,
    episodes: Sequence[int] | None = None,
    *,
    apart: bool = False,
    little: Sequence[bool] | None = None,
) -> list[list[int]]:
    """Partition row indices of ``vectors`` (in their given, chronological order) into groups.

    ``episodes`` (one number per row) keeps groups within an episode where the episode is large enough
    for a group of its own; with ``apart`` (a chat's sessions) every episode is, however short: a short
    one is most often a session cut by the batch's edge, whose rest is or will be in a level of its own.
    ``little`` (one flag per row, with ``apart``) marks rows that say little (greetings, "yes"): a small
    group of only those joins by episode, not by meaning (``_merge_small``).
    Every index appears in exactly one group; groups and their members keep the input order."""
    n = len(vectors)
    if n == 0:
        return []
    if n == 1:
        return [[0]]
    if episodes is None:
        parts = [list(range(n))]
    else:
        by_episode: dict[int, list[int]] = {}
        for i, e in enumerate(episodes):
            by_episode.setdefault(e, []).append(i)
        # An episode shorter than a level's target size is no level of its own: such episodes are
        # pooled and grouped by meaning.
        parts = [m for m in by_episode.values() if apart or len(m) >= caps.target]
        pooled = [i for m in by_episode.values() if not apart and len(m) < caps.target for i in m]
        if pooled:
            parts.append(sorted(pooled))
    bar = background(vectors) if episodes is not None else None
    split: list[list[int]] = []
    for members in parts:
        for g in _agglomerate(vectors, members, caps.target, bar):
            split.extend(_split_to_caps(g, tokens, caps))
    home = list(episodes) if episodes is not None else [0] * n
    by_time = little if apart and episodes is not None and little is not None else None
    merged = _merge_small(split, vectors, tokens, caps, home, by_time)
    return sorted((sorted(g) for g in merged), key=lambda g: g[0])


def background(vectors: Matrix) -> float:
    """How alike two members of this batch are anyway: the mean cosine of two different rows plus half a
    standard deviation (a pair above it is clearly more alike than chance; the scale follows the
    embedder). From the rows' sum and Gram matrix, so O(n d^2), never an n x n matrix."""
    n = len(vectors)
    if n < 2:
        return 1.0
    unit = (vectors / np.maximum(np.linalg.norm(vectors, axis=1), 1e-12)[:, None]).astype(np.float64)
    diagonal = float((unit * unit).sum())  # n, less rows that are all zero
    total = unit.sum(axis=0)
    pairs = n * (n - 1)
    mean = (float(total @ total) - diagonal) / pairs
    gram = unit.T @ unit
    squares = (float((gram * gram).sum()) - float(((unit * unit).sum(axis=1) ** 2).sum())) / pairs
    return mean + 0.5 * math.sqrt(max(0.0, squares - mean * mean))


def _agglomerate(vectors: Matrix, members: list[int], target: int, bar: float | None) -> list[list[int]]:
    """At least ``ceil(n / target)`` clusters; with ``bar``, more where clusters are less alike than it."""
    n = len(members)
    k = min(n, max(1, math.ceil(n / max(1, target))))
    if k == n:
        return [[i] for i in members]
    if k == 1 and (bar is None or n == 1):
        return [members]
    # Imported here: scikit-learn takes ~0.5 s to import and most commands never cluster.
    from sklearn.cluster import AgglomerativeClustering

    rows = _safe(vectors[members])
    labels = None
    if bar is not None:
        cut = AgglomerativeClustering(
            n_clusters=None, metric="cosine", linkage="average", distance_threshold=max(1e-6, 1.0 - bar)
        ).fit_predict(rows)
        if int(cut.max()) + 1 >= k:
            labels = cut
    if labels is None:
        labels = AgglomerativeClustering(n_clusters=k, metric="cosine", linkage="average").fit_predict(rows)
    groups: dict[int, list[int]] = {}
    for i, label in zip(members, labels, strict=True):
        groups.setdefault(int(label), []).append(i)
    return list(groups.values())


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
    groups: list[list[int]],
    vectors: Matrix,
    tokens: Sequence[int],
    caps: Caps,
    episodes: Sequence[int],
    little: Sequence[bool] | None = None,
) -> list[list[int]]:
    """Join each group smaller than ``caps.min_size`` to another with room: the closest in meaning, its
    own episode worth ``EPISODE_BONUS`` (half for the episode before or after). A small group of rows
    that say little (``little``: a chat's greetings, "yes", "thanks") goes by time instead: a group of its
    own episode, else of the nearest episode, the closest in meaning among those. By meaning, the
    greetings of two days' chats joined each other: they are closer to each other than to anything
    either conversation was about (LongMemEval: "hi", "How can I assist you today?" and another day's
    "yes" made a level)."""
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
            mine = {episodes[i] for i in g}
            by_time = little is not None and all(little[i] for i in g)
            best: tuple[float, float, int] | None = None
            for j, other in enumerate(groups):
                if other is g:
                    continue
                if len(other) + len(g) > caps.max_size:
                    continue
                if sum(tokens[i] for i in other) + sum(tokens[i] for i in g) > caps.max_tokens:
                    continue
                # The closest in meaning, with a bonus for its own episode and a smaller one for the
                # episode just before or after it (a conversation goes on where it left off): within
                # one chat every group is about as close as any other, and the episode decides.
                near = {episodes[i] for i in other}
                cosine = float(centroid(vectors[other]) @ here)
                if near & mine:
                    cosine += EPISODE_BONUS
                elif any(abs(a - b) == 1 for a in near for b in mine):
                    cosine += EPISODE_BONUS / 2
                apart = float(min(abs(a - b) for a in near for b in mine)) if by_time else 0.0
                if best is None or (-apart, cosine) > best[:2]:
                    best = (-apart, cosine, j)
            if best is not None:
                groups[best[2]].extend(g)
                groups.remove(g)
                moved = True
                break
        if not moved:
            return groups
