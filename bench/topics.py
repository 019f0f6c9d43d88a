"""What topic routing and the daily digest add to end-to-end ingest, on real conversations.

    python bench/topics.py ../shared/datasets/locomo/locomo_dev.json [--limit N] [--model default]

For each LoCoMo conversation, two fresh vaults are built with the real embedding model: one with topic
trees and the global tree switched off (``[topics] enabled = false``, ``[digest] enabled = false``), one
with the defaults. End-to-end ingest is ``ingest_messages`` + ``flush`` (embedding and admission, which
includes entity extraction in both) + ``compact`` (sealing, summaries, and with the defaults topic routing
and digests). The two are interleaved per conversation so machine noise hits both alike; the model is
loaded once, before timing. Printed as a table; ``--out`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import table
from bench.retrieval import load_locomo, turn_records
from vaultmem.embed import Embedder, load_embedder
from vaultmem.vault import Vault

OFF = "[topics]\nenabled = false\n\n[digest]\nenabled = false\n"


def build(
    path: Path, config: str | None, records: list[dict[str, object]], embedder: Embedder
) -> dict[str, float]:
    out: dict[str, float] = {}
    with Vault.init(path, config, embedder=embedder) as vault:
        t0 = time.perf_counter()
        vault.ingest_messages(records, source="locomo")
        out["ingest_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        vault.flush()
        out["embed_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = vault.compact()
        out["compact_s"] = time.perf_counter() - t0
        out["total_s"] = out["ingest_s"] + out["embed_s"] + out["compact_s"]
        count = vault.conn.execute
        out["topics"] = count(
            "SELECT count(*) FROM chunks WHERE kind = 'summary' AND path LIKE 'topics/%'"
        ).fetchone()[0]
        out["digests"] = count(
            "SELECT count(*) FROM chunks WHERE kind = 'summary' AND path LIKE 'global/%'"
        ).fetchone()[0]
        out["failed"] = report.jobs_failed
        out["check_ok"] = float(vault.check().ok)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--model", default="default")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    items = load_locomo(json.loads(args.dataset.read_text(encoding="utf-8")))[: args.limit]
    embedder = load_embedder(args.model)
    embedder.embed(["warm up the model before anything is timed"])
    totals: dict[str, dict[str, float]] = {"off": {}, "on": {}}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, item in enumerate(items):
            records = turn_records(item)
            order = (("off", OFF), ("on", None)) if n % 2 == 0 else (("on", None), ("off", OFF))
            for name, config in order:
                got = build(Path(tmp) / f"{n}-{name}", config, records, embedder)
                for key, value in got.items():
                    totals[name][key] = totals[name].get(key, 0.0) + value
                rows.append(
                    [
                        item.key,
                        name,
                        len(records),
                        *(f"{got[k]:.1f}" for k in ("ingest_s", "embed_s", "compact_s", "total_s")),
                        int(got["topics"]),
                        int(got["digests"]),
                    ]
                )
                print(f"  {item.key} {name}: {got['total_s']:.1f} s", file=sys.stderr)
    print(
        table(
            [
                "conversation",
                "topics+digest",
                "turns",
                "ingest s",
                "embed s",
                "compact s",
                "total s",
                "topic nodes",
                "digest nodes",
            ],
            rows,
        )
    )
    off, on = totals["off"], totals["on"]
    overhead = (on["total_s"] - off["total_s"]) / off["total_s"]
    print()
    print(
        table(
            ["", "ingest s", "embed s", "compact s", "total s", "failed jobs", "check ok"],
            [
                [
                    name,
                    *(f"{t[k]:.1f}" for k in ("ingest_s", "embed_s", "compact_s", "total_s")),
                    int(t["failed"]),
                    f"{int(t['check_ok'])}/{len(items)}",
                ]
                for name, t in (("off", off), ("on", on))
            ],
        )
    )
    print(
        f"\ntopic routing + daily digest add {100 * overhead:+.1f}% to end-to-end ingest ({len(items)} conversations)"
    )
    if args.out:
        args.out.write_text(json.dumps({"off": off, "on": on, "overhead": overhead}, indent=2))


if __name__ == "__main__":
    main()
