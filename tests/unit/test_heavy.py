"""Space-Saving heavy hitters, the k-anonymity session sets and redaction (monitor.core.heavy)."""

from __future__ import annotations

import bisect
import itertools
import random
import re
import sys
import time
import tracemalloc
import unicodedata
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.heavy import (
    AT_SIGNS,
    DASHES,
    DEFAULT_REDACTIONS,
    DOTS,
    EMAIL,
    LOCAL_MARKS,
    HeavyQueries,
    Item,
    Redaction,
    Redactions,
    SpaceSaving,
    merge_many,
    merge_states,
    redact,
)
from monitor.core.snapshots import StateError
from monitor.core.states import HeavyQueriesState, SpaceSavingState
from monitor.inputs.events import session_hash


def zipf_stream(seed: int, length: int, universe: int, exponent: float = 1.1) -> list[str]:
    """``length`` queries drawn from ``universe`` keys with popularity ~ 1 / rank**exponent."""
    rng = random.Random(seed)
    cumulative = list(itertools.accumulate(1 / (r + 1) ** exponent for r in range(universe)))
    total = cumulative[-1]
    return [f"q{bisect.bisect_left(cumulative, rng.random() * total)}" for _ in range(length)]


def summary_of(stream: list[str], capacity: int) -> SpaceSaving:
    summary = SpaceSaving(capacity)
    for key in stream:
        summary.add(key)
    return summary


def assert_bounds_hold(summary: SpaceSaving, exact: Counter[str]) -> None:
    """Every key of the stream, kept or not, has its true count within its bounds."""
    unseen = summary.unseen_bound()
    for item in summary.top(len(summary)):
        assert item.lower <= exact[item.key] <= item.count, item
    for key, count in exact.items():
        if key not in summary:
            assert count <= unseen, (key, count, unseen)


STREAM = zipf_stream(seed=7, length=100_000, universe=20_000)
EXACT = Counter(STREAM)


def test_every_true_count_lies_within_the_bounds_on_a_zipf_stream() -> None:
    summary = summary_of(STREAM, 200)
    assert len(summary) == 200 and summary.unseen_bound() > 0  # evictions happened
    assert_bounds_hold(summary, EXACT)


def test_guaranteed_top_20_are_in_the_exact_top_20() -> None:
    summary = summary_of(STREAM, 200)
    guaranteed = summary.guaranteed(20)
    assert len(guaranteed) >= 10  # the head of a Zipf stream is separated
    for item in guaranteed:
        # Fewer than 20 keys beat it: it belongs to every exact top 20, whatever the ties.
        assert sum(c > EXACT[item.key] for c in EXACT.values()) < 20, item
    exact_top = [key for key, _ in EXACT.most_common(20)]
    reported = summary.top(20)
    # Wherever the bounds separate two reported items, the exact order agrees.
    for a, b in itertools.combinations(reported, 2):
        if a.lower > b.count:
            assert EXACT[a.key] > EXACT[b.key]
    # And where every reported item is separated from the next, the lists are equal.
    prefix = next(
        (i for i in range(19) if reported[i].lower <= reported[i + 1].count), 19
    )
    assert [i.key for i in reported[:prefix]] == exact_top[:prefix]
    assert prefix >= 3


def test_guaranteed_on_a_summary_that_is_not_full_is_exact() -> None:
    summary = SpaceSaving(10)
    for key, weight in (("a", 5), ("b", 3), ("c", 3), ("d", 1)):
        summary.add(key, weight)
    assert summary.unseen_bound() == 0
    assert [i.key for i in summary.guaranteed(2)] == ["a"]  # b and c tie for second
    assert [i.key for i in summary.guaranteed(3)] == ["a", "b", "c"]
    assert [i.key for i in summary.guaranteed(4)] == ["a", "b", "c", "d"]
    assert summary.top(2) == [Item("a", 5, 0), Item("b", 3, 0)]


def test_eviction_replaces_the_smallest_count_and_records_it_as_error() -> None:
    summary = SpaceSaving(2)
    assert summary.add("a", 3) is None
    assert summary.add("b") is None
    assert summary.add("c", 2) == "b"
    assert summary.top(3) == [Item("a", 3, 0), Item("c", 3, 1)]
    assert summary.item("b") == Item("b", 3, 3)  # not kept: 0 <= true count <= 3


