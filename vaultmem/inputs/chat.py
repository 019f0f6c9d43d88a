"""Chat adapter: JSON / JSONL chat logs and in-memory turn lists become canonical ``Message``s.

Owns the shared text normaliser ``clean_text`` used by every adapter. Never touches the filesystem and
never guesses: a record it cannot read raises ``InvalidInput`` naming where it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from vaultmem.errors import InvalidInput, UnknownFormat, UnsafePath
from vaultmem.model import InputKind, Message, parse_ts, safe_name, slugify_name

ROLES = frozenset({"user", "assistant", "system", "tool"})
# C0 and C1 control characters except tab and newline: they are invisible, break YAML and terminals.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LEADING_BLANK_LINES_RE = re.compile(r"\A(?:[ \t]*\n)+")


def clean_text(text: str, *, keep_indent: bool = False) -> str:
    """Normalise newlines to ``\\n``, drop control characters (keeping tabs) and strip the ends.

    With ``keep_indent`` only blank lines are removed at the start, so a leading indented code block
    keeps its indentation.
    """
    text = _CONTROL_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    if keep_indent:
        return _LEADING_BLANK_LINES_RE.sub("", text).rstrip()
    return text.strip()


def messages_from_records(
    records: Iterable[Mapping[str, Any]], *, source: str, session: str | None = None
) -> list[Message]:
    """Turn chat records ``{id, role|speaker, content|text, ts, session, source}`` into messages.

    Records without an id get ``"<session or 'default'>#<position>"`` so re-ingesting the same list
    yields the same ids. Records with empty content are skipped.
    """
    if isinstance(records, str | bytes | Mapping):
        raise InvalidInput("chat input must be a list of records, not a single object or string")
    return _convert(((f"record {i}", r) for i, r in enumerate(records)), source=source, session=session)


def parse_chat_bytes(data: bytes, *, source: str, filename: str = "") -> list[Message]:
    """Parse a ``.json`` (list, or object with ``messages``) or ``.jsonl`` chat log.

    When neither the file nor its records name a session, the file name stands in for it so two
    files of session-less turns do not produce the same ids.
    """
    where = filename or "chat input"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{where}: not valid UTF-8 (byte {exc.start}); re-save it as UTF-8") from exc
    raw_suffix = PurePosixPath(filename).suffix
    suffix = raw_suffix.lower()
    session = slugify_name(filename.removesuffix(raw_suffix), "default") if filename else None
    if suffix == ".jsonl":
        return _convert(_jsonl_records(text, where), source=source, session=session)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if suffix != ".json" and "\n" in text.strip():
            return _convert(_jsonl_records(text, where), source=source, session=session)
        raise InvalidInput(
            f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except RecursionError as exc:
        raise InvalidInput(f"{where}: JSON nested too deeply") from exc
    if isinstance(doc, Mapping):
        if not isinstance(doc.get("messages"), list):
            raise UnknownFormat(f"{where}: expected a list of messages or an object with a 'messages' list")
        if doc.get("source") is not None:
            source = _check_source(doc["source"], where)
        if doc.get("session") is not None:
            session = _as_str(doc["session"], "session", where)
        doc = doc["messages"]
    if not isinstance(doc, list):
        raise UnknownFormat(f"{where}: expected a list of messages or an object with a 'messages' list")
    if doc and isinstance(doc[0], Mapping) and "content" not in doc[0] and "text" not in doc[0]:
        # a list of something else (users, projects, settings): not a chat log at all
        raise UnknownFormat(f"{where}: record 0 has no 'content' (or 'text'); not a list of messages")
    return _convert(((f"{where}: record {i}", r) for i, r in enumerate(doc)), source=source, session=session)


def _jsonl_records(text: str, where: str) -> Iterable[tuple[str, Any]]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{where}: line {lineno}", json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InvalidInput(f"{where}: line {lineno} is not valid JSON: {exc}") from exc


def _convert(items: Iterable[tuple[str, Any]], *, source: str, session: str | None) -> list[Message]:
    messages = []
    for index, (label, record) in enumerate(items):
        message = _from_record(record, index, label, source, session)
        if message is not None:
            messages.append(message)
    return messages


def _from_record(record: Any, index: int, label: str, source: str, session: str | None) -> Message | None:
    if not isinstance(record, Mapping):
        raise InvalidInput(f"{label}: expected an object with 'content', got {type(record).__name__}")
    if "content" not in record and "text" not in record:
        raise InvalidInput(f"{label}: has no 'content' (or 'text')")
    text = clean_text(_content_text(record.get("content", record.get("text")), label))
    if not text:
        return None
    if record.get("source") is not None:
        source = _check_source(record["source"], label)
    elif not source:
        raise InvalidInput(
            f"{label}: no source; pass one (--source / source=) or give each record a 'source'"
        )
    else:
        safe_name(source)
    if record.get("session") is not None:
        session = _as_str(record["session"], "session", label)
    raw_id = record.get("id")
    source_id = _as_str(raw_id, "id", label) if raw_id is not None else f"{session or 'default'}#{index}"
    role, speaker = _role_and_speaker(record, label)
    return Message(
        source=source,
        text=text,
        kind=InputKind.CHAT,
        source_id=source_id,
        session=session,
        role=role,
        speaker=speaker,
        ts=_timestamp(record.get("ts", record.get("timestamp")), label),
    )


def _content_text(content: Any, label: str) -> str:
    if content is None:  # e.g. an assistant turn that only carries tool calls
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI-style parts; non-text parts (images, audio) carry no text
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                if part.get("type", "text") == "text" and part.get("text") is not None:
                    texts.append(_as_str(part["text"], "content part text", label))
            else:
                raise InvalidInput(f"{label}: content parts must be objects or strings")
        return "\n\n".join(texts)
    raise InvalidInput(f"{label}: content must be a string or a list of parts, got {type(content).__name__}")


def _role_and_speaker(record: Mapping[str, Any], label: str) -> tuple[str | None, str | None]:
    role: str | None = None
    speaker: str | None = None
    for key in ("role", "speaker"):
        value = record.get(key)
        if value is None:
            continue
        name = " ".join(_as_str(value, key, label).split())
        if name.lower() in ROLES and role is None:
            role = name.lower()
        elif name and (speaker is None or key == "speaker"):
            # An explicit speaker wins over a person's name found in the role field.
            speaker = name
    return role, speaker


def _timestamp(value: Any, label: str) -> datetime | None:
    try:
        ts = parse_ts(value)
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidInput(f"{label}: timestamp {value!r} is out of range") from exc
    if ts is None and value not in (None, ""):
        raise InvalidInput(f"{label}: cannot read timestamp {value!r}; use ISO 8601 or epoch seconds")
    return ts


def _check_source(value: Any, label: str) -> str:
    try:
        return safe_name(value)
    except UnsafePath as exc:
        raise UnsafePath(f"{label}: {exc}") from exc


def _as_str(value: Any, what: str, label: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidInput(f"{label}: {what} must be a string, got {type(value).__name__}")
    return str(value)
