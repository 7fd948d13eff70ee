"""``searchmon judgments from-clicks`` and ``searchmon judgments import``."""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.cli.common import EXIT_OK, UsageError, load
from monitor.config import Config

if TYPE_CHECKING:
    from monitor.offline.clicks import ClickLog


def command(args: argparse.Namespace) -> int:
    return from_clicks(args)


def note(text: str) -> None:
    print(f"searchmon judgments: {text}", file=sys.stderr)


def read_log(paths: list[Path], config: Config, min_sessions: int) -> tuple[ClickLog, Counter[str]]:
    """The click log of ``paths`` with the queries under the k-anonymity floor left out."""
    from monitor.core.querylists import QueryLists
    from monitor.inputs.clicklog import ClickLogReader, TooManySearches, decoded, read_all

    for path in paths:
        if not path.is_file():
            raise UsageError(f"cannot read {path}: no such file")
    reader = ClickLogReader(min_sessions, QueryLists(config.query_lists).key)
    try:
        read_all(reader, decoded(paths, config))
    except TooManySearches as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise UsageError(f"cannot read the events: {error}") from None
    log = reader.finish().public(min_sessions)
    return log, log.counts


def from_clicks(args: argparse.Namespace) -> int:
    from monitor.offline.clicks import MODELS, THRESHOLDS, as_csv, as_json, as_qrels, kept

    config = load(args.config)
    if not config.query_lists.enabled:
        raise UsageError("[query_lists] enabled = false: no query text may be shown")
    thresholds = _thresholds(args.thresholds) if args.thresholds else THRESHOLDS[args.model]
    min_sessions = args.min_sessions or config.query_lists.min_sessions
    log, counts = read_log(args.events, config, min_sessions)
    estimate = MODELS[args.model](log)
    mask = kept(estimate, args.min_impressions)
    for what, count in sorted(counts.items()):
        if count:
            note(f"{count:,} {what}")
    note(f"{len(estimate.score):,} (query, document) pairs, {int(mask.sum()):,} shown at least "
         f"{args.min_impressions} times, {int((~mask).sum()):,} left out")
    if estimate.position_bias is not None:
        curve = estimate.position_bias
        first = curve[0] if len(curve) and not math.isnan(curve[0]) else math.nan
        note("position bias (examination probability; relative to position 1): " + ", ".join(
            f"{k}: {value:.3f} ({value / first:.3f})" for k, value in enumerate(curve, 1)
            if not math.isnan(value)))
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
