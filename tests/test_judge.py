"""The learned judge of the context's candidates past the first ones (issue 19, session 14; off)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import make_vault, topic_records
from vaultmem import context, judge
from vaultmem.search import Hit


def _hit(n: int, session: str, speaker: str = "Ann", **kw: object) -> Hit:
    h = Hit(f"{n:016x}", "leaf", f"x/{n}.md", f"turn {n}", 1.0 / n, "chat", session, None, speaker, "user",
            (f"m{n}",), 20, "admitted", cosine=0.5, matched=False, coverage=0.0)  # fmt: skip
    return replace(h, **kw)  # type: ignore[arg-type]


def _col(x: np.ndarray, name: str) -> list[float]:
    return [float(v) for v in x[:, judge.FEATURES.index(name)]]


def test_features_read_neighbours_sessions_and_the_subject() -> None:
    hits = [
        _hit(1, "a"),
        _hit(2, "b", "Bob", lexical_rank=3),
        *(_hit(n, "c") for n in (3, 4, 5)),
        _hit(6, "a"),
    ]
    hits[3] = replace(hits[3], cosine=0.9, coverage=0.5, matched=True)
    # Turn 6 follows turn 1 (ranked better); turn 3 precedes turn 4 (ranked worse: not a better neighbour).
    adjacent = {hits[5].id: (hits[0].id,), hits[0].id: (hits[5].id,), hits[2].id: (hits[3].id,)}
    x = judge.features(hits, lambda i: adjacent.get(i, ()), frozenset({"Ann"}))
    assert x.shape == (6, len(judge.FEATURES))
    assert _col(x, "nb_better") == [0, 0, 0, 0, 0, 1]
    assert _col(x, "sess_top5") == [1, 1, 1, 1, 1, 1]  # sessions a, b, c are all in the first five
    assert _col(x, "subj") == [1, 0, 1, 1, 1, 1] and _col(x, "other_subj") == [0, 1, 0, 0, 0, 0]
    assert _col(x, "has_lex") == [0, 1, 0, 0, 0, 0] and _col(x, "has_vec") == [0] * 6
    assert _col(x, "cos_rel")[3] == 0.0 and _col(x, "cos_rel")[0] == pytest.approx(-0.4)
    assert _col(x, "score_rel")[1] == pytest.approx(0.5)
    # A question naming no one: nobody is the subject, nobody is "other".
    x = judge.features(hits, lambda i: (), frozenset())
    assert _col(x, "subj") == [0] * 6 and _col(x, "other_subj") == [0] * 6


def test_the_judge_prefers_the_subjects_turn_that_holds_the_question_words() -> None:
    plain = _hit(20, "z")
    holds = replace(plain, id="f" * 16, coverage=0.8, matched=True)
    other = replace(holds, id="e" * 16, speaker="Bob")
    head = [_hit(n, "a") for n in range(1, 11)]
    s = judge.scores(judge.features([*head, plain, holds, other], lambda i: (), frozenset({"Ann"})))
    assert s[11] > s[12] > s[10]  # holds the words > said by someone else > holds nothing


def test_reorder_keeps_the_first_in_place_and_orders_the_rest_by_the_judge(tmp_path: Path) -> None:
    records = [{**r, "speaker": "Ann" if i % 2 else "Bob"} for i, r in enumerate(topic_records(6))]
    with make_vault(tmp_path) as vault:
        vault.ingest_messages(records)
        query = "What did Ann say about kyoto ryokan?"
        hits = vault.searcher.find(query, 20)
        assert len(hits) > 5
        assert judge.reorder(vault.searcher, query, hits, 0) == hits
        assert judge.reorder(vault.searcher, query, hits, len(hits)) == hits
        got = judge.reorder(vault.searcher, query, hits, 3)
        assert got[:3] == hits[:3] and sorted(h.id for h in got) == sorted(h.id for h in hits)
        judged = vault.searcher.evidence(query, hits)
        order = vault.searcher.leaf_structures()[1]
        s = judge.scores(judge.features(judged, order.neighbors, frozenset({"Ann"})))
        by_id = {h.id: s[i] for i, h in enumerate(hits)}
        tail = [by_id[h.id] for h in got[3:]]
        assert tail == sorted(tail, reverse=True)
        assert got != hits  # the judge moved something (turns said by Bob fall behind Ann's)


def test_gather_asks_the_judge_only_when_it_is_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pools: list[list[str]] = []
    real = context.assemble

    def spy(query: str, hits: list[Hit], *args: object, **kwargs: object) -> context.Context:
        pools.append([h.id for h in hits])
        return real(query, hits, *args, **kwargs)  # type: ignore[arg-type]

    calls: list[int] = []
    real_reorder = judge.reorder

    def counting(*args: object) -> list[Hit]:
        calls.append(1)
        return real_reorder(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(context, "assemble", spy)
    monkeypatch.setattr(judge, "reorder", counting)
    records = [{**r, "speaker": "Ann" if i % 2 else "Bob"} for i, r in enumerate(topic_records(6))]
    assert context.JUDGE_FROM == 25  # shipped: the first 25 keep the fused order
    monkeypatch.setattr(context, "JUDGE_FROM", 0)
    with make_vault(tmp_path) as vault:
        vault.ingest_messages(records)
        query = "What did Ann say about kyoto ryokan?"
        off = vault.context(query, 300)
        assert calls == []
        monkeypatch.setattr(context, "JUDGE_FROM", 2)
        on = vault.context(query, 300)
        assert calls == [1]
    assert pools[1][:2] == pools[0][:2] and sorted(pools[1]) == sorted(pools[0]) and pools[1] != pools[0]
    assert on.tokens <= 300 and off.tokens <= 300
