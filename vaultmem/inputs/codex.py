"""Codex CLI session adapter: a rollout file ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``
becomes the turns of one session, with the project (the session's working folder) as the source.

Only ``response_item`` lines are read (``event_msg`` repeats them): the person's messages, the
assistant's messages, and each function, shell or tool call and its output as one line in the answer.
Reasoning, the injected environment context and instructions are left out. Older files without the
``{timestamp, type, payload}`` envelope (a meta line, then bare items) are read too. A turn's id is the
session id and the line it starts on: rollout files only grow, so re-importing adds only new turns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from vaultmem.inputs.exports import (
    ExportFile,
    ExportFormat,
    ImportOptions,
    first_json_lines,
    jsonl_objects,
    obj,
    timestamp,
    tool_call_line,
    tool_result_line,
)
from vaultmem.inputs.turns import TurnBuilder
from vaultmem.model import Message, slugify_name

NAME = "codex"
_ENVELOPE_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<permissions")
_META_RE = re.compile(r'"type"\s*:\s*"session_meta"')


def sniff(name: str, head: str) -> bool:
    if head.lstrip()[:1] != "{":
        return False
    if _META_RE.search(head):
        return True
    lines = first_json_lines(head, 3)
    if not lines:
        return False
    first = lines[0]
    if first.get("type") in _ENVELOPE_TYPES and isinstance(first.get("payload"), Mapping):
        return True
    # the older layout: a meta line (id, timestamp, instructions) then bare response items
    return "instructions" in first and "id" in first and "timestamp" in first and "type" not in first


def parse(file: ExportFile, options: ImportOptions) -> list[Message]:
    items: list[tuple[int, Any, Mapping[str, Any]]] = []  # (line, timestamp, response item)
    meta: Mapping[str, Any] = {}
    model: str | None = None
    for lineno, event in jsonl_objects(file):
        kind, payload = event.get("type"), event.get("payload")
        if kind in _ENVELOPE_TYPES and isinstance(payload, Mapping):
            if kind == "session_meta":
                meta = payload
            elif kind == "turn_context" and payload.get("model"):
                model = str(payload["model"])
            elif kind == "response_item":
                items.append((lineno, event.get("timestamp"), {**payload, "_model": model}))
        elif not meta and "instructions" in event and "id" in event:
            meta = event
        elif isinstance(kind, str):
            items.append(
                (lineno, event.get("timestamp") or meta.get("timestamp"), {**event, "_model": model})
            )
    session = str(meta.get("id") or PurePosixPath(file.name).stem)
    cwd = str(meta.get("cwd") or "")
    source = options.source or (slugify_name(PurePosixPath(cwd).name, NAME) if cwd else NAME)
    turns = TurnBuilder(source, session, {"format": NAME, "project": cwd or None})
    for lineno, ts_value, item in items:
        source_id = f"{session}#{lineno}"
        ts = timestamp(ts_value)
        kind = item.get("type")
        item_model = item.get("_model")
        if kind == "message":
            text = "\n\n".join(_texts(item.get("content")))
            if item.get("role") == "user":
                if text.strip() and not text.lstrip().startswith(_INJECTED):
                    turns.user(text, source_id, ts)
            elif item.get("role") == "assistant":
                turns.agent(text, source_id, ts, item_model)
        elif kind in ("function_call", "custom_tool_call"):
            turns.agent(
                tool_call_line(str(item.get("name") or "tool"), item.get("arguments", item.get("input"))),
                source_id,
                ts,
            )
        elif kind == "local_shell_call":
            action = obj(item.get("action"))
            turns.agent(tool_call_line("shell", action), source_id, ts)
        elif kind == "web_search_call":
            action = obj(item.get("action"))
            turns.agent(tool_call_line("web_search", action), source_id, ts)
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            turns.agent(_output_line(item.get("output")), source_id, ts)
    return turns.finish()


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    blocks = content if isinstance(content, list) else []
    return [str(b["text"]) for b in blocks if isinstance(b, Mapping) and isinstance(b.get("text"), str)]


def _output_line(output: Any) -> str:
    """Older CLIs JSON-encode ``{output, metadata: {exit_code}}`` into the output string."""
    error = False
    if isinstance(output, str) and output.lstrip().startswith("{"):
        try:
            decoded = json.loads(output)
        except (json.JSONDecodeError, RecursionError):
            decoded = None
        if isinstance(decoded, Mapping) and "output" in decoded:
            metadata = obj(decoded.get("metadata"))
            error = metadata.get("exit_code") not in (None, 0)
            output = decoded["output"]
    return tool_result_line(output, error=error)


FORMAT = ExportFormat(NAME, "Codex CLI session (sessions/.../rollout-*.jsonl)", sniff, parse)
