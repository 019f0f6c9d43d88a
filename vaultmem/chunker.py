"""Split canonical messages into leaf-sized chunks with content-addressed ids.

Owns the chunk boundary rules: a chunk never crosses a message boundary and never exceeds
``max_tokens`` (counted by ``tokens.count_tokens``). Splitting prefers paragraph breaks, then sentence
ends, then word boundaries, and only cuts inside a word when a single word is over the bound. Ids are
a hash of (source, source id, sequence, content), so the same input always yields the same ids.
Pure: no I/O.

Linear time. A long message is tokenised once, with NumPy over its code points, into the offsets where
``count_tokens`` starts a token. Every split point (a paragraph break, a sentence end, a space) falls on
such an offset, so the tokens of any unit are the difference of two positions in that array, and a word
over the bound is cut at every ``max_tokens``-th offset. The chunks are exactly those of the plain
greedy rule that re-counts each unit (a test compares both on random text), so ids never change.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from vaultmem.model import Message
from vaultmem.tokens import count_tokens

DEFAULT_MAX_TOKENS = 256

_PARA_RE = re.compile(r"\n[ \t]*\n+")
# Below this length a message is counted with the regex first: most messages fit in one chunk.
_SHORT_CHARS = 8192
# The code points ``re``'s ``\s`` and ``str.isspace`` match (a test checks the list against both).
_SPACES = (
    *range(0x09, 0x0E),
    *range(0x1C, 0x21),
    0x85,
    0xA0,
    0x1680,
    *range(0x2000, 0x200B),
    0x2028,
    0x2029,
    0x202F,
    0x205F,
    0x3000,
)
# Every code point's classes in one table (code points above it are none of these).
_LETTER, _DIGIT, _WHITE, _MARK, _FULL_STOP = 1, 2, 4, 8, 16
_CLASSES = np.zeros(0xFF21, dtype=np.uint8)
_CLASSES[ord("A") : ord("Z") + 1] = _LETTER
_CLASSES[ord("a") : ord("z") + 1] = _LETTER
_CLASSES[ord("0") : ord("9") + 1] = _DIGIT
_CLASSES[list(_SPACES)] = _WHITE
# A sentence ends after one of these marks and the spaces that follow it, and after 。！？ even when no
# space follows: the rule of re.split(r"(?<=[.!?。！？；;])\s+|(?<=[。！？])", paragraph).
_CLASSES[[ord(c) for c in ".!?；;"]] = _MARK
_CLASSES[[ord(c) for c in "。！？"]] = _MARK | _FULL_STOP
# What follows a unit when units are packed into a chunk: nothing (inside a word), a space, a blank line.
_SEPARATORS = ("", " ", "\n\n")
_GLUED, _SPACE, _PARAGRAPH = 0, 1, 2

Ints = npt.NDArray[np.int64]


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
    if len(text) <= _SHORT_CHARS:
        whole = count_tokens(text)
        if whole <= max_tokens:  # the common case: one chunk, counted once
            return [Chunk(chunk_id(message.source, message.source_id, 0, text), message, 0, text, whole)]
    return [
        Chunk(chunk_id(message.source, message.source_id, seq, piece), message, seq, piece, tokens)
        for seq, (piece, tokens) in enumerate(split_text(text, max_tokens))
    ]


def split_text(text: str, limit: int) -> list[tuple[str, int]]:
    """The chunks of a stripped text with their token counts: the finest needed units (paragraphs,
    sentences, words, pieces of a word) packed greedily, in order, into chunks of at most ``limit``."""
    tokens = _Tokens(text)
    if tokens.total <= limit:
        return [(text, tokens.total)]
    units = _Units()
    tokens.paragraphs(units, limit)
    starts, ends, seps, counts = units.arrays()
    bounds = np.concatenate(([0], np.cumsum(counts))).tolist()
    # Chunk k holds units cuts[k]..cuts[k+1]-1: the longest run, from where the last one ended, whose
    # tokens add up to at most the limit (every unit is within the limit, so each run has one at least).
    cuts = [0]
    while cuts[-1] < len(starts):
        at = cuts[-1]
        cuts.append(max(at + 1, bisect.bisect_right(bounds, bounds[at] + limit) - 1))
    out: list[tuple[str, int]] = []
    s_list, e_list, sep_list = starts.tolist(), ends.tolist(), seps.tolist()
    for first, stop in itertools.pairwise(cuts):
        last = stop - 1
        piece = "".join(
            [text[s_list[k] : e_list[k]] + _SEPARATORS[sep_list[k]] for k in range(first, last)]
            + [text[s_list[last] : e_list[last]]]
        )
        if _GLUED in sep_list[first:last]:  # a cut word's last piece runs into the next unit
            out.append((piece, count_tokens(piece)))
        else:
            out.append((piece, bounds[stop] - bounds[first]))
    return out


class _Units:
    """Units as spans of the text, in reading order, each with its separator and its tokens."""

    def __init__(self) -> None:
        self.parts: list[tuple[Ints, Ints, int, Ints]] = []

    def add(self, starts: Ints, ends: Ints, sep: int, counts: Ints) -> None:
        if len(starts):
            self.parts.append((starts, ends, sep, counts))

    def arrays(self) -> tuple[Ints, Ints, npt.NDArray[np.int8], Ints]:
        return (
            np.concatenate([p[0] for p in self.parts]),
            np.concatenate([p[1] for p in self.parts]),
            np.concatenate([np.full(len(p[0]), p[2], dtype=np.int8) for p in self.parts]),
            np.concatenate([p[3] for p in self.parts]),
        )


class _Tokens:
    """A text's code points, its spaces, and the offsets where ``count_tokens`` starts a token."""

    def __init__(self, text: str) -> None:
        self.text = text
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        self.classes = _CLASSES[np.minimum(codes, len(_CLASSES) - 1)]
        self.space = (self.classes & _WHITE) > 0
        letter = (self.classes & _LETTER) > 0
        digit = (self.classes & _DIGIT) > 0
        begins = (self.classes & (_LETTER | _DIGIT | _WHITE)) == 0  # any other character is a token
        begins[_run_pieces(letter, 4)] = True
        begins[_run_pieces(digit, 3)] = True
        self.starts: Ints = np.flatnonzero(begins)
        self.total = len(self.starts)
        self._breaks: tuple[Ints, Ints] | None = None

    def count(self, starts: Ints, ends: Ints) -> Ints:
        """Tokens in each span ``[starts[i], ends[i])``; every span begins on a token boundary."""
        return np.searchsorted(self.starts, ends) - np.searchsorted(self.starts, starts)

    def paragraphs(self, units: _Units, limit: int) -> None:
        """Paragraphs (split at blank lines, stripped); one over the limit goes on to sentences."""
        bounds = [0]
        for match in _PARA_RE.finditer(self.text):
            bounds.extend(match.span())
        bounds.append(len(self.text))
        starts, ends = [], []
        for a, b in zip(bounds[0::2], bounds[1::2], strict=True):
            piece = self.text[a:b]
            stripped = piece.strip()
            if stripped:
                a += len(piece) - len(piece.lstrip())
                starts.append(a)
                ends.append(a + len(stripped))
        self._refine(units, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), limit, 0)

    def _refine(self, units: _Units, starts: Ints, ends: Ints, limit: int, level: int) -> None:
        """Add the spans within the limit as units of this level (paragraph, sentence, word) and split
        the others one level finer, keeping the reading order."""
        counts = self.count(starts, ends)
        sep = (_PARAGRAPH, _SPACE, _SPACE)[level]
        done = 0
        for big in [*np.flatnonzero(counts > limit).tolist(), len(starts)]:
            units.add(starts[done:big], ends[done:big], sep, counts[done:big])
            if big < len(starts):
                a, b = int(starts[big]), int(ends[big])
                if level == 0:
                    self._refine(units, *self._sentences(a, b), limit, 1)
                elif level == 1:
                    self._refine(units, *self._words(a, b), limit, 2)
                else:
                    self._cut_word(units, a, b, int(counts[big]), limit)
            done = big + 1

    def _sentences(self, start: int, end: int) -> tuple[Ints, Ints]:
        """Sentences of the stripped paragraph ``[start, end)``: a sentence ends after a mark followed
        by spaces (which belong to no sentence), or after 。！？ followed by anything."""
        if self._breaks is None:  # every sentence end of the text, found once
            marks = self.classes[:-1]
            spaced = self.space[1:]
            mark = (marks & _MARK) > 0
            full_stop = (marks & _FULL_STOP) > 0
            ends = np.flatnonzero(mark & (spaced | full_stop)) + 1
            solid = np.flatnonzero(~self.space)
            # the next sentence starts at the first non-space (inside a paragraph there always is one)
            resume = solid[np.minimum(np.searchsorted(solid, ends), len(solid) - 1)]
            self._breaks = ends, resume
        ends, resume = self._breaks
        lo, hi = np.searchsorted(ends, [start + 1, end])
        return (
            np.concatenate(([start], resume[lo:hi])).astype(np.int64),
            np.concatenate((ends[lo:hi], [end])).astype(np.int64),
        )

    def _words(self, start: int, end: int) -> tuple[Ints, Ints]:
        """The runs of non-space characters in ``[start, end)`` (what ``\\S+`` matches)."""
        begins, ends = _runs(~self.space[start:end])
        return begins + start, ends + start

    def _cut_word(self, units: _Units, start: int, end: int, total: int, limit: int) -> None:
        """A word over the limit, cut before every ``limit``-th token: pieces of exactly ``limit``
        tokens, the last one shorter, followed by nothing."""
        first = int(np.searchsorted(self.starts, start))
        cuts = self.starts[first : first + total : limit]
        sizes = np.full(len(cuts), limit, dtype=np.int64)
        sizes[-1] = total - limit * (len(cuts) - 1)
        units.add(cuts, np.append(cuts[1:], end), _GLUED, sizes)


def _run_pieces(mask: npt.NDArray[np.bool_], width: int) -> Ints:
    """Where the regex starts a piece of at most ``width`` characters inside each run of ``mask``
    (pieces are counted from the start of the run: 10 letters are 4 + 4 + 2)."""
    begins, ends = _runs(mask)
    lengths = ends - begins
    pieces = (lengths + width - 1) // width
    firsts = np.repeat(np.cumsum(pieces) - pieces, pieces)
    return np.asarray(np.repeat(begins, pieces) + width * (np.arange(int(pieces.sum())) - firsts))


def _runs(mask: npt.NDArray[np.bool_]) -> tuple[Ints, Ints]:
    """Where each run of True in ``mask`` begins and ends (exclusive)."""
    padded = np.zeros(len(mask) + 2, dtype=bool)
    padded[1:-1] = mask
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return edges[0::2], edges[1::2]
