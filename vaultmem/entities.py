"""Rule-based entity mentions in a leaf's text, English and Chinese, and the keys and folder slugs of topics.

Owns the mention key ``kind:value`` that ties the variants of one entity together ("Caroline",
"@caroline", "Caroline's" -> ``person:caroline``) and the slug a topic folder gets from its key. Pure:
no I/O, no clock (relative dates resolve against the ``ts`` passed in, or are skipped), no model; the
optional LLM pass lives in ``entities_llm``. Approximate by design. The rules, in the order they claim
text (a later rule never reuses characters an earlier one took):

- e-mail addresses; URLs: a GitHub/GitLab/Bitbucket ``owner/name`` (with or without scheme) and
  ``repo owner/name`` are repos (a bare ``owner/name`` is taken as github.com); other URLs are urls.
- tickers: ``$AAPL``, ``(NASDAQ: AAPL)``, ``AAPL stock``, ``shares of AAPL``; ``$`` + digit is money.
- dates: ISO (also ``/`` or ``.``), ``21 November 2026``, ``November 21, 2026``, ``Nov 21`` (year
  from ts), ``May 2023`` (a month key), d/m/y only when one part is over 12, ``2026年11月21日``,
  ``11月21日`` (year from ts); today/yesterday/last Tuesday/next Friday/昨天... only with a ts.
- money: a currency symbol, code or word next to a number; k/m/b and 千/万/亿 expanded; ¥ and 元 are CNY.
- versions: ``v1.2``, ``1.2.3`` (not an IP, not a date), ``version 2``/``release 2``/``版本2``, and
  ``Name 3.11`` after a capitalised name or a known tool (where ``Postgres 16`` counts too); that
  name is also a project. A bare ``1.5`` is not a version.
- ``@handles`` (any script) are people; ``#hashtags`` and a name after ``project``/``repo`` or before
  ``project``/``项目`` are projects.
- Chinese people: a common surname + 1-2 characters next to a cue (和/跟/给/告诉/问... before,
  说/的/和/问/很... after), surname + title (王经理 is kept whole, 张伟老师 -> 张伟), 小/老 + surname
  (小王); never a common word from ``_NOT_NAMES`` (高兴, 任何, 方法...) nor after a numeral (一张).
- capitalised English words: CamelCase or letters+digits words (TidePool, iPhone, Python3) and known
  tools (``_TECH``) are projects, as is a name right after using/via/install/library...; other runs
  of 1-3 capitalised words not in ``_STOP`` (sentence starters, pronouns, greetings, days, months...)
  are people. Possessives and honorifics are dropped; an all-caps word is an acronym; a sentence-
  initial lone word ending in -ing/-ed is a verb; 4+ capitalised words are a Title Case heading. A
  lower-case word is never a person unless it is a handle or the speaker.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from vaultmem.model import utc
from vaultmem.redact import scrub

KINDS = ("person", "place", "project", "repo", "url", "version", "date", "money", "email", "ticker")


@dataclass(frozen=True)
class Mention:
    key: str  # canonical "kind:value", e.g. "person:caroline", "repo:github.com/acme/tidepool"
    kind: str  # one of KINDS
    name: str  # display form as first seen, tidied: no @, no possessive, capitalised if all lower/upper


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Countries and the most talked-about cities: a capitalised name in this list is a place, not a person.
_PLACES = frozenset(
    p.strip()
    for p in """
