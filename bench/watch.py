"""The watch daemon's figures: hand edit -> searchable latency, a 1,000-file burst, idle CPU.

python bench/watch.py [--leaves 2000] [--edits 40] [--burst 1000] [--idle 60] [--real]

The daemon runs in its own process with its default settings (0.3 s debounce, 60 s rescan, the
configured worker count). Edits are saved in place into leaves of a generated, embedded vault; a reader
in this process polls search until the leaf comes back for the new word ("searchable", full text),
and until its vector matches the new text ("embedded"). Without --real a fake embedder of MiniLM's size
is used, so the figures are about the daemon, not the model.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import generated_messages, table

from vaultmem import Vault, daemonstate
from vaultmem.embed import FakeEmbedder

DAEMON = """
import signal, sys, threading
from vaultmem.daemon import Daemon
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
embedder = None if sys.argv[2] == "real" else FakeEmbedder(dim=384)
with Vault.open(sys.argv[1], embedder=embedder) as v:
    Daemon(v).run(stop)
"""


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait(cond, timeout: float = 120.0) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    while not cond():
        if time.perf_counter() - start > timeout:
            raise SystemExit("timed out")
        time.sleep(0.005)
    return time.perf_counter() - start


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=2000)
    parser.add_argument("--edits", type=int, default=40)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--real", action="store_true", help="use the configured model (MiniLM)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "vault"
        embedder = None if args.real else FakeEmbedder(dim=384)
        vault = Vault.init(root, embedder=embedder)
        vault.ingest_messages(generated_messages(args.leaves), source="bench")
        vault.flush()
        proc = subprocess.Popen([sys.executable, "-c", DAEMON, str(root), "real" if args.real else "fake"])
        try:
            wait(lambda: (daemonstate.read_status(vault.layout) or {}).get("last_rescan"))
            busy = "SELECT 1 FROM jobs WHERE kind IN ('extract', 'append_buffer', 'seal', 'resummarise')"
            wait(lambda: not vault.conn.execute(busy).fetchone(), timeout=600)  # the first compaction
            leaves = vault.ls(limit=2 * args.edits)
            searchable: list[float] = []
            embedded: list[float] = []
            busy_searchable: list[float] = []
            due = (
                "SELECT 1 FROM jobs WHERE kind != 'digest_daily' AND (state = 'running'"
                " OR (state = 'queued' AND run_after <= ?))"
            )
            for n, leaf in enumerate(leaves):
                quiet = n < args.edits  # first: edits with the pool idle; then back to back while it works
                if quiet:
                    wait(lambda: not vault.conn.execute(due, (time.time(),)).fetchone(), timeout=600)
                word = f"zq{n:04d}xv"
                path = root / vault.get(leaf.id).path
                head, _, _ = path.read_text(encoding="utf-8").partition("\n---\n")
                data = f"{head}\n---\nHand edit: the {word} meeting moved to Friday.\n".encode()
                start = time.perf_counter()
                with open(path, "r+b") as fh:
                    fh.write(data)
                    fh.truncate()
                wait(lambda w=word, i=leaf.id: any(h.id == i for h in vault.search(w, k=3)))
                (searchable if quiet else busy_searchable).append(time.perf_counter() - start)
                if not quiet:
                    continue
                wait(
                    lambda i=leaf.id: vault.conn.execute(
                        "SELECT 1 FROM vectors v JOIN chunks c ON c.id = v.id"
                        " WHERE v.id = ? AND v.content_hash = c.content_hash",
                        (i,),
                    ).fetchone()
                )
                embedded.append(time.perf_counter() - start)
            notes = root / "notes"
            notes.mkdir()
            start = time.perf_counter()
            for i in range(args.burst):
                (notes / f"n{i:04d}.md").write_text(
                    f"Note {i}: the heron nests by pond {i}.\n", encoding="utf-8"
                )
            written = time.perf_counter() - start

            def indexed() -> int:
                return int(
                    vault.conn.execute(
                        "SELECT count(DISTINCT json_extract(provenance, '$.file')) FROM chunks"
                        " WHERE source = 'notes'"
                    ).fetchone()[0]
                )

            wait(lambda: indexed() == args.burst)
            burst_indexed = time.perf_counter() - start
            wait(lambda: not vault.conn.execute("SELECT 1 FROM jobs WHERE kind = 'extract'").fetchone())
            burst_embedded = time.perf_counter() - start
            wait(lambda: not vault.conn.execute(busy).fetchone(), timeout=600)  # the burst's compaction
            for _ in range(3):  # quiet for a few seconds in a row: the burst's work is over
                wait(lambda: not vault.conn.execute(due, (time.time() + 5,)).fetchone(), timeout=600)
                time.sleep(1.0)
            c0, t0 = cpu_s(proc.pid), time.perf_counter()
            time.sleep(args.idle)
            idle = 100 * (cpu_s(proc.pid) - c0) / (time.perf_counter() - t0)
            lost = args.burst - indexed()
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        check = vault.check()
        vault.close()
    print(
        f"vault of {args.leaves:,} leaves, {'MiniLM' if args.real else 'fake 384-d embedder'},"
        f" {os.cpu_count()} CPUs; daemon exit {code}, check {'ok' if check.ok else 'FAILED'}"
    )
    rows: list[list[object]] = [
        [
            f"hand edit (pool idle) -> searchable, p50 s ({len(searchable)} edits)",
            statistics.median(searchable),
        ],
        ["hand edit (pool idle) -> searchable, p95 s", pct(searchable, 0.95)],
        [
            f"back-to-back edits, pool busy -> searchable, p50 s ({len(busy_searchable)})",
            statistics.median(busy_searchable),
        ],
        ["back-to-back edits, pool busy -> searchable, p95 s", pct(busy_searchable, 0.95)],
        ["hand edit (pool idle) -> re-embedded, p50 s", statistics.median(embedded)],
        ["hand edit (pool idle) -> re-embedded, p95 s", pct(embedded, 0.95)],
        [f"burst of {args.burst:,} notes: written in s", written],
        ["burst: all indexed after s", burst_indexed],
        ["burst: all embedded after s", burst_embedded],
        ["burst: notes lost", lost],
        [f"idle daemon CPU, % of one core ({args.idle:g} s)", idle],
    ]
    print(table(["figure", "value"], [[k, f"{v:.2f}" if isinstance(v, float) else v] for k, v in rows]))


if __name__ == "__main__":
    main()
