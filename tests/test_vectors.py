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
    assert np.mean(overlaps) >= 0.99  # recall@10 against brute force (#22)
    # Among some rows only (leaves, or one source): the same pre-selection, within those rows.
    rows = np.arange(0, 1500, 1, dtype=np.intp)[np.arange(1500) % 5 != 0]
    overlaps = []
    for i in range(1, 1500, 50):
        sims = m[rows] @ m[i]
        exact = set(rows[np.argsort(-sims, kind="stable")[:10]].tolist())
        got = cache.top(m[i], 10, rows).tolist()
        assert all(g % 5 != 0 for g in got)
        overlaps.append(len(exact & set(got)) / 10)
    assert np.mean(overlaps) >= 0.99


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


def test_sequence_numbers_never_repeat(tmp_path: Path) -> None:
    """A deleted last row must not lend its number to the next one: a reader that saw it would miss the
    new row (same count, no row above the number it saw)."""
    conn = db.connect(tmp_path / "chunks.db")
    vecs = clustered(4, dim=8)
    vectors.upsert(conn, "m", [VectorRow(str(i), "h", vecs[i]) for i in range(3)])
    cache = VectorCache("m", 8)
    cache.refresh(conn)
    conn.execute("DELETE FROM vectors WHERE id = '2'")  # the highest seq
    vectors.upsert(conn, "m", [VectorRow("3", "h", vecs[3])])
    cache.refresh(conn)
    assert sorted(cache.ids) == ["0", "1", "3"]
    assert np.allclose(cache.matrix[cache.pos["3"]], vecs[3])


def matrix_vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str = "v", n: int = 40):  # type: ignore[no-untyped-def]
    from tests.helpers import chat
    from vaultmem.embed import FakeEmbedder
    from vaultmem.vault import Vault

    monkeypatch.setattr(vectors, "MATRIX_MIN", 10)
    vault = Vault.init(tmp_path / name, embedder=FakeEmbedder())
    vault.ingest_messages(chat(n, prefix=f"{name} note"), source="chat")
    vault.flush()
    return vault


def fresh_cache(vault) -> VectorCache:  # type: ignore[no-untyped-def]
    """What a new process sees: a new searcher's cache over the same index and state folder."""
    from vaultmem.search import Searcher

    return Searcher(vault.conn, lambda: vault.embedder, state=vault.layout.state).vectors(vault.embedder)


def index_rows(vault) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    return {
        r[0]: np.frombuffer(r[1], dtype="<f4")
        for r in vault.conn.execute("SELECT id, vec FROM vectors WHERE model = ?", (vault.embedder.model_id,))
    }


def same_as_index(cache: VectorCache, vault) -> bool:  # type: ignore[no-untyped-def]
    rows = index_rows(vault)
    return sorted(cache.ids) == sorted(rows) and all(
        np.array_equal(cache.matrix[cache.pos[i]], v) for i, v in rows.items()
    )


def test_matrix_file_is_mapped_by_a_new_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = matrix_vault(tmp_path, monkeypatch)
    files = vectors.MatrixFile.of(vault.layout.state, vault.embedder.model_id)
    assert files.data.is_file() and files.header.is_file()
    cache = fresh_cache(vault)
    assert isinstance(cache.matrix, np.memmap)  # mapped, not read row by row
    assert same_as_index(cache, vault)
    vault.close()


def test_matrix_file_plus_newer_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import chat

    vault = matrix_vault(tmp_path, monkeypatch)
    files = vectors.MatrixFile.of(vault.layout.state, vault.embedder.model_id)
    written = files.header.stat().st_mtime_ns
    monkeypatch.setattr(vectors, "MATRIX_STALE", 0.9)  # the file stays behind: newer rows come from the index
    vault.ingest_messages(chat(3, session="s2", prefix="later note"), source="chat")
    vault.flush()
    assert files.header.stat().st_mtime_ns == written
    cache = fresh_cache(vault)
    assert same_as_index(cache, vault) and len(cache.ids) == 43
    # A deletion: the rows of the file that are gone are not searched.
    victim = vault.ls()[0]
    (vault.layout.root / victim.path).unlink()
    vault.reconcile_paths([victim.path])
    cache = fresh_cache(vault)
    assert victim.id not in cache.pos and same_as_index(cache, vault)
    vault.close()


def test_matrix_file_is_rewritten_when_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import chat

    vault = matrix_vault(tmp_path, monkeypatch)
    vault.ingest_messages(chat(10, session="s2", prefix="later note"), source="chat")  # 25% more
    vault.flush()
    files = vectors.MatrixFile.of(vault.layout.state, vault.embedder.model_id)
    header = files.header.read_text(encoding="utf-8")
    assert '"count": 50' in header
    vault.close()


def test_matrix_file_of_another_index_or_damaged_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = matrix_vault(tmp_path, monkeypatch, "a")
    b = matrix_vault(tmp_path, monkeypatch, "b")
    fa = vectors.MatrixFile.of(a.layout.state, a.embedder.model_id)
    fb = vectors.MatrixFile.of(b.layout.state, b.embedder.model_id)
    fb.data.write_bytes(fa.data.read_bytes())  # b's folder now holds a's vectors (a copied file)
    fb.header.write_bytes(fa.header.read_bytes())
    cache = fresh_cache(b)
    assert not isinstance(cache.matrix, np.memmap) and same_as_index(cache, b)
    a.save_vectors(force=True)
    fa.data.write_bytes(fa.data.read_bytes()[:200])  # torn
    cache = fresh_cache(a)
    assert not isinstance(cache.matrix, np.memmap) and same_as_index(cache, a)
    a.close()
    b.close()


def test_reindex_rewrites_the_matrix_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = matrix_vault(tmp_path, monkeypatch)
    before = set(fresh_cache(vault).ids)
    report = vault.reindex()
    assert report.vectors == 40
    cache = fresh_cache(vault)
    assert isinstance(cache.matrix, np.memmap) and set(cache.ids) == before and same_as_index(cache, vault)
    vault.close()
