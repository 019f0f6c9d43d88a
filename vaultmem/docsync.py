"""Documents kept whole and current: one source file, one subtree, updated in place.

A document (a Markdown or text file: a note in the vault, or a file of an ingested folder) is one level
folder ``sources/<source>/<folder>/.../<document>/``: its ``_summary.md`` is the document node (the
page's title, its own frontmatter keys kept byte for byte, ``document: <path>`` naming the file it
mirrors) and its leaves are the page's sections in reading order (``order``), each headed by the page
title and its heading path. Each folder of the original tree is a level too (``document: <path>/``), so
the folder structure is the upper levels. The compactor never clusters these levels (they are not
buffer leaves and their summaries carry ``document``).

A leaf is keyed by (document, heading path, chunk number): when the file changes, a section that
survives keeps its leaf (id, file, user keys) and its text is replaced in place; a section whose heading
was renamed or that moved keeps its leaf when its text matches; removed sections leave the index and the
vault (a copy goes to ``.trash/vaultmem/<time>/``, and git keeps the history); new sections join. The
document node and the folders above go stale once (one re-summarisation each).

Links are rewritten by one rule (docs/format.md, "Documents"): a wikilink or Markdown link to a page of
the same source points at the document node (``[[sources/.../_summary|Page]]``), a heading link at the
leaf that holds the heading, a link to a file that exists in the vault stays as written, and anything
else becomes its label as plain text, so a link never makes a ghost note in Obsidian.

A note written by hand in the vault (outside ``sources/``) is indexed where it is, never copied: its
document node is the same ``_summary.md`` (with ``note_path`` and ``note_sections``, the ids of its
sections), but each section is an index row without a file, ``<note>#<leaf id>``, whose parent is the
node; the note is never written and its links are not rewritten (``_build_note``).

Never: renames a leaf file or changes an id; writes or removes a file it did not read (hash-guarded
steps through ``steps``); removes a file that is not kept elsewhere: git's history when the vault
commits, else a copy in ``.trash/vaultmem/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path, PurePosixPath

from vaultmem import docmem, frontmatter, fsio, index, leaffile, steps, wikilinks
from vaultmem.chunker import chunk_id, chunk_message
from vaultmem.db import atomic
from vaultmem.errors import ConflictError, FrontmatterError, VaultError
from vaultmem.inputs import docs
from vaultmem.jobs import JobQueue, admit_job
from vaultmem.layout import (
    IGNORED_DIRS,
    SIDECAR_NAME,
    SOURCES,
    SUMMARY_NAME,
    Layout,
    note_of,
    section_path,
    section_range,
)
from vaultmem.model import LEAF_ID_RE, InputKind, Leaf, Message, Status, format_ts
from vaultmem.order import format_order, ord_of, order_after, order_between
from vaultmem.redact import scrub
from vaultmem.scoring import FastScorer
from vaultmem.stale import ancestors_of, mark_stale
from vaultmem.steps import FileWrite, TreeOp
from vaultmem.summarise import BREADCRUMB
from vaultmem.summaryfile import (
    SUMMARY_KEYS,
    ChildLink,
    SummaryNode,
    clean_title,
    parse_summary,
    render_summary,
    summary_id,
    text_hash,
)
from vaultmem.tokens import count_tokens

TRASH = ".trash/vaultmem"
PAGE_KEYS = "from_page"  # a page's keys named like the engine's own, kept on its node (``page_keys``)
_MERGED = frozenset({"title", "aliases"})  # page keys the document node takes as its own
STEP_DOCUMENTS = 64  # documents written as one durable step (one fsync of their files)
_DEVICE = re.compile(r"^(con|prn|aux|nul|com\d|lpt\d)(\..*)?$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*)$")
_BLOCK_ID = re.compile(r"(?:^|[ \t])\^([A-Za-z0-9-]+)[ \t]*$", re.MULTILINE)  # Obsidian's ``^block-id``


# -- documents from messages ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Section:
    key: str  # the heading path, with ``#2``... for a repeated one ("" for the text before any heading)
    path: tuple[str, ...]  # heading path
    body: str  # the section's text without its heading line
    at: int = -1  # which heading of the file starts it (``inputs.docs.headings``); -1: the text before any


@dataclass(frozen=True)
class Document:
    source: str
    name: str  # the file's path within its folder (posix), e.g. ``Plugins/Canvas.md``
    title: str
    front: str  # the page's frontmatter as YAML text ("" for none), redacted
    sections: tuple[Section, ...]
    ts: datetime | None = None
    note: str = ""  # a note of the vault: its vault path (its leaves say so; its deletion removes them)


def split_documents(messages: Iterable[Message]) -> tuple[list[Document], list[Message]]:
    """Document sections (``InputKind.DOC``, one message per section as ``inputs.docs`` reads them)
    grouped into documents, and every other message as it was. Messages must be redacted already."""
    groups: dict[tuple[str, str], list[Message]] = {}
    rest: list[Message] = []
    for message in messages:
        if message.kind is InputKind.DOC and message.session:
            groups.setdefault((message.source, message.session), []).append(message)
        else:
            rest.append(message)
    docs = []
    for (source, name), parts in groups.items():
        sections: list[Section] = []
        seen: dict[str, int] = {}
        h1 = ""
        for part in parts:
            path = tuple(p.strip() for p in part.meta.get("heading_path", "").split(" > ") if p.strip())
            text = part.text.strip()
            first, _, after = text.partition("\n")
            heading = _HEADING.match(first)
            if path and heading:
                text = after.strip()
                if len(heading.group(1)) == 1 and not h1:
                    h1 = heading.group(2).strip()
            key = " > ".join(path)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key = f"{key}#{seen[key]}"
            number = (part.source_id or "").rsplit("#", 1)[-1]
            sections.append(Section(key, path, text, int(number) - 1 if number.isdigit() and path else -1))
        meta = parts[0].meta
        stem = PurePosixPath(name).stem
        title = meta.get("title") or h1 or stem
        docs.append(
            Document(
                source,
                name,
                title,
                meta.get("frontmatter", ""),
                tuple(sections),
                parts[0].ts,
                meta.get("note", ""),
            )
        )
    return docs, rest


# -- where a document lives -------------------------------------------------------------------------------
_POSSESSIVE = re.compile(r"(?<=[^\W_])['\u2019][sS](?![^\W_])")


def folder_slug(name: str, max_len: int = 60) -> str:
    """A folder name kept readable: letters of any script, digits, ``_`` and ``-``; secrets scrubbed first.
    A possessive ``'s`` goes (``Router's DHCP`` -> ``router-dhcp``, not ``router-s-dhcp``) and a long name
    ends at a whole word (a single word longer than ``max_len`` is cut at a character)."""
    cleaned = re.sub(r"[^\w]+", "-", _POSSESSIVE.sub("", scrub(name).lower())).strip("-_.")
    if len(cleaned) > max_len:
        whole = cleaned[: max_len + 1].rpartition("-")[0] if cleaned[max_len] != "-" else cleaned[:max_len]
        cleaned = (whole or cleaned[:max_len]).strip("-_.")
    cleaned = cleaned or "untitled"
    return f"{cleaned}-doc" if _DEVICE.match(cleaned) else cleaned


def _doc_rows(conn: sqlite3.Connection, source: str) -> dict[str, sqlite3.Row]:
    """Document and folder nodes of ``source`` by the path they mirror."""
    out = {}
    for row in conn.execute(
        "SELECT id, path, depth, status, json_extract(provenance, '$.document') AS document,"
        " json_extract(provenance, '$.note') AS note FROM chunks"
        " WHERE kind = 'summary' AND source = ? AND json_extract(provenance, '$.document') IS NOT NULL",
        (source,),
    ):
        out[str(row["document"])] = row
    return out


def _node_row(conn: sqlite3.Connection, node_id: str, name: str) -> sqlite3.Row | None:
    """A document or folder node's row as ``_doc_rows`` gives it (``name``: the path it mirrors)."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT id, path, depth, status, ? AS document, json_extract(provenance, '$.note') AS note"
        " FROM chunks WHERE id = ?",
        (name, node_id),
    ).fetchone()
    return row


