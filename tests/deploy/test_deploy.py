"""The deploy/ artefacts: rule unit tests, config checks, dashboard, and a real Prometheus
scraping a real daemon fed through a real Kafka-protocol broker.

promtool, amtool and prometheus come from Debian's packages, installed by the test command.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import pytest
import yaml

from monitor.cli.broker import FAST_GROUP, Broker, free_port
from monitor.inputs.generate import Regression, Traffic, World, messages
from tests.support.files import DEPLOY, ROOT, load_script
from tests.support.http import get
from tests.support.wait import wait_for

RULES = DEPLOY / "prometheus" / "searchmon.rules.yml"
RULE_TESTS = ("weekly.test.yml", "searchmon.test.yml", "slices.test.yml", "experiments.test.yml")


class DashboardBuild(Protocol):
    """What the tests use of deploy/grafana/build.py, a script outside any package."""

    DIMENSIONS: tuple[str, ...]

    def dashboard(self, dimensions: Sequence[str] = ...) -> dict[str, Any]: ...

    def queries(self, dimensions: Sequence[str] = ...) -> list[tuple[str, str]]: ...

    def needs(self) -> dict[str, str]: ...


def _load_dashboard_build() -> DashboardBuild:
    return cast(DashboardBuild, load_script(DEPLOY / "grafana" / "build.py", "build"))


dashboard_build = _load_dashboard_build()


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is missing: `./dev test` installs Debian's prometheus"
    return path


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=cwd)


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_rule_unit_tests_pass() -> None:
    tests = DEPLOY / "prometheus" / "tests"
    assert {p.name for p in tests.glob("*.test.yml")} == set(RULE_TESTS), "run every file"
    done = run(tool("promtool"), "test", "rules", *RULE_TESTS, cwd=tests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(RULE_TESTS)


def test_rule_tests_pin_the_order_of_every_group() -> None:
    """promtool accepts a group_eval_order that leaves groups out, and evaluates those in no
    fixed order: each test lists every group, the recording groups before the alerts."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    recording = {g["name"] for g in groups if all("record" in r for r in g["rules"])}
    for name in RULE_TESTS:
        order = yaml.safe_load((DEPLOY / "prometheus" / "tests" / name).read_text())[
            "group_eval_order"]
        assert sorted(order) == sorted(g["name"] for g in groups), name
        alerting = [i for i, group in enumerate(order) if group not in recording]
        assert max(i for i, group in enumerate(order) if group in recording) < min(alerting)


def test_every_alert_is_tested_documented_and_annotated() -> None:
    tests = "".join(p.read_text() for p in (DEPLOY / "prometheus" / "tests").glob("*.yml"))
    runbook = (DEPLOY / "RUNBOOK.md").read_text()
    sections = set(re.findall(r"^## (\w+)$", runbook, flags=re.MULTILINE))
    for rule in alerts():
        name = rule["alert"]
        assert f"alertname: {name}\n" in tests, f"{name} has no promtool test"
        assert name in sections, f"{name} has no runbook section"
        assert rule["labels"]["severity"] in {"page", "ticket", "none"}
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(annotations)
        assert annotations["runbook_url"] == f"deploy/RUNBOOK.md#{name.lower()}"


def test_prometheus_and_alertmanager_configs_are_valid() -> None:
    done = run(tool("promtool"), "check", "config", "prometheus.yml", cwd=DEPLOY / "prometheus")
    assert done.returncode == 0, done.stdout + done.stderr
    done = run(tool("amtool"), "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_deployment_files_parse_and_agree() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert {"kafka", "searchmon", "prometheus", "alertmanager", "grafana"} <= set(
        compose["services"]
    )
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), source
    kinds = [d["kind"] for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "searchmon.yaml")
                                                   .read_text())]
    assert kinds == ["ConfigMap", "Deployment", "Service", "PodMonitor"]
    for provisioning in (DEPLOY / "grafana" / "provisioning").rglob("*.yml"):
        assert yaml.safe_load(provisioning.read_text())["apiVersion"] == 1
    unit = (DEPLOY / "systemd" / "searchmon.service").read_text()
    assert "ExecStart=" in unit and "searchmon run --config" in unit
    for config in (DEPLOY / "searchmon.docker.toml",):
        done = run(sys.executable, "-m", "monitor", "check-config", str(config))
        assert done.returncode == 0, done.stderr


