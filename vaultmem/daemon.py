"""``vaultmem watch``: the daemon that keeps the index and the trees in step with hand edits.

Owns the daemon's life: the one-per-vault lock, a catch-up pass on start (what changed while it was
down), the watcher's debounced batches reconciled under the write lock, a cheap periodic rescan (stat
only) for events the OS dropped, the worker pool running queued work in the background, the midnight
scheduler (it only enqueues), the status file, and a clean stop that loses no work. While a git operation
is under way in the vault's repository (a revert or merge stopped on a conflict, a rebase, a cherry-pick,
a bisect, a detached HEAD, a live ``index.lock``) it pauses: no reconciling, no jobs, no commits; the
status says ``paused`` and why, ``on_notice`` is told, and when the operation ends a catch-up pass
reconciles what changed meanwhile. With git auto-commit, the engine's changes are committed in batches
(when the daemon goes quiet, or at least every ``commit_s``); a person's edits get their own commits as
they are reconciled. It never prints, never exits and never installs signal handlers: the CLI sets the
stop event.
"""

from __future__ import annotations

import contextlib
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
from vaultmem.errors import DiskFull, GitBusy
from vaultmem.gitsync import GitOperation
from vaultmem.index import prefix_range
from vaultmem.jobs import NewJob, digest_job, flush_stale_job, reclaim
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
SETTLE_MAX_S = 10.0  # deletions and queued jobs wait at most this long for a burst of events to settle
PAUSE_POLL_S = 0.25
GIT_QUIET_S = 0.5  # after git changed HEAD, a ref or the index, wait this long without change  # while paused, how often the git operation is looked at again
COMMIT_S = 30.0  # engine changes wait at most this long for their batched commit
DISK_FULL_WAIT_S = 30.0  # after a full disk, the loop waits this long before it reads the changes again


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
    pauses: int = 0  # git operations the daemon paused for
    commits: int = 0  # batched engine commits
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
    return [digest_job((day - timedelta(days=1)).date()), *(flush_stale_job(s) for s in sources)]


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
        on_notice: Callable[[str], None] | None = None,
        commit_s: float = COMMIT_S,
        clock: Callable[[], float] = time.time,
        disk_full_wait_s: float = DISK_FULL_WAIT_S,
    ) -> None:
        self.vault = vault
        self.disk_full_wait_s = disk_full_wait_s
        self.layout = vault.layout
        self.rescan_s = rescan_s
        self.delete_grace_s = delete_grace_s
        self.status_s = status_s
        self._doomed: dict[str, float] = {}  # vanished paths waiting out the grace -> since
        self.workers = workers if workers is not None else vault.compact_settings.workers
        self.on_batch = on_batch
        self.on_notice = on_notice
        self.commit_s = commit_s
        self.clock = clock
        self.paused: GitOperation | None = None  # the git operation the daemon waits for
        self.paused_since: float | None = None
        self.resumed = 0  # catch-up passes after a pause (tests wait on it)
        self.loops = 0  # turns of the main loop (tests wait on it)
        self.pool: Pool | None = None
        self._held: set[str] = set()  # paths seen while paused, reconciled at the catch-up
        self._dirty_since: float | None = None
        self._settling_since: float | None = None
        self._repo_stamp = vault.repo_stamp()
        self._git_since: float | None = None  # when git last changed the repository (None: settled)
        self._git_done = False  # git has settled: reconcile everything it changed, in one batch
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
        operation = self.vault.git_operation()
        if operation is not None:  # one pass cannot wait for a person to end it: say so, as writes do
            raise operation.error(self.layout.root)
        lock = daemonstate.acquire(self.layout)
        try:
            with self.vault.commit_batch():
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

    def settled(self) -> bool:
        """Nothing in flight in the daemon itself: no event, deletion or held path waiting, git not
        settling or paused, no job running (jobs still queued are the pool's; ask the queue)."""
        return (
            len(self.debouncer) == 0
            and not self._doomed
            and not self._held
            and self._git_since is None
            and not self._git_done
            and self.paused is None
            and (self.pool is None or self.pool.active == 0)
        )

    def _due_deletes(self) -> list[str]:
        """Vanished paths whose grace ran out. While other events still settle in the debouncer (a
        checkout or revert writing hundreds of files) they wait for them, up to ``SETTLE_MAX_S``: the
        file may be on its way back elsewhere, and a move keeps its row where a delete would lose it."""
        now = self.clock()
        busy = len(self.debouncer) > 0
        due = sorted(
            rel
            for rel, since in self._doomed.items()
            if now - since >= (SETTLE_MAX_S if busy else self.delete_grace_s)
        )
        for rel in due:
            del self._doomed[rel]
        return due

    def _reconcile(self, paths: list[str]) -> PathsReport:
        commits = self.vault.commits
        try:
            batch = self.vault.reconcile_paths(paths, self.seen, repo_stamp=self._repo_stamp)
        except GitBusy:
            self._held.update(paths)  # nothing was done: the catch-up after the operation takes them
            raise
        if self.vault.commits != commits:
            self._repo_stamp = self.vault.repo_stamp()  # its own commit of hand edits is no git news
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
            pool = self.pool = Pool(self.vault.job_env(), self.workers)
            with self.vault.commit_batch():  # engine commits wait for _commit_if_due
                if self._git_paused():
                    pool.pause()
                else:
                    try:
                        self._catch_up()
                    except GitBusy as exc:  # git began while the catch-up read the vault
                        self._pause(self.vault.git_operation(), str(exc))
                        if self.paused is not None:
                            pool.pause()
                threads = pool.start()
                while not stop.is_set():
                    self.loops += 1
                    if self._git_paused():
                        self.write_status()
                        stop.wait(PAUSE_POLL_S)
                        continue
                    try:
                        self._turn(pool)
                    except GitBusy as exc:
                        self._pause(self.vault.git_operation(), str(exc))
                        continue
                    except DiskFull as exc:
                        self._out_of_space(exc, stop)
                        continue
                    finally:
                        self._workers_out_of_space(pool)
                    self._hold_while_settling(pool)
                    self._commit_if_due(pool)
                    self.write_status()
                self.watcher.stop()
                pending = self.debouncer.drain()
                if self.paused is None and (pending or self._doomed):
                    # During a git operation they are held: the next daemon's catch-up (a stat rescan) finds them.
                    with contextlib.suppress(GitBusy):
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

    def _turn(self, pool: Pool) -> None:
        """One turn of the loop: a debounced batch, deletions whose grace ran out, the rescan, midnight."""
        now = self.clock()
        due = min(self.last_rescan or now, now) + self.rescan_s
        wait = min(1.0, due - now, self.delete_grace_s / 2 if self._doomed else 1.0)
        batch = self.debouncer.take(timeout=max(0.05, wait))
        if self._git_paused() or self._git_settling(now):
            # git is (or was just) at work: nothing is decided on a tree it may still be writing.
            self._held.update(batch)
            self._hold_while_settling(pool)
            return
        self._hold_while_settling(pool)  # before this batch queues jobs the pool could start at once
        if self._git_done:
            # git itself changed the tree (a revert, checkout, merge...): its events trickle in over
            # several batches, and a level judged on half of them goes stale for nothing. Now that the
            # repository and the events have been quiet for a while, everything it changed is found by
            # stat and reconciled as one batch.
            self._git_done = False
            held = sorted(self._held | set(batch))
            self._held.clear()
            self.process([*held, *self.vault.changed_paths(self.seen)], final=True)
            pool.wake()
        elif batch:
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

    def _out_of_space(self, exc: DiskFull, stop: threading.Event) -> None:
        """A full disk while a batch was reconciled: nothing is lost (the person's files are never
        written, every engine write is atomic and its step's note is written first, so a cut step heals),
        and nothing stops for good: said at once (``on_notice``, the status's warnings once it can be
        written), then after ``disk_full_wait_s`` a stat rescan reads again whatever the batch did not
        finish. The pool's workers wait on their own (``pool.DISK_FULL_WAIT_S``)."""
        self._say_full(exc, f"the changes are read again every {self.disk_full_wait_s:.0f}s")
        stop.wait(self.disk_full_wait_s)
        self.last_rescan = self.clock() - self.rescan_s  # the next turn rescans

    def _workers_out_of_space(self, pool: Pool) -> None:
        """A full disk the pool's workers met (a seal, a digest, an embedding batch) is said as the
        daemon's own is: a worker only waits and tries again, and the person would hear nothing."""
        exc = pool.take_disk_full()
        if exc is not None:
            self._say_full(exc, f"the queued work is tried again every {pool.disk_full_wait_s():.0f}s")

    def _say_full(self, exc: DiskFull, again: str) -> None:
        message = f"{exc}: nothing was lost; {again} until there is space (free some)"
        self._warn(message)
        if self.on_notice is not None:
            self.on_notice(message)
        self.write_status(force=True)  # skipped while the disk is still full

    def _git_settling(self, now: float) -> bool:
        """True while a git command other than this vault's own commits has changed the repository (HEAD,
        a ref, the index) within the last ``GIT_QUIET_S`` or its events still settle; then, once, the
        turn that reconciles everything it changed (``_git_done``)."""
        stamp = self.vault.repo_stamp()
        if stamp != self._repo_stamp:
            self._repo_stamp = stamp
            self._git_since = now
            return True
        if self._git_since is None:
            return False
        if now - self._git_since < GIT_QUIET_S or len(self.debouncer) > 0:
            return True
        self._git_since = None
        self._git_done = True
        return False

    def _hold_while_settling(self, pool: Pool) -> None:
        """Keep the pool from starting jobs while a burst of events is still being reconciled (a checkout
        or revert lands in several batches): a job run between two batches sees half of the change and
        re-summarises a level that the rest of the change puts back as it was. Held at most
        ``SETTLE_MAX_S`` at a time, so a vault that never goes quiet still gets its work done."""
        settling = len(self.debouncer) > 0 or bool(self._doomed) or self._git_since is not None
        now = self.clock()
        if settling and (self._settling_since is None or now - self._settling_since < SETTLE_MAX_S):
            if self._settling_since is None:
                self._settling_since = now
            pool.hold()
            return
        if not settling:
            self._settling_since = None
        pool.release()

    # -- git operations ---------------------------------------------------------------------------------
    def _git_paused(self) -> bool:
        """Pause while a git operation is under way, resume (with a catch-up pass) once it has ended."""
        operation = self.vault.git_operation()
        if operation is not None:
            if self.paused is None or self.paused.marker != operation.marker:
                self._pause(operation)
            return True
        if self.paused is not None:
            self._resume()
        elif self.pool is not None and self.pool.paused:
            self.pool.resume()  # a job met an operation that was over by the time the loop looked
        return False

    def _pause(self, operation: GitOperation | None, why: str | None = None) -> None:
        if operation is None:
            # The git command a batch ran into has ended already: wait for the repository and the
            # events to settle, then reconcile everything it changed at once (``_git_settling``).
            self._git_since = self.clock()
            self._repo_stamp = self.vault.repo_stamp()
            return
        if self.paused is None:
            self.paused_since = self.clock()
            self.report.pauses += 1
        self.paused = operation
        if self.pool is not None:
            self.pool.pause()
        self._notice(
            f"paused: {operation.describe()}; nothing is reconciled, run or committed until it ends"
            f" ({operation.advice})"
        )
        self.write_status(force=True)

    def _resume(self) -> None:
        operation = self.paused
        self.paused = None
        self.paused_since = None
        try:
            self._catch_up()
        except GitBusy as exc:  # git ran again meanwhile: paused again, or its changes settle first
            again = self.vault.git_operation()
            self._pause(again, str(exc))
            if again is not None:
                return
        self.resumed += 1
        if self.pool is not None:
            self.pool.resume()
        what = (
            f"the git {operation.name} is over ({operation.marker} is gone)" if operation else "git is done"
        )
        self._notice(f"resumed: {what}; caught up with what changed meanwhile")
        self.write_status(force=True)

    def _catch_up(self) -> None:
        """Reconcile everything that changed while nothing was reconciled (the daemon was down or paused)
        as one batch: the paths seen meanwhile and whatever a stat rescan finds; then commit what waited."""
        self.vault.remove_stray_temps()  # a daemon killed mid-write leaves them
        held = self._held | set(self.debouncer.drain())
        self._held.clear()
        self._repo_stamp = self.vault.repo_stamp()
        self._git_since = None
        self.last_rescan = self.clock()
        self.report.rescans += 1
        paths = sorted(held | set(self.vault.changed_paths(self.seen)))
        if paths or self._doomed:
            self.process(paths, final=True)
        self._commit_pending()

    def _notice(self, message: str) -> None:
        if self.on_notice is not None:
            self.on_notice(message)

    # -- batched commits ----------------------------------------------------------------------------------
    def _commit_if_due(self, pool: Pool) -> None:
        """Commit the engine's changes when the daemon is quiet (no batch waiting, no job running or due),
        or when they have waited ``commit_s``: one commit per burst of work instead of one per step."""
        if not self.vault.has_uncommitted():
            self._dirty_since = None
            return
        now = self.clock()
        if self._dirty_since is None:
            self._dirty_since = now
        quiet = (
            len(self.debouncer) == 0 and not self._doomed and pool.active == 0 and pool.idle(self.vault.conn)
        )
        if quiet or now - self._dirty_since >= self.commit_s:
            self._commit_pending()

    def _commit_pending(self) -> None:
        if self.vault.commit_pending() is not None:
            self.report.commits += 1
            self._repo_stamp = self.vault.repo_stamp()
        self._dirty_since = None
        if self.vault.warnings:
            self._warn(*self.vault.warnings)
            self.vault.warnings.clear()

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
        paused = None
        if self.paused is not None and running:
            since = self.paused_since or self.clock()
            paused = {**self.paused.as_dict(), "since": _iso(since), "why": self.paused.describe()}
        return {
            "running": running,
            "state": ("paused" if paused else "running") if running else "stopped",
            "paused": paused,
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
        try:
            daemonstate.write_status(self.layout, status)
        except DiskFull:
            return  # written at a later turn, once there is space (a full disk's warning with it)
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