def test_merge_of_two_halves_bounds_the_whole_stream() -> None:
    half = len(STREAM) // 2
    first, second = summary_of(STREAM[:half], 200), summary_of(STREAM[half:], 200)
    merged = first.merge(second)
    assert len(merged) == 200
    assert_bounds_hold(merged, EXACT)
    assert len(merged.guaranteed(20)) >= 10
    assert first.snapshot() == summary_of(STREAM[:half], 200).snapshot()  # inputs unchanged


def test_merge_by_hand() -> None:
    # A (capacity 2): a+5, b+1, c+1 -> a 5/0, c 2/1 (c evicted b at 1); unseen bound 2.
    # B: b+4, d+3 -> b 4/0, d 3/0; unseen bound 3.
    # a: 5+3 / 0+3; b: 2+4 / 2+0; c: 2+3 / 1+3; d: 2+3 / 2+0; keep the 2 largest.
    first, second = SpaceSaving(2), SpaceSaving(2)
    for key, weight in (("a", 5), ("b", 1), ("c", 1)):
        first.add(key, weight)
    for key, weight in (("b", 4), ("d", 3)):
        second.add(key, weight)
    merged = first.merge(second)
    assert merged.snapshot() == SpaceSavingState(["a", "b"], [8, 6], [3, 2])
    assert merged.unseen_bound() == 6  # true counts: a 5, b 5, c 1, d 3
    assert second.merge(first).snapshot() == merged.snapshot()


def test_merging_many_summaries_at_once_bounds_the_whole_stream() -> None:
    """Three parts merged in one step (how windows, classes and partitions combine): every
    true count within its bounds, session sets united and capped; two parts give what
    ``merge_states`` gives."""
    third = len(STREAM) // 3
    parts = [STREAM[:third], STREAM[third:2 * third], STREAM[2 * third:]]
    states = []
    for n, part in enumerate(parts):
        heavy = HeavyQueries(200, 3)
        for i, key in enumerate(part):
            heavy.add(key, f"s{n}-{i % 7}")
        states.append(heavy.snapshot())
    merged = merge_many(states, 200, 3)
    summary = SpaceSaving(200)
    summary.restore(merged.counts)
    assert_bounds_hold(summary, EXACT)
    assert len(summary.guaranteed(20)) >= 10
    assert all(len(s) == 3 for s in merged.sessions[:20]), "sessions of every part, capped"
    restored = HeavyQueries(200, 3)
    restored.restore(merged)  # a valid summary
    assert merge_many(states[:2], 200, 3).counts == merge_states(
        states[0].counts, states[1].counts, 200
    )


def test_merge_rejects_different_capacities() -> None:
    with pytest.raises(ValueError, match="capacities 2 and 3"):
        SpaceSaving(2).merge(SpaceSaving(3))


@pytest.mark.parametrize("bad", [0, -1])
def test_bad_arguments_are_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="capacity"):
        SpaceSaving(bad)
    with pytest.raises(ValueError, match="weight"):
        SpaceSaving(1).add("a", bad)
    with pytest.raises(ValueError, match="min_sessions"):
        HeavyQueries(1, bad)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 5)), max_size=300),
    st.integers(1, 12),
    st.integers(0, 300),
)
def test_bounds_hold_for_any_stream_and_any_split(
    events: list[tuple[int, int]], capacity: int, split: int
) -> None:
    exact: Counter[str] = Counter()
    for key, weight in events:
        exact[f"k{key}"] += weight

    def summarise(part: list[tuple[int, int]]) -> SpaceSaving:
        summary = SpaceSaving(capacity)
        for key, weight in part:
            summary.add(f"k{key}", weight)
        return summary

    whole = summarise(events)
    assert sum(i.count for i in whole.top(capacity)) == sum(exact.values())
    assert_bounds_hold(whole, exact)
    merged = summarise(events[:split]).merge(summarise(events[split:]))
    assert_bounds_hold(merged, exact)
    for summary in (whole, merged):
        for item in summary.guaranteed(3):
            assert sum(c > exact[item.key] for c in exact.values()) < 3
        restored = SpaceSaving(capacity)
        restored.restore(summary.snapshot())
        assert restored.snapshot() == summary.snapshot()


