"""Entity index, hotness, topic trees and their retrieval, on real vaults (fake embedder)."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers import ChatServer, Reply, wait_for, watching
from vaultmem import linkcheck, topics
from vaultmem.cli import app, main
from vaultmem.embed import FakeEmbedder
from vaultmem.model import Leaf
from vaultmem.summaryfile import parse_summary
from vaultmem.topics.heat import HeatSettings
from vaultmem.vault import Vault

CONFIG = """
[compact]
fresh_keep_leaves = 6
fresh_keep_tokens = 100000
seal_min_leaves = 10
seal_min_tokens = 100000
bucket_target_leaves = 6
bucket_min_leaves = 2
bucket_max_leaves = 40
bucket_max_tokens = 100000
condense_fanout = 50
workers = 2

[topics]
create_at = 6.0
min_leaves = 3
keep_recent = 4
seal_min = 4
level_leaves = 4

[embed]
model = "fake"  # the CLI, opening the vault from its config, uses the same fake model the fixture passes
"""

WIKI = re.compile(r"\[\[([^\]|]+)\|")
NOW = datetime(2026, 11, 21, 15, 0, tzinfo=UTC)


def records(n: int, *, start: int = 0, source: str = "chat") -> list[dict[str, object]]:
    """Caroline and Melanie talk; every third turn is about the TidePool project."""
    out = []
    for i in range(start, start + n):
        who, other = ("Caroline", "Melanie") if i % 2 == 0 else ("Melanie", "Caroline")
        about = "the TidePool release" if i % 3 == 0 else f"the garden, the roses and the compost ({i})"
        out.append(
            {
                "id": f"m{i}",
                "role": "user",
                "speaker": who,
                "content": f"Hi {other}, news about {about}: step {i} is done and the next one is planned.",
                "ts": f"2024-05-{1 + i // 6:02d}T{9 + i % 6:02d}:00:00Z",
                "session": f"s{i // 6}",
                "source": source,
            }
        )
    return out


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    v = Vault.init(tmp_path / "v", CONFIG, embedder=FakeEmbedder())
    yield v  # type: ignore[misc]
    v.close()


def wikilinks(root: Path) -> list[tuple[Path, str]]:
    out = []
    for path in (root / "topics").rglob("_summary.md"):
        out.extend((path, stem) for stem in WIKI.findall(path.read_text()))
    return out


def drop_by_hand(vault: Vault, key: str) -> tuple[Leaf, Path]:
    """Take ``key`` off the entities of the first leaf that lists it, as a person would in an editor."""
    leaf = next(x for x in vault.ls() if key in x.entities)
    path = vault.layout.root / leaf.path
    path.write_text(path.read_text().replace(f'"{key}", ', "").replace(f', "{key}"', ""))
    return leaf, path


def leaf_files(root: Path) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in (root / "sources").rglob("*.md"):
        found.setdefault(path.stem, []).append(path)
    return found


# -- the entity index ----------------------------------------------------------------------------------
def test_extract_writes_canonical_entities_into_frontmatter_and_the_index(vault: Vault) -> None:
    vault.ingest_messages(
        [
            {"id": "a", "role": "user", "speaker": "caroline", "content": "I pushed v2.1.0 of TidePool."},
            {
                "id": "b",
                "role": "user",
                "speaker": "Melanie",
                "content": "Thanks @caroline, Caroline's fix works.",
            },
            {"id": "c", "role": "user", "speaker": "王伟", "content": "我和张伟说了，2026年11月21日上线。"},
        ],
        source="chat",
    )
    vault.flush()
    by_id = {leaf.source_id: leaf for leaf in vault.ls()}
    assert "person:caroline" in by_id["a"].entities and "project:tidepool" in by_id["a"].entities
    assert by_id["b"].entities.count("person:caroline") == 1  # @caroline and Caroline's are one entity
    assert "person:张伟" in by_id["c"].entities and "date:2026-11-21" in by_id["c"].entities
    text = (vault.layout.root / by_id["a"].path).read_text()
    assert re.search(r'^entities: \[.*"person:caroline".*\]$', text, re.MULTILINE)
    leaves = {r[0] for r in vault.conn.execute("SELECT leaf FROM mentions WHERE entity = 'person:caroline'")}
    assert leaves == {by_id["a"].id, by_id["b"].id}


def test_a_hand_added_entity_is_indexed_and_survives_reindex(vault: Vault) -> None:
    vault.ingest_messages(records(2), source="chat")
    vault.flush()
    leaf = vault.ls()[0]
    path = vault.layout.root / leaf.path
    text = path.read_text()
    path.write_text(
        re.sub(r"^entities: .*$", 'entities: ["Kyoto trip", "person:Caroline"]', text, flags=re.M)
    )
    assert vault.check(fix=True).ok or True  # re-read the edited file
    assert set(vault.get(leaf.id).entities) == {"project:kyoto-trip", "person:caroline"}
    before = sorted(tuple(r) for r in vault.conn.execute("SELECT entity, leaf FROM mentions"))
    (vault.layout.db).unlink()
    with Vault.open(vault.layout.root, embedder=FakeEmbedder()) as again:
        assert sorted(tuple(r) for r in again.conn.execute("SELECT entity, leaf FROM mentions")) == before


# -- hotness -------------------------------------------------------------------------------------------
def test_heat_grows_with_mentions_sources_and_queries_and_halves_each_half_life(tmp_path: Path) -> None:
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute(
        "CREATE TABLE entity_heat(entity TEXT PRIMARY KEY, heat REAL, day TEXT, queries INTEGER DEFAULT 0)"
    )
    s = HeatSettings(half_life_days=7, mention_weight=1, source_weight=2, query_weight=3)
    topics.heat.record(conn, {"person:x": 5.0}, NOW, s)
    assert topics.heat.heat_of(conn, "person:x", NOW, s) == 5.0
    assert topics.heat.heat_of(conn, "person:x", NOW + timedelta(hours=8), s) == 5.0  # same UTC day: no decay
    assert topics.heat.heat_of(conn, "person:x", NOW + timedelta(days=7), s) == pytest.approx(2.5)
    assert topics.heat.heat_of(conn, "person:x", NOW + timedelta(days=14), s) == pytest.approx(1.25)
    topics.heat.record(conn, {"person:x": 1.0}, NOW + timedelta(days=7), s)
    assert topics.heat.heat_of(conn, "person:x", NOW + timedelta(days=7), s) == pytest.approx(3.5)


def test_admitted_mentions_count_leaves_and_new_sources_and_queries_add_heat(vault: Vault) -> None:
    s = vault.topic_settings.heat
    vault.ingest_messages(records(6), source="chat")
    vault.flush()
    # 6 leaves mention TidePool twice (i = 0, 3) and Caroline in all six: mentions + one new source
    assert topics.heat.heat_of(vault.conn, "project:tidepool", NOW, s) == pytest.approx(2 * 1.0 + 2.0)
    assert topics.heat.heat_of(vault.conn, "person:caroline", NOW, s) == pytest.approx(6 * 1.0 + 2.0)
    vault.ingest_messages(records(3, start=100, source="mail"), source="mail")
    vault.flush()
    # three more leaves, and a second source: +3 mentions +2 for the new source
    assert topics.heat.heat_of(vault.conn, "person:caroline", NOW, s) == pytest.approx(8.0 + 3.0 + 2.0)
    vault.search("what did Caroline say about the roses")
    assert topics.heat.heat_of(vault.conn, "person:caroline", NOW, s) == pytest.approx(13.0 + 3.0)
    queries = vault.conn.execute(
        "SELECT queries FROM entity_heat WHERE entity = 'person:caroline'"
    ).fetchone()
    assert queries[0] == 1


# -- topic trees ---------------------------------------------------------------------------------------
def test_a_hot_entity_gets_a_topic_tree_of_links_latest_first(vault: Vault) -> None:
    vault.ingest_messages(records(30), source="chat")
    vault.compact()
    root = vault.layout.root
    topic = root / "topics" / "project-tidepool" / "_summary.md"
    node, _ = parse_summary(topic.read_text(), "topics/project-tidepool/_summary.md")
    assert node.entity == "project:tidepool" and node.title == "Tidepool"
    assert node.descendants == 10  # i = 0, 3, ..., 27
    assert node.text.startswith("Latest (2024-05-05, chat)")  # the newest mention (i = 27) comes first
    levels = sorted(p.parent.name for p in (root / "topics" / "project-tidepool").glob("*/_summary.md"))
    assert levels and all(re.match(r"\d\d-2024-05-\d\d-", name) for name in levels)
    # Every member linked exactly once, nothing copied: links name real leaf files, topics hold no leaves.
    links = [stem for path, stem in wikilinks(root) if "project-tidepool" in str(path)]
    assert len(links) == len(set(links)) == 10
    files = leaf_files(root)
    assert all(len(files.get(stem, [])) == 1 for stem in links)
    assert not [p for p in (root / "topics").rglob("*.md") if p.name != "_summary.md"]
    assert vault.check().ok


def test_links_stay_valid_when_compaction_moves_the_leaves(vault: Vault) -> None:
    vault.ingest_messages(records(12), source="chat")
    vault.flush()
    vault.work()  # topics built while the leaves still sit in _fresh/
    root = vault.layout.root
    before = wikilinks(root)
    assert before and all("_fresh" in str(leaf_files(root)[stem][0]) for _, stem in before)
    vault.ingest_messages(records(30, start=12), source="chat")
    vault.compact()
    files = leaf_files(root)
    moved = [stem for _, stem in before if "_fresh" not in str(files[stem][0])]
    assert moved, "compaction should have sealed some linked leaves"
    for _path, stem in wikilinks(root):
        assert len(files.get(stem, [])) == 1, stem
    assert vault.check().ok


def test_topic_levels_seal_and_condense_and_reindex_gives_the_same_rows(tmp_path: Path) -> None:
    config = CONFIG.replace("level_leaves = 4", "level_leaves = 3")
    with Vault.init(tmp_path / "v", config, embedder=FakeEmbedder()) as vault:
        vault.topic_settings = topics.plan.TopicSettings(
            heat=vault.topic_settings.heat, keep_recent=3, seal_min=3, level_leaves=3, condense_fanout=3
        )
        vault.ingest_messages(records(60), source="chat")
        vault.compact()
        base = vault.layout.root / "topics" / "person-caroline"
        depth2 = [p for p in base.glob("*/*/_summary.md")]
        assert depth2, "levels should have been condensed under parents"
        root, _ = parse_summary((base / "_summary.md").read_text(), "topics/person-caroline/_summary.md")
        assert root.depth >= 3
        links = [stem for path, stem in wikilinks(vault.layout.root) if "person-caroline" in str(path)]
        assert len(links) == len(set(links)) == 60
        from vaultmem import index

        rows = index.all_rows(vault.conn)
        vault.reindex()
        assert index.all_rows(vault.conn) == rows
        assert vault.check().ok


def test_a_cold_topic_is_archived_and_revived_when_it_heats_up(vault: Vault) -> None:
    vault.ingest_messages(records(12), source="chat")
    vault.compact()
    root = vault.layout.root
    assert (root / "topics" / "project-tidepool" / "_summary.md").exists()
    later = topics.heat.utcnow() + timedelta(days=60)  # seven half-lives: far below archive_below
    ctx = vault.job_env()

    def route() -> topics.route.Routed:
        return topics.route.route(
            replace(ctx, max_bytes=1 << 20, commit=None), vault.conn, "project:tidepool", ctx.topics, later
        )

    routed = route()
    assert routed.state == "archived" or routed.messages == ("memory: archive topic Tidepool",)
    archived = root / "topics" / "_archive" / "project-tidepool" / "_summary.md"
    assert archived.exists() and not (root / "topics" / "project-tidepool").exists()
    assert "archived: true" in archived.read_text()
    assert vault.check().ok
    topics.heat.record(vault.conn, {"project:tidepool": 50.0}, later, ctx.topics.heat)
    route()
    revived = root / "topics" / "project-tidepool" / "_summary.md"
    assert revived.exists() and "archived:" not in revived.read_text()
    assert vault.check().ok


def test_a_leaf_whose_entity_is_removed_by_hand_leaves_the_topic(vault: Vault) -> None:
    vault.ingest_messages(records(12), source="chat")
    vault.compact()
    _leaf, path = drop_by_hand(vault, "project:tidepool")
    vault.compact()
    stems = [stem for p, stem in wikilinks(vault.layout.root) if "project-tidepool" in str(p)]
    assert path.stem not in stems and len(stems) == 3
    assert vault.check().ok


def test_check_reports_a_topic_link_to_a_deleted_leaf(vault: Vault) -> None:
    vault.ingest_messages(records(12), source="chat")
    vault.compact()
    _, stem = next(x for x in wikilinks(vault.layout.root) if "project-tidepool" in str(x[0]))
    leaf_files(vault.layout.root)[stem][0].unlink()
    assert [p.code for p in vault.check().problems] == ["orphan_row"]
    report = vault.check(fix=True)  # drops the orphan row, then queues the re-route and the re-digest
    dangling = [p for p in report.fixed if p.code == "dangling_link"]
    assert report.ok and any(p.path.startswith("topics/project-tidepool/") for p in dangling)
    assert vault.jobs.pending() > 0
    vault.work()
    assert vault.check().ok
    stems = [stem for _, stem in wikilinks(vault.layout.root)]
    assert stem not in stems


# -- retrieval -----------------------------------------------------------------------------------------
def test_topic_hot_topics_scoped_search_and_graph(vault: Vault) -> None:
    vault.ingest_messages(records(30), source="chat")
    vault.compact()
    view = vault.topic("TidePool", 3)
    assert view.entity.key == "project:tidepool" and view.summary.startswith("Latest")
    assert [x.source_id for x in view.recent] == ["m27", "m24", "m21"]
    assert len(view.facts) == 3 and all("TidePool" in x.text for x in view.facts)
    hot = vault.hot_topics(3)
    assert [e.key for e in hot][:2] == ["person:caroline", "person:melanie"]
    assert hot[0].topic == "topics/person-caroline/_summary.md"
    assert vault.stats().topics == len(topics.plan.existing(vault.conn)) == 3  # Caroline, Melanie, TidePool
    hits = vault.search("release news", 20, topic="tidepool", kind="leaf")
    assert hits and all("TidePool" in h.text for h in hits)
    graph = vault.graph()
    edge = next(
        e for e in graph["edges"] if {e["source"], e["target"]} == {"person:caroline", "project:tidepool"}
    )
    assert edge["weight"] == 10 and edge["first_seen"] == "2024-05-01T09:00:00Z"
    with pytest.raises(Exception, match="no entity named"):
        vault.topic("nobody-at-all")


def test_a_query_naming_a_day_ranks_that_days_leaves_first(vault: Vault) -> None:
    vault.ingest_messages(records(30), source="chat")
    vault.flush()
    hits = vault.search("what happened on 3 May 2024", 5, now=NOW.replace(tzinfo=None))  # naive = UTC
    assert hits and all(h.ts and h.ts.startswith("2024-05-03") for h in hits[:5])
    ctx = vault.context("what did we discuss on May 4, 2024", 300, now=NOW)
    assert ctx.items and str(ctx.items[0].hit.ts).startswith("2024-05-04")


def test_cli_topics_topic_and_graph(vault: Vault, capsys: pytest.CaptureFixture[str]) -> None:
    vault.ingest_messages(records(30), source="chat")
    vault.compact()
    root = str(vault.layout.root)
    runner = CliRunner()
    out = runner.invoke(app, ["topics", "-V", root, "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)[0]["key"] == "person:caroline"
    out = runner.invoke(app, ["topics", "-V", root])
    assert out.exit_code == 0 and "Caroline" in out.stdout and "topics/person-caroline/" in out.stdout
    out = runner.invoke(app, ["topic", "@caroline", "-V", root])
    assert out.exit_code == 0 and out.stdout.startswith("# Caroline") and "## Latest" in out.stdout
    out = runner.invoke(app, ["topic", "tidepool", "-V", root, "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["entity"]["leaves"] == 10
    out = runner.invoke(app, ["graph", "-V", root, "--json", "--min-weight", "10"])
    data = json.loads(out.stdout)
    assert out.exit_code == 0 and data["edges"] and all(e["weight"] >= 10 for e in data["edges"])
    with pytest.raises(SystemExit) as exited:
        main(["topic", "nobody-at-all", "-V", root])
    assert exited.value.code == 1 and capsys.readouterr().err.startswith("vaultmem: error: no entity named")
    out = runner.invoke(app, ["context", "news", "--topic", "tidepool", "-b", "200", "-V", root, "--json"])
    items = json.loads(out.stdout)["items"]
    assert out.exit_code == 0 and items and all("TidePool" in item["text"] for item in items)
    out = runner.invoke(app, ["search", "release", "--topic", "tidepool", "-V", root, "--json"])
    assert out.exit_code == 0 and all("TidePool" in h["text"] for h in json.loads(out.stdout))


def test_llm_entities_are_added_during_extract_when_configured(
    tmp_path: Path, llm_server: ChatServer
) -> None:
    llm_server.replies = [
        Reply(content='[{"name": "Lisbon", "kind": "project"}, {"name": "x", "kind": "planet"}]')
    ]
    config = f'[llm]\nbase_url = "{llm_server.url}"\nmodel = "m"\n\n[topics]\nllm_entities = true\n'
    with Vault.init(tmp_path / "v", config, embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(
            [
                {
                    "id": "a",
                    "role": "user",
                    "speaker": "Caroline",
                    "content": "Remember that we flew to the coast on Friday and booked the hotel for three nights.",
                }
            ],
            source="chat",
        )
        vault.flush()
        (leaf,) = vault.ls()
    assert leaf.entities == ("person:caroline", "project:lisbon")  # rules first, then the model's
    assert len(llm_server.requests) == 1 and "booked the hotel" in llm_server.requests[0].body.decode()


def test_topics_and_the_digest_can_be_switched_off(tmp_path: Path) -> None:
    config = CONFIG.replace("[topics]\n", "[topics]\nenabled = false\n") + "\n[digest]\nenabled = false\n"
    with Vault.init(tmp_path / "v", config, embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(records(30), source="chat")
        vault.compact()
        assert vault.ls()[0].entities  # entities are still indexed ...
        assert not list((vault.layout.root / "topics").rglob("*.md"))  # ... but no topic tree is made
        assert not list((vault.layout.root / "global").rglob("*.md"))
        assert vault.check().ok


def test_topic_and_digest_nodes_have_their_own_word_index(vault: Vault) -> None:
    vault.ingest_messages(records(30), source="chat")
    vault.compact()
    conn = vault.conn
    nav = "(path LIKE 'topics/%' OR path LIKE 'global/%')"
    in_leaf_index = conn.execute(
        f"SELECT count(*) FROM fts_words WHERE rowid IN (SELECT rowid FROM chunks WHERE {nav})"
    ).fetchone()[0]
    in_nav_index = conn.execute("SELECT count(*) FROM fts_nav_words").fetchone()[0]
    nav_rows = conn.execute(f"SELECT count(*) FROM chunks WHERE {nav}").fetchone()[0]
    assert in_leaf_index == 0 and in_nav_index == nav_rows > 0
    # ... still found by words when summaries are asked for, never when only leaves are
    summaries = vault.search("Latest TidePool release", 30, kind="summary")
    assert any(h.path.startswith("topics/project-tidepool/") for h in summaries)
    assert not any(
        h.path.startswith(("topics/", "global/")) for h in vault.search("TidePool", 30, kind="leaf")
    )
    # check notices a damaged nav index and rebuilds it
    conn.execute("DELETE FROM fts_nav_words WHERE rowid IN (SELECT rowid FROM fts_nav_words LIMIT 2)")
    assert [p.code for p in vault.check().problems] == ["fts_mismatch"]
    assert vault.check(fix=True).ok and vault.check().ok


def test_drill_down_into_a_topic_lists_its_levels_then_its_linked_leaves(vault: Vault) -> None:
    vault.ingest_messages(records(30), source="chat")
    vault.compact()
    tops = vault.drill_down()
    assert tops and all(n.path.startswith("sources/") for n in tops)  # the source trees' tops only
    root = vault.conn.execute(
        "SELECT id FROM chunks WHERE path = 'topics/project-tidepool/_summary.md'"
    ).fetchone()[0]
    kids = vault.drill_down(root)
    kinds = [n.kind for n in kids]
    assert kinds == sorted(kinds, key=lambda k: k != "summary")  # levels first, then leaves
    leaves = [n for n in kids if n.kind == "leaf"]
    assert len(leaves) == 4 and all("TidePool" in n.text for n in leaves)  # keep_recent = 4
    level = next(n for n in kids if n.kind == "summary")
    inside = vault.drill_down(level.id)
    assert 1 <= len(inside) <= 4 and all(n.kind == "leaf" and "TidePool" in n.text for n in inside)


def test_a_lost_heat_table_is_seeded_as_of_the_vaults_newest_memory(vault: Vault) -> None:
    vault.ingest_messages(records(30), source="chat")  # 2024-05-01 .. 2024-05-05
    vault.compact()
    s = vault.topic_settings.heat
    vault.conn.execute("DELETE FROM entity_heat")
    assert topics.heat.seed(vault.conn, NOW, s) > 0
    # TidePool: 10 mentions over five days, the newest on 2024-05-05, plus one new source
    expected = sum(0.5 ** ((5 - (1 + i // 6)) / 7) for i in range(0, 30, 3)) + 2.0 * 0.5 ** (4 / 7)
    assert topics.heat.heat_of(vault.conn, "project:tidepool", NOW, s) == pytest.approx(expected)
    assert topics.heat.seed(vault.conn, NOW, s) == 0  # only entities without a row
    vault.compact()  # still hot enough: nothing archived
    assert (vault.layout.root / "topics" / "project-tidepool" / "_summary.md").exists()


def test_a_hand_edit_seen_by_the_watcher_re_routes_the_topic(vault: Vault) -> None:
    vault.ingest_messages(records(12), source="chat")
    vault.compact()
    leaf, path = drop_by_hand(vault, "project:tidepool")
    vault.reconcile_paths([leaf.path])  # what the watch daemon does with the edit
    assert vault.conn.execute(
        "SELECT 1 FROM jobs WHERE dedupe_key = 'topic_route:project:tidepool'"
    ).fetchone()
    vault.work()
    stems = [stem for p, stem in wikilinks(vault.layout.root) if "project-tidepool" in str(p)]
    assert path.stem not in stems and vault.check().ok


def test_the_midnight_sweep_queues_every_topic(vault: Vault) -> None:
    vault.ingest_messages(records(12), source="chat")
    vault.compact()
    # Left queued: only the buffer's timer (6 leaves beyond the tail, under seal_min_leaves, wait for
    # more or until max_wait_s), never a topic route.
    assert [(j.kind, j.payload) for j in vault.jobs.list()] == [("flush_stale", {"source": "chat"})]
    queued = vault.sweep_topics()
    assert queued == len(topics.plan.existing(vault.conn)) >= 3  # Caroline, Melanie, TidePool
    vault.work()
    assert vault.check().ok


def test_a_hand_edited_topic_level_stays_and_the_stale_topic_is_refreshed_not_resummarised(
    vault: Vault,
) -> None:
    vault.ingest_messages(records(30), source="chat")
    vault.compact()
    base = vault.layout.root / "topics" / "project-tidepool"
    level = next(base.glob("*/_summary.md"))
    text = level.read_text()
    edited = text.replace("---\n", "---\ncolour: teal\n", 1).replace(
        "\n## Children", "\nMy own note.\n\n## Children"
    )
    level.write_text(edited)
    vault.compact()  # the edit makes the topic root stale; its re-summarise job re-routes the topic
    root, _ = parse_summary((base / "_summary.md").read_text(), "topics/project-tidepool/_summary.md")
    assert not root.stale and len([c for c in root.children if c.wiki]) == 4
    assert "colour: teal" in level.read_text() and "My own note." in level.read_text()
    assert vault.check().ok


def test_titles_a_person_gave_a_topic_and_its_level_survive_new_mentions(vault: Vault) -> None:
    """Renamed in Obsidian's properties pane (the ``title:`` line): the topic's own node and a sealed
    level keep the person's titles, still marked theirs, when new mentions rewrite the topic (twice,
    while the level may move under a new parent)."""
    vault.ingest_messages(records(30), source="chat")
    vault.compact()
    root = vault.layout.root
    base = root / "topics" / "project-tidepool"
    human = {}
    for path, title in (
        (base / "_summary.md", "TidePool, the tide app"),
        (min(base.glob("*/_summary.md")), "First TidePool steps"),
    ):
        node, _ = parse_summary(path.read_text(), str(path.relative_to(root)))
        assert node.title_hash and not node.title_edited and node.title != title
        path.write_text(
            re.sub(r"^title: .*$", f"title: {json.dumps(title)}", path.read_text(), count=1, flags=re.M)
        )
        human[node.id] = title
    for start in (30, 60):
        vault.ingest_messages(records(30, start=start), source="chat")
        vault.compact()
        for node_id, title in human.items():
            (rel,) = vault.conn.execute("SELECT path FROM chunks WHERE id = ?", (node_id,)).fetchone()
            after, _ = parse_summary((root / rel).read_text(), rel)
            assert after.title == title and after.title_edited, rel
            assert (
                title
                in vault.conn.execute("SELECT provenance FROM chunks WHERE id = ?", (node_id,)).fetchone()[0]
            )
    top, _ = parse_summary((base / "_summary.md").read_text(), "topics/project-tidepool/_summary.md")
    assert top.descendants == 30  # the new mentions joined: the topic's node was rewritten
    assert vault.check().ok


def test_rescan_gives_an_older_vault_its_entities_and_topics(
    vault: Vault, capsys: pytest.CaptureFixture[str]
) -> None:
    vault._finder = lambda leaf: ()  # as a vault built before entities were extracted
    vault.ingest_messages(records(30), source="chat")
    vault.compact()
    assert not any(x.entities for x in vault.ls()) and not topics.plan.existing(vault.conn)
    vault._finder = None
    before = {x.id: (vault.layout.root / x.path).read_text() for x in vault.ls()}
    main(["topics", "--rescan", "-V", str(vault.layout.root)])
    assert "entities found in 30 leaves" in capsys.readouterr().out
    leaves = vault.ls()
    assert all("person:caroline" in x.entities or "person:melanie" in x.entities for x in leaves)
    for x in leaves:  # only the entities line was added; a sealed leaf still says "admitted"
        after = (vault.layout.root / x.path).read_text()
        assert [line for line in after.splitlines() if not line.startswith("entities:")] == before[
            x.id
        ].splitlines()
    assert "project:tidepool" in topics.plan.existing(vault.conn)
    assert vault.rescan_entities() == 0 and vault.check().ok


def test_a_topic_folder_renamed_by_hand_stays_where_the_person_put_it(vault: Vault) -> None:
    vault.ingest_messages(records(12), source="chat")
    vault.compact()
    root = vault.layout.root / "topics"
    (root / "project-tidepool").rename(root / "tidepool-notes")
    report = vault.compact()  # compact sees the old file gone, not the new one ...
    assert any("tidepool-notes/_summary.md holds topic project:tidepool" in n for n in report.notes)
    assert not (root / "project-tidepool").exists()  # ... and never makes a second topic
    assert vault.check(fix=True).ok  # indexes the moved folder (the watch daemon does this by itself)
    vault.ingest_messages(records(12, start=12), source="chat")
    vault.compact()
    assert not (root / "project-tidepool").exists()
    node, _ = parse_summary(
        (root / "tidepool-notes" / "_summary.md").read_text(), "topics/tidepool-notes/_summary.md"
    )
    assert node.entity == "project:tidepool" and node.descendants == 8
    assert topics.plan.existing(vault.conn)["project:tidepool"] == "topics/tidepool-notes/_summary.md"
    assert vault.check().ok


def test_the_daemon_archives_a_topic_gone_cold_at_midnight(vault: Vault) -> None:
    import time

    vault.ingest_messages(records(12), source="chat")
    vault.compact()
    root = vault.layout.root / "topics"
    assert (root / "project-tidepool" / "_summary.md").exists()
    long_ago = (topics.heat.utcnow() - timedelta(days=70)).date().isoformat()  # ten half-lives without news
    vault.conn.execute("UPDATE entity_heat SET day = ? WHERE entity = 'project:tidepool'", (long_ago,))
    vault.conn.commit()
    with watching(vault.layout.root) as daemon:
        daemon._next_midnight = time.time()  # as if 00:00 UTC had just passed
        wait_for(lambda: (root / "_archive" / "project-tidepool" / "_summary.md").exists(), what="archive")
    assert not (root / "project-tidepool").exists() and (root / "person-caroline").exists()
    assert vault.check().ok


def test_with_an_llm_the_topic_summary_is_written_by_the_model_outside_the_lock(
    tmp_path: Path, llm_server: ChatServer
) -> None:
    llm_server.replies = [Reply("TITLE: TidePool news\nThe TidePool release is planned step by step.")]
    config = CONFIG + f'\n[llm]\nbase_url = "{llm_server.url}"\nmodel = "m"\n'
    with Vault.init(tmp_path / "v", config, embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(records(30), source="chat")
        report = vault.compact()
        assert report.jobs_failed == 0
        path = vault.layout.root / "topics" / "project-tidepool" / "_summary.md"
        node, _ = parse_summary(path.read_text(), "topics/project-tidepool/_summary.md")
        assert node.summariser == "llm:m" and node.text.startswith("Latest (2024-05-05, chat)")
        assert "The TidePool release is planned step by step." in node.text
        assert len([c for c in node.children if c.wiki]) == 4 and not node.stale
        topic_prompts = [r for r in llm_server.requests if "TidePool" in r.body.decode()]
        assert topic_prompts  # the model saw the topic's leaves
        assert vault.check().ok


BAR = """
[compact]
fresh_keep_leaves = 50
workers = 2

