"""Names in a leaf's text: people, places, organisations, products, events, and projects by their shape,
in English and Chinese. Rules and word lists (``vaultmem/gazetteer/*.txt``, read once, on first use: a process
that never looks for a name never reads them); no model, no I/O after that, no keys (``entities`` turns what is found here into keys).

A finder yields ``(start, end, kind, surface)``; ``entities.extract`` runs them after the structured
kinds (links, dates, money...) have claimed their characters. In the order they claim text:

- Chinese: the word lists (longest match; a ``!`` entry such as 小米粥 claims its characters for
  nothing), then people: a common surname and one or two given-name characters (``zh_given.txt``)
  that start a clause or follow a cue (和, 跟, 让, 由...), never a common word (高兴, 马上...) nor after a
  numeral; 王老师 / 张总 (surname + title) and 小王 as before. The given name takes a second character
  only if it is a given-name character too: 李娜开会 is 李娜.
- English word lists, longest match over words: places, organisations, products, events. An entry that
  is also an everyday word (Target, United, Apple; `` ?`` in its file) counts only mid-sentence; an
  entry written with capitals (ANA, MIT) only as written. A product takes its model (iPhone 16 Pro), an
  event its year (PyCon US 2026).
- English shapes over runs of capitalised words: "... Corp/Inc/Airlines/University", "University of
  ..." are organisations; "... Festival/Conference/Awards/Day", "PyCon" are events; "Lake ...", "...
  Street/Park/Beach" are places; CamelCase and letters+digits words are projects (products when
  listed), as is a name after using/via/install.
- People. A capitalised word is a person only with evidence: it is a known given name
  (``given_names.txt``; one that is also a word, such as Will or Grace, only mid-sentence), or a title
  stands before it (Dr., Ms., Professor, Aunt...), a verb of speech follows it ("Siobhan said"), a
  relation precedes it ("my friend Okonkwo", "a woman named Thandiwe"), it is greeted ("Hi Ana,"), or
  "X and I". A word in ``not_person.txt`` (nationalities, UI and keyboard words, title-case nouns,
  dishes, sports) is never a person. 4+ capitalised words are a Title Case heading: no people in it.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Iterable, Iterator
from importlib import resources

Found = tuple[int, int, str, str]  # start, end, kind, surface


def _entries(name: str) -> list[str]:
    text = (resources.files("vaultmem") / "gazetteer" / name).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _file_words(name: str) -> frozenset[str]:
    return frozenset(word for line in _entries(name) for word in line.split())


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Capitalised words that start sentences or are otherwise not names (pronouns, greetings, days, months...).
STOP = _words(
    """
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
join buy bring pick quick write room met saw called texted told asked visited invited thanked emailed
messaged hugged helped watched
"""
)
# Built on first use (the word lists and the regexes that cost to compile): every public function calls
# ``_english()`` or ``_chinese()`` first.
_PERSON_NOT: frozenset[str]
_GIVEN: frozenset[str]
_GIVEN_COMMON: frozenset[str]

_L = "A-Za-z0-9\u00c0-\u024f"  # Latin letters and digits: Chinese text is for find_chinese
_TOKEN = f"[{_L}](?:[{_L}'’&+.-]*[{_L}+])?|&"
_TOKEN_RE: re.Pattern[str]
_POSSESSIVE_RE = re.compile(r"['’]s?$")
_POSSESSIVE_ENDS = ("'", "’", "'s", "’s")


# The words find_english looks at: those with a capital letter, numbers (a model, a year), and the small
# words inside multi-word names (Turks and Caicos, Bank of America). Skipping the rest keeps it fast.
_CAND = (
    f"(?<![{_L}'’&+.-])(?!I(?:['’](?:m|ve|ll|d))?(?![{_L}'’&+.-]))"  # not "I", "I'm": half of them in chat
    f"(?:[{_L}]*[A-Z\u00c0-\u00de](?:[{_L}'’&+.-]*[{_L}+])?"
    f"|\\d{{1,4}}(?![{_L}])|(?:and|of|de|del|da|do|du|la|le|von|van|der|the)(?![{_L}'’])|&)"
)
_CAND_RE: re.Pattern[str]


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(m[0] for m in _TOKEN_RE.finditer(text))


class _Gazetteer:
    """Multi-word entries of several kinds, looked up by their first word."""

    def __init__(self, files: Iterable[tuple[str, str]]) -> None:
        self.by_first: dict[str, list[tuple[tuple[str, ...], str, bool, bool]]] = {}
        self.single: dict[str, str] = {}  # one-word entries, lower case -> kind
        self.excluded: list[str] = []
        for kind, name in files:
            for line in _entries(name):
                if line.startswith("!"):  # a phrase holding a name that is not one: "Brussels sprouts"
                    self.excluded.append(line[1:])
                    continue
                ambiguous = line.endswith(" ?")
                entry = line.removesuffix(" ?").strip()
                exact = entry != entry.lower()  # written with capitals: match only as written
                words = _tokens(entry) if exact else _tokens(entry.lower())
                options = self.by_first.setdefault(words[0].lower(), [])
                if not words or any(words == known for known, *_ in options):
                    continue  # the first file to list an entry decides its kind
                options.append((words, kind, exact, ambiguous))
                if len(words) == 1 and not exact and not ambiguous:
                    self.single.setdefault(words[0], kind)
        for options in self.by_first.values():
            options.sort(key=lambda e: -len(e[0]))
        phrases = sorted(self.excluded, key=len, reverse=True)
        self.exclude_re = (
            re.compile(r"\b(?:" + "|".join(map(re.escape, phrases)) + r")\b", re.I) if phrases else None
        )


_EN: _Gazetteer
PRODUCT_WORDS: frozenset[str]
# Software whose name a version number may follow ("Postgres 16"): a device's number is its model.
SOFTWARE_WORDS: frozenset[str]

_ORG_SUFFIX = _words(
    """inc inc. ltd ltd. llc corp corp. corporation co co. company gmbh ag plc group bank airlines airways
    university college institute foundation association hospital clinic labs laboratories technologies
    systems partners capital ventures studios agency ministry council committee society trust fc"""
)
_ORG_PREFIX = _words("university bank institute college museum ministry department school")
_EVENT_SUFFIX = _words(
    """festival fest conference summit marathon awards games championship championships expo gala parade
    cup day week fair hackathon meetup convention olympics tournament"""
)
_PLACE_SUFFIX = _words(
    """street st avenue ave road rd boulevard blvd lane drive park beach island islands bay valley canyon
    river mountains falls square station airport heights hills harbour harbor"""
)
_PLACE_PREFIX = _words("lake mount mt fort port cape isle")
_MODEL_WORDS = _words("pro max ultra mini plus air se lite")
_CONNECTORS = _words("of de del da do du la le von van der &")
_TOOL_CUES = _words("using uses used use via install installed library package framework app tool")
_HONORIFICS = _words(
    """dr mr mrs ms mx prof professor sir dame lord lady señora senora señor senor sra sr madame mme monsieur
    coach officer captain capt judge rev pastor rabbi imam"""
)
_KIN = _words(
    "aunt auntie aunty uncle grandma grandpa granny nana nonna nonno abuela abuelo tia tío tio cousin"
)
_RELATION_BEFORE = (
    r"(?:\b(?:my|our|his|her|their|your)\s+(?:best\s+|old\s+|new\s+|little\s+|big\s+|older\s+|younger\s+)?"
    r"(?:friend|buddy|pal|sister|brother|sis|bro|mom|mum|dad|mother|father|son|daughter|wife|husband"
    r"|girlfriend|boyfriend|partner|fianc[ée]e?|cousin|aunt|uncle|niece|nephew|grandma|grandpa|grandson"
    r"|granddaughter|boss|manager|colleague|coworker|co-worker|teammate|roommate|neighbou?r|teacher|coach"
    r"|tutor|student|doctor|therapist|dentist|landlord|kid|baby|ex)|\b(?:named|called|name\s+is|name's))"
    r",?\s+$"
)
_VOCATIVE = (
    r"(?:^|[\n.!?]\s*)(?:hi|hey|hello|dear|thanks|thank\s+you|congrats|congratulations|bye|morning"
    r"|good\s+morning|happy\s+birthday|sorry|love\s+you|miss\s+you|welcome),?\s+$"
)
_AFTER = (
    r"(?:['’]s\s+(?:mom|mum|dad|mother|father|wife|husband|son|daughter|sister|brother|kids|family|"
    r"girlfriend|boyfriend|partner|friend|birthday|wedding|house|place|party|dog|cat|office)\b"
    r"|\s+(?:said|says|told|tells|asked|asks|wrote|writes|replied|replies|texted|emailed|messaged|called"
    r"|mentioned|thinks|thought|wants|wanted|suggested|explained|agreed|promised|invited|recommended"
    r"|loves|hates|likes|knows)\b|\s+and\s+I\b|,\s+who\b)"
)
_RELATION_BEFORE_RE: re.Pattern[str]
_VOCATIVE_RE: re.Pattern[str]
_AFTER_RE: re.Pattern[str]
_AND_ME_RE = re.compile(r"\b(?:me|I)\s+and\s+$")
_OWN_LINE_RE = re.compile(r"(?:^|\n)[ \t]*$")  # a name alone on its line: a signature
_LINE_END_RE = re.compile(r"[ \t]*(?:\n|$)")
_SENTENCE_END = frozenset(".!?\n…:;。！？")
_OPENERS = frozenset(" \t\"“'‘(*_>#-[|")
_CAMEL_RE = re.compile(r"[a-z][A-Z]|[A-Za-z]\d|\d[A-Za-z]")
_NAME_PREFIX_RE = re.compile(r"(?:Mc|Mac|O['’]|De|Di|Du|La|Le)[A-Z][a-z]+")
_YEAR_RE = re.compile(r"(?:19|20)\d\d")
_CON_RE = re.compile(r"[A-Z][A-Za-z]+Conf?")  # PyCon, KubeCon, RailsConf
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@#$/\\.:=~%{}")


def _fold(word: str) -> str:
    """Lower case without accents: "Tomás" -> "tomas"."""
    low = word.lower()
    if low.isascii():
        return low
    return unicodedata.normalize("NFKD", low).encode("ascii", "ignore").decode("ascii")


def _sentence_start(text: str, start: int) -> bool:
    j = start - 1
    while j >= 0 and text[j] in _OPENERS:
        j -= 1
    return j < 0 or text[j] in _SENTENCE_END


class _Tok:
    __slots__ = ("cap", "end", "low", "start", "text")

    def __init__(self, m: re.Match[str]) -> None:
        self.start, self.end, self.text = m.start(), m.end(), m[0]
        self.low = self.text.lower()
        first = self.text[0]
        self.cap = first.isupper() or (
            first.isalpha() and not self.text.islower() and not self.text.isupper()
        )


def find_english(text: str) -> Iterator[Found]:
    if not any(c.isupper() for c in text):
        return
    _english()
    toks = [_Tok(m) for m in _CAND_RE.finditer(text)]
    claimed = [False] * len(toks)
    if _EN.exclude_re is not None:
        for m in _EN.exclude_re.finditer(text):
            for k, tok in enumerate(toks):
                claimed[k] = claimed[k] or m.start() <= tok.start < m.end()
    yield from _gazetteer_hits(text, toks, claimed)
    yield from _run_hits(text, toks, claimed)


def _joined(text: str, toks: list[_Tok], i: int, n: int) -> bool:
    """Whether tokens i..i+n-1 are separated by one space (or ". " after an abbreviation) each."""
    for k in range(i, i + n - 1):
        gap = text[toks[k].end : toks[k + 1].start]
        if gap != " " and gap != ". ":
            return False
    return True


def _gazetteer_hits(text: str, toks: list[_Tok], claimed: list[bool]) -> Iterator[Found]:
    i = 0
    while i < len(toks):
        tok = toks[i]
        options = _EN.by_first.get(tok.low) if tok.cap and not claimed[i] else None
        if options is None and tok.cap and tok.low.endswith(_POSSESSIVE_ENDS):
            options = _EN.by_first.get(_POSSESSIVE_RE.sub("", tok.low))
        hit = None
        for words, kind, exact, ambiguous in options or ():
            n = len(words)
            if i + n > len(toks) or not _joined(text, toks, i, n):
                continue
            got = tuple(t.text if exact else t.low for t in toks[i : i + n])
            last = got[-1]
            if got != words and not (
                got[:-1] == words[:-1] and _POSSESSIVE_RE.sub("", last) == words[-1] and not exact
            ):
                continue
            if ambiguous and (_sentence_start(text, tok.start) or _in_name_run(text, toks, i, n)):
                continue
            if (
                kind == "place"
                and n == 1
                and tok.low in _GIVEN
                and _person_evidence(text, tok.start, tok.end)
            ):
                continue  # "my friend Sofia", "Jordan said"
            if n == 1 and i and _fold(toks[i - 1].low) in _GIVEN and _joined(text, toks, i - 1, 2):
                continue  # a surname: Ronald McDonald, George Washington
            if tok.start and text[tok.start - 1] in _WORD_CHARS:
                continue
            hit = (n, kind)
            break
        if hit is None:
            i += 1
            continue
        n, kind = hit
        end_tok = i + n - 1
        if kind == "product":  # the model: iPhone 16 Pro, PlayStation 5
            while end_tok + 1 < len(toks) and _joined(text, toks, end_tok, 2):
                nxt = toks[end_tok + 1]
                if not (
                    nxt.text.isdigit() or (nxt.low in _MODEL_WORDS and nxt.cap) or _CAMEL_RE.search(nxt.text)
                ):
                    break
                if nxt.text.isdigit() and len(nxt.text) > 3:
                    break
                end_tok += 1
        elif kind == "event":
            end_tok = _with_year(text, toks, end_tok)
        end = toks[end_tok].end
        surface = text[tok.start : end]
        surface = _POSSESSIVE_RE.sub("", surface) if kind != "event" else surface
        for k in range(i, end_tok + 1):
            claimed[k] = True
        yield tok.start, tok.start + len(surface), kind, surface
        i = end_tok + 1


def _in_name_run(text: str, toks: list[_Tok], i: int, n: int) -> bool:
    """Whether tokens i..i+n-1 sit inside a longer run of capitalised words ("Taylor Swift")."""
    prev = toks[i - 1] if i > 0 else None
    nxt = toks[i + n] if i + n < len(toks) else None
    before = prev is not None and prev.cap and text[prev.end : toks[i].start] == " "
    after = nxt is not None and nxt.cap and text[toks[i + n - 1].end : nxt.start] == " "
    return bool(before and prev and prev.low not in STOP and prev.low not in _PERSON_NOT) or bool(
        after and nxt and nxt.low not in _PERSON_NOT
    )


def _with_year(text: str, toks: list[_Tok], end_tok: int) -> int:
    """Extend an event over a region tag and a year: "PyCon US 2026"."""
    k = end_tok
    for step in (1, 2):
        if k + step >= len(toks) or not _joined(text, toks, k, step + 1):
            break
        nxt = toks[k + step]
        if _YEAR_RE.fullmatch(nxt.text):
            return k + step
        if not (nxt.text.isupper() and len(nxt.text) <= 3):
            break
    return end_tok


def _run_hits(text: str, toks: list[_Tok], claimed: list[bool]) -> Iterator[Found]:
    i = 0
    while i < len(toks):
        if claimed[i] or not toks[i].cap:
            i += 1
            continue
        # A run: capitalised tokens joined by single spaces, with connectors (of, de, &) inside.
        j = i
        while j + 1 < len(toks) and not claimed[j + 1] and text[toks[j].end : toks[j + 1].start] == " ":
            nxt = toks[j + 1]
            if nxt.cap or (
                nxt.low in _CONNECTORS
                and j + 2 < len(toks)
                and toks[j + 2].cap
                and text[nxt.end : toks[j + 2].start] == " "
            ):
                j += 1
            else:
                break
        while toks[j].low in _CONNECTORS and j > i:
            j -= 1
        if i < j or toks[i].low not in _PLAIN_STOP:  # the common case, cheaply: "I", "The", "Thanks"
            yield from _run(text, toks, i, j)
        i = j + 1


_PLAIN_STOP = STOP - _HONORIFICS - _KIN


def _run(text: str, toks: list[_Tok], i: int, j: int) -> Iterator[Found]:
    while i <= j and toks[i].low in STOP and toks[i].low not in _HONORIFICS and toks[i].low not in _KIN:
        i += 1  # "Thanks", "The": sentence starters say nothing about what follows
    if i > j:
        return
    run = toks[i : j + 1]
    lows = [t.low for t in run]
    # Organisations, events and places by their shape.
    for k in range(len(run) - 1, 0, -1):
        if lows[k] in _ORG_SUFFIX:
            yield run[0].start, run[k].end, "org", text[run[0].start : run[k].end].rstrip(".")
            yield from _run(text, toks, i + k + 1, j) if k < len(run) - 1 else ()
            return
    if len(run) >= 3 and lows[0] in _ORG_PREFIX and lows[1] == "of":
        yield run[0].start, run[-1].end, "org", text[run[0].start : run[-1].end]
        return
    last = _POSSESSIVE_RE.sub("", lows[-1])
    if len(run) >= 2 and lows[0] not in _PERSON_NOT:
        if last in _EVENT_SUFFIX:
            end = toks[_with_year(text, toks, j)].end
            yield run[0].start, end, "event", text[run[0].start : end]
            return
        if last in _PLACE_SUFFIX or lows[0] in _PLACE_PREFIX:
            yield run[0].start, run[-1].end, "place", text[run[0].start : run[-1].end]
            return
    heading = sum(1 for t in run if t.cap) > 3
    group: list[_Tok] = []
    for k, tok in enumerate(run):
        base = _POSSESSIVE_RE.sub("", tok.text) if "'" in tok.text or "’" in tok.text else tok.text
        low = base.lower()
        if base.isupper() and len(base) > 1:  # an acronym ends a name: "9:14 AM Tom Becker"
            yield from _person(text, group, heading)
            group = []
            continue
        shape = _shape_kind(text, tok, base, low, first=k == 0) if low not in _PERSON_NOT else ""
        if shape:
            yield from _person(text, group, heading)
            group = []
            yield tok.start, tok.start + len(base), shape, base
            continue
        if (low in STOP and low not in _HONORIFICS and low not in _KIN) or tok.low in _CONNECTORS:
            yield from _person(text, group, heading)
            group = []
            continue
        group.append(tok)
        if base != tok.text:  # a possessive ends a name
            yield from _person(text, group, heading)
            group = []
    yield from _person(text, group, heading)


def _shape_kind(text: str, tok: _Tok, base: str, low: str, *, first: bool) -> str:
    """ "project" / "product" / "event" for a word whose shape or cue says so, else ""."""
    if _CON_RE.fullmatch(base):
        return "event"
    if (_CAMEL_RE.search(base) and not _NAME_PREFIX_RE.fullmatch(base)) and not base.isupper():
        return "product" if re.sub(r"\d+$", "", low) in PRODUCT_WORDS else "project"
    if first and len(base) > 1 and not base.isupper() and low not in STOP:
        before = text[max(0, tok.start - 12) : tok.start].split()[-1:]
        if before and before[0].lower() in _TOOL_CUES:
            return "project"
    return ""


def _person(text: str, group: list[_Tok], heading: bool) -> Iterator[Found]:
    """The group of capitalised words as a person, if there is evidence for it."""
    if not group:
        return
    title = False
    while group and group[0].low.rstrip(".") in _HONORIFICS:
        group, title = group[1:], True
    if not group:
        return
    kin = group[0].low in _KIN and len(group) > 1
    words = group if not kin else group[1:]
    if (
        len(group) > 3
        or any(t.text.isupper() and len(t.text) > 1 for t in words)
        or any(len(t.text) < 2 for t in words)
    ):
        return
    lows = [_POSSESSIVE_RE.sub("", t.low) for t in words]
    if any(low in _PERSON_NOT or low in STOP for low in lows):
        return
    start, end = group[0].start, group[-1].end
    surface = _POSSESSIVE_RE.sub("", text[start:end])
    first = _fold(lows[0])
    initial = _sentence_start(text, start)
    # A given name is enough (a word that is also a name, such as Will, only mid-sentence), except in a
    # Title Case heading, where only evidence counts; the evidence is read only when needed.
    given = (first in _GIVEN and not (initial and first in _GIVEN_COMMON)) or (
        first in _GIVEN_COMMON and not initial
    )
    if (given and not heading) or title or kin or _person_evidence(text, start, end):
        yield start, end, "person", surface


_HONORIFIC_BEFORE = r"\b(?:" + "|".join(sorted(_HONORIFICS, key=len, reverse=True)) + r")\.?\s+$"
_HONORIFIC_BEFORE_RE: re.Pattern[str]


def _person_evidence(text: str, start: int, end: int) -> bool:
    """What the words around a capitalised name say: a title or relation before it, a greeting, "me and
    X", a verb of speech or "'s wife" after it."""
    before = text[max(0, start - 40) : start]
    return (
        _HONORIFIC_BEFORE_RE.search(before) is not None
        or _RELATION_BEFORE_RE.search(before) is not None
        or _VOCATIVE_RE.search(before) is not None
        or _AND_ME_RE.search(before) is not None
        or _AFTER_RE.match(text, end) is not None
        or (_OWN_LINE_RE.search(before) is not None and _LINE_END_RE.match(text, end) is not None)
    )


