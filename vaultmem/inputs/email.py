"""Email adapter: ``.eml`` files and mbox mailboxes become one EMAIL ``Message`` per email.

Owns charset handling, HTML-to-text and the thread headers; ``mailreply`` trims what the sender quoted
and ``mailthread`` gives each email its thread. Uses only the stdlib ``email``/``mailbox`` packages;
never writes to the mailbox.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from datetime import datetime
from email import message_from_bytes
from email.header import decode_header
from email.message import Message as EmailMessage
from email.utils import getaddresses, parseaddr, parsedate_to_datetime
from html.parser import HTMLParser
from pathlib import Path

from vaultmem.errors import InvalidInput
from vaultmem.inputs.chat import clean_text
from vaultmem.inputs.mailreply import trim_reply
from vaultmem.model import InputKind, Message, safe_name, utc

# Labels mail clients use for charsets Python knows under a wider (superset) name.
_CHARSET_ALIASES = {
    "gb2312": "gbk",
    "gb_2312-80": "gbk",
    "x-gbk": "gbk",
    "cn-gb": "gbk",
    "shift_jis": "cp932",
    "shift-jis": "cp932",
    "x-sjis": "cp932",
    "sjis": "cp932",
    "iso-8859-1": "cp1252",  # as browsers do: "latin-1" mail is almost always Windows-1252
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "ks_c_5601-1987": "cp949",
}
_MSGID_RE = re.compile(r"<([^<>\s]+)>")
_FROM_LINE_RE = re.compile(rb"(?m)^From ")


def parse_eml(data: bytes, *, source: str) -> Message:
    """Parse one RFC 5322 email into a message whose text is ``Subject: ...`` plus the trimmed body."""
    safe_name(source)
    if not data.strip():
        raise InvalidInput("email is empty: nothing to ingest")
    return _to_message(message_from_bytes(data), data, source)


def parse_mbox(path: Path, *, source: str, data: bytes | None = None) -> list[Message]:
    """Parse every email of an mbox file, in file order. Emails without headers or text are skipped.

    ``data`` is the file's content when the caller has read it already (re-encoded, say)."""
    safe_name(source)
    if data is None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidInput(f"{path}: cannot open mailbox: {exc.strerror or exc}") from exc
    messages = []
    for raw in split_mbox(data):
        # mbox escapes body lines starting with "From " as ">From "; undo one level (mboxrd).
        raw = re.sub(rb"(?m)^>(>*From )", rb"\1", raw)
        try:
            messages.append(_to_message(message_from_bytes(raw), raw, source))
        except InvalidInput:
            continue
    return messages


def split_mbox(data: bytes) -> list[bytes]:
    """The emails of an mbox, as ``mailbox.mbox`` cuts them: each starts after a line beginning with
    ``From `` and ends before the next one (and before the blank line above it); text before the
    first such line belongs to no email."""
    starts = [m.start() for m in _FROM_LINE_RE.finditer(data)]
    emails = []
    for n, start in enumerate(starts):
        stop = starts[n + 1] if n + 1 < len(starts) else len(data)
        body = data.find(b"\n", start, stop)
        body = stop if body < 0 else body + 1
        end = stop
        # the separating blank line: the line before the next "From " (or before the end) is empty
        if (
            end - 1 >= body
            and data[end - 1 : end] == b"\n"
            and (end - 1 == body or data[end - 2 : end - 1] == b"\n")
        ):
            end -= 1
        emails.append(data[body:end])
    return emails


def _to_message(msg: EmailMessage, raw: bytes, source: str) -> Message:
    if not msg.keys():
        raise InvalidInput("not an email: no headers found")
    subject = " ".join(_header(msg, "subject").split())
    sender = _header(msg, "from")
    msg_id = _first_id(_header(msg, "message-id"))
    in_reply_to = _first_id(_header(msg, "in-reply-to"))
    references = _MSGID_RE.findall(_header(msg, "references"))
    source_id = msg_id or f"sha256-{hashlib.sha256(raw).hexdigest()[:32]}"
    session = (references[0] if references else None) or in_reply_to or source_id

    body = trim_reply(_body_text(msg))
    if not subject and not body:
        raise InvalidInput(f"email {source_id} has neither subject nor body: nothing to ingest")
    name, address = parseaddr(sender)
    meta = {
        "from": sender,
        "to": _addresses(msg, "to"),
        "cc": _addresses(msg, "cc"),
        "subject": subject,
        "in_reply_to": in_reply_to or "",
        "references": " ".join(references),
    }
    return Message(
        source=source,
        text=f"Subject: {subject or '(no subject)'}\n\n{body}".strip(),
        kind=InputKind.EMAIL,
        source_id=source_id,
        session=session,
        speaker=(name or address or sender).strip() or None,
        ts=_date(_header(msg, "date")),
        meta={k: v for k, v in meta.items() if v},
    )


