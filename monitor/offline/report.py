"""Printing an evaluation: trec_eval's three columns, or the JSON of ``eval --json``."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np

from monitor.offline.evaluate import Evaluation
from monitor.offline.measures import Shown, shown
from monitor.offline.spec import MeasureSpec

Named = tuple[str, MeasureSpec]

SUMMARY_KEY = "all"
"""The summary's query id, as trec_eval prints it; in JSON, the summary's key."""

RENAMED_QUERY_KEY = "all (query)"
"""The JSON key of a query whose id is ``all``: no query id holds a space, so it names no
other query, and ``all`` stays the summary's."""


def format_text(evaluation: Evaluation, measures: Sequence[Named], per_query: bool) -> str:
    """``name<TAB>qid<TAB>value`` lines as trec_eval prints them (%.4f, counts as integers,
    per query first)."""
    lines = []
    if per_query:
        columns = [(f"{name:<22}", spec, shown(spec)) for name, spec in measures
                   if shown(spec) in ("decimal", "count", "text")]
        values = {spec: evaluation.values[spec].tolist() for _, spec, _ in columns}
        for i, qid in enumerate(evaluation.query_ids):
            for label, spec, how in columns:
                if how == "text":
                    lines.append(f"{label}\t{qid}\t'{evaluation.texts[spec][i]}'")
                elif not math.isnan(value := values[spec][i]):
                    lines.append(f"{label}\t{qid}\t{_number(value, how)}")
    for name, spec in measures:
        how = shown(spec)
        if how == "runid":
            lines.append(f"{name:<22}\t{SUMMARY_KEY}\t{evaluation.run_id}")
        elif (summary := evaluation.summary[spec]) is not None:
            lines.append(f"{name:<22}\t{SUMMARY_KEY}\t{_number(summary, how)}")
    return "\n".join(lines) + ("\n" if lines else "")


def _number(value: float, how: Shown) -> str:
    return f"{int(value)}" if how in ("count", "queries") else f"{value:.4f}"


def format_json(evaluation: Evaluation, measures: Sequence[Named], per_query: bool) -> str:
    """``{"MEASURE": {"QUERY_ID": value, ..., "all": value}}``; null where there is no value.

    Per-query entries only with ``per_query`` (and never for GMAP). A query whose id is
    ``all`` is listed as ``all (query)``: ``all`` is the summary, as in trec_eval's output.
    """
    keys = [RENAMED_QUERY_KEY if qid == SUMMARY_KEY else qid for qid in evaluation.query_ids]
    out: dict[str, dict[str, float | None]] = {}
    for name, spec in measures:
        entry: dict[str, float | None] = {}
        if shown(spec) == "runid":
            out[name] = {SUMMARY_KEY: evaluation.run_id}  # type: ignore[dict-item]
            continue
        if shown(spec) == "text":
            if per_query:
                out[name] = dict(zip(keys, evaluation.texts[spec], strict=True))  # type: ignore[arg-type]
            continue
        if per_query and shown(spec) in ("decimal", "count"):
            values = evaluation.values[spec].tolist()
            for key, value in zip(keys, values, strict=True):
                entry[key] = None if math.isnan(value) else value
        entry[SUMMARY_KEY] = evaluation.summary[spec]
        out[name] = entry
    from json import dumps  # loaded only for --json

    return dumps(out, indent=2) + "\n"


def summary_name_note(evaluation: Evaluation, json: bool) -> str | None:
    """What to say when a query's id is the summary's, ``all``; None when none is."""
    if SUMMARY_KEY not in evaluation.query_ids:
        return None
    if json:
        return (f"a query is named {SUMMARY_KEY!r}, as the summary is: its values are listed "
                f"as {RENAMED_QUERY_KEY!r}")
    return (f"a query is named {SUMMARY_KEY!r}, as the summary lines are: its lines come "
            "with the other queries', before the summary lines (--json tells them apart)")


def skipped_note(evaluation: Evaluation, measures: Sequence[Named]) -> list[str]:
    """One line per measure that skipped queries (``no_rel=skip``), saying how many."""
    notes = []
    for name, spec in measures:
        if shown(spec) in ("runid", "text"):  # no number to skip
            continue
        skipped = int(np.isnan(evaluation.values[spec]).sum())
        if skipped:
            notes.append(f"{name}: {skipped} queries without relevant judged documents skipped")
    return notes


def write_bytes_as_read(text: str) -> None:
    """``text`` to standard output with the bytes of the input it quotes as they were: an id
    that is no UTF-8 was read with ``surrogateescape`` and prints byte for byte (as trec_eval
    prints it)."""
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:  # (a text stream without bytes beneath)
        sys.stdout.write(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        return
    sys.stdout.flush()
    raw.write(text.encode("utf-8", "surrogateescape"))
    raw.flush()
