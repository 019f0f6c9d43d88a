"""Document operations on the tree (docmem): an agent's edits, reflected in files and index at once.

Operations: append a child, insert between two siblings, delete a subtree, update a node's text,
summarise a run of leaves under a new level. Each is planned, read-only, as one ``steps.TreeOp``
(``plan_append_child``, ``plan_insert_between``, ``plan_delete``, ``plan_update_content``,
``plan_add_summary``) and done by ``run``: the ancestors of what changes are marked stale first (a crash
in between costs at most a needless re-summarisation), then the step is applied durably (write-ahead
note, guarded writes, renames, removals, sidecars, index rows; replayed on the next open). ``Vault`` wraps
each pair in one method under the write lock. Reading order is ``order.py``; sessions are ``sessions.py``.

Never: renames a leaf or changes an id; writes or removes a file it did not read (every write and removal
carries the hash that was read); renumbers siblings (a sibling gets an ``order`` only when an operation
would otherwise move it in the reading order, and then it gets the value it already had); removes a
folder holding anything that is not a vaultmem node. Never prints.
"""

from __future__ import annotations

import os
import re
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from vaultmem import frontmatter, fsio, index, leaffile, steps
from vaultmem.admit import embed_text
from vaultmem.chunker import chunk_id
from vaultmem.embed import Embedder
from vaultmem.errors import FrontmatterError, InvalidInput, NodeNotFound
from vaultmem.layout import FRESH, SIDECAR_NAME, SOURCES, SUMMARY_NAME, Layout, slug
from vaultmem.leaffile import id_from_filename
from vaultmem.model import InputKind, Leaf, Status, check_node_id, format_ts, parse_ts
from vaultmem.order import (
    RowLike,
    effective_orders,
    format_order,
    ord_of,
    order_after,
    order_between,
    pins_for,
)
from vaultmem.redact import redact
from vaultmem.scan import read_leaf_file, read_summary_file
from vaultmem.scoring import FastScorer
from vaultmem.stale import ancestors_of, mark_stale
from vaultmem.steps import FileWrite, TreeOp
from vaultmem.summaryfile import (
    ChildLink,
    SummaryNode,
    clean_title,
    parse_summary,
    render_summary,
    summary_id,
    text_hash,
)
from vaultmem.tokens import count_tokens

MAX_BYTES = 10 * 1024 * 1024  # the default ``ingest.max_file_bytes``
_NUMBERED = re.compile(r"^(\d+)-")


# -- reading the tree -----------------------------------------------------------------------------------
def node_row(conn: sqlite3.Connection, node_id: str) -> sqlite3.Row:
    check_node_id(node_id)
    row: sqlite3.Row | None = conn.execute("SELECT * FROM chunks WHERE id = ?", (node_id,)).fetchone()
    if row is None:
        raise NodeNotFound(f"no node with id {node_id}; `vaultmem show` lists the tree")
    # A note's section is the person's text; its document node is the engine's file (its text and keys
    # may be edited, siblings placed around it), refused where an operation would stand for the note.
    index.refuse_note_sections(conn, [node_id], "edited, moved or deleted as a node", node=False)
    return row


def _refuse_note_node(conn: sqlite3.Connection, node_id: str, why: str) -> None:
    note = index.note_node(conn, node_id)
    if note is not None:
        raise InvalidInput(f"{node_id} is the document of the note {note}, written by hand: {why}")


def parent_dir(path: str) -> str:
    return str(PurePosixPath(path).parent)


def folder_of(row: RowLike) -> str:
    """The folder a node is a sibling in: a leaf's directory, or the directory above a level."""
    path = str(row["path"])
    return parent_dir(parent_dir(path)) if row["kind"] == "summary" else parent_dir(path)


