"""The leaf graph after a write: a whole build against an update from the change log (issue 19).

    python bench/graph.py VAULT [--changes 20]

Works on a copy of VAULT's index (``.vaultmem/chunks.db``, copied to a temporary folder; the vault itself
is only read). Reports the whole build of ``graph.LeafGraph`` (p50 of 3), then the refresh after one leaf's
entities are rewritten (p50 over ``--changes`` rewrites, each its own transaction, as a rescan writes
them), and whether the updated graph walks as a freshly built one does.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import table

from vaultmem import db
from vaultmem.graph import LeafGraph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vault", type=Path)
    parser.add_argument("--changes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "chunks.db"
        shutil.copyfile(args.vault / ".vaultmem" / "chunks.db", copy)
        conn = db.connect(copy)
        leaves = conn.execute("SELECT count(*) FROM chunks WHERE kind = 'leaf'").fetchone()[0]
        whole: list[float] = []
        for _ in range(3):
            graph = LeafGraph()
            t0 = time.perf_counter()
            graph.refresh(conn)
            whole.append(time.perf_counter() - t0)
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM chunks WHERE kind = 'leaf' ORDER BY rowid DESC LIMIT ?", [args.changes]
            )
        ]
        updates: list[float] = []
        for n, leaf_id in enumerate(ids):
            conn.execute(  # autocommit: its own transaction
                "UPDATE chunks SET entities = json_array(?) WHERE id = ?", [f"topic:bench-{n}", leaf_id]
            )
            t0 = time.perf_counter()
            graph.refresh(conn)
            updates.append(time.perf_counter() - t0)
        fresh = LeafGraph()
        fresh.refresh(conn)
        seeds = dict.fromkeys(ids[:10], 1.0)
        same = graph.walk(seeds, {}, 100) == fresh.walk(seeds, {}, 100) and all(
            graph.walk({}, {f"topic:bench-{n}": 1.0}, 5) == fresh.walk({}, {f"topic:bench-{n}": 1.0}, 5)
            for n in range(len(ids))
        )
        conn.close()
    print(
        table(
            ["leaves", "whole build p50 ms", "update after one leaf p50 ms", "whole rebuilds", "walks equal"],
            [
                [
                    leaves,
                    1000 * statistics.median(whole),
                    1000 * statistics.median(updates),
                    graph.rebuilds,
                    same,
                ]
            ],
        )
    )


if __name__ == "__main__":
    main()
