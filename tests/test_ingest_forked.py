"""Ingest writes a batch's leaf files in a forked process while the next batch's leaves are built: the
vault it leaves is the one writing everything here leaves, and a failure on either side is raised as it
would be without the fork."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.helpers import make_vault, topic_records
from vaultmem import forking, index, ingest
from vaultmem.errors import InvalidInput
from vaultmem.model import Leaf
from vaultmem.vault import Vault

MESSAGES = 120
CLOCK = "2026-03-01T09:00:00+00:00"

# Forked writes happen only in a process without other threads (``forking.can_fork``); the test process
# may hold threads other tests left, so the forked ingest runs in a fresh process, as ``vaultmem ingest``.
_CHILD = """
import json, os, sys
from datetime import datetime
from tests.helpers import make_vault, topic_records
from vaultmem import forking, ingest, vault as vault_module
assert forking.can_fork()
ingest.FORK_MIN_FILES = 1
vault_module.BATCH_MESSAGES = 25
forks = []
yaml_at_fork = []  # what a writer inherits: PyYAML (the frontmatter's resolver) already imported
real_fork = os.fork
def fork():
    pid = real_fork()
    if pid:
        forks.append(pid)
        yaml_at_fork.append("yaml" in sys.modules)
    return pid
os.fork = fork
rows_here = []  # leaf rows made in this process (a forked writer's own are not seen here)
real_row = ingest.index.leaf_row
def leaf_row(*args, **kwargs):
    rows_here.append(1)
    return real_row(*args, **kwargs)
