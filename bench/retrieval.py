"""Retrieval benchmark on LoCoMo or LongMemEval (format detected), with flat baselines in the same run.

    python bench/retrieval.py DATASET_PATH [--out FILE.json] [--limit N] [--per-category N] [--category C]
        [--model default] [--compact]

Each conversation (LoCoMo) or question haystack (LongMemEval) is ingested into a fresh vault through the
public API, one message per turn with its id, speaker/role, session and timestamp; the queue is run;
then every question is asked. Reported per category and overall:
- evidence recall@5/10/25 over leaf hits (via message-id provenance), beside the mean tokens of those hits;
- recall within 512/1024/2048 tokens of assembled context (an evidence turn counts only if its text
  appears verbatim in the context; whitespace normalised on both sides);
- session recall@10; search and context latency p50/p95; ingest and embedding time.
Baselines over single turns, same tokenizer and token counting: BM25, MiniLM cosine, and their
reciprocal-rank fusion; their context is the top turns in rank order, one per line, within the budget.
Datasets are read in place and never copied.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import table

from vaultmem import Vault
from vaultmem.embed import Embedder, Remembering, load_embedder
from vaultmem.tokens import count_tokens

KS = (5, 10, 25)
BUDGETS = (512, 1024, 2048)


@dataclass
class Turn:
    id: str
    session: str
    speaker: str | None
    role: str | None
    text: str
    ts: datetime


@dataclass
class Question:
    qid: str
    text: str
    category: str
    evidence: list[str]
    evidence_sessions: set[str]
    asked: datetime | None = None  # when the question is asked (LongMemEval's question_date), if known

    @property
    def groups(self) -> tuple[str, ...]:
        """The breakdowns this question counts in besides its category: evidence turns and sessions."""
        n, s = len(self.evidence), len(self.evidence_sessions)
        if not n:
            return ()
        return (f"ev:{min(n, 3)}{'+' if n >= 3 else ''}", f"sess:{min(s, 2)}{'+' if s >= 2 else ''}")


@dataclass
class Item:
    key: str
    turns: list[Turn]
    questions: list[Question]


# -- loaders --------------------------------------------------------------------------------------

_LOCOMO_DT = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm) on (\d{1,2}) (\w+),? (\d{4})", re.I)
_EVIDENCE_RE = re.compile(r"D:?(\d+):0*(\d+)")


def _locomo_time(text: str) -> datetime:
    m = _LOCOMO_DT.search(text)
    if not m:
        raise ValueError(f"unparsed LoCoMo date {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime.strptime(f"{day} {month} {year}", "%d %B %Y").replace(
        hour=h, minute=int(minute), tzinfo=UTC
    )


def load_locomo(data: list[dict[str, Any]]) -> list[Item]:
    items = []
    for sample in data:
        conv = sample["conversation"]
        turns: list[Turn] = []
        sessions = sorted((int(k.split("_")[1]), k) for k in conv if re.fullmatch(r"session_\d+", k))
        for n, key in sessions:
            start = _locomo_time(conv[f"{key}_date_time"])
            for i, t in enumerate(conv[key]):
                text = t["text"]
                if t.get("blip_caption"):
                    text = f"{text} [shared an image: {t['blip_caption']}]"
                turns.append(
                    Turn(t["dia_id"], f"session_{n}", t["speaker"], None, text, start + timedelta(seconds=i))
                )
        ids = {t.id for t in turns}
        norm = {
            f"D{m.group(1)}:{int(m.group(2))}": t.id for t in turns if (m := _EVIDENCE_RE.fullmatch(t.id))
        }
        questions = []
        for qi, qa in enumerate(sample["qa"]):
            evidence = []
            for raw in qa.get("evidence", []):
                for part in re.split(r"[;,\s]+", str(raw)):
                    m = _EVIDENCE_RE.fullmatch(part.strip())
                    if m:
                        tid = norm.get(f"D{m.group(1)}:{int(m.group(2))}")
                        if tid in ids and tid not in evidence:
                            evidence.append(tid)
            sess = {f"session_{t.split(':')[0][1:]}" for t in evidence}
            questions.append(
                Question(f"{sample['sample_id']}-{qi}", qa["question"], str(qa["category"]), evidence, sess)
            )
        items.append(Item(str(sample["sample_id"]), turns, questions))
    return items


def _lme_time(text: str) -> datetime:
    """LongMemEval's ``2023/05/30 (Tue) 22:52``."""
    return datetime.strptime(text.split(" (")[0] + " " + text.split(") ")[-1], "%Y/%m/%d %H:%M").replace(
        tzinfo=UTC
    )


