"""``## Related``: each source or topic level links the few most similar levels elsewhere in the vault.

Owns: choosing them and the step that writes them. A level's related levels are the ``RELATED_MAX``
summaries (source levels and topic levels, any source) whose summary vectors are closest to its own,
above the vault's background similarity (``cluster.background``: the mean cosine of two summaries plus
half a standard deviation, so the bar follows the embedder and the vault); never the level itself, its
ancestors, descendants or siblings (the tree or the folder already links those). Links are relative
Markdown links to the other ``_summary.md`` (Obsidian and any viewer render them), labelled with its
title; the plan runs after every compaction pass, so links follow levels that moved.

Must never: count a related level as a child (the section is apart from ``## Children``); write a file
it did not read (every write carries the hash read); touch a file changed on disk since it was indexed
(a hand edit not read yet: left alone until it is); rewrite a file whose links did not change. Costs
one matrix product over at most ``MAX_LEVELS`` summaries (the newest, beyond that).
"""

from __future__ import annotations

import json
import posixpath
import sqlite3
from dataclasses import replace
from pathlib import PurePosixPath

import numpy as np

from vaultmem import cluster, fsio, steps
from vaultmem.errors import ConflictError, FrontmatterError
from vaultmem.layout import SOURCES, SUMMARY_NAME, Layout
from vaultmem.summaryfile import ChildLink, parse_summary, render_summary

RELATED_MAX = 3
MAX_LEVELS = 4000
_TOPICS = "topics"


def _title(provenance: str | None) -> str:
    try:
        data = json.loads(provenance or "{}")
    except json.JSONDecodeError:
        return ""
    return str(data.get("title") or "") if isinstance(data, dict) else ""


def _kin(a: str, b: str) -> bool:
    """Directories ``a`` and ``b`` are the same level, one holds the other, or they are siblings."""
    return (
        a == b
        or a.startswith(b + "/")
        or b.startswith(a + "/")
        or PurePosixPath(a).parent == PurePosixPath(b).parent
    )


def choose(conn: sqlite3.Connection, model: str) -> dict[str, tuple[ChildLink, ...]]:
    """Summary path of every source and topic level -> its related links, as they should be now."""
    rows = conn.execute(
        "SELECT c.path, c.provenance, v.vec FROM chunks c JOIN vectors v ON v.id = c.id AND v.model = ?"
        " WHERE c.kind = 'summary' AND (c.path LIKE ? OR c.path LIKE ?) ORDER BY c.ts DESC, c.path LIMIT ?",
        (model, f"{SOURCES}/%/{SUMMARY_NAME}", f"{_TOPICS}/%/{SUMMARY_NAME}", MAX_LEVELS),
    ).fetchall()
    if len(rows) < 2:
        return {}
    dirs = [posixpath.dirname(r["path"]) for r in rows]
    vecs = np.stack([np.frombuffer(r["vec"], dtype="<f4") for r in rows]).astype(np.float32)
    unit = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    bar = cluster.background(unit)
    sims = unit @ unit.T
    out: dict[str, tuple[ChildLink, ...]] = {}
    for i, row in enumerate(rows):
        picked: list[ChildLink] = []
        for j in np.argsort(-sims[i], kind="stable"):
            j = int(j)
            if len(picked) == RELATED_MAX or sims[i, j] < bar:
                break
            if _kin(dirs[i], dirs[j]):
                continue
            label = _title(rows[j]["provenance"]) or PurePosixPath(dirs[j]).name
            picked.append(ChildLink(label, posixpath.relpath(rows[j]["path"], dirs[i])))
        out[row["path"]] = tuple(picked)
    return out


def plan(conn: sqlite3.Connection, layout: Layout, model: str) -> steps.TreeOp | None:
    """The step that brings every source and topic level's ``## Related`` section up to date, or None."""
    writes: list[steps.FileWrite] = []
    indexed = dict(
        conn.execute(
            "SELECT path, file_hash FROM chunks WHERE kind = 'summary' AND (path LIKE ? OR path LIKE ?)",
            (SOURCES + "/%", _TOPICS + "/%"),
        )
    )
    for rel, links in choose(conn, model).items():
        path = layout.abs(rel)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        digest = fsio.sha256_bytes(data)
        if indexed.get(rel) != digest:
            continue  # changed on disk since it was indexed: read it first (catch-up), link it next time
        try:
            node, doc = parse_summary(data.decode("utf-8"), rel)
        except (FrontmatterError, UnicodeDecodeError):
            continue
        if node.related == links:
            continue
        writes.append(steps.FileWrite(rel, render_summary(replace(node, related=links), keep=doc), digest))
    if not writes:
        return None
    return steps.TreeOp("related", "", f"memory: related links of {len(writes)} levels", tuple(writes))


def update(conn: sqlite3.Connection, layout: Layout, model: str, dim: int) -> str | None:
    """Plan and apply the step (the caller holds the vault's write lock); its message, or None when
    nothing changed or a file changed under it (the next pass does it)."""
    op = plan(conn, layout, model)
    if op is None:
        return None
    try:
        steps.apply(conn, layout, op, model, dim)
    except ConflictError:
        return None
    return op.message
