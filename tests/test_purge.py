"""Purge (issue #20): the text gone from files, derived summaries, copies, chunks.db and its WAL, and
with --rewrite-history from every git object; refused with a remote unless forced. Real git."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers import run_cli
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
    """Forced, the rewrite also reaches what a remote and git notes hold: the remote-tracking branch
    moves to the rewritten commits, and a note quoting the text moves to the commit it annotated,
    less that line."""
    for key, value in (("NAME", "Sam"), ("EMAIL", "sam@example.com")):
        monkeypatch.setenv(f"GIT_COMMITTER_{key}", value)
        monkeypatch.setenv(f"GIT_AUTHOR_{key}", value)
    vault = _vault(tmp_path, monkeypatch, git=True)
    root = vault.layout.root
    try:
        _git(tmp_path, "init", "-q", "--bare", str(tmp_path / "elsewhere.git"))
        _git(root, "remote", "add", "origin", str(tmp_path / "elsewhere.git"))
        branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
        _git(root, "push", "-q", "origin", branch)  # refs/remotes/origin/<branch> holds the text too
        _git(root, "notes", "add", "-m", f"checked by Sam\n\n{SECRET}", "HEAD")
        leaf_id = _secret_id(vault)
        with pytest.raises(InvalidInput, match="remotes"):
            vault.purge(leaf_id, rewrite_history=True)
        assert vault.get(leaf_id)  # refused before anything changed
        annotated = _git(root, "log", "-1", "--format=%s", "HEAD")
        report = vault.purge(leaf_id, rewrite_history=True, force=True)
        assert report.traces == () and purge.traces(root, purge.needles(SECRET)) == []
        tracking = _git(root, "rev-parse", f"refs/remotes/origin/{branch}")
        assert _git(root, "merge-base", "--is-ancestor", tracking, "HEAD") == ""  # moved onto the new history
        old_head = _git(root, "log", "-1", "--format=%H", "--grep", annotated, "--fixed-strings", "HEAD")
        assert _git(root, "notes", "show", old_head) == "checked by Sam"
        assert _git(root, "fsck", "--no-progress") == ""
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


CN = "我们下周三搬到杭州的新办公室。地址是西湖区文三路，门禁密码提示是外婆家的门牌号。"


def _git(root: Path, *args: str, data: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=root, input=data, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_purge_chinese_text_everywhere_tags_signatures_review(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chinese text (its short sentences are needles too), written JSON-escaped in a copy, quoted by an
    annotated signed tag, by the message of a signed commit and by the review inbox: all gone."""
    for key, value in (("NAME", "Sam"), ("EMAIL", "sam@example.com")):
        monkeypatch.setenv(f"GIT_COMMITTER_{key}", value)
        monkeypatch.setenv(f"GIT_AUTHOR_{key}", value)
    vault = _vault(tmp_path, monkeypatch, git=True)
    root = vault.layout.root
    found = purge.needles(CN)
    assert (
        "地址是西湖区文三路，门禁密码提示是外婆家的门牌号。" in found
        and "我们下周三搬到杭州的新办公室。" in found
    )
    try:
        leaf_id = vault.remember(CN, source="notes").ids[0]
        other = _secret_id(vault)
        first = CN.split("。")[0] + "。"
        (root / ".trash").mkdir()
        (root / ".trash" / "export.json").write_text(json.dumps({"text": CN}), encoding="utf-8")
        assert "\\u676d\\u5dde" in (root / ".trash" / "export.json").read_text(encoding="utf-8")
        # A person's annotated tag, signed, whose message quotes the text.
        _git(root, "tag", "-a", "before-move", "-m", f"snapshot before the move\n\n{first}")
        tag_body = _git(root, "cat-file", "tag", "before-move")
        sig = "-----BEGIN PGP SIGNATURE-----\n\niQEzBAABCAAdFiEEfake\n-----END PGP SIGNATURE-----\n"
        signed_tag = _git(root, "hash-object", "-t", "tag", "-w", "--stdin", data=tag_body + "\n" + sig)
        _git(root, "update-ref", "refs/tags/before-move", signed_tag)
        # A signed commit (gpgsig header) whose message quotes the text.
        tree, head = _git(root, "rev-parse", "HEAD^{tree}"), _git(root, "rev-parse", "HEAD")
        who = "Sam <sam@example.com> 1732400000 +0000"
        commit = (
            f"tree {tree}\nparent {head}\nauthor {who}\ncommitter {who}\n"
            "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEEfake\n -----END PGP SIGNATURE-----\n"
            f"\nnote to self: {first}\n"
        )
        signed = _git(root, "hash-object", "-t", "commit", "-w", "--stdin", data=commit)
        _git(root, "update-ref", "HEAD", signed, head)
        # The review inbox quotes it: a proposal naming it and a line of the weekly log.
        (root / "review" / "weekly").mkdir(parents=True)
        proposal = root / "review" / f"{leaf_id}-updates-{other}.md"
        proposal.write_text(f"---\nkind: proposal\n---\n## New\n> {CN}\n", encoding="utf-8")
        log = root / "review" / "weekly" / "2026-W48.md"
        log.write_text(f"- applied: {leaf_id} updates {other}\n  > {first}\n- kept line\n", encoding="utf-8")
        before = purge.traces(root, found)
        assert ".trash/export.json" in before and "review/weekly/2026-W48.md" in before
        report = vault.purge(leaf_id, rewrite_history=True)
        assert report.traces == () and purge.traces(root, found) == []
        assert ".trash/export.json" in report.removed and f"review/{proposal.name}" in report.removed
        assert log.read_text(encoding="utf-8") == f"- applied: {leaf_id} updates {other}\n- kept line\n"
        assert _git(root, "cat-file", "-t", "before-move") == "tag"  # still an annotated tag ...
        assert "snapshot before the move" in _git(root, "cat-file", "tag", "before-move")  # less the quote
        assert "PGP SIGNATURE" not in _git(root, "cat-file", "tag", "before-move")
        assert "gpgsig" not in _git(root, "log", "--format=%H%n%B", "--all") + _git(
            root, "cat-file", "commit", _git(root, "rev-parse", "HEAD~1")
        )
        assert _git(root, "fsck", "--no-progress") == ""
        assert vault.check().ok
    finally:
        vault.close()
