"""``check``: prove that chunks.db and the vault's files agree, and repair what the files determine.

Owns the list of invariants. Each problem names its code and path; ``fix=True`` repairs only what can
be derived from the files (index rows, FTS, temp files of the engine, interrupted batches) and never
edits or deletes a user's Markdown file.

Invariants:
- ``missing_row``      a valid leaf or summary file has no row            (fix: index it)
- ``orphan_row``       a row's file is gone (a moved file is a stale row)  (fix: drop the row)
- ``stale_row``        a row differs from its file (hash, path, content)   (fix: re-read the file)
- ``invalid_file``     a file under sources/ is not a valid leaf or summary (not fixable: edit it)
- ``duplicate_id``     two files carry the same node id (a copy, or what a git conflict leaves)
                       (fix: the copy at the indexed path stays the node, else the first in path
                       order; another copy with the same text and the same keys of yours is moved to
                       ``.vaultmem/duplicates/<time>/<path>``; one with other content becomes a node
                       of its own under a new id (a leaf file is renamed to end in it). Nothing is
                       deleted.)
- ``fts_mismatch``     FTS tables disagree with the rows                   (fix: rebuild FTS)
- ``stray_temp``       a temp file left by a crash                         (fix: delete it)
- ``pending_intent``   a batch, step or restore cut short by a crash       (fix: finish it)
- ``outside_link``     a symlink pointing outside the vault                (not fixable: remove the link)
- ``stale_unqueued``   a stale summary without its re-summarise job        (fix: queue it)
- ``dangling_link``    a topic or digest links a leaf that is gone         (fix: queue its re-route or
                       re-digest; ``vaultmem compact`` or the daemon runs it)
- ``unresolved_link``  a summary's ``## Children`` link Obsidian cannot follow (a file,
                       heading or block that is not there; ``linkcheck``; not fixable: re-summarise or
                       re-route the level, or read its note again). Stale levels are left to their job
- ``secret_in_file``   a Markdown file holds a secret (typed by hand: the engine never writes one); the
                       index and everything derived have it redacted and git leaves the file out.
                       Names the file and the kinds, never the secret. Not fixed by ``--fix`` (the
                       file is the person's); ``--fix --redact`` rewrites it with the secrets replaced
                       (guarded by the hash read, keys without a secret kept byte for byte)
- ``bad_sidecar``      an ``_embeddings.json`` that cannot be read          (fix: rewrite it from the index's
                       vectors; leaves the index has no vector for are queued to be embedded)
- ``dangling_version`` a leaf's ``supersedes`` / ``superseded_by`` names a leaf the vault does not hold
                       (not fixable: correct the key, or restore the leaf; search ignores the link)
- ``invalid_proposal`` a file of the review inbox (``review/<new>-updates-<old>.md``) that cannot be read
                       (not fixable: correct or delete it). One naming a leaf the vault no longer holds
                       is not a problem: the next review retires it into the weekly log as ``gone``
- ``vector_graph_behind`` the matrix file of the vectors (``.vaultmem/vectors-*.npy``, from 50,000 rows)
                       has no HNSW graph of its own: none, one of an earlier matrix, or a damaged one
                       (search scores without it meanwhile; fix: build it)
- ``leaf_file_damaged`` the leaf file (``.vaultmem/leafgraph.npz``, from 20,000 leaves) names this index in
                       its header but does not hold what the header says (torn, damaged): every new
                       process builds the leaf graph instead of reading it (fix: write it again)
- ``damaged_index``    chunks.db fails ``PRAGMA quick_check`` (found by ``Vault.check``; fix: move it aside
                       and rebuild it from the files)

Stuck work (the queue is in chunks.db, so these are index-side too):
- ``parked_job``       a job gave up after its attempts; nothing retries it  (fix: requeue it with fresh
                       attempts, as ``vaultmem jobs --retry`` does)
- ``pending_unqueued`` a leaf waits for extraction but no job will do it     (fix: queue its admit job)
- ``dead_lease``       a job is leased by a process that is gone, or its lease expired (fix: put it back
                       in the queue; opening the vault does this for killed processes of this host)
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import PurePosixPath

import numpy as np

from vaultmem import ann, daemonstate, fsio, graph, index, linkcheck, review, sidecar, vectors
from vaultmem.db import HAS_CJK, NAV, atomic
from vaultmem.errors import ConflictError, VaultError
from vaultmem.frontmatter import redact_document
from vaultmem.ingest import heal_intents
from vaultmem.jobs import Job, JobQueue, NewJob, admit_job, digest_job, resummarise_job, topic_route_job
from vaultmem.layout import (
    DB_NAME,
    RESERVED_TOP,
    SIDECAR_NAME,
    SOURCES,
    STATE_DIR,
    SUMMARY_NAME,
    TOMBSTONES,
    Layout,
)
from vaultmem.leaffile import LEAF_KEYS, id_from_filename, parse_leaf, render_leaf
from vaultmem.reindex import VaultFiles, read_vault
from vaultmem.scan import ScanEntry, scan
from vaultmem.steps import pending_notes
from vaultmem.summaryfile import SUMMARY_KEYS, ChildLink, parse_summary, render_summary, summary_id


@dataclass(frozen=True)
class Problem:
    code: str
    path: str
    message: str
    fixable: bool


@dataclass(frozen=True)
class CheckReport:
    problems: tuple[Problem, ...]
    fixed: tuple[Problem, ...] = field(default=())
    leaves: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def check(
    conn: sqlite3.Connection,
    layout: Layout,
    max_bytes: int,
    *,
    fix: bool = False,
    redact: bool = False,
    model: str | None = None,
    dim: int = 0,
) -> CheckReport:
    """Every invariant; ``model`` and ``dim`` (the configured embedder's) let the sidecars be checked."""
    problems: list[Problem] = []
    fixed: list[Problem] = []

    if layout.intent.is_dir():
        for note in sorted(layout.intent.glob("*.json")):
            problems.append(Problem("pending_intent", layout.rel(note), "batch interrupted by a crash", True))
    for note in pending_notes(layout):
        # Finished by Vault.open / Vault.check(fix=True), which know the embedding model.
        problems.append(
            Problem("pending_intent", layout.rel(note), "compaction step interrupted by a crash", True)
        )
    if layout.restoring.is_dir():  # finished by Vault.open / Vault.check(fix=True) (the embedding model)
        for note in sorted(layout.restoring.glob("*.json")):
            problems.append(
                Problem("pending_intent", layout.rel(note), "restore interrupted by a crash", True)
            )
    if fix and any(p.code == "pending_intent" and "/intent/" in f"/{p.path}" for p in problems):
        heal_intents(conn, layout, max_bytes)
        fixed.extend(p for p in problems if p.code == "pending_intent")
        problems = [p for p in problems if p.code != "pending_intent"]

    daemon_running = daemonstate.is_running(layout)
    for tmp in fsio.stray_temp_files(layout.root):
        if ".git" in tmp.relative_to(layout.root).parts:
            continue
        if daemon_running and daemonstate.owns_temp(layout, tmp):
            continue  # the running daemon's status write in flight
        problem = Problem("stray_temp", layout.rel(tmp), "temp file left by an interrupted write", True)
        if fix:
            fsio.remove_file(layout.root, tmp)
            fixed.append(problem)
        else:
            problems.append(problem)

    result = scan(layout)
    # First, so that files rewritten redacted are read back below as they now are.
    for problem, rewritten in _secrets(layout, result.entries, max_bytes, rewrite=fix and redact):
        (fixed if rewritten else problems).append(problem)
    for rel in result.outside_links:
        problems.append(Problem("outside_link", rel, "symlink points outside the vault; remove it", False))
    problems.extend(_case_twins(entry.rel for entry in result.entries))

    rows = index.all_rows(conn)
    files = read_vault(layout, max_bytes)
    reembed: list[str] = []
    if fix and files.duplicates:
        settled, reembed = settle_duplicates(layout, files, rows, max_bytes)
        fixed.extend(settled)
        files = read_vault(layout, max_bytes)  # the vault as the settling left it
    for rel, reason in files.skipped:
        if rel.startswith(f"{SOURCES}/") or id_from_filename(rel.rsplit("/", 1)[-1]) is not None:
            problems.append(Problem("invalid_file", rel, reason, False))
    for rel, node_id, first in files.duplicates:
        problems.append(Problem("duplicate_id", rel, f"id {node_id} is also in {first}", True))
    refresh: list[tuple[object, ...]] = []
    refresh_problems: list[Problem] = []
    for node_id, file_row in files.rows.items():
        rel = files.paths[node_id]
        row = rows.get(node_id)
        expected = dict(zip(index.ROW_COLUMNS, file_row, strict=True))
        if row is None:
            refresh.append(file_row)
            refresh_problems.append(Problem("missing_row", rel, f"node {node_id} has no index row", True))
        elif _differs(row, expected):
            refresh.append(file_row)
            refresh_problems.append(
                Problem("stale_row", rel, f"index row of {node_id} does not match the file", True)
            )
    leaves = files.leaves

    # A section of a note indexed in place has no file of its own: ``documents_out_of_step`` compares
    # those rows with their note.
    orphans = [row for row in rows.values() if row["id"] not in files.rows and index.has_file(row["path"])]
    orphan_problems = [
        Problem("orphan_row", row["path"], f"row {row['id']} has no file", True) for row in orphans
    ]

    fts_problem = _fts_problem(conn)
    unqueued = [
        (row["id"], row["path"], row["depth"])
        for row in conn.execute(
            "SELECT id, path, depth FROM chunks WHERE kind = 'summary' AND status = 'stale'"
            " AND 'resummarise:' || id NOT IN (SELECT dedupe_key FROM jobs WHERE dedupe_key IS NOT NULL)"
        )
    ]
    stale_problems = [
        Problem("stale_unqueued", path, f"summary {node_id} is stale but no re-summarise job is queued", True)
        for node_id, path, _ in unqueued
    ]

    if fix:
        with atomic(conn):
            JobQueue(conn).enqueue_many(resummarise_job(node_id, depth) for node_id, _, depth in unqueued)
            conn.executemany("DELETE FROM chunks WHERE id = ?", [(row["id"],) for row in orphans])
            index.upsert_rows(conn, refresh)
            JobQueue(conn).enqueue_many(admit_job(i) for i in reembed)  # copies made nodes of their own
            if fts_problem is not None:
                rebuild_fts(conn)
        fixed.extend(refresh_problems + orphan_problems + stale_problems)
        if fts_problem is not None:
            fixed.append(fts_problem)
    else:
        problems.extend(refresh_problems + orphan_problems + stale_problems)
        if fts_problem is not None:
            problems.append(fts_problem)
    if model is not None:
        for problem in _sidecar_problems(conn, layout, model, dim, fix=fix):
            (fixed if fix else problems).append(problem)
        behind = _graph_problem(conn, layout, model, dim, fix=fix)
        if behind is not None:
            (fixed if fix else problems).append(behind)
    leaf_file = _leaf_file_problem(conn, layout, fix=fix)
    if leaf_file is not None:
        (fixed if fix and leaf_file.fixable else problems).append(leaf_file)
    dangling = _dangling_links(conn, layout, max_bytes, fix=fix)
    (fixed if fix else problems).extend(p for p in dangling if p.fixable)
    problems.extend(p for p in dangling if not p.fixable)
    problems.extend(_unresolved_links(conn, layout, max_bytes))
    (fixed if fix else problems).extend(_stuck_work(conn, fix=fix))
    problems.extend(_dangling_versions(conn, set(files.rows) | _forgotten(layout)))
    problems.extend(_proposal_problems(layout))
    return CheckReport(tuple(problems), tuple(fixed), leaves)


def _case_twins(rels: Iterable[str]) -> list[Problem]:
    """Names in one folder that differ only in case (``Plugins/`` beside ``plugins/``, ``Note.md`` beside
    ``note.md``): one name on macOS and Windows, so a clone there loses one of them. New source names
    are refused (``ingest.check_new_sources``); these were made before that, by hand or by a sync.
    Not fixable: which name stays is a person's choice (leaves are never renamed by the engine)."""
    names: dict[tuple[str, str], set[str]] = {}
    for rel in rels:
        parts = rel.split("/")
        for depth, name in enumerate(parts):
            parent = "/".join(parts[:depth])
            names.setdefault((parent, name.casefold()), set()).add(name)
    out = []
    for (parent, _folded), spelled in sorted(names.items()):
        if len(spelled) > 1:
            first, *others = sorted(spelled)
            rel = f"{parent}/{first}" if parent else first
            shown = ", ".join(repr(o) for o in others)
            message = (
                f"{first!r} and {shown} differ only in case: on macOS and Windows they are one name, and a"
                " clone there keeps only one; rename or merge them by hand"
            )
            out.append(Problem("case_twin", rel, message, False))
    return out


def settle_duplicates(
    layout: Layout, files: VaultFiles, rows: dict[str, dict[str, object]], max_bytes: int
) -> tuple[list[Problem], list[str]]:
    """Give every node id one file again (the ``duplicate_id`` fix; see the module docstring). Returns
    the problems fixed and the ids of copies that became nodes of their own (they need embedding)."""
    copies: dict[str, list[str]] = {}
    for rel, node_id, first in files.duplicates:
        copies.setdefault(node_id, [first]).append(rel)
    fixed: list[Problem] = []
    reembed: list[str] = []
    aside = layout.state / "duplicates" / time.strftime("%Y%m%dT%H%M%S")
    for node_id, paths in copies.items():
        indexed = rows.get(node_id, {}).get("path")
        keeper = indexed if indexed in paths else paths[0]
        try:
            kept = _same_node(layout, keeper, max_bytes)
        except (OSError, VaultError, UnicodeDecodeError):
            continue  # reported as an invalid file
        for rel in paths:
            if rel == keeper:
                continue
            try:
                copy = _same_node(layout, rel, max_bytes)
            except (OSError, VaultError, UnicodeDecodeError):
                continue
            if copy == kept:
                target = aside / rel
                fsio.move_file(layout.root, layout.abs(rel), target)
                why = f"an identical copy of {keeper} (id {node_id}); moved to {layout.rel(target)}"
            else:
                new_id, new_rel = _make_own_node(layout, rel, max_bytes)
                if not new_rel.endswith(SUMMARY_NAME):
                    reembed.append(new_id)
                shown = f" as {new_rel}" if new_rel != rel else ""
                why = (
                    f"had id {node_id} of {keeper} but other content; now a node of its own, {new_id}{shown}"
                )
            fixed.append(Problem("duplicate_id", rel, why, True))
    return fixed, reembed


def _same_node(layout: Layout, rel: str, max_bytes: int) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What makes two copies the same memory: the text, and the person's own keys."""
    text = fsio.read_text_guarded(layout.abs(rel), max_bytes)[0]
    if rel.endswith(SUMMARY_NAME):
        node, doc = parse_summary(text, rel)
        body, owned = node.searchable, SUMMARY_KEYS
    else:
        leaf, doc = parse_leaf(text, rel)
        body, owned = leaf.text, LEAF_KEYS
    return body.strip(), tuple((k, raw) for k, raw in doc.raw_blocks if k not in owned)


def _make_own_node(layout: Layout, rel: str, max_bytes: int) -> tuple[str, str]:
    """Give a copy with other content a new id derived from the old one and its path; a leaf file is
    renamed to end in it (a leaf's name carries its id). Returns (new id, new path)."""
    path = layout.abs(rel)
    text, digest = fsio.read_text_guarded(path, max_bytes)
    seed = hashlib.sha256(f"copy\x1f{rel}\x1f{digest}".encode()).hexdigest()
    if rel.endswith(SUMMARY_NAME):
        node, doc = parse_summary(text, rel)
        new_id = summary_id(node.source, f"copy:{rel}:{node.id}:{seed}")
        data = render_summary(replace(node, id=new_id), keep=doc).encode("utf-8")
        fsio.atomic_write(path, data, root=layout.root, expected=digest)
        return new_id, rel
    leaf, doc = parse_leaf(text, rel)
    new_id = seed[:16]
    name = PurePosixPath(rel).name
    new_rel = str(PurePosixPath(rel).parent / f"{name[: -len(leaf.id) - 3]}{new_id}.md")
    data = render_leaf(replace(leaf, id=new_id), keep=doc).encode("utf-8")
    fsio.atomic_write(layout.abs(new_rel), data, root=layout.root, expected=None)
    if fsio.file_hash(path) == digest:  # never remove what changed since it was read
        fsio.remove_file(layout.root, path)
    return new_id, new_rel


def _stuck_work(conn: sqlite3.Connection, *, fix: bool) -> list[Problem]:
    """Work that will never finish by itself: parked jobs, pending leaves without an admit job, and
    jobs leased by nobody alive. ``fix`` requeues them."""
    queue = JobQueue(conn)
    out: list[Problem] = []
    parked = queue.list("parked", limit=1 << 30)
    for job in parked:
        error = (job.last_error or "no error recorded").splitlines()[0][:200]
        out.append(
            Problem(
                "parked_job",
                _job_path(conn, job),
                f"job {job.id} ({job.kind} {_payload(job)}) gave up after {job.attempts} attempts: {error}",
                True,
            )
        )
    unqueued = conn.execute(
        "SELECT id, path FROM chunks WHERE kind = 'leaf' AND status = 'pending_extraction'"
        " AND 'admit:' || id NOT IN (SELECT dedupe_key FROM jobs WHERE dedupe_key IS NOT NULL)"
        " AND 'extract:' || id NOT IN (SELECT dedupe_key FROM jobs WHERE dedupe_key IS NOT NULL)"  # older name
    ).fetchall()
    for row in unqueued:
        out.append(
            Problem(
                "pending_unqueued",
                row["path"],
                f"leaf {row['id']} waits for extraction but no job is queued",
                True,
            )
        )
    dead = queue.dead_leases()
    for job in dead:
        out.append(
            Problem(
                "dead_lease",
                _job_path(conn, job),
                f"job {job.id} ({job.kind} {_payload(job)}) is leased by {job.lease_owner}, which is gone",
                True,
            )
        )
    if fix:
        with atomic(conn):
            for job in parked:
                queue.retry(job.id)
            queue.enqueue_many(admit_job(row["id"]) for row in unqueued)
            for owner in sorted({str(job.lease_owner) for job in dead}):
                queue.release_owner(owner)
    return out


def _payload(job: Job) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(job.payload.items()))