def test_snapshot_restore_round_trip_continues_identically() -> None:
    summary = summary_of(STREAM[:50_000], 100)
    restored = SpaceSaving(100)
    restored.restore(summary.snapshot())
    assert restored.snapshot() == summary.snapshot()
    for key in STREAM[50_000:]:
        assert summary.add(key) == restored.add(key)
    assert restored.snapshot() == summary.snapshot()


GOOD = SpaceSavingState(["a", "b", "c"], [9, 5, 4], [3, 0, 2])


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        (replace(GOOD, counts=[9, 5]), "columns of different lengths"),
        (SpaceSavingState(["a", "b", "c", "d"], [4] * 4, [0] * 4), "more than capacity"),
        (replace(GOOD, keys=["a", "a", "c"]), "repeated keys"),
        (replace(GOOD, errors=[3, -1, 2]), "count >= error >= 0"),
        (replace(GOOD, counts=[9, 5, 0], errors=[0, 0, 0]), "count >= 1"),
        (replace(GOOD, counts=[9, 5, 1]), "count >= error"),
        (replace(GOOD, errors=[5, 0, 2]), "error above the smallest count"),
        (replace(GOOD, counts=[2**63, 5, 4]), "64 bits"),
        (SpaceSavingState(["a"], [5], [1]), "error while not full"),
    ],
)
def test_restore_refuses_corrupt_states(state: SpaceSavingState, problem: str) -> None:
    SpaceSaving(3).restore(GOOD)  # the baseline is accepted
    summary = SpaceSaving(3)
    summary.add("z")
    with pytest.raises(StateError, match=re.escape(problem)):
        summary.restore(state)
    assert summary.snapshot() == SpaceSavingState(["z"], [1], [0])  # left as it was


@pytest.mark.slow
def test_memory_stays_bounded_over_a_million_distinct_keys() -> None:
    summary = SpaceSaving(1_000)
    tracemalloc.start()
    try:
        for i in range(20_000):
            summary.add(f"warm-up {i}")
        after_warm_up, _ = tracemalloc.get_traced_memory()
        for i in range(1_000_000):
            summary.add(f"distinct {i}")
        after_million, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(summary) == 1_000
    assert len(summary.snapshot().keys) == 1_000
    # Keys grow by a few characters and counts leave the small-int cache: a little, not 50x.
    assert after_million - after_warm_up < 200_000, (after_warm_up, after_million)


def test_distinct_sessions_is_a_capped_lower_bound() -> None:
    heavy = HeavyQueries(capacity=10, min_sessions=3)
    for session in ("s1", "s1", "s2"):
        heavy.add("cheap flights", session)
    assert heavy.distinct("cheap flights") == 2  # a repeated session counts once
    assert heavy.anonymous_top(5) == []
    for session in ("s3", "s4", "s5"):
        heavy.add("cheap flights", session)
    assert heavy.distinct("cheap flights") == 3  # capped at min_sessions
    assert heavy.distinct("never seen") == 0
    assert heavy.anonymous_top(5) == [Item("cheap flights", 6, 0)]


def test_a_frequent_query_from_one_session_is_never_published() -> None:
    heavy = HeavyQueries(capacity=5, min_sessions=2)
    for _ in range(100):
        heavy.add("john smith 42 elm street", "stalker")
    heavy.add("weather", "a")
    heavy.add("weather", "b")
    assert heavy.counts.top(1)[0].key == "john smith 42 elm street"
    assert [i.key for i in heavy.anonymous_top(5)] == ["weather"]