[topics]
create_at = 4.0
min_leaves = 3
min_sessions = 2
person_min_leaves = 7
"""


def said(i: int, session: str, text: str, speaker: str = "Mara") -> dict[str, object]:
    return {
        "id": f"b{i}",
        "role": "user",
        "speaker": speaker,
        "content": f"{text} We settled the plan for step {i} and wrote down what comes next.",
        "ts": f"2024-06-{1 + i:02d}T09:00:00Z",
        "session": session,
    }


def test_a_topic_needs_two_sessions_and_a_person_nobody_hears_needs_more_leaves(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", BAR, embedder=FakeEmbedder()) as vault:
        first = [said(i, "s1", "Aunt Linda called about the Qantas refund.") for i in range(4)]
        vault.ingest_messages(first, source="chat")
        vault.compact()
        assert topics.plan.existing(vault.conn) == {}  # hot, but all from one conversation
        more = [said(i, "s2", "Aunt Linda called about the Qantas refund.") for i in range(4, 6)]
        more.append(said(6, "s2", "Diego booked the ferry.", speaker="Diego"))
        more.append(said(7, "s3", "Sure, sounds good.", speaker="Diego"))
        more.append(said(8, "s3", "Sure, that works.", speaker="Diego"))
        vault.ingest_messages(more, source="chat")
        vault.compact()
        made = topics.plan.existing(vault.conn)
        assert "org:qantas" in made  # 6 leaves from 2 conversations
        assert "person:diego" in made  # 3 leaves, but he speaks in them
        assert "person:aunt-linda" not in made  # 6 leaves, only mentioned: needs person_min_leaves (7)
        vault.ingest_messages([said(9, "s3", "Aunt Linda called again.")], source="chat")
        vault.compact()
        assert "person:aunt-linda" in topics.plan.existing(vault.conn)


def test_topic_kinds_and_the_bar_are_read_from_config(tmp_path: Path) -> None:
    from vaultmem.config import parse_config
    from vaultmem.errors import InvalidInput

    config = parse_config('[topics]\nkinds = ["person", "org"]\nmin_sessions = 1\nperson_min_leaves = 3\n')
    settings = topics.plan.settings_from(config.topic_values())
    assert (settings.kinds, settings.min_sessions, settings.person_min_leaves) == (("person", "org"), 1, 3)
    assert (
        "event" not in topics.plan.TopicSettings().kinds
    )  # holidays come back every year: no tree by default
    for bad in ('kinds = ["people"]', 'kinds = "person"', "min_sessions = -1"):
        with pytest.raises(InvalidInput):
            parse_config(f"[topics]\n{bad}\n")


def test_rescan_after_a_rules_change_replaces_the_engines_entities_and_archives_what_no_leaf_names(
    vault: Vault, capsys: pytest.CaptureFixture[str]
) -> None:
    # As the first rules read a documentation vault: every leaf named a "person" Ctrl.
    vault._finder = lambda leaf: ("person:ctrl",)
    text = "Press Ctrl+P to open Settings, then fly Qantas to Lisbon with Diego."
    vault.ingest_messages([said(i, f"s{i % 3}", text) for i in range(12)], source="docs")
    vault.compact()
    assert "person:ctrl" in topics.plan.existing(vault.conn)
    leaf = vault.ls()[0]
    path = vault.layout.root / leaf.path
    path.write_text(path.read_text().replace("\nkind: leaf\n", "\nkind: leaf\ntags: [travel]\n", 1))
    vault.check(fix=True)
    with vault._locked(), vault.conn:
        vault.conn.execute("UPDATE meta SET value = '1' WHERE key = 'entity_rules'")
    vault._finder = None
    main(["topics", "--rescan", "-V", str(vault.layout.root)])
    assert "entities found in 12 leaves" in capsys.readouterr().out
    for x in vault.ls():
        assert "person:ctrl" not in x.entities
        assert {"org:qantas", "place:lisbon", "person:diego"} <= set(x.entities)
    assert "tags: [travel]" in path.read_text()  # the person's own keys stay
    made = topics.plan.existing(vault.conn)
    assert made["person:ctrl"].startswith("topics/_archive/")  # kept whole, no longer routed
    assert not made["org:qantas"].startswith("topics/_archive/")
    assert vault.rescan_entities() == 0 and vault.check().ok


def _deadline_moved() -> list[dict[str, object]]:
    """A deadline stated, thirty other messages, then the deadline moved (one update to link)."""
    old_fact: dict[str, object] = {
        "id": "d0",
        "role": "user",
        "speaker": "Caroline",
        "content": "The TidePool release deadline is 27 March, the printer needs the files a week before.",
        "ts": "2024-05-01T08:00:00Z",
        "session": "s0",
        "source": "chat",
    }
    new_fact = {
        **old_fact,
        "id": "d1",
        "content": "Heads up: the TidePool release deadline moved to 3 April, the printer agreed.",
        "ts": "2024-05-05T16:00:00Z",
        "session": "s4",
    }
    return [old_fact, *records(30), new_fact]


def test_a_version_link_accepted_in_review_marks_the_topic_after_the_next_worker_pass(vault: Vault) -> None:
    """A topic names its leaves by link; once a person accepts that one replaced another, the queued
    route rewrites the topic (no new mention needed): the old leaf's link says ``[superseded]`` and its
    level's summary reads it so, the new one's says ``[current]``. Undoing the link unmarks them."""
    vault.ingest_messages(_deadline_moved(), source="chat")
    vault.compact()
    [proposal] = [p for p in vault.proposals() if "27 March" in vault.get(p.old).text]
    topic = vault.layout.root / "topics" / "project-tidepool"
    files = {p: p.read_text(encoding="utf-8") for p in topic.rglob("_summary.md")}
    assert not any("[superseded]" in t or "[current]" in t for t in files.values())
    [old_level] = [p for p, t in files.items() if f"{proposal.old}|" in t and p.parent != topic]
    vault.decide(proposal.new, "accept")
    assert vault.get(proposal.old).superseded_by == (proposal.new,)
    vault.work()  # the worker pass: the topic route the link queued
    marked = {p: p.read_text(encoding="utf-8") for p in topic.rglob("_summary.md")}
    old_line = next(line for line in marked[old_level].splitlines() if f"{proposal.old}|" in line)
    assert old_line.endswith(" [superseded]")
    assert "[superseded] " in parse_summary(marked[old_level], "x/_summary.md")[0].text
    new_line = next(line for t in marked.values() for line in t.splitlines() if f"{proposal.new}|" in line)
    assert new_line.endswith(" [current]")
    assert vault.check().ok
    # Routing again changes nothing (the marks read back equal); undoing the link unmarks.
    vault.work()
    assert {p: p.read_text(encoding="utf-8") for p in topic.rglob("_summary.md")} == marked
    vault.revert_update(f"{proposal.new}-{proposal.old}")
    vault.work()
    assert not any("[superseded]" in p.read_text(encoding="utf-8") for p in topic.rglob("_summary.md"))


def _quotes_unmarked(text: str, words: str) -> bool:
    """Whether a summary's text has a line quoting ``words`` without saying it was replaced."""
    return any(words in line and "[superseded]" not in line for line in text.splitlines())


