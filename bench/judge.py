"""A learned judge at the context budget's edge, fitted and checked on held-out data (issue 19).

    python bench/judge.py DATASET DIR [--other DATASET2 DIR2] [--embed-cache FILE] [--budgets 1024,2048]
        [--modes tail10,h25w200,whole] [--drop subj,other_subj] [--limit N] [--out FILE.json]

DIR holds vaults ``bench/retrieval.py --keep`` built (as for ``bench/variants.py``). For every question
with evidence and every budget, the candidates ``Vault.context`` hands to ``context.assemble`` are
captured, and each candidate gets a row of features retrieval already computes (``judge.FEATURES``: its rank,
RRF score against the first one, the word and vector lists' ranks, its cosine and idf-weighted coverage
from ``Searcher.evidence``, whether it is a neighbour of a better-ranked candidate, whether it shares a
session with the top 5, whether the question's subject said it, its size) and a label: it holds an
evidence turn. A logistic regression (scikit-learn) is fitted on the smallest budget's pools (a question
counts once) and the pools are re-ordered by it: past the first 10 (``tail10``), inside a window
(``h20w200``: ranks 21-200), after what the shipped order fills in a share of the budget (``f0.8``), or
whole (``whole``). ``context.assemble`` is replayed on the new order and the evidence counted in the
context, as in ``bench/retrieval.py``.

Reported, from one run: held-out folds on DATASET (leave one conversation out with up to 10 of them, as
LoCoMo's; otherwise 5 folds of the haystacks, as LongMemEval's one question each), the fitted weights per
fold (weights that swing between folds fit questions, not a mechanism), and with ``--other`` a model
trained on DATASET scoring DATASET2 and the reverse. The replay of the captured pools in their shipped
order is asserted to equal the live contexts. Nothing is written to the vaults' files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

sys.path.insert(0, str(Path(__file__).parent))
from _common import table
from retrieval import CachingEmbedder, _norm, load_locomo, load_longmemeval

from vaultmem import Vault
from vaultmem import context as ctxmod
from vaultmem.embed import load_embedder
from vaultmem.judge import FEATURES, features
from vaultmem.search import Hit


@dataclass
class Pool:
    """One question's candidates at one budget, as ``assemble`` received them."""

    group: str  # the conversation (LoCoMo) or haystack (LongMemEval): the fold
    qid: str
    category: str
    query: str
    budget: int
    hits: list[Hit]
    ancestors: Mapping[str, tuple[str, ...]] | None
    evidence: list[str]  # the evidence turns' normalised texts
    shipped: float  # share of the evidence in the live context
    x: np.ndarray  # candidates x FEATURES
    label: np.ndarray  # candidate holds an evidence turn


def collect(dataset: Path, root: Path, cache: Path | None, budgets: Sequence[int], limit: int) -> list[Pool]:
    data = json.loads(dataset.read_text())
    items = load_locomo(data) if "conversation" in data[0] else load_longmemeval(data)
    embedder = CachingEmbedder(load_embedder("default"))
    if cache is not None and cache.exists():
        embedder.load(cache)
    pools: list[Pool] = []
    original = ctxmod.assemble
    captured: list[tuple[list[Hit], Mapping[str, tuple[str, ...]] | None]] = []

    def capture(query: str, hits: Any, budget_tokens: int, ancestors: Any = None, **options: Any) -> Any:
        captured.append((list(hits), ancestors))
        return original(query, hits, budget_tokens, ancestors, **options)

    for item in items:
        path = root / re.sub(r"[^A-Za-z0-9_-]", "_", item.key)
        if not path.exists():
            continue
        vault = Vault.open(path, embedder=embedder)
        text_of = {t.id: _norm(t.text) for t in item.turns}
        order = vault.searcher.leaf_structures()[1]
        try:
            for q in item.questions[: limit or None]:
                if not q.evidence:
                    continue
                wanted = set(q.evidence)
                subject = vault.searcher._speakers.subject(q.text)
                for budget in budgets:
                    ctxmod.assemble = capture
                    try:
                        ctx = vault.context(q.text, budget, now=q.asked)
                    finally:
                        ctxmod.assemble = original
                    hits, anc = captured[-1]
                    judged = vault.searcher.evidence(q.text, hits)
                    evidence = [text_of[e] for e in q.evidence]
                    text = _norm(ctx.text)
                    pools.append(
                        Pool(
                            item.key,
                            q.qid,
                            str(q.category),
                            q.text,
                            budget,
                            hits,
                            anc,
                            evidence,
                            sum(e in text for e in evidence) / len(evidence),
                            features(judged, order.neighbors, subject),
                            np.array([bool(wanted & set(h.message_ids)) for h in hits]),
                        )
                    )
        finally:
            vault.close()
        print(f"  {item.key}: {len(pools)} pools", file=sys.stderr, flush=True)
    return pools


Model = tuple[list[int], np.ndarray, float]  # feature columns, weights on the raw features, intercept


def fit(pools: Sequence[Pool], drop: Sequence[str]) -> Model:
    """Logistic regression on the 1,024-token pools (the smallest budget's, so a question counts once),
    on standardised features; returned as weights on the raw features."""
    cols = [j for j, name in enumerate(FEATURES) if name not in drop]
    train = [p for p in pools if p.budget == min(q.budget for q in pools)]
    x = np.vstack([p.x[:, cols] for p in train])
    y = np.concatenate([p.label for p in train])
    mu, sd = x.mean(0), x.std(0) + 1e-9
    model = LogisticRegression(C=1.0, max_iter=2000).fit((x - mu) / sd, y)
    w = model.coef_[0] / sd
    return cols, w, float(model.intercept_[0] - (mu * w).sum())


