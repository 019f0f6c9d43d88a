"""Recall that knows who said what: a question naming a person ranks that person's own words first.

The vault is what an agent's memory holds in a week of work: a team chat exported as JSONL (Slack-like, with
a Chinese message among the English ones) and a mailbox of `.eml` files with quoted replies, both written for
this test. Real files, real SQLite, the deterministic fake embedder.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from vaultmem import Vault
from vaultmem import graph as graph_module
from vaultmem import search as search_module
from vaultmem.embed import FakeEmbedder
from vaultmem.graph import LeafGraph
from vaultmem.search import Filters, Speakers, name_words, remembered_window
from vaultmem.timeparse import find_range

CHAT = [
    ("m1", "Mara", "Morning all. Reminder: Tidepool release review is on Thursday.", "2026-03-16T08:10:00Z"),
    (
        "m2",
        "Chen Jing",
        "提醒一下：我3月24日到26日请假（搬家），那几天的 on-call 我已经和 Diego 换了。",
        "2026-03-17T03:10:00Z",
    ),
    ("m3", "Mara", "好的，没问题！祝搬家顺利 🙂", "2026-03-17T08:05:00Z"),
    (
        "m4",
        "Priya",
        "Diego mentioned the cutover plan looks fine, he will send details by mail.",
        "2026-03-17T09:30:00Z",
    ),
    ("m5", "Diego Ferreira", "Back from lunch, reading the cutover thread now.", "2026-03-16T13:02:00Z"),
    ("m6", "Mara", "Ferry tickets to Lisbon are booked for the 21st.", "2026-03-18T17:45:00Z"),
]

DIEGO_MAIL = """\
From: Diego Ferreira <diego.ferreira@tidepool.dev>
To: Mara Lind <mara@tidepool.dev>
Subject: Re: Postgres 16 cutover: Thursday 19 March, 07:00-07:30 Lisbon
Date: Tue, 17 Mar 2026 11:15:07 +0000
Message-ID: <c7f3a1e2@tidepool.dev>
In-Reply-To: <b19d22aa@tidepool.dev>
References: <b19d22aa@tidepool.dev>
Content-Type: text/plain; charset=utf-8

Looks good to me. Two small things:

1. I'll take the snapshot at 06:45 myself, so you can start on time.
2. Let's also pause the webhook workers during the switch.

Diego

On Mon, 16 Mar 2026 at 18:02, Mara Lind <mara@tidepool.dev> wrote:
> Plan for Thursday: snapshot, switch the connection string, smoke tests.
> Diego, can you check the rollback steps?
"""

MARA_MAIL = """\
From: Mara Lind <mara@tidepool.dev>
To: Diego Ferreira <diego.ferreira@tidepool.dev>
Subject: Postgres 16 cutover: Thursday 19 March, 07:00-07:30 Lisbon
Date: Mon, 16 Mar 2026 18:02:00 +0000
Message-ID: <b19d22aa@tidepool.dev>
Content-Type: text/plain; charset=utf-8

Plan for Thursday: snapshot, switch the connection string, smoke tests.
Diego, can you check the rollback steps?

Mara
"""

OTHER_MAIL = """\
From: Priya Raman <priya@tidepool.dev>
To: Mara Lind <mara@tidepool.dev>
Subject: Diego's on-call swap
Date: Tue, 17 Mar 2026 16:40:00 +0000
Message-ID: <e5510c0d@tidepool.dev>
Content-Type: text/plain; charset=utf-8

Heads up: Diego swapped on-call with Chen Jing for 24-26 March, the calendar is updated.

