"""``## Related``: each level links the few most similar levels elsewhere in the vault.

Owns: choosing them and the step that writes them. A source or topic level's related levels are the
``RELATED_MAX`` summaries (source levels and topic levels, any source) whose summary vectors are closest
to its own, above the vault's background similarity (``cluster.background``: the mean cosine of two
summaries plus half a standard deviation, so the bar follows the embedder and the vault); never the level
itself, its ancestors, descendants or siblings (the tree or the folder already links those). A node of the
global tree (a day, week or month digest) links the source and topic levels closest to it the same way:
what that day was about; digests are never link targets (every day is a list of what happened, alike in
shape, and a subject's level is the better page to land on). Links are relative Markdown links to the other
``_summary.md`` (Obsidian and any viewer render them), labelled with its title; the plan runs after every
compaction pass, so links follow levels that moved.

Must never: count a related level as a child (the section is apart from ``## Children``); write a file
it did not read (every write carries the hash read); touch a file changed on disk since it was indexed
(a hand edit not read yet: left alone until it is); rewrite a file whose links did not change. Costs
one matrix product over at most ``MAX_LEVELS`` summaries (the newest, beyond that) and a partial sort per
row; files are read only where the links may differ: a ``Known`` memo (path -> the indexed hash and the
links that file holds) lets a pass skip every file whose indexed hash is unchanged and whose links are
already the chosen ones, so a pass after one seal reads the few files whose links moved.
"""

from __future__ import annotations

import json
import posixpath
import sqlite3
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from vaultmem import cluster, fsio, steps
from vaultmem.errors import ConflictError, FrontmatterError
from vaultmem.layout import SOURCES, SUMMARY_NAME, Layout
from vaultmem.summaryfile import ChildLink, parse_summary, render_summary

RELATED_MAX = 3
MAX_LEVELS = 4000
_TOPICS = "topics"
_GLOBAL = "global"
_SHORTLIST = 32  # candidates partially sorted per row; a row whose shortlist is all kin sorts in full
# path -> (file hash as indexed, the related links that file holds): what ``plan`` need not read again
Known = dict[str, tuple[str, tuple[ChildLink, ...]]]
_TREES = (f"{SOURCES}/%/{SUMMARY_NAME}", f"{_TOPICS}/%/{SUMMARY_NAME}", f"{_GLOBAL}/%/{SUMMARY_NAME}")


def _title(provenance: str | None) -> str:
    try:
        data = json.loads(provenance or "{}")
    except json.JSONDecodeError:
        return ""
    return str(data.get("title") or "") if isinstance(data, dict) else ""