# -- Chinese ------------------------------------------------------------------------------------------
_HAN = "\u3400-\u4dbf\u4e00-\u9fff"
HAN_RE = re.compile(f"[{_HAN}]")


def _trie_regex(words: Iterable[str]) -> str:
    """One regex matching any of ``words``, the longest of those sharing a prefix first."""
    trie: dict[str, dict] = {}  # type: ignore[type-arg]
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:  # type: ignore[type-arg]
        alts = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


def _zh_kinds() -> dict[str, str]:
    kinds: dict[str, str] = {}
    for kind, name in (("event", "zh_events.txt"), ("place", "zh_places.txt"), ("org", "zh_orgs.txt")):
        for word in _file_words(name):
            kinds.setdefault(word, kind if not word.startswith("!") else "")
    for word in _file_words("zh_products.txt"):
        kinds.setdefault(word, "product")
    return {w.lstrip("!"): k for w, k in kinds.items()}


_ZH_KINDS: dict[str, str]
_ZH_WORDS_RE: re.Pattern[str]
_ZH_ROAD_RE = re.compile("大道|大街|路|街|巷|广场")

_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢姜"
    "崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
)
_COMPOUND_SURNAMES = ("欧阳", "司马", "上官", "诸葛")
_ZH_GIVEN: frozenset[str]
# Everyday words and places that begin with a surname character: never a name, whatever the cue.
_NOT_NAMES = _words(
    """
高兴 高级 高速 高度 高中 高手 高效 高温 高考 高铁 高新 任何 任务 任意 马上 马路 马虎 方法 方面 方便 方案 方式 方向 方才
白天 白色 于是 万一 万元 万人 黄金 黄色 黄河 金额 金色 金钱 金融 金属 石头 石油 许多 许可 周末 周围 周年 程序 程度
江湖 江苏 江西 夏天 夏季 何时 何况 何必 严重 严格 严肃 曾经 余额 叶子 付款 付费 付出 钟头 范围 武器 武汉 熊猫 顾客
顾问 段落 陈述 张开 雷达 董事 龙头 向上 向下 向前 向后 毛病 钱包 史上 陆续 宋体 黎明 孔子 田地 小于 小白 周一 周二
周三 周四 周五 周六 周日 周天 周期 周边 林业 高峰 高潮 高明 高兴 朱红 胡同 郭外 罗马 韩国 唐人 宋朝 唐朝 明朝 秦朝
马克 杜绝 任性 曾几 白云 白银 白雪 万家 方圆 石家 金华 江南 龙华 罗湖 夏日 冯小 于今 温和 邓小 姚明 余下 严冬 贾宝
谢谢 谢意 孙子 孟子 沈阳 毛衣 毛巾 白菜 黄瓜 田园 江山 史诗 陆军 潘多 雷锋 程度 范文 付清 韦伯 高原 高山 高楼 高层
"""
)
_NOT_GIVEN = frozenset(
    "他她它我你您们是在了也都就还不很有这那个么吗呢吧啊和跟给说的问与同告回对把被让向从到见去来又没"
)
_TITLES = (
    "先生",
    "女士",
    "小姐",
    "老师",
    "总监",
    "经理",
    "教授",
    "医生",
    "博士",
    "主任",
    "律师",
    "同学",
    "师傅",
    "阿姨",
    "总",
)
# The character before a name: punctuation, a non-Chinese character, or the last character of a cue
# (和 跟 与 给 告诉 问 回复 找 叫 同 见 感谢 谢谢 联系 邀请 让 请 由 把 被 向 对 替 帮 陪 等 约 及 是 派 通知)
# or of a time (明天 上午 下午 晚上 之后).
_PRE_CUE_CHARS = frozenset("和跟与给诉问复找叫同见谢系请让由把被向对替帮陪等约及是派知天午上后晚")
_NUMERALS = frozenset("一二三四五六七八九十几两这那每个")
_ZH_PERSON = "(?:" + "|".join(_COMPOUND_SURNAMES) + f"|[{_SURNAMES}])[{_HAN}]{{1,2}}|[小老][{_SURNAMES}]"
_ZH_PERSON_RE: re.Pattern[str]


