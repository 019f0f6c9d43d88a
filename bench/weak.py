"""How strong is the evidence behind a hit? Measures what separates true hits from hits for unrelated queries.

    python bench/weak.py LOCOMO.json [LONGMEMEVAL.json] [--lme-limit N] [--embed-cache FILE.npz]

Each LoCoMo conversation (and each of the first N LongMemEval haystacks) is ingested into a fresh vault
through the public API and embedded with the configured model (all-MiniLM-L6-v2). Then three kinds of
query are asked:
- **own**: the dataset's questions against their own conversation; the evidence turns are true matches;
- **off-topic**: questions written for this benchmark about things no conversation mentions (below);
- **cross**: the other dataset's questions (LongMemEval's against LoCoMo and the other way round): mostly
  unrelated, sometimes near a real topic, so reported apart.
For every hit in the top 10 (and every evidence turn): its cosine to the query, whether a content word of
the query matched it (the word index, as search uses it) and the hit's ``weak`` flag. The table gives the
cosine percentiles of each group and, for candidate rules, how often true evidence would be flagged weak
and how often an off-topic query would get only weak hits. A hit's cosine is the one search reports (by
the vector the leaves are ranked by: for a query naming a speaker, the name-free one); the rules on the
"whole-query cos" judge by the whole query's vector instead, so both are compared in one run. Datasets are
read in place, never copied.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import table
from retrieval import CachingEmbedder, Item, load_locomo, load_longmemeval, turn_records

from vaultmem import Vault
from vaultmem.embed import load_embedder
from vaultmem.search import content_terms

# Written for this benchmark: questions about things neither dataset talks about.
OFF_TOPIC = [
    "What is the boiling point of tungsten?",
    "How do I configure a BGP route reflector on a Juniper router?",
    "Which enzyme unwinds DNA during replication?",
    "What was the exchange rate of the Icelandic krona in 1998?",
    "How many moons does Neptune have?",
    "What is the torque spec for the cylinder head bolts on a 1987 Volvo 240?",
    "Explain the Byzantine generals problem",
    "Who won the 1954 World Chess Championship match?",
    "What is the recommended dose of amoxicillin for a cat?",
    "How do I rebase a Mercurial changeset onto another branch?",
    "What is the melting point of gallium arsenide?",
    "Which Roman emperor built the wall across northern Britain?",
    "How do I calculate the Schwarzschild radius of a neutron star?",
    "What does the Rust borrow checker say about two mutable references?",
    "What is the capital of Kyrgyzstan?",
    "How many bytes are in an IPv6 header?",
    "What is the half-life of carbon-14?",
    "Which opcode does the 6502 use for a relative branch?",
    "What is the average rainfall in Ulaanbaatar in July?",
    "How do I tune a PID controller with the Ziegler-Nichols method?",
    "What is the tax treatment of a Roth conversion in Nebraska?",
    "What is the chemical formula of malachite?",
    "How is the Kolmogorov complexity of a string defined?",
    "Which bacteria cause bovine tuberculosis?",
    "What gauge wire do I need for a 40 amp circuit?",
    "Who wrote the Treaty of Westphalia?",
    "What is the default port of a PostgreSQL replication slot?",
    "How many chromosomes does a potato have?",
    "What is the Mohs hardness of topaz?",
    "How do I compile a Fortran 77 program with gfortran?",
    "What is the orbital period of Halley's comet?",
    "Which alloy is used for the bells of a carillon?",
    "What is the population of Tuvalu?",
    "How does a Wankel rotary engine seal its chambers?",
    "What is the speed of sound in titanium?",
    "Which protocol does Kerberos use for ticket renewal?",
    "What is the pH of battery acid?",
    "How long is the Trans-Siberian railway?",
    "What was the first programming language with garbage collection?",
    "Which muscle flexes the elbow besides the biceps?",
]


def _matched_terms(vault: Vault, words: list[str], node: str) -> list[str]:
    """The content words of the query the node's word index holds."""
    out = []
    for w in words:
        row = vault.conn.execute(
            "SELECT 1 FROM fts_words f JOIN chunks c ON c.rowid = f.rowid WHERE fts_words MATCH ? AND c.id = ?",
            ['"' + w.replace('"', '""') + '"', node],
        ).fetchone()
        if row:
            out.append(w)
    return out


