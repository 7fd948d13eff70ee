"""Click models (monitor.offline.clicks) and the click log they read
(monitor.inputs.clicklog): hand-checked cases, a log drawn from the position-based model
itself, and the reading of every input format."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.config import Config
from monitor.core.querylists import QueryLists
from monitor.inputs.clicklog import read_click_log
from monitor.offline.clicks import (
    MODELS,
    THRESHOLDS,
    ClickLog,
    as_csv,
    as_json,
    as_qrels,
    coec,
    dbn,
    kept,
    label,
    pbm,
    sdbn,
)

START = 1_790_000_000_000  # epoch milliseconds


def log_of(searches: list[tuple[str, list[str], list[int]]],
           sessions: int = 5) -> ClickLog:
    """A click log of ``(query, shown documents, clicked positions)`` per search."""
    queries: dict[str, int] = {}
    docs: dict[str, int] = {}
    columns: list[list[int]] = [[], [], [], []]
    clicked: list[bool] = []
    for number, (text, shown, clicks) in enumerate(searches):
        query = queries.setdefault(text, len(queries))
        for position, doc in enumerate(shown, 1):
            for column, value in zip(columns, (number, query, docs.setdefault(doc, len(docs)),
                                               position), strict=True):
                column.append(value)
            clicked.append(position in clicks)
    arrays = [np.array(column, dtype=np.int64) for column in columns]
    return ClickLog(arrays[0], arrays[1], arrays[2], arrays[3], np.array(clicked, dtype=bool),
                    list(queries), list(docs), np.full(len(queries), sessions, dtype=np.int64))


def scores(estimate: Any) -> dict[tuple[str, str], float]:
    return {(estimate.queries[q], estimate.docs[d]): float(s)
            for q, d, s in zip(estimate.query, estimate.doc, estimate.score, strict=True)}


def test_coec_sums_the_expected_clicks_over_every_position_a_pair_was_shown_at() -> None:
    # position 1: 4 shown, 2 clicked (ctr 0.5); position 2: 4 shown, 1 clicked (ctr 0.25)
    log = log_of([
        ("q", ["a", "b"], [1]),
        ("q", ["b", "a"], [2]),
        ("q", ["a", "b"], []),
        ("q", ["c", "a"], [1]),
    ])
    found = scores(coec(log))
    # a: shown at 1, 2, 1, 2: expected 0.5 + 0.25 + 0.5 + 0.25 = 1.5; clicked at 1 and 2: 2
    assert found[("q", "a")] == pytest.approx(2 / 1.5)
    # b: shown at 2, 1, 2: expected 1.0; not clicked
    assert found[("q", "b")] == 0.0
    # c: shown at 1 once and clicked: 1 / 0.5
    assert found[("q", "c")] == pytest.approx(2.0)
    estimate = coec(log)
    by_pair = {(estimate.queries[q], estimate.docs[d]): (int(i), int(c)) for q, d, i, c in zip(
        estimate.query, estimate.doc, estimate.impressions, estimate.clicks, strict=True)}
    assert by_pair == {("q", "a"): (4, 2), ("q", "b"): (3, 0), ("q", "c"): (1, 1)}


def test_coec_of_a_pair_only_shown_where_nothing_is_clicked_is_zero() -> None:
    log = log_of([("q", ["a", "b"], [1]), ("q", ["a", "b"], [])])
    assert scores(coec(log))[("q", "b")] == 0.0


def test_the_simplified_dbn_examines_down_to_the_last_click() -> None:
    log = log_of([
        ("q", ["a", "b", "c"], [1, 2]),  # a, b examined; a clicked, b the last click
        ("q", ["a", "b", "c"], [1]),  # a examined, clicked, the last
        ("q", ["b", "a", "c"], [2]),  # b, a examined; a the last click
        ("q", ["c", "b", "a"], []),  # nothing examined
    ])
    found = scores(sdbn(log))
    # a: examined 3, clicked 3, last 2: (3/3) * (2/3)
    assert found[("q", "a")] == pytest.approx(2 / 3)
    # b: examined 2 (searches 1 and 3), clicked 1, last 1: (1/2) * (1/1)
    assert found[("q", "b")] == pytest.approx(0.5)
    # c: never examined
    assert found[("q", "c")] == 0.0


Search = tuple[str, list[str], list[int]]
"""A search of ``log_of``: its query, the documents shown, the positions clicked."""


def drawn_from_pbm(rng: np.random.Generator, theta: np.ndarray[Any, Any],
                   alpha: np.ndarray[Any, Any], count: int) -> list[Search]:
    """``count`` searches of one query, each showing a random ``len(theta)`` of the
    ``len(alpha)`` documents, clicked as the position-based model draws them."""
    searches = []
    for _ in range(count):
        shown = rng.permutation(len(alpha))[:len(theta)]
        clicks = rng.random(len(theta)) < theta * alpha[shown]
        searches.append(("q", [f"d{d}" for d in shown],
                         [int(k) + 1 for k in np.flatnonzero(clicks)]))
    return searches


@pytest.mark.slow
def test_pbm_recovers_the_parameters_of_a_log_drawn_from_it() -> None:
    rng = np.random.default_rng(7)
    theta = np.array([0.95, 0.7, 0.5, 0.35, 0.25, 0.18, 0.12, 0.08])
    alpha = rng.uniform(0.02, 0.9, size=60)
    estimate = pbm(log_of(drawn_from_pbm(rng, theta, alpha, 20_000)))
    assert estimate.position_bias is not None
    shape = estimate.position_bias / estimate.position_bias[0]
    assert np.max(np.abs(shape - theta / theta[0])) < 0.03
    assert estimate.position_bias[0] == 1.0
    found = scores(estimate)
    fitted = np.array([found[("q", f"d{d}")] for d in range(60)])
    # the scale is not identified: alpha * theta_1 is, the click probability at position 1,
    # which the fit gives (about 1,000 examinations a pair: a standard error up to 0.016)
    assert np.max(np.abs(fitted - alpha * theta[0])) < 0.08


def test_pbm_gives_the_click_probability_at_position_1_whatever_the_top_examination() -> None:
    """Drawn with theta_1 = 0.6: alpha as fitted is 0.6 alpha, not a point EM drifted to."""
    rng = np.random.default_rng(5)
    theta = np.array([0.6, 0.45, 0.3, 0.2, 0.12])
    alpha = rng.uniform(0.05, 0.9, size=30)
    estimate = pbm(log_of(drawn_from_pbm(rng, theta, alpha, 12_000)))
    found = scores(estimate)
    fitted = np.array([found[("q", f"d{d}")] for d in range(30)])
    assert np.max(np.abs(fitted - alpha * theta[0])) < 0.06
    assert estimate.position_bias is not None and estimate.position_bias[0] == 1.0


@pytest.mark.slow
def test_the_dbn_recovers_the_parameters_of_a_log_drawn_from_it() -> None:
    rng = np.random.default_rng(11)
    attract = rng.uniform(0.05, 0.9, size=30)
    satisfy = rng.uniform(0.1, 0.9, size=30)
    gamma = 0.7
    searches = []
    for _ in range(12_000):
        shown = rng.permutation(30)[:6]
        clicks = []
        for position, doc in enumerate(shown, 1):
            if rng.random() < attract[doc]:
                clicks.append(position)
                if rng.random() < satisfy[doc]:
                    break
            if rng.random() >= gamma:
                break
        searches.append(("q", [f"d{d}" for d in shown], clicks))
    estimate = dbn(log_of(searches))
    assert estimate.parameters["gamma"] == pytest.approx(gamma, abs=0.02)
    found = scores(estimate)
    fitted = np.array([found[("q", f"d{d}")] for d in range(30)])
    assert np.max(np.abs(fitted - attract * satisfy)) < 0.08


def test_the_labels_count_the_thresholds_a_score_reaches() -> None:
    got = label(np.array([0.0, 0.49, 0.5, 0.99, 1.0, 1.99, 2.0, 9.0]), THRESHOLDS["coec"])
    assert got.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_the_formats_keep_the_pairs_shown_often_enough() -> None:
    log = log_of([("q one", ["a", "b"], [1])] * 3 + [("q one", ["c"], [])])
    estimate = pbm(log)
    mask = kept(estimate, 2)
    lines = as_csv(estimate, mask).splitlines()
    assert lines[0] == "query,doc_id,score,impressions,clicks"
    assert [line.split(",")[1:2] + line.split(",")[3:] for line in lines[1:]] == [
        ["a", "3", "3"], ["b", "3", "0"]]
    document = json.loads(as_json(estimate, mask))
    assert document["model"] == "pbm"
    assert len(document["position_bias"]) == 2
    assert [pair["doc_id"] for pair in document["pairs"]] == ["a", "b"]
    qrels = as_qrels(estimate, mask, (0.5,)).splitlines()
    assert qrels == ["q_one 0 a 1", "q_one 0 b 0"]


def events_file(path: Path, events: list[dict[str, Any]], gzipped: bool = False) -> Path:
    data = b"".join(json.dumps(event).encode() + b"\n" for event in events)
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


def query(number: int, text: str, results: list[str] | None, session: str = "s",
          **more: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "query", "event_id": f"q-{number}", "timestamp": START + number * 1000,
        "session_id": f"{session}{number}", "query_id": f"id-{number}", "query_text": text,
    }
    if results is None:
        event["results_known"] = False
    else:
        event["result_ids"] = results
    return event | more


def click(number: int, doc: str, position: int, event: str = "") -> dict[str, Any]:
    return {"type": "click", "event_id": f"c-{number}-{doc}{event}",
            "timestamp": START + number * 1000 + 500, "session_id": f"s{number}",
            "query_id": f"id-{number}", "doc_id": doc, "position": position}


def read(paths: list[Path], min_sessions: int = 1) -> ClickLog:
    config = Config()
    return read_click_log(paths, config, QueryLists(config.query_lists).key, min_sessions)


def rows(log: ClickLog) -> list[tuple[str, str, int, bool]]:
    return [(log.queries[q], log.docs[d], int(p), bool(c)) for q, d, p, c in zip(
        log.query, log.doc, log.position, log.clicked, strict=True)]


def test_the_reader_joins_clicks_to_the_logged_list_in_any_order(tmp_path: Path) -> None:
    path = events_file(tmp_path / "e.jsonl.gz", [
        click(1, "b", 2),  # before its query
        query(1, "  Cheap  FLIGHTS ", ["a", "b", "c"]),
        click(1, "b", 2),  # the same click again: counted once
        query(1, "cheap flights", ["a", "b", "c"]),  # the same search again
        click(1, "c", 7),  # not where it was shown: by its document
    ], gzipped=True)
    log = read([path])
    assert rows(log) == [("cheap flights", "a", 1, False), ("cheap flights", "b", 2, True),
                         ("cheap flights", "c", 3, True)]


def record(event: str, seconds: int, text: str, results: list[str]) -> dict[str, Any]:
    """A query record of session s1 under the query id Q1, ``seconds`` after START."""
    return {"type": "query", "event_id": event, "timestamp": START + seconds * 1000,
            "session_id": "s1", "query_id": "Q1", "query_text": text, "result_ids": results}


def click_on_q1(event: str, seconds: int, doc: str, position: int) -> dict[str, Any]:
    """A click of session s1 on the search of Q1, ``seconds`` after START."""
    return {"type": "click", "event_id": event, "timestamp": START + seconds * 1000,
            "session_id": "s1", "query_id": "Q1", "doc_id": doc, "position": position}


def test_another_text_under_a_query_id_is_another_search_its_clicks_follow_in_time(
        tmp_path: Path) -> None:
    """A refinement logged under the same query_id (in file order after, in event time
    before): each text is its own search with its own list, and a click goes to the search
    of its id it follows in event time."""
    path = events_file(tmp_path / "e.jsonl", [
        record("e1", 55, "printe", []),
        record("e2", 30, "printer toner", ["t1", "t2"]),
        click_on_q1("c1", 36, "t1", 1),
        record("e3", 60, "printer ink", ["i1", "i2"]),
        click_on_q1("c2", 61, "i2", 2),
        click_on_q1("c3", 10, "t1", 1),  # before them all: the earliest
        record("e4", 70, "printer toner", ["t1", "t2"]),  # toner searched again
        click_on_q1("c4", 75, "t2", 2),  # toner's (70), not ink's (60)
    ])
    log = read([path])
    assert rows(log) == [
        ("printer toner", "t1", 1, True), ("printer toner", "t2", 2, True),
        ("printer ink", "i1", 1, False), ("printer ink", "i2", 2, True),
    ]
    assert log.counts["clicks on a result not shown"] == 0


def test_without_a_logged_list_the_impression_events_are_what_was_shown(
        tmp_path: Path) -> None:
    def ubi(action: str, doc: str, index: int) -> dict[str, Any]:
        return {"action_name": action, "query_id": "u1", "client_id": "c1",
                "timestamp": "2026-11-22T10:00:01Z",
                "event_attributes": {"object": {"object_id": doc},
                                     "position": {"ordinal": index}}}

    path = tmp_path / "ubi.txt"
    lines = [
        {"query_id": "u1", "client_id": "c1", "user_query": "Tent",
         "timestamp": "2026-11-22T10:00:00Z"},
        ubi("impression", "x", 0), ubi("impression", "y", 1), ubi("impression", "y", 1),
        ubi("click", "y", 1),
    ]
    path.write_text("".join(f"ubi_{'queries' if 'user_query' in line else 'events'}\t"
                            f"{json.dumps(line)}\n" for line in lines))
    log = read([path])
    assert rows(log) == [("tent", "x", 1, False), ("tent", "y", 2, True)]


def test_the_k_anonymity_floor_counts_distinct_sessions_over_the_whole_input(
        tmp_path: Path) -> None:
    events = [query(n, "rare", ["a"], session="one") for n in range(1, 4)]  # 3 sessions
    events += [query(n, "common", ["a"]) for n in range(4, 9)]  # 5 sessions
    log = read([events_file(tmp_path / "e.jsonl", events)], min_sessions=5)
    assert {row[0] for row in rows(log)} == {"common"}
    assert log.counts["queries under the k-anonymity floor"] == 1
    assert log.counts["results shown for them"] == 3


def test_ubi_queries_that_name_no_user_count_no_session_toward_the_floor(
        tmp_path: Path) -> None:
    """A UBI query record with neither session_id nor client_id is a session of its one
    query: five of one text are not five users, and stay under the floor."""
    path = tmp_path / "ubi.jsonl"
    path.write_text("".join(json.dumps({
        "query_id": f"u{n}", "user_query": "jane doe", "query_response_hit_ids": ["a"],
        "timestamp": START + n * 1000}) + "\n" for n in range(5)))
    log = read([path], min_sessions=5)
    assert rows(log) == []
    assert log.counts["queries under the k-anonymity floor"] == 1


def test_the_reader_counts_what_it_cannot_use(tmp_path: Path) -> None:
    path = events_file(tmp_path / "e.jsonl", [
        query(1, "q", ["a"]), click(1, "z", 5), click(2, "a", 1),
        {"type": "qrels", "timestamp": START, "query_text": "q", "labels": {"a": 1}},
    ])
    with path.open("ab") as file:
        file.write(b"{not json\n")
    log = read([path])
    assert log.counts == Counter({
        "clicks on a result not shown": 1, "clicks of searches whose results are unknown": 1,
        "judged messages": 1, "rejected: invalid_json": 1,
        "queries under the k-anonymity floor": 0, "results shown for them": 0,
    })


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("sample", ["chorus-ubi-subset.ndjson.gz", "kata-log-subset.tsv.gz"])
def test_every_model_fits_the_real_ubi_samples(name: str, sample: str) -> None:
    log = read([Path(__file__).parents[1] / "data" / "ubi-real" / sample])
    estimate = MODELS[name](log)
    assert len(estimate.score) > 300
    assert np.all(np.isfinite(estimate.score)) and np.all(estimate.score >= 0)
    assert int(estimate.clicks.sum()) > 0


def test_pbm_is_scaled_where_results_are_examined_most_even_if_never_at_position_1() -> None:
    """Nothing at position 1 is ever clicked (theta_1 = 0 in the log): the scale is set at
    the most examined position, not by dividing by an examination EM drove to ~0."""
    rng = np.random.default_rng(3)
    theta = np.array([0.0, 0.9, 0.7, 0.5, 0.3])
    alpha = rng.uniform(0.1, 0.9, size=30)
    estimate = pbm(log_of(drawn_from_pbm(rng, theta, alpha, 6_000)))
    assert estimate.position_bias is not None
    assert np.nanmax(estimate.position_bias) == 1.0 and estimate.position_bias[1] == 1.0
    found = scores(estimate)
    fitted = np.array([found[("q", f"d{d}")] for d in range(30)])
    assert np.max(np.abs(fitted - alpha * theta[1])) < 0.08


def test_a_search_keeps_the_time_of_every_record_whatever_the_file_order(
        tmp_path: Path) -> None:
    """A text's records read at 20 s then 0 s: a click at 25 s follows its record at 20 s,
    not the other text's at 10 s (the later-read earlier record once replaced the 20 s)."""
    path = events_file(tmp_path / "e.jsonl", [
        record("e1", 20, "printer toner", ["t1", "t2"]),
        record("e2", 10, "printer ink", ["i1", "i2"]),
        record("e3", 0, "printer toner", ["t1", "t2"]),
        click_on_q1("c1", 25, "t2", 2),
    ])
    log = read([path])
    assert ("printer toner", "t2", 2, True) in rows(log)
    assert log.counts["clicks on a result not shown"] == 0
