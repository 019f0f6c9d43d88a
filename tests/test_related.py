"""``## Related`` (issue #18): links between similar levels of different subtrees, relative Markdown links
that resolve, kept current when compaction moves levels, never children, hand edits kept."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import pytest

from tests.helpers import TOPICS, make_vault, topic_of, topic_records
from tests.test_topics import CONFIG as TOPIC_CONFIG
from tests.test_topics import records as chat_about
from vaultmem import Vault, related
from vaultmem.embed import FakeEmbedder
from vaultmem.summaryfile import parse_summary

LINK = re.compile(r"^- \[(?P<label>[^\]]*)\]\((?P<target>[^)]*)\)$")


def source_levels(vault: Vault, tree: str = "sources") -> dict[str, str]:
    """id -> path of every source level (or topic level, ``tree="topics"``)."""
    return dict(
        vault.conn.execute(
            "SELECT id, path FROM chunks WHERE kind = 'summary' AND path LIKE ?", (f"{tree}/%",)
        )
    )


def related_section(text: str) -> list[tuple[str, str]]:
    if "\n## Related\n" not in text:
        return []
    tail = text.split("\n## Related\n", 1)[1]
    return [(m["label"], m["target"]) for line in tail.splitlines() if (m := LINK.match(line.strip()))]


def assert_links_resolve(vault: Vault, tree: str = "sources") -> int:
    """Every related link of every level points at an existing summary of a level outside its lineage
    and its siblings; returns how many links there are."""
    count = 0
    for rel in source_levels(vault, tree).values():
        path = vault.layout.root / rel
        here = PurePosixPath(rel).parent
        for label, target in related_section(path.read_text()):
            resolved = (path.parent / target).resolve()
            assert resolved.is_file() and resolved.name == "_summary.md", (rel, target)
            there = PurePosixPath(resolved.relative_to(vault.layout.root.resolve()).as_posix()).parent
            assert not (str(there).startswith(str(here)) or str(here).startswith(str(there)))
            assert there.parent != here.parent
            assert label
            count += 1
    return count


def test_related_links_join_the_same_subject_across_sources_and_follow_moves(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v", fanout=50) as vault:
        vault.ingest_messages(topic_records(20, source="chat"))
        vault.ingest_messages(topic_records(20, source="notes"))
        vault.flush()
        report = vault.compact()
        assert report.jobs_failed == 0
        assert assert_links_resolve(vault) > 0
        levels = source_levels(vault)
        for rel in levels.values():
            node, _ = parse_summary((vault.layout.root / rel).read_text(), rel)
            if not node.related:
                continue
            # Same subject, other source: the garden level of one source links the other's garden.
            own = topic_of(node.title + " " + node.text)
            first = (vault.layout.root / rel).parent / node.related[0].target
            other = parse_summary(first.read_text(), "x/_summary.md")[0]
            assert topic_of(other.title + " " + other.text) == own
            # Never children: the children list names only what lies in the folder.
            assert all("/" not in c.target or c.target.count("/") == 1 for c in node.children)
            assert not set(c.target for c in node.related) & set(c.target for c in node.children)
        assert vault.check().ok
    # Condense: a small fan-out puts the levels under new parents (their folders move); the links follow.
    with Vault.open(tmp_path / "v", embedder=vault.embedder) as vault:
        paths_before = set(source_levels(vault).values())
        config = vault.layout.root / ".vaultmem" / "config.toml"
        config.write_text(config.read_text().replace("condense_fanout = 50", "condense_fanout = 2"))
    with Vault.open(tmp_path / "v", embedder=vault.embedder) as vault:
        vault.ingest_messages(topic_records(20, start=80, source="chat"))
        vault.flush()
        vault.compact()
        moved = set(source_levels(vault).values()) - paths_before
        assert moved, "nothing moved: the test would prove nothing"
        assert assert_links_resolve(vault) > 0
        assert vault.check().ok


def test_writing_related_links_keeps_a_persons_edits(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(topic_records(20, source="chat"))
        vault.ingest_messages(topic_records(20, source="notes"))
        vault.flush()
        vault.compact()
        rel = next(
            p for p in source_levels(vault).values() if related_section((vault.layout.root / p).read_text())
        )
        path = vault.layout.root / rel
        node, _ = parse_summary(path.read_text(), rel)
        human = "Mara's own words about this level."
        text = path.read_text().replace(node.text, human).replace("---\n", "---\nmood: cheerful\n", 1)
        # A stale link by hand in the engine's section: the engine owns it and puts it right.
        text = text.replace("\n## Related\n\n", "\n## Related\n\n- [gone](../nowhere/_summary.md)\n", 1)
        path.write_text(text)
        vault.compact()  # reads the edit first, then links again
        after, doc = parse_summary(path.read_text(), rel)
        assert doc.meta["mood"] == "cheerful"
        assert human in (after.pinned + after.text)
        assert all(c.target != "../nowhere/_summary.md" for c in after.related) and after.related
        assert vault.check().ok


def test_topic_levels_link_related_levels_and_keep_them_when_the_topic_is_rewritten(tmp_path: Path) -> None:
    """A topic's node and its levels get ``## Related`` links too (to the source levels that hold the same
    talk, other topics' levels), relative and resolving; rewriting the topic for new mentions keeps the section
    current, never as children."""
    with Vault.init(tmp_path / "v", TOPIC_CONFIG, embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat_about(30), source="chat")
        vault.flush()
        assert vault.compact().jobs_failed == 0
        assert list(vault.layout.root.glob("topics/*/_summary.md")), "no topic: the test proves nothing"
        assert assert_links_resolve(vault, "topics") > 0
        assert assert_links_resolve(vault) > 0
        for start in (30, 60):
            vault.ingest_messages(chat_about(30, start=start), source="chat")
            vault.flush()
            assert vault.compact().jobs_failed == 0
            assert assert_links_resolve(vault, "topics") > 0
        for rel in source_levels(vault, "topics").values():
            node, _ = parse_summary((vault.layout.root / rel).read_text(), rel)
            assert not {c.target for c in node.related} & {c.target for c in node.children}
        assert vault.check().ok


def one_topic_a_day(source: str) -> list[dict[str, object]]:
    """Each day of early May is one subject's: 2 May garden, 3 May japan, 4 May piano, 5 May taxes."""
    return [
        {**record, "ts": f"2024-05-{2 + n % len(TOPICS):02d}T{8 + n // 16:02d}:{n % 60:02d}:00Z"}
        for n, record in enumerate(topic_records(16, source=source))
    ]


