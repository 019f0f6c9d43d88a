"""Hybrid search: FTS5 BM25 (words and CJK trigrams) fused with cosine similarity.

Owns query parsing (a user's text never reaches FTS5 as syntax: every term is quoted), the filters,
and the fusion (weighted reciprocal rank). Vectors come from an in-memory ``VectorCache`` refreshed
incrementally from chunks.db. Read-only: never writes the index or the vault.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from vaultmem import ann, index, timeparse
from vaultmem import graph as leafgraph
from vaultmem.db import NAV, WORDS_TOKENIZER, chunks_generation, write_stamp
from vaultmem.embed import Embedder, one_blas_thread
from vaultmem.errors import InvalidInput
from vaultmem.graph import LeafGraph, SessionOrder
from vaultmem.model import Status, format_ts, utc
from vaultmem.timeparse import TimeRange
from vaultmem.vectors import MatrixFile, VectorCache, epoch

# Fusion constants, tuned on the LoCoMo dev split (bench/retrieval.py; figures in docs/architecture.md).
RRF_K = 10
# A turn next to a strong hit in the same session gets this share of the hit's score: answers and the
# facts they rest on sit in adjacent turns of a conversation (and adjacent sections of a document).
NEIGHBOR_WEIGHT = 0.45
NEIGHBOR_FULL_TOKENS = 64
MAX_QUERY_TERMS = 64
# From this many rows in the word index, BM25 leaves out a query word on half of them or more
# (``Searcher._scored_words``): never in a vault the size of the LoCoMo dev benchmark.
PRUNE_ABOVE = 20_000
# From PRUNE_ABOVE rows, BM25 scores at most the latest this many rows holding a query word, plus every
# row of a word on at most this many rows (``Searcher._window``).
BM25_WINDOW = 1_000
# A leaves-only ranking picks the best rows of the word index plus this many at most before reading their
# kind (``Searcher._others``), instead of reading the kind of every row that matches.
OVERFETCH = 2_000
# A leaf said or written by someone the query names ("what did Diego say on 17 March") gains this share of
# its fused score: a remark *about* Diego must not outrank Diego's own words (the name is in both).
SPEAKER_BOOST = 0.5
# A query that names a speaker is ranked by cosine with the vector of the query without the name (a mix
# of the two vectors, this share name-free): in MiniLM's vector of a short question the name dominates
# ("What is Caroline's identity?" was nearest "Caroline: Cool! What did it look like?", a turn embedded
# with its speaker's name), and the speaker rule already favours the named speaker. LoCoMo dev (997
# questions, bench/variants.py): C@1024 0.867 -> 0.880 (0.876 at 0.5), R@10 0.752 -> 0.808, no category
# down; one more forward pass per such query (docs/architecture.md, "The question without the name").
UNNAMED_QUERY = 1.0
# A question in the first person ("how many appointments did I go to", "my", "me") asked of a chat between a
# user and an assistant (leaves of role "user" and of another role among the candidates) is about the user:
# the other roles' turns (the assistant's replies) have their fused scores divided by 1 + FIRST_PERSON_BOOST
# (``Searcher._boost_speakers``); leaves without a role (notes, documents, mail) keep theirs.
# The assistant's long replies repeat a topic's words, the user's short reports hold the facts. No-op when the
# query names a speaker, asks what the assistant said ("you", but see FIRST_PERSON_REQUESTS) or the candidates
# are not a user/other-role pair (a chat between named people: LoCoMo dev identical). LongMemEval dev, 20
# haystacks: C@1024 multi-session 0.509 -> 0.861, temporal-reasoning 0.758 -> 0.909 (plateau from 2 to 4); all
# 40, C@1024 0.869 -> 0.894 with value-per-token filling on, no question type down (docs/architecture.md, "The
# people a question is about").
FIRST_PERSON_BOOST = 2.0
# A question about two people ("what do Melanie and Caroline both like", "what movies have Joanna and Nate
# seen") asks for a fact of each: each person's own leaves, in the order the fused ranking gives them, are a
# ranking of their own, fused into it with this weight, so each person's best hits reach the top and one
# person's many matches cannot crowd out the other's (``Searcher._split_people``). 0: off. LoCoMo dev: every
# C@1024/C@2048 figure identical at 0.5, 1 and 2 (docs/architecture.md, "The people a question is about").
SPLIT_WEIGHT = 0.0
# A question about a speaker (``Speakers.subject``: "what activities does Melanie partake in") also gets a
# cosine ranking over that speaker's own leaves only, fused like the feedback's rankings (skipped for time
# questions, below the first round's best PRF_KEEP) with this weight: the other speaker's turns on the topic
# cannot fill the vector pool (no forward pass). 0: off. LoCoMo dev at 0.5: C@1024 0.885 -> 0.888, multi-hop
# 0.614 -> 0.625, open-domain 0.587 -> 0.617, but single-hop 0.943 -> 0.939 (15 up / 8 down); at 1.0 adversarial
# 0.956 -> 0.935 (docs/architecture.md, "The people a question is about").
SPLIT_VECTOR = 0.0
# True: the first-person prior reranks like a named speaker's (the plain ranking fused with the boosted one,
# the user's best match first); False (shipped): the replies' scores are divided, nothing else (at 1.0,
# multi-session C@1024 0.639 fused, 0.824 with the user's scores multiplied, the same order).
FIRST_PERSON_FUSED = False
# The first-person prior also takes a question that asks the assistant for advice now, about the user's own
# situation ("can you suggest accessories for my phone", "I'm anxious about Tokyo, do you have any tips"):
# the advice rests on what the user said of themself. Not one that asks what the assistant said ("the trail
# you recommended", "can you remind me", "our previous chat"): ``first_person``. LongMemEval dev, all 40:
# preference 0.667 -> 1.000 at 1,024 tokens (3 questions), 1 up / 0 down, every other type identical.
FIRST_PERSON_REQUESTS = True
# Under the first-person prior the reply that directly follows the user's best-matching turn keeps its score
# when the question says the user got something ("what recipe did I get for lasagna", "what was I told"):
# the question is about the user, but what they got may be in the answer to their request (1); 2: for every
# first-person question; 0: off. No such question in LongMemEval dev: at 1 its contexts are identical (one
# evidence turn leaves the top 5 for the top 10), at 2 R@5 0.825 -> 0.794 (the reply to the best user turn is
# often the long one repeating the question's words). Test: test_people.py, "what did I get".
FIRST_PERSON_ANSWER = 1
# Judge a hit's evidence cosine (and ``weak``) by the vector the leaves are ranked by (the name-free one)
# instead of the whole query's: one forward pass for a query naming a speaker instead of two (LoCoMo conv-30
# search p50 34 -> 21 ms), but the name-free cosine of true evidence is lower and one floor no longer
# separates it from off-topic hits (bench/weak.py at 0.30: true evidence weak 0.028 -> 0.116, questions
# with all 10 hits weak 0.000 -> 0.029): off (docs/architecture.md, "One forward pass for a named question").
EVIDENCE_UNNAMED = False
# Graph propagation (``graph.LeafGraph``): Personalized PageRank from the best GRAPH_SEEDS fused leaves
# (weighted by their scores) and the entities the query names; its ranking is fused with this weight.
GRAPH_WEIGHT = 1.0
GRAPH_SEEDS = 10
# Pseudo-relevance feedback (a second round from what the first hits reveal, no LLM, no forward pass).
# Rocchio on vectors: the query vector moved toward the mean vector of the best PRF_DOCS fused hits by
# PRF_BETA, its cosine ranking fused with weight PRF_VECTOR. Terms: the PRF_TERMS words the best hits share
# (each on at least two of them) that the query lacks, by idf, added to a second BM25 round fused with
# weight PRF_WORDS. Measured in docs/architecture.md ("Feedback from the first hits", "Feedback that keeps
# the first round's best"): Rocchio ships at 0.5, skipping time questions and below the best 5 (LoCoMo dev
# C@1024 0.880 -> 0.885, multi-hop 0.583 -> 0.614, no category falling); the words round stays off.
PRF_DOCS = 5
PRF_BETA = 1.0
PRF_VECTOR = 0.5
PRF_TERMS = 0
PRF_WORDS = 0.0
# Feedback skips a question asking for a time, a duration or an order (``timeparse.asks_time``): its answer
# is often a terse turn ("I've had them for 3 years now") that the moved vector ranks below the topic's
# richer turns (LoCoMo temporal 0.957 -> 0.938 with feedback on every question). True: feedback on those too.
PRF_ON_TIME = False
# Feedback skips a question naming a time window ("two weeks ago", "in May 2023"; ``timeparse.find_range``)
# and a ranking restricted to one (``since``/``until``), as for a time question. True: feedback on those too.
PRF_ON_NAMED_TIME = False
# Feedback fills in below the first round's best PRF_KEEP hits and never displaces them (0: it may): what
# the first round ranks highest keeps its place (without it adversarial 0.956 -> 0.947 at 0.5).
PRF_KEEP = 5
# Rocchio ranks only the first round's candidates, each scored exactly, instead of every vector (a second
# vector search: +3-4 ms search p50 at 100,000 leaves). LoCoMo dev: every C@1024/C@2048 figure identical.
PRF_WITHIN = True
# Level-guided candidates (issue 19, session 12): the question's vector against the depth-1 levels (the
# summaries whose children are leaves, vectors already in the index); of the best LEVEL_TOP levels, each
# one's LEVEL_LEAVES leaves closest to the question, in the levels' order, are a ranking fused like the
# feedback's (same gate, below the kept best) with weight LEVEL_WEIGHT. It reaches a turn whose own words
# and vector say little but whose stretch of talk is about the question ("activities with her family"),
# in sessions the first round missed. LEVEL_SUBJECT: only leaves said by the speakers the question is about.
# 0: off. LoCoMo dev at 0.5 (feedback round): open-domain 0.587 -> 0.606-0.629, multi-hop 0.614 -> 0.617-0.627,
# but single-hop or adversarial falls at 1,024 tokens in every setting (docs/architecture.md, "Level-guided
# candidates"); no levels in a vault not yet compacted: nothing added.
LEVEL_WEIGHT = 0.0
LEVEL_TOP = 20
LEVEL_LEAVES = 1
LEVEL_SUBJECT = False
# LEVEL_KEEP > 0: the list is fused last (after the walk, neighbours and speakers), below the final ranking's
# best LEVEL_KEEP hits, so it only adds candidates; 0: fused in the feedback round (below its PRF_KEEP).
LEVEL_KEEP = 0
# LEVEL_SPREAD False: the level list's share of a leaf's score neither spreads to its neighbours
# (``_spread_to_neighbors``) nor makes it a seed of the walk (``_propagate``): a listed leaf comes alone, not
# with the turns around it. LEVEL_NOVEL > 0: only levels holding none of the first round's best LEVEL_NOVEL
# leaves give a leaf (the walk and the neighbours already reach those). LEVEL_HEAD > 0: the ranking is also
# made without the level list (every other step the same) and its first LEVEL_HEAD leaves lead the final
# ranking in their order; the list's leaves join below (R@5 kept). LoCoMo dev: spread off loses the gains
# (they come with the listed leaves' neighbours); LEVEL_NOVEL 10 lifts multi-hop and open-domain with no
# category falling at 1,024 tokens, but 8, 12, 15 and 20 each drop one: a fit to dev, so all stay off
# (docs/architecture.md, "Level candidates at the budget's edge").
LEVEL_SPREAD = True
LEVEL_NOVEL = 0
LEVEL_HEAD = 0
# A hit that holds little of the query's words is weak below this cosine, per embedding model. Measured on
# LoCoMo and LongMemEval (bench/weak.py; docs/architecture.md, "Weak matches").
WEAK_BELOW = {"sentence-transformers/all-MiniLM-L6-v2": 0.30}
WEAK_BELOW_DEFAULT = 0.30  # other models: the same until measured (bench/weak.py)


# ... unless it holds at least this share of what the query is about (idf-weighted content words).
WEAK_COVERAGE = 0.5


# A summary line's bullet and "Speaker: " prefix (what the extractive summariser adds to a leaf's sentence).
_QUOTE_RE = re.compile(r"^-\s+(?:[^\W\d_][\w .'-]{0,39}:\s+)?")

# A window whose year the query left out ("in June", "on 17 March") moves back a year at a time, at most
# this many, to the latest such window in which the vault holds memories.
YEARS_BACK = 10


def remembered_window(conn: sqlite3.Connection, window: TimeRange) -> TimeRange:
    """``window``, or for a yearless phrase the latest earlier year's window holding a leaf: "in June"
    asked of memories that stop in 2023 means June 2023, not an empty June of this year."""
    if not window.yearless:
        return window
    row = conn.execute("SELECT min(ts) FROM chunks WHERE kind = 'leaf' AND ts IS NOT NULL").fetchone()
    oldest = row[0] if row else None
    for n in range(YEARS_BACK + 1):
        shifted = window.years_back(n) if n else window
        end = format_ts(shifted.end)
        if oldest is None or (end is not None and end <= oldest):
            break
        if conn.execute(
            "SELECT 1 FROM chunks WHERE kind = 'leaf' AND ts >= ? AND ts < ? LIMIT 1",
            [format_ts(shifted.start), end],
        ).fetchone():
            return shifted
    return window


# What was said in the time window a query names is fused with what the whole vault ranks, the window's
# ranking counting this many times more. Putting the window's hits strictly first (as before) buried the
# best match when the named date is a reference point ("how long since X, as of November") or when an
# event was reported weeks later; the fusion keeps both near the top (LoCoMo dev C@1024 0.840 -> 0.842).
WINDOW_WEIGHT = 2.0


def merge_window(first: Sequence[Hit], found: Sequence[Hit]) -> list[Hit]:
    """The hits of the time window the query names (``first``) fused with those of the whole vault
    (``found``) by weighted reciprocal rank; scores are the fused ones."""
    score: dict[str, float] = {}
    by_id: dict[str, Hit] = {}
    for ranking, weight in ((first, WINDOW_WEIGHT), (found, 1.0)):
        for rank, hit in enumerate(ranking, 1):
            by_id.setdefault(hit.id, hit)
            score[hit.id] = score.get(hit.id, 0.0) + weight / (RRF_K + rank)
    return [replace(by_id[i], score=score[i]) for i in sorted(score, key=lambda i: (-score[i], i))]


def weak_below(model_id: str) -> float:
    return WEAK_BELOW.get(model_id, WEAK_BELOW_DEFAULT)


def _idf(df: int, n: int) -> float:
    """BM25's idf: a word on every leaf weighs almost nothing, one on none weighs most."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


