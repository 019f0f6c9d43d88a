"""The compactor on real files: sealing, the golden tree, merging, condensation, staleness, hand edits."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path

import pytest

from tests.helpers import CONFIG, TOPICS, ChatServer, Reply, make_vault, topic_of, topic_records
from vaultmem import fsio
from vaultmem.embed import FakeEmbedder
from vaultmem.layout import SUMMARY_NAME
from vaultmem.summarise import LEAF_LINES, Background, ExtractiveSummariser, says_little, weak_opening
from vaultmem.summaryfile import parse_summary, text_hash
from vaultmem.vault import Vault


def levels(vault: Vault) -> dict[str, list[str]]:
    """level directory -> texts of the leaves directly in it."""
    out: dict[str, list[str]] = {}
    for leaf in vault.ls():
        directory = leaf.path.rsplit("/", 1)[0]
        if not directory.endswith("/_fresh"):
            out.setdefault(directory, []).append(leaf.text)
    return out


def leaf_bytes(vault: Vault) -> dict[str, bytes]:
    return {leaf.id: (vault.layout.root / leaf.path).read_bytes() for leaf in vault.ls()}


def test_golden_tree_levels_hold_one_topic_each(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(30))
        vault.flush()
        before = {leaf.id: leaf for leaf in vault.ls()}
        bytes_before = leaf_bytes(vault)
        report = vault.compact()
        assert report.jobs_failed == 0
        tree = levels(vault)
        assert 4 <= len(tree) <= 16
        for directory, texts in tree.items():
            assert {topic_of(t) for t in texts} == {next(iter({topic_of(t) for t in texts}))}, directory
            summary, _ = parse_summary((vault.layout.root / directory / SUMMARY_NAME).read_text(), directory)
            assert topic_of(summary.title + " " + summary.text) == topic_of(texts[0])
            assert summary.descendants == len(texts) and not summary.stale
            assert len(summary.children) == len(texts)
        # Every topic got its own level(s); the newest 8 leaves stayed verbatim in _fresh/.
        assert {topic_of(texts[0]) for texts in tree.values()} == set(TOPICS)
        after = {leaf.id: leaf for leaf in vault.ls()}
        assert after.keys() == before.keys()
        fresh = [leaf for leaf in after.values() if "/_fresh/" in leaf.path]
        assert len(fresh) == 8
        newest = sorted(before.values(), key=lambda leaf: (leaf.ts, leaf.path))[-8:]
        assert {leaf.id for leaf in fresh} == {leaf.id for leaf in newest}
        # Moved, not rewritten: same bytes, same file name, same id and provenance.
        assert leaf_bytes(vault) == bytes_before
        for leaf_id, leaf in after.items():
            assert leaf.path.rsplit("/", 1)[1] == before[leaf_id].path.rsplit("/", 1)[1]
            assert leaf.provenance | {"path": None} == before[leaf_id].provenance | {"path": None}
            assert leaf.status.value == ("admitted" if "/_fresh/" in leaf.path else "sealed")
        assert vault.check().ok
        assert report.sealed == 112 and report.levels == len(tree)


def test_compaction_survives_reindex_and_copies_its_vectors(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        vault.compact()
        rows = dict(vault.conn.execute("SELECT id, path FROM chunks").fetchall())
        parents = dict(vault.conn.execute("SELECT id, parent FROM chunks").fetchall())
        report = vault.reindex()
        assert report.vectors == len(rows)  # leaves and summaries: nothing to re-embed
        assert dict(vault.conn.execute("SELECT id, path FROM chunks").fetchall()) == rows
        assert dict(vault.conn.execute("SELECT id, parent FROM chunks").fetchall()) == parents
        assert vault.check().ok
        hits = vault.search("kyoto ryokan temple", k=5, kind="summary")
        assert hits and topic_of(hits[0].text) == "japan"


def test_new_leaves_join_a_close_existing_level_and_make_it_stale_then_fresh(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        vault.compact()
        tree_before = levels(vault)
        vault.ingest_messages(topic_records(20, start=80))
        vault.flush()
        report = vault.compact()
        assert report.merged > 0 and report.resummarised > 0
        tree = levels(vault)
        grown = [d for d in tree_before if len(tree[d]) > len(tree_before[d])]
        assert grown
        for directory in grown:
            assert len({topic_of(t) for t in tree[directory]}) == 1
            summary, _ = parse_summary((vault.layout.root / directory / SUMMARY_NAME).read_text(), directory)
            assert not summary.stale and summary.descendants == len(tree[directory])
        assert vault.check().ok


def test_a_later_session_of_a_chat_gets_levels_of_its_own_and_a_split_session_joins_its_level(
    tmp_path: Path,
) -> None:
    """Sessions s0 and s1, then days later s2 and s3 on the same four subjects: the new sessions are as
    close in meaning to the old levels as ever, but a chat's level keeps to one conversation. The turns of
    s1 that stayed in _fresh/ at the first seal do join s1's levels."""

    def by_day(records: list[dict[str, object]]) -> list[dict[str, object]]:
        # One sitting a day per session, a turn a minute.
        return [
            r | {"ts": f"2024-05-{1 + i // 40:02d}T10:{i % 40:02d}:00Z"} for i, r in enumerate(records, start)
        ]

    with make_vault(tmp_path / "v") as vault:
        start = 0
        vault.ingest_messages(by_day(topic_records(20)))
        vault.flush()
        vault.compact()
        before = {
            r["path"].rsplit("/", 1)[0]: r["n"]
            for r in vault.conn.execute(
                "SELECT MIN(path) AS path, COUNT(*) AS n FROM chunks WHERE kind = 'leaf'"
                " AND path NOT LIKE '%/_fresh/%' GROUP BY parent"
            )
        }
        start = 80
        vault.ingest_messages(by_day(topic_records(20, start=80)))
        vault.flush()
        report = vault.compact()
        assert report.merged > 0  # s1's tail joined s1's levels
        sessions: dict[str, set[str]] = {}
        for row in vault.conn.execute(
            "SELECT path, session FROM chunks WHERE kind = 'leaf' AND path NOT LIKE '%/_fresh/%'"
        ):
            sessions.setdefault(row["path"].rsplit("/", 1)[0], set()).add(row["session"])
        assert all(len(held) == 1 for held in sessions.values()), sorted(
            (d, sorted(v)) for d, v in sessions.items() if len(v) > 1
        )
        assert {"s2", "s3"} <= set().union(*sessions.values())
        assert all(d in sessions for d in before)
        assert vault.check().ok


