"""The live qrels join scores as `searchmon eval` scores the same qrels and run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from monitor.config import parse_config
from monitor.core.judged import OVERALL
from monitor.core.pipeline import Pipeline
from monitor.offline.evaluate import evaluate
from monitor.offline.spec import parse_measure
from monitor.offline.trec import Qrels, Run
from tests.support.events import line, stamp


def _write(path: Path, labels: dict[str, dict[str, int]]) -> Path:
    path.write_text("".join(
        f"{t.replace(' ', '_')} 0 {d} {g}\n" for t, j in labels.items() for d, g in j.items()
    ))
    return path


def _write_run(path: Path, served: dict[str, list[str]], keys: dict[str, str]) -> Path:
    path.write_text("".join(
        f"{keys[t].replace(' ', '_')} Q0 {d} {i + 1} {len(r) - i} x\n"
        for t, r in served.items() for i, d in enumerate(r)
    ))
    return path


def test_live_join_equals_searchmon_eval(tmp_path: Path) -> None:
    labels = {
        "cheap flights": {"d1": 2, "d4": 1, "d9": 1},
        "pizza near me": {"d2": 1, "d3": 0},
        "python tutorial": {"d5": 3, "d6": 0, "d7": 1},
    }
    served = {
        "cheap flights": ["d4", "d2", "d1", "d8"],
        "Pizza  near ME": ["d3", "d1", "d7"],
        "python tutorial": ["d6", "d7", "d5", "d1", "d2"],
    }
    pipeline = Pipeline(parse_config('[offline]\nmeasures = ["nDCG@10", "P@2", "AP", "RR"]'))
    for i, (text, judged) in enumerate(labels.items()):
        pipeline.feed(line({"type": "qrels", "timestamp": stamp(i), "query_text": text,
                            "labels": judged}))
    for i, (text, results) in enumerate(served.items()):
        pipeline.feed(line({
            "type": "query", "event_id": f"e{i}", "timestamp": stamp(10 + i),
            "session_id": f"s{i}", "query_id": f"q{i}", "query_text": text,
            "result_ids": results,
        }))
    pipeline.close()
    live = {k: v for k, v in pipeline.judged.histogram_sums.items() if k[0] == "live"}
    qrels = Qrels.from_columns(
        [t.encode() for t, j in labels.items() for _ in j],
        [d.encode() for j in labels.values() for d in j],
        [g for j in labels.values() for g in j.values()],
    )
    keys = {"cheap flights": "cheap flights", "Pizza  near ME": "pizza near me",
            "python tutorial": "python tutorial"}
    run = Run.from_columns(
        [keys[t].encode() for t, r in served.items() for _ in r],
        [d.encode() for r in served.values() for d in r],
        [float(len(r) - i) for r in served.values() for i in range(len(r))],
    )
    specs = [parse_measure(m) for m in ("nDCG@10", "P@2", "AP", "RR")]
    expected = evaluate(qrels, run, specs)
    for m, spec in enumerate(specs):
        total = float(np.sum(expected.values[spec]))
        assert live[("live", OVERALL, m)] == pytest.approx(total), str(spec)
    # and the same through the command line, per query
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "eval", "-q", "--json", "-m", "nDCG@10",
         str(_write(tmp_path / "qrels", labels)), str(_write_run(tmp_path / "run", served, keys))],
        capture_output=True, text=True, timeout=60,
    )
    per_query = json.loads(done.stdout)["nDCG@10"]
    assert math.fsum(v for q, v in per_query.items() if q != "all") == pytest.approx(
        live[("live", OVERALL, 0)]
    )


@pytest.mark.parametrize(("until", "expected"), [(None, True), ("4h", False)])
def test_replay_of_a_lasting_regression_as_a_new_user_runs_it(
    tmp_path: Path, until: str | None, expected: bool
) -> None:
    """`generate --duration 6h --judged-every 1h --regression-class navigational
    --regression-after 2h`, then `replay`: under the example configuration the last sample
    is still a regression, flagged since the first one after the bug; with the bug fixed at
    4h, it is not."""
    events = tmp_path / "six-hours.jsonl"
    generate = [
        sys.executable, "-m", "monitor", "generate", "--duration", "6h", "--judged-every", "1h",
        "--sessions-per-second", "0.5", "--regression-class", "navigational",
        "--regression-after", "2h", "-o", str(events),
        *(["--regression-until", until] if until else []),
    ]
    subprocess.run(generate, check=True, timeout=120)
    config = Path(__file__).resolve().parents[2] / "config.example.toml"
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", str(events), "--config", str(config),
         "--report", "json", "--log-level", "error"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    verdict = result["regressions"]["navigational"]["nDCG@10"]
    assert verdict["regression"] is expected, verdict
    if expected:
        assert verdict["baseline"] == "sample-1" and verdict["flagged_samples"] == 5
        assert verdict["since_sample"] == "sample-2"
    flagged = {klass for klass, measures in result["regressions"].items()
               if any(v["regression"] for v in measures.values())}
    assert flagged <= {"navigational", "all"}
    assert result["acceptances"] == []
