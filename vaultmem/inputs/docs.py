"""Document adapter: a Markdown or plain-text document becomes one ``Message`` per heading section.

Owns heading detection (ATX and setext, fenced code aware) and the reading of a document's leading
YAML frontmatter. It never splits inside a section (that is the chunker's job) and never reads files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import yaml

from vaultmem.errors import InvalidInput
from vaultmem.inputs.chat import clean_text
from vaultmem.model import InputKind, Message, parse_ts, safe_name

_ATX_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
# Lines that cannot be the text of a setext heading: list items, quotes, indented code, tables.
_NOT_SETEXT_TEXT_RE = re.compile(r"^(?: {4}|\t| {0,3}(?:[-*+>|]|\d+[.)])(?:\s|$))")
_FRONTMATTER_END = {"---", "..."}


@dataclass
class _Section:
    level: int = 0  # 0 = text before the first heading
    heading: str = ""
    path: str = ""
    body: list[str] = field(default_factory=list)


def parse_document(text: str, *, source: str, doc_name: str) -> list[Message]:
    """Split a document into sections at its headings; each non-empty section becomes a DOC message.

    Section 0 is the text before the first heading, so ``source_id = f"{doc_name}#{n}"`` of a heading
    does not change when an introduction is added or removed. A heading with no text of its own that
    is directly followed by a sub-heading yields no message (its title lives on in ``heading_path``).
    """
    safe_name(source)
    if not isinstance(doc_name, str) or not doc_name.strip():
        raise InvalidInput("a document needs a non-empty name")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    front, text, raw_front = _split_frontmatter(text)
    meta = {"file": doc_name}
    if raw_front.strip():
        meta["frontmatter"] = raw_front  # the page's own keys, kept on its document node (docsync)
    title = front.get("title")
    if isinstance(title, str | int | float) and not isinstance(title, bool) and str(title).strip():
        meta["title"] = str(title).strip()
    ts = _frontmatter_date(front.get("date"))

    sections = _sections(text.split("\n"))
    messages = []
    for n, section in enumerate(sections):
        body = clean_text("\n".join(section.body), keep_indent=True)
        nxt = sections[n + 1] if n + 1 < len(sections) else None
        if not body and (section.level == 0 or (nxt is not None and nxt.level > section.level)):
            continue
        heading_line = f"{'#' * section.level} {section.heading}".rstrip() if section.level else ""
        content = f"{heading_line}\n\n{body}".strip() if heading_line else body
        if not content:
            continue
        messages.append(
            Message(
                source=source,
                text=content,
                kind=InputKind.DOC,
                source_id=f"{doc_name}#{n}",
                session=doc_name,
                ts=ts,
                meta={**meta, "heading_path": section.path},
            )
        )
    return messages


def headings(text: str) -> list[tuple[int, str]]:
    """Every heading of a document as ``parse_document`` reads it, (level, text) in reading order,
    those without text of their own included: heading ``n - 1`` starts the section whose messages have
    ``source_id`` ``<doc>#<n>``."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    return [(s.level, s.heading) for s in _sections(_split_frontmatter(text)[1].split("\n"))[1:]]


def _sections(lines: list[str]) -> list[_Section]:
    sections = [_Section()]
    stack: list[tuple[int, str]] = []
    fence: str | None = None  # the opening fence marker while inside fenced code

    def start(level: int, heading: str) -> None:
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))
        sections.append(_Section(level, heading, " > ".join(h for _, h in stack)))

    for line in lines:
        body = sections[-1].body
        if fence is not None:
            body.append(line)
            stripped = line.strip()
            indent = len(line) - len(line.lstrip(" "))
            if indent <= 3 and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = None
            continue
        opening = _FENCE_RE.match(line)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            fence = opening.group(1)
            body.append(line)
            continue
        atx = _ATX_RE.match(line)
        if atx:
            start(len(atx.group(1)), (atx.group(2) or "").strip())
            continue
        setext = _SETEXT_RE.match(line)
        if setext and _is_setext_text(body):
            heading = body.pop().strip()
            start(1 if setext.group(1)[0] == "=" else 2, heading)
            continue
        body.append(line)
    return sections


def _is_setext_text(body: list[str]) -> bool:
    """True when the last body line is a one-line paragraph that an underline turns into a heading.

    Multi-line paragraphs are left alone on purpose: a ``---`` under them is far more often meant as a
    horizontal rule than as a heading.
    """
    last = body[-1] if body else ""
    if not last.strip() or _NOT_SETEXT_TEXT_RE.match(last) or _FENCE_RE.match(last) or _SETEXT_RE.match(last):
        return False
    return len(body) == 1 or not body[-2].strip()


def _split_frontmatter(text: str) -> tuple[dict[str, Any], str, str]:
    """Return (frontmatter mapping, rest, the frontmatter's YAML text). A block that is not a YAML
    mapping is left in the text."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return {}, text, ""
    for end in range(1, len(lines)):
        if lines[end].rstrip() in _FRONTMATTER_END:
            break
    else:
        return {}, text, ""
    raw = "\n".join(lines[1:end])
    try:
        data = yaml.safe_load(raw)
    except (yaml.YAMLError, ValueError, RecursionError):
        return {}, text, ""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return {}, text, ""
    return data, "\n".join(lines[end + 1 :]), raw


def _frontmatter_date(value: Any) -> datetime | None:
    # YAML turns `date: 2024-05-01` into a date; people also write free text, which we ignore.
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, datetime | str):
        return parse_ts(value)
    return None
