"""The watch daemon with a real watchdog observer on real files: every save style, moves, deletes, notes,
git revert of a compaction, no self-triggering, the lock, the scheduler, bursts and kill -9."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from watchdog.observers import Observer

from tests.helpers import (
    BULK_S,
    DEADLINE_S,
    chat,
    hits,
    make_vault,
    save_in_place,
    save_temp_rename,
    save_vim_backup,
    settle,
    topic_records,
    wait_for,
    watching,
)
from vaultmem import daemonstate
from vaultmem.cli import app
from vaultmem.daemon import Daemon, midnight_jobs
from vaultmem.errors import VaultLocked
from vaultmem.jobs import JobKind
from vaultmem.layout import Layout
from vaultmem.pool import Pool
from vaultmem.vault import Vault
from vaultmem.watch import Debouncer, Watcher

# Deadlines only bound a hang: every wait below ends as soon as its condition holds, on any machine.


def row(vault: Vault, leaf_id: str) -> dict[str, object] | None:
    r = vault.conn.execute("SELECT * FROM chunks WHERE id = ?", (leaf_id,)).fetchone()
    return dict(r) if r is not None else None


def leaf_path(vault: Vault, leaf_id: str) -> Path:
    r = row(vault, leaf_id)
    assert r is not None
    return vault.layout.root / str(r["path"])


def edit_body(path: Path, new_text: str) -> bytes:
    head, _sep, _body = path.read_text(encoding="utf-8").partition("\n---\n")
    return f"{head}\n---\n{new_text}\n".encode()


@pytest.fixture
def seeded(vault: Vault) -> Vault:
    vault.ingest_messages(chat(4), source="chat")
    vault.flush()
    return vault


@pytest.mark.parametrize("save", [save_in_place, save_temp_rename, save_vim_backup])
def test_edited_leaf_keeps_id_and_is_searchable(seeded: Vault, save: Callable[[Path, bytes], None]) -> None:
    leaf_id = seeded.ls()[1].id
    with watching(seeded.layout.root) as daemon:
        path = leaf_path(seeded, leaf_id)
        save(path, edit_body(path, "The zanzibar ferry leaves at noon."))
        wait_for(lambda: leaf_id in hits(seeded, "zanzibar"), what="the edit to be searchable")
        settle(daemon)
        assert daemon.report.changed == 1 and daemon.report.new == 0 and daemon.report.deleted == 0
    r = row(seeded, leaf_id)
    assert r is not None and r["path"] == seeded.layout.rel(path) and r["source_id"] == "s1-m1"
    assert seeded.check().ok


def test_edited_sealed_leaf_makes_its_levels_stale(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v")
    vault.ingest_messages(topic_records(10))
    vault.flush()
    vault.compact()
    sealed = next(leaf for leaf in vault.ls() if (row(vault, leaf.id) or {}).get("parent"))
    parent = row(vault, sealed.id)["parent"]  # type: ignore[index]
    with watching(vault.layout.root) as daemon:
        path = leaf_path(vault, sealed.id)
        save_in_place(path, edit_body(path, "roses and the zanzibar greenhouse"))
        wait_for(lambda: parent in daemon.marked_stale, what="the level to go stale")
        wait_for(lambda: sealed.id in hits(vault, "zanzibar"), what="the edit to be searchable")
    assert row(vault, sealed.id)["path"] == vault.layout.rel(path)  # type: ignore[index]
    vault.close()


def test_new_note_is_ingested_and_left_untouched(seeded: Vault) -> None:
    root = seeded.layout.root
    with watching(root) as daemon:
        note = root / "notes" / "trip.md"
        note.parent.mkdir()
        note.write_text("# Trip\n\nThe okonomiyaki place in Osaka opens at five.\n", encoding="utf-8")
        before = note.read_bytes()
        wait_for(lambda: hits(seeded, "okonomiyaki"), what="the note to be searchable")
        settle(daemon)
        assert daemon.report.notes == 1
    hit = seeded.get(hits(seeded, "okonomiyaki")[0])
    assert hit.source == "notes" and hit.meta["file"] == "notes/trip.md"
    assert note.read_bytes() == before
    assert seeded.check().ok


def test_delete_and_moves_within_and_out_of_the_vault(seeded: Vault, tmp_path: Path) -> None:
    a, b, c = (leaf.id for leaf in seeded.ls()[:3])
    root = seeded.layout.root
    with watching(root) as daemon:
        leaf_path(seeded, a).unlink()
        src = leaf_path(seeded, b)
        moved = root / "sources" / "chat" / "kept" / src.name
        moved.parent.mkdir()
        os.rename(src, moved)
        out = leaf_path(seeded, c)
        os.rename(out, tmp_path / out.name)
        wait_for(lambda: row(seeded, a) is None and row(seeded, c) is None, what="the deletes")
        wait_for(lambda: (row(seeded, b) or {}).get("path") == seeded.layout.rel(moved), what="the move")
        sidecar = moved.parent / "_embeddings.json"
        wait_for(lambda: sidecar.exists() and moved.name in sidecar.read_text(), what="the vector to follow")
        settle(daemon)
        assert daemon.report.deleted == 2 and daemon.report.moved == 1
    assert len(seeded.ls()) == 2  # nothing else was deleted
    assert seeded.check().ok


def test_directory_moved_in_keeps_ids(seeded: Vault, tmp_path: Path) -> None:
    root = seeded.layout.root
    ids = [leaf.id for leaf in seeded.ls()]
    outside = tmp_path / "elsewhere"
    os.rename(root / "sources" / "chat" / "_fresh", outside)
    with watching(root) as daemon:
        settle(daemon)
        assert all(row(seeded, i) is None for i in ids)  # the catch-up saw them go
        os.rename(outside, root / "sources" / "chat" / "_fresh")
        wait_for(lambda: all(row(seeded, i) is not None for i in ids), what="the folder to come back")
        settle(daemon)
    assert seeded.check().ok


def test_rescan_catches_what_the_os_dropped(seeded: Vault) -> None:
    root = seeded.layout.root
    with watching(root, rescan_s=0.5) as daemon:
        daemon.watcher.stop()  # from here on every event is lost, as on a queue overflow
        (root / "dropped.md").write_text("The axolotl tank needs a new filter.\n", encoding="utf-8")
        leaf_path(seeded, seeded.ls()[0].id).unlink()
        # The rows change before the daemon counts what it did: wait for both.
        wait_for(
            lambda: (
                hits(seeded, "axolotl")
                and len(seeded.ls()) == 4
                and daemon.report.notes
                and daemon.report.deleted
            ),
            what="the rescan",
        )
        assert daemon.report.rescans >= 2 and daemon.report.deleted == 1


def test_invalid_file_is_reported_and_never_touched(seeded: Vault) -> None:
    root = seeded.layout.root
    with watching(root) as daemon:
        bad = root / "sources" / "chat" / "_fresh" / "2024-01-01-broken-0123456789abcdef.md"
        bad.write_text("---\nid: [unclosed\n---\ntext\n", encoding="utf-8")
        wait_for(lambda: daemon.report.invalid, what="the warning")
        assert "broken" in daemon.report.invalid[0]
        wait_for(lambda: daemonstate.read_status(seeded.layout)["warnings"], what="status")  # type: ignore[index]
    assert bad.read_text(encoding="utf-8").startswith("---\nid: [unclosed")


def test_own_writes_never_trigger_work(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v")
    with watching(vault.layout.root) as daemon:
        settle(daemon)
        start = daemon.report.as_dict()
        # Ingested while the daemon watches: the admit batch queues its buffer check, which the daemon's
        # pool may run (and seal) at once, so leaves flushed before it started could be sealed before
        # `start` and this test would see no compaction at all.
        vault.ingest_messages(topic_records(10))
        vault.flush()
        vault.compact()
        # The daemon's pool claims from the same queue and may run the seals the admitted leaves and this
        # call queued; either way, once the queue is empty everything beyond the fresh tail is sealed.
        wait_for(lambda: not vault.jobs.pending(), what="the compaction's jobs")
        assert len(vault.ls(status="admitted")) == 8 and len(vault.ls()) == 40
        settle(daemon)
        end = daemon.report.as_dict()
        assert end["unchanged"] > start["unchanged"]  # it saw the compaction's files...
        for key in ("new", "moved", "changed", "deleted", "notes", "added", "stale"):
            assert end[key] == start[key] == 0, key  # ...and found nothing to do
        assert vault.jobs.pending() == 0
    assert vault.check().ok
    vault.close()


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_git_revert_of_a_compaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    vault = make_vault(tmp_path / "v")
    root = vault.layout.root
    vault.ingest_messages(topic_records(10))
    vault.flush()
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "before")
    ids = {leaf.id for leaf in vault.ls()}
    vault.compact()
    assert vault.conn.execute("SELECT count(*) FROM chunks WHERE kind = 'summary'").fetchone()[0] > 0
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "compaction")
    with watching(root) as daemon:
        git(root, "revert", "--no-edit", "HEAD")
        wait_for(
            lambda: (
                vault.conn.execute(
                    "SELECT count(*) FROM chunks WHERE kind = 'summary' OR path NOT LIKE '%/\\_fresh/%' ESCAPE '\\'"
                ).fetchone()[0]
                == 0
            ),
            what="the revert to reach the index",
        )
        settle(daemon)
        assert daemon.report.new == 0  # every leaf kept its row: moved back, not re-created
    assert {leaf.id for leaf in vault.ls()} == ids
    assert vault.check().ok
    vault.close()


# -- lifecycle ------------------------------------------------------------------------------------------
def test_one_daemon_per_vault_and_status_in_stats(seeded: Vault) -> None:
    with watching(seeded.layout.root):
        with pytest.raises(VaultLocked, match=f"pid {os.getpid()}"):
            Daemon(seeded).once()
        # Whatever moment stats looks at, a running daemon has a pid; its own status follows.
        assert seeded.stats().daemon["pid"] == os.getpid()
        wait_for(lambda: seeded.stats().daemon["state"] == "running", timeout=BULK_S, what="status")
        status = seeded.stats().as_dict()["daemon"]
        assert status["running"] and status["pid"] == os.getpid() and status["queue"] is not None
    status = seeded.stats().daemon
    assert status["running"] is False and status["state"] == "stopped" and status["pid"] is None


def test_status_names_the_lock_holder_before_the_daemon_writes_its_status(seeded: Vault) -> None:
    """The race: the lock is taken before the status file is written (an old one may still be there)."""
    layout = seeded.layout
    daemonstate.write_status(layout, {"pid": 1, "host": "elsewhere", "running": False, "queue": 7})
    lock = daemonstate.acquire(layout)
    try:
        status = seeded.stats().daemon
        assert status["running"] and status["state"] == "starting"
        assert status["pid"] == os.getpid() and status["queue"] is None
        if Path("/proc/locks").exists():
            # Between taking the lock and writing its record into the lock file: the kernel knows.
            os.pwrite(lock.fd, b" " * 64, 0)
            assert seeded.stats().daemon["pid"] == os.getpid()
    finally:
        lock.release()
    assert seeded.stats().daemon["running"] is False and seeded.stats().daemon["pid"] is None


def test_watch_once_catches_up(seeded: Vault) -> None:
    from typer.testing import CliRunner

    root = seeded.layout.root
    (root / "inbox.md").write_text("The quokka visit is booked for Tuesday.\n", encoding="utf-8")
    leaf_path(seeded, seeded.ls()[0].id).unlink()
    result = CliRunner().invoke(app, ["watch", "--once", "--json", "--vault", str(root)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["notes"] == 1 and data["deleted"] == 1
    assert hits(seeded, "quokka")
    again = CliRunner().invoke(app, ["watch", "--once", "--json", "--vault", str(root)])
    assert json.loads(again.output)["notes"] == 0  # read once: the stamp is remembered


def test_a_note_saved_as_utf16_is_read(seeded: Vault) -> None:
    """Windows Notepad's "Unicode" (UTF-16 LE with a mark) and a mark-less UTF-16 as some tools write it:
    the import paths read both, and so does the watcher (it used to call them binary)."""
    import codecs

    from typer.testing import CliRunner

    root = seeded.layout.root
    note = "# 周会\n\nThe axolotl tank moves to the lab on Friday. 水族箱周五搬到实验室。\n"
    (root / "notepad.md").write_bytes(codecs.BOM_UTF16_LE + note.encode("utf-16-le"))
    (root / "plain16.md").write_bytes("The narwhal poster arrives Monday.\n".encode("utf-16-le"))
    result = CliRunner().invoke(app, ["watch", "--once", "--json", "--vault", str(root)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["notes"] == 2
    assert hits(seeded, "axolotl") and hits(seeded, "narwhal")
    assert seeded.check().ok
    # The person's files are left as they saved them.
    assert (root / "notepad.md").read_bytes().startswith(codecs.BOM_UTF16_LE)


def test_scheduler_enqueues_and_pool_runs_the_digest(seeded: Vault) -> None:
    jobs = midnight_jobs(datetime(2026, 3, 5, tzinfo=UTC), seeded.sources())
    assert seeded.jobs.enqueue_many(jobs) == 2
    assert seeded.jobs.enqueue_many(jobs) == 0  # the same midnight twice queues nothing
    Pool(seeded.job_env()).run_until_idle()
    assert seeded.jobs.list() == []  # 2026-03-04 has no leaves: its digest job completes, writing nothing
    assert (seeded.layout.root / "global" / "2024-03").is_dir()  # the seeded days got theirs
    assert not (seeded.layout.root / "global" / "2026-03").exists()


def test_midnight_queues_the_digest(seeded: Vault) -> None:
    yesterday = datetime.fromtimestamp(time.time() - 86400, UTC).strftime("%Y-%m-%d")
    seeded.ingest_messages(
        [{"id": "late", "content": "The boiler was serviced at last.", "ts": yesterday}], source="chat"
    )
    seeded.flush()
    seeded.conn.execute("DELETE FROM jobs WHERE kind = ?", (JobKind.DIGEST_DAILY.value,))
    seeded.conn.commit()  # only the scheduler can queue yesterday's digest now
    with watching(seeded.layout.root) as daemon:
        daemon._next_midnight = time.time()  # as if 00:00 UTC had just passed
        day = seeded.layout.root / "global" / yesterday[:7]
        wait_for(lambda: list(day.glob(f"*/{yesterday}/_summary.md")), what="yesterday's digest")
    assert "boiler" in next(day.glob(f"*/{yesterday}/_summary.md")).read_text()


def test_debouncer_coalesces_a_burst() -> None:
    now = [0.0]
    d = Debouncer(quiet_s=0.3, max_hold_s=2.0, clock=lambda: now[0])
    for _ in range(5):
        d.add(["a.md", "b.md"])
        now[0] += 0.1
    assert d.take(timeout=0) == []
    now[0] += 0.3
    assert d.take(timeout=0) == ["a.md", "b.md"]
    for _ in range(25):  # saved every 0.1 s for 2.5 s: still handled after max_hold_s
        d.add(["c.md"])
        now[0] += 0.1
    assert d.take(timeout=0) == ["c.md"]


class _NoWatches(Observer):  # type: ignore[misc, valid-type]
    def start(self) -> None:
        raise OSError(errno.ENOSPC, "inotify watch limit reached")


def test_inotify_limit_falls_back_to_polling(seeded: Vault) -> None:
    debouncer = Debouncer(quiet_s=0.05)
    watcher = Watcher(seeded.layout, debouncer, poll_s=0.1)
    watcher.start(_NoWatches())
    try:
        assert watcher.polling and "max_user_watches" in watcher.warnings[0]
        (seeded.layout.root / "polled.md").write_text("polled\n", encoding="utf-8")
        batch: list[str] = []
        wait_for(lambda: batch.extend(debouncer.take(0.1)) or "polled.md" in batch, what="polling")
    finally:
        watcher.stop()
    assert not watcher.alive()


# -- bursts and crashes (slow) ----------------------------------------------------------------------------
def write_notes(root: Path, n: int, start: int = 0) -> None:
    folder = root / "notes"
    folder.mkdir(exist_ok=True)
    for i in range(start, start + n):
        (folder / f"n{i:04d}.md").write_text(f"Note {i}: the heron nests by pond {i}.\n", encoding="utf-8")


def notes_indexed(vault: Vault) -> int:
    return int(
        vault.conn.execute(
            "SELECT count(DISTINCT json_extract(provenance, '$.file')) FROM chunks WHERE source = 'notes'"
        ).fetchone()[0]
    )


@pytest.mark.slow
def test_burst_of_1000_new_files(vault: Vault) -> None:
    with watching(vault.layout.root) as daemon:
        write_notes(vault.layout.root, 1000)
        wait_for(lambda: notes_indexed(vault) == 1000, timeout=BULK_S, what="1,000 notes")
        settle(daemon)
        assert daemon.report.notes == 1000
    assert vault.conn.execute("SELECT count(*) FROM chunks WHERE kind = 'leaf'").fetchone()[0] == 1000
    assert vault.check().ok


DAEMON = """
import signal, sys, threading
from vaultmem.daemon import Daemon
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
with Vault.open(sys.argv[1], embedder=FakeEmbedder()) as v:
    Daemon(v, quiet_s=0.1).run(stop)
