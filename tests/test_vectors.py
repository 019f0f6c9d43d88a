"""The in-memory vector cache: incremental refresh, exact and approximate top-n."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vaultmem import db, vectors
from vaultmem.vectors import VectorCache, VectorRow


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int = 64, seed: int = 3) -> np.ndarray:
    """Vectors around 50 topics, like sentence embeddings of a vault on a few subjects."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(50, dim))
    return unit(centers[rng.integers(0, 50, n)] + 0.6 * rng.normal(size=(n, dim)))


def cache_of(matrix: np.ndarray) -> VectorCache:
    cache = VectorCache("m", matrix.shape[1])
    cache.matrix = matrix
    cache.ids = [str(i) for i in range(len(matrix))]
    cache.pos = {i: n for n, i in enumerate(cache.ids)}
    return cache


def test_exact_top_matches_brute_force() -> None:
    m = clustered(2000)
    q = m[7]
    assert list(cache_of(m).top(q, 10)) == list(np.argsort(-(m @ q), kind="stable")[:10])


@pytest.mark.slow
def test_approximate_top_overlaps_exact_on_real_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sign bits work because real sentence embeddings are structured (6,517 LoCoMo texts: overlap 0.998
    # at 20x re-scoring); isotropic random vectors would not be a fair test of that.
    from vaultmem.embed import load_embedder

    rng = np.random.default_rng(5)
    subjects = [
        "the garden",
        "my sister",
        "the new job",
        "our trip to Lisbon",
        "the bug in the parser",
        "the dentist",
        "a concert",
        "the budget",
        "the puppy",
        "the marathon",
        "grandma's recipe",
    ]
    verbs = ["talked about", "worried about", "finally finished", "planned", "laughed about", "forgot"]
    times = ["yesterday", "last week", "this morning", "in May", "after work", "on Sunday"]
    texts = [
        f"I {rng.choice(verbs)} {rng.choice(subjects)} {rng.choice(times)}, and {rng.choice(subjects)} too."
        for _ in range(1500)
    ]
    m = load_embedder().embed(texts)
    monkeypatch.setattr(vectors, "APPROX_ABOVE", 1000)
    cache = cache_of(m)
    overlaps = []
    for i in range(0, 1500, 50):
        exact = set(np.argsort(-(m @ m[i]), kind="stable")[:10].tolist())
        overlaps.append(len(exact & set(cache.top(m[i], 10).tolist())) / 10)
    assert np.mean(overlaps) >= 0.9


def test_rows_restrict_the_search() -> None:
    m = clustered(500)
    rows = np.arange(0, 500, 2, dtype=np.intp)
    got = cache_of(m).top(m[1], 5, rows)
    assert all(i % 2 == 0 for i in got)


def test_refresh_is_incremental_and_sees_deletes(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "chunks.db")
    vecs = clustered(10, dim=8)
    vectors.upsert(conn, "m", [VectorRow(str(i), "h", vecs[i]) for i in range(5)])
    cache = VectorCache("m", 8)
    cache.refresh(conn)
    assert cache.ids == ["0", "1", "2", "3", "4"]
    vectors.upsert(conn, "m", [VectorRow("5", "h", vecs[5]), VectorRow("0", "h2", vecs[9])])
    cache.refresh(conn)
    assert cache.ids == ["0", "1", "2", "3", "4", "5"] and np.allclose(cache.matrix[0], vecs[9])
    conn.execute("DELETE FROM vectors WHERE id = '2'")
    cache.refresh(conn)
    assert sorted(cache.ids) == ["0", "1", "3", "4", "5"]
    for row_id, n in (("0", 9), ("5", 5), ("3", 3)):
        assert np.allclose(cache.matrix[cache.pos[row_id]], vecs[n])
