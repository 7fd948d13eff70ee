"""``searchmon sample``: queries of search logs picked for judging, each with the results it
was last served; or queries of a running daemon's query lists (``--url``), which keep counts,
not served lists."""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from monitor.cli.common import EXIT_OK, UsageError, load, query_state, read_events

if TYPE_CHECKING:
    from monitor.offline.sampling import Candidate


def note(text: str) -> None:
    print(f"searchmon sample: {text}", file=sys.stderr)


def _candidate(query: str, searches: int, query_class: str, values: Sequence[str],
               dimensions: Sequence[str], by: Sequence[str]) -> Candidate:
    """A query to pick from, in its stratum: its class and values of the ``--by`` names."""
    from monitor.offline.sampling import Candidate

    named = dict(zip(dimensions, values, strict=True))
    return Candidate(query, searches,
                     tuple(query_class if name == "class" else named[name] for name in by))


def _picked(count: int, method: str, by: Sequence[str]) -> str:
    return f"{count:,} queries picked ({method}" + (f", by {', '.join(by)}" if by else "") + ")"


def command(args: argparse.Namespace) -> int:
    from monitor.core.classes import QueryClasses
    from monitor.core.querylists import QueryLists
    from monitor.inputs.clicklog import QueryTallyReader, decoded, read_all
    from monitor.inputs.events import QueryEvent
    from monitor.inputs.generate import rfc3339
    from monitor.offline.sampling import sample

    if args.url and args.events:
        raise UsageError("give search logs (EVENTS) or --url (a running daemon's lists), "
                         "not both")
    if not args.url and not args.events:
        raise UsageError("give search logs (EVENTS) or --url (a running daemon's lists)")
    by = list(dict.fromkeys(args.by or []))
    if args.url:
        return _from_lists(args, by)
    if args.window is not None:
        raise UsageError("--window: only with --url (search logs are sampled whole)")
    config = load(args.config)
    if not config.query_lists.enabled:
        raise UsageError("[query_lists] enabled = false: no query text may be shown")
    dimensions = tuple(name for name in by if name != "class")
    classes = QueryClasses.from_config(config.query_classes)

    def classify(event: QueryEvent) -> str:
        return classes.names[classes.classify(event.query_class, event.query_text)]

    min_sessions = args.min_sessions or config.query_lists.min_sessions
    reader = QueryTallyReader(min_sessions, QueryLists(config.query_lists).key, classify,
                              dimensions)
    read_events(args.events, lambda: read_all(reader, decoded(args.events, config)))
    records = reader.records
    public = {key: r for key, r in records.items() if len(r.sessions) >= min_sessions}
    what = "queries" + (f" by {', '.join(dimensions)}" if dimensions else "")
    note(f"{len(records):,} {what}, {len(records) - len(public):,} under the k-anonymity "
         f"floor ({min_sessions} distinct sessions) left out")
    index = {}
    candidates = []
    for (query, values), record in public.items():
        candidate = _candidate(query, record.searches, record.query_class, values, dimensions,
                               by)
        index[id(candidate)] = (record, values)
        candidates.append(candidate)
    picked = sample(candidates, args.count, args.method, random.Random(args.seed))
    unlisted = sum(1 for c in picked if not index[id(c)][0].results)
    if unlisted:
        note(f"{unlisted:,} picked queries have no logged result list (their results: none)")
    note(_picked(len(picked), args.method, by))
    rows = []
    for c in picked:
        record, values = index[id(c)]
        rows.append(Picked(c.query, record.query_class, values, c.searches,
                           rfc3339(record.served_at) if record.results else None,
                           record.results))
    return _write(rows, dimensions, args.format)


class Picked(NamedTuple):
    """A query picked, as written: its stratum's values of the dimensions, its searches, and
    the list it was last served (when known)."""

    query: str
    query_class: str
    values: tuple[str, ...]
    searches: int
    served_at: str | None
    results: list[str]