def siblings(conn: sqlite3.Connection, folder: str) -> list[sqlite3.Row]:
    """The nodes directly in ``folder``: its leaves and the summaries of its child levels (any order)."""
    prefix = folder + "/"
    out = []
    for row in conn.execute("SELECT * FROM chunks WHERE path >= ? AND path < ?", index.prefix_range(prefix)):
        rest = row["path"][len(prefix) :]
        if (row["kind"] == "leaf" and "/" not in rest) or (
            row["kind"] == "summary" and rest.count("/") == 1 and rest.endswith("/" + SUMMARY_NAME)
        ):
            out.append(row)
    return out


def _folder_summary(conn: sqlite3.Connection, folder: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM chunks WHERE path = ? AND kind = 'summary'", (f"{folder}/{SUMMARY_NAME}",)
    ).fetchone()
    return row


def _is_source_top(folder: str) -> bool:
    parts = PurePosixPath(folder).parts
    return len(parts) == 2 and parts[0] == SOURCES


def _enclosing(conn: sqlite3.Connection, folder: str) -> list[str]:
    """The summary of ``folder`` and every level above it: what goes stale when the folder changes."""
    level = _folder_summary(conn, folder)
    return [level["id"], *ancestors_of(conn, level["id"])] if level is not None else []


def _as_node(row: RowLike, **changes: Any) -> dict[str, Any]:
    node = {k: row[k] for k in ("id", "kind", "path", "ts", "seq")}
    node["ord"] = ord_of(row)
    node.update(changes)
    return node


# -- planning ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """One operation, ready to run: the durable step, the summaries to mark stale first, and the ids the
    operation creates (or, for ``delete``, removes)."""

    op: TreeOp
    stale: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class NewLeaf:
    """The leaf an agent asks to add: its text and what it says about itself (``session`` and the input
    kind default to the nearest leaf's, ``ts`` to the place's time)."""

    text: str
    role: str | None = None
    speaker: str | None = None
    ts: datetime | str | None = None
    session: str | None = None


@dataclass(frozen=True)
class _Placed:
    """A new leaf's place: its folder, its order, and what it inherits from its neighbours."""

    folder: str
    source: str
    order: Decimal
    session: str | None
    kind: InputKind
    ts: datetime


def _clean(text: str) -> tuple[str, tuple[str, ...]]:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the text is empty; a node needs some text")
    redacted = redact(text.strip())
    return redacted.text.strip(), redacted.kinds


def _new_leaf(
    layout: Layout, place: _Placed, new: NewLeaf, embedder: Embedder | None
) -> tuple[Leaf, FileWrite, dict[str, Any]]:
    body, kinds = _clean(new.text)
    when = parse_ts(new.ts) if new.ts is not None else place.ts
    if new.ts is not None and when is None:
        raise InvalidInput(f"ts {new.ts!r} is not a date; use ISO 8601 such as 2024-05-01T09:00Z")
    source_id = f"docmem:{uuid.uuid4().hex}"
    leaf_id = chunk_id(place.source, source_id, 0, body)
    score = FastScorer().score(body)
    name = leaffile.leaf_filename(leaf_id, body, format_ts(when), new.speaker)
    leaf = Leaf(
        id=leaf_id,
        source=place.source,
        text=body,
        path=f"{place.folder}/{name}",
        kind=place.kind,
        source_id=source_id,
        session=new.session if new.session is not None else place.session,
        role=new.role,
        speaker=new.speaker,
        ts=when,
        message_ids=(source_id,),
        # An agent asked for this node: it is never dropped by the fast score.
        status=Status.ADMITTED if embedder is not None else Status.PENDING,
        score=score.value,
        reasons=score.reasons,
        tokens=count_tokens(body),
        content_hash=leaffile.content_hash(body),
        redactions=kinds,
        order=format_order(place.order),
        ingested=datetime.now(UTC).replace(microsecond=0),
    )
    vectors = {leaf.id: np.asarray(embedder.embed([embed_text(leaf)])[0])} if embedder is not None else {}
    return leaf, FileWrite(leaf.path, leaffile.render_leaf(leaf), None), vectors


def _inherit(rows: Sequence[RowLike]) -> tuple[str | None, InputKind]:
    """Session and input kind of the nearest leaf among ``rows`` (tried in the given order)."""
    for row in rows:
        if row["kind"] == "leaf":
            return row["session"], InputKind(row["input"] or InputKind.CHAT.value)
    return None, InputKind.CHAT


