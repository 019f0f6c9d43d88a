"""Pure pieces of the compactor: clustering caps, and the _summary.md format round trip."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vaultmem import frontmatter
from vaultmem.cluster import Caps, centroid, group
from vaultmem.summaryfile import (
    SUMMARY_KEYS,
    ChildLink,
    SummaryNode,
    clean_title,
    parse_summary,
    render_summary,
    set_stale_line,
    text_hash,
)


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 120),
    seed=st.integers(0, 10_000),
    target=st.integers(1, 20),
    min_size=st.integers(1, 6),
    max_size=st.integers(6, 40),
    max_tokens=st.integers(50, 2000),
)
def test_groups_partition_the_input_and_respect_the_caps(
    n: int, seed: int, target: int, min_size: int, max_size: int, max_tokens: int
) -> None:
    rng = np.random.default_rng(seed)
    vectors = _unit(rng.normal(size=(n, 16)))
    tokens = [int(t) for t in rng.integers(1, 120, size=n)]
    # Episodes: runs of random length, in order (as the compactor numbers them).
    episodes = np.cumsum(rng.random(n) < rng.random()).tolist()
    for eps in (None, episodes):
        groups = group(vectors, tokens, Caps(target, min_size, max_size, max_tokens), eps)
        members = sorted(i for g in groups for i in g)
        assert members == list(range(n))  # every index exactly once
        for g in groups:
            assert g == sorted(g)
            assert len(g) <= max_size
            assert len(g) == 1 or sum(tokens[i] for i in g) <= max_tokens
        assert groups == group(vectors, tokens, Caps(target, min_size, max_size, max_tokens), eps)


def test_clear_topics_are_separated() -> None:
    rng = np.random.default_rng(1)
    axes = np.eye(8, dtype=np.float32)
    labels = [i % 3 for i in range(60)]
    vectors = _unit(np.stack([axes[t] + 0.05 * rng.normal(size=8) for t in labels]))
    groups = group(vectors, [10] * 60, Caps(10, 3, 40, 10_000))
    for g in groups:
        assert len({labels[i] for i in g}) == 1
    assert {labels[g[0]] for g in groups} == {0, 1, 2}


def test_a_level_keeps_to_one_conversation_when_conversations_are_long_enough() -> None:
    """Three sessions of 20 turns, each on two of three subjects that come back in every session: by
    meaning alone a group would gather one subject from all three sessions; with episodes each group is
    one subject of one session."""
    rng = np.random.default_rng(7)
    axes = np.eye(8, dtype=np.float32)
    sessions = [i // 20 for i in range(60)]
    subjects = [(s + (i % 2)) % 3 for i, s in enumerate(sessions)]
    # A session's own flavour (what was going on that day) is a weaker signal than the subject.
    vectors = _unit(
        np.stack(
            [
                axes[t] + 0.1 * axes[3 + s] + 0.05 * rng.normal(size=8)
                for t, s in zip(subjects, sessions, strict=True)
            ]
        )
    )
    caps = Caps(10, 3, 40, 10_000)
    by_meaning = group(vectors, [10] * 60, caps)
    assert any(len({sessions[i] for i in g}) > 1 for g in by_meaning)
    groups = group(vectors, [10] * 60, caps, sessions)
    for g in groups:
        assert len({sessions[i] for i in g}) == 1
        assert len({subjects[i] for i in g}) == 1


def test_short_episodes_are_grouped_by_meaning_not_by_time() -> None:
    """Notes written hours apart are one-leaf episodes: they are grouped by subject, as without episodes."""
    rng = np.random.default_rng(3)
    axes = np.eye(8, dtype=np.float32)
    labels = [i % 3 for i in range(30)]
    vectors = _unit(np.stack([axes[t] + 0.05 * rng.normal(size=8) for t in labels]))
    groups = group(vectors, [10] * 30, Caps(10, 3, 40, 10_000), list(range(30)))
    for g in groups:
        assert len({labels[i] for i in g}) == 1
    assert {labels[g[0]] for g in groups} == {0, 1, 2}


def test_a_chats_small_groups_stay_in_their_session_not_with_the_greetings_of_another_day() -> None:
    """LongMemEval e66b632c's ``07-assist-today``: "hi" and "Hello! How can I assist you today?" of
    session S003 and a "yes" of S011 made one level. Greetings are closer to each other than to anything
    their sessions are about, so by meaning the small groups of two sessions joined each other; in a chat
    (``apart``) a small group of turns that say little joins a group of its own session, or of the
    nearest session in time."""
    rng = np.random.default_rng(5)
    axes = np.eye(8, dtype=np.float32)
    greeting = 7
    sessions: list[int] = []
    subjects: list[int] = []
    for session in range(4):
        turns = [greeting, greeting] if session == 0 else []
        turns += [session] * 12
        if session == 3:
            turns.insert(6, greeting)  # a "yes" in the middle of the last session
        sessions += [session] * len(turns)
        subjects += turns
    vectors = _unit(np.stack([axes[t] + 0.05 * rng.normal(size=8) for t in subjects]))
    caps = Caps(12, 3, 32, 10_000)
    little = [t == greeting for t in subjects]
    groups = group(vectors, [10] * len(subjects), caps, sessions, apart=True, little=little)
    assert sorted(i for g in groups for i in g) == list(range(len(subjects)))
    for g in groups:
        assert len({sessions[i] for i in g}) == 1, [(sessions[i], subjects[i]) for i in g]
    # Without the flags (as before) the greetings of sessions 0 and 3 are one group.
    before = group(vectors, [10] * len(subjects), caps, sessions, apart=True)
    assert any({sessions[i] for i in g} == {0, 3} for g in before)
    # Without ``apart`` (notes, not a chat) small groups still go where they are closest in meaning.
    notes = group(vectors, [10] * len(subjects), caps, list(range(len(subjects))))
    assert any({subjects[i] for i in g} == {greeting} for g in notes)


def test_small_groups_join_their_nearest_neighbour() -> None:
    vectors = _unit(np.array([[1, 0], [1, 0.05], [1, 0.1], [0.98, 0.2], [0, 1]], dtype=np.float32))
    groups = group(vectors, [1] * 5, Caps(2, 3, 10, 100))
    assert all(len(g) >= 3 for g in groups) or len(groups) == 1


def test_centroid_is_a_unit_vector() -> None:
    vectors = _unit(np.array([[1, 0], [0, 1]], dtype=np.float32))
    c = centroid(vectors)
    assert abs(float(np.linalg.norm(c)) - 1) < 1e-6
    assert np.allclose(c, [2**-0.5, 2**-0.5], atol=1e-6)


text_st = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=200).filter(
    lambda t: t.strip() and "## Children" not in t and "## Pinned" not in t and "## Summary" not in t
)


@settings(max_examples=80, deadline=None)
@given(
    title=st.text(min_size=0, max_size=80),
    text=text_st,
    pinned=st.one_of(st.just(""), text_st),
    depth=st.integers(1, 6),
    stale=st.booleans(),
    labels=st.lists(st.text(min_size=1, max_size=40), max_size=6),
)
def test_summary_round_trip(
    title: str, text: str, pinned: str, depth: int, stale: bool, labels: list[str]
) -> None:
    node = SummaryNode(
        id="s0123456789abcde",
        source="chat",
        path="sources/chat/01-x/_summary.md",
        depth=depth,
        title=clean_title(title),
        text=text.strip(),
        pinned=pinned.strip(),
        children=tuple(ChildLink(label, f"{n:02d}-level (a)/_summary.md") for n, label in enumerate(labels)),
        descendants=7,
        earliest=datetime(2024, 5, 1, 9, tzinfo=UTC),
        latest=datetime(2024, 5, 3, 18, tzinfo=UTC),
        stale=stale,
        summariser="extractive",
        content_hash=text_hash(text),
    )
    parsed, _ = parse_summary(render_summary(node), node.path)
    assert parsed.id == node.id and parsed.depth == depth and parsed.stale == stale
    assert parsed.title == node.title and parsed.earliest == node.earliest and parsed.latest == node.latest
    assert parsed.text == node.text.strip()
    assert parsed.pinned == node.pinned
    assert [c.target for c in parsed.children] == [c.target for c in node.children]
    assert not parsed.hand_edited


def test_user_keys_survive_a_rewrite_and_the_stale_flip_touches_one_line() -> None:
    node = SummaryNode(
        "s0123456789abcde",
        "chat",
        "sources/chat/01-x/_summary.md",
        1,
        "garden",
        "Roses.",
        content_hash=text_hash("Roses."),
    )
    text = render_summary(node).replace("---\n", "---\ntags: [garden, mine]   # keep\n", 1)
    flipped = set_stale_line(text.encode(), True)
    assert flipped is not None
    assert flipped.decode().replace("stale: true", "stale: false") == text
    parsed, doc = parse_summary(flipped.decode(), node.path)
    assert parsed.stale and doc.meta["tags"] == ["garden", "mine"]
    again = render_summary(parsed, keep=doc)
    assert "tags: [garden, mine]   # keep\n" in again
    assert set(frontmatter.split(again).meta) - SUMMARY_KEYS == {"tags"}


def test_an_edited_summary_text_is_detected_and_pinned_text_is_searchable() -> None:
    node = SummaryNode(
        "s0123456789abcde",
        "chat",
        "sources/chat/01-x/_summary.md",
        1,
        "garden",
        "Roses.",
        content_hash=text_hash("Roses."),
    )
    edited = render_summary(node).replace("Roses.", "Roses and a person's correction.")
    parsed, _ = parse_summary(edited, node.path)
    assert parsed.hand_edited
    pinned = SummaryNode(
        **{**parsed.__dict__, "pinned": "Ask Mara first.", "content_hash": text_hash(parsed.text)}
    )
    assert pinned.searchable.startswith("Ask Mara first.")
    assert "## Pinned" in render_summary(pinned)


def test_a_small_group_stays_in_its_conversation_unless_another_subject_is_clearly_closer() -> None:
    """Two sessions of one chat on nearby subjects: the two-turn tail of session 0 (too small for a level)
    joins session 0's level, though session 1's level is a little closer in meaning; a turn on a subject
    clearly apart from its own session's joins the level of that subject instead."""
    a, b, c = np.eye(3, dtype=np.float32)
    rows = [a] * 5 + [0.8 * a + 0.45 * b] * 2 + [0.6 * a + 0.8 * b] * 5  # session 0: 7 turns; 1: 5
    episodes = [0] * 7 + [1] * 5
    vectors = _unit(np.stack(rows))
    caps = Caps(5, 3, 40, 10_000)
    by_meaning = group(vectors, [10] * 12, caps)
    assert [5, 6] not in [[i for i in g if i in (5, 6)] for g in by_meaning if 0 in g]
    groups = group(vectors, [10] * 12, caps, episodes)
    assert all(len({episodes[i] for i in g}) == 1 for g in groups)
    # A clearly different subject: the lone turn joins its subject, not its session.
    rows2 = [a] * 5 + [c] + [c] * 5
    groups2 = group(_unit(np.stack(rows2)), [10] * 11, Caps(5, 3, 40, 10_000), [0] * 6 + [1] * 5)
    assert next(g for g in groups2 if 5 in g) == [5, 6, 7, 8, 9, 10]
