"""Telegram export adapter: the ``result.json`` of Telegram Desktop's "Export chat history" (one chat)
or of a full account export (``chats.list``, and ``left_chats``) becomes one session per chat.

A message's ``text`` is a string or a rich-text array (plain strings and ``{type, text}`` entities:
links, bold, code, mentions...): its pieces are joined, a ``text_link`` keeps its address. Service
messages (joins, pins, calls) are left out; photos and files are named. Times come from
``date_unixtime`` (the zone-less ``date`` only when it is missing). Never reads files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from vaultmem.errors import InvalidInput
from vaultmem.inputs.exports import (
    ExportFile,
    ExportFormat,
    ImportOptions,
    load_json,
    paragraphs,
    timestamp,
    turn,
)
from vaultmem.model import Message

NAME = "telegram"
_CHAT_TYPE_RE = re.compile(
    r'"type"\s*:\s*"(?:personal_chat|private_group|private_supergroup|public_supergroup|'
    r'private_channel|public_channel|saved_messages|bot_chat)"'
)


def sniff(name: str, head: str) -> bool:
    if head.lstrip()[:1] != "{":
        return False
    if '"personal_information"' in head:
        return True
    return '"messages"' in head and (
        '"date_unixtime"' in head or '"text_entities"' in head or bool(_CHAT_TYPE_RE.search(head))
    )


def parse(file: ExportFile, options: ImportOptions) -> list[Message]:
    doc = load_json(file)
    if not isinstance(doc, Mapping):
        raise InvalidInput(f"{file.name}: a Telegram export is an object (one chat, or an account)")
    source = options.source or NAME
    messages: list[Message] = []
    for i, chat in enumerate(_chats(doc)):
        if not isinstance(chat, Mapping) or not isinstance(chat.get("messages"), list):
            raise InvalidInput(f"{file.name}: chat {i} has no 'messages' list")
        chat_id = str(chat.get("id") or i)
        name = str(
            chat.get("name") or ("Saved Messages" if chat.get("type") == "saved_messages" else chat_id)
        )
        for msg in chat["messages"]:
            if not isinstance(msg, Mapping) or msg.get("type", "message") != "message":
                continue
            speaker = msg.get("from") or msg.get("from_id")
            built = turn(
                source=source,
                text=_text(msg),
                source_id=f"tg-{chat_id}-{msg.get('id')}",
                session=name,
                role=None,
                speaker=str(speaker) if speaker else None,
                ts=_when(msg),
                meta={
                    "format": NAME,
                    "chat": name,
                    "chat_type": str(chat.get("type") or ""),
                    "forwarded_from": str(msg.get("forwarded_from") or ""),
                },
            )
            if built is not None:
                messages.append(built)
    return messages


def _chats(doc: Mapping[str, Any]) -> Iterator[Any]:
    if isinstance(doc.get("messages"), list):
        yield doc
        return
    for key in ("chats", "left_chats"):
        group = doc.get(key)
        if isinstance(group, Mapping) and isinstance(group.get("list"), list):
            yield from group["list"]


def _text(msg: Mapping[str, Any]) -> str:
    parts = [_rich(msg.get("text"))]
    if msg.get("media_type") == "sticker":
        return paragraphs([*parts, str(msg.get("sticker_emoji") or "")])
    for key in ("photo", "file"):
        value = msg.get(key)
        if isinstance(value, str) and value and not value.startswith("(File not included"):
            parts.append(f"Attachment: {msg.get('file_name') or value}")
    poll = msg.get("poll")
    if isinstance(poll, Mapping) and poll.get("question"):
        answers = [str(a.get("text")) for a in poll.get("answers") or () if isinstance(a, Mapping)]
        parts.append(f"Poll: {poll['question']} ({' / '.join(answers)})")
    return paragraphs(parts)


def _rich(text: Any) -> str:
    if isinstance(text, str):
        return text
    if not isinstance(text, list):
        return ""
    out: list[str] = []
    for piece in text:
        if isinstance(piece, str):
            out.append(piece)
        elif isinstance(piece, Mapping):
            inner = str(piece.get("text") or "")
            href = piece.get("href")
            if piece.get("type") == "text_link" and href and href != inner:
                inner = f"[{inner}]({href})"
            elif piece.get("type") == "pre":
                inner = f"```{piece.get('language') or ''}\n{inner}\n```"
            elif piece.get("type") == "code":
                inner = f"`{inner}`"
            out.append(inner)
    return "".join(out)


def _when(msg: Mapping[str, Any]) -> Any:
    unix = msg.get("date_unixtime")
    if isinstance(unix, str) and unix.isdigit():
        return timestamp(int(unix))
    return timestamp(unix) or timestamp(msg.get("date"))


FORMAT = ExportFormat(NAME, "Telegram export (result.json)", sniff, parse)
