"""Summaries of one compactor node: the protocol, and the offline extractive default.

Owns: turning a node's children (leaves at depth 1, lower summaries above) into a ``Summary`` (a short
title and a body of at most ``token_bound(depth)`` tokens), and the sentence and title helpers the LLM
summariser (``llm``) shares.

Must never: invent text in extractive mode (every line is a child's own sentence or one clause of it,
cut where a conjunction or punctuation joins two (``clauses``), at most prefixed with its speaker and,
for a single over-long sentence, cut at a word with "…"); print or log.

    Summariser (protocol)        name, summarise(children, depth) -> Summary
    ├── ExtractiveSummariser     central, non-redundant sentences (embedding centrality + MMR)
    └── llm.OpenAICompatSummariser   POST /chat/completions (Ollama, vLLM, llama.cpp); falls back
"""

from __future__ import annotations

import inspect
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from vaultmem import keyphrase
from vaultmem.scoring import CJK_CHARS_PER_WORD, RULES, FastScorer
from vaultmem.tokens import count_tokens

Vectors = npt.NDArray[np.float32]
EmbedFn = Callable[[list[str]], Vectors]


@dataclass(frozen=True)
class Child:
    """One child of a summary node: a leaf or a lower summary."""

    text: str  # leaf body, or the child summary's text
    vector: Vectors | None  # L2-normalised embedding of the child (may be None)
    title: str | None = None  # a child summary's title (None for leaves)
    speaker: str | None = None  # who said it (chat leaves), e.g. "Caroline"
    ts: datetime | None = None
    weight: float = 1.0  # e.g. number of leaves under a child summary
    # A child summary's leaves (chat turns, documents' chunks), in order: above depth 1 their clauses are
    # candidates beside the child's own lines (``ExtractiveSummariser``, ``leaf_lines``). Empty: none.
    leaves: tuple[Child, ...] = ()


@dataclass(frozen=True)
class Summary:
    title: str  # short key, 1-6 words, one line, <= 60 chars, never empty
    text: str  # plain Markdown sentences or bullets, no headings, never empty
    summariser: str  # "extractive" or "llm:<model>"; a fallback names the fallback
    notes: tuple[str, ...] = ()  # what went wrong on the way, oldest first


class Summariser(Protocol):
    name: str

    def summarise(self, children: Sequence[Child], depth: int) -> Summary: ...


def summarise_apart(
    summariser: Summariser,
    children: Sequence[Child],
    depth: int,
    apart: Vectors | None,
    background: Background | None = None,
) -> Summary:
    """``summariser.summarise`` told the vectors of the levels beside this one (``neighbours``) where it
    takes them (a keyword ``apart``: the extractive and LLM summarisers do; one written before it was
    added, e.g. a custom fallback, is called as before): a title names what sets a level apart. Likewise
    ``background`` (the words the source's levels share, ``Background``), where it takes it."""
    method: Any = summariser.summarise
    told: dict[str, Any] = {}
    if apart is not None and _takes(method, "apart"):
        told["apart"] = apart
    if background is not None and _takes(method, "background"):
        told["background"] = background
    result: Summary = method(children, depth, **told) if told else summariser.summarise(children, depth)
    return result


def _takes(method: Callable[..., Any], keyword: str) -> bool:
    """``method`` has a parameter ``keyword``, or takes any keyword (``**kwargs``: a wrapper)."""
    parameters = inspect.signature(method).parameters
    return keyword in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def summarise_untitled(summariser: Summariser, children: Sequence[Child], depth: int) -> Summary:
    """``summariser.summarise`` for a caller that keeps its own title (a digest is named by its date):
    told so where it takes a keyword ``titled`` (the extractive summariser then embeds no key phrase,
    about 45% of the texts a day's digest would send to the model); its title is a cheap one."""
    method: Any = summariser.summarise
    if "titled" in inspect.signature(method).parameters:
        result: Summary = method(children, depth, titled=False)
        return result
    return summariser.summarise(children, depth)


NEIGHBOURS = 8  # a level's title stands out from this many of the most similar levels beside it


def neighbours(centre: Vectors, others: Vectors, k: int = NEIGHBOURS) -> Vectors | None:
    """The ``k`` rows of ``others`` closest to ``centre`` (the levels a reader would confuse this one
    with), or None when there are none."""
    if len(others) == 0:
        return None
    unit = others / np.maximum(np.linalg.norm(others, axis=1, keepdims=True), 1e-12)
    sims = unit @ _unit(centre)
    keep = np.argsort(-sims, kind="stable")[:k]
    out: Vectors = unit[keep].astype(np.float32)
    return out


BACKGROUND_LEVELS = 1024  # a background is counted on at most this many levels (evenly spread)


@dataclass(frozen=True)
class Background:
    """In how many of a source's levels (their summaries, ``levels`` in all) each content word occurs:
    what is common to every subject of a vault ("love", "feel", "today") against what names one
    ("dairy-free", "LeBron", "adoption"). Above depth 1 a summary prefers the lines dense in words its
    children share and the rest of the source does not (``ExtractiveSummariser``, ``SPECIFIC_WEIGHT``)."""

    levels: int
    counts: Mapping[str, int]

    @classmethod
    def of(cls, texts: Sequence[str], limit: int = BACKGROUND_LEVELS) -> Background:
        """Counted on ``texts`` (a source's depth-1 summaries, in time order), or on ``limit`` of them
        taken at an even stride when there are more: a share estimated on a sample, at a bounded cost."""
        if len(texts) > limit:
            stride = len(texts) / limit
            texts = [texts[int(i * stride)] for i in range(limit)]
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(set(_feature_list(text)[0]))
        return cls(len(texts), counts)

    def rarity(self, word: str) -> float:
        """log(levels / levels using ``word``): 0 for a word every level uses; a word none uses counts as
        used once."""
        return math.log(max(self.levels, 1) / max(self.counts.get(word, 0), 1))


def token_bound(depth: int) -> int:
    """The most tokens (``count_tokens``) a summary body may have at ``depth``.

    120 at depth 1: a bucket holds roughly 1-2k tokens of turns, and about 75 words keep its facts while
    compressing ~10x. Each level up covers more ground, so it gets more room (160, then 200), but the
    growth stops at 200 so that a context budget of a couple of thousand tokens can still show several
    summaries side by side rather than one long one.
    """
    if depth <= 1:
        return 120
    if depth == 2:
        return 160
    return 200


# --- text pieces -----------------------------------------------------------------------------------

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RE = re.compile(f"[{_CJK}]")
_CJK_RUN_RE = re.compile(f"[{_CJK}]+")
_WORD_RE = re.compile(rf"[^\W_{_CJK}]+(?:'[^\W_{_CJK}]+)*")
# Bullets, numbering, quotes and heading marks are layout, not wording: a summary body has no headings.
LINE_MARK_RE = re.compile(r"^(?:\s*(?:[-*+•]\s+|\d{1,3}[.)]\s+|>+\s*|#{1,6}\s+))+")
# English ends need a following space ("3.5", "e.g.x" stay whole); CJK ends need none.
_BOUNDARY_RE = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s)|[。！？；]+[」』”’）)\]]*")
_ABBREVIATIONS = frozenset("mr mrs ms dr prof st jr sr vs etc e.g i.e approx no fig inc ltd co ref".split())  # noqa: SIM905
_MIN_SENTENCE_WORDS = 3
_WRAPPED_LINE_TOKENS = 10  # about 40 characters of English; shorter lines are list-like
SPACE_RE = re.compile(r"\s+")

