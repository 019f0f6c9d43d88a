"""The durable job queue in chunks.db.

Owns job state transitions: queued -> running (leased) -> done (row deleted), or back to queued with
exponential backoff on failure, or parked after ``max_attempts``. A dedupe key makes the same work
impossible to queue twice while it is queued, running or parked. A lease that expires (a killed
worker) makes the job claimable again. Never runs a job: workers do.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any

from vaultmem.db import atomic
from vaultmem.errors import DiskFull
from vaultmem.model import InputKind, Leaf


class JobKind(StrEnum):
    ADMIT = "admit"
    APPEND_BUFFER = "append_buffer"
    SEAL = "seal"
    RESUMMARISE = "resummarise"
    FLUSH_STALE = "flush_stale"
    TOPIC_ROUTE = "topic_route"
    DIGEST_DAILY = "digest_daily"
    SESSION_END = "session_end"
    INGEST = "ingest"  # read a configured source folder again ([sources] in config.toml)
    DETECT_UPDATES = "detect_updates"  # newly admitted leaves that may update older ones (issue #20)


# Kind names earlier versions stored in chunks.db: migration 015 renames queued rows, and a row or a
# caller still using one (a queue copied back from a damaged index, an older script) is read as the new one.
KIND_ALIASES = {"extract": JobKind.ADMIT.value, "resummarize": JobKind.RESUMMARISE.value}


def kind_name(kind: str) -> str:
    """The current name of a job kind (an old spelling mapped to its new one)."""
    return KIND_ALIASES.get(kind, kind)


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PARKED = "parked"


BACKOFF_BASE_S = 2.0
BACKOFF_MAX_S = 600.0


@dataclass(frozen=True)
class Job:
    id: int
    kind: str
    payload: dict[str, Any]
    dedupe_key: str | None
    state: str
    attempts: int
    max_attempts: int
    run_after: float
    lease_until: float | None
    last_error: str | None
    lease_owner: str | None = None


@dataclass(frozen=True)
class NewJob:
    kind: str
    payload: dict[str, Any]
    dedupe_key: str | None = None
    priority: int = 0
    max_attempts: int = 5


def admit_job(leaf_id: str) -> NewJob:
    return NewJob(JobKind.ADMIT.value, {"id": leaf_id}, dedupe_key=f"admit:{leaf_id}")


# Re-summarisation runs deepest level first: a parent is summarised from its children's new text.
RESUMMARISE_PRIORITY = 100


def resummarise_job(summary_id: str, depth: int) -> NewJob:
    return NewJob(
        JobKind.RESUMMARISE.value,
        {"id": summary_id},
        dedupe_key=f"resummarise:{summary_id}",
        priority=RESUMMARISE_PRIORITY - depth,
    )


def topic_route_job(entity: str) -> NewJob:
    return NewJob(JobKind.TOPIC_ROUTE.value, {"entity": entity}, dedupe_key=f"topic_route:{entity}")


def append_buffer_job(source: str) -> NewJob:
    return NewJob(JobKind.APPEND_BUFFER.value, {"source": source}, dedupe_key=f"append_buffer:{source}")


# A seal pass is the longest chain of a compaction that cannot be shared out (one pass per source, its
# steps one after the other), so it is claimed before the digests, topic routes and update detection
# queued beside it (priority 0), and they run on the other workers meanwhile. Queued behind them, the
# seal of a first run's LoCoMo conversation started only once every worker had finished a digest (about
# 20 of its 50 s), with one core idle. Re-summaries (deepest first) still come before it.
SEAL_PRIORITY = 50


def seal_job(source: str) -> NewJob:
    return NewJob(JobKind.SEAL.value, {"source": source}, dedupe_key=f"seal:{source}", priority=SEAL_PRIORITY)


def flush_stale_job(source: str) -> NewJob:
    return NewJob(JobKind.FLUSH_STALE.value, {"source": source}, dedupe_key=f"flush_stale:{source}")


def digest_job(day: date) -> NewJob:
    return NewJob(JobKind.DIGEST_DAILY.value, {"day": day.isoformat()}, dedupe_key=f"digest_daily:{day}")


def session_end_job(source: str, session: str) -> NewJob:
    """The note of a chat session, written once it has been idle (``schedule_session_notes``)."""
    return NewJob(
        JobKind.SESSION_END.value,
        {"source": source, "session": session},
        dedupe_key=f"session_end:{source}\x1f{session}",
    )


def schedule_session_notes(
    conn: sqlite3.Connection, leaves: Sequence[Leaf], *, now: datetime, idle_s: float, max_age_days: float
) -> int:
    """Queue (or push back) the ``session_end`` job of every chat session among ``leaves``, due when the
    session has been idle for ``idle_s``. Sessions whose newest message is older than ``max_age_days``
    (an imported history) get none. Returns how many sessions were scheduled. Here rather than in
    ``memtiers``: every ingest batch runs it (``Vault._sessions_touched``), and importing the memory
    tiers (core memory, its policy, the model client, the checker) cost a first ingest ~0.1 s."""
    cutoff = now - timedelta(days=max_age_days)
    newest: dict[tuple[str, str], Any] = {}
    for leaf in leaves:
        if leaf.kind is not InputKind.CHAT or not leaf.session:
            continue
        key = (leaf.source, leaf.session)
        if key not in newest or (leaf.ts is not None and (newest[key] is None or leaf.ts > newest[key])):
            newest[key] = leaf.ts
    due = [key for key, ts in newest.items() if ts is None or ts >= cutoff]
    if not due:
        return 0
    run_after = now.timestamp() + idle_s
    jobs = [session_end_job(source, session) for source, session in due]
    queue = JobQueue(conn)
    queue.enqueue_many(jobs, delay_s=run_after - time.time())
    queue.postpone([j.dedupe_key for j in jobs if j.dedupe_key], run_after)
    return len(due)


def ingest_job(source: str) -> NewJob:
    """Ingest the folder configured for ``source`` (one at a time: a second request while it is
    queued or running is the same job). Two attempts: a folder that cannot be read is a person's fix."""
    return NewJob(JobKind.INGEST.value, {"source": source}, dedupe_key=f"ingest:{source}", max_attempts=2)