def _job_path(conn: sqlite3.Connection, job: Job) -> str:
    """Where a job's work is: its node's file when it names one, else the queue itself."""
    node_id = job.payload.get("id")
    if isinstance(node_id, str):
        row = conn.execute("SELECT path FROM chunks WHERE id = ?", (node_id,)).fetchone()
        if row is not None:
            return str(row["path"])
    source = job.payload.get("source")
    if isinstance(source, str):
        return f"{SOURCES}/{source}"
    return f"{STATE_DIR}/{DB_NAME} (jobs)"


def _secrets(
    layout: Layout, entries: tuple[ScanEntry, ...], max_bytes: int, *, rewrite: bool
) -> list[tuple[Problem, bool]]:
    """A ``secret_in_file`` problem for every Markdown file holding a secret, and whether it was
    rewritten redacted (``rewrite``: only when the file is still what was read)."""
    out: list[tuple[Problem, bool]] = []
    for entry in entries:
        path = layout.abs(entry.rel)
        try:
            text, digest = fsio.read_text_guarded(path, max_bytes)
            clean, kinds = redact_document(text, where=entry.rel)
        except (OSError, VaultError):
            continue  # unreadable or invalid files are reported as such below
        if not kinds:
            continue
        what = ", ".join(kinds)
        if rewrite:
            try:
                fsio.atomic_write(path, clean.encode("utf-8"), root=layout.root, expected=digest)
            except ConflictError:
                pass  # changed since it was read: reported, rewritten next time
            else:
                out.append(
                    (
                        Problem("secret_in_file", entry.rel, f"secret ({what}) replaced in the file", True),
                        True,
                    )
                )
                continue
        message = (
            f"holds a secret ({what}); it is redacted in the index and everything derived, and git leaves "
            "the file uncommitted; `vaultmem check --fix --redact` rewrites it with the secret replaced"
        )
        out.append((Problem("secret_in_file", entry.rel, message, False), False))
    return out


