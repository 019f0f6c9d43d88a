"""Helpers shared by test modules: input builders, vault builders, the CLI runner, waiting on events,
a loopback chat-completions server. Fixtures live in conftest.py; no test module imports another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from vaultmem.cli import main
from vaultmem.daemon import Daemon
from vaultmem.embed import FakeEmbedder
from vaultmem.reconcile import PathsReport
from vaultmem.vault import Vault

ROOT = Path(__file__).resolve().parent.parent

EXAMPLES = ROOT / "docs" / "examples"

EXAMPLES_CONFIG = (EXAMPLES / "config.toml").read_text()

REPO = Path(__file__).parent.parent
DEADLINE_S = 60.0

BULK_S = 240.0  # for a thousand notes on a loaded machine

CONFIG = """
[compact]
fresh_keep_leaves = 8
fresh_keep_tokens = 100000
seal_min_leaves = 16
seal_min_tokens = 100000
bucket_target_leaves = 10
bucket_min_leaves = 3
bucket_max_leaves = 40
bucket_max_tokens = 100000
merge_threshold = 0.8
condense_fanout = {fanout}
condense_target = 3
workers = {workers}
"""

TOPICS = {
    "garden": ["roses", "tulips", "compost", "seedlings", "greenhouse", "watering", "hedge", "soil"],
    "japan": ["kyoto", "ryokan", "shinkansen", "tokyo", "temple", "sushi", "osaka", "onsen"],
    "piano": ["chopin", "scales", "recital", "metronome", "sonata", "keys", "pedal", "etude"],
    "taxes": ["deduction", "invoice", "accountant", "receipts", "refund", "irs", "audit", "ledger"],
}

PEOPLE = ["Mara", "Diego", "Lin Wei", "Priya", "Tomás"]

PLACES = ["Kyoto", "Lisbon", "the Osaka office", "Porto", "成都"]

INBOX_CHAT = [
    {
        "id": "1",
        "speaker": "Mia",
        "content": "Remember: the boiler service is booked for 12 May.",
        "ts": "2024-05-01T09:00:00Z",
    },
    {
        "id": "2",
        "speaker": "Tom",
        "content": "I prefer the mornings, before 10am if possible.",
        "ts": "2024-05-01T09:01:00Z",
    },
]


def chat(
    n: int, *, source: str = "chat", session: str = "s1", prefix: str = "Message"
) -> list[dict[str, object]]:
    """n substantive chat records with ids and timestamps."""
    return [
        {
            "id": f"{session}-m{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{prefix} {i}: we talked about the garden project and the roses planted near the fence.",
            "ts": f"2024-03-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
            "session": session,
            "source": source,
        }
        for i in range(n)
    ]


class RecordingEmbedder(FakeEmbedder):
    """The fake embedder, recording what it is asked: the texts of each ``embed`` call (``alone``) and of
    each gathered call's calls (``gathered``); ``alone_sizes``/``gathered_sizes`` count them."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.alone: list[list[str]] = []
        self.gathered: list[list[list[str]]] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.alone.append(list(texts))
        return super().embed(texts)

    def embed_calls(self, calls: Sequence[Sequence[str]]) -> list[npt.NDArray[np.float32]]:
        self.gathered.append([list(c) for c in calls])
        return [FakeEmbedder.embed(self, c) for c in calls]

    @property
    def alone_sizes(self) -> list[int]:
        return [len(texts) for texts in self.alone]

    @property
    def gathered_sizes(self) -> list[list[int]]:
        return [[len(c) for c in calls] for calls in self.gathered]


@contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """Make directories unwritable, even for root (which ignores permission bits): chattr +i there."""
    as_root = os.geteuid() == 0
    done: list[Path] = []
    try:
        for path in paths:
            if as_root:
                if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
                    pytest.skip("chattr +i is not supported on this filesystem")
            else:
                path.chmod(0o555)
            done.append(path)
        yield
    finally:
        for path in done:
            if as_root:
                subprocess.run(["chattr", "-i", str(path)], check=True)
            else:
                path.chmod(0o755)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def topic_records(per_topic: int, *, start: int = 0, source: str = "chat") -> list[dict[str, object]]:
    """Interleaved turns on four topics with disjoint vocabularies (so clusters are unambiguous)."""
    records = []
    names = list(TOPICS)
    for i in range(start, start + per_topic * len(names)):
        topic = names[i % len(names)]
        words = TOPICS[topic]
        n = i // len(names)
        text = f"{words[n % 8]} {words[(n + 3) % 8]} {words[(n + 5) % 8]} and {words[(n + 1) % 8]} again."
        records.append(
            {
                "id": f"m{i}",
                "role": "user",
                "speaker": "Mara",
                "content": text,
                "ts": f"2024-05-{1 + i // 48:02d}T{(i // 4) % 24:02d}:{i % 60:02d}:00Z",
                "session": f"s{i // 40}",
                "source": source,
            }
        )
    return records