ingest.index.leaf_row = leaf_row
vault = make_vault(sys.argv[1])
vault.clock = lambda: datetime.fromisoformat(sys.argv[2])
report = vault.ingest_messages(topic_records(int(sys.argv[3]) // 4))
vault.close()
print(json.dumps({"forks": len(forks), "added": len(report.added), "rows_here": len(rows_here),
                  "yaml_at_fork": sorted(set(yaml_at_fork))}))
"""


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "sources").rglob("*.md"))}


def _state(root: Path) -> dict[str, object]:
    with sqlite3.connect(root / ".vaultmem" / "chunks.db") as conn:
        conn.row_factory = sqlite3.Row
        rows = index.all_rows(conn)
        for row in rows.values():
            row.pop("file_mtime_ns")  # when the file was written, the only thing that may differ
        state: dict[str, object] = {
            table: conn.execute(f"SELECT rowid, body FROM {table} ORDER BY rowid").fetchall()
            for table in ("fts_words", "fts_trigram", "fts_nav_words", "fts_nav_trigram")
        }
        state["rows"] = rows
        state["rowids"] = conn.execute("SELECT rowid, id FROM chunks ORDER BY rowid").fetchall()
        state["jobs"] = conn.execute("SELECT kind, dedupe_key FROM jobs ORDER BY id").fetchall()
        state["intents"] = sorted(p.name for p in (root / ".vaultmem" / "intent").glob("*"))
    return state


def test_forked_writes_leave_the_same_files_rows_fts_and_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked = tmp_path / "forked"
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(forked), CLOCK, str(MESSAGES)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    ).stdout
    child = json.loads(out)
    # Every batch but the last one forked, and its writer made the batch's rows: only the last batch's
    # 20 rows (written here, nothing to overlap) were made in the parent. Every writer started with what
    # rendering needs ready (``yamlsubset.prepare``), not importing PyYAML once per batch.
    assert child == {
        "forks": MESSAGES // 25,
        "added": MESSAGES,
        "rows_here": MESSAGES % 25,
        "yaml_at_fork": [True],
    }

    monkeypatch.setattr(forking, "can_fork", lambda: False)
    monkeypatch.setattr("vaultmem.vault.BATCH_MESSAGES", 25)
    here = make_vault(tmp_path / "here")
    here.clock = lambda: datetime.fromisoformat(CLOCK).astimezone(UTC)
    here.ingest_messages(topic_records(MESSAGES // 4))
    assert here.check().ok
    here.close()

    assert _files(forked) == _files(tmp_path / "here")
    assert _state(forked) == _state(tmp_path / "here")
    with Vault.open(forked) as vault:
        assert vault.check().ok


def _leaves(vault: Vault, records: list[dict[str, object]]) -> list[Leaf]:
    from vaultmem.inputs.chat import messages_from_records

    messages = messages_from_records(records, source="chat", session=None)
    return ingest.build_leaves(messages, vault.layout, vault.scorer, 256)


def test_a_failure_of_the_work_meanwhile_is_raised_once_the_batch_is_committed(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v")
    leaves = _leaves(vault, topic_records(5))

    def meanwhile() -> None:
        raise InvalidInput("the next batch is bad")

    with pytest.raises(InvalidInput, match="next batch"):
        ingest.write_leaves(vault.conn, vault.layout, leaves, meanwhile)
    assert len(index.existing_ids(vault.conn, [leaf.id for leaf in leaves])) == len(leaves)
    assert not list(vault.layout.intent.glob("*.json"))
    assert vault.check().ok
    vault.close()


def test_a_failure_building_the_next_batch_keeps_the_batch_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next batch's leaves are built while this batch is written: a failure there stops the ingest
    once this batch is in (files, rows and its bookkeeping), as when batches were built one by one."""
    monkeypatch.setattr("vaultmem.vault.BATCH_MESSAGES", 10)
    real = ingest.build_leaves
    calls: list[int] = []

    def build_leaves(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise InvalidInput("the second batch is bad")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "build_leaves", build_leaves)
    vault = make_vault(tmp_path / "v")
    with pytest.raises(InvalidInput, match="second batch"):
        vault.ingest_messages(topic_records(5))
    assert len(vault.ls()) == 10 and len(calls) == 2
    assert not list(vault.layout.intent.glob("*.json"))
    assert vault.check().ok
    vault.close()


def test_a_refused_write_in_the_forked_child_is_raised_here_and_nothing_is_indexed(tmp_path: Path) -> None:
    """A leaf file that already exists: the child refuses before writing anything; the parent raises the
    same ConflictError, removes the batch's intent note and indexes nothing."""
    code = """
import sys
from tests.helpers import make_vault, topic_records
from tests.test_ingest_forked import _leaves
from vaultmem import ingest, index
from vaultmem.errors import ConflictError
ingest.FORK_MIN_FILES = 1
vault = make_vault(sys.argv[1])
leaves = _leaves(vault, topic_records(5))
target = vault.layout.abs(leaves[3].path)
target.parent.mkdir(parents=True, exist_ok=True)
target.write_text("mine", encoding="utf-8")
ran = []
try:
    ingest.write_leaves(vault.conn, vault.layout, leaves, lambda: ran.append(1))
except ConflictError as exc:
    assert "already exists" in str(exc), exc
else:
    raise AssertionError("no ConflictError")
assert ran == [1] and not index.existing_ids(vault.conn, [leaf.id for leaf in leaves])
assert not list(vault.layout.intent.glob("*.json")) and target.read_text(encoding="utf-8") == "mine"
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "v")],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_first_batch_is_small_so_writing_starts_at_once_and_nothing_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batch is built before anything can overlap it: it is ``FIRST_BATCH_MESSAGES`` long, the
    rest ``BATCH_MESSAGES``; every message lands once, in order, as with equal batches."""
    monkeypatch.setattr("vaultmem.vault.FIRST_BATCH_MESSAGES", 3)
    monkeypatch.setattr("vaultmem.vault.BATCH_MESSAGES", 10)
    sizes: list[int] = []
    real = ingest.build_leaves

    def build_leaves(messages: list[object], *args: object, **kwargs: object) -> object:
        sizes.append(len(messages))
        return real(messages, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "build_leaves", build_leaves)
    vault = make_vault(tmp_path / "v")
    done: list[int] = []
    report = vault.ingest_messages(topic_records(6), progress=lambda n, _total: done.append(n))
    assert sizes == [3, 10, 10, 1] and done == [3, 13, 23, 24]
    assert len(report.added) == 24 and len(vault.ls()) == 24
    assert [leaf.source_id for leaf in sorted(vault.ls(), key=lambda leaf: leaf.ts or 0)][:3] == [
        "m0",
        "m1",
        "m2",
    ]
    sizes.clear()
    again = vault.ingest_messages(topic_records(1))  # fewer messages than a first batch: one batch
    assert sizes == [3, 1] and again.duplicates == 4 and not again.added
    assert vault.check().ok
    vault.close()


def test_a_batchs_rows_and_its_sessions_jobs_commit_together(tmp_path: Path) -> None:
    """The session notes' jobs of a batch are queued in the transaction of its rows: one commit (one sync
    of the WAL) per batch, and a crash never leaves rows whose sessions were not scheduled."""
    vault = make_vault(tmp_path / "v")
    vault.clock = lambda: datetime.fromisoformat("2024-05-01T12:00:00+00:00")
    commits: list[str] = []
    vault.conn.set_trace_callback(lambda sql: commits.append(sql) if sql.strip() == "COMMIT" else None)
    vault.ingest_messages(topic_records(5))
    vault.conn.set_trace_callback(None)
    jobs = vault.conn.execute("SELECT count(*) FROM jobs WHERE kind = 'session_end'").fetchone()[0]
    assert jobs == 1 and len(commits) == 1, (jobs, commits)
    vault.close()