def _order_writes(
    conn: sqlite3.Connection, layout: Layout, pins: Mapping[str, Decimal], max_bytes: int
) -> list[FileWrite]:
    """Rewrite siblings with the ``order`` they already had implicitly (user keys kept byte for byte)."""
    writes = []
    for node_id, value in pins.items():
        row = node_row(conn, node_id)
        text = format_order(value)
        if row["kind"] == "leaf":
            writes.append(_leaf_write(layout, row["path"], max_bytes, order=text))
        else:
            writes.append(summary_write(layout, row["path"], max_bytes, order=text))
    return writes


def _read_leaf(layout: Layout, rel: str, max_bytes: int) -> tuple[Leaf, frontmatter.MdDoc, str]:
    try:
        data, digest = fsio.read_text_guarded(layout.abs(rel), max_bytes)
        leaf, doc = leaffile.parse_leaf(data, rel)
    except FileNotFoundError as exc:
        raise NodeNotFound(f"{rel} is gone; run `vaultmem check --fix` to update the index") from exc
    except FrontmatterError as exc:
        raise InvalidInput(f"{exc}; fix the file first (`vaultmem check` shows why)") from exc
    return leaf, doc, digest


def _leaf_write(layout: Layout, rel: str, max_bytes: int, **changes: Any) -> FileWrite:
    leaf, doc, digest = _read_leaf(layout, rel, max_bytes)
    new = replace(leaf, **changes)
    # Keep the body's exact bytes when the text is unchanged (as a status change does).
    body = leaffile.keep_body(doc, new.text)
    data = frontmatter.render(leaffile.engine_meta(new), body, keep=doc, owned=leaffile.LEAF_KEYS)
    return FileWrite(rel, data, digest)


def _read_summary(layout: Layout, rel: str, max_bytes: int) -> tuple[SummaryNode, frontmatter.MdDoc, str]:
    try:
        data, digest = fsio.read_text_guarded(layout.abs(rel), max_bytes)
        node, doc = parse_summary(data, rel)
    except FileNotFoundError as exc:
        raise NodeNotFound(f"{rel} is gone; run `vaultmem check --fix` to update the index") from exc
    except FrontmatterError as exc:
        raise InvalidInput(f"{exc}; fix the file first (`vaultmem check` shows why)") from exc
    return node, doc, digest


def summary_write(layout: Layout, rel: str, max_bytes: int, **changes: Any) -> FileWrite:
    """The rewrite of a summary file with ``changes`` (its user keys kept), guarded by the hash read."""
    node, doc, digest = _read_summary(layout, rel, max_bytes)
    return FileWrite(rel, render_summary(replace(node, **changes), keep=doc), digest)


def _depth_writes(
    conn: sqlite3.Connection,
    layout: Layout,
    folder: str,
    changed: Mapping[str, int | None],
    max_bytes: int,
) -> tuple[list[FileWrite], list[tuple[str, int]]]:
    """Keep ``depth`` = height up the tree after the child levels of ``folder`` changed (``changed``: a
    child level's id -> its depth, None when it is gone). Levels whose depth changes are rewritten stale."""
    writes: list[FileWrite] = []
    queued: list[tuple[str, int]] = []
    overrides = dict(changed)
    while True:
        level = _folder_summary(conn, folder)
        if level is None:
            break
        depths = {r["id"]: r["depth"] for r in siblings(conn, folder) if r["kind"] == "summary"}
        depths.update(overrides)
        height = 1 + max((d for d in depths.values() if d is not None), default=0)
        if height == level["depth"]:
            break
        writes.append(summary_write(layout, level["path"], max_bytes, depth=height, stale=True))
        queued.append((level["id"], height))
        overrides = {level["id"]: height}
        folder = folder_of(level)
    return writes, queued


