"""Slack export adapter: a workspace export (folder or ZIP: ``channels.json``, ``users.json``, and a
folder per channel with one ``YYYY-MM-DD.json`` per day) becomes one session per channel; a single day
file is read too, its folder naming the channel.

Messages are turns spoken by the user's real name (from ``users.json`` or the message's own profile);
joins, leaves, topic changes and other housekeeping subtypes are left out. Slack markup is made
readable: ``<@U01>`` -> ``@Alice``, ``<#C01|general>`` -> ``#general``, ``<https://x|label>`` ->
``label (https://x)``, ``&amp;`` -> ``&``. Thread replies keep their thread in ``thread``. Never reads
files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from vaultmem.errors import InvalidInput
from vaultmem.inputs.exports import (
    ExportFile,
    ExportFormat,
    ImportOptions,
    attachments_line,
    load_json,
    obj,
    paragraphs,
    timestamp,
    turn,
)
from vaultmem.model import Message

NAME = "slack"
_DAY_RE = re.compile(r"^(?:(?P<root>.+)/)?(?P<channel>[^/]+)/\d{4}-\d{2}-\d{2}\.json$")
_INDEX_FILES = ("channels.json", "users.json", "groups.json", "dms.json", "mpims.json")
_DAY_SNIFF_RE = re.compile(r'"type"\s*:\s*"message"')
_TS_SNIFF_RE = re.compile(r'"ts"\s*:\s*"\d{9,10}\.\d+"')
_KEPT_SUBTYPES = frozenset(
    {None, "bot_message", "thread_broadcast", "file_share", "me_message", "file_comment"}
)
_MARKUP_RE = re.compile(r"<([^<>]+)>")


def sniff(name: str, head: str) -> bool:
    """A single day file: a list of message objects with Slack's string timestamps."""
    return head.lstrip()[:1] == "[" and bool(_DAY_SNIFF_RE.search(head)) and bool(_TS_SNIFF_RE.search(head))


def sniff_tree(names: Sequence[str]) -> str | None:
    """The folder (``""`` for the top) holding a Slack export among ``names``, or None."""
    roots = {str(PurePosixPath(n).parent) for n in names if PurePosixPath(n).name in _INDEX_FILES}
    for n in names:
        m = _DAY_RE.match(n)
        if m and (m["root"] or ".") in roots:
            return "" if m["root"] is None else m["root"]
    return None


def parse(file: ExportFile, options: ImportOptions) -> list[Message]:
    channel = PurePosixPath(file.name).parent.name or file.folder or PurePosixPath(file.name).stem
    return _day(file, channel, {}, options.source or NAME)


def parse_tree(files: Sequence[ExportFile], options: ImportOptions) -> list[Message]:
    names = [f.name for f in files]
    root = sniff_tree(names)
    if root is None:
        raise InvalidInput("not a Slack export: no channels.json or users.json beside channel folders")
    prefix = f"{root}/" if root else ""
    by_name = {f.name: f for f in files}
    users = _users(by_name.get(prefix + "users.json"))
    channels = _channel_names(by_name, prefix, users)
    source = options.source or NAME
    messages: list[Message] = []
    for file in sorted(files, key=lambda f: f.name):
        m = _DAY_RE.match(file.name)
        if not m or (m["root"] or "") != root:
            continue
        folder = m["channel"]
        messages.extend(_day(file, channels.get(folder, folder), users, source))
    return messages


def _day(file: ExportFile, channel: str, users: Mapping[str, str], source: str) -> list[Message]:
    doc = load_json(file)
    if not isinstance(doc, list):
        raise InvalidInput(f"{file.name}: a Slack day file is a list of messages")
    out: list[Message] = []
    for msg in doc:
        if not isinstance(msg, Mapping) or msg.get("type", "message") != "message":
            continue
        if msg.get("subtype") not in _KEPT_SUBTYPES or not msg.get("ts"):
            continue
        profile = obj(msg.get("user_profile"))
        user = str(msg.get("user") or "")
        speaker = users.get(user) or profile.get("real_name") or msg.get("username") or user or None
        thread = msg.get("thread_ts")
        built = turn(
            source=source,
            text=_text(msg, users),
            source_id=f"slack-{channel}-{msg['ts']}",
            session=f"#{channel}",
            role=None,
            speaker=str(speaker) if speaker else None,
            ts=timestamp(float(msg["ts"])) if _is_number(msg["ts"]) else None,
            meta={
                "format": NAME,
                "channel": channel,
                "thread": str(thread) if thread and thread != msg["ts"] else None,
            },
        )
        if built is not None:
            out.append(built)
    return out


def _text(msg: Mapping[str, Any], users: Mapping[str, str]) -> str:
    def markup(m: re.Match[str]) -> str:
        inner = m[1]
        target, _, label = inner.partition("|")
        if target.startswith("@"):
            return "@" + (label or users.get(target[1:], target[1:]))
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            return "@" + (label or target[1:].split("^")[0])
        return f"{label} ({target})" if label and label != target else target

    text = _MARKUP_RE.sub(markup, str(msg.get("text") or ""))
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return paragraphs([text, attachments_line(msg.get("files"), "name", "title")])


def _users(file: ExportFile | None) -> dict[str, str]:
    if file is None:
        return {}
    doc = load_json(file)
    out: dict[str, str] = {}
    for user in doc if isinstance(doc, list) else ():
        if isinstance(user, Mapping) and user.get("id"):
            profile = obj(user.get("profile"))
            name = (
                user.get("real_name")
                or profile.get("real_name")
                or profile.get("display_name")
                or user.get("name")
            )
            out[str(user["id"])] = str(name or user["id"])
    return out


def _channel_names(
    by_name: Mapping[str, ExportFile], prefix: str, users: Mapping[str, str]
) -> dict[str, str]:
    """Folder -> channel name. Channels' folders are their names; a direct message's folder is its id,
    named here after its members."""
    out: dict[str, str] = {}
    for index in ("dms.json", "mpims.json"):
        file = by_name.get(prefix + index)
        doc = load_json(file) if file else []
        for conv in doc if isinstance(doc, list) else ():
            if isinstance(conv, Mapping) and conv.get("id"):
                members = [users.get(str(u), str(u)) for u in conv.get("members") or ()]
                out[str(conv["id"])] = str(conv.get("name") or "dm-" + "-".join(members))
    return out


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


FORMAT = ExportFormat(NAME, "Slack export (folder or ZIP)", sniff, parse, sniff_tree, parse_tree)