Priya
"""


@pytest.fixture
def work_vault(tmp_path: Path) -> Vault:
    inbox = tmp_path / "inbox"
    (inbox / "mail").mkdir(parents=True)
    for name, text in (("diego.eml", DIEGO_MAIL), ("mara.eml", MARA_MAIL), ("priya.eml", OTHER_MAIL)):
        (inbox / "mail" / name).write_text(text, encoding="utf-8")
    lines = [
        json.dumps({"id": i, "speaker": who, "content": text, "ts": ts, "session": "team-" + ts[:10]})
        for i, who, text, ts in CHAT
    ]
    (inbox / "team.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    vault = Vault.init(tmp_path / "vault", embedder=FakeEmbedder())
    vault.ingest_path(inbox / "mail", source="mail")
    vault.ingest_path(inbox / "team.jsonl", source="team-slack")
    vault.flush()
    return vault


def test_the_authors_own_message_ranks_first(work_vault: Vault) -> None:
    now = datetime(2026, 3, 24, 9, 0, tzinfo=UTC)
    hits = work_vault.search("what did Diego say on 17 March 2026?", k=5, now=now)
    assert hits[0].speaker == "Diego Ferreira"
    assert hits[0].source == "mail" and "snapshot at 06:45" in hits[0].text
    # Remarks about Diego on that day still come, after his own words.
    assert {h.speaker for h in hits[1:]} >= {"Chen Jing"}


def test_without_the_speaker_rule_a_remark_about_him_wins(work_vault: Vault) -> None:
    """The same vault without the rule: the failure the rule exists for (a short message naming Diego)."""
    work_vault.searcher.speaker_boost = 0.0
    now = datetime(2026, 3, 24, 9, 0, tzinfo=UTC)
    hits = work_vault.search("what did Diego say on 17 March 2026?", k=5, now=now)
    assert hits[0].speaker != "Diego Ferreira"


def test_a_query_naming_no_speaker_keeps_the_plain_ranking(work_vault: Vault) -> None:
    query = "ferry tickets to Lisbon"
    with_rule = [h.id for h in work_vault.search(query, k=6)]
    work_vault.searcher.speaker_boost = 0.0
    assert [h.id for h in work_vault.search(query, k=6)] == with_rule


def test_context_puts_the_authors_words_in(work_vault: Vault) -> None:
    now = datetime(2026, 3, 24, 9, 0, tzinfo=UTC)
    ctx = work_vault.context("what did Diego say on 17 March 2026?", 200, now=now)
    assert ctx.items[0].hit.speaker == "Diego Ferreira"
    assert "pause the webhook workers" in ctx.text


def test_speaker_names_by_their_words(work_vault: Vault) -> None:
    assert name_words("Diego Ferreira") == ["diego", "ferreira"]
    assert name_words("diego.ferreira@tidepool.dev") == ["diego", "ferreira"]
    assert name_words("Chen Jing") == ["chen", "jing"]
    speakers = Speakers()
    speakers.refresh(work_vault.conn)
    assert speakers.named("what did diego say") == {"Diego Ferreira"}
    assert speakers.named("Ferreira's mail") == {"Diego Ferreira"}
    assert speakers.named("what did we say about the cutover") == frozenset()


def test_a_month_without_its_year_means_the_latest_one_remembered(work_vault: Vault) -> None:
    """Asked in November 2027, "in March" means March 2026: the vault holds nothing of March 2027."""
    now = datetime(2027, 11, 2, 9, 0, tzinfo=UTC)
    window = find_range("in March", now)
    assert window is not None and window.start.year == 2027
    moved = remembered_window(work_vault.conn, window)
    assert (moved.start, moved.end) == (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))
    written = find_range("in March 2027", now)
    assert written is not None and remembered_window(work_vault.conn, written) == written


def test_a_day_mentioned_in_a_later_message_counts_for_that_day(work_vault: Vault) -> None:
    """Told on the 19th, "yesterday" is 18 March: a question about the 18th finds the later message."""
    work_vault.ingest_messages(
        [
            {
                "id": "m7",
                "speaker": "Priya",
                "content": "The rollback drill went fine yesterday, restore took eleven minutes.",
                "ts": "2026-03-19T10:00:00Z",
                "session": "team-2026-03-19",
            }
        ],
        source="team-slack",
    )
    work_vault.flush()
    day = Filters(
        since=datetime(2026, 3, 18, tzinfo=UTC), until=datetime(2026, 3, 18, 23, 59, 59, tzinfo=UTC)
    )
    where, params = replace(day, mentioned=True).sql()
    told = {r[0] for r in work_vault.conn.execute(f"SELECT c.text FROM chunks c WHERE {where}", params)}
    assert any("rollback drill" in t for t in told)
    where, params = day.sql()
    assert not any(
        "rollback drill" in r[0]
        for r in work_vault.conn.execute(f"SELECT c.text FROM chunks c WHERE {where}", params)
    )
    now = datetime(2026, 3, 24, 9, 0, tzinfo=UTC)
    hits = work_vault.search("how did the rollback drill go on 18 March", k=3, now=now)
    assert "rollback drill" in hits[0].text


def test_a_speaker_corrected_by_hand_is_named_at_once(work_vault: Vault) -> None:
    """The export credited the ferry message to Mara; she fixes the leaf's ``speaker`` by hand. The next
    question naming the real sender finds it: the speakers search remembers follow the edit (they were
    stale until the next insert, as the counter they wait on did not move on a speaker change)."""
    query = "what did Tomás say about the ferry?"
    assert work_vault.search(query, k=3)  # the searcher has read the speakers once
    assert work_vault.searcher._speakers.named(query) == frozenset()
    row = work_vault.conn.execute("SELECT path FROM chunks WHERE source_id = 'm6'").fetchone()
    leaf = work_vault.layout.abs(row["path"])
    text = leaf.read_text(encoding="utf-8")
    assert "\nspeaker: Mara\n" in text
    leaf.write_text(text.replace("\nspeaker: Mara\n", "\nspeaker: Tomás Silva\n"), encoding="utf-8")
    work_vault.reconcile_paths([row["path"]])
    assert work_vault.conn.execute("SELECT speaker FROM chunks WHERE source_id = 'm6'").fetchone()[0] == (
        "Tomás Silva"
    )
    hits = work_vault.search(query, k=3)
    assert work_vault.searcher._speakers.named(query) == {"Tomás Silva"}
    assert hits[0].speaker == "Tomás Silva"


def test_the_question_names_its_subject_first(work_vault: Vault) -> None:
    """Asked "what did Diego tell Mara", Diego's words are wanted, not Mara's; "Mara and Priya": both."""
    speakers = Speakers()
    speakers.refresh(work_vault.conn)
    assert speakers.subject("what did Diego tell Mara about the cutover?") == {"Diego Ferreira"}
    assert speakers.subject("What did Mara and Priya say on Tuesday?") == {
        "Mara",
        "Mara Lind",
        "Priya",
        "Priya Raman",
    }
    assert speakers.subject("what was decided about the cutover") == frozenset()


def test_a_query_without_the_speakers_names(work_vault: Vault) -> None:
    speakers = Speakers()
    speakers.refresh(work_vault.conn)
    assert speakers.without_names("what did Diego's team say about the cutover?") == (
        "what did team say about the cutover?"
    )
    assert speakers.without_names("When did Chen Jing move?") == "When did move?"
    assert speakers.without_names("what about the cutover?") is None  # names nobody
    assert speakers.without_names("Who is Diego?") is None  # nothing but stopwords left


def test_the_leaves_are_ranked_by_the_query_moved_away_from_the_name(work_vault: Vault) -> None:
    """With ``unnamed_query`` the cosine ranking uses the mean of the query's vector and its vector without
    the speaker's name; off, or for a query naming nobody, the query's own vector."""
    searcher = work_vault.searcher
    embedder = work_vault.embedder
    query = "what did Diego say about the snapshot?"
    plain = searcher.query_vector(embedder, query)
    searcher.unnamed_query = 0.0
    assert (searcher.content_vector(embedder, query) == plain).all()
    searcher.unnamed_query = 1.0  # the default
    unnamed = searcher.query_vector(embedder, "what did say about the snapshot?")
    assert (searcher.content_vector(embedder, query) == unnamed).all()
    searcher.unnamed_query = 0.5
    mixed = searcher.content_vector(embedder, query)
    expected = (plain + unnamed) / float(np.linalg.norm(plain + unnamed))
    assert mixed == pytest.approx(expected, abs=1e-6)
    other = "ferry tickets to Lisbon"
    assert (searcher.content_vector(embedder, other) == searcher.query_vector(embedder, other)).all()


def test_a_named_question_costs_one_forward_pass(work_vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``judge_unnamed``, the hits of a query naming a speaker are ranked and judged (evidence cosine,
    ``weak``) by the vector of the query without the name: only that text goes to the model. Off (the
    default), the whole query is embedded too and judges the hits."""
    searcher = work_vault.searcher
    embedder = work_vault.embedder
    sent: list[str] = []
    embed = embedder.embed

    def counting(texts):  # type: ignore[no-untyped-def]
        sent.extend(texts)
        return embed(texts)

    monkeypatch.setattr(embedder, "embed", counting)
    search_module.QUERY_VECTORS.clear()
    query = "what did Diego say about the snapshot?"
    searcher.judge_unnamed = True
    hits = work_vault.search(query, k=5)
    assert sent == ["what did say about the snapshot?"]
    cache = searcher.vectors(embedder)
    unnamed = searcher.query_vector(embedder, sent[0])
    assert [h.cosine for h in hits] == pytest.approx(
        [float(cache.matrix[cache.pos[h.id]] @ unnamed) for h in hits]
    )
    searcher.judge_unnamed = False
    search_module.QUERY_VECTORS.clear()
    sent.clear()
    hits = work_vault.search(query, k=5)
    assert sorted(sent) == sorted([query, "what did say about the snapshot?"])
    whole = searcher.query_vector(embedder, query)
    assert [h.cosine for h in hits] == pytest.approx(
        [float(cache.matrix[cache.pos[h.id]] @ whole) for h in hits]
    )


