"""``searchmon judgments from-clicks``: standard output holds the chosen format only, the
diagnostics go to standard error."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from monitor.cli.common import EXIT_OK, EXIT_USAGE
from monitor.cli.main import main
from monitor.inputs.generate import Traffic, World, messages

UBI = Path(__file__).parents[1] / "data" / "ubi-real"


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clicks") / "events.jsonl"
    traffic = Traffic(seed=2, duration=1200.0, sessions_per_second=5.0)
    path.write_bytes(b"".join(m.line + b"\n" for m in messages(World.build(2), traffic)))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["judgments", "from-clicks", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_csv_is_a_header_then_one_row_per_pair(events: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(events), "--min-impressions", "20")
    assert code == EXIT_OK
    table = list(csv.reader(io.StringIO(out)))
    assert table[0] == ["query", "doc_id", "score", "impressions", "clicks"]
    assert len(table) > 50
    assert all(int(row[3]) >= 20 and 0 <= int(row[4]) <= int(row[3]) for row in table[1:])
    assert "queries under the k-anonymity floor" in err
    assert "rejected: invalid_json" in err  # the generator's malformed lines
    assert "left out" in err


def test_json_has_the_position_bias_of_the_models_that_estimate_it(
        events: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(events), "--model", "pbm", "--format", "json")
    assert code == EXIT_OK
    document = json.loads(out)
    assert document["model"] == "pbm"
    assert len(document["position_bias"]) == 10
    assert set(document["pairs"][0]) == {"query", "doc_id", "score", "impressions", "clicks"}
    assert "position bias" in err
    code, out, _ = run(capsys, str(events), "--model", "coec", "--format", "json")
    assert "position_bias" not in json.loads(out)


def test_qrels_labels_follow_the_thresholds(events: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(events), "--model", "dbn", "--format", "qrels",
                       "--thresholds", "0.3")
    assert code == EXIT_OK
    lines = [line.split() for line in out.splitlines()]
    assert lines and all(len(line) == 4 and line[1] == "0" for line in lines)
    assert {line[3] for line in lines} == {"0", "1"}


def test_every_input_replay_reads_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    for sample in ("chorus-ubi-subset.ndjson.gz", "kata-log-subset.tsv.gz"):
        code, out, _ = run(capsys, str(UBI / sample), "--min-sessions", "1",
                           "--min-impressions", "1")
        assert code == EXIT_OK
        assert len(out.splitlines()) > 300


@pytest.mark.parametrize("argv", [
    ["--thresholds", "2,1"], ["--thresholds", "x"], ["--min-impressions", "0"],
])
def test_bad_options_are_usage_errors(events: Path, argv: list[str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        code = main(["judgments", "from-clicks", str(events), *argv])
        raise SystemExit(code)
    assert exit_.value.code == EXIT_USAGE
    assert capsys.readouterr().out == ""


def test_a_missing_file_is_a_usage_error(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(tmp_path / "none.jsonl"))
    assert code == EXIT_USAGE and out == "" and "cannot read" in err
