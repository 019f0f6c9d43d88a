"""The watch daemon's lock and status file: one daemon per vault, and what ``stats`` shows about it.

Owns ``.vaultmem/daemon.lock`` (an ``flock`` held for the daemon's whole life; the kernel drops it when
the process dies, even by ``kill -9``, so a lock is never stale) and ``.vaultmem/daemon.json`` (pid,
host, start, last event, queue depth, warnings; rewritten atomically). Never starts or stops anything.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaultmem import fsio
from vaultmem.errors import VaultLocked
from vaultmem.layout import Layout


@dataclass
class DaemonLock:
    """The held daemon lock; ``release()`` (or process death) frees it."""

    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def acquire(layout: Layout) -> DaemonLock:
    """Take the daemon lock without waiting; VaultLocked names the holder when another daemon runs."""
    fsio.make_dirs(layout.root, layout.state)
    fsio.ensure_inside(layout.root, layout.daemon_lock)
    fd = os.open(layout.daemon_lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        status = read_status(layout) or {}
        who = f"pid {status.get('pid', '?')} on {status.get('host', '?')}"
        raise VaultLocked(
            f"a vaultmem watch daemon already runs for {layout.root} ({who}, since"
            f" {status.get('started', '?')}); stop it first (SIGTERM)"
        ) from None
    return DaemonLock(fd)


def is_running(layout: Layout) -> bool:
    """True while some process holds the daemon lock (probed with a shared, non-blocking flock)."""
    try:
        fd = os.open(layout.daemon_lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we may have taken
    return False


def owns_temp(layout: Layout, tmp: Path) -> bool:
    """True for the temp file of a file only the daemon writes, outside the vault's write lock (its
    status, the notes it read): left behind when a daemon was killed mid-write."""
    return tmp.parent == layout.state and tmp.name.endswith(
        (f"-{layout.daemon_status.name}", f"-{layout.watch_seen.name}")
    )


def remove_stale_temps(layout: Layout) -> None:
    """Remove what a killed daemon's last status write left (only while no daemon runs)."""
    if is_running(layout):
        return
    for tmp in layout.state.glob(f"{fsio.TMP_PREFIX}*"):
        if owns_temp(layout, tmp):
            fsio.remove_file(layout.root, tmp)


def write_status(layout: Layout, status: dict[str, Any]) -> None:
    data = json.dumps(status, sort_keys=True, indent=1).encode("utf-8")
    fsio.atomic_write(layout.daemon_status, data, root=layout.root)


def read_status(layout: Layout) -> dict[str, Any] | None:
    try:
        data = json.loads(layout.daemon_status.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def status(layout: Layout) -> dict[str, Any]:
    """What ``stats`` shows: ``running`` from the lock (the truth), the rest from the last status file."""
    data = read_status(layout) or {}
    running = is_running(layout)
    return {
        "running": running,
        "pid": data.get("pid") if running else None,
        "host": data.get("host") if running else None,
        "since": data.get("started") if running else None,
        "last_event": data.get("last_event"),
        "last_rescan": data.get("last_rescan"),
        "queue": data.get("queue"),
        "warnings": list(data.get("warnings", [])),
    }
