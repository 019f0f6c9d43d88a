"""Search latency and memory on a generated vault of 100,000 leaves.

    python bench/scale.py [--leaves 100000] [--sources 100]

Leaves are spread over many sources (as a compacted vault spreads them over many directories). Their
vectors come from a hashing embedder of MiniLM's size (384 dims): the figure is about search over that
many vectors, not about the model. Queries are embedded by the real all-MiniLM-L6-v2, so latency
includes query embedding, as a user sees it.
"""

from __future__ import annotations

import argparse
import resource
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

    def __init__(self) -> None:
        self.fake = FakeEmbedder(dim=384)
        self.real = load_embedder()

    @property
    def model_id(self) -> str:
        return "bench-scale-384"

    @property
    def dim(self) -> int:
        return 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.real.embed(texts) if len(texts) <= 4 else self.fake.embed(texts)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=100_000)
    parser.add_argument("--sources", type=int, default=100)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        embedder = ScaleEmbedder()
        vault = Vault.init(Path(tmp) / "vault", embedder=embedder)
        messages = generated_messages(args.leaves)
        per = max(1, args.leaves // args.sources)
        t = time.perf_counter()
        for n, start in enumerate(range(0, len(messages), per)):
            vault.ingest_messages(messages[start : start + per], source=f"src-{n:03d}")
        ingest_s = time.perf_counter() - t
        t = time.perf_counter()
        vault.flush()
        embed_s = time.perf_counter() - t
        base_rss = rss_mb()
        t = time.perf_counter()
        vault.search("warm up the vector cache", k=10)
        first_s = time.perf_counter() - t
        lat = []
        for _ in range(3):
            for q in QUERIES:
                t = time.perf_counter()
                vault.search(q, k=10)
                lat.append(time.perf_counter() - t)
        ctx = []
        for q in QUERIES:
            t = time.perf_counter()
            vault.context(q, 1024)
            ctx.append(time.perf_counter() - t)
        leaves = vault.stats().leaves
        vault.close()
    rows.append(
        [
            "search k=10 (incl. query embedding)",
            f"{1000 * np.percentile(lat, 50):.1f}",
            f"{1000 * np.percentile(lat, 95):.1f}",
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
        f"first search (loads {leaves:,} vectors) {first_s * 1000:.0f} ms"
    )
    print(table(["operation", "p50 ms", "p95 ms"], rows))
    print(
        f"peak RSS {rss_mb():.0f} MB (before the first search: {base_rss:.0f} MB; "
        f"the vector matrix alone is {leaves * 384 * 4 / 2**20:.0f} MB)"
    )


if __name__ == "__main__":
    main()