"""


def spawn(root: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", DAEMON, str(root)], cwd=Path(__file__).parent.parent)
    layout = Layout(root)
    try:
        wait_for(
            lambda: (
                daemonstate.is_running(layout) and (daemonstate.read_status(layout) or {}).get("last_rescan")
            )
        )
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def embedding_left(vault: Vault) -> int:
    return int(vault.conn.execute("SELECT count(*) FROM jobs WHERE kind = 'extract'").fetchone()[0])


@pytest.mark.slow
def test_kill_9_during_a_burst_then_restart(vault: Vault) -> None:
    root = vault.layout.root
    proc = spawn(root)
    done = threading.Event()
    killed = threading.Event()

    def burst() -> None:
        # Written in chunks; the second half only once the daemon was killed, so the kill lands in the
        # middle of the burst however fast or slow the machine is.
        for chunk in range(20):
            if chunk == 10 and not killed.wait(BULK_S):
                return
            write_notes(root, 50, start=chunk * 50)
            time.sleep(0.05)  # paced like a sync tool, not a timing guess
        done.set()

    writer = threading.Thread(target=burst)
    writer.start()
    try:
        wait_for(lambda: notes_indexed(vault) > 0, what="the burst to start")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_mid_burst = not done.is_set()
        killed.set()
        writer.join()
    assert killed_mid_burst and notes_indexed(vault) < 1000
    assert done.is_set()  # the whole burst was written, its second half while no daemon ran
    assert not daemonstate.is_running(vault.layout)  # the kernel dropped the lock
    write_notes(root, 100, start=1000)  # written while no daemon runs
    proc = spawn(root)
    try:
        wait_for(lambda: notes_indexed(vault) == 1100, timeout=BULK_S, what="every note")
        wait_for(lambda: not embedding_left(vault), timeout=BULK_S, what="the embeddings")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=BULK_S) == 0  # it finishes the job in hand first
    assert (
        vault.conn.execute("SELECT count(*) FROM chunks WHERE kind = 'leaf'").fetchone()[0] == 1100
    )  # each once
    assert vault.check().ok
    assert vault.jobs.counts()["parked"] == 0
    assert daemonstate.read_status(vault.layout)["running"] is False  # type: ignore[index]


@pytest.mark.slow
def test_cli_watch_stops_cleanly_on_sigint(vault: Vault) -> None:
    root = vault.layout.root
    proc = subprocess.Popen(
        [sys.executable, "-m", "vaultmem.cli", "watch", "--vault", str(root)],
        cwd=Path(__file__).parent.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: vault.stats().daemon["running"], what="the daemon")
        assert vault.stats().daemon["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert b"batches" in out and vault.stats().daemon["running"] is False


def test_a_full_disk_only_the_workers_meet_is_said_by_the_daemon(
    seeded: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's pool meets the full disk (the queued day digests write their step notes) while the
    daemon's own turns write nothing: a worker only waits and tries again, so the daemon says it, in
    the notice and the status; once space returns the work finishes and ``check`` passes."""
    from vaultmem import fsio, pool, steps

    monkeypatch.setattr(pool, "DISK_FULL_WAIT_S", 0.5)
    full = threading.Event()
    full.set()
    real_write_new = fsio._write_new

    def write_new(tmp: Path, target: Path, data: bytes, *, fsync: bool) -> os.stat_result:
        if full.is_set() and "treeops" in target.parts:  # only a pool step writes these
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_new(tmp, target, data, fsync=fsync)

    monkeypatch.setattr(fsio, "_write_new", write_new)
    assert seeded.jobs.counts()["queued"] > 0  # the digests of the chat's day wait for the pool
    notices: list[str] = []
    with watching(seeded.layout.root, disk_full_wait_s=0.5, on_notice=notices.append) as daemon:
        wait_for(lambda: notices, timeout=BULK_S, what="the daemon to say its workers found the disk full")
        assert "no space left" in notices[0] and "nothing was lost" in notices[0]
        assert "queued work is tried again" in notices[0]
        wait_for(
            lambda: any("nothing was lost" in w for w in seeded.stats().daemon["warnings"]),
            timeout=BULK_S,
            what="the warning in the status",
        )
        assert seeded.stats().daemon["running"]
        full.clear()
        wait_for(
            lambda: seeded.jobs.counts()["queued"] == 0 and not steps.pending_notes(seeded.layout),
            timeout=BULK_S,
            what="the work to finish once space returned",
        )
        settle(daemon)
    assert not fsio.stray_temp_files(seeded.layout.root)
    assert seeded.check().ok


