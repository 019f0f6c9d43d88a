from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from vaultmem.tokens import count_tokens

_RUN_RE = re.compile(r"[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]")


def reference(text: str) -> int:
    """The documented rule, written the slow, obvious way."""
    total = 0
    for piece in _RUN_RE.findall(text):
        if piece[0].isascii() and piece[0].isalpha():
            total += (len(piece) + 3) // 4
        elif piece[0].isascii() and piece[0].isdigit():
            total += (len(piece) + 2) // 3
        else:
            total += 1
    return total


@given(st.text(max_size=400))
def test_fast_count_equals_documented_rule(text: str) -> None:
    assert count_tokens(text) == reference(text)


def test_examples() -> None:
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2 + 2
    assert count_tokens("v0.9.2") == 1 + 1 + 1 + 1 + 1 + 1
    assert count_tokens("雾凇拼音") == 4
    assert count_tokens("1234567") == 3
    assert count_tokens("a, b.") == 4