def test_session_sets_never_overstate_and_memory_is_bounded_on_a_zipf_stream() -> None:
    rng = random.Random(3)
    heavy = HeavyQueries(capacity=100, min_sessions=5)
    sessions_of: dict[str, set[str]] = {}
    for key in STREAM[:30_000]:
        session = f"s{rng.randrange(2_000)}"
        heavy.add(key, session)
        sessions_of.setdefault(key, set()).add(session)
    state = heavy.snapshot()
    assert len(state.counts.keys) == 100
    assert all(len(s) <= 5 for s in state.sessions)
    for key in state.counts.keys:
        assert heavy.distinct(key) <= min(len(sessions_of[key]), 5)
    assert len(heavy.anonymous_top(20)) == 20  # the head is certified


def test_eviction_drops_the_session_set() -> None:
    heavy = HeavyQueries(capacity=1, min_sessions=2)
    heavy.add("a", "s1")
    heavy.add("a", "s2")
    heavy.add("b", "s3")  # evicts a
    assert heavy.distinct("a") == 0
    heavy.add("a", "s4")  # readmitted: sessions before are forgotten
    assert heavy.distinct("a") == 1


def test_heavy_queries_snapshot_merge_and_corrupt_states() -> None:
    first, second = HeavyQueries(4, 3), HeavyQueries(4, 3)
    for key, session in (("a", "s1"), ("a", "s2"), ("b", "s1")):
        first.add(key, session)
    for key, session in (("a", "s2"), ("a", "s3"), ("a", "s4"), ("c", "s9")):
        second.add(key, session)
    merged = first.merge(second)
    assert merged.distinct("a") == 3  # {s1, s2} | {s2, s3, s4}, capped at 3
    assert merged.counts.item("a") == Item("a", 5, 0)
    restored = HeavyQueries(4, 3)
    restored.restore(merged.snapshot())
    assert restored.snapshot() == merged.snapshot()

    state = merged.snapshot()
    rest = state.sessions[1:]
    bad_sessions: list[list[list[int]]] = [
        [[1, 2], *rest, [3]],  # one list too many
        [[1, 2, 3, 4], *rest],  # above min_sessions
        [[1, 1], *rest],  # repeated
        [state.sessions[0], [1, 2], *state.sessions[2:]],  # more sessions than count "b"
    ]
    for sessions in bad_sessions:
        with pytest.raises(StateError, match="heavy queries"):
            HeavyQueries(4, 3).restore(HeavyQueriesState(state.counts, sessions))
    # a key kept without a session (searched only by UBI records that name no user)
    anonymous = HeavyQueries(4, 3)
    anonymous.restore(HeavyQueriesState(state.counts, [[], *rest]))
    assert anonymous.distinct("a") == 0
    with pytest.raises(ValueError, match="min_sessions 3 and 2"):
        first.merge(HeavyQueries(4, 2))


def test_session_hash_is_pinned() -> None:
    # Snapshots store these values: they must not change between processes or releases.
    # (CRC-32 of the UTF-8 bytes, as zlib computes it.)
    assert session_hash("s1") == 336935152
    assert session_hash("") == 0


