"""The picture of ``searchmon eval --plot``: one SVG document, written as text.

Plain SVG rather than a plotting library: the daemon's image has no matplotlib, SVG is text
that a test can parse and compare, and the status page already draws its sparklines as
inline SVG. Only presentation attributes are used (no ``style``), so the same markup can sit
in a page whose content security policy forbids inline styles. Numbers are printed with
fixed decimals, so the same evaluation gives the same bytes.

The panels, top to bottom: the interpolated precision-recall curve of each run at the eleven
recall levels; a histogram of the per-query values of one measure (bars of each run side by
side); with two runs, each shared query's difference B - A of that measure, sorted, bars up
where B is better and down where it is worse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from monitor.offline.spec import RECALL_LEVELS

_Label = Callable[[float], str]

WIDTH = 760
PLOT_LEFT, PLOT_WIDTH = 70, 640
PLOT_HEIGHT = 260
PANEL_GAP = 110
COLOURS = ("#1f5fa8", "#e07b00")
"""Run A blue, run B orange: told apart with the common forms of colour blindness too."""
BETTER, WORSE = "#2e7d32", "#c62828"
AXIS, GRID, TEXT = "#444444", "#e4e4e4", "#222222"
BINS = 10
LABELLED_QUERIES = 40
"""Up to this many queries, the difference chart names each one under its bar."""


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What the picture shows of one run: its name, its mean interpolated precision at
    each recall level (None: no query), and its per-query values of the histogram's
    measure (the queries that have one), with their mean."""

    name: str
    curve: tuple[float, ...] | None
    values: dict[str, float]
    mean: float | None


def evaluation_svg(runs: Sequence[RunFigures], measure: str, title: str) -> str:
    """The SVG document of one run or two (A then B)."""
    if not 1 <= len(runs) <= 2:
        raise ValueError("one run or two")
    panels = [_curve_panel(runs), _histogram_panel(runs, measure)]
    if len(runs) == 2:
        panels.append(_difference_panel(runs[0], runs[1], measure))
    body: list[str] = []
    top = 72
    for draw in panels:
        body += [f'<g transform="translate(0,{top})">', *draw, "</g>"]
        top += PLOT_HEIGHT + PANEL_GAP
    height = top - PANEL_GAP + 60
    head = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12" '
        f'fill="{TEXT}">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        _text(WIDTH / 2, 24, title, size=15, anchor="middle", weight="bold"),
    ]
    return "\n".join([*head, *body, "</svg>"]) + "\n"


def _curve_panel(runs: Sequence[RunFigures]) -> list[str]:
    out = _frame("Interpolated precision at recall (trec_eval iprec_at_recall, mean over "
                 "queries)", "recall", "interpolated precision")
    out += _y_ticks(0.0, 1.0, 0.2, lambda v: f"{v:.1f}")
    out += _x_ticks([(r, f"{r:.1f}") for r in RECALL_LEVELS], 0.0, 1.0)
    for number, run in enumerate(runs):
        if run.curve is None:
            continue
        colour = COLOURS[number]
        points = [(_x(r, 0.0, 1.0), _y(p, 0.0, 1.0)) for r, p in zip(RECALL_LEVELS, run.curve,
                                                                      strict=True)]
        out.append(f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in points)}" '
                   f'fill="none" stroke="{colour}" stroke-width="2"/>')
        for (x, y), r, p in zip(points, RECALL_LEVELS, run.curve, strict=True):
            out.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5" '
                       f'fill="{colour}"><title>{escape(run.name)}: recall {r:.1f}, '
                       f"interpolated precision {p:.4f}</title></circle>")
    out += _legend([(run.name if run.curve is not None else f"{run.name} (no query)",
                     COLOURS[i]) for i, run in enumerate(runs)])
    return out