def _graph_problem(
    conn: sqlite3.Connection, layout: Layout, model: str, dim: int, *, fix: bool
) -> Problem | None:
    """The vectors' matrix file without a usable graph of its own (``ann``); ``fix`` builds it."""
    files = vectors.MatrixFile.of(layout.state, model)
    found = vectors.read_matrix(conn, files, model, dim)
    if found is None:
        return None
    ids, _, seq = found
    key = ann.matrix_key(model, dim, vectors.epoch(conn) or "", seq, ids)
    if not ann.graph_behind(files.graph, key) and ann.open_graph(files.graph, key) is not None:
        return None
    if key["count"] < ann.GRAPH_MIN or not ann.available():
        return None
    problem = Problem(
        "vector_graph_behind",
        layout.rel(files.graph.data),
        "the vectors' HNSW graph is missing, of an earlier matrix or damaged; search runs without it",
        True,
    )
    if fix:
        if files.graph.header.exists():  # a damaged graph with a current header is rebuilt
            fsio.remove_file(layout.root, files.graph.header)
        if not vectors.write_graph(conn, layout.root, files, model, dim):
            return replace(problem, fixable=False, message=problem.message + " (it could not be built)")
    return problem


def _leaf_file_problem(conn: sqlite3.Connection, layout: Layout, *, fix: bool) -> Problem | None:
    """The leaf file (``graph``: ``.vaultmem/leafgraph.npz``) whose header names this index but whose
    data does not hold what the header says: every new process then builds the leaf graph and the
    session order instead of reading them, until the log moves ``graph.FILE_BEHIND`` changes past the
    header. ``fix`` writes it again from the index. A missing file, or one of another index, is not a
    problem (the next ``save_vectors`` from ``graph.FILE_MIN_LEAVES`` leaves writes it)."""
    current = vectors.epoch(conn)
    if current is None or graph.file_seen(layout.state, current) is None:
        return None
    if graph.load(layout.state, current) is not None:
        return None
    problem = Problem(
        "leaf_file_damaged",
        layout.rel(graph.file_paths(layout.state)[0]),
        "the leaf graph file disagrees with its header (torn or damaged); every new process builds the "
        "leaf graph and session order instead of reading them",
        True,
    )
    if fix and not graph.rebuild_file(conn, layout.root, layout.state, current):
        return replace(problem, fixable=False, message=problem.message + " (it could not be written)")
    return problem


