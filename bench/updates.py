"""Memories that change (issue #20): the offline supersede detector and the current value in context.

    python bench/updates.py [LONGMEMEVAL.json] [--facts N] [--seed S] [--fake] [--before DETECT.py]
        [--others N] [--others-from K] [--no-ku] [--pairs-out FILE | --pairs-in FILE]

Two sets, each ingested into fresh vaults through the public API and embedded with the packaged
all-MiniLM-L6-v2 (``--fake``: the hashing embedder, for a quick run):
- **synthetic**: N facts about people written as chat turns between filler chatter, each later changed
  (a number, a date, a time, a place, a negation), with distractors that must not be taken for updates
  (another attribute of the same person, the same value said again); labels are exact;
- **LongMemEval knowledge-update** questions (dev file; the path is an argument, never copied): in each
  haystack the evidence turns (``has_answer``) of different sessions are the (old, new) pairs;
- ``--others N``: the haystacks of N LongMemEval questions of the other types (no update is labelled there:
  every proposal counts as false, so their precision is 0 by construction and what they show is how many
  false proposals a real haystack of about 500 turns draws); ``--others-from K`` takes them after the
  first K (a held-out set for rules read from the first ones); ``--no-ku`` leaves the KU set out.
``--before FILE`` judges the same candidate pairs with another copy of ``detect.py`` (for instance
``git show main:vaultmem/detect.py > /tmp/detect_main.py``): before and after in one run.
``--pairs-out`` saves every candidate pair (texts, cosine, label) as JSON; ``--pairs-in`` judges a saved
file without ingesting anything (the precision/recall table only).
Reported: detector precision and recall per confidence threshold (every pair ``versions.earlier_neighbours``
offers, judged by ``detect.judge``), and for each question whether the current value (the newest
evidence turn) is in a 1,024-token context and whether an old value outranks it, before (ranking as
found, no links) and after (the detector's proposals at or above ``AUTO_APPLY_AT`` applied, then also all
proposals accepted). The machine running it may be loaded: ratios within one run are what count.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import table

from vaultmem import Vault, detect, versions
from vaultmem.embed import Embedder, FakeEmbedder, load_embedder

BUDGET = 1024
THRESHOLDS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
PEOPLE = [
    "Mara",
    "Priya",
    "Kenji",
    "Dario",
    "Ana",
    "Olu",
    "Sven",
    "Lena",
    "Tomas",
    "Aiko",
    "Bruno",
    "Chen",
    "Farah",
    "Ivan",
    "Noor",
    "Rosa",
]
CITIES = [
    "Berlin",
    "Lisbon",
    "Osaka",
    "Toronto",
    "Nairobi",
    "Porto",
    "Krakow",
    "Denver",
    "Hanoi",
    "Quito",
    "Tallinn",
    "Seville",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
FILLER = [
    "Haha, that reminds me of the time the printer jammed during the demo.",
    "Can you suggest a quick pasta recipe for tonight?",
    "The weather has been strange lately, sunny one hour and pouring the next.",
    "I finished the book you recommended, the ending surprised me.",
    "Remind me to water the plants on the balcony.",
    "What's a good way to stretch after a long run?",
    "The new coffee place downstairs is surprisingly good.",
    "My laptop fan is loud again, probably needs cleaning.",
]


@dataclass
class Fact:
    person: str
    old: str
    new: str
    question: str
    kind: str


def _given_names(rng: random.Random, n: int) -> list[str]:
    """n distinct given names from the package's list (one person per fact, as in a real address book)."""
    import vaultmem

    path = Path(vaultmem.__file__).parent / "gazetteer" / "given_names.txt"
    words = [w for line in path.read_text().splitlines() if not line.startswith("#") for w in line.split()]
    return [w.capitalize() for w in rng.sample(sorted(set(words)), n)]


