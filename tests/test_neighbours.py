"""Update detection's neighbour search in blocks (``versions.Neighbours``): the same leaves as one
matrix-vector product and one sort per leaf (``versions.nearest_leaves``), near-ties and ties included."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vaultmem import versions
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault
from vaultmem.vectors import VectorCache

TEXTS = json.loads((Path(__file__).parent / "data" / "detect_pairs.json").read_text())["texts"]


def _cache(matrix: np.ndarray, summaries: int = 0) -> VectorCache:
    """A cache over ``matrix``: leaf ids are hex, the first ``summaries`` rows are summaries (``s``)."""
    cache = VectorCache("fake", matrix.shape[1])
    cache.ids = [f"s{i:07x}" if i < summaries else f"{i:012x}" for i in range(len(matrix))]
    cache.pos = {row_id: i for i, row_id in enumerate(cache.ids)}
    cache.matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    cache.seq = 1
    return cache


def _with_repeats(base: np.ndarray, seed: int = 5) -> np.ndarray:
    """``base`` with what a vault holds besides: the same text twice (exact ties) and copies a few
    rounding steps apart (ties too close for a float32 product to call), shuffled."""
    rng = np.random.default_rng(seed)
    again = base[rng.integers(0, len(base), len(base) // 10)]
    near = base[rng.integers(0, len(base), len(base) // 10)]
    near = near + rng.normal(0, 1e-7, near.shape).astype(np.float32)
    matrix = np.vstack([base, again, near]).astype(np.float32)
    return matrix[rng.permutation(len(matrix))]


def _clustered(rows: int = 600, seed: int = 5) -> np.ndarray:
    """Unit vectors shaped as a sentence model's are: a shared direction, topics, and each text's own
    part (cosines mostly 0.2-0.7, dense near the top, unlike a hashing embedder's few exact values)."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=384)
    topics = rng.normal(size=(24, 384))
    own = rng.normal(size=(rows, 384))
    v = 0.5 * shared + topics[rng.integers(0, 24, rows)] + 1.2 * own
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _check(matrix: np.ndarray, summaries: int) -> versions.Neighbours:
    cache = _cache(matrix, summaries)
    leaves = [row_id for row_id in cache.ids if not row_id.startswith("s")]
    n = versions.read_for()
    nearest = versions.Neighbours(cache, leaves, n)
    differ = []
    for row_id in leaves:
        got = nearest(row_id)
        want = versions.nearest_leaves(cache, cache.pos[row_id], n)
        assert got is not None and len(got) == n
        if set(got.tolist()) != set(want.tolist()):
            differ.append(row_id)
        scores = matrix[got] @ matrix[cache.pos[row_id]]
        assert np.all(np.diff(scores) <= 1e-6)  # best first
    assert differ == []
    return nearest


@pytest.mark.parametrize("summaries", [0, 40])
def test_the_blocks_choose_the_leaves_one_product_per_leaf_chooses(summaries: int) -> None:
    nearest = _check(_with_repeats(_clustered()), summaries)
    # Both ways were taken: most rows from the blocks, cuts too close to call by the reference.
    assert 0 < nearest.exact < len(nearest.upcoming) // 4


@pytest.mark.slow
def test_the_blocks_choose_as_the_reference_on_a_sentence_models_vectors() -> None:
    from vaultmem.embed import NumpyBertEmbedder, default_model_path

    texts = [t for t in TEXTS if t.strip()]
    words = [t.split() for t in texts if len(t.split()) > 3]
    texts += [" ".join([*w[:-1], "too"]) for w in words[:150]]  # one word changed: near-ties
    base = NumpyBertEmbedder(default_model_path()).embed(texts)
    nearest = _check(_with_repeats(np.asarray(base, dtype=np.float32)), 30)
    assert 0 < nearest.exact < len(nearest.upcoming) // 2


def test_a_tie_at_the_cut_is_broken_as_the_reference_breaks_it() -> None:
    # Row 0 asks; rows 1..40 are copies of one vector (exact ties), so the cut of 33 falls among them.
    rng = np.random.default_rng(3)
    query = rng.normal(size=384).astype(np.float32)
    query /= np.linalg.norm(query)
    other = rng.normal(size=(200, 384)).astype(np.float32)
    other /= np.linalg.norm(other, axis=1, keepdims=True)
    tied = np.repeat((0.7 * query + 0.3 * other[0])[None, :], 40, axis=0)
    cache = _cache(np.vstack([query[None, :], tied, other]))
    nearest = versions.Neighbours(cache, cache.ids[:5], 33)
    for row_id in cache.ids[:5]:
        want = versions.nearest_leaves(cache, cache.pos[row_id], 33)
        got = nearest(row_id)
        assert got is not None and set(got.tolist()) == set(want.tolist())
    assert nearest.exact == 5  # every cut falls among the copies


def test_a_refreshed_cache_is_scored_again() -> None:
    matrix = _clustered(200)
    cache = _cache(matrix)
    nearest = versions.Neighbours(cache, cache.ids, 33)
    first = nearest(cache.ids[1])
    # A refresh moved one leaf right next to row 1: the block scored before must not answer.
    cache.matrix = cache.matrix.copy()
    cache.matrix[150] = cache.matrix[1]
    cache.seq += 1
    got = nearest(cache.ids[1])
    assert 150 in got.tolist() and set(got.tolist()) == set(versions.nearest_leaves(cache, 1, 33).tolist())
    assert first is not None


def test_a_scan_with_blocks_offers_the_same_candidates(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v", '[embed]\nmodel = "fake"\n', embedder=FakeEmbedder())
    turns = [t for t in TEXTS if 20 < len(t) < 300][:160]
    turns += turns[:20]  # said again later
    vault.ingest_messages(
        [
            {"role": "user", "content": t, "ts": f"2026-03-{1 + i // 24:02d}T{i % 24:02d}:00:00Z"}
            for i, t in enumerate(turns)
        ],
        source="chat",
    )
    vault.flush()
    cache = vault.searcher.vectors(vault.embedder)
    rows = vault.conn.execute(
        "SELECT rowid, id, text, speaker, role, entities, path, provenance FROM chunks WHERE kind = 'leaf'"
    ).fetchall()
    assert len(rows) > 100
    nearest = versions.Neighbours(cache, [r["id"] for r in rows], versions.read_for())
    offered = 0
    for row in rows:
        alone = versions.candidates(vault.conn, cache, row)
        blocked = versions.candidates(vault.conn, cache, row, nearest)
        assert [(o["id"], c, f) for o, c, f in blocked] == [(o["id"], c, f) for o, c, f in alone]
        offered += len(alone)
    assert offered > 0
    vault.close()