afghanistan, albania, algeria, argentina, armenia, australia, austria, bangladesh, belgium, bolivia,
brazil, bulgaria, cambodia, cameroon, canada, chile, china, colombia, croatia, cuba, cyprus, czechia,
denmark, ecuador, egypt, england, estonia, ethiopia, finland, france, georgia, germany, ghana, greece,
guatemala, hungary, iceland, india, indonesia, iran, iraq, ireland, israel, italy, jamaica, japan,
jordan, kazakhstan, kenya, korea, kuwait, laos, latvia, lebanon, libya, lithuania, luxembourg,
madagascar, malaysia, mali, malta, mexico, mongolia, morocco, mozambique, myanmar, nepal, netherlands,
new zealand, nicaragua, nigeria, norway, pakistan, panama, paraguay, peru, philippines, poland,
portugal, qatar, romania, russia, rwanda, scotland, senegal, serbia, singapore, slovakia, slovenia,
somalia, south africa, spain, sri lanka, sudan, sweden, switzerland, syria, taiwan, tanzania, thailand,
tunisia, turkey, uganda, ukraine, united kingdom, united states, uruguay, uzbekistan, venezuela,
vietnam, wales, yemen, zambia, zimbabwe, europe, asia, africa, antarctica, america, north america,
south america, amsterdam, athens, atlanta, austin, bangkok, barcelona, beijing, berlin, bogota,
boston, brussels, budapest, buenos aires, cairo, cape town, chicago, copenhagen, dallas, delhi,
denver, dubai, dublin, edinburgh, florence, frankfurt, geneva, hamburg, hanoi, havana, helsinki,
hong kong, honolulu, houston, istanbul, jakarta, jerusalem, johannesburg, kyoto, lagos, las vegas,
lima, lisbon, london, los angeles, madrid, manchester, manila, melbourne, mexico city, miami, milan,
montreal, moscow, mumbai, munich, nairobi, naples, nashville, new orleans, new york, oakland, osaka,
oslo, ottawa, paris, philadelphia, phoenix, portland, porto, prague, reykjavik, rio de janeiro, rome,
san diego, san francisco, santiago, seattle, seoul, shanghai, shenzhen, singapore, stockholm, sydney,
taipei, tel aviv, tokyo, toronto, vancouver, venice, vienna, warsaw, washington, zurich, sintra, hawaii,
california, texas, florida, alaska, bali, sicily, tuscany, provence, bavaria, yosemite, grand canyon
""".replace("\n", " ").split(",")
)


# Capitalised words that start sentences or are otherwise not names.
_STOP = _words("""
i i'm i'll i've i'd me my mine myself we we're we'll we've us our you you're you'll you've your he he's him
his she she's her it it's its they they're them their this that these those who what when where why how
which whose a an the and but or nor so if then than because as at by for from in into of off on onto to with
without about above after before during since until over under again not no yes yeah yep nope ok okay all
any some every each both many much more most few also just only even still here there now today tonight
tomorrow yesterday well sure maybe perhaps please thanks thank sorry hi hello hey dear oh wow ah aha haha lol
omg hmm um uh ugh yay nah bye goodbye welcome great good nice cool awesome glad congrats congratulations happy
merry best regards cheers love let let's lets can could would should will shall may might must do does did
don't doesn't didn't is isn't are aren't was wasn't were be been being have has had get got go going gonna
went make made take see look know think feel felt really actually honestly basically definitely totally
probably hopefully unfortunately luckily finally anyway anyways however though although yet meanwhile
otherwise instead already always never sometimes often usually recently soon later last next first second
third once one two three four five new old big small other another such same very too quite pretty morning
afternoon evening night week weekend month year day days monday tuesday wednesday thursday friday saturday
sunday mon tue tues wed thu thur thurs fri sat sun january february march april june july august september
october november december jan feb mar apr jun jul aug sep sept oct nov dec note notes update re fwd fw
subject sent cc bcc attachment summary title step chapter section figure table page part item example
question answer edit done todo agenda action meeting project repo repository version release manager team
lead plan status board english chinese american british european internet mom dad mum grandma grandpa sir
madam mr mrs ms mx dr prof miss aunt uncle god everyone everybody someone somebody anyone nobody nothing
something everything anything whatever wait stop check sounds seems exactly absolutely indeed right fine
alright agreed true false none null dinner lunch breakfast meet call email send tell ask remember try read
join buy bring pick quick write room
""")
# Tools and platforms: a capitalised one is a project, and "Postgres 16" is a version without a dot.
_TECH = _words("""
python java javascript typescript rust golang kotlin php scala haskell elixir postgres postgresql mysql sqlite
mongodb redis kafka docker kubernetes linux ubuntu debian windows macos ios android react vue angular django
flask fastapi nodejs npm git github gitlab bitbucket aws azure gcp terraform nginx pytorch tensorflow numpy
pandas excel notion slack jira figma openai chatgpt ollama
""")
_TOOL_CUES = _words("using uses used use via install installed library package framework app tool")
_ROLES = _words("user assistant system bot tool human ai me you unknown")

_HAN = "\u3400-\u4dbf\u4e00-\u9fff"
_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢姜"
    "崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
)
# Everyday words and places that begin with a surname character: never a name, whatever the cue.
_NOT_NAMES = _words("""
高兴 高级 高速 高度 高中 高手 高效 高温 高考 高铁 任何 任务 任意 马上 马路 马虎 方法 方面 方便 方案 方式 方向 方才
白天 白色 于是 万一 万元 万人 黄金 黄色 黄河 金额 金色 金钱 金融 金属 石头 石油 许多 许可 周末 周围 周年 程序 程度
江湖 江苏 江西 夏天 夏季 何时 何况 何必 严重 严格 严肃 曾经 余额 叶子 付款 付费 付出 钟头 范围 武器 武汉 熊猫 顾客
顾问 段落 陈述 张开 雷达 董事 龙头 向上 向下 向前 向后 毛病 钱包 史上 陆续 宋体 黎明 孔子 田地 小于 小白
周一 周二 周三 周四 周五 周六 周日 周天
""")
_NOT_GIVEN = "他她它我你您们是在了也都就还不很有这那个么吗呢吧啊和跟给说的问与同告回对把被让向从到见去来又没"
_TITLES = "先生|女士|小姐|老师|总监|经理|总|教授|医生|博士|主任|律师|同学|师傅|阿姨"
_POST_CUES = "说|讲|告诉|问|回复|回答|表示|认为|提到|觉得|的|和|跟|与|给|也|都|在|是|很|又|还|就|不|没|刚|已经|让|请|要|会|见|去|来"
_PRE_CUES = tuple("和 跟 与 给 告诉 问 回复 找 叫 同 见 感谢 谢谢 联系 邀请 让 请".split())  # noqa: SIM905
_SURNAME = f"(?:欧阳|司马|上官|诸葛|[{_SURNAMES}])"
_GIVEN = f"(?:(?![{_NOT_GIVEN}])[{_HAN}])"
_ZH_PERSON_RE = re.compile(
    rf"(?<![一二三四五六七八九十几两这那每个])(?:(?P<t>{_SURNAME}{_GIVEN}{{0,2}}?)(?P<title>{_TITLES})"
    rf"|(?P<n>{_SURNAME}{_GIVEN}{{1,2}}?)(?=(?P<post>{_POST_CUES})|[^{_HAN}]|$))"
    rf"|(?P<x>[小老][{_SURNAMES}])(?=[^{_HAN}]|$|{_POST_CUES})"
)
_HAN_RE = re.compile(f"[{_HAN}]")

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
_TOK = r"[A-Z][A-Za-z0-9]*(?:-[A-Z][A-Za-z0-9]*)?(?:['’][A-Za-z]+)?['’]?"
_CAPS_RE = re.compile(rf"{_TOK}(?: {_TOK})*")
_TOKEN_RE = re.compile(_TOK)
_CAMEL_HINT_RE = re.compile(r"[a-z][A-Z]")
_WORD_END_RE = re.compile(r"[A-Za-z0-9]*")
_CAMEL_RE = re.compile(r"[a-z][A-Z]|\d")
_NAME_PREFIX_RE = re.compile(r"(?:Mc|O['’]|De|Di|Du|La|Le)[A-Z][a-z]+")
_POSSESSIVE_RE = re.compile(r"['’]s?$")
_HONORIFIC_RE = re.compile(r"^(?:(?:dr|mr|mrs|ms|mx|prof|miss|sir)\.?\s+)+", re.IGNORECASE)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_SLUG_TAIL_RE = re.compile(r"-(?:[0-9a-f]{6}|[0-9a-f]{8})$")
_WORD_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_CAPS_BEFORE = frozenset(_WORD_CHARS + "@#$/.'’-")

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
            if m[2] or _after(text, m.start(), "$_0123456789"):
                start, end = m.span(2) if m[2] else m.span()
                yield start, end, "ticker", (m[1] or m[2]).upper(), (m[1] or m[2]).upper()
    if "stock" in text or "shares" in text:
        for m in _TICKER_WORD_RE.finditer(text):
            group = 1 if m[1] else 2
            yield m.start(group), m.end(group), "ticker", m[group], m[group]


def _find_versions(text: str, ref: date | None) -> Iterator[_Hit]:
    if not _has_digit(text):
        return
    for m in _SPACED_NUMBER_RE.finditer(text):
        head = text[max(0, m.start() - 30) : m.start()]
        name = head.rsplit(None, 1)[-1].lstrip("(\"'“[") if head and not head[-1].isspace() else ""
        low = name.lower()
        if _VERSIONED_NAME_RE.fullmatch(name) and (
            low in _TECH or (name[0].isupper() and "." in m[1] and low not in _STOP)
        ):
            start = m.start() - len(name)
            yield start, m.start(), "project", low, name
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
            if name and name.split()[0].lower() not in _STOP and _after(text, m.start(), _WORD_CHARS + ".-"):
                yield m.start(group), m.end(group), "project", _project_key(name), name


def _find_chinese(text: str, ref: date | None) -> Iterator[_Hit]:
    if not _HAN_RE.search(text):
        return
    for m in _ZH_PERSON_RE.finditer(text):
        name, (start, end) = m["t"] or m["x"] or m["n"], m.span()
        if name[:2] in _NOT_NAMES or name in _NOT_NAMES:
            continue
        if m["t"] and len(m["t"]) >= 2:  # "张伟老师" -> 张伟, but a surname alone is no name: 王经理 stays
            end = m.end("t")
        elif m["t"]:
            name += m["title"]
        elif m["n"] and not m["post"] and not text[max(0, start - 2) : start].endswith(_PRE_CUES):
            continue
        yield start, end, "person", _person_key(name), name


# Words after which a sentence-opening capitalised word is a name: "Melanie said", "Jon and I".
_NAME_NEXT_RE = re.compile(
    r" (?:said|says|told|tells|asked|asks|wrote|writes|replied|mentioned|thinks|thought|wants|wanted"
    r"|is|was|has|had|will|would|and|called|texted|emailed|sent|went|came|got|made|took|left|moved|loves|likes)\b"
)


def _name_hit(text: str, group: list[tuple[int, int, str]], run_start: int) -> Iterator[_Hit]:
    if not group:
        return
    start, end, first = group[0][0], group[-1][1], group[0][0] == run_start
    words = " ".join(word for _, _, word in group)
    if first and len(group) == 1:
        j = start - 1
        while j >= 0 and text[j] in " \t\"“'‘(*_>#-":
            j -= 1
        # One capitalised word opening a sentence is usually just a word ("Appreciate it!", "Family
        # means a lot"): it names a person only if the text also writes it capitalised mid-sentence,
        # or as a possessive or a vocative ("Caroline's", "Mel, look").
        if (j < 0 or text[j] in ".!?\n…:。！？") and not (
            text.startswith(("'", "’"), end)
            or _NAME_NEXT_RE.match(text, end)
            or re.search(rf"[a-z,;] {re.escape(words)}\b", text)
        ):
            return
    before = text[max(0, start - 12) : start].split()[-1:] if first else []
    if before and before[0].lower() in _TOOL_CUES:
        yield start, end, "project", _project_key(words), words
    else:
        low = words.lower()
        kind = "place" if low in _PLACES else "person"
        yield start, end, kind, low.replace(" ", "-"), words


def _find_caps(text: str, ref: date | None) -> Iterator[_Hit]:
    for m in _CAMEL_HINT_RE.finditer(text):  # lower camel case: iPhone, eBay, macOS
        start = m.start()
        while start and text[start - 1].isascii() and text[start - 1].isalpha():
            start -= 1
        end = _WORD_END_RE.match(text, m.end()).end()  # type: ignore[union-attr]  # "*" always matches
        if text[start].islower() and _after(text, start, "0123456789_@#$/.-"):
            yield start, end, "project", text[start:end].lower(), text[start:end]
    for run in _CAPS_RE.finditer(text):
        chunk, run_start = run[0], run.start()
        if " " in chunk:
            tokens = [(run_start + t.start(), t[0]) for t in _TOKEN_RE.finditer(chunk)]
            heading = len(tokens) > 3  # 4+ capitalised words are a Title Case heading, not names
        elif len(chunk) > 1 and chunk.lower() not in _STOP:
            tokens, heading = [(run_start, chunk)], False
        else:
            continue  # the common case, cheaply: "I", "The", "Thanks"
        if run_start and text[run_start - 1] in _CAPS_BEFORE:
            continue
        group: list[tuple[int, int, str]] = []
        for start, word in tokens:
            base = _POSSESSIVE_RE.sub("", word) if "'" in word or "’" in word else word
            low = base.lower()
            if len(base) < 2 or base.isupper() or low in _STOP or word.lower() in _STOP:
                kind = ""
            elif low in _TECH or (_CAMEL_RE.search(base) and not _NAME_PREFIX_RE.fullmatch(base)):
                kind = "project"
            elif heading:
                kind = ""
            else:
                kind = "person"
                group.append((start, start + len(base), base))
            if group and (kind != "person" or base != word):  # a stopword, project or possessive ends a name
                yield from _name_hit(text, group, run_start)
                group = []
            if kind == "project":
                yield start, start + len(base), "project", low, base
        yield from _name_hit(text, group, run_start)


_MULTI_PLACE_RE = re.compile(
    r"\b(?:"
    + "|".join(sorted((re.escape(p.title()) for p in _PLACES if " " in p), key=len, reverse=True))
    + r")\b"
)


def _find_places(text: str, ref: date | None) -> Iterator[_Hit]:
    """Places of several words ("New York", "Buenos Aires"), before the capitalised-names rule would
    split them at a word it takes for a sentence starter ("New")."""
    if " " not in text:
        return
    for m in _MULTI_PLACE_RE.finditer(text):
        yield m.start(), m.end(), "place", m[0].lower().replace(" ", "-"), m[0]


_Finder = Callable[[str, date | None], Iterator[_Hit]]
_FINDERS: tuple[_Finder, ...] = (_find_links, _find_tickers, _find_dates, _find_money, _find_versions)
_FINDERS += (_find_tags, _find_chinese, _find_places, _find_caps)


def extract(text: str, *, speaker: str | None = None, ts: datetime | None = None) -> tuple[Mention, ...]:
    """Distinct mentions in order of first appearance (dedupe by key). The speaker (if given) is a person
    mention, first; a generic role ("user", "assistant") is not."""
    ref = utc(ts).date() if ts is not None else None
    claimed = bytearray(len(text))
    hits: list[tuple[int, str, str, str]] = []
    if speaker and speaker.strip().lower() not in _ROLES and _person_key(speaker):
        hits.append((-1, "person", _person_key(speaker), _person_display(speaker)))
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


def _person_display(name: str) -> str:
    text = " ".join(_CONTROL_RE.sub("", unicodedata.normalize("NFKC", name)).split())
    text = _HONORIFIC_RE.sub("", text.lstrip("@"))
    text = _POSSESSIVE_RE.sub("", text)
    if text.isascii() and (text.islower() or text.isupper()):
        text = " ".join(word[:1].upper() + word[1:].lower() for word in text.split())
    return text


def _person_key(name: str) -> str:
    return "-".join(_person_display(name).lower().split())


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
    if kind in ("person", "place"):
        value = _person_key(text)
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
