"""Ingest hot path and reindex, against an older tree in the same run.

    python bench/hotpath.py --base DIR [--messages 10000] [--runs 3]

Each run ingests ``--messages`` generated chat messages into a new vault in one call (durable, no
embedding; the engine cuts it into batches, as it does a file given to ``vaultmem ingest``; the
hashing embedder gives the vectors for the reindex) and rebuilds its index from the files, in a fresh
process per tree; the trees alternate so a loaded machine slows both alike; the best run counts. The
CPU time of each (this process and its forked children: ingest's file writers, reindex's readers;
without the disk's waits) is printed too: on a loaded machine it moves far less than the wall time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import run_in_tree, table

_RUN = """
import resource, sys, time
sys.path.insert(0, {bench!r})
from _common import generated_messages
from vaultmem import Vault
from vaultmem.embed import FakeEmbedder
messages = generated_messages({n})
vault = Vault.init({vault!r}, embedder=FakeEmbedder(384))
def cpu():  # this process and its forked children (ingest's file writers, reindex's readers)
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
t, c = time.perf_counter(), cpu()
vault.ingest_messages(messages, source="chat")  # one call, as `vaultmem ingest` of a file: batches inside
ingest, ingest_cpu = time.perf_counter() - t, cpu() - c
vault.flush()
t, c = time.perf_counter(), cpu()
vault.reindex()
reindex, reindex_cpu = time.perf_counter() - t, cpu() - c
vault.close()
print(ingest, reindex, ingest_cpu, reindex_cpu)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a directory holding an older vaultmem")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "now": Path(__file__).resolve().parent.parent}
    best: dict[str, tuple[float, float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name, tree in trees.items():
                vault = Path(tmp) / f"{name}-{run}"
                code = _RUN.format(bench=str(Path(__file__).parent), n=args.messages, vault=str(vault))
                out = run_in_tree(code, tree, tmp).split()
                got = (
                    *map(float, out[:2]),
                    *(float(out[i]) if len(out) > i else float("nan") for i in (2, 3)),
                )
                old = best.get(name)
                best[name] = tuple(min(a, b) for a, b in zip(old, got, strict=True)) if old else got  # type: ignore[assignment]
    n = args.messages
    rows = [
        ["ingest msg/s (durable, no embedding)", *(f"{n / best[t][0]:,.0f}" for t in trees)],
        ["reindex s (leaves + vectors from sidecars)", *(f"{best[t][1]:.2f}" for t in trees)],
        ["ingest CPU s (with its forked writers)", *(f"{best[t][2]:.2f}" for t in trees)],
        ["reindex CPU s (with its forked readers)", *(f"{best[t][3]:.2f}" for t in trees)],
    ]
    rows[0].append(f"{best['base'][0] / best['now'][0]:.2f}x")
    rows[1].append(f"{best['base'][1] / best['now'][1]:.2f}x")
    rows[2].append(f"{best['base'][2] / best['now'][2]:.2f}x")
    rows[3].append(f"{best['base'][3] / best['now'][3]:.2f}x")
    print(f"\n{n:,} messages, best of {args.runs} alternating runs")
    print(table(["figure", "base", "now", "base/now (speed-up)"], rows))


if __name__ == "__main__":
    main()
