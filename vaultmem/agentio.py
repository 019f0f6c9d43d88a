"""What an agent hands the vault, made into the engine's values: remembered text, a turn, a recall query.

Owns the rules of the agent-facing writes (the MCP server, the memory tool, the hooks all go through the
``Vault`` methods that use them): how big a remembered text may be, the content-derived id of a
remembered text or an id-less turn (so saying it twice stores it once), the commit message naming the
client and the reason, the question a list of chat messages asks, and adding top-level keys such as
``supersedes`` / ``superseded_by`` to a node file without touching anything else in it. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vaultmem.errors import InvalidInput
from vaultmem.model import InputKind, Message, slugify_name
from vaultmem.redact import scrub
from vaultmem.tokens import count_tokens

REMEMBER_MAX_TOKENS = 1024  # about 4 KB of prose: a memory is a fact or an episode, not a document
REMEMBER_MAX_CHARS = 16_000  # checked first, so a huge text is refused before it is tokenised
RECALL_MIN_CONTEXT = 32  # recall adds context only when at least this many tokens are left after core memory
QUERY_MAX_CHARS = 2000  # the question recall asks is the tail of the conversation, not all of it
SUPERSEDES = "supersedes"  # the key names of validity (issue #20): the new leaf names the old one ...
SUPERSEDED_BY = "superseded_by"  # ... and the old one names its successor
VIA = "via"  # provenance: which interface wrote it (mcp, hook, api)


def check_text(text: Any, *, what: str = "text", max_tokens: int = REMEMBER_MAX_TOKENS) -> str:
    """``text`` stripped, or InvalidInput when it is not a string, empty, or over the size cap."""
    if not isinstance(text, str):
        raise InvalidInput(f"the {what} must be a string, got {type(text).__name__}")
    body = text.strip()
    if not body:
        raise InvalidInput(f"the {what} is empty; give the fact or episode to remember")
    if len(body) > REMEMBER_MAX_CHARS or (tokens := count_tokens(body)) > max_tokens:
        size = f"{len(body)} characters" if len(body) > REMEMBER_MAX_CHARS else f"{tokens} tokens"
        raise InvalidInput(
            f"the {what} is {size}; at most {max_tokens} tokens ({REMEMBER_MAX_CHARS} characters) can be"
            " remembered at once: split it into separate facts, or ingest a file (`vaultmem ingest`)"
        )
    return body


def client_source(name: str | None, fallback: str = "agent") -> str:
    """A source name for a client ("Claude Desktop" -> ``claude-desktop``); ``fallback`` when unnamed."""
    return slugify_name(name or "", fallback) if name and name.strip() else fallback


def text_digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]


def remembered(
    text: str,
    *,
    source: str,
    session: str | None = None,
    role: str | None = None,
    speaker: str | None = None,
    ts: datetime | None = None,
    reason: str | None = None,
    via: str = "api",
) -> Message:
    """The message a remembered text becomes. Its source id is derived from the text, so the same text
    remembered again by the same client is the same leaf (ingest's content-addressed ids do the rest)."""
    text = check_text(text)
    now = ts or datetime.now(UTC)
    meta = {VIA: via}
    if reason and reason.strip():
        meta["reason"] = " ".join(reason.split())[:300]
    return Message(
        source=source,
        text=text,
        kind=InputKind.CHAT,
        source_id=f"remember:{text_digest(text)}",
        session=session or f"remembered-{now:%Y-%m-%d}",
        role=role or "assistant",
        speaker=speaker,
        ts=now,
        meta=meta,
    )


def turn_records(
    messages: Mapping[str, Any] | Sequence[Mapping[str, Any]], session: str
) -> list[dict[str, Any]]:
    """Chat records for ``Vault.record_turn``: one mapping or a list of them (OpenAI or Anthropic shape:
    ``role`` and ``content``, a string or a list of parts). A record without an ``id`` gets one from its
    session, role, time and text, so recording the same turn twice stores it once."""
    items = [messages] if isinstance(messages, Mapping) else list(messages)
    out = []
    for n, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidInput(f"turn {n}: expected a message object with 'role' and 'content'")
        record = dict(item)
        if record.get("id") is None:
            body = json.dumps(record.get("content", record.get("text")), sort_keys=True, default=str)
            stamp = str(record.get("ts", record.get("timestamp", "")))
            record["id"] = f"turn-{text_digest(session, str(record.get('role', '')), stamp, body)}"
        out.append(record)
    return out


def query_of(query_or_messages: str | Sequence[Mapping[str, Any]]) -> str:
    """The question to recall for: the string itself, or the text of the last user turns of a message
    list (then the last turn of anyone, when no user spoke), its tail at most ``QUERY_MAX_CHARS``."""
    if isinstance(query_or_messages, str):
        return query_or_messages.strip()
    texts: list[str] = []
    fallback: list[str] = []
    for message in query_or_messages:
        if not isinstance(message, Mapping):
            raise InvalidInput("recall takes a query string or a list of {role, content} messages")
        text = message_text(message.get("content", message.get("text")))
        if not text:
            continue
        (texts if message.get("role") == "user" else fallback).append(text)
    picked = texts[-3:] or fallback[-1:]
    return " ".join(" ".join(picked).split())[-QUERY_MAX_CHARS:].strip()


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts (other parts
    (images, tool calls, tool results, thinking) carry no text worth remembering)."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [
            str(p["text"]) if isinstance(p, Mapping) else p
            for p in content
            if isinstance(p, str)
            or (isinstance(p, Mapping) and p.get("type", "text") == "text" and p.get("text") is not None)
        ]
        return "\n\n".join(str(p).strip() for p in parts if str(p).strip())
    return ""


