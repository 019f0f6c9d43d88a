"""WhatsApp chat export adapter: the ``.txt`` of "Export chat" (on its own, or as ``_chat.txt`` in the
export's ZIP) becomes one session, the chat, with each person's message a turn.

The line format depends on the phone and its locale: ``[12/03/2024, 14:05:33] Name: text`` (iOS),
``12/03/2024, 14:05 - Name: text`` (Android), ``3/12/24, 2:05 PM - Name: text`` (US, often with a
narrow no-break space before PM), ``12.03.24, 14:05 - Name: text`` (German), ``2024/03/12 14:05``.
Day-month or month-day order is decided once per file from the dates themselves (a first field over
12 means day first; a second field over 12 means month first; otherwise AM/PM means month first).
A line without a date continues the message above; a dated line without ``Name:`` is a system line
(encryption notice, group changes) and is left out, as are iOS's system lines (sent in the group's
name, their text marked with U+200E), media placeholders and deleted messages.
Times carry no zone in the export: they are read as UTC. Never reads files.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath

from vaultmem.errors import InvalidInput
from vaultmem.inputs.exports import ExportFile, ExportFormat, ImportOptions, turn
from vaultmem.model import Message

NAME = "whatsapp"
_MARKS = "\ufeff\u200e\u200f\u202a\u202c"
_LINE_RE = re.compile(
    r"^[" + _MARKS + r"]*(?P<open>\[)?(?P<date>\d{1,4}[./-]\d{1,2}[./-]\d{1,4})\.?,?\s+"
    r"(?P<time>\d{1,2}[:.]\d{2}(?:[:.]\d{2})?)(?:[\s\u202f\u00a0]*(?P<ampm>[AaPp]\.?\s?[Mm]\.?))?"
    r"(?(open)\]\s|\s[-\u2013]\s)(?P<rest>.*)$"
)
_NAME_RE = re.compile(r"^[" + _MARKS + r"~\u202f\u00a0 ]*(?P<name>[^:]{1,80}?): (?P<text>.*)$", re.DOTALL)
_CHAT_NAME_RE = re.compile(r"^WhatsApp[ _-]?Chat\s*(?:with|mit|avec|con|com|met|-)?\s*", re.IGNORECASE)
_OMITTED = re.compile(
    r"^(?:<Media omitted>|<Medien ausgeschlossen>|(?:image|video|audio|sticker|GIF|document) omitted|"
    r"This message was deleted|You deleted this message|null)$",
    re.IGNORECASE,
)
_ATTACHED = re.compile(r"^<attached: (?P<file>[^>]+)>$")
_EDITED = re.compile(r"\s*<This message was edited>$")


@dataclass
class _Line:
    date: str
    time: str
    ampm: str | None
    rest: str


def sniff(name: str, head: str) -> bool:
    lines = [line for line in head.splitlines()[:12] if line.strip(_MARKS + " \t")]
    if not lines or not _LINE_RE.match(lines[0]):
        return False
    dated = [m for m in (_LINE_RE.match(line) for line in lines) if m]
    return len(dated) >= min(2, len(lines))


def parse(file: ExportFile, options: ImportOptions) -> list[Message]:
    try:
        text = file.data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{file.name}: not valid UTF-8 (byte {exc.start}); re-save it as UTF-8") from exc
    entries: list[_Line] = []
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        m = _LINE_RE.match(raw)
        if m:
            entries.append(_Line(m["date"], m["time"], m["ampm"], m["rest"]))
        elif entries:
            entries[-1].rest += "\n" + raw
    if not entries:
        raise InvalidInput(f"{file.name}: no dated WhatsApp lines found")
    order = _date_order([e.date for e in entries], any(e.ampm for e in entries))
    session = _chat_name(file.name)
    source = options.source or NAME
    messages: list[Message] = []
    seen: dict[str, int] = {}
    for entry in entries:
        said = _NAME_RE.match(entry.rest)
        if not said:
            continue  # a system line
        speaker = said["name"].strip(_MARKS + "~\u202f\u00a0 ")
        body = _EDITED.sub("", said["text"].strip(_MARKS)).strip()
        attached = _ATTACHED.match(body)
        if attached:
            body = f"Attachment: {attached['file']}"
        elif said["text"].startswith("\u200e"):
            continue  # iOS marks its system lines (sent in the group's name) and placeholders so
        if not body or _OMITTED.match(body):
            continue
        ts = _when(entry, order, file.name)
        key = hashlib.sha256(f"{ts.isoformat()}\x1f{speaker}\x1f{body}".encode()).hexdigest()[:16]
        seen[key] = seen.get(key, 0) + 1
        built = turn(
            source=source,
            text=body,
            source_id=f"wa-{key}" + (f"-{seen[key]}" if seen[key] > 1 else ""),
            session=session,
            role=None,
            speaker=speaker,
            ts=ts,
            meta={"format": NAME, "chat": session},
        )
        if built is not None:
            messages.append(built)
    return messages


def _date_order(dates: list[str], has_ampm: bool) -> str:
    """``ymd``, ``dmy`` or ``mdy`` for every date of the file."""
    fields = [re.split(r"[./-]", d) for d in dates]
    if all(len(f[0]) == 4 for f in fields):
        return "ymd"
    if any(int(f[0]) > 12 for f in fields):
        return "dmy"
    if any(int(f[1]) > 12 for f in fields):
        return "mdy"
    return "mdy" if has_ampm else "dmy"


def _when(entry: _Line, order: str, where: str) -> datetime:
    a, b, c = (int(x) for x in re.split(r"[./-]", entry.date))
    year, month, day = {"ymd": (a, b, c), "dmy": (c, b, a), "mdy": (c, a, b)}[order]
    if year < 100:
        year += 2000
    parts = [int(x) for x in re.split(r"[:.]", entry.time)]
    hour, minute, second = parts[0], parts[1], parts[2] if len(parts) > 2 else 0
    if entry.ampm:
        pm = entry.ampm.lower().startswith("p")
        hour = hour % 12 + (12 if pm else 0)
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as exc:
        raise InvalidInput(f"{where}: cannot read the date {entry.date} {entry.time}: {exc}") from exc


def _chat_name(name: str) -> str:
    path = PurePosixPath(name)
    stem = path.stem
    if stem.lstrip("_").lower() == "chat" and len(path.parts) > 1:
        stem = PurePosixPath(path.parts[-2]).stem  # _chat.txt inside "WhatsApp Chat - Alice.zip"
    return _CHAT_NAME_RE.sub("", stem).strip() or stem


FORMAT = ExportFormat(NAME, "WhatsApp chat export (.txt)", sniff, parse)