def _dangling_links(conn: sqlite3.Connection, layout: Layout, max_bytes: int, *, fix: bool) -> list[Problem]:
    """Wikilinks of topic and digest nodes name leaves by file name; each must still be a leaf. A node
    whose rewrite is already queued is not a problem; ``fix`` queues the rewrite."""
    out: list[Problem] = []
    jobs: list[NewJob] = []
    for row in conn.execute(
        "SELECT path FROM chunks WHERE kind = 'summary' AND (path LIKE 'topics/%' OR path LIKE 'global/%')"
    ):
        try:
            text = fsio.read_text_guarded(layout.abs(row["path"]), max_bytes)[0]
            node, _doc = parse_summary(text, row["path"])
        except (OSError, UnicodeDecodeError, VaultError):
            continue  # unreadable files are reported by the row checks above
        job = _repair_job(node.entity, row["path"])
        queued = (
            job is not None
            and conn.execute("SELECT 1 FROM jobs WHERE dedupe_key = ?", (job.dedupe_key,)).fetchone()
        )
        if queued:
            continue  # the job that re-routes the topic or re-digests the day is already queued
        ids = [i for i in (c.linked_id for c in node.children) if i]
        known = index.existing_ids(conn, ids)
        gone = [i for i in ids if i not in known]
        if gone:
            what = "re-route its topic" if node.entity else "re-digest its day"
            message = f"links {len(gone)} leaves that are gone ({what})"
            out.append(Problem("dangling_link", row["path"], message, job is not None))
            if job is not None:
                jobs.append(job)
    if fix and jobs:
        JobQueue(conn).enqueue_many(jobs)
    return out


