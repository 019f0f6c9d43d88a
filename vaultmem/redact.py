"""Secret redaction: replace credentials in text with ``[REDACTED:<kind>]`` before anything is stored.

Runs on every field of every message before it is chunked (body, title, heading path, speaker, subject,
session and source names), on every node file the engine reads back (a person may type a secret into a
leaf or a note), and on everything the engine derives (file and folder names, commit messages), so a
secret never reaches a leaf file, the index, a summary or git. It must never raise, never log or return
a secret it found, and redacting twice must give the same text as redacting once.

Three sets of rules, in this order (the order breaks ties between matches of the same span):

1. vaultmem's own rules below: the common shapes (OpenAI, Anthropic, AWS, GitHub, Slack, Google, JWT,
   bearer and basic auth, private keys, passwords in English and Chinese, URL passwords, Azure
   connection strings, ``api_key = ...`` assignments).
2. The catalogue ``data/gitleaks_rules.json``: gitleaks' maintained rule set (MIT, ``data/
   GITLEAKS_LICENSE``), converted by ``tools/gitleaks_rules.py``, with its entropy minimums, allowlists
   and stopwords.
3. Entropy rules for what has no known shape: a high-entropy token near a word such as key, secret,
   token, password, passwd, pwd or api (``keyword_secret``), and a long bare base64 or hex token that
   looks random (``high_entropy``). "Random" is measured against the expected Shannon entropy of a
   random string of the same length and alphabet (hex or base64); thresholds are measured by
   ``bench/redact.py``. Hex near hash words (sha256, checksum, commit, ...), UUIDs, URLs, data URIs and
   base64 that decodes to text are not secrets.

Speed matters because this is the ingest hot path: patterns are compiled once, on the first text long
enough to hold a secret (not at import: a `vaultmem search` pays nothing for them), and each one
only runs when one of its trigger substrings (gitleaks calls them keywords) occurs in the lowercased
text, so ordinary prose costs a few hundred substring tests. In a sweep, the matches of all patterns are
collected on the same text and the earliest (then the longest) wins where they overlap; a match that
touches an existing marker is ignored. Sweeps repeat until one changes nothing, which makes ``redact``
idempotent by construction.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")

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
Span = tuple[int, int]


# -- entropy ----------------------------------------------------------------------------------------
def shannon(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


@functools.lru_cache(maxsize=512)
def random_entropy(n: int, k: int) -> float:
    """The expected Shannon entropy of ``n`` characters drawn uniformly from ``k`` symbols (exact:
    each symbol's count is binomial, and the plug-in entropy is log2 n - sum(c log2 c) / n)."""
    n = min(n, 256)  # longer tokens gain almost nothing
    logp, logq = math.log(1 / k), math.log(1 - 1 / k)
    total = 0.0
    for c in range(2, n + 1):
        log_prob = (
            math.lgamma(n + 1) - math.lgamma(c + 1) - math.lgamma(n - c + 1) + c * logp + (n - c) * logq
        )
        total += math.exp(log_prob) * c * math.log2(c)
    return math.log2(n) - k * total / n


_HEX_RE = re.compile(r"[0-9a-fA-F]+")


def randomness(token: str) -> float:
    """Entropy of ``token`` relative to a random string of its length over its alphabet (hex or base64):
    about 1.0 for random keys, 0.75-0.9 for words and identifiers of the same length."""
    k = 16 if _HEX_RE.fullmatch(token) else 64
    return shannon(token) / random_entropy(len(token), k)


# Measured by bench/redact.py on random keys (recall) and on LoCoMo, LongMemEval and look-alikes (false
# positives): below 0.8, fewer than 3 in 1,000 random keys of 16 characters (hex, base36, base62 or base64);
# a word with digits near a key word ("internationalization2024") scores 0.79. Bare tokens (32+ characters,
# no key word) need 0.9.
KEYWORD_RANDOMNESS = 0.8
BARE_RANDOMNESS = 0.9
KEYWORD_MIN_LEN = 16
BARE_MIN_LEN = 32


# -- rules ------------------------------------------------------------------------------------------
class _Base:
    kind: str
    triggers: tuple[str, ...]  # lowercase substrings; the rule runs only if one occurs (empty: always)
    fallback = False  # an entropy guess: gives way to any rule that knows the shape it overlaps

    def spans(self, text: str) -> Iterator[Span]:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class _Rule(_Base):
    """One of vaultmem's own patterns. A group named ``s*`` is the secret; else the whole match."""

    kind: str
    pattern: re.Pattern[str]
    triggers: tuple[str, ...]
    check: Callable[[str], int] | None = None  # how many chars of the secret to redact; 0 = not a secret

    def spans(self, text: str) -> Iterator[Span]:
        groups = [g for g in self.pattern.groupindex if g.startswith("s")]
        for m in self.pattern.finditer(text):
            start, end = m.span()
            for g in groups:
                if m.start(g) >= 0:
                    start, end = m.span(g)
                    break
            if self.check is not None:
                end = start + self.check(text[start:end])
            if end > start:
                yield start, end


@dataclass(frozen=True, slots=True)
class _Allow:
    target: str  # "secret", "match" or "line", as in gitleaks
    sources: tuple[str, ...]  # compiled on first use (``regexes``)
    stopwords: tuple[str, ...]

    @property
    def regexes(self) -> tuple[re.Pattern[str], ...]:
        return tuple(_ascii_pattern(r) for r in self.sources)

    def allows(self, text: str, match: re.Match[str], secret: str) -> bool:
        if self.target == "match":
            subject = match.group(0)
        elif self.target == "line":
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            subject = text[start : end if end >= 0 else len(text)]
        else:
            subject = secret
        if any(r.search(subject) for r in self.regexes):
            return True
        lowered = secret.lower()
        return any(word in lowered for word in self.stopwords)


@dataclass(frozen=True, slots=True)
class _CatalogueRule(_Base):
    """A rule of the gitleaks catalogue: the secret is ``secret_group``, else the first group that
    matched, else the whole match; it must reach the rule's entropy and pass its allowlists."""

    kind: str
    source: str  # the regex, compiled the first time the rule's keywords are seen (``pattern``)
    triggers: tuple[str, ...]
    entropy: float
    secret_group: int
    allow: tuple[_Allow, ...]

    @property
    def pattern(self) -> re.Pattern[str]:
        return _ascii_pattern(self.source)

    def spans(self, text: str) -> Iterator[Span]:
        for m in self.pattern.finditer(text):
            group = self.secret_group or next((i for i in range(1, (m.lastindex or 0) + 1) if m.group(i)), 0)
            start, end = m.span(group)
            secret = text[start:end]
            if not secret or (self.entropy and shannon(secret) < self.entropy):
                continue
            if any(a.allows(text, m, secret) for a in self.allow):
                continue
            yield start, end


# Tokens the entropy rules look at: base64 / base64url / hex runs, JWT-like dots allowed inside.
_TOKEN_RE = re.compile(r"(?<![A-Za-z0-9+/=_~.-])[A-Za-z0-9+/_~.-]{16,}={0,2}")
_TOKEN_GATE_RE = re.compile(r"[A-Za-z0-9+/_~.-]{16}")
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{1,30}://[^\s<>\"'`]+|www\.[^\s<>\"'`]+")
_DATA_URI_RE = re.compile(r"data:[\w.+-]+/[\w.+-]+(?:;[\w=.-]+)*;base64,[A-Za-z0-9+/=]+")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_DIGEST_RE = re.compile(r"(?:sha(?:1|256|384|512)|md5)-", re.IGNORECASE)
_KEYWORD_RE = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_.-])*"
    r"(?:api|apikey|key|keys|secret|secrets|token|tokens|password|passwords|passwd|passphrase|pwd|pass"
    r"|credential|credentials|creds|auth|bearer|signature|sig|private|license)"
    r"(?:[_.-][A-Za-z0-9]+)*(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_KEYWORD_TRIGGERS = (
    "api",
    "key",
    "secret",
    "token",
    "pass",
    "pwd",
    "cred",
    "auth",
    "bearer",
    "sig",
    "private",
)
_KEYWORD_WINDOW = 64
# Hex near these words is a hash, a commit or an id, not a secret.
_HASH_CONTEXT_RE = re.compile(
    r"(?<![a-z])(?:sha-?(?:1|224|256|384|512)?|md5|hash(?:es)?|checksums?|digests?|sums?|sha\d+sum|commits?"
    r"|committed|rev(?:ision)?s?|merged?|revert(?:ed)?|cherry-?pick(?:ed)?|rebased?|head|git|blob|tree"
    r"|fingerprints?|etag|integrity|oid|object|build|image|layer|tag|release|version|id|ids|uuid|hex)"
    r"(?![a-z])",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=8)
