"""``searchmon sample``: queries of search logs picked for judging, each with the results it
was last served."""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys

from monitor.cli.common import EXIT_OK, UsageError, load, read_events


def note(text: str) -> None:
    print(f"searchmon sample: {text}", file=sys.stderr)


def command(args: argparse.Namespace) -> int:
    from monitor.core.classes import QueryClasses
    from monitor.core.querylists import QueryLists
    from monitor.inputs.clicklog import QueryTallyReader, decoded, read_all
    from monitor.inputs.events import QueryEvent
    from monitor.inputs.generate import rfc3339
    from monitor.offline.sampling import Candidate, sample

    config = load(args.config)
    if not config.query_lists.enabled:
        raise UsageError("[query_lists] enabled = false: no query text may be shown")
    by = list(dict.fromkeys(args.by or []))
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
        named = dict(zip(dimensions, values, strict=True))
        stratum = tuple(record.query_class if name == "class" else named[name] for name in by)
        candidate = Candidate(query, record.searches, stratum)
        index[id(candidate)] = (record, values)
        candidates.append(candidate)
    picked = sample(candidates, args.count, args.method, random.Random(args.seed))
    unlisted = sum(1 for c in picked if not index[id(c)][0].results)
    if unlisted:
        note(f"{unlisted:,} picked queries have no logged result list (their results: none)")
    note(f"{len(picked):,} queries picked ({args.method}"
         + (f", by {', '.join(by)}" if by else "") + ")")
    if args.format == "json":
        rows = []
        for c in picked:
            record, values = index[id(c)]
            rows.append({
                "query": c.query, "query_class": record.query_class,
                **dict(zip(dimensions, values, strict=True)), "searches": c.searches,
                "served_at": rfc3339(record.served_at) if record.results else None,
                "results": record.results,
            })
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
        return EXIT_OK
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["query", "query_class", *dimensions, "searches", "rank", "doc_id"])
    for c in picked:
        record, values = index[id(c)]
        for rank, doc in enumerate(record.results or [""], 1):
            writer.writerow([c.query, record.query_class, *values, c.searches,
                             rank if doc else "", doc])
    return EXIT_OK
