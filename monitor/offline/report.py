"""Printing an evaluation: trec_eval's three columns, or the JSON of ``eval --json``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from monitor.offline.evaluate import Evaluation
from monitor.offline.spec import MeasureSpec

Named = tuple[str, MeasureSpec]


def format_text(evaluation: Evaluation, measures: Sequence[Named], per_query: bool) -> str:
    """``name<TAB>qid<TAB>value`` lines as trec_eval prints them (%.4f, per query first)."""
    lines = []
    if per_query:
        for i, qid in enumerate(evaluation.query_ids):
            for name, spec in measures:
                if spec.name == "GMAP":
                    continue  # a geometric mean has no per-query value (trec_eval gm_map)
                value = float(evaluation.values[spec][i])
                if not math.isnan(value):
                    lines.append(f"{name:<22}\t{qid}\t{value:.4f}")
    for name, spec in measures:
        summary = evaluation.summary[spec]
        if summary is not None:
            lines.append(f"{name:<22}\tall\t{summary:.4f}")
    return "\n".join(lines) + ("\n" if lines else "")


def format_json(evaluation: Evaluation, measures: Sequence[Named], per_query: bool) -> str:
    """``{"MEASURE": {"QUERY_ID": value, ..., "all": value}}``; null where there is no value."""
    out: dict[str, dict[str, float | None]] = {}
    for name, spec in measures:
        entry: dict[str, float | None] = {}
        if per_query and spec.name != "GMAP":
            for i, qid in enumerate(evaluation.query_ids):
                value = float(evaluation.values[spec][i])
                entry[qid] = None if math.isnan(value) else value
        entry["all"] = evaluation.summary[spec]
        out[name] = entry
    return json.dumps(out, indent=2) + "\n"


def skipped_note(evaluation: Evaluation, measures: Sequence[Named]) -> list[str]:
    """One line per measure that skipped queries (``no_rel=skip``), saying how many."""
    notes = []
    for name, spec in measures:
        skipped = int(sum(1 for v in evaluation.values[spec] if math.isnan(v)))
        if skipped:
            notes.append(f"{name}: {skipped} queries without relevant judged documents skipped")
    return notes
