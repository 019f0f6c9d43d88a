"""The index of the agent's own memory files: core files, session notes, episodes, recipes.

Owns the ``agent_files``, ``agent_entries`` (+ ``fts_agent``) and ``agent_vectors`` tables (migration
013). A row per file (kind, name, the parsed fields as JSON, its text, the file's hash, size and mtime);
an entry row per searchable unit (each entry of a core file, one per other file). Like the rest of the
index it is derived: ``reindex`` rebuilds it from the files alone, ``check`` lists disagreements and
``--fix`` repairs them, ``sync``/``reconcile`` follow hand edits (size and mtime first, then the hash, so
an untouched file costs a ``stat``). ``agent_vectors`` caches embeddings of episode requests by text
hash; a lost one is recomputed. Never writes a vault file.

Which files are the agent's: every ``core/*.md`` and ``core/_archive/*.md``; a file under
``sessions/`` with ``kind: session``, under ``episodes/`` with ``kind: episode``, under ``recipes/``
(or ``recipes/_archive/``) with ``kind: recipe`` or a ``trigger``. Any other Markdown file there is a
person's note, left to the note reader as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from vaultmem import corefile, episodes, fsio, recipes, sessionnote
from vaultmem.check import Problem
from vaultmem.corefile import CoreSettings
from vaultmem.db import atomic
from vaultmem.embed import Embedder
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.index import FileStamp
from vaultmem.layout import Layout, is_ignored
from vaultmem.search import fts_terms

TOPS = {
    corefile.CORE_DIR: "core",
    sessionnote.SESSIONS_DIR: "session",
    episodes.EPISODES_DIR: "episode",
    recipes.RECIPES_DIR: "recipe",
}
KINDS = tuple(TOPS.values())


@dataclass(frozen=True)
class Record:
    rel: str
    kind: str  # core | session | episode | recipe
    name: str
    meta: dict[str, Any]
    text: str
    ts: str | None
    units: tuple[str, ...]


@dataclass
class SyncReport:
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)

    @property
    def work(self) -> int:
        return len(self.new) + len(self.changed) + len(self.deleted)


@dataclass(frozen=True)
class MemoryHit:
    """A search hit in the agent's memory: a core entry, or a session note, episode or recipe."""

    kind: str
    path: str
    name: str
    text: str
    score: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "name": self.name,
            "text": self.text,
            "score": self.score,
        }


def kind_of(rel: str) -> str | None:
    """The kind of agent file a path would be, by its top folder (None outside them)."""
    top = rel.split("/", 1)[0]
    return TOPS.get(top) if "/" in rel and rel.endswith(".md") and not is_ignored(rel) else None


def parse(text: str, rel: str, settings: CoreSettings) -> Record | None:
    """The record of an agent file, None when the file is not one (a person's note). Raises
    FrontmatterError or InvalidInput for an agent file that cannot be read."""
    kind = kind_of(rel)
    if kind == "core":
        if corefile.name_of(rel) is None:
            return None
        doc = corefile.parse(text, rel, settings)
        name = f"{corefile.ARCHIVE_DIR}/{doc.name}" if doc.archive else doc.name
        meta = {
            "title": doc.title,
            "in_prompt": doc.in_prompt,
            "budget": doc.budget,
            "chars": doc.chars,
            "archive": doc.archive,
            "entries": len(doc.entries),
        }
        units = tuple(e.prompt_line for e in doc.entries)
        return Record(rel, kind, name, meta, doc.prompt_text, None, units)
    if kind == "session":
        found = sessionnote.parse(text, rel)
        if found is None:
            return None
        note = found[0]
        data = note.as_dict()
        lines = [note.session, *note.discussed, *note.decisions, *note.open_items, *note.people]
        lines += [*note.projects, *note.tools, *note.remembered]
        return Record(rel, kind, note.id, data, "\n".join(lines), data["started"], ("\n".join(lines),))
    if kind == "episode":
        episode = episodes.parse(text, rel)
        if episode is None:
            return None
        data = episode.as_dict()
        body = "\n".join([episode.request, *(s.readable for s in episode.steps)])
        return Record(rel, kind, episode.id, data, body, data["ts"], (body,))
    if kind == "recipe":
        parsed = recipes.parse(text, rel)
        if parsed is None:
            return None
        recipe = parsed[0]
        body = "\n".join([recipe.title, recipe.description, ", ".join(recipe.trigger), *recipe.steps])
        return Record(rel, kind, recipe.name, recipe.as_dict(), body, recipe.created, (body,))
    return None


