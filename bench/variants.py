"""Retrieval settings compared question by question on vaults ``bench/retrieval.py --keep`` built (issue 19).

    python bench/retrieval.py DATASET --compact --keep DIR ...      # builds the vaults once
    python bench/variants.py DATASET DIR --variants shipped,flat,noname [--category 1] [--limit N]
        [--embed-cache FILE] [--out FILE.json]

Every question is asked once per variant, the variants taking turns in a rotating order (so the load of a
shared machine falls on all of them alike), each with its settings set before and restored after. Reported
per variant, from that one run: evidence recall@5/10/25 over ``Vault.search``'s hits, recall within
512/1,024/2,048 tokens of ``Vault.context`` (an evidence turn counts when its text is in the context
verbatim, as in ``bench/retrieval.py``), C@1024 per category, and search and context(1024) p50. The same
vaults, vectors and questions for every variant; nothing is written to the vaults' files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import table
from retrieval import BUDGETS, KS, CachingEmbedder, _norm, load_locomo, load_longmemeval

from vaultmem import Vault
from vaultmem import context as ctxmod
from vaultmem import search as searchmod
from vaultmem.embed import load_embedder


@contextmanager
def _attr(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# name -> (vault -> the settings, as a context manager); "mode" is read by the runner, not set here.
Setting = Callable[[Vault], AbstractContextManager[None]]
VARIANTS: dict[str, Setting] = {
    "shipped": lambda v: _nothing(),
    "speaker-off": lambda v: _attr(v.searcher, "speaker_boost", 0.0),
    "graph-off": lambda v: _attr(v.searcher, "graph_weight", 0.0),
}
MODES = {"flat": "flat", "walk": "walk", "collapsed": "collapsed"}


def _part(part: str) -> Setting:
    if part in VARIANTS:
        return VARIANTS[part]
    if "=" in part:
        key, raw = part.split("=", 1)
        value = float(raw)

        def setting(v: Vault) -> AbstractContextManager[None]:
            for target in (v.searcher, searchmod, ctxmod):
                if hasattr(target, key):
                    return _attr(target, key, type(getattr(target, key))(value))
            raise SystemExit(f"no setting {key!r}")

        return setting
    raise SystemExit(f"unknown variant {part!r}; one of {', '.join([*VARIANTS, *MODES])} or key=value")


def _variant(name: str) -> tuple[Setting, str | None]:
    """``name``: parts joined by "+", each a registered variant, a context mode or ``key=value`` (a
    Searcher attribute or a search/context module constant), e.g. ``flat+unnamed_query=0.5``."""
    mode = None
    settings: list[Setting] = []
    for part in name.split("+"):
        if part in MODES:
            mode = MODES[part]
        else:
            settings.append(_part(part))

    @contextmanager
    def combined(v: Vault) -> Iterator[None]:
        with ExitStack() as stack:
            for setting in settings:
                stack.enter_context(setting(v))
            yield

    return combined, mode


def run(
    items: list[Any],
    vaults: Path,
    embedder: CachingEmbedder,
    names: list[str],
    categories: set[str] | None,
    log: Callable[[str], None],
    budgets: tuple[int, ...] = BUDGETS,
) -> dict[str, Any]:
    variants = {n: _variant(n) for n in names}
    scores: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    latency: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    per_question: list[dict[str, Any]] = []
    turn = 0
    for item in items:
        path = vaults / re.sub(r"[^A-Za-z0-9_-]", "_", item.key)
        if not path.exists():
            log(f"{item.key}: no vault at {path}")
            continue
        vault = Vault.open(path, embedder=embedder)
        text_of = {t.id: _norm(t.text) for t in item.turns}
        try:
            for q in item.questions:
                if not q.evidence or (categories and q.category not in categories):
                    continue
                row: dict[str, Any] = {"qid": q.qid, "category": q.category}
                order = names[turn % len(names) :] + names[: turn % len(names)]
                turn += 1
                for name in order:
                    setting, mode = variants[name]
                    with setting(vault):
                        t0 = time.perf_counter()
                        hits = vault.search(q.text, k=max(KS), now=q.asked)
                        latency[name]["search"].append(time.perf_counter() - t0)
                        got: dict[str, float] = {}
                        for k in KS:
                            found = {m for h in hits[:k] for m in h.message_ids}
                            got[f"R@{k}"] = sum(e in found for e in q.evidence) / len(q.evidence)
                        for budget in budgets:
                            t0 = time.perf_counter()
                            text = _norm(vault.context(q.text, budget, mode=mode, now=q.asked).text)
                            if budget == 1024:
                                latency[name]["context"].append(time.perf_counter() - t0)
                            got[f"C@{budget}"] = sum(text_of[e] in text for e in q.evidence) / len(q.evidence)
                    for cat in (q.category, "all", *q.groups):
                        for metric, value in got.items():
                            scores[(name, cat)][metric].append(value)
                    row[name] = got
                per_question.append(row)
        finally:
            vault.close()
        log(f"  {item.key}: {len(per_question)} questions so far")
    return {
        "scores": scores,
        "latency": latency,
        "per_question": per_question,
        "names": names,
        "budgets": budgets,
    }


def report(result: dict[str, Any]) -> str:
    scores, latency, names = result["scores"], result["latency"], result["names"]
    cats = sorted({c for _, c in scores if c != "all" and ":" not in c}, key=lambda c: (len(c), c))
    groups = sorted({c for _, c in scores if ":" in c})
    metrics = [f"R@{k}" for k in KS] + [f"C@{b}" for b in result["budgets"]]
    out = [f"\n{len(result['per_question'])} questions with evidence"]
    rows = []
    for name in names:
        s = scores[(name, "all")]
        lat = latency[name]
        rows.append(
            [
                name,
                *(f"{np.mean(s[m]):.3f}" for m in metrics),
                f"{1000 * np.percentile(lat['search'], 50):.1f}",
                f"{1000 * np.percentile(lat['context'], 50):.1f}",
            ]
        )
    out.append(table(["variant", *metrics, "search p50 ms", "context p50 ms"], rows))
    for metric in [m for m in ("C@1024", "C@2048") if m in metrics]:
        out.append(f"\n{metric} per category (n) and evidence group")
        head = [f"{c} ({len(scores[(names[0], c)][metric])})" for c in [*cats, *groups]]
        rows = [
            [name, *(f"{np.mean(scores[(name, c)][metric]):.3f}" for c in [*cats, *groups])] for name in names
        ]
        out.append(table(["variant", *head], rows))
    if len(names) > 1:
        base = names[0]
        out.append(f"\nquestions whose C@1024 moved against {base} (up / down)")
        rows = []
        for name in names[1:]:
            up = sum(r[name]["C@1024"] > r[base]["C@1024"] for r in result["per_question"])
            down = sum(r[name]["C@1024"] < r[base]["C@1024"] for r in result["per_question"])
            rows.append([name, up, down])
        out.append(table(["variant", "up", "down"], rows))
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("vaults", type=Path, help="the --keep folder of bench/retrieval.py")
    parser.add_argument("--variants", default="shipped", help="comma-separated; the first is the base")
    parser.add_argument("--category", action="append", default=None)
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations / haystacks")
    parser.add_argument("--model", default="default")
    parser.add_argument("--embed-cache", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--budgets",
        default=",".join(map(str, BUDGETS)),
        help="context budgets, comma-separated (1024 needed)",
    )
    args = parser.parse_args()
    data = json.loads(args.dataset.read_text(encoding="utf-8"))
    items = load_locomo(data) if data and "conversation" in data[0] else load_longmemeval(data)
    items = items[: args.limit] if args.limit else items
    embedder = CachingEmbedder(load_embedder(args.model))
    embedder.load(args.embed_cache)
    names = [n for n in args.variants.split(",") if n]
    result = run(
        items,
        args.vaults,
        embedder,
        names,
        set(args.category) if args.category else None,
        lambda m: print(m, file=sys.stderr),
        tuple(int(b) for b in args.budgets.split(",")),
    )
    print(report(result))
    if args.out:
        args.out.write_text(
            json.dumps({"per_question": result["per_question"], "names": names}, indent=1), encoding="utf-8"
        )


if __name__ == "__main__":
    main()
