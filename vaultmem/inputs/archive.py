"""ZIP exports read as they are: the members of an archive as ``ExportFile``s, in memory, bounded.

Owns the guards an archive from elsewhere needs: member names that would leave the archive (``../``,
absolute paths, drive letters) are refused, as are more members than ``MAX_MEMBERS``, a member or a
total larger than the byte limit, and members that expand more than ``MAX_RATIO`` times (zip bombs).
Sizes are counted while decompressing, never taken from the archive's own headers. Nothing is
extracted to disk and nothing is written.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath

from vaultmem.errors import InvalidInput, UnsafePath
from vaultmem.inputs.exports import ExportFile

MAX_MEMBERS = 100_000
MAX_RATIO = 200  # deflate reaches ~1000x only on degenerate input; real exports stay far below
_RATIO_FLOOR = 1 << 20  # small members may compress very well (a file of spaces); judge large ones
_CHUNK = 1 << 20
# Members worth reading: text, JSON and mail. Media files (photos, voice notes) carry no text.
READABLE_SUFFIXES = frozenset({".json", ".jsonl", ".txt", ".md", ".markdown", ".eml", ".mbox"})


@dataclass(frozen=True)
class Archive:
    files: list[ExportFile]
    names: list[str]  # every member's name, read or not
    left_out: int  # members not read: media and other files no adapter reads


def is_zip(head: bytes) -> bool:
    return head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06")


def read_zip(data: bytes, where: str, max_bytes: int) -> Archive:
    """The readable members of the ZIP archive ``data`` (names relative to the archive), bounded by
    ``max_bytes`` in total. Raises InvalidInput (UnsafePath for a name leaving the archive)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InvalidInput(f"{where}: not a readable ZIP archive: {exc}") from exc
    with archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
        if len(infos) > MAX_MEMBERS:
            raise InvalidInput(f"{where}: {len(infos)} members is over the {MAX_MEMBERS}-member limit")
        files: list[ExportFile] = []
        names: list[str] = []
        left_out = 0
        total = 0
        for info in infos:
            name = _member_name(info.filename, where)
            if name is None:
                continue
            names.append(name)
            if PurePosixPath(name).suffix.lower() not in READABLE_SUFFIXES:
                left_out += 1
                continue
            body = _read_member(archive, info, f"{where}: {name}", max_bytes - total)
            total += len(body)
            files.append(ExportFile(name, body))
    return Archive(files, names, left_out)


def _member_name(raw: str, where: str) -> str | None:
    """The member's posix name, None for hidden ones (``__MACOSX/``, ``.DS_Store``); UnsafePath for a
    name that would leave the archive."""
    name = raw.replace("\\", "/")
    path = PurePosixPath(name)
    if name.startswith("/") or ".." in path.parts or (len(name) > 1 and name[1] == ":"):
        raise UnsafePath(f"{where}: member {raw!r} would leave the archive; refusing to read it")
    if any(part.startswith(".") or part == "__MACOSX" for part in path.parts):
        return None
    return path.as_posix()


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, budget: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        with archive.open(info) as member:
            while chunk := member.read(_CHUNK):
                size += len(chunk)
                if size > budget:
                    raise InvalidInput(
                        f"{where}: the archive expands past the byte limit; refusing to read on"
                    )
                if size > _RATIO_FLOOR and size > MAX_RATIO * max(info.compress_size, 1):
                    raise InvalidInput(
                        f"{where}: expands over {MAX_RATIO} times its compressed size (a zip bomb?); refusing it"
                    )
                chunks.append(chunk)
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, OSError, EOFError) as exc:
        # RuntimeError: an encrypted member; NotImplementedError: an unknown compression method
        raise InvalidInput(f"{where}: cannot read this member: {exc}") from exc
    return b"".join(chunks)
