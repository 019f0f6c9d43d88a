"""Git auto-commit figures: commits for "ingest 120 messages + compact", then for 120 more messages and a
second compaction (which merges into the levels and re-summarises them), and what the engine commits
after a clean `git revert` of that second compaction while the watch daemon runs.

python bench/commits.py [--messages 120] [--more 120] [--locomo ../shared/datasets/locomo/locomo_dev.json]

Runs in process with a fake 384-d embedder (the figures are about commits, not the model). `ingest`
is what `vaultmem ingest --wait` does (ingest, then embed and admit), `compact` what `vaultmem compact`
does. The revert undoes every commit the second compaction made (`git revert A..HEAD`); the daemon then runs
until it is quiet, and the commits it made are counted, with the re-summaries among their operations.
To compare with another build, run this file with that build's package first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import generated_messages, table

import vaultmem
from vaultmem.config import DEFAULT_TEXT
from vaultmem.daemon import Daemon
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

SUBJECTS: list[str] = []  # the engine's commits after the revert


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.org", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def commits(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def locomo_turns(path: Path, n: int) -> list[dict[str, Any]]:
    conv = json.loads(path.read_text(encoding="utf-8"))[0]["conversation"]
    out: list[dict[str, Any]] = []
    session = 1
    while f"session_{session}" in conv and len(out) < n:
        when = datetime.strptime(conv[f"session_{session}_date_time"], "%I:%M %p on %d %B, %Y")
        for j, turn in enumerate(conv[f"session_{session}"]):
            stamp = when.replace(second=j % 60).isoformat() + "Z"
            out.append(
                {
                    "id": turn["dia_id"],
                    "speaker": turn["speaker"],
                    "content": turn["text"],
                    "ts": stamp,
                    "session": f"s{session}",
                }
            )
        session += 1
    return out[:n]


def batch(vault: Vault, subject: str) -> Any:
    """One commit per command where the build batches commits (`vaultmem ingest` opens this batch)."""
    return vault.commit_batch(subject) if hasattr(vault, "commit_batch") else nullcontext()


def run(name: str, messages: list[dict[str, Any]], more: list[dict[str, Any]]) -> list[object]:
    tmp = tempfile.mkdtemp()
    try:
        root = Path(tmp) / "v"
        config = DEFAULT_TEXT.replace("auto_commit = false", "auto_commit = true")
        vault = Vault.init(root, config, embedder=FakeEmbedder(dim=384))

        def ingest(records: list[dict[str, Any]], file: str) -> None:
            export = Path(tmp) / file
            export.write_text(json.dumps(records), encoding="utf-8")
            with batch(vault, "memory: ingest"):
                vault.ingest_path(export, source="chat")
                vault.flush()

        ingest(messages, "chat.json")
        after_ingest = commits(root)
        report = vault.compact()
        after_compact = commits(root)
        # A second day: more messages, a compaction that merges into the levels and re-summarises them.
        ingest(more, "more.json")
        before_second = git(root, "rev-parse", "HEAD").strip()
        second = vault.compact()
        after_second = commits(root)
        # Undo the second compaction with git while the daemon watches; count what the engine commits next.
        daemon = Daemon(Vault.open(root, embedder=FakeEmbedder(dim=384)))
        stop = threading.Event()
        thread = threading.Thread(target=daemon.run, args=(stop,))
        thread.start()
        while daemon.last_rescan is None or getattr(daemon, "loops", 1) == 0:
            time.sleep(0.05)
        try:
            git(root, "revert", "--no-edit", f"{before_second}..HEAD")
        except subprocess.CalledProcessError as exc:
            lines = [x for x in exc.stderr.splitlines() if x.startswith(("error", "fatal"))]
            SUBJECTS.append(f"{name}: the revert failed: {lines[0] if lines else exc.stderr.strip()}")
        reverted = commits(root)
        last, since = (-1, -1.0), time.monotonic()
        while True:  # quiet: no new batch and no queued job for 5 s in a row
            state = (daemon.report.batches, float(vault.jobs.pending()))
            if state != last:
                last, since = state, time.monotonic()
            elif time.monotonic() - since > 5.0:
                break
            time.sleep(0.2)
        stop.set()
        thread.join()
        extra = commits(root) - reverted
        bodies = git(root, "log", "--format=%B", f"-{extra}") if extra else ""
        resummaries = sum(1 for line in bodies.splitlines() if "re-summarise" in line)
        status = git(root, "status", "--porcelain")
        ok = Vault.open(root, embedder=FakeEmbedder(dim=384)).check().ok
        SUBJECTS.extend(f"{name}: {line}" for line in bodies.splitlines() if line.strip())
        return [
            name,
            f"{len(messages)} + {len(more)}",
            after_ingest,
            after_compact - after_ingest,
            report.sealed,
            after_second - commits_at(root, before_second),
            second.merged,
            second.resummarised,
            reverted - after_second,
            extra,
            resummaries,
            "clean" if not status.strip() else f"{len(status.splitlines())} changed",
            "ok" if ok else "FAILED",
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def commits_at(root: Path, sha: str) -> int:
    return int(git(root, "rev-list", "--count", sha))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=120)
    parser.add_argument("--more", type=int, default=120, help="messages of the second day")
    parser.add_argument("--locomo", type=Path, default=None)
    args = parser.parse_args()
    extra = args.more
    generated = generated_messages(args.messages + extra)
    rows = [run("generated", generated[: args.messages], generated[args.messages :])]
    if args.locomo is not None:
        turns = locomo_turns(args.locomo, args.messages + extra)
        rows.append(run("LoCoMo conv 1", turns[: args.messages], turns[args.messages :]))
    print(f"build: {Path(vaultmem.__file__).parent}")
    print(
        table(
            [
                "input",
                "messages",
                "commits: ingest --wait",
                "commits: compact",
                "sealed",
                "commits: 2nd compact",
                "merged",
                "re-summarised",
                "revert commits",
                "engine commits after revert",
                "re-summaries in them",
                "git status",
                "check",
            ],
            rows,
        )
    )
    for line in SUBJECTS:
        print(f"  after the revert, {line}")


if __name__ == "__main__":
    main()