_WORD_RE = re.compile(r"[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")


@dataclass(frozen=True)
class Filters:
    source: str | None = None
    session: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    kind: str | None = None  # "leaf" or "summary"
    status: str | None = None
    entity: str | None = None  # only leaves that mention this entity key (a topic's scope)
    # since/until also admit a leaf that mentions a day in that span ("last Saturday" said on 8 May
    # mentions 6 May; entities.py resolves it at ingest): an event can be told weeks after it happened.
    mentioned: bool = False
    valid_at: datetime | None = None  # only leaves whose validity window holds this moment (issue #20)
    as_of: datetime | None = None  # only what the vault held then: nodes whose time is not after it

    def sql(self, alias: str = "c") -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("source", self.source), ("session", self.session), ("kind", self.kind)):
            if value is not None:
                clauses.append(f"{alias}.{column} = ?")
                params.append(value)
        if self.status is not None:
            if self.status not in {s.value for s in Status}:
                raise InvalidInput(
                    f"unknown status {self.status!r}; one of: {', '.join(s.value for s in Status)}"
                )
            clauses.append(f"{alias}.status = ?")
            params.append(self.status)
        if self.entity is not None:
            clauses.append(f"{alias}.id IN (SELECT leaf FROM mentions WHERE entity = ?)")
            params.append(self.entity)
        when: list[str] = []
        when_params: list[Any] = []
        if self.since is not None:
            when.append(f"{alias}.ts >= ?")
            when_params.append(format_ts(self.since))
        if self.until is not None:
            when.append(f"{alias}.ts <= ?")
            when_params.append(format_ts(self.until))
        if when and self.mentioned:
            first = f"date:{self.since.date().isoformat()}" if self.since is not None else "date:"
            last = f"date:{self.until.date().isoformat()}" if self.until is not None else "date;"
            clauses.append(
                f"({' AND '.join(when)} OR {alias}.id IN"
                " (SELECT leaf FROM mentions WHERE entity >= ? AND entity <= ?))"
            )
            params.extend([*when_params, first, last])
        else:
            clauses.extend(when)
            params.extend(when_params)
        if self.valid_at is not None:
            clauses.append(
                f"({alias}.valid_from IS NULL OR {alias}.valid_from <= ?)"
                f" AND ({alias}.valid_to IS NULL OR {alias}.valid_to > ?)"
            )
            params.extend([format_ts(self.valid_at)] * 2)
        if self.as_of is not None:
            # What the vault held then: a leaf said by then and learned by then (``ingested``, when known;
            # an import of old chats is not known before it was imported), a summary from its newest leaf.
            clauses.append(
                f"coalesce({alias}.ts_end, {alias}.ts, '') <= ? AND coalesce({alias}.ingested, '') <= ?"
            )
            params.extend([format_ts(self.as_of)] * 2)
        return (" AND ".join(clauses), params)

    @property
    def empty(self) -> bool:
        return all(
            v is None
            for v in (
                self.source,
                self.session,
                self.since,
                self.until,
                self.kind,
                self.status,
                self.entity,
                self.valid_at,
                self.as_of,
            )
        )


@dataclass(frozen=True)
class Hit:
    id: str
    kind: str
    path: str
    text: str
    score: float
    source: str
    session: str | None
    ts: str | None
    speaker: str | None
    role: str | None
    message_ids: tuple[str, ...]
    tokens: int
    status: str
    seq: int = 0  # chunk index within its message
    lexical_rank: int | None = None
    vector_rank: int | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)
    # The hit's own evidence (``Searcher.evidence``): its cosine to the query, whether a content word of
    # the query is in it, the idf-weighted share of them it holds, and ``weak`` when neither the words
    # nor the meaning say it is about the query (see WEAK_BELOW, WEAK_COVERAGE).
    cosine: float | None = None
    matched: bool | None = None
    coverage: float | None = None
    weak: bool = False

    @property
    def provenance(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "session": self.session,
            "message_ids": list(self.message_ids),
            "ts": self.ts,
            "speaker": self.speaker,
            "role": self.role,
            "path": self.path,
            **self.extra,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "path": self.path,
            "text": self.text,
            "score": round(self.score, 6),
            "tokens": self.tokens,
            "status": self.status,
            "weak": self.weak,
            "evidence": {
                "cosine": None if self.cosine is None else round(self.cosine, 4),
                "words": self.matched,
                "coverage": None if self.coverage is None else round(self.coverage, 3),
            },
            "provenance": self.provenance,
        }