def reorder(pool: Pool, model: Model, mode: str) -> list[Hit]:
    cols, w, b = model
    s = pool.x[:, cols] @ w + b
    idx = list(range(len(pool.hits)))
    if mode.startswith("f"):  # f0.8: what the shipped order fills in 80% of the budget stays, first
        share = ctxmod.assemble(pool.query, pool.hits, int(float(mode[1:]) * pool.budget), pool.ancestors)
        keep = sorted(item.rank - 1 for item in share.items)
        rest = sorted(set(idx) - set(keep), key=lambda i: (-s[i], i))
        return [pool.hits[i] for i in [*keep, *rest]]
    if mode == "whole":
        head, end = 0, len(idx)
    elif mode.startswith("tail"):
        head, end = int(mode[4:]), len(idx)
    else:  # h10w30: ranks 11-30 re-ordered, the rest in place
        head, end = (int(v) for v in mode[1:].split("w"))
    new = idx[:head] + sorted(idx[head:end], key=lambda i: (-s[i], i)) + idx[end:]
    return [pool.hits[i] for i in new]


def covered(pool: Pool, hits: Sequence[Hit]) -> float:
    text = _norm(ctxmod.assemble(pool.query, hits, pool.budget, pool.ancestors).text)
    return sum(e in text for e in pool.evidence) / len(pool.evidence)


def report(title: str, pools: Sequence[Pool], scores: Mapping[str, Mapping[tuple[str, int], float]]) -> None:
    cats = sorted({p.category for p in pools})
    base = scores["shipped"]
    rows = []
    for name, got in scores.items():
        for budget in sorted({p.budget for p in pools}):
            per: dict[str, list[float]] = defaultdict(list)
            up = down = 0
            for p in pools:
                if p.budget != budget:
                    continue
                key = (p.qid, budget)
                per[p.category].append(got[key])
                per["all"].append(got[key])
                up += got[key] > base[key] + 1e-9
                down += got[key] < base[key] - 1e-9
            rows.append([name, budget, *(f"{np.mean(per[c]):.3f}" for c in ["all", *cats]), f"{up} / {down}"])
    print(f"\n{title}")
    print(table(["variant", "budget", "all", *cats, "up / down"], rows))


def evaluate(
    train: Sequence[Pool], test: Sequence[Pool], modes: Sequence[str], drop: Sequence[str]
) -> tuple[dict[str, dict[tuple[str, int], float]], Model]:
    model = fit(train, drop)
    scores: dict[str, dict[tuple[str, int], float]] = {"shipped": {}}
    for p in test:
        scores["shipped"][(p.qid, p.budget)] = p.shipped
        for mode in modes:
            scores.setdefault(mode, {})[(p.qid, p.budget)] = covered(p, reorder(p, model, mode))
    return scores, model


def weights_table(models: Mapping[str, Model]) -> str:
    rows = []
    for j, name in enumerate(FEATURES):
        row: list[Any] = [name]
        for cols, w, _ in models.values():
            row.append(f"{w[cols.index(j)]:.2f}" if j in cols else "-")
        rows.append(row)
    return table(["feature", *models], rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", type=Path)
    parser.add_argument("vaults", type=Path)
    parser.add_argument("--other", nargs=2, type=Path, metavar=("DATASET2", "DIR2"))
    parser.add_argument("--embed-cache", type=Path, help="read only (never written)")
    parser.add_argument("--other-embed-cache", type=Path)
    parser.add_argument("--budgets", default="1024,2048")
    parser.add_argument("--modes", default="tail10,h20w200,h25w200,f0.8,whole")
    parser.add_argument("--drop", default="", help="features left out (comma-separated)")
    parser.add_argument("--limit", type=int, default=0, help="questions per conversation/haystack")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    modes = args.modes.split(",")
    drop = [d for d in args.drop.split(",") if d]
    pools = collect(args.dataset, args.vaults, args.embed_cache, budgets, args.limit)
    other = (
        collect(args.other[0], args.other[1], args.other_embed_cache, budgets, args.limit)
        if args.other
        else []
    )
    for p in [*pools, *other]:
        assert abs(covered(p, p.hits) - p.shipped) < 1e-9, f"replay differs from the live context: {p.qid}"
    groups = sorted({p.group for p in pools})
    folds = [[g] for g in groups] if len(groups) <= 10 else [groups[i::5] for i in range(5)]
    held: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
    models: dict[str, Model] = {}
    for fold in folds:
        scores, model = evaluate(
            [p for p in pools if p.group not in fold], [p for p in pools if p.group in fold], modes, drop
        )
        models[fold[0] if len(fold) == 1 else f"fold {len(models) + 1}"] = model
        for name, got in scores.items():
            held[name].update(got)
    report(f"{args.dataset.name}: held-out folds ({len(folds)})", pools, held)
    cols, w, b = models["all"] = fit(pools, drop)
    print(f"\nFitted on every pool of {args.dataset.name} (judge.WEIGHTS, judge.INTERCEPT = {b:.4f}):")
    print("\n".join(f'    "{FEATURES[c]}": {v:.4f},' for c, v in zip(cols, w, strict=True)))
    print("\nWeights per fold (raw features; the intercept left out)")
    print(weights_table(models))
    out: dict[str, Any] = {
        "held_out": {k: {f"{q}@{b}": v for (q, b), v in s.items()} for k, s in held.items()}
    }
    if other:
        for train, test, name in (
            (pools, other, "trained on DATASET, scored on DATASET2"),
            (other, pools, "the reverse"),
        ):
            scores, model = evaluate(train, test, modes, drop)
            report(name, test, scores)
            models[name] = model
        print(weights_table({k: models[k] for k in list(models)[-2:]}))
    out["weights"] = {
        k: {FEATURES[c]: float(v) for c, v in zip(m[0], m[1], strict=True)} for k, m in models.items()
    }
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
