"""The dashboard at 10,000 and 100,000 leaves: time to first paint and API latency per panel.

    python bench/dashboard.py [--sizes 10000,100000] [--sources 10] [--keep DIR] [--runs 21]

Each size gets a generated vault (``bench/_common.generated_messages``, spread over the last 365 days
with a 10-day silence and one source that stops 60 days before the end; 10 sources), embedded by the
deterministic hashing embedder at MiniLM's 384 dimensions (the figures are the dashboard's and the
index's, not the model's; search embeds its query with the same fake), then compacted. ``--keep DIR``
keeps the vaults there and reuses them on the next run. For each panel the script times its JSON
endpoint over HTTP on loopback (the first call, then the p50 / p95 of ``--runs`` more), twice: with
every leaf still in ``_fresh/`` and after compaction. Time to first paint is measured in Debian's
chromium driven by Playwright: first contentful paint, and the moment the status panel has drawn
its data, median of 5 cold page loads.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import generated_messages, table
from vaultmem.dashboard import Dashboard
from vaultmem.dashboard.page import CHROMIUM, CHROMIUM_FLAGS
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

QUERIES = ["ryokan booking in Kyoto", "budget for Q3", "crash when the payload is empty", "espresso machine"]


def messages(n: int, sources: int) -> dict[str, list[dict[str, object]]]:
    """``n`` generated chat turns over the last year, per source; days 200-209 are silent and the
    last source stops 60 days before today."""
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - timedelta(days=364)
    days = [start + timedelta(days=d) for d in range(365) if not 200 <= d < 210]
    out: dict[str, list[dict[str, object]]] = {}
    for i, record in enumerate(generated_messages(n, sessions_of=50)):
        source = f"src-{i % sources:02d}"
        pool = days[:-60] if i % sources == sources - 1 else days
        day = pool[(i * len(pool)) // n]
        record["ts"] = (day + timedelta(minutes=i % 1440)).strftime("%Y-%m-%dT%H:%M:%SZ")
        record["session"] = f"{source}-{day:%Y-%m-%d}"
        out.setdefault(source, []).append(record)
    return out


def build(root: Path, n: int, sources: int) -> dict[str, float]:
    """A vault of ``n`` leaves at ``root`` (flushed, not compacted); returns the build's timings."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    with Vault.init(root, embedder=FakeEmbedder(dim=384)) as vault:
        for source, records in messages(n, sources).items():
            vault.ingest_messages(records, source=source)
        timings["ingest"] = time.perf_counter() - t
        t = time.perf_counter()
        vault.flush()
        timings["embed+admit"] = time.perf_counter() - t
    return timings


