"""Ingest hot path and reindex, against an older tree in the same run.

    python bench/hotpath.py --base DIR [--messages 10000] [--runs 4]

Each run ingests ``--messages`` generated chat messages into a new vault in one call (durable, no
embedding; the engine cuts it into batches, as it does a file given to ``vaultmem ingest``; the
hashing embedder gives the vectors for the reindex) and rebuilds its index from the files, in a fresh
process per tree. The trees alternate, and which one goes first swaps every round (under load the tree
that ran first came out 0.86x against the same code); each figure is the median over the rounds, with the
best beside it. The CPU time of each (this process and its forked children: ingest's file writers,
reindex's readers; without the disk's waits) is printed too: on a loaded machine it moves far less than
the wall time. So is the CPU of the ingesting process alone: the forked writer overlaps it, so on a quiet
machine it bounds ingest's wall time from below.
"""

from __future__ import annotations

import argparse
import statistics
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
def own():  # this process alone: on a quiet machine its CPU bounds the wall time (the writers overlap it)
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t, c, o = time.perf_counter(), cpu(), own()
vault.ingest_messages(messages, source="chat")  # one call, as `vaultmem ingest` of a file: batches inside
ingest, ingest_cpu, ingest_own = time.perf_counter() - t, cpu() - c, own() - o
vault.flush()
t, c = time.perf_counter(), cpu()
vault.reindex()
reindex, reindex_cpu = time.perf_counter() - t, cpu() - c
vault.close()
print(ingest, reindex, ingest_cpu, reindex_cpu, ingest_own)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a directory holding an older vaultmem")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument(
        "--runs", type=int, default=4, help="rounds (even: each tree goes first equally often)"
    )
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "now": Path(__file__).resolve().parent.parent}
    got: dict[str, list[tuple[float, ...]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name in round_order(list(trees), run):
                vault = Path(tmp) / f"{name}-{run}"
                code = _RUN.format(bench=str(Path(__file__).parent), n=args.messages, vault=str(vault))
                out = run_in_tree(code, trees[name], tmp).split()
                got[name].append(tuple(float(out[i]) if len(out) > i else float("nan") for i in range(5)))
    n = args.messages
    med = {t: [statistics.median(r[i] for r in got[t]) for i in range(5)] for t in trees}
    best = {t: [min(r[i] for r in got[t]) for i in range(5)] for t in trees}
    rows = [
        [
            "ingest msg/s (durable, no embedding)",
            *(f"{n / med[t][0]:,.0f} ({n / best[t][0]:,.0f})" for t in trees),
        ],
        [
            "reindex s (leaves + vectors from sidecars)",
            *(f"{med[t][1]:.2f} ({best[t][1]:.2f})" for t in trees),
        ],
        ["ingest CPU s (with its forked writers)", *(f"{med[t][2]:.2f} ({best[t][2]:.2f})" for t in trees)],
        ["reindex CPU s (with its forked readers)", *(f"{med[t][3]:.2f} ({best[t][3]:.2f})" for t in trees)],
        [
            "ingest CPU s of the ingesting process alone",
            *(f"{med[t][4]:.2f} ({best[t][4]:.2f})" for t in trees),
        ],
    ]
    for i, row in enumerate(rows):
        row.append(f"{med['base'][i] / med['now'][i]:.2f}x")
    print(f"\n{n:,} messages, median (best) of {args.runs} rounds, the tree going first swapping each round")
    print(table(["figure", "base", "now", "base/now (speed-up, medians)"], rows))


def round_order(names: list[str], run: int) -> list[str]:
    """The trees in the order round ``run`` runs them: the first one swaps every round."""
    return names if run % 2 == 0 else names[::-1]


if __name__ == "__main__":
    main()
