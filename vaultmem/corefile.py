"""Core memory files (``core/*.md``): their format, budgets, templates and archives. Pure: no I/O.

A core file is Markdown with engine-owned frontmatter (``kind: core``, ``file``, ``title``,
``in_prompt``, ``budget``, ``schema_version``; every other key is the person's and survives rewrites)
and a body of **entries**, one per line, usually ``- [YYYY-MM] text`` (the tag says when it was learnt,
so the oldest can go first). Headings (``#``), HTML comments and blank lines are structure: kept in
place, never entries. A line indented under an entry continues it. Any other line is an entry too (a
person's prose), with or without a bullet or a tag.

The **prompt text** of a file is what goes into the prompt: its lines without the title heading,
comments and blank lines, entries as ``- [tag] text`` with secrets redacted. The budget counts its
characters. An entry the engine keeps is written back as the person wrote it (``raw``); new and moved
entries are written from their redacted text, so a secret never travels to another file.

An archive (``core/_archive/<file>.md``, ``kind: core-archive``) holds, append-only and unbudgeted,
every entry that left a file it could not go elsewhere from, with its tag and a trailing
``<!-- left YYYY-MM-DD: reason -->``.

**Versions** (issue #20) live in a comment on an entry's line, keys as a leaf's frontmatter has them:
``valid_from: DATE``, ``valid_to: DATE`` (exclusive), ``supersedes: ID``, ``superseded_by: ID``. An
entry's id is ``entry_id`` of its text (words, case aside), so a person may write the keys by hand. An
entry with ``superseded_by`` and no ``valid_to`` does not hold now; one replaced by the engine leaves for
the archive with ``valid_to`` and ``superseded_by`` in its ``left`` comment, and its successor carries
``valid_from`` and ``supersedes``. ``held_at`` says whether an entry was in the file at a moment (for
``as_of``): its tag's month not after it, its window around it, and for an archived one, left after it.
An entry the budget moves from an in-prompt file to ``knowledge.md`` carries its version keys and
``from_file: NAME; left_prompt: YYYY-MM-DD`` (``moved``), so ``as_of`` before that day puts it back in
its file's part of the block (``left_prompt``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from vaultmem import frontmatter
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.layout import file_in
from vaultmem.model import parse_ts
from vaultmem.redact import scrub

CORE_DIR = "core"
ARCHIVE_DIR = "_archive"
SCHEMA_VERSION = 1
KIND = "core"
ARCHIVE_KIND = "core-archive"
OWNED = frozenset({"kind", "file", "title", "in_prompt", "budget", "schema_version"})
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")
TAG_RE = re.compile(r"^\[(\d{4}-(?:0[1-9]|1[0-2]))\]\s*")
_BULLET_RE = re.compile(r"^\s*[-*+]\s+")
_COMMENT_RE = re.compile(r"<!--.*?-->")
_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class CoreSpec:
    """What a core file is for and its defaults (the file's frontmatter may say otherwise)."""

    name: str
    title: str
    in_prompt: bool
    budget: int
    purpose: str


@dataclass(frozen=True)
class CoreSettings:
    """The ``[core]`` section: default budgets (characters) of new files and of the whole block."""

    file_budget: int = 800  # each in-prompt file
    total_budget: int = 4000  # the whole block core_block() returns
    knowledge_budget: int = 8000  # knowledge.md (searched on demand, never in the prompt)
    ondemand_budget: int = 2000  # errors.md, tools.md and files a person adds

    def spec(self, name: str) -> CoreSpec:
        """The spec of a known file, or of a file a person added (on demand, default budget)."""
        for known in KNOWN:
            if known[0] == name:
                title, in_prompt, purpose = known[1], known[2], known[3]
                if in_prompt:
                    budget = self.file_budget
                elif name == "knowledge":
                    budget = self.knowledge_budget
                else:
                    budget = self.ondemand_budget
                return CoreSpec(name, title, in_prompt, budget, purpose)
        return CoreSpec(name, name.replace("-", " ").capitalize(), False, self.ondemand_budget, "notes")


# (name, title, in the prompt, purpose), in the order the prompt block shows them.
KNOWN: tuple[tuple[str, str, bool, str], ...] = (
    ("soul", "Soul", True, "who the agent is for this person: role, tone, language, what it must never do"),
    ("user-profile", "User profile", True, "who the person is: name, language, preferences, circumstances"),
    ("projects", "Projects", True, "what the person is working on: projects, goals, deadlines"),
    ("patterns", "Patterns", True, "how the person works: habits, recurring requests, what worked"),
    ("knowledge", "Knowledge", False, "facts kept for search on demand; what leaves the files above"),
    ("errors", "Errors", False, "what went wrong and how it was fixed (loaded on demand)"),
    ("tools", "Tools", False, "what the tools do and how to use them (loaded on demand)"),
)
KNOWN_NAMES = tuple(k[0] for k in KNOWN)
OVERFLOW = "knowledge"  # where entries leaving an in-prompt file go


@dataclass(frozen=True)
class Entry:
    """One memory line. ``text``: the content (redacted, whitespace collapsed, no bullet, tag or comment);
    ``raw``: the line(s) as written in the file (None for an entry the engine makes)."""

    text: str
    tag: str | None = None
    raw: str | None = None
    bullet: bool = True

    def valid_at(self, moment: datetime) -> bool:
        """Whether the entry holds at ``moment``: a person may give it a window in a comment on its line,
        ``<!-- valid_from: 2026-04-01 -->``, ``<!-- valid_to: 2026-06-01 -->`` (exclusive); a value that
        is not a date is ignored (the entry holds). An entry that names its successor
        (``superseded_by``) without a ``valid_to`` no longer holds."""
        if self.raw is None or ("valid_" not in self.raw and "superseded_by" not in self.raw):
            return True
        window = {key: _window_moment(value) for key, value in _WINDOW_RE.findall(self.raw)}
        start, end = window.get("from"), window.get("to")
        if end is None and self.superseded_by:
            return False
        return (start is None or start <= moment) and (end is None or moment < end)

    @property
    def id(self) -> str:
        return entry_id(self.text)

    @property
    def supersedes(self) -> tuple[str, ...]:
        return self._ids("supersedes")

    @property
    def superseded_by(self) -> tuple[str, ...]:
        return self._ids("superseded_by")

    def _ids(self, key: str) -> tuple[str, ...]:
        if self.raw is None or key not in self.raw:
            return ()
        return tuple(i for k, i in _LINK_RE.findall(self.raw) if k == key)

    def left_prompt(self) -> tuple[str, datetime] | None:
        """(the in-prompt file, the day) an entry the budget moved to ``knowledge.md`` left the prompt
        from (its ``from_file: NAME; left_prompt: YYYY-MM-DD``), else None."""
        keys = dict(carried(self))
        name, day = keys.get(FROM_FILE), keys.get(LEFT_PROMPT)
        moment = _window_moment(day) if day else None
        return (name, moment) if name and moment is not None else None

    def left_on(self) -> datetime | None:
        """When an archived entry left its file (its ``<!-- left YYYY-MM-DD: ... -->``), else None."""
        found = _LEFT_RE.search(self.raw or "")
        return _window_moment(found.group(1)) if found else None

    def held_at(self, moment: datetime) -> bool:
        """Whether the entry was in its file at ``moment`` (``as_of``): learnt by then (its tag's month,
        its ``valid_from``), valid then, and (an archived one) not yet gone."""
        learnt = "valid_from" in (self.raw or "") and any(
            k == "from" for k, _ in _WINDOW_RE.findall(self.raw or "")
        )
        if self.tag is not None and self.tag > month(moment) and not learnt:
            return False  # without a day, the tag's month says when it was learnt
        gone = self.left_on()
        if gone is not None and gone <= moment:
            return False
        return self.valid_at(moment)

    @property
    def prompt_line(self) -> str:
        return ("- " if self.bullet else "") + (f"[{self.tag}] " if self.tag else "") + self.text

    @property
    def line(self) -> str:
        return self.raw if self.raw is not None else self.prompt_line

    def retagged(self, tag: str) -> Entry:
        """The entry learnt again in the month ``tag``; its version keys stay (it held since its
        ``valid_from``, and a link it is part of still holds)."""
        return keyed(Entry(self.text, tag, None, True), carried(self))


_WINDOW_RE = re.compile(r"\bvalid_(from|to):\s*([0-9][0-9:TZ+.\-]*)")
FROM_FILE = "from_file"  # an entry the budget moved out of an in-prompt file: which file ...
LEFT_PROMPT = "left_prompt"  # ... and the day it left the prompt (``as_of`` puts it back before then)
_CARRIED_RE = re.compile(
    r"\b(valid_from|valid_to|supersedes|superseded_by|from_file|left_prompt):\s*([0-9a-z][0-9a-zA-Z:+.\-]*)"
)
_LINK_RE = re.compile(r"\b(supersedes|superseded_by):\s*([0-9a-f]{10})\b")
_LEFT_RE = re.compile(r"<!-- left (\d{4}-\d{2}-\d{2}):")
_ID_WORDS_RE = re.compile(r"\w+")


ENTRY_ID_RE = re.compile(r"^[0-9a-f]{10}$")  # what ``entry_id`` gives


def entry_id(text: str) -> str:
    """A core entry's id: the first 10 hex digits of the SHA-256 of its words (case and punctuation
    aside), so the same entry has the same id wherever it is and a person can compute it."""
    words = " ".join(_ID_WORDS_RE.findall(clean(text).casefold()))
    return hashlib.sha256(words.encode("utf-8")).hexdigest()[:10]


def versioned(entry: Entry, **keys: str) -> Entry:
    """``entry`` with version keys (``valid_from``, ``supersedes``...) in a comment on its line."""
    return _commented(entry, list(keys.items()))


def _commented(entry: Entry, keys: Sequence[tuple[str, str]]) -> Entry:
    said = "; ".join(f"{k}: {v}" for k, v in keys)
    return Entry(entry.text, entry.tag, f"{entry.prompt_line} <!-- {said} -->", entry.bullet)


VERSION_KEYS = frozenset(["valid_from", "valid_to", "supersedes", "superseded_by"])


def keyed(plain: Entry, keys: Sequence[tuple[str, str]]) -> Entry:
    """``plain`` with ``keys`` in a comment on its line, or as it is when there are none."""
    return _commented(plain, keys) if keys else plain


def carried(entry: Entry) -> list[tuple[str, str]]:
    """The version and move keys in the comments of an entry's line, in order (what travels with it
    when the engine writes it elsewhere from its redacted text)."""
    comments = " ".join(_COMMENT_RE.findall(entry.raw or ""))
    return [(k, v) for k, v in _CARRIED_RE.findall(comments)]


def moved(entry: Entry, name: str, day: str) -> Entry:
    """An entry leaving the in-prompt file ``name`` for ``knowledge.md`` on ``day`` (YYYY-MM-DD): its
    redacted text and tag, its version keys, and ``from_file``/``left_prompt`` (so ``as_of`` before
    that day puts it back in the block)."""
    keys = [(k, v) for k, v in carried(entry) if k not in (FROM_FILE, LEFT_PROMPT)]
    return _commented(Entry(entry.text, entry.tag), [*keys, (FROM_FILE, name), (LEFT_PROMPT, day)])


def _window_moment(value: str) -> datetime | None:
    if len(value) == 10:  # a bare date: midnight UTC, as a leaf's valid_from / valid_to
        try:
            return datetime.fromisoformat(value).replace(tzinfo=UTC)
        except ValueError:
            return None
    return parse_ts(value)


Item = Entry | str  # an entry, or a structural line (heading, comment, blank)


@dataclass(frozen=True)
class CoreDoc:
    """A parsed core file (or archive). ``md`` keeps the person's frontmatter keys for rewrites."""

    name: str
    title: str
    in_prompt: bool
    budget: int
    items: tuple[Item, ...]
    md: frontmatter.MdDoc | None = None
    archive: bool = False

    @property
    def entries(self) -> list[Entry]:
        return [i for i in self.items if isinstance(i, Entry)]

    @property
    def prompt_text(self) -> str:
        return prompt_text(self.items)

    @property
    def chars(self) -> int:
        return len(self.prompt_text)


def month(now: datetime) -> str:
    return f"{now.year:04d}-{now.month:02d}"


def check_name(name: str) -> str:
    """A core file name: ``user-profile``, ``projects``... (``.md`` and a ``core/`` prefix are accepted)."""
    if not isinstance(name, str):
        raise InvalidInput("a core file name must be a string such as 'user-profile'")
    bare = name.strip().removeprefix(f"{CORE_DIR}/").removesuffix(".md")
    if not NAME_RE.match(bare):
        raise InvalidInput(
            f"{name!r} is not a core file name; use one of {', '.join(KNOWN_NAMES)} (or a lower-case-slug)"
        )
    return bare


def rel_path(name: str) -> str:
    return f"{CORE_DIR}/{name}.md"


def archive_rel(name: str) -> str:
    return f"{CORE_DIR}/{ARCHIVE_DIR}/{name}.md"


def name_of(rel: str) -> tuple[str, bool] | None:
    """(file name, is an archive) for a core path, None for anything else."""
    return file_in(rel, CORE_DIR, ARCHIVE_DIR)


def clean(text: str) -> str:
    """Entry content: comments out, whitespace collapsed, secrets redacted."""
    return scrub(_SPACE_RE.sub(" ", _COMMENT_RE.sub(" ", text)).strip())


def parse_items(body: str) -> tuple[Item, ...]:
    items: list[Item] = []
    in_comment = False
    for line in body.split("\n"):
        stripped = line.strip()
        if in_comment:
            items.append(line)
            in_comment = "-->" not in stripped
            continue
        if stripped.startswith("<!--"):
            items.append(line)
            in_comment = "-->" not in stripped
            continue
        if not stripped or stripped.startswith("#"):
            items.append(line)
            continue
        previous = items[-1] if items else None
        if line[0].isspace() and isinstance(previous, Entry) and not _BULLET_RE.match(line):
            text = clean(f"{previous.text} {stripped}")
            items[-1] = Entry(text, previous.tag, f"{previous.raw}\n{line}", previous.bullet)
            continue
        bullet = _BULLET_RE.match(line)
        content = line[bullet.end() :] if bullet else stripped
        tag = TAG_RE.match(content)
        text = clean(content[tag.end() :] if tag else content)
        if not text:
            items.append(line)
            continue
        items.append(Entry(text, tag.group(1) if tag else None, line, bullet is not None))
    while items and isinstance(items[-1], str) and not items[-1].strip():
        items.pop()
    return tuple(items)


def prompt_text(items: Iterable[Item]) -> str:
    lines: list[str] = []
    title_seen = False
    in_comment = False
    for item in items:
        if isinstance(item, Entry):
            lines.append(item.prompt_line)
            continue
        stripped = item.strip()
        if in_comment or stripped.startswith("<!--"):
            in_comment = "-->" not in stripped
            continue
        if not stripped:
            continue
        if stripped.startswith("# ") and not title_seen:
            title_seen = True
            continue
        lines.append(scrub(stripped))
    return "\n".join(lines)


def parse(text: str, rel: str, settings: CoreSettings) -> CoreDoc:
    """A core file or archive. Raises FrontmatterError for frontmatter that cannot be read or a
    ``budget``/``in_prompt`` of the wrong type, InvalidInput for a path that is not a core file."""
    found = name_of(rel)
    if found is None:
        raise InvalidInput(f"{rel} is not a core memory file (core/<name>.md)")
    name, archive = found
    md = frontmatter.split(text, where=rel)
    spec = settings.spec(name)
    meta = md.meta
    budget = meta.get("budget", spec.budget)
    in_prompt = meta.get("in_prompt", spec.in_prompt)
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise FrontmatterError(f"{rel}: budget must be a positive whole number of characters, got {budget!r}")
    if not isinstance(in_prompt, bool):
        raise FrontmatterError(f"{rel}: in_prompt must be true or false, got {in_prompt!r}")
    title = meta.get("title", spec.title)
    title = scrub(" ".join(str(title).split())) or spec.title
    return CoreDoc(name, title, in_prompt and not archive, budget, parse_items(md.body), md, archive)


def render(doc: CoreDoc, items: Sequence[Item]) -> str:
    engine: dict[str, Any] = {
        "kind": ARCHIVE_KIND if doc.archive else KIND,
        "file": doc.name,
        "title": doc.title,
    }
    if not doc.archive:
        engine.update({"in_prompt": doc.in_prompt, "budget": doc.budget})
    engine["schema_version"] = SCHEMA_VERSION
    lines = [i.line if isinstance(i, Entry) else i for i in items]
    while lines and not lines[-1].strip():
        lines.pop()
    return frontmatter.render(engine, "\n".join(lines) + "\n", keep=doc.md, owned=OWNED)


def template(spec: CoreSpec) -> CoreDoc:
    """A new, empty file: its title heading and a comment saying what belongs in it."""
    items: tuple[Item, ...] = (
        f"# {spec.title}",
        "",
        f"<!-- {spec.purpose.capitalize()}. One fact per line: - [YYYY-MM] text."
        + (
            f" At most {spec.budget} characters go in the prompt; older entries move to knowledge.md. -->"
            if spec.in_prompt
            else " -->"
        ),
        "",
    )
    return CoreDoc(spec.name, spec.title, spec.in_prompt, spec.budget, items)


def archive_template(spec: CoreSpec) -> CoreDoc:
    items: tuple[Item, ...] = (
        f"# Archive: {spec.title}",
        "",
        f"<!-- Entries that left core/{spec.name}.md, with their tags. Kept, never in the prompt. -->",
        "",
    )
    return CoreDoc(spec.name, f"Archive: {spec.title}", False, spec.budget, items, archive=True)


def archived(entry: Entry, day: str, reason: str, superseded_by: str | None = None) -> Entry:
    """An entry as an archive line: tag and text kept, when and why it left in a trailing comment (for an
    entry a new version replaced: ``valid_to`` that day and ``superseded_by`` its successor's id; the
    other keys it had, ``valid_from``, ``from_file``, ``left_prompt``..., are kept)."""
    why = " ".join(reason.replace("--", "-").split())
    keys = carried(entry)
    if superseded_by is not None:
        keys = [(k, v) for k, v in keys if k not in ("valid_to", "superseded_by")]
        keys += [("valid_to", day), ("superseded_by", superseded_by)]
    if keys:
        why += "; " + "; ".join(f"{k}: {v}" for k, v in keys)
    return Entry(entry.text, entry.tag, f"{entry.prompt_line} <!-- left {day}: {why} -->", entry.bullet)


def unarchived(entry: Entry) -> Entry:
    """An archived entry put back in its file (a reverted update): tag and text, the keys it had before
    it left (``valid_from``, ``supersedes``...), without the ``left`` comment, ``valid_to`` and
    ``superseded_by`` its replacement wrote."""
    keys = [(k, v) for k, v in carried(entry) if k not in ("valid_to", "superseded_by")]
    return keyed(Entry(entry.text, entry.tag, None, entry.bullet), keys)


def unlinked(entry: Entry, old_id: str) -> Entry:
    """A successor without its ``supersedes: <old_id>`` (a reverted update); its other keys stay."""
    keys = [(k, v) for k, v in carried(entry) if (k, v) != ("supersedes", old_id)]
    return keyed(Entry(entry.text, entry.tag, None, entry.bullet), keys)


def with_entries(doc: CoreDoc, items: Sequence[Item]) -> CoreDoc:
    return replace(doc, items=tuple(items))


def learnt(entries: Sequence[Entry], day: str) -> list[Entry]:
    """New entries of this month (``day``'s) with ``valid_from: <day>``, the day they were learnt, so
    ``as_of`` an earlier day of the month leaves them out (the tag alone says only the month); an entry
    given with an older tag keeps just its tag (its day is not known)."""
    return [versioned(e, valid_from=day) if e.tag == day[:7] and e.raw is None else e for e in entries]


def new_entries(update: str | Sequence[str], tag: str) -> list[Entry]:
    """Entries from what a caller gives ``core_update``: a list of entries, or text (one entry per
    line; bullets and a leading ``[YYYY-MM]`` are read). Untagged ones get ``tag`` (this month)."""
    if isinstance(update, str):
        pieces = [e for e in parse_items(update) if isinstance(e, Entry)]
        raw = [p.prompt_line for p in pieces]
    else:
        if not all(isinstance(u, str) for u in update):
            raise InvalidInput("core entries must be strings")
        raw = [" ".join(u.split()) for u in update]
    out: list[Entry] = []
    for line in raw:
        content = _BULLET_RE.sub("", line, count=1)
        found = TAG_RE.match(content)
        text = clean(content[found.end() :] if found else content)
        if text:
            given = found.group(1) if found else None
            out.append(Entry(text, given if given is not None and given <= tag else tag))
    return out
