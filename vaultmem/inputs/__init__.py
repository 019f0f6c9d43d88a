"""Dispatcher: read a file or a directory tree and hand each file to the right source adapter.

Owns the file-level checks (size, binary, UTF-8, UTF-16/32 re-encoded as UTF-8, symlinks leaving the
root, hidden files) and the choice of adapter by suffix. A file passed directly raises on a problem;
inside a directory walk the same problem becomes a ``Skipped`` entry. Never writes anything and never
follows symlinked folders.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, replace
from pathlib import Path

from vaultmem.errors import InvalidInput, UnsafePath
from vaultmem.inputs.chat import parse_chat_bytes
from vaultmem.inputs.docs import parse_document
from vaultmem.inputs.email import parse_eml, parse_mbox
from vaultmem.model import Message, default_source_name, safe_name

CHAT_SUFFIXES = frozenset({".json", ".jsonl"})
DOC_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
EMAIL_SUFFIXES = frozenset({".eml"})
MBOX_SUFFIXES = frozenset({".mbox"})
_SNIFF_BYTES = 8192
# mbox files often have no suffix (Thunderbird's "Inbox"); they start with a "From sender date" line.
_MBOX_START_RE = re.compile(rb"From \S+ +\S[^\n]*\n")
# UTF-32 first: its little-endian mark starts with UTF-16's.
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Control characters text never holds (tabs, newlines and form feeds aside): a sign of binary data.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f]")


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True)
class CanonResult:
    messages: list[Message]
    skipped: list[Skipped]


def read_path(
    path: Path,
    *,
    source: str | None = None,
    max_bytes: int = 10 * 1024 * 1024,
    root: Path | None = None,
) -> CanonResult:
    """Canonicalise one file, or every visible file under a directory in sorted order.

    ``root`` bounds where symlinks may point; it defaults to ``path`` for a directory and to the
    directory holding ``path`` for a single file. All messages of one call share one source name:
    ``source`` if given, else the slug of the file stem or directory name.
    """
    path = Path(path)
    if source is not None:
        safe_name(source)
    if not path.exists() and not path.is_symlink():
        raise InvalidInput(f"{path}: no such file or directory")
    if path.is_dir():
        bound = _resolve(root if root is not None else path)
        _check_inside(path, bound)
        name = source or default_source_name(path.resolve().name)
        messages: list[Message] = []
        skipped: list[Skipped] = []
        for file, rel in _walk(path, path, bound, skipped):
            try:
                messages.extend(_read_file(file, rel, name, max_bytes))
            except InvalidInput as exc:
                skipped.append(Skipped(str(file), str(exc)))
        return CanonResult(messages, skipped)
    _check_inside(path, _resolve(root if root is not None else path.absolute().parent))
    if not path.is_file():  # a FIFO or device would block or never end
        raise InvalidInput(f"{path}: not a regular file")
    return CanonResult(_read_file(path, path.name, source or default_source_name(path.stem), max_bytes), [])


def _walk(directory: Path, top: Path, bound: Path, skipped: list[Skipped]) -> list[tuple[Path, str]]:
    """Visible regular files under ``directory``, depth first in name order, with their relative paths."""
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        skipped.append(Skipped(str(directory), f"cannot list directory: {exc.strerror or exc}"))
        return []
    files: list[tuple[Path, str]] = []
    for entry in entries:
        if entry.name.startswith("."):  # .git, .obsidian, .DS_Store, editor swap files
            continue
        try:
            if entry.is_symlink():
                _check_inside(entry, bound)
                if entry.is_dir():
                    # Following links to folders risks loops and double ingestion of the same files.
                    skipped.append(Skipped(str(entry), "symlinked directory not followed"))
                    continue
            if entry.is_dir():
                files.extend(_walk(entry, top, bound, skipped))
            elif entry.is_file():
                files.append((entry, entry.relative_to(top).as_posix()))
            else:
                skipped.append(Skipped(str(entry), "not a regular file"))
        except InvalidInput as exc:
            skipped.append(Skipped(str(entry), str(exc)))
    return files


def _read_file(path: Path, name: str, source: str, max_bytes: int) -> list[Message]:
    """Read one file with the adapter its suffix (or an mbox ``From `` line) calls for."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise InvalidInput(f"{path}: {size} bytes is over the {max_bytes}-byte limit")
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:  # the file grew after stat
        raise InvalidInput(f"{path}: over the {max_bytes}-byte limit")
    data = _as_utf8(data, path)
    if not data.strip():
        raise InvalidInput(f"{path}: empty file, nothing to ingest")
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise InvalidInput(f"{path}: looks binary (NUL bytes); only text, JSON and email files are read")
    suffix = path.suffix.lower()
    if suffix in CHAT_SUFFIXES:
        messages = parse_chat_bytes(data, source=source, filename=name)
    elif suffix in DOC_SUFFIXES:
        messages = parse_document(_utf8(data, path), source=source, doc_name=name)
    elif suffix in EMAIL_SUFFIXES:
        messages = [parse_eml(data, source=source)]
    elif suffix in MBOX_SUFFIXES or _MBOX_START_RE.match(data):
        messages = parse_mbox(path, source=source, data=data)
    else:
        raise InvalidInput(f"{path}: unsupported file type {suffix or '(no suffix)'!r}")
    if not messages:
        raise InvalidInput(f"{path}: no text found, nothing to ingest")
    # Every message records the file it came from, relative to the folder that was walked.
    return [m if "file" in m.meta else replace(m, meta={"file": name, **m.meta}) for m in messages]


def _as_utf8(data: bytes, path: Path) -> bytes:
    """UTF-32 or UTF-16 text (with a byte-order mark, or UTF-16 without one whose every other byte is
    zero, as Windows tools write it) re-encoded as UTF-8; anything else as it is."""
    for bom, codec in _WIDE_BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec).encode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInput(
                    f"{path}: starts with a {codec.upper()} byte-order mark but is not valid {codec.upper()} "
                    f"(byte {exc.start}); re-save it as UTF-8"
                ) from exc
    guess = _utf16_without_bom(data[:_SNIFF_BYTES])
    if guess is None:
        return data
    try:
        text = data.decode(guess)
    except UnicodeDecodeError:
        text = "\x00"
    if _CONTROL_RE.search(text):
        raise InvalidInput(
            f"{path}: looks like UTF-16 without a byte-order mark (every other byte is zero) but does "
            "not decode as UTF-16 text; re-save it as UTF-8"
        )
    return text.encode("utf-8")


def _utf16_without_bom(sample: bytes) -> str | None:
    """``utf-16-le``/``-be`` when zero bytes sit only at odd (even) offsets and are frequent, as in
    UTF-16 text that is mostly ASCII; None otherwise (UTF-8 text has no zero bytes at all)."""
    if len(sample) < 8 or b"\x00" not in sample:
        return None
    even, odd = sample[0::2].count(0), sample[1::2].count(0)
    enough = max(4, len(sample) // 2 * 3 // 10)
    if even == 0 and odd >= enough:
        return "utf-16-le"
    if odd == 0 and even >= enough:
        return "utf-16-be"
    return None


def _utf8(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not valid UTF-8 (byte {exc.start}); re-save it as UTF-8") from exc


def _check_inside(path: Path, bound: Path) -> None:
    target = _resolve(path)
    if not target.is_relative_to(bound):
        raise UnsafePath(f"{path}: points to {target}, outside {bound}; refusing to read it")


def _resolve(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise InvalidInput(f"{path}: cannot resolve path: {exc}") from exc