def _make(
    source: str,
    message: str,
    *,
    writes: Sequence[FileWrite] = (),
    moves: Sequence[tuple[str, str]] = (),
    removes: Sequence[tuple[str, str | None]] = (),
    rmdirs: Sequence[str] = (),
    queued: Sequence[tuple[str, int]] = (),
    vectors: Mapping[str, Any] | None = None,
) -> TreeOp:
    return TreeOp(
        "docmem",
        source,
        message,
        tuple(writes),
        tuple(moves),
        tuple(queued),
        dict(vectors or {}),
        tuple(removes),
        tuple(rmdirs),
    )


def _label(path: str) -> str:
    return PurePosixPath(path).parent.name + "/"


def plan_append_child(
    conn: sqlite3.Connection,
    layout: Layout,
    parent_id: str,
    new: NewLeaf,
    *,
    embedder: Embedder | None = None,
) -> Plan:
    """A new leaf as the last child of the level ``parent_id`` (order: the last sibling's + 1)."""
    parent = node_row(conn, parent_id)
    if parent["kind"] != "summary":
        raise InvalidInput(f"{parent_id} is a leaf; append_child needs a level (a summary id)")
    _refuse_note_node(
        conn,
        parent_id,
        "its children are the note's sections, read from the note; write the new text in the note itself"
        " (vaultmem never rewrites a person's note), or append it to another level",
    )
    if not layout.abs(parent["path"]).is_file():
        raise NodeNotFound(f"{parent['path']} is gone; run `vaultmem check --fix` to update the index")
    folder = parent_dir(parent["path"])
    ordered = effective_orders(siblings(conn, folder))
    last = order_after(ordered[-1][0]) if ordered else Decimal(1)
    inherited, kind = _inherit([row for _, row in reversed(ordered)])
    place = _Placed(folder, parent["source"], last, inherited, kind, datetime.now(UTC))
    leaf, write, vectors = _new_leaf(layout, place, new, embedder)
    op = _make(
        leaf.source,
        f"memory: append a leaf to {_label(parent['path'])} ({leaf.source})",
        writes=[write],
        vectors=vectors,
    )
    return Plan(op, tuple(_enclosing(conn, folder)), (leaf.id,))


def plan_insert_between(
    conn: sqlite3.Connection,
    layout: Layout,
    first_id: str,
    second_id: str,
    new: NewLeaf,
    *,
    embedder: Embedder | None = None,
) -> Plan:
    """A new leaf between two adjacent siblings, a fifth of the way from the first's order to the
    second's. Its time defaults to the first's, so a conversation read by time keeps it in place."""
    first, second = node_row(conn, first_id), node_row(conn, second_id)
    folder = folder_of(first)
    if folder_of(second) != folder:
        raise InvalidInput(f"{first_id} and {second_id} are not siblings (they live in different folders)")
    if _is_source_top(folder):
        raise InvalidInput(
            "the top of a source holds levels only; insert inside a level or among _fresh/ leaves"
        )
    ordered = effective_orders(siblings(conn, folder))
    at = next(n for n, (_, row) in enumerate(ordered) if row["id"] == first_id)
    if at + 1 >= len(ordered) or ordered[at + 1][1]["id"] != second_id:
        raise InvalidInput(
            f"{first_id} and {second_id} are not adjacent siblings in reading order; "
            "insert between a node and the one right after it"
        )
    low, high = ordered[at][0], ordered[at + 1][0]
    if low == high:
        raise InvalidInput(
            f"{first_id} and {second_id} share the reading position {format_order(low)}; "
            "give one of them another `order` first"
        )
    inherited, kind = _inherit([first, second, *(row for _, row in reversed(ordered[:at]))])
    when = parse_ts(first["ts_end"] or first["ts"]) or parse_ts(second["ts"]) or datetime.now(UTC)
    place = _Placed(folder, first["source"], order_between(low, high), inherited, kind, when)
    leaf, write, vectors = _new_leaf(layout, place, new, embedder)
    op = _make(
        leaf.source,
        f"memory: insert a leaf in {PurePosixPath(folder).name}/ ({leaf.source})",
        writes=[write],
        vectors=vectors,
    )
    return Plan(op, tuple(_enclosing(conn, folder)), (leaf.id,))


