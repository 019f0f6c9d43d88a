"""Hybrid search: lexical and semantic each win once, CJK, filters, bad queries, context budget."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import chat, make_vault, topic_of, topic_records
from vaultmem import Vault
from vaultmem.context import assemble
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import InvalidInput, ModelError
from vaultmem.search import Filters, Hit
from vaultmem.tokens import count_tokens

DOCS = [
    (
        "a",
        "Ana",
        "The invoice number INV-20931 for the plumbing repair is still unpaid.",
        "2024-01-05T10:00:00Z",
        "s1",
    ),
    (
        "b",
        "Ben",
        "We adopted a small grey kitten from the shelter and named her Miso.",
        "2024-02-10T10:00:00Z",
        "s1",
    ),
    (
        "c",
        "Ana",
        "My favourite pasta dish is cacio e pepe with plenty of black pepper.",
        "2024-03-15T10:00:00Z",
        "s2",
    ),
    ("d", "Ben", "雾凇拼音是一个很好用的 Rime 输入法配置，我昨天装好了。", "2024-04-01T10:00:00Z", "s2"),
    ("e", "Cy", "日本語の入力メソッドを設定しました。とても便利です。", "2024-04-02T10:00:00Z", "s3"),
]


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    v = Vault.init(tmp_path / "v", embedder=FakeEmbedder())
    v.ingest_messages(
        [{"id": i, "speaker": who, "content": text, "ts": ts, "session": s} for i, who, text, ts, s in DOCS],
        source="home",
    )
    v.ingest_messages(chat(3, source="work", session="w1"))
    v.flush()
    return v


def ids(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.message_ids[0] for h in hits]


def test_lexical_wins_on_an_exact_code(vault: Vault) -> None:
    hits = vault.search("INV-20931", k=3)
    assert ids(hits)[0] == "a"
    assert hits[0].lexical_rank == 1


def test_semantic_wins_without_shared_words(vault: Vault) -> None:
    # The fake embedder hashes words, so this query shares tokens only through its vector features.
    hits = vault.search("kitten shelter adopted", k=3)
    assert ids(hits)[0] == "b"
    only_vec = vault.searcher.semantic("grey kitten", Filters(), 5)
    assert only_vec and vault.get(only_vec[0]).message_ids == ("b",)


def test_cjk_query_without_spaces(vault: Vault) -> None:
    assert ids(vault.search("雾凇拼音", k=3))[0] == "d"
    assert ids(vault.search("入力メソッド", k=3))[0] == "e"
    assert "d" in ids(vault.search("输入", k=5))  # two characters: below trigram length


def test_hits_carry_provenance(vault: Vault) -> None:
    hit = vault.search("cacio e pepe", k=1)[0]
    assert hit.kind == "leaf" and hit.path.startswith("sources/home/_fresh/")
    assert hit.provenance["message_ids"] == ["c"] and hit.provenance["session"] == "s2"
    assert hit.ts == "2024-03-15T10:00:00Z" and hit.speaker == "Ana"


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"source": "work"}, None),  # None: every hit from that source
        ({"session": "s2"}, {"c", "d"}),
        ({"since": "2024-03-01", "source": "home"}, {"c", "d", "e"}),
        ({"until": "2024-02-28T23:59:59Z", "source": "home"}, {"a", "b"}),
        ({"kind": "summary"}, set()),
        ({"status": "admitted", "source": "home"}, {"a", "b", "c", "d", "e"}),
    ],
)
def test_filters(vault: Vault, filters: dict[str, str], expected: set[str] | None) -> None:
    hits = vault.search("the a is 我 of pepper kitten invoice garden 入力", k=20, **filters)
    got = set(ids(hits))
    if expected is None:
        assert got and all(h.source == "work" for h in hits)
    else:
        assert got <= expected and (got or not expected)
        if expected:
            assert got == expected


@pytest.mark.parametrize(
    "query", ['"unbalanced', "pepper*", "NEAR(a b)", "-minus", "col:on", "AND OR NOT", "()"]
)
def test_fts_syntax_typed_by_a_user_is_harmless(vault: Vault, query: str) -> None:
    vault.search(query, k=5)  # must not raise


def test_empty_query_is_a_clear_error(vault: Vault) -> None:
    with pytest.raises(InvalidInput, match="empty"):
        vault.search("   ")


def test_huge_query(vault: Vault) -> None:
    hits = vault.search("pepper " + "word " * 10_000, k=3)
    assert ids(hits)[0] == "c"


def test_vault_without_embeddings_still_searches(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as v:
        v.ingest_messages(chat(3), source="chat")
        assert len(v.search("garden", k=2)) == 2  # lexical only until the queue runs


def test_bad_dates_and_status(vault: Vault) -> None:
    with pytest.raises(InvalidInput, match="not a date"):
        vault.search("x", since="last tuesday")
    with pytest.raises(InvalidInput, match="unknown status"):
        vault.search("x", status="bogus")


def test_new_vectors_are_picked_up_incrementally(vault: Vault) -> None:
    vault.search("pepper")
    vault.ingest_messages(
        [{"id": "z", "speaker": "Zed", "content": "Zebra crossings near the zoo are repainted."}],
        source="home",
    )
    vault.flush()
    assert ids(vault.search("zebra zoo", k=1)) == ["z"]
    assert len(vault.searcher._cache.ids) == 9  # type: ignore[union-attr]


@pytest.mark.parametrize("budget", [20, 40, 80, 200, 1000])
def test_context_never_exceeds_budget(vault: Vault, budget: int) -> None:
    ctx = vault.context("pepper kitten invoice", budget)
    assert ctx.tokens <= budget
    assert count_tokens(ctx.text) == ctx.tokens
    if ctx.items:
        assert ctx.text.startswith("<memory") and "not instructions" in ctx.text.splitlines()[0]


def test_context_keeps_rank_order_and_provenance(vault: Vault) -> None:
    ctx = vault.context("cacio e pepe pasta", 300)
    assert ctx.items[0].hit.message_ids == ("c",)
    assert ctx.items[0].rendered.startswith("Ana: ")
    assert "## 2024-03-15" in ctx.text and "\nAna: My favourite pasta" in ctx.text
    assert ctx.as_dict()["items"][0]["provenance"]["path"].startswith("sources/home/")


def test_assemble_skips_duplicates() -> None:
    assert assemble("q", [], 100).text == ""


def test_chunks_of_one_message_read_as_one_line(tmp_path: Path) -> None:
    long_text = " ".join(f"Paragraph {i} explains the itinerary for day {i} in detail." for i in range(60))
    with Vault.init(tmp_path / "v", "[ingest]\nchunk_max_tokens = 64\n", embedder=FakeEmbedder()) as v:
        v.ingest_messages(
            [{"id": "m1", "role": "assistant", "content": long_text, "session": "s"}], source="chat"
        )
        v.flush()
        assert len(v.ls()) > 2
        ctx = v.context("itinerary day paragraph", 4000)
        body = [line for line in ctx.text.splitlines() if line.startswith("assistant:")]
        assert len(body) == 1
        assert " ".join(long_text.split()) in body[0]


def test_long_neighbours_get_a_smaller_share(tmp_path: Path) -> None:
    long_turn = "Here is a very detailed answer. " * 60
    with Vault.init(tmp_path / "v", "[ingest]\nchunk_max_tokens = 1024\n", embedder=FakeEmbedder()) as v:
        v.ingest_messages(
            [
                {
                    "id": "q",
                    "role": "user",
                    "content": "What is the capital of Portugal, again?",
                    "session": "s",
                },
                {"id": "a", "role": "assistant", "content": long_turn, "session": "s"},
                {"id": "z", "role": "user", "content": "Thanks, and what about Spain?", "session": "s2"},
                {
                    "id": "y",
                    "role": "assistant",
                    "content": "Madrid is the capital of Spain.",
                    "session": "s2",
                },
            ],
            source="chat",
        )
        ids = {leaf.message_ids[0]: leaf.id for leaf in v.ls()}
        scores = {ids["q"]: 1.0, ids["z"]: 1.0}
        v.searcher._spread_to_neighbors(scores, Filters())
        short_bonus = scores[ids["y"]]
        long_bonus = scores[ids["a"]]
        assert short_bonus == pytest.approx(0.45)
        assert 0 < long_bonus < short_bonus / 3


class CountingEmbedder(FakeEmbedder):
    """The fake embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.texts.extend(texts)
        return super().embed(texts)


