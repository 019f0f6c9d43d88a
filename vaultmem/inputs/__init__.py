"""Dispatcher: read a file, a directory tree or a ZIP archive and hand each file to the right adapter.

Owns the file-level checks (size, binary, UTF-8, UTF-16/32 re-encoded as UTF-8, symlinks leaving the
root, hidden files) and the choice of adapter: an export adapter when one recognises the content
(``sniff``; a folder or archive that is one export, like Slack's, as a whole), else vaultmem's own
readers by suffix; ``fmt`` forces either. A file passed directly raises on a problem; inside a
directory walk or an archive the same problem becomes a ``Skipped`` entry. Never writes anything,
never extracts an archive to disk and never follows symlinked folders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from vaultmem.errors import InvalidInput, UnknownFormat, UnsafePath
from vaultmem.model import Message, default_source_name, safe_name
from vaultmem.textbytes import as_utf8

# The adapters and the export sniffer are imported where they are used: the index imports
# ``inputs.mailthread``, and a `vaultmem search` must not pay for every export parser (bench/startup.py).
if TYPE_CHECKING:
    from vaultmem.inputs.exports import ExportFormat, ImportOptions

CHAT_SUFFIXES = frozenset({".json", ".jsonl"})
DOC_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
EMAIL_SUFFIXES = frozenset({".eml"})
MBOX_SUFFIXES = frozenset({".mbox"})
_SNIFF_BYTES = 8192
# mbox files often have no suffix (Thunderbird's "Inbox"); they start with a "From sender date" line.
_MBOX_START_RE = re.compile(rb"From \S+ +\S[^\n]*\n")


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True)
class CanonResult:
    messages: list[Message]
    skipped: list[Skipped]


@dataclass(frozen=True)
class _Reader:
    """What one ``read_path`` call reads with: names, limits, and the format forced (if any)."""

    source: str | None  # given by the caller: every message takes it
    fallback: str  # the source of native files when none was given
    max_bytes: int
    max_export_bytes: int
    forced: str | None
    options: ImportOptions


def read_path(
    path: Path,
    *,
    source: str | None = None,
    max_bytes: int = 10 * 1024 * 1024,
    root: Path | None = None,
    fmt: str | None = None,
    all_branches: bool = False,
    max_export_bytes: int | None = None,
) -> CanonResult:
    """Canonicalise one file, or every visible file under a directory in sorted order.

    Each file goes to the export adapter that recognises its content (``fmt`` forces one, or a native
    format), else to the native reader its suffix calls for; a ZIP archive's members likewise, and a
    folder or archive holding a Slack export is read as one. ``root`` bounds where symlinks may point;
    it defaults to ``path`` for a directory and to the directory holding ``path`` for a single file.
    Native files share one source name: ``source`` if given, else the slug of the file stem or
    directory name; exports name their own (``chatgpt``, a coding agent's project...) unless ``source``
    is given. Files over ``max_bytes`` are read only when they are recognised exports (up to
    ``max_export_bytes``, default ``max_bytes``).
    """
    from vaultmem.inputs.exports import ImportOptions
    from vaultmem.inputs.sniff import check_format

    path = Path(path)
    if source is not None:
        safe_name(source)
    if fmt is not None:
        check_format(fmt)
    if not path.exists() and not path.is_symlink():
        raise InvalidInput(f"{path}: no such file or directory")
    reader = _Reader(
        source,
        source or default_source_name((path.resolve().name if path.is_dir() else path.stem) or "source"),
        max_bytes,
        max(max_export_bytes or max_bytes, max_bytes),
        fmt,
        ImportOptions(source, all_branches),
    )
    if path.is_dir():
        bound = _resolve(root if root is not None else path)
        _check_inside(path, bound)
        messages: list[Message] = []
        skipped: list[Skipped] = []
        files = _walk(path, path, bound, skipped)
        tree = _tree_export(files, reader, skipped)
        if tree is not None:
            return CanonResult(tree, skipped)
        for file, rel in files:
            try:
                found, inner = _read_file(file, rel, reader)
            except InvalidInput as exc:
                skipped.append(Skipped(str(file), str(exc)))
                continue
            messages.extend(found)
            skipped.extend(inner)
        return CanonResult(messages, skipped)
    _check_inside(path, _resolve(root if root is not None else path.absolute().parent))
    if not path.is_file():  # a FIFO or device would block or never end
        raise InvalidInput(f"{path}: not a regular file")
    found, inner = _read_file(path, path.name, reader)
    return CanonResult(found, inner)


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


def _tree_export(
    files: list[tuple[Path, str]], reader: _Reader, skipped: list[Skipped]
) -> list[Message] | None:
    """The messages of a folder that is one export (Slack), or None when it is not one."""
    from vaultmem.inputs.exports import ExportFile
    from vaultmem.inputs.sniff import export_format, tree_format

    forced = export_format(reader.forced) if reader.forced else None
    fmt = forced if forced is not None and forced.parse_tree is not None else None
    if fmt is None and reader.forced is None:
        fmt = tree_format([rel for _, rel in files])
    if fmt is None or fmt.parse_tree is None:
        return None
    members: list[ExportFile] = []
    budget = reader.max_export_bytes
    for file, rel in files:
        if not rel.endswith(".json"):
            continue
        try:
            data = _read_bytes(file, budget)
        except InvalidInput as exc:
            skipped.append(Skipped(str(file), str(exc)))
            continue
        budget -= len(data)
        members.append(ExportFile(rel, data))
    return _stamped(fmt.parse_tree(members, reader.options), None)


def _read_file(path: Path, name: str, reader: _Reader) -> tuple[list[Message], list[Skipped]]:
    """Read one file: a ZIP archive member by member, else with the adapter its content or suffix
    calls for. Returns its messages and, for an archive, the members left out."""
    from vaultmem.inputs import archive as zip_archive
    from vaultmem.inputs.exports import SNIFF_CHARS

    try:
        size = path.stat().st_size
        if size > reader.max_bytes:
            with path.open("rb") as f:
                head = f.read(4 * SNIFF_CHARS)
            if not zip_archive.is_zip(head) and _export_for(name, head, reader) is None:
                raise InvalidInput(f"{path}: {size} bytes is over the {reader.max_bytes}-byte limit")
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror or exc}") from exc
    data = _read_bytes(path, reader.max_export_bytes)
    if zip_archive.is_zip(data[:4]):
        return _read_zip(data, path, reader)
    if len(data) > reader.max_bytes and _export_for(name, data, reader) is None:
        raise InvalidInput(f"{path}: {len(data)} bytes is over the {reader.max_bytes}-byte limit")
    return _read_bytes_as(data, path, name, reader), []


def _read_zip(data: bytes, path: Path, reader: _Reader) -> tuple[list[Message], list[Skipped]]:
    from vaultmem.inputs import archive as zip_archive
    from vaultmem.inputs.sniff import export_format, tree_format

    archive = zip_archive.read_zip(data, str(path), reader.max_export_bytes)
    skipped: list[Skipped] = []
    if archive.left_out:
        skipped.append(Skipped(str(path), f"{archive.left_out} media or other files in the archive not read"))
    forced = export_format(reader.forced) if reader.forced else None
    tree = forced if forced is not None and forced.parse_tree is not None else None
    if tree is None and reader.forced is None:
        tree = tree_format(archive.names)
    if tree is not None and tree.parse_tree is not None:
        return _stamped(tree.parse_tree(archive.files, reader.options), path.name), skipped
    messages: list[Message] = []
    for member in archive.files:
        where = Path(f"{path}/{member.name}")
        try:
            messages.extend(_read_bytes_as(member.data, where, f"{path.name}/{member.name}", reader))
        except InvalidInput as exc:
            skipped.append(Skipped(str(where), str(exc)))
    if not messages:
        raise InvalidInput(f"{path}: no member of the archive holds text vaultmem reads")
    return messages, skipped


def _read_bytes(path: Path, limit: int) -> bytes:
    try:
        size = path.stat().st_size
        if size > limit:
            raise InvalidInput(f"{path}: {size} bytes is over the {limit}-byte limit")
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > limit:  # the file grew after stat
        raise InvalidInput(f"{path}: over the {limit}-byte limit")
    return data


def _export_for(name: str, data: bytes, reader: _Reader) -> ExportFormat | None:
    from vaultmem.inputs.exports import head_text
    from vaultmem.inputs.sniff import detect, export_format

    if reader.forced is not None:
        return export_format(reader.forced)
    return detect(name, head_text(data))


def _read_bytes_as(data: bytes, path: Path, name: str, reader: _Reader) -> list[Message]:
    """One file's messages: by the export adapter that recognises it, else by its suffix."""
    from vaultmem.inputs.exports import ExportFile

    data = as_utf8(data, path)
    if not data.strip():
        raise InvalidInput(f"{path}: empty file, nothing to ingest")
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise InvalidInput(f"{path}: looks binary (NUL bytes); only text, JSON and email files are read")
    fmt = _export_for(name, data, reader)
    if fmt is not None and fmt.parse is not None:
        messages = fmt.parse(ExportFile(name, data, path.parent.name), reader.options)
    else:
        messages = _native(data, path, name, reader)
    if not messages:
        raise InvalidInput(f"{path}: no text found, nothing to ingest")
    return _stamped(messages, name)


def _native(data: bytes, path: Path, name: str, reader: _Reader) -> list[Message]:
    from vaultmem.inputs.chat import parse_chat_bytes
    from vaultmem.inputs.docs import parse_document
    from vaultmem.inputs.email import parse_eml, parse_mbox
    from vaultmem.inputs.sniff import unrecognised

    source = reader.source or reader.fallback
    suffix = path.suffix.lower()
    native = reader.forced
    if native is None:
        if suffix in CHAT_SUFFIXES:
            native = "chat"
        elif suffix in DOC_SUFFIXES:
            native = "markdown"
        elif suffix in EMAIL_SUFFIXES:
            native = "email"
        elif suffix in MBOX_SUFFIXES or _MBOX_START_RE.match(data):
            native = "mbox"
        else:
            raise unrecognised(str(path), f"unsupported file type {suffix or '(no suffix)'!r}")
    if native == "chat":
        try:
            return parse_chat_bytes(data, source=source, filename=name)
        except UnknownFormat as exc:
            raise unrecognised(str(path), str(exc).removeprefix(f"{name}: ")) from exc
    if native == "markdown":
        return parse_document(_utf8(data, path), source=source, doc_name=name)
    if native == "email":
        return [parse_eml(data, source=source)]
    return parse_mbox(path, source=source, data=data)


def _stamped(messages: list[Message], name: str | None) -> list[Message]:
    """Every message records the file it came from, relative to the folder that was walked."""
    if name is None:
        return messages
    return [m if "file" in m.meta else replace(m, meta={"file": name, **m.meta}) for m in messages]


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
