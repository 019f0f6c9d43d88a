"""Discord adapter: a DiscordChatExporter JSON file (one channel: ``guild``, ``channel``, ``messages``)
becomes one session, ``<server> #<channel>``.

Ordinary messages and replies are turns, spoken by the author's nickname (else name); joins, pins,
calls and other system messages are left out; attachments are named and embeds' titles kept.
Mentions ``<@id>`` become ``@name`` from the message's ``mentions``. Never reads files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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

NAME = "discord"
_SPOKEN = frozenset({"Default", "Reply", "0", "19"})
_MENTION_RE = re.compile(r"<@!?(\d+)>")


def sniff(name: str, head: str) -> bool:
    return head.lstrip()[:1] == "{" and '"guild"' in head and '"channel"' in head and '"messages"' in head


def parse(file: ExportFile, options: ImportOptions) -> list[Message]:
    doc = load_json(file)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("messages"), list):
        raise InvalidInput(f"{file.name}: a DiscordChatExporter file is an object with a 'messages' list")
    guild = obj(doc.get("guild"))
    channel = obj(doc.get("channel"))
    channel_id = str(channel.get("id") or "")
    session = f"{guild.get('name') or 'Discord'} #{channel.get('name') or channel_id or '?'}"
    source = options.source or NAME
    messages: list[Message] = []
    for i, msg in enumerate(doc["messages"]):
        if not isinstance(msg, Mapping):
            raise InvalidInput(f"{file.name}: message {i} is not an object")
        if str(msg.get("type", "Default")) not in _SPOKEN:
            continue
        author = obj(msg.get("author"))
        built = turn(
            source=source,
            text=_text(msg),
            source_id=f"discord-{channel_id}-{msg.get('id') or i}",
            session=session,
            role=None,
            speaker=str(author.get("nickname") or author.get("name") or "") or None,
            ts=timestamp(msg.get("timestamp")),
            meta={
                "format": NAME,
                "server": str(guild.get("name") or ""),
                "channel": str(channel.get("name") or ""),
            },
        )
        if built is not None:
            messages.append(built)
    return messages


def _text(msg: Mapping[str, Any]) -> str:
    names = {
        str(m.get("id")): str(m.get("nickname") or m.get("name"))
        for m in msg.get("mentions") or ()
        if isinstance(m, Mapping)
    }
    content = _MENTION_RE.sub(lambda m: "@" + names.get(m[1], m[1]), str(msg.get("content") or ""))
    parts = [content]
    for embed in msg.get("embeds") or ():
        if isinstance(embed, Mapping) and (embed.get("title") or embed.get("description")):
            parts.append(" — ".join(str(embed[k]) for k in ("title", "description") if embed.get(k)))
    parts.append(attachments_line(msg.get("attachments"), "fileName"))
    return paragraphs(parts)


FORMAT = ExportFormat(NAME, "Discord (DiscordChatExporter JSON)", sniff, parse)