def read(layout: Layout, rel: str, max_bytes: int, settings: CoreSettings) -> tuple[Record, FileStamp] | None:
    path = layout.abs(rel)
    text, digest = fsio.read_text_guarded(path, max_bytes)
    st = path.stat()
    record = parse(text, rel, settings)
    return (record, FileStamp(digest, st.st_size, st.st_mtime_ns)) if record is not None else None


def walk(layout: Layout, kinds: Iterable[str] | None = None) -> list[str]:
    """Markdown files under the agent folders (of ``kinds``), symlinks and ignored names left out."""
    wanted = set(kinds) if kinds is not None else set(KINDS)
    out: list[str] = []
    for top, kind in TOPS.items():
        base = layout.root / top
        if kind not in wanted or not base.is_dir() or base.is_symlink():
            continue
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            rel_dir = os.path.relpath(dirpath, layout.root).replace(os.sep, "/")
            dirnames[:] = sorted(d for d in dirnames if not is_ignored(f"{rel_dir}/{d}"))
            for name in sorted(filenames):
                rel = f"{rel_dir}/{name}"
                if (
                    name.endswith(".md")
                    and not is_ignored(rel)
                    and not os.path.islink(os.path.join(dirpath, name))
                ):
                    out.append(rel)
    return out


def upsert(conn: sqlite3.Connection, record: Record, stamp: FileStamp) -> None:
    with atomic(conn):
        conn.execute("DELETE FROM agent_entries WHERE path = ?", (record.rel,))
        conn.execute(
            "INSERT OR REPLACE INTO agent_files(path, kind, name, meta, text, ts, file_hash, file_size,"
            " file_mtime_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.rel,
                record.kind,
                record.name,
                json.dumps(record.meta, ensure_ascii=False, sort_keys=True, default=str),
                record.text,
                record.ts,
                stamp.hash,
                stamp.size,
                stamp.mtime_ns,
            ),
        )
        conn.executemany(
            "INSERT INTO agent_entries(path, kind, text) VALUES (?, ?, ?)",
            [(record.rel, record.kind, unit) for unit in record.units if unit.strip()],
        )


def index_file(
    conn: sqlite3.Connection, layout: Layout, rel: str, max_bytes: int, settings: CoreSettings
) -> None:
    """Index one file the engine just wrote (the caller holds the write lock)."""
    found = read(layout, rel, max_bytes, settings)
    if found is None:
        delete(conn, rel)
    else:
        upsert(conn, *found)


def delete(conn: sqlite3.Connection, rel: str) -> None:
    with atomic(conn):
        conn.execute("DELETE FROM agent_entries WHERE path = ?", (rel,))
        conn.execute("DELETE FROM agent_files WHERE path = ?", (rel,))


def reindex(
    conn: sqlite3.Connection, layout: Layout, max_bytes: int, settings: CoreSettings
) -> tuple[int, list[tuple[str, str]]]:
    """Rebuild the agent tables from the files; returns (files indexed, (path, why) of unreadable ones)."""
    found: list[tuple[Record, FileStamp]] = []
    skipped: list[tuple[str, str]] = []
    for rel in walk(layout):
        try:
            item = read(layout, rel, max_bytes, settings)
        except (FrontmatterError, InvalidInput, OSError) as exc:
            skipped.append((rel, str(exc)))
            continue
        if item is not None:
            found.append(item)
    with atomic(conn):
        conn.execute("DELETE FROM agent_entries")
        conn.execute("INSERT INTO fts_agent(fts_agent) VALUES ('delete-all')")
        conn.execute("DELETE FROM agent_files")
        for record, stamp in found:
            upsert(conn, record, stamp)
    return len(found), skipped