def detect_updates_job() -> NewJob:
    """Look for older leaves the leaves admitted since the last look may update (one job for all of
    them: it scans from where the last one stopped), and carry out decisions written into ``review/``."""
    return NewJob(JobKind.DETECT_UPDATES.value, {}, dedupe_key="detect_updates", max_attempts=3)


def owner_alive(owner: str | None) -> bool | None:
    """Whether a lease owner (``host:pid[:worker]``) still runs: known only for processes of this host
    (None for another host's)."""
    parts = str(owner or "").split(":")
    if len(parts) < 2 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return None
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _row(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"],
        kind=kind_name(row["kind"]),
        payload=json.loads(row["payload"]),
        dedupe_key=row["dedupe_key"],
        state=row["state"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        run_after=row["run_after"],
        lease_until=row["lease_until"],
        last_error=row["last_error"],
        lease_owner=row["lease_owner"],
    )


class JobQueue:
    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.clock = clock

    def enqueue_many(self, jobs: Iterable[NewJob], *, delay_s: float = 0.0) -> int:
        """Queue jobs; those whose dedupe key is already queued, running or parked are skipped.
        Returns how many were added. Joins the caller's transaction when there is one."""
        now = self.clock()
        rows = [
            (
                kind_name(j.kind),
                json.dumps(j.payload, sort_keys=True),
                j.dedupe_key,
                j.priority,
                j.max_attempts,
                now + delay_s,
                now,
                now,
            )
            for j in jobs
        ]
        with atomic(self.conn):
            before = self.conn.total_changes
            self.conn.executemany(
                "INSERT INTO jobs(kind, payload, dedupe_key, priority, max_attempts, run_after, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                rows,
            )
            return self.conn.total_changes - before

    def enqueue(
        self,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        dedupe_key: str | None = None,
        priority: int = 0,
        max_attempts: int = 5,
        delay_s: float = 0.0,
    ) -> bool:
        job = NewJob(kind, payload or {}, dedupe_key, priority, max_attempts)
        return self.enqueue_many([job], delay_s=delay_s) == 1

    def postpone(self, dedupe_keys: Iterable[str], run_after: float) -> int:
        """Move queued jobs (by dedupe key) to run no earlier than ``run_after`` (a debounce: each new
        message of a session pushes its note back). Returns how many moved."""
        keys = list(dedupe_keys)
        with atomic(self.conn):
            before = self.conn.total_changes
            self.conn.executemany(
                "UPDATE jobs SET run_after = max(run_after, ?), updated_at = ? WHERE dedupe_key = ?"
                " AND state = 'queued'",
                [(run_after, self.clock(), k) for k in keys],
            )
            return self.conn.total_changes - before

    def claim(
        self, owner: str, *, kinds: Sequence[str] | None = None, limit: int = 1, lease_s: float = 120.0
    ) -> list[Job]:
        """Atomically lease up to ``limit`` ready jobs (highest priority, then oldest)."""
        now = self.clock()
        kind_sql = ""
        params: list[Any] = [now, now]
        if kinds:
            current = {kind_name(k) for k in kinds}
            names = sorted(current | {old for old, new in KIND_ALIASES.items() if new in current})
            kind_sql = f" AND kind IN ({','.join('?' * len(names))})"
            params.extend(names)
        params.append(limit)
        with atomic(self.conn):
            rows = self.conn.execute(
                "SELECT id FROM jobs WHERE ((state = 'queued' AND run_after <= ?)"
                " OR (state = 'running' AND lease_until < ?))"
                + kind_sql
                + " ORDER BY priority DESC, id LIMIT ?",
                params,
            ).fetchall()
            ids = [r[0] for r in rows]
            if not ids:
                return []
            marks = ",".join("?" * len(ids))
            self.conn.execute(
                f"UPDATE jobs SET state = 'running', lease_owner = ?, lease_until = ?, attempts = attempts + 1,"
                f" updated_at = ? WHERE id IN ({marks})",
                [owner, now + lease_s, now, *ids],
            )
            claimed = self.conn.execute(
                f"SELECT * FROM jobs WHERE id IN ({marks}) ORDER BY id", ids
            ).fetchall()
        return [_row(r) for r in claimed]

    def extend(self, job: Job, lease_s: float = 120.0) -> None:
        """Renew the lease of a job that is still being worked on (long seals call this per step)."""
        with atomic(self.conn):
            self.conn.execute(
                "UPDATE jobs SET lease_until = ?, updated_at = ? WHERE id = ? AND state = 'running'",
                (self.clock() + lease_s, self.clock(), job.id),
            )

    def complete(self, job_ids: Iterable[int]) -> None:
        ids = list(job_ids)
        with atomic(self.conn):
            self.conn.executemany("DELETE FROM jobs WHERE id = ?", [(i,) for i in ids])

    def fail(self, job: Job, error: str) -> str:
        """Record a failed attempt: back to the queue with backoff, or parked when attempts are used up.
        Returns the new state."""
        now = self.clock()
        if job.attempts >= job.max_attempts:
            state, run_after = JobState.PARKED, now
        else:
            state = JobState.QUEUED
            run_after = now + min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (job.attempts - 1))
        with atomic(self.conn):
            self.conn.execute(
                "UPDATE jobs SET state = ?, run_after = ?, lease_owner = NULL, lease_until = NULL,"
                " last_error = ?, updated_at = ? WHERE id = ?",
                (state.value, run_after, error[:2000], now, job.id),
            )
        return state.value

    def defer(self, job: Job, delay_s: float, reason: str) -> None:
        """Put a claimed job back without counting an attempt (it was not ready to run yet)."""
        now = self.clock()
        with atomic(self.conn):
            self.conn.execute(
                "UPDATE jobs SET state = 'queued', run_after = ?, lease_owner = NULL, lease_until = NULL,"
                " attempts = max(attempts - 1, 0), last_error = ?, updated_at = ? WHERE id = ?",
                (now + delay_s, reason[:2000], now, job.id),
            )

    def drop_queued(self, dedupe_keys: Iterable[str]) -> int:
        """Delete queued jobs (by dedupe key) whose work is moot; running or parked ones are kept.
        Returns how many were dropped."""
        keys = list(dedupe_keys)
        with atomic(self.conn):
            before = self.conn.total_changes
            self.conn.executemany(
                "DELETE FROM jobs WHERE dedupe_key = ? AND state = 'queued'", [(k,) for k in keys]
            )
            return self.conn.total_changes - before

    def release_expired(self) -> int:
        """Put jobs whose lease expired (their worker died) back in the queue; run on start."""
        now = self.clock()
        with atomic(self.conn):
            cur = self.conn.execute(
                "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_until = NULL, updated_at = ?"
                " WHERE state = 'running' AND lease_until < ?",
                (now, now),
            )
            return cur.rowcount

    def dead_leases(self) -> list[Job]:
        """Running jobs nobody works on: leased by a process of this host that is gone (killed), or by
        another host's process whose lease expired (a live process of this host is never doubted)."""
        now = self.clock()
        dead = []
        for row in self.conn.execute("SELECT * FROM jobs WHERE state = 'running' ORDER BY id").fetchall():
            alive = owner_alive(row["lease_owner"])
            if alive is False or (alive is None and (row["lease_until"] or 0) < now):
                dead.append(_row(row))
        return dead

    def release_owner(self, owner: str) -> int:
        """Give back every job leased by ``owner`` (a clean shutdown), without counting an attempt."""
        with atomic(self.conn):
            cur = self.conn.execute(
                "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_until = NULL,"
                " attempts = max(attempts - 1, 0), updated_at = ? WHERE state = 'running' AND lease_owner = ?",
                (self.clock(), owner),
            )
            return cur.rowcount

    def release_process(self, prefix: str) -> int:
        """Give back every job leased by the process ``prefix`` (``host:pid``) or its worker threads
        (``host:pid:wN``): what an interrupted command does before it exits."""
        with atomic(self.conn):
            cur = self.conn.execute(
                "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_until = NULL,"
                " attempts = max(attempts - 1, 0), updated_at = ?"
                " WHERE state = 'running' AND (lease_owner = ? OR substr(lease_owner, 1, ?) = ?)",
                (self.clock(), prefix, len(prefix) + 1, prefix + ":"),
            )
            return cur.rowcount

    def give_back(self, owner: str, *, process: bool = False) -> bool:
        """``release_owner`` (``release_process`` with ``process``) on a disk that may be full: when the
        plain write fails, the write-ahead log is emptied into the index first (that frees its blocks
        once no other connection reads), then it is tried again. False when even that failed: the next
        open gives the jobs back, their process being gone by then."""
        release = self.release_process if process else self.release_owner
        for attempt in range(2):
            try:
                if attempt:
                    self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                release(owner)
                return True
            except (DiskFull, sqlite3.Error):
                continue
        return False

    def retry(self, job_id: int | None = None) -> int:
        """Requeue parked (or backing-off) jobs now with fresh attempts; all parked ones when no id."""
        now = self.clock()
        with atomic(self.conn):
            if job_id is None:
                cur = self.conn.execute(
                    "UPDATE jobs SET state = 'queued', attempts = 0, run_after = ?, updated_at = ? WHERE state = 'parked'",
                    (now, now),
                )
            else:
                cur = self.conn.execute(
                    "UPDATE jobs SET state = 'queued', attempts = 0, run_after = ?, updated_at = ?"
                    " WHERE id = ? AND state != 'running'",
                    (now, now, job_id),
                )
            return cur.rowcount

    def list(self, state: str | None = None, limit: int = 1000) -> list[Job]:
        if state is None:
            rows = self.conn.execute("SELECT * FROM jobs ORDER BY id LIMIT ?", (limit,))
        else:
            rows = self.conn.execute("SELECT * FROM jobs WHERE state = ? ORDER BY id LIMIT ?", (state, limit))
        return [_row(r) for r in rows]

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in JobState}
        for state, n in self.conn.execute("SELECT state, count(*) FROM jobs GROUP BY state"):
            out[state] = n
        return out

    def by_kind(self) -> dict[str, dict[str, int]]:
        """Job kind -> state -> how many (kinds with no job are left out)."""
        out: dict[str, dict[str, int]] = {}
        for kind, state, n in self.conn.execute(
            "SELECT kind, state, count(*) FROM jobs GROUP BY kind, state ORDER BY kind"
        ):
            out.setdefault(kind, {s.value: 0 for s in JobState})[state] = n
        return out

    def pending(self) -> int:
        """Jobs that still have to run (queued or running; parked ones need a person)."""
        row = self.conn.execute("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')").fetchone()
        return int(row[0])


def process_owner() -> str:
    """The lease owner of this process: ``host:pid`` (worker threads add ``:wN``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def release_dead(conn: sqlite3.Connection) -> int:
    """Requeue jobs leased by a process of this host that no longer exists (killed, crashed)."""
    queue = JobQueue(conn)
    dead = {str(job.lease_owner) for job in queue.dead_leases() if owner_alive(job.lease_owner) is False}
    return sum(queue.release_owner(owner) for owner in sorted(dead))


def reclaim(conn: sqlite3.Connection) -> int:
    """Before running jobs: take back those of dead processes of this host and those whose lease
    expired (a worker on another host died), so no job waits out a dead worker's lease."""
    return release_dead(conn) + JobQueue(conn).release_expired()
