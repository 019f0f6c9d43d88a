"""The compactor: sealing a source's buffer into levels, merging, condensing, and re-summarising.

Owns the decisions. ``SourceState`` is an in-memory picture of one source tree (the ``_fresh/`` buffer,
every level with its centroid and size); the planners turn it into ``TreeOp`` steps and update the
picture as they go, so a dry run and a real run plan the same steps. ``steps.apply`` makes each step
durable. Sealing always writes an extractive summary at once (fast, deterministic, inside the write
lock); when an LLM summariser is configured the new level is marked stale and re-summarised by a
``resummarise`` job, whose model call runs outside the lock. Never prints.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import PurePosixPath

import numpy as np
import numpy.typing as npt

from vaultmem import cluster, fsio, index, sidecar, steps, validity, vectors, wikilinks
from vaultmem.db import atomic
from vaultmem.embed import Embedder
from vaultmem.errors import ConflictError, FrontmatterError
from vaultmem.jobs import JobQueue, resummarise_job
from vaultmem.layout import (
    FRESH,
    SIDECAR_NAME,
    SOURCES,
    SUMMARY_NAME,
    Layout,
    folder_slug,
    note_of,
)
from vaultmem.model import Status, parse_ts
from vaultmem.order import sibling_order
from vaultmem.stale import Resummarised, children_of, current_fingerprint, fingerprint_rows
from vaultmem.steps import FileWrite, StepEnv, TreeOp
from vaultmem.summarise import (
    NEIGHBOURS,
    Background,
    Child,
    ExtractiveSummariser,
    central,
    neighbours,
    says_little,
    summarise_apart,
)
from vaultmem.summaryfile import (
    ChildLink,
    SummaryNode,
    children_fingerprint,
    clean_title,
    keep_hand_edit,
    parse_summary,
    render_summary,
    set_stale_line,
    summary_id,
    text_hash,
)

Vector = npt.NDArray[np.float32]
_NUMBERED = re.compile(r"^(\d+)-")
_NEAR_IN_TIME = 4 * NEIGHBOURS  # levels read on each side in time when re-summarising (see _beside_rows)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class CompactSettings:
    """When and how the compactor seals and condenses (``[compact]`` in config.toml)."""

    fresh_keep_leaves: int = 24  # the newest leaves always stay verbatim in _fresh/ ...
    fresh_keep_tokens: int = 2000  # ... up to this many tokens
    seal_min_leaves: int = 48  # seal when the buffer beyond the tail holds this many leaves ...
    seal_min_tokens: int = 4000  # ... or this many tokens
    bucket_target_leaves: int = 12
    bucket_min_leaves: int = 3
    bucket_max_leaves: int = 32
    bucket_max_tokens: int = 2400
    cluster_batch: int = 256  # leaves clustered at once: bounds time and memory per step
    merge_threshold: float = 0.8  # cosine of centroids above which a new cluster joins an existing level
    episode_gap_s: float = (
        10800.0  # a new session or a pause this long starts an episode (clusters form within)
    )
    condense_fanout: int = 8  # this many sibling levels of one depth at a source's top get condensed
    condense_target: int = 4  # children per new parent level, on average
    max_wait_s: float = 86400.0  # a buffer older than this is sealed even below the thresholds
    workers: int = 3


# -- the picture of one source tree ---------------------------------------------------------------------
@dataclass
class _Leaf:
    id: str
    path: str
    tokens: int
    vec: Vector
    ts: str | None
    status: str
    speaker: str | None
    text: str
    mtime_ns: int
    size: int = -1  # the file's size and hash when it was indexed (an edit since keeps it out of a seal)
    file_hash: str = ""
    session: str | None = None
    supersedes: str = "[]"  # versions (index columns, JSON lists): how a summary marks it
    superseded_by: str = "[]"


@dataclass
class _Level:
    id: str
    dir: str
    depth: int
    title: str
    text: str
    parent: str | None
    vec_sum: Vector
    leaves: int
    tokens: int
    earliest: str | None
    latest: str | None
    stale: bool
    children: int = 0
    sessions: set[str] = field(default_factory=set)  # of its own leaves (depth 1): where a chat goes on

    @property
    def centroid(self) -> Vector:
        norm = float(np.linalg.norm(self.vec_sum))
        return (self.vec_sum / norm).astype(np.float32) if norm > 0 else self.vec_sum


@dataclass
class SourceState:
    source: str
    root: str  # sources/<source>
    fresh: list[_Leaf]
    levels: dict[str, _Level]
    dim: int
    model: str = ""  # the embedder's model id (the leaves' stored vectors)

    @classmethod
    def load(cls, conn: sqlite3.Connection, source: str, model: str, dim: int) -> SourceState:
        root = f"{SOURCES}/{source}"
        fresh_prefix = f"{root}/{FRESH}/"
        levels: dict[str, _Level] = {}
        by_dir: dict[str, _Level] = {}
        for row in conn.execute(
            "SELECT id, path, depth, text, parent, ts, ts_end, status, provenance FROM chunks"
            " WHERE source = ? AND kind = 'summary'"
            # Documents and their folders (docsync) keep their own shape: never joined nor condensed.
            " AND json_extract(provenance, '$.document') IS NULL",
            (source,),
        ):
            directory = str(PurePosixPath(row["path"]).parent)
            title = _title_of(row["provenance"])
            level = _Level(
                row["id"],
                directory,
                row["depth"],
                title,
                row["text"],
                row["parent"],
                np.zeros(dim, np.float32),
                0,
                0,
                row["ts"],
                row["ts_end"],
                row["status"] == "stale",
            )
            levels[level.id] = level
            by_dir[directory] = level
        for level in levels.values():
            if level.parent in levels:
                levels[level.parent].children += 1
        fresh: list[_Leaf] = []
        for row in conn.execute(
            "SELECT c.id, c.path, c.tokens, c.ts, c.status, c.speaker, c.file_mtime_ns, c.file_size,"
            " c.file_hash, c.session, c.supersedes, c.superseded_by, v.vec"
            " FROM chunks c LEFT JOIN vectors v ON v.id = c.id AND v.model = ?"
            " WHERE c.source = ? AND c.kind = 'leaf'",
            (model, source),
        ):
            if row["vec"] is None:
                continue  # not embedded yet: it waits in _fresh/ for its admit job
            vec = np.frombuffer(row["vec"], dtype="<f4").astype(np.float32)
            path = row["path"]
            if path.startswith(fresh_prefix):
                if row["status"] == Status.PENDING.value:
                    continue
                fresh.append(
                    _Leaf(
                        row["id"],
                        path,
                        row["tokens"],
                        vec,
                        row["ts"],
                        row["status"],
                        row["speaker"],
                        "",
                        row["file_mtime_ns"],
                        row["file_size"],
                        row["file_hash"],
                        row["session"],
                        row["supersedes"],
                        row["superseded_by"],
                    )
                )
                continue
            parent_dir = str(PurePosixPath(path).parent)
            while parent_dir.startswith(root + "/"):
                holder = by_dir.get(parent_dir)
                if holder is not None:
                    holder.vec_sum = holder.vec_sum + vec
                    holder.leaves += 1
                    holder.tokens += row["tokens"]
                    if holder.depth == 1 and str(PurePosixPath(path).parent) == parent_dir:
                        holder.children += 1
                        if row["session"]:
                            holder.sessions.add(row["session"])
                parent_dir = str(PurePosixPath(parent_dir).parent)
        fresh.sort(key=lambda leaf: (leaf.ts or "", leaf.path))
        return cls(source, root, fresh, levels, dim, model)

    def tail_and_buffer(self, s: CompactSettings) -> tuple[list[_Leaf], list[_Leaf]]:
        """(buffer, tail): the tail is the newest leaves, kept verbatim in _fresh/."""
        kept = 0
        tokens = 0
        for leaf in reversed(self.fresh):
            if kept >= s.fresh_keep_leaves or tokens + leaf.tokens > s.fresh_keep_tokens:
                break
            kept += 1
            tokens += leaf.tokens
        cut = len(self.fresh) - kept
        return self.fresh[:cut], self.fresh[cut:]

    def ancestors(self, level_id: str) -> list[_Level]:
        out = []
        current = self.levels.get(level_id)
        while current is not None and current.parent is not None:
            current = self.levels.get(current.parent)
            if current is not None:
                out.append(current)
        return out


def _title_of(provenance: str) -> str:
    return str(_prov(provenance).get("title") or "")


def buffer_ready(state: SourceState, s: CompactSettings, now: float, *, force: bool = False) -> bool:
    buffer, _ = state.tail_and_buffer(s)
    if not buffer:
        return False
    if force:
        return True
    if len(buffer) >= s.seal_min_leaves or sum(leaf.tokens for leaf in buffer) >= s.seal_min_tokens:
        return True
    return buffer_age(state, s, now) >= s.max_wait_s


def buffer_age(state: SourceState, s: CompactSettings, now: float) -> float:
    buffer, _ = state.tail_and_buffer(s)
    if not buffer:
        return 0.0
    return now - min(leaf.mtime_ns for leaf in buffer) / 1e9


# -- planning -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EmbedAhead:
    """What a seal pass asks its caller to run without the write lock before the next step
    (``Planner.embed_ahead``): embedding only, into the pass's ``Remembering``; nothing is written."""

    run: Callable[[], None]