def find_chinese(text: str) -> Iterator[Found]:
    """Chinese names from the word lists, then people; ``claimed`` spans are never reused."""
    if not HAN_RE.search(text):
        return
    _chinese()
    taken = bytearray(len(text))
    for m in _ZH_WORDS_RE.finditer(text):
        taken[m.start() : m.end()] = b"\x01" * (m.end() - m.start())
        kind, end = _ZH_KINDS.get(m[0], ""), m.end()
        if kind == "place" and (road := _ZH_ROAD_RE.match(text, end)) is not None:
            end = road.end()  # 中山路 is a street, not 中山
            taken[m.start() : end] = b"\x01" * (end - m.start())
        if kind:
            yield m.start(), end, kind, text[m.start() : end]
    pos = 0
    while (hit := _ZH_PERSON_RE.search(text, pos)) is not None:
        pos = hit.start() + 1
        found = _zh_person(text, hit.start(), taken)
        if found is not None:
            start, end, name = found
            taken[start:end] = b"\x01" * (end - start)
            pos = end
            yield start, end, "person", name


def _zh_person(text: str, start: int, taken: bytearray) -> tuple[int, int, str] | None:
    if taken[start]:
        return None
    prev = text[start - 1] if start else ""
    if prev and HAN_RE.match(prev) and (prev in _NUMERALS or prev not in _PRE_CUE_CHARS):
        return None  # inside a word (金额, 张江路 after 新区) or after a numeral (一张)
    if text[start] in "小老" and text[start + 1 : start + 2] in _SURNAMES:  # 小王, 老李
        after = text[start + 2 : start + 3]
        if after and (HAN_RE.match(after) is None or after in _NOT_GIVEN or after in "送说的来去也都"):
            return start, start + 2, text[start : start + 2]
        return (start, start + 2, text[start : start + 2]) if not after else None
    size = 2 if text.startswith(_COMPOUND_SURNAMES, start) else 1
    given_at = start + size
    for title in _TITLES:  # 王老师, 张总: a surname and a title is a way to name someone
        if text.startswith(title, given_at):
            end = given_at + len(title)
            return start, end, text[start:end]
    c1 = text[given_at : given_at + 1]
    if not c1 or c1 not in _ZH_GIVEN or taken[given_at]:
        return None
    c2 = text[given_at + 1 : given_at + 2]
    two = c2 and c2 in _ZH_GIVEN and not taken[given_at + 1] and not _is_cue_start(text, given_at + 1)
    end = given_at + (2 if two else 1)
    for title in _TITLES:  # 张伟老师 -> 张伟
        if text.startswith(title, end) and title != "总":
            break
    name = text[start:end]
    if name in _NOT_NAMES or name[:2] in _NOT_NAMES or text[start : given_at + 1] in _NOT_NAMES:
        return None
    return start, end, name


