"""Crash and liveness: interrupted steps heal on reopen, nothing waits forever, and `check` sees stuck work.

Each test meets the problem where a person would, through the CLI: a command killed between a status
rewrite's files and rows, a leaf edited while it waits to be admitted, an editor saving a leaf while
the compactor seals, and jobs that gave up or whose worker died.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import CONFIG, run, slack_export, topic_records
from vaultmem.embed import FakeEmbedder
from vaultmem.jobs import JobQueue
from vaultmem.vault import Vault

ROOT = Path(__file__).resolve().parent.parent


def cli_vault(tmp_path: Path, capsys: pytest.CaptureFixture[str], *, name: str = "v") -> Path:
    v = tmp_path / name
    assert run(["init", str(v)], capsys)[0] == 0
    config = '[embed]\nmodel = "fake"\n' + CONFIG.format(fanout=50, workers=3)
    (v / ".vaultmem" / "config.toml").write_text(config, encoding="utf-8")
    return v


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)  # polling interval of a state wait, not a timing guess


def cli_process(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vaultmem.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def leaf_files(v: Path) -> list[Path]:
    return sorted(p for p in (v / "sources").rglob("*.md") if p.name != "_summary.md")


def says(path: Path, status: str) -> bool:
    try:
        return f"\nstatus: {status}\n" in path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False


# -- a leaf edited while it waits ------------------------------------------------------------------------
def test_a_leaf_edited_before_admission_is_read_again_and_admitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = cli_vault(tmp_path, capsys)
    export = write_json(tmp_path / "slack.json", slack_export(6))
    assert run(["ingest", str(export), "--vault", str(v)], capsys)[0] == 0
    path = next(p for p in leaf_files(v) if "Booked the train" in p.read_text(encoding="utf-8"))
    # A person fixes a typo in Obsidian before the queue ran (no daemon to tell the index).
    path.write_text(path.read_text(encoding="utf-8").replace("Booked", "Re-booked"), encoding="utf-8")
    code, out, err = run(["jobs", "--run", "--vault", str(v), "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["counts"] == {"queued": 0, "running": 0, "parked": 0}, report["jobs"]
    assert says(path, "admitted") and "Re-booked" in path.read_text(encoding="utf-8")
    code, out, _ = run(["ls", "--vault", str(v), "--json"], capsys)
    assert {leaf["status"] for leaf in json.loads(out)} == {"admitted"}
    assert any("Re-booked" in leaf["text"] for leaf in json.loads(out))
    code, out, _ = run(["check", "--vault", str(v)], capsys)
    assert code == 0, out


# -- stuck work is reported -------------------------------------------------------------------------------
def _park_admit_job(v: Path) -> str:
    """Give up on one leaf's extract job the way the queue does after five failed attempts."""
    with Vault.open(v, embedder=FakeEmbedder()) as vault:
        leaf = vault.ls()[0]
        now = [time.time()]
        queue = JobQueue(vault.conn, clock=lambda: now[0])
        job = next(j for j in queue.list() if j.payload == {"id": leaf.id})
        while True:
            claimed = [j for j in queue.claim("tester:1", kinds=["extract"], limit=100) if j.id == job.id]
            state = queue.fail(claimed[0], "leaf file changed on disk while extracting; will retry")
            queue.release_owner("tester:1")
            now[0] += 10_000
            if state == "parked":
                return leaf.path


def test_check_reports_a_parked_job_and_fix_requeues_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = cli_vault(tmp_path, capsys)
    export = write_json(tmp_path / "slack.json", slack_export(4))
    assert run(["ingest", str(export), "--vault", str(v)], capsys)[0] == 0
    stuck = _park_admit_job(v)
    assert run(["jobs", "--run", "--vault", str(v)], capsys)[0] == 0  # the other leaves go through
    code, out, _ = run(["check", "--vault", str(v), "--json"], capsys)
    assert code == 1
    problems = json.loads(out)["problems"]
    assert [(p["code"], p["path"]) for p in problems] == [("parked_job", stuck)]
    assert "gave up after 5 attempts" in problems[0]["message"]
    code, out, _ = run(["check", "--fix", "--vault", str(v)], capsys)
    assert code == 0 and "fixed   parked_job" in out
    assert run(["jobs", "--run", "--vault", str(v)], capsys)[0] == 0
    code, out, _ = run(["ls", "--vault", str(v), "--status", "pending_extraction", "--json"], capsys)
    assert json.loads(out) == []
    assert run(["check", "--vault", str(v)], capsys)[0] == 0


