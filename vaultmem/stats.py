"""What ``vaultmem stats`` reports about a vault: sizes on disk, sources, counts, the time span of its
memory, the queue, the watch daemon and a git operation under way. Reads only."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vaultmem import daemonstate, gitsync, topics
from vaultmem.gitsync import GitOperation
from vaultmem.jobs import JobQueue
from vaultmem.layout import Layout


@dataclass(frozen=True)
class Stats:
    path: str
    storage_bytes: int
    index_bytes: int
    sources: tuple[str, ...]
    leaves: int
    summaries: int
    topics: int
    by_status: dict[str, int]
    first_memory: str | None
    latest_memory: str | None
    jobs: dict[str, int]
    daemon: dict[str, Any] = field(default_factory=dict)  # the watch daemon: running, pid, last event...
    git: dict[str, Any] | None = None  # a git operation under way (writes pause): what, marker, advice

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "storage_bytes": self.storage_bytes,
            "index_bytes": self.index_bytes,
            "sources": list(self.sources),
            "chunks": self.leaves,
            "summaries": self.summaries,
            "topics": self.topics,
            "by_status": self.by_status,
            "first_memory": self.first_memory,
            "latest_memory": self.latest_memory,
            "jobs": self.jobs,
            "daemon": self.daemon,
            "git": self.git,
        }


def _git_line(operation: GitOperation | None, root: Path) -> dict[str, Any] | None:
    if operation is None:
        return None
    return {**operation.as_dict(), "why": operation.describe(), "error": str(operation.error(root))}


def storage(layout: Layout) -> tuple[int, int]:
    """Bytes in the vault's files (not ``.git``) and in ``.vaultmem/`` (the index; the disk reserve left
    out): a walk over every file, so it takes time in proportion to the vault. ``os.scandir`` with one
    ``lstat`` per file (a ``pathlib`` walk took 6.9 s of CPU at 100,000 leaves, holding the GIL that a
    dashboard's requests wait for; this one about a tenth of it)."""
    reserve = str(layout.reserve)
    index_bytes = _tree_bytes(str(layout.state), skip=reserve)
    files = _tree_bytes(str(layout.root), skip=str(layout.state), git=False)
    return files, index_bytes


def _tree_bytes(top: str, *, skip: str, git: bool = True) -> int:
    """Bytes of the regular files under ``top`` (symbolic links not followed), leaving out the path
    ``skip`` and, unless ``git``, anything named ``.git``."""
    total = 0
    stack = [top]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:  # gone or unreadable mid-walk: counted on the next walk
            continue
        with entries:
            for entry in entries:
                if entry.path == skip or (not git and entry.name == ".git"):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    return total


def read_stats(conn: sqlite3.Connection, layout: Layout, sources: list[str], *, files: bool = True) -> Stats:
    """The figures of the vault at ``layout`` (``sources``: its source names). Without ``files`` the
    byte counts (a walk over every file) are left at -1, so it stays cheap at any size."""
    storage_bytes, index_bytes = storage(layout) if files else (-1, -1)
    counts = dict(conn.execute("SELECT kind, count(*) FROM chunks GROUP BY kind").fetchall())
    by_status = dict(
        conn.execute("SELECT status, count(*) FROM chunks WHERE kind = 'leaf' GROUP BY status").fetchall()
    )
    first, latest = conn.execute("SELECT min(ts), max(ts) FROM chunks WHERE ts IS NOT NULL").fetchone()
    live_topics = sum(1 for p in topics.plan.existing(conn).values() if f"/{topics.plan.ARCHIVE}/" not in p)
    return Stats(
        path=str(layout.root),
        storage_bytes=storage_bytes,
        index_bytes=index_bytes,
        sources=tuple(sources),
        leaves=counts.get("leaf", 0),
        summaries=counts.get("summary", 0),
        topics=live_topics,
        by_status=by_status,
        first_memory=first,
        latest_memory=latest,
        jobs=JobQueue(conn).counts(),
        daemon=daemonstate.status(layout),
        git=_git_line(gitsync.operation_in_progress(layout.root, lock_wait_s=0.0), layout.root),
    )