# --- redaction ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cheap flights berlin", "cheap flights berlin"),
        ("", ""),
        # e-mail addresses
        ("mail jane.doe+x@example.co.uk now", "mail <email> now"),
        ("a@b.c and 123456", "<email> and <digits>"),
        ("o'brien@example.com", "<email>"),
        ("jane%doe@example.com", "<email>"),
        ("jane_doe@mail-1.example.com.", "<email>."),
        ("a@b.com+x@y.org", "<email>"),  # one after another: both go
        ("see ?user=jane@example.com", "see ?user=<email>"),
        ("jane\uff20example.com", "<email>"),  # full-width at sign
        ("jane\ufe6bexample.com", "<email>"),  # small at sign
        ("jane@example\uff0ecom", "<email>"),  # full-width full stop
        ("jane\uff20example\u3002com", "<email>"),  # ideographic full stop (IDNA)
        ("jane@example\uff61com", "<email>"),  # half-width ideographic full stop
        ("j\u00f6rg@m\u00fcller.de", "<email>"),
        # digit runs: phone, card, account numbers
        ("call 030 1234 5678", "call <digits>"),
        ("card 4111-1111-1111-1111 stolen", "card <digits> stolen"),
        ("order 1234567", "order <digits>"),
        ("+49 30\u20131234\u20135678", "+<digits>"),  # en dashes
        ("030\u2013123456", "<digits>"),
        ("030\u2014123456", "<digits>"),  # em dash
        ("030\u2010123456", "<digits>"),  # Unicode hyphen
        ("030\u2212123456", "<digits>"),  # minus sign
        ("030\uff0d123456", "<digits>"),  # full-width hyphen-minus
        ("4111_1111_1111_1111", "<digits>"),
        ("12 - 34 - 56", "<digits>"),
        ("12  34  56", "<digits>"),
        ("12 / 34 / 56", "<digits>"),
        ("12   \u2013   34 56", "<digits>"),  # three blanks either side of one mark
        ("030/123456", "<digits>"),
        ("12.34.56", "<digits>"),
        ("call (030) 123456", "call (<digits>"),
        ("+1 (555) 123-4567", "+<digits>"),
        ("12\t34\n56", "<digits>"),  # any blank (raw text; the lists' keys have single spaces)
        ("4111\u00a01111\u30001111", "<digits>"),  # no-break and ideographic spaces
        ("\uff10\uff13\uff10\uff0d\uff11\uff12\uff13\uff14", "<digits>"),  # full-width
        ("\u0660\u0661\u0662\u0663\u0664\u0665", "<digits>"),  # Arabic-Indic digits
        ("jane@example.com 030\u20131234\u20135678", "<email> <digits>"),
        # what stays
        ("iphone 15", "iphone 15"),
        ("2024 tax", "2024 tax"),
        ("size 10 5", "size 10 5"),
        ("iphone 15 128gb 2026", "iphone 15 128gb 2026"),  # short numbers stay
        ("12345 zip", "12345 zip"),  # five digits stay
        ("12 - 34", "12 - 34"),
        ("size 10/12", "size 10/12"),
        ("1 2 3 4 5", "1 2 3 4 5"),
        ("12    34    56", "12    34    56"),  # four blanks: not one number
        ("12 -- 34 -- 56", "12 -- 34 -- 56"),  # two marks: not one number
        ("12,345,678", "12,345,678"),  # commas: a quantity, not an identifier
        ("jane@example", "jane@example"),  # no dot: not an address
        ("@example.com", "@example.com"),
        ("jane@", "jane@"),
        ("jane @ example.com", "jane @ example.com"),
    ],
)
def test_redact_defaults(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_dashes_are_every_unicode_dash() -> None:
    dashes = {c for c in map(chr, range(sys.maxunicode + 1)) if unicodedata.category(c) == "Pd"}
    assert dashes <= set(DASHES)
    assert set(DASHES) - dashes == {"\u2212"}  # and the minus sign


def test_redact_with_own_patterns_in_order() -> None:
    patterns = (*DEFAULT_REDACTIONS, Redaction(re.compile(r"(?i)\bpassword\s+\S+"), "<secret>"))
    assert redact("password hunter2 for bob@x.org", patterns) == "<secret> for <email>"
    assert redact("bob@x.org", ()) == "bob@x.org"


MEBIBYTE = 1 << 20


@pytest.mark.timeout(30)  # each case: a backtracking pattern takes hours on these texts
@pytest.mark.parametrize(
    ("unit", "tail", "redacted_unit", "redacted_tail"),
    [
        ("a", "", "a", ""),
        ("a@", "", "a@", ""),
        ("@", "", "@", ""),
        ("1", "", "", "<digits>"),
        ("1 ", "", "", "<digits> "),
        ("1-", "", "", "<digits>-"),
        ("1 - ", "", "", "<digits> - "),
        ("12345 x ", "", "12345 x ", ""),
        (".", "", ".", ""),
        ("a.", "@", "a.", "@"),
        ("a.", "@example.com", "", "<email>"),
        ("a", "@example.com", "", "<email>"),  # one address, a mebibyte long
        ("-", "", "-", ""),
        ("a@b.c ", "", "<email> ", ""),
        (
            "jane.doe@example.com 030\u20131234\u20135678 iphone 15 a@b 12 / 34 / 56 x\uff20y.z ",
            "",
            "<email> <digits> iphone 15 a@b <digits> <email> ",
            "",
        ),
    ],
)
def test_redaction_takes_linear_time(
    unit: str, tail: str, redacted_unit: str, redacted_tail: str
) -> None:
    """A mebibyte (the default event size limit) of texts that make a backtracking pattern
    try every start position against the rest of the text: the whole text, and the cut the
    query lists keep. The time is printed, not asserted (benchmarks measure speed)."""
    repeat = MEBIBYTE // len(unit)
    text = unit * repeat + tail
    started = time.perf_counter()
    whole = redact(text)
    assert whole == redacted_unit * repeat + redacted_tail
    middle = time.perf_counter()
    assert Redactions().apply(text) == whole[:200]
    print(f"{unit!r}: {middle - started:.3f} s whole, {time.perf_counter() - middle:.4f} s cut")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cut at 400 characters, redacted, cut at 200, these would show part of an address
        # (without its "@" or its dot) or of a number (five of its digits)
        ("x " * 95 + "a" * 300 + "@example.com", "x " * 95 + "<email>"),
        ("0" * 390 + " " + "a" * 20 + "@example.com" + " y" * 300, "<digits> <email>" + " y" * 300),
        ("0" * 390 + " x@example" + ".com" + " y" * 300, "<digits> <email>" + " y" * 300),
        ("0" * 390 + " x 12 34 5" + "6 78" + " y" * 300, "<digits> x <digits>" + " y" * 300),
        ("0" * 390 + " x 12 34 56" + " y" * 300, "<digits> x <digits>" + " y" * 300),
        ("0" * 396 + " 12 - 34 - 56" + " y" * 300, "<digits>" + " y" * 300),
    ],
)
def test_the_cut_never_splits_what_the_whole_text_would_redact(
    text: str, expected: str
) -> None:
    assert Redactions().apply(text) == expected[:200] == redact(text)[:200]


