"""``searchmon judgments from-clicks`` and ``searchmon judgments import``."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from monitor.cli.common import EXIT_OK, UsageError, load, produce, read_events, write_lines
from monitor.config import Config

if TYPE_CHECKING:
    from monitor.offline.judgment_files import Judged, Rating


def command(args: argparse.Namespace) -> int:
    if args.action == "from-clicks":
        return from_clicks(args)
    return import_judgments(args)


def note(text: str) -> None:
    print(f"searchmon judgments: {text}", file=sys.stderr)


def from_clicks(args: argparse.Namespace) -> int:
    from monitor.core.querylists import QueryLists
    from monitor.inputs.clicklog import read_click_log
    from monitor.offline.clicks import MODELS, THRESHOLDS, as_csv, as_json, as_qrels, kept

    config = load(args.config)
    if not config.query_lists.enabled:
        raise UsageError("[query_lists] enabled = false: no query text may be shown")
    thresholds = _thresholds(args.thresholds) if args.thresholds else THRESHOLDS[args.model]
    min_sessions = args.min_sessions or config.query_lists.min_sessions
    key = QueryLists(config.query_lists).key
    log = read_events(args.events, lambda: read_click_log(args.events, config, key, min_sessions))
    estimate = MODELS[args.model](log)
    mask = kept(estimate, args.min_impressions)
    for what, count in sorted(log.counts.items()):
        if count:
            note(f"{count:,} {what}")
    note(f"{len(estimate.score):,} (query, document) pairs, {int(mask.sum()):,} shown at least "
         f"{args.min_impressions} times, {int((~mask).sum()):,} left out")
    if estimate.position_bias is not None:
        note("position bias (examination relative to the most examined position): " + ", ".join(
            f"{k}: {value:.3f}" for k, value in enumerate(estimate.position_bias, 1)
            if not math.isnan(value)))
    if estimate.parameters:
        note("fitted: " + ", ".join(f"{name} {value:.4g}"
                                    for name, value in estimate.parameters.items()))
    if args.format == "csv":
        sys.stdout.write(as_csv(estimate, mask))
    elif args.format == "json":
        sys.stdout.write(as_json(estimate, mask))
    else:
        unwritable = sum(1 for i in mask.nonzero()[0]
                         if not estimate.docs[estimate.doc[i]]
                         or any(c.isspace() for c in estimate.docs[estimate.doc[i]]))
        if unwritable:
            note(f"{unwritable:,} pairs left out of the qrels: their document id is empty or "
                 "has whitespace")
        sys.stdout.write(as_qrels(estimate, mask, thresholds))
    return EXIT_OK


def _thresholds(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or any(not math.isfinite(v) for v in values) or list(values) != sorted(
            set(values)):
        raise UsageError(f"--thresholds {text!r}: expected increasing numbers, the least score "
                         "of each label from 1 up (0.5,1,2)")
    return values


def import_judgments(args: argparse.Namespace) -> int:
    """``judgments import``: a CSV or qrels file as qrels or judgment messages."""
    import time

    from monitor.cli.common import parse_time
    from monitor.offline.agreement import AGGREGATES
    from monitor.offline.judgment_files import READERS, JudgmentFileError, labelled, sniff

    config = load(args.config)
    if args.as_type == "judgment" and not args.sample_id:
        raise UsageError("--as judgment: give --sample-id (the judged sample the messages "
                         "belong to)")
    stamp = parse_time(args.timestamp, "--timestamp") if args.timestamp else time.time()
    try:
        # a byte order mark before the first line is skipped, from a file or the standard input
        text = (sys.stdin.buffer.read().decode("utf-8-sig") if str(args.file) == "-"
                else args.file.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {args.file}: {error}") from None
    kind = sniff(text) if args.format == "auto" else args.format
    try:
        found = READERS[kind](text)
    except JudgmentFileError as error:
        raise UsageError(f"{args.file}: {error}") from None
    if args.underscores and kind == "qrels":  # topics as from-clicks writes them
        from monitor.offline.clicks import query_text

        found.ratings = [rating._replace(query=query_text(rating.query))
                         for rating in found.ratings]
    for reason, (count, first) in found.left_out.items():
        note(f"{count:,} rows left out: {reason} (the first on line {first})")
    if not found.ratings:
        raise UsageError(f"{args.file}: no ratings (read as {kind})")
    agreement = _agreement(found.ratings)
    judged = list(labelled(found.ratings, AGGREGATES[args.aggregate]))
    limit = config.offline.max_labels
    too_many = [query for query in judged if len(query.labels) > limit]
    for query in too_many:
        note(f"query {query.query!r} left out: {len(query.labels):,} labels, more than "
             f"[offline] max_labels ({limit:,}), which the daemon would reject")
    lines = [_message(args, number, query, stamp, agreement)
             for number, query in enumerate(judged, 1) if len(query.labels) <= limit]
    note(f"{len(found.ratings):,} ratings of {sum(len(q.labels) for q in judged):,} pairs; "
         f"{len(lines):,} {args.as_type} messages")
    if args.kafka:
        _produce(args, config, lines)
    else:
        write_lines((line for _, line in lines), args.output)
    return EXIT_OK


def _message(args: argparse.Namespace, number: int, query: Judged, stamp: float,
             agreement: dict[str, float]) -> tuple[str, bytes]:
    """A query's labels as a message, with its Kafka key (the query text); a judgment
    carries the raters' agreement over its sample, when there were several raters."""
    import json

    from monitor.inputs.generate import rfc3339

    message: dict[str, object] = {"type": args.as_type}
    if args.as_type == "judgment":
        message |= {"sample_id": args.sample_id, "timestamp": rfc3339(stamp),
                    "query_id": f"{args.sample_id}-{number}", "query_text": query.query,
                    "ranking": list(query.labels), "labels": query.labels}
        if agreement:
            message["agreement"] = agreement
    else:
        message |= {"timestamp": rfc3339(stamp), "query_text": query.query,
                    "labels": query.labels}
        if args.qrels_id:
            message["qrels_id"] = args.qrels_id
    if args.query_class:
        message["query_class"] = args.query_class
    return query.query, json.dumps(message, ensure_ascii=False,
                                   separators=(",", ":")).encode()


