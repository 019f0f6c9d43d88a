"""The global tree on real files: day digests from leaves, week and month roll-ups, wikilinks that survive
compaction, in-place updates, pinned hand edits, reindex, the digest jobs, the API and the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from tests.helpers import RecordingEmbedder, run
from vaultmem import digest, index
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import InvalidInput
from vaultmem.jobs import JobKind
from vaultmem.stale import mark_stale
from vaultmem.summaryfile import SummaryNode, parse_summary, summary_id
from vaultmem.vault import Vault

CONFIG = """
[compact]
fresh_keep_leaves = 1
fresh_keep_tokens = 100000
seal_min_leaves = 2
seal_min_tokens = 100000
bucket_target_leaves = 3
bucket_min_leaves = 1
bucket_max_leaves = 10
bucket_max_tokens = 100000
workers = 2
"""

# Three UTC days, two sources. 2024-11-29, -30 and 2024-12-01 are Friday to Sunday of ISO week 48, so the
# week straddles the month boundary: one W48 node under November, one under December.
DAYS = {
    "2024-11-29": [("chat", "a", "09:15", "Mara", "The roses by the fence need pruning before the frost.")],
    "2024-11-30": [
        ("chat", "a", "09:00", "Mara", "Book the ryokan in Kyoto for the spring trip."),
        ("chat", "b", "10:00", "Assistant", "The ryokan in Kyoto is booked for April."),
        ("mail", "t1", "08:30", "Tom", "Invoice for the accountant is attached."),
        ("mail", "t1", "18:40", "Mara", "Thanks, the accountant will file the refund."),
    ],
    "2024-12-01": [("mail", "t2", "12:00", "Tom", "The piano recital moved to Sunday evening.")],
}


def records(days: dict[str, list[tuple[str, str, str, str, str]]] = DAYS) -> list[dict[str, object]]:
    return [
        {
            "id": f"{day}-{n}",
            "speaker": speaker,
            "content": text,
            "ts": f"{day}T{hhmm}:00Z",
            "session": session,
            "source": source,
        }
        for day, turns in days.items()
        for n, (source, session, hhmm, speaker, text) in enumerate(turns)
    ]


def new_vault(path: Path, extra: str = "") -> Vault:
    return Vault.init(path, CONFIG + extra, embedder=FakeEmbedder())


def read(vault: Vault, rel: str) -> SummaryNode:
    return parse_summary((vault.layout.root / rel).read_text(encoding="utf-8"), rel)[0]


def day_node(vault: Vault, day: str) -> SummaryNode:
    return read(vault, digest.node_path(date.fromisoformat(day)))


def stems(vault: Vault, day: str) -> list[str]:
    """The day's leaves as its digest should list them: by source, then by time."""
    leaves = [leaf for leaf in vault.ls() if leaf.ts is not None and leaf.ts.date().isoformat() == day]
    return [Path(leaf.path).stem for leaf in sorted(leaves, key=lambda x: (x.source, x.ts, x.path))]


@pytest.fixture
def built(tmp_path: Path) -> Iterator[Vault]:
    vault = new_vault(tmp_path / "v")
    vault.ingest_messages(records())
    vault.flush()  # queues one digest_daily job per day (past days: due now)
    report = vault.work()
    assert report.jobs_failed == 0, report.notes
    yield vault
    vault.close()


def test_three_days_from_two_sources_give_three_day_digests(built: Vault) -> None:
    found = sorted(p.parent.name for p in (built.layout.root / "global").rglob("_summary.md"))
    assert [d for d in found if d[:4] == "2024" and len(d) == 10] == sorted(DAYS)
    node = day_node(built, "2024-11-30")
    assert node.id == summary_id("global", "day:2024-11-30") and node.source == "global"
    assert (node.period, node.depth, node.title, node.descendants) == ("day", 1, "2024-11-30", 4)
    assert [c.target for c in node.children] == stems(built, "2024-11-30")  # chat first, then mail
    assert all(c.wiki for c in node.children) and node.children[0].label.startswith("chat 09:00 Mara: Book")
    assert node.text.splitlines()[:3] == [
        "- **chat**: 2 messages in 2 sessions, 09:00–10:00 UTC",
        "- **mail**: 2 messages in 1 session, 08:30–18:40 UTC",
        "",
    ]
    assert any(w in node.text for w in ("ryokan", "accountant"))  # the extractive summary of the day
    assert node.earliest == datetime(2024, 11, 30, 8, 30, tzinfo=UTC)
    assert node.latest == datetime(2024, 11, 30, 18, 40, tzinfo=UTC)
    single = day_node(built, "2024-11-29")
    assert single.text.startswith("- **chat**: 1 message in 1 session, 09:15 UTC")
    assert [c.target for c in single.children] == stems(built, "2024-11-29")
    assert built.check().ok


