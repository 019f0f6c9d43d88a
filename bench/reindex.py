"""Rebuild time of chunks.db from the files of a generated vault (default 10,000 leaves).

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

from vaultmem import Vault
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
    print(f"\nRebuilding the index of a {args.leaves:,}-leaf vault")
    print(table(["operation", "leaves", "vectors", "seconds"], rows))


if __name__ == "__main__":
    main()
