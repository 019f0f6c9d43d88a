"""Crash safety of compaction: a real process killed with SIGKILL at many moments, and two processes at once.

Two kinds of kill moments, each a test of its own (so no single test carries the whole series):
- moments inside a durable step, chosen by what the step has done, not by time: the child process kills
  itself right after the n-th call of one of ``steps._execute``'s stages made inside a step (temp files
  written but not renamed, part of the moves done, removals done, rows written, the step done but its
  write-ahead note not yet removed). The code under test runs unchanged; only the moment of the SIGKILL
  is chosen, and it lands inside a step on any machine, however loaded;
- moments spread over the whole run (fractions of a measured run), wherever they fall.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import make_vault, topic_records
from vaultmem.embed import FakeEmbedder
from vaultmem.leaffile import id_from_filename
from vaultmem.vault import Vault

pytestmark = pytest.mark.slow

HANG_S = 280.0  # bounds a hung child only (the per-test timeout is 300 s); no step depends on it

COMPACT = """
import os, signal, sys, threading
from vaultmem import fsio, lock, sidecar, steps
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

# Stages of a durable step (steps._execute), counted only while a step runs. "execute" counts steps
# done: killed there, a step is complete but its write-ahead note is not yet removed. "sidecars" counts
# the filesystem syncs of a step's sidecar batch (sidecar.update_many): killed there, the step's new
# sidecars are synced temp files, none renamed into place.
STAGES = {"syncfs": (fsio, "_syncfs"), "rename": (fsio, "_rename"), "remove": (steps, "_remove"),
          "index": (steps, "_index"), "execute": (steps, "_execute"), "sidecars": (fsio, "_syncfs")}
kill_at = sys.argv[2] if len(sys.argv) > 2 else ""  # "stage:n", or "" to count the stages
in_step = threading.local()
in_sidecars = threading.local()
calls = dict.fromkeys(STAGES, 0)
counting = threading.Lock()
real_update_many = sidecar.update_many

def update_many(*args, **kwargs):
    in_sidecars.on = True
    try:
        return real_update_many(*args, **kwargs)
    finally:
        in_sidecars.on = False
sidecar.update_many = update_many

def counted(stage, real):
    def stage_done(*args, **kwargs):
        if stage == "execute":
            in_step.on = True
        try:
            result = real(*args, **kwargs)
        finally:
            if stage == "execute":
                in_step.on = False
        if stage == "sidecars" and not getattr(in_sidecars, "on", False):
            return result
        if stage == "execute" or getattr(in_step, "on", False):
            with counting:
                calls[stage] += 1
                if kill_at == f"{stage}:{calls[stage]}":
                    os.kill(os.getpid(), signal.SIGKILL)
        return result
    return stage_done

for stage, (module, name) in STAGES.items():
    setattr(module, name, counted(stage, getattr(module, name)))
# Two compactions take turns on the write lock; on a loaded machine one may hold it longer than the
# 30 s a command waits. These tests are about what survives, not about waiting: wait as long as a hang.
lock.LOCK_TIMEOUT_S = 250.0
vault = Vault.open(sys.argv[1], embedder=FakeEmbedder())
print("ready", flush=True)
report = vault.compact()
print("done", report.sealed, report.merged, report.condensed, report.jobs_failed, flush=True)
print(" ".join(f"{stage}={n}" for stage, n in calls.items()), flush=True)
"""


@dataclass(frozen=True)
class Prepared:
    base: Path  # a vault with 400 embedded leaves, never compacted (copied by each test)
    ids: frozenset[str]
    duration: float  # seconds one uninterrupted compaction of it took in a child process, here and now
    stages: dict[str, int]  # calls of each stage made inside durable steps during that run


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    root = tmp_path_factory.mktemp("crash")
    with pytest.MonkeyPatch.context() as env:  # as conftest's _isolated_env (function-scoped) does
        env.delenv("VAULTMEM_VAULT", raising=False)
        env.setenv("HF_HUB_OFFLINE", "1")
        env.setenv("TRANSFORMERS_OFFLINE", "1")
        env.setenv("HOME", str(root / "home"))
        base = root / "base"
        with make_vault(base, fanout=4, workers=3) as vault:
            vault.ingest_messages(topic_records(100))
            vault.flush()
            ids = frozenset(leaf.id for leaf in vault.ls())
        timing = root / "timing"
        shutil.copytree(base, timing)
        started = time.monotonic()
        proc = _start(timing)
        out, err = _finish(proc)
        duration = time.monotonic() - started
    assert proc.returncode == 0, err
    done, counts = out.splitlines()
    assert done.startswith("done")
    stages = {stage: int(n) for stage, n in (item.split("=") for item in counts.split())}
    assert min(stages.values()) > 0, stages
    return Prepared(base, ids, duration, stages)


def _start(path: Path, kill_at: str = "") -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", COMPACT, str(path), kill_at],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Wait for the child (reaping it and closing its pipes); a hung child is killed, not left behind."""
    try:
        return proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def _leaf_files(path: Path) -> Counter[str]:
    found: Counter[str] = Counter()
    for file in (path / "sources").rglob("*.md"):
        leaf_id = id_from_filename(file.name)
        if leaf_id is not None:
            found[leaf_id] += 1
    return found


