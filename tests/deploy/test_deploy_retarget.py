"""The rules and the dashboard retargeted to another scrape-target selector."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.files import DEPLOY


def test_retargeted_rules_and_dashboard_select_the_new_targets(tmp_path: Path) -> None:
    selector = 'job="kubernetes-pods",namespace="search"'
    done = subprocess.run(
        [sys.executable, str(DEPLOY / "retarget.py"), selector, str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rules = (tmp_path / "searchmon.rules.yml").read_text()
    dashboard = (tmp_path / "searchmon.json").read_text()
    for text in (rules, dashboard):
        for shipped in ('job="searchmon"', 'job=\\"searchmon\\"', "job=searchmon"):
            assert shipped not in text, shipped
    exprs = [rule["expr"] for group in yaml.safe_load(rules)["groups"] for rule in group["rules"]]
    assert "up{" + selector + "} == 0" in exprs
    panels = json.loads(dashboard)["panels"]
    targets = [t["expr"] for p in panels for t in p.get("targets", [])]
    assert "up{" + selector + "}" in targets
    check = subprocess.run(["promtool", "check", "rules", str(tmp_path / "searchmon.rules.yml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    bad = subprocess.run(
        [sys.executable, str(DEPLOY / "retarget.py"), "job=searchmon", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and "not a list of label matchers" in bad.stderr