def _level_files(
    layout: Layout, directory: str, max_bytes: int
) -> tuple[list[tuple[str, str | None]], list[str], list[str]]:
    """Every file of a level folder as (path, hash) removals, its directories, and the node ids in it.
    Raises InvalidInput, listing them, when anything in it is not a vaultmem node or sidecar."""
    removes: list[tuple[str, str | None]] = []
    dirs = [directory]
    ids: list[str] = []
    foreign: list[str] = []
    for dirpath, dirnames, filenames in os.walk(layout.abs(directory), followlinks=False):
        base = layout.rel(Path(dirpath))
        for name in sorted(dirnames):
            (foreign if layout.abs(f"{base}/{name}").is_symlink() else dirs).append(f"{base}/{name}")
        for name in sorted(filenames):
            rel = f"{base}/{name}"
            if layout.abs(rel).is_symlink():
                foreign.append(rel)
            elif name == SIDECAR_NAME:
                removes.append((rel, None))
            elif name == SUMMARY_NAME or (name.endswith(".md") and id_from_filename(name)):
                try:
                    if name == SUMMARY_NAME:
                        summary, stamp = read_summary_file(layout, rel, max_bytes)
                        ids.append(summary.id)
                    else:
                        leaf, stamp = read_leaf_file(layout, rel, max_bytes)
                        ids.append(leaf.id)
                except (FrontmatterError, InvalidInput):
                    foreign.append(rel)
                    continue
                removes.append((rel, stamp.hash))  # a file changed after this read is never removed
            else:
                foreign.append(rel)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise InvalidInput(
            f"refusing to delete {directory}/: it holds files that are not vaultmem nodes ({shown}); "
            "move them out first"
        )
    return removes, dirs, ids


def plan_delete(
    conn: sqlite3.Connection, layout: Layout, node_id: str, *, max_bytes: int = MAX_BYTES
) -> Plan:
    """Remove a node and everything under it: a leaf's file, or a level's whole folder (leaves, child
    levels, ``_summary.md``, ``_embeddings.json``)."""
    row = node_row(conn, node_id)
    _refuse_note_node(
        conn,
        node_id,
        "it leaves with the note; delete or move the note itself and the index follows (vaultmem never"
        " deletes a person's note)",
    )
    folder = folder_of(row)
    if row["kind"] == "leaf":
        leaf, _doc, digest = _read_leaf(layout, row["path"], max_bytes)
        if leaf.id != node_id:
            raise InvalidInput(f"{row['path']} now holds node {leaf.id}; `vaultmem check` shows why")
        removes: list[tuple[str, str | None]] = [(row["path"], digest)]
        dirs: list[str] = []
        ids = [node_id]
        depth_writes: list[FileWrite] = []
        queued: list[tuple[str, int]] = []
    else:
        directory = parent_dir(row["path"])
        removes, dirs, found = _level_files(layout, directory, max_bytes)
        ids = [node_id, *(i for i in found if i != node_id)]
        depth_writes, queued = _depth_writes(conn, layout, folder, {node_id: None}, max_bytes)
    before = {r["id"]: v for v, r in effective_orders(siblings(conn, folder))}
    after = [_as_node(r) for r in siblings(conn, folder) if r["id"] != node_id]
    writes = _order_writes(conn, layout, pins_for(before, after), max_bytes) + depth_writes
    what = "a leaf" if row["kind"] == "leaf" else f"{_label(row['path'])} ({len(ids)} nodes)"
    op = _make(
        row["source"],
        f"memory: delete {what} ({row['source']})",
        writes=writes,
        removes=removes,
        rmdirs=dirs,
        queued=queued,
    )
    written = {q[0] for q in queued}
    stale = [i for i in ancestors_of(conn, node_id) if i not in written]
    return Plan(op, tuple(stale), tuple(ids))