def _assert_whole(path: Path, ids: frozenset[str]) -> None:
    files = _leaf_files(path)
    assert set(files) == ids, "a leaf file was lost"
    assert max(files.values()) == 1, "a leaf file exists twice"


def _pending_steps(path: Path) -> list[Path]:
    return list((path / ".vaultmem" / "treeops").glob("*.json"))


def _recover(path: Path, ids: frozenset[str]) -> None:
    """After a kill: nothing lost; reopening replays an interrupted step; compaction then finishes."""
    _assert_whole(path, ids)
    with Vault.open(path, embedder=FakeEmbedder()) as vault:  # replays an interrupted step
        report = vault.check()
        assert report.ok, report.problems[:5]
        _assert_whole(path, ids)
        assert {leaf.id for leaf in vault.ls()} == ids
        work = vault.compact()
        assert work.jobs_failed == 0, work.notes
        assert vault.check().ok
        assert len(vault.ls(status="admitted")) == 8  # only the fresh tail is left unsealed
        assert vault.conn.execute("SELECT count(*) FROM chunks WHERE status = 'stale'").fetchone()[0] == 0
        assert vault.jobs.counts() == {"queued": 0, "running": 0, "parked": 0}
    assert not _pending_steps(path)
    _assert_whole(path, ids)


# (stage, share of that stage's calls in the measured run): the kill follows call max(1, share * calls).
# Shares stay well below 1: a run may make a few calls fewer than the measured one.
STEP_MOMENTS = [
    ("syncfs", 0.0),  # the first step's files are written as temp files, none renamed yet
    ("rename", 1 / 3),  # part of a step's moves done (renamed, their folders not yet synced)
    ("remove", 1 / 2),  # files moved and removed, vectors and rows not yet carried along
    ("sidecars", 1 / 2),  # the step's new sidecars synced as temp files, none renamed into place yet
    ("index", 2 / 3),  # rows written, the write-ahead note still there
    ("execute", 3 / 4),  # a whole step done, its note not yet removed
]


@pytest.mark.parametrize(("stage", "share"), STEP_MOMENTS, ids=[stage for stage, _ in STEP_MOMENTS])
def test_compaction_killed_inside_a_durable_step_loses_nothing_and_finishes(
    prepared: Prepared, tmp_path: Path, stage: str, share: float
) -> None:
    path = tmp_path / "v"
    shutil.copytree(prepared.base, path)
    n = max(1, int(prepared.stages[stage] * share))
    proc = _start(path, f"{stage}:{n}")
    out, err = _finish(proc)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before {stage} call {n}: {out} {err}"
    assert _pending_steps(path), "the kill landed inside a step: its write-ahead note is there"
    _recover(path, prepared.ids)


@pytest.mark.parametrize("k", range(1, 14))
def test_compaction_killed_at_a_moment_of_the_run_loses_nothing_and_finishes(
    prepared: Prepared, tmp_path: Path, k: int
) -> None:
    path = tmp_path / "v"
    shutil.copytree(prepared.base, path)
    proc = _start(path)
    time.sleep(prepared.duration * k / 14)  # the moment of the kill is the variable under test
    proc.send_signal(signal.SIGKILL)
    _finish(proc)
    _recover(path, prepared.ids)


def test_two_processes_compacting_one_vault_do_not_corrupt_it(prepared: Prepared, tmp_path: Path) -> None:
    base = tmp_path / "v"
    shutil.copytree(prepared.base, base)
    first = _start(base)
    second = _start(base)
    out1, err1 = _finish(first)
    out2, err2 = _finish(second)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    _assert_whole(base, prepared.ids)
    with Vault.open(base, embedder=FakeEmbedder()) as vault:
        assert vault.check().ok
        assert len(vault.ls(status="admitted")) == 8
        sealed_total = sum(int(out.split()[1]) + int(out.split()[2]) for out in (out1, out2))
        assert sealed_total == len(prepared.ids) - 8  # each leaf was sealed by exactly one of them


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
