"""Click models: a relevance score per (query, document) from the clicks of a search log
(docs/concepts/implicit-judgments.md).

Each model is one function from a ``ClickLog`` (the results shown, one row each, with
whether they were clicked) to an ``Estimate``, registered by name in ``MODELS``. Pure: plain
numpy arrays in, plain arrays out; no I/O.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    Vector = np.ndarray[Any, np.dtype[np.float64]]
    Indexes = np.ndarray[Any, np.dtype[np.int64]]
    Column = np.ndarray[Any, np.dtype[Any]]
else:
    from monitor.lazy import numpy as np
"""An integer column of a click log (int32 indexes, uint8 positions: 14 bytes a row)."""

MAX_POSITION = 100
"""Results shown below this position are left out (and counted)."""


@dataclass(frozen=True)
class ClickLog:
    """The results shown, one row each, with whether they were clicked.

    ``search``, ``query``, ``doc``, ``position`` and ``clicked`` are parallel arrays over the
    rows, ordered by search then position; ``query`` indexes ``queries`` (the keys) and
    ``doc`` indexes ``docs``. ``sessions`` holds, per query, its distinct sessions (counted
    up to the k-anonymity floor the reading was given); ``counts`` what was left out."""

    search: Column
    query: Column
    doc: Column
    position: Column
    clicked: np.ndarray[Any, np.dtype[np.bool_]]
    queries: list[str]
    docs: list[str]
    sessions: np.ndarray[Any, np.dtype[np.int64]]
    counts: Counter[str] = field(default_factory=Counter)

    def public(self, min_sessions: int) -> ClickLog:
        """The rows of the queries at least ``min_sessions`` distinct sessions issued; the
        queries and rows left out are counted."""
        kept = self.sessions >= min_sessions
        rows = kept[self.query]
        counts = Counter(self.counts)
        counts["queries under the k-anonymity floor"] += int(np.count_nonzero(~kept))
        counts["results shown for them"] += int(np.count_nonzero(~rows))
        return ClickLog(self.search[rows], self.query[rows], self.doc[rows],
                        self.position[rows], self.clicked[rows], self.queries, self.docs,
                        self.sessions, counts)


PBM_ITERATIONS = 500
"""The most EM iterations of the position-based model."""
PBM_TOLERANCE = 1e-7
"""EM stops once no parameter moves more than this in an iteration."""


@dataclass(frozen=True)
class Estimate:
    """A model's score per (query, document) pair, with the pair's impressions and clicks;
    ``position_bias``: the examination per position, relative to the most examined one (1
    there, position 1 in practice; NaN where nothing was shown), for the models that
    estimate it."""

    model: str
    query: Indexes
    doc: Indexes
    score: Vector
    impressions: Indexes
    clicks: Indexes
    queries: list[str]
    docs: list[str]
    position_bias: Vector | None = None
    parameters: dict[str, float] = field(default_factory=dict)
    """A model's other fitted parameters (the DBN's ``gamma``) and ``iterations`` of EM."""


@dataclass(frozen=True)
class _Pairs:
    """The rows of a log grouped by (query, document) pair: ``of_row`` is each row's pair."""

    of_row: Indexes
    query: Indexes
    doc: Indexes
    impressions: Indexes
    clicks: Indexes