def test_recent_query_vectors_are_remembered_least_recently_used_first() -> None:
    from vaultmem.search import QueryVectors

    embedder = CountingEmbedder()
    cache = QueryVectors(size=2)
    first = cache.get(embedder, "kyoto budget")
    assert cache.get(embedder, "kyoto budget") is first  # no second forward pass
    cache.get(embedder, "dentist")
    cache.get(embedder, "kyoto budget")  # used again: now the most recent
    cache.get(embedder, "espresso")  # evicts "dentist", the least recently used
    cache.get(embedder, "kyoto budget")
    cache.get(embedder, "dentist")
    assert embedder.texts == ["kyoto budget", "dentist", "espresso", "dentist"]
    assert (first == embedder.embed(["kyoto budget"])[0]).all()  # exactly the embedder's vector
    assert not first.flags.writeable  # shared between searches: never changed in place


def test_query_vectors_are_shared_between_vaults(tmp_path: Path) -> None:
    from vaultmem.search import QUERY_VECTORS

    QUERY_VECTORS.clear()
    embedder = CountingEmbedder()
    asked: list[list[str]] = []
    for name in ("a", "b"):
        v = Vault.init(tmp_path / name, embedder=embedder)
        v.ingest_messages(chat(3), source="chat")
        v.flush()
        embedder.texts.clear()
        v.search("roses near the fence", k=3)
        v.context("roses near the fence", 200)
        asked.append(list(embedder.texts))
        v.close()
    # One forward pass in all: context after search, and the second vault, reuse the first vector.
    assert asked == [["roses near the fence"], []]