def fit_lines(text: str, budget_tokens: int) -> str:
    """``text`` cut to whole lines within ``budget_tokens`` (core memory larger than a recall budget)."""
    if count_tokens(text) <= budget_tokens:
        return text
    kept: list[str] = []
    used = 0
    for line in text.splitlines():
        cost = count_tokens(line)
        if used + cost > budget_tokens:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept).strip()


def commit_message(client: str, action: str, reason: str | None) -> str:
    """``memory: <client> <action> (<reason>)``: git history says who changed memory and why."""
    why = f" ({' '.join(reason.split())[:120]})" if reason and reason.strip() else ""
    return scrub(f"memory: {client} {action}{why}")


def with_keys(text: str, keys: Mapping[str, Any], *, where: str = "file") -> str:
    """A Markdown file's text with top-level frontmatter ``keys`` set (replaced where present, else added
    after the others); every other key keeps its YAML text byte for byte, and the body is unchanged."""
    from vaultmem import (
        frontmatter,  # YAML: loaded by the writes that need it, not by `vaultmem mcp` at start
    )

    doc = frontmatter.split(text, where=where)
    blocks = [raw if raw.endswith("\n") else raw + "\n" for key, raw in doc.raw_blocks if key not in keys]
    return "---\n" + "".join(blocks) + frontmatter.dump_mapping(dict(keys)) + "---\n" + doc.body


def id_list(value: Any) -> list[str]:
    """A ``supersedes`` / ``superseded_by`` value as a list of ids (one id, or a list of them)."""
    if value is None:
        return []
    items: Iterable[Any] = value if isinstance(value, list) else [value]
    return [str(v) for v in items if str(v).strip()]


def added_id(value: Any, new: str) -> str | list[str]:
    """``value`` with ``new`` added: one id stays a plain string, several become a list."""
    ids = id_list(value)
    if new not in ids:
        ids.append(new)
    return ids[0] if len(ids) == 1 else ids


@dataclass(frozen=True)
class Remembered:
    """What ``Vault.remember`` / ``Vault.supersede`` did: the leaves holding the text (new or already
    there), which of them were already there, and the leaf the text replaces (``supersede``)."""

    ids: tuple[str, ...]
    paths: tuple[str, ...]
    duplicates: tuple[str, ...] = ()
    supersedes: str | None = None

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(i for i in self.ids if i not in self.duplicates)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ids": list(self.ids),
            "paths": list(self.paths),
            "added": list(self.added),
            "duplicates": list(self.duplicates),
            "supersedes": self.supersedes,
        }


@dataclass(frozen=True)
class Recall:
    """The block ``Vault.recall`` gives an agent for its system prompt: core memory first (when the vault
    has it), then the budgeted context; ``tokens`` never exceeds the budget."""

    query: str
    text: str
    tokens: int
    core: str = ""
    context: Any = None  # the vaultmem.context.Context the block holds, when it holds one

    def as_dict(self) -> dict[str, Any]:
        items = self.context.as_dict()["items"] if self.context is not None else []
        return {
            "query": self.query,
            "text": self.text,
            "tokens": self.tokens,
            "core": self.core,
            "items": items,
        }
