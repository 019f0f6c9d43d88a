"""Rule-based entity mentions in a leaf's text, English and Chinese, and the keys and folder slugs of topics.

Owns the mention key ``kind:value`` that ties the variants of one entity together ("Caroline",
"@caroline", "Caroline's" -> ``person:caroline``) and the slug a topic folder gets from its key. Pure:
no I/O, no clock (relative dates resolve against the ``ts`` passed in, or are skipped), no model; the
optional LLM pass lives in ``entities_llm``. Approximate by design. The rules, in the order they claim
text (a later rule never reuses characters an earlier one took):

- e-mail addresses; URLs: a GitHub/GitLab/Bitbucket ``owner/name`` (with or without scheme) and
  ``repo owner/name`` are repos (a bare ``owner/name`` is taken as github.com); other URLs are urls.
- tickers: ``$AAPL``, ``(NASDAQ: AAPL)``, ``AAPL stock``, ``shares of AAPL``; ``$`` + digit is money;
  a shell variable is not a ticker (``$HOME``, ``$PATH/bin``, ``MAILDIR=$HOME/Mail``, a line that
  starts with ``export``/``echo``...).
- dates: ISO (also ``/`` or ``.``), ``21 November 2026``, ``November 21, 2026``, ``Nov 21`` (year
  from ts), ``May 2023`` (a month key), d/m/y only when one part is over 12, ``2026年11月21日``,
  ``11月21日`` (year from ts); today/yesterday/last Tuesday/next Friday/昨天... only with a ts.
- money: a currency symbol, code or word next to a number; k/m/b and 千/万/亿 expanded; ¥ and 元 are CNY.
- versions: ``v1.2``, ``1.2.3`` (not an IP, not a date), ``version 2``/``release 2``/``版本2``, and
  ``Name 3.11`` after a capitalised name or listed software (where ``Postgres 16`` counts too); that
  name is also a product (listed) or a project. A bare ``1.5`` is not a version.
- ``@handles`` (any script) are people; ``#hashtags`` and a name after ``project``/``repo`` or before
  ``project``/``项目`` are projects.
- names (``entities_names``): Chinese word lists and people (a surname and given-name characters),
  then English word lists (places, organisations, products, events), shapes ("Acme Corp", "Lake
  Tahoe", "PyCon", CamelCase projects) and people, who need evidence: a known given name, a title,
  a verb of speech, a relation, a greeting. The speaker is a person (an organisation when a word list
  says so: mail from "GitHub").
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from vaultmem.entities_names import HAN_RE, STOP, find_chinese, find_english, listed_kind, software_words
from vaultmem.model import utc
from vaultmem.redact import scrub

# Raised whenever the rules change what they find: `vaultmem topics --rescan` then reads every leaf anew.
# 1: the first rules; 2: organisations, products and events, names only with evidence (issue #12).
RULES_VERSION = 2

KINDS = (
    "person",
    "place",
    "org",
    "product",
    "event",
    "project",
    "repo",
    "url",
    "version",
    "date",
    "money",
    "email",
    "ticker",
)


@dataclass(frozen=True)
class Mention:
    key: str  # canonical "kind:value", e.g. "person:caroline", "repo:github.com/acme/tidepool"
    kind: str  # one of KINDS
    name: str  # display form as first seen, tidied: no @, no possessive, capitalised if all lower/upper


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ROLES = _words("user assistant system bot tool human ai me you unknown")

_HAN = "\u3400-\u4dbf\u4e00-\u9fff"
_HAN_RE = HAN_RE

# Most patterns start with a literal or a character class (not a lookbehind, not a group or a repeat
# such as \d{4}) so that the regex engine can skip ahead to candidates; the character before a match
# is checked in Python instead.
_MON = (
    r"(?P<mon>Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
    r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}  # noqa: SIM905
_WEEKDAYS = ("mon", "tues", "wednes", "thurs", "fri", "satur", "sun")
_REL_DAYS = {"前天": -2, "昨天": -1, "今天": 0, "明天": 1, "后天": 2}
_REL_DAYS |= {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}
_ISO_RE = re.compile(r"(\d\d\d\d)([-/.])(\d\d?)\2(\d\d?)(?!\d|\.\d)")
_DMY_RE = re.compile(r"(\d\d?)/(\d\d?)/(\d{4})(?![\d/])")
_DAY_MON_RE = re.compile(rf"(\d\d?)(?:st|nd|rd|th)?\s+(?:of\s+)?{_MON},?(?:\s+(\d{{4}}))?(?![\w:])")
_MON_DAY_RE = re.compile(
    rf"{_MON}(?:\s+(?P<d>\d\d?)(?:st|nd|rd|th)?(?:,?\s+(?P<y>\d{{4}}))?(?![\w:])|,?\s+(?P<ym>\d{{4}})(?!\d))"
)
_MONTH_HINT_RE = re.compile(r"Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec")
_WEEKDAY = r"(mon|tues|wednes|thurs|fri|satur|sun)day"
_REL_RE = re.compile(rf"today|tonight|yesterday|tomorrow|last\s+{_WEEKDAY}|next\s+{_WEEKDAY}")
_ZH_DATE_RE = re.compile(
    r"(?:(\d{4})\s*年\s*)?(\d\d?)\s*月(?:\s*(\d\d?)\s*[日号])?|(今天|昨天|前天|明天|后天)"
)
_NUM = r"(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?"
_MONEY_SYM_RE = re.compile(rf"[$€£¥￥]\s?{_NUM}(?:([kKmMbB]|bn|mn)\b|\s+(thousand|million|billion)\b)?")
_MONEY_CODE_RE = re.compile(
    rf"{_NUM}\s?(?:([kKmMbB]|bn|mn)|(thousand|million|billion))?\s*"
    r"(?i:(usd|eur|gbp|cny|rmb|jpy|hkd|cad|aud|dollars?|bucks|euros?|yuan|yen))\b"
)
_MONEY_ZH_RE = re.compile(
    r"(\d+)(\.\d+)?\s*([千万亿])?\s*(?:元|块钱?|人民币)|(?:人民币|RMB)\s*(\d+)(\.\d+)?\s*([千万亿])?"
)
_CURRENCY_PREFIX_RE = re.compile(r"(?<![A-Za-z])(US|HK|NZ|A|C|S)$")
_CURRENCY = {"$": "usd", "€": "eur", "£": "gbp", "¥": "cny", "￥": "cny", "US": "usd", "HK": "hkd"}
_CURRENCY |= {"A": "aud", "C": "cad", "NZ": "nzd", "S": "sgd", "dollar": "usd", "dollars": "usd"}
_CURRENCY |= {"bucks": "usd", "euro": "eur", "euros": "eur", "rmb": "cny", "yuan": "cny", "yen": "jpy"}
_MONEY_WORDS = _words("usd eur gbp cny rmb jpy hkd cad aud dollar buck yuan yen")
_SCALE = {"k": 10**3, "thousand": 10**3, "千": 10**3, "万": 10**4, "m": 10**6, "mn": 10**6, "million": 10**6}
_SCALE |= {"b": 10**9, "bn": 10**9, "billion": 10**9, "亿": 10**8}
_TICKER_RE = re.compile(
    r"\$([A-Za-z]{1,5})(?!\w)|\((?:NASDAQ|NYSE|AMEX|NYSEARCA|LSE|TSX|HKEX|SSE|SZSE)\s*:\s*([A-Z][A-Z.]{0,5}|\d{4,6})\)"
)
_SHELL_VARS = _words(
    """HOME PATH USER SHELL PWD OLDPWD TERM LANG EDITOR VISUAL PAGER MAIL MAILDIR LOGFILE LOGNAME TMPDIR TMP
    TEMP HOST HOSTNAME UID GID IFS PS1 DISPLAY ARGV REPLY RANDOM BASH ZSH GOPATH CC CXX PGDATA PGHOST PGUSER
    DEBUG VERBOSE CI ENV PORT DIR FILE FILES SRC DEST OUT VAR NAME URL KEY TOKEN ARGS OPTS"""
)
_SHELL_LINE_RE = re.compile(
    r"^\s*(?:\$\s+)?(?:export|echo|printf|cd|set|unset|alias|source|eval|exec|sudo)\s|[;|&]\s*(?:export|echo)\s"
    r"|=\$|\$\(|\$\{|`\$|^\s*[|:*]",
    re.MULTILINE,
)
_TICKER_WORD_RE = re.compile(r"\b([A-Z]{2,5})\s+(?:stock|shares)\b|\bshares\s+of\s+([A-Z]{2,5})\b")
_TAG = r"(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?"
_V_VERSION_RE = re.compile(rf"[vV](\d+(?:\.\d+){{0,3}}{_TAG})(?!\w|\.\d)")
_DOTS_VERSION_RE = re.compile(rf"\d\d*\.\d+\.\d+{_TAG}(?!\w|\.\d)")
_WORD_VERSION_RE = re.compile(
    r"(?:\b(?:[Vv]ersion|[Rr]elease|ver\.?)|版本)\s*[vV]?(\d+(?:\.\d+){0,3})(?!\w|\.\d)"
)
_SPACED_NUMBER_RE = re.compile(r" [vV]?(\d+(?:\.\d+){0,2})(?!\w|[.,]\d|\s*%)")
_VERSIONED_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+#]*")
_VERSION_KEY_RE = re.compile(r"(?:version|release|ver\.?|版本)?\s*(?:(.+?)\s+)?v?(\d+(?:\.\d+)*\S*)")
_EMAIL_RE = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+(@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})(?![\w-])"
)
_URL_RE = re.compile(
    r"(?:https?://|www\.)[^\s\x00-\x1f\x7f<>\"'`，。、！？；：（）【】「」《》" + _HAN + r"]+"
)
_FORGE_RE = re.compile(r"(?:github\.com|gitlab\.com|bitbucket\.org)/[\w.-]+/[\w.-]+")
_REPO_CUE_RE = re.compile(r"\b[Rr]epo(?:sitory)?\s+(?:at\s+)?`?([\w-]+/[\w.-]+)")
_OWNER_NAME_RE = re.compile(r"[\w-]+/[\w.-]+")
_FORGES = frozenset({"github.com", "gitlab.com", "bitbucket.org"})
_HANDLE_RE = re.compile(r"@([^\W\d_][\w-]*(?:\.[\w-]+)*)")
_HASHTAG_RE = re.compile(r"#([^\W\d_][\w-]{1,49})")
_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{3}){1,2}(?:[0-9a-fA-F]{2})?")
_PROJECT_CUE_RE = re.compile(
    r"(?:project|Project|projekt|Projekt|repository|Repository|repo|Repo)\s+(?:called\s+|named\s+)?(?:[\"“'`]([^\"”'`\n]{1,40})"
    r"[\"”'`]|([A-Z][A-Za-z0-9_.-]*[A-Za-z0-9]|[a-z]+[A-Z][A-Za-z0-9]*|[a-z][a-z0-9]*[-_][A-Za-z0-9_-]*[a-z0-9]))"
)
_BEFORE_PROJECT_RE = re.compile(r"([A-Z][A-Za-z0-9-]*[A-Za-z0-9]) project\b")
_ZH_PROJECT_RE = re.compile(
    r"([A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9])\s*项目|项目\s*([A-Za-z][A-Za-z0-9_.-]*)|[“「《\"]([^”」》\"\n]{1,20})[”」》\"]\s*项目"
)
_PROJECT_WORD_RE = re.compile(r"(?i)^(?:project|projekt|repo)\s+|\s*(?:项目|project)$")
_POSSESSIVE_RE = re.compile(r"['’]s?$")
_HONORIFIC_RE = re.compile(
    r"^(?:(?:dr|mr|mrs|ms|mx|prof|professor|miss|sir|dame|se[ñn]ora|se[ñn]or|sra|sr|madame|mme|monsieur"
    r"|coach|officer|captain|capt|judge|rev)\.?\s+)+",
    re.IGNORECASE,
)
_LEGAL_FORM_RE = re.compile(r",?\s+(?:inc|ltd|llc|corp|corporation|co|gmbh|ag|plc|s\.?a)\.?$", re.IGNORECASE)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_SLUG_TAIL_RE = re.compile(r"-(?:[0-9a-f]{6}|[0-9a-f]{8})$")
_WORD_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"

_Hit = tuple[int, int, str, str, str]  # start, end, kind, canonical value ("" = not one), display name


def _after(text: str, start: int, chars: str) -> bool:
    """Whether ``text[start]`` starts a token: the character before it is not one of ``chars``."""
    return start == 0 or text[start - 1] not in chars


def _has_digit(text: str) -> bool:
    return any(digit in text for digit in "0123456789")


def _ymd(year: int, month: int, day: int = 0) -> str:
    """``YYYY-MM-DD`` (``YYYY-MM`` for day 0), or "" for an impossible date."""
    try:
        return date(year, month, day or 1).isoformat()[: 10 if day else 7] if 1900 <= year < 2200 else ""
    except ValueError:
        return ""


def _find_dates(text: str, ref: date | None) -> Iterator[_Hit]:
    this_year = ref.year if ref else 0  # a date without a year needs a ts
    if _has_digit(text):
        for m in _ISO_RE.finditer(text):
            if _after(text, m.start(), "0123456789."):
                yield m.start(), m.end(), "date", _ymd(int(m[1]), int(m[3]), int(m[4])), m[0]
        for m in _DMY_RE.finditer(text) if "/" in text else ():
            day, month = sorted((int(m[1]), int(m[2])), reverse=True)
            if day > 12 >= month and _after(text, m.start(), "0123456789/"):  # else d/m vs m/d is a guess
                yield m.start(), m.end(), "date", _ymd(int(m[3]), month, day), m[0]
        months = _MONTH_HINT_RE.search(text) is not None
        for m in _DAY_MON_RE.finditer(text) if months else ():
            if _after(text, m.start(), "0123456789"):
                value = _ymd(int(m[3] or this_year), _MONTHS[m["mon"][:3].lower()], int(m[1]))
                yield m.start(), m.end(), "date", value, m[0]
        for m in _MON_DAY_RE.finditer(text) if months else ():
            if _after(text, m.start(), _WORD_CHARS):
                value = _ymd(
                    int(m["y"] or m["ym"] or this_year), _MONTHS[m["mon"][:3].lower()], int(m["d"] or 0)
                )
                yield m.start(), m.end(), "date", value, m[0]
    if _HAN_RE.search(text):
        for m in _ZH_DATE_RE.finditer(text):
            if m[4] and ref:
                yield m.start(), m.end(), "date", (ref + timedelta(days=_REL_DAYS[m[4]])).isoformat(), m[0]
            elif m[2] and (m[1] or m[3]):
                value = _ymd(int(m[1] or this_year), int(m[2]), int(m[3] or 0))
                yield m.start(), m.end(), "date", value, m[0]
    low = text.lower()
    # Matched on the lower-cased text, which keeps the offsets unless a character changes length.
    if ref and len(low) == len(text) and ("day" in low or "tomorrow" in low or "tonight" in low):
        for m in _REL_RE.finditer(low):
            if not _after(low, m.start(), _WORD_CHARS) or low[m.end() : m.end() + 1].isalnum():
                continue
            if m[1]:
                when = ref - timedelta(days=(ref.weekday() - _WEEKDAYS.index(m[1])) % 7 or 7)
            elif m[2]:
                when = ref + timedelta(days=(_WEEKDAYS.index(m[2]) - ref.weekday()) % 7 or 7)
            else:
                when = ref + timedelta(days=_REL_DAYS[m[0]])
            yield m.start(), m.end(), "date", when.isoformat(), text[m.start() : m.end()]


def _amount(currency: str, number: str, fraction: str | None, scale: str | None) -> str:
    value = Decimal(number.replace(",", "") + (fraction or "")) * (_SCALE[scale.lower()] if scale else 1)
    text = format(value, "f")
    return f"{currency}:{text.rstrip('0').rstrip('.') if '.' in text else text}"


def _find_money(text: str, ref: date | None = None) -> Iterator[_Hit]:
    if not _has_digit(text):
        return
    for m in _MONEY_SYM_RE.finditer(text):
        start = m.start()
        prefix = _CURRENCY_PREFIX_RE.search(text, max(0, start - 3), start) if m[0][0] == "$" else None
        if prefix or _after(text, start, _WORD_CHARS + "$"):
            start = prefix.start() if prefix else start
            value = _amount(_CURRENCY[prefix[1] if prefix else m[0][0]], m[1], m[2], m[3] or m[4])
            yield start, m.end(), "money", value, text[start : m.end()]
    low = text.lower()
    for m in _MONEY_CODE_RE.finditer(text) if any(word in low for word in _MONEY_WORDS) else ():
        if _after(text, m.start(), _WORD_CHARS + ".,"):
            value = _amount(_CURRENCY.get(m[5].lower(), m[5].lower()), m[1], m[2], m[3] or m[4])
            yield m.start(), m.end(), "money", value, m[0]
    if _HAN_RE.search(text) or "RMB" in text:
        for m in _MONEY_ZH_RE.finditer(text):
            if _after(text, m.start(), "0123456789."):
                value = _amount("cny", *m.group(1, 2, 3)) if m[1] else _amount("cny", *m.group(4, 5, 6))
                yield m.start(), m.end(), "money", value, m[0]


def _find_tickers(text: str, ref: date | None) -> Iterator[_Hit]:
    if "$" in text or "(" in text:
        for m in _TICKER_RE.finditer(text):
            if m[2] or (_after(text, m.start(), "$_0123456789{") and not _shell_variable(text, m)):
                start, end = m.span(2) if m[2] else m.span()
                yield start, end, "ticker", (m[1] or m[2]).upper(), (m[1] or m[2]).upper()
    if "stock" in text or "shares" in text:
        for m in _TICKER_WORD_RE.finditer(text):
            group = 1 if m[1] else 2
            yield m.start(group), m.end(group), "ticker", m[group], m[group]


def _shell_variable(text: str, m: re.Match[str]) -> bool:
    """Whether ``$NAME`` is a shell variable ($HOME, $PATH/bin, MAILDIR=$HOME/Mail), not a ticker."""
    if m[1].upper() in _SHELL_VARS or text[m.end() : m.end() + 1] in ("/", "=", ":", "}", ")", "\\"):
        return True
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    return _SHELL_LINE_RE.search(text, line_start, len(text) if line_end < 0 else line_end) is not None


def _find_versions(text: str, ref: date | None) -> Iterator[_Hit]:
    if not _has_digit(text):
        return
    for m in _SPACED_NUMBER_RE.finditer(text):
        head = text[max(0, m.start() - 30) : m.start()]
        name = head.rsplit(None, 1)[-1].lstrip("(\"'“[") if head and not head[-1].isspace() else ""
        low = name.lower()
        software = software_words()
        if _VERSIONED_NAME_RE.fullmatch(name) and (
            low in software or (name[0].isupper() and "." in m[1] and low not in STOP)
        ):
            start = m.start() - len(name)
            yield start, m.start(), "product" if low in software else "project", low, name
            yield m.start(1), m.end(), "version", f"{low} {m[1]}", text[start : m.end()]
    for m in _V_VERSION_RE.finditer(text):
        if _after(text, m.start(), _WORD_CHARS + "."):
            yield m.start(), m.end(), "version", m[1].lower(), m[0]
    for m in _DOTS_VERSION_RE.finditer(text):
        if _after(text, m.start(), "0123456789."):
            yield m.start(), m.end(), "version", m[0].lower(), m[0]
    if "ersion" in text or "elease" in text or "ver." in text or "版本" in text:
        for m in _WORD_VERSION_RE.finditer(text):
            yield m.start(), m.end(), "version", m[1], m[0]


def _find_links(text: str, ref: date | None) -> Iterator[_Hit]:
    for m in _EMAIL_RE.finditer(text) if "@" in text else ():
        yield m.start(), m.end(), "email", m[0].lower(), m[0]
    links = (
        _URL_RE.finditer(text) if "://" in text or "www." in text else (),
        _FORGE_RE.finditer(text) if ".com/" in text or ".org/" in text else (),
        _REPO_CUE_RE.finditer(text) if "epo" in text else (),
    )
    for found in links:
        for m in found:
            start = m.start(1) if m.re is _REPO_CUE_RE else m.start()
            surface = text[start : m.end()].rstrip(".,;:!?)]}>*_`")
            if m.re is not _FORGE_RE or _after(text, start, _WORD_CHARS + "./@"):
                kind, value = _link(surface)
                yield start, start + len(surface), kind, value, surface


def _find_tags(text: str, ref: date | None) -> Iterator[_Hit]:
    if "@" in text:
        for m in _HANDLE_RE.finditer(text):
            if len(m[1]) <= 40 and _after(text, m.start(), _WORD_CHARS + "@."):
                yield m.start(), m.end(), "person", _person_key(m[1]), _person_display(m[1])
    if "#" in text:
        for m in _HASHTAG_RE.finditer(text):
            colour = _HEX_RE.fullmatch(m[1])  # "#fff" is a colour, not a tag
            if not colour and _after(text, m.start(), _WORD_CHARS + "#&"):
                yield m.start(), m.end(), "project", _project_key(m[1]), m[1]
    low = text.lower()
    cues = (
        _PROJECT_CUE_RE.finditer(text) if "roje" in low or "repo" in low else (),
        _BEFORE_PROJECT_RE.finditer(text) if " project" in text else (),
        _ZH_PROJECT_RE.finditer(text) if "项目" in text else (),
    )
    for found in cues:
        for m in found:
            group = next(g for g in (1, 2, 3) if m[g])
            name = m[group].strip()
            if name and name.split()[0].lower() not in STOP and _after(text, m.start(), _WORD_CHARS + ".-"):
                yield m.start(group), m.end(group), "project", _project_key(name), name


def _named(found: Iterator[tuple[int, int, str, str]]) -> Iterator[_Hit]:
    for start, end, kind, surface in found:
        value = _project_key(surface) if kind == "project" else _name_key(kind, surface)
        yield start, end, kind, value, surface


def _find_chinese(text: str, ref: date | None) -> Iterator[_Hit]:
    return _named(find_chinese(text))


def _find_english(text: str, ref: date | None) -> Iterator[_Hit]:
    return _named(find_english(text))


_Finder = Callable[[str, date | None], Iterator[_Hit]]
_FINDERS: tuple[_Finder, ...] = (_find_links, _find_tickers, _find_dates, _find_money, _find_versions)
_FINDERS += (_find_tags, _find_chinese, _find_english)


def extract(text: str, *, speaker: str | None = None, ts: datetime | None = None) -> tuple[Mention, ...]:
    """Distinct mentions in order of first appearance (dedupe by key). The speaker (if given) is a person
    mention, first; a generic role ("user", "assistant") is not."""
    ref = utc(ts).date() if ts is not None else None
    claimed = bytearray(len(text))
    hits: list[tuple[int, str, str, str]] = []
    said = _speaker(speaker) if speaker else None
    if said is not None:
        hits.append((-1, *said))
    for finder in _FINDERS:
        for start, end, kind, value, name in finder(text, ref):
            if claimed.find(1, start, end) == -1:
                # Claimed even without a value: "31 June 2026" must not be read again as "June 2026".
                claimed[start:end] = b"\x01" * (end - start)
                hits += [(start, kind, value, name)] if value else []
    hits.sort(key=lambda hit: hit[0])
    seen: dict[str, Mention] = {}
    for _, kind, value, name in hits:
        seen.setdefault(f"{kind}:{value}", Mention(f"{kind}:{value}", kind, name))
    return tuple(seen.values())


@functools.lru_cache(maxsize=1024)  # every leaf has one, and they repeat
def _speaker(speaker: str) -> tuple[str, str, str] | None:
    """(kind, value, display name) of a speaker's mention; None for a role ("user") or nothing."""
    if speaker.strip().lower() in _ROLES or not _person_key(speaker):
        return None
    kind = listed_kind(speaker) or "person"  # mail from "GitHub" or "Qantas" is not from a person
    name = _person_display(speaker) if kind == "person" else speaker.strip()
    return kind, _name_key(kind, speaker), name


