"""Writes the alert rules and the dashboard for another scrape-target selector, and for other
slice dimension names.

The shipped files select searchmon's scrape targets with ``job="searchmon"`` (a static scrape
configuration, or a PodMonitor named so). Where targets come from annotation-based discovery
they carry ``job="kubernetes-pods"`` and a namespace instead; then run

    python deploy/retarget.py 'job="kubernetes-pods",namespace="search"' OUT_DIR

and load ``OUT_DIR/searchmon.rules.yml`` and ``OUT_DIR/searchmon.json`` instead. Only the
rules and panels about the targets themselves (``up``) use the selector: every other
expression names searchmon's own metrics, which no other target exports.

The slice rules, alerts and dashboard row keep the dimensions ``platform``, ``locale`` and
``variant``. A team whose ``[slices] dimensions`` are named otherwise (or are more or fewer)
adds ``--dimensions`` with its names, in its order; pass the shipped selector to keep it:

    python deploy/retarget.py 'job="searchmon"' OUT_DIR --dimensions platform,market,variant
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
SHIPPED = 'job="searchmon"'
RULES = DEPLOY / "prometheus" / "searchmon.rules.yml"
DASHBOARD_BUILD = DEPLOY / "grafana" / "build.py"
SHIPPED_DIMENSIONS = ("platform", "locale", "variant")
# Labels and dashboard variables the rules and the dashboard use for something else.
TAKEN = frozenset({"query_class", "job", "instance", "le", "measure", "source", "window",
                   "sign", "reason", "topic", "partition", "version", "severity", "alertname",
                   "datasource", "runbook"})
_SELECTOR = re.compile(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"]*"\s*'
                       r'(,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"]*"\s*)*$')
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def retarget(text: str, selector: str) -> str:
    """``text`` with the shipped selector replaced (in expressions and in the words about
    them)."""
    return text.replace(SHIPPED, selector).replace(
        "job=searchmon", selector.replace('"', "")
    ).replace('job=\\"searchmon\\"', selector.replace('"', '\\"'))


def _spellings(dimensions: Sequence[str]) -> tuple[str, str, str]:
    """The three ways the rules write the dimension list: in a grouping, as the matchers of
    a series without any dimension, and as the slice named in an annotation."""
    return (", ".join(dimensions),
            ", ".join(f'{name}=""' for name in dimensions),
            "".join(f"{{{{ with $labels.{name} }}}} {name}={{{{ . }}}}{{{{ end }}}}"
                    for name in dimensions))


def redimension(rules: str, dimensions: Sequence[str]) -> str:
    """The rules with the shipped dimension names replaced by ``dimensions``."""
    for shipped, theirs in zip(_spellings(SHIPPED_DIMENSIONS), _spellings(dimensions),
                               strict=True):
        rules = rules.replace(shipped, theirs)
    return rules


def dashboard(dimensions: Sequence[str]) -> str:
    """searchmon.json as deploy/grafana/build.py builds it for ``dimensions``."""
    spec = importlib.util.spec_from_file_location("searchmon_dashboard", DASHBOARD_BUILD)
    assert spec is not None and spec.loader is not None, DASHBOARD_BUILD
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    text: str = build.dashboard_json(dimensions)
    return text


def dimension_error(names: Sequence[str]) -> str | None:
    """Why ``names`` cannot be the dimensions of the rules and dashboard, or None."""
    for name in names:
        if not _LABEL.fullmatch(name) or name.startswith("__"):
            return f"{name!r} is not a label name (letters, digits, _; not starting with __)"
        if name in TAKEN:
            return f"{name!r} is a label or variable of the rules or dashboard already"
    if len(set(names)) != len(names):
        return "a dimension is named twice"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("selector", help='label matchers, e.g. job="kubernetes-pods",namespace="x"')
    parser.add_argument("out", type=Path, help="directory to write the two files to")
    parser.add_argument("--dimensions", default=",".join(SHIPPED_DIMENSIONS),
                        help="the [slices] dimension names, comma-separated (default: %(default)s)")
    args = parser.parse_args()
    if not _SELECTOR.match(args.selector):
        parser.error(f'not a list of label matchers: {args.selector!r} (e.g. job="searchmon")')
    dimensions = [name.strip() for name in args.dimensions.split(",")]
    problem = dimension_error(dimensions)
    if problem:
        parser.error(f"--dimensions {args.dimensions!r}: {problem}")
    args.out.mkdir(parents=True, exist_ok=True)
    written = {
        RULES.name: redimension(RULES.read_text(), dimensions),
        "searchmon.json": dashboard(dimensions),
    }
    for name, text in written.items():
        (args.out / name).write_text(retarget(text, args.selector))
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