def test_check_reports_a_pending_leaf_that_no_job_will_admit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = cli_vault(tmp_path, capsys)
    export = write_json(tmp_path / "slack.json", slack_export(3))
    assert run(["ingest", str(export), "--vault", str(v)], capsys)[0] == 0
    with sqlite3.connect(v / ".vaultmem" / "chunks.db") as db:  # a queue emptied by an older version
        db.execute("DELETE FROM jobs")
    code, out, _ = run(["check", "--vault", str(v), "--json"], capsys)
    assert code == 1
    assert {p["code"] for p in json.loads(out)["problems"]} == {"pending_unqueued"}
    assert len(json.loads(out)["problems"]) == 3
    assert run(["check", "--fix", "--vault", str(v)], capsys)[0] == 0
    assert run(["jobs", "--run", "--vault", str(v)], capsys)[0] == 0
    code, out, _ = run(["ls", "--vault", str(v), "--status", "admitted", "--json"], capsys)
    assert len(json.loads(out)) == 3


def test_jobs_of_a_killed_process_go_back_to_the_queue_on_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = cli_vault(tmp_path, capsys)
    export = write_json(tmp_path / "slack.json", slack_export(5))
    assert run(["ingest", str(export), "--vault", str(v)], capsys)[0] == 0
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    with Vault.open(v, embedder=FakeEmbedder()) as vault:
        assert len(vault.jobs.claim(f"{socket.gethostname()}:{int(gone.stdout)}:w0", limit=100)) == 5
        # And one leased on another machine whose lease ran out long ago.
        vault.jobs.enqueue("seal", {"source": "slack"}, dedupe_key="seal:slack")
        vault.jobs.claim("laptop-of-mara:4242:w1", kinds=["seal"], lease_s=-60)
    code, out, _ = run(["jobs", "--vault", str(v), "--json"], capsys)
    assert json.loads(out)["counts"]["running"] == 1  # the killed process's five were given back
    code, out, _ = run(["check", "--vault", str(v), "--json"], capsys)
    problems = json.loads(out)["problems"]
    assert code == 1 and [(p["code"], p["path"]) for p in problems] == [("dead_lease", "sources/slack")]
    assert "laptop-of-mara:4242:w1" in problems[0]["message"]
    assert run(["check", "--fix", "--vault", str(v)], capsys)[0] == 0
    code, out, _ = run(["jobs", "--vault", str(v), "--json"], capsys)
    assert json.loads(out)["counts"] == {"queued": 6, "running": 0, "parked": 0}


# -- real processes killed or raced ------------------------------------------------------------------------
@pytest.mark.slow
def test_kill_between_status_files_and_rows_heals_on_reopen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = cli_vault(tmp_path, capsys, name="base")
    export = write_json(tmp_path / "slack.json", slack_export(1200))
    assert run(["ingest", str(export), "--vault", str(base)], capsys)[0] == 0
    for attempt in range(3):  # the lock is taken once the vectors commit: rarely after the rows too
        v = tmp_path / f"v{attempt}"
        shutil.copytree(base, v)
        if _kill_between_files_and_rows(v):
            break
    else:
        pytest.fail("three times the rows committed before the write lock could be taken")
    code, out, _ = run(["check", "--vault", str(v)], capsys)  # no --fix: opening heals it
    assert code == 0, out
    code, out, _ = run(["ls", "--vault", str(v), "--status", "admitted", "--json"], capsys)
    assert len(json.loads(out)) == len(leaf_files(v))
    code, out, err = run(["compact", "--vault", str(v)], capsys)
    assert code == 0, err
    assert "changed by hand" not in out  # the engine's own write is not taken for a person's
    assert run(["check", "--vault", str(v)], capsys)[0] == 0


