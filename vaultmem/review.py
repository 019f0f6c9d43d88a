"""The review inbox (issue #20): supersede proposals as small Markdown files a person decides on.

Owns ``review/<new>-updates-<old>.md`` (old text, new text, why, links, ``decision: pending``; a person
sets ``decision: accept`` or ``reject`` in Obsidian, or ``vaultmem review`` does), the same for two
entries of a core file (``review/core-<file>-<new>-updates-<old>.md``, ``kind: core-proposal``, entry
ids: ``corefile.entry_id``), and the weekly log
``review/weekly/<YYYY>-W<ww>.md`` that every outcome goes into (applied at once, accepted, rejected,
expired), so the inbox never piles up. ``review/`` is never indexed. Writes only through ``fsio``; the
caller holds the write lock and applies the links. Approval exists here and in the CLI only: nothing in
the MCP server can reach it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from vaultmem import frontmatter, fsio
from vaultmem.corefile import ENTRY_ID_RE
from vaultmem.corefile import NAME_RE as CORE_NAME_RE
from vaultmem.corefile import rel_path as core_rel_path
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.layout import REVIEW, Layout
from vaultmem.model import LEAF_ID_RE, format_ts, parse_ts

DECISIONS = ("pending", "accept", "reject", "skip")
EXPIRE_DAYS = 7  # a proposal nobody decided on this long goes into the weekly log as expired
_NAME_RE = re.compile(r"^([0-9a-f]{16})-updates-([0-9a-f]{16})\.md$")
_CORE_NAME_RE = re.compile(
    rf"^core-({CORE_NAME_RE.pattern.strip('^$')})-({ENTRY_ID_RE.pattern.strip('^$')})"
    rf"-updates-({ENTRY_ID_RE.pattern.strip('^$')})\.md$"
)
_PAIR_RE = re.compile(r"\b([0-9a-f]{16}|[0-9a-f]{10}) updates ([0-9a-f]{16}|[0-9a-f]{10})\b")


@dataclass(frozen=True)
class Proposal:
    old: str
    new: str
    confidence: float
    why: tuple[str, ...]
    created: str
    decision: str = "pending"
    file: str = ""  # a core file's name when old and new are two of its entries (issue #20); "" for leaves

    @property
    def name(self) -> str:
        return (
            f"core-{self.file}-{self.new}-updates-{self.old}.md"
            if self.file
            else f"{self.new}-updates-{self.old}.md"
        )

    @property
    def path(self) -> str:
        return f"{REVIEW}/{self.name}"

    def as_dict(self) -> dict[str, object]:
        return {
            "old": self.old,
            "new": self.new,
            "confidence": self.confidence,
            "why": list(self.why),
            "created": self.created,
            "decision": self.decision,
            "path": self.path,
        } | ({"file": self.file} if self.file else {})


def render(p: Proposal, old_text: str, new_text: str, old_path: str, new_path: str) -> str:
    meta: dict[str, object] = {"kind": "core-proposal", "file": p.file} if p.file else {"kind": "proposal"}
    meta |= {"old": p.old, "new": p.new, "confidence": p.confidence, "why": list(p.why), "created": p.created}
    what = f"entry of `{core_rel_path(p.file)}`" if p.file else "memory"
    body = (
        f"Does the new {what} replace the old one? Set `decision:` to accept or reject.\n\n"
        f"## Old\n\n{_quoted(old_text)}\n\n[{p.old}](../{old_path})\n\n"
        f"## New\n\n{_quoted(new_text)}\n\n[{p.new}](../{new_path})\n"
    )
    # decision last: the one line a person edits
    return "---\n" + frontmatter.dump_mapping(meta) + f"decision: {p.decision}\n---\n" + body


def _quoted(text: str) -> str:
    return "\n".join("> " + line for line in text.strip().splitlines())


def parse(text: str, rel: str) -> Proposal:
    meta = frontmatter.split(text, where=rel).meta
    old, new = str(meta.get("old", "")), str(meta.get("new", ""))
    decision = str(meta.get("decision", "pending")).strip().lower()
    file = str(meta.get("file", "")) if meta.get("kind") == "core-proposal" else ""
    if file:
        ids = bool(ENTRY_ID_RE.match(old) and ENTRY_ID_RE.match(new) and CORE_NAME_RE.match(file))
    else:
        ids = bool(LEAF_ID_RE.match(old) and LEAF_ID_RE.match(new))
    if not ids or decision not in DECISIONS:
        raise FrontmatterError(
            f"{rel}: a proposal needs ids old/new (leaf ids, or entry ids and the core file's name in"
            f" `file:`) and decision: {'|'.join(DECISIONS)}"
        )
    why = meta.get("why") or []
    return Proposal(
        old,
        new,
        float(meta.get("confidence", 0.0)),
        tuple(str(w) for w in why) if isinstance(why, list) else (str(why),),
        str(meta.get("created", "")),
        decision,
        file,
    )


def inbox(layout: Layout) -> tuple[list[Proposal], list[tuple[str, str]]]:
    """The proposals in ``review/`` (oldest first) and the files that are not valid ones (path, why)."""
    base = layout.root / REVIEW
    found, bad = [], []
    for path in sorted(base.glob("*.md")) if base.is_dir() else []:
        if not (_NAME_RE.match(path.name) or _CORE_NAME_RE.match(path.name)):
            continue
        rel = layout.rel(path)
        try:
            found.append(parse(path.read_text(encoding="utf-8"), rel))
        except (FrontmatterError, ValueError, OSError) as exc:
            bad.append((rel, str(exc)))
    return sorted(found, key=lambda p: (p.created, p.name)), bad


def write(layout: Layout, p: Proposal, old_text: str, new_text: str, old_path: str, new_path: str) -> bool:
    """Write a proposal unless one for the pair is there already; True when written."""
    target = layout.root / p.path
    if target.exists():
        return False
    fsio.make_dirs(layout.root, target.parent)
    fsio.atomic_write(
        target, render(p, old_text, new_text, old_path, new_path).encode(), root=layout.root, expected=None
    )
    return True


def set_decision(layout: Layout, p: Proposal, decision: str) -> Proposal:
    """Write ``decision`` into the proposal's file (only that line changes)."""
    if decision not in DECISIONS:
        raise InvalidInput(f"unknown decision {decision!r}; one of {', '.join(DECISIONS)}")
    path = layout.root / p.path
    text, digest = fsio.read_text_guarded(path, 1 << 20)
    new = re.sub(r"(?m)^decision:.*$", f"decision: {decision}", text, count=1)
    fsio.atomic_write(path, new.encode("utf-8"), root=layout.root, expected=digest)
    return replace(p, decision=decision)


