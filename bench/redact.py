"""Secret redaction: recall on synthetic secrets and false positives on look-alikes, per position, end to end.

Every secret shape of ``tests/secret_shapes.py`` (46 kinds, random and reproducible, never real keys)
is put in five positions of the input: a chat message's body, a document's ``title``, a heading, a
document's file name and a chat speaker. Each seed's input is ingested into a new vault (fake
embedder, git auto-commit on), compacted (summaries, digests, topics, commits), and then a secret
counts as leaked when its text is anywhere in the vault's files (the index and its WAL included), a
piece of it is in a file or folder name, or it is in ``git log -p``. The look-alikes (git hashes,
UUIDs, sha256 sums, long and compound words, URLs with ids, Chinese text, base64 of text...) are put in
the same positions and count as false positives when the field they were put in does not hold them
verbatim afterwards. A position a shape cannot take (a URL in a file name) is left out.

Also: recall per kind on many seeds at the function level, the share of real conversation turns
changed (``--corpus`` LoCoMo / LongMemEval JSON files), and redaction speed.

    python bench/redact.py [--seeds 3] [--unit-seeds 200] [--corpus ../shared/datasets/locomo/locomo_dev.json ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from _common import generated_messages, table

from tests.secret_shapes import LOOKALIKES, SHAPES, secrets
from vaultmem import Vault
from vaultmem.embed import FakeEmbedder
from vaultmem.redact import CATALOGUE_SIZE, redact

POSITIONS = ("body", "title", "heading", "file name", "speaker")
CONFIG = "[git]\nauto_commit = true\n\n[compact]\nseal_min_leaves = 16\nfresh_keep_leaves = 8\n"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fits(position: str, text: str) -> str | None:
    """``text`` as it can stand in ``position`` (None when it cannot: a '/' in a file name)."""
    if position == "file name":
        return None if "/" in text else _one_line(text)
    if position in ("heading", "speaker", "title"):
        return _one_line(text)
    return text


def _write_inputs(inbox: Path, items: list[tuple[str, str, str]]) -> None:
    """items: (case id, position, text). One file per document case, one chat file for the rest."""
    chat = []
    for n, (case, position, text) in enumerate(items):
        if position == "body":
            chat.append(
                {"id": case, "speaker": "Mia", "content": text, "ts": f"2024-05-01T09:{n % 60:02d}:00Z"}
            )
        elif position == "speaker":
            chat.append(
                {"id": case, "speaker": text, "content": f"see message {n}", "ts": "2024-05-01T10:00:00Z"}
            )
        elif position == "title":
            (inbox / f"{case}.md").write_text(
                f"---\ntitle: {json.dumps(text)}\n---\nNotes {n}.\n", encoding="utf-8"
            )
        elif position == "heading":
            (inbox / f"{case}.md").write_text(f"## {text}\n\nNotes {n}.\n", encoding="utf-8")
        else:
            (inbox / f"{case} {text}.md").write_text(f"Notes {n}.\n", encoding="utf-8")
    with (inbox / "chat.jsonl").open("w", encoding="utf-8") as fh:
        for record in chat:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def _vault_text(root: Path) -> tuple[bytes, str]:
    blob = bytearray()
    paths = []
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(".git/"):
            continue
        paths.append(rel.lower())
        if path.is_file():
            blob += path.read_bytes()
    history = subprocess.run(
        ["git", "-C", str(root), "log", "--all", "-p", "--format=%s%n%b"], capture_output=True, text=True
    ).stdout
    return bytes(blob) + history.encode(), "\n".join(paths) + history.lower()


def _slug_pieces(secret: str) -> list[str]:
    import re

    return [p[:10] for p in re.split(r"[^a-z0-9]+", secret.lower()) if len(p) >= 10]


def end_to_end(
    seed: int, base: Path
) -> tuple[Counter[str], Counter[str], Counter[str], Counter[str], list[str]]:
    cases: list[tuple[str, str, str]] = []  # (case id, position, text)

    def place(prefix: str, text: str) -> list[tuple[str, str]]:
        """Put ``text`` in every position it fits; return (case id, position) of each."""
        placed = []
        for position in POSITIONS:
            fitted = _fits(position, text)
            if fitted is not None:
                case = f"{prefix}{len(cases):04d}"
                cases.append((case, position, fitted))
                placed.append((case, position))
        return placed

    leaks_of: dict[str, tuple[str, str, str]] = {}  # case -> (position, kind, secret)
    for kind, statement, secret in secrets(seed):
        for case, position in place("s", statement):
            leaks_of[case] = (
                position,
                kind,
                secret.replace("\n", " ") if position == "file name" else secret,
            )
    looks: dict[str, tuple[str, str]] = {}
    for text in LOOKALIKES:
        for case, position in place("l", text):
            looks[case] = (position, _fits(position, text) or text)
    inbox = base / f"inbox-{seed}"
    inbox.mkdir()
    _write_inputs(inbox, cases)
    root = base / f"vault-{seed}"
    with Vault.init(root, CONFIG, embedder=FakeEmbedder()) as vault:
        vault.ingest_path(inbox, source="bench")
        vault.compact()
        leaves = vault.ls()
    blob, names = _vault_text(root)
    tried, leaked = Counter[str](), Counter[str]()
    missed: list[str] = []
    for position, kind, secret in leaks_of.values():
        tried[position] += 1
        if secret.encode() in blob or any(p in names for p in _slug_pieces(secret)):
            leaked[position] += 1
            missed.append(f"{kind} in {position}")
    fields: dict[str, list[str]] = {p: [] for p in POSITIONS}
    for leaf in leaves:
        fields["body"].append(_one_line(leaf.text))
        fields["speaker"].append(leaf.speaker or "")
        fields["title"].append(leaf.meta.get("title", ""))
        fields["heading"].append(leaf.meta.get("heading_path", ""))
        fields["file name"].append(leaf.meta.get("file", ""))
    joined = {p: "\n".join(v) for p, v in fields.items()}
    placed, changed = Counter[str](), Counter[str]()
    for position, text in looks.values():
        placed[position] += 1
        if _one_line(text) not in joined[position]:
            changed[position] += 1
            missed.append(f"look-alike changed in {position}: {text[:60]}")
    return tried, leaked, placed, changed, missed


def unit_recall(seeds: int) -> list[list[object]]:
    rows = []
    per_kind: dict[str, list[int]] = {kind: [0, 0] for kind in SHAPES}
    found_kinds: dict[str, Counter[str]] = {kind: Counter() for kind in SHAPES}
    for seed in range(seeds):
        for kind, statement, secret in secrets(seed):
            result = redact(statement)
            per_kind[kind][0] += 1
            per_kind[kind][1] += secret not in result.text
            found_kinds[kind].update(result.kinds)
    for kind, (n, ok) in per_kind.items():
        rule = ", ".join(k for k, _ in found_kinds[kind].most_common(2))
        rows.append([kind, n, f"{ok / n:.3f}", rule])
    return rows


def corpus_texts(paths: list[Path]) -> list[str]:
    texts: list[str] = []
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        for item in data:
            if "conversation" in item:  # LoCoMo
                conv = item["conversation"]
                texts += [
                    t["text"]
                    for k, v in conv.items()
                    if k.startswith("session_") and isinstance(v, list)
                    for t in v
                ]
            elif "haystack_sessions" in item:  # LongMemEval
                texts += [t["content"] for s in item["haystack_sessions"] for t in s]
    return list(dict.fromkeys(texts))


def speed(texts: list[str], label: str) -> list[object]:
    size = sum(len(t.encode("utf-8")) for t in texts)
    t = time.perf_counter()
    changed = sum(1 for text in texts if redact(text).kinds)
    dt = time.perf_counter() - t
    return [
        label,
        len(texts),
        changed,
        f"{100 * changed / max(1, len(texts)):.2f}%",
        f"{dt / len(texts) * 1e6:.1f}",
        f"{size / dt / 1e6:.2f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="end-to-end vaults (one per seed)")
    parser.add_argument("--unit-seeds", type=int, default=200, help="seeds for the per-kind recall")
    parser.add_argument("--corpus", type=Path, nargs="*", default=[], help="LoCoMo / LongMemEval JSON files")
    args = parser.parse_args()

    print(
        f"\n{len(SHAPES)} secret kinds, {len(LOOKALIKES)} look-alikes; catalogue: {CATALOGUE_SIZE} gitleaks rules"
    )
    tried, leaked, placed, changed = Counter[str](), Counter[str](), Counter[str](), Counter[str]()
    misses: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            t, lk, p, c, m = end_to_end(seed, Path(tmp))
            tried += t
            leaked += lk
            placed += p
            changed += c
            misses += m
    rows = [
        [
            pos,
            tried[pos],
            leaked[pos],
            f"{1 - leaked[pos] / max(1, tried[pos]):.3f}",
            placed[pos],
            changed[pos],
            f"{100 * changed[pos] / max(1, placed[pos]):.2f}%",
        ]
        for pos in POSITIONS
    ]
    total = [sum(tried.values()), sum(leaked.values()), sum(placed.values()), sum(changed.values())]
    rows.append(
        [
            "all",
            total[0],
            total[1],
            f"{1 - total[1] / total[0]:.3f}",
            total[2],
            total[3],
            f"{100 * total[3] / total[2]:.2f}%",
        ]
    )
    print(f"\nEnd to end (ingest, compact, git; {args.seeds} seeds): recall and false positives per position")
    print(
        table(["position", "secrets", "leaked", "recall", "look-alikes", "changed", "false positives"], rows)
    )
    for line in misses[:20]:
        print("  ", line)

    print(f"\nPer kind, redact() on {args.unit_seeds} random secrets each")
    print(table(["kind", "secrets", "recall", "caught by"], unit_recall(args.unit_seeds)))

    speed_rows = [
        speed([str(m["content"]) for m in generated_messages(20_000)], "generated chat (bench/_common)")
    ]
    texts = corpus_texts(args.corpus)
    if texts:
        speed_rows.append(speed(texts, "+".join(p.stem for p in args.corpus)))
    print("\nReal text changed (false positives in conversations) and speed")
    print(table(["texts", "n", "changed", "share", "us/text", "MB/s"], speed_rows))


if __name__ == "__main__":
    main()