@pytest.mark.parametrize("edited", [False, True])
def test_a_version_link_marks_upper_topic_levels_and_digests_on_the_real_queue(
    vault: Vault, edited: bool
) -> None:
    """Issue #20: after a link is accepted, the worker pass re-summarises every topic level above the
    old value's level (no level quotes it unmarked) unless a person edited it (their text stays); the
    day digests mark their links ``[superseded]`` / ``[current]`` and the day, week and month texts
    that quote the old value mark it; a second pass writes nothing."""
    vault.topic_settings = replace(vault.topic_settings, condense_fanout=2, condense_target=2)
    vault.ingest_messages(_deadline_moved(), source="chat")
    vault.compact()
    [proposal] = [p for p in vault.proposals() if "27 March" in vault.get(p.old).text]
    root = vault.layout.root
    topic = root / "topics" / "project-tidepool"
    upper = [
        p for p in topic.rglob("_summary.md") if p.parent != topic and any(p.parent.glob("*/_summary.md"))
    ]
    [above] = [p for p in upper if "27 March" in p.read_text(encoding="utf-8")]  # the test needs one
    assert _quotes_unmarked(
        parse_summary(above.read_text(encoding="utf-8"), "x/_summary.md")[0].text, "27 March"
    )
    if edited:  # a person rewrote the upper level in Obsidian
        text = above.read_text(encoding="utf-8")
        above.write_text(text.replace("step 12 is done", "step 12 is done (Mara checked)"), encoding="utf-8")
        vault.check(fix=True)
    theirs = above.read_text(encoding="utf-8")
    day = root / "global" / "2024-05" / "2024-W18" / "2024-05-01" / "_summary.md"
    for digest in (day, day.parent / "_summary.md", day.parent.parent / "_summary.md"):  # day, week, month
        assert _quotes_unmarked(
            parse_summary(digest.read_text(encoding="utf-8"), "x/_summary.md")[0].text, "27 March"
        )
    vault.decide(proposal.new, "accept")
    vault.work()
    summaries = sorted([*topic.rglob("_summary.md"), *(root / "global").rglob("_summary.md")])
    after = {p: p.read_text(encoding="utf-8") for p in summaries}
    if edited:
        assert (
            parse_summary(after[above], "x/_summary.md")[0].text
            == parse_summary(theirs, "x/_summary.md")[0].text
        )
    kept = [k.removeprefix("- ") for k in parse_summary(theirs, "x/_summary.md")[0].text.splitlines() if k]
    for path, text in after.items():
        if edited and path == above:
            continue
        lines = parse_summary(text, "x/_summary.md")[0].text.splitlines()
        if edited and path == topic / "_summary.md":  # the root quotes the person's level as they wrote it
            lines = [line for line in lines if not any(k in line for k in kept)]
        assert not _quotes_unmarked("\n".join(lines), "27 March"), path
    assert "[superseded] " in parse_summary(after[above], "x/_summary.md")[0].text or edited
    old_link = next(line for line in after[day].splitlines() if f"{proposal.old}|" in line)
    assert old_link.endswith(" [superseded]")
    later = next(p for p in after if p.parent.name == "2024-05-05")
    new_link = next(line for line in after[later].splitlines() if f"{proposal.new}|" in line)
    assert new_link.endswith(" [current]")
    assert vault.check().ok
    vault.work()  # a second pass writes nothing
    assert {p: p.read_text(encoding="utf-8") for p in summaries} == after


