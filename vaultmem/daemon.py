"""``vaultmem watch``: the daemon that keeps the index and the trees in step with hand edits.

Owns the daemon's life: the one-per-vault lock, a catch-up pass on start (what changed while it was
down), the watcher's debounced batches reconciled under the write lock, a cheap periodic rescan (stat
only) for events the OS dropped, the worker pool running queued work in the background, the midnight
scheduler (it only enqueues), the status file, and a clean stop that loses no work. It never prints,
never exits and never installs signal handlers: the CLI sets the stop event.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from vaultmem import daemonstate, fsio
from vaultmem.db import connect
from vaultmem.index import prefix_range
from vaultmem.jobs import JobKind, NewJob, reclaim
from vaultmem.model import format_ts
from vaultmem.pool import Pool
from vaultmem.reconcile import PathsReport, Stamp
from vaultmem.vault import Vault
from vaultmem.watch import QUIET_S, Debouncer, Watcher, expand

RESCAN_S = 60.0
DELETE_GRACE_S = 1.0  # a vanished file waits this long: git and sync tools delete before they recreate
STATUS_S = 5.0  # the status file is rewritten at most this often while things change
HEARTBEAT_S = 30.0  # ...and at least this often when nothing does
MAX_WARNINGS = 20


@dataclass
class WatchReport:
    batches: int = 0
    paths: int = 0
    rescans: int = 0
    new: int = 0
    moved: int = 0
    changed: int = 0
    deleted: int = 0
    notes: int = 0
    added: int = 0
    unchanged: int = 0
    stale: int = 0
    invalid: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, batch: PathsReport, paths: int) -> None:
        self.batches += 1
        self.paths += paths
        self.new += len(batch.new)
        self.moved += len(batch.moved)
        self.changed += len(batch.changed)
        self.deleted += len(batch.deleted)
        self.notes += len(batch.notes)
        self.added += len(batch.added)
        self.unchanged += batch.unchanged
        self.stale += len(batch.stale)
        self.invalid.extend(f"{rel}: {why}" for rel, why in batch.invalid)
        del self.invalid[:-MAX_WARNINGS]  # a long-running daemon keeps the latest only

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def midnight_jobs(day: datetime, sources: list[str]) -> list[NewJob]:
    """What the scheduler queues at 00:00 UTC of ``day``: yesterday's digest and a stale flush of
    every source (their dedupe keys make a second run of the same midnight a no-op)."""
    yesterday = (day - timedelta(days=1)).date().isoformat()
    jobs = [NewJob(JobKind.DIGEST_DAILY.value, {"day": yesterday}, dedupe_key=f"digest_daily:{yesterday}")]
    jobs += [NewJob(JobKind.FLUSH_STALE.value, {"source": s}, dedupe_key=f"flush_stale:{s}") for s in sources]
    return jobs


def _next_midnight(now: float) -> float:
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return (day + timedelta(days=1)).timestamp()


class Daemon:
    """One watch daemon over an open vault. ``run(stop)`` until ``stop`` is set; ``once()`` for a single
    catch-up pass. ``on_batch`` is told about every reconciled batch (the CLI prints it)."""

    def __init__(
        self,
        vault: Vault,
        *,
        rescan_s: float = RESCAN_S,
        quiet_s: float = QUIET_S,
        delete_grace_s: float = DELETE_GRACE_S,
        status_s: float = STATUS_S,
        workers: int | None = None,
        on_batch: Callable[[PathsReport], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.vault = vault
        self.layout = vault.layout
        self.rescan_s = rescan_s
        self.delete_grace_s = delete_grace_s
        self.status_s = status_s
        self._doomed: dict[str, float] = {}  # vanished paths waiting out the grace -> since
        self.workers = workers if workers is not None else vault.compact_settings.workers
        self.on_batch = on_batch
        self.clock = clock
        self.debouncer = Debouncer(quiet_s)
        self.watcher = Watcher(self.layout, self.debouncer)
        self.report = WatchReport()
        self.marked_stale: set[str] = set()  # summary ids this daemon marked stale
        self.started = clock()
        self.last_rescan: float | None = None
        self.seen: dict[str, Stamp] = self._load_seen()
        self._status_written: dict[str, Any] = {}
        self._status_at = 0.0
        self._next_midnight = _next_midnight(clock())

    # -- one pass -------------------------------------------------------------------------------------
    def once(self) -> WatchReport:
        """Catch up with everything that changed while no daemon ran, then return (``watch --once``)."""
        lock = daemonstate.acquire(self.layout)
        try:
            self.rescan()
        finally:
            lock.release()
        return self.report

    def rescan(self) -> None:
        """Find changed paths by stat (rows vs files, unread notes) and reconcile them."""
        self.last_rescan = self.clock()
        self.report.rescans += 1
        paths = self.vault.changed_paths(self.seen)
        if paths:
            self.process(paths, final=True)

    def process(self, rels: list[str], *, final: bool = False) -> PathsReport:
        """Reconcile a batch. A vanished path is held for ``delete_grace_s`` first (unless ``final``):
        git checkout and sync tools delete a file before writing it back or elsewhere, and handling
        the new path first lets the node keep its row (a move) instead of losing and re-creating it."""
        paths = expand(self.layout, rels, self._indexed_under)
        if not final and self.delete_grace_s > 0:
            now = self.clock()
            kept = []
            for rel in paths:
                if self.layout.abs(rel).exists():
                    self._doomed.pop(rel, None)
                    kept.append(rel)
                else:
                    self._doomed.setdefault(rel, now)
            paths = kept
        else:
            paths = sorted(set(paths) | set(self._doomed))
            self._doomed.clear()
        return self._reconcile(paths)

    @property
    def pending_deletes(self) -> int:
        return len(self._doomed)

    def _due_deletes(self) -> list[str]:
        now = self.clock()
        due = sorted(rel for rel, since in self._doomed.items() if now - since >= self.delete_grace_s)
        for rel in due:
            del self._doomed[rel]
        return due

    def _reconcile(self, paths: list[str]) -> PathsReport:
        batch = self.vault.reconcile_paths(paths, self.seen)
        self.report.add(batch, len(paths))
        self.marked_stale.update(batch.stale)
        self._remember(batch, paths)
        if self.vault.warnings:
            self._warn(*self.vault.warnings)
            self.vault.warnings.clear()
        if self.on_batch is not None and batch.work + len(batch.invalid):
            self.on_batch(batch)
        return batch

    def _indexed_under(self, rel: str) -> list[str]:
        lo, hi = prefix_range(rel.rstrip("/") + "/")
        rows = self.vault.conn.execute("SELECT path FROM chunks WHERE path >= ? AND path < ?", (lo, hi))
        return [str(r[0]) for r in rows] + [p for p in self.seen if lo <= p < hi]

    # -- the daemon -----------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> WatchReport:
        """Watch until ``stop`` is set; then flush pending paths, stop the pool, release the lock."""
        lock = daemonstate.acquire(self.layout)
        pool: Pool | None = None
        threads: list[threading.Thread] = []
        try:
            self.started = self.clock()
            self.write_status(force=True)
            self.watcher.start()  # before the catch-up, so nothing changes unseen in between
            self._warn(*self.watcher.warnings)
            conn = connect(self.layout.db)
            try:
                reclaim(conn)  # jobs of a daemon killed by -9 go back to the queue
            finally:
                conn.close()
            self.vault.remove_stray_temps()  # a daemon killed mid-write leaves them
            self.rescan()
            pool = Pool(self.vault.work_context(), self.workers)
            threads = pool.start()
            while not stop.is_set():
                now = self.clock()
                due = min(self.last_rescan or now, now) + self.rescan_s
                wait = min(1.0, due - now, self.delete_grace_s / 2 if self._doomed else 1.0)
                batch = self.debouncer.take(timeout=max(0.05, wait))
                if batch:
                    self.process(batch)
                    pool.wake()
                deletes = self._due_deletes()
                if deletes:
                    self._reconcile(deletes)
                    pool.wake()
                now = self.clock()
                if now >= due:
                    self.rescan()
                    pool.wake()
                if now >= self._next_midnight:
                    self._midnight(now)
                    pool.wake()
                self.write_status()
            self.watcher.stop()
            pending = self.debouncer.drain()
            if pending or self._doomed:
                self.process(pending, final=True)
        finally:
            self.watcher.stop()
            if pool is not None:
                pool.stop()
                for thread in threads:
                    thread.join(timeout=60)
            try:
                self.write_status(force=True, running=False)
            finally:
                lock.release()
        return self.report

    def _midnight(self, now: float) -> None:
        day = datetime.fromtimestamp(self._next_midnight, UTC)
        self.vault.jobs.enqueue_many(midnight_jobs(day, self.vault.sources()))
        self.vault.sweep_topics()  # heat decays by the day: archive what went cold
        self._next_midnight = _next_midnight(now)

    # -- status -----------------------------------------------------------------------------------------
    def _warn(self, *warnings: str) -> None:
        for w in warnings:
            if w not in self.report.warnings:
                self.report.warnings.append(w)
        del self.report.warnings[:-MAX_WARNINGS]

    def status(self, running: bool = True) -> dict[str, Any]:
        last = self.watcher.stats.last_event
        return {
            "running": running,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": _iso(self.started),
            "last_event": _iso(last) if last is not None else None,
            "last_rescan": _iso(self.last_rescan) if self.last_rescan is not None else None,
            "events": self.watcher.stats.events,
            "polling": self.watcher.polling,
            "queue": self.vault.jobs.pending(),
            "warnings": self.report.warnings + self.report.invalid[-MAX_WARNINGS:],
        }

    def write_status(self, *, force: bool = False, running: bool = True) -> None:
        now = self.clock()
        if not force and now - self._status_at < self.status_s:
            return
        status = self.status(running)
        if not force and status == self._status_written and now - self._status_at < HEARTBEAT_S:
            return
        daemonstate.write_status(self.layout, status)
        self._status_written = status
        self._status_at = now

    # -- notes already read -------------------------------------------------------------------------------
    def _load_seen(self) -> dict[str, Stamp]:
        try:
            data = json.loads(self.layout.watch_seen.read_text(encoding="utf-8"))
            return {str(k): (int(v[0]), int(v[1])) for k, v in data.items()}
        except (FileNotFoundError, ValueError, TypeError, IndexError, AttributeError):
            return {}

    def _remember(self, batch: PathsReport, paths: list[str]) -> None:
        changed = False
        for rel, stamp in batch.seen.items():
            if self.seen.get(rel) != stamp:
                self.seen[rel] = stamp
                changed = True
        for rel in paths:
            if rel in self.seen and not self.layout.abs(rel).exists():
                del self.seen[rel]
                changed = True
        if changed:
            fsio.atomic_write(
                self.layout.watch_seen,
                json.dumps(self.seen, sort_keys=True).encode("utf-8"),
                root=self.layout.root,
            )


def _iso(t: float) -> str:
    return format_ts(datetime.fromtimestamp(t, UTC)) or ""