def find(layout: Layout, key: str) -> Proposal:
    """A proposal by its file name, its new id, or ``new-old``."""
    found, _bad = inbox(layout)
    hits = [p for p in found if key in (p.name, p.name[:-3], p.new, p.path, f"{p.new}-{p.old}")]
    if len(hits) != 1:
        raise InvalidInput(
            f"{'no' if not hits else 'several'} proposals match {key!r}; `vaultmem review --list` names them"
        )
    return hits[0]


def weekly_path(layout: Layout, when: datetime) -> Path:
    year, week, _ = when.isocalendar()
    return layout.root / REVIEW / "weekly" / f"{year}-W{week:02d}.md"


def log_entry(
    layout: Layout, when: datetime, outcome: str, p: Proposal, old_text: str, new_text: str
) -> tuple[str, str, str | None] | None:
    """The week's log with one outcome appended, as (vault-relative path, new text, hash of the file
    read or None when new), for a caller that writes it inside its own durable step (a link and its
    line go together). None when the pair's last line this week already has this outcome (a replayed
    step wrote it)."""
    path = weekly_path(layout, when)
    fsio.make_dirs(layout.root, path.parent)
    try:
        data: bytes | None = path.read_bytes()
    except FileNotFoundError:
        data = None
    old = (data or b"").decode("utf-8")
    mine = [ln for ln in old.splitlines() if f": {p.new} updates {p.old}: " in ln]
    if mine and f"**{outcome}**" in mine[-1]:
        return None
    year, week, _ = when.isocalendar()
    head = f"# Memory updates, week {week} of {year}\n\n" if data is None else ""
    # A core entry's words stay in its file or archive, never in the log: a person who deletes the
    # entry (the way to forget a core fact) leaves nothing of it here.
    said = (
        f"entries of `{core_rel_path(p.file)}`" if p.file else f'"{_short(old_text)}" -> "{_short(new_text)}"'
    )
    line = (
        f"- {format_ts(when)} **{outcome}** ({p.confidence:.2f}): {p.new} updates {p.old}: {said}"
        + (
            f" (undo: `vaultmem review --revert {p.new}-{p.old}`)"
            if outcome in ("applied", "accepted")
            else ""
        )
        + "\n"
    )
    return layout.rel(path), old + head + line, None if data is None else fsio.sha256_bytes(data)


def log(layout: Layout, when: datetime, outcome: str, p: Proposal, old_text: str, new_text: str) -> str:
    """Append one outcome to the week's log (unless its last line for the pair says so already);
    returns its vault-relative path."""
    entry = log_entry(layout, when, outcome, p, old_text, new_text)
    if entry is None:
        return layout.rel(weekly_path(layout, when))
    rel, text, expected = entry
    fsio.atomic_write(layout.abs(rel), text.encode("utf-8"), root=layout.root, expected=expected)
    return rel


def _short(text: str, n: int = 80) -> str:
    flat = " ".join(text.split()).replace('"', "'")
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def decided_pairs(layout: Layout) -> set[tuple[str, str]]:
    """(new, old) pairs the weekly logs already name (decided or expired: never proposed again)."""
    base = layout.root / REVIEW / "weekly"
    out: set[tuple[str, str]] = set()
    for path in base.glob("*.md") if base.is_dir() else []:
        out.update((m.group(1), m.group(2)) for m in _PAIR_RE.finditer(path.read_text(encoding="utf-8")))
    return out


def expired(p: Proposal, now: datetime, days: int = EXPIRE_DAYS) -> bool:
    created = parse_ts(p.created)
    return p.decision in ("pending", "skip") and created is not None and now - created >= timedelta(days=days)
