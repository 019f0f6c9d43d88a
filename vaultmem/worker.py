"""Running queued jobs in this process until the queue is idle.

Owns the claim-run-complete loop and the dispatch of job kinds to their handlers. ``extract`` jobs are
claimed in large batches so the embedding model runs on many texts at once. A handler that raises has
its jobs failed (backoff, then parked); the loop itself never dies on a job's error.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from vaultmem import digest, fsio, topics
from vaultmem.embed import Embedder
from vaultmem.errors import DiskFull, VaultError
from vaultmem.extract import EntityFinder, ExtractReport, extract, find_entities, reread_pending
from vaultmem.jobs import Job, JobKind, JobQueue, detect_updates_job, process_owner, reclaim
from vaultmem.layout import Layout
from vaultmem.topics.plan import TopicSettings

EXTRACT_BATCH = 2048  # one model call sorts more texts by length: less padding, fewer sidecar rewrites
RESERVE_BYTES = 1 << 20  # disk set aside while jobs run, freed on a full disk to give them back
BUSY_RETRY_S = 5.0  # a leaf whose file is being saved is looked at again this soon (not an attempt)


@dataclass
class WorkReport:
    jobs_done: int = 0
    jobs_failed: int = 0
    embedded: int = 0
    reused: int = 0
    admitted: int = 0
    notes: list[str] = field(default_factory=list)


def drain(
    conn: sqlite3.Connection,
    layout: Layout,
    embedder_factory: Callable[[], Embedder],
    *,
    progress: Callable[[int, int], None] | None = None,
    max_rounds: int | None = None,
    topic_settings: TopicSettings | None = None,
    finder: EntityFinder | None = find_entities,
    digest_days: bool = True,
) -> WorkReport:
    """Run ready jobs until none is left (jobs waiting on backoff are left for later).

    Jobs leased by dead processes are taken back first; on an interrupt (Ctrl-C) the jobs this call
    holds go back to the queue before the exception goes on."""
    queue = JobQueue(conn)
    owner = process_owner()
    report = WorkReport()
    reclaim(conn)
    fsio.reserve_space(layout.root, layout.reserve, RESERVE_BYTES)
    total = queue.pending()
    rounds = 0
    try:
        while max_rounds is None or rounds < max_rounds:
            rounds += 1
            jobs = queue.claim(owner, kinds=[JobKind.EXTRACT.value], limit=EXTRACT_BATCH)
            if not jobs:
                break
            run_extract(
                conn, layout, embedder_factory, queue, jobs, report, topic_settings, finder, digest_days
            )
            if progress is not None:
                done = report.jobs_done + report.jobs_failed
                progress(done, max(total, done))
    except DiskFull:
        fsio.free_reserve(layout.root, layout.reserve)  # room to give the jobs back (not their fault)
        queue.give_back(owner)
        raise
    except BaseException:
        queue.release_owner(owner)
        raise
    return report


def run_extract(
    conn: sqlite3.Connection,
    layout: Layout,
    embedder_factory: Callable[[], Embedder],
    queue: JobQueue,
    jobs: list[Job],
    report: WorkReport,
    topic_settings: TopicSettings | None = None,
    finder: EntityFinder | None = find_entities,
    digest_days: bool = True,
    max_bytes: int = 1 << 30,
) -> ExtractReport | None:
    """Run one batch of ``extract`` jobs: complete them, or fail them all when the batch failed (then
    None). A leaf whose file was edited since it was indexed is re-read and admitted with its new text;
    one that cannot be yet (its file is mid-save, or it sits in a level the catch-up re-reads) is put
    back for ``BUSY_RETRY_S`` without using an attempt, and one whose file is no longer a leaf fails.
    Adds to ``report``; the worker pool uses it too. A full disk is raised (nothing to retry until
    space returns)."""
    embedder = embedder_factory()
    try:
        result = extract(conn, layout, embedder, [str(j.payload.get("id", "")) for j in jobs], finder)
        broken: dict[str, str] = {}
        if result.busy:
            again = reread_pending(conn, layout, result.busy, max_bytes)
            broken = again.broken
            if again.ids:
                second = extract(conn, layout, embedder, again.ids, finder)
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
        report.notes.append(f"extract failed: {exc}")
        return None
    busy = set(result.busy)
    done = [j for j in jobs if j.payload.get("id") not in busy]
    queue.complete(j.id for j in done)
    if digest_days:  # the global tree: each day these leaves fall on gets its digest job
        digest.enqueue_days(conn, [str(j.payload.get("id", "")) for j in done], time.time())
    if result.admitted:  # the supersede detector looks at them next (issue #20)
        queue.enqueue_many([detect_updates_job()])
    for job in jobs:
        leaf_id = str(job.payload.get("id"))
        if leaf_id in broken:
            queue.fail(job, f"the leaf file is no longer a valid leaf: {broken[leaf_id]}")
            report.jobs_failed += 1
            report.notes.append(f"leaf {leaf_id} was not admitted: {broken[leaf_id]}")
        elif leaf_id in busy:
            queue.defer(job, BUSY_RETRY_S, "leaf file changed on disk while it was admitted; retried shortly")
    report.jobs_done += len(done)
    if topic_settings is not None:
        topics.route.after_admit(
            conn, layout, [str(j.payload.get("id")) for j in done], topics.heat.utcnow(), topic_settings
        )
    report.embedded += result.embedded
    report.reused += result.reused
    report.admitted += result.admitted
    report.notes.extend(result.rebuilt_sidecars)
    return result
