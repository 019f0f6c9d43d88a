"""What a ``## Related`` pass costs: choosing the links, and the whole plan (reading files) cold and warm.

    python bench/related.py [--vault VAULT] [--levels 500,2000,4000] [--before OLD_related.py] [--runs 3]

- ``choose`` on synthetic levels (random unit vectors, 384-d, in a scratch SQLite with the two tables it
  reads), this tree's against ``--before`` (another checkout's ``vaultmem/related.py``, e.g. main's);
- with ``--vault`` (a compacted vault, e.g. one kept by ``bench/retrieval.py --keep``): ``plan`` with no
  memo (every level's file read and hashed, as every pass did before the memo) and with the memo of the
  pass before (what the vault keeps between passes), and the old tree's ``plan``.
Times are best of ``--runs``; a plan is made, never applied (open a copy: opening may heal the vault).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sqlite3
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import table

from vaultmem import Vault, related
from vaultmem.embed import FakeEmbedder


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("related_before", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _best(fn: Any, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return 1000 * best


def synthetic(n: int, dim: int = 384) -> sqlite3.Connection:
    """``n`` levels of 4 sources (folders of 8 siblings) with random vectors, as ``choose`` reads them."""
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute("CREATE TABLE chunks (id TEXT, kind TEXT, path TEXT, provenance TEXT, ts TEXT)")
    conn.execute("CREATE TABLE vectors (id TEXT, model TEXT, vec BLOB)")
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((n, dim)).astype("<f4")
    for i in range(n):
        path = f"sources/s{i % 4}/{i // 32:03d}-p/{i:04d}-level/_summary.md"
        conn.execute(
            "INSERT INTO chunks VALUES (?, 'summary', ?, ?, ?)",
            (f"s{i}", path, json.dumps({"title": f"level {i}"}), f"2024-01-01T00:{i % 60:02d}:00Z"),
        )
        conn.execute("INSERT INTO vectors VALUES (?, 'm', ?)", (f"s{i}", vecs[i].tobytes()))
    return conn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=None)
    parser.add_argument("--levels", default="500,2000,4000")
    parser.add_argument("--before", type=Path, default=None, help="another tree's vaultmem/related.py")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    before = _load(args.before) if args.before else None
    rows = []
    for n in (int(x) for x in args.levels.split(",") if x):
        conn = synthetic(n)
        now = _best(lambda c=conn: related.choose(c, "m"), args.runs)
        old = _best(lambda c=conn: before.choose(c, "m"), args.runs) if before else float("nan")
        rows.append([f"choose, {n} synthetic levels", f"{old:.1f}", f"{now:.1f}"])
    if args.vault:
        with Vault.open(args.vault, embedder=FakeEmbedder(384)) as vault:
            model = vault.conn.execute("SELECT model FROM vectors LIMIT 1").fetchone()[0]
            levels = vault.conn.execute("SELECT count(*) FROM chunks WHERE kind = 'summary'").fetchone()[0]
            conn, layout = vault.conn, vault.layout
            old = _best(lambda: before.plan(conn, layout, model), args.runs) if before else float("nan")
            cold = _best(lambda: related.plan(conn, layout, model), args.runs)
            memo: related.Known = {}
            related.plan(conn, layout, model, memo)
            warm = _best(lambda: related.plan(conn, layout, model, memo), args.runs)
            rows.append([f"plan, {levels} levels, no memo", f"{old:.1f}", f"{cold:.1f}"])
            rows.append([f"plan, {levels} levels, memo of the pass before", "", f"{warm:.1f}"])
    print(table(["ms (best of runs)", "before", "now"], rows))


if __name__ == "__main__":
    main()
