"""Ingest hot-path throughput (no embedding): messages per second into a fresh vault, batch durable.

Also compares, in the same run, the two ways of making a batch of new files durable: one fsync per
file versus one filesystem sync per batch (what vaultmem does).

    python bench/ingest.py [--messages 10000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import generated_messages, table

from vaultmem import Vault
from vaultmem.fsio import PendingWrite, atomic_write, write_batch_durable


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to create the temp vault")
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
