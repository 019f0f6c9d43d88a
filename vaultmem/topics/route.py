"""Driving topic trees: routing one topic step by step, archiving and reviving it, and deciding which
topics to route (after admission, on the daily sweep, after deletions).

Owns the policy around ``plan``'s planner: heat decides whether a topic is made, kept, archived or
revived; each step is applied durably with ``treeops`` under the write lock, repeated until the files
agree. Never prints.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from vaultmem import entities, fsio, index, steps, vectors
from vaultmem.errors import ConflictError, FrontmatterError
from vaultmem.jobs import JobQueue, resummarise_job, topic_route_job
from vaultmem.layout import SUMMARY_NAME, Layout
from vaultmem.model import Status
from vaultmem.stale import Resummarised
from vaultmem.steps import FileWrite, StepEnv, TreeOp
from vaultmem.summaryfile import parse_summary, render_summary, text_hash
from vaultmem.topics import heat
from vaultmem.topics.plan import (
    ARCHIVE,
    SOURCE,
    TOPICS,
    TopicPlanner,
    TopicSettings,
    TopicState,
    compose_latest,
    display_name,
    existing,
    is_root,
    top_levels,
    topic_dir,
    worth_a_tree,
)


# -- archiving ----------------------------------------------------------------------------------------
def archive_op(state: TopicState, *, archive: bool) -> TreeOp | None:
    """Move a topic into ``topics/_archive/`` (or back), flagging its root ``archived``."""
    if state.root is None or state.archived == archive:
        return None
    target = topic_dir(state.key, archived=archive)
    node = replace(state.root.node, archived=archive)
    keep = parse_summary(state.root.data.decode("utf-8"), node.path)[1]
    write = FileWrite(node.path, render_summary(node, keep=keep), fsio.sha256_bytes(state.root.data))
    verb = "archive" if archive else "revive"
    return TreeOp(
        "topic",
        SOURCE,
        f"memory: {verb} topic {display_name(state.key)}",
        (write,),
        ((state.dir, target),),
    )


# -- driving ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Routed:
    messages: tuple[str, ...]
    state: str  # "live" | "archived" | "cold" (never made: not hot enough)
    notes: tuple[str, ...] = ()


def route(env: StepEnv, conn: sqlite3.Connection, key: str, settings: TopicSettings, now: datetime) -> Routed:
    """Make, update, archive or revive the topic tree of ``key`` as its heat says, step by step. With an
    LLM summariser, a topic whose root was rewritten gets a re-summarise job: the model writes its
    summary later, outside the write lock (``llm_refresh``)."""
    routed = _route(env, conn, key, settings, now)
    if routed.messages and routed.state == "live" and env.summariser.name != "extractive":
        row = conn.execute(
            "SELECT id, depth FROM chunks WHERE path = ?", (existing(conn).get(key, ""),)
        ).fetchone()
        if row is not None:
            JobQueue(conn).enqueue_many([resummarise_job(row["id"], row["depth"])])
    return routed


def _route(
    env: StepEnv, conn: sqlite3.Connection, key: str, settings: TopicSettings, now: datetime
) -> Routed:
    layout, write_lock, max_bytes, commit = env.layout, env.lock, env.max_bytes, env.commit
    embedder = env.embedder()
    hot = heat.heat_of(conn, key, now, settings.heat)
    messages: list[str] = []
    for _ in range(64):  # each step makes progress; the bound only guards against a bug looping
        with write_lock():
            state = TopicState.load(conn, layout, key, max_bytes)
            exists = state.root is not None
            if not exists and (hot < settings.heat.create_at or not worth_a_tree(state, settings)):
                return Routed(tuple(messages), "cold")
            if not exists and (stray := _unindexed_root(layout, key, max_bytes)) is not None:
                # A person moved the topic's folder and nothing has indexed it yet: never make a second.
                note = f"{stray} holds topic {key} but is not indexed; `vaultmem check --fix` indexes it"
                return Routed(tuple(messages), "live", (note,))
            if exists and not state.archived and (hot < settings.heat.archive_below or not state.members):
                # Cold, or no leaf names it any more (its entities were corrected, or found anew by
                # `vaultmem topics --rescan`): kept whole in the archive, no longer routed.
                op = archive_op(state, archive=True)
            elif state.archived and hot >= settings.heat.create_at and worth_a_tree(state, settings):
                op = archive_op(state, archive=False)
            elif state.archived:
                return Routed(tuple(messages), "archived")
            else:
                op = TopicPlanner(conn, layout, settings, embedder.model_id).route(state)
            if op is None:
                return Routed(tuple(messages), "live")
            try:
                steps.apply(conn, layout, op, embedder.model_id, embedder.dim)
            except ConflictError as exc:  # a person is editing it; the next route retries
                return Routed(tuple(messages), "live", (f"topic {key}: {exc}",))
            if commit is not None:
                commit(op.message)
            messages.append(op.message)
    return Routed(tuple(messages), "live")


def resummarise(
    env: StepEnv, conn: sqlite3.Connection, node_id: str, key: str, settings: TopicSettings
) -> Resummarised | Routed:
    """The topic tree's own re-summarise of its node ``node_id`` (of the topic of ``key``): the LLM pass
    a route asked for writes a live root's summary outside the lock (``llm_refresh``); a stale topic
    node is rewritten by routing its topic (its children are links, not its folder)."""
    row = conn.execute("SELECT path, status FROM chunks WHERE id = ?", (node_id,)).fetchone()
    if (
        row is not None
        and env.summariser.name != "extractive"
        and row["status"] != "stale"
        and is_root(row["path"])
    ):
        return llm_refresh(env, conn, key, settings)
    return route(env, conn, key, settings, heat.utcnow())


def llm_refresh(env: StepEnv, conn: sqlite3.Connection, key: str, settings: TopicSettings) -> Resummarised:
    """Rewrite a topic root's summary with the summariser (an LLM): its inputs are read under the write
    lock, the model runs without it, and the write is guarded by the hash read (a route or a person
    writing meanwhile makes it try again later). Links, vector and hand edits are kept."""
    layout, summariser, write_lock, max_bytes = env.layout, env.summariser, env.lock, env.max_bytes
    embedder = env.embedder()
    model, dim = embedder.model_id, embedder.dim
    with write_lock():
        state = TopicState.load(conn, layout, key, max_bytes)
        if state.root is None or state.archived:
            return Resummarised("gone")
        planner = TopicPlanner(conn, layout, settings, model)
        newest_first = [i for i in state.root.links if i in state.members]
        top = top_levels(state)
        children = planner._children(state, newest_first)
        vec = vectors.by_ids(conn, model, [state.root.id]).get(state.root.id)
    result = summariser.summarise(children, 2) if children else None
    text = compose_latest(state, newest_first, top, result.text if result else "")
    base = state.root.node
    node = replace(
        base,
        text=text,
        summariser=result.summariser if result else base.summariser,
        content_hash=text_hash(text),
        stale=False,
    )
    if base.hand_edited and base.text.strip():
        node = replace(
            node, pinned=f"{base.pinned}\n\n{base.text}".strip() if base.pinned else base.text.strip()
        )
    keep = parse_summary(state.root.data.decode("utf-8"), base.path)[1]
    message = f"memory: re-summarise topic {display_name(key)}"
    op = TreeOp(
        "topic",
        SOURCE,
        message,
        (FileWrite(base.path, render_summary(node, keep=keep), fsio.sha256_bytes(state.root.data)),),
        vectors={node.id: vec} if vec is not None else {},
    )
    with write_lock():
        try:
            steps.apply(conn, layout, op, model, dim)
        except ConflictError:
            return Resummarised("defer", notes=(f"{base.path} changed while it was summarised; retrying",))
    return Resummarised("done", message, tuple(result.notes) if result else ())


def candidates(
    conn: sqlite3.Connection, layout: Layout, changed: Sequence[str], now: datetime, settings: TopicSettings
) -> list[str]:
    """Entities among ``changed`` that need routing: hot enough for a topic, or with one already."""
    known = existing(conn)  # by the roots' entity keys: a topic folder renamed by hand still counts
    return [
        key
        for key in changed
        if entities.parse_key(key)[0] in settings.kinds
        and (key in known or heat.heat_of(conn, key, now, settings.heat) >= settings.heat.create_at)
    ]


def after_admit(
    conn: sqlite3.Connection, layout: Layout, leaf_ids: Sequence[str], now: datetime, settings: TopicSettings
) -> int:
    """Record the admitted leaves' mentions in the heat table and queue routing where needed."""
    if not settings.enabled or not leaf_ids:
        return 0
    changed = heat.admitted(conn, leaf_ids, now, settings.heat)
    return JobQueue(conn).enqueue_many(
        topic_route_job(k) for k in candidates(conn, layout, changed, now, settings)
    )