def _node_note(row: sqlite3.Row | dict[str, object]) -> str | None:
    """The note a document node indexes in place (None for a mirrored document or a folder)."""
    note = row["note"] if "note" in row.keys() else None  # noqa: SIM118 (sqlite3.Row: `in` looks at values)
    return str(note) if note else None


def section_rows(conn: sqlite3.Connection, note: str) -> list[sqlite3.Row]:
    """The rows of the sections of a note indexed in place (``<note>#<leaf id>``)."""
    lo, hi = section_range(note)
    return list(conn.execute("SELECT * FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?", (lo, hi)))


def _leaf_rows(conn: sqlite3.Connection, directory: str) -> list[sqlite3.Row]:
    prefix = directory + "/"
    return [
        row
        for row in conn.execute(
            "SELECT * FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?",
            (prefix, prefix[:-1] + "0"),
        )
        if "/" not in row["path"][len(prefix) :]
    ]


# -- planning --------------------------------------------------------------------------------------------
@dataclass
class _Chunk:
    key: str  # section key
    seq: int
    path: tuple[str, ...]
    raw: str  # the chunk's text as in the file (links not yet rewritten)
    leaf_id: str = ""
    file: str = ""  # vault-relative leaf path
    row: sqlite3.Row | None = None  # the leaf it replaces in place
    order: Decimal = Decimal(0)
    restored: bool = False  # a note's section whose row was gone: made again with its recorded id


@dataclass
class _DocPlan:
    doc: Document
    directory: str
    node_id: str
    chunks: list[_Chunk]
    existing: sqlite3.Row | None
    removed: list[sqlite3.Row] = field(default_factory=list)
    # Where a link's anchor lands: heading path (casefolded, " > ") -> leaf stem, in reading order, and
    # block id (``^id`` at the end of a paragraph, Obsidian's block reference) -> leaf stem.
    headings: dict[str, str] = field(default_factory=dict)
    blocks: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Step:
    name: str
    node_id: str
    message: str
    writes: list[FileWrite]
    removes: list[tuple[str, str | None]]
    queued: list[tuple[str, int]]
    ancestors: list[str]  # levels above the document that go stale once it is written
    # A note indexed in place: its section rows (written after the files), ids whose rows leave, ids
    # to embed and admit; ``changed`` is False when only the note's recorded stamp moves.
    rows: list[tuple[object, ...]] = field(default_factory=list)
    drop: list[str] = field(default_factory=list)
    admit: list[str] = field(default_factory=list)
    changed: bool = True
    note: str | None = None  # the vault path of a note indexed in place


@dataclass
class SyncReport:
    documents: int = 0
    added: list[str] = field(default_factory=list)  # leaf ids
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    deleted_documents: list[str] = field(default_factory=list)
    trash: list[str] = field(default_factory=list)  # copies of what left the vault
    warnings: list[str] = field(default_factory=list)


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _similar(a: str, b: str) -> float:
    wa, wb = _words(a), _words(b)
    return len(wa & wb) / len(wa | wb) if wa | wb else 1.0


def _body_of(text: str) -> str:
    return text.split("\n\n", 1)[1] if "\n\n" in text else ""