def make_vault(path: Path, *, fanout: int = 50, workers: int = 3) -> Vault:
    return Vault.init(path, CONFIG.format(fanout=fanout, workers=workers), embedder=FakeEmbedder())


def topic_of(text: str) -> str:
    return next(t for t, words in TOPICS.items() if any(w in text for w in words))


@dataclass
class Reply:
    content: str | None = "TITLE: Garden roses\nCaroline and Melanie planted roses by the fence."
    status: int = 200
    raw: bytes | None = None  # sent as the body instead of a chat-completions object
    delay_s: float = 0.0


@dataclass
class ChatServer:
    url: str = ""
    replies: list[Reply] = field(default_factory=lambda: [Reply()])  # in turn; the last one repeats
    requests: list[Request] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def take(self, request: Request) -> Reply:
        with self.lock:
            self.requests.append(request)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def slack_export(n: int, *, channel: str = "ops-team", start: int = 0) -> dict[str, object]:
    """A Slack-style channel export of ``n`` messages with names, places, amounts and dates."""
    messages = []
    for i in range(start, start + n):
        who, where = PEOPLE[i % len(PEOPLE)], PLACES[(i // 3) % len(PLACES)]
        text = [
            f"Booked the train to {where} for the {i % 28 + 1}th, {40 + i % 60} EUR return.",
            f"Reminder: the deploy of build {1000 + i} moves to Thursday morning, never Friday.",
            f"{where} review notes: latency p95 was {120 + i % 80} ms after the cache change.",
            f"我们在{where}的会议改到下午{i % 5 + 2}点，请带上第{i}号报告。",
        ][i % 4]
        messages.append(
            {
                "id": f"{channel}-{i:05d}",
                "speaker": who,
                "content": text,
                "ts": f"2026-03-{1 + i // 300 % 28:02d}T{8 + i // 30 % 10:02d}:{i % 60:02d}:00Z",
            }
        )
    return {"source": "slack", "session": channel, "messages": messages}


def wait_for(cond: Callable[[], object], timeout: float = DEADLINE_S, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextmanager
def watching(root: Path, **kw: object) -> Iterator[ObservedDaemon]:
    """A daemon on its own thread and connection (the test uses another Vault, like another process)."""
    v = Vault.open(root, embedder=FakeEmbedder())
    daemon = ObservedDaemon(v, quiet_s=0.1, delete_grace_s=0.5, status_s=0.2, **kw)
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            daemon.run(stop)
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-daemon")
    thread.start()
    try:
        # The start-up catch-up reads the whole vault: under load it may take minutes (the deadline bounds a hang).
        wait_for(
            lambda: errors or (daemon.watcher.alive() and daemon.last_rescan is not None),
            timeout=BULK_S,
            what="start",
        )
        assert not errors, errors
        yield daemon
    finally:
        stop.set()
        thread.join(timeout=BULK_S)
        v.close()
    assert not thread.is_alive()
    assert not errors, errors
    assert not [t for t in threading.enumerate() if t.name.startswith("vaultmem-worker")]


def settle(daemon: ObservedDaemon) -> None:
    """Wait until every file event so far has been reconciled, however slowly events arrive.

    A fence: an empty folder made now. Its event comes after every earlier event (one inotify queue, in
    order), and the debouncer hands out a path only once it went quiet, with every path that went quiet
    before it; so when a batch holding the fence has been reconciled, so has every earlier event. Then
    deletions held for their grace period are waited out, and one whole turn of the loop after that (a
    due deletion may be in the middle of being reconciled)."""
    fence = daemon.layout.root / f"settle-fence-{len(daemon.reconciled)}-{time.monotonic_ns()}"
    fence.mkdir()
    try:
        wait_for(lambda: fence.name in daemon.reconciled, what="the daemon to reach the fence")
    finally:
        fence.rmdir()  # its removal is one more event, reconciled to nothing
    end = time.monotonic() + DEADLINE_S
    while True:
        wait_for(lambda: not daemon.pending_deletes and len(daemon.debouncer) == 0, what="the held deletions")
        wait_for(
            lambda since=daemon.turns: daemon.turns >= since + 2, what="a whole turn of the daemon's loop"
        )
        if not daemon.pending_deletes and len(daemon.debouncer) == 0:
            return
        assert time.monotonic() < end, "the daemon never settled: events keep coming"


def ingest_examples(vault: Vault) -> None:
    """What `just sample` ingests, with the same source names."""
    vault.ingest_path(EXAMPLES / "assistant-chat.jsonl", source="assistant-chat")
    vault.ingest_path(EXAMPLES / "team-slack.json")
    vault.ingest_path(EXAMPLES / "notes", source="notes")
    vault.ingest_path(EXAMPLES / "mail", source="mail")


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins every handler and no thread outlives a test
    state: ChatServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out closes its socket before the slow reply is written


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def do_POST(self) -> None:
        state = self.server.state
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        reply = state.take(Request(self.path, dict(self.headers.items()), body))
        try:
            if reply.delay_s:
                state.stop.wait(reply.delay_s)  # teardown sets stop, so no handler is left waiting
        finally:
            # Counted down before replying: the client frees its semaphore slot only after the reply.
            with state.lock:
                state.active -= 1
        if reply.raw is not None:
            payload = reply.raw
        else:
            message = {"role": "assistant", "content": reply.content}
            payload = json.dumps({"id": "x", "choices": [{"index": 0, "message": message}]}).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class ObservedDaemon(Daemon):
    """The daemon under test, unchanged, that also tells the test what it has done: the paths of each
    batch it reconciled, and how many turns of its loop it finished (its status is written once a turn)."""

    def __init__(self, vault: Vault, **kw: object) -> None:
        super().__init__(vault, **kw)  # type: ignore[arg-type]
        self.reconciled: list[str] = []
        self.turns = 0

    def process(self, rels: list[str], *, final: bool = False) -> PathsReport:
        report = super().process(rels, final=final)
        self.reconciled.extend(rels)
        return report

    def write_status(self, *, force: bool = False, running: bool = True) -> None:
        super().write_status(force=force, running=running)
        self.turns += 1


def pin_runtime(vault: Path, backend: str = "fp32") -> None:
    """Set the vault's ``[embed] backend`` in its config file. The suite's conftest makes this process
    choose float32 runtimes (``embed.CPUINFO``), but a CLI run in a subprocess reads the real CPU flags:
    with "auto" it would embed batches in bfloat16 on a CPU that has bfloat16 instructions and in
    float32 on another. A test whose subprocess embeds with the real model pins its runtime here."""
    config = vault / ".vaultmem" / "config.toml"
    lines = config.read_text(encoding="utf-8").splitlines() if config.exists() else []
    pinned = f'backend = "{backend}"'
    try:
        start = lines.index("[embed]")
    except ValueError:
        lines += ["", "[embed]", pinned]
    else:
        end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("[")), len(lines))
        found = [n for n in range(start + 1, end) if lines[n].split("=")[0].strip() == "backend"]
        if found:
            lines[found[0]] = pinned
        else:
            lines.insert(start + 1, pinned)
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_cli(*args: str, stdin: str | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python -m vaultmem.cli`` in a subprocess (this checkout's code), output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "vaultmem.cli", *args],
        input=stdin,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def hits(vault: Vault, query: str) -> list[str]:
    """Ids of hits that contain the word (vector search alone would return every leaf of a small vault)."""
    return [h.id for h in vault.search(query, k=5) if query.lower() in h.text.lower()]


# -- save styles --------------------------------------------------------------------------------------
def save_in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()


def save_temp_rename(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save_vim_backup(path: Path, data: bytes) -> None:
    backup = path.with_name(path.name + "~")
    os.rename(path, backup)
    path.write_bytes(data)
    backup.unlink()
