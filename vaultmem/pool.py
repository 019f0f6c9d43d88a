"""The one job runner: a few threads (or, for ``flush``, the calling thread limited to ``admit`` jobs)
that claim queued jobs and run them until the queue is idle.

Owns dispatch of every job kind to its handler and each kind's follow-up jobs, declared once, in its
handler (an ``admit`` batch queues its days' digests, routes its topics and queues ``append_buffer`` for
its sources, whoever runs it). ``admit`` jobs are claimed in large batches so the embedding model runs on
many texts at once. Also owns the write lock around file changes, waking on new work
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
from dataclasses import dataclass, field, replace
from datetime import date

from vaultmem import db, digest, fsio, related, steps, topics
from vaultmem.admit import AdmitReport, EntityFinder, admit, find_entities, reread_pending
from vaultmem.compact import (
    CompactSettings,
    EmbedAhead,
    Planner,
    SourceState,
    buffer_age,
    buffer_ready,
    prune_sidecars,
    resummarise,
    summary_vectors,
)
from vaultmem.embed import Embedder, Remembering
from vaultmem.errors import ConflictError, DiskFull, GitBusy, VaultError
from vaultmem.jobs import (
    Job,
    JobKind,
    JobQueue,
    append_buffer_job,
    detect_updates_job,
    flush_stale_job,
    process_owner,
    reclaim,
    seal_job,
)
from vaultmem.stale import Resummarised
from vaultmem.steps import StepEnv
from vaultmem.summarise import ExtractiveSummariser
from vaultmem.topics.plan import TopicSettings

ADMIT_BATCH = 2048  # one model call sorts more texts by length: less padding, fewer sidecar rewrites
RESERVE_BYTES = 1 << 20  # disk set aside while jobs run, freed on a full disk to give them back
BUSY_RETRY_S = 5.0  # a leaf whose file is being saved is looked at again this soon (not an attempt)
POLL_S = 0.5  # fallback poll for work queued by another process
DEFER_S = 0.25  # a parent waiting for a child's re-summary looks again this soon
SOON_S = 1.0  # jobs due within this time keep an "until idle" run going
DISK_FULL_WAIT_S = 30.0  # the daemon's workers wait this long after a full disk
HEARTBEAT_S = 5.0  # a running job renews its lease (``JobQueue.extend``: 120 s) at most this often
# The day digests' sentences embedded together ahead of their jobs, at most about this many texts at a
# time (a quarter of ``Remembering.size``: they are still remembered when their jobs ask for them).
PREPARE_DIGEST_TEXTS = 4_096
REPLAN_TRIES = 3  # a seal pass whose step met a file changed that instant is planned again this often
# Kinds queued ahead of their handler (none at present): left queued, never claimed, so they are
# neither failed nor parked, and they never keep "until idle" runs going.
WAITING_KINDS: tuple[str, ...] = ()
CLAIMABLE_KINDS = [k.value for k in JobKind if k.value not in WAITING_KINDS]


@dataclass(frozen=True, kw_only=True)
class JobEnv(StepEnv):
    """What every job handler works with: a ``StepEnv`` (layout, summariser, embedder, write lock, file
    size limit, commit) and the settings of compaction, topics, entities and the global tree."""

    settings: CompactSettings
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
    # the Related links each level's file holds as last seen (related.Known; the vault keeps one)
    related_known: related.Known = field(default_factory=dict)
    # the embedder shared by every seal of the vault, remembering what it embedded (``Vault.remembering``;
    # its summariser embeds through it too); None: each seal pass remembers on its own
    remembering: Callable[[], Remembering] | None = None


@dataclass
class WorkReport:
    """What ``admit`` batches did (``Vault.flush`` returns it)."""

    jobs_done: int = 0
    jobs_failed: int = 0
    embedded: int = 0
    reused: int = 0
    admitted: int = 0
    notes: list[str] = field(default_factory=list)


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
    resummarised: int = 0
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

    def __init__(self, ctx: JobEnv, workers: int = 3) -> None:
        self.ctx = ctx
        self.workers = max(1, workers)
        self.report = PoolReport()
        self.admitted = WorkReport()  # what the admit batches did (``flush`` returns it)
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
        # A full disk a daemon's worker met, not yet said (``take_disk_full``).
        self._full_unsaid: DiskFull | None = None
        # A full disk may have cut a step midway (its note still in ``treeops/``): it is finished before the
        # next job plans on the tree, not only on the next open.
        self._cut_steps = False
        # Days whose digests' sentences were embedded together ahead of their jobs (``_prepare_digests``);
        # the lock makes a second worker wait for those rows instead of embedding them again.
        self._prepared_days: set[date] = set()
        self._preparing = threading.Lock()

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
            finished = len(self.report.operations)
            raise DiskFull(
                f"{self._disk_full}, after {finished} finished step{'s' if finished != 1 else ''}"
            ) from (self._disk_full)
        if self.git_busy is not None:
            raise self.git_busy  # what ran before it is done and kept; the rest stays queued
        return self.report

    def run_here(
        self,
        conn: sqlite3.Connection,
        kinds: Sequence[str] = (JobKind.ADMIT.value,),
        progress: Callable[[int, int], None] | None = None,
    ) -> WorkReport:
        """Run ready jobs of ``kinds`` on the calling thread, through ``conn``, until none is left (jobs
        waiting on backoff are left for later): ``Vault.flush``. The same dispatch and handlers as the
        threads; the caller may hold the write lock (it is re-entrant). Jobs leased by dead processes are
        taken back first; on a full disk or an interrupt (Ctrl-C) the jobs this call holds go back to the
        queue before the exception goes on."""
        layout = self.ctx.layout
        queue = JobQueue(conn)
        owner = process_owner()
        reclaim(conn)
        fsio.reserve_space(layout.root, layout.reserve, RESERVE_BYTES)
        total = queue.pending()
        batch = ADMIT_BATCH if JobKind.ADMIT.value in kinds else 1
        try:
            while jobs := queue.claim(owner, kinds=list(kinds), limit=batch):
                self._run(conn, queue, jobs, reraise=True)
                if progress is not None:
                    done = self.admitted.jobs_done + self.admitted.jobs_failed
                    progress(done, max(total, done))
        except DiskFull:
            fsio.free_reserve(layout.root, layout.reserve)  # room to give the jobs back (not their fault)
            queue.give_back(owner)
            raise
        except BaseException:
            queue.release_owner(owner)
            raise
        return self.admitted

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
                if self._cut_steps and not self._finish_cut_steps(conn, until_idle):
                    continue
                try:
                    with self._state:
                        jobs = queue.claim(owner, kinds=[JobKind.ADMIT.value], limit=ADMIT_BATCH)
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
            self._cut_steps = True
        if until_idle:
            self.stop()
            return
        with self._state:
            if self._full_unsaid is None:
                self._full_unsaid = exc
        self.report.say(notes=[f"{exc}; waiting {DISK_FULL_WAIT_S:.0f}s before trying again"])
        self._stop.wait(DISK_FULL_WAIT_S)

    def take_disk_full(self) -> DiskFull | None:
        """The full disk a worker of the running pool met since the last call (the first of them), for the
        daemon to say: a worker only waits (``DISK_FULL_WAIT_S``) and tries again."""
        with self._state:
            exc, self._full_unsaid = self._full_unsaid, None
        return exc

    @staticmethod
    def disk_full_wait_s() -> float:
        """How long a daemon's worker waits after a full disk before it tries again."""
        return DISK_FULL_WAIT_S

    def _finish_cut_steps(self, conn: sqlite3.Connection, until_idle: bool) -> bool:
        """Finish the steps a full disk cut midway (``steps.heal``: their notes are replayed) before this
        worker claims another job; False when the disk is still full (the pool has waited again)."""
        try:
            with self.ctx.lock():
                if steps.pending_notes(self.ctx.layout):  # the embedder is not built for nothing
                    steps.heal_recorded(
                        conn,
                        self.ctx.layout,
                        self.ctx.embedder(),
                        self.ctx.commit,
                        "finished after a full disk",
                    )
        except Exception as exc:
            if not (fsio.is_disk_full(exc) or db.is_disk_full(exc)):
                # Not the disk: the note stays and the step is finished on the next open (or check --fix).
                self.report.say(
                    notes=[f"a step cut by a full disk was not finished: {type(exc).__name__}: {exc}"]
                )
            else:
                self._out_of_space(DiskFull(f"the disk is full ({exc})"), until_idle)
                return False
        with self._state:
            self._cut_steps = False
        return True

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

    def _run(
        self, conn: sqlite3.Connection, queue: JobQueue, jobs: list[Job], *, reraise: bool = False
    ) -> None:
        """Run one claimed batch with its kind's handler. ``reraise``: a git operation under way is raised
        to the caller (``run_here``) instead of pausing the pool."""
        kind = jobs[0].kind
        try:
            if kind == JobKind.ADMIT.value:
                self._admit(conn, queue, jobs)
                return
            job = jobs[0]
            handler = {
                JobKind.APPEND_BUFFER.value: self._append_buffer,
                JobKind.SEAL.value: self._seal,
                JobKind.FLUSH_STALE.value: self._flush_stale,
                JobKind.RESUMMARISE.value: self._resummarise,
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
            if reraise:
                raise
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
    def _admit(self, conn: sqlite3.Connection, queue: JobQueue, jobs: list[Job]) -> None:
        work = WorkReport()
        with self.ctx.lock():
            result = run_admit(self.ctx, conn, queue, jobs, work)
        self.report.add(
            jobs_done=work.jobs_done,
            jobs_failed=work.jobs_failed,
            embedded=work.embedded,
            admitted=work.admitted,
        )
        self.report.say(notes=work.notes)
        with self._state:
            self.admitted.jobs_done += work.jobs_done
            self.admitted.jobs_failed += work.jobs_failed
            self.admitted.embedded += work.embedded
            self.admitted.reused += work.reused
            self.admitted.admitted += work.admitted
            self.admitted.notes.extend(work.notes)
        if self.ctx.commit is not None and result is not None and result.admitted:
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
            queue.enqueue_many([seal_job(source)])
        self._arm_buffer_timer(queue, state, source)
        return True

    def _arm_buffer_timer(self, queue: JobQueue, state: SourceState, source: str) -> None:
        """Queue the source's buffer timer (``flush_stale``), due when the oldest leaf of its buffer is
        too old to wait for more; nothing when the buffer is empty (a queued timer is kept)."""
        s = self.ctx.settings
        buffer, _ = state.tail_and_buffer(s)
        if buffer:
            wait = max(0.0, s.max_wait_s - buffer_age(state, s, time.time()))
            queue.enqueue_many([flush_stale_job(source)], delay_s=wait)

    def _retime_buffer_timer(self, conn: sqlite3.Connection, queue: JobQueue, source: str) -> None:
        """After a seal: the timer guarded leaves that are sealed now, so it is dropped, and queued again
        only for a buffer left over, due by that buffer's own oldest leaf. Dropped before the buffer is
        read: leaves admitted meanwhile either are seen here or queue their own timer afterwards."""
        queue.drop_queued([str(flush_stale_job(source).dedupe_key)])
        self._arm_buffer_timer(queue, self._state_of(conn, source), source)

    def _seal(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        source = str(job.payload["source"])
        self.seal_source(
            conn, source, force=bool(job.payload.get("force", False)), heartbeat=_heartbeat(queue, job)
        )
        # Leaves admitted while this pass ran could not queue another seal (this one held the dedupe
        # key), so look once more before letting go of it.
        for _ in range(3):
            if not buffer_ready(self._state_of(conn, source), self.ctx.settings, time.time()):
                break
            self.seal_source(conn, source, heartbeat=_heartbeat(queue, job))
        self._retime_buffer_timer(conn, queue, source)
        return True

    def _flush_stale(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        source = str(job.payload["source"])
        state = self._state_of(conn, source)
        s = self.ctx.settings
        age = buffer_age(state, s, time.time())
        if age >= s.max_wait_s:
            self.seal_source(conn, source, force=True, heartbeat=_heartbeat(queue, job))
            return True
        if state.tail_and_buffer(s)[0]:
            # Due early (the buffer it was queued for was sealed in part): wait for the leaves left.
            queue.defer(job, s.max_wait_s - age, "the buffer is not old enough yet")
            return False
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
            # Each distinct text embedded once (embed.Remembering): for the vault's whole compaction and the
            # digests and re-summaries that follow (``Vault.remembering``), or for this source's pass.
            embedder = ctx.remembering() if ctx.remembering is not None else Remembering(ctx.embedder())
            applied: list[str] = []  # the steps of every attempt (one refused midway counts too)
            for attempt in range(1, REPLAN_TRIES + 1):
                state = SourceState.load(conn, source, embedder.model_id, embedder.dim)
                planner = Planner(
                    conn,
                    ctx.layout,
                    ctx.settings,
                    ExtractiveSummariser(embedder.embed),
                    llm_later=ctx.summariser.name != "extractive",
                    prepare=embedder.prepare,
                    embed_ahead=True,
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
                self.link_related(conn, embedder)

    def link_related(self, conn: sqlite3.Connection, embedder: Embedder) -> None:
        """Bring every level's ``## Related`` links up to date (levels moved or were made)."""
        with self.ctx.lock():
            message = related.update(
                conn, self.ctx.layout, embedder.model_id, embedder.dim, self.ctx.related_known
            )
        if message:
            self.report.say(message)
            if self.ctx.commit is not None:
                self.ctx.commit(message)

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
        # between steps; each step's writes are guarded by the hashes it read. A seal batch's embedding
        # is asked for ahead of its step (``EmbedAhead``) and runs without the lock: the digests, topic
        # routes and re-summaries waiting for the lock write meanwhile.
        for planned in (planner.seal(state, force=force), planner.condense(state)):
            while True:
                with self.ctx.lock():
                    item = next(planned, None)
                    if item is None:
                        break
                    if not isinstance(item, EmbedAhead):
                        self._apply(planner.conn, item, embedder)
                if isinstance(item, EmbedAhead):
                    item.run()
                    continue
                applied.append(item.message)
                if heartbeat is not None:
                    heartbeat()

    def _source_lock(self, source: str) -> threading.Lock:
        with self._state:
            return self._source_locks.setdefault(source, threading.Lock())

    def _apply(self, conn: sqlite3.Connection, op: steps.TreeOp, embedder: Embedder) -> None:
        summary_vectors(op, embedder)
        result = steps.apply(conn, self.ctx.layout, op, embedder.model_id, embedder.dim)
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
        self._report_route(
            topics.route.route(
                self.ctx, conn, str(job.payload["entity"]), self.ctx.topics, topics.heat.utcnow()
            )
        )
        return True

    def _report_route(self, result: topics.route.Routed) -> None:
        for message in result.messages:
            self.report.add(topics=1)
            self.report.say(message)
        self.report.say(notes=result.notes)

    def _resummarise(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        """Each tree kind re-summarises its own nodes: a digest from its own inputs (a day from its
        leaves, never from its folder), a topic node by its topic, a source level from its children."""
        node_id = str(job.payload["id"])
        if digest.in_global_tree(conn, node_id):
            result = digest.resummarise(self.ctx, conn, node_id)
            return self._settle(queue, job, result, committed=True, resummarised=1)
        entity = topics.plan.entity_of_node(conn, node_id)
        if entity is not None:
            done = topics.route.resummarise(self.ctx, conn, node_id, entity, self.ctx.topics)
            if isinstance(done, Resummarised):
                return self._settle(queue, job, done, resummarised=1)
            self._report_route(done)
            self.report.add(resummarised=1)
            return True
        try:
            result = resummarise(self.ctx, conn, node_id)
        except ConflictError as exc:
            queue.defer(job, DEFER_S, str(exc))
            return False
        return self._settle(queue, job, result, resummarised=1)

    def _session_end(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        if self.ctx.session_end is None:
            raise RuntimeError("no session note writer in this work context")
        return self.ctx.session_end(conn, job)

    def _ingest(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        """The new leaves queue their own ``admit`` jobs; sealing follows from there."""
        if self.ctx.ingest is None:
            raise ConflictError("this process cannot ingest configured sources; run `vaultmem jobs --run`")
        self.report.say(self.ctx.ingest(str(job.payload["source"]), _heartbeat(queue, job)))
        return True

    def _detect_updates(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        """Proposals (and updates applied at once) for the leaves admitted since the last look."""
        if self.ctx.updates is None:
            return True  # this process keeps no review inbox: the next one that does looks again
        line = self.ctx.updates(_heartbeat(queue, job))
        if line:
            self.report.say(line)
        return True

    def _digest_daily(self, conn: sqlite3.Connection, queue: JobQueue, job: Job) -> bool:
        day = digest.parse_day(str(job.payload["day"]))
        self._prepare_digests(conn, day)
        try:
            return self._settle(queue, job, digest.build_day(self.ctx, conn, day), committed=True)
        finally:
            with self._state:
                self._prepared_days.discard(day)  # queued again later (new leaves): prepared again

    def _prepare_digests(self, conn: sqlite3.Connection, day: date) -> None:
        """Embed the sentences of this day's digest and of the other due days' together, up to
        ``PREPARE_DIGEST_TEXTS`` (``digest.embed_calls``, ``Remembering.prepare``): one batched call
        that the embedder shares with its worker processes, where each day's job would make its own
        small call in this thread (a first run of one LoCoMo conversation: 38 days' calls, the largest
        part of its compaction's model time). Only with the vault's shared ``remembering``, which the
        summariser embeds through."""
        if self.ctx.remembering is None or not self.ctx.digest:
            return
        # Every digest job passes here before it embeds: a day another worker is running is either
        # prepared already or waiting for this lock, so taking it in (``due_days``) embeds nothing twice.
        with self._preparing:  # another worker preparing: wait for its rows
            with self._state:
                if day in self._prepared_days:
                    return
            remembering = self.ctx.remembering()
            due = [day, *(d for d in digest.due_days(conn, time.time()) if d != day)]
            with self._state:
                due = [d for d in due if d not in self._prepared_days]
                if len(due) < 2:  # one day (the daemon's nightly job): its own calls, nothing read twice
                    self._prepared_days.add(day)  # being built: no later prepare takes it in
                    return
            calls: list[list[str]] = []
            days: list[date] = []
            for each in due:
                if sum(map(len, calls)) >= PREPARE_DIGEST_TEXTS:
                    break
                calls += digest.embed_calls(conn, self.ctx.summariser, remembering.model_id, each)
                days.append(each)
            remembering.prepare(calls)
            with self._state:
                self._prepared_days.update(days)

    def _settle(
        self, queue: JobQueue, job: Job, result: Resummarised, *, committed: bool = False, **counts: int
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


def run_admit(
    env: JobEnv, conn: sqlite3.Connection, queue: JobQueue, jobs: list[Job], report: WorkReport
) -> AdmitReport | None:
    """Run one batch of ``admit`` jobs and queue what follows them: complete them, or fail them all when
    the batch failed (then None). A leaf whose file was edited since it was indexed is re-read and
    admitted with its new text; one that cannot be yet (its file is mid-save, or it sits in a level the
    catch-up re-reads) is put back for ``BUSY_RETRY_S`` without using an attempt, and one whose file is
    no longer a leaf (or is now over the vault's ``max_file_bytes``, as for every read) fails. Follow-ups of the admitted leaves, whoever runs the batch (the threads or
    ``flush``): the digest of each day they fall on (with ``env.digest``), their entities' topics routed,
    ``append_buffer`` for each of their sources (which seals once the buffer is ready), and one
    ``detect_updates`` (the supersede detector over what was admitted). Adds to
    ``report``. A full disk is raised (nothing to retry until space returns)."""
    layout = env.layout
    embedder = env.embedder()
    try:
        result = admit(conn, layout, embedder, [str(j.payload.get("id", "")) for j in jobs], env.finder)
        broken: dict[str, str] = {}
        if result.busy:
            again = reread_pending(conn, layout, result.busy, env.max_bytes)
            broken = again.broken
            if again.ids:
                second = admit(conn, layout, embedder, again.ids, env.finder)
                result = replace(
                    result,
                    embedded=result.embedded + second.embedded,
                    admitted=result.admitted + second.admitted,
                    rebuilt_sidecars=result.rebuilt_sidecars + second.rebuilt_sidecars,
                    busy=tuple(i for i in result.busy if i not in set(again.ids)) + second.busy,
                )
    except DiskFull:
        raise
    except (VaultError, OSError, ValueError) as exc:
        for job in jobs:
            queue.fail(job, f"{type(exc).__name__}: {exc}")
        report.jobs_failed += len(jobs)
        report.notes.append(f"admit failed: {exc}")
        return None
    busy = set(result.busy)
    done = [j for j in jobs if j.payload.get("id") not in busy]
    done_ids = [str(j.payload.get("id", "")) for j in done]
    queue.complete(j.id for j in done)
    if env.digest:  # the global tree: each day these leaves fall on gets its digest job
        digest.enqueue_days(conn, done_ids, time.time())
    for job in jobs:
        leaf_id = str(job.payload.get("id"))
        if leaf_id in broken:
            queue.fail(job, f"the leaf file is no longer a valid leaf: {broken[leaf_id]}")
            report.jobs_failed += 1
            report.notes.append(f"leaf {leaf_id} was not admitted: {broken[leaf_id]}")
        elif leaf_id in busy:
            queue.defer(job, BUSY_RETRY_S, "leaf file changed on disk while it was admitted; retried shortly")
    report.jobs_done += len(done)
    topics.route.after_admit(conn, layout, done_ids, topics.heat.utcnow(), env.topics)
    queue.enqueue_many(append_buffer_job(s) for s in _sources_of(conn, done_ids))
    if result.admitted:  # the supersede detector looks at them next (issue #20)
        queue.enqueue_many([detect_updates_job()])
    report.embedded += result.embedded
    report.reused += result.reused
    report.admitted += result.admitted
    report.notes.extend(result.rebuilt_sidecars)
    return result


def _heartbeat(queue: JobQueue, job: Job) -> Callable[[], None]:
    """What a long job calls as it goes (per step, per leaf): its lease renewed, at most every
    ``HEARTBEAT_S``. Each renewal is a commit; update detection called it for every leaf it read (417
    commits on the first run of one LoCoMo conversation, more time than judging them)."""
    last = time.monotonic()

    def beat() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= HEARTBEAT_S:
            last = now
            queue.extend(job)

    return beat
