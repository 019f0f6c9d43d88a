"""Notes written by hand are indexed where they are (#15): never copied into ``sources/``.

Each section of a note is one index row at ``<note>#<leaf id>`` whose parent is the note's document node
(``sources/<source>/<note>/_summary.md``, engine-owned), which records the sections' ids so ``reindex``
gives the same ids back. Real files, real SQLite, a real watchdog daemon where the watcher is the point;
notes written the way people write them (headings, frontmatter, Obsidian links, Chinese text)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import hits, save_temp_rename, settle, wait_for, watching
from vaultmem import linkcheck
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import InvalidInput
from vaultmem.layout import note_of
from vaultmem.model import Message
from vaultmem.vault import Vault

KYOTO = (
    "---\ntags: [travel]\naliases: [Kyoto]\n---\n# Kyoto trip\n\n"
    "Booked with [[Shirakawa ryokan]] through ![[booking.pdf]].\n\n"
    "## Lodging\n\n### Ryokan\n\nYadoya Shirakawa, check-in by 18:00, kaiseki dinner at 19:00.\n\n"
    "## Food\n\nOkonomiyaki in Gion; 抹茶 parfait near Kiyomizu.\n\n"
    "## Transport\n\nICOCA card topped up with ¥5,000 at Kansai airport.\n"
)


def _kyoto_note(root: Path) -> Path:
    """The note ``Travel/Kyoto trip.md`` as a person saved it (not read yet)."""
    (root / "Travel").mkdir()
    note = root / "Travel" / "Kyoto trip.md"
    note.write_text(KYOTO, encoding="utf-8")
    return note


def _sections(vault: Vault, note: str) -> dict[str, tuple[str, str, str | None]]:
    """heading path -> (id, path, parent) of the note's section rows."""
    return {
        str(leaf.meta.get("heading_path")): (leaf.id, leaf.path, _parent(vault, leaf.id))
        for leaf in vault.ls()
        if note_of(leaf.path) == note
    }


def _parent(vault: Vault, leaf_id: str) -> str | None:
    row = vault.conn.execute("SELECT parent FROM chunks WHERE id = ?", (leaf_id,)).fetchone()
    return None if row is None else row[0]


def _engine_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "sources").rglob("*") if p.is_file())


def _rows(vault: Vault) -> list[tuple[object, ...]]:
    cols = 'id, path, parent, text, source_id, seq, session, provenance, "order", content_hash'
    return [
        tuple(r) for r in vault.conn.execute(f"SELECT {cols} FROM chunks WHERE kind = 'leaf' ORDER BY id")
    ]


def test_a_note_is_indexed_where_it_is_and_never_copied(vault: Vault) -> None:
    root = vault.layout.root
    note = _kyoto_note(root)
    vault.read_notes(["Travel/Kyoto trip.md"])
    vault.flush()
    sections = _sections(vault, "Travel/Kyoto trip.md")
    assert sorted(sections) == [
        "Kyoto trip",
        "Kyoto trip > Food",
        "Kyoto trip > Lodging > Ryokan",
        "Kyoto trip > Transport",
    ]
    node = vault.conn.execute(
        "SELECT id FROM chunks WHERE path = 'sources/travel/kyoto-trip/_summary.md'"
    ).fetchone()[0]
    for leaf_id, path, parent in sections.values():
        assert path == f"Travel/Kyoto trip.md#{leaf_id}" and parent == node
    # No copy of the note anywhere: the document node's folder holds only engine files.
    assert _engine_files(root) == [
        "sources/travel/kyoto-trip/_embeddings.json",
        "sources/travel/kyoto-trip/_summary.md",
    ]
    assert note.read_text(encoding="utf-8") == KYOTO  # the person's note is never written
    summary = (root / "sources/travel/kyoto-trip/_summary.md").read_text(encoding="utf-8")
    assert "note_path: Travel/Kyoto trip.md" in summary and "tags: [travel]" in summary
    assert all(leaf_id in summary for leaf_id, _p, _n in sections.values())  # the ids are recorded
    # Children link the note's headings as Obsidian does, each with its section's id beside it.
    ryokan = sections["Kyoto trip > Lodging > Ryokan"][0]
    assert f"- [[Travel/Kyoto trip#Ryokan|Lodging › Ryokan]] %%{ryokan}%%" in summary
    assert "](<" not in summary
    # Found, with its status and entities in the row only.
    found = hits(vault, "kaiseki")
    assert found == [sections["Kyoto trip > Lodging > Ryokan"][0]]
    assert hits(vault, "抹茶")
    leaf = vault.get(found[0])
    assert leaf.status.value == "sealed" and leaf.meta["note"] == "Travel/Kyoto trip.md"
    assert vault.check().ok
    # The document node's children are the note's sections, in reading order.
    assert [n.id for n in vault.drill_down(node)] == [
        sections[k][0]
        for k in (
            "Kyoto trip",
            "Kyoto trip > Lodging > Ryokan",
            "Kyoto trip > Food",
            "Kyoto trip > Transport",
        )
    ]
    vault.compact()
    assert vault.check().ok and note.read_text(encoding="utf-8") == KYOTO