def _leaf(vault: Vault, message_id: str) -> str:
    return str(vault.conn.execute("SELECT id FROM chunks WHERE source_id = ?", [message_id]).fetchone()[0])


def test_the_graph_walk_follows_conversations_and_entities(work_vault: Vault) -> None:
    graph = LeafGraph()
    graph.refresh(work_vault.conn)
    chen, mara_ok, priya = _leaf(work_vault, "m2"), _leaf(work_vault, "m3"), _leaf(work_vault, "m4")
    ferry = _leaf(work_vault, "m6")
    # From Chen Jing's message: first itself, then what shares its conversation and a name (Priya's chat
    # line: the 17th's chat and Diego) or its rarest name (Priya's mail: Chen Jing and Diego), then the
    # rest of its conversation before anything linked to it only at a distance.
    swap_mail = str(
        work_vault.conn.execute("SELECT id FROM chunks WHERE speaker = 'Priya Raman'").fetchone()[0]
    )
    walked = graph.walk({chen: 1.0}, {}, 10)
    assert walked[0] == chen
    assert set(walked[1:3]) == {priya, swap_mail}
    assert mara_ok in walked
    assert ferry not in walked or walked.index(mara_ok) < walked.index(ferry)
    # Lisbon, named by the question, reaches the ferry message and the mails that mention it.
    by_place = graph.walk({}, {"place:lisbon": 1.0}, 10)
    assert ferry in by_place[:3]
    assert graph.entities_named({"tickets", "to", "lisbon"}) == ["place:lisbon"]