def _pairs(log: ClickLog) -> _Pairs:
    width = max(len(log.docs), 1)
    keys, of_row = np.unique(log.query.astype(np.int64) * width + log.doc,
                             return_inverse=True)
    of_row = of_row.reshape(-1)
    count = len(keys)
    impressions = np.bincount(of_row, minlength=count)
    clicks = np.bincount(of_row, weights=log.clicked, minlength=count).astype(np.int64)
    return _Pairs(of_row, keys // width, keys % width, impressions, clicks)


def _estimate(model: str, log: ClickLog, pairs: _Pairs, score: Vector,
              position_bias: Vector | None = None,
              parameters: dict[str, float] | None = None) -> Estimate:
    return Estimate(model, pairs.query, pairs.doc, score, pairs.impressions, pairs.clicks,
                    log.queries, log.docs, position_bias, parameters or {})


def _position_ctr(log: ClickLog) -> Vector:
    """The click-through rate at each position (index 0: position 1; NaN: never shown)."""
    size = int(log.position.max()) if len(log.position) else 0
    shown = np.bincount(log.position - 1, minlength=size).astype(np.float64)
    clicked = np.bincount(log.position - 1, weights=log.clicked, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return clicked / shown


def coec(log: ClickLog) -> Estimate:
    """Clicks over expected clicks (Richardson, Dominowska and Ragno, WWW 2007; Chapelle and
    Zhang 2009, section 2): ``score(q, d) = clicks(q, d) / sum over the impressions of
    (q, d) of ctr(position)``, where ``ctr(k)`` is the click-through rate of every result
    shown at position ``k`` in the log. Every impression counts at its own position (a pair
    shown at 1 and at 7 expects ``ctr(1) + ctr(7)`` clicks from those two). 1 is an average
    pair for where it was shown; a pair expected to get no click scores 0."""
    pairs = _pairs(log)
    ctr = np.nan_to_num(_position_ctr(log))
    expected = np.bincount(pairs.of_row, weights=ctr[log.position - 1],
                           minlength=len(pairs.clicks))
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(expected > 0, pairs.clicks / np.where(expected > 0, expected, 1), 0.0)
    return _estimate("coec", log, pairs, score)


def pbm(log: ClickLog, iterations: int = PBM_ITERATIONS,
        tolerance: float = PBM_TOLERANCE) -> Estimate:
    """The position-based model (Craswell et al. 2008; fitted by EM as in Wang et al., WSDM
    2018, whose regression-EM replaces the per-pair M-step with a regression on features):
    a result at position ``k`` is clicked when it is examined, with probability ``theta_k``,
    and attractive, with probability ``alpha(q, d)``, independently. The score is
    ``alpha(q, d)``; ``position_bias`` is ``theta``.

    EM over the (pair, position) cells, from ``theta = alpha = 0.5``: a click means both; a
    result not clicked was attractive with probability ``alpha (1 - theta) / (1 - theta
    alpha)`` and examined with ``theta (1 - alpha) / (1 - theta alpha)``; each parameter
    becomes the mean of its posteriors. Only the products ``theta_k alpha`` are identified:
    the curve's shape (``theta_k / theta_1``) is what the data fix, not its scale, which is
    then set by ``theta = 1`` at the most examined position (position 1 in practice):
    ``alpha`` is the pair's click probability there."""
    pairs = _pairs(log)
    size = int(log.position.max()) if len(log.position) else 0
    cell_keys, of_row = np.unique(pairs.of_row * (MAX_POSITION + 1) + log.position,
                                  return_inverse=True)
    of_row = of_row.reshape(-1)
    cell_pair = cell_keys // (MAX_POSITION + 1)
    cell_position = cell_keys % (MAX_POSITION + 1) - 1
    shown = np.bincount(of_row, minlength=len(cell_keys)).astype(np.float64)
    clicked = np.bincount(of_row, weights=log.clicked, minlength=len(cell_keys))
    unclicked = shown - clicked
    pair_shown = pairs.impressions.astype(np.float64)
    position_shown = np.bincount(cell_position, weights=shown, minlength=size)
    theta = np.full(size, 0.5)
    alpha = np.full(len(pairs.clicks), 0.5)
    done = 0
    for done in range(1, iterations + 1):  # noqa: B007  # the count is reported
        t, a = theta[cell_position], alpha[cell_pair]
        none = np.maximum(1.0 - t * a, 1e-12)
        attractive = clicked + unclicked * a * (1.0 - t) / none
        examined = clicked + unclicked * t * (1.0 - a) / none
        new_alpha = np.bincount(cell_pair, weights=attractive,
                                minlength=len(alpha)) / pair_shown
        with np.errstate(invalid="ignore", divide="ignore"):
            new_theta = np.bincount(cell_position, weights=examined,
                                    minlength=size) / position_shown
        new_theta = np.where(position_shown > 0, new_theta, 0.5)
        moved = max(float(np.max(np.abs(new_alpha - alpha), initial=0.0)),
                    float(np.max(np.abs(new_theta - theta), initial=0.0)))
        theta, alpha = new_theta, new_alpha
        if moved < tolerance:
            break
    # only theta_k alpha is identified: the scale is fixed at theta = 1 where the results
    # are examined most (position 1 in practice), so that alpha is the pair's click
    # probability there (where EM's scale drifted to depends on its start, not on the clicks)
    top = float(np.max(theta[position_shown > 0], initial=0.0))
    if top > 0:
        alpha, theta = alpha * top, theta / top
    bias = np.where(position_shown > 0, theta, np.nan)
    return _estimate("pbm", log, pairs, alpha, bias, {"iterations": done})


def sdbn(log: ClickLog) -> Estimate:
    """The simplified dynamic Bayesian network (Chapelle and Zhang, WWW 2009, section 5,
    with ``gamma = 1``): a user examines the results down to the last one clicked, is
    attracted by a result with probability ``a(q, d)`` and satisfied by a clicked one with
    probability ``s(q, d)``. ``a`` = clicks / the searches in which the pair was at or above
    the last click; ``s`` = the searches in which it was the last click / its clicks; the
    score is ``a s`` (the probability that a user who examines it is satisfied by it). A
    search without a click examines nothing; a pair never examined scores 0."""
    pairs = _pairs(log)
    searches = int(log.search.max()) + 1 if len(log.search) else 0
    last = np.zeros(searches, dtype=np.int64)
    np.maximum.at(last, log.search[log.clicked], log.position[log.clicked])
    last_of_row = last[log.search]
    examined = np.bincount(pairs.of_row, weights=log.position <= last_of_row,
                           minlength=len(pairs.clicks))
    last_clicks = np.bincount(pairs.of_row, weights=log.clicked & (log.position == last_of_row),
                              minlength=len(pairs.clicks))
    clicks = pairs.clicks.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        attractive = np.where(examined > 0, clicks / np.where(examined > 0, examined, 1), 0.0)
        satisfying = np.where(clicks > 0, last_clicks / np.where(clicks > 0, clicks, 1), 0.0)
    return _estimate("sdbn", log, pairs, attractive * satisfying)


DBN_ITERATIONS = 100
"""The most EM iterations of the dynamic Bayesian network."""
DBN_TOLERANCE = 1e-5
"""EM stops once no parameter moves more than this in an iteration."""


@dataclass(frozen=True)
class _Searches:
    """The rows of a log as the DBN's E-step walks them (rows are ordered by search, then
    position; a search's last click splits it: the rows down to it were examined, those
    below it, or every row of a search without a click, are ``after``)."""

    count: int
    """Searches."""
    upward: list[tuple[Column, Column]]
    """Per distance from the bottom of the search (0 first): its rows, and the row after
    each (-1: none)."""
    downward: list[tuple[Column, Column]]
    """Per rank (0 first): its ``after`` rows that have a next row, and that row."""
    last: Indexes
    """The row of each search's last click (searches with a click)."""
    below_last: Indexes
    """The row after it (-1: none)."""
    after: Indexes
    """The rows below the last click of their search, or of a search without a click."""
    first_of_after: Indexes
    """Per ``after`` row: the first row of its search when the search has no click, else -1."""
    ends_after: Indexes
    """The positions in ``after`` of the searches' bottom rows that are ``after``."""


def _searches(log: ClickLog) -> _Searches:
    rows = len(log.search)
    every = np.arange(rows, dtype=np.int32)
    starts = (np.flatnonzero(np.r_[True, log.search[1:] != log.search[:-1]]).astype(np.int32)
              if rows else np.zeros(0, dtype=np.int32))
    lengths = np.diff(np.r_[starts, rows]).astype(np.int32)
    rank = every - np.repeat(starts, lengths)
    remaining = np.repeat(starts + lengths, lengths) - every - 1
    following = np.where(remaining > 0, every + 1, -1).astype(np.int32)
    depth = int(lengths.max()) if rows else 0
    last_rank = np.full(len(starts), -1, dtype=np.int32)
    if rows:
        np.maximum.at(last_rank, np.repeat(np.arange(len(starts), dtype=np.int32), lengths),
                      np.where(log.clicked, rank, -1).astype(np.int32))
    clicked_searches = last_rank >= 0
    last = (starts + last_rank)[clicked_searches]
    last_of_row = np.repeat(np.where(clicked_searches, starts + last_rank, -1), lengths)
    is_after = every > last_of_row
    del last_of_row
    after = np.flatnonzero(is_after)
    first_of_search = np.repeat(np.where(clicked_searches, -1, starts), lengths)
    first_of_after = first_of_search[after]
    del first_of_search
    ends = np.flatnonzero(is_after & (remaining == 0))
    moving = is_after & (following >= 0)
    upward: list[tuple[Column, Column]] = []
    downward: list[tuple[Column, Column]] = []
    for k in range(depth):
        level = np.flatnonzero(remaining == k).astype(np.int32)
        upward.append((level, following[level]))
        level = np.flatnonzero(moving & (rank == k)).astype(np.int32)
        downward.append((level, following[level]))
    return _Searches(len(starts), upward, downward, last, following[last], after,
                     first_of_after, np.searchsorted(after, ends))


def dbn(log: ClickLog, gamma: float | None = None, iterations: int = DBN_ITERATIONS,
        tolerance: float = DBN_TOLERANCE) -> Estimate:
    """The dynamic Bayesian network (Chapelle and Zhang, WWW 2009), fitted by EM: the user
    examines the first result; an examined result attracts with probability ``a(q, d)`` and
    is then clicked; a clicked result satisfies with probability ``s(q, d)``, and the user
    stops; otherwise the user examines the next result with probability ``gamma`` (the same
    everywhere; fitted when not given). The score is ``a s``, the probability that a user
    who examines the document is satisfied by it.

    E-step, per search with its last click at ``l`` (none: before the first result): every
    result down to ``l`` was examined, and a clicked one above ``l`` did not satisfy; with
    ``X_j`` the probability of no click from ``j`` on once ``j`` is examined (``X_j = (1 -
    a_j) (1 - gamma + gamma X_{j+1})``, ``X`` past the end is 1), the last click satisfied
    with probability ``s_l / (s_l + (1 - s_l)(1 - gamma + gamma X_{l+1}))``, and a result
    below ``l`` was examined with the probability of reaching it without a click, and was
    attractive with probability ``a (1 - P(examined))``. M-step: ``a`` the mean of its
    attractiveness posteriors over its impressions, ``s`` over its clicks (0.5 while it has
    none), ``gamma`` the expected continuations over the expected chances to continue."""
    pairs = _pairs(log)
    walk = _searches(log)
    rows = len(log.search)
    of_row = pairs.of_row
    impressions = pairs.impressions.astype(np.float64)
    clicks = pairs.clicks.astype(np.float64)
    alpha = np.full(len(clicks), 0.5)
    satisfy = np.full(len(clicks), 0.5)
    continues = 0.5 if gamma is None else gamma
    after, last, below_last = walk.after, walk.last, walk.below_last
    after_pairs, last_pairs = of_row[after], of_row[last]
    no_click = walk.first_of_after >= 0
    first_of_after = walk.first_of_after[no_click]
    has_below = below_last >= 0
    examined_above = rows - len(after)  # every row down to a last click: examined
    none_from = np.ones(rows)  # X_j: no click from j on, once j is examined
    reach = np.zeros(rows)  # reaching a row below the last click without a click
    done = 0
    for done in range(1, iterations + 1):  # noqa: B007  # the count is reported
        g = continues
        a = alpha[of_row]
        for level, following in walk.upward:
            beyond = np.ones(len(level))
            inside = following >= 0
            beyond[inside] = none_from[following[inside]]
            none_from[level] = (1.0 - a[level]) * (1.0 - g + g * beyond)
        s_last = satisfy[last_pairs]
        beyond = np.ones(len(last))
        beyond[has_below] = none_from[below_last[has_below]]
        satisfied = s_last / np.maximum(s_last + (1.0 - s_last) * (1.0 - g + g * beyond), 1e-12)
        reach[walk.after] = 0.0
        reach[first_of_after] = 1.0
        into = below_last[has_below]
        reach[into] = (1.0 - satisfied[has_below]) * g / np.maximum(
            1.0 - g + g * none_from[into], 1e-12)
        for level, following in walk.downward:
            reach[following] = reach[level] * (1.0 - a[level]) * g
        examined = reach[after] * none_from[after]
        examined[no_click] /= np.maximum(none_from[first_of_after], 1e-12)
        attractive = a[after] * (1.0 - examined)
        new_alpha = (clicks + np.bincount(after_pairs, weights=attractive,
                                          minlength=len(alpha))) / impressions
        sat_sum = np.bincount(last_pairs, weights=satisfied, minlength=len(alpha))
        new_satisfy = np.where(clicks > 0, sat_sum / np.maximum(clicks, 1), 0.5)
        new_gamma = continues
        if gamma is None:
            total = examined_above + float(examined.sum())
            went = total - walk.count  # every row but the first of its search
            bottom = (walk.count - len(walk.ends_after)) + float(
                examined[walk.ends_after].sum())
            could = total - bottom - float(satisfied[has_below].sum())
            new_gamma = went / could if could > 0 else continues
        moved = max(float(np.max(np.abs(new_alpha - alpha), initial=0.0)),
                    float(np.max(np.abs(new_satisfy - satisfy), initial=0.0)),
                    abs(new_gamma - continues))
        alpha, satisfy, continues = new_alpha, new_satisfy, new_gamma
        if moved < tolerance:
            break
    score = alpha * np.where(clicks > 0, satisfy, 0.0)
    return _estimate("dbn", log, pairs, score, None,
                     {"gamma": continues, "iterations": done})


MODELS: dict[str, Callable[[ClickLog], Estimate]] = {
    "coec": coec, "pbm": pbm, "dbn": dbn, "sdbn": sdbn,
}
"""The click models by name."""

THRESHOLDS: dict[str, tuple[float, float, float]] = {
    "coec": (0.5, 1.0, 2.0),
    "pbm": (0.15, 0.4, 0.7),
    "dbn": (0.05, 0.2, 0.5),
    "sdbn": (0.05, 0.2, 0.5),
}
"""Per model, the least score of labels 1, 2 and 3 (below the first: 0)."""


def label(score: Vector, thresholds: tuple[float, ...]) -> Indexes:
    """The graded label of each score: the number of thresholds it reaches."""
    return np.searchsorted(np.asarray(thresholds, dtype=np.float64), score,
                           side="right").astype(np.int64)


def kept(estimate: Estimate, min_impressions: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """The pairs shown at least ``min_impressions`` times."""
    return estimate.impressions >= min_impressions


def _rows(estimate: Estimate, mask: np.ndarray[Any, np.dtype[np.bool_]]) -> list[int]:
    """The kept pairs in order: by query text, then by score (highest first), then doc."""
    chosen = np.flatnonzero(mask).tolist()
    queries, docs, score = estimate.queries, estimate.docs, estimate.score
    chosen.sort(key=lambda i: (queries[estimate.query[i]], -score[i], docs[estimate.doc[i]]))
    return chosen


def _number(value: float) -> str:
    return f"{value:.6g}"


def as_csv(estimate: Estimate, mask: np.ndarray[Any, np.dtype[np.bool_]]) -> str:
    """A header line, then ``query,doc_id,score,impressions,clicks`` per pair."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("query", "doc_id", "score", "impressions", "clicks"))
    for i in _rows(estimate, mask):
        writer.writerow((estimate.queries[estimate.query[i]], estimate.docs[estimate.doc[i]],
                         _number(float(estimate.score[i])), int(estimate.impressions[i]),
                         int(estimate.clicks[i])))
    return out.getvalue()


QRELS_ESCAPES = {"%": "%25", "_": "%5F", "#": "%23"}
"""What a topic id escapes, so that its blanks can be ``_`` and it is never a comment."""


def qrels_id(text: str) -> str:
    """A query's topic id in qrels: its key with ``%``, ``_`` and ``#`` escaped
    (``QRELS_ESCAPES``), then every run of whitespace as ``_`` (a qrels line is
    whitespace-separated; a line beginning with ``#`` is a comment). ``query_text`` reads
    it back."""
    escaped = "".join(QRELS_ESCAPES.get(c, c) for c in text)
    return "_".join(escaped.split()) or "_"


_UNESCAPE = re.compile("|".join(re.escape(e) for e in QRELS_ESCAPES.values()), re.IGNORECASE)
_UNESCAPED = {e.upper(): c for c, e in QRELS_ESCAPES.items()}


def query_text(topic: str) -> str:
    """The query text of a topic id ``qrels_id`` wrote: ``_`` a blank, the escapes undone."""
    return _UNESCAPE.sub(lambda m: _UNESCAPED[m.group().upper()], topic.replace("_", " "))


def as_qrels(estimate: Estimate, mask: np.ndarray[Any, np.dtype[np.bool_]],
             thresholds: tuple[float, ...]) -> str:
    """TREC qrels: ``topic 0 doc label`` per pair, the topic being ``qrels_id`` of the
    query's key and the label the score's grade under ``thresholds``."""
    labels = label(estimate.score, thresholds)
    lines = []
    for i in _rows(estimate, mask):
        doc = estimate.docs[estimate.doc[i]]
        if any(c.isspace() for c in doc) or not doc:
            continue  # cannot be written in qrels; counted by the caller
        lines.append(f"{qrels_id(estimate.queries[estimate.query[i]])} 0 {doc} "
                     f"{int(labels[i])}\n")
    return "".join(lines)


def as_json(estimate: Estimate, mask: np.ndarray[Any, np.dtype[np.bool_]]) -> str:
    """``{"model", "position_bias" (when estimated; null where nothing was shown), "gamma"
    (the DBN's), "pairs": [{"query", "doc_id", "score", "impressions", "clicks"}]}``."""
    document: dict[str, object] = {"model": estimate.model}
    if "gamma" in estimate.parameters:
        document["gamma"] = round(estimate.parameters["gamma"], 6)
    if estimate.position_bias is not None:
        document["position_bias"] = [
            None if math.isnan(value) else round(float(value), 6)
            for value in estimate.position_bias
        ]
    document["pairs"] = [
        {"query": estimate.queries[estimate.query[i]], "doc_id": estimate.docs[estimate.doc[i]],
         "score": round(float(estimate.score[i]), 6), "impressions": int(estimate.impressions[i]),
         "clicks": int(estimate.clicks[i])}
        for i in _rows(estimate, mask)
    ]
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"