def test_condensation_groups_levels_under_parents_and_cascades(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v", fanout=4) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        report = vault.compact()
        assert report.condensed >= 4
        rows = vault.conn.execute(
            "SELECT id, path, depth, parent FROM chunks WHERE kind = 'summary' AND path LIKE 'sources/%'"
        ).fetchall()
        depth2 = [r for r in rows if r["depth"] >= 2]
        assert depth2
        top = [r for r in rows if r["parent"] is None]
        # Nothing left at the top in numbers that would condense again.
        for depth in {r["depth"] for r in top}:
            assert sum(1 for r in top if r["depth"] == depth) < 4
        for r in depth2:
            node, _ = parse_summary((vault.layout.root / r["path"]).read_text(), r["path"])
            children = [c for c in rows if c["parent"] == r["id"]]
            assert len(node.children) == len(children) >= 2
            for link in node.children:
                assert (vault.layout.root / node.directory / link.target).is_file()
        # Leaves under a parent keep pointing at the summary of their own directory.
        for leaf in vault.ls(status="sealed"):
            parent = vault.conn.execute("SELECT parent FROM chunks WHERE id = ?", (leaf.id,)).fetchone()[0]
            assert parent is not None
            path = vault.conn.execute("SELECT path FROM chunks WHERE id = ?", (parent,)).fetchone()[0]
            assert path == leaf.path.rsplit("/", 1)[0] + "/" + SUMMARY_NAME
        assert vault.check().ok


def test_dry_run_plans_the_same_steps_and_changes_nothing(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        files_before = sorted(
            p.relative_to(vault.layout.root)
            for p in vault.layout.root.rglob("*")
            if ".vaultmem" not in p.parts
        )
        plan = vault.compact(dry_run=True)
        files_after = sorted(
            p.relative_to(vault.layout.root)
            for p in vault.layout.root.rglob("*")
            if ".vaultmem" not in p.parts
        )
        assert files_before == files_after
        assert plan.operations and plan.planned
        real = vault.compact()
        assert [m for m in real.operations if "seal" in m] == [m for m in plan.operations if "seal" in m]


def test_buffer_below_thresholds_waits_until_too_old_then_is_force_sealed(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(4))  # 16 leaves: 8 tail + 8 buffer, under seal_min_leaves
        vault.flush()
        assert vault.compact().sealed == 0
        old = time.time() - 2 * 86400
        for leaf in vault.ls():
            os.utime(vault.layout.root / leaf.path, (old, old))
        vault.conn.execute("UPDATE chunks SET file_mtime_ns = ?", (int(old * 1e9),))
        # The day has passed: the buffer's timer (queued when its leaves were admitted) is due now.
        vault.jobs.enqueue("flush_stale", {"source": "chat"}, dedupe_key="flush_stale:chat")
        vault.conn.execute("UPDATE jobs SET run_after = 0 WHERE dedupe_key = 'flush_stale:chat'")
        report = vault.work()
        assert report.sealed + report.merged == 8
        assert len(vault.ls(status="admitted")) == 8
        assert vault.check().ok


def test_a_sealed_buffer_leaves_no_timer_behind(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(10))  # 40 leaves: 8 tail + 32 buffer, ready to seal
        vault.flush()  # the admit batch queues its buffer check (and its digests and topic routes)
        assert "append_buffer" in {j.kind for j in vault.jobs.list()}
        report = vault.work()  # the check queues the seal and the buffer's timer; the seal drops the timer
        assert report.sealed + report.merged == 32 and report.jobs_failed == 0
        assert vault.jobs.list() == []


def test_a_timer_due_early_waits_for_the_buffer_it_finds(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(4))  # 16 leaves: 8 tail + 8 buffer, under seal_min_leaves
        vault.flush()
        vault.work()
        (timer,) = vault.jobs.list()
        wait = vault.compact_settings.max_wait_s
        assert timer.kind == "flush_stale" and timer.run_after > time.time() + wait - 600
        vault.conn.execute("UPDATE jobs SET run_after = 0 WHERE id = ?", (timer.id,))  # due too soon
        report = vault.work()
        assert report.sealed + report.merged == 0 and len(vault.ls(status="admitted")) == 16
        (again,) = vault.jobs.list()
        assert again.id == timer.id and again.state == "queued"
        assert again.run_after > time.time() + wait - 600  # due by the buffer's oldest leaf again


def test_hand_edited_leaf_marks_its_ancestors_stale_and_compact_refreshes_them(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v", fanout=4) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        vault.compact()
        leaf = next(x for x in vault.ls(status="sealed") if x.path.count("/") >= 4)
        ancestors = _ancestors(vault, leaf.id)
        assert len(ancestors) >= 2
        path = vault.layout.root / leaf.path
        path.write_text(path.read_text().replace(leaf.text, leaf.text + " The hedge needs trimming."))
        report = vault.compact()
        assert report.resummarised >= len(ancestors)
        assert any("changed by hand" in n for n in report.notes)
        for node_id in ancestors:
            row = vault.conn.execute("SELECT status, path FROM chunks WHERE id = ?", (node_id,)).fetchone()
            assert row["status"] == "current"
        assert "hedge needs trimming" in vault.get(leaf.id).text
        assert vault.get(leaf.id).path == leaf.path
        assert vault.check().ok


def _ancestors(vault: Vault, node_id: str) -> list[str]:
    out = []
    parent = vault.conn.execute("SELECT parent FROM chunks WHERE id = ?", (node_id,)).fetchone()[0]
    while parent:
        out.append(parent)
        parent = vault.conn.execute("SELECT parent FROM chunks WHERE id = ?", (parent,)).fetchone()[0]
    return out


def test_stale_flags_survive_a_restart_and_run_deepest_first(tmp_path: Path) -> None:
    path = tmp_path / "v"
    with make_vault(path, fanout=4) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        vault.compact()
        leaf = next(x for x in vault.ls(status="sealed") if x.path.count("/") >= 4)
        ancestors = _ancestors(vault, leaf.id)
        from vaultmem.stale import mark_stale

        mark_stale(vault.conn, vault.layout, ancestors, 1 << 20)
        for node_id in ancestors:
            rel = vault.conn.execute("SELECT path FROM chunks WHERE id = ?", (node_id,)).fetchone()[0]
            text = (path / rel).read_text()
            assert "\nstale: true\n" in text
            # Summaries written before `children_hash` existed: nothing says they still match their
            # children, so each is re-summarised (one that records a match only has its flag cleared).
            (path / rel).write_text(
                "".join(x for x in text.splitlines(True) if not x.startswith("children_hash:"))
            )
    (path / ".vaultmem" / "chunks.db").unlink()  # lose the index and its queue: the files still say stale
    for extra in (path / ".vaultmem").glob("chunks.db-*"):
        extra.unlink()
    with Vault.open(path, embedder=FakeEmbedder()) as vault:
        queued = [j for j in vault.jobs.list() if j.kind == "resummarise"]
        assert {j.payload["id"] for j in queued} == set(ancestors)
        report = vault.work()
        assert report.resummarised == len(ancestors)
        # One chain of ancestors, deepest first: each level was written after the one below it.
        rows = [
            vault.conn.execute("SELECT path, depth FROM chunks WHERE id = ?", (i,)).fetchone()
            for i in ancestors
        ]
        assert [r["depth"] for r in rows] == sorted(r["depth"] for r in rows)
        written = [(path / r["path"]).stat().st_mtime_ns for r in rows]
        assert written == sorted(written)
        assert vault.conn.execute("SELECT count(*) FROM chunks WHERE status = 'stale'").fetchone()[0] == 0
        assert vault.check().ok


def test_hand_edited_summary_is_kept_as_pinned_text_and_said_so(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        vault.compact()
        row = vault.conn.execute(
            "SELECT id, path FROM chunks WHERE kind = 'summary' AND path LIKE 'sources/%' LIMIT 1"
        ).fetchone()
        path = vault.layout.root / row["path"]
        node, _ = parse_summary(path.read_text(), row["path"])
        human = "Mara's garden notes. The roses are her pride; ask before pruning."
        text = path.read_text().replace(node.text, human)
        text = text.replace("---\n", "---\nmood: cheerful\n", 1)  # a user key of her own
        path.write_text(text)
        from vaultmem.stale import mark_stale

        vault.compact()  # catch-up re-reads the edited summary
        mark_stale(vault.conn, vault.layout, [row["id"]], 1 << 20)
        report = vault.work()
        assert any("edited by hand" in n and "Pinned" in n for n in report.notes)
        after, doc = parse_summary(path.read_text(), row["path"])
        assert after.pinned == human and human not in after.text and after.text
        assert doc.meta["mood"] == "cheerful" and doc.meta["pinned"] is True
        assert human in vault.conn.execute("SELECT text FROM chunks WHERE id = ?", (row["id"],)).fetchone()[0]
        # Re-summarising again keeps the pinned text exactly once.
        mark_stale(vault.conn, vault.layout, [row["id"]], 1 << 20)
        vault.work()
        again, _ = parse_summary(path.read_text(), row["path"])
        assert again.pinned == human
        assert vault.check().ok


def test_a_title_a_person_gave_a_level_survives_re_summarising(tmp_path: Path) -> None:
    """Renamed in Obsidian's properties pane (the `title:` line): when new leaves join the level, the
    engine's new summary keeps the person's title; a level nobody renamed gets the engine's new title."""
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        vault.compact()
        rows = vault.conn.execute(
            "SELECT id, path FROM chunks WHERE kind = 'summary' AND path LIKE 'sources/%' ORDER BY path"
        ).fetchall()
        renamed, other = (vault.layout.root / r["path"] for r in rows[:2])
        node, _ = parse_summary(renamed.read_text(), rows[0]["path"])
        assert node.title_hash and not node.title_edited
        human = "Mara's garden, roses and seedlings"
        # The line as a person edits it (a title with a comma is written quoted: the whole line changes).
        renamed.write_text(
            re.sub(r"^title: .*$", f"title: {human}", renamed.read_text(), count=1, flags=re.M)
        )
        # The other level as an older engine wrote it: another title, and its hash.
        mine, _ = parse_summary(other.read_text(), rows[1]["path"])
        old = "old engine title"
        other.write_text(
            re.sub(r"^title: .*$", f"title: {old}", other.read_text(), count=1, flags=re.M).replace(
                f"title_hash: {mine.title_hash}\n", f"title_hash: {text_hash(old)}\n", 1
            )
        )
        for start in (80, 160):  # twice: a kept title stays kept
            # The chat's first session goes on (a later one would get levels of its own).
            vault.ingest_messages([r | {"session": "s0"} for r in topic_records(20, start=start)])
            vault.flush()
            report = vault.compact()
            assert report.jobs_failed == 0 and report.resummarised > 0
            after, _ = parse_summary(renamed.read_text(), rows[0]["path"])
            assert after.descendants > node.descendants  # new leaves joined: a real re-summarisation
            assert after.title == human and after.title_edited and not after.stale
            # Rebuilt over its new children (its text may read the same: these chats repeat their sentences).
            assert after.children_hash != node.children_hash
            row = vault.conn.execute("SELECT provenance FROM chunks WHERE id = ?", (node.id,)).fetchone()
            assert human in row["provenance"]
        again, _ = parse_summary(other.read_text(), rows[1]["path"])
        assert again.descendants > mine.descendants
        assert again.title != old and not again.title_edited
        assert vault.check().ok


def test_a_file_changed_between_plan_and_write_is_never_overwritten(tmp_path: Path) -> None:
    from vaultmem import steps
    from vaultmem.errors import ConflictError

    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        vault.compact()
        row = vault.conn.execute(
            "SELECT path FROM chunks WHERE kind = 'summary' AND path LIKE 'sources/%' LIMIT 1"
        ).fetchone()
        path = vault.layout.root / row["path"]
        data = path.read_bytes()
        op = steps.TreeOp(
            "seal", "chat", "memory: test", (steps.FileWrite(row["path"], "x", fsio.sha256_bytes(data)),)
        )
        path.write_text(path.read_text() + "\nA person's note.\n")
        with pytest.raises(ConflictError):
            steps.apply(vault.conn, vault.layout, op, "fake-hash-64", 64)
        assert "A person's note." in path.read_text()
        assert not steps.pending_notes(vault.layout)


# -- summarisers in compaction ---------------------------------------------------------------------------
def _llm_config(url: str, timeout: float = 5.0) -> str:
    return (
        CONFIG.format(fanout=50, workers=3)
        + f'\n[llm]\nbase_url = "{url}"\nmodel = "tiny"\ntimeout_s = {timeout}\nmax_concurrent = 2\n'
    )


def test_llm_summaries_replace_the_extractive_ones_and_cap_concurrency(
    tmp_path: Path, llm_server: ChatServer
) -> None:
    llm_server.replies = [Reply("TITLE: Topic notes\nMara keeps notes on this topic.", delay_s=0.05)]
    # This test counts the calls for the source trees; topics' and digests' calls are tested in
    # test_topics and test_digest.
    config = _llm_config(llm_server.url) + "\n[topics]\nenabled = false\n"
    with Vault.init(tmp_path / "v", config, embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        vault.conn.execute("DELETE FROM jobs WHERE kind = 'digest_daily'")
        report = vault.compact()
        rows = vault.conn.execute(
            "SELECT path, status FROM chunks WHERE kind = 'summary' AND path LIKE 'sources/%'"
        ).fetchall()
        assert rows and all(r["status"] == "current" for r in rows)
        for r in rows:
            node, _ = parse_summary((vault.layout.root / r["path"]).read_text(), r["path"])
            assert node.summariser == "llm:tiny" and "Mara keeps notes" in node.text
        assert report.resummarised == len(rows)
        assert len(llm_server.requests) == len(rows)
        assert llm_server.max_active <= 2
        assert vault.check().ok


def test_a_down_or_junk_llm_never_fails_a_seal(tmp_path: Path, llm_server: ChatServer) -> None:
    llm_server.replies = [Reply(status=500)]
    with Vault.init(tmp_path / "v", _llm_config(llm_server.url, 0.5), embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        report = vault.compact()
        assert report.jobs_failed == 0 and report.sealed > 0
        assert any("extractive" in n or "llm" in n for n in report.notes)
        for r in vault.conn.execute("SELECT path, status FROM chunks WHERE kind = 'summary'"):
            node, _ = parse_summary((vault.layout.root / r["path"]).read_text(), r["path"])
            assert node.summariser == "extractive" and node.text and not node.stale
        assert vault.check().ok


# -- git ------------------------------------------------------------------------------------------------
def _git(path: Path, *args: str) -> str:
    import subprocess

    who = ["-c", "user.name=Tester", "-c", "user.email=tester@example.org"]
    return subprocess.run(
        ["git", "-C", str(path), *who, *args], check=True, capture_output=True, text=True
    ).stdout


def test_git_auto_commit_records_one_commit_per_run_and_a_revert_reindexes_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    config = CONFIG.format(fanout=50, workers=3) + "\n[git]\nauto_commit = true\n"
    path = tmp_path / "v"
    with Vault.init(path, config, embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        files_before = set(_git(path, "ls-files").split())
        report = vault.compact()
        assert report.sealed > 0 and not vault.warnings
    subjects = _git(path, "log", "--format=%s").splitlines()
    assert subjects[-2:] == ["memory: admit 80 leaves", "memory: add 80 leaves from chat"]
    # The whole compaction (seals, re-summaries, topics, digests) is one commit listing its operations.
    assert len(subjects) == 3 and subjects[0].startswith("memory: compact: ")
    body = _git(path, "log", "-1", "--format=%b").splitlines()
    seals = [line for line in body if line.startswith("- seal ")]
    assert seals and all("(chat)" in line for line in seals)
    assert ".vaultmem/config.toml" in files_before and not any("chunks.db" in f for f in files_before)
    assert _git(path, "status", "--porcelain").strip() == ""  # every change was committed
    # Undo the whole compaction, then rebuild the index from the files.
    _git(path, "revert", "--no-edit", "HEAD")
    assert set(_git(path, "ls-files").split()) == files_before
    with Vault.open(path, embedder=FakeEmbedder()) as vault:
        vault.reindex()
        assert vault.check().ok
        assert len(vault.ls()) == 80 and not vault.ls(status="sealed")
        assert vault.conn.execute("SELECT count(*) FROM chunks WHERE kind = 'summary'").fetchone()[0] == 0


def test_git_auto_commit_clears_a_stale_index_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    config = "[git]\nauto_commit = true\n"
    path = tmp_path / "v"
    with Vault.init(path, config, embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(topic_records(1))
        lock = path / ".git" / "index.lock"
        lock.write_text("")
        old = time.time() - 120
        os.utime(lock, (old, old))
        vault.ingest_messages(topic_records(1, start=4))
        assert any("index.lock" in n for n in vault.git_notes)
        assert not lock.exists()
    assert _git(path, "log", "--format=%s").splitlines()[0] == "memory: add 4 leaves from chat"


def test_check_reports_a_stale_level_whose_job_went_missing_and_fix_queues_it(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        vault.compact()
        from vaultmem.stale import mark_stale

        node_id = vault.conn.execute(
            "SELECT id FROM chunks WHERE kind = 'summary' AND path LIKE 'sources/%' LIMIT 1"
        ).fetchone()[0]
        mark_stale(vault.conn, vault.layout, [node_id], 1 << 20)
        assert vault.check().ok
        vault.conn.execute("DELETE FROM jobs")
        report = vault.check()
        assert [p.code for p in report.problems] == ["stale_unqueued"]
        assert vault.check(fix=True).fixed and vault.check().ok
        # The queued job runs; the level's children are what it was written from, so only its flag goes.
        assert vault.work().jobs_done == 1
        status = vault.conn.execute("SELECT status FROM chunks WHERE id = ?", (node_id,)).fetchone()[0]
        assert status == "current" and vault.check().ok


def test_compact_without_a_flush_first_embeds_then_seals(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(10))
        report = vault.compact()
        assert report.embedded == 40 and report.sealed + report.merged == 32
        assert len(vault.ls(status="admitted")) == 8 and vault.check().ok


def test_flush_then_work_builds_the_tree_work_alone_builds(tmp_path: Path) -> None:
    """One job runner: an ``admit`` batch queues the same follow-ups whether ``flush`` runs it on the
    calling thread or ``work``'s threads do, so the tree that follows is the same."""
    with (
        make_vault(tmp_path / "a", workers=1) as via_flush,
        make_vault(tmp_path / "b", workers=1) as via_work,
    ):
        for vault in (via_flush, via_work):
            vault.ingest_messages(topic_records(30))
        flushed = via_flush.flush()
        assert flushed.admitted == 120
        queued = via_flush.jobs.by_kind()
        assert queued["append_buffer"]["queued"] == 1 and "admit" not in queued
        assert via_flush.work().jobs_failed == 0 and via_work.work().jobs_failed == 0
        assert levels(via_flush) == levels(via_work) != {}
        statuses = [sorted((leaf.id, leaf.status) for leaf in vault.ls()) for vault in (via_flush, via_work)]
        assert statuses[0] == statuses[1]


def test_after_compact_only_the_newest_turns_stay_in_fresh_even_where_a_session_is_cut(
    tmp_path: Path,
) -> None:
    """A chat of sessions with content-free turns among them (dropped at admit): compaction seals every
    turn but the newest ``fresh_keep_leaves`` (8 here), cutting the last session where the tail begins,
    and a second compaction with nothing new leaves _fresh/ as it is. A turn older than the tail never
    stays behind (LoCoMo conv-30 was reported with one; three builds showed none: the 24 there are the
    tail)."""
    records = topic_records(13)  # s0: 40 turns, s1: 12
    for n, index in enumerate((5, 17, 30, 41)):
        records[index] = records[index] | {"id": f"thanks{n}", "content": "Thanks, bye!"}
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(records)
        vault.flush()
        assert vault.compact().jobs_failed == 0
        rows = vault.conn.execute(
            "SELECT id, path, ts, status, session FROM chunks WHERE kind = 'leaf' ORDER BY ts, path"
        ).fetchall()
        assert len(rows) == len(records)
        fresh = [r for r in rows if "/_fresh/" in r["path"]]
        assert [r["id"] for r in fresh] == [r["id"] for r in rows[-8:]]
        assert any(r["status"] == "dropped" and "/_fresh/" not in r["path"] for r in rows)
        assert len({r["session"] for r in fresh}) == 1  # the tail cuts the last session ...
        cut = fresh[0]["session"]
        assert any(
            r["session"] == cut and "/_fresh/" not in r["path"] for r in rows
        )  # ... which goes on above
        vault.compact()
        again = vault.conn.execute(
            "SELECT id FROM chunks WHERE kind = 'leaf' AND path LIKE '%/_fresh/%' ORDER BY ts, path"
        ).fetchall()
        assert [r["id"] for r in again] == [r["id"] for r in fresh]
        assert vault.check().ok


REACTIONS = [
    "Thanks, Melanie! That plate is awesome! Did you make it?",
    "Wow, Caroline, that looks amazing! What inspired it?",
    "Wow, that's gorgeous! Where did you find it?",
    "Wow, did you make that? It looks so real!",
]


def test_reactions_only_join_their_conversation_and_no_summary_opens_with_one(tmp_path: Path) -> None:
    """A session's four reactions to a photo cluster together (they share only each other's words): as a
    level of their own, its summary could only open with a reaction ("It looks so real!"). They join the
    closest level of their session instead; every turn is kept."""
    records: list[dict[str, object]] = []
    texts = (
        [r["content"] for r in topic_records(6)[:24:2]]
        + REACTIONS
        + [r["content"] for r in topic_records(6)[1:24:2]]
    )
    for i, text in enumerate(texts):
        records.append(
            {
                "id": f"m{i}",
                "speaker": "Melanie" if i % 2 else "Caroline",
                "content": text,
                "ts": f"2024-05-01T10:{i:02d}:00Z",
                "session": "s0",
                "source": "chat",
            }
        )
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(records)
        vault.flush()
        vault.compact()
        sealed = levels(vault)  # _fresh/ left out
        assert sum(t in REACTIONS for leaf_texts in sealed.values() for t in leaf_texts) == len(REACTIONS)
        for directory, leaf_texts in sealed.items():
            assert not all(says_little(t) for t in leaf_texts), (directory, leaf_texts)
            node = parse_summary((vault.layout.root / directory / SUMMARY_NAME).read_text(), "x")[0]
            first = node.text.splitlines()[0].removeprefix("- ")
            assert not weak_opening(first.split(": ", 1)[-1]), (directory, node.text)
        assert len(vault.ls()) == len(records)
        assert vault.check().ok


def test_greetings_of_two_days_do_not_make_a_level_of_their_own(tmp_path: Path) -> None:
    """LongMemEval e66b632c's ``07-assist-today``: one day's "hi" and "How can I help you today?" and
    another day's "yes" made a level, because greetings are closer to each other than to what either
    day's chat was about. A small group of turns that say little stays in its own session's level."""
    names = list(TOPICS)
    records: list[dict[str, object]] = []
    for day in range(5):
        texts = [r["content"] for r in topic_records(10) if topic_of(str(r["content"])) == names[day % 4]]
        if day == 0:
            texts = ["Hi there!", "Hello there! How can I help you today?", *texts]
        if day == 3:
            texts.insert(5, "Yes there, thanks!")
        if day == 4:
            texts = [f"{t} Later." for t in texts[:8]]  # the fresh tail, left in _fresh/
        for i, text in enumerate(texts):
            records.append(
                {
                    "id": f"d{day}m{i}",
                    "speaker": "Mara" if i % 2 else "assistant",
                    "content": text,
                    "ts": f"2024-05-{1 + 3 * day:02d}T10:{i:02d}:00Z",
                    "session": f"s{day}",
                    "source": "chat",
                }
            )
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(records)
        vault.flush()
        vault.compact()
        sealed = levels(vault)
        session_of = {str(r["content"]): str(r["session"]) for r in records}
        assert sum(len(texts) for texts in sealed.values()) == 43
        for directory, texts in sealed.items():
            assert len({session_of[t] for t in texts}) == 1, (directory, texts)
        assert len(vault.ls()) == len(records)
        assert vault.check().ok


def test_summaries_above_depth_one_are_told_the_words_of_the_sources_depth_one_levels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Condensation and re-summarising both pass a ``Background`` counted on the source's depth-1
    summaries to a level above depth 1, and none to a level of depth 1."""
    told: list[tuple[int, Background | None]] = []
    original = ExtractiveSummariser.summarise

    def recording(self: ExtractiveSummariser, children, depth, **kwargs):  # type: ignore[no-untyped-def]
        told.append((depth, kwargs.get("background")))
        return original(self, children, depth, **kwargs)

    monkeypatch.setattr(ExtractiveSummariser, "summarise", recording)
    with make_vault(tmp_path / "v", fanout=4) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        vault.compact()
        ones = vault.conn.execute(
            "SELECT count(*) FROM chunks WHERE kind = 'summary' AND depth = 1 AND path LIKE 'sources/%'"
        ).fetchone()[0]
        assert ones >= 4
        parents = vault.conn.execute(
            "SELECT count(*) FROM chunks WHERE kind = 'summary' AND depth >= 2 AND path LIKE 'sources/%'"
        ).fetchone()[0]
        assert parents >= 1
        assert all(background is None for depth, background in told if depth == 1)
        # (a day's week and month roll-ups, and topics, are summarised above depth 1 without one)
        above = [background for depth, background in told if depth >= 2 and background is not None]
        assert len(above) >= parents and all(2 <= b.levels <= ones for b in above)

        told.clear()
        leaf = next(x for x in vault.ls(status="sealed") if x.path.count("/") >= 4)
        path = vault.layout.root / leaf.path
        path.write_text(path.read_text().replace(leaf.text, leaf.text + " The hedge needs trimming."))
        assert vault.compact().resummarised >= 2
        above = [background for depth, background in told if depth >= 2 and background is not None]
        assert above and all(b.levels == ones for b in above)
        assert all(background is None for depth, background in told if depth == 1)


def test_a_parent_is_summarised_with_its_childrens_leaves_when_condensed_and_when_re_summarised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above depth 1 each child level comes with the leaves under it (``Child.leaves``: their lines are
    candidates, ranked with their stored vectors), from the planner's condensation and from a
    re-summarise alike; a leaf edited by hand is read as it is now. (Day digests and roll-ups are not
    given leaves.)"""
    calls: list[tuple[int, list[object]]] = []
    original = ExtractiveSummariser.summarise

    def spy(
        self: ExtractiveSummariser, children: list[object], depth: int, *, titled: bool = True, **kw: object
    ) -> object:
        if kw.get("background") is not None:  # a source tree's parent (not a digest's nor a topic's)
            calls.append((depth, list(children)))
        return original(self, children, depth, titled=titled, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ExtractiveSummariser, "summarise", spy)
    with make_vault(tmp_path / "v", fanout=4) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        vault.compact()
        texts = {r["text"] for r in vault.conn.execute("SELECT text FROM chunks WHERE kind = 'leaf'")}
        condensed = [[c for c in kids if c.title] for depth, kids in calls]  # type: ignore[attr-defined]
        assert any(condensed)
        assert any(c.weight > LEAF_LINES for kids in condensed for c in kids)  # type: ignore[attr-defined]
        for kids in condensed:
            for child in kids:
                # At most summarise.LEAF_LINES of them, the closest to the level's vector.
                assert child.leaves and len(child.leaves) == min(child.weight, LEAF_LINES)  # type: ignore[attr-defined]
                assert all(leaf.text in texts and leaf.vector is not None for leaf in child.leaves)  # type: ignore[attr-defined]
        leaf = next(x for x in vault.ls(status="sealed") if x.path.count("/") >= 4)
        path = vault.layout.root / leaf.path
        path.write_text(path.read_text().replace(leaf.text, leaf.text + " The hedge needs trimming."))
        calls.clear()
        assert vault.compact().resummarised >= 2
        again = [kids for depth, kids in calls if depth >= 2]
        assert again
        assert any(
            "The hedge needs trimming." in leaf_child.text
            for kids in again
            for child in kids
            for leaf_child in child.leaves  # type: ignore[attr-defined]
        )


def test_a_condensation_reads_each_childs_leaves_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leaves under a new parent's children are read once per condensation: the same children serve the
    gathered embedding calls (``prepare``) and the parent's summary (``_new_parent``)."""
    from vaultmem import compact

    read: list[str] = []
    original = compact.leaf_children

    def counted(conn: sqlite3.Connection, directory: str, model: str, centre: object) -> object:
        read.append(directory)
        return original(conn, directory, model, centre)  # type: ignore[arg-type]

    monkeypatch.setattr(compact, "leaf_children", counted)
    with make_vault(tmp_path / "v", fanout=4) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        vault.compact()
        parents = vault.conn.execute("SELECT count(*) FROM chunks WHERE kind = 'summary' AND depth >= 2")
        assert parents.fetchone()[0] >= 1
    assert read and len(read) == len(set(read))