def sweep(conn: sqlite3.Connection, layout: Layout, now: datetime, settings: TopicSettings) -> int:
    """Queue routing for every existing topic (archiving the cold) and every entity hot enough for
    one; the daily schedule and ``vaultmem compact`` run it."""
    if not settings.enabled:
        return 0
    keys = set(existing(conn))
    keys.update(
        k
        for k, h in heat.current(conn, now, settings.heat).items()
        if h >= settings.heat.create_at and entities.parse_key(k)[0] in settings.kinds
    )
    return JobQueue(conn).enqueue_many(topic_route_job(k) for k in sorted(keys))


def enqueue_out_of_date(conn: sqlite3.Connection) -> int:
    """Queue routing for every topic whose root no longer counts its entity's leaves (one was deleted,
    or its entities were edited by hand). Cheap: counts from the index, no file is read."""
    jobs = []
    for row in conn.execute(
        "SELECT path, provenance FROM chunks WHERE kind = 'summary' AND path >= ? AND path < ?",
        index.prefix_range(TOPICS + "/"),
    ):
        meta = json.loads(row["provenance"])
        key = meta.get("entity")
        if not key or not is_root(row["path"]):
            continue
        count = conn.execute(
            "SELECT count(*) FROM mentions m JOIN chunks c ON c.id = m.leaf WHERE m.entity = ? AND c.status <> ?",
            (key, Status.PENDING.value),
        ).fetchone()[0]
        if int(count) != int(meta.get("descendants") or 0):
            jobs.append(topic_route_job(str(key)))
    return JobQueue(conn).enqueue_many(jobs)


def _unindexed_root(layout: Layout, key: str, max_bytes: int) -> str | None:
    """A topic root for ``key`` on disk at another place than its slug (read only when a topic is about
    to be made, which is rare: a few files one level under ``topics/``)."""
    base = layout.abs(TOPICS)
    if not base.is_dir():
        return None
    for path in [*base.glob(f"*/{SUMMARY_NAME}"), *base.glob(f"{ARCHIVE}/*/{SUMMARY_NAME}")]:
        rel = layout.rel(path)
        try:
            node, _doc = parse_summary(fsio.read_text_guarded(path, max_bytes)[0], rel)
        except (OSError, UnicodeDecodeError, FrontmatterError):
            continue
        if node.entity == key:
            return rel
    return None
