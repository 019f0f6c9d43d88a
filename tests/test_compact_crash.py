"""Crash safety of compaction: a real process killed with SIGKILL at many moments, and two processes at once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.test_compact import make_vault, topic_records
from vaultmem.embed import FakeEmbedder
from vaultmem.leaffile import id_from_filename
from vaultmem.vault import Vault

pytestmark = pytest.mark.slow

COMPACT = """
import sys
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault
vault = Vault.open(sys.argv[1], embedder=FakeEmbedder())
print("ready", flush=True)
report = vault.compact()
print("done", report.sealed, report.merged, report.condensed, report.jobs_failed, flush=True)
"""


def _prepared(tmp_path: Path) -> tuple[Path, set[str]]:
    base = tmp_path / "base"
    with make_vault(base, fanout=4, workers=3) as vault:
        vault.ingest_messages(topic_records(100))
        vault.flush()
        ids = {leaf.id for leaf in vault.ls()}
    return base, ids


def _start(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", COMPACT, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _leaf_files(path: Path) -> Counter[str]:
    found: Counter[str] = Counter()
    for file in (path / "sources").rglob("*.md"):
        leaf_id = id_from_filename(file.name)
        if leaf_id is not None:
            found[leaf_id] += 1
    return found


def _assert_whole(path: Path, ids: set[str]) -> None:
    files = _leaf_files(path)
    assert set(files) == ids, "a leaf file was lost"
    assert max(files.values()) == 1, "a leaf file exists twice"


def test_compaction_killed_at_many_moments_loses_nothing_and_finishes(tmp_path: Path) -> None:
    base, ids = _prepared(tmp_path)
    timing = tmp_path / "timing"
    shutil.copytree(base, timing)
    started = time.monotonic()
    proc = _start(timing)
    out, err = proc.communicate(timeout=120)
    duration = time.monotonic() - started
    assert proc.returncode == 0, err
    assert out.startswith("done")
    moments = [duration * k / 14 for k in range(1, 14)]
    # Moments between those, used only while no kill has landed inside a durable step yet (a step is a
    # small part of the run: with topic routes and digests beside the seals, 13 kills can all miss).
    extra = [duration * (k + 0.5) / 14 for k in range(1, 13)]
    killed_mid_step = 0
    for n, delay in enumerate(moments + extra):
        if n >= len(moments) and killed_mid_step:
            break
        killed_mid_step += _kill_and_recover(base, tmp_path / f"kill{n}", delay, ids)
    # The kills are spread over the whole run, so at least one of them lands inside a durable step.
    assert killed_mid_step >= 1


def _kill_and_recover(base: Path, path: Path, delay: float, ids: set[str]) -> bool:
    """Kill a compaction ``delay`` seconds in, reopen, finish it; True when the kill landed mid-step."""
    shutil.copytree(base, path)
    proc = _start(path)
    time.sleep(delay)  # the moment of the kill is the variable under test
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)  # reaps it and closes its pipes
    mid_step = any((path / ".vaultmem" / "treeops").glob("*.json"))
    _assert_whole(path, ids)
    with Vault.open(path, embedder=FakeEmbedder()) as vault:  # replays an interrupted step
        report = vault.check()
        assert report.ok, (delay, report.problems[:5])
        _assert_whole(path, ids)
        assert {leaf.id for leaf in vault.ls()} == ids
        work = vault.compact()
        assert work.jobs_failed == 0, work.notes
        assert vault.check().ok
        assert len(vault.ls(status="admitted")) == 8  # only the fresh tail is left unsealed
        assert vault.conn.execute("SELECT count(*) FROM chunks WHERE status = 'stale'").fetchone()[0] == 0
        assert vault.jobs.counts() == {"queued": 0, "running": 0, "parked": 0}
    _assert_whole(path, ids)
    return mid_step


def test_two_processes_compacting_one_vault_do_not_corrupt_it(tmp_path: Path) -> None:
    base, ids = _prepared(tmp_path)
    first = _start(base)
    second = _start(base)
    out1, err1 = first.communicate(timeout=120)
    out2, err2 = second.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    _assert_whole(base, ids)
    with Vault.open(base, embedder=FakeEmbedder()) as vault:
        assert vault.check().ok
        assert len(vault.ls(status="admitted")) == 8
        sealed_total = sum(int(out.split()[1]) + int(out.split()[2]) for out in (out1, out2))
        assert sealed_total == len(ids) - 8  # each leaf was sealed by exactly one of them


def test_a_dead_workers_lease_is_taken_back_at_once(tmp_path: Path) -> None:
    from vaultmem.jobs import release_dead

    with make_vault(tmp_path / "v") as vault:
        vault.jobs.enqueue("seal", {"source": "chat"}, dedupe_key="seal:chat")
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        )
        pid = int(dead.stdout)
        import socket

        claimed = vault.jobs.claim(f"{socket.gethostname()}:{pid}:w0", lease_s=3600)
        assert claimed and vault.jobs.counts()["running"] == 1
        assert release_dead(vault.conn) == 1
        assert vault.jobs.counts()["queued"] == 1
