"""Bytes into text: what a text file a person saved may be. UTF-8 (a BOM tolerated by the readers),
and UTF-16/32 as Windows tools write it (with a byte-order mark, or UTF-16 without one whose every
other byte is zero), re-encoded as UTF-8. Used by the import paths (``inputs``) and by every guarded
read of a vault file (``fsio``)."""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from vaultmem.errors import InvalidInput

# UTF-32 first: its little-endian mark starts with UTF-16's.
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Control characters text never holds (tabs, newlines and form feeds aside): a sign of binary data.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f]")


def as_utf8(data: bytes, path: Path) -> bytes:
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
    guess = _utf16_without_bom(data[:8192])
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