class QueryRuntimeEmbedder(CountingEmbedder):
    """Embeds queries by ``embed_query`` (as the NumPy embedder does) and counts runtime starts."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0
        self.queries: list[str] = []

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return self.embed([text])[0]

    def start_query_runtime(self) -> bool:
        self.started += 1
        return True


def test_a_search_starts_the_query_runtime_unless_the_process_is_one_shot(tmp_path: Path) -> None:
    """After a search or context the embedder may open its faster query runtime in the background (the
    process will likely search again); queries go through ``embed_query``. The CLI's vaults do not."""
    from vaultmem.cli import open_vault
    from vaultmem.search import QUERY_VECTORS

    QUERY_VECTORS.clear()
    embedder = QueryRuntimeEmbedder()
    v = Vault.init(tmp_path / "v", embedder=embedder)
    v.ingest_messages(chat(3), source="chat")
    v.flush()
    assert embedder.started == 0
    v.search("roses near the fence", k=3)
    assert embedder.started == 1 and embedder.queries == ["roses near the fence"]
    v.context("kitten shelter", 200)
    assert embedder.started == 2  # a no-op once started (the embedder's business)
    v.warm_queries = False
    v.search("the hedge by the gate", k=3)
    assert embedder.started == 2
    v.close()
    cli_vault = open_vault(tmp_path / "v")
    assert cli_vault.warm_queries is False
    cli_vault.close()


class WaitingEmbedder(CountingEmbedder):
    """Once ``armed``, each query's embedding waits (up to a timeout) for the word search to begin
    (``reading``, set by ``Searcher.lexical``) and notes its thread and whether it had begun; with
    ``failing``, it raises instead."""

    queries_off_thread = True  # as the NumPy embedder says once ONNX Runtime runs its queries

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.failing = False
        self.reading = threading.Event()
        self.seen: list[tuple[str, bool, bool]] = []  # (text, on the main thread, word search begun)

    def embed(self, texts):  # type: ignore[no-untyped-def]
        if self.failing:
            raise ModelError("the model is gone")
        if self.armed:
            begun = self.reading.wait(timeout=10)
            on_main = threading.current_thread() is threading.main_thread()
            self.seen.extend((t, on_main, begun) for t in texts)
        return super().embed(texts)


