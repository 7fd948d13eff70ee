"""The history of the online counters by event time: bounded, differences of counters, the
same hour a week earlier or else the hour before, and what it cannot know left unknown."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.core.export import Export, SliceFigures
from monitor.core.history import (
    HOUR,
    SPAN,
    STEP,
    WEEK,
    History,
    HistoryState,
    Period,
    Point,
    recent,
)
from monitor.core.online import OnlineCounters, ratio
from monitor.core.snapshots import StateError

T = 1_790_000_000.0 - 1_790_000_000.0 % STEP  # a step boundary


def counts(**named: int) -> tuple[int, ...]:
    return tuple(named.get(name, 0) for name in OnlineCounters.COUNTS)


def figures(time: float, **per_class: tuple[int, ...]) -> Export:
    return Export(
        slices=tuple(SliceFigures((name,), values, ()) for name, values in per_class.items()),
        newest=time,
    )


def traffic(hours: float, per_hour: list[tuple[int, int]], start: float = T) -> History:
    """A history fed every minute of event time for ``hours``: in hour h, ``per_hour[h]``
    (queries, clicked queries) of class ``web``, spread evenly."""
    history = History()
    queries = clicked = 0
    for minute in range(int(hours * 60) + 1):
        history.observe(figures(start + minute * 60.0, web=counts(
            queries=queries, clicked_queries=clicked,
        )))
        hour = min(minute // 60, len(per_hour) - 1)
        queries += per_hour[hour][0] // 60
        clicked += per_hour[hour][1] // 60
    return history


def test_the_last_hour_steps_where_the_total_slides() -> None:
    """Three hours at a CTR of 0.74, then one at 0.32 (per minute: 60 queries, 44 or 19
    clicked): the last hour shows 0.32 against 0.74 the hour before; the total since the
    start is still 0.62."""
    history = traffic(4.0, [(3600, 2640)] * 3 + [(3600, 1140)])
    now = figures(T + 4 * HOUR, web=counts(queries=4 * 3600, clicked_queries=3 * 2640 + 1140))
    shown = recent(history, now)
    assert shown.hour is not None and shown.earlier is not None and not shown.week
    assert (shown.hour.start.time, shown.hour.end.time) == (T + 3 * HOUR, T + 4 * HOUR)
    hour = shown.hour.counts([("web",)])
    assert (hour["queries"], hour["clicked_queries"]) == (3600, 1140)
    assert ratio("ctr", hour.get) == pytest.approx(0.3167, abs=1e-4)
    earlier = shown.earlier.counts([("web",)])
    assert (shown.earlier.start.time, shown.earlier.end.time) == (T + 2 * HOUR, T + 3 * HOUR)
    assert ratio("ctr", earlier.get) == pytest.approx(0.7333, abs=1e-4)
    total = now.slices[0]
    assert total.count("clicked_queries") / total.count("queries") == pytest.approx(0.6292,
                                                                                   abs=1e-4)


def test_a_week_of_history_compares_with_the_same_hour_a_week_earlier() -> None:
    """Eight days: the hour a week before the last one had 120 queries a minute (its
    neighbours 60); with a week of history that hour is the comparison."""
    history = History()
    queries = 0
    end = T + 8 * 86400.0 - 3 * HOUR
    special = (end - WEEK - HOUR, end - WEEK)  # the last hour, a week earlier
    minute = 0
    while T + minute * 60.0 < end:
        at = T + minute * 60.0
        history.observe(figures(at, web=counts(queries=queries)))
        queries += 120 if special[0] <= at < special[1] else 60
        minute += 1
    shown = recent(history, figures(end, web=counts(queries=queries)))
    assert shown.week and shown.hour is not None and shown.earlier is not None
    assert (shown.earlier.start.time, shown.earlier.end.time) == special
    assert shown.earlier.counts([("web",)])["queries"] == 60 * 120
    assert shown.hour.counts([("web",)])["queries"] == 60 * 60
    assert len(history) <= SPAN / STEP + 1


def test_a_history_younger_than_an_hour_shows_what_it_has_and_nothing_to_compare() -> None:
    history = traffic(0.5, [(3600, 1800)])
    shown = recent(history, figures(T + 0.5 * HOUR, web=counts(queries=1800)))
    assert shown.hour is not None and shown.earlier is None
    assert (shown.hour.start.time, shown.hour.end.time) == (T, T + 0.5 * HOUR)
    assert shown.hour.counts([("web",)])["queries"] == 1800
    assert recent(History(), figures(T, web=counts(queries=5))).hour is None
    assert recent(history, Export()).hour is None, "no event yet"


def test_a_counter_that_went_down_or_that_a_sample_predates_is_unknown() -> None:
    """A replica's counters drop when a partition moves away; a counter added to the
    catalogue after a sample was taken has no value then; a slice first seen after a sample
    had counted nothing."""
    before = Point(T, {("web",): counts(queries=100, sessions=50)[:6], ("news",): counts()})
    after = Point(T + HOUR, {("web",): counts(queries=90, sessions=70, conversions=4),
                             ("news",): counts(queries=8), ("shop",): counts(queries=3)})
    period = Period(before, after)
    web = period.counts([("web",)])
    assert web["queries"] is None, "negative: no data"
    assert web["sessions"] == 20
    assert web["conversions"] is None, "conversions (7th counter): the sample predates it"
    assert period.counts([("shop",)])["queries"] == 3
    assert period.counts([("news",), ("shop",)])["queries"] == 11
    assert period.counts([("web",), ("news",)])["queries"] is None
    assert ratio("ctr", web.get) is None


def test_one_sample_per_step_and_time_going_back_is_ignored() -> None:
    history = History()
    for at in (T + 10, T + 20, T + STEP - 1, T + 5, T + STEP, T + STEP + 1, T + 10 * STEP):
        history.observe(figures(at, web=counts(queries=int(at - T))))
    assert history.times == [T + 10, T + STEP, T + 10 * STEP]
    point = history.at(T + 9 * STEP)
    assert point is not None and point.time == T + STEP
    assert point.counts[("web",)][0] == STEP
    assert history.at(T) is None
    assert not history.due(None) and not history.due(float("-inf"))
    assert history.due_from() == T + 11 * STEP
    assert history.due(history.due_from()) and not history.due(history.due_from() - 0.001)
    assert History().due_from() == float("-inf")


@given(st.lists(st.floats(min_value=0.0, max_value=3 * STEP), min_size=1, max_size=800))
def test_the_history_is_bounded_by_its_span_whatever_the_traffic(gaps: list[float]) -> None:
    history = History()
    at = T
    for gap in gaps:
        at += gap * 6  # up to 90 minutes apart: 800 of them span up to 50 days
        history.observe(figures(at, web=counts(queries=1)))
    assert len(history) <= SPAN / STEP + 1
    steps = [time // STEP for time in history.times]
    assert steps == sorted(set(steps))
    assert history.times[0] > history.times[-1] - SPAN


def test_ten_days_every_minute_keep_eight_days_of_five_minute_samples() -> None:
    history = History()
    for minute in range(10 * 24 * 60 + 1):
        history.observe(figures(T + minute * 60.0, web=counts(queries=minute)))
    assert len(history) == SPAN / STEP == 2304
    assert history.times[-1] - history.times[0] == SPAN - STEP


def test_a_history_round_trips_and_a_bad_one_is_refused() -> None:
    history = traffic(2.0, [(600, 300)])
    history.observe(figures(T + 3 * HOUR, web=counts(queries=5000), news=counts(queries=7)))
    state = history.snapshot()
    assert History.restore(state) == history
    assert state.slices == [["web"], ["news"]] and len(state.counts[0]) == 1
    old = HistoryState([["web"]], [T], [[list(counts(queries=4)[:3])]])
    restored = History.restore(old)
    start = restored.at(T)
    assert start is not None and start.counts[("web",)] == (4, 0, 0)
    for bad, problem in [
        (HistoryState([["a"], ["a"]], [], []), "a slice twice"),
        (HistoryState([[]], [], []), "a slice without labels"),
        (HistoryState([["a"]], [T, T + 1], [[], []]), "one per step"),
        (HistoryState([["a"]], [T + STEP, T], [[], []]), "one per step"),
        (HistoryState([["a"]], [T], [[[1], [2]]]), "unknown slices"),
        (HistoryState([["a"]], [T], [[[1] * 99]]), "not of this version"),
        (HistoryState([["a"]], [T], [[[]]]), "not of this version"),
        (HistoryState([["a"]], [T], []), "columns of different lengths"),
    ]:
        with pytest.raises(StateError, match=problem):
            History.restore(bad)


def test_a_restored_history_older_than_its_span_keeps_only_the_span() -> None:
    state = HistoryState([["a"]], [T, T + SPAN / 2, T + SPAN], [[[1]], [[2]], [[3]]])
    assert History.restore(state).times == [T + SPAN / 2, T + SPAN]
