"""The global tree: one digest per UTC day, rolled up into ISO weeks and months.

    global/2026-11/_summary.md                       month  (period: month, depth 3)
    global/2026-11/2026-W47/_summary.md              the days of ISO week 47 inside November (depth 2)
    global/2026-11/2026-W47/2026-11-21/_summary.md   day    (period: day, depth 1)

A week that straddles two months has one node under each (2026-W49 holds 30 Nov and 1 Dec), so every
node has one parent: the ``_summary.md`` of the directory above, the rule reindex, check and the watcher
already follow. A day digest links to its leaves with wikilinks by leaf file name (``[[stem|label]]``),
which stay valid wherever compaction moves the leaves; weeks and months link to the digests below them.

Owns which leaves belong to a day (their ``ts`` falls on it; a leaf without ``ts`` counts on the UTC day
of its file's mtime), the day's text (one count line per source, then a summary of the day's leaves),
the roll-up of weeks and months from the digests below them, and the ``digest_daily`` jobs. A day, its
week and its month are rewritten together in one ``treeops`` step (hash-guarded, indexed, replayed after
a crash), so a parent never misses a child. The summariser runs without the write lock. Never prints.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import PurePosixPath

import numpy as np
import numpy.typing as npt

from vaultmem import frontmatter, fsio, index, steps, validity, vectors, wikilinks
from vaultmem.db import atomic
from vaultmem.embed import Embedder
from vaultmem.errors import ConflictError, FrontmatterError, InvalidInput
from vaultmem.jobs import JobKind, JobQueue, digest_job
from vaultmem.layout import SUMMARY_NAME, Layout
from vaultmem.model import Status, parse_ts
from vaultmem.stale import Resummarised
from vaultmem.steps import FileWrite, StepEnv, TreeOp
from vaultmem.summarise import Child, Summariser, summarise_untitled
from vaultmem.summaryfile import (
    ChildLink,
    SummaryNode,
    children_fingerprint,
    keep_hand_edit,
    parse_summary,
    render_summary,
    summary_id,
    text_hash,
)

GLOBAL = "global"  # the tree's top folder, and the ``source`` of every digest
PERIODS = ("day", "week", "month")
LINK_CAP = 200  # a day with more leaves links this many (``descendants`` keeps the true count)
ATTEMPTS = 4  # a step that lost a race with another writer is planned again this often
AFTER_MIDNIGHT_S = 60.0  # today's digest is written this long after the day is over
Vector = npt.NDArray[np.float32]


_MONTH_RE = re.compile(r"^\d{4}-\d{2}$")
_WEEK_RE = re.compile(r"^\d{4}-W\d{2}$")
_DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# The count lines at the top of a digest: a roll-up summarises the sentences below them, not them (the
# same words on every day would out-vote every real sentence).
_COUNT_LINE = re.compile(r"^- \*\*[^*\n]+\*\*: .*$", re.MULTILINE)
_NOUNS = {"chat": ("message", "session"), "email": ("email", "thread"), "doc": ("section", "document")}


# -- where the nodes live -------------------------------------------------------------------------------
def month_dir(day: date) -> str:
    return f"{GLOBAL}/{day:%Y-%m}"


def week_dir(day: date) -> str:
    year, week, _ = day.isocalendar()
    return f"{month_dir(day)}/{year}-W{week:02d}"


def day_dir(day: date) -> str:
    return f"{week_dir(day)}/{day.isoformat()}"


def node_path(day: date, period: str = "day") -> str:
    """The ``_summary.md`` of ``day``'s digest, or of the week part or month holding it."""
    directory = {"day": day_dir, "week": week_dir, "month": month_dir}[_period(period)](day)
    return f"{directory}/{SUMMARY_NAME}"


def _period(period: str) -> str:
    if period not in PERIODS:
        raise InvalidInput(f"unknown period {period!r}; one of: {', '.join(PERIODS)}")
    return period


def period_of(directory: str) -> str | None:
    """``day``, ``week`` or ``month`` for a directory laid out as the global tree; None otherwise."""
    parts = PurePosixPath(directory).parts
    shapes = ((_MONTH_RE,), (_MONTH_RE, _WEEK_RE), (_MONTH_RE, _WEEK_RE, _DAY_RE))
    if not parts or parts[0] != GLOBAL or len(parts) - 1 not in (1, 2, 3):
        return None
    if not all(rx.match(p) for rx, p in zip(shapes[len(parts) - 2], parts[1:], strict=True)):
        return None
    return ("month", "week", "day")[len(parts) - 2]


