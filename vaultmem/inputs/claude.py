"""Claude export adapter: the ``conversations.json`` of a claude.ai data export (a list of
conversations with ``chat_messages``) becomes one session per conversation.

A message's text comes from its ``content`` blocks when it has them (text kept, thinking left out,
tool use and tool results one line each), else from its flat ``text``. Attachments and files are
named. Never reads files; a structure it cannot read raises ``InvalidInput``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vaultmem.errors import InvalidInput
from vaultmem.inputs.exports import (
    ExportFile,
    ExportFormat,
    ImportOptions,
    attachments_line,
    load_json,
    paragraphs,
    timestamp,
    tool_call_line,
    tool_result_line,
    turn,
)
from vaultmem.model import Message

NAME = "claude"
_ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def sniff(name: str, head: str) -> bool:
    return head.lstrip()[:1] == "[" and '"chat_messages"' in head


def parse(file: ExportFile, options: ImportOptions) -> list[Message]:
    doc = load_json(file)
    if not isinstance(doc, list):
        raise InvalidInput(f"{file.name}: a Claude export is a list of conversations")
    source = options.source or NAME
    messages: list[Message] = []
    for i, conv in enumerate(doc):
        where = f"{file.name}: conversation {i}"
        if not isinstance(conv, Mapping) or not isinstance(conv.get("chat_messages"), list):
            raise InvalidInput(f"{where}: has no 'chat_messages' list")
        session = str(conv.get("uuid") or f"claude-{i}")
        title = str(conv.get("name") or "")
        for j, msg in enumerate(conv["chat_messages"]):
            if not isinstance(msg, Mapping):
                raise InvalidInput(f"{where}: message {j} is not an object")
            role = _ROLES.get(str(msg.get("sender") or ""))
            if role is None:
                continue
            built = turn(
                source=source,
                text=_text(msg),
                source_id=str(msg.get("uuid") or f"{session}#{j}"),
                session=session,
                role=role,
                ts=timestamp(msg.get("created_at")) or timestamp(conv.get("created_at")),
                meta={"format": NAME, "title": title},
            )
            if built is not None:
                messages.append(built)
    return messages


def _text(msg: Mapping[str, Any]) -> str:
    blocks = msg.get("content")
    parts: list[str] = []
    if isinstance(blocks, list) and blocks:
        for block in blocks:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif kind == "tool_use":
                parts.append(tool_call_line(str(block.get("name") or "tool"), block.get("input")))
            elif kind == "tool_result":
                parts.append(tool_result_line(block.get("content"), error=bool(block.get("is_error"))))
    elif isinstance(msg.get("text"), str):
        parts.append(msg["text"])
    files = [*(msg.get("attachments") or ()), *(msg.get("files") or ())]
    parts.append(attachments_line(files, "file_name"))
    return paragraphs(parts)


FORMAT = ExportFormat(NAME, "Claude export (conversations.json)", sniff, parse)