class Syncer:
    """Keeps the documents of one source in step with their files (the caller holds the write lock)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        layout: Layout,
        source: str,
        *,
        scorer: FastScorer,
        max_tokens: int,
        max_bytes: int,
        model: str = "",
        dim: int = 0,
        trash: bool = True,
    ) -> None:
        self.conn, self.layout, self.source = conn, layout, source
        self.trash = trash  # copy what leaves into .trash/ (off when git keeps the history)
        self.scorer, self.max_tokens, self.max_bytes = scorer, max_tokens, max_bytes
        self.model, self.dim = model, dim
        self.root = f"{SOURCES}/{source}"
        self.nodes = _doc_rows(conn, source)
        self.report = SyncReport()
        self._vault_names: set[str] | None = None
        self._name_index: tuple[dict[str, _DocPlan], dict[str, list[str]]] | None = None
        self._trashed: set[str] = set()
        self._read_nodes: dict[str, tuple[str, SummaryNode, frontmatter.MdDoc]] = {}
        self._taken: set[str] = {PurePosixPath(r["path"]).parent.as_posix() for r in self.nodes.values()}

    # -- the whole run ---------------------------------------------------------------------------------
    def sync(self, docs: Sequence[Document], *, gone: Iterable[str] = ()) -> SyncReport:
        """Bring these documents in step (new, changed, unchanged) and delete the documents named in
        ``gone`` (files that no longer exist). A document that vanished while a new one of mostly the
        same sections appeared was renamed or moved: its subtree moves and keeps its leaves."""
        gone = [g for g in gone if g in self.nodes and not g.endswith("/")]
        fresh = [d for d in docs if d.name not in self.nodes]
        for doc in fresh:
            old = self._renamed_from(doc, gone)
            if old is not None:
                gone.remove(old)
                self._move_document(old, doc.name)
        plans = [self._plan(doc) for doc in docs]
        headings = {p.doc.name: p for p in plans}
        built = [step for plan in plans if (step := self._build(plan, headings)) is not None]
        for start in range(0, len(built), STEP_DOCUMENTS):
            self._run(built[start : start + STEP_DOCUMENTS])
        for name in gone:
            self.delete(name)
        self._tidy_folders()
        return self.report

    def _tidy_folders(self) -> None:
        """Folder levels as the pages now are: one left without pages leaves (copied to the trash like a
        page), and each one's ``depth`` is one more than its deepest child level's (a deeper subfolder
        that appeared later raises it; rewritten stale, re-summarised once)."""
        folders = sorted(
            ((k, r) for k, r in self.nodes.items() if k.endswith("/")), key=lambda kr: -kr[0].count("/")
        )
        height: dict[str, int] = {}
        writes: list[FileWrite] = []
        queued: list[tuple[str, int]] = []
        for key, row in folders:
            now = self.conn.execute("SELECT depth FROM chunks WHERE id = ?", (row["id"],)).fetchone()
            if now is None:
                continue  # its step did not run (a conflict, reported): nothing to tidy
            directory = str(PurePosixPath(row["path"]).parent)
            below = docmem.siblings(self.conn, directory)
            levels = [r for r in below if r["kind"] == "summary"]
            if not below:
                self._to_trash([directory])
                plan = docmem.plan_delete(self.conn, self.layout, row["id"], max_bytes=self.max_bytes)
                docmem.run(
                    self.conn, self.layout, plan, model=self.model, dim=self.dim, max_bytes=self.max_bytes
                )
                self.report.deleted_documents.append(key)
                del self.nodes[key]
                continue
            want = 1 + max((height.get(str(r["id"]), int(r["depth"])) for r in levels), default=0)
            height[str(row["id"])] = want
            if want != int(now["depth"]):
                rel = f"{directory}/{SUMMARY_NAME}"
                try:
                    writes.append(
                        docmem.summary_write(self.layout, rel, self.max_bytes, depth=want, stale=True)
                    )
                except VaultError as exc:
                    self.report.warnings.append(f"{rel}: depth not updated ({exc})")
                    continue
                queued.append((str(row["id"]), want))
        if writes:
            op = TreeOp(
                "docmem",
                self.source,
                f"memory: {len(writes)} folder levels take the depth of their pages ({self.source})",
                tuple(writes),
                (),
                tuple(queued),
            )
            try:
                steps.apply(self.conn, self.layout, op, self.model, self.dim)
            except ConflictError as exc:
                self.report.warnings.append(f"folder depths not updated: {exc}")
                return
            for key, row in folders:
                if key in self.nodes:
                    self.nodes[key] = _node_row(self.conn, row["id"], key)  # type: ignore[assignment]

    def delete(self, name: str) -> None:
        row = self.nodes.get(name)
        if row is None:
            return
        directory = str(PurePosixPath(row["path"]).parent)
        self._to_trash([directory])
        note = _node_note(row)
        if note is not None:
            # Its sections have no files: their rows leave (the note itself is the person's, kept by
            # git or their editor's trash).
            sections = [str(r["id"]) for r in section_rows(self.conn, note)]
            with atomic(self.conn):
                for part, marks in index.in_batches(sections):
                    self.conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
            self.report.removed.extend(sections)
        plan = docmem.plan_delete(self.conn, self.layout, row["id"], max_bytes=self.max_bytes)
        docmem.run(self.conn, self.layout, plan, model=self.model, dim=self.dim, max_bytes=self.max_bytes)
        self.report.deleted_documents.append(name)
        self.report.removed.extend(i for i in plan.ids if not i.startswith("s"))
        del self.nodes[name]

    # -- renames ----------------------------------------------------------------------------------------
    def _renamed_from(self, doc: Document, gone: list[str]) -> str | None:
        bodies = {text_hash(s.body) for s in doc.sections if s.body}
        best, score = None, 0.5
        for name in gone:
            old = {text_hash(_body_of(r["text"])) for r in self._doc_leaves(self.nodes[name])}
            if not old or not bodies:
                continue
            share = len(old & bodies) / max(len(old), len(bodies))
            if share >= score:
                best, score = name, share
        return best

    def _move_document(self, old: str, new: str) -> None:
        row = self.nodes.pop(old)
        src = str(PurePosixPath(row["path"]).parent)
        writes: list[FileWrite] = []
        queued = self._ensure_folders(new, writes)
        dst = self._place(new)
        op = TreeOp(
            "docmem",
            self.source,
            f"memory: move the document {old} to {new} ({self.source})",
            tuple(writes),
            ((src, dst),),
            tuple(queued),
        )
        stale = ancestors_of(self.conn, row["id"])
        steps.apply(self.conn, self.layout, op, self.model, self.dim)
        self._mark(stale)
        self.nodes[new] = _node_row(self.conn, row["id"], new)  # type: ignore[assignment]

    def renamed_from(self, doc: Document, gone: Sequence[str]) -> str | None:
        """The note among ``gone`` (document names of this source whose files vanished) that ``doc``, a
        note of another top folder, is: moved there (None when none holds mostly its sections)."""
        notes = [n for n in gone if n in self.nodes and _node_note(self.nodes[n]) is not None]
        return self._renamed_from(doc, notes) if doc.note else None

    def adopt(self, other: Syncer, old: str, doc: Document) -> None:
        """A note moved to another top folder (``other``'s source) and seen as ``doc`` here: its document
        node comes over keeping its id, written anew under this source's folders (the node file names
        its source) with the engine's files of its old folder removed; the node keeps naming the old
        note path until the note is read (``sync``), so its sections, found by that path, keep their ids
        and rows. The old folder levels above it go stale (or leave when empty: ``_tidy_folders``)."""
        row = other.nodes[old]
        src = str(PurePosixPath(row["path"]).parent)
        rel = f"{src}/{SUMMARY_NAME}"
        digest, node, kept = other._node_file(rel)
        writes: list[FileWrite] = []
        queued = self._ensure_folders(doc.name, writes)
        dst = self._place(doc.name)
        moved = replace(node, source=self.source, path=f"{dst}/{SUMMARY_NAME}", document=doc.name, stale=True)
        writes.append(FileWrite(moved.path, render_summary(moved, keep=kept), None))
        queued.append((node.id, node.depth))
        removes: list[tuple[str, str | None]] = [(rel, digest)]
        if self.layout.abs(f"{src}/{SIDECAR_NAME}").is_file():
            removes.append((f"{src}/{SIDECAR_NAME}", None))
        op = TreeOp(
            "docmem",
            self.source,
            f"memory: move the note {old} of {other.source} to {doc.name} ({self.source})",
            tuple(writes),
            (),
            tuple(queued),
            {},
            tuple(removes),
            (src,),
        )
        stale = ancestors_of(self.conn, row["id"])
        steps.apply(self.conn, self.layout, op, self.model, self.dim)
        other._mark(
            [s for s in stale if self.conn.execute("SELECT 1 FROM chunks WHERE id = ?", (s,)).fetchone()]
        )
        del other.nodes[old]
        self.nodes[doc.name] = _node_row(self.conn, node.id, doc.name)  # type: ignore[assignment]

    def _doc_leaves(self, row: sqlite3.Row) -> list[sqlite3.Row]:
        """The leaf rows of a document: a note's sections, else the leaf files in its folder."""
        note = _node_note(row)
        if note is not None:
            return section_rows(self.conn, note)
        return _leaf_rows(self.conn, str(PurePosixPath(row["path"]).parent))

    def _node_file(self, rel: str) -> tuple[str, SummaryNode, frontmatter.MdDoc]:
        """(hash read, node, its frontmatter) of a document node's file, read once per plan: the
        recorded ids and the node's rewrite both need it (raises as ``parse_summary``)."""
        cached = self._read_nodes.pop(rel, None)  # a file is used by one plan, then maybe rewritten
        if cached is not None:
            return cached
        data, digest = fsio.read_text_guarded(self.layout.abs(rel), self.max_bytes)
        node, kept = parse_summary(data, rel)
        return digest, node, kept

    def _recorded(self, directory: str) -> dict[tuple[str, int], str]:
        """A note's section ids as its document node records them: (section key, chunk number) -> id."""
        rel = f"{directory}/{SUMMARY_NAME}"
        try:
            _digest, node, _kept = self._node_file(rel)
        except (FileNotFoundError, FrontmatterError, VaultError):
            return {}
        self._read_nodes[rel] = (_digest, node, _kept)  # the node's rewrite reads it from here
        out: dict[tuple[str, int], str] = {}
        for line in node.sections:
            leaf_id, _, rest = line.partition(" ")
            seq, _, key = rest.partition(" ")
            if LEAF_ID_RE.match(leaf_id) and seq.isdigit():
                out[(key, int(seq))] = leaf_id
        return out

    # -- one document -----------------------------------------------------------------------------------
    def _place(self, name: str) -> str:
        """The folder of a new document: its folders' levels, then a name free on disk and in the index."""
        parent = self._folder_dir(name)
        base = f"{parent}/{folder_slug(PurePosixPath(name).stem)}"
        candidate, n = base, 1
        while candidate in self._taken or self.layout.abs(candidate).exists():
            n += 1
            candidate = f"{base}-{n}"
        self._taken.add(candidate)
        return candidate

    def _folder_dir(self, name: str) -> str:
        directory = self.root
        parts = PurePosixPath(name).parts[:-1]
        for n in range(len(parts)):
            key = "/".join(parts[: n + 1]) + "/"
            row = self.nodes.get(key)
            directory = (
                str(PurePosixPath(row["path"]).parent)
                if row is not None
                else f"{directory}/{folder_slug(parts[n])}"
            )
        return directory

    def _ensure_folders(self, name: str, writes: list[FileWrite]) -> list[tuple[str, int]]:
        """Level files for the folders above ``name`` that have none yet (written stale, queued)."""
        queued: list[tuple[str, int]] = []
        parts = PurePosixPath(name).parts[:-1]
        directory = self.root
        for n in range(len(parts)):
            key = "/".join(parts[: n + 1]) + "/"
            row = self.nodes.get(key)
            if row is not None:
                directory = str(PurePosixPath(row["path"]).parent)
                continue
            directory = f"{directory}/{folder_slug(parts[n])}"
            if self.layout.abs(f"{directory}/{SUMMARY_NAME}").exists():
                continue  # a level of another kind holds the name: the document goes under it
            node = SummaryNode(
                id=summary_id(self.source, f"folder:{key}"),
                source=self.source,
                path=f"{directory}/{SUMMARY_NAME}",
                depth=len(parts) - n + 1,
                title=clean_title(scrub(parts[n])),
                text=f"The folder {clean_title(scrub(parts[n]))}.",
                stale=True,
                document=key,
            )
            writes.append(FileWrite(node.path, render_summary(node), None))
            queued.append((node.id, node.depth))
            self._taken.add(directory)
            self.nodes[key] = {"id": node.id, "path": node.path, "depth": node.depth, "note": None}  # type: ignore[assignment]
        return queued

    def _chunks(self, doc: Document) -> list[_Chunk]:
        out = []
        for section in doc.sections:
            if not section.body:
                continue
            head = self._heading(doc, section)
            budget = max(32, self.max_tokens - count_tokens(head))
            message = Message(source=doc.source, text=section.body, kind=InputKind.DOC, source_id=section.key)
            for chunk in chunk_message(message, budget):
                out.append(_Chunk(section.key, chunk.seq, section.path, chunk.text.strip()))
        return out

    @staticmethod
    def _heading(doc: Document, section: Section) -> str:
        path = list(section.path)
        if path and path[0].casefold() == doc.title.casefold():
            path = path[1:]
        level = min(6, max(1, len(section.path)))
        return f"{'#' * level} {BREADCRUMB.join([doc.title, *path])}"

    def _plan(self, doc: Document) -> _DocPlan:
        existing = self.nodes.get(doc.name)
        chunks = self._chunks(doc)
        recorded: dict[tuple[str, int], str] = {}
        if existing is not None:
            directory = str(PurePosixPath(existing["path"]).parent)
            node_id = str(existing["id"])
            old = self._doc_leaves(existing)
            if doc.note:
                recorded = self._recorded(directory)
        else:
            directory = self._place(doc.name)
            node_id = summary_id(self.source, f"document:{doc.name}")
            n = 1
            while self.conn.execute("SELECT 1 FROM chunks WHERE id = ?", (node_id,)).fetchone():
                # the id of a document that was here, then renamed or moved (it kept its id)
                n += 1
                node_id = summary_id(self.source, f"document:{doc.name}#{n}")
            old = []
        plan = _DocPlan(doc, directory, node_id, chunks, existing)
        self._match(plan, old, recorded)
        for chunk in chunks:
            if chunk.seq == 0 and chunk.path:
                plan.headings.setdefault(" > ".join(chunk.path).casefold(), PurePosixPath(chunk.file).stem)
            for block in _BLOCK_ID.findall(chunk.raw):
                plan.blocks.setdefault(block.casefold(), PurePosixPath(chunk.file).stem)
        return plan

    def _match(
        self, plan: _DocPlan, old: list[sqlite3.Row], recorded: dict[tuple[str, int], str] | None = None
    ) -> None:
        def local(row: sqlite3.Row) -> tuple[str, int]:
            return str(row["source_id"] or "").partition("#")[2], int(row["seq"])

        by_key = {local(r): r for r in old}
        free = dict(by_key)
        waiting: list[_Chunk] = []
        for chunk in plan.chunks:
            row = free.pop((chunk.key, chunk.seq), None)
            if row is not None:
                chunk.row = row
            else:
                waiting.append(chunk)
        # A section renamed or moved: the same body (or most of its words) under another key.
        pairs = sorted(
            (
                (_similar(chunk.raw, _body_of(r["text"])), n, k)
                for n, chunk in enumerate(waiting)
                for k, r in free.items()
            ),
            key=lambda t: -t[0],
        )
        used: set[int] = set()
        for score, n, k in pairs:
            if score < 0.5:
                break
            if n in used or k not in free:
                continue
            waiting[n].row = free.pop(k)
            used.add(n)
        plan.removed = list(free.values())
        taken = {str(r["id"]) for r in old}
        note = plan.doc.note
        for chunk in plan.chunks:
            if chunk.row is not None:
                chunk.leaf_id, chunk.file = str(chunk.row["id"]), str(chunk.row["path"])
                if note:
                    chunk.file = section_path(note, chunk.leaf_id)
                continue
            again = (recorded or {}).get((chunk.key, chunk.seq))
            if (
                note
                and again
                and again not in taken
                and not self.conn.execute("SELECT 1 FROM chunks WHERE id = ?", (again,)).fetchone()
            ):
                # Its row is gone (``reindex``): the section takes the id its node recorded.
                taken.add(again)
                chunk.leaf_id, chunk.file, chunk.restored = again, section_path(note, again), True
                continue
            source_id = f"{plan.doc.name}#{chunk.key}"
            leaf_id = chunk_id(self.source, source_id, chunk.seq, chunk.raw)
            while (
                leaf_id in taken
                or self.conn.execute("SELECT 1 FROM chunks WHERE id = ?", (leaf_id,)).fetchone()
            ):
                leaf_id = chunk_id(self.source, source_id, chunk.seq, chunk.raw + "\x1f" + leaf_id)
            taken.add(leaf_id)
            chunk.leaf_id = leaf_id
            name = leaffile.leaf_filename(leaf_id, chunk.raw, format_ts(plan.doc.ts), None)
            chunk.file = section_path(note, leaf_id) if note else f"{plan.directory}/{name}"
        _assign_orders(plan.chunks)

    # -- links ------------------------------------------------------------------------------------------
    def _vault_has(self, link: wikilinks.Link) -> bool:
        if self._vault_names is None:
            names: set[str] = set()
            for dirpath, dirnames, filenames in os.walk(self.layout.root):
                rel = os.path.relpath(dirpath, self.layout.root).replace(os.sep, "/")
                dirnames[:] = [
                    d
                    for d in dirnames
                    if d not in IGNORED_DIRS and not d.startswith(".") and not (rel == "." and d == SOURCES)
                ]
                for name in filenames:
                    path = name if rel == "." else f"{rel}/{name}"
                    for form in (path, name):
                        names.add(form.casefold())
                        if form.endswith(".md"):
                            names.add(form[:-3].casefold())
            self._vault_names = names
        return link.target.casefold() in self._vault_names

    def _names(self, plans: dict[str, _DocPlan]) -> dict[str, list[str]]:
        """Page names by what a link may call them: the path without ``.md``, the file stem."""
        if self._name_index is None or self._name_index[0] is not plans:
            index: dict[str, list[str]] = {}
            for name in set(plans) | {n for n in self.nodes if not n.endswith("/")}:
                bare = (name[:-3] if name.endswith(".md") else name).casefold()
                index.setdefault(bare, []).append(name)
                stem = PurePosixPath(name).stem.casefold()
                if stem != bare:
                    index.setdefault(stem, []).append(name)
            self._name_index = (plans, index)
        return self._name_index[1]

    def _lookup(
        self, target: str, plans: dict[str, _DocPlan]
    ) -> tuple[str, dict[str, str], dict[str, str]] | None:
        """(document folder, headings, blocks) of the page a link names: by path, else by file name."""
        wanted = re.sub(r"^(\.\.?/)+", "", target).casefold()
        names = self._names(plans)
        matches = list(names.get(wanted, ()))
        if not matches and "/" in wanted:
            matches = [n for key, found in names.items() if key.endswith("/" + wanted) for n in found]
        if not matches:
            return None
        name = sorted(matches, key=lambda n: (n.count("/"), n))[0]
        if (name in plans and plans[name].doc.note) or (name not in plans and _node_note(self.nodes[name])):
            return None  # a note of the vault: the link to it stays as written
        if name in plans:
            return plans[name].directory, plans[name].headings, plans[name].blocks
        directory = str(PurePosixPath(self.nodes[name]["path"]).parent)
        headings: dict[str, str] = {}
        blocks: dict[str, str] = {}
        for row in self._doc_leaves(self.nodes[name]):
            if int(row["seq"]) == 0:
                path = str(row["source_id"] or "").partition("#")[2].split("#")[0]
                if path:
                    headings.setdefault(path.casefold(), PurePosixPath(row["path"]).stem)
            for block in _BLOCK_ID.findall(row["text"]):
                blocks.setdefault(block.casefold(), PurePosixPath(row["path"]).stem)
        return directory, headings, blocks

    def _link_rule(self, plan: _DocPlan, plans: dict[str, _DocPlan]) -> wikilinks.Resolve:
        def resolve(link: wikilinks.Link) -> str:
            found = (
                (plan.directory, plan.headings, plan.blocks)
                if not link.target
                else self._lookup(link.target, plans)
            )
            if found is not None:
                directory, headings, blocks = found
                anchor = link.anchor.strip()
                if anchor.startswith("^"):
                    # A block reference: the leaf holding the block, which still ends with its ``^id``.
                    stem = blocks.get(anchor[1:].casefold())
                    if stem:
                        return wikilinks.wikilink(
                            f"{directory}/{stem}#{anchor}", link.label, embed=link.embed
                        )
                    stem = None
                else:
                    stem = _heading_leaf(headings, anchor)
                target = f"{directory}/{stem}" if stem else f"{directory}/{SUMMARY_NAME}"
                return wikilinks.wikilink(target, link.label, embed=link.embed)
            if link.target and self._vault_has(link):
                return link.raw
            return link.label or link.target.rsplit("/", 1)[-1]

        return resolve

    # -- writing ----------------------------------------------------------------------------------------
    def _build(self, plan: _DocPlan, plans: dict[str, _DocPlan]) -> _Step | None:
        """The writes and removals that bring one document in step; None when it already is."""
        doc = plan.doc
        if doc.note:
            return self._build_note(plan)
        rule = self._link_rule(plan, plans)
        writes: list[FileWrite] = []
        queued: list[tuple[str, int]] = []
        if plan.existing is None:
            queued += self._ensure_folders(doc.name, writes)
        changed = False
        children = []
        for chunk in plan.chunks:
            section = next(s for s in doc.sections if s.key == chunk.key)
            body = wikilinks.rewrite(chunk.raw, rule)
            text = f"{self._heading(doc, section)}\n\n{body}"
            meta = {"file": doc.note or doc.name, "title": doc.title, "heading_path": " > ".join(chunk.path)}
            if doc.note:
                meta["note"] = doc.note
            source_id = f"{doc.name}#{chunk.key}"
            order = format_order(chunk.order)
            children.append(ChildLink(" › ".join(chunk.path) or doc.title, PurePosixPath(chunk.file).name))
            if chunk.row is None:
                leaf = self._new_leaf(chunk, doc, text, source_id, meta, order)
                writes.append(FileWrite(chunk.file, leaffile.render_leaf(leaf), None))
                self.report.added.append(leaf.id)
                changed = True
                continue
            row = chunk.row
            same = (
                row["text"] == text
                and row["source_id"] == source_id
                and int(row["seq"]) == chunk.seq
                and row["session"] == doc.name
                and _row_order(row) == order
            )
            if same:
                self.report.unchanged += 1
                continue
            try:
                data, digest = fsio.read_text_guarded(self.layout.abs(row["path"]), self.max_bytes)
                old, kept = leaffile.parse_leaf(data, row["path"])
            except (FileNotFoundError, FrontmatterError) as exc:
                self.report.warnings.append(f"{row['path']}: not updated ({exc})")
                continue
            new = replace(
                old,
                text=text,
                seq=chunk.seq,
                source_id=source_id,
                session=doc.name,
                message_ids=(source_id,),
                tokens=count_tokens(text),
                content_hash=leaffile.content_hash(text),
                meta={**old.meta, **meta},
                order=order,
            )
            body = leaffile.keep_body(kept, new.text)
            rendered = frontmatter.render(
                leaffile.engine_meta(new), body, keep=kept, owned=leaffile.LEAF_KEYS
            )
            writes.append(FileWrite(row["path"], rendered, digest))
            self.report.updated.append(new.id)
            changed = True
        removes: list[tuple[str, str | None]] = []
        for row in plan.removed:
            found = fsio.file_hash(self.layout.abs(row["path"]))
            if found is not None:
                removes.append((row["path"], found))
            self.report.removed.append(str(row["id"]))
            changed = True
        changed = changed or plan.existing is None
        summary_write = self._summary_write(plan, children, changed)
        if summary_write is not None:
            writes.append(summary_write)
            if changed:
                queued.append((plan.node_id, 1))
        if not writes and not removes:
            return None
        what = "add" if plan.existing is None else "update"
        return _Step(
            doc.name,
            plan.node_id,
            f"{what} the document {doc.name}",
            writes,
            removes,
            queued,
            ancestors_of(self.conn, plan.node_id) if plan.existing is not None else [],
        )

    def _build_note(self, plan: _DocPlan) -> _Step | None:
        """A note written by hand, indexed where it is: one row per section (``<note>#<leaf id>``,
        parent the document node), its text the heading path and the section as the person wrote it
        (never rewritten; nothing is written into the note). The document node's ``_summary.md``
        records the sections' ids, so ``reindex`` gives them back. A note mirrored into the node's
        folder by an older vaultmem moves here: its leaf files leave (trash or git), its rows keep
        their ids, status and entities."""
        doc = plan.doc
        note = doc.note
        writes: list[FileWrite] = []
        queued: list[tuple[str, int]] = []
        if plan.existing is None:
            queued += self._ensure_folders(doc.name, writes)
        stamp = self._stamp(note)
        rows: list[tuple[object, ...]] = []
        admit: list[str] = []
        removes: list[tuple[str, str | None]] = []
        children: list[ChildLink] = []
        sections: list[str] = []
        changed = False
        restored = False
        anchors = self._anchors(doc)
        rule = self._note_rule(note)
        for chunk in plan.chunks:
            section = next(s for s in doc.sections if s.key == chunk.key)
            text = f"{self._heading(doc, section)}\n\n{wikilinks.rewrite(chunk.raw, rule)}"
            heading_path = " > ".join(chunk.path)
            anchor = anchors.get(chunk.key, "")
            meta = {
                "file": note,
                "title": doc.title,
                "heading_path": heading_path,
                "note": note,
                "anchor": anchor,
            }
            source_id = f"{doc.name}#{chunk.key}"
            order = format_order(chunk.order)
            sections.append(f"{chunk.leaf_id} {chunk.seq} {chunk.key}")
            label = wikilinks.section_label(doc.title, heading_path)
            children.append(wikilinks.section_link(label, note, anchor, chunk.leaf_id, plan.directory))
            row = chunk.row
            if row is not None and note_of(row["path"]) is None:
                found = fsio.file_hash(self.layout.abs(row["path"]))
                if found is not None:
                    removes.append((row["path"], found))  # the mirror an older vaultmem wrote
            same = row is not None and (
                row["text"] == text
                and row["path"] == chunk.file
                and row["source_id"] == source_id
                and int(row["seq"]) == chunk.seq
                and row["session"] == doc.name
                and _row_order(row) == order
                and row["parent"] == plan.node_id
                and row["source"] == self.source
                and _anchor_of(row) == anchor
            )
            if same and row is not None and row["file_hash"] == stamp.hash:
                self.report.unchanged += 1
                continue
            if row is None:
                leaf = self._new_leaf(chunk, doc, text, source_id, meta, order)
                admit.append(leaf.id)
                if chunk.restored:
                    restored = True
                else:
                    self.report.added.append(leaf.id)
                    changed = True
            else:
                old = index.row_to_leaf(row)
                leaf = replace(
                    old,
                    source=self.source,  # a note moved to another top folder (``adopt``)
                    path=chunk.file,
                    seq=chunk.seq,
                    source_id=source_id,
                    session=doc.name,
                    message_ids=(source_id,),
                    meta={**old.meta, **meta},
                    order=order,
                )
                if row["text"] != text:
                    score = self.scorer.score(text)
                    leaf = replace(
                        leaf,
                        text=text,
                        ts=doc.ts,
                        status=Status.PENDING if self.scorer.admits(score) else Status.DROPPED,
                        score=score.value,
                        reasons=score.reasons,
                        entities=(),  # read again from the new text when it is admitted
                        tokens=count_tokens(text),
                        content_hash=leaffile.content_hash(text),
                    )
                    admit.append(leaf.id)
                elif note_of(row["path"]) is None:
                    admit.append(leaf.id)  # its vector left with the mirror's file
                if not same:
                    self.report.updated.append(leaf.id)
                    changed = True
            rows.append(index.leaf_row(leaf, stamp, plan.node_id))
        drop = []
        for row in plan.removed:
            if note_of(row["path"]) is None:
                found = fsio.file_hash(self.layout.abs(row["path"]))
                if found is not None:
                    removes.append((row["path"], found))
            drop.append(str(row["id"]))
            self.report.removed.append(str(row["id"]))
            changed = True
        changed = changed or plan.existing is None
        summary_write = self._summary_write(plan, children, changed, tuple(sections))
        if summary_write is not None:
            writes.append(summary_write)
            if changed:
                queued.append((plan.node_id, 1))
        if not writes and not removes and not rows and not drop:
            return None
        return _Step(
            doc.name,
            plan.node_id,
            f"{'add' if plan.existing is None else 'update'} the note {note}",
            writes,
            removes,
            queued,
            ancestors_of(self.conn, plan.node_id) if plan.existing is not None and changed else [],
            rows,
            drop,
            admit,
            changed or restored or bool(writes) or bool(removes),
            note,
        )

    def _note_rule(self, note: str) -> wikilinks.Resolve:
        """A note's links in the text its sections are indexed by (which summaries, topics and digests
        quote from any folder): a link into the note itself names the note (``[[#Food]]`` ->
        ``[[Travel/Kyoto trip#Food|Food]]``), a link to a file of the vault stays as written, and one to
        nothing becomes its label, so a quote never makes a ghost note. The note itself is never
        written."""
        stem = note[:-3] if note.endswith(".md") else note

        def resolve(link: wikilinks.Link) -> str:
            if not link.target:
                if not link.anchor:
                    return link.raw
                return wikilinks.wikilink(f"{stem}#{link.anchor}", link.label, embed=link.embed)
            if self._vault_has(link):
                return link.raw
            return link.label or link.target.rsplit("/", 1)[-1]

        return resolve

    def _anchors(self, doc: Document) -> dict[str, str]:
        """Section key -> the anchor its links name (``wikilinks.heading_anchor`` over every heading of
        the note, those without text of their own included); "" (the note alone) for the text before
        any heading, a heading no link tells apart, one holding a secret, or a note changed since."""
        try:
            heads = docs.headings(fsio.read_text_guarded(self.layout.abs(doc.note), self.max_bytes)[0])
        except (OSError, UnicodeDecodeError, VaultError):
            return {}
        out: dict[str, str] = {}
        for section in doc.sections:
            if not (0 <= section.at < len(heads)) or heads[section.at][1].strip() != section.path[-1]:
                continue
            anchor = wikilinks.heading_anchor(heads, section.at)
            out[section.key] = anchor if scrub(anchor) == anchor else ""
        return out

    def _new_leaf(
        self, chunk: _Chunk, doc: Document, text: str, source_id: str, meta: dict[str, str], order: str
    ) -> Leaf:
        """A new section's leaf: scored (pending, or dropped when the scorer does not admit it)."""
        score = self.scorer.score(text)
        return Leaf(
            id=chunk.leaf_id,
            source=self.source,
            text=text,
            path=chunk.file,
            kind=InputKind.DOC,
            seq=chunk.seq,
            source_id=source_id,
            session=doc.name,
            ts=doc.ts,
            message_ids=(source_id,),
            status=Status.PENDING if self.scorer.admits(score) else Status.DROPPED,
            score=score.value,
            reasons=score.reasons,
            tokens=count_tokens(text),
            content_hash=leaffile.content_hash(text),
            meta=meta,
            order=order,
        )

    def _stamp(self, note: str) -> index.FileStamp:
        """What a note's rows remember of its file (hash, size, mtime): ``changed_paths`` compares it."""
        path = self.layout.abs(note)
        try:
            st = path.stat()
        except FileNotFoundError:
            return index.FileStamp("", 0, 0)
        return index.FileStamp(fsio.file_hash(path) or "", st.st_size, st.st_mtime_ns)

    def _rows(self, batch: list[_Step]) -> None:
        """The section rows of the notes of ``batch`` (after their node files are written)."""
        rows = [r for step in batch for r in step.rows]
        drop = [i for step in batch for i in step.drop]
        if not rows and not drop:
            return
        with atomic(self.conn):
            for part, marks in index.in_batches(drop):
                self.conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
            index.upsert_rows(self.conn, rows)
            JobQueue(self.conn).enqueue_many(admit_job(i) for step in batch for i in step.admit)

    def _run(self, batch: list[_Step]) -> None:
        """Apply a batch of document steps as one durable step; when a file changed meanwhile, each on its own."""
        if not batch:
            return
        self._to_trash([rel for step in batch for rel, _ in step.removes if rel not in self._trashed])
        # A note's section rows are not files: the step below replays its files after a crash, but not
        # these rows. The note's name is written first and read again on open (``notes_cut_off``).
        marker = self.mark_notes([step.note for step in batch if step.note is not None])
        message = batch[0].message if len(batch) == 1 else f"{len(batch)} documents"
        op = TreeOp(
            "docmem",
            self.source,
            f"memory: {message} ({self.source})",
            tuple(w for step in batch for w in step.writes),
            (),
            tuple(q for step in batch for q in step.queued),
            {},
            tuple(r for step in batch for r in step.removes),
        )
        try:
            if op.writes or op.removes:
                steps.apply(self.conn, self.layout, op, self.model, self.dim)
        except ConflictError as exc:
            if len(batch) == 1:
                self.report.warnings.append(f"{batch[0].name}: {exc}")
                self._done(marker)
                return
            for step in batch:
                self._run([step])
            self._done(marker)
            return
        self._rows(batch)
        self._done(marker)
        self.report.documents += sum(1 for step in batch if step.changed)
        self._mark([a for step in batch for a in step.ancestors])
        for step in batch:
            self.nodes[step.name] = _node_row(self.conn, step.node_id, step.name)  # type: ignore[assignment]

    def mark_notes(self, notes: list[str]) -> Path | None:
        """A marker naming notes whose section rows are about to be written (``notes_cut_off``)."""
        if not notes:
            return None
        directory = self.layout.notes_pending
        fsio.make_dirs(self.layout.root, directory)
        marker = directory / f"{os.getpid()}-{os.urandom(6).hex()}.json"
        fsio.atomic_write(marker, json.dumps({"notes": sorted(set(notes))}).encode(), root=self.layout.root)
        return marker

    def _done(self, marker: Path | None) -> None:
        if marker is not None:
            fsio.remove_file(self.layout.root, marker)

    def out_of_step(self, docs: Sequence[Document]) -> list[str]:
        """Names of the documents whose subtree disagrees with their file (nothing is written)."""
        plans = [self._plan(doc) for doc in docs]
        by_name = {p.doc.name: p for p in plans}
        return [p.doc.name for p in plans if (step := self._build(p, by_name)) is not None and step.changed]

    def _summary_write(
        self, plan: _DocPlan, children: list[ChildLink], changed: bool, sections: tuple[str, ...] = ()
    ) -> FileWrite | None:
        doc = plan.doc
        note = doc.note or None
        front = _front_doc(doc.front)
        aliases = front.meta.get("aliases") if front is not None else None
        title = clean_title(doc.title)
        named = aliases if isinstance(aliases, list) else [aliases] if isinstance(aliases, str) else []
        user_aliases = tuple(a for a in (scrub(str(x)) for x in named) if a != title)
        description = front.meta.get("description") if front is not None else None
        # The page's own description, else its title: a copy of the first section would compete with
        # that section's leaf in search (re-summarising writes the node's real summary).
        text = (
            scrub(str(description)).strip() if isinstance(description, str) and description.strip() else title
        )
        rel = f"{plan.directory}/{SUMMARY_NAME}"
        if plan.existing is not None:
            try:
                digest, node, kept = self._node_file(rel)
            except (FileNotFoundError, FrontmatterError) as exc:
                self.report.warnings.append(f"{rel}: not updated ({exc})")
                return None
            keep = _merge_keys(page_keys(front), kept)
            if not changed:
                # No section changed: only what the page itself says of the node may need writing.
                ours = dict(kept.raw_blocks)
                page = [(k, v) for k, v in keep.raw_blocks if k not in SUMMARY_KEYS]
                if (
                    node.title == title
                    and node.user_aliases == user_aliases
                    and node.document == doc.name
                    and node.note == note
                    and node.sections == sections
                    and all(ours.get(k) == v for k, v in page)
                    and (PAGE_KEYS in dict(keep.raw_blocks)) == (PAGE_KEYS in ours)
                ):
                    return None
                new = replace(
                    node,
                    title=title,
                    user_aliases=user_aliases,
                    document=doc.name,
                    note=note,
                    sections=sections,
                )
                return FileWrite(rel, self._checked(new, keep), digest)
            new = replace(
                node,
                title=title,
                user_aliases=user_aliases,
                children=tuple(children),
                stale=True,
                descendants=len(children),
                document=doc.name,
                note=note,
                sections=sections,
            )
            if not node.hand_edited:
                # The old summary would still be found for text the page no longer holds: until it is
                # re-summarised, the node reads like the new page.
                fresh = text or title
                new = replace(new, text=fresh, content_hash=text_hash(fresh), children_hash="")
            return FileWrite(rel, self._checked(new, keep), digest)
        node = SummaryNode(
            id=plan.node_id,
            source=self.source,
            path=rel,
            depth=1,
            title=title,
            text=text or title,
            children=tuple(children),
            descendants=len(children),
            earliest=doc.ts,
            latest=doc.ts,
            stale=True,
            summariser="extractive",
            content_hash=text_hash(text or title),
            document=doc.name,
            note=note,
            sections=sections,
            user_aliases=user_aliases,
        )
        return FileWrite(rel, self._checked(node, page_keys(front)), None)

    def _checked(self, node: SummaryNode, keep: frontmatter.MdDoc | None) -> str:
        """The node's file with the page's keys; without them when they would not read back (a key
        redacted into something YAML cannot parse): a node file must always be valid."""
        data = render_summary(node, keep=keep)
        try:
            parse_summary(data, node.path)
        except FrontmatterError as exc:
            self.report.warnings.append(f"{node.path}: the page's own keys were left out ({exc})")
            data = render_summary(node)
        return data

    def _mark(self, ids: Sequence[str]) -> None:
        wanted = [
            i
            for i in ids
            if self.conn.execute("SELECT 1 FROM chunks WHERE id = ? AND status != 'stale'", (i,)).fetchone()
        ]
        if wanted:
            mark_stale(self.conn, self.layout, wanted, self.max_bytes)

    def _to_trash(self, rels: Sequence[str]) -> None:
        """Copy files or folders about to leave the vault into ``.trash/vaultmem/<time>/`` (Obsidian's
        trash, which the engine never reads), so a replaced text is recoverable without git."""
        if not rels or not self.trash:
            return
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        for rel in rels:
            src = self.layout.abs(rel)
            copy = self.layout.root / TRASH / stamp / rel
            fsio.make_dirs(self.layout.root, copy.parent)
            if src.is_dir():
                shutil.copytree(src, copy)
            elif src.is_file():
                shutil.copy2(src, copy)
            self._trashed.add(rel)
            self.report.trash.append(self.layout.rel(copy))


