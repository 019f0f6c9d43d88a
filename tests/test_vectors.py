"""The in-memory vector cache: incremental refresh, exact and approximate top-n."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from vaultmem import ann, db, vectors
from vaultmem.search import Filters
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


def recall_at(sims: np.ndarray, got: np.ndarray, n: int) -> float:
    """Share of the ``n`` rows found that are among the exact best ``n``, ties included: the texts repeat,
    and a duplicate of an exact hit is as right as the hit (which of the equal rows a stable sort keeps
    first says nothing about the search)."""
    kth = np.sort(sims)[::-1][n - 1]
    return float(np.sum(sims[got] >= kth - 1e-6)) / n


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
        overlaps.append(recall_at(m @ m[i], cache.top(m[i], 10), 10))
    assert np.mean(overlaps) >= 0.99  # recall@10 against brute force (#22)
    # Among some rows only (leaves, or one source): the same pre-selection, within those rows.
    rows = np.arange(0, 1500, 1, dtype=np.intp)[np.arange(1500) % 5 != 0]
    overlaps = []
    for i in range(1, 1500, 50):
        got = cache.top(m[i], 10, rows)
        assert all(g % 5 != 0 for g in got.tolist())
        sims = np.full(len(m), -np.inf, dtype=np.float32)
        sims[rows] = m[rows] @ m[i]
        overlaps.append(recall_at(sims, got, 10))
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
    assert vault.wait_for_graph(60)  # a graph (when one is due) is built in the background
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
    assert isinstance(cache.matrix.base, np.memmap)  # mapped, not read row by row (a plain view of it)
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
    assert not isinstance(cache.matrix.base, np.memmap) and same_as_index(cache, b)
    a.save_vectors(force=True)
    fa.data.write_bytes(fa.data.read_bytes()[:200])  # torn
    cache = fresh_cache(a)
    assert not isinstance(cache.matrix.base, np.memmap) and same_as_index(cache, a)
    a.close()
    b.close()


def test_reindex_rewrites_the_matrix_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = matrix_vault(tmp_path, monkeypatch)
    before = set(fresh_cache(vault).ids)
    report = vault.reindex()
    assert report.vectors == 40
    cache = fresh_cache(vault)
    assert (
        isinstance(cache.matrix.base, np.memmap) and set(cache.ids) == before and same_as_index(cache, vault)
    )
    vault.close()


# --- the HNSW graph (ann) -------------------------------------------------------------------------------


def graph_of(tmp_path: Path, matrix: np.ndarray) -> ann.Graph:
    """A graph built over ``matrix`` and opened as a new process opens it (mapped from its file). One
    thread: a build over several threads differs from run to run, and so would recall near its bound."""
    files = ann.GraphFile.beside(tmp_path / "vectors-m.npy")
    key = ann.matrix_key("m", matrix.shape[1], "e", 1, [str(i) for i in range(len(matrix))])
    files.data.write_bytes(ann.build(matrix, threads=1))
    files.header.write_bytes(ann.header_bytes(key))
    graph = ann.open_graph(files, key)
    assert graph is not None
    return graph


def recall_at_10(cache: VectorCache, queries: np.ndarray, rows: np.ndarray | None = None) -> float:
    found = []
    for q in queries:
        among = np.arange(len(cache.ids)) if rows is None else rows
        sims = np.asarray(cache.matrix[among] @ q)
        exact = set(among[np.argsort(-sims, kind="stable")[:10]].tolist())
        got = cache.top(q, 10, rows).tolist()
        if rows is not None:
            assert set(got) <= set(rows.tolist())
        found.append(len(exact & set(got)) / 10)
    return float(np.mean(found))


def test_graph_candidates_rescored_have_recall_at_10_of_brute_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recall@10 >= 0.99 against brute force (#22): over all rows, over most rows (leaves only), and with
    rows added and changed since the graph was built (always candidates)."""
    monkeypatch.setattr(vectors, "APPROX_ABOVE", 1000)
    m = clustered(6000, dim=64)
    cache = cache_of(m.copy())
    cache.graph = graph_of(tmp_path, m[:5000])  # the last 1,000 rows came after it
    cache.matrix[:5000:97] = clustered(52, dim=64, seed=9)  # and some of its rows changed since
    cache._moved = set(range(0, 5000, 97))
    rng = np.random.default_rng(11)
    queries = unit(m[rng.choice(6000, 60, replace=False)] + 0.3 * rng.normal(size=(60, 64)))
    queries[:5] = cache.matrix[[0, 97, 5001, 5500, 5999]]  # a changed row and rows the graph never saw
    assert recall_at_10(cache, queries) >= 0.99
    assert [cache.top(q, 1)[0] for q in queries[:5]] == [0, 97, 5001, 5500, 5999]
    leaves = np.flatnonzero(np.arange(6000) % 10 != 0).astype(np.intp)  # 90% of the rows
    assert recall_at_10(cache, queries, leaves) >= 0.99
    # The graph really served them: with a graph that proposes nothing useful, recall collapses.
    cache.graph = graph_of(tmp_path, clustered(5000, dim=64, seed=21))
    cache._moved = set()
    assert recall_at_10(cache, queries[5:]) < 0.9