def _person_display(name: str) -> str:
    text = " ".join(_CONTROL_RE.sub("", unicodedata.normalize("NFKC", name)).split())
    text = _HONORIFIC_RE.sub("", text.lstrip("@"))
    text = _POSSESSIVE_RE.sub("", text)
    if text.isascii() and (text.islower() or text.isupper()):
        text = " ".join(word[:1].upper() + word[1:].lower() for word in text.split())
    return text


def _person_key(name: str) -> str:
    return "-".join(_person_display(name).lower().split())


def _name_key(kind: str, name: str) -> str:
    """The value of a person, place, organisation, product or event key: lower-case words joined by "-";
    an organisation without its legal form ("Acme Corp." and "Acme" are one)."""
    if kind == "org":
        name = _LEGAL_FORM_RE.sub("", name) or name
    if kind == "person":
        return _person_key(name)
    words = _tidy(name).lower().split()
    return "-".join(words[1:] if len(words) > 1 and words[0] == "the" else words)  # "The Olympics"


def _tidy(name: str) -> str:
    return _POSSESSIVE_RE.sub("", " ".join(_CONTROL_RE.sub("", unicodedata.normalize("NFKC", name)).split()))


def _project_key(name: str) -> str:
    text = _CONTROL_RE.sub("", unicodedata.normalize("NFKC", name)).strip().strip("#@\"'`“”「」《》 ")
    text = _PROJECT_WORD_RE.sub("", text)
    return "-".join(text.lower().split())


