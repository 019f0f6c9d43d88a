"""What every export adapter shares: the ``ExportFormat`` record the sniffing registry lists, the options
an import takes, and the small readers and builders the adapters use (JSON and JSONL with errors that
name the place, one-line summaries of tool calls, the ``Message`` of one turn).

Never touches the filesystem: adapters get bytes (a file, or the members of a folder or ZIP export)
and return messages. Never guesses at a record it cannot read: that raises ``InvalidInput``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vaultmem.errors import InvalidInput
from vaultmem.inputs.chat import clean_text
from vaultmem.model import InputKind, Message, parse_ts

# What a sniffer sees of a file: its first bytes, decoded leniently. Enough for the keys every export
# writes near its start, small enough to sniff a 500 MB export without reading it.
SNIFF_CHARS = 65536
# A tool call or result becomes one line of at most this many characters.
TOOL_LINE_CHARS = 160


@dataclass(frozen=True)
class ImportOptions:
    """How an export is read. ``source`` overrides each adapter's own source name; ``all_branches`` keeps
    edited and regenerated ChatGPT branches (by default only the branch the conversation shows)."""

    source: str | None = None
    all_branches: bool = False


@dataclass(frozen=True)
class ExportFile:
    """One file of an export: its path inside the export (posix, relative), its bytes, and the name of
    the folder on disk that holds it (a Slack day file's channel when it is read on its own)."""

    name: str
    data: bytes
    folder: str = ""


@dataclass(frozen=True)
class ExportFormat:
    """One adapter as the registry knows it.

    ``sniff(name, head)`` says from a file's name and first characters whether it is this format;
    ``parse(file, options)`` reads one file. A format whose unit is a folder (Slack) has ``sniff_tree``
    (the relative file names of a folder or ZIP) and ``parse_tree`` instead of the single-file pair.
    """

    name: str
    label: str
    sniff: Callable[[str, str], bool]
    parse: Callable[[ExportFile, ImportOptions], list[Message]] | None = None
    sniff_tree: Callable[[Sequence[str]], str | None] | None = None
    parse_tree: Callable[[Sequence[ExportFile], ImportOptions], list[Message]] | None = None


def obj(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one: exports leave out keys or write null."""
    return value if isinstance(value, Mapping) else {}


def head_text(data: bytes) -> str:
    """The start of ``data`` as text for sniffing (a BOM dropped, undecodable bytes ignored)."""
    return data[: SNIFF_CHARS * 4].decode("utf-8", "ignore").lstrip("\ufeff")[:SNIFF_CHARS]


def load_json(file: ExportFile) -> Any:
    """The JSON document of ``file``, or InvalidInput naming the file, line and column."""
    try:
        return json.loads(_text(file))
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{file.name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except RecursionError as exc:
        raise InvalidInput(f"{file.name}: JSON nested too deeply") from exc


def jsonl_objects(file: ExportFile) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSONL file. A torn last line (a session
    still being written) is left out; a bad line elsewhere raises InvalidInput naming it."""
    lines = _text(file).splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            if i == last:
                return
            raise InvalidInput(f"{file.name}: line {i + 1} is not valid JSON: {exc}") from exc
        if isinstance(obj, Mapping):
            yield i + 1, obj


def first_json_lines(head: str, n: int = 8) -> list[Mapping[str, Any]]:
    """The objects on the first ``n`` complete lines of ``head`` (lines that are not JSON skipped)."""
    out: list[Mapping[str, Any]] = []
    for line in head.splitlines()[:n]:
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, Mapping):
            out.append(obj)
    return out


def one_line(text: str, limit: int = TOOL_LINE_CHARS) -> str:
    """``text`` on one line (whitespace runs collapsed), cut at ``limit`` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def tool_call_line(name: str, arguments: Any) -> str:
    """``→ name: the first argument worth showing`` (a path, a command, a query), on one line."""
    arg = _main_argument(arguments)
    return one_line(f"→ {name}: {arg}" if arg else f"→ {name}")


def tool_result_line(output: Any, *, error: bool = False) -> str:
    """``← first line of the output (N lines)``: what a tool answered, on one line."""
    text = flatten(output).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else "(no output)"
    more = f" ({len(lines)} lines)" if len(lines) > 1 else ""
    return one_line(f"← {'error: ' if error else ''}{first.strip()}{more}")


def flatten(value: Any) -> str:
    """The text inside a tool result: a string, a list of text blocks, or anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(flatten(v.get("text", "") if isinstance(v, Mapping) else v) for v in value)
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return str(value["text"])
    return json.dumps(value, ensure_ascii=False)


def attachments_line(items: Any, *keys: str) -> str:
    """``Attachments: a.pdf, b.png``: the names (the first of ``keys`` each item has) of the files a
    message carried, each once; ``""`` when it carried none."""
    names: dict[str, None] = {}
    for item in items if isinstance(items, list) else ():
        name = next((item[k] for k in keys if isinstance(item, Mapping) and item.get(k)), None)
        if name is not None:
            names[str(name)] = None
    return "Attachments: " + ", ".join(names) if names else ""


def paragraphs(parts: Iterable[str]) -> str:
    """The non-blank ``parts`` as paragraphs."""
    return "\n\n".join(p for p in parts if p.strip())


def timestamp(value: Any) -> datetime | None:
    """``parse_ts`` that answers None for a value it cannot read (exports hold odd dates; a turn without
    a time is better than a lost turn)."""
    try:
        return parse_ts(value)
    except (OverflowError, OSError, ValueError, TypeError):
        return None


def turn(
    *,
    source: str,
    text: str,
    source_id: str,
    session: str | None,
    role: str | None,
    ts: datetime | None,
    speaker: str | None = None,
    meta: Mapping[str, str | None] | None = None,
) -> Message | None:
    """The ``Message`` of one turn, or None when it holds no text. Empty provenance values are left out."""
    body = clean_text(text, keep_indent=True)
    if not body.strip():
        return None
    return Message(
        source=source,
        text=body,
        kind=InputKind.CHAT,
        source_id=source_id,
        session=session,
        role=role,
        speaker=speaker,
        ts=ts,
        meta={k: one_line(v, 300) for k, v in (meta or {}).items() if v},
    )


def _text(file: ExportFile) -> str:
    try:
        return file.data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{file.name}: not valid UTF-8 (byte {exc.start}); re-save it as UTF-8") from exc


_ARGUMENT_KEYS = ("file_path", "path", "command", "cmd", "pattern", "query", "url", "description", "prompt")


def _main_argument(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            return str(arguments)
    if isinstance(arguments, Mapping):
        for key in _ARGUMENT_KEYS:
            value = arguments.get(key)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str | int) and str(value).strip():
                return str(value)
        return json.dumps(arguments, ensure_ascii=False) if arguments else ""
    return "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