def _facts(n: int, rng: random.Random) -> list[Fact]:
    out: list[Fact] = []
    people = _given_names(rng, n)
    for i in range(n):
        p = people[i]
        kind = ("number", "date", "time", "place", "negation")[i % 5]
        if kind == "number":
            a, b = rng.sample(range(3, 40), 2)
            out.append(
                Fact(
                    p,
                    f"{p}'s team has {a} engineers right now.",
                    f"{p}'s team grew, it has {b} engineers now.",
                    f"How many engineers are on {p}'s team?",
                    kind,
                )
            )
        elif kind == "date":
            m1, m2 = rng.sample(MONTHS, 2)
            d1, d2 = rng.randint(1, 28), rng.randint(1, 28)
            out.append(
                Fact(
                    p,
                    f"{p}'s dentist appointment is on {d1} {m1}.",
                    f"{p}'s dentist appointment was moved to {d2} {m2}.",
                    f"When is {p}'s dentist appointment?",
                    kind,
                )
            )
        elif kind == "time":
            t1, t2 = rng.sample(range(8, 18), 2)
            out.append(
                Fact(
                    p,
                    f"The weekly sync with {p} is at {t1}:00 on Tuesdays.",
                    f"The weekly sync with {p} is now at {t2}:30 on Tuesdays.",
                    f"What time is the weekly sync with {p}?",
                    kind,
                )
            )
        elif kind == "place":
            c1, c2 = rng.sample(CITIES, 2)
            out.append(
                Fact(
                    p,
                    f"{p} lives in {c1} with two cats.",
                    f"{p} moved to {c2} last month and lives there now.",
                    f"Where does {p} live?",
                    kind,
                )
            )
        else:
            out.append(
                Fact(
                    p,
                    f"{p} drinks coffee every morning before work.",
                    f"{p} doesn't drink coffee anymore, only green tea.",
                    f"Does {p} drink coffee?",
                    kind,
                )
            )
    return out


def synthetic(
    n: int, seed: int
) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[tuple[str, str, str]]]:
    """Chat records, the true (new, old) turn pairs, and (question, new turn, old turn)."""
    rng = random.Random(seed)
    facts = _facts(n, rng)
    start = datetime(2024, 1, 1, 9, tzinfo=UTC)
    records: list[dict[str, Any]] = []
    pairs, questions = [], []

    def say(text: str, day: int, session: str) -> str:
        tid = f"t{len(records)}"
        records.append(
            {
                "id": tid,
                "role": "user",
                "speaker": "me",
                "content": text,
                "session": session,
                "ts": (start + timedelta(days=day, minutes=len(records))).isoformat(),
            }
        )
        return tid

    for i, f in enumerate(facts):
        day = rng.randint(0, 60)
        old = say(f.old, day, f"s{day}")
        say(rng.choice(FILLER), day, f"s{day}")
        # Distractors: another attribute of the same person, and the old value said again (no change).
        say(f"{f.person} is learning to play the cello on weekends.", day + 1, f"s{day + 1}")
        again = None
        if i % 3 == 0:
            again = say(f.old.replace(" right now", "").rstrip(".") + ", as I said.", day + 2, f"s{day + 2}")
        later = day + rng.randint(10, 60)
        new = say(f.new, later, f"s{later}")
        say(rng.choice(FILLER), later, f"s{later}")
        pairs.append((new, old))
        if again is not None:  # the old value said again is replaced too
            pairs.append((new, again))
        questions.append((f.question, new, old))
    return records, pairs, questions


