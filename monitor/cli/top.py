"""``searchmon top``: the query lists of a daemon, of replicas merged, or of a replay report,
printed for a terminal (control characters shown escaped)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from monitor.cli.common import EXIT_OK, UsageError, fetch, query_state, shown_url


def command(args: argparse.Namespace) -> int:
    import json
    from urllib.parse import urlencode

    from monitor.serve.queries import FilterError, format_lists, report_of, select

    values = {}
    for pair in args.slice:
        name, equals, value = pair.partition("=")
        if not equals or not name or not value:
            raise UsageError(f"--slice {pair!r}: expected DIMENSION=VALUE (platform=ios)")
        values[name] = value
    filters = {"class": args.query_class, "window": args.window, "list": args.list_name,
               **values}
    if args.url is not None and len(args.url) == 1:
        asked = urlencode({k: v for k, v in filters.items() if v is not None})
        url = args.url[0]
        try:
            report = json.loads(fetch(url, "/queries" + ("?" + asked if asked else "")))
        except ValueError:
            raise UsageError(f"{shown_url(url)}: not a searchmon endpoint (its /queries is "
                             "not JSON)") from None
    else:
        if args.url is not None:  # replicas: their summaries merge as the partitions' did
            unfiltered = report_of(query_state(args.url))
        else:
            unfiltered = _replay_queries(args.report)
        try:
            report = select(unfiltered, filters["class"], filters["window"], filters["list"],
                            values)
        except FilterError as error:
            raise UsageError(str(error)) from None
        except (KeyError, TypeError, AttributeError) as error:
            raise _not_a_report(args, error) from None
    try:
        text = format_lists(report, max(args.rows, 1))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise _not_a_report(args, error) from None
    sys.stdout.write(text)
    return EXIT_OK


def _not_a_report(args: argparse.Namespace, error: Exception) -> UsageError:
    """A report (a file, or an endpoint's answer) without the fields of query lists."""
    from monitor.text import printable

    source = str(args.report) if args.report is not None else " ".join(
        shown_url(url) for url in args.url)
    return UsageError(f"{printable(source)}: not the query lists of searchmon "
                      f"({type(error).__name__}: {printable(str(error))[:200]})")


def _replay_queries(path: Path) -> dict[str, Any]:
    """The ``queries`` of a ``replay --report json`` output (``-``: standard input)."""
    import json

    try:
        document = json.loads(sys.stdin.read() if str(path) == "-" else path.read_text())
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    except ValueError as error:
        raise UsageError(f"{path}: not JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("queries"), dict):
        raise UsageError(f"{path}: not a replay --report json output (no queries)")
    queries: dict[str, Any] = document["queries"]
    return queries

