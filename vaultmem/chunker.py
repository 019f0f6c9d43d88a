"""Split canonical messages into leaf-sized chunks with content-addressed ids.

Owns the chunk boundary rules: a chunk never crosses a message boundary and never exceeds
``max_tokens`` (counted by ``tokens.count_tokens``). Splitting prefers paragraph breaks, then sentence
ends, then word boundaries, and only cuts inside a word when a single word is over the bound. Ids are
a hash of (source, source id, sequence, content), so the same input always yields the same ids.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from vaultmem.model import Message
from vaultmem.tokens import count_tokens

DEFAULT_MAX_TOKENS = 256

_PARA_RE = re.compile(r"\n[ \t]*\n+")
_SENT_RE = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？])")
_WORD_RE = re.compile(r"\S+\s*")


@dataclass(frozen=True)
class Chunk:
    id: str
    message: Message
    seq: int
    text: str
    tokens: int


def chunk_id(source: str, source_id: str | None, seq: int, text: str) -> str:
    key = "\x1f".join((source, source_id or "", str(seq), text))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def chunk_message(message: Message, max_tokens: int = DEFAULT_MAX_TOKENS) -> list[Chunk]:
    if max_tokens < 8:
        raise ValueError("max_tokens must be at least 8")
    text = message.text.strip()
    if not text:
        return []
    whole = count_tokens(text)
    if whole <= max_tokens:  # the common case: one chunk, counted once
        return [Chunk(chunk_id(message.source, message.source_id, 0, text), message, 0, text, whole)]
    return [
        Chunk(
            chunk_id(message.source, message.source_id, seq, piece), message, seq, piece, count_tokens(piece)
        )
        for seq, piece in enumerate(_pack(text, max_tokens))
    ]


def _pack(text: str, limit: int) -> Iterator[str]:
    """Greedily pack the finest needed units into chunks of at most ``limit`` tokens."""
    if count_tokens(text) <= limit:
        yield text
        return
    current: list[str] = []
    current_tokens = 0
    for unit, sep in _units(text, limit):
        unit_tokens = count_tokens(unit)
        if current and current_tokens + unit_tokens > limit:
            yield "".join(current).strip()
            current, current_tokens = [], 0
        current.append(unit + sep)
        current_tokens += unit_tokens
    if current:
        tail = "".join(current).strip()
        if tail:
            yield tail


def _units(text: str, limit: int) -> Iterator[tuple[str, str]]:
    """Yield (unit, separator) pairs, each unit within ``limit`` tokens, finest split only where needed."""
    for para in _PARA_RE.split(text):
        para = para.strip()
        if not para:
            continue
        if count_tokens(para) <= limit:
            yield para, "\n\n"
            continue
        for sent in _SENT_RE.split(para):
            if not sent.strip():
                continue
            if count_tokens(sent) <= limit:
                yield sent.strip(), " "
                continue
            for word in _WORD_RE.findall(sent):
                if count_tokens(word) <= limit:
                    yield word.strip(), " "
                else:
                    yield from ((part, "") for part in _hard_split(word.strip(), limit))


def _hard_split(word: str, limit: int) -> Iterator[str]:
    start = 0
    while start < len(word):
        end = start + 1
        while end < len(word) and count_tokens(word[start : end + 1]) <= limit:
            end += 1
        yield word[start:end]
        start = end
