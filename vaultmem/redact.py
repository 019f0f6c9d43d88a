"""Secret redaction: replace credentials in text with ``[REDACTED:<kind>]`` before anything is stored.

Runs on every message before it is chunked, so a secret never reaches a leaf file, the index or git.
Owns the list of secret kinds and their patterns. It must never raise, never log or return a secret it
found, and redacting twice must give the same text as redacting once.

Speed matters because this is the ingest hot path: patterns are compiled once at import, and each one
only runs when one of its trigger substrings occurs in the lowercased text, so ordinary prose costs a
dozen substring tests. In a sweep, the matches of all patterns are collected on the same text and the
earliest (then the longest) wins where they overlap; a match that touches an existing marker is
ignored. Sweeps repeat until one changes nothing, which makes ``redact`` idempotent by construction.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

MARKER_RE = re.compile(r"\[REDACTED:[a-z_]+\]")

# `key: value`, `key = value`, `"key": "value"`, `key => value`, `**key**: value`.
_ASSIGN = r"""[*"'`]{0,3}[ \t]*(?:[:=]>?)[ \t]*"""
# Passwords are ASCII in practice; a bare value stops at CJK text and full-width punctuation.
_CJK_AND_FULLWIDTH = r"\u3000-\u303f\u3400-\u9fff\uf900-\ufaff\uff00-\uffef"
# Quoted values keep their quotes and may hold spaces; bare values end at whitespace or a separator.
_VALUE = (
    r"""(?:"(?P<s>[^"\n]+)"|'(?P<s2>[^'\n]+)'|`(?P<s3>[^`\n]+)`"""
    rf"""|(?P<s4>[^\s"'`;,{_CJK_AND_FULLWIDTH}]+))"""
)
_PASSWORD_WORD = r"(?:password|passwd|passphrase|pwd)"
_GENERIC_WORD = (
    r"(?:api[_-]?(?:key|secret|token)|apikey|access[_-]?key(?:[_-]?id)?|secret[_-]?key|client[_-]?secret"
    r"|(?:access|auth|refresh|session|private|bot)[_-]?token|token|secret)"
)
_WORDS_RE = re.compile(r"sk(?:-[a-z]+)+")
_TRAILING_PUNCT = ".,;:!?)]}\"'"


def _password_is(value: str) -> int:
    """`password is X`: X must look like a password (6+ chars with a digit or symbol), not a word."""
    core = value.rstrip(_TRAILING_PUNCT)
    if len(core) >= 6 and any(not c.isalpha() for c in core):
        return len(core)
    return 0


def _not_words(value: str) -> int:
    """`sk-` followed by plain hyphenated words ("sk-learn-style-...") is prose, not a key."""
    return 0 if _WORDS_RE.fullmatch(value) else len(value)


def _high_entropy(value: str) -> int:
    """Generic `token=` values: long, letters and digits mixed, and not repetitive."""
    if len(value) < 16:
        return 0
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return 0
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return len(value) if entropy >= 3.0 else 0


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    triggers: tuple[str, ...]  # lowercase substrings; the pattern runs only if one occurs in the text
    check: Callable[[str], int] | None = None  # how many chars of the secret to redact; 0 = not a secret

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(g for g in self.pattern.groupindex if g.startswith("s"))


def _rule(
    kind: str,
    pattern: str,
    triggers: tuple[str, ...],
    check: Callable[[str], int] | None = None,
    flags: re.RegexFlag = re.IGNORECASE,
) -> _Rule:
    return _Rule(kind, re.compile(pattern, flags), triggers, check)


# Order breaks ties between matches with the same start and length: specific kinds before generic ones.
_RULES: tuple[_Rule, ...] = (
    _rule(
        "private_key",
        r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
        # A whole block (whose body never crosses another `-----` line or a marker), or else a truncated
        # paste: the base64 and header lines that follow the BEGIN line.
        r"(?:(?:(?!-----)[^\[])*?-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:[ \t]*\r?\n(?:[A-Za-z0-9+/=]{8,}|[A-Za-z-]+:[^\n\[]*))*)",
        ("-----begin",),
        flags=re.NOFLAG,
    ),
    _rule("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", ("eyj",), flags=re.NOFLAG),
    _rule("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", ("sk-ant-",), flags=re.NOFLAG),
    _rule(
        "openai_key",
        r"\bsk-(?!ant-)[A-Za-z0-9_-]{20,}",
        ("sk-",),
        check=_not_words,
        flags=re.NOFLAG,
    ),
    _rule("aws_access_key", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", ("akia", "asia"), flags=re.NOFLAG),
    _rule(
        "aws_secret_key",
        rf"\baws[ _-]?secret[ _-]?(?:access[ _-]?)?key{_ASSIGN}[\"']?"
        r"(?P<s>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        ("aws",),
    ),
    _rule(
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        flags=re.NOFLAG,
    ),
    _rule("slack_token", r"\b(?:xox[baprs]|xapp)-[A-Za-z0-9-]{10,}", ("xox", "xapp-"), flags=re.NOFLAG),
    _rule("google_api_key", r"\bAIza[0-9A-Za-z_-]{30,}", ("aiza",), flags=re.NOFLAG),
    _rule(
        "bearer_token",
        # A token has a digit somewhere; "the bearer of bad news" has none.
        r"\bbearer[ \t]+(?P<s>(?=[A-Za-z._~+/-]*\d)[A-Za-z0-9._~+/-]{16,}=*)",
        ("bearer",),
    ),
    _rule(
        "basic_auth",
        r"\bauthorization:[ \t]*basic[ \t]+(?P<s>[A-Za-z0-9+/]{8,}={0,2})",
        ("basic",),
    ),
    _rule(
        "url_password",
        # scheme://user:pass@host -> only the pass; greedy up to the last `@` before the path.
        r"\b[a-z][a-z0-9+.-]{1,30}://[^\s:/@?#]*:(?P<s>[^\s/?#]+)@(?=[\w\[])",
        ("://",),
    ),
    _rule(
        "password",
        rf"(?<![a-z0-9]){_PASSWORD_WORD}(?![a-z0-9]){_ASSIGN}[*]{{0,2}}{_VALUE}",
        ("pass", "pwd"),
    ),
    _rule(
        "password",
        rf"\b{_PASSWORD_WORD}[ \t]+(?:is|was)[ \t]*:?[ \t]+(?P<s>\S{{4,}})",
        ("pass",),
        check=_password_is,
    ),
    _rule(
        "password",
        # Chinese: 密码是xxx / 密码：xxx / 密碼為xxx. Passwords are ASCII, so the value stops at CJK text.
        r"(?:密码|密碼|口令)[ \t]*(?:(?:是|为|為)[ \t]*[:：]?|[:：=＝])[ \t]*"
        r"(?P<s>(?=[!-~]*[A-Za-z0-9])[!-~]+)",
        ("密码", "密碼", "口令"),
    ),
    _rule(
        "generic_secret",
        rf"(?<![a-z0-9]){_GENERIC_WORD}(?![a-z0-9]){_ASSIGN}[*\"'`]{{0,3}}"
        r"(?P<s>[A-Za-z0-9_\-+/=.~]{16,})",
        ("key", "token", "secret"),
        check=_high_entropy,
    ),
)
_GROUPS: tuple[tuple[str, ...], ...] = tuple(rule.groups for rule in _RULES)

KINDS: tuple[str, ...] = tuple(dict.fromkeys(rule.kind for rule in _RULES))


@dataclass(frozen=True)
class Redaction:
    """The text with every secret replaced, and the kinds found (each once, in order of appearance)."""

    text: str
    kinds: tuple[str, ...]


def redact(text: str) -> Redaction:
    """Replace every secret in ``text`` with ``[REDACTED:<kind>]``.

    One sweep nearly always finds everything; a second one catches a secret that an overlapping
    match of another kind hid in the first, and confirms that nothing is left. Stopping only at a
    fixed point is what makes ``redact(redact(t).text) == Redaction(redact(t).text, ())``. Each sweep
    replaces at least one character that is not part of a marker, so the loop ends.
    """
    found: set[str] = set()
    result = text
    while True:
        result, kinds = _sweep(result)
        if not kinds:
            break
        found.update(kinds)
    ordered = sorted(found, key=lambda kind: result.find(f"[REDACTED:{kind}]"))
    return Redaction(result, tuple(ordered))


def _sweep(text: str) -> tuple[str, set[str]]:
    """One pass of every rule over ``text``; earliest, then longest, then first-listed match wins."""
    lowered = text.lower()
    # A match that touches an existing marker is not a secret, so a marker is never redacted again.
    markers = [m.span() for m in MARKER_RE.finditer(text)] if "[redacted:" in lowered else []
    found: list[tuple[int, int, int, str]] = []  # (start, -length, rule order, kind)
    for order, rule in enumerate(_RULES):
        if not any(t in lowered for t in rule.triggers):
            continue
        groups = _GROUPS[order]
        for m in rule.pattern.finditer(text):
            start, end = m.span()
            for g in groups:
                if m.start(g) >= 0:
                    start, end = m.span(g)
                    break
            if rule.check is not None:
                end = start + rule.check(text[start:end])
            if end > start and not any(a < end and start < b for a, b in markers):
                found.append((start, start - end, order, rule.kind))
    if not found:
        return text, set()
    found.sort()
    parts: list[str] = []
    kinds: set[str] = set()
    pos = 0
    for start, neg_length, _, kind in found:
        if start < pos:
            continue  # overlaps a match that starts earlier or is longer
        parts.append(text[pos:start])
        parts.append(f"[REDACTED:{kind}]")
        kinds.add(kind)
        pos = start - neg_length
    parts.append(text[pos:])
    return "".join(parts), kinds