def test_day_week_and_month_digests_link_the_levels_of_what_happened_then(tmp_path: Path) -> None:
    """The global tree gets ``## Related`` too: a day links the source levels of the subject talked about
    that day (two sources, so the links cross trees), resolving from the digest's folder; weeks and months
    link levels as well; digests are never targets; the memo of links the vault keeps between passes leaves
    nothing a full pass would change."""
    with make_vault(tmp_path / "v") as vault:
        vault.ingest_messages(one_topic_a_day("chat"))
        vault.ingest_messages(one_topic_a_day("notes"))
        vault.flush()
        assert vault.compact().jobs_failed == 0
        days = sorted(vault.layout.root.glob("global/*/*/*/_summary.md"))
        assert len(days) == 4, "no day digests: the test proves nothing"
        for path in days:
            day, _ = parse_summary(path.read_text(), "global/x/y/z/_summary.md")
            subject = topic_of(" ".join(c.label for c in day.children))
            assert day.related, f"{path.parent.name} links nothing"
            for link in day.related:
                target = (path.parent / link.target).resolve()
                assert target.is_file() and target.name == "_summary.md"
                rel = target.relative_to(vault.layout.root.resolve()).as_posix()
                assert not rel.startswith("global/"), rel  # a digest is never a target
                level, _ = parse_summary(target.read_text(), rel)
                assert topic_of(level.title + " " + level.text) == subject, (path.parent.name, rel)
        rollups = [
            *vault.layout.root.glob("global/*/*/_summary.md"),
            *vault.layout.root.glob("global/*/_summary.md"),
        ]
        assert rollups and all(
            parse_summary(p.read_text(), "global/x/_summary.md")[0].related for p in rollups
        )
        # Day links are not children: the day still lists its leaves only.
        assert all(
            not c.target.endswith("_summary.md")
            for p in days
            for c in parse_summary(p.read_text(), "global/x/y/z/_summary.md")[0].children
        )
        assert vault.check().ok
        # More talk, levels condensed under new parents: the memo kept by the vault and a full pass agree.
        config = vault.layout.root / ".vaultmem" / "config.toml"
        config.write_text(config.read_text().replace("condense_fanout = 50", "condense_fanout = 2"))
    with Vault.open(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(topic_records(16, start=64, source="chat"))
        vault.flush()
        assert vault.compact().jobs_failed == 0
        assert vault._related_known, "the vault kept no memo: the test proves nothing"
        assert related.plan(vault.conn, vault.layout, vault.embedder.model_id) is None
        assert assert_links_resolve(vault) > 0
        assert vault.check().ok


def test_choosing_by_a_shortlist_gives_the_links_a_full_sort_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """``choose`` sorts only each row's best few (``_SHORTLIST``) and looks further when they are all kin:
    the links are the ones a full sort of every row gives (checked against a plain reference), digests
    link levels and are never linked, on levels in folders of many siblings (much kin)."""
    import json
    import posixpath
    import sqlite3

    import numpy as np

    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute("CREATE TABLE chunks (id TEXT, kind TEXT, path TEXT, provenance TEXT, ts TEXT)")
    conn.execute("CREATE TABLE vectors (id TEXT, model TEXT, vec BLOB)")
    rng = np.random.default_rng(3)
    base = rng.standard_normal(16)
    folders = rng.standard_normal((8, 16))
    paths = [f"sources/s{i % 2}/{i // 12:02d}-p/{i:03d}-l/_summary.md" for i in range(96)]
    paths += [f"global/2024-05/2024-W1{i}/_summary.md" for i in range(4)]
    for i, path in enumerate(paths):
        folder = folders[i // 12] if i < 96 else base  # siblings alike: their shortlist is kin
        vec = (base + folder + 0.5 * rng.standard_normal(16)).astype("<f4")
        title = {"title": f"level {i}"}
        conn.execute(
            "INSERT INTO chunks VALUES (?, 'summary', ?, ?, ?)",
            (f"s{i}", path, json.dumps(title), f"{i:03d}"),
        )
        conn.execute("INSERT INTO vectors VALUES (?, 'm', ?)", (f"s{i}", vec.tobytes()))
    monkeypatch.setattr(related, "_SHORTLIST", 4)
    chosen = related.choose(conn, "m")

    # The reference: a full stable sort of every row against every level that is no digest.
    from vaultmem import cluster

    rows = conn.execute(
        "SELECT c.path, v.vec FROM chunks c JOIN vectors v ON v.id = c.id ORDER BY c.ts DESC, c.path"
    ).fetchall()
    dirs = [posixpath.dirname(r["path"]) for r in rows]
    unit = np.stack([np.frombuffer(r["vec"], dtype="<f4") for r in rows])
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    targets = [j for j, d in enumerate(dirs) if not d.startswith("global/")]
    bar = cluster.background(unit[targets])
    fell_back = 0
    for i, row in enumerate(rows):
        sims = unit[targets] @ unit[i]
        want = []
        for col in np.argsort(-sims, kind="stable"):
            j = targets[int(col)]
            if len(want) == related.RELATED_MAX or sims[col] < bar:
                break
            a, b = dirs[i], dirs[j]
            if (
                a == b
                or a.startswith(b + "/")
                or b.startswith(a + "/")
                or posixpath.dirname(a) == posixpath.dirname(b)
            ):
                continue
            want.append(posixpath.relpath(rows[j]["path"], dirs[i]))
        assert [c.target for c in chosen[row["path"]]] == want, row["path"]
        first = [targets[int(c)] for c in np.argsort(-sims, kind="stable")[:4]]
        fell_back += all(
            dirs[j] == dirs[i] or posixpath.dirname(dirs[j]) == posixpath.dirname(dirs[i]) for j in first
        )
    assert fell_back, "no row's shortlist was all kin: the test proves nothing of the fallback"
    assert any(chosen[p] for p in paths if p.startswith("global/"))
    assert not any(c.target.count("global/") for links in chosen.values() for c in links)