def _tokens(text: str) -> tuple[Span, ...]:
    """Spans of the candidate tokens of ``text`` (16+ base64/hex characters), found once per text and
    shared by both entropy rules: most prose has none, and then neither rule does any more work."""
    if not _TOKEN_GATE_RE.search(text):
        return ()  # no run of 16 token characters: nothing to look at (one search, in C)
    return tuple(m.span() for m in _TOKEN_RE.finditer(text))


def _strip_token(text: str, start: int, end: int) -> Span:
    """The part of a candidate token that could be a key: without trailing punctuation and without a
    file extension (``<key>.md`` in a file name is the key)."""
    while end > start and text[end - 1] in ".-~":
        end -= 1
    ext = _EXTENSION_RE.search(text, start, end)
    if ext is not None and ext.start() > start:
        end = ext.start()
    return start, end


def _inside(spans: list[Span], start: int, end: int) -> bool:
    return any(a <= start and end <= b for a, b in spans)


def _window_start(text: str, start: int) -> int:
    """Where the words that can name the token at ``start`` begin: its own line (at most 64 characters
    back), or the line before when the token's line holds nothing else (``password:\n  hunter2...``)."""
    line = text.rfind("\n", 0, start) + 1
    if line > 0 and not text[line:start].strip(" \t-*>:=\"'`"):
        line = text.rfind("\n", 0, line - 1) + 1
    return max(line, start - _KEYWORD_WINDOW)


