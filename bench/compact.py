"""Compaction cost as the vault grows: time and peak memory to compact 1,000 / 10,000 / 50,000 leaves.

    python bench/compact.py [--sizes 1000,10000,50000] [--workers 3]

Each size runs in its own process (so peak RSS is that size's own): one source, leaves ingested and
embedded first (not timed), then ``vault.compact()`` timed from a cold start with the default extractive
summariser. Vectors come from the deterministic hashing embedder at MiniLM's 384 dimensions, so the
figures are the compactor's own cost (clustering, summaries, moves, sidecars, index), not the model's;
with the real model add the embedding of the new summaries (about one per 12 leaves, ~9 ms each here).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import generated_messages, table
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault


def one(n: int, workers: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = f"[compact]\nworkers = {workers}\n"
        embedder = FakeEmbedder(dim=384)
        t0 = time.perf_counter()
        with Vault.init(Path(tmp) / "v", config, embedder=embedder) as vault:
            records = generated_messages(n, sessions_of=200)
            vault.ingest_messages(records, source="bench")
            vault.flush()
            setup = time.perf_counter() - t0
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0 = time.perf_counter()
        with Vault.open(Path(tmp) / "v", embedder=embedder) as vault:
            report = vault.compact()
            elapsed = time.perf_counter() - t0
            depth = vault.conn.execute("SELECT coalesce(max(depth), 0) FROM chunks").fetchone()[0]
            summaries = vault.conn.execute("SELECT count(*) FROM chunks WHERE kind = 'summary'").fetchone()[0]
            ok = vault.check().ok
        return {
            "leaves": n,
            "setup_s": setup,
            "compact_s": elapsed,
            "ms_per_leaf": 1000 * elapsed / n,
            "sealed": report.sealed + report.merged,
            "levels": summaries,
            "depth": depth,
            "resummarised": report.resummarised,
            "failed": report.jobs_failed,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_mb": rss_before,
            "check_ok": ok,
            "notes": [n for n in report.notes if "failed" in n][:5],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.workers)))
        return
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(size), "--workers", str(args.workers)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append(
            [
                f"{r['leaves']:,}",
                r["compact_s"],
                f"{r['ms_per_leaf']:.2f}",
                f"{r['peak_rss_mb']:.0f} ({r['rss_before_mb']:.0f} before)",
                r["sealed"],
                r["levels"],
                r["depth"],
                r["resummarised"],
                r["failed"],
                "ok" if r["check_ok"] else "FAILED",
                r["setup_s"],
            ]
        )
        print(f"done {size}", *r["notes"], file=sys.stderr, sep="\n  ")
    print(
        table(
            [
                "leaves",
                "compact s",
                "ms/leaf",
                "peak RSS MB",
                "sealed",
                "levels",
                "depth",
                "re-summarised",
                "failed jobs",
                "check",
                "setup s (ingest+embed)",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