def notes_cut_off(layout: Layout) -> tuple[list[Path], list[str]]:
    """The markers a crash left between a note's document files and its section rows, and the notes
    they name (each once)."""
    directory = layout.notes_pending
    if not directory.is_dir():
        return [], []
    markers = sorted(directory.glob("*.json"))
    notes: dict[str, None] = {}
    for marker in markers:
        try:
            named = json.loads(marker.read_text(encoding="utf-8")).get("notes", [])
        except (OSError, ValueError, AttributeError):
            continue  # cut short before it was complete: its step never began
        notes.update(dict.fromkeys(str(n) for n in named))
    return markers, list(notes)


def _heading_leaf(headings: dict[str, str], anchor: str) -> str | None:
    """The leaf a heading link lands on, as Obsidian resolves ``#A#B``: the first section (reading
    order) whose heading path holds every part of the anchor in that order and ends with its last,
    else the first section whose own heading is the last part."""
    parts = [p.strip().casefold() for p in anchor.split("#") if p.strip()]
    if not parts:
        return None
    fallback = None
    for key, stem in headings.items():
        path = key.split(" > ")
        if path[-1] != parts[-1]:
            continue
        rest = iter(path)
        if all(part in rest for part in parts):
            return stem
        fallback = fallback or stem
    return fallback


