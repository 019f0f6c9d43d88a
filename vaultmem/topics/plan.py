"""Topic trees: ``topics/<slug>/``, one per hot entity, holding links to the leaves that mention it.

Owns routing a topic (``topic_route`` jobs), archiving and reviving it, and re-summarising its nodes.
A leaf lives in exactly one place on disk (its source tree); a topic refers to it with a wikilink
``[[<leaf file stem>|label]]``. Leaf file names embed the id and never change, so the links stay valid
however compaction moves the leaves. The topic's membership is the entity index (``mentions``, which
follows each leaf's ``entities`` frontmatter); the files say where each linked leaf sits in the topic.

    topics/<slug>/_summary.md                  the topic: latest state first, then its levels and the
                                               newest leaves (``keep_recent`` of them) as links
    topics/<slug>/NN-<first day>-<title>/      a sealed level: ``level_leaves`` consecutive leaves
    topics/_archive/<slug>/                    a topic gone cold: kept as it was, no longer routed

The buffer, seal and cascade rules are the source trees' (a buffer beyond a kept tail is sealed into
levels, ``condense_fanout`` levels of one depth are grouped under parents, depth by depth), with one
difference: a topic's leaves are already about one thing, so levels follow time, not similarity.
Every change is one ``treeops`` step (write-ahead note, hash-guarded writes, rows in one transaction).
Never prints.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from pathlib import PurePosixPath

import numpy as np

from vaultmem import entities, fsio, index, validity, vectors, wikilinks
from vaultmem.errors import FrontmatterError
from vaultmem.layout import SUMMARY_NAME, Layout, slug
from vaultmem.model import Status, parse_ts
from vaultmem.steps import FileWrite, TreeOp
from vaultmem.summarise import Child, ExtractiveSummariser
from vaultmem.summaryfile import (
    ChildLink,
    SummaryNode,
    children_fingerprint,
    clean_title,
    parse_summary,
    render_summary,
    summary_id,
    text_hash,
)
from vaultmem.topics.heat import HeatSettings
from vaultmem.topics.heat import settings_from as heat_settings_from

TOPICS = "topics"
ARCHIVE = "_archive"
SOURCE = "topics"  # the ``source`` of every topic summary
_NUMBERED = re.compile(r"^(\d+)-")


@dataclass(frozen=True)
class TopicSettings:
    """When topics are made, sealed and archived (``[topics]`` in config.toml)."""

    enabled: bool = True
    heat: HeatSettings = field(default_factory=HeatSettings)
    keep_recent: int = 12  # the newest linked leaves stay listed at the topic's root ...
    seal_min: int = 12  # ... and this many more beyond them are sealed into levels
    level_leaves: int = 12  # leaves per sealed level
    condense_fanout: int = 8
    condense_target: int = 4
    route_batch: int = 2000  # new links routed per step (bounds a step's time)
    # Kinds that get topic trees: "the latest on this person or project". Dates, amounts, versions,
    # URLs and addresses are indexed and searchable, but a tree of "$1,200" would be noise; events
    # (holidays, conferences) come back every year and mix them, so they are left out by default.
    kinds: tuple[str, ...] = ("person", "place", "org", "product", "project", "repo", "ticker")
    # The bar a new topic must pass besides heat and ``min_leaves`` (see ``worth_a_tree``).
    min_sessions: int = 2
    person_min_leaves: int = 8


def settings_from(values: dict[str, object]) -> TopicSettings:
    """``TopicSettings`` from the ``[topics]`` keys (``Config.topic_values()``)."""
    heat_keys = {f.name for f in fields(HeatSettings)}
    rest = {k: v for k, v in values.items() if k not in heat_keys and k != "llm_entities"}
    return TopicSettings(heat=heat_settings_from(values), **rest)  # type: ignore[arg-type]


def topic_dir(key: str, *, archived: bool = False) -> str:
    name = entities.slug_for(key)
    return f"{TOPICS}/{ARCHIVE}/{name}" if archived else f"{TOPICS}/{name}"


def display_name(key: str) -> str:
    kind, value = entities.parse_key(key)
    if kind in ("person", "place", "org", "product", "event") and value.isascii():
        return value.replace("-", " ").title()
    return value.title() if kind == "project" and value.isascii() else value


# -- the picture of one topic ---------------------------------------------------------------------------
@dataclass
class _Member:
    id: str
    provenance: str  # its index row's (a note's section is linked by its heading, kept there)
    ts: str | None
    path: str
    text: str
    speaker: str | None
    source: str
    session: str | None = None
    supersedes: str = "[]"  # versions (index columns): a topic's summary marks an old value
    superseded_by: str = "[]"


@dataclass
class _Node:
    id: str
    dir: str
    depth: int
    title: str
    text: str
    parent_dir: str
    links: list[str]  # leaf ids linked directly, in file order
    subdirs: list[str]  # level directories directly under it
    earliest: str | None
    latest: str | None
    descendants: int
    data: bytes  # the file as read (guards the rewrite)
    node: SummaryNode
    marks: dict[str, str] = field(default_factory=dict)  # leaf id -> its link's version mark in the file


@dataclass
class TopicState:
    key: str
    dir: str
    archived: bool
    root: _Node | None
    levels: dict[str, _Node]  # dir -> level
    members: dict[str, _Member]  # leaf id -> member, chronological

    @classmethod
    def load(cls, conn: sqlite3.Connection, layout: Layout, key: str, max_bytes: int) -> TopicState:
        # The topic is where its root says it is (a person may have renamed the folder); a new one
        # goes to its slug.
        root_path = existing(conn).get(key)
        if root_path is not None and layout.abs(root_path).is_file():
            base = str(PurePosixPath(root_path).parent)
            archived = f"/{ARCHIVE}/" in f"/{base}/"
        else:
            live, cold = topic_dir(key), topic_dir(key, archived=True)
            archived = not layout.abs(live).is_dir() and layout.abs(cold).is_dir()
            base = cold if archived else live
        nodes: dict[str, _Node] = {}
        for row in conn.execute(
            "SELECT path FROM chunks WHERE kind = 'summary' AND path >= ? AND path < ?",
            index.prefix_range(base + "/"),
        ):
            found = _read_node(layout, row["path"], max_bytes)
            if found is not None:
                nodes[found.dir] = found
        root = nodes.pop(base, None)
        members: dict[str, _Member] = {}
        for row in conn.execute(
            "SELECT c.id, c.path, c.ts, c.text, c.speaker, c.source, c.session, c.supersedes, c.superseded_by,"
            " c.provenance"
            " FROM mentions m JOIN chunks c ON c.id = m.leaf"
            " WHERE m.entity = ? AND c.kind = 'leaf' AND c.status <> ? ORDER BY coalesce(c.ts, ''), c.path",
            (key, Status.PENDING.value),
        ):
            members[row["id"]] = _Member(
                row["id"],
                row["provenance"],
                row["ts"],
                row["path"],
                row["text"],
                row["speaker"],
                row["source"],
                row["session"],
                row["supersedes"],
                row["superseded_by"],
            )
        return cls(key, base, archived, root, nodes, members)

    def linked(self) -> set[str]:
        out: set[str] = set()
        for node in [*self.levels.values(), *([self.root] if self.root else [])]:
            out.update(node.links)
        return out


def worth_a_tree(state: TopicState, settings: TopicSettings) -> bool:
    """Whether an entity without a topic tree has earned one (its heat is checked by the caller): at least
    ``min_leaves`` leaves mention it, from at least ``min_sessions`` sessions (conversations, threads,
    documents: a name that one conversation repeats is not yet a topic), and a person who never speaks in
    the vault (is never a leaf's speaker) needs ``person_min_leaves``: names found in text are where the
    rules err, speakers are given."""
    members = state.members.values()
    if len(members) < settings.heat.min_leaves:
        return False
    if len({(m.source, m.session) for m in members}) < settings.min_sessions:
        return False
    if entities.parse_key(state.key)[0] != "person" or len(members) >= settings.person_min_leaves:
        return True
    return any(m.speaker and _speaker_key(m.speaker) == state.key for m in members)


def _speaker_key(speaker: str) -> str:
    try:
        return entities.canonical("person", speaker)
    except ValueError:
        return ""


def _read_node(layout: Layout, rel: str, max_bytes: int) -> _Node | None:
    try:
        text, _digest = fsio.read_text_guarded(layout.abs(rel), max_bytes)
        node, _doc = parse_summary(text, rel)
    except (FileNotFoundError, FrontmatterError, UnicodeDecodeError):
        return None
    links = [i for i in (c.linked_id for c in node.children) if i]
    marks = {i: c.mark for c in node.children if (i := c.linked_id)}
    subdirs = [
        f"{node.directory}/{PurePosixPath(c.target).parent}"
        for c in node.children
        if not c.wiki and c.target.endswith("/" + SUMMARY_NAME)
    ]
    return _Node(
        node.id,
        node.directory,
        node.depth,
        node.title,
        node.text,
        str(PurePosixPath(node.directory).parent),
        links,
        subdirs,
        _iso(node.earliest),
        _iso(node.latest),
        node.descendants,
        text.encode("utf-8"),
        node,
        marks,
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


# -- planning -----------------------------------------------------------------------------------------
@dataclass
class TopicPlanner:
    conn: sqlite3.Connection
    layout: Layout
    settings: TopicSettings
    model: str
    extractive: ExtractiveSummariser = field(default_factory=ExtractiveSummariser)

    def route(self, state: TopicState) -> TreeOp | None:
        """One step bringing the topic in line with the entity index: new leaves linked, leaves gone
        unlinked, the buffer sealed into levels, levels condensed, the root rewritten. None when the
        files already agree."""
        s = self.settings
        linked = state.linked()
        new = [m for i, m in state.members.items() if i not in linked][: s.route_batch]
        gone = linked - set(state.members)
        stale = [lv for lv in state.levels.values() if lv.node.stale]
        # A level or root whose leaves were linked as versions since it was written (supersede.link
        # queues this route): its links and summary mark them again.
        versioned = [lv for lv in state.levels.values() if _out_of_version(state, lv)]
        root_stale = state.root is not None and (state.root.node.stale or _out_of_version(state, state.root))
        if state.root is not None and not (
            new or gone or stale or versioned or root_stale or self._needs_seal(state)
        ):
            return None
        base = state.dir
        writes: list[FileWrite] = []
        moves: list[tuple[str, str]] = []
        # Levels that lost leaves (deleted, or the entity taken off by hand) are rewritten without them.
        written: set[str] = set()
        for level in state.levels.values():
            if level.node.stale or any(i in gone for i in level.links) or level in versioned:
                level.links = [i for i in level.links if i not in gone]
                if level in versioned and level.links and not level.node.hand_edited:
                    level.text = self.extractive.summarise(self._children(state, level.links), 1).text
                writes.append(self._level_write(state, level, guarded=True))
                written.add(level.dir)
        # The levels above a re-marked one are summarised again from their levels (a person's edited
        # level keeps its text), so no level quotes an old value unmarked.
        for parent in _above(state, [lv for lv in versioned if lv.text != lv.node.text]):
            if parent.dir in written or parent.node.hand_edited:
                continue
            kids = [state.levels[d] for d in parent.subdirs if d in state.levels]
            parent.text = self.extractive.summarise(_level_children(kids), parent.depth).text
            if parent.text != parent.node.text:
                writes.append(self._level_write(state, parent, guarded=True))
                written.add(parent.dir)
        recent = [i for i in (state.root.links if state.root else []) if i in state.members]
        recent += [m.id for m in new]
        recent.sort(key=lambda i: (state.members[i].ts or "", state.members[i].path))
        numbers = _Numbers(self.layout, [*state.levels])
        sealed = False
        if len(recent) >= s.keep_recent + s.seal_min:
            sealed = True
            sealing, recent = recent[: len(recent) - s.keep_recent], recent[len(recent) - s.keep_recent :]
            for start in range(0, len(sealing), s.level_leaves):
                chunk = sealing[start : start + s.level_leaves]
                level = self._new_level(state, chunk, base, numbers)
                state.levels[level.dir] = level
                writes.append(self._level_write(state, level, guarded=False))
        # New levels are condensed by the next step: one step never moves a folder it creates.
        for parent, children in () if sealed else self._condense(state, base, numbers):
            writes.append(self._level_write(state, parent, guarded=False))
            for child in children:
                new_dir = f"{parent.dir}/{PurePosixPath(child.dir).name}"
                moves.append((child.dir, new_dir))
                _rename(state, child, new_dir)
        root = self._root(state, recent)
        writes.append(root)
        what = []
        if new:
            what.append(f"link {len(new)} leaves")
        if gone:
            what.append(f"unlink {len(gone)} leaves")
        if not what:
            what.append("refresh")
        message = f"memory: {', '.join(what)} in topic {display_name(state.key)}"
        op = TreeOp("topic", SOURCE, message, tuple(writes), tuple(moves))
        self._centroids(state, op, recent)
        return op

    def _centroids(self, state: TopicState, op: TreeOp, recent: list[str]) -> None:
        """A topic node's vector is the normalised mean of the vectors of the leaves under it: it
        stands for exactly what it links, and costs no model call (topics are rewritten often)."""
        by_id = {lv.id: lv for lv in state.levels.values()}

        def under(level: _Node) -> list[str]:
            out = [i for i in level.links if i in state.members]
            for d in level.subdirs:
                if d in state.levels:
                    out.extend(under(state.levels[d]))
            return out

        top = [lv for lv in state.levels.values() if lv.parent_dir == state.dir]
        wanted: dict[str, list[str]] = {}
        for write in op.writes:
            node_id = parse_summary(write.data, write.path)[0].id
            if node_id in by_id:
                wanted[node_id] = under(by_id[node_id])
            else:  # the root
                wanted[node_id] = [*recent, *(i for lv in top for i in under(lv))]
        vecs = vectors.by_ids(self.conn, self.model, {i for ids in wanted.values() for i in ids})
        for node_id, ids in wanted.items():
            found = [vecs[i] for i in ids if i in vecs]
            if found:
                mean = np.mean(found, axis=0)
                norm = float(np.linalg.norm(mean))
                op.vectors[node_id] = (mean / norm if norm > 0 else mean).astype(np.float32)  # type: ignore[index]

    def _needs_seal(self, state: TopicState) -> bool:
        s = self.settings
        recent = len(state.root.links) if state.root else 0
        top = [lv for lv in state.levels.values() if lv.parent_dir == state.dir]
        crowded = any(
            sum(1 for lv in top if lv.depth == d) >= s.condense_fanout for d in {lv.depth for lv in top}
        )
        return recent >= s.keep_recent + s.seal_min or crowded

    def _children(self, state: TopicState, ids: Sequence[str]) -> list[Child]:
        vecs = vectors.by_ids(self.conn, self.model, ids)
        return [
            Child(
                validity.marked(
                    state.members[i].text, state.members[i].supersedes, state.members[i].superseded_by
                ),
                vecs.get(i),
                speaker=state.members[i].speaker,
                ts=parse_ts(state.members[i].ts),
                weight=validity.SUPERSEDED_WEIGHT if validity.listed(state.members[i].superseded_by) else 1.0,
            )
            for i in ids
        ]

    def _new_level(self, state: TopicState, ids: list[str], base: str, numbers: _Numbers) -> _Node:
        result = self.extractive.summarise(self._children(state, ids), 1)
        first = (state.members[ids[0]].ts or "undated")[:10]
        title = clean_title(f"{first} {result.title}")
        directory = numbers.next(base, title)
        stamps = [ts for i in ids if (ts := state.members[i].ts)]
        node = SummaryNode(
            id=summary_id(SOURCE, f"{state.key}:{directory}:{ids[0]}"),
            source=SOURCE,
            path=f"{directory}/{SUMMARY_NAME}",
            depth=1,
            title=title,
            text=result.text,
            entity=state.key,
            summariser=result.summariser,
            content_hash=text_hash(result.text),
        )
        return _Node(
            node.id,
            directory,
            1,
            title,
            result.text,
            base,
            list(ids),
            [],
            min(stamps) if stamps else None,
            max(stamps) if stamps else None,
            len(ids),
            b"",
            node,
        )

    def _condense(
        self, state: TopicState, base: str, numbers: _Numbers
    ) -> Iterator[tuple[_Node, list[_Node]]]:
        s = self.settings
        depth = 1
        made: set[str] = set()  # parents made in this step: the next step may group them in turn
        while depth < 32:
            top = sorted(
                (
                    lv
                    for lv in state.levels.values()
                    if lv.parent_dir == base and lv.depth == depth and lv.id not in made
                ),
                key=lambda lv: (lv.earliest or "", lv.dir),
            )
            if len(top) < s.condense_fanout:
                if not any(lv.parent_dir == base and lv.depth > depth for lv in state.levels.values()):
                    return
                depth += 1
                continue
            # The oldest levels are grouped; the newest stay at the top where they are read first.
            group = top[: s.condense_target]
            result = self.extractive.summarise(_level_children(group), depth + 1)
            first = (group[0].earliest or "undated")[:10]
            title = clean_title(f"{first} {result.title}")
            directory = numbers.next(base, title)
            early = [lv.earliest for lv in group if lv.earliest]
            late = [lv.latest for lv in group if lv.latest]
            node = SummaryNode(
                id=summary_id(SOURCE, f"{state.key}:{directory}:{group[0].id}"),
                source=SOURCE,
                path=f"{directory}/{SUMMARY_NAME}",
                depth=depth + 1,
                title=title,
                text=result.text,
                entity=state.key,
                summariser=result.summariser,
                content_hash=text_hash(result.text),
            )
            parent = _Node(
                node.id,
                directory,
                depth + 1,
                title,
                result.text,
                base,
                [],
                [lv.dir for lv in group],
                min(early) if early else None,
                max(late) if late else None,
                sum(lv.descendants for lv in group),
                b"",
                node,
            )
            state.levels[parent.dir] = parent
            made.add(parent.id)
            yield parent, group
            for lv in group:
                lv.parent_dir = parent.dir
            parent.subdirs = [f"{parent.dir}/{PurePosixPath(lv.dir).name}" for lv in group]

    def _level_write(self, state: TopicState, level: _Node, *, guarded: bool) -> FileWrite:
        kids = [state.levels[d] for d in level.subdirs if d in state.levels]
        stamps = [ts for i in level.links if i in state.members and (ts := state.members[i].ts)]
        stamps += [ts for lv in kids for ts in (lv.earliest, lv.latest) if ts]
        node = replace(
            level.node,
            stale=False,
            text=level.text,
            # Re-summarised when its leaves became versions; a level a person edited keeps its hash.
            content_hash=text_hash(level.text) if level.text != level.node.text else level.node.content_hash,
            title=level.title,
            # A title a person gave the level keeps its recorded engine hash (so it stays theirs).
            title_hash=level.node.title_hash if level.node.title_edited else "",
            children=(
                *(ChildLink(lv.title, f"{PurePosixPath(lv.dir).name}/{SUMMARY_NAME}") for lv in kids),
                *(_link(state.members[i]) for i in level.links if i in state.members),
            ),
            descendants=sum(1 for i in level.links if i in state.members)
            + sum(lv.descendants for lv in kids),
            earliest=parse_ts(min(stamps)) if stamps else None,
            latest=parse_ts(max(stamps)) if stamps else None,
            children_hash=_levels_fingerprint(kids),
        )
        level.descendants = node.descendants
        keep = parse_summary(level.data.decode("utf-8"), node.path)[1] if level.data else None
        return FileWrite(
            f"{level.dir}/{SUMMARY_NAME}",
            render_summary(node, keep=keep),  # a person's keys survive the rewrite
            fsio.sha256_bytes(level.data) if guarded and level.data else None,
        )

    def _root(self, state: TopicState, recent: list[str]) -> FileWrite:
        """The topic's own node: the latest state first, then its levels (newest first), then the
        newest leaves (newest first)."""
        top = top_levels(state)
        newest_first = list(reversed(recent))
        text = self.latest_text(state, newest_first, top)
        stamps = [m.ts for m in state.members.values() if m.ts]
        name = display_name(state.key)
        base = state.root.node if state.root else None
        node = SummaryNode(
            id=base.id if base else summary_id(SOURCE, f"topic:{state.key}"),
            source=SOURCE,
            path=f"{state.dir}/{SUMMARY_NAME}",
            depth=1 + max((lv.depth for lv in top), default=0),
            # The topic's name, unless a person renamed the topic's node (that title stays theirs).
            title=base.title if base is not None and base.title_edited else clean_title(name),
            title_hash=base.title_hash if base is not None and base.title_edited else "",
            text=text,
            pinned=base.pinned if base else "",
            children=(
                *(ChildLink(lv.title, f"{PurePosixPath(lv.dir).name}/{SUMMARY_NAME}") for lv in top),
                *(_link(state.members[i]) for i in newest_first),
            ),
            descendants=len(state.members),
            earliest=parse_ts(min(stamps)) if stamps else None,
            latest=parse_ts(max(stamps)) if stamps else None,
            summariser="extractive",
            content_hash=text_hash(text),
            children_hash=_levels_fingerprint(top),
            entity=state.key,
            archived=state.archived,
            user_aliases=base.user_aliases if base else (),
            related=base.related if base else (),  # ``related.update`` owns the section
        )
        if base is not None and base.hand_edited and base.text.strip():
            pinned = f"{base.pinned}\n\n{base.text}".strip() if base.pinned else base.text.strip()
            node = replace(node, pinned=pinned)
        keep = None
        if state.root is not None:
            keep = parse_summary(state.root.data.decode("utf-8"), state.root.node.path)[1]
        return FileWrite(
            node.path,
            render_summary(node, keep=keep),
            fsio.sha256_bytes(state.root.data) if state.root else None,
        )

    def latest_text(self, state: TopicState, newest_first: list[str], top: list[_Node]) -> str:
        """ "What's the latest on X": the newest leaf verbatim (shortened), then a summary of the recent
        leaves, then what the newest level says."""
        summary = (
            self.extractive.summarise(self._children(state, newest_first), 2).text if newest_first else ""
        )
        return compose_latest(state, newest_first, top, summary)


def _levels_fingerprint(levels: Sequence[_Node]) -> str:
    """What a topic node was written from among its folder's children: its sub-levels (the leaves it
    links are not in its folder; routing follows them)."""
    return children_fingerprint((lv.id, text_hash(lv.node.searchable)) for lv in levels) if levels else ""


def top_levels(state: TopicState) -> list[_Node]:
    """The levels directly under the topic, newest first."""
    return sorted(
        (lv for lv in state.levels.values() if lv.parent_dir == state.dir),
        key=lambda lv: (lv.latest or "", lv.dir),
        reverse=True,
    )


def compose_latest(state: TopicState, newest_first: list[str], top: list[_Node], summary: str) -> str:
    """A topic root's text: the newest leaf (shortened), a summary of the newest leaves, what the newest
    level says."""
    if not newest_first and not top:
        return f"Nothing links to {display_name(state.key)} any more."
    parts = []
    if newest_first:
        latest = state.members[newest_first[0]]
        words = latest.text.split()
        said = " ".join(words[:40]) + (" …" if len(words) > 40 else "")
        said = validity.marked(said, latest.supersedes, latest.superseded_by)
        who = f"{latest.speaker}: " if latest.speaker else ""
        parts.append(f"Latest ({(latest.ts or 'undated')[:10]}, {latest.source}): {who}{said}")
        if summary.strip():
            parts.append(summary.strip())
    if top:
        parts.append(f"Earlier ({top[0].title}): {top[0].text.strip()}")
    return "\n\n".join(parts)


def _link(member: _Member) -> ChildLink:
    day = (member.ts or "")[:10]
    who = f"{member.speaker}: " if member.speaker else ""
    words = wikilinks.leaf_words(member.text, member.provenance)
    link = wikilinks.leaf_link(f"{day} {who}{words}".strip(), member.id, member.path, member.provenance)
    return replace(link, mark=_version_mark(member))


def _level_children(levels: Sequence[_Node]) -> list[Child]:
    """Levels as the children a parent level is summarised from."""
    return [
        Child(lv.text, None, title=lv.title, ts=parse_ts(lv.earliest), weight=float(max(1, lv.descendants)))
        for lv in levels
    ]


def _above(state: TopicState, levels: Sequence[_Node]) -> list[_Node]:
    """The levels above ``levels`` (their parents, the parents' parents...), lowest first."""
    found: dict[str, _Node] = {}
    for level in levels:
        up = state.levels.get(level.parent_dir)
        while up is not None and up.dir not in found:
            found[up.dir] = up
            up = state.levels.get(up.parent_dir)
    return sorted(found.values(), key=lambda lv: lv.depth)


def _version_mark(member: _Member) -> str:
    """What a topic's link to a leaf says of its version: ``[superseded]``, ``[current]`` or nothing."""
    return validity.marked("", member.supersedes, member.superseded_by).strip()


def _out_of_version(state: TopicState, node: _Node) -> bool:
    """Whether a node links a leaf whose version mark in the file is not the leaf's mark now (a link
    made or undone since the node was written)."""
    return any(
        node.marks.get(i, "") != _version_mark(state.members[i]) for i in node.links if i in state.members
    )


def _rename(state: TopicState, level: _Node, new_dir: str) -> None:
    old = level.dir
    del state.levels[old]
    level.dir = new_dir
    state.levels[new_dir] = level
    for child in [lv for lv in state.levels.values() if lv.parent_dir == old]:
        child.parent_dir = new_dir
        _rename(state, child, f"{new_dir}/{PurePosixPath(child.dir).name}")
    level.subdirs = [f"{new_dir}/{PurePosixPath(d).name}" for d in level.subdirs]


class _Numbers:
    """Folder numbers handed out per parent directory: one more than any in use there."""

    def __init__(self, layout: Layout, taken: Sequence[str]) -> None:
        self.layout = layout
        self.last: dict[str, int] = {}
        self.taken = list(taken)

    def next(self, parent: str, title: str) -> str:
        if parent not in self.last:
            names = [PurePosixPath(d).name for d in self.taken if str(PurePosixPath(d).parent) == parent]
            fs_dir = self.layout.abs(parent)
            if fs_dir.is_dir():
                names.extend(p.name for p in fs_dir.iterdir())
            self.last[parent] = max((int(m.group(1)) for m in map(_NUMBERED.match, names) if m), default=0)
        self.last[parent] += 1
        return f"{parent}/{self.last[parent]:02d}-{slug(title, words=5, max_len=40) or 'level'}"


def is_root(rel: str) -> bool:
    """``topics/<slug>/_summary.md`` or ``topics/_archive/<slug>/_summary.md``."""
    parts = PurePosixPath(rel).parts
    return len(parts) == 3 or (len(parts) == 4 and parts[1] == ARCHIVE)


def entity_of_node(conn: sqlite3.Connection, node_id: str) -> str | None:
    """The entity of a topic node (root or level), None for any other node."""
    row = conn.execute(
        "SELECT path, provenance FROM chunks WHERE id = ? AND kind = 'summary'", (node_id,)
    ).fetchone()
    if row is None or not row["path"].startswith(TOPICS + "/"):
        return None
    return _entity_of(row["provenance"])


def existing(conn: sqlite3.Connection) -> dict[str, str]:
    """entity key -> topic root path, for every topic on disk (live or archived), from the index."""
    out: dict[str, str] = {}
    for row in conn.execute(
        "SELECT path, provenance FROM chunks WHERE kind = 'summary' AND path >= ? AND path < ?",
        index.prefix_range(TOPICS + "/"),
    ):
        rel = row["path"]
        if is_root(rel):
            key = _entity_of(row["provenance"])
            if key:
                out[key] = rel
    return out


def _entity_of(provenance: str) -> str | None:
    try:
        value = json.loads(provenance)
    except ValueError:
        return None
    entity = value.get("entity") if isinstance(value, dict) else None
    return str(entity) if entity else None
