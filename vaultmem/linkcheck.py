"""Links of a vault resolved the way Obsidian resolves them: what ``check`` and the documentation-vault
tests call a broken link (a ghost note, or a heading link that lands nowhere).

Owns the rule, over the vault's files as they are: a wikilink's target is a file of that vault path or
of that name anywhere (``.md`` optional, any case); a Markdown link's is relative to the linking file
(``<...>`` destinations included), else as a wikilink's; ``[[#Heading]]`` is the linking file.
An anchor must land too: ``#A#B`` on a heading by ``wikilinks.resolve_heading`` (headings read as
``inputs.docs`` reads them), ``#^id`` on a block id of the target. Every form the engine writes is seen:
wikilinks with headings and aliases, embeds, Markdown links, and a summary's ``## Children`` and
``## Related`` lists. Read-only: never writes a file.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from pathlib import Path

from vaultmem import frontmatter, wikilinks
from vaultmem.inputs import docs
from vaultmem.layout import IGNORED_DIRS, Layout
from vaultmem.summaryfile import ChildLink, SummaryNode

_BLOCK_ID = re.compile(r"(?:^|[ \t])\^([A-Za-z0-9-]+)[ \t]*$", re.MULTILINE)


class VaultFiles:
    """The vault's files by path and by name, and the headings and block ids of its notes (read once)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.by_name: dict[str, str] = {}  # casefolded vault path or file name, with and without .md
        self.notes: list[str] = []
        for dirpath, dirnames, filenames in os.walk(layout.root):
            dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS and not d.startswith("."))
            for name in sorted(filenames):
                rel = layout.rel(Path(dirpath) / name)
                for form in (rel, name):
                    self.by_name.setdefault(form.casefold(), rel)
                    if form.endswith(".md"):
                        self.by_name.setdefault(form[:-3].casefold(), rel)
                if name.endswith(".md"):
                    self.notes.append(rel)
        self._texts: dict[str, str | None] = {}

    def text(self, rel: str) -> str | None:
        if rel not in self._texts:
            try:
                raw = (self.layout.root / rel).read_text(encoding="utf-8", errors="replace")
                self._texts[rel] = frontmatter.normalise_newlines(raw)
            except OSError:
                self._texts[rel] = None
        return self._texts[rel]

    def target(self, link: wikilinks.Link, where: str) -> str | None:
        """The vault path of the file ``link`` (written in the file ``where``) opens; None: a ghost."""
        if not link.target:
            return where
        if link.markdown:  # relative to the linking file first, then like a wikilink's path
            found = self.by_name.get(
                posixpath.normpath(posixpath.join(posixpath.dirname(where), link.target)).casefold()
            )
            if found is not None:
                return found
        return self.by_name.get(link.target.casefold()) or self.by_name.get(f"{link.target}.md".casefold())

    def resolves(self, link: wikilinks.Link, where: str) -> bool:
        rel = self.target(link, where)
        if rel is None:
            return False
        if not link.anchor or not rel.endswith(".md"):
            return True  # ``file.pdf#page=2``: Obsidian opens the file
        text = self.text(rel)
        if text is None:
            return False
        if link.anchor.startswith("^"):
            return link.anchor[1:].casefold() in {b.casefold() for b in _BLOCK_ID.findall(text)}
        return wikilinks.resolve_heading(docs.headings(text), link.anchor) is not None


def child_link(child: ChildLink) -> wikilinks.Link:
    """A summary's child or related link as the link it is in its file."""
    if child.wiki:
        return wikilinks.parse_wiki(
            f"{child.target}|{child.label}", False, f"[[{child.target}|{child.label}]]"
        )
    target, _, anchor = child.target.partition("#")
    stem = target[:-3] if target.endswith(".md") else target
    return wikilinks.Link(stem, anchor, child.label, False, f"[{child.label}]({child.target})", markdown=True)


def unresolved_children(
    files: VaultFiles,
    node: SummaryNode,
    skip: Callable[[ChildLink], bool] = lambda _c: False,
    *,
    related: bool = True,
) -> list[str]:
    """The links of ``node``'s ``## Children`` (and ``## Related`` with ``related``) that land nowhere,
    as written (those ``skip`` names left out)."""
    out = []
    for child in (*node.children, *(node.related if related else ())):
        if skip(child):
            continue
        link = child_link(child)
        if not files.resolves(link, node.path):
            out.append(link.raw)
    return out


def vault_links(layout: Layout) -> tuple[int, list[tuple[str, str]]]:
    """(links checked, unresolved (file, link)) over every Markdown file of the vault, every form."""
    files = VaultFiles(layout)
    checked = 0
    bad: list[tuple[str, str]] = []
    for rel in files.notes:
        text = files.text(rel)
        for _s, _e, link in wikilinks.find_links(text or ""):
            checked += 1
            if not files.resolves(link, rel):
                bad.append((rel, link.raw))
    return checked, bad