def _unresolved_links(conn: sqlite3.Connection, layout: Layout, max_bytes: int) -> list[Problem]:
    """Links the engine wrote in a summary's ``## Children`` that Obsidian cannot follow (``linkcheck``): a file that is not there, or a heading or block of a note that is not there
    (a note edited since it was read: reading it again writes the links again)."""
    files: linkcheck.VaultFiles | None = None
    out: list[Problem] = []
    for row in conn.execute("SELECT path FROM chunks WHERE kind = 'summary' ORDER BY path"):
        try:
            node, _doc = parse_summary(
                fsio.read_text_guarded(layout.abs(row["path"]), max_bytes)[0], row["path"]
            )
        except (OSError, UnicodeDecodeError, VaultError):
            continue  # unreadable files are reported by the row checks
        if node.stale or not node.children:
            continue  # a stale level's lists lag until it is re-summarised (``stale_unqueued`` if its job is missing)
        files = files or linkcheck.VaultFiles(layout)
        # A topic's or digest's link to a leaf by file name is ``_dangling_links``' to report (and fix); a
        # note's node links its sections as they were when it was read (``document_out_of_step`` tells
        # when the note has changed since).
        # ``## Related`` follows the levels after each compaction pass (a ``git revert`` may leave it
        # behind until the next): not a problem of the level.
        bad = linkcheck.unresolved_children(files, node, skip=_left_to_others(bool(node.note)), related=False)
        if bad:
            more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
            out.append(
                Problem("unresolved_link", row["path"], f"links {bad[0]}{more}, which lands nowhere", False)
            )
    return out