def _link(surface: str, forge: bool = True) -> tuple[str, str]:
    """("repo", "github.com/owner/name") for a forge repository, ("url", the normalised URL), or
    ("url", "") for something that is not a URL."""
    raw = surface.strip()
    if _OWNER_NAME_RE.fullmatch(raw):
        raw = "github.com/" + raw  # the "owner/name" convention of git hosting tools
    try:
        parts = urllib.parse.urlsplit(
            raw if raw.lower().startswith(("http://", "https://")) else "https://" + raw
        )
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "url", ""
    host = (parts.hostname or "").removeprefix("www.")
    segments = [s for s in parts.path.split("/") if s]
    if "." not in host.strip("."):
        return "url", ""
    if forge and host in _FORGES and len(segments) >= 2:
        return "repo", f"{host}/{segments[0].lower()}/{segments[1].lower().removesuffix('.git')}"
    query = "&".join(p for p in parts.query.split("&") if p and not p.lower().startswith("utm_"))
    return "url", urllib.parse.urlunsplit(
        (parts.scheme.lower(), host + port, parts.path.rstrip("/"), query, "")
    )


def canonical(kind: str, name: str) -> str:
    """The key for a surface form: ``canonical("person", "@Caroline") == "person:caroline"``.

    Raises ValueError for an unknown kind or a surface that is not of that kind (money without an
    amount, a date without a year, a URL without a host)."""
    text = unicodedata.normalize("NFKC", name).strip()
    value = ""
    if kind in ("person", "place", "org", "product", "event"):
        value = _name_key(kind, text)
    elif kind == "project":
        value = _project_key(text)
    elif kind in ("repo", "url"):
        found, value = _link(text, forge=kind == "repo")
        value = value if found == kind else ""
    elif kind == "version":
        m = _VERSION_KEY_RE.fullmatch(" ".join(text.lower().split()))
        value = (f"{m[1]} {m[2]}" if m[1] else m[2]) if m else ""
    elif kind in ("date", "money"):
        shape = r"\d{4}-\d\d(?:-\d\d)?" if kind == "date" else r"[a-z]{3}:\d+(?:\.\d+)?"
        finder = _find_dates if kind == "date" else _find_money
        value = text if re.fullmatch(shape, text) else next((h[3] for h in finder(text, None) if h[3]), "")
    elif kind == "email":
        value = text.lower() if _EMAIL_RE.fullmatch(text) else ""
    elif kind == "ticker":
        value = (
            text.lstrip("$").upper() if re.fullmatch(r"\$?(?:[A-Za-z][A-Za-z.]{0,5}|\d{4,6})", text) else ""
        )
    else:
        raise ValueError(f"unknown entity kind {kind!r}: use one of {', '.join(KINDS)}")
    if not value:
        raise ValueError(f"{name!r} is not a {kind}")
    return ":".join(parse_key(f"{kind}:{value}"))  # a URL path, say, could still end in a space


