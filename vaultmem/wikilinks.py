"""Obsidian links in a document's text: found outside code, and rewritten by a caller's rule.

Owns the syntax: wikilinks ``[[Target]]``, ``[[Target#Heading]]``, ``[[Target#^block]]``,
``[[Target|alias]]``, embeds ``![[icon.svg]]``, and Markdown links to Markdown files ``[text](Page.md)``.
Links inside fenced code blocks and inline code spans are examples, not links: they are never touched.
Pure: no I/O; what a target resolves to is the caller's ``Resolve``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

_WIKI_RE = re.compile(r"(?P<embed>!?)\[\[(?P<inner>[^\[\]\n]+?)\]\]")
_MD_RE = re.compile(r"(?P<embed>!?)\[(?P<label>[^\[\]\n]*)\]\((?P<target>[^()\s]+\.md(?:#[^()\s]*)?)\)")
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
        if in_code(match.start()) or "://" in match.group("target"):
            continue
        target, _, anchor = unquote(match.group("target")).partition("#")
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
