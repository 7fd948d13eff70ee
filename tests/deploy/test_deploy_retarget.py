"""The rules and the dashboard retargeted to another scrape-target selector, and to other
slice dimension names."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.files import DEPLOY, load_script

SHIPPED_DIMENSIONS = ("platform", "locale", "variant")


def retarget(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(DEPLOY / "retarget.py"), *args],
                          capture_output=True, text=True, timeout=60)


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def rules_of(path: Path) -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]


def panel_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every panel expression, with what Grafana substitutes for "All" in its variables."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    return [re.sub(r"\$\w+", lambda m: "5m" if m.group(0) == "$__rate_interval" else ".*", e)
            for e in exprs]


def test_retargeted_rules_and_dashboard_select_the_new_targets(tmp_path: Path) -> None:
    selector = 'job="kubernetes-pods",namespace="search"'
    done = retarget(selector, str(tmp_path))
    assert done.returncode == 0, done.stderr
    rules = (tmp_path / "searchmon.rules.yml").read_text()
    dashboard = (tmp_path / "searchmon.json").read_text()
    for text in (rules, dashboard):
        for shipped in ('job="searchmon"', 'job=\\"searchmon\\"', "job=searchmon"):
            assert shipped not in text, shipped
    exprs = [rule["expr"] for rule in rules_of(tmp_path / "searchmon.rules.yml")]
    assert "up{" + selector + "} == 0" in exprs
    panels = json.loads(dashboard)["panels"]
    targets = [t["expr"] for p in panels for t in p.get("targets", [])]
    assert "up{" + selector + "}" in targets
    # without --dimensions, nothing but the selector changes
    rewrite = load_script(DEPLOY / "retarget.py", "retarget").retarget
    for text, source in ((rules, DEPLOY / "prometheus" / "searchmon.rules.yml"),
                         (dashboard, DEPLOY / "grafana" / "searchmon.json")):
        assert text == rewrite(source.read_text(), selector), source.name
    check = promtool("check", "rules", str(tmp_path / "searchmon.rules.yml"))
    assert check.returncode == 0, check.stdout + check.stderr
    bad = retarget("job=searchmon", str(tmp_path))
    assert bad.returncode == 2 and "not a list of label matchers" in bad.stderr


@pytest.mark.parametrize("dimensions", [("platform", "market", "variant"),
                                        ("device", "market"),
                                        ("device", "market", "arm", "store")])
def test_dimensions_are_renamed_in_rules_and_dashboard(
    tmp_path: Path, dimensions: tuple[str, ...]
) -> None:
    done = retarget('job="searchmon"', str(tmp_path), "--dimensions", ",".join(dimensions))
    assert done.returncode == 0, done.stderr
    rules_path = tmp_path / "searchmon.rules.yml"
    rules, dashboard = rules_path.read_text(), (tmp_path / "searchmon.json").read_text()
    # the experiment alerts' and panels' `variant` label is an experiment's arm, no slice
    # dimension
    sliced = "\n".join(line for line in rules.splitlines()
                       if "experiment" not in line.lower())
    whole = json.loads(dashboard)
    board = json.dumps({**whole, "panels": [p for p in whole["panels"]
                                            if "experiment" not in json.dumps(p).lower()]})
    for gone in set(SHIPPED_DIMENSIONS) - set(dimensions):
        for text in (sliced, board):
            assert not re.search(rf"\b{gone}\b", text), f"{gone} is left"

    grouping = f"by (query_class, {', '.join(dimensions)})"
    empty = "{" + ", ".join(f'{name}=""' for name in dimensions) + "}"
    recorded = [r for r in rules_of(rules_path) if r.get("record", "").startswith("slice:")]
    assert len(recorded) == 14
    for rule in recorded:
        assert rule["expr"].count(grouping) == rule["expr"].count("sum") >= 1, rule["record"]
    alerts = [r for r in rules_of(rules_path) if r.get("alert", "").startswith("SearchSlice")]
    assert len(alerts) == 4
    for rule in alerts:
        assert empty in rule["expr"], rule["alert"]
        for name in dimensions:
            assert f"{{{{ with $labels.{name} }}}} {name}={{{{ . }}}}" in rule["annotations"][
                "summary"]
    check = promtool("check", "rules", str(rules_path))
    assert check.returncode == 0, check.stdout + check.stderr

    board = json.loads(dashboard)
    variables = [v["name"] for v in board["templating"]["list"]]
    assert variables == ["datasource", "job", "instance", "query_class", *dimensions, "runbook",
                         "scheme"]
    [row] = [i for i, p in enumerate(board["panels"]) if p["title"] == "Per slice"]
    matchers = ", ".join(f'{name}=~"${name}"' for name in dimensions)
    for panel in board["panels"][row + 1:row + 7]:
        for target in panel["targets"]:
            assert f'query_class=~"$query_class", {matchers}}}' in target["expr"], panel["title"]
    panels = tmp_path / "panels.yml"
    panels.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [
        {"record": f"panel:check_{i}:query", "expr": expr}
        for i, expr in enumerate(panel_queries(board))]}]}))
    check = promtool("check", "rules", str(panels))
    assert check.returncode == 0, check.stdout + check.stderr


def test_renamed_rules_pass_the_slice_tests_on_renamed_labels(tmp_path: Path) -> None:
    """slices.test.yml with its labels renamed passes on the rules retargeted to the same
    names: the renamed rules behave as the shipped ones."""
    names = dict(zip(SHIPPED_DIMENSIONS, ("device", "market", "arm"), strict=True))
    done = retarget('job="searchmon"', str(tmp_path), "--dimensions", ",".join(names.values()))
    assert done.returncode == 0, done.stderr
    shipped = (DEPLOY / "prometheus" / "tests" / "slices.test.yml").read_text()
    renamed = re.sub(r"\b(platform|locale|variant)\b", lambda m: names[m.group(1)], shipped)
    assert renamed.count("device") == shipped.count("platform") > 50
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "slices.test.yml").write_text(renamed)
    run = promtool("test", "rules", "slices.test.yml", cwd=tmp_path / "tests")
    assert run.returncode == 0, run.stdout + run.stderr
    # and the shipped rules do not pass it: the test tells the names apart
    (tmp_path / "searchmon.rules.yml").write_text(
        (DEPLOY / "prometheus" / "searchmon.rules.yml").read_text())
    assert promtool("test", "rules", "slices.test.yml", cwd=tmp_path / "tests").returncode != 0


@pytest.mark.parametrize(("dimensions", "message"), [
    ("platform,job", "'job' is a label or variable of the rules or dashboard already"),
    ("platform,platform", "a dimension is named twice"),
    ("plat-form", "is not a label name"),
    ("__platform", "is not a label name"),
    ("", "is not a label name"),
])
def test_dimensions_that_would_break_the_rules_are_refused(
    tmp_path: Path, dimensions: str, message: str
) -> None:
    done = retarget('job="searchmon"', str(tmp_path), "--dimensions", dimensions)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "searchmon.rules.yml").exists()
