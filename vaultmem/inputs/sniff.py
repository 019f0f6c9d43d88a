"""The registry of export formats and the choice among them by content.

``EXPORTS`` lists every export adapter in the order they are tried: the most specific signatures
first, so a file that two sniffers would both take goes to the one that knows it better. ``detect``
names the adapter for a file's first characters (or None: the file is left to the native readers by
suffix); ``tree_format`` names the one for a whole folder or archive (Slack). ``NATIVE`` are the
formats vaultmem reads by suffix; every name here can be forced with ``--format``.
"""

from __future__ import annotations

from collections.abc import Sequence

from vaultmem.errors import InvalidInput, UnknownFormat
from vaultmem.inputs import chatgpt, claude, claudecode, codex, discord, slack, telegram, whatsapp
from vaultmem.inputs.exports import ExportFormat

EXPORTS: tuple[ExportFormat, ...] = (
    chatgpt.FORMAT,
    claude.FORMAT,
    claudecode.FORMAT,
    codex.FORMAT,
    telegram.FORMAT,
    discord.FORMAT,
    slack.FORMAT,
    whatsapp.FORMAT,
)
# vaultmem's own inputs, chosen by suffix: chat JSON/JSONL, Markdown and text, one email, an mbox.
NATIVE: tuple[str, ...] = ("chat", "markdown", "email", "mbox")
FORMAT_NAMES: tuple[str, ...] = tuple(f.name for f in EXPORTS) + NATIVE
_BY_NAME = {f.name: f for f in EXPORTS}


def detect(name: str, head: str) -> ExportFormat | None:
    """The export adapter whose sniffer takes a file with this name and these first characters."""
    for fmt in EXPORTS:
        if fmt.parse is not None and fmt.sniff(name, head):
            return fmt
    return None


def tree_format(names: Sequence[str]) -> ExportFormat | None:
    """The adapter that reads these files (relative names of a folder or archive) as one export."""
    for fmt in EXPORTS:
        if fmt.sniff_tree is not None and fmt.sniff_tree(names) is not None:
            return fmt
    return None


def export_format(name: str) -> ExportFormat | None:
    """The export adapter called ``name``; None for a native format; InvalidInput for an unknown name."""
    check_format(name)
    return _BY_NAME.get(name)


def check_format(name: str) -> str:
    if name not in FORMAT_NAMES:
        raise InvalidInput(f"unknown format {name!r}: choose one of {', '.join(FORMAT_NAMES)}")
    return name


def unrecognised(where: str, detail: str) -> UnknownFormat:
    """The one-line error for a file no adapter takes, naming every format tried."""
    return UnknownFormat(
        f"{where}: {detail}; tried {', '.join(FORMAT_NAMES)}: none recognises it"
        " (pass --format NAME to force one)"
    )