def in_global_tree(conn: sqlite3.Connection, node_id: str) -> bool:
    row = conn.execute("SELECT path FROM chunks WHERE id = ?", (node_id,)).fetchone()
    return row is not None and str(row["path"]).startswith(f"{GLOBAL}/")


def parse_day(value: date | str | None, now: float | None = None) -> date:
    """A UTC day from a date, ``YYYY-MM-DD``, ``today`` or ``yesterday`` (None: today)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).date() if value.tzinfo else value.date()
    if isinstance(value, date):
        return value
    today = _utc_day(now if now is not None else datetime.now(UTC).timestamp())
    text = ("today" if value is None else value).strip().lower()
    if text == "today":
        return today
    if text == "yesterday":
        return today - timedelta(days=1)
    try:
        if _DAY_RE.match(text):
            return date.fromisoformat(text)
    except ValueError:
        pass
    raise InvalidInput(f"{value!r} is not a day; use YYYY-MM-DD, 'today' or 'yesterday'")


def _utc_day(seconds: float) -> date:
    return datetime.fromtimestamp(seconds, UTC).date()


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


# -- jobs ---------------------------------------------------------------------------------------------
def enqueue_days(conn: sqlite3.Connection, leaf_ids: Sequence[str], now: float) -> int:
    """Queue one ``digest_daily`` job per UTC day of these leaves. A past day runs now; today (or a later
    day, from a skewed clock) runs 60 s after the next UTC midnight, once the day is complete. Ids that
    are not extracted leaves are ignored. Returns how many jobs were added."""
    days: set[date] = set()
    for part, marks in index.in_batches(list(dict.fromkeys(leaf_ids))):
        for row in conn.execute(
            f"SELECT ts, file_mtime_ns FROM chunks WHERE kind = 'leaf' AND status != ? AND id IN ({marks})",
            [Status.PENDING.value, *part],
        ):
            days.add(_leaf_day(row["ts"], row["file_mtime_ns"]))
    return _enqueue(conn, days, now)


def enqueue_out_of_date(conn: sqlite3.Connection, now: float) -> int:
    """Queue the job of every day whose digest no longer counts that day's leaves (one was deleted, by
    hand or by a document operation, and the digest links a leaf that is gone). Cheap: counts from the
    index, no file is read. Days without a digest are left to their leaves' jobs."""
    written: dict[date, int] = {}
    for row in conn.execute(
        "SELECT path, provenance FROM chunks WHERE kind = 'summary' AND path >= ? AND path < ?",
        index.prefix_range(f"{GLOBAL}/"),
    ):
        directory = str(PurePosixPath(row["path"]).parent)
        if period_of(directory) == "day":
            written[date.fromisoformat(PurePosixPath(directory).name)] = int(
                str(_json(row["provenance"]).get("descendants") or 0)
            )
    if not written:
        return 0
    counts: Counter[date] = Counter()
    for day, n in conn.execute(
        "SELECT substr(ts, 1, 10), count(*) FROM chunks WHERE kind = 'leaf' AND status != ?"
        " AND ts IS NOT NULL GROUP BY 1",
        (Status.PENDING.value,),
    ):
        counts[date.fromisoformat(day)] += n
    for row in conn.execute(
        "SELECT file_mtime_ns FROM chunks WHERE kind = 'leaf' AND status != ? AND ts IS NULL",
        (Status.PENDING.value,),
    ):
        counts[_leaf_day(None, row["file_mtime_ns"])] += 1
    return _enqueue(conn, {day for day, n in written.items() if counts[day] != n}, now)


def _enqueue(conn: sqlite3.Connection, days: set[date], now: float) -> int:
    today = _utc_day(now)
    queue = JobQueue(conn, clock=lambda: now)
    wait = (_midnight(today) + timedelta(days=1)).timestamp() + AFTER_MIDNIGHT_S - now
    with atomic(conn):
        added = queue.enqueue_many(digest_job(d) for d in sorted(days) if d < today)
        added += queue.enqueue_many((digest_job(d) for d in sorted(days) if d >= today), delay_s=wait)
    return added