def _kin(a: str, b: str, parent_a: str, parent_b: str) -> bool:
    """Directories ``a`` and ``b`` (with their parents) are the same level, one holds the other, or they
    are siblings."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/") or parent_a == parent_b


def _relative(target: list[str], start: list[str]) -> str:
    """``posixpath.relpath`` of two vault-relative paths given as parts (no ``..`` in either)."""
    common = 0
    for x, y in zip(target, start, strict=False):
        if x != y:
            break
        common += 1
    return "/".join([".."] * (len(start) - common) + target[common:])


def _ranked(row: npt.NDArray[np.float32], shortlist: int) -> npt.NDArray[np.intp]:
    """Column indices by falling similarity (ties by index), only the best ``shortlist`` of them."""
    if shortlist >= len(row):
        return np.argsort(-row, kind="stable")
    top = np.argpartition(-row, shortlist)[:shortlist]
    # Exactly the first ``shortlist`` of a stable full sort: by similarity, then index.
    return top[np.lexsort((top, -row[top]))]


def choose(conn: sqlite3.Connection, model: str) -> dict[str, tuple[ChildLink, ...]]:
    """Summary path of every source, topic and digest level -> its related links, as they should be now."""
    rows = conn.execute(
        "SELECT c.path, c.provenance, v.vec FROM chunks c JOIN vectors v ON v.id = c.id AND v.model = ?"
        " WHERE c.kind = 'summary' AND (c.path LIKE ? OR c.path LIKE ? OR c.path LIKE ?)"
        " ORDER BY c.ts DESC, c.path LIMIT ?",
        (model, *_TREES, MAX_LEVELS),
    ).fetchall()
    if len(rows) < 2:
        return {}
    dirs = [posixpath.dirname(r["path"]) for r in rows]
    parents = [posixpath.dirname(d) for d in dirs]
    parts = [d.split("/") for d in dirs]
    labels: dict[int, str] = {}
    digest = np.array([d.split("/", 1)[0] == _GLOBAL for d in dirs])
    if digest.all():
        return {}
    vecs = np.stack([np.frombuffer(r["vec"], dtype="<f4") for r in rows]).astype(np.float32)
    unit = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    bar = cluster.background(unit[~digest])  # how alike two levels are anyway (digests are no targets)
    sims = unit @ unit[~digest].T
    targets = np.flatnonzero(~digest)
    out: dict[str, tuple[ChildLink, ...]] = {}
    for i, row in enumerate(rows):
        picked: list[ChildLink] = []
        shortlist = _SHORTLIST
        while True:
            order = _ranked(sims[i], shortlist)
            for col in order:
                j = int(targets[int(col)])
                if len(picked) == RELATED_MAX or sims[i, col] < bar:
                    break
                if _kin(dirs[i], dirs[j], parents[i], parents[j]):
                    continue
                if j not in labels:
                    labels[j] = _title(rows[j]["provenance"]) or parts[j][-1]
                target = _relative([*parts[j], SUMMARY_NAME], parts[i])
                picked.append(ChildLink(labels[j], target))
            else:
                if len(order) < len(targets):  # the shortlist was all kin: look further
                    picked, shortlist = [], len(targets)
                    continue
            break
        out[row["path"]] = tuple(picked)
    return out


def plan(
    conn: sqlite3.Connection, layout: Layout, model: str, known: Known | None = None
) -> steps.TreeOp | None:
    """The step that brings every level's ``## Related`` section up to date, or None. ``known`` (kept by
    the caller between passes) spares reading files whose indexed hash and links are as last seen; the
    caller records the step's writes in it once applied (``remember``)."""
    writes: list[steps.FileWrite] = []
    indexed = dict(
        conn.execute(
            "SELECT path, file_hash FROM chunks WHERE kind = 'summary'"
            " AND (path LIKE ? OR path LIKE ? OR path LIKE ?)",
            (SOURCES + "/%", _TOPICS + "/%", _GLOBAL + "/%"),
        )
    )
    memo: Known = {} if known is None else known
    for gone in set(memo) - set(indexed):
        del memo[gone]
    for rel, links in choose(conn, model).items():
        seen = memo.get(rel)
        if seen is not None and seen == (indexed.get(rel), links):
            continue  # the file as indexed holds these links already
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
        memo[rel] = (digest, node.related)
        if node.related == links:
            continue
        writes.append(steps.FileWrite(rel, render_summary(replace(node, related=links), keep=doc), digest))
    if not writes:
        return None
    return steps.TreeOp("related", "", f"memory: related links of {len(writes)} levels", tuple(writes))


def update(
    conn: sqlite3.Connection, layout: Layout, model: str, dim: int, known: Known | None = None
) -> str | None:
    """Plan and apply the step (the caller holds the vault's write lock); its message, or None when
    nothing changed or a file changed under it (the next pass does it). ``known``: see ``plan``."""
    op = plan(conn, layout, model, known)
    if op is None:
        return None
    try:
        steps.apply(conn, layout, op, model, dim)
    except ConflictError:
        if known is not None:
            known.clear()  # read everything again next time
        return None
    if known is not None:
        hashes = dict(
            conn.execute(
                f"SELECT path, file_hash FROM chunks WHERE path IN ({','.join('?' * len(op.writes))})",
                [w.path for w in op.writes],
            )
        )
        for write in op.writes:
            node = parse_summary(write.data, write.path)[0]
            known[write.path] = (hashes.get(write.path, ""), node.related)
    return op.message