def _left_to_others(own_note: bool) -> Callable[[ChildLink], bool]:
    def skip(c: ChildLink) -> bool:
        return bool(c.leaf and own_note) or (c.wiki and not c.leaf and bool(c.linked_id))

    return skip


def _forgotten(layout: Layout) -> set[str]:
    """Ids of forgotten leaves (their tombstones): a version link to one is not dangling."""
    base = layout.root / TOMBSTONES
    return {p.name for p in base.iterdir() if p.is_dir()} if base.is_dir() else set()


def _proposal_problems(layout: Layout) -> list[Problem]:
    """Files of the review inbox that cannot be read."""
    return [Problem("invalid_proposal", rel, why, False) for rel, why in review.inbox(layout)[1]]


def _dangling_versions(conn: sqlite3.Connection, on_disk: set[str]) -> list[Problem]:
    """A ``supersedes`` / ``superseded_by`` naming a leaf the vault does not hold (a typo, a leaf
    deleted; a forgotten leaf is not dangling): the link is ignored by search until a person corrects
    it or the leaf comes back."""
    out = []
    for row in conn.execute(
        "SELECT c.path, c.id, j.value AS other FROM chunks c, json_each(c.supersedes) j WHERE c.supersedes <> '[]'"
        " UNION ALL SELECT c.path, c.id, j.value FROM chunks c, json_each(c.superseded_by) j"
        " WHERE c.superseded_by <> '[]'"
    ):
        if row["other"] not in on_disk:
            message = f"{row['id']} names {row['other']} as a version of it, and no leaf has that id"
            out.append(Problem("dangling_version", row["path"], message, False))
    return out


