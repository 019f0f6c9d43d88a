"""The budget's tail rules (issue 19, session 13): past ``FILL_HEAD`` items, value per token scaled by what
the context already holds (``RUN_DECAY``, ``SESSION_DECAY``, ``COVER_WEIGHT``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_vault, topic_records
from vaultmem import context
from vaultmem.context import assemble
from vaultmem.search import Hit
from vaultmem.tokens import count_tokens


def _turn(n: int, session: str, text: str | None = None) -> Hit:
    body = text or " ".join(f"w{n}x{i}" for i in range(12))
    return Hit(f"{n:016x}", "leaf", f"x/{n}.md", body, 1.0 / n, "chat", session, f"2024-05-01T10:00:{n:02d}Z",
               "Ann", "user", (f"m{n}",), count_tokens(body), "admitted")  # fmt: skip


def _ids(ctx: context.Context) -> list[str]:
    return [item.hit.id for item in ctx.items]


def _budget_for(hits: list[Hit], n: int) -> int:
    """Room for the frame, one header and about ``n`` of these turns (one short of ``n + 1``)."""
    line = count_tokens(context.render_line(hits[0]))
    return count_tokens(context.HEADER) + count_tokens(context.FOOTER) + 2 * 8 + n * line + line // 2


# Ranks 1-5: one run of adjacent turns of session a; rank 6: a turn of session b.
RUN = [_turn(n, "a") for n in range(1, 6)]
OTHER = _turn(6, "b")
HITS = [*RUN, OTHER]
ORDER = {h.id: i for i, h in enumerate(RUN)}


def _neighbours(node_id: str) -> tuple[str, ...]:
    i = ORDER.get(node_id)
    if i is None:
        return ()
    return tuple(RUN[j].id for j in (i - 1, i + 1) if 0 <= j < len(RUN))


def test_off_by_default_the_tail_is_the_static_fill_order(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = _budget_for(HITS, 4)
    plain = assemble("q", HITS, budget)
    assert _ids(plain) == [h.id for h in RUN[:4]]
    assert assemble("q", HITS, budget, neighbours=_neighbours).items == plain.items


def test_run_decay_lets_another_sessions_turn_past_a_run_of_neighbours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(context, "FILL_HEAD", 2)
    monkeypatch.setattr(context, "RUN_DECAY", 0.5)
    ctx = assemble("q", HITS, _budget_for(HITS, 4), neighbours=_neighbours)
    # Ranks 1-2 are the head. Rank 3 would join a run of 2 (x0.25) against rank 6's 1/16 vs 1/13*0.25.
    assert OTHER.id in _ids(ctx)
    assert _ids(ctx)[:2] == [RUN[0].id, RUN[1].id]
    assert ctx.tokens == count_tokens(ctx.text) <= _budget_for(HITS, 4)
    # Without neighbours the rule cannot see the run: the static order.
    assert OTHER.id not in _ids(assemble("q", HITS, _budget_for(HITS, 4)))


def test_fill_head_keeps_the_first_items_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "RUN_DECAY", 0.01)
    monkeypatch.setattr(context, "FILL_HEAD", 4)
    assert _ids(assemble("q", HITS, _budget_for(HITS, 4), neighbours=_neighbours)) == [h.id for h in RUN[:4]]
    monkeypatch.setattr(context, "FILL_HEAD", 1)
    assert OTHER.id in _ids(assemble("q", HITS, _budget_for(HITS, 4), neighbours=_neighbours))


def test_session_decay_counts_the_items_of_a_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "FILL_HEAD", 1)
    monkeypatch.setattr(context, "SESSION_DECAY", 0.5)
    # No neighbours given: the session alone decides. Rank 2 of session a is worth 1/12 * 0.5 against
    # rank 6's 1/16: session b's turn comes second.
    ctx = assemble("q", HITS, _budget_for(HITS, 2))
    assert _ids(ctx) == [RUN[0].id, OTHER.id]


def test_cover_weight_prefers_a_turn_with_a_question_word_the_context_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    filler = "one two three four five six seven eight nine ten"
    hits = [_turn(1, "a", f"pottery class {filler}"), _turn(2, "a", f"pottery again {filler}"),
            _turn(3, "a", f"camping trip {filler}")]  # fmt: skip
    budget = _budget_for(hits, 2)
    assert _ids(assemble("What did Ann do, pottery or camping?", hits, budget)) == [hits[0].id, hits[1].id]
    monkeypatch.setattr(context, "FILL_HEAD", 1)
    monkeypatch.setattr(context, "COVER_WEIGHT", 1.0)
    # Rank 2 brings no new word (1/12); rank 3 brings "camping", half the content words (1/13 * 1.5).
    ctx = assemble("What did Ann do, pottery or camping?", hits, budget)
    assert _ids(ctx) == [hits[0].id, hits[2].id]


def test_gather_passes_the_session_order_when_the_run_rule_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, ...]] = []
    real = context.assemble

    def spy(*args: object, **kwargs: object) -> context.Context:
        neighbours = kwargs["neighbours"]
        if neighbours is None:
            seen.append(())
            return real(*args, **kwargs)  # type: ignore[arg-type]
        first = args[1][0]  # type: ignore[index]
        seen.append(tuple(neighbours(first.id)))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(context, "assemble", spy)
    with make_vault(tmp_path) as vault:
        vault.ingest_messages(topic_records(6))
        vault.context("kyoto ryokan temple", 300)  # off: no session order looked up
        monkeypatch.setattr(context, "RUN_DECAY", 0.5)
        vault.context("kyoto ryokan temple", 300)
    assert len(seen) == 2 and seen[0] == () and seen[1]  # a turn of a chat has a neighbour


def test_other_speaker_lowers_a_tail_turn_not_said_by_the_subject(monkeypatch: pytest.MonkeyPatch) -> None:
    said = [_turn(n, f"s{n}") for n in (1, 2, 3)]
    bob = Hit(**{**said[1].__dict__, "speaker": "Bob"})  # rank 2 said by someone else
    hits = [said[0], bob, said[2]]
    budget = _budget_for(hits, 2) + 2 * 8  # each turn its own session: a header each
    assert _ids(assemble("q", hits, budget, subject=frozenset({"Ann"}))) == [said[0].id, bob.id]
    monkeypatch.setattr(context, "FILL_HEAD", 1)
    monkeypatch.setattr(context, "OTHER_SPEAKER", 0.5)
    # Bob's turn is worth 1/12 * 0.5 against Ann's rank 3 at 1/13.
    assert _ids(assemble("q", hits, budget, subject=frozenset({"Ann"}))) == [said[0].id, said[2].id]
    # A question without a subject: no one is "other".
    assert _ids(assemble("q", hits, budget)) == [said[0].id, bob.id]


def test_gather_finds_the_subject_only_when_the_rule_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    subjects: list[frozenset[str]] = []
    real = context.assemble

    def spy(*args: object, **kwargs: object) -> context.Context:
        subjects.append(kwargs["subject"])  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(context, "assemble", spy)
    records = [{**r, "speaker": "Ann" if i % 2 else "Bob"} for i, r in enumerate(topic_records(6))]
    with make_vault(tmp_path) as vault:
        vault.ingest_messages(records)
        vault.context("What did Ann say about kyoto?", 300)
        monkeypatch.setattr(context, "OTHER_SPEAKER", 0.5)
        vault.context("What did Ann say about kyoto?", 300)
    assert subjects == [frozenset(), frozenset({"Ann"})]


def _said(n: int, speaker: str) -> Hit:
    return Hit(**{**_turn(n, "a").__dict__, "speaker": speaker})


def test_other_pair_keeps_the_reply_next_to_the_subjects_best_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    ann1, bob2, ann3 = _said(1, "Ann"), _said(2, "Bob"), _said(3, "Ann")
    hits = [ann1, bob2, ann3]
    pairs = {ann1.id: (bob2.id,), bob2.id: (ann1.id,)}  # Bob answered Ann's best turn

    def neighbours(node_id: str) -> tuple[str, ...]:
        return pairs.get(node_id, ())

    budget = _budget_for(hits, 2)
    monkeypatch.setattr(context, "FILL_HEAD", 1)
    monkeypatch.setattr(context, "OTHER_SPEAKER", 0.5)
    subject = frozenset({"Ann"})
    # The subject rule alone: Bob's turn is worth 1/12 * 0.5 against Ann's rank 3 at 1/13.
    assert _ids(assemble("q", hits, budget, neighbours=neighbours, subject=subject)) == [ann1.id, ann3.id]
    monkeypatch.setattr(context, "OTHER_PAIR", 1)
    assert _ids(assemble("q", hits, budget, neighbours=neighbours, subject=subject)) == [ann1.id, bob2.id]
    # Without the session order no pair is seen: the subject rule as before.
    assert _ids(assemble("q", hits, budget, subject=subject)) == [ann1.id, ann3.id]


def test_other_pair_protects_only_the_neighbours_of_the_subjects_turns_up_to_its_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ann1, ann2, bob3, ann4 = _said(1, "Ann"), _said(2, "Ann"), _said(3, "Bob"), _said(4, "Ann")
    hits = [ann1, ann2, bob3, ann4]
    pairs = {ann2.id: (bob3.id,), bob3.id: (ann2.id,)}  # Bob's turn answers Ann's rank 2

    def neighbours(node_id: str) -> tuple[str, ...]:
        return pairs.get(node_id, ())

    budget = _budget_for(hits, 3)
    subject = frozenset({"Ann"})
    monkeypatch.setattr(context, "FILL_HEAD", 2)
    monkeypatch.setattr(context, "OTHER_SPEAKER", 0.5)
    monkeypatch.setattr(context, "OTHER_PAIR", 1)  # rank 2 is past it: Bob's 1/13 * 0.5 < Ann's 1/14
    assert _ids(assemble("q", hits, budget, neighbours=neighbours, subject=subject)) == [
        ann1.id,
        ann2.id,
        ann4.id,
    ]
    monkeypatch.setattr(context, "OTHER_PAIR", 2)
    assert _ids(assemble("q", hits, budget, neighbours=neighbours, subject=subject)) == [
        ann1.id,
        ann2.id,
        bob3.id,
    ]
    # A turn of the subject's own is never lowered, so the pair rule changes nothing without the subject.
    monkeypatch.setattr(context, "OTHER_SPEAKER", 1.0)
    assert _ids(assemble("q", hits, budget, neighbours=neighbours, subject=subject)) == [
        ann1.id,
        ann2.id,
        bob3.id,
    ]


def test_gather_passes_the_session_order_for_the_pair_rule_only_with_the_subject_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given: list[bool] = []
    real = context.assemble

    def spy(*args: object, **kwargs: object) -> context.Context:
        given.append(kwargs["neighbours"] is not None)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(context, "assemble", spy)
    records = [{**r, "speaker": "Ann" if i % 2 else "Bob"} for i, r in enumerate(topic_records(6))]
    with make_vault(tmp_path) as vault:
        vault.ingest_messages(records)
        monkeypatch.setattr(context, "OTHER_PAIR", 1)
        vault.context("What did Ann say about kyoto?", 300)  # the subject rule off: nothing to protect
        monkeypatch.setattr(context, "OTHER_SPEAKER", 0.5)
        vault.context("What did Ann say about kyoto?", 300)
    assert given == [False, True]
