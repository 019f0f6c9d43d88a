"""The fast score: how much a chunk looks worth remembering, from cheap English and Chinese rules.

Runs on every ingested chunk, so it uses only precompiled regular expressions and set lookups, never
an LLM. It owns the rule list, the weights and the admission threshold; it must never call a model,
read a file, or raise on any text. There is no language detection: every rule has English and Chinese
probes, and the Chinese ones only run when the text has CJK characters.

A score is ``BASE`` + a length bonus + the weights of the rules that fired, clamped to [0, 1] and
rounded to 3 decimals. The length bonus grows with the number of words (a CJK character counts as
2/3 of a word) up to ``LENGTH_BONUS`` at ``LENGTH_FULL_WORDS`` words, so an ordinary sentence with no
marker at all is admitted, while short filler ("ok", "thanks", "好的") takes the ``short`` penalty and
is dropped. ``reasons`` lists the rules that fired, in the order of ``RULES``.

Speed: the text is lowercased and split into words once. English probes only run when one of their
words occurs, and match the lowercased text without IGNORECASE. Every pattern starts with a literal
or a single character class, never with ``\\b`` or a lookbehind, because only then can ``re`` skip
ahead to candidate positions instead of trying the whole pattern at every character; word-boundary
and negation checks are lookbehinds placed after the first character instead (see ``_kw``).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, NamedTuple

from vaultmem.errors import InvalidInput

DEFAULT_THRESHOLD: Final = 0.3
BASE: Final = 0.15
LENGTH_BONUS: Final = 0.2
LENGTH_FULL_WORDS: Final = 8.0
SHORT_WORDS: Final = 4.0  # fewer words than this (6 CJK characters make 4 words) is `short`
CJK_CHARS_PER_WORD: Final = 1.5
MAX_SEEN_TERMS: Final = 100_000


class Rule(NamedTuple):
    weight: float
    description: str


RULES: Final[Mapping[str, Rule]] = MappingProxyType(
    {
        "remember": Rule(0.35, 'an explicit request to remember: "remember this", "note that", 记住, 别忘了'),
        "preference": Rule(0.25, 'a first-person preference: "I prefer", "my favourite", 我喜欢, 讨厌, 最爱'),
        "money": Rule(0.15, "an amount of money or a currency: $12, 12 USD, €5, ¥100, 100元, 3万元, RMB"),
        "importance": Rule(0.2, 'urgency or importance: "important", "urgent", "deadline", 重要, 务必, 截止'),
        "need_feeling": Rule(0.15, 'a first-person need or feeling: "I need", "I\'m worried", 我需要, 担心'),
        "error": Rule(0.15, "an error or failure: error, bug, traceback, FooError, 报错, 崩溃, 失败"),
        "version": Rule(0.1, 'a version: v1.2.3, 3.11, "version 2", "Python 3", 版本'),
        "project": Rule(0.1, 'a named project or repository: CamelCase, owner/repo, "project X", 项目, 仓库'),
        "config": Rule(0.1, "configuration: config, settings, env vars, KEY=value, --flags, port 8080, 配置"),
        "first_mention": Rule(0.15, "a new proper-noun-like term: Name, CamelCase, quoted, 「」《》"),
        "completion": Rule(0.1, "something finished: done, fixed, shipped, merged, 完成, 搞定, 解决了, 成功"),
        "credential": Rule(0.2, "passwords, keys, tokens, accounts, or [REDACTED:...] markers; 密码, 账号"),
        "datetime": Rule(0.1, "a date or time: 2023-05-08, May 8, next Tuesday, 14:30, 明天, 下周二, 5月8日"),
        "short": Rule(-0.3, "penalty: fewer than 4 words or 6 CJK characters (filler like ok, thanks, 好的)"),
    }
)


@dataclass(frozen=True, slots=True)
class _Probe:
    """One way a rule can fire: every gate that is set must pass, then ``find`` must be truthy."""

    find: Callable[[str], object] | None  # None: passing the gates fires the rule
    lowered: bool = True  # search the lowercased text (else the original, for case-shaped patterns)
    words: frozenset[str] = frozenset()  # gate: one of these words occurs (lowercased)
    marks: tuple[str, ...] = ()  # gate: one of these substrings occurs in the searched text
    digits: bool = False  # gate: the text has a digit
    cjk: bool = False  # gate: the text has a CJK character


def _words(words: str) -> _Probe:
    return _Probe(None, words=frozenset(words.split()))


def _en(pattern: str, words: str) -> _Probe:
    return _Probe(re.compile(pattern).search, words=frozenset(words.split()))


def _num(pattern: str, words: str = "") -> _Probe:
    return _Probe(re.compile(pattern).search, words=frozenset(words.split()), digits=True)


def _cased(pattern: str, marks: tuple[str, ...] = ()) -> _Probe:
    return _Probe(re.compile(pattern).search, lowered=False, marks=marks)


def _zh(pattern: str) -> _Probe:
    return _Probe(re.compile(pattern).search, lowered=False, cjk=True)


def _kw(*phrases: str, not_after: tuple[str, ...] = ()) -> str:
    r"""Whole-word alternatives, each refusing to follow any of the fixed-width regexes ``not_after``.

    ``\b`` and the negations become lookbehinds after each phrase's first (literal) character, so the
    pattern starts with literals: ``_kw("must", not_after=(r"\bnot ",))`` is
    ``m(?<!\wm)(?<!\bnot m)ust\b``.
    """
    alts = []
    for phrase in phrases:
        first, rest = phrase[0], phrase[1:]
        if not first.isalnum():
            raise ValueError(f"_kw phrase must start with a letter or digit: {phrase!r}")
        guards = "".join(f"(?<!{neg}{first})" for neg in not_after)
        alts.append(rf"{first}(?<!\w{first}){guards}{rest}\b")
    return "|".join(alts)


_NOT = (r"\bnot ", "n't ", r"\bno ", r"\bnever ")
# "I remember", "can't remember", "to remember" recall something; "Remember: ..." asks to keep it.
_RECALLING = (r"\bi ", r"\bwe ", r"\byou ", r"\bthey ", r"\bhe ", r"\bshe ", "'ll ", r"\bto ", *_NOT[:2])
_MONTHS = "january february march april may june july august september october november december"
_MONTH_NAMES = (
    *("jan(?:uary)?", "feb(?:ruary)?", "mar(?:ch)?", "apr(?:il)?", "may", "june?", "july?", "aug(?:ust)?"),
    *("sep(?:t(?:ember)?)?", "oct(?:ober)?", "nov(?:ember)?", "dec(?:ember)?"),
)
_MONTH = f"(?:{'|'.join(_MONTH_NAMES)})"
_MONTH_WORDS = f"{_MONTHS} jan feb mar apr jun jul aug sep sept oct nov dec"
_MONTH_PREPS = "in since until by early late mid"
_DAYS = "monday tuesday wednesday thursday friday saturday sunday"
_UNITS = r"(?:minutes?|hours?|days?|weeks?|months?|years?)"
_ZH_NUM = "一二三四五六七八九十两兩"
# What may stand between 我 and a verb of feeling or liking: 我们, 今天, 其实, 有点, 很 ...
_ZH_ADVERBS = (
    r"(?:们|們)?(?:今天|现在|現在|最近|其实|其實|真的|有点|有點|特别|特別|非常|一直|总是|總是|还是|還是"
    r"|比较|比較|也|都|很|真|好|挺|太|还|還|更|超|最|又){0,2}"
)
_EN_ADVERBS = (
    r"(?: (?:really|truly|so|very|also|still|always|usually|just|quite|kind of|kinda|a bit|a little)){0,2}"
)

_VERSIONED = (
    "python node java ubuntu debian macos ios android windows postgres postgresql mysql django react rust"
)
_PREFER = "prefer like love hate dislike enjoy adore detest"
_PREFER_RE = _PREFER.replace(" ", "|")
_DO = r"(?: do| would| don't| do not)?"
_FEEL = (
    "need want wish hope feel felt worried excited sad happy anxious scared afraid nervous stressed "
    "upset angry frustrated tired lonely glad disappointed overwhelmed"
)
_IMPORTANT = "important importantly urgent urgently asap critical crucial essential must deadline vital"
_DONE = "done finished completed fixed shipped merged succeeded resolved solved deployed released"
# A bare X.Y is a version unless money, a percentage or a measurement follows it.
_MEASURE = (
    r"%|percent|hours?|hrs?|h\b|minutes?|mins?|seconds?|secs?|days?|weeks?|months?|years?|km|kg|g\b|m\b"
    r"|cm|mm|miles?|times|x\b|stars?|points?|usd|eur|dollars?|元|万|萬|块|塊|小时|小時|公里|公斤|分|倍|米"
)

_SLASH_PAIRS = frozenset(
    {
        *("and/or", "either/or", "yes/no", "he/she", "his/her", "him/her", "she/he", "s/he", "this/that"),
        *("on/off", "true/false", "read/write", "input/output", "client/server", "tcp/ip", "pros/cons"),
        *("am/pm", "in/out", "up/down", "left/right", "mm/dd", "dd/mm", "http/https", "before/after"),
        *("question/answer", "lunch/dinner", "day/night", "black/white"),
    }
)
_REPO_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]*/[A-Za-z][\w.-]*[A-Za-z0-9]")
_WORD_EDGES = "\"'`()[]<>{},.;:!?*"


def _has_repo(text: str) -> bool:
    """An owner/repo word, but not and/or, km/h, he/she and friends."""
    for word in text.split():
        if "/" in word:
            word = word.strip(_WORD_EDGES)
            if _REPO_RE.fullmatch(word) and word.lower() not in _SLASH_PAIRS:
                return True
    return False


_PROBES: Final[Mapping[str, tuple[_Probe, ...]]] = MappingProxyType(
    {
        "remember": (
            _en(
                _kw("remember", not_after=_RECALLING)
                + "|"
                + _kw(
                    "don't forget",
                    "do not forget",
                    "never forget",
                    "note that",
                    "note to self",
                    "make a note",
                    "keep in mind",
                    "for future reference",
                    "remind me",
                    "memori[sz]e",
                ),
                "remember forget note keep reference remind memorize memorise",
            ),
            _zh(r"记住|記住|别忘|別忘|不要忘|请记下|請記下|记下来|記下來|记一下|記一下|备忘|備忘|提醒我"),
        ),
        "preference": (
            _en(
                _kw(
                    rf"i{_EN_ADVERBS}{_DO}{_EN_ADVERBS} (?:{_PREFER_RE}|can't stand)",
                    rf"we{_EN_ADVERBS}{_DO}{_EN_ADVERBS} (?:{_PREFER_RE})",
                    r"my (?:favou?rites?|preferred)",
                    r"i'?d rather",
                    r"i'm (?:a fan of|allergic to|into)",
                    "not a fan of",
                ),
                f"{_PREFER} stand favourite favorite favourites favorites preferred rather fan allergic into",
            ),
            _zh(
                rf"我{_ZH_ADVERBS}(?:不太|不)?(?:喜欢|喜歡|偏好|讨厌|討厭|爱吃|愛吃|爱喝|愛喝|爱|愛|受不了|倾向|傾向"
                r"|宁愿|寧願)|最爱|最愛|偏好|偏爱|偏愛"
            ),
        ),
        "money": (
            _words("usd eur gbp cny rmb jpy hkd"),
            _num(r"[$€£¥￥]\s?\d"),
            _num(
                r"\d\s?(?:[€£¥￥]|(?:k|m|bn|million|billion|thousand)?\s?"
                r"(?:dollars?|bucks|euros?|pounds?|yuan|cents?)\b)"
            ),
            _Probe(
                re.compile(
                    r"\d\s?[万萬千百亿億]?\s?(?:元|块钱|塊錢|美元|美金|欧元|歐元|英镑|英鎊|日元|人民币|人民幣"
                    r"|港币|港幣|[块塊](?![\u4e00-\u9fff]))"  # 50块 but not 3块蛋糕
                ).search,
                lowered=False,
                digits=True,
                cjk=True,
            ),
            _zh(rf"[{_ZH_NUM}百千万萬亿億](?:元|块钱|塊錢|美元|欧元|歐元)"),
            _zh(r"人民币|人民幣"),
        ),
        "importance": (
            _en(
                _kw(*_IMPORTANT.split(), "top priority", "high priority", not_after=_NOT),
                f"{_IMPORTANT} priority",
            ),
            _zh(
                r"重(?<!不重)(?<!不太重)(?<!没那么重)(?<!沒那麼重)要|紧(?<!不紧)急|緊(?<!不緊)急|务必|務必|截止"
                rf"|必须|必須|一定要|千(?<![\d{_ZH_NUM}百])[万萬]|优先|優先|关键|關鍵"
            ),
        ),
        "need_feeling": (
            _en(
                _kw(
                    rf"i(?:'m| am)?{_EN_ADVERBS} (?:{_FEEL.replace(' ', '|')})",
                    rf"we(?:'re| are)?{_EN_ADVERBS} (?:{_FEEL.replace(' ', '|')})",
                ),
                _FEEL,
            ),
            _zh(
                rf"我{_ZH_ADVERBS}(?:需要|想要|想|觉得|覺得|感觉|感覺|担心|擔心|害怕|开心|開心|高兴|高興|难过|難過"
                r"|伤心|傷心|焦虑|焦慮|紧张|緊張|生气|生氣|失望|希望|累)"
            ),
        ),
        "error": (
            _words(
                "error errors bug bugs buggy exception exceptions traceback stacktrace crash crashed crashes "
                "crashing fail failed fails failing failure segfault panicked broken"
            ),
            _en(
                _kw("stack trace", "not working", "doesn't work", "didn't work", "won't work", "timed out"),
                "stack working work timed",
            ),
            _cased(r"E(?<=\wE)(?:rror|xception)\b"),  # ValueError, NullPointerException
            _zh(r"报错|報錯|错误|錯誤|出错|出錯|崩溃|崩潰|失败|失敗|异常|異常|故障|闪退|閃退|死机|死機"),
        ),
        "version": (
            _num(r"v(?<!\wv)\d+(?:\.\d+){0,3}\b"),  # v2, v1.2.3
            _num(rf"\d(?<![\w.$€£¥]\d)(?:\d*\.\d+\.\d+\b|\d?\.\d{{1,2}}(?![\d.%])(?! ?(?:{_MEASURE})))"),
            _num(
                _kw(
                    r"version ?\d+",
                    r"ver\. ?\d+",
                    r"release ?\d+",
                    *(rf"{name} ?\d+" for name in _VERSIONED.split()),
                ),
                f"version ver release {_VERSIONED}",
            ),
            _zh(r"版本|版號|版号|版(?<=\d版)|第\d+版|升级到|升級到"),
        ),
        "project": (
            _cased(r"[A-Z](?<=[a-z][A-Z])"),  # CamelCase / camelCase: a capital right after a small letter
            _Probe(
                re.compile(
                    r"Project[ \t]+[A-Z\"“']|project[ \t]+[A-Z\"“']"
                    r"|The [A-Z]\w+ (?:[Pp]roject|repo)\b|the [A-Z]\w+ (?:[Pp]roject|repo)\b"
                ).search,
                lowered=False,
                words=frozenset({"project", "repo"}),
            ),
            _Probe(_has_repo, lowered=False, marks=("/",)),
            _Probe(
                re.compile(r"github\.com/[\w-]+/|gitlab\.com/[\w-]+/|\.git\b(?<=\w\.git)").search,
                marks=("github.com/", "gitlab.com/", ".git"),
            ),
            _zh(r"项目|項目|仓库|倉庫|代码库|代碼庫|專案"),
        ),
        "config": (
            _words(
                "config configs configuration configurations configure configured configures configuring "
                "settings dotenv yaml toml env envvar env_var"
            ),
            _en(
                _kw(
                    "environment variables?",
                    "feature flags?",
                    "command[- ]line flags?",
                    "cli flags?",
                    r"port (?:number|\d{2,5})",
                ),
                "environment flag flags port",
            ),
            _cased(r"\b[A-Z][A-Z0-9_]{2,}=\S", marks=("=",)),  # KEY=value
            _cased(r"--(?<!\S--)[a-z][a-z0-9-]+", marks=("--",)),  # --flags
            _num(r":(?<=[a-z]:)\d{4,5}\b"),  # localhost:8080
            _zh(r"配置|设置|設置|设定|設定|环境变量|環境變數|参数|參數|端口|选项|選項"),
        ),
        "completion": (
            _en(
                _kw(*_DONE.split(), not_after=(*_NOT, r"\bnot yet ", "n't been ", r"\bbe ", r"\bget "))
                + "|"
                + _kw("it works", "works now", "wrapped up", "sorted out"),
                f"{_DONE} works wrapped sorted",
            ),
            _zh(
                r"完(?<!没完)(?<!沒完)(?<!未完)(?<!不完)(?<!没有完)(?<!沒有完)成|搞(?<!没搞)(?<!沒搞)定"
                r"|成(?<!不成)(?<!没成)(?<!沒成)(?<!未成)(?<!没有成)(?<!沒有成)功|解决了|解決了|修好了|修复了|修復了"
                r"|做完了|弄好了|上线了|上線了|合并了|合併了|发布了|發佈了|發布了"
            ),
        ),
        "credential": (
            _words(
                "password passwords passwd passphrase passphrases credential credentials login logins "
                "username usernames 2fa otp token tokens apikey api_key api_keys secret_key access_key "
                "private_key ssh_key"
            ),
            _en(
                _kw(
                    *(
                        rf"{kind}[ -]keys?"
                        for kind in ("api", "secret", "access", "private", "ssh", "signing")
                    ),
                    "pin code",
                ),
                "key keys pin",
            ),
            _Probe(None, marks=("[redacted:",)),  # text that has been through `redact`
            _zh(
                r"密码|密碼|口令|账号|賬號|帐号|帳號|账户|賬戶|帐户|帳戶|令牌|密钥|密鑰|验证码|驗證碼|私钥|私鑰"
            ),
        ),
        "datetime": (
            _words(
                f"today tonight tomorrow yesterday tmr tmrw noon midnight weekend weekends {_DAYS} "
                + " ".join(f"{d}s" for d in _DAYS.split())
            ),
            _en(
                _kw(
                    *(
                        f"{w} (?:week|month|year|morning|afternoon|evening|night)"
                        for w in ("next", "last", "this")
                    ),
                    # not "in may": that is more often the verb
                    *(
                        f"{w}[ -](?:{_MONTHS.replace(' may', '').replace(' ', '|')})"
                        for w in _MONTH_PREPS.split()
                    ),
                ),
                f"week month year morning afternoon evening night {_MONTHS}",
            ),
            _num(_kw(*(rf"{m}\.? \d{{1,2}}(?:st|nd|rd|th)?" for m in _MONTH_NAMES)), _MONTH_WORDS),  # May 8
            _num(rf"\d(?<!\w\d)\d?(?:st|nd|rd|th)? (?:of )?{_MONTH}\b", _MONTH_WORDS),  # 8 May
            _num(
                r"\d(?<!\w\d)(?:\d{3}[-/.]\d{1,2}[-/.]\d{1,2}\b"  # 2023-05-08
                r"|\d?/\d{1,2}/\d{2,4}\b"  # 5/8/2023
                r"|\d?(?::[0-5]\d)? ?(?:am|pm|a\.m\.|p\.m\.)(?!\w)"  # 3pm, 10:30 am
                r"|\d?:[0-5]\d\b"  # 14:30
                r"|\d? o'clock\b"
                rf"|\d* {_UNITS} (?:ago|from now|later)\b)"  # 3 days ago
            ),
            _num(
                _kw(*(rf"{w} (?:(?:19|20)\d\d|\d+ {_UNITS})" for w in ("in", "since", "by", "until"))),
                "in since by until",
            ),
            _zh(
                r"今天|明天|后天|後天|昨天|前天|今晚|明早|明晚|今早|早上|上午|下午|晚上|中午|凌晨|傍晚|周末|週末"
                r"|周[一二三四五六日天]|週[一二三四五六日天]|星期[一二三四五六日天]|礼拜[一二三四五六日天]"
                r"|禮拜[一二三四五六日天]|下个月|下個月|上个月|上個月|明年|去年|今年"
            ),
            _zh(r"[上下这這本]个?(?:周|週|星期|礼拜|禮拜)"),
            _zh(r"\d(?:\d{0,3}年|\d?月(?:\d{1,2}[日号號])?|\d?[点點时時](?:钟|鐘|半|整|\d{1,2}分))"),
            _zh(rf"[{_ZH_NUM}]{{1,3}}(?:月(?:[{_ZH_NUM}]{{1,3}}[日号號])?|[点點](?:钟|鐘|半))"),
        ),
    }
)

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD_RE = re.compile(rf"[^\W{_CJK}]+")
_CJK_RE = re.compile(f"[{_CJK}]")
_DIGIT_RE = re.compile(r"\d")

# Terms for first_mention: runs of capitalised words (including CamelCase), camelCase words, and short
# quoted names. Each pattern starts with a literal or a class, so `re` can skip to candidates.
_CAPS_RE = re.compile(r"[A-Z](?<!\w[A-Z])[a-z][A-Za-z0-9]*(?:[ \t]+[A-Z][a-z][A-Za-z0-9]*)*")
_INNER_CAP_RE = re.compile(r"[A-Z](?<=[a-z][A-Z])")
_CAMEL_RE = re.compile(r"\b[a-z]+[A-Z][A-Za-z0-9]*\b")
_QUOTES = ('"', "“", "「", "《", "『")
_QUOTED_RE = re.compile(
    r'"([^"\n]{2,40})"|“([^”\n]{1,40})”|「([^」\n]{1,30})」|《([^》\n]{1,30})》|『([^』\n]{1,30})』'
)
_SENTENCE_END = frozenset(".!?。！？:;\n")
_OPENERS = frozenset(" \t\"'“‘(*#>-_[`")
_NOT_TERMS = frozenset(f"{_DAYS} {_MONTHS} ok okay mr mrs ms dr".split())


# The probes by number, and for each (has CJK, has a digit): the numbers of the probes those gates let
# through with no word gate, and of those with one by each of their words. ``score`` then looks only at
# the probes whose gates a text passes (a word gate is one set intersection with the text's words)
# instead of testing 49 probes' gates one by one; a rule fires iff one of its probes matches, as before.
_FLAT: Final[tuple[tuple[str, _Probe], ...]] = tuple(
    (name, p) for name, probes in _PROBES.items() for p in probes
)


def _gates(cjk: bool, digits: bool) -> tuple[frozenset[int], Mapping[str, tuple[int, ...]]]:
    ungated: set[int] = set()
    by_word: dict[str, list[int]] = {}
    for n, (_name, p) in enumerate(_FLAT):
        if (p.cjk and not cjk) or (p.digits and not digits):
            continue
        if not p.words:
            ungated.add(n)
        for word in p.words:
            by_word.setdefault(word, []).append(n)
    return frozenset(ungated), {w: tuple(ns) for w, ns in by_word.items()}


_GATED: Final = {(c, d): _gates(c, d) for c in (False, True) for d in (False, True)}


@dataclass(frozen=True)
class Score:
    """A fast score in [0, 1] and the rules that fired, in ``RULES`` order."""

    value: float
    reasons: tuple[str, ...]


def _at_sentence_start(text: str, start: int) -> bool:
    i = start
    while i > 0 and text[i - 1] in _OPENERS:
        i -= 1
    return i == 0 or text[i - 1] in _SENTENCE_END


def _terms(text: str) -> list[str]:
    """Proper-noun-like terms in ``text``, casefolded."""
    terms: list[str] = []
    for m in _CAPS_RE.finditer(text):
        words = m.group().split()
        if not _INNER_CAP_RE.search(words[0]) and _at_sentence_start(text, m.start()):
            words = words[1:]  # "Yesterday Alice ...": capitalised by grammar, not a name
        terms.append(" ".join(words))
    if _INNER_CAP_RE.search(text):
        terms.extend(_CAMEL_RE.findall(text))
    if any(q in text for q in _QUOTES):
        for m in _QUOTED_RE.finditer(text):
            name = next(g for g in m.groups() if g is not None)
            if m.group().startswith('"') and len(name.split()) > 4:
                continue  # a quotation, not a name
            terms.append(name)
    return [k for k in (t.strip().casefold() for t in terms) if k and k not in _NOT_TERMS]


class FastScorer:
    """Score chunks with the rules in ``RULES``, remembering the terms seen for ``first_mention``.

    ``seen_terms`` is shared, not copied, so a caller can carry first mentions across batches. The
    scorer keeps it under ``max_terms`` by forgetting the oldest terms it added itself.
    """

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        seen_terms: set[str] | None = None,
        max_terms: int = MAX_SEEN_TERMS,
    ) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise InvalidInput(
                f"score threshold must be between 0 and 1, got {threshold!r}: fix ingest.score_threshold"
            )
        self.threshold = threshold
        self.seen_terms: set[str] = seen_terms if seen_terms is not None else set()
        self.max_terms = max(1, max_terms)
        self._added: deque[str] = deque()

    def admits(self, score: Score) -> bool:
        return score.value >= self.threshold

    def score(self, text: str) -> Score:
        low = text.lower().replace("’", "'")
        tokens = _WORD_RE.findall(low)
        words = set(tokens)
        cjk = len(_CJK_RE.findall(text))
        digits = _DIGIT_RE.search(text) is not None

        fired: set[str] = set()
        ungated, by_word = _GATED[bool(cjk), digits]
        todo = set(ungated)
        for word in words & by_word.keys():
            todo.update(by_word[word])
        for n in sorted(todo):  # the probes whose gates pass, in ``_PROBES`` order
            name, p = _FLAT[n]
            if name in fired:
                continue
            target = low if p.lowered else text
            if p.marks and not any(mark in target for mark in p.marks):
                continue
            if p.find is None or p.find(target):
                fired.add(name)
        if self._remember_terms(_terms(text)):
            fired.add("first_mention")
        size = len(tokens) + cjk / CJK_CHARS_PER_WORD
        if size < SHORT_WORDS:
            fired.add("short")

        value = BASE + LENGTH_BONUS * min(size, LENGTH_FULL_WORDS) / LENGTH_FULL_WORDS
        value += sum(RULES[name].weight for name in fired)
        reasons = tuple(name for name in RULES if name in fired)
        return Score(round(min(1.0, max(0.0, value)), 3), reasons)

    def _remember_terms(self, terms: list[str]) -> bool:
        """Add unseen terms to ``seen_terms``; True if there was any."""
        new = False
        for term in terms:
            if term in self.seen_terms:
                continue
            new = True
            self.seen_terms.add(term)
            self._added.append(term)
            # Never evict the term just added, or a full set would make it "new" forever.
            while len(self.seen_terms) > self.max_terms and len(self._added) > 1:
                self.seen_terms.discard(self._added.popleft())
        return new