def _anchor_of(row: sqlite3.Row) -> str | None:
    try:
        meta = json.loads(row["provenance"] or "{}")
    except ValueError:
        return None
    return meta.get("anchor") if isinstance(meta, dict) else None


def _row_order(row: sqlite3.Row) -> str | None:
    return ord_of(row)


def _assign_orders(chunks: list[_Chunk]) -> None:
    """1, 2, 3... for a new document; for an updated one the orders its surviving leaves had are kept
    where they still increase, and the others are placed between them (no needless rewrite)."""
    olds: list[Decimal | None] = []
    for chunk in chunks:
        value = _row_order(chunk.row) if chunk.row is not None else None
        olds.append(Decimal(value) if value else None)
    keep = _increasing(olds)
    prev: Decimal | None = None
    for n, chunk in enumerate(chunks):
        if n in keep:
            chunk.order = olds[n]  # type: ignore[assignment]
        else:
            nxt = next((olds[m] for m in range(n + 1, len(chunks)) if m in keep), None)
            if prev is None and nxt is None:
                chunk.order = Decimal(n + 1)
            elif nxt is None:
                chunk.order = order_after(prev)  # type: ignore[arg-type]
            elif prev is None:
                chunk.order = nxt - 1 if nxt > 1 else order_between(Decimal(0), nxt)
            else:
                chunk.order = order_between(prev, nxt)
        prev = chunk.order