_CAMEL_HUMP_RE = re.compile(r"[A-Z](?=[a-z]{2})")
_CAMEL_WORD_RE = re.compile(r"[A-Z]?[a-z]{2,}")
_VOWEL_RE = re.compile(r"[AEIOUYaeiouy]")
_EXTENSION_RE = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,4}$")
_SLUG_SEP_RE = re.compile(r"[-_.]+")


def _named(token: str) -> bool:
    """True when ``token`` reads as a name rather than a key, whatever its entropy: a path without
    capitals, a slug of words (``release-2024-03-01-final``), or a camelCase identifier
    (``Vaswani2017AttentionIsAllYouNeed``: every capital starts a word of letters with a vowel; in a
    random key about one capital in six is followed by two lower-case letters)."""
    if not any(c.isupper() for c in token):
        if "/" in token:
            return True
        segments = [seg for seg in _SLUG_SEP_RE.split(token) if seg]
        plain = sum(1 for seg in segments if seg.isdigit() or (seg.isalpha() and seg.isascii()))
        return len(segments) >= 3 and plain >= 0.6 * len(segments)
    uppers = sum(1 for c in token if c.isupper())
    if uppers < 2 or len(_CAMEL_HUMP_RE.findall(token)) < 0.6 * uppers:
        return False
    letters = sum(1 for c in token if c.isalpha())
    return sum(len(w) for w in _CAMEL_WORD_RE.findall(token) if _VOWEL_RE.search(w)) >= 0.8 * letters


def _looks_random(token: str, threshold: float, min_len: int) -> bool:
    if len(token) < min_len or _UUID_RE.fullmatch(token):
        return False
    if not any(c.isdigit() for c in token) or not any(c.isalpha() for c in token):
        return False
    return randomness(token) >= threshold and not _named(token)


def _encodes_text(token: str) -> bool:
    """True when ``token`` is base64 of readable text (a person's words encoded, not a key)."""
    core = token.rstrip("=")
    try:
        raw = base64.b64decode(
            core + "=" * (-len(core) % 4), altchars=b"-_" if "-" in core or "_" in core else None
        )
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    printable = sum(1 for c in decoded if c.isprintable() or c in "\n\t")
    return bool(decoded) and printable >= 0.95 * len(decoded)