def test_edits_replace_sections_in_place_and_renamed_headings_keep_their_ids(vault: Vault) -> None:
    root = vault.layout.root
    note = _kyoto_note(root)
    vault.read_notes(["Travel/Kyoto trip.md"])
    before = _sections(vault, "Travel/Kyoto trip.md")
    # A heading renamed, a section moved up, one deleted, one edited, one added.
    note.write_text(
        "# Kyoto trip\n\nBooked with [[Shirakawa ryokan]] through ![[booking.pdf]].\n\n"
        "## Getting around\n\nICOCA card topped up with ¥5,000 at Kansai airport.\n\n"
        "## Stay\n\n### Ryokan\n\nYadoya Shirakawa, check-in by 18:00, kaiseki dinner at 19:00.\n\n"
        "## Temples\n\nFushimi Inari at dawn before the crowds.\n",
        encoding="utf-8",
    )
    vault.read_notes(["Travel/Kyoto trip.md"])
    after = _sections(vault, "Travel/Kyoto trip.md")
    assert after["Kyoto trip > Stay > Ryokan"][0] == before["Kyoto trip > Lodging > Ryokan"][0]
    assert after["Kyoto trip > Getting around"][0] == before["Kyoto trip > Transport"][0]
    assert after["Kyoto trip"][0] == before["Kyoto trip"][0]
    assert "Kyoto trip > Food" not in after
    assert not hits(vault, "Okonomiyaki") and hits(vault, "Fushimi")
    assert len(after) == 4 and _engine_files(root)[-1].endswith("_summary.md")
    assert vault.check().ok


def test_reindex_gives_the_same_ids_and_rows(vault: Vault) -> None:
    root = vault.layout.root
    note = _kyoto_note(root)
    (root / "Inbox.md").write_text("# Inbox\n\nCall the plumber about the boiler.\n", encoding="utf-8")
    vault.read_notes(["Travel/Kyoto trip.md", "Inbox.md"])
    note.write_text(KYOTO.replace("## Lodging", "## Where we sleep"), encoding="utf-8")
    vault.read_notes(["Travel/Kyoto trip.md"])  # a renamed heading: its id is kept...
    vault.flush()
    rows = _rows(vault)
    report = vault.reindex()
    assert report.leaves == 5
    assert _rows(vault) == rows  # ...and reindex, from the files alone, gives the same ids and rows
    vault.flush()
    assert hits(vault, "plumber") and hits(vault, "kaiseki") and vault.check().ok


def test_check_reports_a_note_whose_sections_disagree_and_fix_restores_the_same_ids(vault: Vault) -> None:
    root = vault.layout.root
    _kyoto_note(root)
    vault.read_notes(["Travel/Kyoto trip.md"])
    rows = _rows(vault)
    assert vault.check().ok
    lost = rows[0][0]
    with vault.conn:
        vault.conn.execute("DELETE FROM chunks WHERE id = ?", (lost,))
    report = vault.check()
    assert [(p.code, p.path) for p in report.problems] == [("document_out_of_step", "Travel/Kyoto trip.md")]
    vault.check(fix=True)
    assert vault.check().ok and _rows(vault) == rows