TEXTS = st.lists(st.one_of(
    st.sampled_from(["1", "23", "456", " ", " - ", "-", "\u2013 ", "/ ", "_", ". ", "(", ") "]),
    st.sampled_from(["a", "b", "  ", "\t", "@", "\uff20", ".", "\uff0e", "+", "'", "x@y.z"]),
), max_size=30).map("".join)
"""Texts of the characters that make or break addresses and numbers."""


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(TEXTS, st.integers(1, 12))
def test_redacting_from_split_to_split_is_redacting_the_whole(text: str, size: int) -> None:
    """Read a piece at a time, the text redacted is the start of the whole text redacted:
    no piece ends inside an address or a number."""
    whole = redact(text)
    start = Redactions().built_in_prefix(text, size)
    assert whole.startswith(start) and len(start) >= min(size, len(whole))
    assert Redactions(length=size).apply(text) == whole[:size]


LOCAL = rf"[\w{re.escape(LOCAL_MARKS)}]"
LABEL = r"[\w-]+"
BACKTRACKING_EMAIL = re.compile(
    rf"{LOCAL}+[{AT_SIGNS}]{LABEL}(?:[{re.escape(DOTS)}]{LABEL})+"
)
"""What ``EMAIL`` finds, written the obvious way: it backtracks from every position."""


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="ab1 @\uff20.\uff0e\u3002-_+'%", max_size=40))
def test_the_linear_email_pattern_hides_what_the_obvious_one_hides(text: str) -> None:
    def hidden(pattern: re.Pattern[str]) -> set[int]:
        return {i for m in pattern.finditer(text) for i in range(m.start(), m.end())}

    assert hidden(EMAIL.pattern) == hidden(BACKTRACKING_EMAIL)


def test_own_patterns_read_at_most_twice_the_key_length() -> None:
    """A user pattern can take any time on a long text (``(a+)+b``): it only ever sees the
    first ``2 * length`` characters of the text the built-in redactions left."""
    long_text = "word " * 2000

    def keyed(pattern: str) -> str:
        return Redactions(patterns=(Redaction(re.compile(pattern), "<redacted>"),)).apply(
            long_text
        )

    assert keyed(r"(?s)\A.{400}") == "<redacted>"
    assert keyed(r"(?s)\A.{401}") == long_text[:200]
    assert keyed("word") == "<redacted> " * 18 + "<r"