def test_dashboard_json_is_built_from_the_panel_list() -> None:
    built = dashboard_build.dashboard()
    assert json.loads((DEPLOY / "grafana" / "searchmon.json").read_text()) == built, (
        "run python deploy/grafana/build.py"
    )
    titles = [p["title"] for p in built["panels"] if p["type"] == "row"]
    assert titles == ["Overview (all classes)", "Per query class", "Per slice",
                      "Offline: judged quality", "searchmon health", "Experiments"]


def test_every_family_and_recording_rule_is_on_the_dashboard() -> None:
    """Every family searchmon exports is read by a panel, directly or through a recording
    rule a panel reads; every recording rule is read by a panel, an alert or another rule
    (none is computed for nothing)."""
    from monitor.serve.metrics import CATALOGUE, consumer_metrics, served_info

    groups = yaml.safe_load(RULES.read_text())["groups"]
    recorded = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    alerts = "\n".join(r["expr"] for g in groups for r in g["rules"] if "alert" in r)
    panels = "\n".join(expr for _, expr in dashboard_build.queries())

    def reads(text: str, name: str) -> bool:
        return re.search(rf"(?<![\w:]){re.escape(name)}(_total|_bucket|_sum|_count|_info)?"
                         rf"(?![\w:])", text) is not None

    shown = panels + "\n" + "\n".join(expr for name, expr in recorded.items()
                                      if reads(panels, name))
    unread = [name for name in recorded
              if not reads(panels + alerts, name)
              and not any(reads(expr, name) for expr in recorded.values())]
    assert unread == [], "recording rules read by no panel, alert or rule"
    daemon = [m.name for m in consumer_metrics({("t", 0): 1}, True, 1.0, 0)]
    assert "searchmon_clock_jumps" in daemon  # (those of `searchmon run` only)
    served = served_info("https").name  # (of every process that serves HTTP)
    hidden = [name for name in [*(f.name for f in CATALOGUE), *daemon, served]
              if not reads(shown, name)]
    assert hidden == [], "families no panel shows"


