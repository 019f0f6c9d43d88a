"""Version links written durably (issue #20): ``supersedes`` on the new leaf, ``superseded_by`` on the old.

Owns the one write that links (or unlinks) two leaves: both leaf files get their key changed (every
other byte kept), the levels above them are marked stale (a summary reads a replaced leaf as
``[superseded]``), and the index rows follow, all as one ``steps`` step: its write-ahead note goes first
and ``Vault.open`` replays it, so a kill or a full disk between a file and its row never leaves them
apart. The days' digests and the topics that read the two leaves are queued before the step (a job run
without the link rewrites the same text). Only the key changes: a person's edit the catch-up has not
read yet is kept, and the step reads it into the row (re-embedded when the text changed). A file that
changes between its read and the step is a ``ConflictError``, with nothing changed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import PurePosixPath

from vaultmem import agentio, frontmatter, fsio, index, stale, steps
from vaultmem.jobs import JobQueue, NewJob, digest_job, topic_route_job
from vaultmem.layout import Layout
from vaultmem.steps import FileWrite, TreeOp


def link(
    conn: sqlite3.Connection,
    layout: Layout,
    old: tuple[str, str],
    new: tuple[str, str],
    *,
    add: bool = True,
    max_bytes: int,
    digests: bool = True,
    topics: bool = True,
    log: tuple[str, str, str | None] | None = None,
) -> bool:
    """Write (``add``) or remove the link between the leaves ``old`` and ``new`` (each ``(id, path)``),
    both sides, as one durable step. ``log`` (``review.log_entry``: the week's log with the link's line)
    is written in the same step, so a crash never leaves a link applied and unlogged. Returns False when
    both files already said so (nothing written, the log neither). Raises ConflictError, before changing
    anything, when a file changed since it was read here."""
    (old_id, old_rel), (new_id, new_rel) = old, new
    writes: list[FileWrite] = []
    for rel, key, value in (
        (new_rel, agentio.SUPERSEDES, old_id),
        (old_rel, agentio.SUPERSEDED_BY, new_id),
    ):
        text, digest = fsio.read_text_guarded(layout.abs(rel), max_bytes)
        changed = _with_id(text, key, value, add=add, where=rel)
        if changed is not None:
            writes.append(FileWrite(rel, changed, digest))
    if not writes:
        return False
    if log is not None:
        writes.append(FileWrite(*log))
    leaf_ids = [old_id, new_id]
    levels = [a for leaf_id in leaf_ids for a in stale.ancestors_of(conn, leaf_id)]
    marks, queued, _source = stale.stale_writes(conn, layout, levels, max_bytes)
    JobQueue(conn).enqueue_many(_derived_jobs(conn, leaf_ids, digests=digests, topics=topics))
    source = PurePosixPath(new_rel).parts[1] if new_rel.count("/") >= 2 else ""
    verb = "link" if add else "unlink"
    op = TreeOp(
        "link",
        source,
        f"memory: {verb} {new_id} (supersedes {old_id})",
        (*writes, *marks),
        (),
        tuple(queued),
    )
    steps.apply(conn, layout, op, "", 0)
    return True


def _with_id(text: str, key: str, value: str, *, add: bool, where: str) -> str | None:
    """The file's text with ``value`` added to (or removed from) the id list under ``key``; None when
    the list already is so. Every other key keeps its bytes."""
    doc = frontmatter.split(text, where=where)
    ids = agentio.id_list(doc.meta.get(key))
    if add:
        if value in ids:
            return None
        return agentio.with_keys(text, {key: agentio.added_id(doc.meta.get(key), value)}, where=where)
    kept = [i for i in ids if i != value]
    if kept == ids:
        return None
    if kept:
        return agentio.with_keys(text, {key: kept[0] if len(kept) == 1 else kept}, where=where)
    blocks = [raw if raw.endswith("\n") else raw + "\n" for k, raw in doc.raw_blocks if k != key]
    return "---\n" + "".join(blocks) + "---\n" + doc.body


def _derived_jobs(
    conn: sqlite3.Connection, leaf_ids: Sequence[str], *, digests: bool, topics: bool
) -> list[NewJob]:
    """The rewrites of what reads these leaves outside their levels: their days' digests, and the topics
    that exist and follow one of their entities."""
    jobs: list[NewJob] = []
    if digests:
        jobs.extend(
            digest_job(leaf.ts.date()) for leaf in index.leaves_by_ids(conn, list(leaf_ids)) if leaf.ts
        )
    if topics:
        jobs.extend(topic_route_job(entity) for entity in steps.followed_entities(conn, leaf_ids))
    return jobs