# Words that start right after a name (李娜明天去, 王伟说): the name ends before them.
_CUE_WORDS = tuple(
    """
明天 今天 昨天 后天 前天 刚刚 刚才 已经 马上 正在 最近 下午 上午 晚上 早上 中午 一直 一起 一家 还是 也是 就是
    说 讲 问 的 和 跟 与 给 也 都 在 是 很 又 还 就 不 没 刚 让 请 要 会 把 被 对 去 来 到 从 向 买 卖 做 写 看 发 打
    开 送 帮 负责 汇报 整理 参加 确认 觉得 认为 表示 提到 回复 回答 告诉""".split()  # noqa: SIM905
)


def _is_cue_start(text: str, at: int) -> bool:
    return text.startswith(tuple(_CUE_WORDS), at)


@functools.lru_cache(maxsize=1024)  # asked for every leaf's speaker, and speakers repeat
def listed_kind(name: str) -> str:
    """The kind a word list gives ``name`` as a whole ("GitHub" -> "org"), or ""."""
    _english()
    _chinese()
    words = _tokens(name.strip().lower())
    for known, kind, exact, _ambiguous in _EN.by_first.get(words[0], []) if words else ():
        if known == words and not exact:
            return kind
    return _ZH_KINDS.get(name.strip(), "")


