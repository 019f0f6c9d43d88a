"""Where the evidence a context misses is (issue 19): a failure analysis on vaults ``bench/retrieval.py
--keep`` built.

    python bench/retrieval.py DATASET --keep DIR ...     # builds the vaults once
    python bench/misses.py DATASET DIR [--category 1 --category 3] [--limit N] [--out FILE.json]

For every question of the chosen categories, the context of 1,024 tokens is assembled as ``Vault.context``
does and, for each evidence turn it misses, the report says where that turn was:
- its rank among the context's candidates (the pool ``context.gather`` assembles from), or, when it is
  not among them, its rank in a long fused ranking of every leaf, in BM25 alone and in cosine alone;
- its rank within its own session (by the long fused ranking): a turn that is the best of its session
  but far down overall is one a per-session view would bring in;
- whether its session holds one of the 10 best candidates, and whether it shares an entity (other than
  a speaker) with one of them or with the question;
- whether the question's subject (the first speaker it names) said it.
Nothing is written to the vaults (they are opened as ``bench/retrieval.py --reuse`` does).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import table
from retrieval import CachingEmbedder, Item, _norm, load_locomo, load_longmemeval

from vaultmem import Vault
from vaultmem import context as ctxmod
from vaultmem.embed import load_embedder
from vaultmem.search import Filters, Hit, Speakers, fts_terms

LONG = 3000  # the long fused ranking's length


def _bucket(rank: int | None, edges: tuple[int, ...] = (10, 25, 50, 128, 400, LONG)) -> str:
    if rank is None:
        return f">{edges[-1]}"
    for edge in edges:
        if rank <= edge:
            return f"<={edge}"
    return f">{edges[-1]}"


def analyse(vault: Vault, item: Item, categories: set[str], budget: int) -> list[dict[str, Any]]:
    searcher = vault.searcher
    conn = vault.conn
    leaf_of: dict[str, str] = {}
    session_of: dict[str, str] = {}
    speaker_of: dict[str, str | None] = {}
    for leaf_id, message_ids, session, speaker in conn.execute(
        "SELECT id, message_ids, session, speaker FROM chunks WHERE kind = 'leaf'"
    ):
        for m in json.loads(message_ids):
            leaf_of.setdefault(m, leaf_id)
        session_of[leaf_id] = session
        speaker_of[leaf_id] = speaker
    mentions: dict[str, set[str]] = {}
    for entity, leaf in conn.execute("SELECT entity, leaf FROM mentions"):
        mentions.setdefault(leaf, set()).add(entity)
    spoken = {s.lower() for s in speaker_of.values() if s}
    speakers = Speakers()
    speakers.refresh(conn)
    text_of = {t.id: _norm(t.text) for t in item.turns}
    captured: list[list[Hit]] = []
    original = ctxmod.assemble

    def capture(query: str, hits: Any, budget_tokens: int, ancestors: Any = None, **options: Any) -> Any:
        captured.append(list(hits))
        return original(query, hits, budget_tokens, ancestors, **options)

    rows: list[dict[str, Any]] = []
    ctxmod.assemble = capture
    try:
        for q in item.questions:
            if q.category not in categories or not q.evidence:
                continue
            captured.clear()
            text = _norm(vault.context(q.text, budget, now=q.asked).text)
            pool = [h.id for h in captured[-1]] if captured else []
            ranked = [r[0] for r in searcher.rank(q.text, Filters(kind="leaf"), LONG)]
            lexical = searcher.lexical(q.text, Filters(kind="leaf"), LONG)["words"]
            semantic = searcher.semantic(q.text, Filters(kind="leaf"), LONG)
            top_sessions = {session_of.get(i) for i in pool[:10]}
            top_entities = set().union(*(mentions.get(i, set()) for i in pool[:10]))
            words, _ = fts_terms(q.text)
            subject = speakers.subject(q.text)
            for e in q.evidence:
                leaf = leaf_of.get(e)
                found = text_of[e] in text
                row: dict[str, Any] = {
                    "qid": q.qid,
                    "category": q.category,
                    "question": q.text,
                    "evidence": e,
                    "n_evidence": len(q.evidence),
                    "found": found,
                }
                if leaf is None:
                    rows.append(row | {"leaf": None})
                    continue
                session = session_of[leaf]
                in_session = [i for i in ranked if session_of.get(i) == session]
                shared = {
                    x
                    for x in mentions.get(leaf, set()) & top_entities
                    if x.split(":", 1)[-1].replace("-", " ") not in spoken
                }
                named = {
                    x
                    for x in mentions.get(leaf, set())
                    if x.split(":", 1)[-1].split("-")[0] in words
                    and x.split(":", 1)[-1].replace("-", " ") not in spoken
                }
                row |= {
                    "leaf": leaf,
                    "pool_rank": pool.index(leaf) + 1 if leaf in pool else None,
                    "fused_rank": ranked.index(leaf) + 1 if leaf in ranked else None,
                    "bm25_rank": lexical.index(leaf) + 1 if leaf in lexical else None,
                    "cosine_rank": semantic.index(leaf) + 1 if leaf in semantic else None,
                    "session_rank": in_session.index(leaf) + 1 if leaf in in_session else None,
                    "session_in_top10": session in top_sessions,
                    "shares_entity_with_top10": sorted(shared),
                    "entity_named_by_question": sorted(named),
                    "said_by_subject": bool(subject) and speaker_of.get(leaf) in subject,
                    "question_has_subject": bool(subject),
                    "other_evidence_found": sum(text_of[o] in text for o in q.evidence if o != e),
                }
                rows.append(row)
    finally:
        ctxmod.assemble = original
    return rows


def summarise(rows: list[dict[str, Any]]) -> str:
    out = []
    missed = [r for r in rows if not r["found"] and r.get("leaf")]
    got = [r for r in rows if r["found"]]
    out.append(f"evidence turns: {len(rows)}, found in context {len(got)}, missed {len(missed)}")
    for name, key, edges in (
        ("rank among the context's candidates", "pool_rank", (10, 25, 50, 128)),
        ("rank in the long fused ranking", "fused_rank", (25, 50, 128, 400, LONG)),
        ("rank in BM25 alone", "bm25_rank", (25, 128, 400, LONG)),
        ("rank in cosine alone", "cosine_rank", (25, 128, 400, LONG)),
        ("rank within its own session (fused)", "session_rank", (1, 2, 3, 5, 10, 1000)),
    ):
        counts = Counter(_bucket(r[key], edges) for r in missed)
        found_counts = Counter(_bucket(r.get(key), edges) for r in got if r.get("leaf"))
        keys = [*(f"<={e}" for e in edges), f">{edges[-1]}"]
        out.append(f"\n{name} (missed / found)")
        out.append(
            table(
                ["bucket", "missed", "found"],
                [
                    [k, counts.get(k, 0), found_counts.get(k, 0)]
                    for k in keys
                    if counts.get(k) or found_counts.get(k)
                ],
            )
        )

    def share(rs: list[dict[str, Any]], pred: Any) -> str:
        return f"{sum(1 for r in rs if pred(r))}/{len(rs)}"

    out.append("\nfacts about missed (vs found) evidence turns")
    facts = [
        ("its session holds one of the 10 best candidates", lambda r: r["session_in_top10"]),
        ("shares a non-speaker entity with the 10 best", lambda r: bool(r["shares_entity_with_top10"])),
        ("mentions an entity the question names", lambda r: bool(r["entity_named_by_question"])),
        ("the question names a subject", lambda r: r["question_has_subject"]),
        ("said by the question's subject", lambda r: r["said_by_subject"]),
        ("another evidence turn of the question was found", lambda r: r["other_evidence_found"] > 0),
        ("best of its own session (fused)", lambda r: r["session_rank"] == 1),
        ("in its session's best 3 (fused)", lambda r: (r["session_rank"] or 99) <= 3),
    ]
    found_leaf = [r for r in got if r.get("leaf")]
    out.append(
        table(
            ["fact", "missed", "found"],
            [[name, share(missed, f), share(found_leaf, f)] for name, f in facts],
        )
    )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("vaults", type=Path, help="the --keep folder of bench/retrieval.py")
    parser.add_argument("--category", action="append", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--model", default="default")
    parser.add_argument("--embed-cache", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    data = json.loads(args.dataset.read_text(encoding="utf-8"))
    items = load_locomo(data) if data and "conversation" in data[0] else load_longmemeval(data)
    categories = set(args.category or {q.category for i in items for q in i.questions})
    items = [i for i in items if any(q.category in categories for q in i.questions)]
    items = items[: args.limit] if args.limit else items
    embedder = CachingEmbedder(load_embedder(args.model))
    embedder.load(args.embed_cache)
    rows: list[dict[str, Any]] = []
    for item in items:
        path = args.vaults / re.sub(r"[^A-Za-z0-9_-]", "_", item.key)
        if not path.exists():
            print(f"{item.key}: no vault at {path}", file=sys.stderr)
            continue
        vault = Vault.open(path, embedder=embedder)
        try:
            rows += analyse(vault, item, categories, args.budget)
        finally:
            vault.close()
        print(f"  {item.key}: {len(rows)} evidence turns so far", file=sys.stderr)
    print(summarise(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