def lme(
    path: Path, *, others: int = 0, skip: int = 0
) -> list[tuple[list[dict[str, Any]], list[tuple[str, str]], list[tuple[str, str, str]]]]:
    """The knowledge-update haystacks (labelled pairs and the question); with ``others``, instead the
    haystacks of ``others`` questions of the other types, after the first ``skip`` of them (no pairs, no
    questions)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out: list[tuple[list[dict[str, Any]], list[tuple[str, str]], list[tuple[str, str, str]]]] = []
    skipped = 0
    for q in data:
        if (q["question_type"] == "knowledge-update") == bool(others):
            continue
        if others and skipped < skip:
            skipped += 1
            continue
        if others and len(out) >= others:
            break
        records, evidence = [], []
        names = {sid: f"S{i:03d}" for i, sid in enumerate(q["haystack_session_ids"])}
        for sid, date, session in zip(
            q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"], strict=True
        ):
            t0 = datetime.strptime(
                date.split(" (")[0] + " " + date.split(") ")[-1], "%Y/%m/%d %H:%M"
            ).replace(tzinfo=UTC)
            for i, t in enumerate(session):
                tid = f"{names[sid]}:{i}"
                records.append(
                    {
                        "id": tid,
                        "role": t["role"],
                        "content": t["content"],
                        "session": names[sid],
                        "ts": (t0 + timedelta(seconds=i)).isoformat(),
                    }
                )
                if t.get("has_answer"):
                    evidence.append((t0 + timedelta(seconds=i), tid, names[sid]))
        if others:
            out.append((records, [], []))
            continue
        evidence.sort()
        pairs = [(n[1], o[1]) for j, n in enumerate(evidence) for o in evidence[:j] if o[2] != n[2]]
        if evidence:
            out.append((records, pairs, [(q["question"], evidence[-1][1], evidence[0][1])]))
    return out


def _vault(
    workdir: Path, name: str, embedder: Embedder, records: list[dict[str, Any]]
) -> tuple[Vault, dict[str, str]]:
    vault = Vault.init(workdir / name, embedder=embedder)
    vault.ingest_messages(records, source="chat")
    vault.flush()
    leaf_of = {
        r["source_id"]: r["id"] for r in vault.conn.execute("SELECT id, source_id FROM chunks WHERE seq = 0")
    }
    return vault, leaf_of


def pairs_of(vault: Vault, truth: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """Every candidate (new leaf, old leaf) pair ``versions.candidates`` offers, with no judgement yet:
    both texts, the cosine, the facts the detector takes, and the label."""
    cache = vault.searcher.vectors(vault.embedder)
    out = []
    for row in vault.conn.execute(
        "SELECT id, text, speaker, role, entities, path, provenance FROM chunks WHERE kind = 'leaf'"
    ).fetchall():
        for old, cosine, facts in versions.candidates(vault.conn, cache, row):
            out.append(
                {
                    "new": row["id"],
                    "old": old["id"],
                    "new_text": row["text"],
                    "old_text": old["text"],
                    "cosine": cosine,
                    "facts": facts,
                    "true": (row["id"], old["id"]) in truth,
                }
            )
    return out


def judge_all(module: Any, pairs: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    """(new, old, confidence) of the pairs ``module.judge`` proposes."""
    out = []
    for p in pairs:
        v = module.judge(p["old_text"], p["new_text"], p["cosine"], **p["facts"])
        if v is not None:
            out.append((p["new"], p["old"], v.confidence))
    return out


def pr_rows(
    name: str, label: str, pairs: list[dict[str, Any]], got: list[tuple[str, str, float]], truth_total: int
) -> list[list[object]]:
    true = {(p["new"], p["old"]) for p in pairs if p["true"]}
    rows: list[list[object]] = []
    for at in THRESHOLDS:
        proposed = [(n, o) for n, o, c in got if c >= at]
        right = sum((n, o) in true for n, o in proposed)
        precision = f"{right / len(proposed):.3f}" if proposed else "-"
        recall = f"{right / truth_total:.3f}" if truth_total else "-"
        rows.append([name, label, f"{at:.2f}", len(proposed), right, precision, recall])
    return rows


def context_check(
    vault: Vault, questions: list[tuple[str, str, str]], leaf_of: dict[str, str], *, raw: bool
) -> tuple[int, int]:
    """(current value in context, an old value ranked above it) over ``questions``."""
    found = outranked = 0
    for question, new, old in questions:
        ctx = vault.context(question, BUDGET, include_superseded=raw)
        ids = [i.hit.id for i in ctx.items]
        n, o = leaf_of.get(new), leaf_of.get(old)
        found += n in ids
        outranked += o in ids and (n not in ids or ids.index(o) < ids.index(n))
    return found, outranked


def link(vault: Vault, pairs: list[tuple[str, str, float]], at: float) -> None:
    paths = dict(vault.conn.execute("SELECT id, path FROM chunks WHERE kind = 'leaf'").fetchall())
    for new, old, c in pairs:
        if c >= at and new in paths and old in paths:
            vault._link(old, paths[old], new, paths[new])


def run_set(
    name: str, sets: list[Any], embedder: Embedder, workdir: Path, *, context: bool = True
) -> tuple[list[dict[str, Any]], int, list[list[object]]]:
    """Ingest each set once: its candidate pairs (labelled), how many true pairs exist, and the
    current-value-in-context rows (before: no links; after: this detector's links applied)."""
    truth_total = 0
    pairs: list[dict[str, Any]] = []
    ctx = {"before": [0, 0], "auto": [0, 0], "all": [0, 0]}
    nq = 0
    t0 = time.perf_counter()
    for k, (records, labelled, questions) in enumerate(sets):
        vault, leaf_of = _vault(workdir, f"{name}{k}", embedder, records)
        truth = {(leaf_of[n], leaf_of[o]) for n, o in labelled if n in leaf_of and o in leaf_of}
        truth_total += len(truth)
        mine = pairs_of(vault, truth)
        for p in mine:
            p["new"], p["old"] = f"{k}/{p['new']}", f"{k}/{p['old']}"
        pairs += mine
        if context and questions:
            got = [(n.split("/", 1)[1], o.split("/", 1)[1], c) for n, o, c in judge_all(detect, mine)]
            nq += len(questions)
            f, o = context_check(vault, questions, leaf_of, raw=True)
            ctx["before"][0] += f
            ctx["before"][1] += o
            link(vault, got, detect.AUTO_APPLY_AT)
            f, o = context_check(vault, questions, leaf_of, raw=False)
            ctx["auto"][0] += f
            ctx["auto"][1] += o
            link(vault, got, detect.PROPOSE_AT)
            f, o = context_check(vault, questions, leaf_of, raw=False)
            ctx["all"][0] += f
            ctx["all"][1] += o
        vault.close()
    rows = [
        [name, label, nq, f"{ctx[key][0] / nq:.3f}", f"{ctx[key][1] / nq:.3f}"]
        for key, label in (
            ("before", "before (as found, no links)"),
            ("auto", f"after, auto-applied >= {detect.AUTO_APPLY_AT}"),
            ("all", f"after, all proposals >= {detect.PROPOSE_AT} accepted"),
        )
        if nq
    ]
    print(f"{name}: {time.perf_counter() - t0:.1f} s, {len(pairs)} candidate pairs", file=sys.stderr)
    return pairs, truth_total, rows


def _load_detector(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("detect_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["detect_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("longmemeval", nargs="?", type=Path)
    ap.add_argument("--facts", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--fake", action="store_true", help="hashing embedder instead of MiniLM")
    ap.add_argument("--before", type=Path, help="another detect.py to judge the same pairs with")
    ap.add_argument("--others", type=int, default=0, help="haystacks of other LongMemEval question types")
    ap.add_argument(
        "--others-from",
        type=int,
        default=0,
        help="skip this many of them first (a held-out set: --others-from 20)",
    )
    ap.add_argument("--no-ku", action="store_true", help="leave the knowledge-update haystacks out")
    ap.add_argument("--pairs-out", type=Path, help="save the candidate pairs (JSON)")
    ap.add_argument("--pairs-in", type=Path, help="judge saved candidate pairs, ingest nothing")
    args = ap.parse_args()
    sets: dict[str, tuple[list[dict[str, Any]], int]] = {}
    ctx_rows: list[list[object]] = []
    if args.pairs_in:
        saved = json.loads(args.pairs_in.read_text(encoding="utf-8"))
        sets = {name: (v["pairs"], v["truth"]) for name, v in saved.items()}
    else:
        embedder: Embedder = FakeEmbedder() if args.fake else load_embedder()
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            todo: list[tuple[str, list[Any]]] = [("synthetic", [synthetic(args.facts, args.seed)])]
            if args.longmemeval:
                if not args.no_ku:
                    todo.append(("longmemeval-ku", lme(args.longmemeval)))
                if args.others:
                    other = lme(args.longmemeval, others=args.others, skip=args.others_from)
                    todo.append(("longmemeval-other", other))
            for name, data in todo:
                pairs, truth, ctx = run_set(name, data, embedder, work, context=name != "longmemeval-other")
                sets[name] = (pairs, truth)
                ctx_rows += ctx
        if args.pairs_out:
            args.pairs_out.write_text(
                json.dumps({n: {"pairs": p, "truth": t} for n, (p, t) in sets.items()}), encoding="utf-8"
            )
    detectors = [("after", detect)]
    if args.before:
        detectors.insert(0, ("before", _load_detector(args.before)))
    rows: list[list[object]] = []
    for name, (pairs, truth) in sets.items():
        for label, module in detectors:
            rows += pr_rows(name, label, pairs, judge_all(module, pairs), truth)
    print(table(["set", "detector", "threshold", "proposals", "right", "precision", "recall"], rows))
    if ctx_rows:
        print()
        print(
            table(
                ["set", "ranking", "questions", f"current value in {BUDGET} tokens", "old value outranks it"],
                ctx_rows,
            )
        )


if __name__ == "__main__":
    main()