def _increasing(values: list[Decimal | None]) -> set[int]:
    """Positions of a longest strictly increasing run of the known values (patience sort)."""
    tails: list[int] = []
    back: dict[int, int | None] = {}
    for n, value in enumerate(values):
        if value is None:
            continue
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if values[tails[mid]] < value:  # type: ignore[operator]
                lo = mid + 1
            else:
                hi = mid
        back[n] = tails[lo - 1] if lo else None
        if lo == len(tails):
            tails.append(n)
        else:
            tails[lo] = n
    out: set[int] = set()
    at = tails[-1] if tails else None
    while at is not None:
        out.add(at)
        at = back[at]
    return out


def _front_doc(front: str) -> frontmatter.MdDoc | None:
    if not front.strip():
        return None
    try:
        return frontmatter.split(f"---\n{front.rstrip()}\n---\n")
    except FrontmatterError:
        return None


def page_keys(front: frontmatter.MdDoc | None) -> frontmatter.MdDoc | None:
    """The page's keys as the document node keeps them: each as written, except those named like a key
    the engine owns in ``_summary.md`` (``source``, ``id``, ``order``, ``tokens``...; ``title`` and
    ``aliases`` are merged into the node's own), which go under ``from_page:`` byte for byte, indented
    (so a web clipping's ``source: https://...`` is kept as ``from_page: {source: ...}``)."""
    if front is None:
        return None
    moved = {k for k, _v in front.raw_blocks if (k in SUMMARY_KEYS and k not in _MERGED) or k == PAGE_KEYS}
    if not moved:
        return front
    nested = "".join(
        "".join(f"  {line}" if line.strip() else line for line in raw.splitlines(keepends=True))
        + ("" if raw.endswith("\n") else "\n")
        for k, raw in front.raw_blocks
        if k in moved
    )
    blocks = [(k, v) for k, v in front.raw_blocks if k not in moved] + [
        (PAGE_KEYS, f"{PAGE_KEYS}:\n{nested}")
    ]
    meta = {k: v for k, v in front.meta.items() if k not in moved}
    meta[PAGE_KEYS] = {k: v for k, v in front.meta.items() if k in moved}
    return frontmatter.MdDoc(meta, tuple(blocks), front.body)


def _merge_keys(front: frontmatter.MdDoc | None, kept: frontmatter.MdDoc) -> frontmatter.MdDoc:
    """The page's own keys (as the file now has them) first, then keys a person added to the node
    (``from_page`` follows the page: never kept from the node's old file)."""
    page = dict(front.raw_blocks) if front is not None else {}
    rest = [(k, v) for k, v in kept.raw_blocks if k not in page and k != PAGE_KEYS]
    blocks = list(front.raw_blocks if front is not None else ()) + rest
    meta = {k: v for k, v in kept.meta.items() if k != PAGE_KEYS}
    return frontmatter.MdDoc({**meta, **(front.meta if front is not None else {})}, tuple(blocks), kept.body)
