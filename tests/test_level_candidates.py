"""Level-guided candidates (issue 19): the question against the depth-1 levels' vectors, and the best levels'
leaves closest to the question added to the ranking, fused like feedback. Real files, real SQLite, the
deterministic fake embedder, a chat compacted into levels."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_vault
from vaultmem import search as search_module
from vaultmem.search import Filters
from vaultmem.vault import Vault

SESSIONS = [
    (
        "camp",
        [
            ("Mel", "We took the kids camping by the lake."),
            ("Ann", "Camping with family sounds wonderful."),
            ("Mel", "We roasted marshmallows over the fire until midnight."),
            ("Ann", "The stars must have been amazing out there."),
            ("Mel", "The lake was freezing but the kids swam anyway."),
            ("Ann", "Brave kids, camping suits them."),
        ],
    ),
    (
        "pottery",
        [
            ("Mel", "I signed up for a pottery class downtown."),
            ("Ann", "Clay is so relaxing to work with."),
            ("Mel", "My first bowl came out lopsided but I love it."),
            ("Ann", "Keep it, the first one is always special."),
            ("Mel", "The teacher says my glaze is getting better."),
            ("Ann", "Show me the next one."),
        ],
    ),
    (
        "job",
        [
            ("Ann", "The counseling interview went well today."),
            ("Mel", "I knew you would get through it."),
            ("Ann", "They want me back next week for a second round."),
            ("Mel", "Fingers crossed for you."),
            ("Ann", "I prepared answers about my own family story."),
            ("Mel", "Your story will help people."),
        ],
    ),
    (
        "books",
        [
            ("Ann", "I finished that novel about a family of bakers."),
            ("Mel", "Was the ending happy?"),
            ("Ann", "Bittersweet, the family bakery closed."),
            ("Mel", "I need a new book for the summer."),
            ("Ann", "I will lend you mine."),
            ("Mel", "Thanks, I read fast."),
        ],
    ),
    (
        "garden",
        [
            ("Mel", "The tomatoes finally turned red."),
            ("Ann", "Homegrown tomatoes taste like summer."),
            ("Mel", "My family eats them straight from the vine."),
            ("Ann", "Mine never grow that well."),
            ("Mel", "Plenty of sun and water is the trick."),
            ("Ann", "I will try that next year."),
        ],
    ),
    ("tail", [("Mel", f"Random note number {i} about nothing.") for i in range(10)]),
]
QUERY = "What did Mel do with the kids at the lake?"


def _records() -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    for day, (session, turns) in enumerate(SESSIONS):
        for hour, (who, text) in enumerate(turns):
            records.append(
                {
                    "id": f"m{len(records)}",
                    "speaker": who,
                    "content": text,
                    "ts": f"2024-05-{1 + 3 * day:02d}T1{hour}:00:00Z",
                    "session": session,
                    "source": "chat",
                }
            )
    return records


@pytest.fixture
def levelled(tmp_path: Path) -> Vault:
    vault = make_vault(tmp_path / "v", fanout=4)
    vault.ingest_messages(_records())
    vault.flush()
    vault.compact()
    return vault


def _expected(
    vault: Vault, query: str, top: int, per_level: int, speakers: set[str] | None = None
) -> list[str]:
    """The level-guided list computed from the index by hand: depth-1 levels by their vector's cosine to the
    query, each one's ``per_level`` leaves closest to it (of ``speakers`` when given)."""
    searcher = vault.searcher
    cache = searcher.vectors(vault.embedder)
    q = searcher.content_vector(vault.embedder, query)
    kids: dict[str, list[tuple[str, str]]] = {}
    for leaf, parent, speaker in vault.conn.execute(
        "SELECT id, parent, speaker FROM chunks WHERE kind = 'leaf' AND parent IS NOT NULL ORDER BY seq"
    ):
        kids.setdefault(parent, []).append((leaf, speaker))
    levels = sorted(kids, key=lambda lv: -float(cache.matrix[cache.pos[lv]] @ q))[:top]
    out: list[str] = []
    for level in levels:
        leaves = [leaf for leaf, who in kids[level] if speakers is None or who in speakers]
        out += sorted(leaves, key=lambda i: -float(cache.matrix[cache.pos[i]] @ q))[:per_level]
    return out