def _stamps(conn: sqlite3.Connection) -> dict[str, tuple[int, int, str]]:
    return {
        r["path"]: (r["file_size"], r["file_mtime_ns"], r["file_hash"])
        for r in conn.execute("SELECT path, file_size, file_mtime_ns, file_hash FROM agent_files")
    }


def indexed_hash(conn: sqlite3.Connection, rel: str) -> str | None:
    """The hash of ``rel`` as the index last read or wrote it (None: not indexed)."""
    row = conn.execute("SELECT file_hash FROM agent_files WHERE path = ?", (rel,)).fetchone()
    return str(row[0]) if row is not None else None


def changed(conn: sqlite3.Connection, layout: Layout) -> list[str]:
    """Agent paths whose file differs from its row by ``stat``, or whose file is gone (rescans)."""
    known = _stamps(conn)
    out: list[str] = []
    for rel, (size, mtime, _) in known.items():
        try:
            st = os.stat(layout.abs(rel))
        except FileNotFoundError:
            out.append(rel)
            continue
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            out.append(rel)
    return out


def reconcile(
    conn: sqlite3.Connection, layout: Layout, rels: Iterable[str], max_bytes: int, settings: CoreSettings
) -> tuple[SyncReport, list[str]]:
    """Bring the agent rows in step with these paths; returns what changed and the paths that are not
    agent files (for the note reader). The caller holds the write lock."""
    report = SyncReport()
    rest: list[str] = []
    known = _stamps(conn)
    for rel in sorted(set(rels)):
        if kind_of(rel) is None:
            if rel not in known:
                rest.append(rel)
            continue
        path = layout.abs(rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if rel in known:
                delete(conn, rel)
                report.deleted.append(rel)
            else:
                rest.append(rel)
            continue
        if path.is_symlink() or not path.is_file():
            continue
        row = known.get(rel)
        if row is not None and (st.st_size, st.st_mtime_ns) == row[:2]:
            continue
        try:
            found = read(layout, rel, max_bytes, settings)
        except (FrontmatterError, InvalidInput) as exc:
            report.invalid.append((rel, str(exc)))
            continue
        if found is None:
            if row is not None:
                delete(conn, rel)
                report.deleted.append(rel)
            rest.append(rel)
            continue
        record, stamp = found
        if row is not None and stamp.hash == row[2]:
            with atomic(conn):
                conn.execute(
                    "UPDATE agent_files SET file_size = ?, file_mtime_ns = ? WHERE path = ?",
                    (stamp.size, stamp.mtime_ns, rel),
                )
            continue
        upsert(conn, record, stamp)
        (report.changed if row is not None else report.new).append(rel)
    return report, rest


def stale(conn: sqlite3.Connection, layout: Layout, kinds: Iterable[str]) -> list[str]:
    """Agent paths (of ``kinds``) the index does not have as they are on disk, by ``stat``: the cheap
    test ``sync`` makes before it takes the write lock."""
    known = _stamps(conn)
    wanted = set(kinds)
    out = [rel for rel in changed(conn, layout) if kind_of(rel) in wanted]
    for rel in walk(layout, wanted):
        if rel not in known:
            out.append(rel)
    return sorted(set(out))


def check(
    conn: sqlite3.Connection, layout: Layout, max_bytes: int, settings: CoreSettings, *, fix: bool
) -> tuple[list[Problem], list[Problem]]:
    """(problems, fixed): ``missing_row``, ``stale_row``, ``orphan_row`` for agent files, ``invalid_file``
    for an agent file that cannot be read (never fixed: the file is a person's to mend),
    ``core_over_budget`` for a core file whose prompt text is over its budget after a hand edit (never
    fixed: the next ``core_update`` of that file condenses it), ``fts_mismatch`` for ``fts_agent``."""
    problems: list[Problem] = []
    fixed: list[Problem] = []
    known = _stamps(conn)
    files: dict[str, tuple[Record, FileStamp]] = {}
    for rel in walk(layout):
        try:
            item = read(layout, rel, max_bytes, settings)
        except (FrontmatterError, InvalidInput) as exc:
            problems.append(Problem("invalid_file", rel, str(exc), False))
            continue
        except OSError:
            continue
        if item is None:
            continue
        files[rel] = item
        record = item[0]
        if (
            record.kind == "core"
            and not record.meta["archive"]
            and record.meta["chars"] > record.meta["budget"]
        ):
            message = (
                f"{record.meta['chars']} characters in the prompt, over its budget of {record.meta['budget']}"
                " (a hand edit); the next update of this file condenses it, `vaultmem core` shows it cut"
            )
            problems.append(Problem("core_over_budget", rel, message, False))
    repairs: list[tuple[Problem, str | None]] = []
    for rel, (record, stamp) in files.items():
        row = known.get(rel)
        if row is None:
            repairs.append((Problem("missing_row", rel, f"{record.kind} file has no index row", True), rel))
            continue
        stored = conn.execute("SELECT text, meta FROM agent_files WHERE path = ?", (rel,)).fetchone()
        same_meta = json.loads(stored["meta"]) == json.loads(json.dumps(record.meta, default=str))
        if row[2] != stamp.hash or stored["text"] != record.text or not same_meta:
            repairs.append(
                (Problem("stale_row", rel, f"index row of {rel} does not match the file", True), rel)
            )
    for rel in known:
        if rel not in files:
            repairs.append((Problem("orphan_row", rel, "agent memory row has no file", True), None))
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM agent_entries),"
        " (SELECT count(*) FROM agent_entries WHERE path NOT IN (SELECT path FROM agent_files))"
    ).fetchone()
    try:
        conn.execute("INSERT INTO fts_agent(fts_agent) VALUES ('integrity-check')")
        fts_ok = counts[1] == 0
    except sqlite3.DatabaseError as exc:
        fts_ok = "readonly" in str(exc) and counts[1] == 0
    if not fix:
        problems.extend(p for p, _ in repairs)
        if not fts_ok:
            problems.append(
                Problem("fts_mismatch", ".vaultmem/chunks.db", "fts_agent disagrees with its rows", True)
            )
        return problems, fixed
    for problem, target in repairs:
        if target is None:
            delete(conn, problem.path)
        else:
            upsert(conn, *files[target])
        fixed.append(problem)
    if not fts_ok:
        with atomic(conn):
            conn.execute("DELETE FROM agent_entries WHERE path NOT IN (SELECT path FROM agent_files)")
            conn.execute("INSERT INTO fts_agent(fts_agent) VALUES ('rebuild')")
        fixed.append(Problem("fts_mismatch", ".vaultmem/chunks.db", "fts_agent rebuilt", True))
    return problems, fixed


