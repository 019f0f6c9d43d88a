"""The ingest hot path: messages -> redacted, scored chunks -> leaf files -> index rows -> jobs.

Owns the order that makes a batch crash-safe: an intent note is written first, then every leaf file is
made durable at once, then all rows and their ``admit`` jobs commit in one transaction, then the
intent note goes. A crash anywhere leaves either nothing, or files that ``heal_intents`` indexes on the
next open. The same notes cover leaf files the engine rewrites in place (``lifecycle``): a note names
each file with the hash written, and healing re-reads the files that have it into their rows. No LLM
and no embedding happen here: those are queued work.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from vaultmem import forking, fsio, index, leaffile, yamlsubset
from vaultmem.chunker import chunk_message
from vaultmem.db import atomic
from vaultmem.errors import ConflictError, FrontmatterError, InvalidInput, UnsafePath
from vaultmem.inputs import Skipped
from vaultmem.jobs import JobQueue, admit_job
from vaultmem.layout import SOURCES, Layout
from vaultmem.model import Leaf, Message, Status, format_ts, portable_name, safe_name, slugify_name
from vaultmem.redact import redact, redact_field
from vaultmem.scan import read_leaf_file
from vaultmem.scoring import FastScorer

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class IngestReport:
    messages: int = 0
    added: tuple[str, ...] = ()
    duplicates: int = 0
    dropped: int = 0
    redacted: int = 0
    skipped: tuple[Skipped, ...] = ()
    sources: tuple[str, ...] = field(default=())
    updated: tuple[str, ...] = ()  # document leaves replaced in place (docsync)
    removed: tuple[str, ...] = ()  # document leaves whose sections left their file

    def merge(self, other: IngestReport) -> IngestReport:
        return IngestReport(
            self.messages + other.messages,
            self.added + other.added,
            self.duplicates + other.duplicates,
            self.dropped + other.dropped,
            self.redacted + other.redacted,
            self.skipped + other.skipped,
            tuple(sorted(set(self.sources) | set(other.sources))),
            self.updated + other.updated,
            self.removed + other.removed,
        )


def build_leaves(
    messages: Iterable[Message],
    layout: Layout,
    scorer: FastScorer,
    max_tokens: int,
    ingested: datetime | None = None,
) -> list[Leaf]:
    """Redact, chunk and score messages into leaves (not yet written), learned ``ingested`` (now)."""
    learned = (ingested or datetime.now(UTC)).replace(microsecond=0)
    leaves: list[Leaf] = []
    fresh: dict[str, str] = {}  # source -> its _fresh folder, relative (one pathlib round per source)
    for message in messages:
        safe_name(message.source)
        message, kinds = redact_message(message)
        folder = fresh.get(message.source)
        if folder is None:
            folder = fresh[message.source] = layout.rel(layout.fresh_dir(message.source))
        for chunk in chunk_message(message, max_tokens):
            score = scorer.score(chunk.text)
            text = chunk.text.strip()
            name = leaffile.leaf_filename(chunk.id, text, format_ts(message.ts), message.speaker)
            leaves.append(
                Leaf(
                    id=chunk.id,
                    source=message.source,
                    text=text,
                    path=f"{folder}/{name}",
                    kind=message.kind,
                    seq=chunk.seq,
                    source_id=message.source_id,
                    session=message.session,
                    role=message.role,
                    speaker=message.speaker,
                    ts=message.ts,
                    message_ids=(message.source_id,) if message.source_id else (),
                    status=Status.PENDING if scorer.admits(score) else Status.DROPPED,
                    score=score.value,
                    reasons=score.reasons,
                    tokens=chunk.tokens,
                    content_hash=leaffile.content_hash(text),
                    redactions=kinds,
                    meta=dict(message.meta),
                    ingested=learned,
                )
            )
    return leaves


def check_new_sources(layout: Layout, sources: Iterable[str]) -> None:
    """Refuse source names that would not be one folder of their own on every file system.

    A source whose folder exists is taken as it is. A new one must be a ``portable_name`` and must not
    differ only in case from an existing source or another new one (``Mail`` next to ``mail`` would be
    one folder on macOS and Windows). Raises InvalidInput naming the name to use instead."""
    root = layout.root / SOURCES
    try:
        folders = [p.name for p in root.iterdir() if p.is_dir()]
    except FileNotFoundError:
        folders = []
    taken = {name.casefold(): name for name in folders}
    for name in sorted(set(sources)):
        if name in folders:
            continue
        portable_name(name)
        other = taken.setdefault(name.casefold(), name)
        if other != name:
            raise InvalidInput(
                f"source name {name!r} differs from the source {other!r} only in case; on macOS and "
                f"Windows both would be one folder: use {other!r}"
            )


def redact_message(message: Message) -> tuple[Message, tuple[str, ...]]:
    """``message`` with a secret in any field replaced: the text, the speaker, the session, the source's
    id for it and every provenance value (subject, title, heading path, file name, ...). A source name
    holding a secret becomes ``redacted-<kind>`` (source names are folder names). Returns the kinds found
    (each once, the text's first). The text is swept once; the short fields, which repeat from message
    to message, once per distinct value (``redact_field``)."""
    found = redact(message.text)
    kinds: dict[str, None] = dict.fromkeys(found.kinds)

    def clean(value: str) -> str:
        result = redact_field(value)
        kinds.update(dict.fromkeys(result.kinds))
        return result.text

    def opt(value: str | None) -> str | None:
        return None if value is None else clean(value)

    text = found.text
    source = message.source
    if redact_field(source).kinds:
        source = safe_name(slugify_name(clean(source)))
    cleaned = replace(
        message,
        text=text,
        source=source,
        source_id=opt(message.source_id),
        session=opt(message.session),
        role=opt(message.role),
        speaker=opt(message.speaker),
        meta={k: clean(v) for k, v in message.meta.items()},
    )
    return cleaned, tuple(kinds)


def write_leaves(
    conn: sqlite3.Connection,
    layout: Layout,
    leaves: list[Leaf],
    meanwhile: Callable[[], object] | None = None,
    also: Callable[[list[Leaf]], object] | None = None,
) -> list[str]:
    """Make the files of new leaves durable, then commit their rows and admit jobs in one transaction.

    Leaves whose id is already indexed (or repeated in the batch) are skipped: re-ingesting identical
    input creates nothing. Returns the ids actually added. ``also`` is given the leaves added, inside
    that same transaction (the ingest's other bookkeeping: one commit, one sync of the WAL).

    ``meanwhile`` (the next batch's ``build_leaves``) runs while the files are rendered and written: in a
    forked process when the batch is large and this process may fork (``_write_forked``), so the two
    cores work at once. It runs unless the batch fails first (even when no leaf is new), and an exception
    of its is raised only once this batch is committed: the batch is never left half done for it.
    """
    unique: dict[str, Leaf] = {}
    for leaf in leaves:
        unique.setdefault(leaf.id, leaf)
    present = index.existing_ids(conn, list(unique))
    new = [leaf for leaf_id, leaf in unique.items() if leaf_id not in present]
    if not new:
        _raise(_run(meanwhile))
        return []
    # Made durable by the batch's filesystem sync, which comes before any leaf file takes its name.
    intent = write_intent(layout, new=[leaf.path for leaf in new], durable=False)
    folders: dict[str, Path] = {}  # one checked join per folder (a batch is mostly one _fresh folder)
    targets = []
    for leaf in new:
        folder, _, name = leaf.path.rpartition("/")
        where = folders.get(folder)
        if where is None:
            where = folders[folder] = layout.abs(folder) if folder else layout.root
        if name in ("", ".", ".."):
            fsio.remove_file(layout.root, intent)
            raise ValueError(f"not a leaf file path: {leaf.path!r}")
        targets.append(where / name)
    try:
        rows, failed = _write_forked(layout.root, new, targets, meanwhile)
    except (UnsafePath, ConflictError):
        fsio.remove_file(layout.root, intent)  # refused before any file was written
        raise
    fsio.changed(targets)
    with atomic(conn):
        index.insert_rows(conn, rows)
        JobQueue(conn).enqueue_many(admit_job(leaf.id) for leaf in new)
        if also is not None:
            also(new)
    fsio.remove_file(layout.root, intent)
    _raise(failed)
    return [leaf.id for leaf in new]


FORK_MIN_FILES = 200  # below this a fork (a few ms, and its copied pages) costs more than it overlaps


Row = tuple[object, ...]


def _write_files(root: Path, leaves: list[Leaf], targets: list[Path]) -> list[Row]:
    """Render the leaves and write them durably to ``targets`` (observers not told: the caller tells);
    returns their index rows, stamped with the files as written. The rows are made here, in the forked
    writer when there is one, so the parent (building the next batch meanwhile) only inserts them."""
    writes = [
        fsio.PendingWrite(target, leaffile.render_leaf(leaf).encode("utf-8"))
        for leaf, target in zip(leaves, targets, strict=True)
    ]
    written = fsio.write_batch_durable(root, writes, notify=False)
    return [
        index.leaf_row(leaf, index.FileStamp(done.hash, done.size, done.mtime_ns))
        for leaf, done in zip(leaves, written, strict=True)
    ]


def _write_forked(
    root: Path, leaves: list[Leaf], targets: list[Path], meanwhile: Callable[[], object] | None
) -> tuple[list[Row], BaseException | None]:
    """``_write_files`` while ``meanwhile`` runs. With ``meanwhile``, at least ``FORK_MIN_FILES`` files
    and a process that may fork (``forking.can_fork``: no thread that could hold a lock the child
    takes), the files are written by a forked child, which starts with the leaves already in its memory
    and sends back only the rows of the files written (or the exception that stopped it, raised here);
    otherwise here, then ``meanwhile``. Returns the rows and ``meanwhile``'s exception, if any.

    The child only renders and writes files: it never touches the index, and ends with ``os._exit`` (no
    atexit hook, no buffer of the parent's flushed twice). Killed midway, it leaves what a crash in the
    middle of ``write_batch_durable`` leaves, which the batch's intent note heals."""
    if meanwhile is None or len(leaves) < FORK_MIN_FILES or not forking.can_fork():
        written = _write_files(root, leaves, targets)
        return written, _run(meanwhile)
    yamlsubset.prepare()  # once here, not in every batch's writer (PyYAML's import: ~15 ms each)
    what = f"the process writing a batch of {len(leaves)} leaf files"
    with forking.Ahead(lambda: _write_files(root, leaves, targets), what) as writer:
        failed = _run(meanwhile)
        return writer.result(), failed


def _run(work: Callable[[], object] | None) -> BaseException | None:
    """Run ``work``; its exception returned, not raised (``write_leaves`` raises it once it is done)."""
    if work is None:
        return None
    try:
        work()
    except BaseException as exc:  # raised again by the caller, after its batch
        return exc
    return None


def _raise(exc: BaseException | None) -> None:
    if exc is not None:
        raise exc


def write_intent(
    layout: Layout,
    *,
    new: Sequence[str] = (),
    rewrites: Sequence[tuple[str, str]] = (),
    durable: bool = True,
) -> Path:
    """Write (durably) the note of a batch about to change leaf files: ``new`` files to be created, and
    ``rewrites`` (path, hash of the bytes about to be written) of files replaced in place. The caller
    removes it (``done_intent``) once the rows are committed. ``durable=False``: not synced here, for a
    batch whose ``write_batch_durable`` syncs the whole filesystem before its first file takes its name
    (a crash before that sync leaves at most temp files, which the next writer removes)."""
    path = layout.intent / f"{secrets.token_hex(8)}.json"
    body = {"paths": list(new), "rewrites": [list(r) for r in rewrites]}
    fsio.atomic_write(path, json.dumps(body).encode("utf-8"), root=layout.root, durable=durable)
    return path


def done_intent(layout: Layout, note: Path) -> None:
    fsio.remove_file(layout.root, note)


def heal_intents(conn: sqlite3.Connection, layout: Layout, max_bytes: int) -> list[str]:
    """Finish batches a crash interrupted: index leaf files that were written but never got a row, and
    re-read into their rows the files a rewrite had already replaced (status changes).

    Returns the healed leaf ids. Stray temp files of the batch are removed (they never became files).
    """
    healed: list[str] = []
    if not layout.intent.is_dir():
        return healed
    for note in sorted(layout.intent.glob("*.json")):
        try:
            body = json.loads(note.read_text(encoding="utf-8"))
            paths = [str(p) for p in body["paths"]]
            rewrites = [(str(p), str(h)) for p, h in body.get("rewrites", [])]
        except (ValueError, KeyError, TypeError, OSError):
            paths, rewrites = [], []  # a note torn by the crash itself: its batch never began
        rows = []
        jobs = []
        for rel in [*paths, *(p for p, _ in rewrites)]:
            path = layout.abs(rel)
            for stray in path.parent.glob(f"{fsio.TMP_PREFIX}*-{path.name}"):
                fsio.remove_file(layout.root, stray)
        rows.extend(_rewritten_rows(conn, layout, rewrites, max_bytes))
        healed.extend(str(row[index.ROW_COLUMNS.index("id")]) for row in rows)
        for rel in paths:
            path = layout.abs(rel)
            if not path.exists():
                continue
            try:
                leaf, stamp = read_leaf_file(layout, rel, max_bytes)
            except (FrontmatterError, InvalidInput):
                continue  # `check` reports it; healing never guesses
            if index.existing_ids(conn, [leaf.id]):
                continue
            rows.append(index.leaf_row(leaf, stamp))
            jobs.append(admit_job(leaf.id))
            healed.append(leaf.id)
        with atomic(conn):
            index.upsert_rows(conn, rows)
            JobQueue(conn).enqueue_many(jobs)
        fsio.remove_file(layout.root, note)
    return healed


def _rewritten_rows(
    conn: sqlite3.Connection, layout: Layout, rewrites: Sequence[tuple[str, str]], max_bytes: int
) -> list[tuple[object, ...]]:
    """Rows for the rewritten files that hold exactly what the engine wrote (a file the crash left with
    its old bytes still matches its row; one changed since is the watcher's or the catch-up's)."""
    rows = []
    for rel, digest in rewrites:
        if fsio.file_hash(layout.abs(rel)) != digest:
            continue
        try:
            leaf, stamp = read_leaf_file(layout, rel, max_bytes)
        except (FileNotFoundError, FrontmatterError, InvalidInput):
            continue
        row = conn.execute("SELECT parent FROM chunks WHERE id = ? AND path = ?", (leaf.id, rel)).fetchone()
        if row is not None:
            rows.append(index.leaf_row(leaf, stamp, row["parent"]))
    return rows