def test_the_best_levels_give_their_leaves_closest_to_the_question(levelled: Vault) -> None:
    searcher = levelled.searcher
    levels = {r[0] for r in levelled.conn.execute("SELECT parent FROM chunks WHERE kind = 'leaf'")} - {None}
    assert len(levels) >= 4  # the chat was sealed into levels
    searcher.level_top, searcher.level_leaves = 3, 1
    got = searcher.level_leaves_of(QUERY)
    assert got == _expected(levelled, QUERY, 3, 1) and len(got) == 3
    searcher.level_leaves = 2
    assert searcher.level_leaves_of(QUERY) == _expected(levelled, QUERY, 3, 2)
    searcher.level_subject = True  # only the leaves of the speaker the question is about
    mel = searcher.level_leaves_of(QUERY)
    assert mel == _expected(levelled, QUERY, 3, 2, {"Mel"})
    said = dict(levelled.conn.execute("SELECT id, speaker FROM chunks WHERE kind = 'leaf'").fetchall())
    assert mel and {said[i] for i in mel} == {"Mel"}


def _scores(vault: Vault, query: str, pool: int = 3) -> dict[str, float]:
    return {i: s for i, s, _, _ in vault.searcher.rank(query, Filters(kind="leaf"), pool)}


def test_the_level_list_adds_candidates_fused_like_feedback(levelled: Vault) -> None:
    """With ``level_weight``, each leaf of the level-guided list gains weight / (RRF_K + its rank), and leaves
    the first round (a pool of 3) did not find become candidates; nothing else moves."""
    searcher = levelled.searcher
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep = 0.0, 0  # the first round alone
    searcher.level_top = 4
    before = _scores(levelled, QUERY)
    searcher.level_weight = 0.5
    after = _scores(levelled, QUERY)
    listed = searcher.level_leaves_of(QUERY)
    assert set(listed) - set(before)  # candidates the first round did not have
    assert set(after) == set(before) | set(listed)
    for rank, node in enumerate(listed, 1):
        assert after[node] == pytest.approx(before.get(node, 0.0) + 0.5 / (search_module.RRF_K + rank))
    for node in set(before) - set(listed):
        assert after[node] == before[node]


def test_the_level_list_leaves_a_time_question_and_a_vault_without_levels_alone(
    levelled: Vault, tmp_path: Path
) -> None:
    searcher = levelled.searcher
    searcher.prf_vector = 0.0
    timed = "When did Mel go camping at the lake?"
    before = _scores(levelled, timed)
    searcher.level_weight = 1.0
    assert set(searcher.level_leaves_of(timed)) - set(before)  # it would add candidates
    assert _scores(levelled, timed) == before  # the feedback's gate: not for a question asking a time
    fresh = make_vault(tmp_path / "fresh", fanout=4)
    fresh.ingest_messages(_records()[:6])
    fresh.flush()
    assert fresh.searcher.level_leaves_of(QUERY) == []  # no levels yet: nothing added
    fresh.searcher.prf_vector = 0.0
    plain = _scores(fresh, QUERY)
    fresh.searcher.level_weight = 1.0
    assert _scores(fresh, QUERY) == plain
    fresh.searcher.level_novel, fresh.searcher.level_head = 10, 5  # nothing listed: no kept head either
    assert _scores(fresh, QUERY) == plain


def test_the_level_list_is_off_by_default(levelled: Vault) -> None:
    assert search_module.LEVEL_WEIGHT == 0.0 and levelled.searcher.level_weight == 0.0


def test_fused_last_the_list_only_adds_below_the_final_best(levelled: Vault) -> None:
    """With ``level_keep``, the list is fused after every other step, below the final ranking's best
    ``level_keep``: they keep their places and order, and the list's leaves join below them."""
    searcher = levelled.searcher
    searcher.prf_vector = 0.0
    plain = _scores(levelled, QUERY)
    first = sorted(plain, key=lambda i: (-plain[i], i))
    searcher.level_weight, searcher.level_keep, searcher.level_top = 50.0, 2, 6
    after = _scores(levelled, QUERY)
    order = sorted(after, key=lambda i: (-after[i], i))
    listed = searcher.level_leaves_of(QUERY)
    # Unprotected, the list's first leaf outside the best 2 would lead: its share alone beats their scores.
    outside = next(i for i in listed if i not in first[:2])
    assert 50.0 / (search_module.RRF_K + len(listed)) > plain[first[0]]
    assert order[:2] == first[:2] and order[2] in listed and outside in order[2 : 2 + len(listed)]
    assert set(after) == set(plain) | set(listed) and set(listed) - set(plain)


