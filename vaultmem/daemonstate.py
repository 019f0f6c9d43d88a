"""The watch daemon's lock and status file: one daemon per vault, and what ``stats`` shows about it.

Owns ``.vaultmem/daemon.lock`` (an ``flock`` held for the daemon's whole life; the kernel drops it when
the process dies, even by ``kill -9``, so a lock is never stale) and ``.vaultmem/daemon.json`` (pid,
host, start, state, last event, queue depth, warnings; rewritten atomically). The lock file itself holds
its holder's pid, host and start, written right after the lock is taken, and the kernel's lock table
(``/proc/locks``) names the holder's pid even before that: a daemon that holds the lock but has not
written its status yet is shown as ``starting`` with its pid, never as running without one. Never starts
or stops anything.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vaultmem import fsio
from vaultmem.errors import VaultLocked
from vaultmem.layout import Layout
from vaultmem.model import format_ts

_RECORD_BYTES = 512  # the holder record in the lock file: one JSON object padded with spaces


@dataclass
class DaemonLock:
    """The held daemon lock; ``release()`` (or process death) frees it."""

    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            # Clear the holder record first: a record with no lock behind it would name a dead daemon.
            os.pwrite(self.fd, b" " * _RECORD_BYTES, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def acquire(layout: Layout) -> DaemonLock:
    """Take the daemon lock without waiting, and write this process into it; VaultLocked names the
    holder when another daemon runs."""
    fsio.make_dirs(layout.root, layout.state)
    fsio.ensure_inside(layout.root, layout.daemon_lock)
    fd = os.open(layout.daemon_lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = lock_holder(layout) or {}
        status = read_status(layout) or {}
        who = f"pid {holder.get('pid') or status.get('pid', '?')} on {holder.get('host') or status.get('host', '?')}"
        raise VaultLocked(
            f"a vaultmem watch daemon already runs for {layout.root} ({who}, since"
            f" {holder.get('started') or status.get('started', '?')}); stop it first (SIGTERM)"
        ) from None
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": format_ts(datetime.now(UTC)),
    }
    data = json.dumps(record).encode("utf-8")[: _RECORD_BYTES - 1]
    os.pwrite(fd, data.ljust(_RECORD_BYTES - 1) + b"\n", 0)  # one write at offset 0, never truncated
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


def lock_holder(layout: Layout) -> dict[str, Any] | None:
    """Who holds the daemon lock: ``{pid, host, started}`` from the lock file's record, with the pid
    taken from the kernel's lock table when the record is not written yet (or left by a dead holder)."""
    record: dict[str, Any] = {}
    try:
        with open(layout.daemon_lock, "rb") as fh:
            raw = fh.read(_RECORD_BYTES).strip()
        inode = os.stat(layout.daemon_lock).st_ino
    except FileNotFoundError:
        return None
    if raw:
        try:
            value = json.loads(raw)
            record = value if isinstance(value, dict) else {}
        except ValueError:
            record = {}  # being written this very moment
    kernel_pid = _flock_owner(inode)
    if kernel_pid is not None and record.get("pid") != kernel_pid:
        record = {"pid": kernel_pid, "host": socket.gethostname(), "started": None}
    return record if record.get("pid") else None


def _flock_owner(inode: int) -> int | None:
    """The pid holding an exclusive flock on the file with this inode, from ``/proc/locks`` (Linux)."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "12: FLOCK  ADVISORY  WRITE 4242 fe:00:2359297 0 EOF"; "->" marks a waiter
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        if fields[5].rsplit(":", 1)[-1] == str(inode) and fields[4].isdigit():
            return int(fields[4])
    return None


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
    """What ``stats`` shows. ``running`` comes from the lock (the truth) and the pid from its holder; the
    rest from the status file when it is the holder's (else the daemon is still ``starting``).
    ``state``: ``stopped``, ``starting``, ``running`` or ``paused`` (``paused`` says why)."""
    data = read_status(layout) or {}
    running = is_running(layout)
    holder = lock_holder(layout) if running else None
    current = running and (
        holder is None or (data.get("pid") == holder.get("pid") and data.get("host") == holder.get("host"))
    )
    if not running:
        state = "stopped"
    elif not current or not data.get("running"):
        state = "starting"
    else:
        state = str(data.get("state") or "running")
    pid = (holder or {}).get("pid") or (data.get("pid") if current else None)
    return {
        "running": running,
        "state": state,
        "pid": pid if running else None,
        "host": ((holder or {}).get("host") or data.get("host")) if running else None,
        "since": ((holder or {}).get("started") or data.get("started")) if running else None,
        "paused": data.get("paused") if current and state == "paused" else None,
        "last_event": data.get("last_event"),
        "last_rescan": data.get("last_rescan"),
        "queue": data.get("queue") if current else None,
        "warnings": list(data.get("warnings", [])),
    }