def test_weeks_and_months_roll_up_and_a_straddling_week_has_a_node_in_each_month(built: Vault) -> None:
    nov_week = read(built, "global/2024-11/2024-W48/_summary.md")
    dec_week = read(built, "global/2024-12/2024-W48/_summary.md")
    assert [c.target for c in nov_week.children] == ["2024-11-29/_summary.md", "2024-11-30/_summary.md"]
    assert [c.target for c in dec_week.children] == ["2024-12-01/_summary.md"]
    assert (nov_week.period, nov_week.depth, nov_week.descendants) == ("week", 2, 5)
    assert (dec_week.descendants, dec_week.title) == (1, "2024-W48 in 2024-12")
    assert nov_week.id != dec_week.id and not nov_week.stale
    assert nov_week.earliest == datetime(2024, 11, 29, 9, 15, tzinfo=UTC)
    assert nov_week.text.startswith("- **2024-W48 in 2024-11**: 5 memories on 2 days")
    nov = read(built, "global/2024-11/_summary.md")
    assert (nov.period, nov.depth, nov.descendants) == ("month", 3, 5)
    assert [c.target for c in nov.children] == ["2024-W48/_summary.md"]
    assert "**" not in nov.text.split("\n\n", 1)[1]  # the days' count lines are not summarised upwards
    parents = dict(
        built.conn.execute("SELECT path, parent FROM chunks WHERE path LIKE 'global/%'").fetchall()
    )
    assert parents["global/2024-11/2024-W48/2024-11-30/_summary.md"] == nov_week.id
    assert parents["global/2024-11/2024-W48/_summary.md"] == nov.id
    assert parents["global/2024-11/_summary.md"] is None
    assert built.sources() == ["chat", "mail"]  # the global tree is not a source to seal


def test_wikilinks_still_resolve_after_compaction_moves_the_leaves(tmp_path: Path) -> None:
    with new_vault(tmp_path / "v") as built:
        built.ingest_messages(records())
        built.flush()
        for day in DAYS:  # written while every leaf is still in _fresh/
            built.global_digest(day)
        rel = digest.node_path(date(2024, 11, 30))
        before = (built.layout.root / rel).read_bytes()
        report = built.compact()
        assert report.sealed > 0 and report.jobs_failed == 0
        assert built.ls(status="sealed")
        # Compaction never rewrites a digest: only its ``## Related`` links (engine-owned) may come.
        then, now = (
            parse_summary(data.decode(), rel)[0] for data in (before, (built.layout.root / rel).read_bytes())
        )
        assert replace(now, related=()) == replace(then, related=())
        for day in DAYS:
            for link in day_node(built, day).children:
                found = list((built.layout.root / "sources").rglob(f"{link.target}.md"))
                assert len(found) == 1, link.target
                assert link.target.endswith(built.get(link.target[-16:]).id)
        assert any("/_fresh/" not in leaf.path for leaf in built.ls() if leaf.ts and leaf.ts.day == 30)
        assert built.check().ok


def test_a_day_is_updated_in_place_when_more_leaves_arrive(built: Vault) -> None:
    first = day_node(built, "2024-11-30")
    more = {"2024-11-30": [("chat", "c", "21:05", "Mara", "Remember to water the tulips tomorrow.")]}
    built.ingest_messages(records(more))
    built.flush()
    assert [j.payload for j in built.jobs.list() if j.kind == JobKind.DIGEST_DAILY.value] == [
        {"day": "2024-11-30"}
    ]
    built.work()
    again = day_node(built, "2024-11-30")
    assert again.id == first.id and again.path == first.path
    assert again.descendants == 5 and again.latest == datetime(2024, 11, 30, 21, 5, tzinfo=UTC)
    assert [c.target for c in again.children] == stems(built, "2024-11-30")
    assert "- **chat**: 3 messages in 3 sessions, 09:00–21:05 UTC" in again.text
    assert read(built, "global/2024-11/2024-W48/_summary.md").descendants == 6
    assert read(built, "global/2024-11/_summary.md").descendants == 6
    assert built.check().ok


