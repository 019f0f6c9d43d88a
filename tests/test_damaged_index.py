"""A damaged chunks.db never blocks the vault: it is moved aside, rebuilt from the files, and said so."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import chat, run
from vaultmem import db
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

CONFIG_FAKE = '[embed]\nmodel = "fake"\n'


def _vault(tmp_path: Path, n: int = 300) -> Path:
    """A vault the CLI opens with the fake embedder, filled with a few sessions of chat."""
    path = tmp_path / "v"
    with Vault.init(path, CONFIG_FAKE, embedder=FakeEmbedder()) as vault:
        for s in range(3):
            vault.ingest_messages(chat(n // 3, session=f"s{s}", source="garden"))
        vault.flush()
        vault.hot_topics(3)  # the heat table exists and is seeded
    return path


def _truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 3])


def _random(f: Path) -> None:
    f.write_bytes(os.urandom(f.stat().st_size))


def _zero_header(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[:4096] = bytes(4096)
    f.write_bytes(bytes(data))


def _zero_middle(f: Path) -> None:
    data = bytearray(f.read_bytes())
    n = len(data)
    data[n // 4 : n // 2] = bytes(n // 2 - n // 4)
    f.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_truncate, _random, _zero_header, _zero_middle])
def test_every_command_works_on_a_damaged_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Callable[[Path], None]
) -> None:
    v = _vault(tmp_path)
    damage(v / ".vaultmem" / "chunks.db")
    code, out, err = run(["search", "garden roses", "--vault", str(v), "--json"], capsys)
    assert code == 0, err
    assert len(json.loads(out)) == 10
    (line,) = err.strip().splitlines()
    assert line.startswith("vaultmem: warning: chunks.db was damaged (") and "rebuilt from the files" in line
    assert "300 leaves" in line
    kept = list((v / ".vaultmem").glob("chunks.db.damaged-*Z"))
    assert len(kept) == 1 and kept[0].stat().st_size > 0  # the damaged file is kept, not deleted
    code, out, err = run(["check", "--vault", str(v)], capsys)
    assert code == 0 and out.startswith("ok: 300 leaves") and err == ""


def _live_copy(tmp_path: Path) -> Path:
    """A copy of a vault taken while a process had it open (a backup or sync tool): its -wal holds the
    last transactions."""
    live = tmp_path / "live"
    vault = Vault.init(live, CONFIG_FAKE, embedder=FakeEmbedder())
    try:
        vault.conn.execute("PRAGMA wal_autocheckpoint = 0")
        vault.ingest_messages(chat(120, source="garden"))
        vault.flush()
        copy = tmp_path / "v"
        shutil.copytree(live, copy)
    finally:
        vault.close()
    assert (copy / ".vaultmem" / "chunks.db-wal").stat().st_size > 100_000
    return copy


@pytest.mark.parametrize("where", ["header", "frame"])
def test_a_damaged_write_ahead_log_is_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    v = _live_copy(tmp_path)
    wal = v / ".vaultmem" / "chunks.db-wal"
    data = bytearray(wal.read_bytes())
    at = 0 if where == "header" else len(data) // 3
    data[at : at + 8192] = os.urandom(8192)
    wal.write_bytes(bytes(data))
    # SQLite alone drops the log from the damage on and opens an index missing most rows, silently.
    code, out, err = run(["search", "garden roses", "--vault", str(v), "--json"], capsys)
    assert code == 0 and len(json.loads(out)) == 10
    assert "write-ahead log" in err and "rebuilt from the files (120 leaves" in err
    assert run(["check", "--vault", str(v)], capsys)[0] == 0


def test_a_healthy_write_ahead_log_is_left_alone(tmp_path: Path) -> None:
    v = _live_copy(tmp_path)
    assert db.wal_problem(v / ".vaultmem" / "chunks.db") is None
    with Vault.open(v, embedder=FakeEmbedder()) as vault:
        assert vault.warnings == [] and len(vault.ls()) == 120


def _damage_deep(f: Path) -> None:
    """Zero the leaf pages of one full-text table's data, all but the leftmost (the one a first-row read
    reaches): damage deep in the file that nothing read on open touches, whatever else the schema holds."""
    conn = sqlite3.connect(f)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [
            int(pageno)
            for pageno, path in conn.execute(
                "SELECT pageno, path FROM dbstat WHERE name = 'fts_words_data' AND pagetype = 'leaf'"
            )
            if set(str(path).strip("/").split("/")) != {"000"}
        ]
    finally:
        conn.close()
    assert len(pages) >= 2, "the table is too small to damage deep inside"
    data = bytearray(f.read_bytes())
    for pageno in pages:
        at = (pageno - 1) * page_size
        data[at : at + page_size] = bytes(page_size)
    f.write_bytes(bytes(data))


def test_check_and_reindex_find_damage_that_opening_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = _vault(tmp_path, 900)
    index = v / ".vaultmem" / "chunks.db"
    _damage_deep(index)
    assert db.quick_check(index) is not None
    code, out, err = run(["check", "--vault", str(v), "--json"], capsys)
    assert code == 1 and err == ""
    (problem,) = json.loads(out)["problems"]
    assert problem["code"] == "damaged_index" and problem["fixable"]
    code, out, err = run(["check", "--fix", "--vault", str(v)], capsys)
    assert code == 0, out + err
    assert "fixed   damaged_index" in out and out.rstrip().endswith("900 leaves checked, 0 problems")
    _damage_deep(index)
    code, out, err = run(["reindex", "--vault", str(v)], capsys)
    assert code == 0 and "reindexed 900 leaves" in out, out + err
    assert "chunks.db was damaged" in err
    # Damaged twice within a second: the second copy gets its own name, the first is kept.
    kept = {
        p.name for p in (v / ".vaultmem").glob("chunks.db.damaged-*") if not p.name.endswith(("-wal", "-shm"))
    }
    assert len(kept) == 2


def test_what_no_file_holds_is_salvaged_when_it_can_be_read(tmp_path: Path) -> None:
    v = _vault(tmp_path)
    with Vault.open(v, embedder=FakeEmbedder()) as vault:
        vault.jobs.enqueue("digest_daily", {"day": "1999-01-02"}, dedupe_key="digest_daily:1999-01-02")
        job = next(j for j in vault.jobs.list() if j.dedupe_key == "digest_daily:1999-01-02")
        vault.jobs.fail(job, "kept for a person")  # a job with its history: no file says it exists
        heat = dict(vault.conn.execute("SELECT entity, heat FROM entity_heat").fetchall())
    index = v / ".vaultmem" / "chunks.db"
    conn = sqlite3.connect(index)
    conn.execute("PRAGMA writable_schema = ON")  # break one FTS table's structure record only
    conn.execute("DELETE FROM fts_words_data WHERE id = 10")
    conn.commit()
    conn.close()
    with Vault.open(v, embedder=FakeEmbedder()) as vault:
        (warning,) = vault.warnings
        assert "queued jobs kept" in warning
        assert (
            vault.conn.execute(
                "SELECT last_error FROM jobs WHERE dedupe_key = 'digest_daily:1999-01-02'"
            ).fetchone()[0]
            == "kept for a person"
        )
        assert dict(vault.conn.execute("SELECT entity, heat FROM entity_heat").fetchall()) == heat
        assert len(vault.search("garden roses")) == 10


def test_check_reports_and_repairs_a_corrupt_sidecar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = _vault(tmp_path)
    sidecar = next((v / "sources").rglob("_embeddings.json"))
    sidecar.write_text(sidecar.read_text()[:5000], encoding="utf-8")  # cut short by a crashed sync tool
    code, out, _ = run(["check", "--vault", str(v), "--json"], capsys)
    assert code == 1
    codes = [p["code"] for p in json.loads(out)["problems"]]
    assert codes == ["bad_sidecar"]
    code, out, _ = run(["check", "--fix", "--vault", str(v)], capsys)
    assert code == 0 and "fixed   bad_sidecar" in out
    data = json.loads(sidecar.read_text())
    assert len(data["entries"]) == 300
    assert run(["check", "--vault", str(v)], capsys)[0] == 0


def test_setting_aside_twice_with_one_stamp_keeps_both(tmp_path: Path) -> None:
    index = tmp_path / "chunks.db"
    index.write_bytes(b"first")
    Path(f"{index}-wal").write_bytes(b"first log")
    first = db.set_aside(index, "20261124T203757Z")
    index.write_bytes(b"second")
    second = db.set_aside(index, "20261124T203757Z")
    assert first.name == "chunks.db.damaged-20261124T203757Z"
    assert second.name == "chunks.db.damaged-20261124T203757Z-2"
    assert first.read_bytes() == b"first" and Path(f"{first}-wal").read_bytes() == b"first log"
    assert second.read_bytes() == b"second" and not index.exists()