def plan_update_content(
    conn: sqlite3.Connection,
    layout: Layout,
    node_id: str,
    text: str,
    *,
    embedder: Embedder | None = None,
    max_bytes: int = MAX_BYTES,
) -> Plan:
    """Rewrite a node's text. A leaf keeps its id, provenance and user keys (``tokens``,
    ``content_hash`` and ``redactions`` follow the text; it is re-embedded). A summary's text becomes a
    hand edit: ``content_hash`` still names what the engine wrote, so the next re-summarisation keeps
    the new text under ``## Pinned``."""
    row = node_row(conn, node_id)
    body, kinds = _clean(text)
    vectors: dict[str, Any] = {}
    if row["kind"] == "leaf":
        changes: dict[str, Any] = {
            "text": body,
            "tokens": count_tokens(body),
            "content_hash": leaffile.content_hash(body),
            "redactions": kinds,
        }
        write = _leaf_write(layout, row["path"], max_bytes, **changes)
        if embedder is not None:
            new = replace(_read_leaf(layout, row["path"], max_bytes)[0], **changes)
            vectors[node_id] = np.asarray(embedder.embed([embed_text(new)])[0])
    else:
        node = _read_summary(layout, row["path"], max_bytes)[0]
        written = node.content_hash or text_hash(node.text)
        write = summary_write(layout, row["path"], max_bytes, text=body, content_hash=written)
        if embedder is not None:
            edited = replace(node, text=body)
            vectors[node_id] = np.asarray(embedder.embed([edited.searchable])[0])
    op = _make(
        row["source"],
        f"memory: edit {'a leaf' if row['kind'] == 'leaf' else _label(row['path'])} ({row['source']})",
        writes=[write],
        vectors=vectors,
    )
    return Plan(op, tuple(ancestors_of(conn, node_id)), (node_id,))


def _new_dir(conn: sqlite3.Connection, layout: Layout, base: str, title: str) -> str:
    """``NN-slug`` under ``base``, numbered after every numbered folder there (on disk or indexed)."""
    taken = 0
    path = layout.abs(base)
    names = [p.name for p in path.iterdir() if p.is_dir()] if path.is_dir() else []
    for row in siblings(conn, base):
        if row["kind"] == "summary":
            names.append(PurePosixPath(row["path"]).parent.name)
    for name in names:
        match = _NUMBERED.match(name)
        if match:
            taken = max(taken, int(match.group(1)))
    label = slug(title) or "memories"
    number = taken + 1
    while layout.abs(f"{base}/{number:02d}-{label}").exists():
        number += 1
    return f"{base}/{number:02d}-{label}"