def _walk_by_unique(graph: LeafGraph, leaves: dict[str, float], entities: dict[str, float]) -> np.ndarray:
    """The walk's scores as first written: the reached nodes listed by np.unique at every step."""
    seed = {graph.leaf_pos[i]: w for i, w in leaves.items()}
    for entity, weight in entities.items():
        seed[graph.entity_pos[entity]] = seed.get(graph.entity_pos[entity], 0.0) + weight
    nodes = np.fromiter(seed, dtype=np.intp)
    mass = np.fromiter(seed.values(), dtype=np.float64) / sum(seed.values())
    found = np.zeros(len(graph._ids))
    share = graph_module.RESTART
    for step in range(graph_module.STEPS + 1):
        on_leaf = graph._is_leaf[nodes]
        found[nodes[on_leaf]] += share * mass[on_leaf]
        if step == graph_module.STEPS:
            break
        degree = graph._degree[nodes]
        keep = (degree > 0) & (degree <= graph_module.HUB_EDGES)
        nodes, mass, degree = nodes[keep], mass[keep] / degree[keep], degree[keep]
        if not len(nodes):
            break
        offsets = np.arange(int(degree.sum())) - np.repeat(np.cumsum(degree) - degree, degree)
        reached = graph._next[np.repeat(graph._start[nodes], degree) + offsets]
        nodes, inverse = np.unique(reached, return_inverse=True)
        mass = np.bincount(inverse, weights=np.repeat(mass, degree))
        share *= 1.0 - graph_module.RESTART
    return found


