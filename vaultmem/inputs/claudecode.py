"""Claude Code transcript adapter: a session file ``~/.claude/projects/<project>/<session>.jsonl`` (one
JSON event per line) becomes the turns of one session, with the project as the source.

The person's prompts are turns; the assistant's text with its tool calls and the tools' results (one
line each) is the answer's turn. Thinking, side chains (subagents), meta lines, compaction summaries,
slash-command echoes and bookkeeping events are left out; lines repeated by a resumed session count
once. A turn's id is the uuid of its first event, so re-importing a grown session adds only its new
turns. Never reads files; a bad line raises ``InvalidInput`` (a torn last line is left for next time).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from vaultmem.inputs.exports import (
    ExportFile,
    ExportFormat,
    ImportOptions,
    jsonl_objects,
    timestamp,
    tool_call_line,
    tool_result_line,
)
from vaultmem.inputs.turns import TurnBuilder
from vaultmem.model import Message, slugify_name

NAME = "claude-code"
_SNIFF_RE = re.compile(r'"(?:parentUuid|leafUuid)"\s*:')
_ECHO_PREFIXES = ("<command-name>", "<command-message>", "<local-command-", "Caveat: The messages below")


def sniff(name: str, head: str) -> bool:
    return head.lstrip()[:1] == "{" and bool(_SNIFF_RE.search(head)) and '"sessionId"' in head


def parse(file: ExportFile, options: ImportOptions) -> list[Message]:
    events = [obj for _, obj in jsonl_objects(file)]
    cwd = next((str(e["cwd"]) for e in events if isinstance(e.get("cwd"), str) and e["cwd"]), "")
    session = next((str(e["sessionId"]) for e in events if e.get("sessionId")), PurePosixPath(file.name).stem)
    source = options.source or (slugify_name(PurePosixPath(cwd).name, NAME) if cwd else NAME)
    branch = next((str(e["gitBranch"]) for e in events if e.get("gitBranch")), None)
    turns = TurnBuilder(source, session, {"format": NAME, "project": cwd or None, "git_branch": branch})
    seen: set[str] = set()
    for event in events:
        uuid = str(event.get("uuid") or "")
        if event.get("type") not in ("user", "assistant") or not uuid or uuid in seen:
            continue
        seen.add(uuid)
        if event.get("isSidechain") or event.get("isMeta") or event.get("isCompactSummary"):
            continue
        message = event.get("message")
        if not isinstance(message, Mapping):
            continue
        ts = timestamp(event.get("timestamp"))
        content = message.get("content")
        if event["type"] == "user":
            _user(turns, content, uuid, ts)
        else:
            model = message.get("model")
            for line in _assistant_lines(content):
                turns.agent(line, uuid, ts, str(model) if model and model != "<synthetic>" else None)
    return turns.finish()


def _user(turns: TurnBuilder, content: Any, uuid: str, ts: Any) -> None:
    if isinstance(content, str):
        if not content.lstrip().startswith(_ECHO_PREFIXES):
            turns.user(content, uuid, ts)
        return
    texts: list[str] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "tool_result":
            turns.agent(tool_result_line(block.get("content"), error=bool(block.get("is_error"))), uuid, ts)
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            if not block["text"].lstrip().startswith(_ECHO_PREFIXES):
                texts.append(block["text"])
        elif block.get("type") == "image":
            texts.append("[image]")
    if texts:
        turns.user("\n\n".join(texts), uuid, ts)


def _assistant_lines(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    lines: list[str] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            lines.append(block["text"])
        elif block.get("type") == "tool_use":
            lines.append(tool_call_line(str(block.get("name") or "tool"), block.get("input")))
    return lines


FORMAT = ExportFormat(NAME, "Claude Code transcript (projects/<project>/<session>.jsonl)", sniff, parse)