def software_words() -> frozenset[str]:
    """Software whose name a version number may follow ("Postgres 16"), lower case."""
    _english()
    return SOFTWARE_WORDS


_LOCK = threading.Lock()
_ENGLISH = False
_CHINESE = False


def _english() -> None:
    """Read the English word lists and compile the regexes find_english uses, once per process (~10 ms:
    a one-shot command that never looks for a name does not pay it)."""
    if not _ENGLISH:
        with _LOCK:
            if not _ENGLISH:
                _load_english()


def _chinese() -> None:
    """The same for the Chinese word lists and people (only text with Han characters needs them)."""
    if not _CHINESE:
        with _LOCK:
            if not _CHINESE:
                _load_chinese()


def _load_english() -> None:
    global _PERSON_NOT, _GIVEN, _GIVEN_COMMON, _TOKEN_RE, _CAND_RE, _EN, PRODUCT_WORDS, SOFTWARE_WORDS
    global _RELATION_BEFORE_RE, _VOCATIVE_RE, _AFTER_RE, _HONORIFIC_BEFORE_RE, _ENGLISH
    _PERSON_NOT = _file_words("not_person.txt")
    _GIVEN = _file_words("given_names.txt")
    _GIVEN_COMMON = _file_words("given_names_common.txt")
    _TOKEN_RE = re.compile(_TOKEN)
    _CAND_RE = re.compile(_CAND)
    _EN = _Gazetteer(
        [
            ("event", "events.txt"),
            ("place", "places.txt"),
            ("org", "orgs.txt"),
            ("product", "products.txt"),
            ("product", "software.txt"),
        ]
    )
    PRODUCT_WORDS = frozenset(w for w, kind in _EN.single.items() if kind == "product")
    SOFTWARE_WORDS = frozenset(_Gazetteer([("product", "software.txt")]).single)
    _RELATION_BEFORE_RE = re.compile(_RELATION_BEFORE, re.IGNORECASE)
    _VOCATIVE_RE = re.compile(_VOCATIVE, re.IGNORECASE)
    _AFTER_RE = re.compile(_AFTER)
    _HONORIFIC_BEFORE_RE = re.compile(_HONORIFIC_BEFORE, re.IGNORECASE)
    _ENGLISH = True


def _load_chinese() -> None:
    global _ZH_KINDS, _ZH_WORDS_RE, _ZH_GIVEN, _ZH_PERSON_RE, _CHINESE
    _ZH_KINDS = _zh_kinds()
    _ZH_WORDS_RE = re.compile(_trie_regex(_ZH_KINDS))
    _ZH_GIVEN = frozenset("".join(_entries("zh_given.txt")).replace(" ", ""))
    _ZH_PERSON_RE = re.compile(_ZH_PERSON)
    _CHINESE = True