def test_note_sections_are_not_edited_forgotten_or_superseded_as_nodes(vault: Vault) -> None:
    root = vault.layout.root
    (root / "Ideas.md").write_text("# Ideas\n\nA heron-shaped kite for the beach.\n", encoding="utf-8")
    vault.read_notes(["Ideas.md"])
    (section,) = hits(vault, "heron")
    for attempt in (
        lambda: vault.forget([section]),
        lambda: vault.supersede(section, "A crane-shaped kite."),
        lambda: vault.purge(section),
        lambda: vault.delete(section),
    ):
        with pytest.raises(InvalidInput, match="edit or delete the note"):
            attempt()
    assert hits(vault, "heron") and vault.check().ok


def test_mirrors_of_an_older_vaultmem_move_to_the_trash_and_keep_their_ids(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    with Vault.init(root, embedder=FakeEmbedder()) as vault:
        note = _kyoto_note(root)
        (root / "Gone.md").write_text("# Gone\n\nThe heron kite is in the attic.\n", encoding="utf-8")
        # What vaultmem wrote before: the note's sections as leaf files under sources/, each naming it.
        messages = vault._note_messages(["Travel/Kyoto trip.md", "Gone.md"])
        vault._sync_documents([replace(m, meta={**m.meta, "note": ""}) for m in messages])
        vault.flush()
        mirrors = [p for p in _engine_files(root) if not p.endswith(("_summary.md", "_embeddings.json"))]
        assert len(mirrors) == 5
        with vault.conn:
            vault.conn.execute(
                "UPDATE chunks SET provenance = json_set(provenance, '$.note', CASE session"
                " WHEN 'Kyoto trip.md' THEN 'Travel/Kyoto trip.md' ELSE 'Gone.md' END) WHERE kind = 'leaf'"
            )
            vault.conn.execute("DELETE FROM meta WHERE key = 'notes_in_place'")
        ids = sorted(r[0] for r in vault.conn.execute("SELECT id FROM chunks WHERE kind = 'leaf'"))
    (root / "Gone.md").unlink()  # deleted while the old mirror still answered for it
    with Vault.open(root, embedder=FakeEmbedder()) as vault:
        kept = sorted(r[0] for r in vault.conn.execute("SELECT id FROM chunks WHERE kind = 'leaf'"))
        assert kept == sorted(
            i for i in ids if i in {x[0] for x in _sections(vault, "Travel/Kyoto trip.md").values()}
        )
        assert len(kept) == 4 and all(note_of(leaf.path) == "Travel/Kyoto trip.md" for leaf in vault.ls())
        assert _engine_files(root) == [
            "sources/travel/kyoto-trip/_embeddings.json",
            "sources/travel/kyoto-trip/_summary.md",
        ]
        trashed = [p.name for p in (root / ".trash" / "vaultmem").rglob("*.md")]
        assert all(Path(m).name in trashed for m in mirrors)  # recoverable
        assert note.read_text(encoding="utf-8") == KYOTO
        vault.flush()
        assert hits(vault, "kaiseki") and not hits(vault, "heron") and vault.check().ok


def test_watcher_note_saved_renamed_moved_and_deleted(vault: Vault) -> None:
    root = vault.layout.root
    (root / "journal").mkdir()
    note = root / "journal" / "Trip.md"
    with watching(root) as daemon:
        for n, place in enumerate(["Osaka", "Nara", "Kobe", "Himeji", "Kyoto"]):
            save_temp_rename(
                note, f"# Trip\n\n## Day one\n\nThe okonomiyaki place in {place} opens at five.\n".encode()
            )
            settle(daemon)
            if n == 0:
                wait_for(lambda: hits(vault, "okonomiyaki"), what="the note to be searchable")
        wait_for(lambda: hits(vault, "Kyoto"), what="the last version to be searchable")
        assert not hits(vault, "Himeji") and len(vault.ls()) == 1
        before = {leaf.id for leaf in vault.ls()}
        (root / "journal" / "2026").mkdir()
        os.rename(note, root / "journal" / "2026" / "Kyoto trip.md")
        settle(daemon)
        wait_for(
            lambda: {note_of(leaf.path) for leaf in vault.ls()} == {"journal/2026/Kyoto trip.md"},
            what="the move to be read",
        )
        assert {leaf.id for leaf in vault.ls()} == before
        assert not [p for p in _engine_files(root) if not p.endswith(("_summary.md", "_embeddings.json"))]
        (root / "journal" / "2026" / "Kyoto trip.md").unlink()
        settle(daemon)
        wait_for(lambda: not hits(vault, "okonomiyaki"), what="the deleted note to leave search")
        assert not vault.ls()
    assert vault.check().ok


def test_a_note_section_is_never_proposed_as_updated_or_updating(vault: Vault) -> None:
    """A note is edited in place: a later chat turn that changes one of its values is no version of it
    (a link would have to write into the person's note), nor does the note update a turn."""
    root = vault.layout.root
    (root / "Team").mkdir()
    (root / "Team" / "Rituals.md").write_text(
        "# Rituals\n\nThe team standup is at 9:30 every day on the Ops channel.\n", encoding="utf-8"
    )
    vault.remember("The team standup is at 9:00 every day on the Ops channel.", ts="2024-03-01T09:00:00Z")
    vault.read_notes(["Team/Rituals.md"])
    vault.remember("FYI the team standup is at 10:00 from next week.", ts="2024-03-10T09:00:00Z")
    vault.flush()
    sections = {leaf.id for leaf in vault.ls() if note_of(leaf.path) is not None}
    assert len(sections) == 1
    proposed = vault.propose_updates()["proposed"]
    assert proposed  # the two chat turns are still judged
    assert not {p.old for p in proposed} & sections and not {p.new for p in proposed} & sections


_KILLED_BETWEEN_FILES_AND_ROWS = """
import os, signal, sys
from vaultmem import docsync
from vaultmem import linkcheck
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

docsync.Syncer._rows = lambda self, batch: os.kill(os.getpid(), signal.SIGKILL)
vault = Vault.open(sys.argv[1], embedder=FakeEmbedder())
vault.read_notes(["Travel/Kyoto trip.md"])
"""


def test_a_note_read_killed_between_its_files_and_its_rows_is_finished_on_open(vault: Vault) -> None:
    """The document node is a file (the step replays it); the sections are rows only. A kill -9 between
    the two left the note out of step until `check --fix`: now the next open reads the note again."""
    import subprocess
    import sys

    root = vault.layout.root
    _kyoto_note(root)
    vault.close()
    repo = Path(__file__).resolve().parent.parent
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_BETWEEN_FILES_AND_ROWS, str(root)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == -9, child.stderr
    assert (root / "sources" / "travel" / "kyoto-trip" / "_summary.md").exists()  # the files were written
    assert list((root / ".vaultmem" / "notes-pending").glob("*.json"))
    again = Vault.open(root, embedder=FakeEmbedder())
    try:
        assert again.check().ok
        assert sorted(_sections(again, "Travel/Kyoto trip.md")) == [
            "Kyoto trip",
            "Kyoto trip > Food",
            "Kyoto trip > Lodging > Ryokan",
            "Kyoto trip > Transport",
        ]
        assert not list((root / ".vaultmem" / "notes-pending").glob("*.json"))
    finally:
        again.close()


def test_compact_leaves_the_sections_of_a_note_it_already_read_alone(vault: Vault) -> None:
    """`compact`'s catch-up compares every row with its file: a section's path names no file of its own,
    so it took every note's sections for deleted, dropped them, marked their documents stale and read
    the notes again (and a kill in between left every note out of step: test_faults' kill loop)."""
    from vaultmem.reconcile import catch_up

    root = vault.layout.root
    _kyoto_note(root)
    vault.read_notes(["Travel/Kyoto trip.md"])
    vault.flush()
    before = _rows(vault)
    caught = catch_up(vault.conn, vault.layout, vault.config.max_file_bytes)
    assert caught.deleted == [] and caught.stale == []
    assert _rows(vault) == before
    vault.compact()
    assert [r[0] for r in _rows(vault)] == [r[0] for r in before]
    assert vault.check().ok


def _node(vault: Vault, leaf_id: str) -> tuple[str, str, str]:
    """(id, path, source) of the document node a section hangs under."""
    row = vault.conn.execute(
        "SELECT n.id, n.path, n.source FROM chunks n JOIN chunks l ON l.parent = n.id WHERE l.id = ?",
        (leaf_id,),
    ).fetchone()
    return tuple(row)  # type: ignore[return-value]


def _moved_across(vault: Vault, before: dict[str, tuple[str, str, str | None]], node_id: str) -> None:
    """The note now at ``Archive/2026/Kyoto trip.md`` is the same document: same section ids and node
    id, its node under ``sources/archive/`` with the page's keys, nothing left under ``sources/travel/``."""
    root = vault.layout.root
    after = _sections(vault, "Archive/2026/Kyoto trip.md")
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
    assert not _sections(vault, "Travel/Kyoto trip.md")
    nodes = {_node(vault, v[0]) for v in after.values()}
    assert len(nodes) == 1
    (found, path, source) = nodes.pop()
    assert found == node_id and source == "archive"
    assert path == "sources/archive/2026/kyoto-trip/_summary.md"
    text = (root / path).read_text(encoding="utf-8")
    assert "note_path: Archive/2026/Kyoto trip.md" in text and "tags: [travel]" in text
    assert {leaf.source for leaf in vault.ls()} == {"archive"}
    assert not (root / "sources" / "travel").exists() or not [
        p for p in (root / "sources" / "travel").rglob("*") if p.is_file()
    ]
    assert (root / "Archive" / "2026" / "Kyoto trip.md").read_text(encoding="utf-8") == KYOTO
    assert vault.check().ok
    ids = {leaf.id for leaf in vault.ls()}
    vault.reindex()
    assert {leaf.id for leaf in vault.ls()} == ids
    assert {_node(vault, i)[0] for i in ids} == {node_id}


def _read_kyoto(vault: Vault) -> tuple[dict[str, tuple[str, str, str | None]], str]:
    _kyoto_note(vault.layout.root)
    vault.read_notes(["Travel/Kyoto trip.md"])
    before = _sections(vault, "Travel/Kyoto trip.md")
    (root_id,) = {v[2] for v in before.values()}
    assert root_id is not None
    return before, root_id


def test_a_note_moved_to_another_top_folder_keeps_its_document_and_ids(vault: Vault) -> None:
    before, node_id = _read_kyoto(vault)
    root = vault.layout.root
    (root / "Archive" / "2026").mkdir(parents=True)
    os.rename(root / "Travel" / "Kyoto trip.md", root / "Archive" / "2026" / "Kyoto trip.md")
    vault.read_notes(["Archive/2026/Kyoto trip.md"])
    _moved_across(vault, before, node_id)
    # Back to a new note at the old place: a document of its own (the moved one kept its id).
    (root / "Travel" / "Kyoto trip.md").write_text(
        "# Kyoto again\n\nA second trip in autumn.\n", encoding="utf-8"
    )
    vault.read_notes(["Travel/Kyoto trip.md"])
    assert _sections(vault, "Travel/Kyoto trip.md")
    assert {_node(vault, v[0])[0] for v in _sections(vault, "Archive/2026/Kyoto trip.md").values()} == {
        node_id
    }
    assert vault.check().ok


def test_compact_catches_up_with_a_note_moved_to_another_top_folder(vault: Vault) -> None:
    before, node_id = _read_kyoto(vault)
    root = vault.layout.root
    (root / "Archive" / "2026").mkdir(parents=True)
    os.rename(root / "Travel" / "Kyoto trip.md", root / "Archive" / "2026" / "Kyoto trip.md")
    vault.compact()
    _moved_across(vault, before, node_id)


@pytest.mark.parametrize("how", ["move", "delete_then_create"])
def test_watcher_note_moved_to_another_top_folder_keeps_its_ids(vault: Vault, how: str) -> None:
    root = vault.layout.root
    with watching(root) as daemon:
        note = _kyoto_note(root)
        settle(daemon)
        wait_for(lambda: len(_sections(vault, "Travel/Kyoto trip.md")) == 4, what="the note to be read")
        before = _sections(vault, "Travel/Kyoto trip.md")
        (node_id,) = {v[2] for v in before.values()}
        (root / "Archive" / "2026").mkdir(parents=True)
        target = root / "Archive" / "2026" / "Kyoto trip.md"
        if how == "move":
            os.rename(note, target)
        else:  # as some sync tools do: the old file goes, then the new one is written
            data = note.read_bytes()
            note.unlink()
            target.write_bytes(data)
        settle(daemon)
        wait_for(
            lambda: {note_of(leaf.path) for leaf in vault.ls()} == {"Archive/2026/Kyoto trip.md"},
            what="the move to be read",
        )
        settle(daemon)
    assert node_id is not None
    _moved_across(vault, before, node_id)


def test_reindex_is_one_transaction_a_reader_never_sees_a_node_without_its_sections(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader on its own connection, at the moment ``reindex`` reads the notes again (their sections
    have no files: the index rows of the files are already replaced), sees the old index whole."""
    import sqlite3

    _read_kyoto(vault)
    (vault.layout.root / "Travel" / "Osaka.md").write_text(
        "# Osaka\n\n## Food\n\nTakoyaki in Dotonbori.\n", encoding="utf-8"
    )
    vault.read_notes(["Travel/Osaka.md"])
    orphan_nodes = (
        "SELECT n.id FROM chunks n WHERE n.kind = 'summary' AND json_extract(n.provenance, '$.note')"
        " IS NOT NULL AND NOT EXISTS (SELECT 1 FROM chunks l WHERE l.parent = n.id AND l.kind = 'leaf')"
    )
    nodes = "SELECT count(*) FROM chunks WHERE kind = 'summary' AND json_extract(provenance, '$.note') IS NOT NULL"
    reader = sqlite3.connect(vault.layout.db)
    assert reader.execute(nodes).fetchone()[0] == 2
    seen: list[tuple[int, list[tuple[str]]]] = []
    read_notes = Vault.read_notes

    def observed(self: Vault, rels: object, gone: object = ()) -> list[str]:
        seen.append((reader.execute(nodes).fetchone()[0], reader.execute(orphan_nodes).fetchall()))
        return read_notes(self, rels, gone)  # type: ignore[arg-type]

    monkeypatch.setattr(Vault, "read_notes", observed)
    ids = {leaf.id for leaf in vault.ls()}
    vault.reindex()
    reader.close()
    assert seen and all(count == 2 and orphans == [] for count, orphans in seen), seen
    assert {leaf.id for leaf in vault.ls()} == ids


def test_one_place_says_which_rows_have_files_of_their_own(vault: Vault) -> None:
    """``index.has_file`` and its SQL form ``index.WITH_FILE`` agree on every row of a vault holding a
    note's sections, leaf files, levels and paths that only look alike; ``file_of`` names the note."""
    from vaultmem import index

    _read_kyoto(vault)
    vault.ingest_messages([Message(source="chat", text="The ryokan in Kyoto wants a deposit by Friday.")])
    tricky = [
        "Travel/a#b.md",
        "Travel/x.md#0123456789abcdeF",  # not a leaf id (upper case)
        "Travel/x.md#0123456789abcde",  # 15 digits
        "Travel/x.txt#0123456789abcdef",
        "Travel/#x.md#0123456789abcdef",
    ]
    rows = [str(r[0]) for r in vault.conn.execute("SELECT path FROM chunks")]
    with_file = {str(r[0]) for r in vault.conn.execute(f"SELECT path FROM chunks WHERE {index.WITH_FILE}")}
    sections = [p for p in rows if p.startswith("Travel/Kyoto trip.md#")]
    assert len(sections) == 4 and any(p.startswith("sources/chat/") for p in rows)
    assert {p for p in rows if index.has_file(p)} == with_file == set(rows) - set(sections)
    assert {index.file_of(p) for p in sections} == {"Travel/Kyoto trip.md"}
    assert all((vault.layout.root / index.file_of(p)).is_file() for p in rows)
    for path in tricky:
        agrees = vault.conn.execute(f"SELECT {index.WITH_FILE} FROM (SELECT ? AS path)", (path,)).fetchone()[
            0
        ]
        assert bool(agrees) == index.has_file(path), path
    assert not index.has_file("Travel/#x.md#0123456789abcdef")


def test_context_links_of_a_note_section_open_the_note(
    vault: Vault, capsys: pytest.CaptureFixture[str]
) -> None:
    """`context --json` gave each item a file link made from its row's path: a section's path names no
    file (``…/Kyoto%20trip.md%23<id>``); the link is its note's."""
    import json

    from tests.helpers import run

    _read_kyoto(vault)
    vault.flush()
    root = vault.layout.root
    code, out, _ = run(
        ["context", "ryokan kaiseki", "--budget", "300", "--vault", str(root), "--json"], capsys
    )
    assert code == 0
    links = [item["link"] for item in json.loads(out)["items"] if "#" in item["path"]]
    assert links and set(links) == {(root / "Travel" / "Kyoto trip.md").as_uri()}


def test_a_notes_document_node_takes_edits_of_its_own_text_and_keys_never_the_notes(vault: Vault) -> None:
    """The node's ``_summary.md`` is the engine's: ``update_content`` edits its text (a hand edit, kept
    when the note changes), a key a person adds to it stays; what would stand for the note (a child
    appended, the node deleted) is refused with what to do instead, and the note is never written."""
    root = vault.layout.root
    before, node_id = _read_kyoto(vault)
    note = root / "Travel" / "Kyoto trip.md"
    vault.update_content(node_id, "Our Kyoto trip: ryokan, food, transport card.")
    (node,) = [p for p in (root / "sources").rglob("_summary.md") if node_id in p.read_text(encoding="utf-8")]
    text = node.read_text(encoding="utf-8")
    assert "Our Kyoto trip: ryokan, food, transport card." in text
    node.write_text(text.replace("---\n", "---\nrating: 5\n", 1), encoding="utf-8")  # a person's own key
    vault.compact()
    with pytest.raises(InvalidInput, match="write the new text in the note itself"):
        vault.append_child(node_id, "A day trip to Nara.")
    with pytest.raises(InvalidInput, match="delete or move the note itself"):
        vault.delete(node_id)
    with pytest.raises(InvalidInput, match="edit or delete the note"):
        vault.update_content(before["Kyoto trip > Food"][0], "Ramen instead.")
    assert note.read_text(encoding="utf-8") == KYOTO
    note.write_text(KYOTO.replace("Okonomiyaki in Gion", "Yudofu near Nanzen-ji"), encoding="utf-8")
    vault.read_notes(["Travel/Kyoto trip.md"])
    text = node.read_text(encoding="utf-8")
    assert "rating: 5" in text and "Our Kyoto trip: ryokan, food, transport card." in text
    assert hits(vault, "Yudofu") and vault.check().ok
    assert {k: v[0] for k, v in _sections(vault, "Travel/Kyoto trip.md").items()} == {
        k: v[0] for k, v in before.items()
    }


def test_watcher_rescan_finds_a_note_moved_to_another_top_folder_while_it_was_stopped(vault: Vault) -> None:
    before, node_id = _read_kyoto(vault)
    root = vault.layout.root
    (root / "Archive" / "2026").mkdir(parents=True)
    os.rename(root / "Travel" / "Kyoto trip.md", root / "Archive" / "2026" / "Kyoto trip.md")
    with watching(root) as daemon:  # its start-up rescan finds the move
        wait_for(
            lambda: {note_of(leaf.path) for leaf in vault.ls()} == {"Archive/2026/Kyoto trip.md"},
            what="the move to be read",
        )
        settle(daemon)
    _moved_across(vault, before, node_id)


ODD_HEADINGS = (
    "---\ntags: [travel]\n---\n"
    "Packed the JR pass and the ICOCA card before anything else.\n\n"  # text before any heading
    "# Osaka trip\n\n"
    "## Day 1\n\n### Food\n\nTakoyaki in Dotonbori.\n\n"
    "## Day 2\n\n### Food\n\nKushikatsu in Shinsekai.\n\n### Food\n\nA second food note for day 2.\n\n"
    "## Q&A: costs #2\n\nThe pass paid for itself by day 3.\n\n"
    "## Price [EUR]\n\nAbout 300 EUR for the week.\n\n"
    "## Trains | buses ^x\n\nThe loop line runs every 5 minutes.\n\n"
    "## 住宿\n\n### 旅馆\n\n道顿堀附近的旅馆，一晚一万日元。\n"
)


def test_a_notes_node_links_each_section_by_the_heading_obsidian_lands_on(vault: Vault) -> None:
    root = vault.layout.root
    (root / "Travel").mkdir()
    (root / "Travel" / "Osaka trip.md").write_text(ODD_HEADINGS, encoding="utf-8")
    vault.read_notes(["Travel/Osaka trip.md"])
    vault.flush()
    node_path = "sources/travel/osaka-trip/_summary.md"
    node = vault.summary(
        vault.conn.execute("SELECT id FROM chunks WHERE path = ?", (node_path,)).fetchone()[0]
    )
    by_text = {vault.get(str(c.linked_id)).text.split("\n\n", 1)[-1]: c for c in node.children}
    targets = {text[:22]: (c.target, c.label) for text, c in by_text.items()}
    note = "Travel/Osaka trip"
    assert targets == {
        "Packed the JR pass and": (note, "Osaka trip"),  # the preamble: the note itself
        "Takoyaki in Dotonbori.": (f"{note}#Food", "Day 1 › Food"),
        "Kushikatsu in Shinseka": (f"{note}#Day 2#Food", "Day 2 › Food"),
        "A second food note for": (note, "Day 2 › Food"),  # no heading link reaches a repeat
        "The pass paid for itse": (f"{note}#Q&A costs 2", "Q&A: costs #2"),
        "About 300 EUR for the ": (note, "Price EUR"),  # a wikilink cannot hold ``[``
        "The loop line runs eve": (f"{note}#Trains buses x", "Trains / buses ^x"),
        "道顿堀附近的旅馆，一晚一万日元。": (f"{note}#旅馆", "住宿 › 旅馆"),
    }
    assert all(c.wiki for c in node.children)
    # Every link of the vault resolves, the node's included: no ghost note, no heading that is not there.
    checked, bad = linkcheck.vault_links(vault.layout)
    assert checked == len(node.children) and bad == []
    assert vault.check().ok
    # The same links after reindex (the anchors are read again from the note).
    before = (root / node_path).read_text(encoding="utf-8")
    vault.reindex()
    assert (root / node_path).read_text(encoding="utf-8") == before and vault.check().ok


def test_a_renamed_heading_is_linked_anew_and_check_reports_a_link_that_lands_nowhere(vault: Vault) -> None:
    root = vault.layout.root
    _kyoto_note(root)
    vault.read_notes(["Travel/Kyoto trip.md"])
    vault.flush()
    assert vault.check().ok
    node = root / "sources/travel/kyoto-trip/_summary.md"
    assert "- [[Travel/Kyoto trip#Food|Food]]" in node.read_text(encoding="utf-8")
    (root / "Travel" / "Kyoto trip.md").write_text(KYOTO.replace("## Food", "## Sweets"), encoding="utf-8")
    vault.read_notes(["Travel/Kyoto trip.md"])  # the node follows the note: its link is right again
    assert "[[Travel/Kyoto trip#Sweets|Sweets]]" in node.read_text(encoding="utf-8") and vault.check().ok
    # A link the engine wrote that Obsidian cannot follow (a level that is not there) is a problem.
    vault.compact()  # the node re-summarised: no longer stale (a stale level's list lags until then)
    text = node.read_text(encoding="utf-8")
    node.write_text(
        text.replace("## Children\n\n", "## Children\n\n- [Lost level](<07-gone level/_summary.md>)\n")
    )
    vault.reindex()
    problems = [(p.code, p.path) for p in vault.check().problems]
    assert problems == [("unresolved_link", "sources/travel/kyoto-trip/_summary.md")]