def test_a_new_querys_vectors_are_embedded_while_the_word_indexes_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query not embedded yet is embedded on a thread of its own while the words are searched
    (``VectorsAhead``): here each forward pass waits for the word search to begin, which it could not
    if they ran one after the other. Both texts the vector side asks for go ahead: the query's and,
    when it names a speaker, the one without the name. The hits are those of a search that embeds
    after the word search in its own thread (``overlap`` off), to the last bit of every score."""
    from vaultmem.search import QUERY_VECTORS, Searcher

    embedder = WaitingEmbedder()
    v = Vault.init(tmp_path / "v", embedder=embedder)
    v.ingest_messages(
        [{"id": i, "speaker": who, "content": text, "ts": ts, "session": s} for i, who, text, ts, s in DOCS],
        source="home",
    )
    v.flush()
    lexical = Searcher.lexical

    def reading(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        embedder.reading.set()
        return lexical(self, *args, **kwargs)

    monkeypatch.setattr(Searcher, "lexical", reading)
    queries = ["what did Ana say about pasta", "a kitten from the shelter", "雾凇拼音"]

    def found(query: str) -> list[tuple[str, float, float | None, float | None]]:
        QUERY_VECTORS.clear()
        embedder.reading.clear()
        return [(h.id, h.score, h.cosine, h.coverage) for h in v.search(query, k=5)]

    v.searcher.overlap = False
    after = [found(q) for q in queries]
    v.searcher.overlap = True
    embedder.armed = True
    ahead = [found(q) for q in queries]
    embedder.armed = False
    assert ahead == after and all(after)
    assert sorted(t for t, _, _ in embedder.seen) == sorted([*queries, "what did say about pasta"])
    assert all(not on_main and begun for _, on_main, begun in embedder.seen)
    # Remembered vectors are not embedded again, ahead or not.
    embedder.armed = True
    embedder.seen.clear()
    v.search(queries[-1], k=5)  # the last one found: its vector is remembered
    assert embedder.seen == []
    # An error embedding ahead is the search's error, raised in the searching thread.
    embedder.failing = True
    QUERY_VECTORS.clear()
    with pytest.raises(ModelError, match="the model is gone"):
        v.search(queries[1], k=5)
    # An embedder that does not say its queries may run elsewhere embeds them in the searching thread.
    embedder.failing = False
    embedder.queries_off_thread = False  # type: ignore[misc]
    embedder.seen.clear()
    assert found(queries[1]) == after[1]
    assert embedder.seen == [(queries[1], True, True)]
    v.close()


def test_vectors_written_by_another_connection_are_seen(vault: Vault) -> None:
    """The vector cache skips its refresh while nothing was written; a write by another process (here a
    second connection deleting a vector) is seen on the next search."""
    import sqlite3

    first = vault.search("kitten shelter", k=3)
    cache = vault.searcher._cache
    assert cache is not None and first[0].cosine is not None
    other = sqlite3.connect(vault.layout.db)
    with other:
        other.execute("DELETE FROM vectors WHERE id = ?", (first[0].id,))
    other.close()
    vault.search("kitten shelter", k=3)
    assert first[0].id not in cache.pos
    again = vault.search("kitten shelter", k=10)  # feedback may move it below 3
    assert next(h for h in again if h.id == first[0].id).cosine is None


def test_word_counts_follow_a_changed_text(vault: Vault) -> None:
    """The df of a query word is remembered only until the index is written: a leaf whose text changes
    (same rows, so the session-order counter does not move) changes the word's weight at once."""
    before = {h.id: h.coverage for h in vault.search("kitten pasta", k=8)}
    vault.conn.execute("UPDATE chunks SET text = text || ' kitten' WHERE text LIKE '%pasta%'")
    vault.conn.commit()
    after = {h.id: h.coverage for h in vault.search("kitten pasta", k=8)}
    kitten = next(i for i, t in vault.conn.execute("SELECT id, text FROM chunks") if "kitten from" in t)
    # kitten is now on two leaves: a smaller share of what the query is about than pasta's
    assert before[kitten] == pytest.approx(0.5) and 0 < after[kitten] < 0.5


