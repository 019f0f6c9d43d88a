"""Time phrases in a query: the window of days "last Tuesday", "in May 2023" or "上周三" refers to.

Owns the English and Chinese phrase rules and the calendar arithmetic behind them. Pure and stdlib only:
it must never read the clock (``now`` is passed in), touch the index, or raise on any query text.

Every rule is a precompiled regular expression with a handler that turns a match into a half-open UTC
window ``[start, end)``. Calendar phrases give whole days (midnight aligned); "in the past N days" gives
``[now - N days, now)`` and "since <phrase>" stretches the phrase's window up to ``now``. Weeks are ISO
weeks (Monday first). English "last Tuesday" is the most recent Tuesday strictly before today, while
Chinese 上周三 is the Wednesday of last week, as each language uses them. A date or month without a
year is its most recent occurrence that has begun. When several phrases match, a phrase lying inside a
longer match is dropped ("yesterday" in "the day before yesterday"), then the shortest window wins,
then the longer phrase, then the earlier one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

Window = tuple[datetime, datetime]
Handler = Callable[[re.Match[str], datetime], Window | None]


@dataclass(frozen=True)
class TimeRange:
    start: datetime  # inclusive, UTC-aware
    end: datetime  # exclusive, UTC-aware
    text: str  # the matched phrase as written in the query, e.g. "last Tuesday"
    # The phrase is a date or month without its year ("in June", "on 17 March"): the window is its most
    # recent occurrence, and an earlier year's is as likely meant when that one holds nothing.
    yearless: bool = False

    def years_back(self, n: int) -> TimeRange:
        """The same calendar window ``n`` years earlier (29 February falls back to the 28th)."""

        def back(ts: datetime) -> datetime:
            try:
                return ts.replace(year=ts.year - n)
            except ValueError:
                return ts.replace(year=ts.year - n, day=28)

        return TimeRange(back(self.start), back(self.end), self.text, self.yearless)

    def contains(self, ts: datetime) -> bool:
        """Whether ``ts`` falls in the window; a naive ``ts`` is taken to be UTC."""
        ts = ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts
        return self.start <= ts < self.end


def day_of(ts: datetime) -> date:
    """The UTC calendar day of ``ts`` (a naive ``ts`` is taken to be UTC)."""
    return ts.date() if ts.tzinfo is None else ts.astimezone(UTC).date()


# --- calendar arithmetic -------------------------------------------------------------------------


def _days(first: date, n: int = 1) -> Window:
    start = datetime.combine(first, time(), UTC)
    return start, start + timedelta(days=n)


def _monday(d: date, weeks: int = 0) -> date:
    return d - timedelta(days=d.weekday()) + timedelta(weeks=weeks)


def _add_months(year: int, month: int, k: int) -> tuple[int, int]:
    y, m = divmod(year * 12 + month - 1 + k, 12)
    return y, m + 1


def _month(year: int, month: int) -> Window:
    y, m = _add_months(year, month, 1)
    return _days(date(year, month, 1))[0], _days(date(y, m, 1))[0]


def _year(year: int) -> Window:
    return _days(date(year, 1, 1))[0], _days(date(year + 1, 1, 1))[0]


def _recent_day(today: date, month: int, day: int) -> Window | None:
    for y in range(today.year, today.year - 8, -1):  # Feb 29 may need a few years back
        try:
            d = date(y, month, day)
        except ValueError:
            continue
        if d <= today:
            return _days(d)
    return None


def _date(year: int, month: int, day: int) -> Window | None:
    if not 1900 <= year <= 2100:
        return None
    try:
        return _days(date(year, month, day))
    except ValueError:
        return None


def _month_of(today: date, year: int | None, month: int, rel: str = "") -> Window | None:
    if year is None:  # the most recent such month that has begun, or the one "last"/"this"/"next" names
        year = today.year
        if rel in ("last", "previous"):
            year -= month >= today.month
        elif rel == "next":
            year += month <= today.month
        elif rel != "this":
            year -= month > today.month
    return _month(year, month) if 1900 <= year <= 2100 and 1 <= month <= 12 else None


# --- numbers -------------------------------------------------------------------------------------

_EN_NUMS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_EN_NUMS |= {"eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2}
_CN_DIGITS = dict(zip("零一二两三四五六七八九", (0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9), strict=True))
_NUM = (
    r"(?P<n>\d{1,3}|"
    + "|".join(k.replace(" ", r"\s+") for k in sorted(_EN_NUMS, key=len, reverse=True))
    + ")"
)
_CN_NUM = r"(?<![0-9])(?P<n>[0-9]{1,3}|[一二三四五六七八九十两]{1,3})"


def _int(s: str) -> int | None:
    s = re.sub(r"\s+", " ", s.lower())
    if s.isascii() and s.isdigit():
        return int(s)
    if s in _EN_NUMS:
        return _EN_NUMS[s]
    tens, ten, ones = s.partition("十")
    if not ten:
        return _CN_DIGITS.get(s) if len(s) == 1 else None
    t = _CN_DIGITS.get(tens) if tens else 1
    o = _CN_DIGITS.get(ones) if ones else 0
    return None if t is None or o is None else t * 10 + o


# --- English -------------------------------------------------------------------------------------

_MONTH_ALT = "january|february|march|april|may|june|july|august|september|october|november|december"
_MONTHS = _MONTH_ALT.split("|")
_ABBR = {"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9}
_ABBR |= {"oct": 10, "nov": 11, "dec": 12}
_MONTH_NO = {name: i for i, name in enumerate(_MONTHS, 1)} | _ABBR
_MON = r"(?P<mon>" + "|".join(_MONTHS + sorted(_ABBR, key=len, reverse=True)) + r")\b"
_WEEKDAY_ALT = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_WEEKDAYS = _WEEKDAY_ALT.split("|")
# The English words of the calendar, lower case: month names, their abbreviations, weekdays.
CALENDAR_WORDS: tuple[str, ...] = (*_MONTHS, *_ABBR, *_WEEKDAYS)
_PRE = r"(?:\b(?P<pre>in|on|at|of|during|since|from|over|until|by|earlier|later)\s+)?"
# "may" and "march" are also verbs: as months they need a preposition, a day or a year with them
_VERBISH = {"may", "march"}
_MONTH_PREPS = {"in", "of", "during", "since", "from", "until", "by"}
_DAYWORDS = {"today": 0, "tonight": 0, "yesterday": -1, "tomorrow": 1, "last night": -1}
_DAYWORDS |= {"the day before yesterday": -2, "the day after tomorrow": 2}
_CAL_REL = {"this": 0, "last": -1, "previous": -1, "next": 1}


def _en_day(m: re.Match[str], now: datetime) -> Window | None:
    w = re.sub(r"\s+", " ", m["w"].lower())
    return _days(now.date() + timedelta(days=_DAYWORDS.get(w, 0)))


def _en_cal(m: re.Match[str], now: datetime) -> Window | None:
    today, k, unit = now.date(), _CAL_REL[m["rel"].lower()], m["unit"].lower()
    if unit == "week":
        return _days(_monday(today, k), 7)
    if unit == "weekend":
        return _days(_monday(today, k) + timedelta(days=5), 2)
    if unit == "month":
        return _month(*_add_months(today.year, today.month, k))
    return _year(today.year + k)


def _shift(now: datetime, unit: str, n: int) -> datetime:
    """``now`` moved back n units; a month or year back keeps the day where the calendar allows."""
    if unit in ("day", "week"):
        return now - timedelta(days=n * (7 if unit == "week" else 1))
    y, mo = _add_months(now.year, now.month, -n * (12 if unit == "year" else 1))
    last = (date(*_add_months(y, mo, 1), 1) - timedelta(days=1)).day
    return now.replace(year=y, month=mo, day=min(now.day, last))


def _rolling(m: re.Match[str], now: datetime) -> Window | None:
    if m["n"] is None and not m.groupdict().get("the") and m["rel"].lower() != "past":
        return None  # plain "last week" is the calendar week
    n = 1 if m["n"] is None else _int(m["n"])
    return None if not n else (_shift(now, _unit(m["unit"]), n), now)


def _unit(u: str) -> str:
    u = u.lower()
    return {"天": "day", "年": "year"}.get(u) or ("month" if "月" in u else "week" if not u.isascii() else u)


def _ago(m: re.Match[str], now: datetime) -> Window | None:
    n, unit, today = _int(m["n"]), _unit(m["unit"]), now.date()
    if n is None:
        return None
    if unit == "day":
        return _days(today - timedelta(days=n))
    if unit == "week":
        return _days(_monday(today, -n), 7)
    if unit == "month":
        return _month(*_add_months(today.year, today.month, -n))
    return _year(today.year - n)


def _en_weekday(m: re.Match[str], now: datetime) -> Window | None:
    today, wd, rel = now.date(), _WEEKDAYS.index(m["wd"].lower()), (m["rel"] or "").lower()
    if rel == "this":
        return _days(_monday(today) + timedelta(days=wd))
    if rel == "next":
        return _days(today + timedelta(days=(wd - today.weekday() - 1) % 7 + 1))
    strict = rel in ("last", "previous", "past")
    return _days(today - timedelta(days=(today.weekday() - wd - strict) % 7 + strict))


def _iso(m: re.Match[str], now: datetime) -> Window | None:
    return _date(int(m["y"]), int(m["m"]), int(m["d"]))


def _en_date(m: re.Match[str], now: datetime) -> Window | None:
    mon, d = m["mon"].lower(), int(m["d"])
    if m["y"]:
        return _date(int(m["y"]), _MONTH_NO[mon], d)
    return _recent_day(now.date(), _MONTH_NO[mon], d)


def _en_day_month(m: re.Match[str], now: datetime) -> Window | None:
    if m["mon"].lower() in _VERBISH and not (
        m["ord"] or m["of"] or m["y"] or (m["pre"] or "").lower() == "on"
    ):
        return None  # "2 may be enough" (but "on 17 March" is a date)
    return _en_date(m, now)


def _en_month(m: re.Match[str], now: datetime) -> Window | None:
    mon, rel, pre = m["mon"].lower(), (m["rel"] or "").lower(), (m["pre"] or "").lower()
    if (mon in _VERBISH or mon in _ABBR) and not (pre in _MONTH_PREPS or m["y"] or rel not in ("", "this")):
        return None  # "May I ask", "march forward", "this may fail", "jan" the person
    rel = rel if rel in _CAL_REL else ""
    return _month_of(now.date(), int(m["y"]) if m["y"] else None, _MONTH_NO[mon], rel)


def _en_year(m: re.Match[str], now: datetime) -> Window | None:
    y = int(m["y"])
    return _year(y) if 1900 <= y <= 2100 else None


_YEAR = r"(?:,?\s+(?:of\s+)?(?P<y>\d{4})\b)?"
_EN_RULES: list[tuple[str, Handler]] = [
    (
        _PRE + r"\b(?P<w>the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow"
        r"|today|tonight|yesterday|tomorrow|last\s+night|this\s+(?:morning|afternoon|evening))"
        r"(?:\s+(?:morning|afternoon|evening|night))?\b",
        _en_day,
    ),
    (_PRE + r"\b(?P<rel>this|last|next|previous)\s+(?P<unit>week|weekend|month|year)\b", _en_cal),
    (
        r"\b(?:(?:in|over|during|within|for)\s+)?(?P<the>the\s+)?(?P<rel>past|last|previous)\s+(?:"
        + _NUM
        + r"\s+)?(?P<unit>day|week|month|year)s?\b",
        _rolling,
    ),
    (_PRE + r"\b" + _NUM + r"\s+(?P<unit>day|week|month|year)s?\s+ago\b", _ago),
    (
        _PRE + r"\b(?:(?P<rel>last|this|next|previous|past)\s+)?(?P<wd>" + _WEEKDAY_ALT + r")\b",
        _en_weekday,
    ),
    (_PRE + r"(?<![\d-])(?P<y>\d{4})(?P<s>[-/.])(?P<m>\d{1,2})(?P=s)(?P<d>\d{1,2})(?!\d)", _iso),
    (
        _PRE + r"\b(?:the\s+)?(?P<d>\d{1,2})(?!\d)(?P<ord>st|nd|rd|th)?(?P<of>\s+of)?\s+" + _MON + _YEAR,
        _en_day_month,
    ),
    (_PRE + r"\b" + _MON + r"\.?\s+(?P<d>\d{1,2})(?!\d)(?:st|nd|rd|th)?\b" + _YEAR, _en_date),
    (_PRE + r"\b(?:(?P<rel>last|this|next|early|late|mid)[\s-]+)?" + _MON + _YEAR, _en_month),
    (r"\b(?P<pre>in|of|during|since)\s+(?:the\s+year\s+)?(?P<y>\d{4})\b", _en_year),
]

# --- Chinese -------------------------------------------------------------------------------------

_CN_DAYS = {"大前天": -3, "前天": -2, "昨天": -1, "昨日": -1, "昨晚": -1, "今天": 0, "今日": 0, "今早": 0}
_CN_DAYS |= {"今晚": 0, "明天": 1, "明日": 1, "后天": 2}
_CN_REL = {"上上": -2, "上": -1, "这": 0, "本": 0, "下": 1}
_CN_YEARS = {"前年": -2, "去年": -1, "今年": 0, "明年": 1}
_CN_WD = dict(zip("一二三四五六日天", (0, 1, 2, 3, 4, 5, 6, 6), strict=True))


def _cn_day(m: re.Match[str], now: datetime) -> Window | None:
    return _days(now.date() + timedelta(days=_CN_DAYS[m[0]]))


def _cn_week(m: re.Match[str], now: datetime) -> Window | None:
    today, rel = now.date(), m["rel"]
    if rel is None and m["wd"] is None and m["end"] is None:
        return None  # 每周, 一周前, 周报
    if rel is None and m["wd"]:  # 周三: the most recent Wednesday that has begun
        return _days(today - timedelta(days=(today.weekday() - _CN_WD[m["wd"]]) % 7))
    k = _CN_REL[rel] if rel else (0 if today.weekday() >= 5 else -1)  # bare 周末: the latest weekend
    if m["wd"]:
        return _days(_monday(today, k) + timedelta(days=_CN_WD[m["wd"]]))
    if m["end"]:
        return _days(_monday(today, k) + timedelta(days=5), 2)
    return _days(_monday(today, k), 7)


def _cn_month_rel(m: re.Match[str], now: datetime) -> Window | None:
    return _month(*_add_months(now.year, now.month, _CN_REL[m["rel"]]))


def _cn_year_rel(m: re.Match[str], now: datetime) -> Window | None:
    return _year(now.year + _CN_YEARS[m[0]])


def _cn_date(m: re.Match[str], now: datetime) -> Window | None:
    month, today = _int(m["m"]), now.date()
    year = int(m["y"]) if m["y"] else today.year + _CN_YEARS[m["ry"]] if m["ry"] else None
    if month is None:
        return None
    if m["d"] is None:
        return _month_of(today, year, month)
    day = _int(m["d"])
    if day is None:
        return None
    return _recent_day(today, month, day) if year is None else _date(year, month, day)


_CN_UNIT = r"(?P<unit>天|周|个?星期|个?礼拜|个月|年)"
_CN_RULES: list[tuple[str, Handler]] = [
    ("|".join(sorted(_CN_DAYS, key=len, reverse=True)), _cn_day),
    (
        r"(?:(?P<rel>上上|上|这|本|下)个?)?(?:周|星期|礼拜)(?:(?P<wd>[一二三四五六日天](?![起些样直定般切共同下点]))"
        r"|(?P<end>末))?",
        _cn_week,
    ),
    (r"(?P<rel>上上|上|这|本|下)个?月(?![饼亮球光])", _cn_month_rel),
    ("|".join(_CN_YEARS), _cn_year_rel),
    (_CN_NUM + r"\s*" + _CN_UNIT + r"[之以]?前", _ago),
    (r"(?:过去|最近|近)的?\s*" + _CN_NUM + r"\s*" + _CN_UNIT, _rolling),
    (
        r"(?:(?<!\d)(?P<y>\d{4})\s*年\s*|(?P<ry>" + "|".join(_CN_YEARS) + r"))?(?<!\d)"
        r"(?P<m>1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九])\s*月份?"
        r"(?:\s*(?P<d>[0-9]{1,2}|[一二三]?十[一二三四五六七八九]?|[一二三四五六七八九])\s*[日号])?",
        _cn_date,
    ),
    (r"(?<!\d)(?P<y>\d{4})\s*年份?", _en_year),
]

# Rules whose phrase may leave the year out (then the window is the most recent occurrence).
_YEARLESS: frozenset[Handler] = frozenset({_en_date, _en_day_month, _en_month, _cn_date})

_EN_COMPILED: tuple[tuple[re.Pattern[str], Handler], ...] = tuple(
    (re.compile(p, re.IGNORECASE), h) for p, h in _EN_RULES
)


@functools.cache
def _cn_compiled() -> tuple[tuple[re.Pattern[str], Handler], ...]:
    """The Chinese rules, compiled on the first text that could hold one (~5 ms: a process that only
    ever sees English, a `vaultmem search` say, does not pay it)."""
    return tuple((re.compile(p, re.IGNORECASE), h) for p, h in _CN_RULES)


def _rules(text: str) -> tuple[tuple[re.Pattern[str], Handler], ...]:
    """The rules that can match ``text``, in their order. Every Chinese rule needs a character from
    U+4E00 up (日, 周, 月, 年, 前, 近...; no case to fold), so a text without one is left to the English
    rules: the same matches either way."""
    if text and max(text) >= "\u4e00":
        return _EN_COMPILED + _cn_compiled()
    return _EN_COMPILED


# --- public --------------------------------------------------------------------------------------


def find_range(query: str, now: datetime) -> TimeRange | None:
    """The time window the query names, relative to ``now`` (UTC-aware), or None. When several
    phrases match, the most specific (shortest window) wins."""
    if now.tzinfo is None:
        raise ValueError("find_range needs a timezone-aware `now`")
    now = now.astimezone(UTC)
    found: list[tuple[Window, str, tuple[int, int], bool]] = []
    for pattern, handler in _rules(query):
        for m in pattern.finditer(query):
            try:
                window = handler(m, now)
            except (ValueError, OverflowError):  # a date out of the calendar's range
                window = None
            if window is None:
                continue
            if (m.groupdict().get("pre") or "").lower() == "since":
                window = (window[0], now)
            if window[0] < window[1]:
                groups = m.groupdict()
                yearless = handler in _YEARLESS and not any(groups.get(g) for g in ("y", "ry", "rel"))
                since = (groups.get("pre") or "").lower() == "since"
                found.append((window, m[0], m.span(), yearless and not since))
    found = [
        f for f in found if not any(g[2][0] <= f[2][0] and f[2][1] <= g[2][1] and g[2] != f[2] for g in found)
    ]
    if not found:
        return None
    (start, end), text, _, yearless = min(
        found, key=lambda f: (f[0][1] - f[0][0], f[2][0] - f[2][1], f[2][0])
    )
    return TimeRange(start, end, text, yearless)


# A question asking for a time or an order ("When did…", "How long has…", "In what year…", "How many days
# passed…", "Which did I do first, …", "What is the order of …"): its interrogative opens the question (a "when" later on is mostly a
# conjunction: "what did she feel when…"). Chinese: 什么时候, 哪天/哪年, 几月, 多久.
_ASKS_TIME_RE = re.compile(
    r"^\W*(?:(?:in|on|at|for|after|before|around|about|approximately|roughly|by|since|and|so|but|then)\s+)*"
    r"(?:when\b|how\s+long\b|how\s+(?:many|much)\s+(?:time|days|weeks|months|years|hours|minutes)\b"
    r"|(?:what|which)\s+(?:year|month|day|date|time|week|season|decade)\b"
    r"|which\b[^?]*\b(?:first|earlier|later)\b)"
    r"|\b(?:what\s+is\s+the|in\s+(?:what|which))\s+order\b"
    r"|什么时候|何时|哪(?:一)?(?:天|年|月|周)|几月|几号|多久|多长时间",
    re.IGNORECASE,
)


def asks_time(query: str) -> bool:
    """Whether ``query`` asks for a time, a duration or an order of events (not whether it names one:
    ``find_range``). Pure; any text."""
    return _ASKS_TIME_RE.search(query) is not None


_PUNCT = ",.;:!?，。；：！？、"


def strip_range(query: str, found: TimeRange) -> str:
    """The query without the matched phrase (so "what did we discuss last Tuesday" searches on "what did we
    discuss")."""
    m = re.search(re.escape(found.text), query, re.IGNORECASE)
    if m is None:
        return query
    left, right = query[: m.start()], query[m.end() :]
    spaced = left[-1:].isspace() or right[:1].isspace()
    left, right = left.rstrip(), right.lstrip()
    sep = " " if spaced and left and right and right[0] not in _PUNCT else ""
    return (left + sep + right).strip().lstrip(_PUNCT).strip()
