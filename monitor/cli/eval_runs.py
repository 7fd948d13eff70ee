"""``searchmon eval`` with a second run (a paired comparison) or with ``--plot`` (an SVG).

The paired tests are the judged samples' (``monitor.core.stats``), seeded the same way (with
the number of queries compared), so that the same files give the same p-values every time.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from monitor.cli.common import EXIT_OK, UsageError
from monitor.core.stats import compare
from monitor.offline.compare import (
    MeasureComparison,
    format_comparison_json,
    format_comparison_text,
    pair,
    shared_queries,
)
from monitor.offline.curves import interpolated_precision, mean_curve
from monitor.offline.evaluate import Evaluation, RankedRun, evaluate_ranked, rank_run
from monitor.offline.measures import aggregate, geometric, score
from monitor.offline.plots import RunFigures, evaluation_svg
from monitor.offline.report import write_bytes_as_read
from monitor.offline.spec import MeasureNameError, MeasureSpec, parse_named
from monitor.offline.trec import Qrels, Run

Named = tuple[str, MeasureSpec]

DEFAULT_PLOT_MEASURE = "AP"


def evaluate_run(
    args: argparse.Namespace, qrels: Qrels, path: Path, run: Run, specs: Sequence[MeasureSpec],
) -> tuple[Evaluation, RunFigures | None]:
    """``run`` ranked once: its evaluation of ``specs`` and, with ``--plot``, its figures
    (its ranked lists are let go on return)."""
    ranked = rank_run(qrels, run, complete=args.complete, max_docs=args.max_docs)
    evaluation = evaluate_ranked(ranked, specs)
    if args.plot is None:
        return evaluation, None
    return evaluation, run_figures(path, ranked, plot_measure(args.plot_measure,
                                                              args.rel_level)[1])


def compare_runs(
    args: argparse.Namespace, qrels: Qrels, runs: Sequence[tuple[Path, Run]],
    measures: Sequence[Named],
) -> int:
    """Print each measure's means of both runs, B - A and the paired tests' p-values; with
    ``--plot``, write the SVG."""
    specs = [spec for _, spec in measures]
    (a, figure_a), (b, figure_b) = (evaluate_run(args, qrels, path, run, specs)
                                    for path, run in runs)
    for path, evaluation in ((args.run, a), (args.run_b, b)):
        if not evaluation.shared_queries and not args.complete:
            raise UsageError(f"no query of {path} is in {args.qrels}: nothing to evaluate")
    shared = len(shared_queries(a, b))
    if not shared:
        raise UsageError(f"{args.run} and {args.run_b} have no evaluated query in common: "
                         "nothing to compare")
    rows = []
    for paired in pair(a, b, measures):
        test = compare(paired.tested_b, paired.tested_a, args.permutations,
                       len(paired.query_ids))
        rows.append(MeasureComparison(paired.name, len(paired.query_ids), paired.mean_a,
                                      paired.mean_b, test.p_permutation, test.p_t))
    names = (str(args.run), str(args.run_b))
    counts = (len(a.query_ids), len(b.query_ids), shared)
    out = format_comparison_json if args.json else format_comparison_text
    write_bytes_as_read(out(names, counts, rows))
    if figure_a is not None and figure_b is not None:
        write_plot(args, [path for path, _ in runs], [figure_a, figure_b])
    return EXIT_OK


def plot_measure(text: str | None, rel_level: int) -> Named:
    """The histogram's and the difference chart's measure: one name (default AP)."""
    try:
        named = parse_named(text or DEFAULT_PLOT_MEASURE)
    except MeasureNameError as error:
        raise UsageError(f"--plot-measure: {error}") from None
    if len(named) != 1:
        raise UsageError(f"--plot-measure: one measure, not {len(named)} ({text})")
    name, spec = named[0]
    if geometric(spec):
        raise UsageError(f"--plot-measure: {spec.name} has no per-query value (its summary is "
                         "a geometric mean); plot the measure it averages (AP for GMAP, bpref "
                         "for gm_bpref)")
    return name, spec.with_relevance_level(rel_level)


def run_figures(path: Path, ranked: RankedRun, spec: MeasureSpec) -> RunFigures:
    """What ``--plot`` draws of one run: its mean interpolated precision-recall curve and
    ``spec``'s per-query values and summary."""
    values = score(ranked.lists, spec)
    present = ~np.isnan(values)
    return RunFigures(
        path.name, mean_curve(interpolated_precision(ranked.lists, spec.relevance)),
        {q: float(v) for q, v, keep in zip(ranked.query_ids, values.tolist(), present.tolist(),
                                             strict=True) if keep},
        aggregate(spec, values),
    )


def write_plot(args: argparse.Namespace, paths: Sequence[Path], figures: list[RunFigures],
               ) -> None:
    """Write the SVG of ``--plot`` (``monitor.offline.plots``) of the runs of ``paths``."""
    name, _ = plot_measure(args.plot_measure, args.rel_level)
    if len(figures) == 2 and figures[0].name == figures[1].name:  # same file name: full paths
        figures = [RunFigures(str(path), f.curve, f.values, f.mean)
                   for path, f in zip(paths, figures, strict=True)]
    what = (f"A = {figures[0].name}, B = {figures[1].name}" if len(figures) == 2
            else figures[0].name)
    title = f"searchmon eval: {what} (qrels {args.qrels.name})"
    try:
        args.plot.write_text(evaluation_svg(figures, name, title), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write {args.plot}: {error.strerror}") from None