def test_word_holders_are_the_word_indexes_own_answer(vault: Vault) -> None:
    """Which hits hold a word is told by tokenizing their texts as the word index does (a private
    in-memory table): the same answer as matching the word against each hit's row in the index, a
    stemmed form ("kittens", "repairs"), a speaker's name (leaves are indexed as "speaker: text") and a
    topic or digest node (its own index) included."""
    vault.compact()  # digest nodes: the nav word index
    words = ["kittens", "ana", "repairs", "invoice", "message", "pepper"]
    hits = vault.searcher.find(" ".join(words), k=30)
    assert any(h.path.startswith("global/") for h in hits)
    bodies = {}
    expected: dict[str, set[int]] = {w: set() for w in words}
    for h in hits:
        rowid = vault.conn.execute("SELECT rowid FROM chunks WHERE id = ?", [h.id]).fetchone()[0]
        bodies[rowid] = (
            h.text
            if h.path.startswith(("topics/", "global/")) or h.speaker is None
            else f"{h.speaker}: {h.text}"
        )
        for w in words:
            for table in ("fts_words", "fts_nav_words"):
                sql = f"SELECT 1 FROM {table} WHERE {table} MATCH ? AND rowid = ?"
                if vault.conn.execute(sql, [f'"{w}"', rowid]).fetchone():
                    expected[w].add(rowid)
    _, holders = vault.searcher._term_evidence(words, bodies)
    assert holders == expected
    assert all(expected[w] for w in words)  # each word is on some hit: the comparison means something
    assert expected["kittens"] != set(bodies) and expected["ana"] != set(bodies)


def test_a_narrow_filter_ranks_as_the_join_does(vault: Vault) -> None:
    """With a source filter the word index picks the source's rows first; the order is the one the plain
    join gives (every match joined, then filtered and sorted)."""
    searcher = vault.searcher
    where, params = Filters(source="work").sql()
    found = []
    for match in ('"pepper" OR "kitten" OR "invoice"', '"garden" OR "roses" OR "message"', '"zzz"'):
        joined = [
            r[0]
            for r in vault.conn.execute(
                "SELECT c.id FROM fts_words f JOIN chunks c ON c.rowid = f.rowid"
                f" WHERE fts_words MATCH ? AND {where} ORDER BY bm25(fts_words) LIMIT 5",
                [match, *params],
            )
        ]
        assert searcher._fts("fts_words", match, where, params, 5, narrow=True) == joined
        assert searcher._fts("fts_words", match, where, params, 5) == joined
        found.append(joined)
    assert found[0] == [] and len(found[1]) == 3 and found[2] == []


def test_a_filter_sees_leaves_ingested_after_it_was_used(vault: Vault) -> None:
    """The vector rows of a filter are remembered between searches, and listed again once rows came."""
    vault.search("kitten", k=3, source="home")
    vault.ingest_messages(
        [{"id": "y", "speaker": "Yan", "content": "Yellow kayaks drift on the lake at dawn."}], source="home"
    )
    vault.flush()
    hits = vault.search("yellow kayaks lake", k=3, source="home")
    assert hits[0].message_ids == ("y",) and hits[0].vector_rank == 1


def test_only_texts_with_cjk_are_trigram_indexed(vault: Vault) -> None:
    """The trigram index is read only for CJK runs, so it holds only texts that have CJK characters
    (the SQL test ``db.HAS_CJK`` agrees with the query side's ``_CJK_RE`` on every character)."""
    import re

    from vaultmem import db, search

    indexed = {r[0] for r in vault.conn.execute("SELECT rowid FROM fts_trigram")}
    cjk = {r[0] for r in vault.conn.execute("SELECT rowid, text FROM chunks") if search._CJK_RE.search(r[1])}
    assert indexed == cjk and len(cjk) == 2
    assert ids(vault.search("雾凇拼音", k=1)) == ["d"]
    vault.conn.execute("UPDATE chunks SET text = text || ' 好' WHERE text LIKE '%pasta%'")
    assert len({r[0] for r in vault.conn.execute("SELECT rowid FROM fts_trigram")}) == 3
    class_re = re.compile(search._CJK_RE.pattern.rstrip("+"))
    chars = [chr(c) for c in [*range(0x20, 0xD800), *range(0xE000, 0x10000), 0x1F600, 0x20000]]
    glob = db.CJK_GLOB
    found = [bool(vault.conn.execute("SELECT ? GLOB ?", (f"a{ch}b", glob)).fetchone()[0]) for ch in chars]
    assert found == [class_re.search(ch) is not None for ch in chars]