def _body_text(msg: EmailMessage) -> str:
    plain: str | None = None
    html: str | None = None
    for part in msg.walk():
        if part.is_multipart() or part.get_content_disposition() == "attachment":
            continue
        ctype = part.get_content_type()
        if ctype not in {"text/plain", "text/html"}:
            continue
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        text = decode_bytes(payload, part.get_content_charset())
        if ctype == "text/plain" and plain is None and text.strip():
            plain = text
        elif ctype == "text/html" and html is None:
            html = text
    if plain is not None:
        return plain
    return html_to_text(html) if html is not None else ""


def decode_bytes(raw: bytes, charset: str | None, fallback: str | None = None) -> str:
    """Decode with the declared charset (unknown names: latin-1).

    Undeclared text is tried as UTF-8, then as ``fallback`` (e.g. the body's charset for raw 8-bit
    headers), then as Windows-1252.
    """
    name = (charset or "").strip().strip('"').lower()
    if name in {"", "us-ascii", "ascii", "unknown-8bit", "x-unknown"}:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            if fallback:
                return decode_bytes(raw, fallback)
            return raw.decode("cp1252", errors="replace")
    name = _CHARSET_ALIASES.get(name, name)
    try:
        codecs.lookup(name)
        return raw.decode(name, errors="replace")
    except (LookupError, UnicodeError):  # unknown name, or a codec that is not a text encoding
        return raw.decode("latin-1")


def _header(msg: EmailMessage, name: str) -> str:
    """A header as text: RFC 2047 words decoded, raw 8-bit bytes read as UTF-8 or the body charset."""
    value = msg.get(name)
    if value is None:
        return ""
    hint = _body_charset(msg)
    pieces = []
    for chunk, charset in decode_header(value):
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", errors="surrogateescape")
        pieces.append(decode_bytes(chunk, charset, hint))
    return clean_text(" ".join("".join(pieces).split()))


def _body_charset(msg: EmailMessage) -> str | None:
    for part in msg.walk():
        charset = part.get_content_charset()
        if charset and charset.lower() not in {"us-ascii", "ascii", "utf-8"}:
            return charset
    return None


def _addresses(msg: EmailMessage, name: str) -> str:
    text = _header(msg, name)
    if not text:
        return ""
    pairs = getaddresses([text])
    return ", ".join(f"{n} <{a}>" if n else a for n, a in pairs if n or a) or text


def _first_id(value: str) -> str | None:
    found = _MSGID_RE.search(value)
    if found:
        return found.group(1)
    bare = value.strip().split()[0].strip("<>") if value.strip() else ""
    return bare or None


def _date(value: str) -> datetime | None:
    if not value:
        return None
    try:
        return utc(parsedate_to_datetime(value))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class _HtmlText(HTMLParser):
    """Collect the visible text of an HTML email, one line per block, blockquotes as ``> `` lines."""

    _BLOCKS = frozenset(
        {"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "table", "pre", "hr", "section"}
    )
    _LINES = frozenset({"br", "li", "tr"})
    _HIDDEN = frozenset({"script", "style", "head", "title"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[tuple[int, str]] = []
        self.current = ""
        self.depth = 0
        self.line_depth = 0
        self.hidden = 0
        self.pre = 0

    def newline(self, blank: bool = False) -> None:
        self.lines.append((self.line_depth, self.current.rstrip()))
        if blank:
            self.lines.append((self.depth, ""))
        self.current, self.line_depth = "", self.depth

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self.hidden += 1
        elif tag == "blockquote":
            self.newline(blank=True)
            self.depth += 1
            self.line_depth = self.depth
        elif tag in self._BLOCKS:
            self.newline(blank=True)
        elif tag in self._LINES:
            self.newline()
        if tag == "li":
            self.current = "- "
        elif tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag == "blockquote":
            self.newline(blank=True)
            self.depth = max(0, self.depth - 1)
            self.line_depth = self.depth
        elif tag in self._BLOCKS:
            self.newline(blank=True)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        if self.pre:
            *full, last = data.split("\n")
            for piece in full:
                self.current += piece
                self.newline()
            self.current += last
            return
        text = re.sub(r"\s+", " ", data)
        if not self.current or self.current.endswith(" "):
            text = text.lstrip()
        self.current += text
        self.line_depth = max(self.line_depth, self.depth)

    def text(self) -> str:
        self.newline()
        out = [("> " * depth + line).rstrip() if line else "" for depth, line in self.lines]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def html_to_text(html: str) -> str:
    """Visible text of an HTML body with paragraph breaks kept and blockquotes marked ``> ``."""
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    return parser.text()