def mention(kind: str, name: str) -> Mention:
    """The Mention ``extract`` would make for a surface form of a kind (a forge URL given as url is a repo).
    Raises ValueError like ``canonical``."""
    kind = _link(name)[0] if kind == "url" else kind
    return Mention(canonical(kind, name), kind, _person_display(name) if kind == "person" else name.strip())


def parse_key(key: str) -> tuple[str, str]:
    """``"person:caroline"`` -> ``("person", "caroline")``; ValueError for anything that is not a key."""
    kind, _, value = key.partition(":") if isinstance(key, str) else ("", "", "")
    if kind not in KINDS or not value or value != value.strip() or any(c in value for c in "\r\n\0"):
        raise ValueError(f"not an entity key: {key!r}")
    return kind, value


def slug_for(key: str) -> str:
    """A folder name for a topic: ``[a-z0-9-]``, at most 48 characters, stable, starting with the kind.

    A key whose value is already lower-case ASCII words joined by "-" maps to ``<kind>-<value>``; any
    other keeps what ASCII it has and ends in ``-<6 hex of sha256(key)>`` (``<kind>-<8 hex>`` when no
    ASCII is left). Lossless slugs never end in such a hex tail, so two keys share a slug only on a
    hash collision."""
    kind, value = parse_key(key)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    value = scrub(value)  # a folder name is public: never one made of a secret
    plain = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii").lower()
    words = re.sub(r"[^a-z0-9]+", "-", plain).strip("-")
    if not words:
        return f"{kind}-{digest[:8]}"
    slug = f"{kind}-{words}"
    if value == words and len(slug) <= 48 and not _SLUG_TAIL_RE.search(slug):
        return slug
    return f"{slug[:41].rstrip('-')}-{digest[:6]}"