def run_vault(
    item: Item, queries: dict[str, list[tuple[str, list[str]]]], embedder: CachingEmbedder, workdir: Path
) -> list[dict[str, Any]]:
    """Ask every group of queries against ``item``'s vault; one row per (query, hit or evidence)."""
    path = workdir / re.sub(r"[^A-Za-z0-9_-]", "_", item.key)
    rows: list[dict[str, Any]] = []
    with Vault.init(path, embedder=embedder) as vault:
        vault.ingest_messages(turn_records(item), source="bench")
        vault.flush()
        by_msg = {
            json.loads(r["message_ids"])[0]: r["id"]
            for r in vault.conn.execute("SELECT id, message_ids FROM chunks WHERE kind = 'leaf'")
        }
        searcher = vault.searcher
        for group, qs in queries.items():
            for text, evidence in qs:
                hits = vault.search(text, k=10)  # each with its evidence and weak flag
                ev_ids = [by_msg[e] for e in evidence if e in by_msg]
                top = {h.id: n for n, h in enumerate(hits, 1)}
                rest = [i for i in ev_ids if i not in top]
                judged = hits + searcher.evidence(text, searcher.hits([(i, 0.0, None, None) for i in rest]))
                words, _ = content_terms(text)
                counts = {h.id: len(_matched_terms(vault, words, h.id)) for h in judged}
                qv = searcher.judging_vector(vault.embedder, text)
                cache = searcher.vectors(vault.embedder)
                sims = cache.matrix @ qv
                mean, std = float(sims.mean()), float(sims.std()) or 1.0
                # The whole query's vector (names and all): how hits were judged before a query naming a
                # speaker was judged by its name-free vector, for the before/after rules in one run.
                whole = cache.matrix @ searcher.query_vector(vault.embedder, text)
                for h in judged:
                    pos = cache.pos.get(h.id)
                    rows.append(
                        {
                            "group": group,
                            "query": text,
                            "rank": top.get(h.id),
                            "evidence": h.id in ev_ids,
                            "weak": h.weak,
                            "cos": h.cosine,
                            "cos_whole": None if pos is None else float(whole[pos]),
                            "z": None if h.cosine is None else (h.cosine - mean) / std,
                            "words": counts[h.id],
                            "terms": len(words),
                            "coverage": h.coverage,
                        }
                    )
    return rows