def test_levels_the_first_round_reached_give_no_leaf(levelled: Vault) -> None:
    """``level_leaves_of(query, reached)``: a level holding one of ``reached`` is passed over, and the next
    best level takes its place (still ``level_top`` levels)."""
    searcher = levelled.searcher
    searcher.level_top = 3
    plain = searcher.level_leaves_of(QUERY)
    parent = dict(levelled.conn.execute("SELECT id, parent FROM chunks WHERE kind = 'leaf'").fetchall())
    reached = [plain[0]]
    got = searcher.level_leaves_of(QUERY, reached)
    assert len(got) == 3 and all(parent[i] != parent[plain[0]] for i in got)
    assert got[:2] == plain[1:3]  # the others keep their order, a fourth level joins at the end
    assert got == [i for i in _expected(levelled, QUERY, 4, 1) if parent[i] != parent[plain[0]]]


def test_with_level_novel_the_ranking_skips_the_levels_of_the_first_best(levelled: Vault) -> None:
    searcher = levelled.searcher
    searcher.graph_weight = searcher.neighbor_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep = 0.0, 0
    first = sorted(_scores(levelled, QUERY).items(), key=lambda kv: (-kv[1], kv[0]))
    searcher.level_weight, searcher.level_top, searcher.level_novel = 0.5, 2, 1
    after = _scores(levelled, QUERY)
    listed = searcher.level_leaves_of(QUERY, [first[0][0]])
    assert listed != searcher.level_leaves_of(QUERY)  # the best leaf's level would have given one
    assert set(after) == {i for i, _ in first} | set(listed)
    for rank, node in enumerate(listed, 1):
        before = dict(first).get(node, 0.0)
        assert after[node] == pytest.approx(before + 0.5 / (search_module.RRF_K + rank))


def test_without_level_spread_a_listed_leaf_comes_alone(levelled: Vault) -> None:
    """``level_spread`` off: the neighbours of a listed leaf gain nothing from the list's share, so every
    score is the one without the list plus the list's share; on, its neighbours rise with it."""
    searcher = levelled.searcher
    searcher.graph_weight = searcher.speaker_boost = 0.0
    searcher.prf_vector, searcher.prf_keep = 0.0, 0
    plain = _scores(levelled, QUERY)
    searcher.level_weight, searcher.level_top, searcher.level_spread = 0.5, 4, False
    alone = _scores(levelled, QUERY)
    listed = searcher.level_leaves_of(QUERY)
    share = {node: 0.5 / (search_module.RRF_K + rank) for rank, node in enumerate(listed, 1)}
    assert set(alone) == set(plain) | set(listed)
    for node, score in alone.items():
        assert score == pytest.approx(plain.get(node, 0.0) + share.get(node, 0.0))
    searcher.level_spread = True
    spread = _scores(levelled, QUERY)
    assert set(spread) > set(alone)  # on: the listed leaves bring their neighbours in


def test_with_level_head_the_best_without_the_list_lead_in_their_order(levelled: Vault) -> None:
    """``level_head``: the final ranking's best N are those of the ranking made without the list (every
    other step on: feedback, walk, neighbours, speakers), in that order; the list's leaves join below."""
    searcher = levelled.searcher
    searcher.prf_keep = 0
    plain = _scores(levelled, QUERY, 40)
    first = sorted(plain, key=lambda i: (-plain[i], i))
    searcher.level_weight, searcher.level_top = 50.0, 6
    listed = searcher.level_leaves_of(QUERY)
    unkept = _scores(levelled, QUERY, 40)
    assert sorted(unkept, key=lambda i: (-unkept[i], i))[:3] != first[:3]  # unprotected, the list leads
    searcher.level_head = 3
    after = _scores(levelled, QUERY, 40)
    order = sorted(after, key=lambda i: (-after[i], i))
    assert order[:3] == first[:3]
    assert set(listed) - set(first[:3]) <= set(order[3:])


def test_the_kept_head_counts_leaves_not_summaries(levelled: Vault) -> None:
    """``search`` lists a summary as a leaf it quotes or drops it, so the kept head reaches past summaries
    until it holds ``level_head`` leaves."""
    kinds = dict(levelled.conn.execute("SELECT id, kind FROM chunks").fetchall())
    summaries = [i for i, k in kinds.items() if k == "summary"][:2]
    leaves = [i for i, k in kinds.items() if k == "leaf"][:3]
    order = [summaries[0], leaves[0], summaries[1], leaves[1], leaves[2]]
    levelled.searcher.rank(QUERY, Filters(kind="leaf"), 3)  # the leaf graph is built
    assert levelled.searcher._head(order, 2) == order[:4]
    assert levelled.searcher._head(order, 3) == order
    assert levelled.searcher._head(order, 0) == []