def records(conn: sqlite3.Connection, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, fields) of every indexed file of ``kind``, by path."""
    return [
        (r["path"], json.loads(r["meta"]))
        for r in conn.execute("SELECT path, meta FROM agent_files WHERE kind = ? ORDER BY path", (kind,))
    ]


def path_of(conn: sqlite3.Connection, kind: str, name: str) -> str | None:
    row = conn.execute(
        "SELECT path FROM agent_files WHERE kind = ? AND name = ? ORDER BY path", (kind, name)
    ).fetchone()
    return str(row[0]) if row is not None else None


def search(
    conn: sqlite3.Connection, query: str, kinds: Sequence[str] | None = None, k: int = 10
) -> list[MemoryHit]:
    """Full-text search (BM25, stemmed; CJK by substring) over the agent's memory, best first."""
    if kinds is not None:
        unknown = [x for x in kinds if x not in KINDS]
        if unknown:
            raise InvalidInput(f"unknown memory kind {unknown[0]!r}; one of {', '.join(KINDS)}")
    wanted = list(kinds) if kinds is not None else list(KINDS)
    marks = ",".join("?" * len(wanted))
    words, cjk = fts_terms(query)
    found: dict[int, tuple[float, sqlite3.Row]] = {}
    if words:
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        for row in conn.execute(
            "SELECT e.rowid AS rid, e.path, e.kind, e.text, f.name, bm25(fts_agent) AS rank FROM fts_agent"
            " JOIN agent_entries e ON e.rowid = fts_agent.rowid JOIN agent_files f ON f.path = e.path"
            f" WHERE fts_agent MATCH ? AND e.kind IN ({marks}) ORDER BY rank LIMIT ?",
            [match, *wanted, k * 3],
        ):
            found[row["rid"]] = (-float(row["rank"]), row)
    if cjk:
        like = " OR ".join("e.text LIKE ?" for _ in cjk)
        for row in conn.execute(
            "SELECT e.rowid AS rid, e.path, e.kind, e.text, f.name FROM agent_entries e"
            f" JOIN agent_files f ON f.path = e.path WHERE ({like}) AND e.kind IN ({marks}) LIMIT ?",
            [*(f"%{r}%" for r in cjk), *wanted, k * 3],
        ):
            hits = sum(row["text"].count(r) for r in cjk)
            score = float(hits) + found.get(row["rid"], (0.0, row))[0]
            found[row["rid"]] = (score, row)
    ranked = sorted(found.values(), key=lambda x: (-x[0], x[1]["path"], x[1]["rid"]))[:k]
    return [MemoryHit(r["kind"], r["path"], r["name"], r["text"], round(s, 4)) for s, r in ranked]


