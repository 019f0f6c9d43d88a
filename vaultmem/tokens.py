"""Token counting with a documented, model-independent estimator.

One function, used everywhere a budget is counted (chunk bounds, leaf ``tokens``, context assembly and
the benchmarks' baselines alike), so every figure is comparable. The estimate tracks WordPiece/BPE
counts closely enough for budgeting and is exact-by-definition for our own bounds:

- each run of ASCII letters counts ``ceil(len / 4)`` tokens (at least 1);
- each run of digits counts ``ceil(len / 3)`` tokens;
- each CJK ideograph, kana or hangul syllable counts 1;
- each other non-space character (punctuation, symbols, other scripts' letters) counts 1.

It is pure and fast (one regex scan) and never imports a model.
"""

from __future__ import annotations

import re

_TOKEN_RE = re.compile(
    r"[A-Za-z]+|[0-9]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]|[^\sA-Za-z0-9]"
)


def count_tokens(text: str) -> int:
    total = 0
    for match in _TOKEN_RE.finditer(text):
        piece = match.group()
        first = piece[0]
        if "a" <= first.lower() <= "z":
            total += (len(piece) + 3) // 4
        elif "0" <= first <= "9":
            total += (len(piece) + 2) // 3
        else:
            total += 1
    return total