def _produce(args: argparse.Namespace, config: Config, lines: list[tuple[str, bytes]]) -> None:
    topic = args.topic or config.kafka.judgments_topic
    produce(args.kafka, ((topic, key, line) for key, line in lines), acks="all",
            **config.kafka.client_options())
    note(f"{len(lines):,} messages produced to {topic}")


def _agreement(ratings: list[Rating]) -> dict[str, float]:
    """The raters' agreement, on standard error, when the file has several raters; returned
    by statistic (none: one rater)."""
    from monitor.offline.agreement import cohen_kappa, fleiss_kappa, krippendorff_alpha
    from monitor.offline.judgment_files import units

    raters = sorted({rating.rater for rating in ratings})
    if len(raters) < 2:
        return {}
    rated = units(ratings)
    shared = sum(1 for labels in rated.values() if len(labels) >= 2)
    figures = [f"{len(raters)} raters, {shared:,} pairs rated by two or more"]
    found: dict[str, float | None] = {"raters": float(len(raters))}
    if len(raters) == 2:
        found["cohen_kappa"] = kappa = cohen_kappa(rated, *raters)
        figures.append(f"Cohen's kappa {_figure(kappa)}")
    else:
        found["fleiss_kappa"] = kappa = fleiss_kappa(rated)
        figures.append(f"Fleiss' kappa {_figure(kappa)}")
    found["krippendorff_alpha"] = alpha = krippendorff_alpha(rated)
    figures.append(f"Krippendorff's alpha (nominal) {_figure(alpha)}")
    note("agreement: " + "; ".join(figures))
    return {name: round(value, 6) for name, value in found.items() if value is not None}


def _figure(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"
