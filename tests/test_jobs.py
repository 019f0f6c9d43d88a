"""The durable queue: dedupe, atomic claims, lease expiry, backoff, parking, retry, restart."""

from __future__ import annotations

import threading
import time
from datetime import date
from pathlib import Path

import pytest

from vaultmem import db
from vaultmem.jobs import (
    BACKOFF_BASE_S,
    Job,
    JobQueue,
    detect_updates_job,
    digest_job,
    resummarise_job,
    seal_job,
    topic_route_job,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def queue(tmp_path: Path) -> JobQueue:
    return JobQueue(db.connect(tmp_path / "chunks.db"), Clock())


def clock(q: JobQueue) -> Clock:
    assert isinstance(q.clock, Clock)
    return q.clock


def test_dedupe_key_queues_work_once(queue: JobQueue) -> None:
    assert queue.enqueue("seal", {"dir": "a"}, dedupe_key="seal:a")
    assert not queue.enqueue("seal", {"dir": "a"}, dedupe_key="seal:a")
    assert queue.enqueue("seal", {"dir": "b"}, dedupe_key="seal:b")
    assert queue.counts()["queued"] == 2


def test_claim_is_exclusive_and_ordered(queue: JobQueue) -> None:
    queue.enqueue("extract", {"id": 1})
    queue.enqueue("extract", {"id": 2}, priority=5)
    first = queue.claim("w1", limit=1)
    assert [j.payload["id"] for j in first] == [2]
    second = queue.claim("w2", limit=5)
    assert [j.payload["id"] for j in second] == [1]
    assert queue.claim("w3") == []


def test_a_seal_is_claimed_before_the_work_queued_beside_it(queue: JobQueue) -> None:
    # A first run's admit batches queue the days' digests, topic routes and update detection before
    # compaction queues the seal: the seal (the longest chain) still goes first, after re-summaries.
    queue.enqueue_many(
        [digest_job(date(2023, 5, 8)), digest_job(date(2023, 5, 9)), topic_route_job("person:caroline")]
    )
    queue.enqueue_many([detect_updates_job(), seal_job("chat"), resummarise_job("L1", 1)])
    order = [job.kind for claimed in iter(lambda: queue.claim("w1"), []) for job in claimed]
    assert order == ["resummarise", "seal", "digest_daily", "digest_daily", "topic_route", "detect_updates"]


def test_concurrent_claims_never_share_a_job(tmp_path: Path) -> None:
    path = tmp_path / "chunks.db"
    q = JobQueue(db.connect(path))
    for i in range(200):
        q.enqueue("extract", {"id": i})
    got: list[int] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        mine = JobQueue(db.connect(path))
        while jobs := mine.claim(name, limit=7):
            with lock:
                got.extend(j.id for j in jobs)
            mine.complete(j.id for j in jobs)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(set(got)) and len(got) == 200


def test_failure_backs_off_then_parks(queue: JobQueue) -> None:
    queue.enqueue("seal", {}, dedupe_key="s", max_attempts=3)
    (job,) = queue.claim("w")
    assert queue.fail(job, "boom 1") == "queued"
    assert queue.claim("w") == []  # backing off
    clock(queue).now += BACKOFF_BASE_S + 0.1
    (job,) = queue.claim("w")
    assert job.attempts == 2 and job.last_error == "boom 1"
    assert queue.fail(job, "boom 2") == "queued"
    clock(queue).now += 2 * BACKOFF_BASE_S + 0.1
    (job,) = queue.claim("w")
    assert queue.fail(job, "boom 3") == "parked"
    clock(queue).now += 10_000
    assert queue.claim("w") == []
    (parked,) = queue.list("parked")
    assert parked.last_error == "boom 3"
    assert not queue.enqueue("seal", {}, dedupe_key="s")  # parked work is not queued twice
    assert queue.retry() == 1
    (job,) = queue.claim("w")
    assert job.attempts == 1


def test_expired_lease_returns_to_the_queue(queue: JobQueue) -> None:
    queue.enqueue("extract", {"id": 1})
    (job,) = queue.claim("dead-worker", lease_s=30)
    clock(queue).now += 31
    assert queue.release_expired() == 1
    (again,) = queue.claim("w2")
    assert again.id == job.id and again.attempts == 2


def test_expired_lease_is_claimable_without_release(queue: JobQueue) -> None:
    queue.enqueue("extract", {"id": 1})
    queue.claim("dead-worker", lease_s=30)
    assert queue.claim("w2") == []
    clock(queue).now += 31
    assert len(queue.claim("w2")) == 1


def test_clean_shutdown_gives_jobs_back_without_an_attempt(queue: JobQueue) -> None:
    queue.enqueue("extract", {"id": 1})
    queue.claim("w")
    assert queue.release_owner("w") == 1
    (job,) = queue.claim("w")
    assert job.attempts == 1


def test_queue_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "chunks.db"
    JobQueue(db.connect(path)).enqueue("digest_daily", {"day": "2026-03-01"}, dedupe_key="digest:2026-03-01")
    reopened = JobQueue(db.connect(path))
    assert [j.payload for j in reopened.list()] == [{"day": "2026-03-01"}]
    assert reopened.pending() == 1


def test_a_long_jobs_heartbeat_renews_its_lease_at_most_every_few_seconds(
    queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Update detection beats once per leaf it reads, a seal once per step: each renewal is a commit, so
    the lease is renewed only when ``HEARTBEAT_S`` has passed since the last one."""
    from vaultmem import pool

    ticks = [50.0]
    monkeypatch.setattr(time, "monotonic", lambda: ticks[0])
    queue.enqueue("detect_updates", {})
    [job] = queue.claim("w1", lease_s=120.0)
    renewed: list[int] = []
    extend = queue.extend

    def counted(j: Job, lease_s: float = 120.0) -> None:
        renewed.append(j.id)
        extend(j, lease_s)

    monkeypatch.setattr(queue, "extend", counted)
    beat = pool._heartbeat(queue, job)
    for _ in range(400):  # a conversation's leaves, read faster than HEARTBEAT_S
        beat()
    assert renewed == []
    clock(queue).now += 100
    ticks[0] += pool.HEARTBEAT_S
    beat()
    beat()
    assert renewed == [job.id]
    clock(queue).now += 100  # 200 s after the claim: the renewal kept it from expiring
    assert queue.claim("w2") == []
