"""Obsidian links in a document's text: found outside code, and rewritten by a caller's rule.

Owns the syntax: wikilinks ``[[Target]]``, ``[[Target#Heading]]``, ``[[Target#^block]]``,
``[[Target|alias]]``, embeds ``![[icon.svg]]``, and Markdown links to Markdown files ``[text](Page.md)``.
Links inside fenced code blocks and inline code spans are examples, not links: they are never touched.
Also Obsidian's heading rule: how a heading reads in a link (``strip_heading``), which heading a link's
``#A#B`` lands on (``resolve_heading``), the shortest such path that lands on a given heading
(``heading_anchor``), and the link from a summary to one section of a note indexed in place
(``section_link``) or to any leaf (``leaf_link``, labelled with ``leaf_words``).
Pure: no I/O; what a target resolves to is the caller's ``Resolve``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from posixpath import relpath
from urllib.parse import unquote

from vaultmem.layout import note_of
from vaultmem.summaryfile import ChildLink

_WIKI_RE = re.compile(r"(?P<embed>!?)\[\[(?P<inner>[^\[\]\n]+?)\]\]")
# ``[label](Page.md#Heading)``, or with the destination in angle brackets (spaces and parentheses kept),
# as the engine writes a summary's children: ``[label](<../Travel/Kyoto trip.md#Ryokan>)``.
_MD_RE = re.compile(
    r"(?P<embed>!?)\[(?P<label>[^\[\]\n]*)\]\("
    r"(?:<(?P<angle>[^<>\n]+?\.md(?:#[^<>\n]*)?)>|(?P<target>[^()\s<>]+\.md(?:#[^()\s]*)?))\)"
)
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_CODE_SPAN_RE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)


@dataclass(frozen=True)
class Link:
    """One link as written: ``target`` without ``.md`` ("" for a link into the same page), ``anchor``
    (a heading, or ``^block``; "" for none), ``alias`` ("" for none)."""

    target: str
    anchor: str
    alias: str
    embed: bool
    raw: str
    markdown: bool = False  # ``[label](path.md)``: the path is relative to the linking file

    @property
    def label(self) -> str:
        """What Obsidian shows for the link: the alias, else ``Target > Heading``."""
        if self.alias:
            return self.alias
        shown = self.target.rsplit("/", 1)[-1] if self.target else ""
        anchor = self.anchor.replace("#", " > ")
        return f"{shown} > {anchor}" if shown and anchor else (shown or anchor)


# A rule: the replacement text for a link (return ``link.raw`` to keep it).
Resolve = Callable[[Link], str]


def parse_wiki(inner: str, embed: bool, raw: str) -> Link:
    target, _, alias = inner.partition("|")
    target, _, anchor = target.partition("#")
    target = target.strip()
    if target.lower().endswith(".md"):
        target = target[:-3]
    return Link(target, anchor.strip(), alias.strip(), embed, raw)


def _code_ranges(text: str) -> list[tuple[int, int]]:
    """(start, end) of fenced code blocks (an unclosed fence runs to the end) and inline code spans."""
    ranges: list[tuple[int, int]] = []
    pos = 0
    while True:
        opening = _FENCE_RE.search(text, pos)
        if opening is None:
            break
        marker = opening.group(1)
        closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$", re.MULTILINE)
        line_end = text.find("\n", opening.end())
        found = closing.search(text, line_end + 1) if line_end >= 0 else None
        end = found.end() if found else len(text)
        ranges.append((opening.start(), end))
        pos = end
    spans = []
    for match in _CODE_SPAN_RE.finditer(text):
        if not any(a <= match.start() < b for a, b in ranges):
            spans.append((match.start(), match.end()))
    return sorted(ranges + spans)


def find_links(text: str) -> list[tuple[int, int, Link]]:
    """Every link outside code, as (start, end, link), in order."""
    code = _code_ranges(text)

    def in_code(at: int) -> bool:
        return any(a <= at < b for a, b in code)

    found: list[tuple[int, int, Link]] = []
    for match in _WIKI_RE.finditer(text):
        if not in_code(match.start()):
            link = parse_wiki(match.group("inner"), bool(match.group("embed")), match.group(0))
            found.append((match.start(), match.end(), link))
    for match in _MD_RE.finditer(text):
        written = match.group("angle") or match.group("target")
        if in_code(match.start()) or "://" in written:
            continue
        target, _, anchor = unquote(written).partition("#")
        label, embed = match.group("label"), bool(match.group("embed"))
        link = Link(target[:-3], anchor, label, embed, match.group(0), markdown=True)
        found.append((match.start(), match.end(), link))
    found.sort(key=lambda item: item[0])
    return found


def rewrite(text: str, resolve: Resolve) -> str:
    """``text`` with every link outside code replaced by what ``resolve`` returns for it."""
    out: list[str] = []
    pos = 0
    for start, end, link in find_links(text):
        if start < pos:
            continue  # overlapping matches: the first wins
        out.append(text[pos:start])
        out.append(resolve(link))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def wikilink(path: str, label: str, *, embed: bool = False) -> str:
    """A wikilink to a vault path (``.md`` dropped), labelled so Obsidian shows what the author wrote."""
    stem = path[:-3] if path.endswith(".md") else path
    clean = re.sub(r"[\[\]|\n]+", " ", label).strip()
    return f"{'!' if embed else ''}[[{stem}|{clean}]]" if clean else f"{'!' if embed else ''}[[{stem}]]"


def unresolved(text: str, exists: Callable[[Link], bool]) -> list[Link]:
    """Links outside code whose target ``exists`` says is not there (a ghost note in Obsidian)."""
    return [link for _s, _e, link in find_links(text) if link.target and not exists(link)]


# -- headings as Obsidian links them ------------------------------------------------------------------------
# Obsidian reads these as link syntax, so a heading's link form has each replaced by a space.
_HEADING_SYNTAX = re.compile(r"[:#|^\\\r\n]|%%|\[\[|\]\]")
# A file name or heading part a wikilink cannot hold (it would end or split the link).
_NOT_IN_WIKILINK = re.compile(r"[\[\]|#^]")


def strip_heading(text: str) -> str:
    """A heading as a link names it: ``:``, ``#``, ``|``, ``^``, ``\\``, ``%%``, ``[[`` and ``]]`` read as
    spaces, runs of spaces as one (``Q&A: 2024`` -> ``Q&A 2024``)."""
    return " ".join(_HEADING_SYNTAX.sub(" ", text).split())


def _matches(headings: Sequence[tuple[int, str]], parts: list[str], *, nested: bool) -> int | None:
    start, end, found = 0, len(headings), None
    for part in parts:
        hit = next((i for i in range(start, end) if strip_heading(headings[i][1]).casefold() == part), None)
        if hit is None:
            return None
        found, start = hit, hit + 1
        if nested:  # the next part must be under this heading
            level = headings[hit][0]
            end = next((j for j in range(hit + 1, len(headings)) if headings[j][0] <= level), len(headings))
    return found


def resolve_heading(headings: Sequence[tuple[int, str]], anchor: str) -> int | None:
    """The index in ``headings`` ((level, text) in reading order) of the heading a link's anchor
    (``Ryokan``, ``Lodging#Ryokan``) lands on, by Obsidian's rule: each part compared as
    ``strip_heading`` reads it, ignoring case, the first match after the previous part's; None when
    it lands nowhere (a broken heading link)."""
    parts = [p for p in (strip_heading(x).casefold() for x in anchor.split("#")) if p]
    return _matches(headings, parts, nested=False) if parts else None


def heading_anchor(headings: Sequence[tuple[int, str]], at: int) -> str:
    """The shortest anchor that lands on ``headings[at]``: its own heading when that is the first of the
    name, else with as many of its parent headings in front as tell it apart (``Day 2#Food``); "" when
    none does (a heading repeated under the same parents, or one a wikilink cannot hold: the link then
    names the note alone)."""
    chain = [at]
    for i in range(at - 1, -1, -1):
        if headings[i][0] < headings[chain[0]][0]:
            chain.insert(0, i)
    for k in range(1, len(chain) + 1):
        parts = [strip_heading(headings[i][1]) for i in chain[-k:]]
        if not all(parts) or any(_NOT_IN_WIKILINK.search(p) for p in parts):
            continue
        folded = [p.casefold() for p in parts]
        # Lands here whether Obsidian looks for the next part anywhere after the previous one or only
        # under it.
        if _matches(headings, folded, nested=True) == at and _matches(headings, folded, nested=False) == at:
            return "#".join(parts)
    return ""


def section_anchor(meta: Mapping[str, object]) -> str:
    """The anchor a section of a note is linked by: the one recorded when the note was read (``anchor``);
    for a row of an older vaultmem, its own heading."""
    recorded = meta.get("anchor")
    if isinstance(recorded, str):
        return recorded
    last = str(meta.get("heading_path") or "").split(" > ")[-1]
    heading = strip_heading(last)
    return "" if _NOT_IN_WIKILINK.search(heading) else heading


def section_link(label: str, note: str, anchor: str, leaf_id: str, directory: str = "") -> ChildLink:
    """A summary's link to one section of a note indexed in place: ``[[Travel/Kyoto trip#Ryokan|label]]``
    (the note's vault path, so it is never ambiguous; the note alone for an empty anchor), with the
    section's leaf id kept beside it. A note whose name a wikilink cannot hold gets a Markdown link
    relative to ``directory`` instead."""
    stem = note[:-3] if note.endswith(".md") else note
    target = f"#{anchor}" if anchor else ""
    if _NOT_IN_WIKILINK.search(stem) or not note.endswith(".md"):
        return ChildLink(label, relpath(note, directory or ".") + target, leaf=leaf_id)
    return ChildLink(label, stem + target, wiki=True, leaf=leaf_id)


def section_label(title: str, heading_path: str) -> str:
    """A section's label under its note: its heading path without the note's own title
    (``Lodging › Ryokan``); the title for the note's first text."""
    path = [p for p in heading_path.split(" > ") if p.strip()]
    if path and path[0].casefold() == title.casefold():
        path = path[1:]
    return " › ".join(path) or title


_HEADING_LINE_RE = re.compile(r"[ \t]*#{1,6}[ \t]+(?P<text>[^\n]*\S)")


def leaf_words(text: str, provenance: str, words: int = 10) -> str:
    """What a link labels a leaf with after its time: its first ``words`` words; for a section of a
    document or note (its text opens with its heading line, ``## Kyoto trip › Ryokan``) the text of that
    heading, its heading path, never the Markdown marks."""
    if '"heading_path"' in provenance:
        heading = _HEADING_LINE_RE.match(text)
        if heading is not None:
            return " ".join(heading["text"].split())
    return " ".join(text.split()[:words])


def leaf_link(label: str, leaf_id: str, path: str, provenance: str) -> ChildLink:
    """A topic's or digest's wikilink to a leaf (its index ``path`` and ``provenance`` JSON): the leaf
    file's name, which never changes (``[[2024-05-01-d39090de9df50170|label]]``); for a section of a note
    indexed in place, the note's heading (``[[Travel/Kyoto trip#Ryokan|label]]``)."""
    note = note_of(path)
    if note is None:
        name = path.rsplit("/", 1)[-1]
        return ChildLink(label, name[:-3] if name.endswith(".md") else name, wiki=True)
    try:
        meta = json.loads(provenance or "{}")
    except ValueError:
        meta = {}
    return section_link(label, note, section_anchor(meta if isinstance(meta, dict) else {}), leaf_id)