def test_kind_rows_are_kept_until_the_rows_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind's rows (and the mask the graph's candidates are filtered by) are listed once, not for every
    search, and listed again when rows come; the graph's leaves-only candidates equal the exact answer."""
    monkeypatch.setattr(vectors, "APPROX_ABOVE", 1000)
    m = clustered(3000, dim=64)
    cache = cache_of(m.copy())
    cache.ids = [("s" if i % 10 == 0 else "") + f"{i:015x}" for i in range(3000)]
    cache.pos = {i: n for n, i in enumerate(cache.ids)}
    cache.graph = graph_of(tmp_path, m)
    leaves = cache.kind_rows("leaf")
    assert cache.kind_rows("leaf") is leaves and not leaves.flags.writeable
    np.testing.assert_array_equal(leaves, np.flatnonzero(np.arange(3000) % 10 != 0))
    np.testing.assert_array_equal(cache.kind_rows("summary"), np.arange(0, 3000, 10))
    assert cache.kind_rows("leaf") is not leaves  # the other kind was asked in between: listed again
    np.testing.assert_array_equal(cache.kind_rows("leaf"), leaves)
    q = unit(m[7:8] + 0.1)[0]
    got = cache.top(q, 10, cache.kind_rows("leaf"))
    sims = m @ q
    sims[::10] = -np.inf
    np.testing.assert_array_equal(np.sort(got), np.sort(np.argsort(-sims)[:10]))
    cache.ids.append("0" * 16)  # a new leaf (as ``refresh`` appends one)
    cache.pos[cache.ids[-1]] = 3000
    cache.matrix = np.vstack([cache.matrix, m[:1]])
    assert len(cache.kind_rows("leaf")) == len(leaves) + 1


def test_graph_is_not_used_for_a_narrow_filter_or_when_far_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "APPROX_ABOVE", 1000)
    m = clustered(3000, dim=32)
    cache = cache_of(m)
    cache.graph = graph_of(tmp_path, m)
    one_source = np.arange(0, 3000, 3, dtype=np.intp)  # a third of the rows: exact within them
    assert cache._graph_candidates(m[0], 10, one_source) is None
    assert cache._graph_candidates(m[0], 10, None) is not None
    cache.graph = ann.Graph(cache.graph._index, 2000)  # 1,000 rows (a third) newer than the graph
    assert cache._graph_candidates(m[0], 10, None) is None
    assert all(list(cache.top(q, 10)) == list(cache_of(m).top(q, 10)) for q in m[:20])  # as with no graph


def graph_vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int = 40):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(ann, "GRAPH_MIN", 10)
    return matrix_vault(tmp_path, monkeypatch, n=n)


