"""Rebuild time of chunks.db from the files of a generated vault (default 10,000 leaves), and the cost of
telling whether the index is damaged: the checks on every open (WAL headers, first row of every table)
against ``PRAGMA quick_check`` (run by ``reindex`` and ``check``, and when opening fails).

python bench/reindex.py [--leaves 10000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import generated_messages, table

from vaultmem import Vault, db
from vaultmem.embed import FakeEmbedder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=10_000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # A fake embedder of MiniLM's size: the figure is about reading sidecars, not about the model.
        vault = Vault.init(Path(tmp) / "vault", embedder=FakeEmbedder(dim=384))
        vault.ingest_messages(generated_messages(args.leaves), source="bench")
        t = time.perf_counter()
        report = vault.reindex()
        rows.append(
            [
                "reindex, no embeddings yet (rows + FTS)",
                report.leaves,
                report.vectors,
                time.perf_counter() - t,
            ]
        )
        vault.flush()
        t = time.perf_counter()
        report = vault.reindex()
        rows.append(
            ["reindex, vectors reused from sidecars", report.leaves, report.vectors, time.perf_counter() - t]
        )
        t = time.perf_counter()
        result = vault.check()
        rows.append(["check (every invariant)", result.leaves, "", time.perf_counter() - t])
        vault.close()
        path = Path(tmp) / "vault"
        opens = []
        for _ in range(5):
            t = time.perf_counter()
            Vault.open(path, embedder=FakeEmbedder(dim=384)).close()
            opens.append(time.perf_counter() - t)
        rows.append(["open (best of 5)", result.leaves, "", f"{min(opens):.4f}"])
        conn = db.connect(path / ".vaultmem" / "chunks.db")
        t = time.perf_counter()
        for _ in range(100):
            db.wal_problem(path / ".vaultmem" / "chunks.db")
            db.probe(conn)
        rows.append(
            [
                "  of which: WAL headers + first row of every table",
                "",
                "",
                f"{(time.perf_counter() - t) / 100:.4f}",
            ]
        )
        conn.close()
        t = time.perf_counter()
        assert db.quick_check(path / ".vaultmem" / "chunks.db") is None
        rows.append(["PRAGMA quick_check", result.leaves, "", f"{time.perf_counter() - t:.3f}"])
        size = (path / ".vaultmem" / "chunks.db").stat().st_size
    print(f"chunks.db: {size / 2**20:.0f} MiB")
    print(f"\nRebuilding the index of a {args.leaves:,}-leaf vault")
    print(table(["operation", "leaves", "vectors", "seconds"], rows))


if __name__ == "__main__":
    main()
