"""The Python API: ``Vault.init`` / ``Vault.open`` and the operations on an open vault.

A thin facade and the library's composition root: it reads the vault's config, opens chunks.db, heals
interrupted batches, and hands explicit values to the modules that do the work. It never prints.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

# Only what opening a vault and searching it need is imported here: `vaultmem search` from a cold shell
# must not pay for ingest, compaction, topic planning or git (bench/startup.py; tests/test_cli.py checks
# the list). The rest is imported where it is used; ``topics`` imports each of its modules on first use.
from vaultmem import agentio, db, decay, entities, frontmatter, fsio, index, topics, vectors, versions
from vaultmem.config import DEFAULT_TEXT, Config, load_config
from vaultmem.context import MODES, Context, gather
from vaultmem.embed import Embedder, Remembering, load_embedder
from vaultmem.errors import (
    ConflictError,
    DiskFull,
    FrontmatterError,
    GitBusy,
    InvalidInput,
    NodeNotFound,
    ReadOnlyVault,
    VaultError,
    VaultExists,
    VaultNotFound,
)
from vaultmem.jobs import (
    JobQueue,
    admit_job,
    ingest_job,
    release_dead,
    resummarise_job,
    schedule_session_notes,
    seal_job,
)
from vaultmem.layout import AGENT_TOPS, FRESH, RESERVED_TOP, SOURCES, Layout
from vaultmem.lock import WriteLock
from vaultmem.model import (
    InputKind,
    Leaf,
    Message,
    Status,
    check_node_id,
    default_source_name,
    format_ts,
    parse_ts,
    safe_name,
)
from vaultmem.opening import Damaged, open_index, set_aside
from vaultmem.redact import scrub
from vaultmem.search import Filters, Hit, Searcher, window_ranked
from vaultmem.summaryfile import SummaryNode
from vaultmem.tokens import count_tokens

if TYPE_CHECKING:
    from vaultmem import detect, navigate, purge, review
    from vaultmem.admit import EntityFinder
    from vaultmem.agentllm import ChatModel
    from vaultmem.autocommit import AutoCommit
    from vaultmem.check import CheckReport
    from vaultmem.compact import CompactSettings
    from vaultmem.coremem import CoreBlock, CoreFileView, CoreUpdate, MemoryEnv, MemorySettings, Onboarding
    from vaultmem.docmem import Plan
    from vaultmem.docsync import Document, Syncer
    from vaultmem.episodes import Episode
    from vaultmem.forget import Tombstone
    from vaultmem.gitsync import CommitInfo, GitOperation
    from vaultmem.ingest import IngestReport, Progress
    from vaultmem.llm import Endpoint
    from vaultmem.memindex import MemoryHit
    from vaultmem.memtiers import EpisodeRecord
    from vaultmem.pool import JobEnv, PoolReport, WorkReport
    from vaultmem.recipes import Recipe, RecipeMatch
    from vaultmem.reconcile import PathsReport, Stamp
    from vaultmem.reindex import ReindexReport
    from vaultmem.scoring import FastScorer
    from vaultmem.sessionnote import SessionNote
    from vaultmem.sessions import SessionTree
    from vaultmem.stats import Stats
    from vaultmem.summarise import Summariser

BATCH_MESSAGES = 2000
# The first batch is built before any file is written (nothing to overlap it with); a smaller first batch
# would let the forked writer start sooner, but 250 measured no faster on a quiet machine (bench/hotpath.py,
# three runs: ingest medians 0.93x, and 1.20x / 1.13x without it: an extra batch's fork, syncfs and commit).
FIRST_BATCH_MESSAGES = BATCH_MESSAGES
DEFAULT_CONTEXT_MODE = "walk"  # measured against "flat" and "collapsed": bench/retrieval.py --modes


class Vault:
    """An open vault. Use ``Vault.init(path)`` or ``Vault.open(path)``; close it (or use ``with``)."""

    def __init__(
        self, layout: Layout, config: Config, conn: sqlite3.Connection, embedder: Embedder | None = None
    ) -> None:
        self.layout = layout
        self.config = config
        self.conn = conn
        self._embedder = embedder
        self._searcher: Searcher | None = None
        self._graph_lock = threading.Lock()  # the background build of the HNSW graph (``save_vectors``)
        self._graph_thread: threading.Thread | None = None
        self._graph_last: threading.Thread | None = None  # joined by ``wait_for_graph`` and ``close``
        self._graph_next: vectors.GraphJob | None = None
        self._write_lock = WriteLock(layout, self._git_error)
        self._summariser: Summariser | None = None
        self._remembering: Remembering | None = None
        self._finder: EntityFinder | None = None
        # Related links as last written (related.Known): a pass reads only files whose links may move.
        self._related_known: dict[str, Any] = {}
        self.warnings: list[str] = []  # things that did not stop an operation (a failed git commit)
        # Git auto-commit (``autocommit``), only when [git] auto_commit is on: opening a vault to search
        # it imports no git code.
        self._autocommit: AutoCommit | None = None
        if config.git_auto_commit:
            from vaultmem.autocommit import AutoCommit

            self._autocommit = AutoCommit(layout.root, self._locked, self.warnings)
        self.read_only: str | None = None  # why writes are off (a read-only vault); None when they are on
        # After a search, let the embedder open its faster query runtime in the background (``_searched``):
        # this process will likely search again. A one-shot command (the CLI's) sets it False.
        self.warm_queries = True
        # "Now" for the agent memory tiers (entry tags, idle sessions, episode times); tests inject one.
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self._chat_model: ChatModel | None = None
        self._chat_model_built = False
        # One cap on [llm] calls in flight for the whole vault ("across all workers"): the summariser, the
        # entity extractor and the memory tiers' model share it.
        self._llm_slots = threading.Semaphore(config.llm_max_concurrent)

    def _llm_endpoint(self) -> Endpoint | None:
        """The ``[llm]`` endpoint's client settings (``llm.ChatClient``'s arguments), or None when none
        is configured."""
        c = self.config
        if not (c.llm_base_url and c.llm_model):
            return None
        return {
            "base_url": c.llm_base_url,
            "model": c.llm_model,
            "api_key": os.environ.get(c.llm_api_key_env) or None,
            "timeout_s": c.llm_timeout_s,
            "semaphore": self._llm_slots,
        }

    # Settings and helpers of work a search never does: built on first use, so that opening a vault to
    # read it imports neither the scorer, the compactor nor the topic planner (each may be replaced).
    @functools.cached_property
    def scorer(self) -> FastScorer:
        from vaultmem.scoring import FastScorer

        return FastScorer(threshold=self.config.score_threshold)

    @functools.cached_property
    def compact_settings(self) -> CompactSettings:
        from vaultmem.compact import CompactSettings

        return CompactSettings(**self.config.compact_values())

    @functools.cached_property
    def topic_settings(self) -> topics.plan.TopicSettings:
        return topics.plan.settings_from(self.config.topic_values())

    # -- lifecycle ---------------------------------------------------------------------------------
    @classmethod
    def init(
        cls, path: str | Path, config_text: str | None = None, *, embedder: Embedder | None = None
    ) -> Vault:
        """Create a new vault at ``path`` (the directory may exist and hold other files)."""
        layout = Layout(Path(path).expanduser().absolute())
        if layout.is_vault():
            raise VaultExists(f"{layout.root} is already a vault; open it instead")
        if layout.root.exists() and not layout.root.is_dir():
            raise InvalidInput(f"{layout.root} exists and is not a directory")
        try:
            layout.root.mkdir(parents=True, exist_ok=True)
            fsio.make_dirs(layout.root, layout.state)
            for name in RESERVED_TOP:
                fsio.make_dirs(layout.root, layout.root / name)
            config = (config_text or DEFAULT_TEXT).encode("utf-8")
            fsio.atomic_write(layout.config, config, root=layout.root, expected=None)
            # Only the config is worth versioning; the index is rebuilt from the files.
            fsio.atomic_write(
                layout.state / ".gitignore", b"*\n!.gitignore\n!config.toml\n", root=layout.root
            )
        except PermissionError as exc:
            raise ReadOnlyVault(f"cannot create a vault at {layout.root}: {exc.strerror}") from exc
        vault = cls.open(layout.root, embedder=embedder)
        from vaultmem import admit

        admit.mark_rules_read(vault.conn)  # every leaf of a new vault is read by these rules
        return vault

    @classmethod
    def open(cls, path: str | Path, *, embedder: Embedder | None = None) -> Vault:
        """Open a vault. ``embedder`` overrides the configured model (tests pass a fake one)."""
        layout = Layout(Path(path).expanduser().absolute())
        if not layout.is_vault():
            raise VaultNotFound(f"no vault at {layout.root}; create one with `vaultmem init {layout.root}`")
        config = load_config(layout.config)
        fsio.ensure_inside(layout.root, layout.db)  # SQLite writes there (and beside it): never elsewhere
        new_index = not layout.db.exists()
        opened = open_index(layout)
        read_only, damaged = opened.read_only, opened.damaged
        vault = cls(layout, config, opened.conn, embedder)
        if read_only is not None:
            vault.read_only = read_only
            vault.warnings.append(
                f"{layout.root} is read-only: reading and searching work, writes are off ({read_only})"
            )
            return vault  # nothing is healed or rebuilt: that is writing
        # Rebuilding the index writes nothing but the index, and reading needs it: even during a git
        # operation (the daemon, or the next `compact`, catches up once it is over).
        if damaged is not None:
            with vault._locked(git_guard=False):
                vault._rebuilt(damaged)
        elif new_index and any((layout.root / SOURCES).glob("*/")):
            # A cloned or copied vault arrives without its index: rebuild it from the files.
            with vault._locked(git_guard=False):
                vault._reindex()
        try:
            vault._heal()
        except DiskFull as exc:  # reading still works; `check` lists what waits to be finished
            vault.warnings.append(f"could not finish interrupted work: {exc}; free space")
        except GitBusy as exc:  # reading goes on; the repairs wait for the next write after it
            vault.warnings.append(f"repairs put off: {exc}")
        return vault

    def _heal(self) -> None:
        """Finish what a crash interrupted: ingest batches and status rewrites, compaction steps, the
        temp files of a writer that died, and jobs leased by a process that is gone."""
        from vaultmem import daemonstate

        layout = self.layout
        if self._write_lock.held_elsewhere():
            # A live writer (a compaction, a big import): its notes and its mark are its own, not a dead
            # writer's, and waiting for it would hold a reader up to the lock's timeout, then fail. What
            # a dead writer left is finished by the next open that finds the lock free.
            release_dead(self.conn)
            return
        # The healers are imported only when there is something to heal: opening a vault to search it
        # must not import ingest and compaction (bench/startup.py).
        if layout.intent.is_dir() and any(layout.intent.iterdir()):
            from vaultmem.ingest import heal_intents

            with self._locked():
                heal_intents(self.conn, layout, self.config.max_file_bytes)
        if layout.treeops.is_dir() and any(layout.treeops.iterdir()):
            from vaultmem import steps

            if steps.pending_notes(layout):
                self.heal_compaction()
        if layout.restoring.is_dir() and any(layout.restoring.iterdir()):
            self._finish_restores()
        if layout.notes_pending.is_dir() and any(layout.notes_pending.iterdir()):
            self._finish_notes()
        if layout.writing.exists():
            with self._locked():
                pass  # a writer died holding the lock: taking it tidies what it left
        daemonstate.remove_stale_temps(layout)  # a daemon killed while it wrote its status
        release_dead(self.conn)
        self._notes_in_place()

    def _notes_in_place(self) -> None:
        """Once per index: notes an older vaultmem mirrored into ``sources/`` (a leaf file per section)
        are indexed where they are instead. Each mirror's files go to ``.trash/vaultmem/`` (or git's
        history) and its rows take the path ``<note>#<leaf id>`` with the same ids, status and entities
        (``docsync``)."""
        if self.conn.execute("SELECT 1 FROM meta WHERE key = 'notes_in_place'").fetchone() is not None:
            return
        mirrored = [
            str(note)
            for (note,) in self.conn.execute(
                "SELECT DISTINCT json_extract(provenance, '$.note') AS note FROM chunks"
                " WHERE kind = 'leaf' AND input = 'doc' AND path >= 'sources/' AND path < 'sources0'"
                " AND note IS NOT NULL"
            )
        ]
        if mirrored:
            present = [n for n in mirrored if self.layout.abs(n).exists()]
            kept = set(present)  # once: a set built per note made this quadratic
            self.read_notes(present, gone=[n for n in mirrored if n not in kept])
        with db.atomic(self.conn):
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('notes_in_place', '1')")

    def _finish_notes(self) -> None:
        """Read again the notes whose section rows a crash cut off after their document's files were
        written (``docsync.notes_cut_off``), then drop the markers."""
        from vaultmem.docsync import notes_cut_off

        markers, notes = notes_cut_off(self.layout)
        present = [note for note in notes if self.layout.abs(note).is_file()]
        with self._locked():
            self.read_notes(present, gone=[note for note in notes if note not in present])
            for marker in markers:
                fsio.remove_file(self.layout.root, marker)

    def _finish_restores(self) -> None:
        """Finish the restores a crash interrupted (``forget.begin_restore``'s notes): the files already
        back (leaves, derived files) are read into their rows and vectors, the tombstone of a leaf back
        in place goes; a leaf never written stays forgotten."""
        from vaultmem.admit import reload_vectors
        from vaultmem.forget import end_restore, finish_restore, pending_restores

        for note, leaves, derived in pending_restores(self.layout):
            back = [rel for leaf_id, rel in leaves.items() if finish_restore(self.layout, leaf_id, rel)]
            with self.operation(f"memory: restore {', '.join(leaves) or '?'} (finished after a crash)"):
                rels = [*back, *(r for r in derived if self.layout.abs(r).exists())]
                if rels:  # derived files put back before a leaf was: their rows follow them too
                    self.reconcile_paths(rels, by_hand=False)
                    reload_vectors(self.conn, self.layout, rels, self.embedder.model_id, self.embedder.dim)
                end_restore(self.layout, note)

    def heal_compaction(self) -> list[str]:
        """Finish compaction steps a crash interrupted (runs on open; idempotent)."""
        from vaultmem import steps

        with self._locked():
            return steps.heal_recorded(
                self.conn, self.layout, self.embedder, self._commit, "finished after a crash"
            )

    def close(self) -> None:
        """Close the vault: a background build of the HNSW graph is finished first (joined, so the
        process is left with no thread of the vault's), then git auto-commit, the embedder's worker
        processes and the index connection are closed."""
        self.wait_for_graph()
        if self._autocommit is not None:
            self._autocommit.close()
        owned = self.__dict__.pop("_owned_embedder", None)
        if owned is not None and hasattr(owned, "close"):
            owned.close()
        self.conn.close()

    def __enter__(self) -> Vault:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _locked(self, *, git_guard: bool = True) -> AbstractContextManager[None]:
        """Hold the vault's write lock (``lock.WriteLock``: re-entrant, fair between threads). While a
        git operation is under way in the vault's repository (see ``gitsync``) the outermost acquisition
        raises ``GitBusy``: nothing writes into a half-restored tree."""
        self._writable()
        return self._write_lock.hold(git_guard=git_guard)

    def _git_error(self) -> GitBusy | None:
        operation = self.git_operation()
        return operation.error(self.layout.root) if operation is not None else None

    def repo_stamp(self) -> tuple[object, ...] | None:
        """Changes whenever a git command moves HEAD or rewrites the index of the vault's repository."""
        from vaultmem import gitsync

        return gitsync.repo_stamp(self.layout.root)

    def git_operation(self) -> GitOperation | None:
        """The git operation under way in the repository holding the vault (a revert or merge stopped on a
        conflict, a rebase, a cherry-pick, a bisect, a detached HEAD, a live ``index.lock``), or None.
        Every write pauses while there is one, whether or not git auto-commit is on: the tree is half
        restored, and engine writes would make ``--continue``/``--abort`` fail."""
        from vaultmem import gitsync

        return gitsync.operation_in_progress(self.layout.root)

    def _writable(self) -> None:
        """Raise ``ReadOnlyVault`` (one line saying what still works) when writes are off."""
        if self.read_only is not None:
            raise ReadOnlyVault(
                f"{self.layout.root} is read-only, so this cannot run (it writes); reading, searching and"
                " `check` work. Make the vault writable to ingest, compact or repair"
            )

    # -- ingest ------------------------------------------------------------------------------------
    def ingest_messages(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        source: str | None = None,
        session: str | None = None,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest chat messages: ``Message`` values or mappings ``{id, role|speaker, content, ts, session}``.

        Mappings need a ``source`` (argument or per record). Returns what was added, deduplicated,
        dropped and redacted.
        """
        from vaultmem.inputs.chat import messages_from_records

        items = list(messages)
        canonical: list[Message] = []
        records: list[Mapping[str, Any]] = []
        for item in items:
            if isinstance(item, Message):
                canonical.append(item)
            else:
                records.append(item)
        if records:
            canonical.extend(messages_from_records(records, source=source or "", session=session))
        return self._ingest(canonical, progress)

    def ingest_path(
        self,
        path: str | Path,
        *,
        source: str | None = None,
        progress: Progress | None = None,
        fmt: str | None = None,
        all_branches: bool = False,
    ) -> IngestReport:
        """Ingest a file, a directory or a ZIP archive: chat JSON/JSONL, Markdown/text, .eml, mbox, and
        exports (ChatGPT, Claude, Claude Code, Codex, WhatsApp, Telegram, Slack, Discord) recognised by
        their content. ``fmt`` forces a format (``vaultmem.inputs.sniff.FORMAT_NAMES``);
        ``all_branches`` keeps ChatGPT's edited and regenerated branches. Re-importing an export adds
        only the turns the vault does not hold yet."""
        from vaultmem.inputs import read_path

        if source is not None:
            safe_name(source)
        result = read_path(
            Path(path),
            source=source,
            max_bytes=self.config.max_file_bytes,
            fmt=fmt,
            all_branches=all_branches,
            max_export_bytes=self.config.max_export_bytes,
        )
        # A folder is the whole of its source's documents: a page gone from it leaves the vault.
        report = self._ingest(result.messages, progress, complete=Path(path).is_dir())
        return replace(report, skipped=tuple(result.skipped))

    def _ingest(
        self, messages: list[Message], progress: Progress | None, *, complete: bool = False
    ) -> IngestReport:
        from vaultmem.ingest import IngestReport

        docs = [m for m in messages if m.kind is InputKind.DOC and m.session]
        rest = [m for m in messages if not (m.kind is InputKind.DOC and m.session)]
        with self.commit_batch():
            report = self._ingest_batches(rest, progress) if rest or not docs else IngestReport()
            if docs:
                report = report.merge(self._sync_documents(docs, complete=complete))
            return report

    def _sync_documents(
        self, messages: list[Message], *, complete: bool = False, gone: Iterable[tuple[str, str]] = ()
    ) -> IngestReport:
        """Documents into their subtrees, updated in place (``docsync``). ``complete``: the messages hold
        every document of their sources, so a document of theirs not among them is removed. ``gone``:
        (source, document) pairs whose files were deleted."""
        from vaultmem import digest, docsync
        from vaultmem.ingest import IngestReport, check_new_sources, redact_message

        cleaned = [redact_message(m) for m in messages]
        redacted = sum(1 for _m, kinds in cleaned if kinds)
        docs, _rest = docsync.split_documents(m for m, _kinds in cleaned)
        gone_by: dict[str, list[str]] = {}
        for source, name in gone:
            gone_by.setdefault(source, []).append(name)
        sources = sorted({d.source for d in docs} | set(gone_by))
        check_new_sources(self.layout, {d.source for d in docs})
        report = IngestReport(messages=len(messages), redacted=redacted)
        embedder = self.embedder
        markers = self._notes_moved_across(docs, gone_by, embedder)
        for source in sources:
            mine = [d for d in docs if d.source == source]
            with self._locked():
                syncer = self._syncer(source, embedder)
                names = {d.name for d in mine}
                vanished = list(gone_by.get(source, []))
                if complete:
                    vanished += [n for n in syncer.nodes if not n.endswith("/") and n not in names]
                done = syncer.sync(mine, gone=vanished)
                self.warnings.extend(done.warnings)
                if done.removed or done.deleted_documents:
                    digest.enqueue_out_of_date(self.conn, time.time())
                    topics.route.enqueue_out_of_date(self.conn)
                if done.documents or done.deleted_documents:
                    self._commit(
                        f"memory: {done.documents} documents updated, {len(done.deleted_documents)} removed"
                        f" ({source}): {len(done.added)} sections added, {len(done.updated)} replaced,"
                        f" {len(done.removed)} removed"
                    )
            report = report.merge(
                IngestReport(
                    added=tuple(done.added),
                    duplicates=done.unchanged,
                    sources=(source,),
                    updated=tuple(done.updated),
                    removed=tuple(done.removed),
                )
            )
        for marker in markers:
            fsio.remove_file(self.layout.root, marker)
        return report

    def _notes_moved_across(
        self, docs: list[Document], gone_by: dict[str, list[str]], embedder: Embedder
    ) -> list[Path]:
        """Notes moved to another top folder (another source): each takes over the document of the note
        that vanished from the other one (``Syncer.adopt``), keeping its node's and sections' ids; that
        name leaves ``gone_by``. Returns the markers naming the moved notes (``docsync.notes_cut_off``),
        removed once their sections are read: a crash before that reads them again on open."""
        fresh = [d for d in docs if d.note]
        if not fresh or not any(gone_by.values()):
            return []
        markers: list[Path] = []
        with self._locked():
            syncers: dict[str, Syncer] = {}

            def syncer(source: str) -> Syncer:
                if source not in syncers:
                    syncers[source] = self._syncer(source, embedder)
                return syncers[source]

            for doc in fresh:
                if doc.name in syncer(doc.source).nodes:
                    continue
                for source, names in gone_by.items():
                    if source == doc.source or not names:
                        continue
                    old = syncer(source).renamed_from(doc, names)
                    if old is None:
                        continue
                    marker = syncer(doc.source).mark_notes([doc.note])
                    if marker is not None:
                        markers.append(marker)
                    try:
                        syncer(doc.source).adopt(syncer(source), old, doc)
                    except (ConflictError, FrontmatterError) as exc:
                        # Its node changed meanwhile: the note is read as a new document, the old one leaves.
                        self.warnings.append(f"{doc.note}: not taken as the moved {old} ({exc})")
                        break
                    names.remove(old)
                    break
        return markers

    def _ingest_batches(self, messages: list[Message], progress: Progress | None) -> IngestReport:
        from vaultmem.ingest import IngestReport, build_leaves, check_new_sources, write_leaves
        from vaultmem.inputs.mailthread import thread_messages

        check_new_sources(self.layout, {m.source for m in messages})
        messages = thread_messages(messages, lambda source: index.known_emails(self.conn, source))
        report = IngestReport()
        total = len(messages)
        built: list[list[Leaf]] = []
        failed: list[BaseException] = []  # building the next batch failed: raised once this one is done

        def build(start: int, end: int) -> None:  # the leaves of messages[start:end], kept in ``built``
            batch = messages[start:end]
            try:
                leaves = build_leaves(
                    batch, self.layout, self.scorer, self.config.chunk_max_tokens, self.clock()
                )
            except BaseException as exc:  # raised after the batch being written
                failed.append(exc)
                return
            built.append(leaves)

        first = min(FIRST_BATCH_MESSAGES, BATCH_MESSAGES)
        starts = [0, *range(first, total, BATCH_MESSAGES)] if total else []
        ends = [*starts[1:], total]
        build(0, first)
        for start, end in zip(starts, ends, strict=True):
            if failed:
                raise failed[0]
            batch = messages[start:end]
            leaves = built.pop()
            after = end
            # The next batch's leaves are built while this one's files are written (``write_leaves``).
            meanwhile = (lambda a=after: build(a, a + BATCH_MESSAGES)) if after < total else None
            with self._locked():
                try:
                    # Sessions that got messages have their jobs queued in the batch's transaction.
                    added = write_leaves(self.conn, self.layout, leaves, meanwhile, self._sessions_touched)
                except DiskFull as exc:
                    kept = (
                        f"the {len(report.added)} new leaves of the {start} messages before were kept"
                        if start
                        else "nothing was added"
                    )
                    raise DiskFull(
                        f"disk full during ingest: {exc}; {kept}, messages {start + 1}-{total}"
                        " were not (a file of theirs already written is indexed on the next open); free"
                        " space, then run the same ingest again (what is already in is skipped)"
                    ) from exc
                added_set = set(added)  # once: a set built per leaf made a batch quadratic
                if added:
                    names = sorted({leaf.source for leaf in leaves if leaf.id in added_set})
                    self._commit(f"memory: add {len(added)} leaves from {', '.join(names)}")
            report = report.merge(
                IngestReport(
                    messages=len(batch),
                    added=tuple(added),
                    duplicates=len(leaves) - len(added),
                    dropped=sum(
                        1 for leaf in leaves if leaf.id in added_set and leaf.status is Status.DROPPED
                    ),
                    redacted=sum(1 for leaf in leaves if leaf.id in added_set and leaf.redactions),
                    sources=tuple(sorted({m.source for m in batch})),
                )
            )
            if progress is not None:
                progress(min(start + len(batch), total), total)
        return report

    # -- reading -----------------------------------------------------------------------------------
    def get(self, node_id: str) -> Leaf:
        """The leaf with this id, with its text and provenance (NodeNotFound if there is none)."""
        return index.get_leaf(self.conn, node_id)

    def ls(
        self,
        *,
        source: str | None = None,
        session: str | None = None,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[Leaf]:
        clauses = ["kind = 'leaf'"]
        params: list[Any] = []
        if source is not None:
            clauses.append("source = ?")
            params.append(source)
        if session is not None:
            clauses.append("session = ?")
            params.append(session)
        if status is not None:
            if status not in {s.value for s in Status}:
                raise InvalidInput(f"unknown status {status!r}; one of: {', '.join(s.value for s in Status)}")
            clauses.append("status = ?")
            params.append(status)
        sql = f"SELECT * FROM chunks WHERE {' AND '.join(clauses)} ORDER BY source, coalesce(ts, ''), path"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [index.row_to_leaf(row) for row in self.conn.execute(sql, params)]

    def summary(self, node_id: str) -> SummaryNode:
        """The summary (level) with this id, read from its ``_summary.md``."""
        from vaultmem.scan import read_summary_file

        check_node_id(node_id)
        row = self.conn.execute(
            "SELECT path FROM chunks WHERE id = ? AND kind = 'summary'", (node_id,)
        ).fetchone()
        if row is None:
            raise NodeNotFound(f"no summary with id {node_id}; `vaultmem show` lists the levels")
        return read_summary_file(self.layout, row["path"], self.config.max_file_bytes)[0]

    def global_digest(
        self,
        day: date | str | None = None,
        *,
        start: date | str | None = None,
        end: date | str | None = None,
        period: str = "day",
        write: bool = True,
    ) -> list[SummaryNode]:
        """What happened on ``day`` (a date, ``YYYY-MM-DD``, ``today`` or ``yesterday``; default today, UTC):
        its digest, or (``period`` ``week`` / ``month``) the week part or month holding it, written now if
        it is missing or behind its leaves; [] for a day nothing was remembered. ``write=False``: the same
        digest, built in memory when it is missing or behind (``digest.preview``) and never written, on
        a writable vault or a read-only one (a read tool). With ``start`` and/or ``end`` instead: the
        existing digests of ``period`` that cover a day in that range, in time order."""
        from vaultmem import digest, steps
        from vaultmem.scan import read_summary_file

        max_bytes = self.config.max_file_bytes
        if start is not None or end is not None:
            if day is not None:
                raise InvalidInput("ask for one day or for a range (start, end), not both")
            first, last = (digest.parse_day(d) if d is not None else None for d in (start, end))
            rels = digest.existing(self.conn, period, first, last)
            return [read_summary_file(self.layout, rel, max_bytes)[0] for rel in rels]
        when = digest.parse_day(day)
        rel = digest.node_path(when, period)
        if not write:
            found = digest.preview(
                self.conn, self.layout, self.summariser, self.embedder, when, period, max_bytes
            )
            return [found] if found is not None else []
        if self.read_only is not None:  # the digest as it was written, if it was
            try:
                return [read_summary_file(self.layout, rel, max_bytes)[0]]
            except FileNotFoundError:
                if not digest.day_leaves(self.conn, when):
                    return []
                raise ReadOnlyVault(
                    f"the digest of {when} was never written and {self.layout.root} is read-only"
                ) from None
        try:
            with self.commit_batch():
                if steps.pending_notes(self.layout):
                    self.heal_compaction()
                env = replace(self.job_env(), max_bytes=max_bytes, commit=self._commit)
                result = digest.refresh(env, self.conn, when, period)
        except GitBusy:
            # Reading goes on during a git operation: the digest as it is on disk, if there is one.
            if not self.layout.abs(rel).exists():
                raise
            result = None
        if result is not None and result.outcome != "done":
            raise ConflictError(f"the digest of {when} could not be written: {'; '.join(result.notes)}")
        try:
            return [read_summary_file(self.layout, rel, max_bytes)[0]]
        except FileNotFoundError:
            return []

    def level_titles(self) -> dict[str, dict[str, str]]:
        """source -> level directory (relative to the source folder) -> title."""
        out: dict[str, dict[str, str]] = {}
        for row in self.conn.execute(
            "SELECT source, path, provenance FROM chunks WHERE kind = 'summary' AND path >= ? AND path < ?",
            index.prefix_range(f"{SOURCES}/"),
        ):
            directory = row["path"].rsplit("/", 1)[0].split("/", 2)[2]
            out.setdefault(row["source"], {})[directory] = json.loads(row["provenance"]).get("title", "")
        return out

    def sources(self) -> list[str]:
        """The source trees (``global`` and topic summaries are not sources)."""
        # Each distinct source (from an index), kept when a node of it lives under sources/<it>/.
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT s.source FROM (SELECT DISTINCT source FROM chunks) s WHERE EXISTS (SELECT 1 FROM"
                " chunks c WHERE c.path >= ? || s.source || '/' AND c.path < ? || s.source || '0') ORDER BY s.source",
                (f"{SOURCES}/", f"{SOURCES}/"),
            )
        ]

    def stats(self, *, files: bool = True) -> Stats:
        """Counts from the index; with ``files``, the bytes in the vault's files and in the index
        (a walk over every file: ``files=False`` leaves them at -1 and stays cheap at any size)."""
        from vaultmem.stats import read_stats

        return read_stats(self.conn, self.layout, self.sources(), files=files)

    def tally(self) -> dict[str, int]:
        """Leaves, vectors and jobs still to run, read on a connection of its own: usable after an
        interrupt left this vault's connection in any state (the CLI says what a Ctrl-C kept)."""
        conn = db.connect(self.layout.db, readonly=True)
        try:
            leaves = conn.execute("SELECT count(*) FROM chunks WHERE kind = 'leaf'").fetchone()[0]
            vectors = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
            return {"leaves": leaves, "vectors": vectors, "queued": JobQueue(conn).pending()}
        finally:
            conn.close()

    def source_tree(self) -> dict[str, dict[str, list[Leaf]]]:
        """Leaves grouped by source, then by directory under the source (``_fresh`` or a sealed level)."""
        tree: dict[str, dict[str, list[Leaf]]] = {}
        for leaf in self.ls():
            parts = leaf.path.split("/")
            level = "/".join(parts[2:-1]) if parts[0] == SOURCES else "/".join(parts[:-1])
            tree.setdefault(leaf.source, {}).setdefault(level, []).append(leaf)
        return tree

    # -- embeddings and queued work -----------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """The configured embedding model, loaded on first use (commands that never embed never load it)."""
        if self._embedder is None:
            self._embedder = load_embedder(
                self.config.embed_model,
                backend=self.config.embed_backend,
                batch_size=self.config.embed_batch_size,
                cache_dir=model_cache_dir(),
            )
            self._owned_embedder = self._embedder  # its worker processes stop with the vault
        return self._embedder

    @property
    def remembering(self) -> Remembering:
        """The embedder as compaction asks it (``embed.Remembering``): each distinct text embedded once
        for every seal, condensation, re-summary and day digest of this vault. A day's digest summarises
        the sentences its source's levels were summarised from, a re-summary those of the level it
        rewrites: on one LoCoMo conversation they asked 7,313 texts, nearly all embedded already. Up to
        ``Remembering.size`` rows (about 25 MB), the least recently used going first; never the query
        path's nor ingest's embedder."""
        embedder = self.embedder
        if self._remembering is None or self._remembering.inner is not embedder:
            self._remembering = Remembering(embedder)
        return self._remembering

    def flush(self, progress: Callable[[int, int], None] | None = None) -> WorkReport:
        """Run queued work (embedding, admission) in this process until the queue is idle.

        Leaves without a vector of the configured model (new ones, or all of them after the model was
        changed) are queued first, so switching models re-embeds the vault instead of leaving search
        without meaning-based hits."""
        from vaultmem.pool import Pool

        with (
            self.commit_batch(),
            self._locked(),
            _on_full_disk("embedding", "the leaves admitted before it were kept", "the command"),
        ):
            model = self.embedder.model_id
            missing = [
                r[0]
                for r in self.conn.execute(
                    "SELECT id FROM chunks WHERE id NOT IN (SELECT id FROM vectors WHERE model = ?)",
                    (model,),
                )
            ]
            self.jobs.enqueue_many(admit_job(i) for i in missing)
            # The pool's own runner on this thread, admit jobs only (their follow-ups are queued as the
            # threads queue them, and left for `work`, `compact` or the daemon); one commit at the end.
            pool = Pool(replace(self.job_env(), commit=None), workers=1)
            report = pool.run_here(self.conn, progress=progress)
            if report.admitted:
                self._commit(f"memory: admit {report.admitted} leaves")
            self.save_vectors()
            return report

    # -- compaction ---------------------------------------------------------------------------------
    @property
    def summariser(self) -> Summariser:
        """The configured summariser: extractive, or an OpenAI-compatible endpoint falling back to it."""
        from vaultmem.llm import OpenAICompatSummariser
        from vaultmem.summarise import ExtractiveSummariser

        if self._summariser is None:
            # Sentence vectors for centrality and titles; the model loads only when a summary is written.
            extractive = ExtractiveSummariser(lambda texts: self.remembering.embed(texts))
            endpoint = self._llm_endpoint()
            self._summariser = (
                OpenAICompatSummariser(**endpoint, fallback=extractive)
                if endpoint is not None
                else extractive
            )
        return self._summariser

    @property
    def entity_finder(self) -> EntityFinder:
        """Rule-based entities, plus the [llm] endpoint's when ``topics.llm_entities`` is on."""
        from vaultmem.admit import find_entities
        from vaultmem.entities_llm import LLMEntityExtractor

        if self._finder is None:
            self._finder = find_entities
            endpoint = self._llm_endpoint()
            if self.config.topics_llm_entities and endpoint is not None:
                extractor = LLMEntityExtractor(**endpoint)
                self._finder = lambda leaf: tuple(
                    m.key for m in extractor.extract(leaf.text, speaker=leaf.speaker, ts=leaf.ts)
                )
        return self._finder

    def job_env(self) -> JobEnv:
        """What the job runner's handlers work with (``pool.JobEnv``), built from the config."""
        from vaultmem import memtiers
        from vaultmem.pool import JobEnv

        return JobEnv(
            layout=self.layout,
            settings=self.compact_settings,
            embedder=lambda: self.embedder,
            remembering=lambda: self.remembering,
            summariser=self.summariser,
            lock=self._locked,
            max_bytes=self.config.max_file_bytes,
            commit=self._commit if self._autocommit is not None else None,
            topics=self.topic_settings,
            finder=self.entity_finder,
            digest=self.config.digest_enabled,
            session_end=lambda conn, job: memtiers.run_session_job(self._memory(conn), job),
            ingest=self._ingest_job,
            updates=self._updates_job,
            related_known=self._related_known,
        )

    def work(self, progress: Callable[[int, int], None] | None = None) -> PoolReport:
        """Run every queued job (embedding, sealing, re-summarising) with the worker pool until idle."""
        from vaultmem.pool import Pool

        self._writable()
        with self.commit_batch():
            report = Pool(self.job_env(), self.compact_settings.workers).run_until_idle(progress)
        self.save_vectors()
        return report

    def save_vectors(self, *, force: bool = False) -> int:
        """Rewrite the vector matrix file (``.vaultmem/vectors-*.npy``) when it is missing or behind the
        index by ``vectors.MATRIX_STALE`` (``force``: always), so that a new process maps the vectors
        instead of reading them row by row; then, from ``ann.GRAPH_MIN`` rows, start building its HNSW
        graph (``.hnsw``) in the background when it has none (``wait_for_graph``). Returns the matrix rows
        written (0: nothing to do). The matrix under the write lock, the graph after it, without it (it
        names the matrix it was built from); a read-only vault keeps none. The query planner's statistics are brought up to date here too (``db.analyze``)."""
        if self.read_only is not None:
            return 0
        embedder = self.embedder
        model, dim = embedder.model_id, embedder.dim
        files = vectors.MatrixFile.of(self.layout.state, model)
        written = 0
        with self._locked():
            if force or vectors.matrix_behind(self.conn, files, model):
                written = vectors.write_matrix(self.conn, self.layout.root, files, model, dim)
            db.analyze(self.conn)  # the planner's statistics, once per doubling of the index
            self._save_leaf_file()
        # Looked at only when the matrix was just written or has no graph yet (reading its header costs
        # tens of milliseconds at 100,000 rows); `check` finds a stale or damaged graph otherwise.
        if (written or not files.graph.header.exists()) and files.header.exists():
            job = vectors.graph_job(self.conn, self.layout.root, files, model, dim)
            if job is not None:
                self._build_graph_later(job)
        return written

    def _save_leaf_file(self) -> None:
        """Under the write lock: rewrite the leaf file (``graph.dump``: the leaf graph and session order a
        new process reads instead of building them) when the vault has ``graph.FILE_MIN_LEAVES`` leaves
        or more and the file is missing, of another index, or ``graph.FILE_BEHIND`` changes behind the
        log. Derived: a file that cannot be written is skipped (a new process builds them)."""
        from vaultmem import graph

        searcher = self.searcher
        if searcher.leaf_count() < graph.FILE_MIN_LEAVES:
            return
        seen = graph.file_seen(self.layout.state, vectors.epoch(self.conn))
        last = self.conn.execute("SELECT max(seq) FROM graph_changes").fetchone()[0] or 0
        if seen is not None and seen <= last and last - seen < graph.FILE_BEHIND:
            return
        current = vectors.ensure_epoch(self.conn)
        graph.save(self.layout.root, self.layout.state, *searcher.leaf_structures(), current)

    def _build_graph_later(self, job: vectors.GraphJob) -> None:
        """Build the HNSW graph in a background thread (a minute or two at 100,000 rows); search scores
        without it until it is written, then takes it (``Searcher.graph_built``). A newer job replaces
        one not yet started. Not a daemon thread, and ``close`` joins it: a process that ends (a CLI
        command) finishes the build after its work is done instead of leaving the graph unbuilt, and no
        thread outlives the vault that started it."""
        from vaultmem import forking

        vectors.graph_imports()
        with self._graph_lock:
            self._graph_next = job
            if self._graph_thread is not None:
                return
            self._graph_thread = threading.Thread(target=self._graph_worker, name="vaultmem-hnsw")
            self._graph_last = self._graph_thread
            forking.fork_safe(self._graph_thread)  # reindex and ingest may fork while it builds
            self._graph_thread.start()

    def _graph_worker(self) -> None:
        ended = False
        try:
            while True:
                with self._graph_lock:
                    job, self._graph_next = self._graph_next, None
                    if job is None:  # cleared with the lock held: a job queued after this starts a thread
                        self._graph_thread, ended = None, True
                        return
                if job.run():
                    searcher = self._searcher
                    if searcher is not None:
                        searcher.graph_built(job.files, job.key)
        finally:
            if not ended:  # a bug in a build: the next ``save_vectors`` starts a new thread
                with self._graph_lock:
                    self._graph_thread = None

    def wait_for_graph(self, timeout: float | None = None) -> bool:
        """Wait for the background builds of the HNSW graph (``save_vectors``) to end, the builder thread
        with them; True when none is running (False: ``timeout`` seconds passed first)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._graph_lock:
                # The worker clears ``_graph_thread`` just before it ends: join the last one started.
                thread = self._graph_thread or self._graph_last
            if thread is None or not thread.is_alive():
                return True
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False

    def compact(
        self, *, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> PoolReport:
        """Compact now: seal every source's buffer into levels, condense, and re-summarise what is stale.

        Catches up with hand edits first (edited summaries and leaves make their ancestors stale), embeds
        and admits what waits (``flush``), then queues what a person asking for compaction wants whether
        or not a job asked for it (``queue_compaction``: a seal of every source, a re-summary of every
        stale level, out-of-date digests, the topic sweep) and runs the queue to idle. Between two
        compactions, admitted leaves seal their own source once its buffer is ready (``append_buffer``,
        queued by every ``admit`` batch, whoever runs it). ``dry_run`` plans the same steps and changes
        nothing."""
        if dry_run:
            return self._plan()
        with (
            self.commit_batch("memory: compact"),
            _on_full_disk("compaction", "they were kept", "`vaultmem compact`"),
        ):
            return self._compact(progress)

    def _compact(self, progress: Callable[[int, int], None] | None) -> PoolReport:
        from vaultmem import steps
        from vaultmem.reconcile import catch_up

        with self._locked():
            if steps.pending_notes(self.layout):
                self.heal_compaction()
            caught = catch_up(
                self.conn, self.layout, self.config.max_file_bytes, on_hand_edits=self._commit_by_hand
            )
            if caught.stale:
                self._commit(f"memory: mark {len(caught.stale)} summaries stale (what is below them changed)")
        # Notes edited or deleted while no watcher ran: their documents catch up (sections replaced).
        behind = self.documents_out_of_step()
        if behind:
            self._catch_up_notes(behind)
        # Embed and admit first: a seal planned while leaves still wait for their vectors would leave
        # them in the buffer (the threads run both kinds of job at once).
        flushed = self.flush()
        self.queue_compaction()
        report = self.work(progress)
        report.add(embedded=flushed.embedded, admitted=flushed.admitted)
        # Related links last: they name the titles the re-summarising just gave.
        from vaultmem import related

        with self._locked():
            linked = related.update(
                self.conn, self.layout, self.embedder.model_id, self.embedder.dim, self._related_known
            )
        if linked:
            report.say(linked)
            self._commit(linked)
        notes = [f"re-read {p} (changed by hand)" for p in caught.changed]
        notes += [f"{p} was deleted by hand; its row is gone" for p in caught.deleted]
        notes += [f"{p} is not a valid node any more; `vaultmem check` shows why" for p in caught.invalid]
        report.notes[:0] = notes
        return report

    def _plan(self) -> PoolReport:
        from vaultmem.compact import EmbedAhead, Planner, SourceState
        from vaultmem.pool import PoolReport
        from vaultmem.summarise import ExtractiveSummariser

        report = PoolReport()
        embedder = self.embedder
        planner = Planner(self.conn, self.layout, self.compact_settings, ExtractiveSummariser(embedder.embed))
        for source in self.sources():
            state = SourceState.load(self.conn, source, embedder.model_id, embedder.dim)
            for op in [*planner.seal(state), *planner.condense(state)]:
                if isinstance(op, EmbedAhead):  # not asked for (``embed_ahead`` is off): never here
                    continue
                report.say(op.message)
                new_dirs = [w.path.rsplit("/", 1)[0] for w in op.writes if w.expected is None]
                for directory in new_dirs:
                    count = sum(1 for _, dst in op.moves if dst.rsplit("/", 1)[0] == directory)
                    report.planned.append(f"{directory}/ ({count} moved in)")
        return report

    # -- git auto-commit (``autocommit``) -------------------------------------------------------------
    @property
    def git_notes(self) -> list[str]:
        """What git auto-commit did besides committing (a repo created)."""
        return self._autocommit.notes if self._autocommit is not None else []

    @property
    def commits(self) -> int:
        """Git commits this vault made (engine batches and hand edits)."""
        return self._autocommit.commits if self._autocommit is not None else 0

    def _commit(self, message: str) -> None:
        """Record one logical operation for git auto-commit: committed at once, or with the rest of the
        batch when one is open (``commit_batch``)."""
        if self._autocommit is None:
            return
        if self._deferred is not None and self._deferred_thread == threading.get_ident():
            self._deferred.append(message)  # inside an ``operation``: its own message names the commit
            return
        self._autocommit.record(message)

    def commit_batch(self, subject: str | None = None) -> AbstractContextManager[None]:
        """Everything the engine changes inside (in any thread of this vault) becomes one git commit at
        the end of the outermost batch; its subject is ``subject`` when several operations ran."""
        return self._autocommit.batch(subject) if self._autocommit is not None else nullcontext()

    def has_uncommitted(self) -> bool:
        """True when git auto-commit is on and engine changes wait for their commit."""
        return self._autocommit is not None and self._autocommit.pending()

    def commit_pending(self, subject: str | None = None) -> str | None:
        """Commit what the engine changed and has not committed yet (only its own paths); None when
        nothing was committed (see ``autocommit.AutoCommit.commit_pending``)."""
        return self._autocommit.commit_pending(subject) if self._autocommit is not None else None

    def _commit_by_hand(self, paths: list[str]) -> None:
        """Commit a person's edits the engine just read as their own commit ("edit by hand: ..."), before
        anything the engine derives from them, so they never hide inside an engine commit."""
        if self._autocommit is not None:
            self._autocommit.commit_by_hand(paths)

    # -- hand edits (the watch daemon) ---------------------------------------------------------------
    def reconcile_paths(
        self,
        rels: Iterable[str],
        seen: Mapping[str, Stamp] | None = None,
        *,
        repo_stamp: tuple[object, ...] | None = None,
        by_hand: bool = True,
    ) -> PathsReport:
        """Bring the index in step with files created, edited, moved or deleted outside the engine
        (one batch, under the write lock). Notes outside ``sources/`` are ingested as documents, unless
        ``seen`` already has them with the same size and mtime. ``by_hand=False``: the files are the
        caller's own writes through fsio inside an ``operation`` (an agent tool), committed with it,
        not as a person's edit. With ``repo_stamp`` (what
        ``repo_stamp()`` said when the paths were gathered), a git command that ran since makes it
        raise ``GitBusy`` and change nothing: the paths may describe a tree git was still writing."""
        from vaultmem import digest, memindex
        from vaultmem.reconcile import reconcile_paths

        with self._locked():
            if repo_stamp is not None and self.repo_stamp() != repo_stamp:
                raise GitBusy(
                    f"git changed the repository of {self.layout.root} while these paths were gathered;"
                    " gather them again once it is quiet"
                )
            mine, rest = memindex.reconcile(
                self.conn, self.layout, rels, self.config.max_file_bytes, self.memory_settings.core
            )
            # A person's edits to agent memory files are their own commit, as for notes and leaves.
            if by_hand:
                self._commit_by_hand([*mine.new, *mine.changed, *mine.deleted, *(r for r, _ in mine.invalid)])
            report = reconcile_paths(
                self.conn,
                self.layout,
                rest,
                self.config.max_file_bytes,
                read_note=self.read_notes,
                seen=seen,
                on_hand_edits=self._commit_by_hand if by_hand else None,
            )
            report.new += mine.new
            report.changed += mine.changed
            report.deleted += mine.deleted
            report.invalid += mine.invalid
            for rel, _ in mine.invalid:  # reported once, until the file changes again
                st = self.layout.abs(rel).stat()
                report.seen[rel] = (st.st_size, st.st_mtime_ns)
            if report.deleted:
                digest.enqueue_out_of_date(self.conn, time.time())  # their days' digests link them
            if report.deleted or report.changed:
                topics.route.enqueue_out_of_date(self.conn)  # a hand edit may add or remove an entity
            if report.stale:
                self._commit(f"memory: mark {len(report.stale)} summaries stale (what is below them changed)")
            return report

    def remove_stray_temps(self) -> list[str]:
        """Delete temp files a killed writer left behind (never real files; under the write lock, so no
        other process has one in flight). Returns their paths."""
        removed = []
        with self._locked():
            for tmp in fsio.stray_temp_files(self.layout.root):
                rel = self.layout.rel(tmp)
                if ".git" not in rel.split("/"):
                    fsio.remove_file(self.layout.root, tmp)
                    removed.append(rel)
        return removed

    def changed_paths(self, seen: Mapping[str, Stamp]) -> list[str]:
        """Paths that differ from the index (or from ``seen``, the notes already read), by ``stat``."""
        from vaultmem import memindex
        from vaultmem.reconcile import changed_paths

        # Agent memory files have rows of their own (memindex): compared there, not read as notes.
        known = {r[0] for r in self.conn.execute("SELECT path FROM agent_files")}
        rest = [p for p in changed_paths(self.conn, self.layout, seen) if p not in known]
        rest += self._vanished_notes()  # deleted while nobody watched: their documents must leave too
        return sorted({*rest, *memindex.changed(self.conn, self.layout)})

    def _syncer(self, source: str, embedder: Embedder | None = None) -> Syncer:
        """The documents of ``source`` (``embedder``: the vector space whose sidecar entries follow
        removed files; none for a read-only comparison)."""
        from vaultmem.docsync import Syncer

        return Syncer(
            self.conn,
            self.layout,
            source,
            scorer=self.scorer,
            max_tokens=self.config.chunk_max_tokens,
            max_bytes=self.config.max_file_bytes,
            model=embedder.model_id if embedder is not None else "",
            dim=embedder.dim if embedder is not None else 0,
            trash=self._autocommit is None,  # with git on, its history keeps what a document loses
        )

    def _note_messages(self, rels: Iterable[str], *, warn: bool = False) -> list[Message]:
        from vaultmem.inputs import read_path

        messages: list[Message] = []
        for rel in rels:
            source, name = self.note_document(rel)
            try:
                result = read_path(
                    self.layout.abs(rel), source=source, max_bytes=self.config.max_file_bytes, fmt="markdown"
                )
            except InvalidInput as exc:
                if warn and "no text found" not in str(exc):
                    self.warnings.append(str(exc))
                continue
            messages.extend(replace(m, session=name, meta={**m.meta, "note": rel}) for m in result.messages)
        return messages

    def _noted(self) -> list[str]:
        """Vault paths of the notes that have a document (by their sections, or by their document node,
        which names the note it indexes in place even when its section rows are gone: ``reindex``)."""
        return [
            str(note)
            for (note,) in self.conn.execute(
                "SELECT json_extract(provenance, '$.note') AS note FROM chunks"
                " WHERE kind = 'leaf' AND input = 'doc' AND note IS NOT NULL"
                " UNION SELECT json_extract(provenance, '$.note') AS note FROM chunks"
                " WHERE kind = 'summary' AND note IS NOT NULL"
            )
        ]

    def documents_out_of_step(self) -> list[str]:
        """Notes whose document disagrees with the note file (or whose file is gone): what ``check``
        reports as ``document_out_of_step``. Documents ingested from outside the vault are not compared
        (their files are not here); ingest their folder again to update them."""
        from vaultmem import docsync
        from vaultmem.ingest import redact_message

        notes = self._noted()
        gone = [n for n in notes if not self.layout.abs(n).exists()]
        gone_set = set(gone)
        present = [n for n in notes if n not in gone_set]
        messages = [redact_message(m)[0] for m in self._note_messages(present)]
        emptied = set(present) - {str(m.meta.get("note")) for m in messages}  # no text left: no document
        gone += sorted(emptied)
        present = [n for n in present if n not in emptied]
        docs, _rest = docsync.split_documents(messages)
        behind: set[tuple[str, str]] = set()
        for source in sorted({d.source for d in docs}):
            syncer = self._syncer(source)
            behind.update(
                (source, name) for name in syncer.out_of_step([d for d in docs if d.source == source])
            )
        return sorted([*gone, *(n for n in present if self.note_document(n) in behind)])

    def _catch_up_notes(self, behind: list[str]) -> None:
        """Read again the notes ``documents_out_of_step`` found behind; a deleted one whose file name
        is now a note nobody has read (moved while no watcher ran) is read with it, so it is taken for
        the same document (``read_notes``) instead of a deleted one and a new one."""
        from vaultmem.scan import scan

        present = [rel for rel in behind if self.layout.abs(rel).exists()]
        gone = [rel for rel in behind if rel not in present]
        names = {rel.rsplit("/", 1)[-1] for rel in gone}
        moved: list[str] = []
        if names:
            noted = set(self._noted())
            for entry in scan(self.layout).entries:
                rel = entry.rel
                if (
                    rel.rsplit("/", 1)[-1] in names
                    and rel not in noted
                    and rel.split("/", 1)[0] not in (*RESERVED_TOP, *AGENT_TOPS)
                    and self.conn.execute("SELECT 1 FROM chunks WHERE path = ?", (rel,)).fetchone() is None
                ):
                    moved.append(rel)
        self.read_notes([*present, *moved], gone=gone)

    def _vanished_notes(self) -> list[str]:
        """Notes of the vault that have a document but no file any more."""
        return [note for note in self._noted() if not self.layout.abs(note).exists()]

    @staticmethod
    def note_document(rel: str) -> tuple[str, str]:
        """(source, document name) of a note of the vault: its top folder is the source and the rest of
        its path the document (``Plugins/Core/Canvas.md`` -> ``plugins``, ``Core/Canvas.md``); a note at
        the top is in ``notes``."""
        if "/" not in rel:
            return "notes", rel
        top, rest = rel.split("/", 1)
        return default_source_name(top, fallback="notes"), rest

    def read_notes(self, rels: Iterable[str], gone: Iterable[str] = ()) -> list[str]:
        """Keep the documents of Markdown notes of the vault (not vaultmem nodes) in step with them: a
        new note becomes a document subtree, an edited one replaces its sections in place, and the notes
        in ``gone`` (deleted) take their documents out of search. An empty note (Obsidian makes one when a
        dead link is clicked) is no document. Returns the leaf ids added."""
        rels = list(rels)
        messages = self._note_messages(rels, warn=True)
        # A note emptied by hand holds no document any more, like a deleted one.
        emptied = set(rels) - {str(m.meta.get("note")) for m in messages}
        # A note renamed or moved: its old path may come in a later batch (deletions are held a moment);
        # given now, the new note is recognised as the same document and takes over its leaves.
        vanished = self._vanished_notes() if rels else []
        gone_docs = [self.note_document(rel) for rel in sorted({*gone, *emptied, *vanished})]
        if not messages and not gone_docs:
            return []
        with self.commit_batch():
            return list(self._sync_documents(messages, gone=gone_docs).added)

    # -- retrieval ---------------------------------------------------------------------------------
    @property
    def searcher(self) -> Searcher:
        if self._searcher is None:
            self._searcher = Searcher(self.conn, lambda: self.embedder, state=self.layout.state)
        return self._searcher

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        source: str | None = None,
        session: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        kind: str | None = None,
        status: str | None = None,
        topic: str | None = None,
        now: datetime | None = None,
        as_of: datetime | str | None = None,
        include_superseded: bool = False,
    ) -> list[Hit]:
        """Hybrid search (BM25 + embeddings) over leaves and summaries, with filters.

        ``topic`` (an entity name or key) keeps the leaves that mention it. A query that names a time
        ("last Tuesday", "in May 2023", "上周三") ranks what was said then above the rest; ``now`` is the
        reference for relative times (default: the current time). A superseded leaf comes right after
        the leaf that replaces it (``superseded_by`` in its provenance) and a leaf outside its validity
        window is left out, unless ``include_superseded``; ``as_of`` answers as the vault stood then. A query
        that names a speaker ranks that speaker's words first (``Searcher._boost_speakers``)."""
        entity = topics.query.resolve(self.conn, topic) if topic is not None else None
        filters = Filters(source, session, _when(since, "since"), _when(until, "until"), kind, status, entity)
        filters = versions.scoped(
            self.conn, filters, as_of=_as_of(as_of), now=now, include_superseded=include_superseded
        )
        found = window_ranked(self.conn, query, filters, now, lambda q, f: self.searcher.search(q, k, f))
        hits = self._versions(query, self._decayed(found, now, as_of), filters, include_superseded)[:k]
        self.record_query(query)
        self._asked(hits, now)
        self._searched()
        return hits

    def _searched(self) -> None:
        """After a search or context: with ``warm_queries``, the embedder (when it has one) opens the
        runtime that embeds queries faster on a background thread, for the searches still to come
        (``NumpyBertEmbedder.start_query_runtime``; a no-op once started)."""
        start = getattr(self._embedder, "start_query_runtime", None) if self.warm_queries else None
        if start is not None:
            start()

    def _decayed(self, hits: list[Hit], now: datetime | None, as_of: object = None) -> list[Hit]:
        """With ``[decay]`` on, leaves nobody asked about for long rank lower (``decay.py``). Not for an
        ``as_of`` answer: the ``recall`` table knows only the last day a leaf was asked about, not when
        it was asked before, so the ranking then cannot be rebuilt and the vault is answered undecayed."""
        half_life = self.config.decay_half_life_days
        if half_life <= 0 or as_of is not None:
            return hits
        moment = now or datetime.now(UTC)
        return decay.reweigh(hits, decay.weights(self.conn, hits, moment, half_life, self.config.decay_floor))

    def _asked(self, hits: Sequence[Hit], now: datetime | None) -> None:
        if self.config.decay_half_life_days > 0 and self.read_only is None:
            with db.side_write(self.conn):  # bookkeeping: what searches remember stays valid
                decay.noted(self.conn, hits, now or datetime.now(UTC))

    def _versions(self, query: str, hits: list[Hit], filters: Filters, include_superseded: bool) -> list[Hit]:
        """``versions.arrange`` with successors the search did not find fetched from the index."""

        def fetch(ids: list[str]) -> list[Hit]:
            return self.searcher.evidence(query, self.searcher.hits([(i, 0.0, None, None) for i in ids]))

        return versions.arrange(self.conn, hits, filters, fetch, include_superseded=include_superseded)

    def record_query(self, query: str) -> None:
        """Make the entities ``query`` names hotter (the heat formula's query term). ``search`` and
        ``context`` call it after they have read (the retrieval modules never write); nothing is
        recorded in a read-only vault or with topics off."""
        if not isinstance(query, str) or self.read_only is not None:
            return
        # The topic settings once built (or set) are the truth; before that the config says the same
        # without importing the topic planner on the search path.
        built = self.__dict__.get("topic_settings")
        if built is not None:
            enabled, heat_settings = built.enabled, built.heat
        else:
            enabled = self.config.topics_enabled
            heat_settings = topics.heat.settings_from(self.config.topic_values())
        if not enabled:
            return
        keys = [m.key for m in entities.extract(query)]
        if keys:
            with db.side_write(self.conn):  # bookkeeping: what searches remember stays valid
                topics.heat.queried(self.conn, keys, topics.heat.utcnow(), heat_settings)

    def context(
        self,
        query: str,
        budget_tokens: int = 1024,
        *,
        mode: str | None = None,
        source: str | None = None,
        session: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        topic: str | None = None,
        now: datetime | None = None,
        as_of: datetime | str | None = None,
        include_superseded: bool = False,
    ) -> Context:
        """The best remembered text for ``query`` within ``budget_tokens``, with provenance per item.

        ``mode``: ``flat`` (leaves only), ``collapsed`` (leaves and summaries ranked together) or
        ``walk`` (top-down through the best branches); see ``context``. Chosen nodes never overlap.
        Versions and ``as_of`` as in ``search``."""
        if budget_tokens < 1:
            raise InvalidInput("the token budget must be positive")
        mode = mode or DEFAULT_CONTEXT_MODE
        if mode not in MODES:
            raise InvalidInput(f"unknown context mode {mode!r}; one of {', '.join(MODES)}")
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("the query is empty; type a few words to search for")
        entity = topics.query.resolve(self.conn, topic) if topic is not None else None
        filters = Filters(source, session, _when(since, "since"), _when(until, "until"), entity=entity)
        filters = versions.scoped(
            self.conn, filters, as_of=_as_of(as_of), now=now, include_superseded=include_superseded
        )
        ctx = gather(
            self.searcher,
            query,
            budget_tokens,
            mode=mode,
            filters=filters,
            now=now,
            embedder=lambda: self.embedder,
            rank=lambda found: self._versions(
                query, self._decayed(found, now, as_of), filters, include_superseded
            ),
        )
        self.record_query(query)
        self._asked([item.hit for item in ctx.items], now)
        self._searched()
        return ctx

    # -- navigation ----------------------------------------------------------------------------------
    def drill_down(self, node_id: str | None = None, *, query: str | None = None) -> list[navigate.Node]:
        """Children of a level (every source's top for ``None``), in reading order or ranked by ``query``.
        A topic or digest node's children are its sub-levels, then the leaves it links."""
        from vaultmem import navigate

        return navigate.drill_down(
            self.conn,
            node_id,
            query=query,
            embedder=lambda: self.embedder,
            vectors=self.searcher.vectors,
            linked=self._links_of(node_id),
            links_of=self._links_counted,
        )

    def _links_of(self, node_id: str | None) -> list[str]:
        """The leaves a level's links name (a topic's or digest's leaves; a note's sections)."""
        if node_id is None or not node_id.startswith("s"):
            return []
        return [i for i in (c.linked_id for c in self.summary(node_id).children) if i]

    def _links_counted(self, node_id: str) -> list[str]:
        """``_links_of`` for a listed level's count of children: a file that cannot be read counts none
        (the listing goes on; ``check`` reports the file)."""
        try:
            return self._links_of(node_id)
        except (VaultError, OSError):
            return []

    def fetch(self, ids: Iterable[str]) -> list[Leaf | SummaryNode]:
        """The nodes ``ids`` with full provenance (leaves) or their summary file (levels), in the given order."""
        wanted = [check_node_id(i) for i in ids]
        leaves = {leaf.id: leaf for leaf in index.leaves_by_ids(self.conn, wanted)}
        out: list[Leaf | SummaryNode] = []
        for node_id in wanted:
            if node_id in leaves:
                out.append(leaves[node_id])
            elif node_id.startswith("s"):
                out.append(self.summary(node_id))
            else:
                raise NodeNotFound(f"no leaf with id {node_id}; `vaultmem ls` lists what the vault holds")
        return out

    def serialize(self, node_id: str) -> str:
        """A level and everything under it read as one Markdown document (depth first, reading order)."""
        from vaultmem import navigate

        return navigate.serialize(self.conn, node_id)

    def expand_to_length(self, node_id: str, budget_tokens: int) -> navigate.Expansion:
        """A level expanded breadth first (summary, then children, ...) while it fits ``budget_tokens``."""
        from vaultmem import navigate

        if budget_tokens < 1:
            raise InvalidInput("the token budget must be positive")
        return navigate.expand_to_length(self.conn, node_id, budget_tokens)

    # -- entities and topics -------------------------------------------------------------------------
    def rescan_entities(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Find the entities of admitted leaves that list none (leaves admitted before entities were
        extracted, or whose entities a person cleared) and write them, in batches under the write lock.
        When the rules changed since this vault's leaves were read (``entities.RULES_VERSION`` against
        the index's ``meta``), every admitted leaf is read anew and its list replaced by what the rules
        find now. Returns how many leaves changed; ``compact`` then routes the topics they make hot (and
        archives those no leaf names any more)."""
        from vaultmem import admit

        stale = admit.rules_behind(self.conn)
        ids = admit.rescan_ids(self.conn, every=stale)
        found = busy = 0
        for start in range(0, len(ids), 512):
            with self._locked():
                changed, skipped = admit.rescan_entities(
                    self.conn, self.layout, ids[start : start + 512], self.entity_finder
                )
                found += changed
                busy += skipped
            if progress is not None:
                progress(min(start + 512, len(ids)), len(ids))
        with self._locked():
            if found:
                topics.heat.seed(self.conn, topics.heat.utcnow(), self.topic_settings.heat)
                self._commit(f"memory: entities found anew in {found} leaves")
            if stale and not busy:  # a leaf changed on disk meanwhile: the next rescan reads all again
                admit.mark_rules_read(self.conn)
        return found

    def sweep_topics(self) -> int:
        """Queue routing for every topic (the cold are archived) and every entity hot enough for one;
        ``compact`` and the daemon's midnight run it. Returns the jobs queued."""
        with self._locked():
            topics.heat.seed(self.conn, topics.heat.utcnow(), self.topic_settings.heat)
            return topics.route.sweep(self.conn, self.layout, topics.heat.utcnow(), self.topic_settings)

    def topic(self, entity: str, n: int = 5, *, now: datetime | None = None) -> topics.query.TopicView:
        """What the vault knows about ``entity`` (a name, ``@handle`` or key): its topic summary (latest
        state first; empty while it has no topic tree), its ``n`` most important and ``n`` newest leaves."""
        key = topics.query.resolve(self.conn, entity)
        path = topics.plan.existing(self.conn).get(key)
        summary = topics.query.summary_text(self.conn, path)
        return topics.query.topic_view(
            self.conn, key, summary, now or topics.heat.utcnow(), self.topic_settings, n
        )

    def hot_topics(self, n: int = 10, *, now: datetime | None = None) -> list[topics.query.EntityInfo]:
        """The ``n`` hottest entities (see ``heat`` for the formula), with their topic tree if any."""
        if n < 1:
            raise InvalidInput("ask for at least one topic")
        at = now or topics.heat.utcnow()
        if self.read_only is None:
            topics.heat.seed(
                self.conn, at, self.topic_settings.heat
            )  # an index rebuilt without its heat table
        return topics.query.hot(self.conn, n, at, self.topic_settings)

    def graph(
        self, *, limit: int = 200, min_weight: int = 1, now: datetime | None = None, by: str = "mentions"
    ) -> dict[str, Any]:
        """The entity graph: the ``limit`` most mentioned (``by="heat"``: hottest) entities and their
        co-occurrence edges."""
        if limit < 1 or min_weight < 1:
            raise InvalidInput("limit and min_weight must be at least 1")
        if by not in ("mentions", "heat"):
            raise InvalidInput(f"graph by {by!r}? one of: mentions, heat")
        at = now or topics.heat.utcnow()
        # By heat: the hottest. An index whose heat was never seeded (read-only) falls back to mentions.
        keys = (
            [e.key for e in topics.query.hot(self.conn, limit, at, self.topic_settings)]
            if by == "heat"
            else []
        )
        return topics.query.graph(
            self.conn, at, self.topic_settings, limit=limit, min_weight=min_weight, keys=keys or None
        )

    # -- document operations (docmem) ---------------------------------------------------------------
    def append_child(
        self,
        parent_id: str,
        text: str,
        *,
        role: str | None = None,
        speaker: str | None = None,
        ts: datetime | str | None = None,
        session: str | None = None,
    ) -> str:
        """A new leaf as the last child of the level ``parent_id``; returns its id. Session and input
        kind default to the nearest leaf's; ``flush()`` embeds it, as it does ingested leaves."""
        from vaultmem.docmem import NewLeaf, plan_append_child

        new = NewLeaf(text, role=role, speaker=speaker, ts=ts, session=session)
        return self._docmem(lambda: plan_append_child(self.conn, self.layout, parent_id, new))[0]

    def insert_between(
        self,
        first_id: str,
        second_id: str,
        text: str,
        *,
        role: str | None = None,
        speaker: str | None = None,
        ts: datetime | str | None = None,
        session: str | None = None,
    ) -> str:
        """A new leaf between two adjacent siblings (``InvalidInput`` if they are not); returns its id."""
        from vaultmem.docmem import NewLeaf, plan_insert_between

        new = NewLeaf(text, role=role, speaker=speaker, ts=ts, session=session)
        return self._docmem(lambda: plan_insert_between(self.conn, self.layout, first_id, second_id, new))[0]

    def delete(self, node_id: str) -> list[str]:
        """Delete a node and everything under it; returns the ids removed. A level whose folder holds a
        file that is not a vaultmem node is refused (``InvalidInput``), so no person's file is lost."""
        from vaultmem.docmem import plan_delete

        return list(
            self._docmem(
                lambda: plan_delete(self.conn, self.layout, node_id, max_bytes=self.config.max_file_bytes)
            )
        )

    def update_content(self, node_id: str, text: str) -> None:
        """Rewrite a node's text: a leaf keeps its id, provenance and your keys and is re-embedded; a
        summary's new text counts as a hand edit, kept under ``## Pinned`` when it is next re-summarised."""
        from vaultmem.docmem import plan_update_content

        self._docmem(
            lambda: plan_update_content(
                self.conn, self.layout, node_id, text, max_bytes=self.config.max_file_bytes
            )
        )

    def add_summary(self, node_ids: Iterable[str], text: str, *, title: str | None = None) -> str:
        """A new level over contiguous sibling leaves, with ``text`` as its summary; returns its id."""
        from vaultmem.docmem import plan_add_summary

        ids = list(node_ids)
        return self._docmem(
            lambda: plan_add_summary(
                self.conn, self.layout, ids, text, title=title, max_bytes=self.config.max_file_bytes
            )
        )[0]

    def session_tree(self, session: str, *, source: str | None = None) -> SessionTree:
        """A chat session read as a tree: its messages and the levels standing for runs of them."""
        from vaultmem.sessions import session_tree

        return session_tree(self.conn, session, source=source)

    def build_message_list(self, session: str, *, source: str | None = None) -> list[dict[str, Any]]:
        """The session as an OpenAI-style message list; a level covering a run of it becomes a
        ``recall_memory_summary`` tool call and its result."""
        from vaultmem.sessions import session_tree

        return session_tree(self.conn, session, source=source).messages()

    def _docmem(self, plan: Callable[[], Plan]) -> tuple[str, ...]:
        from vaultmem import digest, steps
        from vaultmem.docmem import run

        with self.commit_batch(), self._locked():
            if steps.pending_notes(self.layout):
                self.heal_compaction()
            planned = plan()
            op = planned.op
            # Only moved and removed files carry sidecar entries: other steps never load the model.
            embedder = self.embedder if op.moves or op.removes else None
            model, dim = (embedder.model_id, embedder.dim) if embedder is not None else ("", 0)
            run(self.conn, self.layout, planned, model=model, dim=dim, max_bytes=self.config.max_file_bytes)
            if op.removes:
                digest.enqueue_out_of_date(self.conn, time.time())  # a deleted leaf leaves its day
                topics.route.enqueue_out_of_date(self.conn)  # and its topics
            self._commit(op.message)
            return planned.ids

    # -- agents: remember, supersede, recall, record a turn (the MCP server, memory tool, hooks) ----
    _deferred: list[str] | None = None  # commit messages of the writes inside one ``operation``
    _deferred_thread: int | None = None  # the thread running it (a daemon thread's writes are its own)

    @contextmanager
    def operation(self, message: str) -> Iterator[None]:
        """Several writes as one logical operation: under the write lock, and one git commit (when
        auto-commit is on) with ``message``, which names the client and the reason. The writes' own
        messages are folded into it; a nested operation belongs to the outer one. Inside an open
        ``commit_batch`` the message joins that batch's commit."""
        with self.commit_batch(), self._locked():
            if self._deferred is not None:
                yield
                self._deferred.append(message)  # the outer operation's commit names it
                return
            self._deferred, self._deferred_thread = [], threading.get_ident()
            finished = False
            try:
                yield
                finished = True
            finally:
                held, self._deferred, self._deferred_thread = self._deferred, None, None
                if finished:
                    self._commit(message)
                elif held:  # what was written before the failure is still one commit
                    self._commit(f"{message}: interrupted after {'; '.join(held)}")

    def remember(
        self,
        text: str,
        *,
        source: str = "agent",
        reason: str | None = None,
        session: str | None = None,
        role: str | None = None,
        speaker: str | None = None,
        ts: datetime | str | None = None,
        via: str = "api",
    ) -> agentio.Remembered:
        """Remember ``text`` (a fact or an episode an agent chose to keep) as a new leaf of ``source`` (the
        client's name), never dropped as chatter. Text the vault already holds is not stored again
        (``duplicates`` names the leaf that holds it). At most ``agentio.REMEMBER_MAX_TOKENS`` tokens;
        committed as one operation naming the client and ``reason``."""
        message = agentio.remembered(
            text,
            source=source,
            session=session,
            role=role,
            speaker=speaker,
            ts=_when(ts, "ts") or self.clock(),
            reason=reason,
            via=via,
        )
        with self.operation(agentio.commit_message(source, "remembered", reason)):
            return self._remember(message)

    def supersede(
        self,
        old_id: str,
        text: str,
        *,
        source: str = "agent",
        reason: str | None = None,
        via: str = "api",
    ) -> agentio.Remembered:
        """A new version of the leaf ``old_id``: a new leaf with ``text`` whose frontmatter says
        ``supersedes: <old_id>``, and the old leaf, kept as it was, gains ``superseded_by: <new id>``.
        ``text`` is one leaf at most (``ingest.chunk_max_tokens``)."""
        if isinstance(old_id, str) and old_id.startswith("s"):
            check_node_id(old_id)
            raise InvalidInput(
                f"{old_id} is a level's summary, not a leaf: a new version replaces a leaf (a summary is"
                " rewritten by compaction, or edited in place with update_content)"
            )
        old = self.get(old_id)
        index.refuse_note_sections(self.conn, [old_id], "given a new version")
        body = agentio.check_text(text, max_tokens=self.config.chunk_max_tokens)
        if " ".join(body.split()) == " ".join(old.text.split()):
            raise InvalidInput(f"the new text is the text of {old_id} already; nothing to update")
        message = agentio.remembered(body, source=source, reason=reason, via=via, ts=self.clock())
        with self.operation(agentio.commit_message(source, f"updated {old_id}", reason)):
            done = self._remember(message)
            new_id, new_path = done.ids[0], done.paths[0]
            if new_id == old_id:
                raise InvalidInput(f"the new text is the text of {old_id} already; nothing to update")
            self._link(old_id, old.path, new_id, new_path)
        return replace(done, supersedes=old_id)

    def _link(
        self,
        old_id: str,
        old_path: str,
        new_id: str,
        new_path: str,
        *,
        add: bool = True,
        log: tuple[str, str, str | None] | None = None,
    ) -> bool:
        """Write (or with ``add=False`` remove) the version link between two leaves, both sides, and
        ``log`` (the week's log with its line) as one durable step (``supersede.link``; healed on open).
        False when both files said so already (nothing written)."""
        from vaultmem import supersede

        index.refuse_note_sections(self.conn, [old_id, new_id], "linked as a version (its file is the note)")
        return supersede.link(
            self.conn,
            self.layout,
            (old_id, old_path),
            (new_id, new_path),
            add=add,
            max_bytes=self.config.max_file_bytes,
            digests=self.config.digest_enabled,
            topics=self.config.topics_enabled,
            log=log,
        )

    # -- updates: the supersede detector and the review inbox (issue #20) ------------------------------
    def propose_updates(
        self,
        *,
        now: datetime | None = None,
        rescan: bool = False,
        heartbeat: Callable[[], None] | None = None,
    ) -> dict[str, list[Any]]:
        """Run the offline detector over the leaves indexed since the last scan (all with ``rescan``):
        each older leaf a new one may update becomes a proposal in ``review/`` (confidence at least
        ``detect.PROPOSE_AT``). With ``[updates] auto_apply`` on (the default), one at least
        ``auto_apply_at`` sure is linked at once instead and logged in the week's file. Pairs already
        linked, proposed or decided are skipped."""
        from vaultmem import detect, review

        moment = now or datetime.now(UTC)
        out: dict[str, list[Any]] = {"proposed": [], "applied": [], "dismissed": []}
        auto_at = self.config.updates_auto_apply_at if self.config.updates_auto_apply else None
        with self.operation("memory: propose updates"):
            mark = self.conn.execute("SELECT value FROM meta WHERE key = 'updates_scanned'").fetchone()
            start = 0 if rescan or mark is None else int(mark[0])
            # Admitted leaves only (they have their vector and entities); the scan stops before the first
            # leaf still waiting for admission, so the mark never passes it.
            waiting_row = self.conn.execute(
                "SELECT min(rowid) FROM chunks WHERE kind = 'leaf' AND rowid > ? AND status = ?",
                (start, Status.PENDING.value),
            ).fetchone()[0]
            rows = self.conn.execute(
                "SELECT rowid, id, text, speaker, role, entities, path, provenance FROM chunks"
                " WHERE kind = 'leaf' AND rowid > ? AND rowid < ? AND status IN (?, ?)"
                " ORDER BY coalesce(ts, ''), rowid",
                (start, waiting_row or (1 << 62), Status.ADMITTED.value, Status.SEALED.value),
            ).fetchall()
            cache = self.searcher.vectors(self.embedder)
            decided = review.decided_pairs(self.layout)
            waiting = {(p.new, p.old) for p in review.inbox(self.layout)[0]}
            # The scan's leaves find their closest leaves in blocks (the same ones as one by one).
            nearest = versions.Neighbours(cache, [r["id"] for r in rows], versions.read_for())
            for row in rows:
                if heartbeat is not None:
                    heartbeat()
                for old, offline in versions.judged(self.conn, cache, row, nearest):
                    if (row["id"], old["id"]) in decided | waiting or offline.confidence < detect.PROPOSE_AT:
                        continue
                    verdict = self._model_judges(old["text"], row["text"], offline)
                    if verdict is None:  # the model says it is no update: logged, never proposed again
                        p = review.Proposal(old["id"], row["id"], offline.confidence, offline.why, "")
                        review.log(self.layout, moment, "dismissed by the model", p, old["text"], row["text"])
                        out["dismissed"].append(p)
                        continue
                    if verdict.confidence < detect.PROPOSE_AT:
                        continue
                    p = review.Proposal(
                        old["id"], row["id"], verdict.confidence, verdict.why, format_ts(moment) or ""
                    )
                    waiting.add((p.new, p.old))
                    if (
                        auto_at is not None
                        and verdict.confidence >= auto_at
                        and self._linked(p, old, row, moment)
                    ):
                        out["applied"].append(p)
                    else:
                        review.write(self.layout, p, old["text"], row["text"], old["path"], row["path"])
                        out["proposed"].append(p)
            if rows:
                with db.atomic(self.conn):
                    self.conn.execute(
                        "INSERT INTO meta(key, value) VALUES ('updates_scanned', ?)"
                        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (str(max(r["rowid"] for r in rows)),),
                    )
        return out

    def _linked(self, p: review.Proposal, old: sqlite3.Row, new: sqlite3.Row, moment: datetime) -> bool:
        """Auto-apply one proposal, its line in the week's log written in the same step; False (it waits
        in ``review/`` instead) when a leaf's file (or the log) changed since it was read."""
        from vaultmem import review

        line = review.log_entry(self.layout, moment, "applied", p, old["text"], new["text"])
        try:
            if not self._link(p.old, old["path"], p.new, new["path"], log=line):
                review.log(self.layout, moment, "applied", p, old["text"], new["text"])
        except ConflictError as exc:
            self.warnings.append(f"update {p.new} of {p.old} left for review: {exc}")
            return False
        return True

    def _model_judges(self, old: str, new: str, offline: detect.Judgement) -> detect.Judgement | None:
        """With an ``[llm]`` endpoint, the model judges a pair the offline rules propose (its verdict,
        or None when it says it is no update); without one, or when the model fails or answers junk,
        the offline judgement stands (noted in the vault's warnings)."""
        from vaultmem import detect
        from vaultmem.agentllm import reply_object

        model = self.chat_model
        if model is None:
            return offline
        try:
            reply = model.ask(detect.JUDGE_SYSTEM, detect.judge_prompt(old, new, offline), max_tokens=200)
            return detect.model_verdict(reply_object(reply), offline)
        except (VaultError, ValueError, OSError) as exc:
            self.warnings.append(f"update judged offline: the model failed ({exc})")
            return offline

    def proposals(self) -> list[review.Proposal]:
        """The proposals waiting in ``review/``, oldest first."""
        from vaultmem import review

        return review.inbox(self.layout)[0]

    def decide(self, key: str, decision: str) -> dict[str, list[Any]]:
        """Record a person's ``decision`` (accept, reject, skip) on a proposal (its file name, its new
        id, or ``new-old``) and apply the inbox. A person's own tool: the MCP server has no way here."""
        from vaultmem import review

        with self.operation(f"memory: review {decision} {key}"):
            review.set_decision(self.layout, review.find(self.layout, key), decision)
            return self.apply_reviews()

    def apply_reviews(self, *, now: datetime | None = None) -> dict[str, list[Any]]:
        """Carry out the decisions in ``review/`` (a person's edit of ``decision:`` included): accepted
        proposals link the two leaves (or, for two entries of a core file, version them as auto-apply
        does: ``coremem.settle``), rejected ones are dropped, proposals pending longer than
        ``review.EXPIRE_DAYS`` expire, and those naming a leaf the vault no longer holds are ``gone``; each
        outcome goes into the week's log and the file goes."""
        from vaultmem import coremem, review

        moment = now or self.clock()
        out: dict[str, list[Any]] = {"accepted": [], "rejected": [], "expired": [], "gone": [], "invalid": []}
        with self.operation("memory: review decisions"):
            found, bad = review.inbox(self.layout)
            out["invalid"] = bad
            for p in found:
                outcome = {"accept": "accepted", "reject": "rejected"}.get(p.decision)
                if outcome is None and review.expired(p, moment):
                    outcome = "expired"
                if p.file:  # two entries of a core file
                    if outcome is None and not coremem.holds_pair(self._memory(), p):
                        outcome = "gone"  # an entry deleted by hand: its words leave review/ at once
                    if outcome is not None and self._settle_core(p, outcome, moment, out):
                        fsio.remove_file(self.layout.root, self.layout.root / p.path)
                    continue
                pair = {x.id: x for x in index.leaves_by_ids(self.conn, [p.old, p.new])}
                if len(pair) < 2:  # a leaf was forgotten, purged or deleted: nothing left to decide
                    outcome = "gone"
                if outcome is None:
                    continue
                texts = [pair[i].text if i in pair else "(gone)" for i in (p.old, p.new)]
                if outcome == "accepted":
                    line = review.log_entry(self.layout, moment, outcome, p, texts[0], texts[1])
                    try:
                        linked = self._link(p.old, pair[p.old].path, p.new, pair[p.new].path, log=line)
                    except ConflictError as exc:  # the file stays, decided: carried out next time
                        self.warnings.append(f"{p.path}: not applied yet: {exc}")
                        continue
                    if not linked:  # linked before (a step replayed on open): its line may be missing
                        review.log(self.layout, moment, outcome, p, texts[0], texts[1])
                else:
                    review.log(self.layout, moment, outcome, p, texts[0], texts[1])
                fsio.remove_file(self.layout.root, self.layout.root / p.path)
                out[outcome].append(p)
        return out

    def _settle_core(
        self, p: review.Proposal, outcome: str, moment: datetime, out: dict[str, list[Any]]
    ) -> bool:
        """Carry out a decided core proposal (``coremem.settle``) and log it; False when the core file
        changed meanwhile (the proposal stays, decided, for the next run)."""
        from vaultmem import coremem, review

        try:
            done, old_text, new_text = coremem.settle(self._memory(), p, outcome, moment)
        except ConflictError as exc:
            self.warnings.append(f"{p.path}: not applied yet: {exc}")
            return False
        review.log(self.layout, moment, done, p, old_text, new_text)
        out[done].append(p)
        return True

    def revert_update(self, key: str) -> None:
        """Undo a link between two leaves, or between two entries of a core file (``new-old`` ids, as the
        weekly log writes it: 16 hex digits for leaves, 10 for core entries, ``coremem.revert``)."""
        from vaultmem import review
        from vaultmem.corefile import ENTRY_ID_RE

        new_id, _, old_id = key.partition("-")
        if ENTRY_ID_RE.match(new_id) and ENTRY_ID_RE.match(old_id):
            from vaultmem import coremem

            with self.operation(f"memory: revert core update {new_id} of {old_id}"):
                name, old_text, new_text = coremem.revert(self._memory(), new_id, old_id, self.clock())
                p = review.Proposal(old_id, new_id, 1.0, (), "", file=name)
                review.log(self.layout, self.clock(), "reverted", p, old_text, new_text)
            return
        pair = {
            x.id: x for x in index.leaves_by_ids(self.conn, [check_node_id(old_id), check_node_id(new_id)])
        }
        if len(pair) != 2:
            raise NodeNotFound(f"{key}: both leaves must be in the vault to undo their link")
        with self.operation(f"memory: revert update {new_id} of {old_id}"):
            self._link(old_id, pair[old_id].path, new_id, pair[new_id].path, add=False)
            # Listed in the week's log like a core revert: what was undone, and when.
            p = review.Proposal(old_id, new_id, 1.0, (), "")
            review.log(self.layout, self.clock(), "reverted", p, pair[old_id].text, pair[new_id].text)

    # -- forget and restore (issue #20) ---------------------------------------------------------------
    def forget(
        self, ids: Iterable[str], *, reason: str | None = None, settle: bool = True
    ) -> list[Tombstone]:
        """Forget leaves: each is moved, byte for byte, into its tombstone
        (``.trash/vaultmem/forgotten/<id>/``, never indexed) with its vector, and leaves the tree like
        ``delete`` (its ancestors go stale, its day's digest and its topics are redone). ``settle`` runs
        the queue at once, so the ancestors are re-summarised without it. One commit with git on;
        ``restore`` brings a leaf back exactly."""
        from vaultmem import sidecar
        from vaultmem.forget import Tombstone, bury, derived_folders, keep_derived, snapshot, tombstone_stamp

        asked = list(dict.fromkeys(check_node_id(i) for i in ids))
        index.refuse_note_sections(self.conn, asked, "forgotten")
        level_of = {
            leaf_id: level for level in asked if level.startswith("s") for leaf_id in self._leaves_of(level)
        }
        wanted = list(
            dict.fromkeys(
                i
                for n in asked
                for i in (
                    [n]
                    if not n.startswith("s")
                    else [leaf_id for leaf_id, level in level_of.items() if level == n]
                )
            )
        )
        why = f" ({' '.join(reason.split())[:120]})" if reason and reason.strip() else ""
        message = scrub(f"memory: forget {', '.join(asked)}{why}")
        before: list[tuple[Tombstone, dict[str, bytes | None]]] = []
        with self.commit_batch(message):
            with self.operation(message):
                model, dim = self.embedder.model_id, self.embedder.dim
                # A level forgotten as a whole keeps what its derived files were before any of its
                # leaves went, in its first leaf's tombstone: ``restore <level>`` puts back that state.
                group: dict[str, dict[str, bytes | None]] = {}
                for leaf in (self.get(i) for i in level_of):
                    day = leaf.ts.strftime("%Y-%m-%d") if leaf.ts else None
                    folders = derived_folders(self.conn, leaf.id, leaf.path, leaf.entities, day)
                    first = next(i for i, lv in level_of.items() if lv == level_of[leaf.id])
                    group.setdefault(first, {}).update(
                        {
                            k: v
                            for k, v in snapshot(self.layout, folders).items()
                            if k not in group.get(first, {})
                        }
                    )
                for leaf in (self.get(i) for i in wanted):
                    path = self.layout.abs(leaf.path)
                    data = path.read_bytes()
                    entry = sidecar.read(path.parent, model, dim).entries.get(path.name)
                    tomb = Tombstone(
                        id=leaf.id,
                        path=leaf.path,
                        hash=fsio.sha256_bytes(data),
                        forgotten_at=tombstone_stamp(),
                        reason=scrub(reason) if reason else None,
                        model=model if entry else None,
                        vector_hash=entry.hash if entry else None,
                        vector=entry.raw if entry else None,
                        level=level_of.get(leaf.id),
                    )
                    if leaf.id in level_of:
                        before.append((tomb, group.get(leaf.id, {})))
                    else:
                        day = leaf.ts.strftime("%Y-%m-%d") if leaf.ts else None
                        folders = derived_folders(self.conn, leaf.id, leaf.path, leaf.entities, day)
                        before.append((tomb, snapshot(self.layout, folders)))
                    bury(self.layout, tomb, data)
                    self.delete(leaf.id)
            if settle:
                self.work()
            with self.operation(message):  # what forgetting rewrote, kept for an exact restore
                done = [keep_derived(self.layout, tomb, old) for tomb, old in before]
        return done

    def _leaves_of(self, level_id: str) -> list[str]:
        """The leaves under a level of a source tree (what forgetting the level forgets)."""
        row = self.conn.execute(
            "SELECT path FROM chunks WHERE id = ? AND kind = 'summary'", (level_id,)
        ).fetchone()
        if row is None:
            raise NodeNotFound(f"no level {level_id} in the vault")
        if not row["path"].startswith(f"{SOURCES}/") or row["path"].count("/") < 3:
            raise InvalidInput(
                f"{level_id} is a topic, a digest or a source's top: it gathers links, not memories;"
                " forget its leaves, or one of the levels under it"
            )
        prefix = row["path"].rsplit("/", 1)[0] + "/"
        return [
            r["id"]
            for r in self.conn.execute(
                "SELECT id FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ? ORDER BY path",
                index.prefix_range(prefix),
            )
        ]

    def restore(self, leaf_id: str, *, settle: bool = True) -> str:
        """Bring a forgotten leaf back where it was (its own bytes and vector; into its source's
        ``_fresh/`` when its level is gone), remove its tombstone, and re-summarise what it is under
        (``settle``). One commit with git on. Returns the leaf's path. A level's id brings back every
        leaf forgotten with the level (``forget`` of a level), in one commit; returns the level's folder."""
        from vaultmem import sidecar
        from vaultmem.admit import reload_vectors
        from vaultmem.forget import begin_restore, end_restore, read_tomb, tombstones, unbury, undo_derived

        # Each restore writes its note first (forget.begin_restore): a crash before the rows are committed
        # is finished on the next open (``_finish_restores``), so files and rows never stay apart.
        if check_node_id(leaf_id).startswith("s"):
            members = [t for t in tombstones(self.layout) if t.level == leaf_id]
            if not members:
                raise NodeNotFound(
                    f"no leaves were forgotten with level {leaf_id}; `vaultmem forgotten` lists them"
                )
            with self.commit_batch(f"memory: restore {leaf_id}"):
                with self.operation(f"memory: restore {leaf_id}"):
                    # The level's folders first, then what its derived files were before the forget
                    # (only those still as the forget left them), then its leaves in their places.
                    note = begin_restore(
                        self.layout,
                        {t.id: t.path for t in members},
                        [rel for t in members for rel in t.derived or {}],
                    )
                    for tomb in members:
                        fsio.make_dirs(self.layout.root, self.layout.abs(tomb.path).parent)
                    undone = [rel for tomb in members for rel in undo_derived(self.layout, tomb)]
                    paths = [self.restore(t.id, settle=False) for t in sorted(members, key=lambda t: t.path)]
                    self.reconcile_paths(undone, by_hand=False)
                    reload_vectors(self.conn, self.layout, undone, self.embedder.model_id, self.embedder.dim)
                    end_restore(self.layout, note)
                if settle:
                    self.work()
            return paths[0].rsplit("/", 1)[0]

        with self.commit_batch(f"memory: restore {check_node_id(leaf_id)}"):
            with self.operation(f"memory: restore {leaf_id}"):
                tomb, data = read_tomb(self.layout, leaf_id)
                if self.node_at(tomb.path) is not None or index.existing_ids(self.conn, [leaf_id]):
                    raise InvalidInput(f"{leaf_id} is in the vault already; its tombstone is left as it is")
                rel = tomb.path
                if not self.layout.abs(rel).parent.is_dir():  # its level was merged or removed since
                    rel = f"{SOURCES}/{rel.split('/')[1]}/{FRESH}/{tomb.name}"
                # A leaf forgotten with its level alone: what it was under is re-summarised instead (the
                # level's old summaries quote its fellow leaves, still forgotten).
                put_back = rel == tomb.path and tomb.level is None
                note = begin_restore(
                    self.layout, {leaf_id: rel}, list(tomb.derived or {}) if put_back else []
                )
                target = self.layout.abs(rel)
                fsio.make_dirs(self.layout.root, target.parent)
                fsio.atomic_write(target, data, root=self.layout.root, expected=None)
                undone = undo_derived(self.layout, tomb) if put_back else []
                embedder = self.embedder
                held = sidecar.read(target.parent, embedder.model_id, embedder.dim).entries
                if (
                    tomb.vector
                    and tomb.vector_hash
                    and tomb.model == embedder.model_id
                    and tomb.name not in held
                ):
                    entry = {tomb.name: sidecar.Entry(tomb.vector_hash, tomb.vector)}
                    sidecar.update(self.layout, target.parent, embedder.model_id, embedder.dim, entry)
                unbury(self.layout, tomb)
                self.reconcile_paths([rel, *undone], by_hand=False)
                reload_vectors(self.conn, self.layout, [rel, *undone], embedder.model_id, embedder.dim)
                end_restore(self.layout, note)
            if settle:
                self.work()
        return rel

    def purge(self, leaf_id: str, *, rewrite_history: bool = False, force: bool = False) -> purge.PurgeReport:
        """Erase a leaf (live or forgotten) and every copy of its text: the leaf goes, what drew on it is
        re-summarised, copies outside the tree (``.trash/``, other tombstones' snapshots, duplicates set
        aside, damaged indexes) are removed, the index's free pages and WAL are wiped. With
        ``rewrite_history`` the vault's git history is rewritten so no commit holds it (refused when the
        repository has a remote, unless ``force``). ``traces`` in the report lists where the text
        still is (empty: nowhere under the vault directory, git objects and ``chunks.db`` included)."""
        from vaultmem import purge
        from vaultmem.forget import read_tomb, unbury

        check_node_id(leaf_id)
        if leaf_id.startswith("s"):
            raise InvalidInput(f"{leaf_id} is a level; purge its leaves one by one")
        index.refuse_note_sections(self.conn, [leaf_id], "purged")
        root = self.layout.root
        if rewrite_history:
            if self._autocommit is None or not purge.is_repo_top(root):
                raise InvalidInput(
                    "--rewrite-history needs git auto-commit on and the vault's own repository"
                )
            remotes = purge.upstreams(root)
            if remotes and not force:
                raise InvalidInput(
                    f"the vault's repository has remotes ({', '.join(remotes)}): the text stays in every"
                    " clone already pushed; pass --force to rewrite this history anyway"
                )
        live = bool(index.existing_ids(self.conn, [leaf_id]))
        if live:
            leaf = self.get(leaf_id)
            raw = self.layout.abs(leaf.path).read_text(encoding="utf-8")
            texts = [frontmatter.split(raw, where=leaf.path).body, leaf.text]
        else:
            tomb, data = read_tomb(self.layout, leaf_id)
            texts = [frontmatter.split(data.decode("utf-8"), where=tomb.path).body]
        found = list(dict.fromkeys(n for t in texts for n in purge.needles(t)))
        message = f"memory: purge {leaf_id}"
        with self.commit_batch(message):
            with self.operation(message):
                if live:
                    self.delete(leaf_id)
                else:
                    unbury(self.layout, tomb)
            self.work()  # what drew on it is re-summarised without it
            with self.operation(message):
                removed = purge.remove_copies(self.layout, purge.stray_copies(self.layout, found))
                removed += purge.scrub_review(self.layout, leaf_id, found)
        purge.wipe_index(self.conn)
        rewritten = purge.rewrite_history(root, found, [leaf.path] if live else []) if rewrite_history else 0
        left = purge.traces(root, found)
        notes = []
        if left and not rewrite_history and any(t.startswith(".git") for t in left):
            notes.append("git history still holds the text: purge again with --rewrite-history")
        return purge.PurgeReport(leaf_id, tuple(removed), rewritten, tuple(left), tuple(notes))

    def forgotten(self) -> list[Tombstone]:
        """The forgotten leaves (their tombstones), the most recently forgotten first."""
        from vaultmem.forget import tombstones

        return tombstones(self.layout)

    def _remember(self, message: Message) -> agentio.Remembered:
        from vaultmem.ingest import build_leaves, check_new_sources, write_leaves

        check_new_sources(self.layout, {message.source})
        ids: list[str] = []
        paths: list[str] = []
        duplicates: list[str] = []
        new: list[Leaf] = []
        for leaf in build_leaves(
            [message], self.layout, self.scorer, self.config.chunk_max_tokens, self.clock()
        ):
            row = self.conn.execute(
                "SELECT id, path FROM chunks WHERE kind = 'leaf' AND content_hash = ? ORDER BY path LIMIT 1",
                (leaf.content_hash,),
            ).fetchone()
            if row is not None or leaf.id in {x.id for x in new}:
                held = (row["id"], row["path"]) if row is not None else (leaf.id, leaf.path)
                ids.append(held[0])
                paths.append(held[1])
                duplicates.append(held[0])
                continue
            # What an agent chose to remember is never dropped as chatter.
            new.append(replace(leaf, status=Status.PENDING) if leaf.status is Status.DROPPED else leaf)
            ids.append(leaf.id)
            paths.append(leaf.path)
        write_leaves(self.conn, self.layout, new)
        return agentio.Remembered(tuple(ids), tuple(paths), tuple(duplicates))

    def node_at(self, rel: str) -> str | None:
        """The id of the node indexed at the vault-relative path ``rel``, or None."""
        row = self.conn.execute("SELECT id FROM chunks WHERE path = ?", (rel,)).fetchone()
        return None if row is None else str(row["id"])

    def recall(
        self,
        query_or_messages: str | Sequence[Mapping[str, Any]],
        budget_tokens: int = 1024,
        *,
        source: str | None = None,
        mode: str | None = None,
        as_of: datetime | str | None = None,
        include_superseded: bool = False,
    ) -> agentio.Recall:
        """The block an agent puts in its system prompt for a query (or the last turns of a message list):
        core memory first (``core_text``: read only, nothing created), then the best remembered text in
        what is left of ``budget_tokens`` (``context``). Never more than ``budget_tokens``. ``as_of``
        answers both as the vault stood then (core memory as ``core_block(as_of=)``, the leaves as in
        ``search``); ``include_superseded`` as in ``search``."""
        if budget_tokens < 1:
            raise InvalidInput("the token budget must be positive")
        query = agentio.query_of(query_or_messages)
        moment = _as_of(as_of)
        core = agentio.fit_lines(self.core_text(as_of=moment).strip(), budget_tokens)
        left = budget_tokens - count_tokens(core)
        ctx = (
            self.context(
                query, left, source=source, mode=mode, as_of=moment, include_superseded=include_superseded
            )
            if query and left >= agentio.RECALL_MIN_CONTEXT
            else None
        )
        text = "\n\n".join(part for part in (core, ctx.text if ctx is not None else "") if part)
        return agentio.Recall(query, text, count_tokens(text), core, ctx)

    def record_turn(
        self,
        messages: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        session: str,
        source: str = "agent",
    ) -> IngestReport:
        """Ingest one turn of a running conversation (a message or a few: ``{role, content}``, content a
        string or a list of parts) through the ingest pipeline. A message without an ``id`` gets one from
        its text, so recording the same turn again adds nothing. Embedding is left to the queue."""
        if not isinstance(session, str) or not session.strip():
            raise InvalidInput("record_turn needs the conversation's session id")
        return self.ingest_messages(agentio.turn_records(messages, session), source=source, session=session)

    # -- maintenance -------------------------------------------------------------------------------
    def reindex(self, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        """Rebuild the index from the files; vectors come back from the sidecars, never re-embedded.

        A damaged chunks.db (``PRAGMA quick_check``) is first moved aside and replaced by a new one."""
        with self._locked():
            problem = db.quick_check(self.layout.db)
            if problem is not None:
                return self._replace_damaged(problem, progress)
            return self._reindex(progress)

    def _replace_damaged(self, why: str, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        """Under the write lock: move the damaged index aside, open a new one, rebuild it."""
        self.conn.close()
        self._searcher = None
        damaged = set_aside(self.layout, why)
        self.conn = db.connect(self.layout.db)
        return self._rebuilt(damaged, progress)

    def _rebuilt(self, damaged: Damaged, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        """A new index after a damaged one: what could be read of the job queue and the heat first, then
        everything from the files; one warning says what happened and what was lost."""
        why, moved, salvage = damaged.why, damaged.moved, damaged.salvage
        kept = db.restore(self.conn, salvage)
        report = self._reindex(progress)
        said = [
            f"chunks.db was damaged ({why}): moved to {self.layout.rel(moved)} and rebuilt from the files"
            f" ({report.leaves} leaves, {report.vectors} vectors)"
        ]
        if "jobs" in salvage.lost:
            said.append(f"the job queue was lost ({report.requeued} jobs the files call for queued again)")
        else:
            said.append(f"{kept.get('jobs', 0)} queued jobs kept")
        if "entity_heat" in salvage.lost:
            said.append("entity heat was lost (seeded again from the mentions)")
        self.warnings.append("; ".join(said))
        return report

    def _reindex(self, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        from vaultmem import forking, memindex
        from vaultmem.admit import ReadAhead, leaf_dirs, read_sidecars, vectors_from_sidecars
        from vaultmem.reindex import VaultFiles, reindex

        embedder = self.embedder
        ahead: list[forking.Ahead[ReadAhead]] = []
        # One transaction: a reader sees the old index or the new one, never a document node without
        # the sections of its note (read again below) or rows without their vectors.
        with self._locked(), db.atomic(self.conn), ExitStack() as stack:

            def read_ahead(files: VaultFiles) -> None:
                # The files' sidecars (the JSON and base64 of every vector) read by a forked child while
                # the rows are inserted; a sidecar written meanwhile is read again (``read_sidecars``).
                dirs = leaf_dirs(files.paths.values())
                model, dim = embedder.model_id, embedder.dim
                work = forking.Ahead(lambda: read_sidecars(self.layout, dirs, model, dim))
                ahead.append(stack.enter_context(work))

            report = reindex(self.conn, self.layout, self.config.max_file_bytes, progress, read=read_ahead)
            memory, unread = memindex.reindex(
                self.conn, self.layout, self.config.max_file_bytes, self.memory_settings.core
            )
            report = replace(report, memory_files=memory, skipped=report.skipped + tuple(unread))
            # Notes indexed in place have no files of their own: their sections are read again from the
            # notes, with the ids their document nodes recorded.
            notes = self._noted()
            present = [n for n in notes if self.layout.abs(n).exists()]
            if notes:
                from vaultmem.docsync import section_rows

                kept = set(present)
                self.read_notes(present, gone=[n for n in notes if n not in kept])
                sections = sum(len(section_rows(self.conn, n)) for n in present)
                report = replace(report, leaves=report.leaves + sections)
            loaded, missing = vectors_from_sidecars(
                self.conn,
                self.layout,
                embedder.model_id,
                embedder.dim,
                ahead[0].result() if ahead and ahead[0].forked else None,
            )
            requeued = self.jobs.enqueue_many(admit_job(i) for i in missing)
        with self._locked():
            self.save_vectors()
            return replace(report, vectors=loaded, requeued=report.requeued + requeued)

    def check(self, *, fix: bool = False, redact: bool = False) -> CheckReport:
        """Verify the index against the files (``fix``: repair the index side). ``redact`` (with
        ``fix``) also rewrites Markdown files that hold a secret, with the secret replaced."""
        from vaultmem import steps
        from vaultmem.check import CheckReport, Problem, check

        if redact and not fix:
            raise InvalidInput(
                "--redact rewrites files, so it goes with --fix: `vaultmem check --fix --redact`"
            )
        if fix and self.read_only is not None:
            with self._locked():  # says why it cannot
                pass
        problem = db.quick_check(self.layout.db)
        if problem is not None:
            damaged = Problem("damaged_index", self.layout.rel(self.layout.db), problem, True)
            if not fix:
                return CheckReport((damaged,))  # nothing else can be read reliably from it
            with self._locked():
                self._replace_damaged(problem)
            report = self.check(fix=True, redact=redact)
            return replace(report, fixed=(damaged, *report.fixed))
        embedder = self.embedder  # its id and size only: no weights are loaded
        model, dim = embedder.model_id, embedder.dim
        if fix:
            with self.commit_batch("memory: check --fix"):
                if steps.pending_notes(self.layout):
                    self.heal_compaction()
                if self.layout.restoring.is_dir() and any(self.layout.restoring.iterdir()):
                    self._finish_restores()
                with self._locked():
                    report = check(
                        self.conn,
                        self.layout,
                        self.config.max_file_bytes,
                        fix=True,
                        redact=redact,
                        model=model,
                        dim=dim,
                    )
                    if any(p.code == "duplicate_id" for p in report.fixed):
                        self._commit("memory: check --fix: settle duplicate ids")
                    rewritten = [p for p in report.fixed if p.code == "secret_in_file"]
                    if rewritten:
                        self._commit(
                            f"memory: secrets redacted in {len(rewritten)} files (check --fix --redact)"
                        )
                    return self._check_memory(report, fix=True)
        report = check(self.conn, self.layout, self.config.max_file_bytes, model=model, dim=dim)
        return self._check_memory(report, fix=False)

    # -- agent memory tiers: core memory, session notes, episodes, recipes (coremem, memtiers) ---------
    @property
    def memory_settings(self) -> MemorySettings:
        """The ``[core]``, ``[sessions]`` and ``[recipes]`` sections of the config."""
        from vaultmem.corefile import CoreSettings
        from vaultmem.coremem import MemorySettings

        c = self.config
        return MemorySettings(
            core=CoreSettings(**c.memory_values("core")),
            session_auto=c.sessions_auto,
            session_idle_s=c.sessions_idle_s,
            session_max_age_days=c.sessions_max_age_days,
            recipe_similarity=c.recipes_similarity,
            recipe_min_episodes=c.recipes_min_episodes,
            recipe_max_learned=c.recipes_max_learned,
            recipe_max_in_prompt=c.recipes_max_in_prompt,
            recipe_max_chars=c.recipes_max_chars,
            recipe_trigger_min=c.recipes_trigger_min,
        )

    @property
    def chat_model(self) -> ChatModel | None:
        """The configured ``[llm]`` endpoint for the memory tiers, or None (offline rules)."""
        if not self._chat_model_built:
            from vaultmem.agentllm import ChatModel

            self._chat_model_built = True
            endpoint = self._llm_endpoint()
            self._chat_model = ChatModel(**endpoint) if endpoint is not None else None
        return self._chat_model

    def _memory(self, conn: sqlite3.Connection | None = None) -> MemoryEnv:
        from vaultmem.coremem import MemoryEnv

        return MemoryEnv(
            conn=conn if conn is not None else self.conn,
            layout=self.layout,
            settings=self.memory_settings,
            max_bytes=self.config.max_file_bytes,
            lock=self._locked,
            commit=self._commit,
            clock=self.clock,
            embedder=lambda: self.embedder,
            model=self.chat_model,
            read_only=self.read_only is not None,
            hand_edits=self._commit_by_hand if self._autocommit is not None else None,
            updates_auto_at=self.config.updates_auto_apply_at if self.config.updates_auto_apply else None,
        )

    def core_block(self, *, as_of: datetime | str | None = None) -> CoreBlock:
        """The in-prompt core files (soul, user profile, projects, patterns) as one block, within each
        file's budget and the total budget (characters); deterministic. Creates missing files. A core
        entry replaced by a newer version does not ride in it; ``as_of`` gives the block as core memory
        stood then (read only)."""
        from vaultmem import coremem

        return coremem.block(self._memory(), as_of=_as_of(as_of))

    def core_text(self, *, as_of: datetime | str | None = None) -> str:
        """The core block's text as a prompt carries it, reading only: nothing is created, indexed or
        committed (a missing core file counts as its empty template). For recall, hooks and servers."""
        from vaultmem import coremem

        return coremem.block(self._memory(), write=False, as_of=_as_of(as_of)).text

    def core_files(self) -> list[CoreFileView]:
        """Every core file with its budget, size and entries (missing ones are created first)."""
        from vaultmem import coremem

        return coremem.files(self._memory())

    def core_file(self, name: str) -> CoreFileView:
        """One core file (``user-profile``, ``knowledge``...); a missing one is shown as its template."""
        from vaultmem import coremem

        return coremem.view(self._memory(), name)

    def core_update(self, file: str, entries: str | Sequence[str]) -> CoreUpdate:
        """Add entries (a list, or text: one per line) to a core file, enforcing its budget as it is
        written: the LLM condenses when configured (validated, offline fallback), else the offline
        policy; what leaves goes to knowledge.md or core/_archive/ with its tag, never lost."""
        from vaultmem import coremem

        return coremem.update(self._memory(), file, entries)

    def onboard(self, answers: Mapping[str, str] | None = None) -> Onboarding:
        """First run: create the core files; ``answers`` (``name``, ``language``, ``use``; any may be
        missing) fill the user profile and the soul."""
        from vaultmem import coremem

        return coremem.onboard(self._memory(), answers)

    def end_session(self, session: str, *, source: str | None = None) -> SessionNote:
        """Write (or refresh) the note of a chat session and propose its lasting facts to core memory."""
        from vaultmem import memtiers

        return memtiers.end_session(self._memory(), session, source)

    def sessions(self, *, limit: int | None = None) -> list[SessionNote]:
        """Session notes, newest first."""
        from vaultmem import memtiers

        return memtiers.list_sessions(self._memory(), limit)

    def record_episode(
        self,
        request: str,
        *,
        mode: str,
        tools: Sequence[str | Mapping[str, Any]],
        outcomes: Sequence[str] | str | None,
        success: bool,
        session: str | None = None,
        source: str | None = None,
        recipe: str | None = None,
    ) -> EpisodeRecord:
        """Record one task execution; a successful one may join or make a recipe. ``recipe``: the
        recipe it followed (its success or failure is counted there)."""
        from vaultmem import memtiers

        return memtiers.record_episode(
            self._memory(),
            request,
            mode=mode,
            tools=tools,
            outcomes=outcomes,
            success=success,
            session=session,
            source=source,
            recipe=recipe,
        )

    def episodes(self, *, limit: int | None = None, success: bool | None = None) -> list[Episode]:
        """Recorded episodes, newest first (``success`` to keep only successes or failures)."""
        from vaultmem import memtiers

        return memtiers.list_episodes(self._memory(), limit=limit, success=success)

    def recipes(self, *, archived: bool = False) -> list[Recipe]:
        """Live recipes by name (``archived``: the archived ones too, after them)."""
        from vaultmem import memtiers

        return memtiers.list_recipes(self._memory(), archived=archived)

    def recipes_for(
        self, request: str, *, limit: int | None = None, max_chars: int | None = None
    ) -> RecipeMatch:
        """The recipes for a request: triggers first, then word overlap; at most ``limit`` (3) and
        ``max_chars`` (2,000) characters; ``fast_path`` on those used successfully 3 times or more."""
        from vaultmem import memtiers

        return memtiers.recipes_for(self._memory(), request, limit=limit, max_chars=max_chars)

    def recipe_result(self, name: str, *, success: bool) -> Recipe:
        """Count a successful or failed use of the recipe ``name``."""
        from vaultmem import memtiers

        return memtiers.recipe_result(self._memory(), name, success=success)

    def search_memory(
        self, query: str, *, kinds: Sequence[str] | None = None, k: int = 10
    ) -> list[MemoryHit]:
        """Full-text search over the agent's memory: core entries (knowledge.md included), session
        notes, episodes, recipes (``kinds`` to restrict)."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("the query is empty; type a few words to search for")
        from vaultmem import coremem, memindex

        env = self._memory()
        coremem.sync(env, kinds or memindex.KINDS)
        return memindex.search(self.conn, query, kinds, k)

    def _sessions_touched(self, leaves: list[Leaf]) -> None:
        """Ingest hook: chat sessions that just got messages get (or push back) their note's job
        (``[sessions] auto``; without importing the memory tiers)."""
        c = self.config
        if leaves and c.sessions_auto:
            schedule_session_notes(
                self.conn,
                leaves,
                now=self.clock(),
                idle_s=c.sessions_idle_s,
                max_age_days=c.sessions_max_age_days,
            )

    def _check_memory(self, report: CheckReport, *, fix: bool) -> CheckReport:
        """``check`` of the agent memory files, added to the report of the rest."""
        from vaultmem import memindex
        from vaultmem.check import Problem

        problems, fixed = memindex.check(
            self.conn, self.layout, self.config.max_file_bytes, self.memory_settings.core, fix=fix
        )
        behind = self.documents_out_of_step()
        found = [
            Problem("document_out_of_step", rel, "its document's leaves disagree with the note", True)
            for rel in behind
        ]
        if fix and behind:
            self._catch_up_notes(behind)
            fixed += found
        else:
            problems += found
        return replace(report, problems=report.problems + tuple(problems), fixed=report.fixed + tuple(fixed))

    @property
    def jobs(self) -> JobQueue:
        return JobQueue(self.conn, time.time)

    # -- configured sources, queued requests, and reads for the dashboard ----------------------------
    def source_folders(self) -> dict[str, Path]:
        """``[sources]`` of config.toml: source name -> the folder or file it is read from (``~``
        expanded, a relative path taken from the vault's root), in the order the config lists them."""
        return {
            name: Path(os.path.normpath(self.layout.root / os.path.expanduser(where)))
            for name, where in self.config.sources
        }

    def ingest_source(self, name: str, progress: Progress | None = None) -> IngestReport:
        """Read the folder configured for source ``name`` again; what was read before adds nothing."""
        folders = self.source_folders()
        if name not in folders:
            known = ", ".join(folders) or "none; add a [sources] table to .vaultmem/config.toml"
            raise InvalidInput(f"no configured source {name!r} (configured: {known})")
        if not folders[name].exists():
            raise InvalidInput(
                f"source {name!r}: {folders[name]} does not exist; fix [sources] in config.toml"
            )
        return self.ingest_path(folders[name], source=name, progress=progress)

    def queue_ingest(self, name: str) -> bool:
        """Queue an ``ingest`` job for configured source ``name`` (the watch daemon or `vaultmem jobs
        --run` runs it); False when one is already queued or running."""
        self._writable()
        if name not in self.source_folders():
            raise InvalidInput(f"no configured source {name!r}; [sources] in config.toml lists them")
        return self.jobs.enqueue_many([ingest_job(name)]) == 1

    def queue_compaction(self) -> int:
        """Queue what ``compact`` runs (a seal per source, a re-summary per stale level, out-of-date
        digests, topic routing) without running it; returns the jobs added."""
        from vaultmem import digest

        with self._locked():
            added = self.jobs.enqueue_many(seal_job(s) for s in self.sources())
            # Days and topics that lost a leaf are re-digested and re-routed (the topic sweep below
            # routes every topic anyway).
            added += digest.enqueue_out_of_date(self.conn, time.time())
            # A stale level always has its job (the flag in the file is the truth; the queue follows it).
            added += self.jobs.enqueue_many(
                resummarise_job(r["id"], r["depth"])
                for r in self.conn.execute(
                    "SELECT id, depth FROM chunks WHERE kind = 'summary' AND status = 'stale'"
                )
            )
        return added + self.sweep_topics()  # heat decays with the days: archive the cold, make the newly hot

    def _ingest_job(self, name: str, heartbeat: Callable[[], None]) -> str:
        """The ``ingest`` job, on a connection of its own (it runs on a worker thread)."""
        with Vault.open(self.layout.root, embedder=self._embedder) as other:
            report = other.ingest_source(name, progress=lambda _done, _total: heartbeat())
            self.warnings.extend(other.warnings)
        return f"memory: ingest {name}: {len(report.added)} new leaves ({report.duplicates} already present)"

    def _updates_job(self, heartbeat: Callable[[], None]) -> str | None:
        """The ``detect_updates`` job (on a worker thread, under this vault's write lock, so its writes
        join the commit of the run that queued it): the detector over the leaves admitted since the last
        look, then the inbox's written decisions."""
        found = self.propose_updates(heartbeat=heartbeat)
        decided = self.apply_reviews()
        counts = {k: len(v) for k, v in (found | decided).items() if v and k != "invalid"}
        if not counts:
            return None
        return "memory: updates: " + ", ".join(f"{n} {k}" for k, n in counts.items())

    def index_version(self) -> tuple[int, int]:
        """A value that changes whenever the index does (a commit by this or any other connection):
        what a reader's cache is keyed on."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0]), self.conn.total_changes

    def storage(self) -> tuple[int, int]:
        """Bytes in the vault's files (not ``.git``) and in ``.vaultmem/`` (``stats.storage``)."""
        from vaultmem.stats import storage

        return storage(self.layout)

    def leaves_per_day(
        self, first: date | str, last: date | str, *, source: str | None = None
    ) -> dict[str, int]:
        """UTC day -> how many leaves were said or written that day, from ``first`` to ``last``
        (dates or ``YYYY-MM-DD``); days without one are left out."""
        from vaultmem import digest

        start, end = digest.parse_day(first), digest.parse_day(last)
        if end < start:
            raise InvalidInput(f"the range ends ({end}) before it starts ({start})")
        return index.leaves_per_day(self.conn, start.isoformat(), end.isoformat(), source)

    def leaves_per_source(self) -> dict[str, int]:
        """Source -> how many leaves it holds."""
        return index.leaves_per_source(self.conn)

    def children(
        self, node_id: str | None = None, *, source: str | None = None, offset: int = 0, limit: int = 100
    ) -> tuple[list[navigate.Node], int]:
        """One page of a level's children in reading order (without ``node_id``: the top of ``source``,
        its levels and ``_fresh/`` leaves), with how many there are in all."""
        if node_id is None and source is None:
            raise InvalidInput("name a level or a source")
        if offset < 0 or limit < 1:
            raise InvalidInput("offset must be 0 or more and limit at least 1")
        from vaultmem import navigate

        linked = self._links_of(node_id)
        return navigate.children_page(
            self.conn,
            node_id,
            source=source,
            offset=offset,
            limit=limit,
            linked=linked,
            links_of=self._links_counted,
        )

    def commits_of(self, day: date | str | None = None, *, limit: int = 100) -> list[CommitInfo]:
        """The vault's git commits of a UTC day (default today), newest first, each with its files and
        its patch; [] when the vault has no git history."""
        from vaultmem import digest
        from vaultmem.gitsync import GitRecorder

        when = digest.parse_day(day)
        start = datetime(when.year, when.month, when.day, tzinfo=UTC)
        end = start + timedelta(days=1) - timedelta(seconds=1)
        return GitRecorder(self.layout.root).commits_between(start.isoformat(), end.isoformat(), limit=limit)


@contextmanager
def _on_full_disk(what: str, kept: str, again: str) -> Iterator[None]:
    """Say, on a full disk, what was kept and what to do (the error itself names the file)."""
    try:
        yield
    except DiskFull as exc:
        if str(exc).startswith("disk full during"):
            raise
        raise DiskFull(
            f"disk full during {what}: {exc}; {kept}, queued work stays queued and a step cut short"
            f" finishes on the next open; free space, then run {again} again"
        ) from exc


def model_cache_dir() -> Path:
    """Where files derived from the embedding model are kept between processes (prepared weights):
    ``$VAULTMEM_CACHE``, else ``$XDG_CACHE_HOME/vaultmem``, else ``~/.cache/vaultmem``."""
    override = os.environ.get("VAULTMEM_CACHE")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vaultmem"


def _when(value: datetime | str | None, name: str) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    parsed = parse_ts(value)
    if parsed is None:
        raise InvalidInput(
            f"--{name} {value!r} is not a date; use ISO 8601 such as 2024-05-01 or 2024-05-01T09:00Z"
        )
    return parsed


def _as_of(value: datetime | str | None) -> datetime | None:
    """``--as-of``: a moment; a bare date stands for the end of that UTC day (what the vault held on it)."""
    moment = _when(value, "as-of")
    if isinstance(value, str) and len(value.strip()) == 10 and moment is not None:
        return moment + timedelta(days=1) - timedelta(microseconds=1)
    return moment
