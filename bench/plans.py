"""Query plans on a large vault: the index's `kind = ... AND path range` queries with and without statistics.

    python bench/plans.py --vault DIR [--runs 7]

SQLite chooses between the ``kind`` indexes and the unique ``path`` index by guesses until ``ANALYZE`` has
written ``sqlite_stat1``; at 100,000 leaves a wrong guess reads every leaf of the vault. This script copies
the vault's ``chunks.db`` to a temporary folder (the vault is not touched) and times each query shape the
modules run (the SQL as written there, with a directory of each size the vault has), best of ``--runs``,
on the copy as it is, then after ``db.analyze`` (what flush, work and reindex run), with the plan
SQLite chose each time. The first column is the time the statistics themselves took.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import table
from vaultmem import db, index


def queries(conn: sqlite3.Connection) -> list[tuple[str, str, list[str]]]:
    """(where in the code, SQL, parameters) for directories of each size the vault has."""
    leaves = "SELECT count(*) FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?"
    summaries = "SELECT path FROM chunks WHERE kind = 'summary' AND path >= ? AND path < ?"
    big = conn.execute(
        "SELECT source, count(*) n FROM chunks WHERE +kind = 'leaf' GROUP BY source ORDER BY n DESC LIMIT 1"
    ).fetchone()
    out: list[tuple[str, str, list[str]]] = []
    if big is not None:
        row = conn.execute(
            "SELECT path FROM chunks WHERE source = ? AND +kind = 'leaf' LIMIT 1", (big[0],)
        ).fetchone()
        top = row[0].split("/")[0] + "/" + row[0].split("/")[1] + "/"
        out.append(
            (f"compact.py:782 leaves of one source ({big[1]:,})", leaves, list(index.prefix_range(top)))
        )
        out.append(
            (
                "sessions.py:149 leaves under one source",
                "SELECT id FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?",
                list(index.prefix_range(top)),
            )
        )
        summary = conn.execute(
            "SELECT path FROM chunks WHERE source = ? AND +kind = 'summary' ORDER BY length(path) DESC LIMIT 1",
            (big[0],),
        ).fetchone()
        if summary is not None:
            small = summary[0].rsplit("/", 1)[0] + "/"
            out.append(
                ("compact.py:782 leaves under a deepest level", leaves, list(index.prefix_range(small)))
            )
            out.append(
                (
                    "search.py _read_quotes (+kind) a deepest level",
                    "SELECT id, text FROM chunks WHERE +kind = 'leaf' AND path >= ? AND path < ?",
                    list(index.prefix_range(small)),
                )
            )
        out.append(("summaries of one source", summaries, list(index.prefix_range(top))))
    out.append(("topics/route.py:231, plan.py:639 topics/", summaries, list(index.prefix_range("topics/"))))
    out.append(("digest.py:163, 707 global/", summaries, list(index.prefix_range("global/"))))
    topic = conn.execute(
        "SELECT path FROM chunks WHERE path >= 'topics/' AND path < 'topics0' LIMIT 1"
    ).fetchone()
    if topic is not None:
        base = "/".join(topic[0].split("/")[:2]) + "/"
        out.append(("topics/plan.py:154 one topic", summaries, list(index.prefix_range(base))))
    ids = [r[0] for r in conn.execute("SELECT id FROM chunks WHERE +kind = 'leaf' LIMIT 10")]
    out.append(
        (
            "search.py quotes_as_leaves: 10 hits",
            f"SELECT id FROM chunks WHERE id IN ({','.join('?' * len(ids))}) AND kind = 'summary'",
            ids,
        )
    )
    out.append(
        (
            "docsync.py:161 files of one folder",
            "SELECT * FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?",
            list(index.prefix_range("docs/")),
        )
    )
    return out


def timed(conn: sqlite3.Connection, sql: str, params: list[str], runs: int) -> tuple[float, str]:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        conn.execute(sql, params).fetchall()
        best = min(best, time.perf_counter() - t)
    plan = "; ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    return best * 1000, plan.replace("SEARCH chunks USING ", "").replace("COVERING ", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "chunks.db"
        src = sqlite3.connect(args.vault / ".vaultmem" / "chunks.db")
        dst = sqlite3.connect(copy)
        src.backup(dst)
        src.close()
        dst.close()
        conn = sqlite3.connect(copy, isolation_level=None)
        conn.execute("DROP TABLE IF EXISTS sqlite_stat1")
        conn.execute("DELETE FROM meta WHERE key = 'analyzed_rows'")
        suite = queries(conn)
        before = {name: timed(conn, sql, params, args.runs) for name, sql, params in suite}
        t = time.perf_counter()
        db.analyze(conn)
        analyze_ms = (time.perf_counter() - t) * 1000
        conn.close()
        conn = sqlite3.connect(copy, isolation_level=None)  # plans are made with the statistics read at open
        after = {name: timed(conn, sql, params, args.runs) for name, sql, params in suite}
        conn.close()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [
        [name, f"{before[name][0]:.2f}", f"{after[name][0]:.2f}", before[name][1], after[name][1]]
        for name, _, _ in suite
    ]
    print(f"\ndb.analyze on the copy took {analyze_ms:.0f} ms")
    print(table(["query", "no stats ms", "with stats ms", "plan without", "plan with"], rows))


if __name__ == "__main__":
    main()
