"""Ctrl-C and dead workers: an interrupted `ingest --wait` says what it kept and gives its jobs back;
jobs leased by a killed process are taken back by the next command that runs jobs."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import chat, pin_runtime
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 240.0  # generous: the machine may be loaded; every wait below ends on a state


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vaultmem.cli", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _jobs(db: Path) -> dict[str, int]:
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return dict(conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
    except sqlite3.OperationalError:  # the schema is still being created
        return {}
    finally:
        conn.close()


def _unembedded(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute(
            "SELECT count(*) FROM chunks WHERE kind = 'leaf' AND id NOT IN (SELECT id FROM vectors)"
        ).fetchone()
        return int(row[0])
    finally:
        conn.close()


def _chat_export(path: Path, n: int) -> Path:
    """A chat export as an assistant app writes it: one JSON record per line."""
    places = ["Lisbon", "Kyoto", "Oaxaca", "Tromsø", "Hanoi", "Porto", "Cusco", "Tbilisi"]
    lines = []
    for i in range(n):
        who = "user" if i % 2 == 0 else "assistant"
        place = places[i % len(places)]
        text = (
            f"Day {i}: I booked the {place} guesthouse for {2 + i % 5} nights, check-in after {14 + i % 4}:00."
            if who == "user"
            else f"Noted: {place}, {2 + i % 5} nights. Do you want a reminder about the deposit of €{40 + i}?"
        )
        lines.append(
            json.dumps(
                {
                    "id": f"m{i:04d}",
                    "role": who,
                    "content": text,
                    "ts": f"2026-03-{1 + i % 28:02d}T09:{i % 60:02d}:00Z",
                    "session": f"trip-{i // 40}",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _interrupt_mid_wait(
    tmp_path: Path, sig: signal.Signals
) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    vault = tmp_path / "v"
    subprocess.run(_cli("init", str(vault)), check=True, env=_env(), capture_output=True)
    pin_runtime(vault)  # float32 on every CPU: a bf16 CPU would otherwise import torch here
    export = _chat_export(tmp_path / "trip.jsonl", 400)
    proc = subprocess.Popen(
        _cli("ingest", str(export), "--wait", "--vault", str(vault)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    db = vault / ".vaultmem" / "chunks.db"
    deadline = time.monotonic() + DEADLINE_S
    while _jobs(db).get("running", 0) == 0:  # embedding has started: jobs are leased
        assert proc.poll() is None, f"ingest ended before its jobs ran: {proc.communicate()}"
        assert time.monotonic() < deadline, "no job was ever leased"
        time.sleep(0.01)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=DEADLINE_S)
    return vault, db, subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _ingest_again(tmp_path: Path, vault: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli("ingest", str(tmp_path / "trip.jsonl"), "--wait", "--vault", str(vault), "--json"),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=DEADLINE_S,
    )


@pytest.mark.slow
def test_ctrl_c_during_ingest_wait_reports_and_releases(tmp_path: Path) -> None:
    vault, db, first = _interrupt_mid_wait(tmp_path, signal.SIGINT)
    assert first.returncode == 130, first.stderr
    assert "Traceback" not in first.stderr
    lines = first.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted: 400 new leaves written (kept)"), lines
    assert "jobs queued" in lines[0]
    assert _jobs(db).get("running", 0) == 0  # this process's leases went back on the way out
    again = _ingest_again(tmp_path, vault)
    report = json.loads(again.stdout)
    assert again.returncode == 0 and report["added"] == 0
    assert report["embedded"] > 0 and _unembedded(db) == 0
    assert _jobs(db).get("running", 0) == 0


@pytest.mark.slow
def test_kill_9_during_ingest_wait_then_the_next_run_takes_the_jobs_back(tmp_path: Path) -> None:
    vault, db, first = _interrupt_mid_wait(tmp_path, signal.SIGKILL)
    assert first.returncode == -signal.SIGKILL
    assert _jobs(db).get("running", 0) > 0  # leased by a process that is gone (lease not yet expired)
    again = _ingest_again(tmp_path, vault)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["embedded"] > 0
    assert _unembedded(db) == 0 and _jobs(db).get("running", 0) == 0


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("command", ["flush", "work"])
def test_every_command_that_runs_jobs_reclaims_dead_leases(tmp_path: Path, command: str) -> None:
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat(5))
        dead = f"{socket.gethostname()}:{_dead_pid()}"
        assert len(vault.jobs.claim(dead, kinds=["extract"], limit=10)) == 5  # a 120 s lease, owner gone
        report = vault.flush() if command == "flush" else vault.work()
        assert (report.embedded if command == "flush" else report.jobs_done) >= 5
        assert vault.jobs.counts()["running"] == 0


def test_release_process_gives_back_the_jobs_of_this_process_only(vault: Vault) -> None:
    vault.ingest_messages(chat(3))
    me = f"{socket.gethostname()}:{os.getpid()}"
    vault.jobs.claim(f"{me}:w0", kinds=["extract"], limit=1)
    vault.jobs.claim(me, kinds=["extract"], limit=1)
    vault.jobs.claim(f"{me}0:w1", kinds=["extract"], limit=1)  # another pid sharing a prefix
    assert vault.jobs.release_process(me) == 2
    assert vault.jobs.counts()["running"] == 1