STOPWORDS = frozenset(
    [
        "a",
        "about",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "up",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


def fts_terms(query: str) -> tuple[list[str], list[str]]:
    """Split a user's query into word terms and CJK runs. Stopwords are dropped when other words remain:
    in a small vault a match on "the" alone would otherwise rank beside a real semantic match (and on
    LoCoMo dev it measured +0.004 context recall)."""
    words: list[str] = []
    for word in _WORD_RE.findall(query.lower()):
        if word not in words:
            words.append(word)
    content = [w for w in words if w not in STOPWORDS]
    if content:
        words = content
    cjk = list(dict.fromkeys(_CJK_RE.findall(query)))
    return words[:MAX_QUERY_TERMS], cjk[:MAX_QUERY_TERMS]


def content_terms(query: str) -> tuple[list[str], list[str]]:
    """The query's words that say what it is about (stopwords never count as evidence), and its CJK runs."""
    words, cjk = fts_terms(query)
    return [w for w in words if w not in STOPWORDS], cjk


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


class QueryVectors:
    """The vectors of the most recently used queries, per model (least recently used go first).

    Shared by every ``Searcher`` of the process (an MCP server or the daemon open one per request). A
    query is embedded by the embedder's ``embed_query`` when it has one (the NumPy embedder's: by ONNX
    Runtime once the process has opened it, ``NumpyBertEmbedder.start_query_runtime``), else as a
    one-text ``embed``. Either way the vector depends on the model and the text only, to float rounding
    (about 1e-7), so a remembered one is what the embedder would return."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._vectors: OrderedDict[tuple[str, str], npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, embedder: Embedder, query: str) -> npt.NDArray[np.float32]:
        key = (embedder.model_id, query)
        with self._lock:
            known = self._vectors.get(key)
            if known is not None:
                self._vectors.move_to_end(key)
                return known
        embed_query = getattr(embedder, "embed_query", None)
        row = embed_query(query) if embed_query is not None else embedder.embed([query])[0]
        vec = np.array(row, dtype=np.float32)  # a copy: the batch is not kept
        vec.setflags(write=False)  # shared: nobody may change it in place
        with self._lock:
            self._vectors[key] = vec
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vec

    def missing(self, embedder: Embedder, queries: Sequence[str]) -> list[str]:
        """Those of ``queries`` whose vector is not remembered (``get`` would embed them)."""
        with self._lock:
            return [q for q in queries if (embedder.model_id, q) not in self._vectors]

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()


QUERY_VECTORS = QueryVectors()


class VectorsAhead(threading.Thread):
    """Query vectors embedded on a thread of their own while the search reads its word indexes
    (``Searcher.rank``): ONNX Runtime's forward pass and SQLite's FTS5 scoring both run without the
    interpreter lock, so on two cores a new query's search takes about the longer of the two instead of
    their sum. Only for an embedder whose ``queries_off_thread`` says its queries cost no more there
    (``NumpyBertEmbedder.queries_off_thread``: not NumPy's forward pass). The vectors land in ``QUERY_VECTORS``, where the search
    finds them as if it had embedded them itself: same vectors, same hits.

    Not a daemon: a process that exits meanwhile (a Ctrl-C during the word search) waits for the
    forward pass to end rather than tearing the interpreter down under ONNX Runtime's C++ code."""

    def __init__(self, embedder: Embedder, queries: Sequence[str]) -> None:
        super().__init__(name="vaultmem-query-vectors", daemon=False)
        self._embedder = embedder
        self._queries = list(queries)
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            for query in self._queries:
                QUERY_VECTORS.get(self._embedder, query)
        except BaseException as exc:  # raised again in the searching thread (``wait``)
            self._error = exc

    def wait(self) -> None:
        """Wait for the vectors; an error embedding them is raised here, as the search would have."""
        self.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class WordHolders:
    """Which of a few texts hold a word, found by SQLite's own FTS5 tokenizer (the word index's) in a
    private in-memory table: the same answer as matching the word in the index against the hits' rows,
    without reading the word's rows there (9,000 rows per word at 100,000 leaves: 2 ms a word, loaded)
    or matching row by row. Its own connection: the index's change counter (``db.write_stamp``) stays
    still."""

    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def holding(self, bodies: dict[int, str], words: Sequence[str]) -> dict[str, set[int]]:
        """Word -> the keys of ``bodies`` whose text holds it (as a quoted FTS5 term)."""
        if not words:
            return {}
        if not bodies:
            return {w: set() for w in words}
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(":memory:", check_same_thread=False)
                self._conn.execute(
                    f"CREATE VIRTUAL TABLE hits USING fts5(body, tokenize='{WORDS_TOKENIZER}')"
                )
            conn = self._conn
            conn.execute("DELETE FROM hits")
            conn.executemany("INSERT INTO hits(rowid, body) VALUES (?, ?)", bodies.items())
            return {
                w: {r[0] for r in conn.execute("SELECT rowid FROM hits WHERE hits MATCH ?", [_quoted(w)])}
                for w in words
            }


class Speakers:
    """The vault's speakers (chat names, email senders) by the words of their names.

    Rebuilt only when leaves appear, go or move (``chunks_gen``). An email address counts by its local
    part ("diego.ramos@example.com" is named by "diego" or "ramos")."""

    def __init__(self) -> None:
        self._stamp = -1
        self._by_word: dict[str, set[str]] = {}

    def refresh(self, conn: sqlite3.Connection) -> None:
        stamp = chunks_generation(conn)
        if stamp == self._stamp:
            return
        by_word: dict[str, set[str]] = {}
        for speaker in speakers(conn):
            for word in name_words(speaker):
                by_word.setdefault(word, set()).add(speaker)
        self._by_word, self._stamp = by_word, stamp

    def named(self, query: str) -> frozenset[str]:
        """The speakers one of whose name words is a word of ``query``."""
        out: set[str] = set()
        for word in _WORD_RE.findall(query.lower()):
            out.update(self._by_word.get(word, ()))
        return frozenset(out)

    def without_names(self, query: str) -> str | None:
        """``query`` with the words that name a speaker taken out (with a possessive "'s"), or None when
        it names no speaker or nothing but stopwords would be left."""
        if not self._by_word:
            return None
        names = [w for w in _WORD_RE.findall(query.lower()) if w in self._by_word]
        if not names:
            return None
        pattern = (
            r"\b(?:"
            + "|".join(re.escape(w) for w in sorted(set(names), key=len, reverse=True))
            + r")(?:['’]s)?\b"
        )
        left = " ".join(re.sub(pattern, " ", query, flags=re.IGNORECASE).split())
        return left if any(content_terms(left)) else None

    def subject(self, query: str) -> frozenset[str]:
        """The speakers the query asks about: the first one it names, with those joined to it by "and"
        ("what did Tim and John play"); one named later is an object ("what did Tim suggest to John")."""
        words = _WORD_RE.findall(query.lower())
        out: set[str] = set()
        for i, word in enumerate(words):
            if word in self._by_word:
                out.update(self._by_word[word])
                for later, after in zip(words[i + 1 :], [*words[i + 2 :], ""], strict=False):
                    if later in self._by_word:
                        out.update(self._by_word[later])
                    elif not (later in {"and", "&"} and after in self._by_word):
                        break
                break
        return frozenset(out)


_FIRST_PERSON = frozenset(["i", "me", "my", "mine", "myself"])
_SECOND_PERSON = frozenset(["you", "your", "yours", "yourself"])
# "can you suggest", "do you have", "what do you think", "would you recommend": "you" asked for advice now.
_ASKING = frozenset(["can", "could", "would", "will", "do"])
# Words that send a question back to what was said earlier in the chat, or by the assistant: with "you" in
# the question, the answer may be the assistant's reply ("can you remind me", "our previous chat").
_RECALLING = frozenset(["remind", "previous", "earlier", "discussed", "talked", "chatted", "again"])
# "What did I tell you", "did I send you my CV", "what I said to you": "you" hears the user's own words.
_TOLD = frozenset(["tell", "told", "ask", "asked", "show", "showed", "send", "sent", "give", "gave", "to"])
# "What did I get", "what was I told": what the user got may be the answer to a request (FIRST_PERSON_ANSWER).
_RECEIVING = frozenset(["get", "got", "receive", "received", "given", "told", "learn", "learned", "learnt"])
_SHARED = frozenset(["we", "our", "us"])  # the user and the assistant: "our previous chat"
# Past forms that do not end in "ed": "the deli you found", "what you gave me".
_PAST = frozenset(
    ["said", "told", "gave", "wrote", "sent", "made", "came", "showed", "shown", "found", "put"]
)


def _asks_for_advice(words: list[str]) -> bool:
    """Whether every "you" of ``words`` asks the assistant for something now ("can you suggest", "do you
    have any tips", "what do you think") or hears the user's own words ("what did I tell you"): the
    question is then about the user, and the user's turns hold what it rests on. "Did you", "you
    recommended", "your suggestion" ask for what the assistant said."""
    for n, word in enumerate(words):
        if word in ("your", "yours", "yourself"):
            return False
        if word != "you":
            continue
        before = words[n - 1] if n else ""
        after = words[n + 1] if n + 1 < len(words) else ""
        if before in _TOLD:
            continue
        if before not in _ASKING or after.endswith("ed") or after in _PAST:
            return False
    return True


def first_person(query: str, requests: bool = True) -> bool:
    """Whether ``query`` is about its asker, a user of a chat with an assistant: it speaks in the first
    person ("did I", "my", "me") and not of what the assistant said ("did you recommend", "your", "the
    list you provided"). With ``requests`` (``FIRST_PERSON_REQUESTS``), "you" asked for advice now ("can
    you suggest accessories for my phone", "I'm anxious about Tokyo, do you have tips") still counts: the
    advice rests on what the user said of themself (``_asks_for_advice``); and a question that sends the
    user back to the shared chat ("can you remind me", "what we discussed", "our previous chat") does not.
    Without it any "you" leaves the question to the assistant's words (the rule before)."""
    words = _WORD_RE.findall(query.lower())
    if not _FIRST_PERSON.intersection(words):
        return False
    second = _SECOND_PERSON.intersection(words)
    if not requests:
        return not second  # the rule before: any "you" asks what the assistant said
    if (second or _SHARED.intersection(words)) and _RECALLING.intersection(words):
        return False  # "can you remind me", "what we discussed", "our previous chat": either side's words
    return not second or _asks_for_advice(words)


def speakers(conn: sqlite3.Connection) -> list[str]:
    """The vault's distinct speakers, in order: one seek of the speaker index per speaker (a new process
    read every row of the vault for them: 0.2 s at 100,000 leaves)."""
    out: list[str] = []
    row = conn.execute("SELECT min(speaker) FROM chunks WHERE speaker IS NOT NULL").fetchone()
    while row[0] is not None:
        out.append(row[0])
        row = conn.execute("SELECT min(speaker) FROM chunks WHERE speaker > ?", (row[0],)).fetchone()
    return out


def name_words(speaker: str) -> list[str]:
    """The words that name a speaker: "Diego Ramos" -> diego, ramos; an address by its local part."""
    name = speaker.lower()
    if "@" in name:
        name = re.sub(r"[._+-]", " ", name.rsplit("@", 1)[0].split("<")[-1])
    return [w for w in _WORD_RE.findall(name) if len(w) > 1 and not w.isdigit() and w not in STOPWORDS]


def _fuse_below(scores: dict[str, float], found: list[tuple[float, list[str]]], keep: int) -> None:
    """Fuse the rankings ``found`` ((weight, ids best first)) into ``scores`` by reciprocal rank; with
    ``keep`` > 0, what rises above the best ``keep`` of ``scores`` as they were goes right below them, in
    its own order, so they keep their places."""
    kept = sorted(scores, key=lambda i: (-scores[i], i))[:keep] if keep > 0 else []
    below = scores[kept[-1]] if kept and len(kept) == keep else None
    for weight, ids in found:
        for rank, node_id in enumerate(ids, 1):
            scores[node_id] = scores.get(node_id, 0.0) + weight / (RRF_K + rank)
    if below is not None:  # what rose above the kept hits goes right below them, in its own order
        _below(scores, set(kept), below)


def _keep_head(scores: dict[str, float], head: list[str]) -> None:
    """Put ``head`` (ids, best first) first in ``scores``, in its order (from the best of their scores down);
    what scored as high as the last of them goes right below them, in its own order."""
    if not head:
        return
    step = max(scores.get(i, 0.0) for i in head)
    for node_id in head:
        scores[node_id] = step
        step = math.nextafter(step, -math.inf)
    _below(scores, set(head), scores[head[-1]])


def _below(scores: dict[str, float], kept: set[str], floor: float) -> None:
    """Every score not in ``kept`` that reaches ``floor`` is moved just below it, in its own order (ties
    by id): the kept hits stay ahead of everything that rose to them."""
    risen = [i for i in scores if i not in kept and scores[i] >= floor]
    step = floor
    for node_id in sorted(risen, key=lambda i: (-scores[i], i)):
        step = math.nextafter(step, -math.inf)
        scores[node_id] = step


def _without(scores: dict[str, float], added: dict[str, float] | None) -> dict[str, float]:
    """``scores`` less the shares in ``added`` (a leaf only ``added`` brought in scores 0)."""
    if not added:
        return scores
    return {i: max(0.0, s - added.get(i, 0.0)) for i, s in scores.items()}


class Searcher:
    """Hybrid search over one vault's index. Keeps vectors in memory between queries."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        embedder_factory: Callable[[], Embedder],
        *,
        state: Path | None = None,
    ) -> None:
        """``state``: the vault's ``.vaultmem`` folder, where a matrix file may let the first search of a
        process map its vectors instead of reading them from the index (``vectors.MatrixFile``)."""
        self.conn = conn
        self._state = state
        self._embedder_factory = embedder_factory
        self._cache: VectorCache | None = None
        self._order = SessionOrder()
        self._speakers = Speakers()
        self.speaker_boost = SPEAKER_BOOST
        self.first_person_boost = FIRST_PERSON_BOOST
        self.first_person_fused = FIRST_PERSON_FUSED
        self.first_person_requests = FIRST_PERSON_REQUESTS
        self.first_person_answer = FIRST_PERSON_ANSWER
        self.split_weight = SPLIT_WEIGHT
        self.split_vector = SPLIT_VECTOR
        self._said: tuple[tuple[int, int, int] | None, dict[str, list[str]]] = (None, {})
        self.unnamed_query = UNNAMED_QUERY
        self.judge_unnamed = EVIDENCE_UNNAMED
        self._graph = LeafGraph()
        self._leaf_file_tried = False
        self.graph_weight = GRAPH_WEIGHT
        self.graph_seeds = GRAPH_SEEDS
        self.prf_docs = PRF_DOCS
        self.prf_beta = PRF_BETA
        self.prf_vector = PRF_VECTOR
        self.prf_terms = PRF_TERMS
        self.prf_words = PRF_WORDS
        self.prf_on_time = PRF_ON_TIME
        self.prf_on_named_time = PRF_ON_NAMED_TIME
        self.prf_keep = PRF_KEEP
        self.prf_within = PRF_WITHIN
        self.level_weight = LEVEL_WEIGHT
        self.level_top = LEVEL_TOP
        self.level_leaves = LEVEL_LEAVES
        self.level_subject = LEVEL_SUBJECT
        self.level_keep = LEVEL_KEEP
        self.level_spread = LEVEL_SPREAD
        self.level_novel = LEVEL_NOVEL
        self.level_head = LEVEL_HEAD
        # Depth-1 levels -> their leaves (id, speaker), remembered until the index is written.
        self._levels: tuple[tuple[int, int, int] | None, dict[str, list[tuple[str, str | None]]]] = (None, {})
        self._level_of: dict[str, str] = {}  # leaf -> its depth-1 level, with ``_levels``
        # Topic and digest nodes restate leaves: at full weight they pushed the leaves that answer out of
        # the top 10 (LoCoMo R@10 0.695; 0.730 at half weight; 0.744 with no word match at all).
        self.weights = {"words": 1.0, "trigram": 1.0, "vector": 1.0, "nav_words": 0.5, "nav_trigram": 0.5}
        # The query's vectors embedded on a thread of their own while the word indexes are read
        # (``VectorsAhead``); False: in the searching thread, after them (the same vectors either way).
        self.overlap = True
        self.neighbor_weight = NEIGHBOR_WEIGHT
        self._count: tuple[int, int] | None = None
        self._nonleaf: tuple[int, int] | None = None
        self._holders = WordHolders()
        self._dfs: tuple[tuple[int, int, int] | None, dict[tuple[str, str], int]] = (None, {})
        self._quotes: tuple[tuple[int, int, int] | None, dict[str, list[str] | None]] = (None, {})
        self._rows: tuple[
            tuple[int, int, int] | None, VectorCache | None, dict[Filters, npt.NDArray[np.intp]]
        ] = (
            None,
            None,
            {},
        )

    def forget_vectors(self) -> None:
        """Drop the in-memory vectors: the next search starts again from the matrix file (and its graph)."""
        self._cache = None

    def vectors(self, embedder: Embedder) -> VectorCache:
        """The in-memory vectors of ``embedder``'s model, refreshed from the index."""
        return self._vectors(embedder)

    def leaf_structures(self) -> tuple[LeafGraph, SessionOrder]:
        """The leaf graph and the session order, up to date with the index. The first time, both start
        from the leaf file when there is one of this index (``graph.load``: a new process reads them
        instead of building them), then catch up from the change log as every refresh does."""
        if not self._leaf_file_tried:
            self._leaf_file_tried = True
            if self._state is not None:
                found = leafgraph.load(self._state, epoch(self.conn))
                if found is not None:
                    self._graph, self._order = found
        self._graph.refresh(self.conn)
        self._order.refresh(self.conn)
        return self._graph, self._order

    def graph_built(self, files: MatrixFile, key: dict[str, Any]) -> None:
        """A background build wrote the HNSW graph of the matrix file ``key`` names (``Vault.save_vectors``):
        the in-memory vectors take it when they are that file's rows; vectors of an older file are dropped
        (the next search maps the new file and its graph). Until then search scores without a graph."""
        cache = self._cache
        if cache is None or cache.model != key["model"]:
            return
        if cache.key != key:
            self.forget_vectors()
            return
        graph = ann.open_graph(files.graph, key)
        if graph is not None:
            cache.adopt(graph, key)

    def _vectors(self, embedder: Embedder) -> VectorCache:
        cache = self._cache  # one read: a background build may drop it meanwhile (``graph_built``)
        if cache is None or cache.model != embedder.model_id:
            cache = self._cache = VectorCache(embedder.model_id, embedder.dim)
        files = MatrixFile.of(self._state, embedder.model_id) if self._state is not None else None
        cache.refresh(self.conn, files)
        return cache

    def lexical(self, query: str, filters: Filters, limit: int) -> dict[str, list[str]]:
        """Ranked ids per lexical index: {"words": [...], "trigram": [...]}."""
        words, cjk = fts_terms(query)
        where, params = filters.sql()
        extra = f" AND {where}" if where else ""
        # A narrow filter (a source, session or topic) picks its rows first, so only they are scored.
        narrow = any(v is not None for v in (filters.source, filters.session, filters.entity))
        out: dict[str, list[str]] = {"words": [], "trigram": []}
        # Topic and digest nodes have their own word indexes (their text repeats their leaves'):
        # searched only when summaries may be returned, each ranking fused like the others.
        nav = filters.kind != "leaf"
        if words:
            scored = self._scored_words(words)
            match = " OR ".join(_quoted(w) for w in scored)
            window = self._window(scored, match) if not narrow else ("", [])
            others = self._others(filters)
            out["words"] = self._fts("fts_words", match, where, params, limit, narrow, window, others)
            match = " OR ".join(_quoted(w) for w in words)
            if nav:
                out["nav_words"] = self._fts("fts_nav_words", match, where, params, limit, narrow)
        long_runs = [r for r in cjk if len(r) >= 3]
        short_runs = [r for r in cjk if len(r) < 3]
        if long_runs:
            match = " OR ".join(_quoted(r) for r in long_runs)
            out["trigram"] = self._fts("fts_trigram", match, where, params, limit, narrow)
            if nav:
                out["nav_trigram"] = self._fts("fts_nav_trigram", match, where, params, limit, narrow)
        elif short_runs:
            # Trigrams need three characters; one- or two-character CJK queries scan with LIKE.
            like = " OR ".join("c.text LIKE ?" for _ in short_runs)
            out["trigram"] = [
                r[0]
                for r in self.conn.execute(
                    f"SELECT c.id FROM chunks c WHERE ({like}){extra} ORDER BY c.ts DESC LIMIT ?",
                    [*(f"%{r}%" for r in short_runs), *params, limit],
                )
            ]
        return out

    def _scored_words(self, words: list[str]) -> list[str]:
        """The words BM25 scores in the leaves' word index: all of them, except in a vault of
        ``PRUNE_ABOVE`` rows or more, where a word on half the rows or more is left out when a rarer one
        remains. FTS5's idf of such a word is zero (clamped to 1e-6), so it adds nothing to any score
        but the time to score every row it is on (a speaker's name on every other turn: 50,000 rows at
        100,000 leaves); only rows holding nothing but such words, ranked last, are no longer listed."""
        n = self._leaf_count()
        if n < PRUNE_ABOVE or len(words) < 2:
            return words
        kept = [w for w in words if 2 * self._df("fts_words", _quoted(w)) < n]
        return kept or words

    def _window(self, words: list[str], match: str) -> tuple[str, list[Any]]:
        """In a vault of ``PRUNE_ABOVE`` rows or more, when the query's words are on more than
        ``BM25_WINDOW`` rows together, the rows BM25 scores: the latest ``BM25_WINDOW`` rows holding
        any of them, and every row holding a word on at most ``BM25_WINDOW`` rows (all of a rare word's
        rows, old ones too); as an SQL condition on the word index's rowid and its parameters
        (("", []): score them all; ``{rowid}`` stands for the index's rowid column). Scoring costs FTS5 about a microsecond a row and word: a query of
        three words each on 9,000 of 100,000 rows took 25-35 ms, for a ranking among thousands of
        weak matches of which only the best ``pool`` count. Each score stays exact; what is left out
        holds only words common in the vault and is older than the window."""
        n = self._leaf_count()
        if n < PRUNE_ABOVE:
            return "", []
        dfs = {w: self._df("fts_words", _quoted(w)) for w in words}
        if sum(dfs.values()) <= BM25_WINDOW:
            return "", []
        row = self.conn.execute(
            "SELECT rowid FROM fts_words WHERE fts_words MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            [match, BM25_WINDOW - 1],
        ).fetchone()
        if row is None:
            return "", []
        rare = [w for w, df in dfs.items() if df <= BM25_WINDOW]
        if not rare:
            return " AND {rowid} >= ?", [row[0]]
        return (
            " AND ({rowid} >= ? OR +{rowid} IN (SELECT rowid FROM fts_words WHERE fts_words MATCH ?))",
            [row[0], " OR ".join(_quoted(w) for w in rare)],
        )

    def _others(self, filters: Filters) -> int | None:
        """For a filter of leaves only (nothing else): how many rows of the leaves' word index are not
        leaves (summaries outside topics/ and global/), when at most ``OVERFETCH``; else None. Counted
        again only when rows came, went or changed kind (``chunks_gen``)."""
        if filters.kind != "leaf" or not replace(filters, kind=None).empty:
            return None
        stamp = chunks_generation(self.conn)
        if self._nonleaf is None or self._nonleaf[0] != stamp:
            row = self.conn.execute(
                "SELECT count(*) FROM chunks c WHERE c.kind <> 'leaf' AND NOT " + NAV.format(row="c")
            ).fetchone()
            self._nonleaf = (stamp, int(row[0]))
        return self._nonleaf[1] if self._nonleaf[1] <= OVERFETCH else None

    def _fts(
        self,
        table: str,
        match: str,
        where: str,
        params: list[Any],
        limit: int,
        narrow: bool = False,
        window: tuple[str, list[Any]] = ("", []),
        others: int | None = None,
    ) -> list[str]:
        """Ids matching ``match`` in one FTS5 table, best BM25 first.

        The best rows are picked in the FTS table and only they are joined to ``chunks`` (joining every
        match first read a chunk row per match: 2-3.5x slower at 100,000 leaves). A ``narrow`` filter
        names its rows by a subquery (``+rowid``: FTS5 must not take it as a rowid lookup per row); a
        broad one (kind, time) is checked on the join, as before. Same order either way (SQLite's sorts
        are stable; ties keep the FTS scan order). ``window``: which rows are scored (``_window``).
        ``others``: the filter keeps leaves only and at most this many rows of the table are not leaves
        (``_others``): the best ``limit + others`` rows are picked in the FTS table and only they are
        joined, which holds the best ``limit`` leaves (joining every match for its kind: 18,000 row
        lookups for a two-word query at 100,000 leaves, 115-215 ms loaded)."""
        if where and others is not None and not narrow:
            sql = (
                f"SELECT c.id FROM (SELECT rowid, bm25({table}) AS score FROM {table}"
                f" WHERE {table} MATCH ?{window[0].format(rowid='rowid')} ORDER BY score LIMIT ?) f"
                f" JOIN chunks c ON c.rowid = f.rowid WHERE {where} ORDER BY f.score LIMIT ?"
            )
            return [r[0] for r in self.conn.execute(sql, [match, *window[1], limit + others, *params, limit])]
        if not where or narrow:
            inside = f" AND +rowid IN (SELECT c.rowid FROM chunks c WHERE {where})" if where else ""
            sql = (
                f"SELECT c.id FROM (SELECT rowid, bm25({table}) AS score FROM {table}"
                f" WHERE {table} MATCH ?{window[0].format(rowid='rowid')}{inside} ORDER BY score LIMIT ?) f"
                " JOIN chunks c ON c.rowid = f.rowid ORDER BY f.score"
            )
            args = [match, *window[1], *params, limit]
        else:
            sql = (
                f"SELECT c.id FROM {table} f JOIN chunks c ON c.rowid = f.rowid"
                f" WHERE {table} MATCH ?{window[0].format(rowid='f.rowid')} AND {where}"
                f" ORDER BY bm25({table}) LIMIT ?"
            )
            args = [match, *window[1], *params, limit]
        return [r[0] for r in self.conn.execute(sql, args)]

    def query_vector(self, embedder: Embedder, query: str) -> npt.NDArray[np.float32]:
        """The query's vector, remembered for recent queries (search and its evidence share it; an
        agent asking again, or `context` after `search`, costs no forward pass)."""
        return QUERY_VECTORS.get(embedder, query)

    def content_vector(self, embedder: Embedder, query: str) -> npt.NDArray[np.float32]:
        """The vector the leaves are ranked by: the query's, moved ``unnamed_query`` of the way to the
        vector of the query without the speakers' names it holds (``UNNAMED_QUERY``)."""
        weight = self.unnamed_query
        left = self._unnamed(query)
        if left is None:
            return self.query_vector(embedder, query)
        unnamed = self.query_vector(embedder, left)
        if weight >= 1.0:
            return unnamed
        q = self.query_vector(embedder, query)
        mixed = (1.0 - weight) * q + weight * unnamed
        norm = float(np.linalg.norm(mixed))
        return (mixed / norm).astype(np.float32) if norm > 0 else q

    def _unnamed(self, query: str) -> str | None:
        """The query without the speakers' names it holds, when ``content_vector`` uses it (None: the
        query's own vector is the content vector)."""
        if not self.unnamed_query:
            return None
        self._speakers.refresh(self.conn)
        return self._speakers.without_names(query)

    def judging_vector(self, embedder: Embedder, query: str) -> npt.NDArray[np.float32]:
        """The vector a hit's evidence cosine (and a summary's closest quoted leaf) is judged by: the whole
        query's; with ``judge_unnamed`` (``EVIDENCE_UNNAMED``), the one the leaves are ranked by
        (``content_vector``), so a query naming a speaker costs one forward pass (the name-free text)."""
        if self.judge_unnamed:
            return self.content_vector(embedder, query)
        return self.query_vector(embedder, query)

    def _vectors_ahead(self, query: str) -> VectorsAhead | None:
        """With ``overlap``, a thread embedding the query texts the vector side will ask for
        (``content_vector``, ``judging_vector``) that are not remembered yet, started; None when there is
        nothing to embed (all remembered, or no vectors to score against, as ``semantic`` then embeds
        nothing either) or the embedder does not say its queries may run on another thread."""
        if not self.overlap:
            return None
        embedder = self._embedder_factory()
        # Only an embedder that says its queries cost no more on another thread (``queries_off_thread``:
        # the NumPy embedder once ONNX Runtime runs its queries; NumPy's own forward pass does not).
        if not getattr(embedder, "queries_off_thread", False) or not self._vectors(embedder).ids:
            return None
        left = self._unnamed(query)
        if left is None:
            texts = [query]
        else:  # the whole query too unless neither vector needs it (``content_vector``, ``judging_vector``)
            texts = [left] if self.unnamed_query >= 1.0 and self.judge_unnamed else [left, query]
        missing = QUERY_VECTORS.missing(embedder, texts)
        if not missing:
            return None
        ahead = VectorsAhead(embedder, missing)
        ahead.start()
        return ahead

    def semantic(self, query: str, filters: Filters, limit: int) -> list[str]:
        embedder = self._embedder_factory()
        cache = self._vectors(embedder)
        if not cache.ids:
            return []
        # One BLAS thread for the query's forward pass and the scoring after it: waking OpenBLAS's
        # other thread for one matrix-vector product cost more than the product on a busy machine.
        with one_blas_thread:
            return self._semantic(embedder, cache, query, filters, limit)

    def _semantic(
        self, embedder: Embedder, cache: VectorCache, query: str, filters: Filters, limit: int
    ) -> list[str]:
        q = self.content_vector(embedder, query)
        top = cache.top(q, limit, self._rows_of(cache, filters))
        return [cache.ids[i] for i in top]

    def _rows_of(self, cache: VectorCache, filters: Filters) -> npt.NDArray[np.intp] | None:
        """The vector rows ``filters`` lets through (None: all)."""
        if filters.kind is not None and replace(filters, kind=None).empty:
            return cache.kind_rows(filters.kind)  # the common "leaves only" case needs no SQL
        if not filters.empty:
            return self._filtered_rows(cache, filters)
        return None

    def _feedback_vector(
        self, query: str, filters: Filters, limit: int, best: list[str], within: list[str] | None = None
    ) -> list[str]:
        """The cosine ranking by the query's vector moved toward the mean vector of ``best`` (the first
        round's best hits): Rocchio's relevance feedback, with no forward pass (the query's vector is
        remembered from the first round, the hits' vectors are in memory)."""
        embedder = self._embedder_factory()
        cache = self._vectors(embedder)
        rows = [cache.pos[i] for i in best if i in cache.pos]
        if not rows:
            return []
        with one_blas_thread:
            q = self.content_vector(embedder, query)
            centroid = cache.matrix[np.asarray(rows, dtype=np.intp)].mean(axis=0)
            moved = q + self.prf_beta * centroid
            norm = float(np.linalg.norm(moved))
            if norm <= 0:
                return []
            unit = (moved / norm).astype(np.float32)
            if within is not None:  # only the first round's candidates, each scored exactly
                pos = np.asarray([cache.pos[i] for i in within if i in cache.pos], dtype=np.intp)
                if not len(pos):
                    return []
                order = np.argsort(-(cache.matrix[pos] @ unit), kind="stable")[:limit]
                return [cache.ids[int(pos[j])] for j in order]
            top = cache.top(unit, limit, self._rows_of(cache, filters))
        return [cache.ids[i] for i in top]

    def feedback_terms(self, query: str, best: list[str]) -> list[str]:
        """Up to ``prf_terms`` words that at least two of ``best`` (the first round's best hits) hold and the
        query does not, rarest first (by their idf in the word index): what the first hits reveal about
        the question's subject (a place, a name, an activity)."""
        if len(best) < 2 or self.prf_terms < 1:
            return []
        asked = set(fts_terms(query)[0])
        counts: dict[str, int] = {}
        for (text,) in self.conn.execute(
            f"SELECT text FROM chunks WHERE id IN ({','.join('?' * len(best))})", best
        ):
            for word in {w for w in _WORD_RE.findall(text.lower()) if len(w) > 2}:
                if word not in STOPWORDS and word not in asked and not word.isdigit():
                    counts[word] = counts.get(word, 0) + 1
        n = self._leaf_count()
        shared = [w for w, c in counts.items() if c >= 2]
        ranked = sorted(shared, key=lambda w: (-_idf(self._df("fts_words", _quoted(w)), n), w))
        return ranked[: int(self.prf_terms)]

    def _filtered_rows(self, cache: VectorCache, filters: Filters) -> npt.NDArray[np.intp]:
        """The vector rows that pass ``filters``, remembered per filter until the index is written (a
        source of 10,000 leaves took 60 ms to list again for every search in it)."""
        stamp = write_stamp(self.conn)
        if stamp is None or self._rows[:2] != (stamp, cache) or len(self._rows[2]) > 32:
            self._rows = (stamp, cache, {})  # positions are the cache's: a new cache starts afresh
        known = self._rows[2].get(filters)
        if known is None:
            where, params = filters.sql()
            known = np.array(
                [
                    cache.pos[r[0]]
                    for r in self.conn.execute(f"SELECT c.id FROM chunks c WHERE {where}", params)
                    if r[0] in cache.pos
                ],
                dtype=np.intp,
            )
            self._rows[2][filters] = known
        return known

    def rank(
        self, query: str, filters: Filters, pool: int
    ) -> list[tuple[str, float, int | None, int | None]]:
        """Fused ranking: (id, score, lexical rank, vector rank), best first."""
        ahead = self._vectors_ahead(query)
        lexical = self.lexical(query, filters, pool)
        if ahead is not None:
            ahead.wait()
        semantic = self.semantic(query, filters, pool)
        scores: dict[str, float] = {}
        lex_rank: dict[str, int] = {}
        for name, ids in lexical.items():
            for rank, node_id in enumerate(ids, 1):
                scores[node_id] = scores.get(node_id, 0.0) + self.weights[name] / (RRF_K + rank)
                lex_rank[node_id] = min(lex_rank.get(node_id, rank), rank)
        vec_rank: dict[str, int] = {}
        for rank, node_id in enumerate(semantic, 1):
            scores[node_id] = scores.get(node_id, 0.0) + self.weights["vector"] / (RRF_K + rank)
            vec_rank[node_id] = rank
        added: dict[str, float] = {}  # the level list's share of each score (``level_spread`` off)
        # With ``level_head``, the same steps without the level list, whose best ``level_head`` lead.
        plain: dict[str, float] | None = None
        if (
            (self.prf_vector or self.prf_words or self.split_vector or self.level_weight)
            and scores
            and self._feedback_for(query, filters)
        ):
            if self.level_weight and self.level_head and not self.level_keep:
                plain = dict(scores)
            if not self._feed_back(query, filters, pool, scores, added, plain):
                plain = None  # no level list: the ranking is the plain one
        self._later_steps(query, filters, pool, scores, added)
        if plain is not None:
            self._later_steps(query, filters, pool, plain, None)
            _keep_head(scores, self._head(sorted(plain, key=lambda i: (-plain[i], i)), int(self.level_head)))
        if (
            self.level_weight
            and self.level_keep
            and scores
            and replace(filters, kind=None).empty
            and filters.kind != "summary"
            and self._feedback_for(query, filters)
        ):
            self._add_levels(query, scores)
        ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(i, s, lex_rank.get(i), vec_rank.get(i)) for i, s in ordered]

    def _head(self, order: list[str], leaves: int) -> list[str]:
        """The start of ``order`` that holds ``leaves`` leaves: a summary among them counts for none
        (``search`` lists it as a leaf it quotes, or drops it, ``quotes_as_leaves``)."""
        known = self.leaf_structures()[0].leaf_pos
        head: list[str] = []
        for node_id in order:
            if leaves <= 0:
                break
            head.append(node_id)
            leaves -= node_id in known
        return head

    def _later_steps(
        self,
        query: str,
        filters: Filters,
        pool: int,
        scores: dict[str, float],
        added: dict[str, float] | None,
    ) -> None:
        """The steps after feedback: the walk, neighbours, people split, speakers."""
        if self.graph_weight and replace(filters, kind=None).empty and filters.kind != "summary":
            self._propagate(query, scores, pool, added)
        if self.neighbor_weight:
            self._spread_to_neighbors(scores, filters, added)
        if self.split_weight:
            self._split_people(query, scores)
        if self.speaker_boost or self.first_person_boost:
            self._boost_speakers(query, scores, pool)

    def _feedback_for(self, query: str, filters: Filters) -> bool:
        """Whether feedback applies to ``query``: not to one asking for a time (``prf_on_time``) nor to one
        naming a time window or ranked within one (``prf_on_named_time``)."""
        if not self.prf_on_time and timeparse.asks_time(query):
            return False
        if not self.prf_on_named_time:
            if filters.since is not None or filters.until is not None:
                return False
            if timeparse.find_range(query, datetime.now(UTC)) is not None:
                return False
        return True

    def _feed_back(
        self,
        query: str,
        filters: Filters,
        limit: int,
        scores: dict[str, float],
        added: dict[str, float] | None = None,
        plain: dict[str, float] | None = None,
    ) -> list[str]:
        """Pseudo-relevance feedback: rankings from the best ``prf_docs`` fused hits of the first round
        (``_feedback_vector``, ``feedback_terms``) fused into ``scores``. With ``level_spread`` off, the level
        list's share of each leaf's score is put in ``added`` (``_spread_to_neighbors``, ``_propagate``).
        ``plain`` (a copy of ``scores``) gets the same rankings but the level list's. Returns the level
        list (empty without one)."""
        ordered = sorted(scores, key=lambda i: (-scores[i], i))
        best = ordered[: int(self.prf_docs)]
        found: list[tuple[float, list[str]]] = []
        listed: list[str] | None = None
        if self.prf_vector:
            within = list(scores) if self.prf_within else None
            found.append((self.prf_vector, self._feedback_vector(query, filters, limit, best, within)))
        if self.split_vector and replace(filters, kind=None).empty and filters.kind != "summary":
            found.extend((self.split_vector, ids) for ids in self._speaker_vectors(query, limit))
        if (
            self.level_weight
            and not self.level_keep
            and replace(filters, kind=None).empty
            and filters.kind != "summary"
        ):
            listed = self.level_leaves_of(query, ordered[: int(self.level_novel)])
            found.append((self.level_weight, listed))
            if added is not None and not self.level_spread:
                for rank, node_id in enumerate(listed, 1):
                    added[node_id] = added.get(node_id, 0.0) + self.level_weight / (RRF_K + rank)
        if self.prf_words:
            extra = self.feedback_terms(query, best)
            if extra:
                found.append(
                    (self.prf_words, self.lexical(" ".join([query, *extra]), filters, limit)["words"])
                )
        if plain is not None:
            _fuse_below(plain, [f for f in found if f[1] is not listed], int(self.prf_keep))
        _fuse_below(scores, found, int(self.prf_keep))
        return listed or []

    def _add_levels(self, query: str, scores: dict[str, float]) -> None:
        """The level-guided list (``level_leaves_of``) fused into the final ranking below its best
        ``level_keep`` hits: it adds candidates and never reorders the top."""
        _fuse_below(scores, [(self.level_weight, self.level_leaves_of(query))], int(self.level_keep))

    def level_leaves_of(self, query: str, reached: Sequence[str] = ()) -> list[str]:
        """Level-guided candidates: the depth-1 levels closest to the query (by their summary's vector),
        best first, each giving its ``level_leaves`` leaves closest to the query; with ``level_subject``
        only leaves said by the speakers the query is about (``Speakers.subject``). A level holding one of
        ``reached`` (the first round's best) gives none. No forward pass: the query's vector is remembered
        from the first round."""
        levels = self._leaf_levels()
        if not levels:
            return []
        skip = {self._level_of[i] for i in reached if i in self._level_of}
        embedder = self._embedder_factory()
        cache = self._vectors(embedder)
        level_ids = [i for i in levels if i in cache.pos]
        if not level_ids:
            return []
        subject: frozenset[str] = frozenset()
        if self.level_subject:
            subject = self.subject(query)
        out: list[str] = []
        taken = 0
        take = max(1, int(self.level_leaves))
        with one_blas_thread:
            q = self.content_vector(embedder, query)
            rows = np.asarray([cache.pos[i] for i in level_ids], dtype=np.intp)
            for row in cache.top(q, int(self.level_top) + len(skip), rows):
                if cache.ids[int(row)] in skip:
                    continue
                kids = [
                    leaf
                    for leaf, speaker in levels[cache.ids[int(row)]]
                    if leaf in cache.pos and (not subject or speaker in subject)
                ]
                if not kids:
                    continue
                sims = cache.matrix[np.asarray([cache.pos[k] for k in kids], dtype=np.intp)] @ q
                out.extend(kids[int(j)] for j in np.argsort(-sims, kind="stable")[:take])
                taken += 1
                if taken == int(self.level_top):
                    break
        return out

    def _leaf_levels(self) -> dict[str, list[tuple[str, str | None]]]:
        """Each depth-1 level (a leaf's parent) -> its leaves (id, speaker), in seq order, remembered until
        the index is written."""
        stamp = write_stamp(self.conn)
        if stamp is not None and self._levels[0] == stamp:
            return self._levels[1]
        levels: dict[str, list[tuple[str, str | None]]] = {}
        for leaf, parent, speaker in self.conn.execute(
            "SELECT id, parent, speaker FROM chunks WHERE kind = 'leaf' AND parent IS NOT NULL ORDER BY seq"
        ):
            levels.setdefault(parent, []).append((leaf, speaker))
        self._levels = (stamp, levels)
        self._level_of = {leaf: parent for parent, kids in levels.items() for leaf, _ in kids}
        return levels

    def _speaker_vectors(self, query: str, limit: int) -> list[list[str]]:
        """For each speaker the query is about, the cosine ranking of that speaker's leaves alone (fused as
        the feedback's rankings are: ``_feed_back``)."""
        named = self.subject(query)
        if not named:
            return []
        embedder = self._embedder_factory()
        cache = self._vectors(embedder)
        if not cache.ids:
            return []
        q = self.content_vector(embedder, query)
        out: list[list[str]] = []
        for speaker in sorted(named):
            ids = self._said_by(speaker)
            pos = np.asarray([cache.pos[i] for i in ids if i in cache.pos], dtype=np.intp)
            if not len(pos):
                continue
            with one_blas_thread:
                order = np.argsort(-(cache.matrix[pos] @ q), kind="stable")[:limit]
            out.append([cache.ids[int(pos[j])] for j in order])
        return out

    def _said_by(self, speaker: str) -> list[str]:
        """The ids of ``speaker``'s leaves, remembered until the index is written."""
        stamp = write_stamp(self.conn)
        if stamp is None or self._said[0] != stamp or len(self._said[1]) > 64:
            self._said = (stamp, {})
        known = self._said[1].get(speaker)
        if known is None:
            known = self._said[1][speaker] = [
                r[0]
                for r in self.conn.execute(
                    "SELECT id FROM chunks WHERE speaker = ? AND kind = 'leaf'", [speaker]
                )
            ]
        return known

    def _split_people(self, query: str, scores: dict[str, float]) -> None:
        """A query about two or more speakers joined by "and" (``Speakers.subject``): each one's leaves, in
        their fused order, are a ranking of their own, fused into ``scores`` with ``split_weight``: the
        question is split into one per person, and each person's best hits reach the top."""
        named = self.subject(query)
        if len(named) < 2:
            return
        said = {node_id: speaker for node_id, speaker, _ in self._who_said(list(scores)) if speaker in named}
        if len(set(said.values())) < 2:
            return
        rank: dict[str, int] = dict.fromkeys(named, 0)
        weight = self.split_weight
        for node_id in sorted(said, key=lambda i: (-scores[i], i)):
            speaker = said[node_id]
            rank[speaker] += 1
            scores[node_id] += weight / (RRF_K + rank[speaker])

    def _who_said(self, ids: list[str]) -> Iterator[tuple[str, str | None, str | None]]:
        """(id, speaker, role) of each of ``ids`` the index holds, read in batches."""
        for part, marks in index.in_batches(ids):
            yield from self.conn.execute(f"SELECT id, speaker, role FROM chunks WHERE id IN ({marks})", part)

    def _boost_speakers(self, query: str, scores: dict[str, float], limit: int) -> None:
        """When the query names speakers, their best match leads and the rest is the fusion of two rankings:
        the ranking as it is and the one with their own leaves' scores raised by ``speaker_boost``. Their
        words come first, but the best match said by someone else keeps a place near the top (a question
        may misattribute, and a multiplied score alone pushed those out: LoCoMo adversarial -0.06).
        A query naming no speaker but speaking in the first person (``first_person``) does the same for
        the user's turns of a user/assistant chat, by ``first_person_boost`` (``FIRST_PERSON_BOOST``): the
        replies' scores are divided by it, so leaves without a role keep their place beside the user's.
        Only the best ``limit`` are reranked; the rest (never returned) are dropped."""
        self._speakers.refresh(self.conn)
        named = self._speakers.subject(query) if self.speaker_boost else frozenset()
        first = (
            not named
            and bool(self.first_person_boost)
            and first_person(query, bool(self.first_person_requests))
        )
        if not named and not first:
            return
        plain = sorted(scores, key=lambda i: (-scores[i], i))
        for node_id in plain[limit:]:
            del scores[node_id]
        plain = plain[:limit]
        own: set[str] = set()
        replies: set[str] = set()  # the other side of a user/assistant chat
        for node_id, speaker, role in self._who_said(plain):
            if named:
                if speaker is not None and speaker in named:
                    own.add(node_id)
            elif role == "user":
                own.add(node_id)
            elif role is not None:
                replies.add(node_id)
        if not own or len(own) == len(plain) or (first and not replies):
            return
        factor = 1.0 + (self.speaker_boost if named else self.first_person_boost)
        if first and not self.first_person_fused:
            # The replies go down rather than the user's turns up: within a chat the same order, while
            # what has no role (notes, documents, mail) keeps its place beside the user's turns.
            if self.first_person_answer >= 2 or (
                self.first_person_answer and _RECEIVING.intersection(_WORD_RE.findall(query.lower()))
            ):
                # The answer the user's best-matching turn got is spared: the user may ask what they got.
                best = min(own, key=lambda i: (-scores[i], i))
                replies.discard(self.leaf_structures()[1].after(best) or "")
            for node_id in replies:
                scores[node_id] /= factor
            return
        boosted = sorted(plain, key=lambda i: (-(scores[i] * factor if i in own else scores[i]), i))
        fused = dict.fromkeys(plain, 0.0)
        for ranking in (plain, boosted):
            for rank, node_id in enumerate(ranking, 1):
                fused[node_id] += 1.0 / (RRF_K + rank)
        # The named speaker's best match leads: "what did Diego say" is first answered by Diego.
        lead = boosted[0]
        fused[lead] = max(fused.values()) * (1.0 + 1e-6)
        scores.update(fused)

    def _propagate(
        self, query: str, scores: dict[str, float], limit: int, added: dict[str, float] | None = None
    ) -> None:
        """Fuse the Personalized PageRank ranking of the leaf graph, seeded by the best fused leaves and
        the entities the query names, into ``scores``. Only for a ranking of leaves without filters (the
        walk knows no filter, and ranks no summary: with summaries among the candidates it would push
        them all down)."""
        graph = self.leaf_structures()[0]
        if not scores.keys() <= graph.leaf_pos.keys():  # a summary among them (one set test, in C)
            return
        base = _without(scores, added)
        top = sorted(base, key=lambda i: (-base[i], i))[: int(self.graph_seeds)]
        seeds = {i: base[i] for i in top}
        named = dict.fromkeys(graph.entities_named(set(_WORD_RE.findall(query.lower()))), 1.0)
        weight = self.graph_weight
        for rank, node_id in enumerate(graph.walk(seeds, named, limit), 1):
            scores[node_id] = scores.get(node_id, 0.0) + weight / (RRF_K + rank)

    def _spread_to_neighbors(
        self, scores: dict[str, float], filters: Filters, added: dict[str, float] | None = None
    ) -> None:
        """Each leaf's neighbours gain a share of its score (``added``: the part of a score that does not
        spread)."""
        order = self.leaf_structures()[1]
        bonus: dict[str, float] = {}
        spread = order.spread
        weight = self.neighbor_weight
        for node_id, score in _without(scores, added).items():
            # The stronger neighbour counts, not the sum: a weak turn wedged between two strong ones must
            # not outrank them. A long neighbour is worth less context than a short one (its share).
            for neighbor, share in spread(node_id, NEIGHBOR_FULL_TOKENS):
                value = weight * share * score
                if value > bonus.get(neighbor, 0.0):
                    bonus[neighbor] = value
        if not bonus:
            return
        # Every id in ``scores`` passed the filters, and a neighbour is a leaf of the same source and
        # session: only the other filters (validity and as_of too) can leave a neighbour out.
        others = (
            filters.status,
            filters.entity,
            filters.since,
            filters.until,
            filters.valid_at,
            filters.as_of,
        )
        if any(v is not None for v in others):
            where, params = filters.sql()
            allowed: set[str] = set()
            for part, marks in index.in_batches(list(bonus)):
                allowed.update(
                    r[0]
                    for r in self.conn.execute(
                        f"SELECT c.id FROM chunks c WHERE c.id IN ({marks}) AND {where}", [*part, *params]
                    )
                )
            bonus = {k: v for k, v in bonus.items() if k in allowed}
        for node_id, extra in bonus.items():
            scores[node_id] = scores.get(node_id, 0.0) + extra

    def search(
        self, query: str, k: int = 10, filters: Filters | None = None, *, pool: int = 100
    ) -> list[Hit]:
        """The best ``k`` hits with their evidence; a summary that only quotes leaves under it is listed as
        the quoted leaf closest to the query (``quotes_as_leaves``). Context assembly (``find``) keeps
        such summaries: there they are a short stand-in for several leaves."""
        self._check(query, k)
        filters = filters or Filters()
        ranked = self.rank(query, filters, max(pool, 2 * k))
        if filters.kind is None:
            ranked = self.quotes_as_leaves(query, ranked, k, any_leaf=filters.empty)
        return self.evidence(query, self.hits(ranked[:k]))

    def find(self, query: str, k: int = 10, filters: Filters | None = None, *, pool: int = 100) -> list[Hit]:
        """``search`` without the evidence (cosine, coverage, weak): for callers that judge only the hits
        they keep (`context` assembles a few dozen of its candidates and judges those)."""
        self._check(query, k)
        return self.hits(self.rank(query, filters or Filters(), max(pool, 2 * k))[:k])

    @staticmethod
    def _check(query: str, k: int) -> None:
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("the query is empty; type a few words to search for")
        if k < 1:
            raise InvalidInput("k must be at least 1")

    def quotes_as_leaves(
        self,
        query: str,
        ranked: list[tuple[str, float, int | None, int | None]],
        k: int,
        *,
        any_leaf: bool = False,
    ) -> list[tuple[str, float, int | None, int | None]]:
        """``ranked`` with each summary among the first ``k`` that only quotes leaves under it (every
        line of an extractive summary is a sentence of one of them) standing for the quoted leaf closest
        to the query: it says nothing that leaf does not, and the leaf carries the provenance (message
        ids, speaker, time). The leaf (among those ranked, so it passed the filters) takes the
        summary's place and score unless it ranks higher already, then the summary just goes (with ``any_leaf``, no filter, also when none of its quoted leaves was ranked). The smaller a level, the more of its leaves its summary
        quotes, so without this, summaries of small levels pushed the leaves they quote out of the top.
        A summary with a person's text, an LLM's words or a line of its own stays as it is."""
        head = [row[0] for row in ranked[:k]]
        summaries = {
            r[0]
            for r in self.conn.execute(
                f"SELECT id FROM chunks WHERE id IN ({','.join('?' * len(head))}) AND kind = 'summary'", head
            )
        }
        if not summaries:
            return ranked
        out: list[tuple[str, float, int | None, int | None]] = []
        placed: set[str] = set()
        q: npt.NDArray[np.float32] | None = None
        cache: VectorCache | None = None
        position = {row[0]: n for n, row in enumerate(ranked)}
        for row in ranked:
            if row[0] in placed:
                continue
            if len(out) >= k:
                out.append(row)
                continue
            # Only leaves ranked at all (they passed the filters) can stand for it. With no filter
            # (``any_leaf``: every leaf passed) a summary none of whose quoted leaves made the pool
            # goes: it was ranked on several weak lines, none of which earned a place of its own, and
            # it kept a leaf that did out of the top k; the more (smaller) levels a tree has, the more
            # such summaries (a chat's sessions sealed apart: 1.7x the source-level summaries in
            # LoCoMo's top 25).
            found = self._quoted_leaves(row[0]) if row[0] in summaries else None
            quoted = [i for i in found or () if i in position]
            if not quoted and any_leaf and found:
                continue
            if not quoted:
                out.append(row)
                placed.add(row[0])
                continue
            if cache is None:
                embedder = self._embedder_factory()
                cache = self._vectors(embedder)
                q = self.judging_vector(embedder, query) if cache.ids else None
            vectors, pos = cache.matrix, cache.pos
            # The quoted leaf closest to the query in meaning; by rank where a vector is missing.
            best = max(
                quoted,
                key=lambda i: (
                    float(vectors[pos[i]] @ q) if q is not None and i in pos else -2.0,
                    -position.get(i, len(ranked)),
                ),
            )
            if best in placed:
                continue
            out.append((best, row[1], row[2], row[3]))
            placed.add(best)
        return out

    def _quoted_leaves(self, summary_id: str) -> list[str] | None:
        """The leaves an extractive summary quotes when every one of its lines is a sentence of a leaf under
        it (its pinned text, if any, counts as lines of its own); else None. Remembered until the index
        is written (``db.write_stamp``)."""
        stamp = write_stamp(self.conn)
        if stamp is None or self._quotes[0] != stamp or len(self._quotes[1]) > 4096:
            self._quotes = (stamp, {})
        if summary_id not in self._quotes[1]:
            self._quotes[1][summary_id] = self._read_quotes(summary_id)
        return self._quotes[1][summary_id]

    def _read_quotes(self, summary_id: str) -> list[str] | None:
        row = self.conn.execute(
            "SELECT path, text FROM chunks WHERE id = ? AND kind = 'summary'", (summary_id,)
        ).fetchone()
        if row is None:
            return None
        lines = [_QUOTE_RE.sub("", line).strip() for line in row["text"].splitlines() if line.strip()]
        if not lines:
            return None
        directory = row["path"].rsplit("/", 1)[0] + "/"
        leaves = self.conn.execute(
            # "+kind": by the path index. On kind's index SQLite read every leaf of the vault for each
            # summary (a search at 100k leaves took 230-385 ms instead of about 30).
            "SELECT id, text FROM chunks WHERE +kind = 'leaf' AND path >= ? AND path < ?",
            index.prefix_range(directory),
        ).fetchall()
        # A line quotes a leaf as the extractive summariser shows it: opening with a capital, without a
        # trailing laugh or emoji (``summarise.trim_edges``, ``capitalised``): compared case-folded and
        # without its closing punctuation.
        texts = [(r["id"], " ".join(r["text"].split()).casefold()) for r in leaves]
        found: list[str] = []
        for line in lines:
            whole = " ".join(line.split()).casefold()
            sentence = whole.rstrip(" .!?…") or whole
            holder = next((i for i, text in texts if sentence in text), None)
            if holder is None:
                return None
            if holder not in found:
                found.append(holder)
        return found

    def evidence(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """``hits`` with their own evidence filled in: the cosine of each to the query, how much of what
        the query is about is in it (``coverage``: the share of the query's content words it holds,
        each weighted by its BM25 idf in this vault, so a common word or a name on every turn counts
        little and a word no leaf has counts most), and ``weak`` when the coverage is under
        ``WEAK_COVERAGE`` and the cosine under ``weak_below(model)`` (measured in docs/architecture.md,
        "Weak matches")."""
        if not hits:
            return []
        words, cjk = content_terms(query)
        rowids: dict[str, int] = {}
        bodies: dict[int, str] = {}  # each hit's text as its word index holds it
        for node_id, rowid, path, speaker, text in self.conn.execute(
            f"SELECT id, rowid, path, speaker, text FROM chunks WHERE id IN ({','.join('?' * len(hits))})",
            [h.id for h in hits],
        ):
            rowids[node_id] = rowid
            nav = path.startswith(("topics/", "global/"))  # db.NAV: topic and digest nodes
            bodies[rowid] = text if nav or speaker is None else f"{speaker}: {text}"
        weights, holders = self._term_evidence(words, bodies)
        top = max(weights.values(), default=_idf(0, self._leaf_count()))
        for run in cjk:  # a CJK run is as telling as the rarest word
            weights[run] = top
            holders[run] = {rowids[h.id] for h in hits if run in h.text and h.id in rowids}
        total = sum(weights.values())
        embedder = self._embedder_factory()
        cache = self._vectors(embedder)
        q = self.judging_vector(embedder, query) if cache.ids else None
        floor = weak_below(embedder.model_id)
        out = []
        for hit in hits:
            pos = cache.pos.get(hit.id)
            cosine = float(cache.matrix[pos] @ q) if pos is not None and q is not None else None
            rowid = rowids.get(hit.id)
            held = sum(w for term, w in weights.items() if rowid in holders[term])
            coverage = held / total if total else 0.0
            weak = coverage < WEAK_COVERAGE and (cosine is None or cosine < floor)
            out.append(replace(hit, cosine=cosine, matched=held > 0, coverage=coverage, weak=weak))
        return out

    def subject(self, query: str) -> frozenset[str]:
        """The speakers ``query`` is about (``Speakers.subject``), read from this searcher's speakers,
        rebuilt only when leaves came, went or moved."""
        self._speakers.refresh(self.conn)
        return self._speakers.subject(query)

    def leaf_count(self) -> int:
        """Rows of the leaves' word index (``_leaf_count``)."""
        return self._leaf_count()

    def _leaf_count(self) -> int:
        """Rows of the word index (the N of idf), counted again only when rows came or went. Counted in
        the index's own table of row sizes (one small row per leaf: 4 ms at 100,000 leaves in a new
        process; the leaves' rows in ``chunks`` took 0.13-0.22 s)."""
        stamp = chunks_generation(self.conn)
        if self._count is None or self._count[0] != stamp:
            n = self.conn.execute("SELECT count(*) FROM fts_words_docsize")
            self._count = (stamp, int(n.fetchone()[0]))
        return self._count[1]

    def _term_evidence(
        self, words: list[str], bodies: dict[int, str]
    ) -> tuple[dict[str, float], dict[str, set[int]]]:
        """Each content word's idf in the word index, and which of the rows ``bodies`` (rowid -> the text
        its word index holds) hold it."""
        n = self._leaf_count()
        weights = {word: _idf(self._df("fts_words", _quoted(word)), n) for word in words}
        return weights, self._holders.holding(bodies, words)

    def _df(self, table: str, quoted: str) -> int:
        """Rows of ``table`` holding the word, remembered until the index is written (``db.write_stamp``)."""
        stamp = write_stamp(self.conn)
        if stamp is None or self._dfs[0] != stamp or len(self._dfs[1]) > 4096:
            self._dfs = (stamp, {})
        known = self._dfs[1].get((table, quoted))
        if known is None:
            sql = f"SELECT count(*) FROM {table} WHERE {table} MATCH ?"
            known = self._dfs[1][(table, quoted)] = int(self.conn.execute(sql, [quoted]).fetchone()[0])
        return known

    def hits(self, ranked: Sequence[tuple[str, float, int | None, int | None]]) -> list[Hit]:
        if not ranked:
            return []
        ids = [r[0] for r in ranked]
        rows = {
            row["id"]: row
            for row in self.conn.execute(
                f"SELECT * FROM chunks WHERE id IN ({','.join('?' * len(ids))})", ids
            )
        }
        out = []
        for node_id, score, lex, vec in ranked:
            row = rows.get(node_id)
            if row is None:
                continue
            out.append(
                Hit(
                    id=node_id,
                    kind=row["kind"],
                    path=row["path"],
                    text=row["text"],
                    score=score,
                    source=row["source"],
                    session=row["session"],
                    ts=row["ts"],
                    speaker=row["speaker"],
                    role=row["role"],
                    message_ids=tuple(json.loads(row["message_ids"])),
                    tokens=row["tokens"],
                    status=row["status"],
                    seq=row["seq"],
                    lexical_rank=lex,
                    vector_rank=vec,
                    extra={k: str(v) for k, v in json.loads(row["provenance"]).items()}
                    | ({"ts_end": row["ts_end"]} if row["kind"] == "summary" and row["ts_end"] else {}),
                )
            )
        return out


def window_ranked(
    conn: sqlite3.Connection,
    query: str,
    filters: Filters,
    now: datetime | None,
    ranked: Callable[[str, Filters], list[Hit]],
) -> list[Hit]:
    """``ranked(query, filters)`` fused with ``ranked`` over the time window the query names ("last
    Tuesday", "in May 2023", "上周三"; searched without the time words, ``merge_window``) when it names one
    and no explicit ``since``/``until`` is given. ``now`` is the reference for relative times (default: the
    current time); a date without its year means the latest such window holding memories
    (``remembered_window``); a leaf that mentions a day of the window counts as in it."""
    window = None
    if filters.since is None and filters.until is None and isinstance(query, str):
        window = timeparse.find_range(query, utc(now) if now is not None else datetime.now(UTC))
        if window is not None:
            window = remembered_window(conn, window)
    found = ranked(query, filters)
    if window is None:
        return found
    within = replace(
        filters, since=window.start, until=window.end - timedelta(microseconds=1), mentioned=True
    )
    first = ranked(timeparse.strip_range(query, window) or query, within)
    return merge_window(first, found)