def test_a_full_disk_while_the_daemon_writes_loses_nothing_says_so_and_recovers(
    seeded: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC on every file the engine writes (injected where fsio creates a file: the boundary, not the
    thing under test; SQLite keeps writing) while the daemon reads a new note: the daemon keeps running
    and says the disk is full, the note is untouched, no temp file is left; once space returns the note
    reaches the index, the status carries the warning and ``check`` passes."""
    from vaultmem import fsio, pool, steps

    monkeypatch.setattr(pool, "DISK_FULL_WAIT_S", 0.5)
    full = threading.Event()
    refused: list[str] = []
    real_write_new = fsio._write_new

    def write_new(tmp: Path, target: Path, data: bytes, *, fsync: bool) -> os.stat_result:
        if full.is_set():
            refused.append(target.name)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_new(tmp, target, data, fsync=fsync)

    monkeypatch.setattr(fsio, "_write_new", write_new)
    root = seeded.layout.root
    note = root / "Trips" / "Quokka island.md"
    text = (
        "---\ntags: [trip]\n---\n# Quokka island\n\n## Ferry\n\nThe quokka ferry leaves Fremantle at 9:30.\n"
    )
    notices: list[str] = []
    with watching(root, disk_full_wait_s=0.5, on_notice=notices.append) as daemon:
        full.set()
        note.parent.mkdir()
        note.write_text(text, encoding="utf-8")
        wait_for(lambda: notices, timeout=BULK_S, what="the daemon to say the disk is full")
        assert "no space left" in notices[0] and "nothing was lost" in notices[0]
        assert seeded.stats().daemon["running"] and not hits(seeded, "quokka")
        full.clear()
        wait_for(lambda: hits(seeded, "quokka"), timeout=BULK_S, what="the note once space returned")
        wait_for(
            lambda: any("nothing was lost" in w for w in seeded.stats().daemon["warnings"]),
            timeout=BULK_S,
            what="the warning in the status",
        )
        # A step the full disk cut midway (a seal or digest running at that moment) is finished by the
        # daemon once space returns, not left for the next open.
        wait_for(
            lambda: not steps.pending_notes(seeded.layout), timeout=BULK_S, what="a cut step to be finished"
        )
        settle(daemon)
    assert refused and note.read_text(encoding="utf-8") == text
    assert not fsio.stray_temp_files(root)
    assert seeded.check().ok