def embed_cached(
    conn: sqlite3.Connection, embedder: Embedder, items: Sequence[tuple[str, str]]
) -> npt.NDArray[np.float32]:
    """Unit vectors of ``items`` ((key, text) pairs) in order, from the cache when the text is the same;
    the missing ones embedded in one batch and cached."""
    out = np.zeros((len(items), embedder.dim), dtype=np.float32)
    if not items:
        return out
    hashes = [hashlib.sha256(text.encode("utf-8")).hexdigest()[:16] for _, text in items]
    cached: dict[str, tuple[str, bytes]] = {}
    keys = [key for key, _ in items]
    for start in range(0, len(keys), 500):
        part = keys[start : start + 500]
        for row in conn.execute(
            f"SELECT key, text_hash, vec FROM agent_vectors WHERE model = ? AND key IN ({','.join('?' * len(part))})",
            [embedder.model_id, *part],
        ):
            cached[row["key"]] = (row["text_hash"], row["vec"])
    todo: list[int] = []
    for n, (key, _) in enumerate(items):
        hit = cached.get(key)
        if hit is not None and hit[0] == hashes[n] and len(hit[1]) == 4 * embedder.dim:
            out[n] = np.frombuffer(hit[1], dtype="<f4")
        else:
            todo.append(n)
    if todo:
        vecs = embedder.embed([items[n][1] for n in todo])
        with atomic(conn):
            for n, vec in zip(todo, vecs, strict=True):
                out[n] = vec
                conn.execute(
                    "INSERT OR REPLACE INTO agent_vectors(key, model, text_hash, vec) VALUES (?, ?, ?, ?)",
                    (items[n][0], embedder.model_id, hashes[n], np.asarray(vec, dtype="<f4").tobytes()),
                )
    return out