def test_a_deleted_leaf_leaves_its_day_at_the_next_compact(built: Vault) -> None:
    node = day_node(built, "2024-11-30")
    gone = node.children[0].target[-16:]
    built.delete(gone)
    built.compact()
    again = day_node(built, "2024-11-30")
    assert again.id == node.id and again.descendants == 3
    assert gone not in [c.target[-16:] for c in again.children] and len(again.children) == 3
    assert not [p for p in built.check().problems if p.path.startswith("global/")]


def test_a_hand_edited_day_digest_keeps_the_persons_text_under_pinned(built: Vault) -> None:
    rel = digest.node_path(date(2024, 11, 30))
    path = built.layout.root / rel
    node = day_node(built, "2024-11-30")
    human = "A good Saturday: the trip is booked and the refund is on its way."
    path.write_text(path.read_text().replace(node.text, human).replace("---\n", "---\nmood: glad\n", 1))
    more = {"2024-11-30": [("chat", "c", "21:05", "Mara", "Remember to water the tulips tomorrow.")]}
    built.ingest_messages(records(more))
    built.flush()
    report = built.work()
    assert any("edited by hand" in n and "Pinned" in n for n in report.notes)
    after, doc = parse_summary(path.read_text(), rel)
    assert after.pinned == human and human not in after.text and "**chat**: 3 messages" in after.text
    assert doc.meta["mood"] == "glad" and doc.meta["pinned"] is True
    assert human in built.conn.execute("SELECT text FROM chunks WHERE id = ?", (after.id,)).fetchone()[0]
    assert after.id == node.id and built.check().ok


def test_a_title_a_person_gave_a_day_or_week_digest_survives_the_rebuild(built: Vault) -> None:
    """Renamed in Obsidian's properties pane (the ``title:`` line): when the day gets more leaves, its
    digest and the week above it are rebuilt with the person's titles kept (still marked theirs); the
    month nobody renamed keeps the engine's title."""
    renamed = {
        digest.node_path(date(2024, 11, 30)): "Saturday, Kyoto booked and refund filed",
        "global/2024-11/2024-W48/_summary.md": "The week of the Kyoto booking",
    }
    for rel, human in renamed.items():
        path = built.layout.root / rel
        node = read(built, rel)
        assert node.title_hash and not node.title_edited
        text = re.sub(r"^title: .*$", f"title: {json.dumps(human)}", path.read_text(), count=1, flags=re.M)
        path.write_text(text)
    for n, hhmm in enumerate(("21:05", "22:10")):  # twice: a kept title stays kept
        said = f"Remember to water the tulips at {hhmm}."
        more = {"2024-11-30": [("chat", f"c{n}", hhmm, "Mara", said)]}
        built.ingest_messages([{**r, "id": f"late-{n}"} for r in records(more)])
        built.flush()
        assert built.work().jobs_failed == 0
        for rel, human in renamed.items():
            after = read(built, rel)
            assert after.title == human and after.title_edited and not after.stale, rel
            row = built.conn.execute("SELECT provenance FROM chunks WHERE id = ?", (after.id,)).fetchone()
            assert human in row["provenance"]
        assert read(built, digest.node_path(date(2024, 11, 30))).descendants == 5 + n
    week = read(built, "global/2024-11/2024-W48/_summary.md")
    assert renamed[digest.node_path(date(2024, 11, 30))] in [c.label for c in week.children]
    again = read(built, "global/2024-11/_summary.md")
    assert not again.title_edited and again.descendants == 7
    assert built.check().ok


