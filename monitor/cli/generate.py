"""``searchmon generate``: generated traffic to a JSONL file or to Kafka, each message to its
topic."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from monitor.cli.common import EXIT_OK, UsageError, parse_time, produce, write_lines

if TYPE_CHECKING:
    from monitor.inputs.generate import Effect, Experiment, Interleaving, Mix, Regression


def command(args: argparse.Namespace) -> int:
    from monitor.inputs.generate import Traffic, World, messages

    start = _start(args, Traffic().start)
    mixes = _mixes(args)
    experiments = _experiments(args)
    interleaving = _interleaving(args)
    effects = _effects(args, experiments)
    if effects and interleaving is not None:
        raise UsageError("generate: give --effect or --interleave, not both (an effect moves "
                         "the clicks the interleaving's preference is set on)")
    traffic = Traffic(
        seed=args.seed, start=start, sessions_per_second=args.sessions_per_second,
        duration=args.duration, malformed_rate=args.malformed_rate,
        duplicate_rate=args.duplicate_rate, judged_every=args.judged_every,
        judged_queries=args.judged_queries, qrels=args.qrels, mixes=mixes,
        regression=_regression(args, start, (*mixes, *(e.mix() for e in experiments))),
        users=args.users, experiments=experiments, effects=effects, interleaving=interleaving,
    )
    stream = messages(World.build(args.seed), traffic)
    if args.kafka:
        produce(args.kafka, ((args.judgments_topic if message.judged else args.topic,
                              message.key, message.line) for message in stream), linger_ms=20)
    else:
        write_lines((message.line for message in stream), args.output)
    return EXIT_OK


def _mixes(args: argparse.Namespace) -> tuple[Mix, ...]:
    """The slices' mixes: ``--platforms``, ``--locales`` and ``--variants``, each the
    default where not given."""
    from monitor.inputs.generate import DEFAULT_MIXES, parse_mix

    given = {"platform": ("--platforms", args.platforms),
             "locale": ("--locales", args.locales),
             "variant": ("--variants", args.variants)}
    mixes = []
    for default in DEFAULT_MIXES:
        option, text = given[default.dimension]
        if text is None:
            mixes.append(default)
            continue
        try:
            mixes.append(parse_mix(default.dimension, text))
        except ValueError as error:
            raise UsageError(f"generate: {option} {text!r}: {error}") from None
    return tuple(mixes)


def _experiments(args: argparse.Namespace) -> tuple[Experiment, ...]:
    """The experiments of ``--experiment``, each with an id and an attribute of its own."""
    from monitor.inputs.generate import parse_experiment

    found: list[Experiment] = []
    for text in args.experiment or ():
        try:
            experiment = parse_experiment(text)
        except ValueError as error:
            raise UsageError(f"generate: --experiment {text!r}: {error}") from None
        for other in found:
            for what in ("id", "attribute"):
                if getattr(other, what) == getattr(experiment, what):
                    raise UsageError(f"generate: --experiment {text!r}: the {what} of "
                                     f"{other} (each experiment has its own)")
        found.append(experiment)
    return tuple(found)


def _effects(args: argparse.Namespace, experiments: tuple[Experiment, ...],
             ) -> tuple[Effect, ...]:
    """The effects of ``--effect``, one per variant."""
    from monitor.inputs.generate import parse_effect

    found: list[Effect] = []
    for text in args.effect or ():
        try:
            effect = parse_effect(text, experiments)
        except ValueError as error:
            raise UsageError(f"generate: --effect {text!r}: {error}") from None
        if any((e.experiment, e.variant) == (effect.experiment, effect.variant) for e in found):
            raise UsageError(f"generate: --effect {text!r}: {effect.experiment}:"
                             f"{effect.variant} has an effect already (one per variant)")
        found.append(effect)
    return tuple(found)


def _interleaving(args: argparse.Namespace) -> Interleaving | None:
    """The interleaving of ``--interleave`` and ``--preference``; none without them."""
    from monitor.inputs.generate import parse_interleaving, parse_preference

    if args.interleave is None:
        if args.preference is not None:
            raise UsageError("generate: --preference needs --interleave (the rankers)")
        return None
    try:
        interleaving = parse_interleaving(args.interleave)
    except ValueError as error:
        raise UsageError(f"generate: --interleave {args.interleave!r}: {error}") from None
    if args.preference is None:
        return interleaving
    try:
        return parse_preference(args.preference, interleaving)
    except ValueError as error:
        raise UsageError(f"generate: --preference {args.preference!r}: {error}") from None


def _regression(args: argparse.Namespace, start: float,
                mixes: tuple[Mix, ...]) -> Regression | None:
    """The injected regression: of ``--regression-class``, of ``--regression-slice`` (a
    dimension of ``mixes``: the slices' and the experiments'), or of the class within the
    slice; none when neither is given."""
    from monitor.inputs.generate import Regression, parse_slice

    try:
        attributes = parse_slice(args.regression_slice or (), mixes)
    except ValueError as error:
        raise UsageError(f"generate: --regression-slice: {error}") from None
    if not args.regression_class and not attributes:
        return None
    return Regression(
        args.regression_class or None, start + args.regression_after,
        start + args.regression_until if args.regression_until is not None else None,
        attributes,
    )


def _start(args: argparse.Namespace, default: float) -> float:
    """The first event time: ``--start``, or ``--end`` (when the last session begins) less
    the duration; to Kafka, by default the traffic ends at the wall clock (its last sessions
    run on for at most about four minutes, within ``max_future``: a running daemon takes it
    as live); to a file, the fixed default start (same seed, same bytes)."""
    if args.start is not None and args.end is not None:
        raise UsageError("generate: give --start or --end, not both")
    if args.start is not None:
        return _time(args.start, "--start")
    duration = float(args.duration)
    if args.end is not None:
        return _time(args.end, "--end") - duration
    return time.time() - duration if args.kafka else default


def _time(text: str, option: str) -> float:
    """``now``, epoch seconds, or an ISO 8601 time with an offset."""
    if text == "now":
        return time.time()
    try:
        return float(text)
    except ValueError:
        return parse_time(text, f"generate: {option}")