def summarise(rows: list[dict[str, Any]], label: str) -> str:
    out = [f"\n{label}: cosine to the query (percentiles) and share with a content word matched"]
    groups = {
        "own: evidence turns in the top 10": [
            r for r in rows if r["group"] == "own" and r["evidence"] and r["rank"]
        ],
        "own: evidence turns (anywhere)": [r for r in rows if r["group"] == "own" and r["evidence"]],
        "own: top-1 hit": [r for r in rows if r["group"] == "own" and r["rank"] == 1],
        "off-topic: top-1 hit": [r for r in rows if r["group"] == "off" and r["rank"] == 1],
        "off-topic: top-10 hits": [r for r in rows if r["group"] == "off" and r["rank"]],
        "cross: top-1 hit": [r for r in rows if r["group"] == "cross" and r["rank"] == 1],
    }
    body = []
    for name, rs in groups.items():
        cos = np.array([r["cos"] for r in rs if r["cos"] is not None])
        if not len(cos):
            continue
        p = np.percentile(cos, [5, 25, 50, 75, 95])
        words = np.mean([r["words"] > 0 for r in rs])
        zs = [r["z"] for r in rs if r.get("z") is not None]
        z50 = f"{np.median(zs):.1f}" if zs else "-"
        body.append([name, len(rs), *(f"{x:.3f}" for x in p), z50, f"{words:.2f}"])
    out.append(table(["group", "n", "p5", "p25", "p50", "p75", "p95", "z p50", "word matched"], body))
    # Candidate rules: a hit is weak when ...
    rules: dict[str, Callable[[dict[str, Any]], bool]] = {}

    def below(key: str, t: float) -> Callable[[dict[str, Any]], bool]:
        return lambda r: r[key] is None or r[key] < t

    def no_word(rule: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], bool]:
        return lambda r: r["words"] == 0 and rule(r)

    def low_coverage(c: float, rule: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], bool]:
        return lambda r: (r["coverage"] or 0) < c and rule(r)

    for tau in (0.15, 0.2, 0.25, 0.3, 0.35, 0.4):
        rules[f"cos < {tau}"] = below("cos", tau)
        rules[f"no word and cos < {tau}"] = no_word(below("cos", tau))
    rules["no word"] = lambda r: r["words"] == 0
    for c0 in (0.3, 0.5, 0.7):
        for tau in (0.25, 0.3, 0.35):
            rules[f"coverage < {c0} and cos < {tau}"] = low_coverage(c0, below("cos", tau))
    for z0 in (3.0, 4.0, 5.0):
        rules[f"no word and z < {z0}"] = no_word(below("z", z0))
    for tau in (0.25, 0.3, 0.35):
        rules[f"coverage < 0.5 and whole-query cos < {tau}"] = low_coverage(0.5, below("cos_whole", tau))
    rules["search's weak flag (shipped)"] = lambda r: bool(r["weak"])
    body = []
    ev_top = groups["own: evidence turns in the top 10"]
    by_query: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["rank"]:
            by_query[(r["group"], r["query"])].append(r)
    for name, rule in rules.items():
        ev_weak = np.mean([rule(r) for r in ev_top]) if ev_top else float("nan")

        def all_weak(group: str, rule: Callable[[dict[str, Any]], bool] = rule) -> float:
            qs = [hs for (g, _), hs in by_query.items() if g == group]
            return float(np.mean([all(rule(h) for h in hs) for hs in qs])) if qs else float("nan")

        def top1_weak(group: str, rule: Callable[[dict[str, Any]], bool] = rule) -> float:
            qs = [min(hs, key=lambda h: h["rank"]) for (g, _), hs in by_query.items() if g == group]
            return float(np.mean([rule(h) for h in qs])) if qs else float("nan")

        body.append(
            [
                name,
                f"{ev_weak:.3f}",
                f"{top1_weak('own'):.3f}",
                f"{all_weak('own'):.3f}",
                f"{top1_weak('off'):.3f}",
                f"{all_weak('off'):.3f}",
                f"{all_weak('cross'):.3f}",
            ]
        )
    out.append(
        "\nrules: share of true evidence (in the top 10) flagged weak; share of queries whose top hit is weak /"
        " whose 10 hits are all weak"
    )
    out.append(
        table(
            [
                "a hit is weak when",
                "own evidence weak",
                "own top-1 weak",
                "own all weak",
                "off top-1 weak",
                "off all weak",
                "cross all weak",
            ],
            body,
        )
    )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("longmemeval", type=Path, nargs="?")
    parser.add_argument("--lme-limit", type=int, default=10)
    parser.add_argument("--locomo-limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--embed-cache", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the raw rows here (JSON)")
    args = parser.parse_args()
    locomo = load_locomo(json.loads(args.locomo.read_text(encoding="utf-8")))[: args.locomo_limit]
    lme = (
        load_longmemeval(json.loads(args.longmemeval.read_text(encoding="utf-8")))[: args.lme_limit]
        if args.longmemeval
        else []
    )
    embedder = CachingEmbedder(load_embedder("default"))
    if args.embed_cache and args.embed_cache.exists():
        cached = np.load(args.embed_cache, allow_pickle=False)
        embedder.memo.update(zip(cached["texts"].tolist(), cached["vectors"], strict=True))
    off: list[tuple[str, list[str]]] = [(q, []) for q in OFF_TOPIC]
    lme_questions: list[tuple[str, list[str]]] = [(q.text, []) for it in lme for q in it.questions]
    results: dict[str, list[dict[str, Any]]] = {"locomo": [], "longmemeval": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n, item in enumerate(locomo, 1):
            own = [(q.text, q.evidence) for q in item.questions if q.category != "5"]
            results["locomo"] += run_vault(
                item, {"own": own, "off": off, "cross": lme_questions}, embedder, Path(tmp)
            )
            print(f"  locomo [{n}/{len(locomo)}] {item.key}", file=sys.stderr)
        every = load_locomo(json.loads(args.locomo.read_text(encoding="utf-8")))
        cross: list[tuple[str, list[str]]] = [(q.text, []) for it in every[:1] for q in it.questions[:40]]
        for n, item in enumerate(lme, 1):
            own = [(q.text, q.evidence) for q in item.questions]
            results["longmemeval"] += run_vault(
                item, {"own": own, "off": off, "cross": cross}, embedder, Path(tmp)
            )
            print(f"  longmemeval [{n}/{len(lme)}] {item.key}", file=sys.stderr)
    if args.embed_cache:
        texts = list(embedder.memo)
        np.savez(args.embed_cache, texts=np.array(texts), vectors=np.stack([embedder.memo[t] for t in texts]))
    if args.out:
        args.out.write_text(json.dumps(results), encoding="utf-8")
    for name, rows in results.items():
        if rows:
            print(summarise(rows, name))


if __name__ == "__main__":
    main()