def _quotes_only(vault: Vault, hit: Hit) -> bool:
    """Every line of the summary is a sentence of a leaf under it (bullet and "Speaker: " aside; shown with
    a capital and without closing punctuation, as the summariser may show it)."""
    folder = hit.path.rsplit("/", 1)[0] + "/"
    leaves = [" ".join(x.text.split()).casefold() for x in vault.ls() if x.path.startswith(folder)]
    lines = [re.sub(r"^-\s+(?:[A-Z][\w .'-]{0,39}:\s+)?", "", x).strip() for x in hit.text.splitlines()]
    said = [" ".join(line.split()).casefold().rstrip(" .!?…") for line in lines if line]
    return all(any(line in leaf for leaf in leaves) for line in said)


def test_a_summary_that_only_quotes_its_leaves_is_listed_as_the_leaf_a_hand_edited_one_stays(
    tmp_path: Path,
) -> None:
    """Small levels' extractive summaries are their leaves' own sentences: search lists the quoted leaf
    (with its message ids) in the summary's place, context assembly may still use the summary, and a
    summary a person wrote into stays a summary hit."""
    with make_vault(tmp_path / "v", fanout=4) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        vault.compact()
        query = "kyoto ryokan shinkansen temple"
        ranked = vault.searcher.find(query, 10)  # the ranking as context assembly sees it
        quoting = [h for h in ranked if h.kind == "summary" and _quotes_only(vault, h)]
        assert quoting, "the ranking should hold a summary made of its leaves' sentences"
        hits = vault.search(query, k=10)
        assert len(hits) == 10 and len({h.id for h in hits}) == 10
        assert not {h.id for h in quoting} & {h.id for h in hits}
        assert all(h.message_ids for h in hits if h.kind == "leaf")
        for s in quoting:  # each stands for one of its own leaves
            folder = s.path.rsplit("/", 1)[0] + "/"
            assert any(h.kind == "leaf" and h.path.startswith(folder) for h in hits), s.path
        assert topic_of(hits[0].text) == "japan"
        asked = vault.search(query, k=10, kind="summary")  # summaries asked for are never swapped
        assert quoting[0].id in {h.id for h in asked} and all(h.kind == "summary" for h in asked)
        # A person's words in the summary: it says something no leaf does, and stays a summary hit.
        path = vault.layout.root / quoting[0].path
        text = path.read_text()
        body = quoting[0].text.strip()
        path.write_text(
            text.replace(body, "Our Kyoto ryokan and temple plans, by the shinkansen.\n" + body, 1)
        )
        vault.compact()
        again = vault.search(query, k=10)
        assert quoting[0].id in {h.id for h in again}