def test_topics_and_digests_link_a_notes_sections_by_their_headings(vault: Vault) -> None:
    """Notes written by hand are indexed where they are (#15): a topic or day digest names a section by
    the note's heading (``[[Projects/TidePool plan#Week 2|...]]``), and drilling into a topic lists
    the sections it links like any other leaves."""
    root = vault.layout.root
    (root / "Projects").mkdir()
    for name in ("TidePool plan", "TidePool retro"):
        weeks = "".join(
            f"## Week {i}\n\nCaroline says the TidePool release step {i} is done; Melanie plans the next.\n\n"
            for i in range(1, 5)
        )
        (root / "Projects" / f"{name}.md").write_text(
            f"---\ndate: 2024-05-02\n---\n# {name}\n\nWhere the TidePool release stands, week by week.\n\n"
            f"{weeks}## Week 3\n\nA second TidePool note for week 3.\n",
            encoding="utf-8",
        )
    vault.read_notes(["Projects/TidePool plan.md", "Projects/TidePool retro.md"])
    vault.compact()
    sections = {leaf.id: leaf for leaf in vault.ls()}
    assert len(sections) == 12 and all("#" in leaf.path for leaf in sections.values())
    nodes = [
        parse_summary(p.read_text(encoding="utf-8"), str(p.relative_to(root)))[0]
        for top in ("topics", "global")
        for p in (root / top).rglob("_summary.md")
    ]
    links = [c for node in nodes for c in node.children if c.linked_id in sections]
    assert {node.path.split("/")[0] for node in nodes if any(c in links for c in node.children)} == {
        "topics",
        "global",
    }
    for link in links:
        leaf = sections[str(link.linked_id)]
        note = leaf.path.split("#")[0][: -len(".md")]
        heading = str(leaf.meta["heading_path"]).split(" > ")[-1]
        # The second "Week 3" of a note cannot be told apart by a heading link: it names the note.
        second = "second TidePool note" in leaf.text
        assert link.wiki and link.target == (note if second else f"{note}#{heading}")
        # Labelled by the heading path after the day or time, no Markdown heading marks.
        name, path = note.rsplit("/", 1)[-1], str(leaf.meta["heading_path"]).split(" > ")
        assert link.label.endswith(" › ".join([name, *path[path[0] == name :]])) and "#" not in link.label
    assert len({c.linked_id for c in links}) == 12
    checked, bad = linkcheck.vault_links(vault.layout)
    assert checked >= 24 and bad == []
    topic = vault.conn.execute(
        "SELECT id FROM chunks WHERE path = 'topics/project-tidepool/_summary.md'"
    ).fetchone()[0]
    linked = [c.linked_id for c in vault.summary(topic).children if c.linked_id]
    assert linked and all(i in sections for i in linked)
    kids = vault.drill_down(topic)
    assert [n.id for n in kids if n.kind == "leaf"] == linked
    page, total = vault.children(topic)
    assert [n.id for n in page] == [n.id for n in kids] and total == len(kids)
    # A listed level's count of children includes the leaves it links (a day digest under its week).
    (week,) = [
        r["id"]
        for r in vault.conn.execute("SELECT id, path FROM chunks WHERE path LIKE 'global/%/%-W%/_summary.md'")
        if r["path"].count("/") == 3
    ]
    days = [n for n in vault.children(week)[0] if n.kind == "summary"]
    assert days and all(day.children == len(vault.summary(day.id).children) > 0 for day in days)
    assert [d.children for d in vault.drill_down(week) if d.kind == "summary"] == [d.children for d in days]
    assert vault.check().ok
