"""UBI data as OpenSearch users have it: ``_bulk`` exports in index order, queries without
``session_id``, impressions instead of hit ids, 0-based ordinals, integer ids; the numbers
computed by hand, the same from replay in any order (and from ``searchmon run``:
tests/integration/test_ubi.py)."""

from __future__ import annotations

import json
import random
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from monitor.cli.replay import replay_files
from monitor.config import Config
from monitor.core.export import export
from monitor.core.pipeline import RejectionLog
from monitor.inputs import files as replay_module
from monitor.serve.report import report
from tests.support.ubi import EVENTS, EXPECTED, QUERIES


def bulk(documents: list[tuple[str, dict[str, Any]]]) -> bytes:
    lines = []
    for index, document in documents:
        lines.append(json.dumps({"index": {"_index": index, "_id": uuid.uuid4().hex}}))
        lines.append(json.dumps(document))
    return ("\n".join(lines) + "\n").encode()


def replayed(tmp: Path, files: dict[str, bytes]) -> dict[str, Any]:
    paths = []
    for name, data in files.items():
        (tmp / name).write_bytes(data)
        paths.append(tmp / name)
    pipeline = replay_files(Config(), paths, [], RejectionLog(0))
    result = report(pipeline)
    assert result["rejected"] == {}
    assert (result["unmatched_clicks"], result["ignored_actions"]) == (0, 1)
    return result


def check(result: dict[str, Any]) -> None:
    entry = result["online"]["all"]
    for key, value in EXPECTED.items():
        assert abs(entry[key] - value) < 1e-12, (key, entry[key], value)