STOPWORDS = frozenset(
    """a about above after again against ah all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each even ever every few for from further get gets getting go goes going
    gone got gotta had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers
    herself him himself his how how's i i'd i'll i'm i've if im in into is isn't it it's its itself
    just know let let's like lol lot make many maybe me more most much must my myself no nor not now
    of off oh ok okay on once one only or other ought our ours ourselves out over own quite really
    said same say says see shall she she'd she'll she's should shouldn't so some such sure than that
    that's the their theirs them themselves then there there's these they they'd they'll they're
    they've thing things think this those though through to too um under until up upon us very want
    was wasn't way we we'd we'll we're we've well were weren't what what's when when's where where's
    whether which while who who's whom why why's will with won't would wouldn't yeah yes yet you you'd
    you'll you're you've your yours yourself yourselves""".split()  # noqa: SIM905
)
_TITLE_FORBIDDEN_RE = re.compile(r"[\x00-\x1f\x7f\[\]|#:/\\^*`\"<>?{}]")
_TITLE_WORDS = 3
_TITLE_MAX_WORDS = 6
_TITLE_MAX_CHARS = 60
_TITLE_CJK_CHARS = 8
# Units a number is written together with in Chinese (dates, times, counts, money): a title that ends on
# the number keeps its unit ("3月24日到26日", not "3月24日到26", which reads as a cut word).
_CJK_UNITS = frozenset("年月日号天周时点分秒个次岁元块万亿")
FALLBACK_TITLE = "memories"
_EMPTY_TEXT = "(no text)"