def plan_add_summary(
    conn: sqlite3.Connection,
    layout: Layout,
    node_ids: Sequence[str],
    text: str,
    *,
    title: str | None = None,
    embedder: Embedder | None = None,
    max_bytes: int = MAX_BYTES,
) -> Plan:
    """A new level over contiguous sibling leaves: a folder inside theirs (for ``_fresh/`` leaves: at the
    top of the source, like a sealed level), the leaves moved in, a ``_summary.md`` with ``text``
    (``summariser: agent``), in the reading position of the first leaf."""
    ids = [check_node_id(i) for i in node_ids]
    if not ids or len(set(ids)) != len(ids):
        raise InvalidInput("add_summary needs one or more distinct leaf ids")
    rows = [node_row(conn, i) for i in ids]
    if any(r["kind"] != "leaf" for r in rows):
        raise InvalidInput("add_summary covers leaves only; a level already has its summary")
    folder = folder_of(rows[0])
    if any(folder_of(r) != folder for r in rows):
        raise InvalidInput("add_summary needs sibling leaves (all in one folder)")
    ordered = effective_orders(siblings(conn, folder))
    positions = sorted(n for n, (_, r) in enumerate(ordered) if r["id"] in set(ids))
    if positions[-1] - positions[0] + 1 != len(ids):
        raise InvalidInput(
            "add_summary needs contiguous leaves: another node sits between them in reading order"
        )
    covered = [ordered[n] for n in positions]
    body, _kinds = _clean(text)
    source = rows[0]["source"]
    in_fresh = PurePosixPath(folder).name == FRESH and _is_source_top(parent_dir(folder))
    base = parent_dir(folder) if in_fresh else folder
    name_title = clean_title(title or " ".join(body.split()[:6]))
    directory = _new_dir(conn, layout, base, name_title)
    stamps = [r["ts"] for _, r in covered if r["ts"]]
    node = SummaryNode(
        id=summary_id(source, f"{covered[0][1]['id']}:{directory}"),
        source=source,
        path=f"{directory}/{SUMMARY_NAME}",
        depth=1,
        title=name_title,
        text=body,
        children=tuple(ChildLink(_leaf_label(r), PurePosixPath(r["path"]).name) for _, r in covered),
        descendants=len(covered),
        earliest=parse_ts(min(stamps)) if stamps else None,
        latest=parse_ts(max(stamps)) if stamps else None,
        summariser="agent",
        content_hash=text_hash(body),
        order=None if in_fresh else format_order(covered[0][0]),
    )
    before = {r["id"]: v for v, r in ordered}
    moved = {r["id"] for _, r in covered}
    new_node = {
        "id": node.id,
        "kind": "summary",
        "path": node.path,
        "ts": min(stamps, default=None),
        "seq": 0,
        "ord": node.order,
    }
    remaining = [_as_node(r) for _, r in ordered if r["id"] not in moved]
    pins = pins_for(before, remaining if in_fresh else [*remaining, new_node])
    if in_fresh:
        top = {r["id"]: v for v, r in effective_orders(siblings(conn, base))}
        pins.update(pins_for(top, [*(_as_node(r) for r in siblings(conn, base)), new_node]))
    inside = [_as_node(r, path=f"{directory}/{PurePosixPath(r['path']).name}") for _, r in covered]
    pins.update(pins_for(before, inside))
    writes = [FileWrite(node.path, render_summary(node), None), *_order_writes(conn, layout, pins, max_bytes)]
    depth_writes, queued = (
        ([], []) if in_fresh else _depth_writes(conn, layout, folder, {node.id: 1}, max_bytes)
    )
    writes += depth_writes
    vectors = {node.id: np.asarray(embedder.embed([node.searchable])[0])} if embedder is not None else {}
    op = _make(
        source,
        f"memory: summarise {len(covered)} leaves into {PurePosixPath(directory).name}/ ({source})",
        writes=writes,
        moves=[(r["path"], f"{directory}/{PurePosixPath(r['path']).name}") for _, r in covered],
        queued=queued,
        vectors=vectors,
    )
    written = {q[0] for q in queued}
    stale = [] if in_fresh else [i for i in _enclosing(conn, folder) if i not in written]
    return Plan(op, tuple(stale), (node.id,))


def _leaf_label(row: RowLike) -> str:
    day = (row["ts"] or "")[:10]
    words = " ".join(str(row["text"]).split()[:10])
    who = f"{row['speaker']}: " if row["speaker"] else ""
    return f"{day} {who}{words}".strip()


# -- running ------------------------------------------------------------------------------------------------
def run(
    conn: sqlite3.Connection,
    layout: Layout,
    plan: Plan,
    *,
    model: str = "",
    dim: int = 0,
    max_bytes: int = MAX_BYTES,
) -> steps.Applied:
    """Mark the plan's summaries stale, then apply its step. ``model``/``dim`` name the vector space whose
    sidecar entries travel with moved and removed files (the vault's embedding model)."""
    fresh = [i for i in plan.stale if not _is_stale(conn, i)]  # a stale level already has its job
    if fresh:
        mark_stale(conn, layout, fresh, max_bytes)
    return steps.apply(conn, layout, plan.op, model, dim)


def _is_stale(conn: sqlite3.Connection, node_id: str) -> bool:
    found = conn.execute("SELECT status FROM chunks WHERE id = ?", (node_id,)).fetchone()
    return found is not None and found["status"] == "stale"
