"""`vaultmem mcp` figures: tool-schema tokens, search/context latency over MCP at LoCoMo scale, start-up
time to the first answer, and the cost of `Vault.record_turn` per call.

    .venv/bin/python bench/mcpserver.py ../shared/datasets/locomo/locomo_dev.json [--questions 300]

Builds one vault holding every LoCoMo conversation (2,760 turns, real MiniLM embeddings; `--keep DIR`
keeps it, `--reuse` opens it again), then:

1. the JSON of `tools/list` for the default profile (and the others): characters, characters / 4, and
   vaultmem's token estimate (`tokens.count_tokens`);
2. `search` and `context` for the LoCoMo questions (each asked one way, the ways taking turns): the
   `Vault` call itself, through the SDK's client server-side (the server in this process, the SDK's
   in-memory transport: request dispatch, the tool, rendering) and end to end over stdio against
   `vaultmem mcp` in a subprocess; p50 / p95 in ms;
3. the time from spawning `vaultmem mcp` to its answers: `initialize`, `tools/list`, the first `search`
   (median of `--starts` runs);
4. `Vault.record_turn` for new turns of a running conversation, one call per turn (p50 / p95 ms), and
   `Vault.recall`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table
from retrieval import load_locomo, turn_records

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def build(dataset: Path, path: Path, reuse: bool) -> None:
    from vaultmem import Vault

    if reuse and path.exists():
        return
    items = load_locomo(json.loads(dataset.read_text(encoding="utf-8")))
    t0 = time.perf_counter()
    with Vault.init(path) as vault:
        for item in items:
            vault.ingest_messages(turn_records(item), source=f"locomo-{item.key}")
        vault.flush()
        print(f"built {path}: {len(vault.ls())} leaves in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def questions(dataset: Path, n: int) -> list[str]:
    items = load_locomo(json.loads(dataset.read_text(encoding="utf-8")))
    return [q.text for item in items for q in item.questions][:n]


async def schema_sizes(root: Path) -> list[list[object]]:
    from mcp import Client

    from vaultmem import Vault
    from vaultmem.mcpserver import Options, VaultHandle, VaultServer
    from vaultmem.tokens import count_tokens

    rows: list[list[object]] = []
    for label, options in (
        ("default", Options()),
        ("default + agent", Options(frozenset({"agent"}))),
        ("default + editor + agent + admin", Options(frozenset({"editor", "agent", "admin"}))),
        ("--read-only", Options(read_only=True)),
    ):
        with Vault.open(root) as vault:
            async with Client(VaultServer(VaultHandle(vault=vault), options).build()) as client:
                tools = (await client.list_tools()).tools
        dumps = [
            json.dumps(t.model_dump(by_alias=True, exclude_none=True, mode="json"), separators=(",", ":"))
            for t in tools
        ]
        chars = sum(len(d) for d in dumps)
        rows.append([label, len(tools), chars, chars // 4, sum(count_tokens(d) for d in dumps)])
        if label == "default":
            for tool, d in zip(tools, dumps, strict=True):
                print(f"  {tool.name}: {len(d)} chars, {count_tokens(d)} tokens (estimate)", file=sys.stderr)
    return rows


async def timed_calls(client: Any, asks: list[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"search": [], "context": []}
    for ask in asks:
        for tool, args in (
            ("search", {"query": ask, "limit": 8}),
            ("context", {"query": ask, "budget": 1024}),
        ):
            t0 = time.perf_counter()
            result = await client.call_tool(tool, args)
            out[tool].append(time.perf_counter() - t0)
            assert not result.is_error, result.content[0].text
    return out


def stdio_params(root: Path, args: tuple[str, ...] = ()) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "vaultmem.cli", "mcp", "--vault", str(root), *args],
        env={"HF_HUB_OFFLINE": "1"},
        cwd=REPO,
    )


async def latency(root: Path, asks: list[str]) -> dict[str, dict[str, list[float]]]:
    """Per way of calling, per tool: seconds per call. Interleaved question by question, so that load
    on the machine falls on all of them alike."""
    from mcp import Client

    from vaultmem import Vault
    from vaultmem.mcpserver import Options, VaultHandle, VaultServer

    out: dict[str, dict[str, list[float]]] = {
        k: {"search": [], "context": []} for k in ("vault", "server side", "over stdio")
    }
    with Vault.open(root) as vault:
        VaultHandle.warm(vault)
        direct: dict[str, Callable[[str], object]] = {
            "search": lambda q: vault.search(q, 8),
            "context": lambda q: vault.context(q, 1024),
        }
        async with (
            Client(VaultServer(VaultHandle(vault=vault), Options()).build()) as inside,
            Client(stdio_params(root), mode="legacy") as stdio,
        ):
            for warm in asks[:5]:  # caches warm, as in a server that has been running
                await timed_calls(inside, [warm])
                await timed_calls(stdio, [warm])
            # Each question is asked one way only (the searcher keeps the vectors of queries it saw),
            # the ways taking turns, so that load on the machine falls on all of them alike.
            for n, ask in enumerate(asks):
                way = ("vault", "server side", "over stdio")[n % 3]
                if way == "vault":
                    for tool, call in direct.items():
                        t0 = time.perf_counter()
                        call(ask)
                        out[way][tool].append(time.perf_counter() - t0)
                    continue
                client = inside if way == "server side" else stdio
                for tool, seconds in (await timed_calls(client, [ask])).items():
                    out[way][tool] += seconds
    return out


def import_floor() -> dict[str, float]:
    """Seconds to start Python, and to import the MCP SDK, in this run (the floor under a first answer)."""
    out = {}
    for label, code in (
        ("python -c pass", "pass"),
        ("python -c 'import mcp.server' (the SDK)", "import mcp.server"),
    ):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
        out[label] = time.perf_counter() - t0
    return out


async def start_up(root: Path) -> dict[str, float]:
    from mcp import Client

    t0 = time.perf_counter()
    async with Client(stdio_params(root), mode="legacy") as client:
        t_init = time.perf_counter()
        await client.list_tools()
        t_list = time.perf_counter()
        await client.call_tool("search", {"query": "what did Caroline research?", "limit": 5})
        t_search = time.perf_counter()
    return {
        "`vaultmem mcp`: initialize answered": t_init - t0,
        "`vaultmem mcp`: tools/list answered": t_list - t0,
        "`vaultmem mcp`: first search answered": t_search - t0,
    }


def turns_and_recall(root: Path, n: int) -> tuple[list[float], list[float]]:
    from vaultmem import Vault

    record: list[float] = []
    recall: list[float] = []
    with Vault.open(root) as vault:
        vault.recall("warm up the model", 256)
        for i in range(n):
            turn = {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"Turn {i}: about the garden, the roses near the fence and the trip on day {i}.",
            }
            t0 = time.perf_counter()
            vault.record_turn(turn, session="bench-running-chat", source="bench-agent")
            record.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            vault.recall([turn], 1024)
            recall.append(time.perf_counter() - t0)
    return record, recall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="LoCoMo: locomo_dev.json")
    parser.add_argument(
        "--questions",
        type=int,
        default=999,
        help="LoCoMo questions asked (of 999; a third per way of calling)",
    )
    parser.add_argument("--starts", type=int, default=5, help="server starts timed (median)")
    parser.add_argument("--turns", type=int, default=200, help="record_turn calls timed")
    parser.add_argument("--keep", type=Path, default=None, help="build the vault here and keep it")
    parser.add_argument("--reuse", action="store_true", help="with --keep: open a vault built before")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "locomo"
        build(args.dataset, root, args.reuse)
        asks = questions(args.dataset, args.questions)
        sizes = anyio.run(schema_sizes, root)
        print(table(["tool profile", "tools", "chars", "chars / 4", "tokens (estimate)"], sizes))

        def run(fn: Callable[[], Awaitable[Any]]) -> Any:
            return anyio.run(fn)

        timings = run(lambda: latency(root, asks))
        labels = {
            "vault": "Vault call in process (no MCP)",
            "server side": "MCP, server side (in-memory transport)",
            "over stdio": "MCP, end to end over stdio",
        }
        rows = []
        for tool in ("search", "context"):
            for key, label in labels.items():
                data = timings[key][tool]
                rows.append([f"{tool}: {label}", len(data), pct(data, 0.5), pct(data, 0.95)])
        print()
        print(table(["call (LoCoMo: 2,760 turns, real MiniLM)", "calls", "p50 ms", "p95 ms"], rows))
        starts: list[dict[str, float]] = []
        for _ in range(args.starts):  # interleaved: the floor and the server under the same load
            starts.append({**import_floor(), **run(lambda: start_up(root))})
        print()
        print(
            table(
                ["spawned until (stdio client)", "median s", "min s", "max s"],
                [
                    [
                        k,
                        statistics.median(s[k] for s in starts),
                        min(s[k] for s in starts),
                        max(s[k] for s in starts),
                    ]
                    for k in starts[0]
                ],
            )
        )
        record, recall = turns_and_recall(root, args.turns)
        print()
        print(
            table(
                ["Vault call", "calls", "p50 ms", "p95 ms"],
                [
                    [
                        "record_turn (one turn, files + rows, no embedding)",
                        len(record),
                        pct(record, 0.5),
                        pct(record, 0.95),
                    ],
                    ["recall (1,024 tokens)", len(recall), pct(recall, 0.5), pct(recall, 0.95)],
                ],
            )
        )


if __name__ == "__main__":
    main()
