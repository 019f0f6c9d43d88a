"""Chat sessions as trees: a session's leaves in reading order, with levels standing in for their runs.

A session is the leaves that carry its ``session`` value (in any folder); its message nodes are those
leaves in reading order, and a level whose leaves are one unbroken run of the session stands for them.
``build_message_list`` renders it as an OpenAI-style message list, a level as an assistant tool call and
its result. Read-only.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from vaultmem import index
from vaultmem.docmem import node_row, parent_dir, siblings
from vaultmem.order import RowLike, effective_orders

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI accepts as a message ``name``
SUMMARY_TOOL = "recall_memory_summary"


@dataclass(frozen=True)
class SessionNode:
    """One child of a session: a message (its chunks joined) or a level standing for a run of leaves."""

    kind: str  # "message" | "summary"
    id: str  # the message's first leaf, or the summary
    ids: tuple[str, ...]  # the leaves it stands for, in reading order
    text: str
    role: str | None = None
    speaker: str | None = None
    ts: str | None = None  # time of the first leaf
    ts_end: str | None = None  # time of the last leaf

    @property
    def covers(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class SessionTree:
    """A session read as a tree: the session is the root, its children are in reading order."""

    session: str
    source: str | None
    children: tuple[SessionNode, ...] = ()

    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI-style message list: one message per child; a summary becomes an assistant tool
        call to ``recall_memory_summary`` followed by the tool's answer (the summary text)."""
        out: list[dict[str, Any]] = []
        for node in self.children:
            if node.kind == "message":
                message: dict[str, Any] = {"role": _chat_role(node.role), "content": node.text}
                if node.speaker and _PLAIN_NAME.match(node.speaker):
                    message["name"] = node.speaker
                out.append(message)
                continue
            call_id = f"call_{node.id}"
            arguments = {"summary_id": node.id, "covers": node.covers, "from": node.ts, "to": node.ts_end}
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": SUMMARY_TOOL, "arguments": json.dumps(arguments)},
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": call_id, "content": node.text})
        return out


def _chat_role(role: str | None) -> str:
    return role if role in ("assistant", "system") else "user"


def session_tree(conn: sqlite3.Connection, session: str, *, source: str | None = None) -> SessionTree:
    """The leaves whose ``session`` is ``session`` (in any folder), read by (ts, seq, order in their
    folder, path). A level whose leaves all belong to the session and form one unbroken run of it stands
    for them (the highest such level); consecutive chunks of one message are joined."""
    sql = "SELECT * FROM chunks WHERE kind = 'leaf' AND session = ?"
    params: list[Any] = [session]
    if source is not None:
        sql += " AND source = ?"
        params.append(source)
    leaves = conn.execute(sql, params).fetchall()
    in_folder: dict[str, Decimal] = {}
    for folder in {parent_dir(r["path"]) for r in leaves}:
        in_folder.update((r["id"], v) for v, r in effective_orders(siblings(conn, folder)))
    leaves.sort(key=lambda r: (r["ts"] or "", r["seq"], in_folder[r["id"]], r["path"]))
    position = {r["id"]: n for n, r in enumerate(leaves)}
    cover = _covering(conn, leaves, position)
    children: list[SessionNode] = []
    done: set[str] = set()
    for row in leaves:
        level = cover.get(row["id"])
        if level is not None:
            if level["id"] not in done:
                done.add(level["id"])
                ids = tuple(sorted(_leaf_ids_under(conn, level), key=position.__getitem__))
                ts = [leaves[position[i]]["ts"] for i in ids]
                children.append(
                    SessionNode("summary", level["id"], ids, level["text"], ts=ts[0], ts_end=ts[-1])
                )
            continue
        last = children[-1] if children else None
        if (
            last is not None
            and last.kind == "message"
            and row["source_id"] is not None
            and leaves[position[last.ids[-1]]]["source_id"] == row["source_id"]
            and leaves[position[last.ids[-1]]]["source"] == row["source"]
            and leaves[position[last.ids[-1]]]["seq"] + 1 == row["seq"]
        ):
            children[-1] = replace(
                last, ids=(*last.ids, row["id"]), text=f"{last.text}\n\n{row['text']}", ts_end=row["ts"]
            )
            continue
        children.append(
            SessionNode(
                "message",
                row["id"],
                (row["id"],),
                row["text"],
                row["role"],
                row["speaker"],
                row["ts"],
                row["ts"],
            )
        )
    return SessionTree(session, source, tuple(children))


def _leaf_ids_under(conn: sqlite3.Connection, level: RowLike) -> list[str]:
    prefix = parent_dir(level["path"]) + "/"
    return [
        r["id"]
        for r in conn.execute(
            "SELECT id FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?", index.prefix_range(prefix)
        )
    ]


def _covering(
    conn: sqlite3.Connection, leaves: Sequence[sqlite3.Row], position: Mapping[str, int]
) -> dict[str, sqlite3.Row]:
    """leaf id -> the highest level that stands for it: every leaf under the level is one of ``leaves``
    and they form one unbroken run of the session's reading order."""
    verdict: dict[str, str] = {}  # level id -> "stands" | "broken" (a gap in the run) | "foreign"
    rows: dict[str, sqlite3.Row] = {}
    out: dict[str, sqlite3.Row] = {}
    for leaf in leaves:
        parent = leaf["parent"]
        best: sqlite3.Row | None = None
        while parent is not None:
            if parent not in rows:
                rows[parent] = node_row(conn, parent)
            level = rows[parent]
            if parent not in verdict:
                under = _leaf_ids_under(conn, level)
                spots = [position[i] for i in under if i in position]
                if len(spots) < len(under):
                    verdict[parent] = "foreign"
                elif spots and max(spots) - min(spots) + 1 == len(spots):
                    verdict[parent] = "stands"
                else:
                    verdict[parent] = "broken"
            if verdict[parent] == "foreign":
                break  # it holds another session's leaf: so does every level above it
            if verdict[parent] == "stands":
                best = level
            parent = level["parent"]
        if best is not None:
            out[leaf["id"]] = best
    return out


def build_message_list(
    conn: sqlite3.Connection, session: str, *, source: str | None = None
) -> list[dict[str, Any]]:
    """The session as an OpenAI-style message list (see ``SessionTree.messages``)."""
    return session_tree(conn, session, source=source).messages()
