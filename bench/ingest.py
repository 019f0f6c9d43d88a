"""Ingest hot-path throughput (no embedding): messages per second into a fresh vault, batch durable.

Also compares, in the same run, the two ways of making a batch of new files durable: one fsync per
file versus one filesystem sync per batch (what vaultmem does); and importing a ChatGPT-shaped export
(``--conversations`` conversations, each a ``mapping`` tree with a null root, a hidden system message,
``--turns`` visible turns and one regenerated answer left off the shown branch) against the same
messages as plain chat JSONL, both from a file through ``Vault.ingest_path``.

    python bench/ingest.py [--messages 10000] [--conversations 10000] [--turns 2] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import generated_messages, table

from vaultmem import Vault
from vaultmem.fsio import PendingWrite, atomic_write, write_batch_durable
from vaultmem.inputs import read_path


def durability_comparison(base: Path, n: int = 2000) -> list[tuple[str, int, float, float]]:
    rows = []
    d1 = base / "per-file"
    data = b"x" * 600
    t = time.perf_counter()
    for i in range(n):
        atomic_write(d1 / f"f{i}.md", data, root=base, expected=None)
    dt = time.perf_counter() - t
    rows.append(("fsync per file (atomic_write)", n, dt, n / dt))
    d2 = base / "batch"
    t = time.perf_counter()
    write_batch_durable(base, [PendingWrite(d2 / f"f{i}.md", data) for i in range(n)])
    dt = time.perf_counter() - t
    rows.append(("one syncfs per batch (write_batch_durable)", n, dt, n / dt))
    return rows


def embedding_comparison(base: Path, n: int) -> list[list[object]]:
    """vaultmem's queued embedding (flush: sidecars, vectors table, admission) vs the model on the same
    texts in one call."""
    from vaultmem.admit import embed_text
    from vaultmem.embed import load_embedder

    embedder = load_embedder()
    embedder.embed(["warm up"])
    vault = Vault.init(base / "embed-vault", embedder=embedder)
    vault.ingest_messages(generated_messages(n, seed=11), source="bench")
    texts = [embed_text(leaf) for leaf in vault.ls()]
    t = time.perf_counter()
    embedder.embed(texts)
    direct = time.perf_counter() - t
    t = time.perf_counter()
    report = vault.flush()
    queued = time.perf_counter() - t
    vault.close()
    return [
        ["model.embed(texts), one call", len(texts), direct, len(texts) / direct, ""],
        [
            "vault.flush() (queue, sidecars, index, admit)",
            report.embedded,
            queued,
            report.embedded / queued,
            f"{100 * (queued / direct - 1):+.1f}%",
        ],
    ]


def cpu_part(base: Path, messages: list[dict[str, object]]) -> list[object]:
    """The CPU part of the hot path alone (redact every field, chunk, score, name the files): no disk."""
    from vaultmem.ingest import build_leaves
    from vaultmem.inputs.chat import messages_from_records
    from vaultmem.layout import Layout
    from vaultmem.scoring import FastScorer

    canonical = messages_from_records(messages, source="bench", session=None)
    t = time.perf_counter()
    leaves = build_leaves(canonical, Layout(base / "cpu"), FastScorer(), 256)
    dt = time.perf_counter() - t
    return ["build_leaves (redact, chunk, score, file names)", len(leaves), dt, 1e6 * dt / len(canonical)]


def chatgpt_export(messages: list[dict[str, object]], turns: int) -> list[dict[str, object]]:
    """The messages as a ChatGPT ``conversations.json``: one conversation per ``turns`` messages."""
    conversations = []
    for c in range(0, len(messages), turns):
        chunk = messages[c : c + turns]
        conv_id = f"conv-{c // turns:06d}"
        mapping: dict[str, dict[str, object]] = {
            "root": {"id": "root", "message": None, "parent": None, "children": ["sys"]},
            "sys": {
                "id": "sys",
                "parent": "root",
                "children": [],
                "message": {
                    "id": "sys",
                    "author": {"role": "system"},
                    "content": {"content_type": "text", "parts": [""]},
                    "metadata": {"is_visually_hidden_from_conversation": True},
                },
            },
        }
        parent = "sys"
        for i, record in enumerate(chunk):
            node = str(record["id"])
            children = mapping[parent]["children"]
            assert isinstance(children, list)
            mapping[parent]["children"] = [*children, node]
            mapping[node] = {
                "id": node,
                "parent": parent,
                "children": [],
                "message": {
                    "id": node,
                    "author": {"role": record["role"], "name": None, "metadata": {}},
                    "create_time": _epoch(str(record["ts"])),
                    "content": {"content_type": "text", "parts": [record["content"]]},
                    "status": "finished_successfully",
                    "metadata": {"model_slug": "gpt-4o"} if record["role"] == "assistant" else {},
                    "recipient": "all",
                },
            }
            if i == 1:  # a regenerated answer, off the shown branch
                alt = f"{node}-regen"
                mapping[parent]["children"] = [alt, *mapping[parent]["children"]]  # type: ignore[misc]
                mapping[alt] = {**mapping[node], "id": alt, "children": []}
            parent = node
        conversations.append(
            {
                "title": f"Conversation {c // turns}",
                "create_time": _epoch(str(chunk[0]["ts"])),
                "mapping": mapping,
                "current_node": parent,
                "conversation_id": conv_id,
                "id": conv_id,
                "default_model_slug": "gpt-4o",
            }
        )
    return conversations


def _epoch(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def import_comparison(base: Path, conversations: int, turns: int, rounds: int) -> list[list[object]]:
    """Plain chat JSONL vs a ChatGPT export holding the same messages, each into a fresh vault, then
    imported again (everything already present)."""
    messages = generated_messages(conversations * turns, seed=23, sessions_of=turns)
    plain = base / "chat.jsonl"
    plain.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    export = base / "conversations.json"
    export.write_text(json.dumps(chatgpt_export(messages, turns)), encoding="utf-8")
    best: dict[str, tuple[float, float, int, int, int]] = {}
    parse: dict[str, float] = {}
    for round_ in range(rounds):  # interleaved rounds, best of each: the machine's load varies
        for label, path in (("plain chat JSONL", plain), ("ChatGPT export", export)):
            t = time.perf_counter()
            read_path(path, max_bytes=2**30)  # reading and adapting alone, no vault
            parse[label] = min(time.perf_counter() - t, parse.get(label, float("inf")))
            vault = Vault.init(base / f"import-{path.stem}-{round_}")
            t = time.perf_counter()
            report = vault.ingest_path(path)
            dt = time.perf_counter() - t
            t = time.perf_counter()
            again = vault.ingest_path(path)
            re_dt = time.perf_counter() - t
            vault.close()
            old = best.get(label)
            best[label] = (
                min(dt, old[0]) if old else dt,
                min(re_dt, old[1]) if old else re_dt,
                report.messages,
                len(report.added),
                again.duplicates,
            )
    rows: list[list[object]] = []
    first = 0.0
    for label, path in (("plain chat JSONL", plain), ("ChatGPT export", export)):
        dt, re_dt, n, added, dupes = best[label]
        rate = n / dt
        first = first or rate
        size = f"{path.stat().st_size / 2**20:.1f}"
        read_us = f"{1e6 * parse[label] / n:,.1f}"
        change = f"{100 * (rate / first - 1):+.1f}%"
        rows.append([label, size, n, added, read_us, dt, rate, change, f"{dupes / re_dt:,.0f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to create the temp vault")
    parser.add_argument(
        "--conversations", type=int, default=10_000, help="ChatGPT-shaped export size (0: skip)"
    )
    parser.add_argument("--turns", type=int, default=2, help="visible turns per exported conversation")
    parser.add_argument("--rounds", type=int, default=2, help="import rounds (best of each is shown)")
    parser.add_argument(
        "--embed", type=int, default=1000, help="texts for the embedding comparison (0: skip)"
    )
    args = parser.parse_args()
    messages = generated_messages(args.messages)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = Path(tmp)
        vault = Vault.init(base / "vault")
        t = time.perf_counter()
        report = vault.ingest_messages(messages, source="bench")
        dt = time.perf_counter() - t
        vault.close()
        files = sum(1 for _ in (base / "vault" / "sources").rglob("*.md"))
        print(f"\nIngest hot path (no embedding), {os.cpu_count()} cores")
        print(
            table(
                ["messages", "leaves", "files", "seconds", "messages/s"],
                [[len(messages), len(report.added), files, dt, len(messages) / dt]],
            )
        )
        print(table(["CPU part", "leaves", "seconds", "us/message"], [cpu_part(base, messages)]))
        if args.conversations:
            print(f"\nImporting {args.conversations:,} conversations: ChatGPT export vs plain chat JSONL")
            print(
                table(
                    [
                        "input",
                        "MiB",
                        "messages",
                        "leaves",
                        "read_path us/msg",
                        "seconds",
                        "messages/s",
                        "vs JSONL",
                        "re-import msg/s",
                    ],
                    import_comparison(base, args.conversations, args.turns, args.rounds),
                )
            )
        print("\nMaking new files durable")
        print(table(["strategy", "files", "seconds", "files/s"], durability_comparison(base)))
        if args.embed:
            print("\nEmbedding throughput (real all-MiniLM-L6-v2)")
            print(
                table(
                    ["path", "texts", "seconds", "texts/s", "overhead"],
                    embedding_comparison(base, args.embed),
                )
            )


if __name__ == "__main__":
    main()