def split_line(line: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for match in _BOUNDARY_RE.finditer(line):
        if match.group() == ".":
            word = line[line.rfind(" ", start, match.start()) + 1 : match.start()].lower().lstrip("(\"'")
            if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        pieces.append(line[start : match.end()].strip())
        start = match.end()
    pieces.append(line[start:].strip())
    return [p for p in pieces if p]


def _join_wrapped(paragraph: str, line: str) -> str:
    if not paragraph:
        return line
    if _CJK_RE.match(paragraph[-1]) and _CJK_RE.match(line[0]):
        return paragraph + line  # CJK wraps without a space
    return f"{paragraph} {line}"


_FENCE_LINE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# A document leaf begins with its breadcrumb, the page title and heading path as one heading
# (``## Canvas › Use it › Keyboard``, written by ``docsync``): where the text sits, never what it says.
BREADCRUMB = " › "


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` in order, without bullet, numbering, quote and heading marks.

    Each bullet, heading and short line stands alone. A long line followed by an unmarked one is taken
    as hard-wrapped prose (notes and emails wrap at 72-100 columns) and joined with a space, so its
    sentences come out whole; a sentence then differs from the child's text at most in whitespace.
    Fenced code is no sentence: quoted out of its fence, a code sample would read as prose (and an
    example link in it as a real one). Nor is a document leaf's breadcrumb (a heading joined by ``›``):
    a summary quoting it would repeat the titles of its children.
    """
    out: list[str] = []
    paragraph = ""
    wrapped = False  # the previous line was long enough to be hard-wrapped prose
    fence = ""
    for raw in text.splitlines():
        opening = _FENCE_LINE_RE.match(raw)
        if fence or opening:
            if opening and not fence:
                fence = opening.group(1)[0] * len(opening.group(1))
            elif opening and opening.group(1).startswith(fence) and not opening.group(2).strip():
                fence = ""
            continue
        marker = LINE_MARK_RE.match(raw)
        line = raw[marker.end() :].strip() if marker else raw.strip()
        if marker and "#" in marker.group() and BREADCRUMB in line:
            line = ""  # a breadcrumb: ends the paragraph like a blank line
        if paragraph and (marker or not line or not wrapped):
            out.extend(split_line(paragraph))
            paragraph = ""
        if not line:
            continue
        paragraph = _join_wrapped(paragraph, line)
        wrapped = count_tokens(line) >= _WRAPPED_LINE_TOKENS and "#" not in (marker.group() if marker else "")
    if paragraph:
        out.extend(split_line(paragraph))
    return out


def _is_cjk(feature: str) -> bool:
    """A feature of ``_feature_list`` that is CJK (a character pair, or a lone character)."""
    return not feature.isascii() and bool(_CJK_RE.match(feature))


def _feature_list(text: str) -> tuple[list[str], int]:
    """Content words, then character bigrams for CJK (written without spaces, so no words to split);
    and the number of words, counting a CJK character as one."""
    lowered = text.lower()
    if not lowered.isascii():
        lowered = lowered.replace("’", "'")
    words = [w.removesuffix("'s") for w in _WORD_RE.findall(lowered)]
    size = len(words)
    feats = [w for w in words if len(w) > 1 and w not in STOPWORDS]
    if not lowered.isascii():
        for run in _CJK_RUN_RE.findall(lowered):
            size += len(run)
            feats.extend([run] if len(run) == 1 else (run[i : i + 2] for i in range(len(run) - 1)))
    return feats, size


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` at a word boundary so that it and a closing "…" fit in ``limit`` tokens."""
    if count_tokens(text) <= limit:
        return text
    end = 0
    used = 1  # the ellipsis
    for match in re.finditer(r"\S+", text):
        cost = count_tokens(match.group())
        if used + cost > limit:
            break
        used += cost
        end = match.end()
    if end:
        return text[:end] + "…"
    # One word longer than the limit (CJK has no spaces): the longest prefix that fits.
    word = text.split()[0]
    lo, hi = 0, len(word)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(word[:mid]) + 1 <= limit:
            lo = mid
        else:
            hi = mid - 1
    return word[:lo] + "…"


def clean_title(raw: str) -> str:
    """A title safe as an Obsidian alias and a slug: one line, no ``[]|#:`` and friends, <= 6 words."""
    words = SPACE_RE.sub(" ", _TITLE_FORBIDDEN_RE.sub(" ", raw)).strip(" .,;-–—'").split(" ")
    title = " ".join(words[:_TITLE_MAX_WORDS]).strip()
    if len(title) > _TITLE_MAX_CHARS:
        cut = title[:_TITLE_MAX_CHARS]
        title = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return title.strip(" .,;-–—'")


# --- what a sentence carries -----------------------------------------------------------------------

# Greetings, thanks and reactions: a line that opens with one says nothing more when little follows.
_GREETING_RE = re.compile(
    r"^\W*(?:hi|hey|hello|hiya|howdy|yo|good (?:morning|afternoon|evening|night|day)|morning|evening|"
    r"thanks|thank you|thx|ty|cheers|bye|goodbye|see (?:you|ya)|take care|talk (?:soon|later)|"
    r"you'?re welcome|no problem|no worries|congrats|congratulations|wow|whoa|haha\w*|lol|omg|aw+|"
    r"ok|okay|sure|cool|great|awesome|nice|amazing|yay|sounds (?:good|great)|glad (?:to hear|you|that)|"
    r"that'?s (?:so |really |very )?(?:great|awesome|amazing|cool|nice|wonderful|fantastic|sweet|"
    r"good|fair|true|interesting)|(?:i'?m|i am) (?:so |really )?(?:happy|glad) (?:for|to hear)|"
    r"please remember(?: this| that)?|long time no see|how are you|how'?s it going|what'?s up)\b"
    r"|^\W*(?:你好|您好|早上好|早安|晚上好|晚安|谢谢|多谢|感谢|好的|好吧|哈哈|嗯|收到|没问题|再见|拜拜)",
    re.IGNORECASE,
)
# Words of courtesy and reaction, which never count as what a line is about.
_FILLER_WORDS = frozenset(
    [
        "hi",
        "hey",
        "hello",
        "hiya",
        "thanks",
        "thank",
        "thx",
        "cheers",
        "bye",
        "goodbye",
        "wow",
        "haha",
        "lol",
        "omg",
        "yay",
        "great",
        "awesome",
        "cool",
        "nice",
        "amazing",
        "glad",
        "happy",
        "morning",
        "evening",
        "afternoon",
        "night",
        "good",
        "wonderful",
        "fantastic",
        "sweet",
        "love",
        "lovely",
        "totally",
        "definitely",
        "absolutely",
        "exactly",
        "agree",
        "sounds",
        "hear",
        "appreciate",
        "congrats",
        "congratulations",
    ]
)
# Words of praise and feeling that fill a chat but never name a level's subject (titles only).
_TITLE_NOISE = frozenset(
    "inspiring inspired proud grateful truly kind words another best part super incredible beautiful "  # noqa: SIM905
    "cute special stuff lots feel feeling felt thinking hope "
    # Prepositions and indefinite pronouns that STOPWORDS keeps for the summaries' own scoring: they name
    # no subject ("inside Japan everything" was a sample vault title).
    "inside outside within without across around toward towards onto via per among beside besides beyond "
    "everything something anything nothing everyone someone anyone everybody somebody anybody nobody "
    # Adverbs that end a clause, not a name ("retry header instead", "usually serve dinner").
    "instead already still anyway anyways usually actually probably basically apparently".split()
)
_FILLER_CONTENT = 2  # a line needs this many words that say something (or a number) not to be filler
_SPEAKER_PREFIX_RE = re.compile(r"^[^\W\d_][\w .'-]{0,39}:\s+")  # "Caroline: " (lines of a child summary)


def greets(sentence: str) -> bool:
    """The sentence opens with a greeting, thanks or a reaction ("Hey Caroline, that trip was...")."""
    return bool(_GREETING_RE.match(_SPEAKER_PREFIX_RE.sub("", sentence, count=1)))


def _thin(sentence: str, words: int) -> bool:
    """Fewer than ``words`` words that say something, and no number."""
    features, _size = _feature_list(_SPEAKER_PREFIX_RE.sub("", sentence, count=1))
    content = [f for f in features if f not in _FILLER_WORDS]
    return len(content) < words and not any(ch.isdigit() for ch in sentence)


def weak_opening(sentence: str) -> bool:
    """A line no summary should open with: it greets, thanks or reacts ("Wow, did you make that?"), or
    has fewer than 3 words that say something ("It looks so real!", "Kyoto planning time.")."""
    return greets(sentence) or _thin(sentence, _FILLER_CONTENT + 1)


def says_little(text: str) -> bool:
    """No sentence of ``text`` could open a summary (each is a ``weak_opening``): a turn of reactions
    such as "Thanks, Melanie! That plate is awesome! Did you make it?"."""
    return all(weak_opening(sentence) for sentence in split_sentences(text))


def is_filler(sentence: str) -> bool:
    """A greeting, thanks, a reaction or a line too thin to say anything ("Please remember that.").

    A greeting followed by a real statement ("Thanks, the invoice of $300 is paid.") is not filler.
    """
    sentence = _SPEAKER_PREFIX_RE.sub("", sentence, count=1)
    features, _size = _feature_list(sentence)
    content = [f for f in features if f not in _FILLER_WORDS]
    if any(ch.isdigit() for ch in sentence):
        return bool(_GREETING_RE.match(sentence)) and len(content) < 2
    return len(content) < (_FILLER_CONTENT + 1 if _GREETING_RE.match(sentence) else _FILLER_CONTENT)


# A line in which the person asks to be reminded ("One more: remind me to pay the rent before the 1st.",
# 提醒我…) is what they said a memory must keep. Only a request opening its clause: the fast score's
# ``remember`` reason also fires on recollections and advice ("Moments like these remind me to…", "I'll
# never forget it", "Remember that staying positive…": 36 lines of LoCoMo dev's depth-1 summaries, none
# a request), which the ranking must not lift: ``information`` counts that reason only for a request (LoCoMo
# dev, session 12, same levels: depth 1/2/3+ recall 0.572/0.349/0.189 -> 0.573/0.352/0.199).
_ASKED_RE = re.compile(
    r"(?:^|[:;,.!?—–]\s*|\b(?:please|pls|can you|could you|would you|will you)\s+)"
    r"(?:remind me\b|don't let me forget\b|do not let me forget\b|make a note\b|note to self\b|"
    r"set (?:me )?a reminder\b)"
    r"|(?:提醒我|记得提醒|記得提醒|帮我记|幫我記|别让我忘|別讓我忘)",
    re.IGNORECASE,
)


def asks_to_keep(sentence: str) -> bool:
    """The speaker asks to be reminded of something, or to have it noted ("remind me to pay the rent",
    "Please make a note: …", 提醒我…): a request, not a recollection ("that day always reminds me")."""
    sentence = sentence.replace("’", "'")
    return bool(_ASKED_RE.search(sentence) or _ASKED_RE.search(_SPEAKER_PREFIX_RE.sub("", sentence, count=1)))


def information(sentence: str) -> float:
    """How much a sentence looks like it carries a fact, in [0, 1]: the fast score's reasons (dates,
    amounts, decisions, preferences, names, versions) and its length, judged on the sentence alone. Its
    ``remember`` reason counts only for a request (``asks_to_keep``): in a summary's candidates it fires
    mostly on recollections and advice ("I'll never forget that day", "remind me why I do this")."""
    score = FastScorer().score(sentence)
    if "remember" in score.reasons and not asks_to_keep(sentence):
        return max(0.0, score.value - RULES["remember"].weight)
    return score.value


# --- extractive ------------------------------------------------------------------------------------

_MMR_LAMBDA = 0.7
# Above depth 1 a leaf's lines (``Child.leaves``) are ranked with the leaf's stored vector, not embedded.
LEAF_VECTORS = True
# At most this many of a child's leaves give lines (``central_leaves``): a top level over 100k leaves must
# not rank a million clauses. LoCoMo dev (a depth-2 level's children hold ~8 leaves, a depth-3+ one's
# ~60-700): depth 2 0.400 at any cap >= 8; depth 3+ 0.216 / 0.233 / 0.238 / 0.239 at 8 / 16 / 32 / all.
LEAF_LINES = 32
# Above depth 1, given a ``Background``: a line's specificity (0..1, ``_specific``) beside its rank (a
# cosine plus the fast score). LoCoMo dev depth 2 (session 11 harness): 0.7 and 1.0 alike (0.352, 0.351),
# 1.4 worse (0.339).
SPECIFIC_WEIGHT = 1.0
# Inherited vectors tie every sentence of a child; word overlap with all children breaks the tie
# and nudges across children, but only a little next to embedding centrality.
_LEXICAL_WEIGHT = 0.1
_DUPLICATE_JACCARD = 0.8
# Redundancy also counts the share of the smaller line's words the other says (times this): "Kyoto in
# April" after "Kyoto: 11 to 19 April, budget…" says nothing new, though their Jaccard is low. It matters
# where lines have no vectors of their own (inherited or none); LoCoMo dev, with vectors, 0 / 0.5 / 1.0:
# depth 2 0.399 / 0.399 / 0.400 (docs/architecture.md).
OVERLAP_WEIGHT = 1.0
_DUPLICATE_COSINE = 0.97


class _Candidate(NamedTuple):  # not a frozen dataclass: built per sentence, and 3x cheaper to build
    sentence: str  # the child's own words
    display: str  # what the summary shows: the sentence, with "Speaker: " for chat leaves
    child: int
    cost: int  # tokens of the display line, bullet mark included
    features: frozenset[str]
    words: int  # the sentence's words, a CJK character counting as one (``_feature_list``)
    filler: bool = False  # a greeting, thanks, a reaction, a line with nothing in it
    leaf: bool = False  # a line of a child summary's leaf (``Child.leaves``), not of the child's own text
    vector: Vectors | None = None  # a leaf line's stored vector (its leaf's), used instead of embedding it

    @property
    def fragment(self) -> bool:
        """Under 3 words ("ok", "(~20 min)."): too short to say anything on its own."""
        return self.words < _MIN_SENTENCE_WORDS


# A sentence is cut into clauses where a comma comes before a conjunction (", and", ", but", ", so",
# ", because"…), at a semicolon, a hyphen between spaces (a chat's dash) or an ellipsis: "I went to an LGBTQ
# support group yesterday, and it was so powerful" states its fact in the first clause. A summary line is
# then the clause, not the sentence: at equal tokens more facts fit, and a clause matches its fact more
# closely (LoCoMo dev, session 13: of the reference facts under a depth-2 level 58% are stated by a line of
# the children's summaries, 61% by a clause of one; docs/architecture.md). Never inside `code`, brackets
# or quotes (``curl -X POST - ; echo`` stays whole); an em dash is no cut ("*Database Internals* — Alex
# Petrov"). A leading "and", "but", "so" is dropped with its cut.
_CLAUSE_CUT_RE = re.compile(
    r",\s+(?=(?:and|but|so|because|since|which|though|although|while|as|plus|especially|just|cause|cuz)\b)"
    r"|;\s+|\s+-\s+|\.\.\.\s*|…\s*",
    re.IGNORECASE,
)
_CLAUSE_MIN_WORDS = 4  # a shorter clause that says something ("*Database Internals*") stays with the next
_CLAUSE_OPENING_RE = re.compile(r"^(?:and|but|so|plus|cause|cuz)\s+", re.IGNORECASE)
_CLAUSE_KEPT_RE = re.compile(r"`[^`]*`|\([^)]*\)|\[[^\]]*\]|\"[^\"]*\"|“[^”]*”|「[^」]*」")


def clauses(sentence: str, prefixed: bool = False) -> list[str]:
    """The clauses of ``sentence`` that say something, in order (``_CLAUSE_CUT_RE``); ``[sentence]`` when
    it has no cut. A clause with fewer than ``_FILLER_CONTENT`` words that say something is left out
    ("Wow, that sounds great", "it was so powerful"), or kept with the clause after it when it has a
    number ("**v0.9.3** — webhook: reject empty payloads…" stays one clause); so is one of fewer than
    ``_CLAUSE_MIN_WORDS`` words ("*Database Internals* — Alex Petrov" stays whole). ``prefixed``: the sentence
    may open with a speaker ("Caroline: ", "Chen Jing: ": a line of a child summary), kept on each
    clause; only a name (one word, or capitalised words), not a label ("Two big things: …")."""
    prefix = _SPEAKER_PREFIX_RE.match(sentence) if prefixed else None
    head = prefix.group() if prefix and _names_someone(prefix.group()) else ""
    body = sentence[len(head) :]
    kept = [m.span() for m in _CLAUSE_KEPT_RE.finditer(body)]
    spans: list[tuple[int, int]] = []
    start = 0
    for cut in _CLAUSE_CUT_RE.finditer(body):
        if not any(a < cut.start() < b for a, b in kept):
            spans.append((start, cut.start()))
            start = cut.end()
    if not spans:
        return [sentence]
    spans.append((start, len(body)))
    out: list[str] = []
    last = 0  # where the last clause kept began
    pending: int | None = None  # where a short clause (a number, or few words) began: joined to the next
    for begin, end in spans:
        begin = begin if pending is None else pending
        piece = _clause(body, begin, end)
        words = [f for f in _feature_list(piece)[0] if f not in _FILLER_WORDS and not _has_digit(f)]
        if len(words) >= _FILLER_CONTENT and len(_WORD_RE.findall(piece)) >= _CLAUSE_MIN_WORDS:
            out.append(piece)
            last, pending = begin, None
        elif _has_digit(piece) or len(words) >= _FILLER_CONTENT:
            pending = begin
    if pending is not None:  # the last clause is short: it stays with the one before
        if not out:
            return [sentence]
        out[-1] = _clause(body, last, len(body))
    return [head + piece for piece in out] or [sentence]


def _clause(body: str, begin: int, end: int) -> str:
    """``body[begin:end]`` as a clause: trimmed, without an opening "and", "but", "so"."""
    return _CLAUSE_OPENING_RE.sub("", body[begin:end].strip()).strip(" ,")


# What carries no fact at a line's edges, trimmed from what a summary shows and ranks (the words left are
# the child's own): opening discourse markers and interjections followed by a comma or "!" ("Oh, ", "Yeah,
# ", "Well, ", "Haha, ", "Wow! ", "Oh wow, "), and a trailing laugh, interjection or emoji ("… lol",
# " haha!", " 😊", " :)"). A marker not set off by punctuation stays ("Well done", "So I went").
_EDGE_MARKERS = (
    r"oh+|ah+|aw+|ooh+|oops|wow+|whoa|yeah|yep|yup|yes|no|nah|well|hmm+|hm+|um+|uh+|er|eh|haha\w*|hah|hehe\w*|"
    r"lol|lmao|omg|gosh|geez|jeez|man|dude|okay|ok|alright|right|so|anyway|anyways|honestly|actually|btw|"
    r"yay|woo+|hey|oh my god|oh my gosh|oh my|oh no|oh yeah|oh wow|ha"
)
_EMOJI = "\U0001f000-\U0001faff\u2600-\u27bf\ufe0f\u200d"
_OPENING_MARKERS_RE = re.compile(
    rf"^(?:(?:{_EDGE_MARKERS})(?:\s+|\s*[,!…]+\s*))*(?:{_EDGE_MARKERS})\s*[,!…]+\s+", re.I
)
_TRAILING_REACTION_RE = re.compile(
    rf"(?:[\s,]+(?:haha\w*|hehe\w*|lol|lmao|xd|:-?\)|:-?d|;-?\)|<3)|\s*[{_EMOJI}]+)+\s*(?=[.!?]*$)", re.I
)


def trim_edges(sentence: str) -> str:
    """``sentence`` without what carries no fact at its edges (``_OPENING_MARKERS_RE``,
    ``_TRAILING_REACTION_RE``): "Oh, I adopted a cat last week haha!" -> "I adopted a cat last week!". A
    "Speaker: " prefix stays; the sentence itself when nothing would be left."""
    prefix = _SPEAKER_PREFIX_RE.match(sentence)
    head = prefix.group() if prefix and _names_someone(prefix.group()) else ""
    body = sentence[len(head) :]
    trimmed = _TRAILING_REACTION_RE.sub("", _OPENING_MARKERS_RE.sub("", body, count=1), count=1).strip()
    return head + trimmed if len(_WORD_RE.findall(trimmed)) >= _MIN_SENTENCE_WORDS else sentence


def capitalised(sentence: str) -> str:
    """``sentence`` opening with a capital when its first word is a lower-case word ("remind me to pay…"
    -> "Remind me to pay…"): a line of a summary reads as a sentence. An identifier or a name written in
    lower case on purpose ("pg_upgrade", "iPhone", "`npm`") stays. For what a summary shows (a speaker's
    line gets its "Speaker: " after), never for what is stored as a leaf."""
    if re.match(r"[a-z]+(?=[\s,.;:!?]|$)", sentence):
        return sentence[0].upper() + sentence[1:]
    return sentence


def _has_digit(text: str) -> bool:
    return any(ch.isdigit() for ch in text)


def _names_someone(prefix: str) -> bool:
    """A line's "Name: " prefix names a speaker: one word, or words that each open with a capital."""
    words = prefix.rstrip().rstrip(":").split()
    return len(words) == 1 or all(w[:1].isupper() for w in words)


def _with_speaker(sentence: str, name: str) -> str:
    if not name or sentence[: len(name) + 1].casefold() == name.casefold() + ":":
        return sentence
    return f"{name}: {sentence}"


def _candidates(
    children: Sequence[Child], cut: bool = False, leaves: bool = False, trim: bool = False
) -> tuple[list[_Candidate], list[dict[str, None]]]:
    """The sentences worth picking (``cut``: their ``clauses``; ``leaves``: also those of each child's
    ``Child.leaves``, after the child's own, under the child; ``trim``: without what carries no fact at
    their edges, ``trim_edges``, shown with a capital, ``capitalised``), and each child's content words
    (title included, of whole sentences) in order."""
    everything: list[_Candidate] = []
    child_words: list[dict[str, None]] = []
    seen: set[str] = set()
    for index, child in enumerate(children):
        words: dict[str, None] = dict.fromkeys(_feature_list(child.title)[0]) if child.title else {}
        speaker = " ".join((child.speaker or "").split())
        for whole in split_sentences(child.text):
            read = _feature_list(whole)
            words.update(dict.fromkeys(read[0]))
            for sentence in clauses(whole, prefixed=not speaker) if cut else [whole]:
                known = read if sentence is whole else None  # a sentence without a cut: read once
                everything.extend(_candidate(sentence, speaker, index, seen, known, trim=trim))
        child_words.append(words)
        if leaves:  # the leaves' own lines, under their child; their words are not the child's
            for leaf in central_leaves(child):
                name = " ".join((leaf.speaker or "").split())
                for whole in split_sentences(leaf.text):
                    for sentence in clauses(whole) if cut else [whole]:
                        if weak_opening(sentence) and not sentence.rstrip("*_ ").endswith((".", "!", "?")):
                            continue  # a heading or a list's label ("Courage and bravery", "**The Lens**")
                        everything.extend(
                            _candidate(sentence, name, index, seen, leaf=True, vector=leaf.vector, trim=trim)
                        )
    substantive = [c for c in everything if not c.fragment]
    return substantive or everything, child_words


def central(vectors: Sequence[Vectors | None], centre: Vectors | None, limit: int = LEAF_LINES) -> list[int]:
    """The indices of at most ``limit`` of ``vectors`` closest to ``centre`` (cosine), in their order; all
    when there are no more, evenly spread ones when there is no centre; a missing vector counts as far."""
    if len(vectors) <= limit:
        return list(range(len(vectors)))
    if centre is None:
        return sorted({int(i * len(vectors) / limit) for i in range(limit)})
    unit = _unit(centre)
    sims = np.array(
        [
            float(_unit(v) @ unit) if v is not None and np.asarray(v).size == unit.size else -2.0
            for v in vectors
        ]
    )
    return sorted(int(i) for i in np.argsort(-sims, kind="stable")[:limit])


def central_leaves(child: Child, limit: int = LEAF_LINES) -> tuple[Child, ...]:
    """``child.leaves``, at most ``limit`` of them: those closest to the child's vector (``central``)."""
    if len(child.leaves) <= limit:
        return child.leaves
    return tuple(
        child.leaves[i] for i in central([leaf.vector for leaf in child.leaves], child.vector, limit)
    )


def _candidate(
    sentence: str,
    speaker: str,
    child: int,
    seen: set[str],
    features: tuple[list[str], int] | None = None,
    leaf: bool = False,
    vector: Vectors | None = None,
    trim: bool = False,
) -> list[_Candidate]:
    """``sentence`` of child ``child`` as a candidate, or none when an identical line came first
    (identical children or repeated lines: one candidate, the first). ``features``: its
    ``_feature_list`` when already read."""
    if trim:
        trimmed = trim_edges(sentence)
        features = features if trimmed == sentence else None
        sentence = trimmed
        display = _with_speaker(capitalised(sentence), speaker)
    else:
        display = _with_speaker(sentence, speaker)
    key = " ".join(display.split()).casefold()
    if key in seen:
        return []
    seen.add(key)
    feats, size = features if features is not None else _feature_list(sentence)
    cost = count_tokens(display) + 1
    return [
        _Candidate(sentence, display, child, cost, frozenset(feats), size, is_filler(sentence), leaf, vector)
    ]


def _vector_texts(candidates: Sequence[_Candidate]) -> list[str]:
    """What is embedded for each candidate: a chat leaf's sentence as the summary shows it, "Caroline: I
    went ...", so the line a parent or a roll-up reads in this level's summary is the text already
    embedded (found remembered, not sent to the model again), as is a leaf's line above depth 1 (the
    same text its depth-1 level embedded); any other sentence as it is (its display is the sentence). A
    line with a stored vector (``_Candidate.vector``) is not embedded."""
    return [c.display for c in candidates if c.vector is None]


def _phrase_stop(speakers: frozenset[str]) -> frozenset[str]:
    return STOPWORDS | _FILLER_WORDS | _TITLE_NOISE | speakers


def _unit(vector: npt.NDArray[Any]) -> Vectors:
    out = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(out))
    return out / norm if norm > 1e-12 and math.isfinite(norm) else np.zeros_like(out)