def load_longmemeval(data: list[dict[str, Any]]) -> list[Item]:
    items = []
    for q in data:
        turns: list[Turn] = []
        # Opaque session names: the dataset's ids mark the evidence sessions ("answer_...").
        names = {sid: f"S{i:03d}" for i, sid in enumerate(q["haystack_session_ids"])}
        evidence: list[str] = []
        for sid, date, session in zip(
            q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"], strict=True
        ):
            start = _lme_time(date)
            for i, t in enumerate(session):
                tid = f"{names[sid]}:{i}"
                turns.append(
                    Turn(tid, names[sid], None, t["role"], t["content"], start + timedelta(seconds=i))
                )
                if t.get("has_answer"):
                    evidence.append(tid)
        sess = {names[s] for s in q["answer_session_ids"] if s in names}
        asked = _lme_time(q["question_date"])
        items.append(
            Item(
                q["question_id"],
                turns,
                [Question(q["question_id"], q["question"], q["question_type"], evidence, sess, asked)],
            )
        )
    return items


# -- baselines ------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"\w+")


class BM25:
    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.docs = [Counter(_TOKEN_RE.findall(d.lower())) for d in docs]
        self.lens = np.array([sum(c.values()) for c in self.docs], dtype=np.float64)
        self.avg = float(self.lens.mean()) if len(self.docs) else 0.0
        df: Counter[str] = Counter()
        for c in self.docs:
            df.update(c.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def rank(self, query: str) -> list[int]:
        terms = set(_TOKEN_RE.findall(query.lower()))
        scores = np.zeros(len(self.docs))
        for i, c in enumerate(self.docs):
            s = 0.0
            for t in terms:
                f = c.get(t)
                if f:
                    s += (
                        self.idf[t]
                        * f
                        * (self.k1 + 1)
                        / (f + self.k1 * (1 - self.b + self.b * self.lens[i] / self.avg))
                    )
            scores[i] = s
        order = np.argsort(-scores, kind="stable")
        return [int(i) for i in order if scores[i] > 0]


def rrf(*rankings: list[int], k: int = 60) -> list[int]:
    score: dict[int, float] = defaultdict(float)
    for ranking in rankings:
        for r, i in enumerate(ranking, 1):
            score[i] += 1 / (k + r)
    return [i for i, _ in sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))]


def flat_context(texts: Sequence[str], ranking: Sequence[int], budget: int) -> str:
    """Baseline context: top turns in rank order, one per line, as long as the whole fits."""
    lines: list[str] = []
    used = 0
    for i in ranking:
        cost = count_tokens(texts[i])
        if used + cost > budget:
            continue
        lines.append(texts[i])
        used += cost
    return "\n".join(lines)


# -- metrics --------------------------------------------------------------------------------------


def _norm(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Scores:
    rows: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, value: float) -> None:
        self.rows[name].append(value)

    def mean(self, name: str) -> float:
        values = self.rows.get(name, [])
        return float(np.mean(values)) if values else float("nan")


class CachingEmbedder(Remembering):
    """The real model with a memo of identical texts (LongMemEval haystacks share many sessions), kept
    whole (no size bound) and savable between runs; ``seconds`` spent in calls that embedded."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner, size=sys.maxsize)
        self.seconds = 0.0

    @property
    def memo(self) -> MutableMapping[str, np.ndarray]:
        """Text -> row, the memo itself (``bench/weak.py`` loads and saves it)."""
        return self._known

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        t0, before = time.perf_counter(), self.computed
        out = super().embed(texts)
        if self.computed > before:
            self.seconds += time.perf_counter() - t0
        return out

    def load(self, path: Path | None) -> None:
        """Take the memo kept by an earlier run (``--embed-cache``), when there is one."""
        if path and path.exists():
            cached = np.load(path, allow_pickle=False)
            self.memo.update(zip(cached["texts"].tolist(), cached["vectors"], strict=True))

    def save(self, path: Path | None) -> None:
        if path and self.memo:
            np.savez(path, texts=np.array(list(self.memo)), vectors=np.stack(list(self.memo.values())))


def turn_records(item: Item) -> list[dict[str, object]]:
    """A conversation's turns as the records ``Vault.ingest_messages`` takes."""
    return [
        {
            "id": t.id,
            "speaker": t.speaker,
            "role": t.role,
            "content": t.text,
            "ts": t.ts,
            "session": t.session,
        }
        for t in item.turns
    ]