def test_a_new_process_maps_the_graph_of_the_matrix_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "APPROX_ABOVE", 10)
    vault = graph_vault(tmp_path, monkeypatch)
    files = vectors.MatrixFile.of(vault.layout.state, vault.embedder.model_id)
    assert files.graph.data.is_file() and files.graph.header.is_file()
    cache = fresh_cache(vault)
    assert cache.graph is not None and cache.graph.count == 40 and same_as_index(cache, vault)
    hits = vault.search("note 7", k=3)
    assert hits and "note 7" in hits[0].text
    vault.close()


def test_a_graph_of_another_matrix_or_damaged_is_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers import chat

    vault = graph_vault(tmp_path, monkeypatch)
    files = vectors.MatrixFile.of(vault.layout.state, vault.embedder.model_id)
    old_graph, old_header = files.graph.data.read_bytes(), files.graph.header.read_bytes()
    vault.ingest_messages(chat(10, session="s2", prefix="later note"), source="chat")
    vault.flush()  # 25% more: the matrix file and its graph are rewritten
    assert vault.wait_for_graph(60)
    assert fresh_cache(vault).graph is not None
    files.graph.data.write_bytes(old_graph)  # the graph of the matrix before (a copy, a torn rewrite)
    files.graph.header.write_bytes(old_header)
    cache = fresh_cache(vault)
    assert cache.graph is None and same_as_index(cache, vault)
    assert [p.code for p in vault.check().problems] == ["vector_graph_behind"]
    report = vault.check(fix=True)
    assert [p.code for p in report.fixed] == ["vector_graph_behind"] and vault.check().ok
    assert fresh_cache(vault).graph is not None
    files.graph.data.write_bytes(files.graph.data.read_bytes()[:300])  # damaged, its header current
    assert fresh_cache(vault).graph is None
    assert [p.code for p in vault.check().problems] == ["vector_graph_behind"]
    vault.close()


def test_reindex_rebuilds_the_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = graph_vault(tmp_path, monkeypatch)
    files = vectors.MatrixFile.of(vault.layout.state, vault.embedder.model_id)
    files.graph.data.unlink()
    vault.reindex()
    assert vault.wait_for_graph(60)
    cache = fresh_cache(vault)
    assert cache.graph is not None and same_as_index(cache, vault)
    vault.close()


def test_deleting_a_row_drops_the_graph_until_it_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "APPROX_ABOVE", 10)
    vault = graph_vault(tmp_path, monkeypatch)
    cache = fresh_cache(vault)
    assert cache.graph is not None
    victim = vault.ls()[0]
    (vault.layout.root / victim.path).unlink()
    vault.reconcile_paths([victim.path])
    cache.refresh(vault.conn)
    assert cache.graph is None and victim.id not in cache.pos and same_as_index(cache, vault)
    vault.close()