def _child_weights(children: Sequence[Child]) -> list[float]:
    weights = [w if math.isfinite(w) and w > 0 else 0.0 for w in (c.weight for c in children)]
    return weights if any(weights) else [1.0] * len(children)


class ExtractiveSummariser:
    """Central, non-redundant sentences of the children, verbatim, as "- " bullets.

    Bullets rather than a paragraph: the sentences come from different speakers and documents, and a
    paragraph would read as a narrative nobody wrote. Deterministic: ties go to the earlier sentence.
    """

    name = "extractive"

    def __init__(
        self,
        embed: EmbedFn | None = None,
        *,
        ranking: str = "informative",
        apart_weight: float = keyphrase.APART_WEIGHT,
        specific_weight: float = SPECIFIC_WEIGHT,
        title_centre: str = "children",
        clauses: bool = True,
        leaf_lines: bool = True,
        trim: bool = True,
        overlap_weight: float = OVERLAP_WEIGHT,
    ) -> None:
        """``ranking="informative"`` (the default) weighs what a sentence carries beside how central it
        is and leaves out greetings, thanks and filler; ``"central"`` is the ranking before issue #18
        (centrality and MMR only), kept as the baseline ``bench/summaries.py`` measures against.
        ``apart_weight``: how much a title phrase's likeness to the levels beside this one counts
        against it (``keyphrase.title``; 0 names the level without looking at its neighbours).
        ``specific_weight``: how much a line's density in the level's own words counts, when a
        ``background`` is given (``_specific``; 0 ranks as without one). ``title_centre``: what a title's
        key phrases are scored against, the children's own vectors (``"children"``) or the mean of the
        sentences' vectors (``"sentences"``, the centre before session 12). ``clauses``: a line may be one
        clause of a sentence (``clauses``; False: whole sentences, as before session 13). ``leaf_lines``:
        above depth 1, the lines of each child's leaves (``Child.leaves``, where the caller gives them)
        are candidates beside the child's own (False: the children's lines only, as before session 14).
        ``trim``: a line shows without opening discourse markers and a trailing laugh or emoji
        (``trim_edges``) and opens with a capital (``capitalised``; False: verbatim, as before session 14).
        ``overlap_weight``: how much the share of a line's words another line says counts as their
        redundancy (``OVERLAP_WEIGHT``; 0: Jaccard only, as before session 14)."""
        if ranking not in ("informative", "central"):
            raise ValueError(f"unknown ranking {ranking!r}: 'informative' or 'central'")
        self.embed = embed
        self.ranking = ranking
        self.apart_weight = apart_weight
        self.specific_weight = specific_weight
        if title_centre not in ("children", "sentences"):
            raise ValueError(f"unknown title centre {title_centre!r}: 'children' or 'sentences'")
        self.title_centre = title_centre
        self.clauses = clauses
        self.leaf_lines = leaf_lines
        self.trim = trim
        self.overlap_weight = overlap_weight

    def _picked_candidates(self, children: Sequence[Child]) -> tuple[list[_Candidate], list[dict[str, None]]]:
        informative = self.ranking == "informative"
        candidates, child_words = _candidates(
            children,
            cut=informative and self.clauses,
            leaves=informative and self.leaf_lines,
            trim=informative and self.trim,
        )
        if any(c.vector is not None for c in candidates):
            # A leaf's stored vector stands for its lines when it is of the children's model (their
            # vectors' size; ``LEAF_VECTORS``); otherwise the line is embedded as any other.
            size = next((np.asarray(c.vector).size for c in children if c.vector is not None), -1)
            candidates = [
                c
                if c.vector is not None and LEAF_VECTORS and np.asarray(c.vector).size == size
                else c._replace(vector=None)
                for c in candidates
            ]
        if self.ranking == "informative":
            # Filler never makes a summary, nor opens one, unless the children hold nothing else.
            candidates = [c for c in candidates if not c.filler] or candidates
        return candidates, child_words

    def embed_calls(self, children: Sequence[Child], *, titled: bool = True) -> list[list[str]]:
        """The texts of each call ``summarise(children, ..., titled=titled)`` makes to ``embed``, in order
        (its sentences, then its key phrases): a caller embeds several levels' calls together before
        summarising them one by one (``embed.Remembering.prepare``). Read from the same steps
        ``summarise`` takes."""
        if self.embed is None:
            return []
        candidates, _ = self._picked_candidates(children)
        if not candidates:
            named = [Child(c.title, None) for c in children if c.title and c.title.strip()]
            return self.embed_calls(named, titled=titled) if named else []
        calls = [_vector_texts(candidates)]
        if self.ranking == "informative" and titled:
            texts, _speakers = self._phrase_texts(children, candidates)
            if texts is not None:
                phrases = keyphrase.candidates(texts, _phrase_stop(_speakers))
                if phrases:
                    calls.append(phrases)
        return calls

    def summarise(
        self,
        children: Sequence[Child],
        depth: int,
        *,
        apart: Vectors | None = None,
        titled: bool = True,
        background: Background | None = None,
    ) -> Summary:
        """``titled=False``: the caller keeps a title of its own (a digest's date), so none is looked
        for among key phrases (none is embedded); the summary still has the cheap word-based title.
        ``background``: the words of the source's levels (the compactor tells it above depth 1): a line
        dense in words the children share and the source's other levels do not ranks higher. It changes
        which lines are picked, never which texts are embedded."""
        bound = token_bound(depth)
        candidates, child_words = self._picked_candidates(children)
        if not candidates:
            named = [Child(c.title, None) for c in children if c.title and c.title.strip()]
            if not named:
                return Summary(FALLBACK_TITLE, _EMPTY_TEXT, self.name)
            return self.summarise(named, depth, apart=apart, titled=titled, background=background)
        weights = _child_weights(children)
        lexical = _lexical_centrality(candidates, child_words, weights)
        relevance, vectors, rows, distinct = self._relevance(children, candidates, weights, lexical)
        if self.ranking == "informative":
            relevance = _informative(candidates, relevance)
            if background is not None and self.specific_weight:
                relevance = relevance + self.specific_weight * _specific(candidates, child_words, background)
        # The central baseline ranks as before issue #18: Jaccard redundancy only.
        overlap = self.overlap_weight if self.ranking == "informative" else 0.0
        picked = _mmr(candidates, relevance, vectors, rows, distinct, bound, overlap)
        if self.ranking == "informative":
            picked = _no_greeting_first(
                candidates, relevance, vectors, rows, distinct, bound, picked, overlap
            )
        if picked:
            lines = [candidates[i].display for i in sorted(picked)]
        else:  # every sentence is longer than the bound: cut the most central one
            picked = [int(np.argmax(relevance))]
            lines = [truncate(candidates[picked[0]].display, bound - 1)]
        text = "\n".join(f"- {line}" for line in lines)
        title = _title(candidates, child_words, picked, weights)
        if titled and self.ranking == "informative" and vectors is not None and self.embed is not None:
            title = self._key_phrase_title(children, candidates, vectors, apart) or title
        return Summary(title, text, self.name)

    def _key_phrase_title(
        self,
        children: Sequence[Child],
        candidates: list[_Candidate],
        vectors: Vectors,
        apart: Vectors | None,
    ) -> str | None:
        """Key phrases closest to the level's centre and away from the closest of the levels beside it
        (``apart``), speakers left out: they are in every line and name no subject. The centre is the
        children's own vectors, weighted (``title_centre="children"``; the mean of the sentences' vectors
        where no child has one), or the mean of the sentences' vectors (``"sentences"``, as before session
        12): a chat's lines are embedded as "Speaker: sentence", and their mean leans to the speakers'
        names and the chatter. Mostly CJK text keeps the word-based title."""
        assert self.embed is not None
        texts, speakers = self._phrase_texts(children, candidates)
        if texts is None:
            return None
        centre = _unit(vectors.mean(axis=0))
        if self.title_centre == "children":
            own = [
                (w, _unit(c.vector))
                for c, w in zip(children, _child_weights(children), strict=True)
                if c.vector is not None and np.asarray(c.vector).size == centre.shape[0]
            ]
            if own and any(w > 0 for w, _ in own):
                centre = _unit(np.array([w for w, _ in own]) @ np.stack([v for _, v in own]))
        away = None
        if apart is not None and apart.ndim == 2 and len(apart) and apart.shape[1] == centre.shape[0]:
            away = np.asarray(apart, dtype=np.float32)
        found = keyphrase.title(
            texts,
            centre,
            self.embed,
            _phrase_stop(speakers),
            away,
            self.apart_weight,
        )
        return clean_title(found) if found else None

    @staticmethod
    def _phrase_texts(
        children: Sequence[Child], candidates: list[_Candidate]
    ) -> tuple[list[str] | None, frozenset[str]]:
        """The texts key phrases are taken from (None: mostly CJK, the word-based title stays) and the
        speakers' words (in every line, they name no subject)."""
        candidates = [c for c in candidates if not c.leaf] or candidates  # the level's own words
        prefixes = [_SPEAKER_PREFIX_RE.match(c.sentence) for c in candidates]
        texts = [
            c.sentence[m.end() :] if m else c.sentence for c, m in zip(candidates, prefixes, strict=True)
        ]
        texts += [c.title for c in children if c.title]
        names = [c.speaker for c in children if c.speaker] + [m.group() for m in prefixes if m]
        speakers = frozenset(w.casefold() for name in names for w in _WORD_RE.findall(name))
        if sum(len(_CJK_RUN_RE.findall(t)) for t in texts) > sum(len(t.split()) for t in texts) // 2:
            return None, speakers
        return texts, speakers

    def _relevance(
        self,
        children: Sequence[Child],
        candidates: list[_Candidate],
        weights: list[float],
        lexical: npt.NDArray[np.float64],
    ) -> tuple[npt.NDArray[np.float64], Vectors | None, npt.NDArray[np.intp], bool]:
        """Per-candidate relevance, the vector rows, each candidate's row (-1: none), rows distinct?"""
        child_rows: dict[int, int] = {}
        child_vectors: list[Vectors] = []
        for index, child in enumerate(children):
            if child.vector is not None:
                vector = _unit(child.vector)
                if not child_vectors or vector.shape == child_vectors[0].shape:
                    child_rows[index] = len(child_vectors)
                    child_vectors.append(vector)
        child_matrix = np.stack(child_vectors) if child_vectors else None

        if self.embed is not None:
            texts = _vector_texts(candidates)
            embedded = list(self.embed(texts)) if texts else []
            if len(embedded) != len(texts):
                raise ValueError(f"embed returned {len(embedded)} rows for {len(texts)} sentences")
            if embedded and any(
                c.vector is not None and c.vector.size != embedded[0].size for c in candidates
            ):
                candidates = [c._replace(vector=None) for c in candidates]  # another model's: embed them all
                texts = _vector_texts(candidates)
                embedded = list(self.embed(texts))
            rows_in = iter(embedded)
            matrix = np.stack([_unit(next(rows_in) if c.vector is None else c.vector) for c in candidates])
            rows = np.arange(len(candidates), dtype=np.intp)
            if child_matrix is not None and child_matrix.shape[1] == matrix.shape[1]:
                centroid = _unit(np.array([weights[i] for i in child_rows]) @ child_matrix)
            else:  # no child vectors (or another model's): each child's sentences share its weight
                per_child = Counter(c.child for c in candidates)
                share = np.array([weights[c.child] / per_child[c.child] for c in candidates])
                centroid = _unit(share @ matrix)
            return (matrix @ centroid).astype(np.float64), matrix, rows, True

        if child_matrix is None:
            return lexical, None, np.full(len(candidates), -1, dtype=np.intp), False
        centroid = _unit(np.array([weights[i] for i in child_rows]) @ child_matrix)
        row_scores = (child_matrix @ centroid).astype(np.float64)
        rows = np.array([child_rows.get(c.child, -1) for c in candidates], dtype=np.intp)
        # A child without a vector is neither central nor peripheral: it gets the average.
        scores = np.where(rows >= 0, row_scores[np.maximum(rows, 0)], float(row_scores.mean()))
        return scores + _LEXICAL_WEIGHT * lexical, child_matrix, rows, False