class _KeywordEntropy(_Base):
    """A random-looking token a few words after key / secret / token / password / api ...: "the api key
    for staging is 8fK2x9Lq...", "my password: Xk29!...". Each candidate token looks back for the word,
    so a first innocent token after the word does not hide the secret after it."""

    kind = "keyword_secret"
    triggers = _KEYWORD_TRIGGERS
    fallback = True

    def spans(self, text: str) -> Iterator[Span]:
        urls: list[Span] | None = None
        for a, b in _tokens(text):
            start, end = _strip_token(text, a, b)
            if not _looks_random(text[start:end], KEYWORD_RANDOMNESS, KEYWORD_MIN_LEN):
                continue
            if not _KEYWORD_RE.search(text, _window_start(text, start), start):
                continue
            if _HEX_RE.fullmatch(text[start:end]) and _HASH_CONTEXT_RE.search(
                text, max(0, start - 24), start
            ):
                continue  # `content_hash: 9b0e...`, `sha256 of the key: ...`: a hash, named as one
            if urls is None:
                urls = [m.span() for m in _URL_RE.finditer(text)] if "://" in text or "www." in text else []
            if not _inside(urls, start, end):
                yield start, end


class _BareEntropy(_Base):
    """A long random base64 or hex token with no word around it: a key pasted on its own."""

    kind = "high_entropy"
    triggers = ()
    fallback = True

    def spans(self, text: str) -> Iterator[Span]:
        skip: list[Span] | None = None
        for a, b in _tokens(text):
            if b - a < BARE_MIN_LEN:
                continue
            start, end = _strip_token(text, a, b)
            token = text[start:end]
            if not _looks_random(token, BARE_RANDOMNESS, BARE_MIN_LEN):
                continue
            if skip is None:
                skip = [s.span() for s in _URL_RE.finditer(text)] + [
                    s.span() for s in _DATA_URI_RE.finditer(text)
                ]
            if _inside(skip, start, end):
                continue
            if _DIGEST_RE.match(token):
                continue  # a subresource-integrity digest: sha384-<base64>
            if _HEX_RE.fullmatch(token):
                context = text[max(0, start - 48) : min(len(text), end + 24)]
                if _HASH_CONTEXT_RE.search(context):
                    continue
            elif not (any(c.isupper() for c in token) and any(c.islower() for c in token)):
                continue  # base64 of random bytes mixes cases; "abc123-def456-..." is an id
            elif _encodes_text(token):
                continue
            yield start, end


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
    return len(value) if shannon(value) >= 3.0 else 0


@dataclass(frozen=True)
class _RuleSource:
    """One of the own rules before it is compiled (``_rules`` compiles them, on first use)."""

    kind: str
    pattern: str
    triggers: tuple[str, ...]
    check: Callable[[str], int] | None
    flags: re.RegexFlag

    def compiled(self) -> _Rule:
        return _Rule(self.kind, re.compile(self.pattern, self.flags), self.triggers, self.check)


def _rule(
    kind: str,
    pattern: str,
    triggers: tuple[str, ...],
    check: Callable[[str], int] | None = None,
    flags: re.RegexFlag = re.IGNORECASE,
) -> _RuleSource:
    return _RuleSource(kind, pattern, triggers, check, flags)