def test_a_stale_day_is_rebuilt_from_its_leaves_not_from_its_folder(built: Vault) -> None:
    node = day_node(built, "2024-11-29")
    assert mark_stale(built.conn, built.layout, [node.id], 1 << 20) == [node.id]
    assert day_node(built, "2024-11-29").stale
    report = built.work()
    assert report.jobs_failed == 0
    again = day_node(built, "2024-11-29")
    assert not again.stale and again.descendants == 1 and again.children == node.children
    assert again.text == node.text  # the folder holds no leaves; the day's leaf is still its child
    assert built.check().ok


def test_reindex_after_deleting_the_database_gives_the_same_digest_rows(built: Vault) -> None:
    root = built.layout.root
    before = {i: r for i, r in index.all_rows(built.conn).items() if r["path"].startswith("global/")}
    assert len(before) == 3 + 2 + 2  # days, week parts, months
    built.close()
    for name in ("chunks.db", "chunks.db-wal", "chunks.db-shm"):
        (root / ".vaultmem" / name).unlink(missing_ok=True)
    with Vault.open(root, embedder=FakeEmbedder()) as fresh:  # reindexes: the files are the truth
        rows = {i: r for i, r in index.all_rows(fresh.conn).items() if r["path"].startswith("global/")}
        assert rows == before
        marks = ",".join("?" * len(rows))
        vecs = fresh.conn.execute(f"SELECT count(*) FROM vectors WHERE id IN ({marks})", list(rows))
        assert vecs.fetchone()[0] == len(rows)  # from the digests' sidecars, not re-embedded
        assert fresh.check().ok
        assert fresh.global_digest("2024-11-30")[0].id == summary_id("global", "day:2024-11-30")


def test_enqueue_days_runs_past_days_now_and_today_after_the_next_midnight(tmp_path: Path) -> None:
    with new_vault(tmp_path / "v") as vault:
        more = {"2024-12-02": [("chat", "z", "07:00", "Mara", "Pick up the violin from the repair shop.")]}
        vault.ingest_messages(records({**DAYS, **more}))
        vault.flush()
        vault.conn.execute("DELETE FROM jobs WHERE kind = ?", (JobKind.DIGEST_DAILY.value,))
        pending = vault.ingest_messages(records({"2024-11-28": DAYS["2024-11-29"]})).added
        now = datetime(2024, 12, 1, 15, 0, tzinfo=UTC).timestamp()
        ids = [leaf.id for leaf in vault.ls()]
        assert digest.enqueue_days(vault.conn, [*ids, "s0123456789abcde"], now) == 4
        assert digest.enqueue_days(vault.conn, ids, now) == 0  # one job per day, deduplicated
        due = {j.payload["day"]: j.run_after for j in vault.jobs.list() if j.kind == "digest_daily"}
        after_midnight = datetime(2024, 12, 2, 0, 1, tzinfo=UTC).timestamp()
        assert due == {
            "2024-11-29": pytest.approx(now),
            "2024-11-30": pytest.approx(now),
            "2024-12-01": pytest.approx(after_midnight),  # today: once the day is complete
            "2024-12-02": pytest.approx(after_midnight),
        }
        assert pending and "2024-11-28" not in due  # leaves still pending extraction wait


def test_a_leaf_without_ts_counts_on_the_day_of_its_file(tmp_path: Path) -> None:
    with new_vault(tmp_path / "v") as vault:
        vault.ingest_messages(
            [{"id": "n1", "speaker": "Mara", "content": "Undated note about the boiler."}], source="notes"
        )
        vault.flush()
        leaf = vault.ls()[0]
        assert leaf.ts is None
        stamp = datetime(2024, 11, 30, 23, 59, tzinfo=UTC).timestamp()
        os.utime(vault.layout.root / leaf.path, (stamp, stamp))
        vault.reindex()  # the row takes the file's new mtime
        vault.conn.execute("DELETE FROM jobs")
        assert digest.enqueue_days(vault.conn, [leaf.id], stamp + 86400) == 1
        assert [j.payload for j in vault.jobs.list()] == [{"day": "2024-11-30"}]
        node = vault.global_digest("2024-11-30")[0]
        assert [c.target for c in node.children] == [Path(leaf.path).stem]
        assert node.text.startswith("- **notes**: 1 message")