@dataclass
class Planner:
    conn: sqlite3.Connection
    layout: Layout
    settings: CompactSettings
    extractive: ExtractiveSummariser = field(default_factory=ExtractiveSummariser)
    llm_later: bool = False  # mark new levels stale so the configured LLM re-summarises them
    # Given the texts of the embedding calls a seal batch's new levels will make, in order, embeds them
    # together beforehand (``embed.Remembering.prepare``); the calls then find their rows remembered.
    prepare: Callable[[list[list[str]]], None] | None = None
    # ``seal`` also yields, before each batch's step, an ``EmbedAhead``: its caller runs it without the
    # write lock (the pool), so the batch's calls are embedded while other jobs write; the step itself,
    # planned under the lock as before, then finds its rows remembered. Off: steps only (a dry run).
    embed_ahead: bool = False
    _numbers: dict[str, int] = field(default_factory=dict)  # parent folder -> last number handed out
    # The clustering of the batch last embedded ahead (its leaves' ids -> carried, groups): the step
    # planned next reuses it when its batch is the same (clustering is a pure function of the batch).
    _grouped: dict[tuple[str, ...], tuple[list[int], list[list[int]]]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # leaves left in _fresh/: edited while sealing

    def seal(self, state: SourceState, *, force: bool = False) -> Iterator[TreeOp | EmbedAhead]:
        """Seal the buffer beyond the fresh tail in bounded batches, oldest first (with ``embed_ahead``,
        each batch's step comes after an ``EmbedAhead`` for its calls)."""
        s = self.settings
        buffer, _tail = state.tail_and_buffer(s)
        if not buffer:
            return
        ready = (
            force or len(buffer) >= s.seal_min_leaves or sum(x.tokens for x in buffer) >= s.seal_min_tokens
        )
        if not ready:
            return
        self._load_texts(buffer)
        for start in range(0, len(buffer), s.cluster_batch):
            batch = buffer[start : start + s.cluster_batch]
            small = len(batch) < s.seal_min_leaves and sum(x.tokens for x in batch) < s.seal_min_tokens
            if small and not force and start > 0:
                break
            if self.embed_ahead and self.prepare is not None:
                ahead = [leaf for leaf in batch if self._unchanged(leaf)]
                if ahead:
                    yield EmbedAhead(functools.partial(self._embed_ahead, state, ahead))
            # Planned under the write lock, so this sees the files as the step will: a leaf a person
            # (an editor) changed since it was indexed stays in _fresh/ until the change is read.
            batch = [leaf for leaf in batch if self._as_indexed(leaf)]
            if batch:
                yield self._seal_batch(state, batch)
            self._grouped.clear()

    def _unchanged(self, leaf: _Leaf) -> bool:
        """Whether the leaf's file is still the one indexed (``_as_indexed`` without the note)."""
        path = self.layout.abs(leaf.path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        return (st.st_size, st.st_mtime_ns) == (leaf.size, leaf.mtime_ns) or fsio.file_hash(
            path
        ) == leaf.file_hash

    def _as_indexed(self, leaf: _Leaf) -> bool:
        if self._unchanged(leaf):
            return True
        if not self.layout.abs(leaf.path).exists():
            self.skipped.append(f"{leaf.path}: gone while sealing (an editor saving it?); left out")
            return False
        self.skipped.append(
            f"{leaf.path}: changed on disk since it was indexed; left in _fresh/ until re-read"
        )
        return False

    def _load_texts(self, leaves: Sequence[_Leaf]) -> None:
        by_id = {leaf.id: leaf for leaf in leaves}
        for part, marks in index.in_batches(list(by_id)):
            for row in self.conn.execute(f"SELECT id, text FROM chunks WHERE id IN ({marks})", part):
                by_id[row["id"]].text = row["text"]

    def _embed_ahead(self, state: SourceState, batch: list[_Leaf]) -> None:
        """Without the write lock: the embedding calls the step of ``batch`` will make (its new levels'
        summaries, as ``_seal_batch`` hands them to ``prepare``), embedded now. Only ``state`` is read,
        which nothing but this pass changes, so the step finds the same groups (reused, not clustered
        again) and its ``prepare`` nothing left to embed; a leaf edited meanwhile changes the batch and
        the step clusters and prepares its own."""
        self._prepared(state, batch)

    def _prepared(self, state: SourceState, batch: list[_Leaf]) -> tuple[Vector, list[int], list[list[int]]]:
        """The batch's vectors and ``_groups``, once the embedding calls of the new levels those groups
        will make have gone to ``prepare`` (all at once; before the step, ``_embed_ahead``, or by it)."""
        matrix = np.stack([leaf.vec for leaf in batch])
        carried, groups = self._groups(state, batch, matrix)
        if self.prepare is not None:
            self.prepare(
                [
                    call
                    for members in self._new_groups(state, batch, matrix, carried, groups)
                    for call in self.extractive.embed_calls(_bucket_children([batch[i] for i in members]))
                ]
            )
        return matrix, carried, groups

    def _groups(
        self, state: SourceState, batch: list[_Leaf], matrix: Vector
    ) -> tuple[list[int], list[list[int]]]:
        """The batch's leaves carried into their session's levels, and the clusters of the rest."""
        key = tuple(leaf.id for leaf in batch)
        if key in self._grouped:
            return self._grouped[key]
        s = self.settings
        caps = cluster.Caps(
            s.bucket_target_leaves, s.bucket_min_leaves, s.bucket_max_leaves, s.bucket_max_tokens
        )
        numbers = episodes(batch, s.episode_gap_s)
        # The rest of a session the last seal cut, too short for a level: each of its turns goes on in
        # the closest of that session's levels with room, not wherever it is closest in meaning.
        carried = [i for i, e in enumerate(numbers) if e == numbers[0]] if batch[0].session else []
        if len(carried) >= s.bucket_target_leaves or not any(
            batch[0].session in lv.sessions for lv in state.levels.values() if lv.depth == 1
        ):
            carried = []
        rest = list(range(len(carried), len(batch)))
        # A chat's sessions are sealed apart (its short pieces join their own session's levels, and a
        # small group of turns that say little joins its own session or the nearest one, by time).
        apart = any(leaf.session for leaf in batch)
        found = cluster.group(
            matrix[rest],
            [batch[i].tokens for i in rest],
            caps,
            [numbers[i] for i in rest],
            apart=apart,
            little=[_says_little(batch[i]) for i in rest] if apart else None,
        )
        groups = [[rest[i] for i in members] for members in found]
        # A group of reactions only joins its conversation's closest level after the others made theirs.
        groups.sort(key=lambda members: _reactions_only([batch[i] for i in members]))
        self._grouped[key] = (carried, groups)
        return carried, groups

    def _seal_batch(self, state: SourceState, batch: list[_Leaf]) -> TreeOp:
        s = self.settings
        matrix, carried, groups = self._prepared(state, batch)
        writes: list[FileWrite] = []
        moves: list[tuple[str, str]] = []
        stale: dict[str, _Level] = {}
        sealed_into: list[str] = []
        created: list[_Level] = []

        def join(members: list[int], threshold: float) -> bool:
            target = self._try_join(state, batch, matrix, members, threshold)
            if target is None:
                return False
            for i in members:
                moves.append((batch[i].path, f"{target.dir}/{PurePosixPath(batch[i].path).name}"))
            for level in [target, *state.ancestors(target.id)]:
                stale[level.id] = level
            return True

        left = [i for i in carried if not join([i], -np.inf)]  # its session's levels are full
        merged = len(carried) - len(left)
        for members in ([left] if left else []) + groups:
            if join(members, _join_threshold(s, [batch[i] for i in members])):
                merged += len(members)
                continue
            leaves = [batch[i] for i in members]
            level, write = self._new_bucket(state, leaves)
            writes.append(write)
            created.append(level)
            for leaf in leaves:
                moves.append((leaf.path, f"{level.dir}/{PurePosixPath(leaf.path).name}"))
            sealed_into.append(PurePosixPath(level.dir).name + "/")
        moved_ids = {leaf.id for leaf in batch}
        state.fresh = [leaf for leaf in state.fresh if leaf.id not in moved_ids]
        # A later cluster of this batch may have joined a level the batch itself created: its file is
        # written stale (its summary does not cover those leaves yet), so nothing above trusts it.
        for i, write in enumerate(writes):
            node = parse_summary(write.data, write.path)[0]
            if node.id in stale and not node.stale:
                joined = replace(node, stale=True, children_hash="")
                writes[i] = FileWrite(write.path, render_summary(joined), None)
        writes.extend(self._stale_writes(stale.values()))
        for level in stale.values():
            level.stale = True
        queued = [(lv.id, lv.depth) for lv in stale.values()]
        if self.llm_later:
            queued.extend((lv.id, lv.depth) for lv in created)
        parts = []
        if sealed_into:
            shown = ", ".join(sealed_into[:3]) + (
                f" and {len(sealed_into) - 3} more" if len(sealed_into) > 3 else ""
            )
            parts.append(f"seal {len(batch) - merged} leaves into {shown}")
        if merged:
            parts.append(f"merge {merged} leaves into {len(stale)} existing level(s)")
        message = f"memory: {'; '.join(parts)} ({state.source})"
        return TreeOp("seal", state.source, message, tuple(writes), tuple(moves), tuple(queued), {})

    def _new_groups(
        self,
        state: SourceState,
        batch: list[_Leaf],
        matrix: Vector,
        carried: list[int],
        groups: list[list[int]],
    ) -> list[list[int]]:
        """The groups of ``_seal_batch`` that will become new levels, in the order it makes them: its
        joins played on a copy of the levels (a new level stands in with the leaves' sums: joining
        reads those, never a summary)."""
        s = self.settings
        copy = replace(
            state, levels={k: replace(lv, sessions=set(lv.sessions)) for k, lv in state.levels.items()}
        )

        def join(members: list[int], threshold: float) -> bool:
            return self._try_join(copy, batch, matrix, members, threshold) is not None

        left = [i for i in carried if not join([i], -np.inf)]
        out: list[list[int]] = []
        for members in ([left] if left else []) + groups:
            if join(members, _join_threshold(s, [batch[i] for i in members])):
                continue
            out.append(members)
            level = _bucket_level(f"\x00new {len(out)}", "", "", "", [batch[i] for i in members])
            copy.levels[level.id] = level
        return out

    def _try_join(
        self, state: SourceState, batch: list[_Leaf], matrix: Vector, members: list[int], threshold: float
    ) -> _Level | None:
        """Join ``batch[members]`` to the level ``_join_target`` picks (absorbed into ``state``); that
        level, or None when none takes them. The one join decision of sealing and of its replay."""
        leaves = [batch[i] for i in members]
        center = cluster.centroid(matrix[members])
        target = self._join_target(state, center, leaves, sum(leaf.tokens for leaf in leaves), threshold)
        if target is not None:
            self._absorb(state, target, leaves)
        return target

    def _join_target(
        self, state: SourceState, center: Vector, leaves: Sequence[_Leaf], tokens: int, threshold: float
    ) -> _Level | None:
        """The closest depth-1 level with room, when it is within ``threshold``; for a chat, only a level
        its conversation goes on from (``continues``)."""
        s = self.settings
        n = len(leaves)
        levels = [
            lv
            for lv in state.levels.values()
            if lv.depth == 1 and lv.leaves > 0 and continues(lv, leaves, s.episode_gap_s)
        ]
        if not levels:
            return None
        room = np.array(
            [
                lv.leaves + n <= s.bucket_max_leaves and lv.tokens + tokens <= s.bucket_max_tokens
                for lv in levels
            ]
        )
        sims = np.stack([lv.vec_sum for lv in levels]) @ center
        norms = np.linalg.norm(np.stack([lv.vec_sum for lv in levels]), axis=1)
        sims = np.where(room & (norms > 0), sims / np.maximum(norms, 1e-12), -np.inf)
        best = int(np.argmax(sims))
        return levels[best] if sims[best] >= threshold and np.isfinite(sims[best]) else None

    def _absorb(self, state: SourceState, target: _Level, leaves: Sequence[_Leaf]) -> None:
        total = np.sum([leaf.vec for leaf in leaves], axis=0)
        for level in [target, *state.ancestors(target.id)]:
            level.vec_sum = level.vec_sum + total
            level.leaves += len(leaves)
            level.tokens += sum(leaf.tokens for leaf in leaves)
        target.children += len(leaves)
        target.sessions.update(leaf.session for leaf in leaves if leaf.session)
        stamps = [ts for ts in (target.latest, *(leaf.ts for leaf in leaves)) if ts]
        target.latest = max(stamps, key=lambda ts: parse_ts(ts) or _EPOCH) if stamps else None

    def _new_bucket(self, state: SourceState, leaves: Sequence[_Leaf]) -> tuple[_Level, FileWrite]:
        children = _bucket_children(leaves)
        centre = cluster.centroid(np.stack([leaf.vec for leaf in leaves]))
        result = self.extractive.summarise(children, 1, apart=_beside(state, centre, 1, set()))
        title = clean_title(result.title)
        directory = self._new_dir(state, state.root, title)
        stamps = [leaf.ts for leaf in leaves if leaf.ts]
        node = SummaryNode(
            id=summary_id(state.source, f"{leaves[0].id}:{directory}"),
            source=state.source,
            path=f"{directory}/{SUMMARY_NAME}",
            depth=1,
            title=title,
            text=result.text,
            children=tuple(ChildLink(_leaf_label(leaf), PurePosixPath(leaf.path).name) for leaf in leaves),
            descendants=len(leaves),
            earliest=parse_ts(min(stamps)) if stamps else None,
            latest=parse_ts(max(stamps)) if stamps else None,
            stale=self.llm_later,
            summariser=result.summariser,
            content_hash=text_hash(result.text),
            # Only a final summary records its inputs; one the LLM is still to write stays stale.
            children_hash=""
            if self.llm_later
            else children_fingerprint(
                (leaf.id, validity.fingerprint_part(text_hash(leaf.text), leaf.superseded_by))
                for leaf in leaves
            ),
        )
        level = _bucket_level(node.id, directory, title, node.searchable, leaves, stale=self.llm_later)
        state.levels[level.id] = level
        return level, FileWrite(node.path, render_summary(node), None)

    def _new_dir(self, state: SourceState, parent_dir: str, title: str) -> str:
        """A new numbered folder name under ``parent_dir``: one more than any number in use there."""
        if parent_dir not in self._numbers:
            taken = [
                PurePosixPath(lv.dir).name
                for lv in state.levels.values()
                if _parent_dir(lv.dir) == parent_dir
            ]
            fs_dir = self.layout.abs(parent_dir)
            if fs_dir.is_dir():
                taken.extend(p.name for p in fs_dir.iterdir())
            numbers = [int(m.group(1)) for m in (_NUMBERED.match(n) for n in taken) if m]
            self._numbers[parent_dir] = max(numbers, default=0)
        self._numbers[parent_dir] += 1
        return f"{parent_dir}/{self._numbers[parent_dir]:02d}-{folder_slug(title) or 'level'}"

    def _stale_writes(self, levels: Iterable[_Level]) -> list[FileWrite]:
        out = []
        for level in levels:
            path = self.layout.abs(f"{level.dir}/{SUMMARY_NAME}")
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            # The file says whether it is stale, not the picture: a worker may have re-summarised the
            # level since the picture was loaded, and a merge into it must then mark it (and record it).
            new = set_stale_line(data, True)
            if new is None:
                try:
                    node, doc = parse_summary(data.decode("utf-8-sig"), f"{level.dir}/{SUMMARY_NAME}")
                except (FrontmatterError, UnicodeDecodeError):
                    continue
                new = render_summary(replace(node, stale=True), keep=doc).encode("utf-8")
            if new != data:
                out.append(
                    FileWrite(f"{level.dir}/{SUMMARY_NAME}", new.decode("utf-8"), fsio.sha256_bytes(data))
                )
        return out

    # -- condensation ---------------------------------------------------------------------------------
    def condense(self, state: SourceState) -> Iterator[TreeOp]:
        """Group sibling levels at the source's top under new parents, depth by depth, while any depth
        has ``condense_fanout`` or more of them."""
        s = self.settings
        depth = 1
        while True:
            top = [lv for lv in state.levels.values() if lv.parent is None]
            if not any(lv.depth >= depth for lv in top):
                return
            peers = sorted(
                (lv for lv in top if lv.depth == depth), key=lambda lv: (lv.earliest or "", lv.dir)
            )
            if len(peers) < s.condense_fanout:
                depth += 1
                continue
            op = self._condense_peers(state, peers, depth)
            if op is None:
                depth += 1
                continue
            yield op

    def _condense_peers(self, state: SourceState, peers: list[_Level], depth: int) -> TreeOp | None:
        s = self.settings
        self._refresh(peers)
        moves: list[tuple[str, str]] = []
        writes: list[FileWrite] = []
        stale: dict[str, _Level] = {}
        parents_top = [lv for lv in state.levels.values() if lv.parent is None and lv.depth == depth + 1]
        rest: list[_Level] = []
        joined = 0
        for peer in peers:
            best: tuple[float, _Level] | None = None
            for parent in parents_top:
                if parent.children >= s.condense_fanout * 2:
                    continue
                sim = float(parent.centroid @ peer.centroid)
                if sim >= s.merge_threshold and (best is None or sim > best[0]):
                    best = (sim, parent)
            if best is None:
                rest.append(peer)
                continue
            moves.extend(self._move_level(state, peer, best[1]))
            stale[best[1].id] = best[1]
            joined += 1
        created = []
        if len(rest) >= 2:
            matrix = np.stack([lv.centroid for lv in rest])
            caps = cluster.Caps(s.condense_target, 2, s.condense_fanout, 1 << 30)
            groups = [
                [rest[i] for i in m] for m in cluster.group(matrix, [1] * len(rest), caps) if len(m) >= 2
            ]
            # Each new parent's children as its summariser reads them (with their leaves: read once).
            kids_of = [_parent_kids(c, self.conn, state.model) for c in groups]
            if self.prepare is not None:  # the new parents' embedding calls, all at once
                self.prepare([call for kids in kids_of for call in self.extractive.embed_calls(kids)])
            background = _background(state) if groups else None
            for children, kids in zip(groups, kids_of, strict=True):
                parent, write = self._new_parent(state, children, kids, depth + 1, background)
                writes.append(write)
                created.append(parent)
                for child in children:
                    moves.extend(self._move_level(state, child, parent))
        if not moves:
            return None
        writes.extend(self._stale_writes(stale.values()))
        for level in stale.values():
            level.stale = True
        queued = [(lv.id, lv.depth) for lv in stale.values()]
        queued.extend((lv.id, lv.depth) for lv in created if lv.stale)
        names = ", ".join(PurePosixPath(p.dir).name + "/" for p in created[:3])
        parts = []
        if created:
            parts.append(f"condense {sum(p.children for p in created)} levels under {names}")
        if joined:
            parts.append(f"move {joined} levels under existing parents")
        return TreeOp(
            "condense",
            state.source,
            f"memory: {'; '.join(parts)} ({state.source})",
            tuple(writes),
            tuple(moves),
            tuple(queued),
            {},
        )

    def _refresh(self, levels: Sequence[_Level]) -> None:
        """Take each level's text and stale flag from the index again: between two steps of a pass (the
        lock is let go) a worker may have re-summarised one, and a parent written from the text in the
        picture would summarise, and record as its inputs, a text that is gone."""
        by_id = {lv.id: lv for lv in levels}
        for part, marks in index.in_batches(list(by_id)):
            for row in self.conn.execute(f"SELECT id, text, status FROM chunks WHERE id IN ({marks})", part):
                level = by_id[row["id"]]
                level.text = row["text"]
                level.stale = row["status"] == "stale"

    def _move_level(self, state: SourceState, child: _Level, parent: _Level) -> list[tuple[str, str]]:
        old = child.dir
        new = f"{parent.dir}/{PurePosixPath(old).name}"
        kids: dict[str | None, list[_Level]] = {}
        for level in state.levels.values():
            kids.setdefault(level.parent, []).append(level)
        if any(k.dir == new for k in kids.get(parent.id, [])) or self.layout.abs(new).exists():
            new = self._new_dir(state, parent.dir, child.title)  # the name is taken there: renumber
        self._rename(child, new, kids)
        child.parent = parent.id
        parent.children += 1
        parent.vec_sum = parent.vec_sum + child.vec_sum
        parent.leaves += child.leaves
        parent.tokens += child.tokens
        return [(old, new)]

    def _rename(self, level: _Level, new: str, kids: dict[str | None, list[_Level]]) -> None:
        old = level.dir
        level.dir = new
        for child in kids.get(level.id, []):
            self._rename(child, new + child.dir[len(old) :], kids)

    def _new_parent(
        self,
        state: SourceState,
        children: list[_Level],
        kids: list[Child],
        depth: int,
        background: Background | None = None,
    ) -> tuple[_Level, FileWrite]:
        """A new level over ``children``, summarised from ``kids`` (``_parent_kids(children, …)``)."""
        centre = cluster.centroid(np.stack([lv.centroid for lv in children]), [lv.leaves for lv in children])
        result = self.extractive.summarise(
            kids, depth, apart=_beside(state, centre, depth, set()), background=background
        )
        title = clean_title(result.title)
        directory = self._new_dir(state, state.root, title)
        early = [lv.earliest for lv in children if lv.earliest]
        late = [lv.latest for lv in children if lv.latest]
        stale = self.llm_later or any(lv.stale for lv in children)
        node = SummaryNode(
            id=summary_id(state.source, f"{children[0].id}:{directory}"),
            source=state.source,
            path=f"{directory}/{SUMMARY_NAME}",
            depth=depth,
            title=title,
            text=result.text,
            children=tuple(
                ChildLink(lv.title, f"{PurePosixPath(lv.dir).name}/{SUMMARY_NAME}") for lv in children
            ),
            descendants=sum(lv.leaves for lv in children),
            earliest=parse_ts(min(early)) if early else None,
            latest=parse_ts(max(late)) if late else None,
            stale=stale,
            summariser=result.summariser,
            content_hash=text_hash(result.text),
            children_hash=""
            if stale
            else children_fingerprint((lv.id, text_hash(lv.text)) for lv in children),
        )
        level = _Level(
            node.id,
            directory,
            depth,
            title,
            node.searchable,
            None,
            np.zeros(state.dim, np.float32),  # _move_level adds each child as it moves in
            0,
            0,
            min(early) if early else None,
            max(late) if late else None,
            stale,
            0,
        )
        state.levels[level.id] = level
        return level, FileWrite(node.path, render_summary(node), None)


def _reactions_only(leaves: Sequence[_Leaf]) -> bool:
    """A chat's group in which no sentence could open a summary (``summarise.says_little``): four
    reactions to a photo ("Wow, did you make that? It looks so real!"). As a level of its own, its
    summary could only open with one of them."""
    return any(leaf.session or leaf.speaker for leaf in leaves) and all(
        says_little(leaf.text) for leaf in leaves
    )


def _says_little(leaf: _Leaf) -> bool:
    """A turn that is only a reaction, a greeting or a "yes" (``says_little``), or one dropped at ingest."""
    return leaf.status == Status.DROPPED.value or says_little(leaf.text)


def _join_threshold(s: CompactSettings, leaves: Sequence[_Leaf]) -> float:
    """How alike a level must be for the group ``leaves`` to join it: ``merge_threshold``, but any
    likeness for reactions only, which belong with what they react to. ``continues`` still keeps a chat's
    group to the levels its conversation goes on in; with none that has room, it is a level as before."""
    return -np.inf if _reactions_only(leaves) else s.merge_threshold


def _bucket_children(leaves: Sequence[_Leaf]) -> list[Child]:
    """What a new level's summary is made from: its leaves (dropped ones only when all are)."""
    readable = [leaf for leaf in leaves if leaf.status != Status.DROPPED.value] or list(leaves)
    return [
        Child(
            validity.marked(leaf.text, leaf.supersedes, leaf.superseded_by),
            leaf.vec,
            speaker=leaf.speaker,
            ts=parse_ts(leaf.ts),
            weight=validity.SUPERSEDED_WEIGHT if validity.listed(leaf.superseded_by) else 1.0,
        )
        for leaf in readable
    ]


def _bucket_level(
    level_id: str, directory: str, title: str, text: str, leaves: Sequence[_Leaf], *, stale: bool = False
) -> _Level:
    """A new depth-1 level over ``leaves``."""
    stamps = [leaf.ts for leaf in leaves if leaf.ts]
    return _Level(
        level_id,
        directory,
        1,
        title,
        text,
        None,
        np.sum([leaf.vec for leaf in leaves], axis=0).astype(np.float32),
        len(leaves),
        sum(leaf.tokens for leaf in leaves),
        min(stamps) if stamps else None,
        max(stamps) if stamps else None,
        stale,
        len(leaves),
        {leaf.session for leaf in leaves if leaf.session},
    )


def _background(state: SourceState) -> Background:
    """The words of the source's depth-1 levels (their summaries, in time order): what a summary above
    depth 1 tells its subject's words from (``summarise.Background``)."""
    ones = sorted(
        (lv for lv in state.levels.values() if lv.depth == 1), key=lambda lv: (lv.earliest or "", lv.dir)
    )
    return Background.of([lv.text for lv in ones])


def _background_rows(conn: sqlite3.Connection, source: str) -> Background:
    """``_background`` from the index, for re-summarising a level above depth 1."""
    rows = conn.execute(
        "SELECT text FROM chunks WHERE kind = 'summary' AND source = ? AND depth = 1 AND path LIKE ?"
        " AND json_extract(provenance, '$.document') IS NULL ORDER BY ts, path",
        (source, f"{SOURCES}/%"),
    )
    return Background.of([r[0] for r in rows])


def _beside(state: SourceState, centre: Vector, depth: int, exclude: set[str]) -> Vector | None:
    """The summary directions of the levels of ``depth`` in this source closest to ``centre`` (the ones
    a new level's title must stand out from), or None."""
    rows = [
        lv.vec_sum
        for lv in state.levels.values()
        if lv.depth == depth and lv.id not in exclude and float(np.linalg.norm(lv.vec_sum)) > 0
    ]
    return neighbours(centre, np.stack(rows)) if rows else None


def _beside_rows(conn: sqlite3.Connection, node: SummaryNode, ts: str | None, model: str) -> Vector | None:
    """The vectors of the levels of the same source and depth nearest in time to ``node`` (up to
    ``_NEAR_IN_TIME`` on each side, by the kind/ts index), or None. Re-summarising tells these to the
    summariser, which keeps the ``NEIGHBOURS`` most alike (``summarise.neighbours``)."""
    if ts is None:
        return None
    found: list[bytes] = []
    for op, order in (("<=", "DESC"), (">", "ASC")):
        found += [
            r[0]
            for r in conn.execute(
                "SELECT v.vec FROM chunks c JOIN vectors v ON v.id = c.id AND v.model = ?"
                f" WHERE c.kind = 'summary' AND c.ts {op} ? AND c.source = ? AND c.depth = ? AND c.id <> ?"
                f" AND c.path LIKE ? ORDER BY c.ts {order} LIMIT ?",
                (model, ts, node.source, node.depth, node.id, f"{SOURCES}/%", _NEAR_IN_TIME),
            )
        ]
    if not found:
        return None
    return np.stack([np.frombuffer(b, dtype="<f4") for b in found]).astype(np.float32)


def continues(level: _Level, leaves: Sequence[_Leaf], gap_s: float) -> bool:
    """May ``leaves`` (a group of one seal) join ``level``? Always, unless they are a chat (a session or
    a speaker): then only where their conversation goes on, as ``episodes`` draws it: a session of theirs
    is one of the level's, or (no sessions) their first turn follows the level's last within ``gap_s``.
    Without this a group of one session joined the closest level in meaning, which in a chat between two
    people is often another day's (LoCoMo: half the levels mixed sessions)."""
    sessions = {leaf.session for leaf in leaves if leaf.session}
    if sessions:
        return bool(sessions & level.sessions)
    if not any(leaf.speaker for leaf in leaves):
        return True
    first = min((ts for ts in (parse_ts(leaf.ts) for leaf in leaves) if ts is not None), default=None)
    last = parse_ts(level.latest) if level.latest else None
    if first is None or last is None:
        return True
    return abs((first - last).total_seconds()) <= gap_s


def episodes(leaves: Sequence[_Leaf], gap_s: float) -> list[int]:
    """An episode number per leaf (in their chronological order): a new one starts where the session
    changes or after a pause longer than ``gap_s``, so a level holds one conversation's span, not
    whatever else was said close to it in meaning."""
    out: list[int] = []
    prev: _Leaf | None = None
    prev_ts: datetime | None = None
    n = 0
    for leaf in leaves:
        ts = parse_ts(leaf.ts)
        if prev is not None:
            new_session = leaf.session != prev.session and (leaf.session or prev.session) is not None
            pause = ts is not None and prev_ts is not None and (ts - prev_ts).total_seconds() > gap_s
            n += int(new_session or pause)
        out.append(n)
        prev, prev_ts = leaf, ts or prev_ts
    return out


def _parent_kids(children: Sequence[_Level], conn: sqlite3.Connection, model: str) -> list[Child]:
    """What a new parent of ``children`` is summarised from (``Planner._new_parent``), each child with the
    leaves under it (``leaf_children``)."""
    return [
        Child(
            lv.text,
            lv.centroid,
            title=lv.title,
            ts=parse_ts(lv.earliest),
            weight=float(max(1, lv.leaves)),
            leaves=leaf_children(conn, lv.dir, model, lv.centroid),
        )
        for lv in children
    ]


def leaf_children(
    conn: sqlite3.Connection, directory: str, model: str, centre: Vector | None
) -> tuple[Child, ...]:
    """The leaves under the level in ``directory``, in time order, as its parent's summariser reads them
    (``Child.leaves``: above depth 1 their lines are candidates beside the level's own, ranked with the
    vectors stored for ``model``, so compaction embeds no more): at most ``summarise.LEAF_LINES``, those
    closest to ``centre`` (the level's vector; ``summarise.central``), whose texts alone are read. Dropped
    and superseded leaves are left out (an old value is not what a parent adds); a leaf that replaced one
    is marked as its level marks it (``validity.marked``)."""
    rows = [
        r
        for r in conn.execute(
            "SELECT c.id, c.status, c.superseded_by, v.vec FROM chunks c"
            " LEFT JOIN vectors v ON v.id = c.id AND v.model = ?"
            " WHERE c.kind = 'leaf' AND c.path >= ? AND c.path < ? ORDER BY coalesce(c.ts, ''), c.path",
            (model, *index.prefix_range(directory + "/")),
        )
        if r["status"] != Status.DROPPED.value and not validity.listed(r["superseded_by"])
    ]
    vecs = [
        np.frombuffer(r["vec"], dtype="<f4").astype(np.float32) if r["vec"] is not None else None
        for r in rows
    ]
    kept = central(vecs, centre)
    texts: dict[str, sqlite3.Row] = {}
    for part, marks in index.in_batches([rows[i]["id"] for i in kept]):
        for row in conn.execute(
            f"SELECT id, text, speaker, ts, supersedes FROM chunks WHERE id IN ({marks})", part
        ):
            texts[row["id"]] = row
    return tuple(
        Child(
            validity.marked(texts[rows[i]["id"]]["text"], texts[rows[i]["id"]]["supersedes"], None),
            vecs[i],
            speaker=texts[rows[i]["id"]]["speaker"],
            ts=parse_ts(texts[rows[i]["id"]]["ts"]),
        )
        for i in kept
        if rows[i]["id"] in texts
    )


def _parent_dir(path: str) -> str:
    return path.rsplit("/", 1)[0]


def _leaf_label(leaf: _Leaf) -> str:
    day = (leaf.ts or "")[:10]
    words = " ".join(leaf.text.split()[:10])
    who = f"{leaf.speaker}: " if leaf.speaker else ""
    return f"{day} {who}{words}".strip()


def summary_vectors(op: TreeOp, embedder: Embedder) -> None:
    """Embed the new and rewritten summaries of ``op`` (stale flags alone do not change the text)."""
    nodes = [parse_summary(w.data, w.path)[0] for w in op.writes if w.expected is None]
    if not nodes:
        return
    matrix = embedder.embed([n.searchable for n in nodes])
    for node, vec in zip(nodes, matrix, strict=True):
        op.vectors[node.id] = np.asarray(vec, dtype=np.float32)  # type: ignore[index]


def prune_sidecars(conn: sqlite3.Connection, layout: Layout, source: str, model: str, dim: int) -> int:
    """Drop sidecar entries of files that moved away (left behind on purpose while sealing)."""
    removed = 0
    base = layout.abs(f"{SOURCES}/{source}")
    for path in base.rglob(SIDECAR_NAME):
        current = sidecar.read(path.parent, model, dim)
        if current.problem is not None:
            continue
        gone = frozenset(name for name in current.entries if not (path.parent / name).exists())
        if gone:
            sidecar.update(layout, path.parent, model, dim, {}, remove=gone)
            removed += len(gone)
    return removed


# -- re-summarisation and stale marking -----------------------------------------------------------------


def _vectors_for(conn: sqlite3.Connection, ids: Sequence[str], model: str) -> dict[str, Vector]:
    return vectors.by_ids(conn, model, ids)


def resummarise(env: StepEnv, conn: sqlite3.Connection, node_id: str) -> Resummarised:
    """A source tree's own re-summarise: write a fresh summary of one level from its current children.
    The summariser (maybe a slow LLM) runs without the write lock; the write then checks that the file
    is still what was read."""
    layout, summariser, write_lock, max_bytes = env.layout, env.summariser, env.lock, env.max_bytes
    embedder = env.embedder()
    row = conn.execute(
        "SELECT path, depth, parent, ts FROM chunks WHERE id = ? AND kind = 'summary'", (node_id,)
    ).fetchone()
    if row is None:
        return Resummarised("gone")
    rel = row["path"]
    path = layout.abs(rel)
    try:
        text, digest = fsio.read_text_guarded(path, max_bytes)
    except FileNotFoundError:
        with write_lock():  # a condensation step in flight has moved the file but not yet its row
            moved = conn.execute("SELECT path FROM chunks WHERE id = ?", (node_id,)).fetchone()
            still_missing = not layout.abs(rel).exists()
        if moved is None:
            return Resummarised("gone")
        if moved[0] != rel or not still_missing:
            # Condensation moved the folder between the two reads: try again at its new place.
            return Resummarised("defer", notes=(f"{rel} moved to {moved[0]}; retrying there",))
        # The file is gone but its row is not (deleted by hand): an attempt that counts, so a vault
        # that never gets reconciled parks this job instead of retrying it for ever.
        return Resummarised("missing", notes=(f"{rel} is missing; `vaultmem check --fix` reconciles it",))
    node, doc = parse_summary(text, rel)
    leaves, subs = children_of(conn, node.directory)
    if _children_pending(conn, [(sub["id"], sub["depth"]) for sub in subs if sub["status"] == "stale"]):
        return Resummarised("defer", notes=("a child level is still stale; its parent waits",))
    fingerprint = fingerprint_rows([*leaves, *subs])
    if node.children_hash == fingerprint and not node.hand_edited:
        # Written from exactly these children (git restored both, or the change that marked it was
        # undone): the summary is current as it is; only its stale flag goes.
        return _unstale(conn, layout, node, text, digest, write_lock)
    model = embedder.model_id
    vecs = _vectors_for(conn, [r["id"] for r in leaves] + [r["id"] for r in subs], model)
    readable = [r for r in leaves if r["status"] != Status.DROPPED.value] or leaves
    kids = [
        Child(
            validity.marked(r["text"], r["supersedes"], r["superseded_by"]),
            vecs.get(r["id"]),
            speaker=r["speaker"],
            ts=parse_ts(r["ts"]),
            weight=validity.SUPERSEDED_WEIGHT if validity.listed(r["superseded_by"]) else 1.0,
        )
        for r in readable
    ] + [
        Child(
            r["text"],
            vecs.get(r["id"]),
            title=_title_of(r["provenance"]),
            ts=parse_ts(r["ts"]),
            weight=float(max(1, int(str(_prov(r["provenance"]).get("descendants", 1))))),
            leaves=leaf_children(conn, str(PurePosixPath(r["path"]).parent), model, vecs.get(r["id"])),
        )
        for r in subs
    ]
    beside = _beside_rows(conn, node, row["ts"], model) if kids else None
    if beside is not None and vecs:
        centre = cluster.centroid(np.stack(list(vecs.values())))
        beside = neighbours(centre, beside) if centre.shape[0] == beside.shape[1] else None
    background = _background_rows(conn, node.source) if kids and node.depth >= 2 else None
    result = summarise_apart(summariser, kids, node.depth, beside, background) if kids else None
    notes = list(result.notes) if result else []
    prefix = node.directory + "/"
    count, earliest, latest = conn.execute(
        "SELECT count(*), min(ts), max(ts) FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?",
        index.prefix_range(prefix),
    ).fetchone()
    pinned = keep_hand_edit(node)
    if pinned != node.pinned:
        notes.append(f"{rel} was edited by hand: the edited text is kept under '## Pinned'")
    count += sum(1 for r in leaves if note_of(r["path"]) is not None)  # a note's sections, in place
    links = [
        _leaf_link(node, r)
        if r["kind"] == "leaf"
        else ChildLink(
            _title_of(r["provenance"]) or "level", f"{PurePosixPath(r['path']).parent.name}/{SUMMARY_NAME}"
        )
        for r in sibling_order([*leaves, *subs])  # the children list follows the reading order
    ]
    new_text = result.text if result else "(no memories left in this level)"
    # A title a person gave the level stays, as does its recorded engine hash (so it stays theirs).
    # A document's page and folder levels keep the document's own titles.
    title = node.title if node.title_edited or node.document or result is None else clean_title(result.title)
    new = replace(
        node,
        title=title,
        title_hash=node.title_hash if node.title_edited else "",
        text=new_text,
        pinned=pinned,
        children=tuple(links),
        descendants=int(count),
        earliest=parse_ts(earliest),
        latest=parse_ts(latest),
        stale=False,
        summariser=result.summariser if result else node.summariser,
        content_hash=text_hash(new_text),
        children_hash=fingerprint,
    )
    data = render_summary(new, keep=doc).encode("utf-8")
    vec = embedder.embed([new.searchable])[0]
    op = TreeOp(
        "resummarise",
        node.source,
        f"memory: re-summarise {PurePosixPath(node.directory).name}/ ({node.source})",
        (FileWrite(rel, data.decode("utf-8"), digest),),
        vectors={new.id: np.asarray(vec, dtype=np.float32)},
    )
    with write_lock():
        if current_fingerprint(conn, node.directory) != fingerprint:
            # A child was written (re-summarised, moved in or out) after its row was read: this text
            # would summarise what is gone, and nothing would mark it stale again.
            return Resummarised("defer", notes=(f"the children of {rel} changed meanwhile; retrying",))
        try:
            steps.apply(conn, layout, op, model, embedder.dim)
        except ConflictError:
            return Resummarised("defer", notes=(f"{rel} changed while it was being summarised; retrying",))
    return Resummarised("done", op.message, tuple(notes))


def _unstale(
    conn: sqlite3.Connection,
    layout: Layout,
    node: SummaryNode,
    text: str,
    digest: str,
    write_lock: Callable[[], AbstractContextManager[object]],
) -> Resummarised:
    """Clear the stale flag of a summary that still matches its children (no model call, no new text)."""
    if not node.stale:
        return Resummarised("done")
    data = text.encode("utf-8")
    new = set_stale_line(data, False)
    if new is None:
        doc = parse_summary(text, node.path)[1]
        new = render_summary(replace(node, stale=False), keep=doc).encode("utf-8")
    op = TreeOp("stale", node.source, "", (FileWrite(node.path, new.decode("utf-8"), digest),))
    with write_lock():
        if current_fingerprint(conn, node.directory) != node.children_hash:
            return Resummarised("defer", notes=(f"the children of {node.path} changed meanwhile; retrying",))
        try:
            steps.apply(conn, layout, op, "", 0)
        except ConflictError:
            return Resummarised("defer", notes=(f"{node.path} changed meanwhile; looking again",))
    return Resummarised("done")  # no message: nothing worth a line in the history


def _children_pending(conn: sqlite3.Connection, stale: Sequence[tuple[str, int]]) -> bool:
    """True while a stale child will still be re-summarised (its job is queued or running; a missing job
    is queued now). A child whose job is parked does not hold its parent back forever."""
    if not stale:
        return False
    # Read the flags again and queue in one write transaction: a child re-summarised since its row was
    # read (its job completed and gone) must not be queued a second time. A child's job completes only
    # after its row is current, so a child still stale inside this transaction still has its job (or
    # never had one), and the dedupe key keeps this from adding another.
    marks = ",".join("?" * len(stale))
    with atomic(conn):
        still = {
            r[0]
            for r in conn.execute(
                f"SELECT id FROM chunks WHERE status = 'stale' AND id IN ({marks})", [i for i, _ in stale]
            )
        }
        stale = [(i, depth) for i, depth in stale if i in still]
        JobQueue(conn).enqueue_many(resummarise_job(i, depth) for i, depth in stale)
    if not stale:
        return False
    keys = [f"resummarise:{i}" for i, _ in stale]
    marks = ",".join("?" * len(keys))
    row = conn.execute(
        f"SELECT count(*) FROM jobs WHERE dedupe_key IN ({marks}) AND state IN ('queued', 'running')", keys
    ).fetchone()
    return int(row[0]) > 0


def _prov(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _leaf_link(node: SummaryNode, row: sqlite3.Row) -> ChildLink:
    """A leaf's link from its level: its file name, or for a section of a note indexed in place the
    note's heading, labelled by its heading path (``wikilinks.section_link``)."""
    note = note_of(row["path"])
    if note is None:
        return ChildLink(_leaf_label_row(row), PurePosixPath(row["path"]).name)
    meta = _prov(row["provenance"])
    label = wikilinks.section_label(node.title, str(meta.get("heading_path") or ""))
    return wikilinks.section_link(label, note, wikilinks.section_anchor(meta), row["id"], node.directory)


def _leaf_label_row(row: sqlite3.Row) -> str:
    day = (row["ts"] or "")[:10]
    words = wikilinks.leaf_words(str(row["text"]), str(row["provenance"] or ""))
    who = f"{row['speaker']}: " if row["speaker"] else ""
    return f"{day} {who}{words}".strip()
