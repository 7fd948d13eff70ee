"""Data quality: the signs that the log itself makes a number meaningless, with the number
each distorts. The replay report's ``data_quality`` and the status page read them from an
export alike."""

from __future__ import annotations

from typing import Any

from monitor.core.export import Export

MIN_SESSIONS = 10
"""Sessions before their success or abandonment can be called implausible: every one of
10 sessions successful has a chance of 2.8% where 70% of sessions truly succeed."""
IMPLAUSIBLE = 0.99
"""A share of sessions this high, all successful or all abandoned, is a logging artefact
(below 100 sessions: every one)."""
SHARE = 0.01
"""A signal past this share of what it is counted against is a warning."""


def data_quality(figures: Export) -> dict[str, Any]:
    """The counts, and one warning for each that distorts a figure, saying which."""
    def total(name: str) -> int:
        return sum(part.count(name) for part in figures.slices)

    queries, zero = total("queries"), total("zero_result_queries")
    clicked_zero, sessions = total("clicked_zero_result_queries"), total("sessions")
    successful, abandoned = total("successful_sessions"), total("abandoned_sessions")
    warnings = []
    if clicked_zero and clicked_zero > SHARE * zero:
        warnings.append(
            f"{clicked_zero:,} of {zero:,} zero-result queries were clicked: the zero-result "
            "rate counts searches that had results (a search logged twice, once without "
            "its hits?)"
        )
    if figures.reused_query_ids > SHARE * queries:
        warnings.append(
            f"{figures.reused_query_ids:,} of {queries:,} queries reuse a query_id of another "
            "session or text: CTR and the query lists pair clicks with the wrong search"
        )
    events = figures.accepted
    if figures.unmatched_events > SHARE * events:
        warnings.append(
            f"{figures.unmatched_events:,} clicks, impressions or conversions had no query in "
            "their session: CTR misses the clicks; the impressions and conversions count under "
            "the session's class (queries not logged, or another session id)"
        )
    unlisted = figures.unlisted_queries
    if unlisted > SHARE * queries:
        warnings.append(
            f"{unlisted:,} of {queries:,} queries logged no result list: the zero-result rate "
            "counts them as queries that found something unless their result_count says 0, "
            "and only their impressions show what they served"
        )
    if figures.impressions_without_position:
        warnings.append(
            f"{figures.impressions_without_position:,} impressions have no position: the "
            "served lists they should rebuild stay empty"
        )
    if sessions >= MIN_SESSIONS:
        for share, what in ((successful, "successful"), (abandoned, "abandoned")):
            if share >= IMPLAUSIBLE * sessions:
                warnings.append(
                    f"{share / sessions:.1%} of {sessions:,} sessions are {what}: session "
                    f"success and abandonment are a logging artefact here"
                )
    return {
        "queries": queries,
        "zero_result_queries": zero,
        "clicked_zero_result_queries": clicked_zero,
        "reused_query_ids": figures.reused_query_ids,
        "unmatched_events": figures.unmatched_events,
        "impressions_without_position": figures.impressions_without_position,
        "unlisted_queries": unlisted,
        "sessions": sessions,
        "successful_sessions": successful,
        "abandoned_sessions": abandoned,
        "warnings": warnings,
    }
