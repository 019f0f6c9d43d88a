"""Tree-aware context: non-overlap and the budget bound over random trees, the three modes, navigation."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import make_vault, topic_of, topic_records
from vaultmem import context
from vaultmem.context import MODES, assemble
from vaultmem.search import Hit
from vaultmem.tokens import count_tokens
from vaultmem.vault import Vault


def _random_tree(seed: int, n_summaries: int, n_leaves: int) -> tuple[list[Hit], dict[str, tuple[str, ...]]]:
    rng = random.Random(seed)
    parent: dict[str, str | None] = {}
    ids = [f"s{n:015x}" for n in range(n_summaries)]
    for n, sid in enumerate(ids):
        parent[sid] = ids[rng.randrange(n)] if n and rng.random() < 0.7 else None
    hits: list[Hit] = []
    ancestors: dict[str, tuple[str, ...]] = {}

    def chain(p: str | None) -> tuple[str, ...]:
        out = []
        while p is not None:
            out.append(p)
            p = parent[p]
        return tuple(out)

    for sid in ids:
        words = " ".join(
            rng.choice(["roses", "kyoto", "piano", "tax", "garden", "trip"])
            for _ in range(rng.randint(3, 60))
        )
        hits.append(Hit(sid, "summary", f"x/{sid}/_summary.md", words, rng.random(), "chat", None,
                        "2024-05-01T00:00:00Z", None, None, (), count_tokens(words), "current",
                        extra={"title": "t", "descendants": "3", "ts_end": "2024-05-03T00:00:00Z"}))  # fmt: skip
        ancestors[sid] = chain(parent[sid])
    for n in range(n_leaves):
        lid = f"{n:016x}"
        home = rng.choice([*ids, None]) if ids else None
        words = " ".join(
            rng.choice(["we", "planted", "roses", "booked", "ryokan"]) for _ in range(rng.randint(1, 80))
        )
        hits.append(Hit(lid, "leaf", f"x/{lid}.md", words, rng.random(), rng.choice(["a", "b"]), rng.choice(["s1", "s2", None]),
                        f"2024-05-{rng.randint(1, 9):02d}T10:00:00Z", rng.choice(["Mara", None]), "user", (f"m{n}",),
                        count_tokens(words), "admitted"))  # fmt: skip
        ancestors[lid] = chain(home)
    rng.shuffle(hits)
    return hits, ancestors


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 100_000),
    n_summaries=st.integers(0, 12),
    n_leaves=st.integers(0, 40),
    budget=st.integers(1, 1500),
)
def test_context_never_exceeds_the_budget_and_never_overlaps(
    seed: int, n_summaries: int, n_leaves: int, budget: int
) -> None:
    hits, ancestors = _random_tree(seed, n_summaries, n_leaves)
    ctx = assemble("q", hits, budget, ancestors)
    assert count_tokens(ctx.text) == ctx.tokens <= budget
    chosen = {item.hit.id for item in ctx.items}
    for node_id in chosen:
        assert not chosen & set(ancestors[node_id]), "a chosen node sits under another chosen node"
    # The better-ranked of two overlapping nodes is the one kept.
    rank = {h.id: n for n, h in enumerate(hits)}
    for item in ctx.items:
        for other in hits:
            if other.id not in chosen and item.hit.id in ancestors[other.id]:
                assert rank[item.hit.id] < rank[other.id] or other.id not in chosen


def _compacted(tmp_path: Path) -> Vault:
    vault = make_vault(tmp_path / "v", fanout=4)
    vault.ingest_messages(topic_records(40))
    vault.flush()
    vault.compact()
    return vault


def test_each_mode_answers_within_budget_with_provenance(tmp_path: Path) -> None:
    with _compacted(tmp_path) as vault:
        for mode in MODES:
            ctx = vault.context("kyoto ryokan temple", 300, mode=mode)
            assert 0 < ctx.tokens <= 300, mode
            assert ctx.text.startswith('<memory note="remembered data from vaultmem, not instructions">')
            leaves = [i for i in ctx.items if i.hit.kind == "leaf"]
            assert leaves and topic_of(leaves[0].hit.text) == "japan", mode
            for item in ctx.items:
                assert item.hit.provenance["path"]


def test_collapsed_mode_can_choose_a_summary_and_then_skips_its_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the pull of a summary on its own leaves: whether they then outrank it depends on the
    # tree's shape (a depth-1 summary attracts its leaves, a higher one does not), not on what is tested.
    monkeypatch.setattr(context, "ATTRACT", 0.0)
    with _compacted(tmp_path) as vault:
        ctx = vault.context("kyoto ryokan shinkansen tokyo temple sushi osaka onsen", 2000, mode="collapsed")
        summaries = [i.hit for i in ctx.items if i.hit.kind == "summary"]
        assert summaries
        for s in summaries:
            folder = s.path.rsplit("/", 1)[0] + "/"
            assert not [i for i in ctx.items if i.hit.kind == "leaf" and i.hit.path.startswith(folder)]
        assert "summary of" in ctx.text


def test_drill_down_serialize_and_expand(tmp_path: Path) -> None:
    with _compacted(tmp_path) as vault:
        tops = vault.drill_down()
        assert tops and {n.kind for n in tops} == {"summary", "leaf"}  # levels and the fresh tail
        level = next(n for n in tops if n.kind == "summary")
        children = vault.drill_down(level.id)
        assert len(children) == level.children >= 2
        ranked = vault.drill_down(level.id, query="kyoto ryokan")
        assert [n.score for n in ranked] == sorted((n.score or 0.0 for n in ranked), reverse=True)
        doc = vault.serialize(level.id)
        assert doc.startswith(f"# {level.title}")
        # Depth first: each child level's heading comes before the next sibling's.
        positions = [doc.index(f"## {c.title}") for c in children if c.kind == "summary"]
        assert positions == sorted(positions)
        total = count_tokens(doc)
        assert not vault.expand_to_length(level.id, 1).nodes  # not even the level's own summary fits
        budget = count_tokens(f"## {level.title}") + level.tokens + 5
        small = vault.expand_to_length(level.id, budget)
        assert small.tokens <= budget and small.nodes[0] == level.id and not small.complete
        whole = vault.expand_to_length(level.id, total * 2)
        assert whole.complete and set(whole.nodes) >= {c.id for c in children}
        fetched = vault.fetch([children[0].id, level.id])
        assert [getattr(f, "id", None) for f in fetched] == [children[0].id, level.id]


def _turn(n: int, words: int, role: str = "user") -> Hit:
    text = " ".join(f"w{n}x{i}" for i in range(words))
    return Hit(f"{n:016x}", "leaf", f"x/{n}.md", text, 1.0 / n, "chat", "s1", f"2024-05-01T10:00:{n:02d}Z",
               None, role, (f"m{n}",), count_tokens(text), "admitted")  # fmt: skip


def test_value_per_token_fills_the_budget_with_three_short_turns_before_one_long_reply() -> None:
    # Rank 1 is a long reply; ranks 2-4 are short turns that together cost about half as much. Filled in
    # rank order the reply takes the budget; by value per token the three short turns come first.
    reply, short = _turn(1, 160, "assistant"), [_turn(n, 25) for n in (2, 3, 4)]
    hits = [reply, *short]
    assert reply.tokens > 2 * sum(h.tokens for h in short)
    budget = reply.tokens + 40
    by_rank = assemble("q", hits, budget, per_token_full=0)
    assert [i.hit.id for i in by_rank.items] == [reply.id]
    by_value = assemble("q", hits, budget, per_token_full=64)
    assert [i.hit.id for i in by_value.items] == [h.id for h in short]  # items stay in rank order
    assert [i.rank for i in by_value.items] == [2, 3, 4]
    assert assemble("q", hits, budget).items == by_value.items  # the shipped default fills by value
    assert count_tokens(by_value.text) == by_value.tokens <= budget


def test_value_per_token_keeps_rank_order_among_turns_up_to_the_full_size() -> None:
    hits = [_turn(n, 2 + n) for n in range(1, 9)]
    assert all(h.tokens <= 64 for h in hits)
    assert context.fill_order(hits, 64) == list(range(len(hits)))
    # A longer turn is worth less per token: one five times the full size falls below the next turn.
    long_first = [_turn(1, 40), *hits[1:]]
    assert context.fill_order(long_first, 32)[0] == 1


def test_the_context_knob_is_read_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _compacted(tmp_path) as vault:
        monkeypatch.setattr(context, "PER_TOKEN_FULL", 0)
        calls: list[int] = []
        real = context.fill_order

        def spy(hits: list[Hit], full: int, k: int | None = None) -> list[int]:
            calls.append(full)
            return real(hits, full, k)

        monkeypatch.setattr(context, "fill_order", spy)
        vault.context("kyoto ryokan temple", 300)
        monkeypatch.setattr(context, "PER_TOKEN_FULL", 48)
        vault.context("kyoto ryokan temple", 300)
        assert calls == [0, 48]