def _no_greeting_first(
    candidates: list[_Candidate],
    relevance: npt.NDArray[np.float64],
    vectors: Vectors | None,
    rows: npt.NDArray[np.intp],
    distinct: bool,
    bound: int,
    picked: list[int],
    overlap_weight: float = OVERLAP_WEIGHT,
) -> list[int]:
    """Pick again without the first line while it opens with a greeting ("Hey Mara, ...") or says
    little ("Kyoto planning time."), a few times: a summary is read from its first line."""
    relevance = relevance.copy()
    for _ in range(8):
        first = candidates[min(picked)].sentence if picked else ""
        if not picked or not weak_opening(first):
            return picked
        relevance[min(picked)] = -np.inf
        again = [
            i
            for i in _mmr(candidates, relevance, vectors, rows, distinct, bound, overlap_weight)
            if relevance[i] > -np.inf
        ]
        if not again:
            return picked
        picked = again
    return picked


_INFO_WEIGHT = 1.0  # the fast score (0..1) beside a cosine
_ASKED_WEIGHT = 0.5  # a request to be reminded (``asks_to_keep``) beside the fast score
_QUESTION_PENALTY = 0.8  # a question asks; the answer (its own sentence) carries the fact
_SELF_WEIGHT = 0.2  # the speaker tells of themselves: what a memory keeps
_ADDRESS_PENALTY = 0.2  # the line speaks to the other person: praise, advice, sympathy
_SELF_RE = re.compile(
    r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|we'd|we'll|us|our|ours|ourselves)\b"
    r"|[我咱]",
    re.IGNORECASE,
)
_ADDRESS_RE = re.compile(
    r"\b(?:you|you're|you've|you'd|you'll|your|yours|yourself|ya)\b|[你您]", re.IGNORECASE
)


