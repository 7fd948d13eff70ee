"""Writes the alert rules and the dashboard for another scrape-target selector.

The shipped files select searchmon's scrape targets with ``job="searchmon"`` (a static scrape
configuration, or a PodMonitor named so). Where targets come from annotation-based discovery
they carry ``job="kubernetes-pods"`` and a namespace instead; then run

    python deploy/retarget.py 'job="kubernetes-pods",namespace="search"' OUT_DIR

and load ``OUT_DIR/searchmon.rules.yml`` and ``OUT_DIR/searchmon.json`` instead. Only the
rules and panels about the targets themselves (``up``) use the selector: every other
expression names searchmon's own metrics, which no other target exports.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
SHIPPED = 'job="searchmon"'
FILES = (DEPLOY / "prometheus" / "searchmon.rules.yml", DEPLOY / "grafana" / "searchmon.json")
_SELECTOR = re.compile(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"]*"\s*'
                       r'(,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"]*"\s*)*$')


def retarget(text: str, selector: str) -> str:
    """``text`` with the shipped selector replaced (in expressions and in the words about
    them)."""
    return text.replace(SHIPPED, selector).replace(
        "job=searchmon", selector.replace('"', "")
    ).replace('job=\\"searchmon\\"', selector.replace('"', '\\"'))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("selector", help='label matchers, e.g. job="kubernetes-pods",namespace="x"')
    parser.add_argument("out", type=Path, help="directory to write the two files to")
    args = parser.parse_args()
    if not _SELECTOR.match(args.selector):
        parser.error(f'not a list of label matchers: {args.selector!r} (e.g. job="searchmon")')
    args.out.mkdir(parents=True, exist_ok=True)
    for path in FILES:
        (args.out / path.name).write_text(retarget(path.read_text(), args.selector))
        print(f"wrote {args.out / path.name}")


if __name__ == "__main__":
    main()