def _held_builds(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """HNSW builds that say they started, then wait for the release (on one thread: the same graph
    every run)."""
    started, release = threading.Event(), threading.Event()
    real_build = ann.build

    def held_build(matrix: np.ndarray, threads: int | None = None) -> bytes:
        started.set()
        assert release.wait(120)
        return real_build(matrix, 1)

    monkeypatch.setattr(ann, "build", held_build)
    return started, release


def test_the_graph_is_built_in_the_background_and_swapped_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flush`` returns while the HNSW graph is built; search meanwhile scores without it, then takes it
    (the same cache, no reload); the top 10 equals brute force's throughout."""
    monkeypatch.setattr(vectors, "APPROX_ABOVE", 100)
    monkeypatch.setattr(vectors, "RESCORE", 100)  # without the graph: every row scored (brute force)
    monkeypatch.setattr(ann, "GRAPH_MIN", 10)
    started, release = _held_builds(monkeypatch)
    from tests.helpers import chat
    from vaultmem.embed import FakeEmbedder
    from vaultmem.vault import Vault

    monkeypatch.setattr(vectors, "MATRIX_MIN", 10)
    vault = Vault.init(tmp_path / "v", embedder=FakeEmbedder())
    rng = np.random.default_rng(3)
    words = [
        "garden",
        "roses",
        "fence",
        "tomatoes",
        "spring",
        "rain",
        "ferry",
        "kyoto",
        "ramen",
        "budget",
        "invoice",
        "parser",
        "deploy",
    ]
    words += [f"w{i}" for i in range(300)]
    messages = chat(600, prefix="note")
    for m in messages:
        m["content"] = " ".join(rng.choice(words, 9))
    vault.ingest_messages(messages, source="chat")
    vault.flush()  # returns with the build under way (held)
    try:
        _during_and_after(vault, started, release, rng, words)
    finally:
        release.set()
        vault.wait_for_graph(60)
        vault.close()


def _during_and_after(vault, started, release, rng, words) -> None:  # type: ignore[no-untyped-def]
    assert started.wait(60) and not vault.wait_for_graph(0)
    files = vectors.MatrixFile.of(vault.layout.state, vault.embedder.model_id)
    assert not files.graph.header.exists()
    searcher = vault.searcher
    cache = searcher.vectors(vault.embedder)
    assert cache.graph is None and cache.key is not None

    def same_as_brute_force(query: str) -> bool:
        """The top 10's similarities are brute force's (the fake embedder's vectors tie often)."""
        sims = np.asarray(cache.matrix) @ vault.embedder.embed([query])[0]
        found = [cache.pos[i] for i in searcher.semantic(query, Filters(), 10)]
        return bool(np.array_equal(sims[found], -np.sort(-sims)[:10]))

    queries = [" ".join(rng.choice(words, 3)) for _ in range(20)]
    assert all(same_as_brute_force(q) for q in queries)
    assert cache.graph is None
    release.set()
    assert vault.wait_for_graph(60)
    assert files.graph.header.is_file()
    assert searcher.vectors(vault.embedder) is cache and cache.graph is not None  # swapped in, not reloaded
    assert cache.graph.count == 600
    assert all(same_as_brute_force(q) for q in queries)


def test_a_graph_of_other_rows_is_not_adopted(tmp_path: Path) -> None:
    m = clustered(300, dim=32)
    cache = cache_of(m)  # read from the index, not a matrix file: no key
    graph = graph_of(tmp_path, m)
    assert not cache.adopt(graph, {"count": 300}) and cache.graph is None


def test_close_finishes_the_background_build_and_leaves_no_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Vault.close`` joins the HNSW builder: the graph is written and no thread of the vault outlives
    it (a thread left behind stops ``reindex`` from forking its workers in that process)."""

    from tests.helpers import chat
    from vaultmem.embed import FakeEmbedder
    from vaultmem.vault import Vault

    monkeypatch.setattr(ann, "GRAPH_MIN", 10)
    monkeypatch.setattr(vectors, "MATRIX_MIN", 10)
    started, release = _held_builds(monkeypatch)
    embedder = FakeEmbedder()
    vault = Vault.init(tmp_path / "v", embedder=embedder)
    vault.ingest_messages(chat(40, prefix="note"), source="chat")
    vault.flush()  # returns with the build under way (held)
    assert started.wait(60)
    builders = [t for t in threading.enumerate() if t.name == "vaultmem-hnsw"]
    assert len(builders) == 1
    alive_after_close: list[bool] = []

    def close() -> None:
        vault.close()
        alive_after_close.append(builders[0].is_alive())

    closer = threading.Thread(target=close)
    closer.start()
    # Whatever this wait's length, the verdict is the same: the build is held until ``release``, so a
    # close that returned without joining it saw it alive.
    closer.join(2)
    release.set()
    closer.join(120)
    assert alive_after_close == [False]
    assert vectors.MatrixFile.of(vault.layout.state, embedder.model_id).graph.header.is_file()


def test_onnx_runtime_loads_after_the_graph_library() -> None:
    """A process that opened a graph (usearch) and then embeds a batch or opens the query runtime imports
    ONNX Runtime after usearch: that crashed the process (SIGSEGV) until the system C++ runtime was loaded
    before usearch (``ann._usearch_index``). In a new process, as the order matters only there."""
    import subprocess
    import sys

    pytest.importorskip("onnxruntime")
    code = "from vaultmem import ann\nassert ann.available()\nimport onnxruntime\nprint('alive')\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "alive"