def due_days(conn: sqlite3.Connection, now: float, limit: int = 1000) -> list[date]:
    """The days whose ``digest_daily`` job is due or running, in claim order."""
    rows = conn.execute(
        "SELECT payload FROM jobs WHERE kind = ? AND (state = 'running' OR (state = 'queued' AND run_after <= ?))"
        " ORDER BY priority DESC, id LIMIT ?",
        (JobKind.DIGEST_DAILY.value, now, limit),
    )
    out: list[date] = []
    for row in rows:
        try:
            out.append(date.fromisoformat(str(_json(row["payload"]).get("day"))))
        except ValueError:
            continue  # not a day: its own job fails on it
    return out


def embed_calls(conn: sqlite3.Connection, summariser: Summariser, model: str, day: date) -> list[list[str]]:
    """The embedding calls the digest of ``day`` makes for the day itself (its sentences; a digest
    embeds no key phrase), in order: a caller embeds several days' calls together
    (``embed.Remembering.prepare``: one batched call, shared with the embedder's worker processes)
    before the days' jobs run one by one and find their rows remembered. Empty for a summariser that
    does not say (an LLM's) and for a day without leaves. The week and month above a day are left to
    its job: they summarise what the day's digest will say."""
    calls_of = getattr(summariser, "embed_calls", None)
    leaves = day_leaves(conn, day) if calls_of is not None else []
    if calls_of is None or not leaves:
        return []
    vecs = vectors.by_ids(conn, model, [leaf.id for leaf in leaves])
    return [
        list(call)
        for call in calls_of(_day_children(_most_central(leaves, vecs, LINK_CAP), vecs), titled=False)
    ]


def _leaf_day(ts: str | None, mtime_ns: int | None) -> date:
    stamp = parse_ts(ts)
    if stamp is not None:
        return stamp.date()
    return _utc_day((mtime_ns or 0) / 1e9)


# -- the leaves of a day --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _DayLeaf:
    id: str
    path: str
    source: str
    input: str
    session: str | None
    message: str
    speaker: str | None
    when: datetime  # ts, or the file's mtime for a leaf without one
    seq: int
    status: str
    text: str
    content_hash: str
    supersedes: str = "[]"  # versions (index columns, JSON lists): the digest marks an old value
    superseded_by: str = "[]"
    provenance: str = "{}"  # a note's section is linked by its heading, kept there

    def link(self, label: str) -> ChildLink:
        """The digest's link to the leaf, with its version mark (``[superseded]``/``[current]``, as a
        topic's link has it)."""
        link = wikilinks.leaf_link(label, self.id, self.path, self.provenance)
        return replace(link, mark=validity.marked("", self.supersedes, self.superseded_by).strip())