def test_global_digest_builds_one_day_on_demand_and_lists_a_range(tmp_path: Path) -> None:
    with new_vault(tmp_path / "v") as vault:
        vault.ingest_messages(records())
        vault.flush()
        vault.conn.execute("DELETE FROM jobs WHERE kind = ?", (JobKind.DIGEST_DAILY.value,))
        assert not (vault.layout.root / "global" / "2024-11").exists()
        [node] = vault.global_digest("2024-11-30")  # missing: written now, with its week and month
        assert node.path == digest.node_path(date(2024, 11, 30)) and node.descendants == 4
        assert vault.global_digest(date(2024, 11, 30)) == [node]  # current: read, not rewritten
        assert (
            vault.global_digest("2024-11-15") == []
            and not (vault.layout.root / "global/2024-11/2024-W46").exists()
        )
        assert vault.global_digest() == []  # today: nothing remembered yet
        [week] = vault.global_digest("2024-11-30", period="week")
        assert week.title == "2024-W48 in 2024-11" and week.descendants == 4
        for day in ("2024-11-29", "2024-12-01"):
            vault.global_digest(day)
        days = vault.global_digest(start="2024-11-29", end="2024-12-01")
        assert [n.title for n in days] == ["2024-11-29", "2024-11-30", "2024-12-01"]
        assert [n.title for n in vault.global_digest(start="2024-11-30", end="2024-11-30")] == ["2024-11-30"]
        weeks = vault.global_digest(start=date(2024, 11, 1), period="week")
        assert [n.title for n in weeks] == ["2024-W48 in 2024-11", "2024-W48 in 2024-12"]
        assert [n.title for n in vault.global_digest(end="2024-11-30", period="month")] == ["2024-11"]
        with pytest.raises(InvalidInput):
            vault.global_digest("30 Nov")
        with pytest.raises(InvalidInput):
            vault.global_digest("2024-11-30", start="2024-11-01")
        with pytest.raises(InvalidInput):
            vault.global_digest("2024-11-30", period="year")
        assert vault.check().ok


def test_an_empty_day_job_completes_without_writing(built: Vault) -> None:
    assert built.jobs.enqueue_many([digest.digest_job(date(2024, 11, 15))]) == 1
    report = built.work()
    assert report.jobs_failed == 0 and built.jobs.list() == []
    assert not list((built.layout.root / "global" / "2024-11").glob("*/2024-11-15"))


def test_git_auto_commit_records_each_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    for key, value in (("user.name", "Tester"), ("user.email", "tester@example.org")):
        subprocess.run(["git", "config", "--global", key, value], check=True)
    with new_vault(tmp_path / "v", "\n[git]\nauto_commit = true\n") as vault:
        vault.ingest_messages(records())
        vault.flush()
        vault.work()
        assert not vault.warnings
    git = ["git", "-C", str(tmp_path / "v")]
    # One commit for the run; its message lists every digest written.
    log = subprocess.run([*git, "log", "--format=%B"], check=True, capture_output=True, text=True).stdout
    lines = {line.removeprefix("- ").removeprefix("memory: ") for line in log.splitlines()}
    assert {f"digest {day}" for day in DAYS} <= lines
    status = subprocess.run([*git, "status", "--porcelain"], check=True, capture_output=True, text=True)
    assert status.stdout.strip() == ""


def test_cli_digest_prints_text_and_json(built: Vault, capsys: pytest.CaptureFixture[str]) -> None:
    v = str(built.layout.root)
    code, out, _ = run(["digest", "2024-11-30", "--vault", v], capsys)
    assert code == 0
    assert out.startswith("# 2024-11-30  (global/2024-11/2024-W48/2024-11-30/_summary.md)")
    assert "**chat**: 2 messages" in out and "  - chat 09:00 Mara: Book the ryokan" in out
    code, out, _ = run(["digest", "2024-11-30", "--vault", v, "--json"], capsys)
    data = json.loads(out)
    assert data["period"] == "day" and data["descendants"] == 4
    assert [c["target"] for c in data["children"]] == stems(built, "2024-11-30")
    assert all(c["wiki"] for c in data["children"])
    code, out, _ = run(["digest", "2024-12-01", "--month", "--vault", v, "--json"], capsys)
    assert json.loads(out)["title"] == "2024-12"
    code, out, _ = run(
        ["digest", "--week", "--from", "2024-11-01", "--to", "2024-12-31", "--vault", v], capsys
    )
    assert code == 0 and "# 2024-W48 in 2024-11" in out and "# 2024-W48 in 2024-12" in out
    code, out, _ = run(
        ["digest", "--from", "2024-11-29", "--to", "2024-11-30", "--json", "--vault", v], capsys
    )
    assert [n["title"] for n in json.loads(out)] == ["2024-11-29", "2024-11-30"]
    code, out, _ = run(["digest", "2024-11-15", "--vault", v, "--json"], capsys)
    assert code == 0 and json.loads(out) is None
    code, _, err = run(["digest", "tomorrowish", "--vault", v], capsys)
    assert code == 1 and err.startswith("vaultmem: error:") and "YYYY-MM-DD" in err
    code, _, err = run(["digest", "--week", "--month", "--vault", v], capsys)
    assert code == 1 and "exclude each other" in err