def _sidecar_problems(
    conn: sqlite3.Connection, layout: Layout, model: str, dim: int, *, fix: bool
) -> list[Problem]:
    """Sidecars that cannot be read (another model's is not a problem: the vault re-embeds for its own).
    ``fix`` rewrites one from the index's vectors and queues the leaves that have none to be embedded."""
    out: list[Problem] = []
    found = (p for top in RESERVED_TOP for p in (layout.root / top).glob(f"**/{SIDECAR_NAME}"))
    for path in sorted(found):
        rel_dir = layout.rel(path.parent)
        current = sidecar.read(path.parent, model, dim)
        if current.problem is None or not current.problem.startswith("corrupt"):
            continue
        out.append(
            Problem("bad_sidecar", layout.rel(path), f"{current.problem}; its vectors are rebuilt", True)
        )
        if fix:
            rows = conn.execute(
                "SELECT c.id, c.path, v.content_hash, v.vec FROM chunks c"
                " LEFT JOIN vectors v ON v.id = c.id AND v.model = ? AND v.content_hash = c.content_hash"
                " WHERE c.path >= ? AND c.path < ?",
                (model, *index.prefix_range(f"{rel_dir}/")),
            ).fetchall()
            mine = [r for r in rows if "/" not in r["path"][len(rel_dir) + 1 :]]
            put = {
                PurePosixPath(r["path"]).name: sidecar.Entry.of(
                    r["content_hash"], np.frombuffer(r["vec"], dtype="<f4").astype(np.float32)
                )
                for r in mine
                if r["vec"] is not None
            }
            sidecar.update(layout, path.parent, model, dim, put)
            JobQueue(conn).enqueue_many(admit_job(r["id"]) for r in mine if r["vec"] is None)
    return out