def _histogram_panel(runs: Sequence[RunFigures], measure: str) -> list[str]:
    counts = [_bin_counts(run.values.values()) for run in runs]
    top = max(_nice_top(max((max(c) for c in counts), default=0)), 5.0)  # whole ticks
    step = _nice_step(top)
    out = _frame(f"{measure} per query: how many queries in each tenth", measure, "queries")
    out += _y_ticks(0.0, top, step, lambda v: f"{v:.0f}")
    out += _x_ticks([(i / BINS, f"{i / BINS:.1f}") for i in range(BINS + 1)], 0.0, 1.0)
    slot = PLOT_WIDTH / BINS
    width = (slot - 6) / len(runs)
    for number, (run, bins) in enumerate(zip(runs, counts, strict=True)):
        for b, count in enumerate(bins):
            if not count:
                continue
            x = PLOT_LEFT + b * slot + 3 + number * width
            y = _y(count, 0.0, top)
            low, high = b / BINS, (b + 1) / BINS
            span = f"[{low:.1f}, {high:.1f}{']' if b == BINS - 1 else ')'}"
            out.append(f'<rect class="bin" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
                       f'height="{PLOT_HEIGHT - y:.1f}" fill="{COLOURS[number]}">'
                       f"<title>{escape(run.name)}: {count} queries with {escape(measure)} "
                       f"in {span}</title></rect>")
    out += _legend([(f"{run.name} (mean {_mean_text(run.mean)}, {len(run.values)} queries)",
                     COLOURS[i]) for i, run in enumerate(runs)])
    return out


def _difference_panel(a: RunFigures, b: RunFigures, measure: str) -> list[str]:
    shared = [q for q in a.values if q in b.values]
    # largest gain first; equal differences by query id, so the order is the same every time
    rows = sorted(((b.values[q] - a.values[q], q) for q in shared), key=lambda r: (-r[0], r[1]))
    better = sum(1 for d, _ in rows if d > 0)
    worse = sum(1 for d, _ in rows if d < 0)
    reach = max((abs(d) for d, _ in rows), default=0.0)
    top = _nice_top(reach) if reach > 0 else 1.0
    step = _nice_step(top)
    out = _frame(f"{measure} per query, B - A ({len(rows)} queries in both, sorted): "
                 f"{better} better, {worse} worse, {len(rows) - better - worse} equal",
                 "queries, largest gain first" if len(rows) > LABELLED_QUERIES else "",
                 f"{measure} of B - A")
    out += _y_ticks(-top, top, step, lambda v: f"{v:+.2f}" if v else "0")
    zero = _y(0.0, -top, top)
    if rows:
        slot = PLOT_WIDTH / len(rows)
        width = max(slot * 0.8, 0.5)
        for i, (difference, qid) in enumerate(rows):
            x = PLOT_LEFT + i * slot + (slot - width) / 2
            y = _y(difference, -top, top)
            colour = BETTER if difference > 0 else WORSE
            out.append(f'<rect class="difference" x="{x:.2f}" y="{min(y, zero):.1f}" '
                       f'width="{width:.2f}" height="{abs(zero - y):.1f}" fill="{colour}">'
                       f"<title>{escape(qid)}: {a.values[qid]:.4f} to {b.values[qid]:.4f} "
                       f"({difference:+.4f})</title></rect>")
            if len(rows) <= LABELLED_QUERIES:
                cx = PLOT_LEFT + (i + 0.5) * slot
                out.append(f'<text x="{cx:.1f}" y="{PLOT_HEIGHT + 8}" font-size="10" '
                           f'text-anchor="end" transform="rotate(-60 {cx:.1f} '
                           f'{PLOT_HEIGHT + 8})">{escape(qid)}</text>')
    out.append(f'<line x1="{PLOT_LEFT}" y1="{zero:.1f}" x2="{PLOT_LEFT + PLOT_WIDTH}" '
               f'y2="{zero:.1f}" stroke="{AXIS}" stroke-width="1"/>')
    out += _legend([(f"B better ({b.name})", BETTER), (f"A better ({a.name})", WORSE)])
    return out


