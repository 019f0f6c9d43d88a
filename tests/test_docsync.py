"""Documents stay whole and current (#15): one file, one subtree, updated in place; metadata and links kept.

Real files, real SQLite, a real watchdog daemon for the note tests; inputs written for the test (an
Obsidian-help-like documentation vault, a price list that changes, notes saved the way editors save)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.docs_vault import write_docs_vault
from tests.helpers import (
    hits,
    save_in_place,
    save_temp_rename,
    save_vim_backup,
    settle,
    wait_for,
    watching,
)
from vaultmem import linkcheck, wikilinks
from vaultmem.embed import FakeEmbedder
from vaultmem.layout import Layout
from vaultmem.summaryfile import ChildLink, SummaryNode, parse_summary, render_summary
from vaultmem.vault import Vault


# -- links --------------------------------------------------------------------------------------------
def test_links_are_found_outside_code_only() -> None:
    text = (
        "See [[Settings]], [[Canvas#Add cards|cards]] and ![[icon.svg]] or [guide](Graph%20view.md).\n"
        "Inline `[[Not a link]]` and [site](https://example.com/a.md) stay.\n"
        "```md\n[[Three laws of motion]]\n```\n"
        "[[#Local heading]]"
    )
    links = [link for _s, _e, link in wikilinks.find_links(text)]
    assert [(lk.target, lk.anchor, lk.alias, lk.embed) for lk in links] == [
        ("Settings", "", "", False),
        ("Canvas", "Add cards", "cards", False),
        ("icon.svg", "", "", True),
        ("Graph view", "", "guide", False),
        ("", "Local heading", "", False),
    ]
    assert [lk.label for lk in links] == ["Settings", "cards", "icon.svg", "guide", "Local heading"]
    out = wikilinks.rewrite(text, lambda lk: f"<{lk.label}>")
    assert "<Settings>" in out and "[[Three laws of motion]]" in out and "`[[Not a link]]`" in out


# Headings as a person writes them: repeated ones, link syntax inside, Chinese, one with no text.
HEADINGS = [
    (1, "Kyoto trip"),
    (2, "Day 1"),
    (3, "Food"),
    (2, "Day 2"),
    (3, "Food"),
    (3, "Food"),
    (2, "Q&A: costs #2"),
    (2, "Price [EUR]"),
    (2, "A | B ^x"),
    (2, "住宿"),
    (3, "旅馆"),
]


def test_heading_links_land_where_obsidian_lands_them() -> None:
    assert wikilinks.strip_heading("Q&A: costs #2") == "Q&A costs 2"
    assert wikilinks.strip_heading("A | B ^x") == "A B x"
    anchors = [wikilinks.heading_anchor(HEADINGS, i) for i in range(len(HEADINGS))]
    assert anchors == [
        "Kyoto trip",
        "Day 1",
        "Food",  # the first of the name
        "Day 2",
        "Day 2#Food",  # told apart by its parent
        "",  # the same name under the same parent: no link reaches it (the note alone)
        "Q&A costs 2",  # ``:`` and ``#`` read as spaces, as Obsidian links it
        "",  # a wikilink cannot hold ``[``
        "A B x",
        "住宿",
        "旅馆",
    ]
    for i, anchor in enumerate(anchors):
        if anchor:
            assert wikilinks.resolve_heading(HEADINGS, anchor) == i
    assert wikilinks.resolve_heading(HEADINGS, "kyoto TRIP#day 2#FOOD") == 4  # any case, a path
    assert wikilinks.resolve_heading(HEADINGS, "Day 3") is None
    link = wikilinks.section_link("Day 2 › Food", "Travel/Kyoto trip.md", "Day 2#Food", "d39090de9df50170")
    assert (link.target, link.wiki, link.linked_id) == (
        "Travel/Kyoto trip#Day 2#Food",
        True,
        "d39090de9df50170",
    )
    # A note name a wikilink cannot hold gets a Markdown link from the summary's folder.
    odd = wikilinks.section_link("Food", "Travel/[draft] Kyoto.md", "Food", "d39090de9df50170", "sources/t/k")
    assert (odd.target, odd.wiki) == ("../../../Travel/[draft] Kyoto.md#Food", False)


def test_summary_children_read_back_in_every_form_ever_written() -> None:
    node = SummaryNode(
        id="s0123456789abcde",
        source="travel",
        path="sources/travel/kyoto-trip/_summary.md",
        depth=1,
        title="Kyoto trip",
        text="Kyoto trip",
        children=(
            wikilinks.section_link("Kyoto trip", "Travel/Kyoto trip.md", "", "0000000000000001"),
            wikilinks.section_link("Day 2 › Food", "Travel/Kyoto trip.md", "Day 2#Food", "0000000000000002"),
            wikilinks.section_link("住宿 › 旅馆", "Travel/Kyoto trip.md", "旅馆", "0000000000000003"),
            ChildLink("2024-05-01 Yui: the ryokan", "2024-05-01-0000000000000004", wiki=True),
        ),
    )
    text = render_summary(node)
    assert "- [[Travel/Kyoto trip|Kyoto trip]] %%0000000000000001%%\n" in text
    assert "- [[Travel/Kyoto trip#Day 2#Food|Day 2 › Food]] %%0000000000000002%%\n" in text
    parsed, _ = parse_summary(text, node.path)
    assert parsed.children == node.children
    assert [c.linked_id for c in parsed.children] == [f"000000000000000{n}" for n in range(1, 5)]
    # A node an older vaultmem wrote: Markdown links to the note's headings, read as they are.
    old = text.split("## Children", 1)[0] + (
        "## Children\n\n- [Lodging › Ryokan](<../../../Travel/Kyoto trip.md#Ryokan>)\n"
        "- [01 level](01-level/_summary.md)\n"
    )
    children = parse_summary(old, node.path)[0].children
    assert [(c.target, c.wiki, c.linked_id) for c in children] == [
        ("../../../Travel/Kyoto trip.md#Ryokan", False, None),
        ("01-level/_summary.md", False, None),
    ]


def test_the_link_check_sees_every_form_the_engine_writes(tmp_path: Path) -> None:
    root = tmp_path / "v"
    (root / "Travel").mkdir(parents=True)
    (root / "Travel" / "Kyoto trip.md").write_text(
        "# Kyoto trip\n\n## Day 1\n\n### Food\n\nRamen. ^ramen\n\n## Day 2\n\n### Food\n\nSoba.\n",
        encoding="utf-8",
    )
    (root / "Travel" / "icon.svg").write_text("<svg/>", encoding="utf-8")
    node = root / "sources" / "travel" / "kyoto-trip"
    node.mkdir(parents=True)
    (node / "_summary.md").write_text(
        "---\nid: s0123456789abcde\n---\nKyoto.\n\n## Children\n\n"
        "- [[Travel/Kyoto trip#Day 2#Food|Day 2 › Food]] %%0000000000000002%%\n"
        "- [[Travel/Kyoto trip#Day 3|Day 3]] %%0000000000000003%%\n"  # no such heading
        "- [Day 1](<../../../Travel/Kyoto trip.md#Day 1>)\n"
        "- [Day 9](<../../../Travel/Kyoto trip.md#Day 9>)\n"  # no such heading
        "- [Gone](<../../../Travel/Osaka trip.md>)\n"  # no such note
        "- [[Kyoto trip#^ramen|ramen]] ![[icon.svg]] [[#Children]]\n",
        encoding="utf-8",
    )
    checked, bad = linkcheck.vault_links(Layout(root))
    assert checked == 8
    assert bad == [
        ("sources/travel/kyoto-trip/_summary.md", "[[Travel/Kyoto trip#Day 3|Day 3]]"),
        ("sources/travel/kyoto-trip/_summary.md", "[Day 9](<../../../Travel/Kyoto trip.md#Day 9>)"),
        ("sources/travel/kyoto-trip/_summary.md", "[Gone](<../../../Travel/Osaka trip.md>)"),
    ]


# -- a documentation vault --------------------------------------------------------------------------------
def _leaf_files(root: Path) -> list[Path]:
    return [p for p in (root / "sources").rglob("*.md") if p.name != "_summary.md"]


def _front(path: Path) -> str:
    return path.read_text(encoding="utf-8").split("\n---\n", 1)[0]


def test_docs_vault_is_one_subtree_per_page_with_links_and_keys_kept(tmp_path: Path) -> None:
    pages = write_docs_vault(tmp_path / "help", pages=120)
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        report = vault.ingest_path(tmp_path / "help", source="help")
        assert len(report.added) >= 5 * 120 and not report.updated and not report.removed
        vault.compact()
        root = vault.layout.root
        # Each page's sections live in one folder, under the folders of the original tree.
        by_page: dict[str, set[str]] = {}
        for leaf in vault.ls():
            by_page.setdefault(str(leaf.session), set()).add(str(Path(leaf.path).parent))
        assert set(by_page) == set(pages)
        assert all(len(folders) == 1 for folders in by_page.values())
        canvas = by_page["Editing and formatting/Canvas.md"].pop()
        assert canvas == "sources/help/editing-and-formatting/canvas"
        assert (root / "sources/help/plugins/core").is_dir()
        assert (root / "sources/help/getting-started/快速开始/_summary.md").is_file()
        folder = (root / "sources/help/editing-and-formatting/_summary.md").read_text(encoding="utf-8")
        assert "title: Editing and formatting" in folder and "document: Editing and formatting/" in folder
        # The document node keeps the page's own keys; each leaf says its title and heading path.
        node = root / canvas / "_summary.md"
        head = _front(node)
        assert "tags: [help, editing-and-formatting]" in head
        assert 'description: "How to use Canvas in Obsidian: where to find it, what it does."' in head
        assert "permalink: canvas" in head and "mobile: true" in head
        assert "aliases: [Canvas, Canvas help, How to use Canvas]" in head
        assert "title: Canvas" in head and "document: Editing and formatting/Canvas.md" in head
        texts = sorted(p.read_text(encoding="utf-8") for p in (root / canvas).glob("*-*.md"))
        assert any("## Canvas › Use it › Keyboard" in t for t in texts)
        # The compactor left the documents alone: no numbered cluster levels.
        assert not [p for p in (root / "sources/help").iterdir() if re.match(r"\d\d-", p.name)]
        # Obsidian finds every link: pages and headings rewritten, missing targets made plain text.
        checked, bad = linkcheck.vault_links(vault.layout)
        assert checked > 1000 and bad == []
        joined = "\n".join(texts)
        assert "Community forum" in joined and "[[Community forum]]" not in joined
        assert "[[Three laws of motion]]" in joined  # a code sample, untouched
        assert "canvas-icon.svg" in joined and "![[canvas-icon.svg]]" not in joined
        assert vault.check().ok
        before = {leaf.id: leaf.path for leaf in vault.ls()}
        vault.reindex()
        assert {leaf.id: leaf.path for leaf in vault.ls()} == before
        assert vault.check().ok


def test_docs_vault_as_notes_in_the_vault_is_one_subtree_per_page_and_adds_no_broken_link(
    tmp_path: Path,
) -> None:
    """The same documentation vault written by hand inside the vault: indexed where it is, each page's
    sections under one document node in the folders of the original tree, every link the engine writes
    resolving (node children name the pages' headings), the pages' own broken links left to them."""
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        root = vault.layout.root
        pages = [f"Obsidian Help/{p}" for p in write_docs_vault(root / "Obsidian Help", pages=120)]
        texts = {p: (root / p).read_text(encoding="utf-8") for p in pages}
        _checked, theirs = linkcheck.vault_links(vault.layout)
        assert theirs  # the pages link to pages the vault does not hold (``[[Community forum]]``)
        vault.read_notes(pages)
        vault.compact()
        nodes: dict[str, set[str | None]] = {}
        for leaf in vault.ls():
            nodes.setdefault(str(leaf.meta["note"]), set()).add(
                vault.conn.execute("SELECT parent FROM chunks WHERE id = ?", (leaf.id,)).fetchone()[0]
            )
        assert set(nodes) == set(pages) and all(len(parents) == 1 for parents in nodes.values())
        canvas = root / "sources/obsidian-help/editing-and-formatting/canvas/_summary.md"
        assert (root / "sources/obsidian-help/plugins/core").is_dir()
        assert (root / "sources/obsidian-help/getting-started/快速开始/_summary.md").is_file()
        head = _front(canvas)
        assert "tags: [help, editing-and-formatting]" in head and "permalink: canvas" in head
        assert "aliases: [Canvas, Canvas help, How to use Canvas]" in head
        body = canvas.read_text(encoding="utf-8")
        assert "- [[Obsidian Help/Editing and formatting/Canvas#Keyboard|Use it › Keyboard]] %%" in body
        # Every link outside the pages resolves, node children included; the pages are never written.
        checked, bad = linkcheck.vault_links(vault.layout)
        assert checked > 2000 and sorted(bad) == sorted(theirs)
        assert all(not rel.startswith(("sources/", "topics/", "global/")) for rel, _link in bad)
        assert all((root / p).read_text(encoding="utf-8") == text for p, text in texts.items())
        assert vault.check().ok


# -- re-ingest --------------------------------------------------------------------------------------------
PRICES_V1 = """---
tags: [pricing]
description: What Obsidian costs.
---
# Pricing

Obsidian is free for personal use.

## Sync

Sync costs 8 USD a month, billed yearly.

## Publish

Publish costs 10 USD a month per site.

## Catalyst

A one-time payment of 25 USD gives early access.
"""

PRICES_V2 = """---
tags: [pricing, plans]
description: What Obsidian costs.
---
# Pricing

Obsidian is free for personal use.

## Catalyst

A one-time payment of 25 USD gives early access.

## Sync

Sync costs 4 USD a month, billed yearly.

## Commercial license

Companies of two or more pay 50 USD a year per user.
"""


def _ids(vault: Vault, name: str) -> dict[str, str]:
    return {str(leaf.meta.get("heading_path")): leaf.id for leaf in vault.ls() if leaf.session == name}


def test_reingest_replaces_changed_sections_in_place(tmp_path: Path) -> None:
    docs = tmp_path / "shop"
    docs.mkdir()
    (docs / "Pricing.md").write_text(PRICES_V1, encoding="utf-8")
    (docs / "Plans.md").write_text("# Plans\n\nSee [[Pricing#Sync|the Sync price]].\n", encoding="utf-8")
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_path(docs)
        vault.flush()
        first = _ids(vault, "Pricing.md")
        catalyst = vault.layout.root / vault.get(first["Pricing > Catalyst"]).path
        # A person's own key on a leaf survives the edits of its section.
        data = catalyst.read_text(encoding="utf-8").replace("\n---\n", "\nmy-note: keep this\n---\n", 1)
        catalyst.write_text(data, encoding="utf-8")
        vault.reconcile_paths([vault.layout.rel(catalyst)])
        node_before = vault.layout.root / "sources/shop/pricing/_summary.md"
        node_id = re.search(r"^id: (\S+)$", node_before.read_text(encoding="utf-8"), re.M)
        (docs / "Pricing.md").write_text(PRICES_V2, encoding="utf-8")
        report = vault.ingest_path(docs)
        vault.flush()
        second = _ids(vault, "Pricing.md")
        assert len(report.updated) >= 1 and len(report.removed) == 1 and len(report.added) == 1
        # Surviving sections keep their leaves; the removed one is gone; the new one joined.
        assert second["Pricing"] == first["Pricing"] and second["Pricing > Sync"] == first["Pricing > Sync"]
        assert second["Pricing > Catalyst"] == first["Pricing > Catalyst"]
        assert "Pricing > Publish" not in second and "Pricing > Commercial license" in second
        assert "my-note: keep this" in catalyst.read_text(encoding="utf-8")
        assert not hits(vault, "8 USD") and hits(vault, "4 USD")
        assert not [h for h in vault.search("Publish costs 10 USD", k=20) if "Publish costs" in h.text]
        # The reading order follows the file; the node kept its id and took the page's new keys.
        order = [
            leaf.meta.get("heading_path")
            for leaf in sorted(
                (lf for lf in vault.ls() if lf.session == "Pricing.md"), key=lambda lf: float(lf.order or 0)
            )
        ]
        assert order == ["Pricing", "Pricing > Catalyst", "Pricing > Sync", "Pricing > Commercial license"]
        node = node_before.read_text(encoding="utf-8")
        assert node_id is not None and f"id: {node_id.group(1)}" in node and "tags: [pricing, plans]" in node
        # What left the vault is recoverable from Obsidian's trash.
        kept = list((vault.layout.root / ".trash/vaultmem").rglob("*.md"))
        assert any("Publish costs 10 USD" in p.read_text(encoding="utf-8") for p in kept)
        # The heading link still points at the leaf holding "Sync".
        plans = next(p for p in (vault.layout.root / "sources/shop/plans").glob("*-*.md"))
        assert f"{second['Pricing > Sync']}|the Sync price]]" in plans.read_text(encoding="utf-8")
        assert vault.check().ok
        # Nothing changed: nothing is written.
        again = vault.ingest_path(docs)
        assert not again.added and not again.updated and not again.removed


def test_section_renamed_or_moved_keeps_its_leaf_and_a_renamed_file_is_the_same_document(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "notes"
    (docs / "Guides").mkdir(parents=True)
    page = docs / "Guides" / "Backup.md"
    page.write_text(
        "# Backup\n\n## Daily\n\nCopy the vault folder to the NAS every night at two.\n\n"
        "## Weekly\n\nRotate the external drive on Sundays and keep one copy off site.\n",
        encoding="utf-8",
    )
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_path(docs)
        first = _ids(vault, "Guides/Backup.md")
        # "Daily" renamed "Every night" (same words), "Weekly" moved above it.
        page.write_text(
            "# Backup\n\n## Weekly\n\nRotate the external drive on Sundays and keep one copy off site.\n\n"
            "## Every night\n\nCopy the vault folder to the NAS every night at two.\n",
            encoding="utf-8",
        )
        vault.ingest_path(docs)
        second = _ids(vault, "Guides/Backup.md")
        assert second["Backup > Weekly"] == first["Backup > Weekly"]
        assert second["Backup > Every night"] == first["Backup > Daily"]
        # The file moves to another folder under another name: the same document, the same leaves.
        (docs / "Archive").mkdir()
        os.rename(page, docs / "Archive" / "Backups.md")
        vault.ingest_path(docs)
        third = _ids(vault, "Archive/Backups.md")
        assert set(third.values()) == set(second.values())
        assert not _ids(vault, "Guides/Backup.md")
        folder = {str(Path(vault.get(i).path).parent) for i in third.values()}
        assert folder == {"sources/notes/archive/backups"}
        assert vault.check().ok


# -- notes under the real watcher ----------------------------------------------------------------------------
NOTE_VERSIONS = [
    "# Groceries\n\nBuy oat milk.\n",
    "# Groceries\n\nBuy oat milk and rye bread.\n",
    "# Groceries\n\nBuy oat milk and rye bread.\n\n## Hardware\n\nA hinge for the shed door.\n",
    "# Groceries\n\nBuy oat milk, rye bread and capers.\n\n## Hardware\n\nA hinge for the shed door.\n",
    "---\ntags: [home]\n---\n# Groceries\n\nBuy oat milk, rye bread and quince jam.\n\n"
    "## Hardware\n\nTwo hinges for the shed door.\n",
]


@pytest.mark.parametrize("save", [save_in_place, save_temp_rename, save_vim_backup])
def test_note_saved_five_times_ends_as_its_last_version(
    vault: Vault, save: Callable[[Path, bytes], None]
) -> None:
    root = vault.layout.root
    note = root / "home" / "Groceries.md"
    note.parent.mkdir()
    note.write_text("", encoding="utf-8")
    with watching(root) as daemon:
        for text in NOTE_VERSIONS:
            save(note, text.encode())
            settle(daemon)
        wait_for(lambda: hits(vault, "quince"), what="the last version to be searchable")
        leaves = [leaf for leaf in vault.ls() if leaf.session == "Groceries.md"]
        assert sorted(leaf.meta.get("heading_path") for leaf in leaves) == [
            "Groceries",
            "Groceries > Hardware",
        ]
        assert not hits(vault, "capers") and not hits(vault, "hinge ")
        assert hits(vault, "hinges")
        summary = root / "sources/home/groceries/_summary.md"
        assert "tags: [home]" in summary.read_text(encoding="utf-8")
        # Indexed where it is: one row per section at ``<note>#<id>``, no copy under sources/.
        assert {leaf.path for leaf in leaves} == {f"home/Groceries.md#{leaf.id}" for leaf in leaves}
        assert sorted(p.name for p in summary.parent.iterdir()) == ["_embeddings.json", "_summary.md"]
        assert note.read_text(encoding="utf-8") == NOTE_VERSIONS[-1]  # the note itself is never touched
        note.unlink()
        settle(daemon)
        wait_for(lambda: not hits(vault, "quince"), what="the deleted note to leave search")
        assert not [leaf for leaf in vault.ls() if leaf.session == "Groceries.md"]
        assert not (root / "sources/home/groceries").exists()
    assert vault.check().ok


def test_empty_note_from_a_dead_link_is_never_a_memory(vault: Vault) -> None:
    root = vault.layout.root
    with watching(root) as daemon:
        (root / "Community forum.md").write_text(
            "", encoding="utf-8"
        )  # Obsidian: a click on [[Community forum]]
        (root / "Blank.md").write_text("---\ntags: []\n---\n\n", encoding="utf-8")
        settle(daemon)
        assert not vault.ls()
        (root / "Community forum.md").write_text("# Community forum\n\nThe forum is at forum.example.org.\n")
        wait_for(lambda: hits(vault, "forum.example.org"), what="the note, once written, to be found")
    assert vault.check().ok


def test_renamed_note_is_the_same_document(vault: Vault) -> None:
    root = vault.layout.root
    (root / "journal").mkdir()
    note = root / "journal" / "Trip.md"
    with watching(root) as daemon:
        note.write_text("# Trip\n\n## Day one\n\nThe okonomiyaki place in Osaka opens at five.\n")
        wait_for(lambda: hits(vault, "okonomiyaki"), what="the note to be searchable")
        settle(daemon)
        before = {leaf.id for leaf in vault.ls()}
        os.rename(note, root / "journal" / "Osaka trip.md")
        settle(daemon)
        wait_for(
            lambda: {leaf.session for leaf in vault.ls()} == {"Osaka trip.md"}, what="the rename to be read"
        )
        assert {leaf.id for leaf in vault.ls()} == before
    assert vault.check().ok


def test_json_report_of_a_document_ingest(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    docs = tmp_path / "shop"
    docs.mkdir()
    (docs / "Pricing.md").write_text(PRICES_V1, encoding="utf-8")
    run_cli("init", str(tmp_path / "v"))
    first = json.loads(run_cli("ingest", str(docs), "--vault", str(tmp_path / "v"), "--json").stdout)
    (docs / "Pricing.md").write_text(PRICES_V2, encoding="utf-8")
    second = json.loads(run_cli("ingest", str(docs), "--vault", str(tmp_path / "v"), "--json").stdout)
    assert first["added"] == 4 and second["added"] == 1
    assert second["updated"] >= 1 and second["removed"] == 1


def test_check_reports_a_document_behind_its_note_and_fix_catches_up(vault: Vault) -> None:
    root = vault.layout.root
    note = root / "home" / "Boiler.md"
    note.parent.mkdir()
    note.write_text("# Boiler\n\nThe boiler service is due in March.\n", encoding="utf-8")
    vault.read_notes(["home/Boiler.md"])
    assert vault.check().ok
    note.write_text("# Boiler\n\nThe boiler service moved to April.\n", encoding="utf-8")  # no watcher ran
    report = vault.check()
    assert [(p.code, p.path) for p in report.problems] == [("document_out_of_step", "home/Boiler.md")]
    fixed = vault.check(fix=True)
    assert [p.code for p in fixed.fixed] == ["document_out_of_step"] and vault.check().ok
    assert hits(vault, "April") and not hits(vault, "March")
    note.unlink()
    assert [p.code for p in vault.check().problems] == ["document_out_of_step"]
    vault.check(fix=True)
    assert vault.check().ok and not vault.ls()


def test_compact_catches_up_with_a_note_edited_while_no_watcher_ran(vault: Vault) -> None:
    root = vault.layout.root
    (root / "home").mkdir()
    (root / "home" / "Car.md").write_text("# Car\n\nThe tyres were changed in May.\n", encoding="utf-8")
    vault.read_notes(["home/Car.md"])
    first = {leaf.id for leaf in vault.ls()}
    (root / "home" / "Car.md").write_text("# Car\n\nThe tyres were changed in October.\n", encoding="utf-8")
    vault.compact()
    assert {leaf.id for leaf in vault.ls()} == first
    assert hits(vault, "October") and not hits(vault, "May")
    assert vault.check().ok


def test_a_note_emptied_by_hand_leaves_search(vault: Vault) -> None:
    root = vault.layout.root
    (root / "Ideas.md").write_text("# Ideas\n\nA heron-shaped kite for the beach.\n", encoding="utf-8")
    vault.read_notes(["Ideas.md"])
    assert hits(vault, "heron")
    (root / "Ideas.md").write_text("", encoding="utf-8")
    assert [p.code for p in vault.check().problems] == ["document_out_of_step"]
    vault.read_notes(["Ideas.md"])
    assert not hits(vault, "heron") and not vault.ls() and vault.check().ok


def test_page_keys_that_cannot_be_read_back_are_left_out_not_written_broken(tmp_path: Path) -> None:
    docs = tmp_path / "keys"
    docs.mkdir()
    secret = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7zB9dF1hJ3lN5pR7tV9xZ"
    (docs / "Api.md").write_text(
        f"---\ntags: [api]\ntoken: {secret} and more\n---\n# Api\n\nCall the endpoint with a token.\n",
        encoding="utf-8",
    )
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_path(docs)
        every = "".join(p.read_text(encoding="utf-8") for p in (vault.layout.root / "sources").rglob("*.md"))
        assert secret not in every
        assert vault.check().ok


def test_page_keys_named_like_the_engines_are_kept_under_from_page(tmp_path: Path) -> None:
    # A web clipping as Obsidian Web Clipper writes it: `source`, `id` and `order` are the page's own.
    docs = tmp_path / "clips"
    docs.mkdir()
    clip = (
        "---\n"
        'title: "Sourdough starter, day by day"\n'
        "source: https://example.org/baking/sourdough-starter\n"
        'author:\n  - "[[Mara Lindqvist]]"\n'
        "id: 20260301-starter\n"
        "order: 3\n"
        "tags:\n  - clippings\n  - baking\n"
        "---\n"
        "# Sourdough starter\n\nFeed the starter twice a day with equal weights of flour and water.\n"
    )
    (docs / "Sourdough starter.md").write_text(clip, encoding="utf-8")
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_path(docs)
        node = vault.layout.root / "sources/clips/sourdough-starter/_summary.md"
        text = node.read_text(encoding="utf-8")
        front = _front(node)
        # The page's keys the engine owns in a node are kept, byte for byte, under from_page.
        assert (
            "from_page:\n  source: https://example.org/baking/sourdough-starter\n"
            "  id: 20260301-starter\n  order: 3" in front
        )
        assert (
            'author:\n  - "[[Mara Lindqvist]]"\n' in front and "tags:\n  - clippings\n  - baking\n" in front
        )
        assert "\nsource: clips\n" in front and 'title: "Sourdough starter, day by day"' in front
        id_line = re.search(r"^id: (\S+)$", text, re.M)
        assert id_line is not None and id_line.group(1).startswith("s")
        assert vault.check().ok
        # The page drops its `source:`: from_page follows it; nothing is written when nothing changed.
        (docs / "Sourdough starter.md").write_text(
            clip.replace("source: https://example.org/baking/sourdough-starter\n", ""), encoding="utf-8"
        )
        vault.ingest_path(docs)
        front = _front(node)
        assert "example.org" not in front and "from_page:\n  id: 20260301-starter\n  order: 3" in front
        before = node.read_bytes()
        again = vault.ingest_path(docs)
        assert not again.added and not again.updated and node.read_bytes() == before
        assert vault.check().ok


def test_folder_levels_follow_the_pages_deeper_subfolder_raises_empty_folder_leaves(tmp_path: Path) -> None:
    docs = tmp_path / "manual"
    (docs / "Setup").mkdir(parents=True)
    (docs / "Setup/Install.md").write_text(
        "# Install\n\nRun the installer and accept the licence.\n", "utf-8"
    )
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        root = vault.layout.root

        def depth(rel: str) -> int:
            found = re.search(r"^depth: (\d+)$", (root / rel).read_text(encoding="utf-8"), re.M)
            assert found is not None
            return int(found.group(1))

        vault.ingest_path(docs)
        assert depth("sources/manual/setup/_summary.md") == 2
        # A page two folders deeper arrives later: every folder above it is one level higher than its
        # deepest child, in its file and in the index.
        (docs / "Setup/Network/Proxy").mkdir(parents=True)
        (docs / "Setup/Network/Proxy/Corporate proxy.md").write_text(
            "# Corporate proxy\n\nSet HTTPS_PROXY before the installer runs behind a proxy.\n", "utf-8"
        )
        vault.ingest_path(docs)
        assert depth("sources/manual/setup/network/proxy/_summary.md") == 2
        assert depth("sources/manual/setup/network/_summary.md") == 3
        assert depth("sources/manual/setup/_summary.md") == 4
        row = vault.conn.execute(
            "SELECT depth, status FROM chunks WHERE path = 'sources/manual/setup/_summary.md'"
        ).fetchone()
        assert (row["depth"], row["status"]) == (4, "stale")
        assert vault.check().ok
        # The page goes: its folders, left without pages, go too (recoverable); the depth comes back down.
        (docs / "Setup/Network/Proxy/Corporate proxy.md").unlink()
        vault.ingest_path(docs)
        assert not (root / "sources/manual/setup/network").exists()
        assert depth("sources/manual/setup/_summary.md") == 2
        assert not vault.conn.execute(
            "SELECT 1 FROM chunks WHERE path LIKE 'sources/manual/setup/network/%'"
        ).fetchone()
        assert any(p.name == "_summary.md" for p in (root / ".trash/vaultmem").rglob("network/_summary.md"))
        assert not hits(vault, "HTTPS_PROXY") and hits(vault, "installer")
        assert vault.check().ok


def test_heading_links_match_the_heading_path_and_block_references_their_block(tmp_path: Path) -> None:
    docs = tmp_path / "help"
    docs.mkdir()
    (docs / "Sync plans.md").write_text(
        "# Sync plans\n\n"
        "## Personal\n\n### Price\n\nPersonal sync costs 4 USD a month.\n\n"
        "## Team\n\n### Price\n\nTeam sync costs 8 USD per member a month.\n\n"
        "### Refunds\n\nA yearly plan is refunded pro rata within 30 days. ^refund-rule\n",
        encoding="utf-8",
    )
    (docs / "Billing.md").write_text(
        "# Billing\n\nSee [[Sync plans#Team#Price|team price]], [[Sync plans#Price]] and"
        " [[Sync plans#^refund-rule|the refund rule]]; ![[Sync plans#^no-such-block]].\n",
        encoding="utf-8",
    )
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_path(docs)
        ids = _ids(vault, "Sync plans.md")
        billing = next(lf for lf in vault.ls() if lf.session == "Billing.md")
        text = (vault.layout.root / billing.path).read_text(encoding="utf-8")
        team, personal = ids["Sync plans > Team > Price"], ids["Sync plans > Personal > Price"]
        refunds = ids["Sync plans > Team > Refunds"]
        # `#Team#Price` is the Price under Team, not the first Price of the page.
        assert re.search(rf"\[\[sources/help/sync-plans/[^|\]]*{team}\|team price\]\]", text)
        # `#Price` alone: the first section with that heading, in reading order.
        assert re.search(rf"\[\[sources/help/sync-plans/[^|\]]*{personal}\|Sync plans > Price\]\]", text)
        # A block reference lands on the leaf that holds the block, anchored to it (Obsidian resolves it).
        assert re.search(
            rf"\[\[sources/help/sync-plans/[^|\]]*{refunds}#\^refund-rule\|the refund rule\]\]", text
        )
        assert "^refund-rule" in vault.get(refunds).text
        # An unknown block: the page itself.
        assert "![[sources/help/sync-plans/_summary|Sync plans > ^no-such-block]]" in text
        checked, bad = linkcheck.vault_links(vault.layout)
        assert checked >= 4 and not bad


def test_search_and_context_say_which_note_and_heading_a_section_comes_from(vault: Vault) -> None:
    from vaultmem import agenttools

    root = vault.layout.root
    (root / "Travel").mkdir()
    (root / "Travel/Kyoto trip.md").write_text(
        "# Kyoto trip\n\n## Lodging\n\n### Ryokan\n\nYadoya Shirakawa, check-in by 18:00, dinner at 19:00.\n",
        encoding="utf-8",
    )
    vault.read_notes(["Travel/Kyoto trip.md"])
    vault.flush()
    shown = agenttools.render_hits(vault, vault.search("ryokan check-in", 3))
    assert "from Travel/Kyoto trip.md › Kyoto trip › Lodging › Ryokan" in shown
    context = agenttools.context_text(vault, "When do we check in at the ryokan?", 512)
    assert "(from Travel/Kyoto trip.md › Kyoto trip › Lodging › Ryokan)" in context


def test_a_document_folder_drops_a_possessive_and_ends_at_a_whole_word() -> None:
    from vaultmem.docsync import folder_slug

    assert folder_slug("Asus router's DHCP") == "asus-router-dhcp"  # was asus-router-s-dhcp
    assert folder_slug("Mara’s notes") == "mara-notes"
    assert folder_slug("fastcgi_param reference") == "fastcgi_param-reference"  # identifiers stay whole
    long = "configuring " + "the nginx reverse proxy for " * 3
    slug = folder_slug(long)
    assert len(slug) <= 60 and slug.split("-")[-1] in long.split()
    assert folder_slug("x" * 70) == "x" * 60  # one word longer than the limit: cut at a character
    assert folder_slug("CON") == "con-doc"