def test_a_bulk_export_in_index_order_gives_the_hand_computed_metrics(tmp_path: Path) -> None:
    """All queries first, then all events, as `_bulk` exports are: the replay sorts by event
    time (the events are an hour behind the last query), sessions come from the queries'
    client ids, each event reaches its query through query_id whatever its session_id."""
    data = bulk([("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS])
    check(replayed(tmp_path, {"ubi.ndjson": data}))


def test_any_order_and_any_split_into_files_gives_the_same_numbers(tmp_path: Path) -> None:
    documents = [("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS]
    for seed in range(5):
        random.Random(seed).shuffle(documents)
        check(replayed(tmp_path, {"shuffled.ndjson": bulk(documents)}))
    plain = {
        "queries.jsonl": b"".join(json.dumps(q).encode() + b"\n" for q in QUERIES),
        "events.jsonl": b"".join(json.dumps(e).encode() + b"\n" for e in EVENTS),
    }
    check(replayed(tmp_path, plain))


def test_a_large_unordered_input_is_sorted_in_bounded_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of RUN_LINES lines are sorted, spilled to temporary files and merged: the
    numbers equal those of the in-memory sort."""
    documents = [("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS]
    data = bulk(documents[::-1])  # newest first: far out of order
    check(replayed(tmp_path, {"reversed.ndjson": data}))
    monkeypatch.setattr(replay_module, "RUN_LINES", 3)
    spilled: list[Path] = []

    class Scratch(tempfile.TemporaryDirectory[str]):
        """The sort's scratch directory: its runs are counted before it is removed."""

        def cleanup(self) -> None:
            spilled.extend(Path(self.name).iterdir())
            super().cleanup()

    monkeypatch.setattr(tempfile, "TemporaryDirectory", Scratch)
    check(replayed(tmp_path, {"reversed.ndjson": data}))
    assert len(spilled) == 4, "14 documents in runs of 3 (the last 2 stay in memory)"


def test_impressions_rebuild_the_served_list_for_the_qrels_join(tmp_path: Path) -> None:
    """`laptop` logged no hit ids; its impressions showed 101, 102, 103 (ordinals 0 to 2).
    With qrels judging 102 relevant, the live join scores that rebuilt list: RR 1/2,
    P@5 1/5. `phone` (no qrels) and `laptop bag` (no qrels) are not joined."""
    qrels = {"type": "qrels", "timestamp": "2026-11-22T09:00:00Z", "query_text": "laptop",
             "labels": {"101": 0, "102": 2, "103": 0}}
    data = bulk([("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS])
    (tmp_path / "ubi.ndjson").write_bytes(json.dumps(qrels).encode() + b"\n" + data)
    pipeline = replay_files(Config(), [tmp_path / "ubi.ndjson"], [], RejectionLog(0))
    figures = export(pipeline).offline
    assert figures is not None
    live = {
        (m.measure, m.window): (m.mean, m.queries) for m in figures.means
        if m.source == "live" and m.slice == ("all",) and m.queries
    }
    assert live[("RR", 3600.0)] == (0.5, 1)
    assert live[("P@5", 3600.0)] == (0.2, 1)


def test_index_tab_document_lines_are_recognised_from_the_data(tmp_path: Path) -> None:
    """`<index>\\t<json>` per line (the UBI kata's export, CRLF included): each document is
    read with its index as the hint, as a `_bulk` action line gives it; other lines are left
    as they are."""
    rows = [("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS]
    tabbed = b"".join(f"{index}\t{json.dumps(doc)}\r\n".encode() for index, doc in rows)
    (tmp_path / "log.tsv").write_bytes(tabbed)
    result = report(replay_files(Config(), [tmp_path / "log.tsv"], [], RejectionLog(0)))
    check(result)
    assert result["rejected"] == {}
    (tmp_path / "bad.tsv").write_bytes(b"ubi_events\tnot json\r\n{bad\tline}\r\n")
    refused = report(replay_files(Config(), [tmp_path / "bad.tsv"], [], RejectionLog(0)))
    assert refused["rejected"] == {"invalid_json": 2}


def test_the_ubi_kata_log_replays_as_it_is_and_its_artefacts_are_flagged() -> None:
    """A real log of `<index>\\t<json>` lines (tests/data/ubi-real, 14 clients of the UBI
    kata): read whole (it was 30,958 `invalid_json` of 30,958), with the counts of its README
    as logged (CTR: queries with an `item_click`; its `global_click`s, on zero-result queries
    too, are clicks anywhere on the page, not on a result), and its artefact flagged: every
    session (a client: the query records carry no session id) successful."""
    from tests.support.files import DATA

    log = DATA / "ubi-real" / "kata-log-subset.tsv.gz"
    result = report(replay_files(Config(), [log], [], RejectionLog(0)))
    assert "invalid_json" not in result["rejected"]
    online = result["online"]["all"]
    assert (online["queries"], online["zero_result_queries"]) == (273, 202)
    assert online["clicked_queries"] == 63  # 63/273 = 0.2308, the README's hand count
    quality = result["data_quality"]
    assert quality["clicked_zero_result_queries"] == 0
    assert quality["sessions"] == quality["successful_sessions"] == 14
    assert "100.0% of 14 sessions are successful: session success and abandonment are a " \
        "logging artefact here" in quality["warnings"]


def test_the_chorus_export_counts_searches_as_a_hand_count_does() -> None:
    """The Chorus demo store's real UBI export (tests/data/ubi-real, whole searches): each
    search is a hits request plus two aggregation-only requests (`"size": 0`) under the same
    query_id, and 7 query ids were reused as the user refined the text. Counted by hand
    (tests/data/ubi-real/README.md): 28 Chorus searches by (query_id, text), 10 of them found
    nothing, plus 20 searches of another application that logs no hits (results unknown).
    Before: 41 queries, 20 zero-result (49%, the aggregation requests), 63 duplicates."""
    from tests.support.files import DATA

    export_file = DATA / "ubi-real" / "chorus-ubi-subset.ndjson.gz"
    result = report(replay_files(Config(), [export_file], [], RejectionLog(0)))
    online = result["online"]["all"]
    assert result["rejected"] == {}, "no query record is a duplicate"
    assert (online["queries"], online["zero_result_queries"]) == (48, 10)
    quality = result["data_quality"]
    assert quality["clicked_zero_result_queries"] == 0
    assert quality["reused_query_ids"] == 7, "the refined texts, each a search of its own"


def test_a_click_without_a_query_id_counts_as_a_click_on_no_known_query(tmp_path: Path) -> None:
    lines = [
        {"user_query": "hello", "query_id": "u1", "client_id": "c1",
         "timestamp": "2026-01-01T00:00:00Z", "query_response_hit_ids": ["d1"]},
        {"action_name": "click", "client_id": "c1", "timestamp": "2026-01-01T00:00:05Z",
         "event_attributes": {"object": {"object_id": "d1"}, "position": {"ordinal": 0}}},
    ]
    path = tmp_path / "ubi.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = report(replay_files(Config(), [path], [], RejectionLog(0)))
    assert result["rejected"] == {}
    assert result["online"]["all"]["clicks"] == 1 and result["unmatched_clicks"] == 1


def test_an_input_sorted_by_event_time_reads_naive_ubi_times_in_their_zone(
    tmp_path: Path,
) -> None:
    """An unordered file (replayed sorted by event time): a naive UBI time is placed in
    ``[ubi] naive_timezone``, as it is read when fed, not as UTC (which would put it hours
    off, among events it is not with)."""
    def record(n: int, stamp: str) -> str:
        return json.dumps({"query_id": f"q{n}", "client_id": f"c{n}", "user_query": "x",
                           "query_response_hit_ids": ["a"], "timestamp": stamp}) + "\n"

    later = [record(n, f"2024-06-01T{9 + n // 20:02d}:{n % 20 * 3:02d}:00.000Z")
             for n in range(40)]
    earlier = [record(100 + n, f"2024-06-01T08:{n * 3:02d}:00.000Z") for n in range(20)]
    naive = record(99, "2024-06-01T06:00:00")  # 10:00 UTC in New York (summer time)
    path = tmp_path / "ubi.jsonl"
    path.write_text("".join([*later, naive, *earlier]))
    config = Config.model_validate({"ubi": {"naive_timezone": "America/New_York"}})
    result = report(replay_files(config, [path], [], RejectionLog(0)))
    assert result["rejected"] == {} and result["online"]["all"]["queries"] == 61


@pytest.mark.parametrize("hits_first", [False, True])
def test_records_of_one_search_with_and_without_hits_count_its_hits(
    hits_first: bool, tmp_path: Path
) -> None:
    """A search logged twice (by the client, without hits, and by the server, with them):
    its results whatever record came first."""
    bare = {"query_id": "q1", "client_id": "c1", "user_query": "laptop",
            "timestamp": "2024-06-01T10:00:00.000Z"}
    full = {**bare, "timestamp": "2024-06-01T10:00:01.000Z",
            "query_response_hit_ids": ["d1", "d2"]}
    records = [full, bare] if hits_first else [bare, full]
    path = tmp_path / "ubi.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = report(replay_files(Config(), [path], [], RejectionLog(0)))
    entry = result["online"]["all"]
    assert (entry["queries"], entry["result_impressions"], entry["zero_result_queries"]) == (
        1, 2, 0)


def test_search_hits_exported_one_per_line_give_the_hand_computed_metrics(
    tmp_path: Path,
) -> None:
    """Documents as a search returns them (elasticdump, ``_search`` piped line by line):
    each record is a hit's ``_source`` and its index the hit's ``_index``; events first,
    so the replay sorts them by their documents' times."""
    hits = [{"_index": index, "_id": str(n), "_score": 1.0, "_source": document}
            for n, (index, document) in enumerate(
                [("ubi_events", e) for e in EVENTS] + [("ubi_queries", q) for q in QUERIES])]
    data = "".join(json.dumps(hit) + "\n" for hit in hits).encode()
    check(replayed(tmp_path, {"hits.jsonl": data}))


def test_a_byte_order_mark_and_blank_lines_before_a_bulk_export_change_nothing(
    tmp_path: Path,
) -> None:
    data = bulk([("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS])
    (tmp_path / "ubi.ndjson").write_bytes(b"\xef\xbb\xbf\n  \n" + data)
    pipeline = replay_files(Config(), [tmp_path / "ubi.ndjson"], [], RejectionLog(0))
    result = report(pipeline)
    assert result["rejected"] == {"invalid_json": 2}  # the blank lines, said where they are
    check(result)


def test_queries_without_their_result_list_are_counted_and_warned_of(tmp_path: Path) -> None:
    """The Chorus export: 20 of its 48 searches are another application's, which logs no
    hits. A search whose first record has no hits stays counted (a counter never drops),
    though its second record's hits count."""
    from tests.support.files import DATA

    export_file = DATA / "ubi-real" / "chorus-ubi-subset.ndjson.gz"
    quality = report(replay_files(Config(), [export_file], [], RejectionLog(0)))["data_quality"]
    assert quality["unlisted_queries"] == 20
    assert any(w.startswith("20 of 48 queries logged no result list") for w in quality["warnings"])
    bare = {"query_id": "q1", "client_id": "c1", "user_query": "laptop",
            "timestamp": "2024-06-01T10:00:00.000Z"}
    full = {**bare, "timestamp": "2024-06-01T10:00:01.000Z", "query_response_hit_ids": ["d1"]}
    path = tmp_path / "ubi.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (bare, full)))
    both = report(replay_files(Config(), [path], [], RejectionLog(0)))
    assert both["data_quality"]["unlisted_queries"] == 1
    assert both["online"]["all"]["result_impressions"] == 1
