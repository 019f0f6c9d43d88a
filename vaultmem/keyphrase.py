"""Titles that name a level's subject: key phrases scored against the level's centroid (KeyBERT-style).

Owns: the candidate phrases of a set of texts (runs of 1-3 content words between stopwords and
punctuation, in their most frequent original casing, so "Kyoto", "LGBTQ" and "Dr Alvarez" stay as
written), their scores (cosine of each phrase's vector with the level's centroid, with maximal marginal
relevance so two phrases of a title say different things) and the title made of them: 2-6 whole words.

Must never: cut a word (a title is made of whole candidate words), return a placeholder (it returns
``None`` and the caller keeps its own title), open a title with an identifier when a phrase of words is
found (``is_identifier``), or embed more than ``MAX_CANDIDATES`` phrases per title.
Mostly CJK text has no spaces to find phrases by; the caller titles it. In mixed text a CJK run longer
than ``_CJK_WORD_MAX`` characters is a clause, not a word, and is never part of a phrase; so is a short
one written right after a Latin word or a number (``_runs``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

EmbedFn = Callable[[list[str]], npt.NDArray[np.float32]]

MAX_CANDIDATES = 48  # phrases embedded per title: bounds the cost of a title
MAX_WORDS = 6
MAX_PHRASES = 3  # a title joins up to this many different phrases, within MAX_WORDS
# How much a phrase's likeness to the levels beside this one counts against it: a title names what sets
# its level apart, not what a whole conversation is about (tuned on LoCoMo dev, ``bench/summaries.py``).
APART_WEIGHT = 0.5
_MMR_LAMBDA = 0.6
_WORD_RE = re.compile(r"[^\W\d_](?:[\w'’.&+-]*[^\W_])?|\d+(?:[.,]\d+)*")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
# CJK is written without spaces: a run of CJK characters between spaces or punctuation is a word only
# when short (a name, a term: 陈静, 鼠须管); a longer one is a clause and ends a phrase. A short run with
# a function character (CJK_STOP: 的, 了, 我, 个…) is a clause too ("我记得", I remember; "换个话题",
# change of subject): it names no subject.
_CJK_WORD_MAX = 4
CJK_STOP = frozenset(
    "的了是在我你他她它们這这那个個和就也都与與及着著吗嗎呢吧啊呀哦嗯把被给給很还還又么麼之而其或等从從让讓得地您咱"
)
# A full stop ends a run only before a space or the end, so "v0.9.3" and "e.g" stay whole words. CJK
# punctuation (，。、；：！？「」（）…) ends a run as its ASCII forms do.
_BREAK_RE = re.compile(
    r"[,;:!?()\[\]{}\"“”«»|/\\<>=*#`~—–，。、；：！？「」『』（）【】《》〈〉…]+|\.+(?=\s|$)|\s-\s"
)


# An identifier: a word joined by "_" (``tidepool_webhook_worker_panics_total``, ``WEBHOOK_MAX_BYTES``) or
# longer than any word a person writes in a title. Close to a level's centre (it is what the lines
# repeat), but it reads as code: a title never opens with one (``title``).
_IDENTIFIER_CHARS = 24


def is_identifier(phrase: str) -> bool:
    """``phrase`` holds a word joined by "_" or longer than ``_IDENTIFIER_CHARS`` characters."""
    return any("_" in word.strip("_") or len(word) > _IDENTIFIER_CHARS for word in phrase.split())


def _runs(text: str, stop: frozenset[str]) -> Iterable[list[str]]:
    """Runs of content words: a stopword, a filler word, punctuation or a change of script ends a run.
    A short CJK run written right after a Latin word or a number (no punctuation between) is no word: in
    Chinese with code or English in it, that is the predicate about it ("把 page_size 改成 9", set page_size
    to 9; "Rust 重写"), not a name; and a CJK run and a Latin word are never one phrase."""
    for piece in _BREAK_RE.split(text):
        run: list[str] = []
        script = False  # the run's words are CJK
        after_latin = False  # the word before this one in the piece is a Latin word or a number
        for word in _WORD_RE.findall(piece):
            cjk = bool(_CJK_RE.search(word))
            clause = cjk and (after_latin or len(word) > _CJK_WORD_MAX or any(ch in CJK_STOP for ch in word))
            after_latin = not cjk
            if word.casefold() in stop or len(word) < 2 or word.isdigit() or clause:
                if run:
                    yield run
                run = []
            else:
                if run and cjk != script:
                    yield run
                    run = []
                run.append(word)
                script = cjk
        if run:
            yield run


def candidates(texts: Sequence[str], stop: frozenset[str], limit: int = MAX_CANDIDATES) -> list[str]:
    """Phrases of 1-3 words found in ``texts``, most used first (by how many texts use them, then
    length); each in the casing it is most often written in."""
    uses: Counter[str] = Counter()
    forms: dict[str, Counter[str]] = {}
    first: dict[str, int] = {}
    for text in texts:
        seen: set[str] = set()
        for run in _runs(text, stop):
            for size in (1, 2, 3):
                for i in range(len(run) - size + 1):
                    phrase = " ".join(run[i : i + size])
                    key = phrase.casefold()
                    forms.setdefault(key, Counter())[phrase] += 1
                    first.setdefault(key, len(first))
                    if key not in seen:
                        seen.add(key)
                        uses[key] += 1
    ranked = sorted(uses, key=lambda k: (-uses[k], -len(k.split()), first[k]))
    return [forms[k].most_common(1)[0][0] for k in ranked[:limit]]


def title(
    texts: Sequence[str],
    centroid: npt.NDArray[np.float32],
    embed: EmbedFn,
    stop: frozenset[str],
    apart: npt.NDArray[np.float32] | None = None,
    apart_weight: float = APART_WEIGHT,
) -> str | None:
    """A title of 2-6 whole words naming what ``texts`` are about, or ``None`` when none is found.

    With ``apart`` (the vectors of the levels beside this one, one per row) a phrase scores its cosine
    with ``centroid`` less ``apart_weight`` times its cosine with the closest of them: among many levels of
    one chat, "Kyoto ryokan" beats "trip" that every level of the chat shares.

    The best phrase (closest to ``centroid``) comes first; up to ``MAX_PHRASES`` different phrases (by
    maximal marginal relevance) follow while the title has fewer than 2 words or they fit in
    ``MAX_WORDS`` (so "Kyoto ryokan, rent reminder" can say that a level holds two things). Longer
    titles name their level better among many (LoCoMo dev, ``bench/summaries.py``: see
    docs/architecture.md, "Titles")."""
    phrases = candidates(texts, stop)
    if not phrases:
        return None
    vectors = np.asarray(embed(phrases), dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.maximum(norms, 1e-12)
    center = np.asarray(centroid, dtype=np.float32)
    center = center / max(float(np.linalg.norm(center)), 1e-12)
    relevance = vectors @ center
    if apart is not None and len(apart):
        away = np.asarray(apart, dtype=np.float32).reshape(-1, vectors.shape[1])
        away = away / np.maximum(np.linalg.norm(away, axis=1, keepdims=True), 1e-12)
        # Against the closest of them: a phrase that names a neighbour as well names neither.
        relevance = relevance - apart_weight * (vectors @ away.T).max(axis=1)
    # Longer phrases say more: a small bonus per word, so "pottery class" beats "pottery" when close.
    relevance = relevance + 0.03 * np.array([len(p.split()) - 1 for p in phrases])
    # A title is read from its first phrase: words lead it, an identifier may follow them.
    worded = np.array([not is_identifier(p) for p in phrases])
    best = int(np.argmax(np.where(worded, relevance, -np.inf))) if worded.any() else int(np.argmax(relevance))
    chosen = [best]
    words = len(phrases[best].split())
    redundancy = vectors @ vectors[best]
    scores = _MMR_LAMBDA * relevance - (1 - _MMR_LAMBDA) * redundancy
    used = {w.casefold() for w in phrases[best].split()}
    for index in np.argsort(-scores, kind="stable"):
        i = int(index)
        if i == best:
            continue
        extra = phrases[i].split()
        if {w.casefold() for w in extra} & used:
            continue
        if words < 2 or words + len(extra) <= MAX_WORDS:
            chosen.append(i)
            words += len(extra)
            used |= {w.casefold() for w in extra}
            if len(chosen) < MAX_PHRASES:
                continue
        break
    if words < 2 and len(chosen) == 1:
        return phrases[best] if len(phrases[best]) > 2 else None
    text = ", ".join(phrases[i] for i in chosen)
    return " ".join(text.split()[:MAX_WORDS]).rstrip(",")