NO_SEAL = CONFIG.replace("seal_min_leaves = 2", "seal_min_leaves = 1000")


def _digests_only(root: Path, embedder: RecordingEmbedder) -> dict[str, str]:
    """The digests of ``DAYS`` (no seal: the buffer never fills), every global file's text."""
    with Vault.init(root, NO_SEAL, embedder=embedder) as vault:
        vault.ingest_messages(records())
        vault.flush()
        embedder.alone.clear()  # the leaves' own vectors: not the digests'
        assert vault.work().jobs_failed == 0
        return {
            str(p.relative_to(root)): p.read_text(encoding="utf-8")
            for p in sorted((root / "global").rglob("_summary.md"))
        }


def test_a_digest_looks_for_no_title_it_would_not_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Days, weeks and months are named by their dates: the summariser embeds their sentences, never
    key phrases for a title (before: ~45% of a first run's digest texts), and the digest is the same."""
    from vaultmem.summarise import ExtractiveSummariser

    looked: list[bool] = []
    original = ExtractiveSummariser._key_phrase_title

    def key_phrase_title(self: ExtractiveSummariser, *args: object) -> str | None:
        looked.append(True)
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ExtractiveSummariser, "_key_phrase_title", key_phrase_title)
    embedder = RecordingEmbedder()
    now = _digests_only(tmp_path / "now", embedder)
    assert now and not looked
    sentences = {text for turns in DAYS.values() for *_, text in turns}
    asked = {t for call in embedder.alone for t in call}
    asked |= {t for g in embedder.gathered for c in g for t in c}
    # The days' sentences, and the lines of the days' digests the weeks and months roll up: no key phrase.
    assert {t.split(": ", 1)[-1] for t in asked} == sentences


def test_due_days_digests_embed_their_sentences_together_and_write_the_same_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first digest job embeds its day's and every other due day's sentences in one gathered call
    (``Remembering.prepare``: shared with the embedder's workers); the other days' jobs find them
    remembered, nothing is embedded twice, and the digests are the ones written day by day."""
    from vaultmem import embed
    from vaultmem.embed import Remembering

    monkeypatch.setattr(embed, "PARALLEL_MIN", 2)
    gathered = RecordingEmbedder()
    now = _digests_only(tmp_path / "now", gathered)
    [first, *_] = gathered.gathered
    assert len(first) == len(DAYS)  # one call per day, all at once
    day_sentences = [t for call in first for t in call]
    # each as its digest line reads ("Speaker: sentence"; the assistant's leaf has no speaker), so the
    # week's roll-up finds its lines remembered
    expected = [
        text if who == "Assistant" else f"{who}: {text}" for turns in DAYS.values() for *_, who, text in turns
    ]
    assert sorted(day_sentences) == sorted(expected)
    alone = [t for call in gathered.alone for t in call]
    assert not set(alone) & set(day_sentences)  # the days' jobs found them remembered
    with monkeypatch.context() as m:
        m.setattr(Remembering, "prepare", lambda self, calls: None)  # each day embeds as it comes
        one_by_one = RecordingEmbedder()
        before = _digests_only(tmp_path / "before", one_by_one)
    assert not one_by_one.gathered
    assert now == before
    before_texts = [t for call in one_by_one.alone for t in call]
    assert len(alone) + len(day_sentences) == len(before_texts)
