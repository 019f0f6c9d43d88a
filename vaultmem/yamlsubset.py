"""A fast path for the small YAML subset the engine writes in frontmatter.

PyYAML's constructor is pure Python and dominated ingest and reindex time. Engine-written frontmatter
only uses one-line ``key: value`` pairs whose values are plain or quoted strings, numbers, booleans,
and flow lists/mappings of those. ``dump`` writes exactly that subset; ``load`` reads it and returns
``None`` for anything it does not fully understand (comments, block lists, dates, anchors, multi-line
values...), in which case the caller uses full YAML. Contract, checked by property tests: whenever
``load`` returns a mapping it equals ``yaml.safe_load`` of the same text, and ``yaml.safe_load(dump(m))``
equals ``m``.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from typing import Any

_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"
# ``\w`` is exactly ``str.isalnum()`` plus "_"; the other characters are safe inside a plain scalar.
_PLAIN_CHARS_RE = re.compile(r"[\w.\-/+@ ]*")
_INT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT_RE = re.compile(r"-?[0-9]+\.[0-9]+")
_KEY_LINE_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*): (.+)")
_ITEM_RE = re.compile(r"\s*((?:\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|[^,\[\]{}\"'])*?)\s*(?:,|$)")
# What PyYAML refuses to read, plus the characters YAML treats as line breaks inside scalars.
_UNSAFE = "[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"


# PyYAML and this class are made on first use, not at import (~15 ms): a process that reads no
# frontmatter (a `vaultmem search`) never pays for them.
@functools.cache
def _unsafe_re() -> re.Pattern[str]:
    return re.compile(_UNSAFE)


@functools.cache
def _resolver() -> Any:
    import yaml

    return yaml.resolver.Resolver()


def prepare() -> None:
    """Build what ``dump`` may need on first use (PyYAML's resolver, the unsafe-character class) now: a
    forked writer (``ingest._write_forked``) then inherits them instead of building them per batch."""
    _resolver()
    _unsafe_re()


# PyYAML's implicit resolvers are keyed by first character; for text starting with an ASCII letter only
# the bool and null words apply, so most strings are settled without running the resolver's regexes.
_LETTER_WORDS = {
    **dict.fromkeys(
        [
            "yes",
            "Yes",
            "YES",
            "no",
            "No",
            "NO",
            "true",
            "True",
            "TRUE",
            "false",
            "False",
            "FALSE",
            "on",
            "On",
            "ON",
            "off",
            "Off",
            "OFF",
        ],
        _BOOL_TAG,
    ),
    **dict.fromkeys(["null", "Null", "NULL"], "tag:yaml.org,2002:null"),
}


def _tag(text: str) -> str:
    if text and text[0].isascii() and text[0].isalpha():
        return _LETTER_WORDS.get(text, _STR_TAG)
    return _resolve(text)


@functools.lru_cache(maxsize=8192)
def _resolve(text: str) -> str:
    import yaml

    return str(_resolver().resolve(yaml.ScalarNode, text, (True, False)))


def _plain_ok(text: str) -> bool:
    if not text or text != text.strip() or "  " in text:
        return False
    if not (text[0].isalnum() or text[0] == "_"):
        return False
    if not _PLAIN_CHARS_RE.fullmatch(text):
        return False
    return _tag(text) == _STR_TAG


def _quote(text: str) -> str | None:
    if _unsafe_re().search(text):
        return None  # control characters: let PyYAML choose the escapes
    return json.dumps(text, ensure_ascii=False)


def _scalar(value: Any) -> str | None:
    kind = type(value)  # the exact types first: these run for every key of every file written
    if kind is str:
        return _str_scalar(value)
    if kind is int:
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if not math.isfinite(value) or not _FLOAT_RE.fullmatch(text):
            return None
        return text
    if isinstance(value, str):
        return _str_scalar(value)
    return None


@functools.lru_cache(maxsize=4096)  # a batch of leaves repeats its sources, sessions, roles, statuses
def _str_scalar(value: str) -> str | None:
    return value if _plain_ok(value) else _quote(value)


@functools.lru_cache(maxsize=256)
def _key_ok(key: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) is not None and _tag(key) == _STR_TAG


def _value(value: Any) -> str | None:
    kind = type(value)
    if kind is str:
        return _str_scalar(value)
    if kind is int:
        return str(value)
    if kind is list and not value:
        return "[]"
    if isinstance(value, list | tuple):
        items = [_scalar(v) for v in value]
        return None if any(i is None for i in items) else "[" + ", ".join(i for i in items if i) + "]"
    if isinstance(value, Mapping):
        parts = []
        for k, v in value.items():
            key, val = _scalar(str(k)), _scalar(v)
            if key is None or val is None:
                return None
            parts.append(f"{key}: {val}")
        return "{" + ", ".join(parts) + "}"
    return _scalar(value)


def dump(mapping: Mapping[str, Any]) -> str | None:
    """Render one ``key: value`` line per item, or None when a value is outside the subset."""
    lines = []
    for key, value in mapping.items():
        if not _key_ok(key):
            return None
        text = _value(value)
        if text is None:
            return None
        lines.append(f"{key}: {text}\n")
    return "".join(lines)


class _Unknown(Exception):
    """Raised inside ``load`` for text outside the subset; ``load`` then returns None."""


def _parse_scalar(text: str) -> Any:
    if not text:
        raise _Unknown
    if text[0] == '"':
        if text[-1] != '"' or len(text) < 2:
            raise _Unknown
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise _Unknown from exc
        if not isinstance(value, str):
            raise _Unknown
        return value
    if text[0] == "'":
        inner = text[1:-1]
        if len(text) < 2 or text[-1] != "'" or "'" in inner.replace("''", ""):
            raise _Unknown
        return inner.replace("''", "'")
    if (
        " #" in text
        or text[0] in "&*!|>%@`#?:[]{},\"'"
        or (text[0] == "-" and not text[1:2].isdigit())
        or ": " in text
        or text.endswith(":")
    ):
        raise _Unknown
    tag = _tag(text)
    if tag == _STR_TAG:
        return text
    if tag == _INT_TAG and _INT_RE.fullmatch(text):
        return int(text)
    if tag == _FLOAT_TAG and _FLOAT_RE.fullmatch(text):
        return float(text)
    if tag == _BOOL_TAG and text in ("true", "false"):
        return text == "true"
    raise _Unknown


def _parse_items(inner: str) -> list[str]:
    if not inner.strip():
        return []
    items = []
    pos = 0
    while pos < len(inner):
        match = _ITEM_RE.match(inner, pos)
        if match is None or match.end() == pos:
            raise _Unknown
        items.append(match.group(1))
        pos = match.end()
    if inner.rstrip().endswith(","):
        raise _Unknown
    return items


def _split_pair(item: str) -> tuple[str, str]:
    """``key: value`` of a flow mapping item; a quoted key may itself hold ": " (found by Hypothesis)."""
    item = item.strip()
    if item[:1] in ("'", '"'):
        quote, i = item[0], 1
        while i < len(item):
            if quote == '"' and item[i] == "\\":
                i += 2
                continue
            if item[i] == quote:
                if quote == "'" and item[i + 1 : i + 2] == "'":
                    i += 2
                    continue
                break
            i += 1
        key, rest = item[: i + 1], item[i + 1 :]
        if not rest.startswith(": "):
            raise _Unknown
        return key, rest[2:]
    key, sep, val = item.partition(": ")
    if not sep:
        raise _Unknown
    return key, val


def _parse_value(text: str) -> Any:
    if text.startswith("["):
        if not text.endswith("]"):
            raise _Unknown
        return [_parse_scalar(item) for item in _parse_items(text[1:-1])]
    if text.startswith("{"):
        if not text.endswith("}"):
            raise _Unknown
        out: dict[str, Any] = {}
        for item in _parse_items(text[1:-1]):
            key, val = _split_pair(item)
            parsed_key = _parse_scalar(key.strip())
            if not isinstance(parsed_key, str) or parsed_key in out:
                raise _Unknown
            out[parsed_key] = _parse_scalar(val.strip())
        return out
    return _parse_scalar(text)


def load(raw: str) -> dict[str, Any] | None:
    """Parse frontmatter written in the subset, or return None so the caller falls back to YAML.

    A line is parsed once: ``kind: leaf``, ``role: user``, ``status: admitted`` repeat on every leaf of
    a vault, and a reindex reads them all (the parse of a line depends on nothing else)."""
    out: dict[str, Any] = {}
    lines = _LINES
    for line in raw.split("\n"):
        if not line:
            continue
        parsed = lines.get(line)
        if parsed is None:
            parsed = _line(line)
            if parsed[2] is not dict:  # a flow mapping is parsed each time (no frozen form kept)
                if len(lines) >= LINES_KEPT:
                    lines.clear()
                lines[line] = parsed
        key, value, kind = parsed
        if key is None or key in out:
            return None
        out[key] = list(value) if kind is list else value
    return out


LINES_KEPT = 4096  # lines remembered (a line is ~40 characters: ~0.5 MB at most)
_LINES: dict[str, tuple[str | None, Any, type]] = {}


def _line(line: str) -> tuple[str | None, Any, type]:
    """(key, value, type) of one frontmatter line, the key None when the line is not in the subset; a
    list's value is kept as a tuple (``load`` gives each caller its own list)."""
    match = _KEY_LINE_RE.fullmatch(line)
    if match is None:
        return None, None, type(None)
    # YAML ignores spaces around a plain value ("k:  0" is the integer 0).
    key, text = match.group(1), match.group(2).strip(" ")
    if not text or _tag(key) != _STR_TAG or _unsafe_re().search(text):
        return None, None, type(None)
    try:
        value = _parse_value(text)
    except _Unknown:
        return None, None, type(None)
    if isinstance(value, list):
        return key, tuple(value), list
    return key, value, type(value)