def get(port: int, token: str, path: str) -> float:
    """One GET of ``path`` (ms); a non-200 answer is an error of the bench."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t = time.perf_counter()
    conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "X-Vaultmem-Token": token})
    response = conn.getresponse()
    body = response.read()
    ms = (time.perf_counter() - t) * 1000
    conn.close()
    if response.status != 200:
        raise SystemExit(f"{path}: {response.status} {body[:300]!r}")
    return ms


def get_json(port: int, token: str, path: str) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "X-Vaultmem-Token": token})
    data = json.loads(conn.getresponse().read())
    conn.close()
    return data


def endpoints(port: int, token: str) -> dict[str, Callable[[int], str]]:
    """Panel -> the path of its request number ``i`` (search varies its query)."""
    graph = get_json(port, token, "/api/graph?limit=300")
    hot = graph["nodes"][0]["key"] if graph["nodes"] else "person:nobody"
    sources = get_json(port, token, "/api/children")["items"]
    first = sources[0]["id"]
    top = get_json(port, token, f"/api/children?source={quote(first)}&limit=100")["items"]
    level = next((x["id"] for x in top if x["kind"] == "summary"), None)
    heat = get_json(port, token, "/api/heatmap")
    busiest = max(heat["days"], key=lambda d: heat["days"][d]) if heat["days"] else "today"
    paths: dict[str, Callable[[int], str]] = {
        "status": lambda i: "/api/status",
        "metrics": lambda i: "/api/metrics",
        "graph (300 by heat)": lambda i: "/api/graph?limit=300",
        "topic page (hottest)": lambda i: f"/api/topic?key={quote(hot)}",
        "heatmap, all": lambda i: "/api/heatmap",
        "heatmap, one source": lambda i: f"/api/heatmap?source={quote(first)}",
        "search": lambda i: f"/api/search?q={quote(QUERIES[i % len(QUERIES)])}",
        "search, one source": lambda i: (
            f"/api/search?q={quote(QUERIES[i % len(QUERIES)])}&scope=source:{quote(first)}"
        ),
        "tree: sources": lambda i: "/api/children",
        "tree: a source's top, page 1": lambda i: f"/api/children?source={quote(first)}&limit=100",
        "today (busiest day)": lambda i: f"/api/day?day={busiest}",
    }
    if level is not None:
        paths["tree: a level's children"] = lambda i: f"/api/children?node={level}"
    return paths


def measure_api(vault: Vault, runs: int) -> dict[str, tuple[float, float, float]]:
    """Panel -> (first call, p50, p95) in ms."""
    out: dict[str, tuple[float, float, float]] = {}
    with Dashboard(vault, run_queue=False, embedder=FakeEmbedder(dim=384)) as dash:
        for name, path in endpoints(dash.port, dash.token).items():
            first = get(dash.port, dash.token, path(0))
            times = sorted(get(dash.port, dash.token, path(i + 1)) for i in range(runs))
            out[name] = (first, statistics.median(times), times[int(0.95 * (len(times) - 1))])
    return out


def first_paint(vault: Vault, loads: int = 5) -> tuple[float, float]:
    """Median over cold page loads of (first contentful paint, status panel drawn), ms."""
    from playwright.sync_api import sync_playwright

    fcp, drawn = [], []
    with Dashboard(vault, run_queue=False, embedder=FakeEmbedder(dim=384)) as dash, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS))
        for _ in range(loads):
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            page = context.new_page()
            page.goto(dash.url)
            page.wait_for_selector("html[data-ready-status]", timeout=600_000)
            # Paint timing is measured by the browser from the navigation's start (the redirect that
            # trades the token for a cookie included).
            timing = page.evaluate(
                "() => ({fcp: (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime,"
                " drawn: performance.getEntriesByName('status-drawn')[0]?.startTime ?? performance.now()})"
            )
            fcp.append(timing["fcp"])
            drawn.append(timing["drawn"])
            context.close()
        browser.close()
    return statistics.median(fcp), statistics.median(drawn)


def api_table(measured: dict[str, tuple[float, float, float]]) -> str:
    rows = [
        [name, f"{first:.1f}", f"{p50:.1f}", f"{p95:.1f}"] for name, (first, p50, p95) in measured.items()
    ]
    return str(table(["panel API", "first ms", "p50 ms", "p95 ms"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the generated vaults in this folder")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        results: dict[int, dict[str, Any]] = {}
        for n in sizes:
            root = base / f"dash-{n}"
            info: dict[str, Any] = {}
            fresh = root / ".fresh-done"
            if not fresh.exists():
                info["build"] = build(root, n, args.sources)
                fresh.touch()
            with Vault.open(root, embedder=FakeEmbedder(dim=384)) as vault:
                compacted = (root / ".compacted").exists()
                if not compacted:
                    info["fresh"] = measure_api(vault, args.runs)
                    # Printed at once: compacting 100,000 leaves takes a while on a busy machine.
                    print(f"\n{n:,} leaves, all in _fresh/ (before compaction)")
                    print(api_table(info["fresh"]), flush=True)
                    t = time.perf_counter()
                    vault.compact()
                    info["compact_s"] = time.perf_counter() - t
                    (root / ".compacted").touch()
                info["compacted"] = measure_api(vault, args.runs)
                t = time.perf_counter()
                files, index_bytes = vault.storage()
                info["storage_walk_ms"] = (time.perf_counter() - t) * 1000
                info["bytes"] = (files, index_bytes)
                info["paint"] = first_paint(vault)
                info["leaves"] = vault.stats(files=False).leaves
            results[n] = info
            print(
                f"{n:,} leaves done: {json.dumps({k: v for k, v in info.items() if k in ('build', 'compact_s')})}",
                flush=True,
            )
    for info in results.values():
        print(f"\n## {info['leaves']:,} leaves, {args.sources} sources")
        if "build" in info:
            b = info["build"]
            print(
                f"build: ingest {b['ingest']:.0f} s, embed+admit {b['embed+admit']:.0f} s, compact {info.get('compact_s', 0):.0f} s"
            )
        files, index_bytes = info["bytes"]
        print(
            f"files {files / 2**20:.0f} MiB, index {index_bytes / 2**20:.0f} MiB; the storage walk (off the"
            f" request path, every 60 s) took {info['storage_walk_ms']:.0f} ms"
        )
        fcp, drawn = info["paint"]
        print(
            f"first contentful paint {fcp:.0f} ms, status panel drawn with its data {drawn:.0f} ms (median of 5 cold loads)"
        )
        rows = []
        for name, (first, p50, p95) in info["compacted"].items():
            before = info.get("fresh", {}).get(name)
            rows.append(
                [name, f"{first:.1f}", f"{p50:.1f}", f"{p95:.1f}", f"{before[1]:.1f}" if before else "-"]
            )
        print(table(["panel API", "first ms", "p50 ms", "p95 ms", "p50 ms before compaction"], rows))


if __name__ == "__main__":
    main()