def _repair_job(entity: str | None, rel: str) -> NewJob | None:
    """The job that rewrites a topic or digest node from the index (None for a week or a month)."""
    if entity:
        return topic_route_job(entity)
    try:
        return digest_job(date.fromisoformat(rel.split("/")[-2]))  # global/<month>/<week>/<day>/_summary.md
    except ValueError:
        return None


def _differs(row: dict[str, object], expected: dict[str, object]) -> bool:
    for key, value in expected.items():
        if key == "file_mtime_ns":
            continue  # a touch without a change is not a difference
        if row[key] != value:
            return True
    return False


_FTS_TABLES = ("fts_words", "fts_trigram", "fts_nav_words", "fts_nav_trigram")


def _fts_problem(conn: sqlite3.Connection) -> Problem | None:
    try:
        for table in _FTS_TABLES:
            conn.execute(f"INSERT INTO {table}({table}) VALUES('integrity-check')")
    except sqlite3.DatabaseError as exc:
        # FTS5 runs its integrity check as a write statement: an index opened read-only (a read-only
        # vault) cannot run it, and is then checked by the row counts below only.
        if "readonly" not in str(exc):
            return Problem("fts_mismatch", ".vaultmem/chunks.db", f"FTS index corrupt: {exc}", True)
    nav = NAV.format(row="c")
    for table in _FTS_TABLES:
        # Topic and digest rows live in the fts_nav_* tables, every other row in the others.
        belongs = nav if table.startswith("fts_nav") else f"NOT {nav}"
        if table.endswith("trigram"):  # only texts with CJK characters are trigram-indexed
            belongs += f" AND {HAS_CJK.format(text='c.text')}"
        missing = conn.execute(
            f"SELECT count(*) FROM chunks c WHERE {belongs} AND rowid NOT IN (SELECT rowid FROM {table})"
        ).fetchone()[0]
        extra = conn.execute(
            f"SELECT count(*) FROM {table} WHERE rowid NOT IN (SELECT rowid FROM chunks c WHERE {belongs})"
        ).fetchone()[0]
        if missing or extra:
            return Problem(
                "fts_mismatch", ".vaultmem/chunks.db", f"{table}: {missing} rows missing, {extra} extra", True
            )
    return None


def rebuild_fts(conn: sqlite3.Connection) -> None:
    for table in _FTS_TABLES:
        conn.execute(f"DELETE FROM {table}")
    nav = NAV.format(row="c")
    conn.execute(
        "INSERT INTO fts_words(rowid, body) SELECT rowid, coalesce(speaker || ': ', '') || text FROM chunks c"
        f" WHERE NOT {nav}"
    )
    cjk = HAS_CJK.format(text="c.text")
    conn.execute(
        f"INSERT INTO fts_trigram(rowid, body) SELECT rowid, text FROM chunks c WHERE NOT {nav} AND {cjk}"
    )
    conn.execute(f"INSERT INTO fts_nav_words(rowid, body) SELECT rowid, text FROM chunks c WHERE {nav}")
    conn.execute(
        f"INSERT INTO fts_nav_trigram(rowid, body) SELECT rowid, text FROM chunks c WHERE {nav} AND {cjk}"
    )
