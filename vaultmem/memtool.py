"""Claude's memory tool (``memory_20250818``) backed by the vault: ``/memories`` is a folder of the vault.

Claude sends ``view``, ``create``, ``str_replace``, ``insert``, ``delete`` and ``rename`` on paths under
``/memories``; ``VaultMemoryTool`` carries them out on ``<vault>/memories/`` (by default). With the
``anthropic`` package installed it is the SDK's ``BetaAbstractMemoryTool`` (hand it to
``client.beta.messages.tool_runner(tools=[...])``); without it, it offers the same ``call(input)``.

Owns the rules of that folder: a path must start with ``/memories``, never leaves it (no ``..``, no
hidden names, no symlink on the way, no absolute path elsewhere); every write is atomic, redacted, under
the vault's write lock and one git commit naming the client; a file is only overwritten with the hash
it was read with, and a file a person edited since Claude last viewed it is never overwritten blindly
(``create`` over it and ``insert`` by line number are refused; ``str_replace`` applies to the file as it
is now, so the person's edit stays); a deleted file or folder is kept in ``.trash/vaultmem/<time>/``
and in git. Files are indexed and searchable like any note (``index_memory_files``). Messages follow the reference
implementation's wording, which Claude is used to.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from vaultmem import agentio, fsio
from vaultmem.errors import ConflictError, InvalidInput, VaultError
from vaultmem.redact import redact, scrub

if TYPE_CHECKING:
    from vaultmem.vault import Vault

try:  # the SDK's base class and error, when the anthropic package is installed
    from anthropic.lib.tools import BetaAbstractMemoryTool as _Base
    from anthropic.lib.tools import ToolError
except ImportError:  # pragma: no cover - exercised where anthropic is absent
    _Base = None  # type: ignore[assignment,misc]

    class ToolError(Exception):  # type: ignore[no-redef]
        """A command that cannot be carried out; ``content`` is what Claude is told."""

        def __init__(self, content: str) -> None:
            super().__init__(content)
            self.content = content


ROOT = "/memories"
FOLDER = "memories"  # <vault>/memories/
MAX_FILE_BYTES = 100_000  # a memory file rides in Claude's context when viewed: keep it small
LINE_WIDTH = 6  # line numbers right-aligned in 6 columns, then a tab (the reference tool's view)


def index_memory_files(vault: Vault, rels: Sequence[str]) -> None:
    """Bring the index in step with memory files just written, moved or deleted.

    Today a note outside ``sources/`` is read as a document into leaves of the source named after its
    folder (what the watch daemon does with any note); when notes are indexed in place (issue #15),
    this one call changes."""
    vault.reconcile_paths(list(rels), by_hand=False)


@dataclass(frozen=True)
class Command:
    """A memory command without the SDK (the same fields as ``anthropic.types.beta``'s commands)."""

    command: str
    path: str = ""
    view_range: list[int] | None = None
    file_text: str = ""
    old_str: str = ""
    new_str: str = ""
    insert_line: int = 0
    insert_text: str = ""
    old_path: str = ""
    new_path: str = ""


_FIELDS: dict[str, tuple[str, ...]] = {
    "view": ("path",),
    "create": ("path", "file_text"),
    "str_replace": ("path", "old_str", "new_str"),
    "insert": ("path", "insert_line", "insert_text"),
    "delete": ("path",),
    "rename": ("old_path", "new_path"),
}


def parse_command(raw: object) -> Command:
    """A tool_use input (``{"command": ..., ...}``) as a ``Command``; ToolError when it is malformed."""
    if not isinstance(raw, Mapping) or raw.get("command") not in _FIELDS:
        raise ToolError(f"Unknown or missing command; use one of: {', '.join(_FIELDS)}")
    name = str(raw["command"])
    missing = [f for f in _FIELDS[name] if f not in raw]
    if missing:
        raise ToolError(f"The {name} command needs: {', '.join(missing)}")
    values: dict[str, Any] = {"command": name}
    for key in (*_FIELDS[name], "view_range"):
        if key in raw and raw[key] is not None:
            values[key] = raw[key]
    for key, value in values.items():
        wanted = int if key == "insert_line" else list if key == "view_range" else str
        if not isinstance(value, wanted) or isinstance(value, bool):
            raise ToolError(f"`{key}` must be a {wanted.__name__}")
    return Command(**values)


class _Dispatch:
    """``call``/``execute`` and ``to_dict`` where the anthropic package is missing."""

    def __init__(self, *, cache_control: Any = None) -> None:
        self._cache_control = cache_control

    @property
    def name(self) -> str:
        return "memory"

    def to_dict(self) -> dict[str, Any]:
        param: dict[str, Any] = {"type": "memory_20250818", "name": "memory"}
        if self._cache_control is not None:
            param["cache_control"] = self._cache_control
        return param

    def call(self, input: object) -> str:
        return self.execute(parse_command(input))

    def execute(self, command: Any) -> str:
        handler = getattr(self, str(command.command), None)
        if handler is None:  # pragma: no cover - parse_command checked the name
            raise ToolError(f"Unknown command: {command.command}")
        result: str = handler(command)
        return result


class VaultMemoryTool(_Base if _Base is not None else _Dispatch):  # type: ignore[misc]
    """The memory tool on ``<vault>/<folder>/``. ``client`` names the writer in git commit messages."""

    def __init__(
        self, vault: Vault, *, folder: str = FOLDER, client: str = "claude", cache_control: Any = None
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.vault = vault
        self.folder = PurePosixPath(folder).as_posix().strip("/")
        self.client = agentio.client_source(client, "claude")
        self._seen: dict[str, str] = {}  # rel path -> hash of the file as Claude last saw or wrote it

    def call(self, input: object) -> str:
        """Carry out one tool_use input (``{"command": ..., ...}``); malformed input is a ToolError."""
        result: str = self.execute(parse_command(input))
        return result

    # -- paths ------------------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        return self.vault.layout.root / self.folder

    def _rel(self, path: Any) -> str:
        """The vault-relative path of a ``/memories/...`` path, or ToolError when it is not confined."""
        if not isinstance(path, str):
            raise ToolError("The path must be a string starting with /memories")
        if path != ROOT and not path.startswith(ROOT + "/"):
            raise ToolError(f"Path must start with {ROOT}, got: {path}")
        rest = path[len(ROOT) :].strip("/")
        parts = [p for p in rest.split("/") if p]
        bad = [p for p in parts if p in (".", "..") or p.startswith(".") or "\\" in p or "\x00" in p]
        if bad or (rest and "//" in rest):
            raise ToolError(f"Path {path} would escape {ROOT} or names a hidden file; refused")
        rel = "/".join([self.folder, *parts])
        # No symlink anywhere from the vault down to the target: one could lead out of the vault.
        current = self.vault.layout.root
        for part in rel.split("/"):
            current = current / part
            try:
                if stat.S_ISLNK(os.lstat(current).st_mode):
                    raise ToolError(f"Path {path} goes through a symlink; refused")
            except FileNotFoundError:
                break
        try:
            fsio.ensure_inside(self.root, self.vault.layout.root / rel)
        except VaultError as exc:
            raise ToolError(f"Path {path} would escape {ROOT}") from exc
        return rel

    def _abs(self, rel: str) -> Path:
        return self.vault.layout.root / rel

    @staticmethod
    def _shown(rel: str, folder: str) -> str:
        return ROOT + rel[len(folder) :]

    # -- commands ---------------------------------------------------------------------------------
    def view(self, command: Any) -> str:
        rel = self._rel(command.path)
        target = self._abs(rel)
        if rel == self.folder and not target.exists():
            fsio.make_dirs(self.vault.layout.root, target)
        if target.is_dir():
            return self._listing(command.path.rstrip("/") or ROOT, target)
        text, digest = self._read(rel, command.path)
        self._seen[rel] = digest
        # Writes are redacted; a secret a person typed into the file is not shown to Claude either (line by
        # line, so the line numbers ``insert`` uses stay those of the file).
        lines = [scrub(line) for line in text.split("\n")]
        start, end = 1, len(lines)
        if command.view_range:
            if len(command.view_range) != 2:
                raise ToolError("view_range must be [start, end] (end -1 for the end of the file)")
            start = max(1, int(command.view_range[0]))
            end = (
                len(lines)
                if int(command.view_range[1]) == -1
                else min(len(lines), int(command.view_range[1]))
            )
        numbered = [f"{n:>{LINE_WIDTH}}\t{lines[n - 1]}" for n in range(start, end + 1)]
        return f"Here's the content of {command.path} with line numbers:\n" + "\n".join(numbered)

    def create(self, command: Any) -> str:
        rel = self._rel(command.path)
        if rel == self.folder:
            raise ToolError(f"{ROOT} is a directory; create a file inside it")
        target = self._abs(rel)
        current = fsio.file_hash(target) if target.is_file() else None
        if target.exists() and (current is None or self._seen.get(rel) != current):
            raise ToolError(
                f"File {command.path} already exists"
                + (" and changed since you last viewed it" if rel in self._seen else "")
                + "; view it, then edit it with str_replace or insert"
            )
        self._write(rel, command.file_text, current, f"created {command.path}")
        return f"File created successfully at: {command.path}"

    def str_replace(self, command: Any) -> str:
        rel = self._rel(command.path)
        text, digest = self._read(rel, command.path)
        count = text.count(command.old_str) if command.old_str else 0
        if count == 0:
            raise ToolError(
                f"No replacement was performed, old_str `{command.old_str}` did not appear verbatim in {command.path}."
            )
        if count > 1:
            lines, at = [], text.find(command.old_str)
            while at != -1:
                lines.append(text[:at].count("\n") + 1)
                at = text.find(command.old_str, at + 1)
            raise ToolError(
                f"No replacement was performed. Multiple occurrences of old_str `{command.old_str}` in lines:"
                f" {', '.join(map(str, lines))}. Please ensure it is unique"
            )
        # Applied to the file as it is now: an edit a person made since Claude's view is kept.
        at = text.find(command.old_str)
        new_text = text.replace(command.old_str, command.new_str, 1)
        written = self._write(rel, new_text, digest, f"edited {command.path}")
        line = text[:at].count("\n")
        new_lines = written.split("\n")
        snippet = [
            f"{n:>{LINE_WIDTH}}\t{new_lines[n - 1]}"
            for n in range(max(1, line - 1), min(len(new_lines), line + 3) + 1)
        ]
        return (
            "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
            + "\n".join(snippet)
        )

    def insert(self, command: Any) -> str:
        rel = self._rel(command.path)
        text, digest = self._read(rel, command.path)
        if rel in self._seen and self._seen[rel] != digest:
            raise ToolError(
                f"{command.path} changed since you last viewed it (edited by hand?); view it again, then insert"
            )
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if command.insert_line < 0 or command.insert_line > len(lines):
            raise ToolError(
                f"Invalid `insert_line` parameter: {command.insert_line}. It should be within the range"
                f" [0, {len(lines)}]."
            )
        lines.insert(command.insert_line, command.insert_text.rstrip("\n"))
        self._write(rel, "\n".join(lines) + "\n", digest, f"inserted into {command.path}")
        return f"The file {command.path} has been edited."

    def delete(self, command: Any) -> str:
        rel = self._rel(command.path)
        if rel == self.folder:
            raise ToolError(f"Cannot delete the {ROOT} directory itself")
        target = self._abs(rel)
        if not target.exists():
            raise ToolError(f"The path {command.path} does not exist")
        gone = [self.vault.layout.rel(p) for p in _files(target)]
        message = agentio.commit_message(self.client, f"memory tool deleted {command.path}", None)
        with self._writing(message):
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
            keep = self.vault.layout.root / ".trash" / "vaultmem" / stamp / rel
            # Kept whole in Obsidian's trash folder (vaultmem never reads it).
            fsio.move_file(self.vault.layout.root, target, keep)
            index_memory_files(self.vault, gone)
        for old in gone:
            self._seen.pop(old, None)
        return f"Successfully deleted {command.path}"

    def rename(self, command: Any) -> str:
        old, new = self._rel(command.old_path), self._rel(command.new_path)
        if self.folder in (old, new):
            raise ToolError(f"Cannot rename the {ROOT} directory itself")
        source, target = self._abs(old), self._abs(new)
        if not source.exists():
            raise ToolError(f"The path {command.old_path} does not exist")
        if target.exists():
            raise ToolError(f"The destination {command.new_path} already exists")
        before = [self.vault.layout.rel(p) for p in _files(source)]
        message = agentio.commit_message(
            self.client, f"memory tool renamed {command.old_path} to {command.new_path}", None
        )
        with self._writing(message):
            fsio.move_file(self.vault.layout.root, source, target)
            after = [self.vault.layout.rel(p) for p in _files(target)]
            index_memory_files(self.vault, [*before, *after])
        for rel in before:
            seen = self._seen.pop(rel, None)
            if seen is not None:
                self._seen[new + rel[len(old) :]] = seen
        return f"Successfully renamed {command.old_path} to {command.new_path}"

    # -- files ------------------------------------------------------------------------------------
    def _read(self, rel: str, shown: str) -> tuple[str, str]:
        target = self._abs(rel)
        if not target.is_file():
            kind = "is a directory" if target.is_dir() else "does not exist"
            raise ToolError(f"The path {shown} {kind}. Please provide a valid path.")
        try:
            return fsio.read_text_guarded(target, MAX_FILE_BYTES)
        except InvalidInput as exc:
            raise ToolError(f"{shown} cannot be read as text: {exc}") from exc

    def _write(self, rel: str, text: str, expected: str | None, action: str) -> str:
        """Write a memory file (redacted, atomic, guarded by ``expected``), index it, commit; returns
        the text written."""
        clean = redact(text).text
        data = clean.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(
                f"{self._shown(rel, self.folder)} would be {len(data)} bytes; a memory file holds at most"
                f" {MAX_FILE_BYTES}: split it into several files"
            )
        message = agentio.commit_message(self.client, f"memory tool {action}", None)
        with self._writing(message):
            try:
                digest = fsio.atomic_write(
                    self._abs(rel), data, root=self.vault.layout.root, expected=expected
                )
            except ConflictError as exc:
                raise ToolError(
                    f"{self._shown(rel, self.folder)} changed on disk while it was being edited; view it again"
                ) from exc
            index_memory_files(self.vault, [rel])
        self._seen[rel] = digest
        return clean

    def _writing(self, message: str) -> contextlib.AbstractContextManager[None]:
        return _writing(self.vault, message)

    def _listing(self, shown: str, directory: Path) -> str:
        rows = [f"{_size(directory.stat().st_size)}\t{shown}"]

        def walk(folder: Path, prefix: str, depth: int) -> None:
            for item in sorted(folder.iterdir(), key=lambda p: p.name):
                if item.name.startswith(".") or item.is_symlink():
                    continue
                if item.is_dir():
                    rows.append(f"{_size(item.stat().st_size)}\t{prefix}/{item.name}/")
                    if depth < 2:
                        walk(item, f"{prefix}/{item.name}", depth + 1)
                elif item.is_file():
                    rows.append(f"{_size(item.stat().st_size)}\t{prefix}/{item.name}")

        walk(directory, shown, 1)
        return (
            f"Here're the files and directories up to 2 levels deep in {shown}, excluding hidden items:\n"
            + "\n".join(rows)
        )


@contextlib.contextmanager
def _writing(vault: Vault, message: str) -> Iterator[None]:
    """``vault.operation(message)`` (the write lock, one commit), a ``VaultError`` becoming the tool's error."""
    try:
        with vault.operation(message):
            yield
    except VaultError as exc:
        raise ToolError(str(exc)) from exc


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file())


def _size(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    value = n / 1024
    for unit in ("K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.1f}{unit}" if value != int(value) else f"{int(value)}{unit}"
        value /= 1024
    return f"{n}B"  # pragma: no cover
