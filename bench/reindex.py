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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        vault = Vault.init(Path(tmp) / "vault")
        vault.ingest_messages(generated_messages(args.leaves), source="bench")
        rows = []
        t = time.perf_counter()
        report = vault.reindex()
        rows.append(["reindex (rows + FTS, vectors from sidecars)", report.leaves, time.perf_counter() - t])
        t = time.perf_counter()
        result = vault.check()
        rows.append(["check (every invariant)", result.leaves, time.perf_counter() - t])
        vault.close()
    print(f"\nRebuilding the index of a {args.leaves:,}-leaf vault")
    print(table(["operation", "leaves", "seconds"], rows))


if __name__ == "__main__":
    main()