def person(sentence: str) -> tuple[bool, bool]:
    """(tells of the speaker, speaks to the listener): a first-person word ("I", "my", "we", 我), a
    second-person one ("you", "your", 你). The speaker's prefix of a child summary's line is left out."""
    sentence = _SPEAKER_PREFIX_RE.sub("", sentence.replace("’", "'"), count=1)
    return bool(_SELF_RE.search(sentence)), bool(_ADDRESS_RE.search(sentence))


def _informative(candidates: list[_Candidate], central: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Centrality (a cosine) plus what each sentence carries, less questions; a line in which the
    speaker tells of themselves ("I adopted a second cat in May") gains, one that speaks to the listener
    ("You're so brave!", "I'm so proud of you") loses: in a conversation the first are the facts, the
    second reactions to them (LoCoMo dev: 37% of first-person statements state a reference fact, 8% of
    lines with "you"). Centrality is not rescaled: within a node of near-identical vectors a min-max
    scale would blow noise up to 0..1."""
    info = np.array([information(c.sentence) for c in candidates])
    asked = np.array([asks_to_keep(c.sentence) for c in candidates], dtype=np.float64)
    asks = np.array([c.sentence.rstrip().endswith(("?", "？")) for c in candidates], dtype=np.float64)
    persons = np.array([person(c.sentence) for c in candidates], dtype=np.float64).reshape(-1, 2)
    return (
        central
        + _INFO_WEIGHT * info
        + _ASKED_WEIGHT * asked
        - _QUESTION_PENALTY * asks
        + _SELF_WEIGHT * persons[:, 0]
        - _ADDRESS_PENALTY * persons[:, 1]
    )


# A shorter line is counted as this long: "LeBron." is no denser than "I love LeBron."
_SPECIFIC_MIN_WORDS = 4


def _specific(
    candidates: list[_Candidate], child_words: list[dict[str, None]], background: Background
) -> npt.NDArray[np.float64]:
    """How densely each line speaks of what sets the level apart, scaled so the densest line is 1: over
    its content words, the share of the children using the word times its ``rarity`` among the source's
    levels, summed and divided by the line's length in words. A short line naming the children's common
    subject ("Joanna: Got any favourite flavours for dairy-free desserts?") then ranks above a long one of
    words every level uses ("I love how it makes me feel so motivated and hopeful").

    Above depth 1 the children's lines are their best already; the fast score and centrality hardly
    tell which of them state the facts under a level (LoCoMo dev, architecture.md), while the level's
    own words do: a reference fact names its subject, as a line dense in the subject's words does."""
    share: Counter[str] = Counter()
    for words in child_words:
        share.update(words.keys())
    count = max(len(child_words), 1)
    weight = {w: share[w] / count * background.rarity(w) * _script_weight(w) for w in share}
    density = np.array(
        [
            sum(weight.get(f, 0.0) for f in c.features) / max(_words_of(c), _SPECIFIC_MIN_WORDS)
            for c in candidates
        ]
    )
    top = float(density.max()) if len(density) else 0.0
    return density / top if top > 0 else density


# CJK has no spaces, so its features are character pairs (``_feature_list``), and a line of them would be
# "all content": every character sits in two pairs and no stop word is left out, so a Chinese aside in a
# mostly English level outranked every English line on specificity (the sample vault's rent reminder
# lost to "换个话题：陈静下周拿到新的 MacBook…"). For specificity a pair counts half (each character once),
# a pair with a function character (的, 了, 我, 吗…, the CJK stop words) not at all, and a line's length
# counts ``CJK_CHARS_PER_WORD`` (1.5, the fast score's) CJK characters as a word. A Chinese line then
# has as many weighted features per word as an English one: 0.47 on the 64 Chinese sentences of
# tests/data/entities_gold.jsonl against 0.47 content words per word on LoCoMo dev's lines (0.83 before).
_CJK_PAIR_WEIGHT = 0.5
_CJK_STOP = keyphrase.CJK_STOP


def _words_of(candidate: _Candidate) -> float:
    """The candidate's length in words for ``_specific``: ``CJK_CHARS_PER_WORD`` CJK characters a word."""
    if candidate.sentence.isascii():
        return float(candidate.words)
    cjk = len(_CJK_RE.findall(candidate.sentence))
    return candidate.words - cjk + cjk / CJK_CHARS_PER_WORD


def _script_weight(feature: str) -> float:
    """What a feature counts for in ``_specific``: 1 for a word, ``_CJK_PAIR_WEIGHT`` for a CJK pair, 0
    for a pair with a CJK stop character."""
    if not _is_cjk(feature):
        return 1.0
    if any(ch in _CJK_STOP for ch in feature):
        return 0.0
    return _CJK_PAIR_WEIGHT


def _lexical_centrality(
    candidates: list[_Candidate], child_words: list[dict[str, None]], weights: list[float]
) -> npt.NDArray[np.float64]:
    """Cosine of each sentence's word set with the weighted number of children using each word.

    Counting children rather than occurrences keeps one long, repetitive child from owning the topic.
    """
    frequency: dict[str, float] = defaultdict(float)
    for words, weight in zip(child_words, weights, strict=True):
        for feature in words:
            frequency[feature] += weight
    norm = math.sqrt(sum(f * f for f in frequency.values())) or 1.0
    return np.array(
        [
            sum(frequency.get(f, 0.0) for f in c.features) / (math.sqrt(len(c.features)) * norm)
            if c.features
            else 0.0
            for c in candidates
        ]
    )


def _mmr(
    candidates: list[_Candidate],
    relevance: npt.NDArray[np.float64],
    vectors: Vectors | None,
    rows: npt.NDArray[np.intp],
    distinct: bool,
    bound: int,
    overlap_weight: float = OVERLAP_WEIGHT,
) -> list[int]:
    """Maximal marginal relevance within ``bound`` tokens; returns candidate indices in pick order.

    Redundancy is the largest of vector cosine, word-set Jaccard and ``overlap_weight`` times the share
    of the smaller word set the two lines share, computed against each new pick only.
    Sentences that inherit one child's vector would have cosine 1 with each other, which says nothing;
    they count as alike as the pick's child is to its median sibling. With 0 instead, the sentences of
    the first child picked would beat every other child's, and a long central chunk would fill the bound.
    """
    count = len(candidates)
    costs = np.array([c.cost for c in candidates])
    sizes = np.array([len(c.features) for c in candidates], dtype=np.float64)
    postings: dict[str, list[int]] = defaultdict(list)
    for index, candidate in enumerate(candidates):
        for feature in candidate.features:
            postings[feature].append(index)
    redundancy = np.zeros(count)
    available = np.ones(count, dtype=bool)
    picked: list[int] = []
    remaining = bound
    while True:
        eligible = available & (costs <= remaining)
        if not eligible.any():
            return picked
        scores = np.where(eligible, _MMR_LAMBDA * relevance - (1 - _MMR_LAMBDA) * redundancy, -np.inf)
        best = int(np.argmax(scores))  # first maximum: ties go to the earlier sentence
        if scores[best] == -np.inf:  # only sentences ruled out are left (argmax would pick one again)
            return picked
        picked.append(best)
        available[best] = False
        remaining -= int(costs[best])

        features = candidates[best].features
        if features:
            hits = [postings[f] for f in features]
            shared = np.bincount(np.concatenate(hits), minlength=count).astype(np.float64)
            jaccard = shared / np.maximum(sizes + len(features) - shared, 1.0)
            overlap = shared / np.maximum(np.minimum(sizes, len(features)), 1.0)
        else:
            jaccard = overlap = np.zeros(count)
        available &= jaccard < _DUPLICATE_JACCARD
        similarity = np.maximum(jaccard, overlap_weight * overlap)
        row = int(rows[best])
        if vectors is not None and row >= 0:
            row_cosine = (vectors @ vectors[row]).astype(np.float64)
            if not distinct:
                siblings = np.delete(row_cosine, row)
                row_cosine[row] = float(np.median(siblings)) if siblings.size else 0.0
            cosine = np.where(rows >= 0, row_cosine[np.maximum(rows, 0)], 0.0)
            if distinct:
                available &= cosine < _DUPLICATE_COSINE
            similarity = np.maximum(similarity, cosine)
        np.maximum(redundancy, similarity, out=redundancy)


# A lead-in that opens a Chinese line and names nothing: "提醒一下：" (a reminder:), "换个话题，" (to change the
# subject,), "对了，" (oh right,). Only before a colon or comma: "提醒我…" (remind me…) is the request itself.
_CJK_LEAD_IN_RE = re.compile(
    r"^(?:提醒一下|提醒下|顺便说一下|顺便问一下|顺便提一下|顺便|对了|另外|还有|换个话题|换个话题吧|话说|说起来|"
    r"其实|那个|请记住|记住|注意|补充一下|更新一下|总之|总而言之|首先|然后|最后|所以|不过|好的|好吧|嗯|哦)"
    r"\s*[：:，,、]\s*"
)


def _cjk_title_start(sentence: str) -> str:
    """Where a Chinese title taken from ``sentence`` starts: after a speaker's prefix ("Chen Jing: ", on a
    child summary's line), after lead-ins that name nothing (``_CJK_LEAD_IN_RE``) and after function
    characters (``CJK_STOP``: 我, 的, 了…) opening what is left. "提醒一下：我3月24日到26日请假（搬家）" (a reminder:
    I … 24 to 26 March leave (moving)) is titled from "3月24日…", not "提醒一下 我3月"."""
    rest = _SPEAKER_PREFIX_RE.sub("", sentence, count=1).strip()
    while True:
        lead = _CJK_LEAD_IN_RE.match(rest)
        if not lead or not rest[lead.end() :].strip():
            break
        rest = rest[lead.end() :]
    stripped = rest.lstrip("".join(_CJK_STOP))
    return stripped if _CJK_RE.search(stripped) else rest


def _cjk_head(sentence: str) -> str:
    """The start of a mostly CJK sentence (from ``_cjk_title_start``): CJK runs cut at a character (each
    is a word), other words kept whole, about ``_TITLE_CJK_CHARS`` characters in all. Runs written
    together stay together ("3月24日", "v2版本"); a space stands where the sentence had a space or
    punctuation."""
    sentence = _cjk_title_start(sentence)
    out = ""
    size = 0
    end = 0
    for match in re.finditer(rf"[{_CJK}]+|[^\W_{_CJK}]+", sentence):
        run = match.group()
        if _CJK_RE.match(run):
            room = max(0, _TITLE_CJK_CHARS - size)
            if not room and out and match.start() == end and run[0] in _CJK_UNITS:
                room = 1  # a number keeps the unit written after it: "26日", never "26"
            run = run[:room]
        elif size + len(run) > _TITLE_CJK_CHARS and out:
            break
        if not run:
            break
        out += run if match.start() == end or not out else " " + run
        size += len(run)
        end = match.end()
    return out


def _title(
    candidates: list[_Candidate], child_words: list[dict[str, None]], picked: list[int], weights: list[float]
) -> str:
    """2-3 content words: those in the summary first, then by how many children use them, then order.

    Mostly CJK text has no spaces to find words by, so it gets the start of the most central sentence.
    """
    in_summary: set[str] = set()
    for index in picked:
        in_summary.update(candidates[index].features)
    spread: dict[str, float] = defaultdict(float)
    uses: Counter[str] = Counter()
    first: dict[str, int] = {}
    cjk = 0
    for words, weight in zip(child_words, weights, strict=True):
        for word in words:
            if not word.isascii() and _CJK_RE.match(word):
                cjk += 1
            elif len(word) > 2 and word.replace("'", "").isalpha():
                spread[word] += weight
                uses[word] += 1
                first.setdefault(word, len(first))
    if cjk > 2 * len(first):
        top = candidates[picked[0]].sentence if picked else candidates[0].sentence
        title = clean_title(_cjk_head(top))
    else:
        ranked = sorted(spread, key=lambda w: (w not in in_summary, -spread[w], -uses[w], first[w]))
        title = clean_title(" ".join(ranked[:_TITLE_WORDS]))
    return title or FALLBACK_TITLE


# The retry is shorter in every part, because the usual failure is a slow model on a long prompt.