def test_a_word_on_half_the_rows_is_not_scored_in_a_large_vault(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From ``PRUNE_ABOVE`` rows, a query word on half the rows or more (FTS5's idf: zero) is left out of
    BM25 when a rarer one remains: the rows holding the rarer word keep their order, and rows holding
    only the common word (last, at a score of ~1e-6) are no longer listed."""
    from vaultmem import search

    vault.ingest_messages(chat(6, source="work", session="w2", prefix="Kitten note"))
    vault.flush()  # "garden" is now on 9 of 14 rows, "kitten" on 7, "pepper" on 1
    searcher = vault.searcher
    full = searcher.lexical("pepper garden", Filters(), 20)["words"]
    assert searcher._scored_words(["pepper", "garden"]) == ["pepper", "garden"]  # a small vault: all
    monkeypatch.setattr(search, "PRUNE_ABOVE", 1)
    assert searcher._scored_words(["pepper", "garden"]) == ["pepper"]
    assert searcher._scored_words(["kitten", "garden", "pepper"]) == ["pepper"]  # kitten: 7 of 14, half
    assert searcher._scored_words(["kitten", "garden"]) == ["kitten", "garden"]  # nothing rarer: kept
    pruned = searcher.lexical("pepper garden", Filters(), 20)["words"]
    pepper = {r[0] for r in vault.conn.execute("SELECT id FROM chunks WHERE text LIKE '%pepper%'")}
    assert len(full) == 10 and pruned == [i for i in full if i in pepper] and len(pruned) == 1


def test_a_searchs_bookkeeping_leaves_what_searches_remember_in_place(vault: Vault) -> None:
    """A query naming an entity records its heat (an index write), but what searches remember against the
    index's write stamp (word counts, the quote check, a filter's rows) is kept: the stamp does not move
    for that bookkeeping, and moves for any other write."""
    from vaultmem.db import write_stamp

    vault.search("what did Ben adopt", k=3)
    remembered = vault.searcher._dfs
    stamp = write_stamp(vault.conn)
    heat = vault.conn.execute("SELECT queries FROM entity_heat WHERE entity = 'person:ben'").fetchone()[0]
    vault.search("what did Ben adopt", k=3)
    after = vault.conn.execute("SELECT queries FROM entity_heat WHERE entity = 'person:ben'").fetchone()[0]
    assert after == heat + 1  # the heat was written
    assert write_stamp(vault.conn) == stamp and vault.searcher._dfs is remembered
    vault.conn.execute("UPDATE chunks SET text = text || ' kitten' WHERE text LIKE '%pasta%'")
    assert write_stamp(vault.conn) != stamp
    vault.search("what did Ben adopt", k=3)
    assert vault.searcher._dfs is not remembered


def test_planner_statistics_make_a_folders_leaves_read_by_path(tmp_path: Path) -> None:
    """Without statistics SQLite answered "the leaves under this folder" from a ``kind`` index (every leaf
    of the vault read); ``db.analyze`` gives it ``sqlite_stat1`` from ``ANALYZE_FROM`` rows, once per
    doubling of the index, and the path index serves the query."""
    from vaultmem import db, index

    conn = db.connect(tmp_path / "chunks.db")
    sql = "SELECT id FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?"
    folder = index.prefix_range("sources/s07/")

    def add(start: int, n: int) -> None:
        with db.atomic(conn):
            conn.executemany(
                "INSERT INTO chunks(id, kind, path, source, status, content_hash, text, file_hash, file_size,"
                " file_mtime_ns) VALUES (?, ?, ?, ?, 'active', '', ?, '', 0, 0)",
                [
                    (
                        f"n{i}",
                        "summary" if i % 50 == 0 else "leaf",
                        f"sources/s{i % 40:02d}/{i}.md",
                        f"s{i % 40}",
                        "hi",
                    )
                    for i in range(start, start + n)
                ],
            )

    def plan() -> str:
        return " ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, folder))

    add(0, db.ANALYZE_FROM - 10)
    assert not db.analyze(conn)  # too small to matter
    assert "kind" in plan()  # SQLite's guess: the kind index
    add(db.ANALYZE_FROM, 20)
    assert db.analyze(conn) and not db.analyze(conn)  # once
    conn.close()
    conn = db.connect(tmp_path / "chunks.db")  # statistics are read when a connection opens
    assert "path>? AND path<?" in plan()
    # the leaves under ranked summaries (context) by the parent index (migration 021), not every leaf
    under = "SELECT id FROM chunks WHERE parent IN (?, ?) AND kind = 'leaf'"
    assert "chunks_parent" in " ".join(
        r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + under, ["n0", "n50"])
    )
    assert sorted(r[0] for r in conn.execute(sql, folder)) == sorted(
        f"n{i}"
        for i in [*range(db.ANALYZE_FROM - 10), *range(db.ANALYZE_FROM, db.ANALYZE_FROM + 20)]
        if i % 40 == 7 and i % 50
    )
    add(2 * db.ANALYZE_FROM, 990)
    assert not db.analyze(conn)  # not yet doubled
    add(3 * db.ANALYZE_FROM, 30)  # the highest rowid more than doubled: analyzed again
    assert db.analyze(conn) and not db.analyze(conn)


def test_bm25_scores_the_latest_window_and_every_row_of_a_rare_word_in_a_large_vault(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From ``PRUNE_ABOVE`` rows, when the query's words are on more than ``BM25_WINDOW`` rows together,
    BM25 scores the latest window of rows holding any of them and every row of a rare word (on at most
    the window's rows), old ones too. Those rows keep their exact order; the rest are older rows holding
    only common words."""
    from vaultmem import search

    vault.ingest_messages(chat(7, source="work", session="w2", prefix="Kitten note"))
    vault.flush()  # 15 rows: "note" on 7, "pepper" on 1 (an old one)
    searcher = vault.searcher
    rowid = {i: r for i, r in vault.conn.execute("SELECT id, rowid FROM chunks")}
    full = searcher.lexical("pepper note", Filters(), 50)["words"]
    note = [i for i, t in vault.conn.execute("SELECT id, text FROM chunks") if "note" in t.lower()]
    assert len(note) == 7 and len(full) == 8
    monkeypatch.setattr(search, "PRUNE_ABOVE", 1)
    monkeypatch.setattr(search, "BM25_WINDOW", 3)
    windowed = searcher.lexical("pepper note", Filters(), 50)["words"]
    cut = sorted((rowid[i] for i in note), reverse=True)[2]
    assert windowed == [i for i in full if rowid[i] >= cut or i not in note] and len(windowed) == 4
    # the same rows through a broad filter's join
    assert searcher.lexical("pepper note", Filters(kind="leaf"), 50)["words"] == windowed
    monkeypatch.setattr(search, "BM25_WINDOW", 8)  # all 8 rows fit in the window: all scored
    assert searcher.lexical("pepper note", Filters(), 50)["words"] == full


def test_a_leaves_only_ranking_picks_its_rows_in_the_word_index_as_the_join_does(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leaves-only filter takes the best rows of the word index plus as many as are not leaves, then
    reads their kind: the same ranking as reading the kind of every matching row."""
    from vaultmem import search

    vault.ingest_messages(chat(12, source="work", session="w2", prefix="Kitten note"))
    vault.flush()
    # Summaries under sources/ are rows of the leaves' word index that are not leaves; short ones, so
    # they rank first.
    for n in range(3):
        vault.conn.execute(
            "INSERT INTO chunks(id, kind, path, source, status, content_hash, text, file_hash, file_size,"
            " file_mtime_ns) VALUES (?, 'summary', ?, 'work', 'active', '', ?, '', 0, 0)",
            (f"sum{n}", f"sources/work/level-{n}/_summary.md", "Garden roses kitten note pepper."),
        )
    searcher = vault.searcher
    assert searcher._others(Filters(kind="leaf")) == 3
    assert searcher._others(Filters(kind="leaf", source="work")) is None
    for query in ("garden roses", "kitten note garden", "pepper"):
        fetched = searcher.lexical(query, Filters(kind="leaf"), 5)["words"]
        monkeypatch.setattr(search, "OVERFETCH", -1)  # off: the join reads every match's kind
        searcher._nonleaf = None
        assert searcher._others(Filters(kind="leaf")) is None
        joined = searcher.lexical(query, Filters(kind="leaf"), 5)["words"]
        monkeypatch.setattr(search, "OVERFETCH", 2_000)
        searcher._nonleaf = None
        assert fetched == joined and fetched and not any(i.startswith("sum") for i in fetched)
        assert searcher.lexical(query, Filters(), 5)["words"][0].startswith("sum")  # they do rank first


def test_a_quoting_summary_none_of_whose_leaves_made_the_pool_goes_when_nothing_is_filtered(
    tmp_path: Path,
) -> None:
    """A summary ranked on the strength of several of its lines while none of the leaves it quotes made
    the candidate pool: with no filter it goes (no line of it earned a place of its own) and the leaves
    after it move up; with a filter it stays (its leaves may have failed the filter)."""
    with make_vault(tmp_path / "v", fanout=4) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        vault.compact()
        query = "kyoto ryokan shinkansen temple"
        searcher = vault.searcher
        ranked = searcher.rank(query, Filters(), 100)
        summary = next(
            r[0]
            for r in ranked[:10]
            if vault.conn.execute("SELECT kind FROM chunks WHERE id = ?", (r[0],)).fetchone()[0] == "summary"
            and searcher._quoted_leaves(r[0])
        )
        quoted = set(searcher._quoted_leaves(summary) or ())
        missed = [r for r in ranked if r[0] not in quoted]  # as if none of its leaves made the pool
        kept = searcher.quotes_as_leaves(query, missed, 10)
        assert summary in [r[0] for r in kept[:10]]  # a filtered search: nothing ranked may stand for it
        dropped = [r[0] for r in searcher.quotes_as_leaves(query, missed, 10, any_leaf=True)]
        assert summary not in dropped and not quoted & set(dropped)
        # Everything else keeps its order (other summaries stand for their leaves as before).
        assert [i for i in dropped if i in {r[0] for r in kept}] == [r[0] for r in kept if r[0] != summary]