def _frame(title: str, x_label: str, y_label: str) -> list[str]:
    """A panel's title, plot area, axes and axis labels."""
    middle = PLOT_LEFT + PLOT_WIDTH / 2
    out = [
        _text(PLOT_LEFT, -12, title, size=13, weight="bold"),
        f'<rect x="{PLOT_LEFT}" y="0" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
        f'fill="#fafafa" stroke="{AXIS}" stroke-width="1"/>',
        _text(middle, PLOT_HEIGHT + 42, x_label, anchor="middle"),
        f'<text x="16" y="{PLOT_HEIGHT / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {PLOT_HEIGHT / 2:.1f})">{escape(y_label)}</text>',
    ]
    return out


def _y_ticks(low: float, high: float, step: float, label: _Label) -> list[str]:
    out = []
    count = round((high - low) / step)
    for i in range(count + 1):
        value = low + i * step
        y = _y(value, low, high)
        out.append(f'<line x1="{PLOT_LEFT}" y1="{y:.1f}" x2="{PLOT_LEFT + PLOT_WIDTH}" '
                   f'y2="{y:.1f}" stroke="{GRID}" stroke-width="1"/>')
        out.append(f'<line x1="{PLOT_LEFT - 5}" y1="{y:.1f}" x2="{PLOT_LEFT}" y2="{y:.1f}" '
                   f'stroke="{AXIS}" stroke-width="1"/>')
        out.append(_text(PLOT_LEFT - 8, y + 4, label(0.0 if abs(value) < 1e-12 else value),
                         anchor="end"))
    return out


def _x_ticks(ticks: Sequence[tuple[float, str]], low: float, high: float) -> list[str]:
    out = []
    for value, text in ticks:
        x = _x(value, low, high)
        out.append(f'<line x1="{x:.1f}" y1="{PLOT_HEIGHT}" x2="{x:.1f}" '
                   f'y2="{PLOT_HEIGHT + 5}" stroke="{AXIS}" stroke-width="1"/>')
        out.append(_text(x, PLOT_HEIGHT + 18, text, anchor="middle"))
    return out


def _legend(entries: Sequence[tuple[str, str]]) -> list[str]:
    """Swatches and names under the panel's title, right-aligned."""
    out = []
    y = 14
    for text, colour in entries:
        right = PLOT_LEFT + PLOT_WIDTH - 10
        out.append(f'<rect x="{right - 12}" y="{y - 9}" width="12" height="10" '
                   f'fill="{colour}"/>')
        out.append(_text(right - 18, y, text, anchor="end"))
        y += 16
    return out


def _text(x: float, y: float, text: str, *, size: int | None = None,
          anchor: str = "start", weight: str | None = None) -> str:
    extra = "" if size is None else f' font-size="{size}"'
    extra += "" if weight is None else f' font-weight="{weight}"'
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>'
            f"{escape(text)}</text>")


def _x(value: float, low: float, high: float) -> float:
    return PLOT_LEFT + (value - low) / (high - low) * PLOT_WIDTH


def _y(value: float, low: float, high: float) -> float:
    return PLOT_HEIGHT - (value - low) / (high - low) * PLOT_HEIGHT


def _bin_counts(values: Iterable[float]) -> list[int]:
    """Queries per tenth of [0, 1]: [0, 0.1), ..., [0.9, 1.0]; outside values at the ends."""
    counts = [0] * BINS
    for value in values:
        counts[min(max(math.floor(value * BINS), 0), BINS - 1)] += 1
    return counts


def _nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (> 0)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if factor * power >= value * (1 - 1e-12):
            return factor * power
    return 10.0 * power


def _nice_step(top: float) -> float:
    """A tick step that divides ``top`` (a nice number) into 4 or 5 parts."""
    power = 10.0 ** math.floor(math.log10(top))
    leading = round(top / power)
    return {1: 0.2, 2: 0.5, 5: 1.0, 10: 2.0}[leading] * power


def _mean_text(mean: float | None) -> str:
    return "-" if mean is None else f"{mean:.4f}"