# Order breaks ties between matches with the same start and length: specific kinds before generic ones.
_OWN_RULES: tuple[_RuleSource, ...] = (
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
        "azure_key",
        # Storage and Service Bus connection strings: AccountKey=<base64>;  SharedAccessKey=<base64>
        r"\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)[ \t]*=[ \t]*(?P<s>[A-Za-z0-9+/%=&:.-]{20,})",
        ("accountkey", "sharedaccess"),
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


@functools.cache
def _ascii_pattern(source: str) -> re.Pattern[str]:
    """A catalogue regex, compiled once. Compiling all 240 of them cost more than the rest of a
    `vaultmem search` start-up, and most texts trigger none."""
    return re.compile(source, re.ASCII)


def _load_catalogue() -> tuple[tuple[_CatalogueRule, ...], _Allow]:
    raw: dict[str, Any] = json.loads(
        resources.files("vaultmem").joinpath("data/gitleaks_rules.json").read_text(encoding="utf-8")
    )
    glob = raw.get("allow", {})
    global_allow = _Allow("secret", tuple(glob.get("regexes", [])), tuple(glob.get("stopwords", [])))
    rules = []
    for entry in raw["rules"]:
        allows = tuple(
            _Allow(a.get("target", "secret"), tuple(a.get("regexes", [])), tuple(a.get("stopwords", [])))
            for a in entry.get("allow", [])
        )
        rules.append(
            _CatalogueRule(
                kind=entry["kind"],
                source=entry["regex"],
                triggers=tuple(entry["keywords"]),
                entropy=float(entry.get("entropy", 0.0)),
                secret_group=int(entry.get("secret_group", 0)),
                allow=(*allows, global_allow),
            )
        )
    return tuple(rules), global_allow


@dataclass(frozen=True)
class _Rules:
    rules: tuple[_Base, ...]
    triggers: Any  # ahocorasick.Automaton: trigger -> orders of the rules it wakes
    always: tuple[int, ...]  # rules without triggers
    catalogue_size: int


@functools.cache
def _rules() -> _Rules:
    """Every rule, read on the first text that could hold a secret (not at import: a `vaultmem search`
    that never redacts a long text never reads the catalogue)."""
    catalogue, _ = _load_catalogue()
    own = tuple(rule.compiled() for rule in _OWN_RULES)
    rules: tuple[_Base, ...] = (*own, *catalogue, _KeywordEntropy(), _BareEntropy())
    # Every trigger in one Aho-Corasick automaton: one pass over the text finds all of them (a loop of
    # `trigger in text` over the catalogue's 230 keywords cost 5x more on LongMemEval's long turns).
    import ahocorasick  # with the rules: an extension module a process that never redacts does not load

    triggers = ahocorasick.Automaton()
    for order, rule in enumerate(rules):
        for trigger in rule.triggers:
            orders = triggers.get(trigger) if trigger in triggers else ()
            triggers.add_word(trigger, (*orders, order))
    triggers.make_automaton()
    always = tuple(order for order, rule in enumerate(rules) if not rule.triggers)
    return _Rules(rules, triggers, always, len(catalogue))


OWN_KINDS: tuple[str, ...] = tuple(dict.fromkeys(rule.kind for rule in _OWN_RULES))


def __getattr__(name: str) -> Any:
    """``KINDS`` (every kind of secret, own rules first) and ``CATALOGUE_SIZE``, read on first use."""
    if name == "KINDS":
        return tuple(dict.fromkeys(rule.kind for rule in _rules().rules))
    if name == "CATALOGUE_SIZE":
        return _rules().catalogue_size
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


FIELD_CACHE_MAX_CHARS = 256  # longer values (a message's text) are redacted afresh every time


def redact_field(text: str) -> Redaction:
    """``redact(text)`` for the short fields a batch repeats on every message (speaker, role, session,
    source, provenance values): the same result, computed once per distinct value. The rules are fixed
    at import, so a remembered result is the one ``redact`` would give; the values stay in this
    process's memory only, like the text they came from."""
    return _redact_remembered(text) if len(text) <= FIELD_CACHE_MAX_CHARS else redact(text)


@functools.lru_cache(maxsize=4096)
def _redact_remembered(text: str) -> Redaction:
    return redact(text)


def scrub(text: str) -> str:
    """``text`` with its secrets replaced (``redact(text).text``)."""
    return redact(text).text


def has_secret(text: str) -> bool:
    """True when ``text`` holds anything ``redact`` would replace."""
    return bool(_sweep(text)[1])


def _sweep(text: str) -> tuple[str, set[str]]:
    """One pass of every rule over ``text``; earliest, then longest, then first-listed match wins."""
    if len(text) < 6:
        return text, set()  # nothing shorter than `pwd=ab` is a secret
    lowered = text.lower()
    # A match that touches an existing marker is not a secret, so a marker is never redacted again.
    markers = [m.span() for m in MARKER_RE.finditer(text)] if "[redacted:" in lowered else []
    # The rules without triggers look for a bare token of 32+ characters, which short text cannot hold.
    compiled = _rules()
    active = set(compiled.always) if len(text) >= BARE_MIN_LEN else set()
    for _end, orders in compiled.triggers.iter(lowered):
        active.update(orders)
    if not active:
        return text, set()
    found: list[tuple[int, int, int, str]] = []  # (start, -length, rule order, kind)
    guesses: list[tuple[int, int, int, str]] = []  # the same, from the entropy rules
    for order in sorted(active):
        rule = compiled.rules[order]
        for start, end in rule.spans(text):
            if not any(a < end and start < b for a, b in markers):
                (guesses if rule.fallback else found).append((start, start - end, order, rule.kind))
    # A shape a rule knows wins over an entropy guess that overlaps it (`deploy-npm_...`: the npm
    # token, not the whole word).
    found += [g for g in guesses if not any(f[0] < g[0] - g[1] and g[0] < f[0] - f[1] for f in found)]
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