def day_leaves(conn: sqlite3.Connection, day: date) -> list[_DayLeaf]:
    """The extracted leaves of a UTC day, every source, by time."""
    start = _midnight(day)
    end = start + timedelta(days=1)
    cols = (
        "id, path, source, input, session, source_id, speaker, ts, seq, status, text, content_hash,"
        " supersedes, superseded_by, provenance"
    )
    rows = conn.execute(
        f"SELECT {cols}, file_mtime_ns FROM chunks WHERE kind = 'leaf' AND status != ?"
        " AND ts >= ? AND ts < ?",
        (Status.PENDING.value, start.date().isoformat(), end.date().isoformat()),
    ).fetchall()
    rows += conn.execute(
        f"SELECT {cols}, file_mtime_ns FROM chunks WHERE kind = 'leaf' AND status != ? AND ts IS NULL"
        " AND file_mtime_ns >= ? AND file_mtime_ns < ?",
        (Status.PENDING.value, int(start.timestamp()) * 10**9, int(end.timestamp()) * 10**9),
    ).fetchall()
    out = [
        _DayLeaf(
            r["id"],
            r["path"],
            r["source"],
            r["input"] or "chat",
            r["session"],
            r["source_id"] or r["id"],
            r["speaker"],
            parse_ts(r["ts"]) or datetime.fromtimestamp(r["file_mtime_ns"] // 10**9, UTC),
            r["seq"] or 0,
            r["status"],
            r["text"],
            r["content_hash"],
            r["supersedes"],
            r["superseded_by"],
            r["provenance"],
        )
        for r in rows
    ]
    return sorted(out, key=lambda leaf: (leaf.when, leaf.seq, leaf.path))


def _signature(leaves: Sequence[_DayLeaf]) -> str:
    keys = sorted(
        f"{leaf.id}:{validity.fingerprint_part(leaf.content_hash, leaf.superseded_by)}" for leaf in leaves
    )
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()


def day_out_of_date(conn: sqlite3.Connection, node: SummaryNode | None, day: date) -> bool:
    """True when the day has leaves its digest does not show: no digest yet, a stale one, or another
    number or time span of leaves than it was written from."""
    leaves = day_leaves(conn, day)
    if node is None:
        return bool(leaves)
    if node.stale:
        return True
    span = (leaves[0].when, leaves[-1].when) if leaves else (None, None)
    return (node.descendants, node.earliest, node.latest) != (len(leaves), *span)


# -- building the nodes ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _File:
    rel: str
    node: SummaryNode | None
    doc: frontmatter.MdDoc | None
    hash: str | None  # of the bytes read; None: there is no file yet
    data: str | None


@dataclass(frozen=True)
class _Kid:
    """A digest one level down, as a week or month sees it."""

    name: str  # its folder name
    id: str
    title: str
    text: str  # what it says (pinned text included), count lines removed
    earliest: datetime | None
    latest: datetime | None
    descendants: int
    vec: Vector | None
    digest: str = ""  # hash of its searchable text (its row's content_hash)


@dataclass(frozen=True)
class _Snapshot:
    files: tuple[_File, ...]  # bottom-up, as ``dirs``
    leaves: tuple[_DayLeaf, ...]  # the day's (a chain that starts at a day)
    kids: dict[str, tuple[_Kid, ...]]  # week or month folder -> the digests directly under it


def _read(layout: Layout, rel: str, max_bytes: int) -> _File:
    try:
        text, digest = fsio.read_text_guarded(layout.abs(rel), max_bytes)
    except FileNotFoundError:
        return _File(rel, None, None, None, None)
    node, doc = parse_summary(text, rel)
    return _File(rel, node, doc, digest, text)


def _kids(conn: sqlite3.Connection, directory: str, model: str) -> tuple[_Kid, ...]:
    prefix = directory + "/"
    rows = [
        r
        for r in conn.execute(
            "SELECT id, path, text, ts, ts_end, provenance, content_hash FROM chunks"
            " WHERE kind = 'summary' AND path >= ? AND path < ? ORDER BY path",
            index.prefix_range(prefix),
        )
        if r["path"][len(prefix) :].count("/") == 1
    ]
    vecs = vectors.by_ids(conn, model, [r["id"] for r in rows])
    out = []
    for r in rows:
        prov = _json(r["provenance"])
        out.append(
            _Kid(
                PurePosixPath(r["path"]).parent.name,
                r["id"],
                str(prov.get("title") or PurePosixPath(r["path"]).parent.name),
                _without_counts(r["text"]),
                parse_ts(r["ts"]),
                parse_ts(r["ts_end"]),
                int(str(prov.get("descendants") or 0)),
                vecs.get(r["id"]),
                str(r["content_hash"]),
            )
        )
    return tuple(out)


def _json(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _without_counts(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", _COUNT_LINE.sub("", text)).strip()


def _snapshot(
    conn: sqlite3.Connection,
    layout: Layout,
    dirs: Sequence[str],
    day: date | None,
    model: str,
    max_bytes: int,
) -> _Snapshot:
    files = tuple(_read(layout, f"{d}/{SUMMARY_NAME}", max_bytes) for d in dirs)
    leaves = tuple(day_leaves(conn, day)) if day is not None else ()
    kids = {d: _kids(conn, d, model) for d in dirs if period_of(d) != "day"}
    return _Snapshot(files, leaves, kids)


@dataclass(frozen=True)
class _Content:
    title: str
    text: str
    children: tuple[ChildLink, ...]
    descendants: int
    earliest: datetime | None
    latest: datetime | None
    summariser: str | None = None  # None: keep the current file's
    children_hash: str = ""  # weeks and months: the digests below they were written from


def _node(current: _File, directory: str, seed: str, depth: int, content: _Content) -> SummaryNode:
    """The node at ``directory`` with new content. An existing file keeps its id, order, aliases and the
    person's keys, and a hand edit of its text joins its pinned text; else a new node, with an id fixed
    by its period, so a digest rebuilt from scratch (or in another clone) gets the same id."""
    base = current.node or SummaryNode(
        id=summary_id(GLOBAL, seed),
        source=GLOBAL,
        path=f"{directory}/{SUMMARY_NAME}",
        depth=depth,
        title=content.title,
        text="",
    )
    # A title a person gave the digest stays, with the engine hash it was recorded against (so it stays
    # theirs); otherwise the engine's new title.
    kept = base.title_edited
    return replace(
        base,
        source=GLOBAL,
        depth=depth,
        period=("month", "week", "day")[directory.count("/") - 1],
        title=base.title if kept else content.title,
        title_hash=base.title_hash if kept else "",
        text=content.text,
        pinned=keep_hand_edit(base),
        children=content.children,
        descendants=content.descendants,
        earliest=content.earliest,
        latest=content.latest,
        stale=False,
        summariser=content.summariser or base.summariser,
        content_hash=text_hash(content.text),
        children_hash=content.children_hash,
    )


def _day_node(
    current: _File, day: date, leaves: Sequence[_DayLeaf], vecs: dict[str, Vector], summariser: Summariser
) -> tuple[SummaryNode, tuple[str, ...]]:
    title = day.isoformat()
    if not leaves:  # every leaf of the day went (deleted by hand): the digest says so
        empty = _Content(title, "(no memories left on this day)", (), 0, None, None)
        return _node(current, day_dir(day), f"day:{day}", 1, empty), ()
    linked = _most_central(leaves, vecs, LINK_CAP)
    # Named by its date: the summariser looks for no title (embeds no key phrase).
    result = summarise_untitled(summariser, _day_children(linked, vecs), 1)
    counts = [_count_line(src, [x for x in leaves if x.source == src]) for src in _sources(leaves)]
    by_source = sorted(linked, key=lambda leaf: (leaf.source, leaf.when, leaf.seq, leaf.path))
    content = _Content(
        title,
        "\n".join(counts) + "\n\n" + result.text.strip(),
        tuple(leaf.link(_leaf_label(leaf)) for leaf in by_source),
        len(leaves),
        leaves[0].when,
        leaves[-1].when,
        result.summariser,
    )
    return _node(current, day_dir(day), f"day:{day}", 1, content), result.notes


def _day_children(linked: Sequence[_DayLeaf], vecs: dict[str, Vector]) -> list[Child]:
    """What a day's digest summarises: its linked leaves, dropped ones left out unless all are."""
    readable = [leaf for leaf in linked if leaf.status != Status.DROPPED.value] or linked
    return [
        Child(
            validity.marked(leaf.text, leaf.supersedes, leaf.superseded_by),
            vecs.get(leaf.id),
            speaker=leaf.speaker,
            ts=leaf.when,
            weight=validity.SUPERSEDED_WEIGHT if validity.listed(leaf.superseded_by) else 1.0,
        )
        for leaf in readable
    ]


def _sources(leaves: Sequence[_DayLeaf]) -> list[str]:
    return sorted({leaf.source for leaf in leaves})


def _count_line(source: str, leaves: Sequence[_DayLeaf]) -> str:
    kind = Counter(leaf.input for leaf in leaves).most_common(1)[0][0]
    noun, group = _NOUNS.get(kind, _NOUNS["chat"])
    messages = len({(leaf.session, leaf.message) for leaf in leaves})  # ids may repeat across sessions
    sessions = len({leaf.session for leaf in leaves if leaf.session})
    first, last = f"{leaves[0].when:%H:%M}", f"{leaves[-1].when:%H:%M}"
    span = first if first == last else f"{first}–{last}"
    within = f" in {_count(sessions, group)}" if sessions else ""
    return f"- **{source}**: {_count(messages, noun)}{within}, {span} UTC"


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def _most_central(leaves: Sequence[_DayLeaf], vecs: dict[str, Vector], cap: int) -> list[_DayLeaf]:
    """All leaves when they fit ``cap``; else the most central ones (cosine to the day's mean vector),
    taken from each source in turn so a busy source never crowds out a quiet one. Dropped and unembedded
    leaves come last."""
    if len(leaves) <= cap:
        return list(leaves)
    known = [vecs[leaf.id] for leaf in leaves if leaf.id in vecs]
    center = np.mean(known, axis=0) if known else None

    def rank(leaf: _DayLeaf) -> tuple[bool, float]:
        vec = vecs.get(leaf.id)
        score = float(vec @ center) if vec is not None and center is not None else -2.0
        return (leaf.status == Status.DROPPED.value, -score)

    queues = {src: sorted((x for x in leaves if x.source == src), key=rank) for src in _sources(leaves)}
    chosen: list[_DayLeaf] = []
    while len(chosen) < cap:
        for waiting in queues.values():
            if waiting and len(chosen) < cap:
                chosen.append(waiting.pop(0))
    return chosen


def _leaf_label(leaf: _DayLeaf) -> str:
    words = wikilinks.leaf_words(leaf.text, leaf.provenance)
    who = f"{leaf.speaker}: " if leaf.speaker else ""
    return f"{leaf.source} {leaf.when:%H:%M} {who}{words}".strip()


def _rollup_node(
    current: _File, directory: str, kids: Sequence[_Kid], summariser: Summariser
) -> tuple[SummaryNode, tuple[str, ...]]:
    """A week (over its days) or a month (over its weeks), summarised from the digests below it."""
    name = PurePosixPath(directory).name
    is_week = period_of(directory) == "week"
    month = PurePosixPath(directory).parent.name if is_week else name
    title = f"{name} in {month}" if is_week else name
    seed, depth = (f"week:{month}:{name}", 2) if is_week else (f"month:{name}", 3)
    kids = sorted(kids, key=lambda k: k.name)
    early = [k.earliest for k in kids if k.earliest]
    late = [k.latest for k in kids if k.latest]
    total = sum(k.descendants for k in kids)
    links = tuple(ChildLink(k.title, f"{k.name}/{SUMMARY_NAME}") for k in kids)
    span = (min(early) if early else None, max(late) if late else None)
    if not kids:
        return _node(
            current, directory, seed, depth, _Content(title, "(no digests left)", (), 0, None, None)
        ), ()
    result = summarise_untitled(  # named by its week or month
        summariser,
        [
            Child(k.text, k.vec, title=k.title, ts=k.earliest, weight=float(max(1, k.descendants)))
            for k in kids
        ],
        depth,
    )
    within = f"on {_count(len(kids), 'day')}" if is_week else f"in {_count(len(kids), 'week')}"
    lead = f"- **{title}**: {_count(total, 'memory', 'memories')} {within}"
    inputs = children_fingerprint((k.id, k.digest) for k in kids)
    content = _Content(
        title, lead + "\n\n" + result.text.strip(), links, total, *span, result.summariser, inputs
    )
    return _node(current, directory, seed, depth, content), result.notes


def _as_kid(node: SummaryNode, vec: Vector) -> _Kid:
    return _Kid(
        PurePosixPath(node.directory).name,
        node.id,
        node.title,
        _without_counts(node.searchable),
        node.earliest,
        node.latest,
        node.descendants,
        vec,
        text_hash(node.searchable),
    )


def _plan(
    snap: _Snapshot,
    dirs: Sequence[str],
    day: date | None,
    summariser: Summariser,
    embedder: Embedder,
    vecs: dict[str, Vector],
) -> tuple[list[tuple[_File, SummaryNode]], dict[str, Vector], list[str]]:
    """The new nodes, bottom-up, each with the file it replaces; their vectors; notes."""
    built: list[tuple[_File, SummaryNode]] = []
    new_vecs: dict[str, Vector] = {}
    notes: list[str] = []
    below: _Kid | None = None
    for current, directory in zip(snap.files, dirs, strict=True):
        if day is not None and directory == day_dir(day):
            node, said = _day_node(current, day, snap.leaves, vecs, summariser)
        else:
            kids = [k for k in snap.kids[directory] if below is None or k.name != below.name]
            node, said = _rollup_node(current, directory, [*kids, *([below] if below else [])], summariser)
        notes.extend(said)
        if current.node is not None and node.pinned != current.node.pinned:
            notes.append(f"{current.rel} was edited by hand: the edited text is kept under '## Pinned'")
        # A digest's vector is the normalised mean of what it covers (the day's leaves; a week's or
        # month's digests, weighted by their leaves): no model call, and days of one month written by
        # parallel workers re-plan cheaply when they collide on the month.
        if day is not None and directory == day_dir(day):
            parts = [(vecs[leaf.id], 1.0) for leaf in snap.leaves if leaf.id in vecs]
        else:
            kids_now = [k for k in snap.kids[directory] if below is None or k.name != below.name]
            kids_now += [below] if below else []
            parts = [(k.vec, float(max(1, k.descendants))) for k in kids_now if k.vec is not None]
        vec = _mean(parts, embedder, node)
        new_vecs[node.id] = vec
        built.append((current, node))
        below = _as_kid(node, vec)
    return built, new_vecs, notes


def _mean(parts: Sequence[tuple[Vector, float]], embedder: Embedder, node: SummaryNode) -> Vector:
    if not parts:  # nothing below has a vector yet: embed the text itself
        return np.asarray(embedder.embed([node.searchable])[0], dtype=np.float32)
    total = np.sum([vec * weight for vec, weight in parts], axis=0)
    norm = float(np.linalg.norm(total))
    return np.asarray(total / norm if norm > 0 else total, dtype=np.float32)


def _rebuild(env: StepEnv, conn: sqlite3.Connection, dirs: Sequence[str], day: date | None) -> Resummarised:
    """Rewrite the nodes at ``dirs`` (bottom-up: a day, its week, its month; or a week and its month; or a
    month) in one durable step. State is read under the write lock (so rows and files agree), the
    summariser runs without it, and the write checks that nothing it read has changed since. ``commit``
    (git) records the step while the lock is still held, so no other step's files join its commit."""
    layout, summariser, write_lock, max_bytes, commit = (
        env.layout,
        env.summariser,
        env.lock,
        env.max_bytes,
        env.commit,
    )
    embedder = env.embedder()
    what = PurePosixPath(dirs[0]).name
    model = embedder.model_id
    for _ in range(ATTEMPTS):
        with write_lock():
            try:
                snap = _snapshot(conn, layout, dirs, day, model, max_bytes)
            except (FrontmatterError, InvalidInput) as exc:
                return Resummarised("missing", notes=(f"{exc}; fix that file by hand",))
        if day is not None and not snap.leaves and snap.files[0].node is None:
            return Resummarised("done", notes=(f"nothing was remembered on {day}: no digest written",))
        vecs = vectors.by_ids(conn, model, [leaf.id for leaf in snap.leaves])
        built, new_vecs, notes = _plan(snap, dirs, day, summariser, embedder, vecs)
        writes = []
        for current, node in built:
            data = render_summary(node, keep=current.doc)
            if data != current.data:
                writes.append(FileWrite(current.rel, data, current.hash))
        if not writes:
            return Resummarised("done", notes=tuple(notes))  # already up to date
        op = TreeOp("digest", GLOBAL, f"memory: digest {what}", tuple(writes), vectors=new_vecs)
        with write_lock():
            if day is not None and _signature(day_leaves(conn, day)) != _signature(snap.leaves):
                continue  # leaves of the day arrived or changed meanwhile: read them again
            try:
                steps.apply(conn, layout, op, model, embedder.dim)
            except ConflictError:
                continue  # another writer changed one of the files: plan again from what is there now
            if commit is not None:
                commit(op.message)
        return Resummarised("done", op.message, tuple(notes))
    return Resummarised(
        "defer", notes=(f"the digest of {what} kept changing while it was written; retrying",)
    )


def build_day(env: StepEnv, conn: sqlite3.Connection, day: date) -> Resummarised:
    """Write the digest of ``day`` from its leaves, and its week and month from the digests under them.
    A day without leaves and without a digest writes nothing."""
    return _rebuild(env, conn, [day_dir(day), week_dir(day), month_dir(day)], day)


def resummarise(env: StepEnv, conn: sqlite3.Connection, node_id: str) -> Resummarised:
    """Re-summarise one node of the global tree (the ``resummarise`` job of a stale digest): a day from
    its leaves, never from its folder; a week or a month from the digests under it. The nodes above it
    are rewritten in the same step. Same contract as ``compact.resummarise``: the global tree's own re-summarise."""
    row = conn.execute("SELECT path FROM chunks WHERE id = ? AND kind = 'summary'", (node_id,)).fetchone()
    if row is None:
        return Resummarised("gone")
    directory = str(PurePosixPath(row["path"]).parent)
    period = period_of(directory)
    if period is None:
        return Resummarised("missing", notes=(f"{row['path']} is not laid out as the global tree",))
    parts = directory.split("/")
    if period == "day":
        day = date.fromisoformat(parts[3])
        return build_day(env, conn, day)
    dirs = ["/".join(parts[: n + 1]) for n in range(len(parts) - 1, 0, -1)]
    return _rebuild(env, conn, dirs, None)


def refresh(env: StepEnv, conn: sqlite3.Connection, day: date, period: str) -> Resummarised | None:
    """Bring the digest of ``day`` (or its week part or month) up to date when someone asks for it: the
    day is rebuilt when it is missing, stale or behind its leaves; a stale week or month is rolled up
    again. None when it is current (the embedder is then never loaded)."""
    current = _read(env.layout, node_path(day, "day"), env.max_bytes).node
    if day_out_of_date(conn, current, day):
        return build_day(env, conn, day)
    if _period(period) == "day":
        return None
    node = _read(env.layout, node_path(day, period), env.max_bytes).node
    if node is None or not node.stale:
        return None
    dirs = [week_dir(day), month_dir(day)] if period == "week" else [month_dir(day)]
    return _rebuild(env, conn, dirs, None)


def preview(
    conn: sqlite3.Connection,
    layout: Layout,
    summariser: Summariser,
    embedder: Embedder,
    day: date,
    period: str,
    max_bytes: int,
) -> SummaryNode | None:
    """The digest of ``day`` (or its week part or month) as ``refresh`` would leave it, built in memory and
    never written: the file when it is current, else the nodes ``refresh`` would write, as read back
    from their rendered text. For a read that must not write (the MCP ``recent`` tool); the day's job,
    queued when its leaves were admitted, writes the file. None: nothing was remembered then."""
    rel = node_path(day, period)
    built_day: date | None = day
    dirs = [day_dir(day), week_dir(day), month_dir(day)]
    if not day_out_of_date(conn, _read(layout, node_path(day, "day"), max_bytes).node, day):
        node = _read(layout, rel, max_bytes).node
        if _period(period) == "day" or node is None or not node.stale:
            return node
        built_day, dirs = None, [week_dir(day), month_dir(day)] if period == "week" else [month_dir(day)]
    snap = _snapshot(conn, layout, dirs, built_day, embedder.model_id, max_bytes)
    if built_day is not None and not snap.leaves and snap.files[0].node is None:
        return None
    vecs = vectors.by_ids(conn, embedder.model_id, [leaf.id for leaf in snap.leaves])
    built, _vecs, _notes = _plan(snap, dirs, built_day, summariser, embedder, vecs)
    current, node = next((file, node) for file, node in built if file.rel == rel)  # ``dirs`` holds it
    return parse_summary(render_summary(node, keep=current.doc), rel)[0]


# -- reading --------------------------------------------------------------------------------------------
def existing(conn: sqlite3.Connection, period: str, start: date | None, end: date | None) -> list[str]:
    """Paths of the digests of ``period`` that cover a day in [start, end] (open ends: unbounded), in
    time order."""
    period = _period(period)
    out = []
    for row in conn.execute(
        "SELECT path FROM chunks WHERE kind = 'summary' AND path >= ? AND path < ? ORDER BY path",
        index.prefix_range(f"{GLOBAL}/"),
    ):
        directory = str(PurePosixPath(row["path"]).parent)
        if period_of(directory) != period:
            continue
        first, last = _span(directory)
        if (start is None or last >= start) and (end is None or first <= end):
            out.append(str(row["path"]))
    return out


def _span(directory: str) -> tuple[date, date]:
    """The first and last day a digest folder can cover."""
    parts = directory.split("/")
    month = date.fromisoformat(parts[1] + "-01")
    month_end = (month.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)
    if len(parts) == 4:
        day = date.fromisoformat(parts[3])
        return day, day
    if len(parts) == 3:
        year, week = parts[2].split("-W")
        monday = date.fromisocalendar(int(year), int(week), 1)
        return max(monday, month), min(monday + timedelta(days=6), month_end)
    return month, month_end