def evaluate(
    items: list[Item],
    embedder: CachingEmbedder,
    workdir: Path,
    compact: bool,
    log: Callable[[str], None],
    reuse: bool = False,
    modes: tuple[str, ...] = (),
    use_asked: bool = True,
) -> dict[str, Any]:
    systems = ("vaultmem", "bm25", "minilm", "fusion", *(f"mode:{m}" for m in modes))
    lat_modes: dict[str, list[float]] = defaultdict(list)
    per: dict[tuple[str, str], Scores] = defaultdict(Scores)  # (system, category)
    lat_search: list[float] = []
    lat_context: list[float] = []
    timing: defaultdict[str, float] = defaultdict(float)
    hit_tokens: dict[int, list[int]] = defaultdict(list)
    per_question: list[dict[str, Any]] = []  # vaultmem's figures per question (--out): which ones moved
    for n, item in enumerate(items, 1):
        path = workdir / re.sub(r"[^A-Za-z0-9_-]", "_", item.key)
        if reuse and path.exists():
            vault = Vault.open(path, embedder=embedder)
        else:
            vault = Vault.init(path, embedder=embedder)
            records = turn_records(item)
            t0 = time.perf_counter()
            vault.ingest_messages(records, source="bench")
            timing["ingest_s"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            vault.flush()
            timing["embed_s"] += time.perf_counter() - t0
        if compact and hasattr(vault, "compact"):
            t0 = time.perf_counter()
            vault.compact()
            timing["compact_s"] += time.perf_counter() - t0
        texts = [t.text for t in item.turns]
        turn_session = {t.id: t.session for t in item.turns}
        text_of = {t.id: _norm(t.text) for t in item.turns}
        bm25 = BM25(texts)
        turn_vecs = embedder.embed(texts)
        for q in item.questions:
            t0 = time.perf_counter()
            now = q.asked if use_asked else None
            hits = vault.search(q.text, k=max(KS), now=now)
            lat_search.append(time.perf_counter() - t0)
            contexts = {}
            for budget in BUDGETS:
                t0 = time.perf_counter()
                contexts[budget] = _norm(vault.context(q.text, budget, now=now).text)
                if budget == 1024:
                    lat_context.append(time.perf_counter() - t0)
            mode_ctx: dict[str, dict[int, str]] = {}
            for mode in modes:
                mode_ctx[mode] = {}
                for budget in BUDGETS:
                    t0 = time.perf_counter()
                    mode_ctx[mode][budget] = _norm(vault.context(q.text, budget, mode=mode, now=now).text)
                    if budget == 1024:
                        lat_modes[mode].append(time.perf_counter() - t0)
            qv = embedder.embed([q.text])[0]
            r_bm25 = bm25.rank(q.text)
            r_vec = [int(i) for i in np.argsort(-(turn_vecs @ qv), kind="stable")]
            rankings = {"bm25": r_bm25, "minilm": r_vec, "fusion": rrf(r_bm25, r_vec)}
            if q.evidence:
                row: dict[str, Any] = {"item": item.key, "qid": q.qid, "category": q.category}
                row["groups"] = list(q.groups)
                for k in KS:
                    found_k = {m for h in hits[:k] for m in h.message_ids}
                    row[f"R@{k}"] = len([e for e in q.evidence if e in found_k]) / len(q.evidence)
                for budget in BUDGETS:
                    row[f"C@{budget}"] = sum(text_of[e] in contexts[budget] for e in q.evidence) / len(
                        q.evidence
                    )
                    for mode, by_budget in mode_ctx.items():
                        row[f"{mode}:C@{budget}"] = sum(
                            text_of[e] in by_budget[budget] for e in q.evidence
                        ) / len(q.evidence)
                per_question.append(row)
            for cat in (q.category, "all", *q.groups):
                # vaultmem
                s = per[("vaultmem", cat)]
                for k in KS:
                    found: set[str] = set()
                    for h in hits[:k]:
                        found.update(h.message_ids)
                    if q.evidence:
                        s.add(f"R@{k}", len([e for e in q.evidence if e in found]) / len(q.evidence))
                    if cat == "all":
                        hit_tokens[k].append(sum(h.tokens for h in hits[:k]))
                    if k == 10 and q.evidence_sessions:
                        sess = {h.session for h in hits[:k]}
                        s.add("S@10", float(bool(sess & q.evidence_sessions)))
                for budget in BUDGETS:
                    if q.evidence:
                        s.add(
                            f"C@{budget}",
                            sum(text_of[e] in contexts[budget] for e in q.evidence) / len(q.evidence),
                        )
                for mode, by_budget in mode_ctx.items():
                    for budget in BUDGETS:
                        if q.evidence:
                            got = sum(text_of[e] in by_budget[budget] for e in q.evidence)
                            per[(f"mode:{mode}", cat)].add(f"C@{budget}", got / len(q.evidence))
                # baselines
                for name, ranking in rankings.items():
                    b = per[(name, cat)]
                    for k in KS:
                        top = {item.turns[i].id for i in ranking[:k]}
                        if q.evidence:
                            b.add(f"R@{k}", len([e for e in q.evidence if e in top]) / len(q.evidence))
                        if k == 10 and q.evidence_sessions:
                            b.add(
                                "S@10",
                                float(
                                    bool(
                                        {turn_session[item.turns[i].id] for i in ranking[:k]}
                                        & q.evidence_sessions
                                    )
                                ),
                            )
                    for budget in BUDGETS:
                        if q.evidence:
                            ctx = _norm(flat_context(texts, ranking, budget))
                            b.add(f"C@{budget}", sum(text_of[e] in ctx for e in q.evidence) / len(q.evidence))
        vault.close()
        log(f"  [{n}/{len(items)}] {item.key}: {len(item.turns)} turns, {len(item.questions)} questions")
    groups = sorted({c for _, c in per if ":" in c})
    categories = [
        *sorted({c for _, c in per if c != "all" and ":" not in c}, key=lambda c: (len(c), c)),
        "all",
    ]
    metrics = [f"R@{k}" for k in KS] + [f"C@{b}" for b in BUDGETS] + ["S@10"]
    result: dict[str, Any] = {
        "systems": {
            sysname: {
                cat: {m: per[(sysname, cat)].mean(m) for m in metrics}
                | {"n": len(per[(sysname, cat)].rows.get("R@10", []))}
                for cat in categories
            }
            for sysname in systems
        },
        "groups": {
            sysname: {
                g: {m: per[(sysname, g)].mean(m) for m in metrics}
                | {"n": len(per[(sysname, g)].rows.get("R@10", []))}
                for g in groups
            }
            for sysname in ("vaultmem", "fusion")
        },
        "mean_hit_tokens": {f"@{k}": float(np.mean(v)) for k, v in hit_tokens.items()},
        "latency_ms": {
            "search_p50": 1000 * float(np.percentile(lat_search, 50)),
            "search_p95": 1000 * float(np.percentile(lat_search, 95)),
            "context_p50": 1000 * float(np.percentile(lat_context, 50)),
            "context_p95": 1000 * float(np.percentile(lat_context, 95)),
        },
        "timing_s": dict(timing) | {"model_s": embedder.seconds},
        "mode_context_p50_ms": {m: 1000 * float(np.percentile(v, 50)) for m, v in lat_modes.items()},
        "turns": sum(len(i.turns) for i in items),
        "questions": sum(len(i.questions) for i in items),
        "per_question": per_question,
    }
    return result


def report(result: dict[str, Any]) -> str:
    out = []
    systems = result["systems"]
    cats = list(systems["vaultmem"])
    tok = result["mean_hit_tokens"]
    out.append(f"\n{result['turns']:,} turns, {result['questions']:,} questions")
    out.append(
        "\nOverall (all categories). R@k = evidence recall@k over hits; C@B = evidence verbatim in B tokens of context"
    )
    metrics = ["R@5", "R@10", "R@25", "C@512", "C@1024", "C@2048", "S@10"]
    rows = []
    for name in ("vaultmem", "bm25", "minilm", "fusion"):
        rows.append([name, *(f"{systems[name]['all'][m]:.3f}" for m in metrics)])
    out.append(table(["system", *metrics], rows))
    out.append(
        f"mean tokens in vaultmem's top-k hits: @5 {tok['@5']:.0f}, @10 {tok['@10']:.0f}, @25 {tok['@25']:.0f}"
        " (baseline units are single turns)"
    )
    out.append("\nPer category: context recall within 1024 tokens and recall@10")
    rows = []
    for cat in cats:
        v, f = systems["vaultmem"][cat], systems["fusion"][cat]
        rows.append(
            [
                cat,
                v["n"],
                f"{v['C@1024']:.3f}",
                f"{f['C@1024']:.3f}",
                f"{v['C@1024'] - f['C@1024']:+.3f}",
                f"{v['R@10']:.3f}",
                f"{systems['bm25'][cat]['R@10']:.3f}",
                f"{systems['minilm'][cat]['R@10']:.3f}",
                f"{f['R@10']:.3f}",
            ]
        )
    out.append(
        table(
            [
                "category",
                "n",
                "vm C@1024",
                "fusion C@1024",
                "delta",
                "vm R@10",
                "bm25 R@10",
                "minilm R@10",
                "fusion R@10",
            ],
            rows,
        )
    )
    by_group = result.get("groups", {})
    if by_group.get("vaultmem"):
        out.append("\nBy evidence turns (ev:) and evidence sessions (sess:): C@1024 and R@10")
        rows = []
        for g, v in by_group["vaultmem"].items():
            f = by_group["fusion"][g]
            rows.append(
                [
                    g,
                    v["n"],
                    f"{v['C@1024']:.3f}",
                    f"{f['C@1024']:.3f}",
                    f"{v['C@1024'] - f['C@1024']:+.3f}",
                    f"{v['R@10']:.3f}",
                    f"{f['R@10']:.3f}",
                ]
            )
        out.append(
            table(["group", "n", "vm C@1024", "fusion C@1024", "delta", "vm R@10", "fusion R@10"], rows)
        )
    mode_names = [name for name in systems if name.startswith("mode:")]
    if mode_names:
        out.append("\nContext modes (same vaults, same questions): context recall by category")
        rows = []
        for name in mode_names:
            rows.append(
                [
                    name[5:],
                    *(f"{systems[name]['all'][f'C@{b}']:.3f}" for b in BUDGETS),
                    *(f"{systems[name][c]['C@1024']:.3f}" for c in cats if c != "all"),
                    f"{result['mode_context_p50_ms'][name[5:]]:.1f}",
                ]
            )
        out.append(
            table(
                [
                    "mode",
                    *(f"C@{b}" for b in BUDGETS),
                    *(f"cat {c} C@1024" for c in cats if c != "all"),
                    "p50 ms",
                ],
                rows,
            )
        )
    lat = result["latency_ms"]
    t = result["timing_s"]
    out.append(
        f"\nsearch p50 {lat['search_p50']:.1f} ms, p95 {lat['search_p95']:.1f} ms; "
        f"context(1024) p50 {lat['context_p50']:.1f} ms, p95 {lat['context_p95']:.1f} ms"
    )
    out.append("time: " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()))
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON results here")
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations / questions")
    parser.add_argument(
        "--per-category",
        type=int,
        default=None,
        help="only the first N items of each category (a stratified subset)",
    )
    parser.add_argument(
        "--category",
        action="append",
        default=None,
        help="only items of this category (LongMemEval: question type); repeatable",
    )
    parser.add_argument("--model", default="default")
    parser.add_argument("--compact", action="store_true", help="compact each vault before asking")
    parser.add_argument(
        "--modes", default="", help="also measure these context modes, e.g. flat,collapsed,walk (one table)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="build the vaults here and keep them")
    parser.add_argument(
        "--embed-cache",
        type=Path,
        default=None,
        help="memo of text -> vector kept between runs (.npz); model time then covers new texts only",
    )
    parser.add_argument(
        "--reuse", action="store_true", help="with --keep: open vaults built by an earlier run"
    )
    parser.add_argument(
        "--no-question-date",
        action="store_true",
        help="ask without the dataset's question date (LongMemEval); relative times then refer to today",
    )
    args = parser.parse_args()
    data = json.loads(args.dataset.read_text(encoding="utf-8"))
    if data and "conversation" in data[0]:
        name, items = "locomo", load_locomo(data)
    elif data and "haystack_sessions" in data[0]:
        name, items = "longmemeval", load_longmemeval(data)
    else:
        raise SystemExit(f"{args.dataset}: neither LoCoMo nor LongMemEval")
    if args.category:
        items = [item for item in items if any(q.category in args.category for q in item.questions)]
    if args.per_category:
        # Stratified subset: the first N items of each category (LongMemEval: question type).
        taken: dict[str, int] = {}
        subset = []
        for item in items:
            cat = item.questions[0].category
            if taken.get(cat, 0) < args.per_category:
                taken[cat] = taken.get(cat, 0) + 1
                subset.append(item)
        items = subset
    items = items[: args.limit] if args.limit else items
    embedder = CachingEmbedder(load_embedder(args.model))
    embedder.load(args.embed_cache)
    print(f"{name}: {len(items)} items", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        result = evaluate(
            items,
            embedder,
            workdir,
            args.compact,
            lambda m: print(m, file=sys.stderr),
            args.reuse,
            tuple(m for m in args.modes.split(",") if m),
            not args.no_question_date,
        )
    result["dataset"] = name
    embedder.save(args.embed_cache)
    print(report(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