def _kill_between_files_and_rows(v: Path) -> bool:
    """Run the queue, hold it between the leaves' rewritten files and their rows, kill it there. True
    when it was held there (files admitted, rows still pending)."""
    files = leaf_files(v)
    db = sqlite3.connect(v / ".vaultmem" / "chunks.db", timeout=0, isolation_level=None)
    proc = cli_process("jobs", "--run", "--vault", str(v))
    try:
        # The vectors commit just before the leaves' files are rewritten; holding the write lock from
        # then on stops the worker between its files and its rows, where the kill lands.
        wait_for(lambda: db.execute("SELECT count(*) FROM vectors").fetchone()[0] > 0, "the vectors")
        wait_for(lambda: _begin(db), "the write lock")
        wait_for(lambda: all(says(f, "admitted") for f in files), "every leaf file to say admitted")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        db.execute("ROLLBACK")
        pending = db.execute("SELECT count(*) FROM chunks WHERE status = 'pending_extraction'").fetchone()[0]
    finally:
        db.close()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return bool(pending == len(files))


def _begin(db: sqlite3.Connection) -> bool:
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:  # a worker holds it for a moment (a claim, a commit)
        return False
    return True


@pytest.mark.slow
def test_an_editor_saving_a_leaf_while_sealing_leaves_only_that_leaf_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = cli_vault(tmp_path, capsys, name="base")
    export = write_json(tmp_path / "chat.json", topic_records(25))
    assert run(["ingest", str(export), "--vault", str(base), "--source", "chat"], capsys)[0] == 0
    for attempt in range(3):  # the save begins once the leaf is admitted: rarely after the seal too
        v = tmp_path / f"v{attempt}"
        shutil.copytree(base, v)
        saved = _save_while_compacting(v)
        if saved is not None:
            break
    else:
        pytest.fail("three times the seal ran before the editor's save began")
    oldest, out = saved
    assert "jobs failed" not in out, out
    assert f"sealed {100 - 8 - 1} leaves" in out, out  # all but the fresh tail and the one being saved
    assert oldest.name in out  # the note says which leaf was left out
    assert oldest.exists() and oldest.parent.name == "_fresh"
    code, out, err = run(["compact", "--vault", str(v)], capsys)  # the edit is read; nothing is lost
    assert code == 0, err
    assert run(["check", "--vault", str(v)], capsys)[0] == 0
    code, out, _ = run(["ls", "--vault", str(v), "--json"], capsys)
    assert len(json.loads(out)) == 100


def _save_while_compacting(v: Path) -> tuple[Path, str] | None:
    """Compact while an editor saves the oldest leaf the way vim does (rename it to a backup, write it
    anew), begun once the leaf is admitted. Returns the leaf and compact's output; None when the seal
    had already moved the leaf."""
    oldest = min(leaf_files(v), key=lambda p: p.name)
    backup = oldest.with_name(oldest.name + "~")
    proc = cli_process("compact", "--vault", str(v))
    try:
        wait_for(lambda: says(oldest, "admitted"), "the oldest leaf to be admitted")
        try:
            os.rename(oldest, backup)
        except FileNotFoundError:
            return None
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    oldest.write_text(backup.read_text(encoding="utf-8").replace(" again.", " again!"), encoding="utf-8")
    backup.unlink()
    assert proc.returncode == 0, err
    return oldest, out


_HOLDER = """
import sys
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

vault = Vault.open(sys.argv[1], embedder=FakeEmbedder())
with vault._locked():  # a long write: one big import, a reindex, a compaction step
    print("holding", flush=True)
    sys.stdin.readline()
vault.close()
print("released", flush=True)
"""


def test_opening_to_read_never_waits_for_a_live_writer(tmp_path: Path) -> None:
    """A live writer's mark is not a dead writer's: opening the vault to search it (the dashboard, an
    MCP server, `vaultmem search`) reads at once instead of waiting out the lock and failing."""
    vault = Vault.init(tmp_path / "v", embedder=FakeEmbedder())
    vault.ingest_messages(
        [{"id": "m1", "content": "The quokka visit is booked for Tuesday.", "ts": "2026-03-02"}],
        source="chat",
    )
    vault.close()
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "v")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == "holding"
            assert (tmp_path / "v" / ".vaultmem" / "writing").exists()
            reader = Vault.open(tmp_path / "v", embedder=FakeEmbedder())  # waited 30 s, then VaultLocked
            assert [h.text for h in reader.search("quokka")] == ["The quokka visit is booked for Tuesday."]
            assert holder.poll() is None  # the writer still holds the lock: nothing waited for it
            reader.close()
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "released"
        finally:
            if holder.poll() is None:
                holder.kill()
            holder.wait(timeout=60)
    assert not (tmp_path / "v" / ".vaultmem" / "writing").exists()
