"""Judgment files in (monitor.offline.judgment_files), several raters' labels aggregated and
their agreement (monitor.offline.agreement), and ``searchmon judgments import``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from statsmodels.stats.inter_rater import cohens_kappa, fleiss_kappa

from monitor.cli.common import EXIT_OK, EXIT_USAGE
from monitor.cli.main import main
from monitor.config import Config
from monitor.core.export import export
from monitor.core.pipeline import Pipeline
from monitor.inputs.chain import DecoderChain
from monitor.inputs.events import JudgedMessage
from monitor.offline.agreement import (
    cohen_kappa,
    krippendorff_alpha,
    majority_label,
    mean_label,
    median_label,
)
from monitor.offline.agreement import (
    fleiss_kappa as our_fleiss_kappa,
)
from monitor.offline.judgment_files import (
    JudgmentFileError,
    Rating,
    labelled,
    read_csv,
    read_qrels,
    sniff,
    units,
)
from monitor.serve.metrics import ExportCollector
from tests.support.checkpoints import round_trip

DATA = Path(__file__).parents[1] / "data"


@pytest.mark.parametrize(("ratings", "mean", "median", "majority"), [
    ([3], 3, 3, 3),
    ([3, 2], 3, 3, 2),  # 2.5 rounds half up; a tie of the majority goes to the lower
    ([0, 1, 3], 1, 1, 0),
    ([1, 1, 3], 2, 1, 1),  # mean 1.67
    ([0, 0, 1, 1], 1, 1, 0),
])
def test_the_aggregates(ratings: list[float], mean: int, median: int, majority: int) -> None:
    assert (mean_label(ratings), median_label(ratings), majority_label(ratings)) == (
        mean, median, majority)


def test_csv_with_a_header_finds_its_columns_by_name() -> None:
    found = read_csv("Query Text,Doc ID,Notes,Rating\nTent,d1,x,3\ntent,d2,,0\n,d3,,1\n"
                     "tent,d4,,-1\ntent,d5,,high\n")
    assert found.ratings == [Rating("Tent", "d1", 3.0, ""), Rating("tent", "d2", 0.0, "")]
    assert found.left_out == {"an empty query or document": (1, 4),
                              "a rating that is not a number >= 0": (2, 5)}


def test_csv_without_a_header_is_query_doc_rating_rater() -> None:
    found = read_csv('"a, b",d1,2,ann\n"a, b",d1,1,bob\n')
    assert found.ratings == [Rating("a, b", "d1", 2.0, "ann"), Rating("a, b", "d1", 1.0, "bob")]
    assert [(j.query, j.labels) for j in labelled(found.ratings, mean_label)] == [
        ("a, b", {"d1": 2})]


def test_a_header_of_query_doc_and_one_column_per_rater_is_read_per_rater() -> None:
    """Quepid's export of a book's judgements: a column per judge, named by the judge; an
    empty cell is no rating of that judge."""
    found = read_csv("query,docid,Alice Smith,Bob Jones\nlaptop,d1,3,2\nlaptop,d2,0,1\n"
                     "phone,d3,2,\nphone,d4,x,1\n")
    assert found.ratings == [
        Rating("laptop", "d1", 3.0, "Alice Smith"), Rating("laptop", "d1", 2.0, "Bob Jones"),
        Rating("laptop", "d2", 0.0, "Alice Smith"), Rating("laptop", "d2", 1.0, "Bob Jones"),
        Rating("phone", "d3", 2.0, "Alice Smith"), Rating("phone", "d4", 1.0, "Bob Jones"),
    ]
    assert found.left_out == {"a rating that is not a number >= 0": (1, 5)}
    assert units(found.ratings)[("laptop", "d2")] == {"Alice Smith": 0, "Bob Jones": 1}


def test_a_header_without_a_rating_column_is_an_error() -> None:
    with pytest.raises(JudgmentFileError, match="no rating"):
        read_csv("query,doc,comment\nq,d,fine\n")
    # a rater column: a rating per row whose column has another name, not a judge per column
    with pytest.raises(JudgmentFileError, match="no rating"):
        read_csv("query,docid,judge,points\nshoes,d1,alice,2\nshoes,d1,bob,0\n")


def test_qrels_are_recognised_and_read() -> None:
    text = (DATA / "qrels.test").read_text()
    assert sniff(text) == "qrels" and sniff("q,d,1\n") == "csv"
    found = read_qrels(text)
    assert len(found.ratings) == sum(1 for line in text.splitlines() if line.strip())
    assert found.ratings[0].query == text.split()[0]


def two_raters(seed: int) -> tuple[dict[tuple[str, str], dict[str, int]], np.ndarray]:
    rng = random.Random(seed)
    rated: dict[tuple[str, str], dict[str, int]] = {}
    table = np.zeros((4, 4))
    for item in range(200):
        first = rng.randrange(4)
        second = first if rng.random() < 0.6 else rng.randrange(4)
        rated[("q", f"d{item}")] = {"ann": first, "bob": second}
        table[first, second] += 1
    return rated, table


def test_cohens_kappa_matches_statsmodels() -> None:
    rated, table = two_raters(3)
    assert cohen_kappa(rated, "ann", "bob") == pytest.approx(cohens_kappa(table).kappa)


def test_fleiss_kappa_matches_statsmodels_with_as_many_raters_per_pair() -> None:
    rng = random.Random(4)
    rated: dict[tuple[str, str], dict[str, int]] = {}
    table = np.zeros((150, 4))
    for item in range(150):
        truth = rng.randrange(4)
        labels = {f"r{r}": truth if rng.random() < 0.5 else rng.randrange(4) for r in range(5)}
        rated[("q", f"d{item}")] = labels
        for label in labels.values():
            table[item, label] += 1
    assert our_fleiss_kappa(rated) == pytest.approx(fleiss_kappa(table))


def test_krippendorffs_alpha_matches_the_krippendorff_package() -> None:
    krippendorff = pytest.importorskip("krippendorff")
    rng = random.Random(5)
    raters = ["a", "b", "c", "d"]
    rated: dict[tuple[str, str], dict[str, int]] = {}
    matrix = np.full((len(raters), 120), np.nan)
    for item in range(120):
        truth = rng.randrange(4)
        for row, rater in enumerate(raters):
            if rng.random() < 0.7:  # missing ratings
                label = truth if rng.random() < 0.6 else rng.randrange(4)
                rated.setdefault(("q", f"d{item}"), {})[rater] = label
                matrix[row, item] = label
    expected = krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal")
    assert krippendorff_alpha(rated) == pytest.approx(expected)


@pytest.mark.parametrize(("rated", "kappa"), [
    ({("q", "a"): {"x": 1, "y": 1}, ("q", "b"): {"x": 0, "y": 0}}, 1.0),
    ({("q", "a"): {"x": 1, "y": 0}, ("q", "b"): {"x": 0, "y": 1}}, -1.0),
    ({("q", "a"): {"x": 1, "y": 1}}, None),  # one label everywhere: chance agrees fully
    ({("q", "a"): {"x": 1}}, None),  # nothing rated by both
])
def test_kappa_edge_cases(rated: dict[tuple[str, str], dict[str, int]],
                          kappa: float | None) -> None:
    assert cohen_kappa(rated, "x", "y") == kappa


def test_units_keep_a_raters_latest_rating_of_a_pair() -> None:
    ratings = [Rating("q", "d", 1, "ann"), Rating("q", "d", 3, "ann"), Rating("q", "d", 2, "bob")]
    assert units(ratings) == {("q", "d"): {"ann": 3, "bob": 2}}


def test_import_writes_messages_the_daemon_reads(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "ratings.csv"
    source.write_text("query,docid,rating,rater\ncheap flights,d1,3,ann\ncheap flights,d1,2,bob\n"
                      "cheap flights,d2,0,ann\ncheap flights,d2,0,bob\nhotel,d9,1,ann\n"
                      "hotel,d9,3,bob\n")
    out = tmp_path / "judged.jsonl"
    assert main(["judgments", "import", str(source), "--as", "judgment", "--sample-id", "s-1",
                 "--aggregate", "majority", "--timestamp", "2026-11-22T10:00:00Z",
                 "-o", str(out)]) == EXIT_OK
    err = capsys.readouterr().err
    assert "Cohen's kappa 0.143" in err  # p_o 1/3, p_e 2/9
    chain = DecoderChain(Config())
    messages = [chain.read(line) for line in out.read_bytes().splitlines()]
    assert all(type(m) is JudgedMessage for m in messages)
    first = json.loads(out.read_bytes().splitlines()[0])
    agreement = first.pop("agreement")
    assert first == {"type": "judgment", "sample_id": "s-1",
                     "timestamp": "2026-11-22T10:00:00.000Z", "query_id": "s-1-1",
                     "query_text": "cheap flights", "ranking": ["d1", "d2"],
                     "labels": {"d1": 2, "d2": 0}}
    assert agreement["raters"] == 2 and agreement["cohen_kappa"] == pytest.approx(1 / 7)
    assert set(agreement) == {"raters", "cohen_kappa", "krippendorff_alpha"}
    # the daemon exports the sample's agreement, and keeps it in its state
    pipeline = Pipeline(Config())
    for line in out.read_bytes().splitlines():
        assert pipeline.feed(line) is None
    pipeline.close()
    figures = export(pipeline)
    assert figures.offline is not None and figures.offline.agreement_sample == "s-1"
    assert dict(figures.offline.agreement)["cohen_kappa"] == pytest.approx(1 / 7)
    registry = CollectorRegistry()
    registry.register(ExportCollector(lambda: figures))
    assert 'search_judged_rater_agreement{statistic="cohen_kappa"} 0.142857' in (
        generate_latest(registry).decode())
    assert round_trip(pipeline).judged.agreement == pipeline.judged.agreement


def test_import_of_qrels_makes_qrels_messages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judgments", "import", str(DATA / "qrels.rel_level"),
                 "--timestamp", "2026-11-22T10:00:00Z"]) == EXIT_OK
    out, err = capsys.readouterr()
    messages = [json.loads(line) for line in out.splitlines()]
    assert messages and {m["type"] for m in messages} == {"qrels"}
    assert "agreement" not in err  # one rater


@pytest.mark.parametrize("argv", [
    ["--as", "judgment"],  # no --sample-id
    ["--timestamp", "yesterday"],
])
def test_import_usage_errors(tmp_path: Path, argv: list[str],
                             capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "r.csv"
    source.write_text("q,d,1\n")
    assert main(["judgments", "import", str(source), *argv]) == EXIT_USAGE
    assert capsys.readouterr().out == ""


def test_underscores_give_back_the_query_texts_of_from_clicks_qrels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "clicks.qrels"
    source.write_text("cheap_flights 0 d1 2\ncheap_flights 0 d2 0\n")
    assert main(["judgments", "import", str(source), "--underscores"]) == EXIT_OK
    message = json.loads(capsys.readouterr().out)
    assert (message["query_text"], message["labels"]) == ("cheap flights", {"d1": 2, "d2": 0})


@pytest.mark.parametrize("from_stdin", [False, True])
def test_a_byte_order_mark_is_skipped_from_a_file_or_the_standard_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        from_stdin: bool) -> None:
    import io
    import sys

    data = b"\xef\xbb\xbfquery,docid,rating\nlaptop,d1,3\n"
    source = tmp_path / "ratings.csv"
    source.write_bytes(data)
    if from_stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    assert main(["judgments", "import", "-" if from_stdin else str(source)]) == EXIT_OK
    message = json.loads(capsys.readouterr().out)
    assert (message["query_text"], message["labels"]) == ("laptop", {"d1": 3})


@pytest.mark.parametrize("text", [
    "c_sharp tutorial", "#blackfriday deals", "100% cotton", "a%5Fb _ #x", "plain words",
])
def test_from_clicks_topics_come_back_as_the_very_query_keys(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    """A query key with underscores, a leading #, or % survives the qrels round trip:
    written by from-clicks, read back with --underscores (and never as a comment)."""
    from monitor.offline.clicks import qrels_id, query_text

    topic = qrels_id(text)
    assert not topic.startswith("#") and len(topic.split()) == 1
    assert query_text(topic) == " ".join(text.split())
    source = tmp_path / "clicks.qrels"
    source.write_text(f"{topic} 0 d1 2\n")
    assert main(["judgments", "import", str(source), "--underscores"]) == EXIT_OK
    message = json.loads(capsys.readouterr().out)
    assert message["query_text"] == " ".join(text.split())
