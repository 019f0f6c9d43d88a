"""A learned judge of the context's candidates past the first ones (issue 19, session 14).

The candidates ``context.gather`` assembles are ranked by fused RRF scores, whose scale says little at
the budget's edge. The judge scores each candidate with a logistic regression over what retrieval
already knows of it (``FEATURES``: its rank and fused score, the word and vector lists' ranks, its own
cosine and idf-weighted coverage from ``Searcher.evidence``, whether it is the neighbour of a
better-ranked candidate, whether it shares a session with the first five, whether the question's subject
said it), fitted by ``bench/judge.py`` on LoCoMo dev (label: the candidate holds an evidence turn), and
re-orders the candidates from rank ``first + 1`` on by that score; the first ``first`` stay in place.

Measured held out (docs/architecture.md, "A learned judge at the budget's edge"): with the first 25 kept
it changes nothing at 1,024 tokens and lifts every LoCoMo category at 2,048; keeping fewer lifts multi-hop
and open-domain at 1,024 but costs adversarial questions. Shipped with the first 25 kept
(``context.JUDGE_FROM``; 0 turns it off).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from vaultmem.search import Hit, Searcher

# Weights on the raw features, fitted on the 1,024-token candidate pools of LoCoMo dev's five
# conversations (bench/judge.py; the weights of the five leave-one-out folds are in docs/architecture.md).
WEIGHTS: dict[str, float] = {
    "log_rank": -0.2440,  # log(1 + 0-based rank)
    "score_rel": 1.7925,  # fused score / the first candidate's
    "has_lex": -0.8097,  # in the word list
    "log_lex": -0.1514,  # log(1 + rank there), 300 when absent
    "has_vec": 1.0120,  # in the vector list
    "log_vec": -0.3850,
    "cos": -1.4119,  # its cosine to the query
    "cos_rel": 0.9688,  # its cosine - the best cosine among the candidates
    "cov": 3.1982,  # idf-weighted share of the query's content words it holds
    "matched": 0.4948,  # holds one of them
    "nb_better": -0.5791,  # an adjacent turn ranks higher
    "log_nb_rank": -0.4758,  # log(1 + that turn's rank), 300 when none
    "sess_top5": 0.3736,  # same session as one of the first five
    "subj": 0.9556,  # said by the question's subject
    "other_subj": -1.3987,  # the question names a subject and someone else said it
    "oth_cov": 1.0829,  # other_subj * cov
    "oth_cosrel": -0.5175,  # other_subj * cos_rel
    "oth_score": 0.2020,  # other_subj * score_rel
    "nb_cov": -2.3030,  # nb_better * cov
}
INTERCEPT = -1.7249  # shifts every score alike: the order does not depend on it
FEATURES = tuple(WEIGHTS)
_ABSENT = 300  # the rank given to a list the candidate is not in


def features(
    hits: Sequence[Hit], neighbours: Callable[[str], Sequence[str]], subject: frozenset[str]
) -> np.ndarray:
    """One row of ``FEATURES`` per hit; ``hits`` in rank order, with their evidence (``cosine``,
    ``coverage``, ``matched``) filled in."""
    top = hits[0].score if hits and hits[0].score > 0 else 1.0
    cosines = [h.cosine if h.cosine is not None else 0.0 for h in hits]
    best = max(cosines, default=0.0)
    pos = {h.id: i for i, h in enumerate(hits)}
    top5 = {(h.source, h.session) for h in hits[:5] if h.session}
    x = np.zeros((len(hits), len(FEATURES)))
    for i, h in enumerate(hits):
        better = [pos[n] for n in neighbours(h.id) if n in pos and pos[n] < i]
        other = float(bool(subject) and h.kind == "leaf" and h.speaker not in subject)
        cov = h.coverage or 0.0
        rel = cosines[i] - best
        score = h.score / top
        near = float(bool(better))
        x[i] = [
            math.log1p(i),
            score,
            h.lexical_rank is not None,
            math.log1p(h.lexical_rank if h.lexical_rank is not None else _ABSENT),
            h.vector_rank is not None,
            math.log1p(h.vector_rank if h.vector_rank is not None else _ABSENT),
            cosines[i],
            rel,
            cov,
            bool(h.matched),
            near,
            math.log1p(min(better) if better else _ABSENT),
            (h.source, h.session) in top5,
            bool(subject) and h.kind == "leaf" and h.speaker in subject,
            other,
            other * cov,
            other * rel,
            other * score,
            near * cov,
        ]
    return x


def scores(x: np.ndarray) -> np.ndarray:
    """The judge's log-odds that each row's candidate holds what the question asks for."""
    return np.asarray(x @ np.array([WEIGHTS[f] for f in FEATURES]) + INTERCEPT)


def reorder(
    searcher: Searcher, query: str, hits: Sequence[Hit], first: int, judged: Sequence[Hit] | None = None
) -> list[Hit]:
    """``hits`` (in rank order) with the first ``first`` in place and the rest by the judge's score, ties
    in rank order. Reads each hit's evidence (``Searcher.evidence``; ``judged``: the caller read it, the
    same hits in the same order), the session order's neighbours and the speakers only when there is a
    rest to order."""
    if first < 1 or len(hits) <= first:
        return list(hits)
    order = searcher.leaf_structures()[1]
    if judged is None:
        judged = searcher.evidence(query, hits)
    s = scores(features(judged, order.neighbors, searcher.subject(query)))
    rest = sorted(range(first, len(hits)), key=lambda i: (-s[i], i))
    return [*hits[:first], *(hits[i] for i in rest)]