def _write(picked: list[Picked], dimensions: tuple[str, ...], form: str) -> int:
    """The picks on standard output: JSON, or CSV with a row per served result."""
    if form == "json":
        rows = [{"query": p.query, "query_class": p.query_class,
                 **dict(zip(dimensions, p.values, strict=True)), "searches": p.searches,
                 "served_at": p.served_at, "results": p.results} for p in picked]
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
        return EXIT_OK
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["query", "query_class", *dimensions, "searches", "rank", "doc_id"])
    for p in picked:
        for rank, doc in enumerate(p.results or [""], 1):
            writer.writerow([p.query, p.query_class, *p.values, p.searches,
                             rank if doc else "", doc])
    return EXIT_OK


def _from_lists(args: argparse.Namespace, by: list[str]) -> int:
    """Queries of the daemons' query lists (``/queries/state`` of each ``--url``, merged as
    ``top`` merges replicas): the searches list of one window, the queries the daemons may
    show (their k-anonymity floor). The lists keep counts, not served lists: no results."""
    from monitor.config import parse_duration, window_label
    from monitor.core.classes import ALL
    from monitor.offline.sampling import sample

    state = query_state(args.url)
    if not state.enabled:
        raise UsageError("the daemon's query lists are disabled ([query_lists] enabled = false)")
    if args.min_sessions is not None and args.min_sessions > state.min_sessions:
        raise UsageError(f"--min-sessions {args.min_sessions}: the daemon's lists hold the "
                         f"queries of at least {state.min_sessions} sessions, and no session "
                         "count beyond")
    kept = state.labels[1:]  # the dimensions the lists are kept by
    dimensions = tuple(name for name in by if name != "class")
    unknown = [name for name in dimensions if name not in kept]
    if unknown:
        raise UsageError(f"--by {unknown[0]}: the daemon's lists are not kept by it "
                         f"([query_lists] dimensions: {', '.join(kept) or 'none'})")
    if not state.windows:
        raise UsageError("the daemon's query lists hold nothing yet")
    try:
        wanted = (parse_duration(args.window) if args.window
                  else max(w.window for w in state.windows))
    except ValueError:
        raise UsageError(f"--window {args.window!r}: expected a duration such as 24h") from None
    window = next((w for w in state.windows if w.window == wanted), None)
    if window is None:
        raise UsageError(f"--window {args.window}: the lists' windows are "
                         + ", ".join(window_label(w.window) for w in state.windows))
    # with a dimension to stratify by, the slices of each value; else each class whole (its
    # own k-anonymity, over all its slices)
    searches: dict[tuple[str, tuple[str, ...]], dict[str, int]] = {}
    for values, tally in zip(window.slices, window.tallies, strict=True):
        named = dict(zip(kept, values[1:], strict=True))
        whole_class = all(v == "" for v in named.values())  # (without dimensions, each class)
        if values[0] == ALL or (whole_class if dimensions else not whole_class):
            continue
        own = tuple(named[name] for name in dimensions)
        summary = tally.searches
        for query, count in zip(summary.keys, summary.counts, strict=True):
            by_class = searches.setdefault((query, own), {})
            by_class[values[0]] = by_class.get(values[0], 0) + count
    candidates, index = [], {}
    for (query, own), by_class in searches.items():
        query_class = max(by_class, key=lambda name: (by_class[name], name))
        candidate = _candidate(query, sum(by_class.values()), query_class, own, dimensions, by)
        index[id(candidate)] = (query_class, own)
        candidates.append(candidate)
    picked = sample(candidates, args.count, args.method, random.Random(args.seed))
    note(f"{len(candidates):,} queries in the daemon's lists of the last "
         f"{window_label(window.window)} (each issued by {state.min_sessions} sessions or "
         f"more); " + _picked(len(picked), args.method, by))
    note("the lists keep counts, not served lists: no results (give search logs for them)")
    return _write([Picked(c.query, index[id(c)][0], index[id(c)][1], c.searches, None, [])
                   for c in picked], dimensions, args.format)