def test_panel_queries_parse_with_promtool(tmp_path: Path) -> None:
    """Each panel query becomes a recording rule, which `promtool check rules` parses."""
    rules = [
        {"record": f"panel:check_{i}:query", "expr": expr.replace("$query_class", ".*")}
        for i, (_, expr) in enumerate(dashboard_build.queries())
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    done = run(tool("promtool"), "check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"record": "panel:broken:query", "expr": "sum(rate(x[5m])"}]}]}))
    assert run(tool("promtool"), "check", "rules", str(broken)).returncode != 0


# --- end to end: a real Prometheus scrapes `searchmon replay --serve` -----------------------

HOUR = 3600.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Kafka, `searchmon run`, and Prometheus (1 s scrapes and rule evaluation) scraping it,
    after generated traffic with a ranking bug in `navigational` went through."""
    tmp = tmp_path_factory.mktemp("stack")
    broker = Broker().start()
    world = World.build(3)
    start = Traffic().start
    traffic = Traffic(
        seed=3, sessions_per_second=0.3, duration=3.2 * HOUR, judged_every=HOUR,
        judged_queries=300, qrels=True,
        regression=Regression("navigational", start + 2.5 * HOUR),
    )
    broker.create_topics({"search-events": 4, "search-judgments": 1, "search-dead-letters": 1})
    stream = list(messages(world, traffic))
    judged = [(m.key.encode(), m.line) for m in stream if m.judged]
    # qrels and samples first, as a team would have them before watching live traffic
    produced = broker.produce("search-judgments", judged)
    searchmon_port, prometheus_port = free_port(), free_port()
    (tmp / "searchmon.toml").write_text(
        f'[kafka]\nbootstrap_servers = ["{broker.address}"]\n'
        'dead_letter_topic = "search-dead-letters"\n'
        + "".join(f"{k} = {v}\n" for k, v in FAST_GROUP.items())
        + f'[http]\nlisten = "127.0.0.1:{searchmon_port}"\n'
        f'[state]\ndir = "{tmp / "state"}"\ncheckpoint_interval = "500ms"\n'
    )
    shutil.copy(RULES, tmp / "searchmon.rules.yml")
    (tmp / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["searchmon.rules.yml"],
        "scrape_configs": [{"job_name": "searchmon", "static_configs": [
            {"targets": [f"127.0.0.1:{searchmon_port}"]}]}],
    }))
    searchmon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "run", "--config", str(tmp / "searchmon.toml")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    prometheus = subprocess.Popen(
        [tool("prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}",
         "--rules.alert.resend-delay=1s", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{prometheus_port}/api/v1"
    try:
        wait_for(lambda: _query(api, "sum(searchmon_judged_messages_total)"),
                 "every judged message scraped", 180, until=lambda got: got == [produced],
                 every=0.5)
        produced += broker.produce(
            "search-events", [(m.key.encode(), m.line) for m in stream if not m.judged]
        )
        wait_for(lambda: _query(api, "sum(searchmon_events_read_total)"),
                 "every event scraped", 180, until=lambda got: got == [produced], every=0.5)
        # a few more scrapes, so that rates have two samples and rules have run
        wait_for(lambda: _query(api, "count_over_time(up[1m])"), "4 scrapes", 60,
                 until=lambda got: got >= [4.0], every=0.5)
        yield api
    finally:
        for process in (prometheus, searchmon):
            process.send_signal(signal.SIGTERM)
        for process in (prometheus, searchmon):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        broker.stop()


def _query(api: str, expr: str) -> list[float]:
    url = f"{api}/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
    except OSError:
        return []
    return [float(r["value"][1]) for r in body["data"]["result"]]


def test_regression_alert_fires_for_the_regressed_class_only(stack: str) -> None:
    def judged_alerts() -> list[dict[str, Any]]:
        status, body = get(f"{stack}/alerts")
        assert status == 200
        return [a for a in json.loads(body)["data"]["alerts"]
                if a["labels"]["alertname"] == "SearchJudgedRegression"]

    wait_for(judged_alerts, "a SearchJudgedRegression alert", 60, every=0.5)
    found = judged_alerts()
    classes = {a["labels"]["query_class"] for a in found}
    assert "navigational" in classes
    assert classes <= {"navigational", "all"}, classes
    assert {a["state"] for a in found} <= {"pending", "firing"}
    navigational = [a for a in found if a["labels"]["query_class"] == "navigational"]
    assert "nDCG@10" in {a["labels"]["measure"] for a in navigational}


def test_every_dashboard_query_returns_data(stack: str) -> None:
    """Week-over-week series are checked without their offset: this Prometheus holds minutes,
    not a week (the expression is the same, so is the data it selects). The panels that
    need what this stack does not configure or send (experiments, interleaving, several
    raters, [slices] for the folded values) run as well: they must be valid queries."""
    here = {"a regression flagged"}  # the stack's navigational regression is
    needs = {t: n for t, n in dashboard_build.needs().items() if n not in here}
    assert set(needs) <= {title for title, _ in dashboard_build.queries()}
    for title, expr in dashboard_build.queries():
        query = expr.replace("$query_class", ".*").replace(" offset 1w", "")
        url = f"{stack}/query?" + urllib.parse.urlencode({"query": query})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", f"{title}: {body}"
        if title not in needs:
            assert body["data"]["result"], f"{title}: no data for {query}"


def test_recording_rules_aggregate_as_the_report_says(stack: str) -> None:
    assert _query(stack, 'count(query_class:search_ctr:ratio_rate5m)') == [5.0]  # 4 + other
    flags = _query(stack, 'search_judged_regression{query_class="informational"}')
    assert flags and all(v == 0.0 for v in flags)
