"""The worker pool: a few threads that claim queued jobs and run them until the queue is idle.

Owns dispatch of every job kind to its handler, the write lock around file changes, waking on new work
(an event, with a short polling fallback for jobs queued by other processes), and recovery of jobs
leased by workers that died (their lease expired, or their process is gone). Each thread has its own
SQLite connection. A handler's error fails that job (backoff, then parked); the pool itself never dies
on one. LLM calls happen inside summarisers, capped by the semaphore they were built with. While a git
operation is under way (the write lock raises ``GitBusy``) jobs are put back without counting an attempt:
an "until idle" run stops and raises it, a daemon's pool pauses until ``resume()``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace

from vaultmem import db, digest, fsio, topics, treeops
from vaultmem.compact import (
    CompactSettings,
    Planner,
    Resummarized,
    SourceState,
    buffer_age,
    buffer_ready,
    prune_sidecars,
    resummarize,
    summary_vectors,
)
from vaultmem.embed import Embedder
from vaultmem.errors import ConflictError, DiskFull, GitBusy
from vaultmem.extract import EntityFinder, find_entities
from vaultmem.jobs import Job, JobKind, JobQueue, NewJob, process_owner, reclaim
from vaultmem.layout import Layout
from vaultmem.summarise import Summariser
from vaultmem.topics.plan import TopicSettings
from vaultmem.worker import EXTRACT_BATCH, RESERVE_BYTES, WorkReport, run_extract

POLL_S = 0.5  # fallback poll for work queued by another process
DEFER_S = 0.25  # a parent waiting for a child's re-summary looks again this soon
SOON_S = 1.0  # jobs due within this time keep an "until idle" run going
DISK_FULL_WAIT_S = 30.0  # the daemon's workers wait this long after a full disk
REPLAN_TRIES = 3  # a seal pass whose step met a file changed that instant is planned again this often
# Kinds queued ahead of their handler (none at present): left queued, never claimed, so they are
# neither failed nor parked, and they never keep "until idle" runs going.
WAITING_KINDS: tuple[str, ...] = ()
CLAIMABLE_KINDS = [k.value for k in JobKind if k.value not in WAITING_KINDS]


@dataclass
class WorkContext:
    layout: Layout
    settings: CompactSettings
    embedder: Callable[[], Embedder]
    summariser: Summariser
    lock: Callable[[], AbstractContextManager[object]]  # the vault's write lock
    max_bytes: int
    commit: Callable[[str], None] | None = None  # git auto-commit of one logical operation
    topics: TopicSettings = field(default_factory=TopicSettings)
    finder: EntityFinder | None = find_entities  # entities of a leaf as it is admitted
    digest: bool = True  # keep the global tree (a digest per day)
    # The note of an idle chat session (memtiers.run_session_job with this thread's connection).
    session_end: Callable[[sqlite3.Connection, Job], bool] | None = None
    # read a configured source folder again ([sources]), calling the heartbeat as batches are written;
    # returns the operation's line. None: this process cannot (the job fails)
    ingest: Callable[[str, Callable[[], None]], str] | None = None
    # the supersede detector over newly admitted leaves and the review inbox's decisions (issue #20),
    # calling the heartbeat as it goes; returns the operation's line, or None when nothing changed
    updates: Callable[[Callable[[], None]], str | None] | None = None


@dataclass
class PoolReport:
    jobs_done: int = 0
    jobs_failed: int = 0
    embedded: int = 0
    admitted: int = 0
    sealed: int = 0  # leaves moved into new levels
    merged: int = 0  # leaves moved into existing levels
    levels: int = 0  # new levels (buckets and parents)
    condensed: int = 0  # levels moved under a parent
    resummarized: int = 0
    topics: int = 0  # topic tree steps (links, seals, archiving)
    operations: list[str] = field(default_factory=list)  # one line per logical operation
    notes: list[str] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)  # a dry run's new levels
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def add(self, **counts: int) -> None:
        with self._lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)

    def say(self, operation: str | None = None, notes: Sequence[str] = ()) -> None:
        with self._lock:
            if operation:
                self.operations.append(operation)
            self.notes.extend(notes)


class Pool:
    """``workers`` threads running jobs; ``run_until_idle`` returns when nothing is left to do."""

    def __init__(self, ctx: WorkContext, workers: int = 3) -> None:
        self.ctx = ctx
        self.workers = max(1, workers)
        self.report = PoolReport()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._running = threading.Event()  # cleared while paused (a git operation is under way)
        self._running.set()
        self._held = threading.Event()  # set while the daemon holds new jobs back (events settling)
        self.git_busy: GitBusy | None = None  # why the pool paused or stopped
        self._active = 0
        self._state = threading.Lock()
        self._source_locks: dict[str, threading.Lock] = {}  # one seal pass per source at a time
        self._until_idle = False
        self._disk_full: DiskFull | None = None  # the first full-disk error: an until-idle run stops

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._running.set()

    def pause(self, why: GitBusy | None = None) -> None:
        """Claim no more jobs until ``resume()`` (jobs in flight finish their step or are put back)."""
        self.git_busy = why or self.git_busy
        self._running.clear()

    def resume(self) -> None:
        self.git_busy = None
        self._running.set()
        self._wake.set()

    def hold(self) -> None:
        """Start no new job until ``release()`` (jobs in flight go on)."""
        self._held.set()

    def release(self) -> None:
        if self._held.is_set():
            self._held.clear()
            self._wake.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def active(self) -> int:
        """Jobs being worked on right now."""
        with self._state:
            return self._active

    def run_until_idle(self, progress: Callable[[int, int], None] | None = None) -> PoolReport:
        """Run until no job is ready. A full disk stops every worker (each gives its jobs back to the
        queue) and is raised as ``DiskFull`` saying how many steps finished and were kept."""
        self._until_idle = True
        conn = db.connect(self.ctx.layout.db)
        try:
            reclaim(conn)
        finally:
            conn.close()
        fsio.reserve_space(self.ctx.layout.root, self.ctx.layout.reserve, RESERVE_BYTES)
        # Daemon threads: after an interrupt the process exits at once instead of waiting for a step.
        threads = [
            threading.Thread(
                target=self._loop, args=(n, True, progress), name=f"vaultmem-worker-{n}", daemon=True
            )
            for n in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except BaseException:  # Ctrl-C: no new claims, and this process's jobs go back to the queue now
            self.stop()
            conn = db.connect(self.ctx.layout.db)
            try:
                JobQueue(conn).release_process(process_owner())
            finally:
                conn.close()
            raise
        if self._disk_full is not None:
            # Every worker's connection is closed now, so the log can be emptied if that is what it
            # takes to give back a lease a worker could not.
            with contextlib.suppress(DiskFull, sqlite3.Error):
                conn = db.connect(self.ctx.layout.db)
                try:
                    JobQueue(conn).give_back(process_owner(), process=True)
                finally:
                    conn.close()
            steps = len(self.report.operations)
            raise DiskFull(
                f"{self._disk_full}, after {steps} finished step{'s' if steps != 1 else ''}"
            ) from (self._disk_full)
        if self.git_busy is not None:
            raise self.git_busy  # what ran before it is done and kept; the rest stays queued
        return self.report

    def start(self) -> list[threading.Thread]:
        """Run until ``stop()`` (the daemon's mode); returns the started threads."""
        fsio.reserve_space(self.ctx.layout.root, self.ctx.layout.reserve, RESERVE_BYTES)
        threads = [
            threading.Thread(
                target=self._loop, args=(n, False, None), name=f"vaultmem-worker-{n}", daemon=True
            )
            for n in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        return threads

    # -- the loop ------------------------------------------------------------------------------------
    def _loop(self, n: int, until_idle: bool, progress: Callable[[int, int], None] | None) -> None:
        conn = db.connect(self.ctx.layout.db)
        owner = f"{process_owner()}:w{n}"
        queue = JobQueue(conn)
        try:
            while not self._stop.is_set():
                if not self._running.is_set():
                    self._running.wait(POLL_S)
                    continue
                if self._held.is_set():
                    self._wake.wait(POLL_S)
                    self._wake.clear()
                    continue
                try:
                    with self._state:
                        jobs = queue.claim(owner, kinds=[JobKind.EXTRACT.value], limit=EXTRACT_BATCH)
                        if not jobs:
                            jobs = queue.claim(owner, kinds=CLAIMABLE_KINDS, limit=1)
                        if jobs:
                            self._active += 1
                except DiskFull as exc:
                    self._out_of_space(exc, until_idle)
                    continue
                if not jobs:
                    if until_idle and self._idle(conn):
                        self._stop.set()
                        self._wake.set()
                        break
                    self._wake.wait(POLL_S if not until_idle else 0.05)
                    self._wake.clear()
                    continue
                try:
                    self._run(conn, queue, jobs)
                except DiskFull as exc:
                    # The space set aside is what lets the jobs go back to the queue on a full disk.
                    fsio.free_reserve(self.ctx.layout.root, self.ctx.layout.reserve)
                    queue.give_back(owner)
                    self._out_of_space(exc, until_idle)
                finally:
                    with self._state:
                        self._active -= 1
                    self._wake.set()
                if progress is not None:
                    done = self.report.jobs_done + self.report.jobs_failed
                    progress(done, done + queue.pending())
        finally:
            queue.give_back(owner)
            conn.close()

    def idle(self, conn: sqlite3.Connection) -> bool:
        """No job running, and none due within ``SOON_S`` (read through ``conn``)."""
        return self._idle(conn)

    def _out_of_space(self, exc: DiskFull, until_idle: bool) -> None:
        """A full disk is nobody's job's fault: an until-idle run stops (the caller says what was kept);
        the daemon's pool waits before it claims work again."""
        with self._state:
            if self._disk_full is None:
                self._disk_full = exc
        if until_idle:
            self.stop()
            return
        self.report.say(notes=[f"{exc}; waiting {DISK_FULL_WAIT_S:.0f}s before trying again"])
        self._stop.wait(DISK_FULL_WAIT_S)

    def _idle(self, conn: sqlite3.Connection) -> bool:
        with self._state:
            if self._active:
                return False
            # Jobs a finished handler queued are committed before it went inactive, so this sees them.
            now = time.time()
            waiting = ",".join("?" * len(WAITING_KINDS))
            row = conn.execute(
                "SELECT count(*) FROM jobs WHERE ((state = 'queued' AND run_after <= ?)"
                f" OR (state = 'running' AND lease_until < ?)) AND kind NOT IN ({waiting})",
                (now + SOON_S, now, *WAITING_KINDS),
            ).fetchone()
            return int(row[0]) == 0

    def _run(self, conn: sqlite3.Connection, queue: JobQueue, jobs: list[Job]) -> None:
        kind = jobs[0].kind
        try:
            if kind == JobKind.EXTRACT.value:
                self._extract(conn, queue, jobs)
                return
            job = jobs[0]
            handler = {
                JobKind.APPEND_BUFFER.value: self._append_buffer,
                JobKind.SEAL.value: self._seal,
                JobKind.FLUSH_STALE.value: self._flush_stale,
                JobKind.RESUMMARIZE.value: self._resummarize,
                JobKind.DIGEST_DAILY.value: self._digest_daily,
                JobKind.TOPIC_ROUTE.value: self._topic_route,
                JobKind.SESSION_END.value: self._session_end,
                JobKind.INGEST.value: self._ingest,
                JobKind.DETECT_UPDATES.value: self._detect_updates,
            }.get(kind)
            if handler is None:
                queue.fail(job, f"no handler for job kind {kind!r} in this version")
                self.report.add(jobs_failed=1)
                return
            if handler(conn, queue, job):
                queue.complete([job.id])
                self.report.add(jobs_done=1)
        except GitBusy as exc:
            # Not the job's fault: it goes back as it was and runs once the git operation is over.
            for job in jobs:
                queue.defer(job, 0.0, str(exc))
            self.pause(exc)
            if self._until_idle:
                self._stop.set()
                self._wake.set()
        except DiskFull:
            raise  # not the job's fault: the loop gives it back and stops
        except Exception as exc:  # a job's failure must never stop the pool
            if fsio.is_disk_full(exc) or db.is_disk_full(exc):
                raise DiskFull(f"the disk is full ({exc})") from exc
            for job in jobs:
                queue.fail(job, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
            self.report.add(jobs_failed=len(jobs))
            self.report.say(notes=[f"{kind} failed: {type(exc).__name__}: {exc}"])

    # -- handlers (return True when the job is finished) -------------------------------------------------
    def _extract(self, conn: sqlite3.Connection, queue: JobQueue, jobs: list[Job]) -> None:
        work = WorkReport()
        with self.ctx.lock():
            result = run_extract(
                conn,
                self.ctx.layout,
                self.ctx.embedder,
                queue,
                jobs,
                work,
                self.ctx.topics,
                self.ctx.finder,
                self.ctx.digest,
            )
        self.report.add(
            jobs_done=work.jobs_done,
            jobs_failed=work.jobs_failed,
            embedded=work.embedded,
            admitted=work.admitted,
        )
        self.report.say(notes=work.notes)
        if result is None:
            return
        busy = set(result.busy)
        sources = _sources_of(
            conn, [str(j.payload.get("id", "")) for j in jobs if j.payload.get("id") not in busy]
        )
        queue.enqueue_many(
            NewJob(JobKind.APPEND_BUFFER.value, {"source": s}, dedupe_key=f"append_buffer:{s}")
            for s in sources
        )
        if self.ctx.commit is not None and result.admitted:
            with self.ctx.lock():
                self.ctx.commit(f"memory: admit {result.admitted} leaves")

    def _state_of(self, conn: sqlite3.Connection, source: str) -> SourceState:
        embedder = self.ctx.embedder()
        return SourceState.load(conn, source, embedder.model_id, embedder.dim)

    def _append_buffer(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        source = str(job.payload["source"])
        state = self._state_of(conn, source)
        s = self.ctx.settings
        if buffer_ready(state, s, time.time()):
            queue.enqueue(JobKind.SEAL.value, {"source": source}, dedupe_key=f"seal:{source}")
        buffer, _ = state.tail_and_buffer(s)
        if buffer:
            wait = max(0.0, s.max_wait_s - buffer_age(state, s, time.time()))
            queue.enqueue(
                JobKind.FLUSH_STALE.value,
                {"source": source},
                dedupe_key=f"flush_stale:{source}",
                delay_s=wait,
            )
        return True

    def _seal(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        source = str(job.payload["source"])
        self.seal_source(
            conn, source, force=bool(job.payload.get("force", False)), heartbeat=lambda: queue.extend(job)
        )
        # Leaves admitted while this pass ran could not queue another seal (this one held the dedupe
        # key), so look once more before letting go of it.
        for _ in range(3):
            if not buffer_ready(self._state_of(conn, source), self.ctx.settings, time.time()):
                break
            self.seal_source(conn, source, heartbeat=lambda: queue.extend(job))
        return True

    def _flush_stale(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        source = str(job.payload["source"])
        state = self._state_of(conn, source)
        s = self.ctx.settings
        if buffer_age(state, s, time.time()) >= s.max_wait_s:
            self.seal_source(conn, source, force=True, heartbeat=lambda: queue.extend(job))
        return True

    def seal_source(
        self,
        conn: sqlite3.Connection,
        source: str,
        *,
        force: bool = False,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        """Seal, merge and condense one source tree. ``heartbeat`` renews the job's lease after each
        step, so a long compaction is never taken for a dead one and run twice. A leaf edited by hand
        meanwhile stays in ``_fresh/``; a step refused because a file changed as it was about to run
        (nothing was changed) is planned again without it."""
        ctx = self.ctx
        with self._source_lock(source):
            embedder = ctx.embedder()
            applied: list[str] = []  # the steps of every attempt (one refused midway counts too)
            for attempt in range(1, REPLAN_TRIES + 1):
                state = SourceState.load(conn, source, embedder.model_id, embedder.dim)
                planner = Planner(
                    conn, ctx.layout, ctx.settings, llm_later=ctx.summariser.name != "extractive"
                )
                try:
                    self._seal_steps(planner, state, embedder, force, heartbeat, applied)
                except ConflictError as exc:
                    if attempt == REPLAN_TRIES:
                        raise
                    self.report.say(notes=[f"{source}: {exc}"])
                    continue
                finally:
                    self.report.say(notes=planner.skipped)
                break
            if applied:
                with ctx.lock():
                    pruned = prune_sidecars(conn, ctx.layout, source, embedder.model_id, embedder.dim)
                    if pruned and ctx.commit is not None:
                        ctx.commit(f"memory: drop embeddings of moved leaves from old folders ({source})")

    def _seal_steps(
        self,
        planner: Planner,
        state: SourceState,
        embedder: Embedder,
        force: bool,
        heartbeat: Callable[[], None] | None,
        applied: list[str],
    ) -> None:
        """Apply the seal steps, then the condensation steps, of one plan (each one's message is added
        to ``applied`` as it is made durable)."""
        # The write lock is held per step, not for the whole pass, so re-summarising and ingest go on
        # between steps; each step's writes are guarded by the hashes it read.
        for steps in (planner.seal(state, force=force), planner.condense(state)):
            while True:
                with self.ctx.lock():
                    op = next(steps, None)
                    if op is None:
                        break
                    self._apply(planner.conn, op, embedder)
                applied.append(op.message)
                if heartbeat is not None:
                    heartbeat()

    def _source_lock(self, source: str) -> threading.Lock:
        with self._state:
            return self._source_locks.setdefault(source, threading.Lock())

    def _apply(self, conn: sqlite3.Connection, op: treeops.TreeOp, embedder: Embedder) -> None:
        summary_vectors(op, embedder)
        result = treeops.apply(conn, self.ctx.layout, op, embedder.model_id, embedder.dim)
        new_levels = sum(1 for w in op.writes if w.expected is None)
        leaf_moves = sum(1 for _, dst in op.moves if dst.endswith(".md"))
        if op.kind == "seal":
            new_dirs = {w.path.rsplit("/", 1)[0] for w in op.writes if w.expected is None}
            sealed = sum(1 for _, dst in op.moves if dst.rsplit("/", 1)[0] in new_dirs)
            self.report.add(sealed=sealed, merged=leaf_moves - sealed, levels=new_levels)
        else:
            self.report.add(condensed=len(op.moves) - leaf_moves, levels=new_levels)
        self.report.say(op.message, result.skipped)
        if self.ctx.commit is not None:
            self.ctx.commit(op.message)

    def _topic_route(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        ctx = self.ctx
        result = topics.route.route(
            conn,
            ctx.layout,
            str(job.payload["entity"]),
            ctx.topics,
            ctx.embedder(),
            ctx.lock,
            ctx.max_bytes,
            topics.heat.utcnow(),
            ctx.commit,
            ctx.summariser,
        )
        for message in result.messages:
            self.report.add(topics=1)
            self.report.say(message)
        self.report.say(notes=result.notes)
        return True

    def _resummarize(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        ctx = self.ctx
        node_id = str(job.payload["id"])
        if digest.in_global_tree(conn, node_id):
            # A digest is rebuilt from its own inputs (a day from its leaves), never from its folder.
            result = digest.redigest(
                conn, ctx.layout, node_id, ctx.summariser, ctx.embedder(), ctx.lock, ctx.max_bytes, ctx.commit
            )
            return self._settle(queue, job, result, committed=True, resummarized=1)
        entity = topics.plan.entity_of_node(conn, node_id)
        if entity is not None:
            row = conn.execute("SELECT path, status FROM chunks WHERE id = ?", (node_id,)).fetchone()
            if (
                ctx.summariser.name != "extractive"
                and row["status"] != "stale"
                and topics.plan.is_root(row["path"])
            ):
                # The LLM pass a route asked for: the model writes the root's summary outside the lock.
                embedder = ctx.embedder()
                result = topics.route.llm_refresh(
                    conn,
                    ctx.layout,
                    entity,
                    ctx.topics,
                    ctx.summariser,
                    embedder.model_id,
                    embedder.dim,
                    ctx.lock,
                    ctx.max_bytes,
                )
                return self._settle(queue, job, result, resummarized=1)
            # A stale topic node is rewritten by routing its topic (its children are links, not its folder).
            done = self._topic_route(conn, queue, replace(job, payload={"entity": entity}))
            self.report.add(resummarized=1)
            return done
        try:
            result = resummarize(
                conn,
                ctx.layout,
                node_id,
                ctx.summariser,
                ctx.embedder(),
                ctx.lock,
                ctx.max_bytes,
            )
        except ConflictError as exc:
            queue.defer(job, DEFER_S, str(exc))
            return False
        return self._settle(queue, job, result, resummarized=1)

    def _session_end(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        if self.ctx.session_end is None:
            raise RuntimeError("no session note writer in this work context")
        return self.ctx.session_end(conn, job)

    def _ingest(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        """The new leaves queue their own ``extract`` jobs; sealing follows from there."""
        if self.ctx.ingest is None:
            raise ConflictError("this process cannot ingest configured sources; run `vaultmem jobs --run`")
        self.report.say(self.ctx.ingest(str(job.payload["source"]), lambda: queue.extend(job)))
        return True

    def _detect_updates(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        """Proposals (and updates applied at once) for the leaves admitted since the last look."""
        if self.ctx.updates is None:
            return True  # this process keeps no review inbox: the next one that does looks again
        line = self.ctx.updates(lambda: queue.extend(job))
        if line:
            self.report.say(line)
        return True

    def _digest_daily(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        ctx = self.ctx
        day = digest.parse_day(str(job.payload["day"]))
        result = digest.build_day(
            conn, ctx.layout, day, ctx.summariser, ctx.embedder(), ctx.lock, ctx.max_bytes, ctx.commit
        )
        return self._settle(queue, job, result, committed=True)

    def _settle(
        self, queue: JobQueue, job: Job, result: Resummarized, *, committed: bool = False, **counts: int
    ) -> bool:
        """Defer, fail or finish a job that rewrites summaries; report (and commit, unless the step
        already did) what it wrote."""
        ctx = self.ctx
        if result.outcome == "defer":
            queue.defer(job, DEFER_S, "; ".join(result.notes))
            return False
        if result.outcome == "missing":
            queue.fail(job, "; ".join(result.notes))
            self.report.add(jobs_failed=1)
            return False
        if result.outcome == "done" and result.message:
            self.report.add(**counts)
            self.report.say(result.message, result.notes)
            if ctx.commit is not None and not committed:
                with ctx.lock():
                    ctx.commit(result.message)
        return True


def _sources_of(conn: sqlite3.Connection, ids: Sequence[str]) -> list[str]:
    from vaultmem.index import in_batches

    found: set[str] = set()
    for part, marks in in_batches(list(ids)):
        found.update(
            r[0]
            for r in conn.execute(
                f"SELECT DISTINCT source FROM chunks WHERE kind = 'leaf' AND id IN ({marks})", part
            )
        )
    return sorted(found)
