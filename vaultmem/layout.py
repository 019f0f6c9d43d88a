"""Where things live in a vault. Pure path arithmetic: no I/O beyond ``is_vault``.

<vault>/
  .vaultmem/            engine-internal state (never edit by hand)
    chunks.db           SQLite index: rows, FTS5, vectors, jobs (rebuildable from the files)
    config.toml         vault configuration
    intent/             write-ahead notes of batches in flight (healed on open)
    restoring/          write-ahead notes of restores of forgotten leaves in flight (finished on open)
    write.lock          held while a process writes
    daemon.lock         held by the running `vaultmem watch` (one per vault)
    daemon.json         the daemon's status: pid, host, last event, queue depth, warnings
    watch-seen.json     Markdown files the daemon read as notes (or found invalid), with their stamps
    treeops/            write-ahead notes of compactions in flight (replayed on open)
    reserve             1 MiB set aside while workers run; freed on a full disk to give jobs back
  sources/<source>/_fresh/<leaf>.md     new leaves
  sources/<source>/NN-slug/_summary.md  sealed levels (compactor)
  topics/ global/                       topic trees, the daily digest
  core/ sessions/ episodes/ recipes/    the agent's own memory (memindex)
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from vaultmem.model import safe_name
from vaultmem.redact import scrub

STATE_DIR = ".vaultmem"
DB_NAME = "chunks.db"
CONFIG_NAME = "config.toml"
SOURCES = "sources"
FRESH = "_fresh"
SUMMARY_NAME = "_summary.md"
SIDECAR_NAME = "_embeddings.json"
RESERVED_TOP = ("sources", "topics", "global", "core")
# The agent's own memory (core files, session notes, episodes, recipes): indexed by ``memindex``.
AGENT_TOPS = ("core", "sessions", "episodes", "recipes")
# Directories and files the engine never indexes.
REVIEW = "review"  # the review inbox (vaultmem.review): never indexed
TOMBSTONES = ".trash/vaultmem/forgotten"  # forgotten leaves, one folder per id (vaultmem.forget)
IGNORED_DIRS = frozenset({".vaultmem", ".obsidian", ".git", ".trash", "node_modules"})

_SLUG_RE = re.compile(r"[^a-z0-9]+")
# A section of a note written by hand, indexed where it is (no file of its own): ``<note>#<leaf id>``.
_SECTION_RE = re.compile(r"^(?P<note>.+\.md)#(?P<id>[0-9a-f]{16})$")


def section_path(note: str, leaf_id: str) -> str:
    """The index path of one section of the note ``note`` (a vault path): the note and the leaf id."""
    return f"{note}#{leaf_id}"


def note_of(path: str) -> str | None:
    """The note a section row's path names (``Travel/Kyoto trip.md#<id>`` -> ``Travel/Kyoto trip.md``);
    None for a path of a file of its own."""
    if "#" not in path:  # every other row (called per row on hot paths: a substring test first)
        return None
    found = _SECTION_RE.match(path)
    return found.group("note") if found else None


def section_range(note: str) -> tuple[str, str]:
    """``path >= lo AND path < hi`` holds exactly the section rows of ``note`` (by the path index)."""
    return note + "#", note + "$"


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    @property
    def db(self) -> Path:
        return self.state / DB_NAME

    @property
    def config(self) -> Path:
        return self.state / CONFIG_NAME

    @property
    def intent(self) -> Path:
        return self.state / "intent"

    @property
    def restoring(self) -> Path:
        return self.state / "restoring"

    @property
    def notes_pending(self) -> Path:
        """Notes whose section rows are being written (after their document's files): read again on
        open when a crash came between the two."""
        return self.state / "notes-pending"

    @property
    def lock(self) -> Path:
        return self.state / "write.lock"

    @property
    def daemon_lock(self) -> Path:
        return self.state / "daemon.lock"

    @property
    def daemon_status(self) -> Path:
        return self.state / "daemon.json"

    @property
    def watch_seen(self) -> Path:
        return self.state / "watch-seen.json"

    @property
    def writing(self) -> Path:
        """Present while a writer holds the lock; found at the next lock after a writer died."""
        return self.state / "writing"

    @property
    def reserve(self) -> Path:
        """Disk space set aside by a worker pool, given back on a full disk so it can return its jobs."""
        return self.state / "reserve"

    @property
    def treeops(self) -> Path:
        """Write-ahead notes of tree operations (seal, merge, condense) in flight; replayed on open."""
        return self.state / "treeops"

    def source_dir(self, source: str) -> Path:
        return self.root / SOURCES / safe_name(source)

    def fresh_dir(self, source: str) -> Path:
        return self.source_dir(source) / FRESH

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def abs(self, rel: str) -> Path:
        pure = PurePosixPath(rel)
        if pure.is_absolute() or ".." in pure.parts:
            raise ValueError(f"not a vault-relative path: {rel!r}")
        return self.root.joinpath(*pure.parts)

    def is_vault(self) -> bool:
        return self.state.is_dir()


def in_sealed_level(rel: str) -> bool:
    """True for a file inside a source tree's sealed level (``sources/<s>/NN-slug/...``), not ``_fresh``."""
    parts = rel.split("/", 3)  # the index's paths are normalised: no "//", no "." part (per row: no Path)
    if "" in parts or "." in parts:
        parts = list(PurePosixPath(rel).parts)
    return len(parts) >= 4 and parts[0] == SOURCES and parts[2] != FRESH


def file_in(rel: str, top: str, archive: str = "_archive") -> tuple[str, bool] | None:
    """(name, archived) for ``<top>/<name>.md`` or ``<top>/<archive>/<name>.md``; None for any other path
    (the agent's core files and recipes are named by their file)."""
    parts = rel.split("/")
    if not rel.endswith(".md") or parts[0] != top:
        return None
    if len(parts) == 2:
        return parts[1][:-3], False
    if len(parts) == 3 and parts[1] == archive:
        return parts[2][:-3], True
    return None


def is_ignored(rel: str) -> bool:
    """True for paths the engine never indexes: engine state, editor and VCS folders, temp files, the
    review inbox (``review/`` at the top)."""
    parts = PurePosixPath(rel).parts
    if any(part in IGNORED_DIRS or part.startswith(".") for part in parts) or parts[:1] == (REVIEW,):
        return True
    name = parts[-1] if parts else ""
    return (
        name.endswith(("~", ".swp", ".swx", ".tmp")) or "sync-conflict" in name or "conflicted copy" in name
    )


# A word of a folder name: letters and digits of any script, with the parts of an identifier joined by
# ``_`` (``fastcgi_param``), by single dots (a version ``v0.9.2``, ``node.js``, ``16.2``) or by single
# hyphens (``X-Payflow-Retry``, ``on-call``) kept together, and a possessive ``'s`` (``Mara's``) left out.
_FOLDER_WORD_RE = re.compile(r"[^\W_]+(?:(?:_+|[.-])[^\W_]+)*")
_FOLDER_POSSESSIVE_RE = re.compile(r"(?<=[^\W_])['\u2019][sS](?![^\W_])")
_FOLDER_CJK = "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]"


@functools.cache
def _folder_cjk_re() -> re.Pattern[str]:
    """Compiled on first use: a class this wide costs ~5 ms to compile, and most commands never name a
    folder."""
    return re.compile(_FOLDER_CJK)


def folder_words(title: str) -> list[str]:
    """The words a level folder's name is made of, lower-case: runs of letters and digits in any script;
    an identifier's ``_``-, ``.``- or ``-``-joined parts stay one word (``fastcgi_param`` ->
    ``fastcgi-param``, ``v0.9.2`` -> ``v0-9-2``: a version is never cut to ``v0``; ``X-Payflow-Retry``
    never to ``x``), a possessive ``'s`` goes (``Mara's`` -> ``mara``, not ``mara`` and a lone ``s``)."""
    text = _FOLDER_POSSESSIVE_RE.sub("", title.lower())
    return [re.sub("[_.]+", "-", word) for word in _FOLDER_WORD_RE.findall(text)]


def folder_slug(title: str, words: int = 5, max_len: int = 40) -> str:
    """A level folder's name from its title: lower-case whole words joined by ``-`` (may be empty).

    Words are runs of letters and digits in any script (``folder_words``), so 京都旅行 or café stay
    readable (Obsidian and every current file system take Unicode names); an identifier such as
    ``fastcgi_param`` or a version such as ``v0.9.2`` is one word, kept whole or left out (alone and too long: its leading parts). A word that would pass ``max_len`` characters
    is left out, never cut, except a first word longer than the limit (a CJK run has no spaces), which is
    cut at a character. Redacted first, like every name."""
    head = " ".join(title.split(maxsplit=words * 2 + 4)[: words * 2 + 4])
    kept: list[str] = []
    size = 0
    for word in folder_words(scrub(head)):
        if len(kept) == words:
            break
        cost = len(word) + (1 if kept else 0)
        if size + cost > max_len:
            if not kept and _folder_cjk_re().match(word):
                kept.append(word[:max_len])
            elif not kept and "-" in word:  # a long identifier alone: its leading parts, each whole
                parts = word.split("-")
                while parts and len("-".join(parts)) > max_len:
                    parts.pop()
                kept.extend(parts[:1] and ["-".join(parts)])
            break
        kept.append(word)
        size += cost
    return "-".join(kept)


def slug(text: str, words: int = 6, max_len: int = 48) -> str:
    """A short lowercase ASCII slug for a readable file name (may be empty).

    A file or folder name is as public as a commit message, so the words it is made of are redacted
    first: a secret becomes ``redacted-<kind>``. Only the leading whitespace-separated words are looked
    at (whole words, so a secret is never cut in two and missed)."""
    head = " ".join(text.split(maxsplit=words * 2 + 4)[: words * 2 + 4])
    tokens = [t for t in _SLUG_RE.split(scrub(head).lower()) if t][:words]
    return "-".join(tokens)[:max_len].strip("-")
