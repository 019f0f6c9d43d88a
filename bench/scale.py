"""Search latency and memory on a generated vault of 100,000 leaves.

    python bench/scale.py [--leaves 100000] [--sources 100] [--base DIR] [--vault DIR [--base-vault DIR2]]

The first search in a new process (what a `vaultmem search` from a cold shell pays for its vectors) is
timed in fresh processes, alternating with the older package in ``--base DIR`` when given (a copy of
another tree's ``vaultmem/``), so both see the same machine.

Leaves are spread over many sources (as a compacted vault spreads them over many directories). Their
vectors come from a hashing embedder of MiniLM's size (384 dims): the figure is about search over that
many vectors, not about the model. Queries are embedded by the real all-MiniLM-L6-v2, so latency
includes query embedding, as a user sees it: a query asked for the first time pays its forward pass, one
asked again takes its vector from the cache of recent query vectors (``search.QUERY_VECTORS``); both are
reported. A new query is timed twice: embedded by NumPy (as in a one-shot process: a `vaultmem search`
from a shell), then by the query runtime a long-lived process opens after its first search
(``NumpyBertEmbedder.start_query_runtime``: ONNX Runtime), once it is open; a tree without one reports
NumPy twice. The model's derived files (prepared weights, ONNX graph) come from the user cache, as a
vault's do. ``--vault DIR`` searches an existing generated vault instead of building one (e.g. one that
``bench/dashboard.py --keep`` built: its vectors' model is read from the index). With ``--base``,
``--vault`` and ``--base-vault`` (a copy of the same vault for the older tree, its index as that tree
left it: migrations and planner statistics differ), the searches too are timed in new processes, the two
trees alternating for ``--runs`` rounds, and reported side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import generated_messages, table

from vaultmem import Vault
from vaultmem.embed import FakeEmbedder, load_embedder
from vaultmem.search import QUERY_VECTORS
from vaultmem.vault import model_cache_dir

QUERIES = [
    "when is the dentist appointment",
    "what was the budget for Q3",
    "crash when the payload is empty",
    "trains or flights",
    "ryokan booking in Kyoto",
    "rent due on the first",
    "Chen Jing's review of the parser",
    "espresso machine",
    "deploying the webhook fix",
    "hiking trip to Sintra",
]


class ScaleEmbedder:
    """Bulk texts -> hashing vectors (fast); a query (few texts) -> the real model."""

    def __init__(self, model_id: str = "bench-scale-384") -> None:
        self.fake = FakeEmbedder(dim=384)
        self.real = load_embedder(cache_dir=model_cache_dir())
        self._model_id = model_id

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.real.embed(texts) if len(texts) <= 4 else self.fake.embed(texts)

    # The query path of the real model, as ``search.QueryVectors`` asks it (a tree that has one).
    def embed_query(self, text: str) -> np.ndarray:
        embed_query = getattr(self.real, "embed_query", None)
        row: np.ndarray = embed_query(text) if embed_query is not None else self.real.embed([text])[0]
        return row

    def start_query_runtime(self) -> bool:
        start = getattr(self.real, "start_query_runtime", None)
        return bool(start()) if start is not None else False

    def wait_query_runtime(self) -> str:
        wait = getattr(self.real, "wait_query_runtime", None)
        return str(wait()) if wait is not None else "numpy"

    # Whether search may embed a new query beside its word search (``search.VectorsAhead``): what the real
    # model says (a tree without the property searches as before).
    @property
    def queries_off_thread(self) -> bool:
        return bool(getattr(self.real, "queries_off_thread", False))


def timed(vault: Vault, query: str) -> float:
    t = time.perf_counter()
    vault.search(query, k=10)
    return time.perf_counter() - t


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=100_000)
    parser.add_argument("--sources", type=int, default=100)
    parser.add_argument("--base", type=Path, help="a directory holding an older vaultmem package")
    parser.add_argument("--runs", type=int, default=3, help="new processes per tree for the first search")
    parser.add_argument("--vault", type=Path, help="search this generated vault instead of building one")
    parser.add_argument(
        "--base-vault",
        type=Path,
        help="with --base and --vault: a copy of the vault for the older tree (its index as that tree left"
        " it); searches are then timed in new processes too, the two trees alternating, --runs rounds",
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.base is not None and args.base_vault is not None and args.vault is not None:
        compare(args)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ingest_s = embed_s = 0.0
        if args.vault is not None:
            where = args.vault
            model_id = most_vectors(where)
            vault = Vault.open(where, embedder=ScaleEmbedder(model_id))
        else:
            where = Path(tmp) / "vault"
            model_id = "bench-scale-384"
            vault = Vault.init(where, embedder=ScaleEmbedder(model_id))
            messages = generated_messages(args.leaves)
            per = max(1, args.leaves // args.sources)
            t = time.perf_counter()
            for n, start in enumerate(range(0, len(messages), per)):
                vault.ingest_messages(messages[start : start + per], source=f"src-{n:03d}")
            ingest_s = time.perf_counter() - t
            t = time.perf_counter()
            vault.flush()
            embed_s = time.perf_counter() - t
        # The HNSW graph of a vault this large is built in the background after the vectors are saved;
        # searches are timed once it is in (a vault searched day to day has it), not beside its build.
        t = time.perf_counter()
        vault.wait_for_graph()
        graph_s = time.perf_counter() - t
        base_rss = rss_mb()
        embedder = vault.embedder
        assert isinstance(embedder, ScaleEmbedder)
        # New queries first as a one-shot process embeds them (NumPy), then as a long-lived one does
        # once its query runtime is open (``start_query_runtime``; a tree without one stays in NumPy).
        vault.warm_queries = False
        t = time.perf_counter()
        vault.search("warm up the vector cache", k=10)
        first_s = time.perf_counter() - t
        for q in QUERIES:  # untimed: the first searches of a process read pages the later ones find cached
            vault.search(q, k=10)
        QUERY_VECTORS.clear()
        lat_numpy = [timed(vault, q) for q in QUERIES]
        embedder.start_query_runtime()
        runtime = embedder.wait_query_runtime()
        QUERY_VECTORS.clear()
        lat: list[float] = []
        again: list[float] = []
        for run in range(3):
            for q in QUERIES:
                (again if run else lat).append(timed(vault, q))
        ctx = []
        for q in QUERIES:
            t = time.perf_counter()
            vault.context(q, 1024)
            ctx.append(time.perf_counter() - t)
        leaves = vault.stats().leaves
        vault.close()
        if args.json:
            print(
                json.dumps({"numpy": lat_numpy, "new": lat, "again": again, "context": ctx, "first": first_s})
            )
            return
        first = first_search(where, args.base, args.runs, model_id)
    rows.append(
        [
            "search k=10, a new query, its vector by NumPy (a one-shot process)",
            f"{1000 * np.percentile(lat_numpy, 50):.1f}",
            f"{1000 * np.percentile(lat_numpy, 95):.1f}",
        ]
    )
    rows.append(
        [
            f"search k=10, a new query, its vector by the query runtime ({runtime})",
            f"{1000 * np.percentile(lat, 50):.1f}",
            f"{1000 * np.percentile(lat, 95):.1f}",
        ]
    )
    rows.append(
        [
            "search k=10, the same query again (its vector cached)",
            f"{1000 * np.percentile(again, 50):.1f}",
            f"{1000 * np.percentile(again, 95):.1f}",
        ]
    )
    rows.append(
        [
            "context 1024 tokens",
            f"{1000 * np.percentile(ctx, 50):.1f}",
            f"{1000 * np.percentile(ctx, 95):.1f}",
        ]
    )
    print(
        f"\n{leaves:,} leaves in {args.sources} sources; ingest {ingest_s:.1f} s, vectors {embed_s:.1f} s, "
        f"waited {graph_s:.1f} s for the HNSW graph, first search (loads {leaves:,} vectors) "
        f"{first_s * 1000:.0f} ms"
    )
    print(table(["operation", "p50 ms", "p95 ms"], rows))
    print(f"\nfirst search in a new process (open + vectors + query), best of {args.runs}:")
    names = list(first)
    cells = [[n, f"{first[n][0] * 1000:.0f}", f"{first[n][1] * 1000:.0f}"] for n in names]
    if len(names) == 2:
        cells.append(
            [
                "base/now",
                f"{first['base'][0] / first['now'][0]:.1f}x",
                f"{first['base'][1] / first['now'][1]:.1f}x",
            ]
        )
    print(table(["tree", "open + first search ms", "second search ms"], cells))
    print(
        f"peak RSS {rss_mb():.0f} MB (before the first search: {base_rss:.0f} MB; "
        f"the vector matrix alone is {leaves * 384 * 4 / 2**20:.0f} MB)"
    )


_FIRST = """
import sys, time
t = time.perf_counter()
sys.path.insert(0, {bench!r})
from scale import ScaleEmbedder
from vaultmem import Vault
embedder = ScaleEmbedder({model_id!r})
embedder.real.embed(["load the query model first: its cost is not the vectors'"])
t = time.perf_counter()
vault = Vault.open({vault!r}, embedder=embedder)
vault.search("when is the dentist appointment", k=10)
first = time.perf_counter() - t
t = time.perf_counter()
vault.search("espresso machine", k=10)
print(first, time.perf_counter() - t)
"""


def compare(args: argparse.Namespace) -> None:
    """Search latency of the older tree (on its own copy of the vault) and this one, in new processes,
    alternating, pooled over ``--runs`` rounds; then the first search in a new process, alternating too."""
    trees = {
        "base": (args.base.resolve(), args.base_vault),
        "now": (Path(__file__).resolve().parent.parent, args.vault),
    }
    pooled: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for _ in range(args.runs):
        for name, (tree, vault) in trees.items():
            out = subprocess.run(
                [sys.executable, __file__, "--vault", str(vault), "--json"],
                env={**os.environ, "PYTHONPATH": str(tree)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            figures = json.loads(out.strip().splitlines()[-1])
            for key, value in figures.items():
                pooled[name].setdefault(key, []).extend(value if isinstance(value, list) else [value])
    rows = []
    for key, label in (
        ("numpy", "search k=10, a new query, its vector by NumPy (a one-shot process)"),
        ("new", "search k=10, a new query, its vector by the query runtime once open"),
        ("again", "search k=10, the same query again (its vector cached)"),
        ("context", "context 1024 tokens"),
    ):
        base, now = (1000 * np.percentile(pooled[n][key], 50) for n in ("base", "now"))
        rows.append([label, f"{base:.1f}", f"{now:.1f}", f"{base / now:.1f}x"])
    print(
        f"\nsearch p50 in ms, {args.runs} alternating rounds of 10 queries (new processes, vault already open)"
    )
    print(table(["operation", "base", "now", "base/now"], rows))
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.runs):
        for name, (tree, vault) in trees.items():
            found = first_search(vault, None, 1, most_vectors(vault), tree)["now"]
            best[name] = min(best.get(name, found), found)
    print(f"\nfirst search in a new process (open + vectors + query), best of {args.runs}:")
    print(
        table(
            ["tree", "open + first search ms", "second search ms"],
            [[n, f"{best[n][0] * 1000:.0f}", f"{best[n][1] * 1000:.0f}"] for n in trees],
        )
    )


def most_vectors(vault: Path) -> str:
    """The model most of a vault's vectors are of."""
    import sqlite3

    conn = sqlite3.connect(f"file:{vault / '.vaultmem' / 'chunks.db'}?mode=ro", uri=True)
    row = conn.execute("SELECT model FROM vectors GROUP BY model ORDER BY count(*) DESC LIMIT 1").fetchone()
    conn.close()
    if row is None:
        raise SystemExit(f"{vault}: no vectors")
    return str(row[0])


def first_search(
    vault: Path, base: Path | None, runs: int, model_id: str, now: Path | None = None
) -> dict[str, tuple[float, float]]:
    """Best (first search, second search) seconds in new processes, per tree."""
    trees = {"now": now or Path(__file__).resolve().parent.parent}
    if base is not None:
        trees = {"base": base.resolve(), **trees}
    code = _FIRST.format(bench=str(Path(__file__).resolve().parent), vault=str(vault), model_id=model_id)
    best: dict[str, tuple[float, float]] = {}
    for _ in range(runs):
        for name, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run(
                [sys.executable, "-c", code],
                env=env,
                cwd=vault.parent,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            figures = (float(out[0]), float(out[1]))
            best[name] = min(best.get(name, figures), figures)
    return best


if __name__ == "__main__":
    main()
