"""A first run on LoCoMo conversations: ingest, flush (embed) and compact with the real NumPy MiniLM,
against an older tree in the same run.

    python bench/firstrun.py DATASET_PATH --base DIR [--conversation conv-26|all] [--runs 1] [--flush-only]

``--flush-only``: ingest and flush (embedding every leaf) only; the flush row's texts/s is the issue's
"embedding, short chat turns, end to end". Each tree keeps its derived model files in its own cache
directory, as a vault's embedder does: the first run builds them (its flush pays for it), later runs
read them back.

``--conversation all``: every conversation of the file, each in its own vault one after the other in
one process with one embedder (as ``bench/retrieval.py --compact`` builds them), whose worker
processes are started once and kept, as one ``ingest --wait`` keeps them; the phases' seconds are
the sums. Each run builds the vaults in a fresh process per tree (``--base``: a directory holding another copy of
the ``vaultmem`` package), the trees alternating so a loaded machine slows both alike. Reported per
tree: wall seconds of each phase, the compaction's CPU seconds (this process and the embedder's worker
processes, read from /proc while they live), and whether the two trees wrote the same summaries (every
summary file's bytes) and the same summary vectors (float32 bytes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import run_in_tree, table

_RUN = """
import hashlib, json, os, resource, sqlite3, sys, time
sys.path.insert(0, {bench!r})
from pathlib import Path
from retrieval import load_locomo, turn_records
from vaultmem import Vault
from vaultmem.embed import NumpyBertEmbedder, default_model_path
items = [i for i in load_locomo(json.loads(Path({dataset!r}).read_text())) if {key!r} in ("all", i.key)]
# Both trees keep derived model files (prepared weights; now also the ONNX graph) where a vault's embedder
# keeps them (``vault.model_cache_dir``), here one directory per tree: built in the first run, then read
# back by later runs and by the worker processes of every conversation.
embedder = NumpyBertEmbedder(default_model_path(), cache_dir=Path({cache!r}))
embedded = [0]  # texts sent to the model, every phase
_embed, _embed_calls = embedder.embed, embedder.embed_calls
def counted(texts):
    embedded[0] += len(texts)
    return _embed(texts)
def counted_calls(calls):
    embedded[0] += sum(map(len, calls))
    return _embed_calls(calls)
embedder.embed, embedder.embed_calls = counted, counted_calls
TICK = os.sysconf("SC_CLK_TCK")
def live_children_cpu():
    # The embedder's worker processes live on from one conversation to the next (as in one
    # ``ingest --wait``): their CPU so far, read from /proc (RUSAGE_CHILDREN counts only waited children).
    total = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                fields = Path("/proc/" + pid + "/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return total
def cpu():
    return live_children_cpu() + sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
ingest = flush = compact = compact_cpu = 0.0
leaves = 0
files = hashlib.sha256()
vecs = hashlib.sha256()
for n, item in enumerate(items):
    root = Path({vault!r}) / str(n)
    vault = Vault.init(root, embedder=embedder)
    t = time.perf_counter(); vault.ingest_messages(turn_records(item), source="bench"); ingest += time.perf_counter() - t
    t = time.perf_counter(); vault.flush(); flush += time.perf_counter() - t
    t, c = time.perf_counter(), cpu()
    if not {flush_only!r}:
        vault.compact()
    compact += time.perf_counter() - t
    compact_cpu += cpu() - c
    leaves += vault.conn.execute("SELECT count(*) FROM chunks WHERE kind = 'leaf'").fetchone()[0]
    vault.close()
    for p in sorted((root / "sources").rglob("_*.md")):
        files.update(str(p.relative_to(root)).encode() + p.read_bytes())
    conn = sqlite3.connect(root / ".vaultmem" / "chunks.db")
    for path, vec in conn.execute("SELECT c.path, v.vec FROM chunks c JOIN vectors v ON v.id = c.id WHERE c.kind = 'summary' ORDER BY c.path"):
        vecs.update(path.encode() + vec)
    conn.close()
embedder.close()
print(json.dumps(dict(leaves=leaves, ingest=ingest, flush=flush, compact=compact, compact_cpu=compact_cpu, embedded=embedded[0], files=files.hexdigest(), vectors=vecs.hexdigest())))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--base", type=Path, required=True, help="a directory holding an older vaultmem")
    parser.add_argument("--conversation", default="conv-26", help="a conversation's key, or 'all'")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--flush-only", action="store_true", help="ingest and flush, no compaction")
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "now": Path(__file__).resolve().parent.parent}
    best: dict[str, dict[str, float]] = {}
    digests: dict[str, set[tuple[str, str]]] = {name: set() for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name, tree in trees.items():
                code = _RUN.format(
                    bench=str(Path(__file__).parent),
                    dataset=str(args.dataset.resolve()),
                    key=args.conversation,
                    vault=str(Path(tmp) / f"{name}-{run}"),
                    flush_only=args.flush_only,
                    cache=str(Path(tmp) / f"model-cache-{name}"),
                )
                out = run_in_tree(code, tree, tmp)
                got = json.loads(out.strip().splitlines()[-1])
                digests[name].add((got.pop("files"), got.pop("vectors")))
                got["total"] = got["ingest"] + got["flush"] + got["compact"]
                got["flush_rate"] = -got.pop("leaves") / got["flush"]  # negated: best is the min
                old = best.get(name)
                best[name] = {k: min(v, old[k]) for k, v in got.items()} if old else got
    rows: list[list[object]] = []
    for key, label in (
        ("ingest", "ingest s"),
        ("flush", "flush (embed) s"),
        ("flush_rate", "flush texts/s (leaves embedded / flush s)"),
        ("compact", "compact s"),
        ("compact_cpu", "compact CPU s (with the embedder's workers)"),
        ("total", "ingest + flush + compact s"),
        ("embedded", "texts sent to the model (every phase)"),
    ):
        rows.append(
            [
                label,
                *(f"{abs(best[t][key]):.1f}" for t in trees),
                f"{best['base'][key] / best['now'][key]:.2f}x"
                if key != "flush_rate"
                else f"{best['now'][key] / best['base'][key]:.2f}x",  # a rate: higher is better
            ]
        )
    same = digests["base"] == digests["now"] and len(digests["now"]) == 1
    rows.append(["same summary files and summary vectors (bytes)", "", "", "yes" if same else "NO"])
    print(f"\n{args.conversation}, best of {args.runs} alternating run(s)")
    print(table(["figure", "base", "now", "base/now (texts/s: now/base)"], rows))


if __name__ == "__main__":
    main()