def test_the_walk_scores_as_listing_every_step_did(
    work_vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last step adds its mass without listing the nodes it reaches: every leaf's score is the same,
    bit for bit, as when each step's nodes were listed (np.unique), so the ranking is too."""
    graph = LeafGraph()
    graph.refresh(work_vault.conn)
    scores: list[np.ndarray] = []
    monkeypatch.setattr(graph_module.np, "flatnonzero", lambda a: scores.append(a.copy()) or np.nonzero(a)[0])
    leaves = list(graph.leaf_pos)
    seeds = [
        ({leaves[0]: 1.0}, {}),
        ({}, {"place:lisbon": 1.0}),
        ({i: 1.0 / (n + 1) for n, i in enumerate(leaves)}, {"place:lisbon": 0.5}),
    ]
    for steps in (1, 2, 4):
        monkeypatch.setattr(graph_module, "STEPS", steps)
        for seed_leaves, seed_entities in seeds:
            scores.clear()
            graph.walk(seed_leaves, seed_entities, 10)
            assert len(scores) == 1 and scores[0].any()
            assert np.array_equal(scores[0], _walk_by_unique(graph, seed_leaves, seed_entities))


def test_a_hub_passes_nothing_on(work_vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    """Diego is mentioned on most leaves: past the hub limit he receives but passes nothing on, so a walk
    from a seed that only he connects to the rest reaches nothing beyond its own conversation."""
    graph = LeafGraph()
    graph.refresh(work_vault.conn)
    swap = _leaf(work_vault, "m4")  # Priya's chat message about Diego, in the 17th's chat
    before = set(graph.walk({swap: 1.0}, {}, 20))
    monkeypatch.setattr(graph_module, "HUB_EDGES", 3)
    after = set(graph.walk({swap: 1.0}, {}, 20))
    assert _leaf(work_vault, "m5") in before - after  # Diego's own chat line, linked through "diego"
    assert {_leaf(work_vault, "m2"), _leaf(work_vault, "m3")} <= after  # its conversation stays


def test_the_graph_follows_new_leaves(work_vault: Vault) -> None:
    graph = LeafGraph()
    graph.refresh(work_vault.conn)
    work_vault.ingest_messages(
        [
            {
                "id": "m8",
                "speaker": "Mara",
                "content": "Lisbon ferry moved to the 22nd, same time.",
                "ts": "2026-03-18T18:00:00Z",
                "session": "team-2026-03-18",
            }
        ],
        source="team-slack",
    )
    work_vault.flush()
    graph.refresh(work_vault.conn)
    assert _leaf(work_vault, "m8") in graph.walk({_leaf(work_vault, "m6"): 1.0}, {}, 10)[:2]
    # Only the new leaf was read: the graph is the one a whole rebuild makes, without the rebuild.
    assert graph.rebuilds == 1
    whole = LeafGraph()
    whole.refresh(work_vault.conn)
    for seed in (_leaf(work_vault, "m6"), _leaf(work_vault, "m2")):
        assert graph.walk({seed: 1.0}, {}, 20) == whole.walk({seed: 1.0}, {}, 20)
    assert graph.walk({}, {"place:lisbon": 1.0}, 20) == whole.walk({}, {"place:lisbon": 1.0}, 20)
    # A leaf that goes leaves the walk.
    ferry_moved = _leaf(work_vault, "m8")
    work_vault.forget([ferry_moved])
    graph.refresh(work_vault.conn)
    assert ferry_moved not in graph.walk({_leaf(work_vault, "m6"): 1.0}, {}, 20)
    assert graph.rebuilds == 1


def test_the_graph_follows_entities_found_anew(work_vault: Vault) -> None:
    """A rescan of entities rewrites leaves' lists in place (no leaf appears, goes or moves): the graph
    is rebuilt from the new mentions, not kept from the old ones."""
    ferry = _leaf(work_vault, "m6")
    # A leaf admitted before entities were extracted lists none (as in a vault from an older version).
    with work_vault.conn:
        work_vault.conn.execute("UPDATE chunks SET entities = '[]' WHERE id = ?", [ferry])
    graph = LeafGraph()
    graph.refresh(work_vault.conn)
    assert ferry not in graph.walk({}, {"place:lisbon": 1.0}, 10)
    assert work_vault.rescan_entities() >= 1
    graph.refresh(work_vault.conn)
    assert ferry in graph.walk({}, {"place:lisbon": 1.0}, 10)[:3]


def test_the_graph_of_an_index_older_than_its_log(work_vault: Vault) -> None:
    """An index from before the change log, opened read-only (nothing migrates it): the graph is read
    whole, and read again when leaves appear."""
    from vaultmem import db

    ferry = _leaf(work_vault, "m6")
    with work_vault.conn:
        for trigger in ("graph_changes_ai", "graph_changes_ad", "graph_changes_au"):
            work_vault.conn.execute(f"DROP TRIGGER {trigger}")
        work_vault.conn.execute("DROP TABLE graph_changes")
    reader = db.connect(work_vault.layout.db, readonly=True)
    graph = LeafGraph()
    graph.refresh(reader)
    assert ferry in graph.walk({}, {"place:lisbon": 1.0}, 10)[:3]
    with work_vault.conn:
        work_vault.conn.execute("DELETE FROM migrations WHERE name = '022_graph_changes'")
    work_vault.ingest_messages(
        [
            {
                "id": "m9",
                "speaker": "Mara",
                "content": "Lisbon hotel booked too.",
                "ts": "2026-03-18T19:00:00Z",
                "session": "team-2026-03-18",
            }
        ],
        source="team-slack",
    )
    work_vault.flush()
    graph.refresh(reader)
    assert _leaf(work_vault, "m9") in graph.walk({ferry: 1.0}, {}, 10)


def _same_order(a: graph_module.SessionOrder, b: graph_module.SessionOrder) -> bool:
    return (a._prev, a._next, a.tokens) == (b._prev, b._next, b.tokens)


def _fresh(vault: Vault) -> tuple[LeafGraph, graph_module.SessionOrder]:
    graph, order = LeafGraph(), graph_module.SessionOrder()
    graph.refresh(vault.conn)
    order.refresh(vault.conn)
    return graph, order


def _walks(graph: LeafGraph, vault: Vault) -> list[list[str]]:
    seeds = [_leaf(vault, m) for m in ("m2", "m4", "m6")]
    return [graph.walk({s: 1.0}, {}, 20) for s in seeds] + [graph.walk({}, {"place:lisbon": 1.0}, 20)]


def _new_searcher(vault: Vault, *, with_file: bool = True):  # type: ignore[no-untyped-def]
    """A new process's searcher: the vault's index and (``with_file``) its state folder."""
    from vaultmem.search import Searcher

    return Searcher(vault.conn, lambda: vault.embedder, state=vault.layout.state if with_file else None)


QUERIES = ["what did Diego say about the cutover", "Lisbon ferry", "Chen Jing on-call swap", "release review"]


def _results(searcher) -> list[list[tuple[str, float]]]:  # type: ignore[no-untyped-def]
    return [[(h.id, h.score) for h in searcher.search(q, k=8)] for q in QUERIES]


@pytest.fixture
def filed_vault(work_vault: Vault, monkeypatch: pytest.MonkeyPatch) -> Vault:
    """The vault with its leaf file written (``save_vectors``, as after every flush of a large vault)."""
    monkeypatch.setattr(graph_module, "FILE_MIN_LEAVES", 1)
    work_vault.save_vectors()
    data, header = graph_module.file_paths(work_vault.layout.state)
    assert data.is_file() and header.is_file()
    return work_vault


def test_a_new_process_reads_the_leaf_graph_and_session_order_from_the_leaf_file(filed_vault: Vault) -> None:
    searcher = _new_searcher(filed_vault)
    graph, order = searcher.leaf_structures()
    assert graph.rebuilds == 0 and order.rebuilds == 0  # read, not built
    fresh_graph, fresh_order = _fresh(filed_vault)
    assert _walks(graph, filed_vault) == _walks(fresh_graph, filed_vault)
    assert graph.entity_words == fresh_graph.entity_words and _same_order(order, fresh_order)
    assert _results(searcher) == _results(_new_searcher(filed_vault, with_file=False))


def test_a_stale_leaf_file_is_brought_up_to_date_from_the_log(filed_vault: Vault) -> None:
    """Leaves came, one went and one moved in its conversation since the file was written (fewer changes
    than make the writer rewrite it): a new process reads the file and catches up from the log, and
    has what a whole build has."""
    filed_vault.ingest_messages(
        [
            {
                "id": "m8",
                "speaker": "Mara",
                "content": "Lisbon ferry moved to the 22nd, same time.",
                "ts": "2026-03-18T17:40:00Z",  # before m6 in the same conversation
                "session": "team-2026-03-18",
            }
        ],
        source="team-slack",
    )
    filed_vault.flush()
    filed_vault.forget([_leaf(filed_vault, "m3")])
    with filed_vault.conn:  # a leaf's time corrected: it moves in its conversation (migration 024)
        filed_vault.conn.execute(
            "UPDATE chunks SET ts = '2026-03-16T07:00:00Z' WHERE id = ?", [_leaf(filed_vault, "m5")]
        )
    searcher = _new_searcher(filed_vault)
    graph, order = searcher.leaf_structures()
    assert graph.rebuilds == 0 and order.rebuilds == 0  # caught up, not rebuilt
    fresh_graph, fresh_order = _fresh(filed_vault)
    assert _same_order(order, fresh_order)
    assert order.neighbors(_leaf(filed_vault, "m8")) == (_leaf(filed_vault, "m6"),)
    assert _walks(graph, filed_vault) == _walks(fresh_graph, filed_vault)
    assert _results(searcher) == _results(_new_searcher(filed_vault, with_file=False))


def test_a_damaged_or_foreign_leaf_file_is_never_read(filed_vault: Vault) -> None:
    data, header = graph_module.file_paths(filed_vault.layout.state)
    good_data, good_header = data.read_bytes(), header.read_bytes()
    expected = _results(_new_searcher(filed_vault, with_file=False))
    fresh_graph, fresh_order = _fresh(filed_vault)
    for damage in (
        lambda: data.write_bytes(good_data[: len(good_data) // 2]),  # torn
        lambda: data.write_bytes(b"\x00" * len(good_data)),  # overwritten
        lambda: header.write_text("{}"),
        lambda: header.write_text(json.dumps(json.loads(good_header) | {"epoch": "another index"})),
        lambda: data.unlink(),
    ):
        data.write_bytes(good_data)
        header.write_bytes(good_header)
        damage()
        searcher = _new_searcher(filed_vault)
        graph, order = searcher.leaf_structures()
        assert graph.rebuilds == 1 and order.rebuilds == 1  # built from the index instead
        assert _walks(graph, filed_vault) == _walks(fresh_graph, filed_vault)
        assert _same_order(order, fresh_order)
        assert _results(searcher) == expected
    # A file whose arrays disagree with their header (edges past the last node) is refused whole.
    assert graph_module.load(filed_vault.layout.state, None) is None
    data.write_bytes(good_data)
    header.write_text(
        json.dumps(json.loads(good_header) | {"counts": json.loads(good_header)["counts"] | {"ids": 3}})
    )
    from vaultmem.vectors import epoch

    assert graph_module.load(filed_vault.layout.state, epoch(filed_vault.conn)) is None


def test_check_reports_a_damaged_leaf_file_and_fix_writes_it_again(filed_vault: Vault) -> None:
    """A leaf file whose header names this index but whose data is torn is rebuilt by every new process
    (until the log moves far past it): ``check`` says so, ``check --fix`` writes it again."""
    data, header = graph_module.file_paths(filed_vault.layout.state)
    good_data = data.read_bytes()
    assert "leaf_file_damaged" not in [p.code for p in filed_vault.check().problems]
    header.write_text("{}")  # a header of no index: not this problem (the writer replaces the file)
    assert "leaf_file_damaged" not in [p.code for p in filed_vault.check().problems]
    filed_vault.save_vectors()
    data.write_bytes(good_data[: len(good_data) // 2])  # torn under a current header
    found = [p for p in filed_vault.check().problems if p.code == "leaf_file_damaged"]
    assert [(p.path, p.fixable) for p in found] == [(".vaultmem/leafgraph.npz", True)]
    assert _new_searcher(filed_vault).leaf_structures()[0].rebuilds == 1
    report = filed_vault.check(fix=True)
    assert "leaf_file_damaged" in [p.code for p in report.fixed]
    assert "leaf_file_damaged" not in [p.code for p in filed_vault.check().problems]
    graph, order = _new_searcher(filed_vault).leaf_structures()
    assert graph.rebuilds == 0 and order.rebuilds == 0  # read again, not built
    fresh_graph, fresh_order = _fresh(filed_vault)
    assert _walks(graph, filed_vault) == _walks(fresh_graph, filed_vault) and _same_order(order, fresh_order)
    assert _results(_new_searcher(filed_vault)) == _results(_new_searcher(filed_vault, with_file=False))


def test_the_writer_rewrites_the_leaf_file_when_far_behind(
    filed_vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultmem.vectors import epoch

    state = filed_vault.layout.state
    seen = graph_module.file_seen(state, epoch(filed_vault.conn))
    assert seen is not None
    monkeypatch.setattr(graph_module, "FILE_BEHIND", 1)
    filed_vault.ingest_messages(
        [{"id": "m9", "speaker": "Mara", "content": "Lisbon hotel booked.", "ts": "2026-03-18T19:00:00Z"}],
        source="team-slack",
    )
    filed_vault.flush()
    later = graph_module.file_seen(state, epoch(filed_vault.conn))
    assert later is not None and later > seen
    graph, order = _new_searcher(filed_vault).leaf_structures()
    assert graph.rebuilds == 0 and _same_order(order, _fresh(filed_vault)[1])


MOVE_CHAT = [
    ("a1", "Ann", "I moved here from Sweden four years ago, right after school."),
    ("a2", "Ann", "My grandma in Sweden sent me a necklace for my birthday."),
    ("a3", "Bob", "Sweden sounds lovely, I love the lakes there."),
    ("a4", "Bob", "Lakes and forests everywhere in Sweden, right?"),
    ("a5", "Ann", "The bakery on the corner makes great bread."),
    ("a6", "Bob", "My cat knocked a plant off the shelf again."),
]


@pytest.fixture
def move_vault(tmp_path: Path) -> Vault:
    lines = [
        json.dumps(
            {"id": i, "speaker": who, "content": text, "ts": f"2026-03-1{n}T10:00:00Z", "session": "s"}
        )
        for n, (i, who, text) in enumerate(MOVE_CHAT)
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    vault = Vault.init(tmp_path / "vault", embedder=FakeEmbedder())
    vault.ingest_path(path, source="chat")
    vault.flush()
    return vault


def test_feedback_terms_are_words_the_first_hits_share_and_the_query_lacks(move_vault: Vault) -> None:
    searcher = move_vault.searcher
    searcher.prf_terms = 5
    best = [_leaf(move_vault, m) for m in ("a1", "a2", "a3")]
    terms = searcher.feedback_terms("Where did Ann move from?", best)
    assert terms[0] == "sweden"  # on all three
    assert "lakes" not in terms  # on one of them only
    assert "ann" not in terms  # asked already
    assert searcher.feedback_terms("Where did Ann move from?", best[:1]) == []  # nothing shared by one hit
    searcher.prf_terms = 0
    assert searcher.feedback_terms("Where did Ann move from?", best) == []


def _scores(searcher, query: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    return {i: s for i, s, _, _ in searcher.rank(query, Filters(kind="leaf"), 100)}


def test_a_second_round_of_words_lifts_what_the_first_hits_reveal(move_vault: Vault) -> None:
    """With ``prf_words``, a BM25 round over the query and the words its first hits share is fused in:
    a turn that names Sweden but none of the question's words gains; an unrelated turn does not."""
    searcher = move_vault.searcher
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep = 0.0, 0  # the first round alone
    query = "Where did Ann move from after school?"
    before = _scores(searcher, query)
    searcher.prf_words, searcher.prf_terms, searcher.prf_docs = 1.0, 3, 3
    after = _scores(searcher, query)
    assert after[_leaf(move_vault, "a4")] > before[_leaf(move_vault, "a4")]
    cat = _leaf(move_vault, "a6")  # neither the question's words nor Sweden
    assert after[cat] == pytest.approx(before[cat])


def test_rocchio_ranks_by_the_query_moved_toward_the_first_hits(move_vault: Vault) -> None:
    """With ``prf_vector``, the cosine ranking of the query's vector plus ``prf_beta`` times the mean
    vector of the best ``prf_docs`` first-round hits is fused in, with no forward pass of its own."""
    searcher = move_vault.searcher
    embedder = move_vault.embedder
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep, searcher.prf_within = 0.0, 0, False  # the first round alone
    query = "Where did Ann move from after school?"
    before = _scores(searcher, query)
    best = sorted(before, key=lambda i: (-before[i], i))[:2]
    searcher.prf_vector, searcher.prf_docs, searcher.prf_beta = 1.0, 2, 0.5
    search_module.QUERY_VECTORS.clear()
    after = _scores(searcher, query)
    assert len(search_module.QUERY_VECTORS._vectors) == 1  # the first round's vector, reused
    cache = searcher.vectors(embedder)
    q = searcher.content_vector(embedder, query)
    moved = q + 0.5 * cache.matrix[[cache.pos[i] for i in best]].mean(axis=0)
    order = np.argsort(-(cache.matrix @ (moved / np.linalg.norm(moved))), kind="stable")
    for rank, row in enumerate(order, 1):
        node = cache.ids[row]
        assert after[node] == pytest.approx(before[node] + 1.0 / (search_module.RRF_K + rank), abs=1e-9)


def test_rocchio_within_ranks_only_the_first_rounds_candidates_with_no_second_vector_search(
    move_vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``prf_within`` (the default), the moved vector ranks only the first round's candidates, each
    scored exactly (no second vector search over every row: at 100,000 leaves that search cost 3-4 ms)."""
    from vaultmem import vectors as vectors_module

    searcher = move_vault.searcher
    embedder = move_vault.embedder
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep = 0.0, 0  # the first round alone
    query = "Where did Ann move from after school?"
    before = _scores(searcher, query)
    best = sorted(before, key=lambda i: (-before[i], i))[:2]
    searcher.prf_vector, searcher.prf_docs, searcher.prf_beta, searcher.prf_within = 1.0, 2, 0.5, True
    tops: list[int] = []
    real_top = vectors_module.VectorCache.top

    def counted(self: vectors_module.VectorCache, *args: object, **kw: object) -> object:
        tops.append(1)
        return real_top(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(vectors_module.VectorCache, "top", counted)
    after = _scores(searcher, query)
    assert len(tops) == 1  # the first round's search; the feedback searched nothing
    cache = searcher.vectors(embedder)
    q = searcher.content_vector(embedder, query)
    moved = q + 0.5 * cache.matrix[[cache.pos[i] for i in best]].mean(axis=0)
    candidates = [i for i in before if i in cache.pos]
    sims = cache.matrix[[cache.pos[i] for i in candidates]] @ (moved / np.linalg.norm(moved))
    for rank, j in enumerate(np.argsort(-sims, kind="stable"), 1):
        node = candidates[int(j)]
        assert after[node] == pytest.approx(before[node] + 1.0 / (search_module.RRF_K + rank), abs=1e-9)
    assert set(after) == set(before)  # nothing the first round did not find


def test_feedback_leaves_a_question_asking_for_a_time_alone(move_vault: Vault) -> None:
    """A question asking when (``timeparse.asks_time``) is ranked as without feedback (its answer is often a
    terse turn the moved vector ranks below the topic's richer ones); with ``prf_on_time`` it gets it too."""
    searcher = move_vault.searcher
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep = 0.0, 0  # the first round alone
    timed, plain = "When did Ann move from Sweden?", "Where did Ann move from after school?"
    before = {q: _scores(searcher, q) for q in (timed, plain)}
    searcher.prf_vector, searcher.prf_docs, searcher.prf_beta = 1.0, 2, 0.5
    assert _scores(searcher, timed) == before[timed]
    assert _scores(searcher, plain) != before[plain]
    searcher.prf_on_time = True
    assert _scores(searcher, timed) != before[timed]


def test_feedback_leaves_a_question_naming_a_time_alone(move_vault: Vault) -> None:
    """A question naming a time window (``timeparse.find_range``), or a ranking within one, is ranked as
    without feedback; with ``prf_on_named_time`` it gets it too."""
    searcher = move_vault.searcher
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep = 0.0, 0  # the first round alone
    named = "Where did Ann say she moved from in March 2026?"
    within = Filters(kind="leaf", since=datetime(2026, 3, 1, tzinfo=UTC))
    plain = "Where did Ann say she moved from?"

    def within_scores(query: str) -> dict[str, float]:
        return {i: s for i, s, _, _ in searcher.rank(query, within, 100)}

    before = (_scores(searcher, named), within_scores(plain))
    searcher.prf_vector, searcher.prf_docs, searcher.prf_beta = 1.0, 2, 0.5
    assert (_scores(searcher, named), within_scores(plain)) == before
    searcher.prf_on_named_time = True
    after = (_scores(searcher, named), within_scores(plain))
    assert after[0] != before[0] and after[1] != before[1]


def test_feedback_never_displaces_the_first_rounds_best_kept(move_vault: Vault) -> None:
    """With ``prf_keep``, what the feedback lifts goes right below the first round's best ``prf_keep``
    hits: they stay on top, in their order; without it a strong feedback round reorders the top."""
    searcher = move_vault.searcher
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep = 0.0, 0  # the first round alone
    query = "Where did Ann move from after school?"

    def order() -> list[str]:
        scores = _scores(searcher, query)
        return sorted(scores, key=lambda i: (-scores[i], i))

    first = order()
    searcher.prf_vector, searcher.prf_docs, searcher.prf_beta = 20.0, 4, 5.0
    moved = order()
    assert moved[:2] != first[:2]  # the feedback alone would displace them
    searcher.prf_keep = 2
    kept = order()
    assert kept[:2] == first[:2]
    assert kept[2:] == [i for i in moved if i not in first[:2]]


def test_feedback_is_on_for_a_question_that_asks_no_time(move_vault: Vault) -> None:
    """Shipped settings: Rocchio feedback (``PRF_VECTOR``) moves the ranking of a question asking no time."""
    searcher = move_vault.searcher
    assert searcher.prf_vector > 0 and searcher.prf_keep > 0 and not searcher.prf_on_time
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0  # feedback's scores alone
    query = "Where did Ann move from after school?"
    shipped = _scores(searcher, query)
    searcher.prf_vector = 0.0
    assert _scores(searcher, query) != shipped
