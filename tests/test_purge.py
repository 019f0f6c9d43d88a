"""Purge (issue #20): the text gone from files, derived summaries, copies, chunks.db and its WAL, and
with --rewrite-history from every git object; refused with a remote unless forced. Real git."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from vaultmem import purge
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import InvalidInput
from vaultmem.vault import Vault

SECRET = "My bank PIN hint is the street where grandma Olga lived in Vilnius."
SMALL = (
    "[compact]\nfresh_keep_leaves = 2\nfresh_keep_tokens = 60\nseal_min_leaves = 4\nseal_min_tokens = 100\n"
)
OTHER = [
    "The plumber Dario comes on Thursday at 8 to fix the boiler.",
    "Kenji prefers the window seat and vegetarian meals on long flights.",
    "The book club reads Piranesi next, meeting at Ana's flat.",
    "Wifi at the cabin is slow; download maps before the trip.",
    "Our landlord wants the meter readings by the end of the month.",
    "The team offsite is in Lisbon, hotel near the Alfama district.",
    "Dentist appointment moved to the 12th, 15:30, at the Elm Street practice.",
]


def _vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, git: bool) -> Vault:
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    head = '[embed]\nmodel = "fake"\n\n' + ("[git]\nauto_commit = true\n\n" if git else "")
    v = Vault.init(tmp_path / "v", head + SMALL, embedder=FakeEmbedder())
    texts = [*OTHER[:3], SECRET, *OTHER[3:]]
    records = [
        {
            "id": f"m{i}",
            "role": "user",
            "speaker": "Sam",
            "content": t,
            "ts": f"2024-05-0{1 + i // 4}T09:{i:02d}:00Z",
        }
        for i, t in enumerate(texts)
    ]
    v.ingest_messages(records, source="notes")
    v.compact()
    return v


def _secret_id(vault: Vault) -> str:
    return next(x.id for x in vault.ls(limit=100) if "grandma Olga" in x.text)


def test_purge_without_git_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = _vault(tmp_path, monkeypatch, git=False)
    root = vault.layout.root
    found = purge.needles(SECRET)
    try:
        leaf_id = _secret_id(vault)
        # A copy in Obsidian's trash, and the text quoted by the level it was sealed into.
        (root / ".trash").mkdir()
        (root / ".trash" / "old note.md").write_text(f"draft\n{SECRET}\n", encoding="utf-8")
        before = purge.traces(root, found)
        assert ".vaultmem/chunks.db" in before or ".vaultmem/chunks.db-wal" in before
        assert ".trash/old note.md" in before and any(t.endswith("_summary.md") for t in before)
        report = vault.purge(leaf_id)
        assert report.traces == () and ".trash/old note.md" in report.removed
        assert purge.traces(root, found) == []
        assert leaf_id not in [
            h.id for h in vault.search("grandma Olga Vilnius", 20, include_superseded=True)
        ]
        assert vault.check().ok
    finally:
        vault.close()


def test_purge_with_history_rewrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = _vault(tmp_path, monkeypatch, git=True)
    root = vault.layout.root
    found = purge.needles(SECRET)
    try:
        leaf_id = _secret_id(vault)
        vault.forget([leaf_id])  # its tombstone keeps the text and the summaries' old bytes
        plain = vault.purge(leaf_id)
        assert plain.traces and all(t.startswith(".git") for t in plain.traces)  # history still has it
        assert "--rewrite-history" in plain.notes[0]
        subjects = subprocess.run(
            ["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        # The leaf is gone, so it is purged again by its text: a tombstone-less purge is refused ...
        with pytest.raises(Exception, match="not forgotten"):
            vault.purge(leaf_id, rewrite_history=True)
        # ... and history is rewritten by purging a leaf that still is there, same text in a new leaf.
        again = vault.remember(SECRET, source="notes")
        report = vault.purge(again.ids[0], rewrite_history=True)
        assert report.rewritten > 0 and report.traces == ()
        assert purge.traces(root, found) == []
        after = subprocess.run(
            ["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        assert len(after) == len(subjects) + 2  # every commit kept (rewritten), two more
        status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
        assert status.stdout.strip() == ""  # the work tree is what the new history says
        assert vault.check().ok
    finally:
        vault.close()


def test_rewrite_refused_with_a_remote_unless_forced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = _vault(tmp_path, monkeypatch, git=True)
    root = vault.layout.root
    try:
        subprocess.run(
            ["git", "remote", "add", "origin", str(tmp_path / "elsewhere.git")], cwd=root, check=True
        )
        leaf_id = _secret_id(vault)
        with pytest.raises(InvalidInput, match="remotes"):
            vault.purge(leaf_id, rewrite_history=True)
        assert vault.get(leaf_id)  # refused before anything changed
        report = vault.purge(leaf_id, rewrite_history=True, force=True)
        assert report.traces == ()
    finally:
        vault.close()


def test_cli_purge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault = _vault(tmp_path, monkeypatch, git=True)
    root = str(vault.layout.root)
    leaf_id = _secret_id(vault)
    vault.close()
    asked = run_cli("purge", leaf_id, "--vault", root, stdin="")
    assert asked.returncode == 1 and "--yes" in asked.stderr
    done = run_cli("purge", leaf_id, "--yes", "--rewrite-history", "--json", "--vault", root)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["clean"] is True and data["traces"] == [] and data["rewritten_commits"] > 0
    found = run_cli("search", "grandma Olga", "--json", "--vault", root)
    assert leaf_id not in [h["id"] for h in json.loads(found.stdout)]
