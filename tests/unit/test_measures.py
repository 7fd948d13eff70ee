"""Measures on the worked examples of the seed documents, edge cases and invariants."""

from __future__ import annotations

import math
import random
from typing import TypedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.offline.measures import MEASURES, aggregate, score
from monitor.offline.ranking import DuplicateDocumentError, RankedLists
from monitor.offline.spec import MeasureSpec, NoRelevant


def lists_of(*queries: tuple[list[str], dict[str, int]]) -> RankedLists:
    return RankedLists.from_lists([q[0] for q in queries], [q[1] for q in queries])


def labelled(labels: list[int]) -> tuple[list[str], dict[str, int]]:
    """A ranking whose i-th document carries labels[i]; every label is a judgment."""
    docs = [f"d{i}" for i in range(len(labels))]
    return docs, dict(zip(docs, labels, strict=True))


def values(lists: RankedLists, spec: MeasureSpec) -> list[float]:
    return [float(v) for v in score(lists, spec)]


# --- seed 000_dc48efbba69a1181.txt: "Evaluation Measures in Information Retrieval" -------------

# Query #1 of the "cat in a box" example: 8 results, the relevant ones at ranks 2, 4, 5, 7.
CAT_QUERY_1 = labelled([0, 1, 0, 1, 1, 0, 1, 0])


@pytest.mark.parametrize(
    ("k", "expected"),
    [(1, 0.0), (2, 0.25), (3, 0.25), (4, 0.5), (5, 0.75), (6, 0.75), (7, 1.0), (8, 1.0)],
)
def test_seed_000_recall_at_k(k: int, expected: float) -> None:
    assert values(lists_of(CAT_QUERY_1), MeasureSpec("R", cutoff=k)) == [expected]


def test_seed_000_mrr_is_057() -> None:
    # first relevant result at ranks 2, 1 and 5 for the three queries
    lists = lists_of(labelled([0, 1, 0]), labelled([1, 0]), labelled([0, 0, 0, 0, 1, 0]))
    spec = MeasureSpec("RR")
    assert values(lists, spec) == [0.5, 1.0, 0.2]
    assert round(aggregate(spec, score(lists, spec)) or 0, 2) == 0.57


def test_seed_000_average_precision_at_8_and_map() -> None:
    lists = lists_of(
        CAT_QUERY_1,  # relevant at 2, 4, 5, 7
        labelled([1, 0, 0, 1, 1, 0, 1, 0]),  # relevant at 1, 4, 5, 7
        labelled([0, 0, 0, 0, 1, 0, 0, 1]),  # relevant at 5, 8
    )
    spec = MeasureSpec("AP", cutoff=8)
    assert [round(v, 3) for v in values(lists, spec)] == [0.543, 0.668, 0.225]
    assert round(aggregate(spec, score(lists, spec)) or 0, 2) == 0.48


def test_seed_000_linear_gain_ndcg_at_2_is_039() -> None:
    # DCG@2 = 0/log2(2) + 4/log2(3) = 2.52; IDCG@2 = 4 + 4/log2(3) = 6.52
    lists = lists_of(labelled([0, 4, 4, 0, 2]))
    assert round(values(lists, MeasureSpec("nDCG", cutoff=2))[0], 2) == 0.39


# --- seed 002_0f650bcb6dd28e5f.txt: "Evaluation Metrics for IR", exponential gain ---------------


def test_seed_002_exponential_gain_ndcg_at_5_is_0951() -> None:
    lists = lists_of(labelled([3, 0, 2, 1, 0]))
    for ideal in ("judged", "retrieved"):
        spec = MeasureSpec("nDCG", cutoff=5, gain="exp", ideal=ideal)
        assert round(values(lists, spec)[0], 3) == 0.951


# --- seed 004_7ec1ce784fa54d29.txt: five users, "how definitions differ" ------------------------

# (labels, predictions) of users #1..#5; every label is relevant (grade 1).
FIVE_USERS = [
    ({1, 2, 3, 4, 5, 6}, [1, 6, 8]),
    ({2, 4, 6}, [1, 2, 3, 4, 5]),
    ({2, 4, 6}, []),
    (set(), [1, 2, 3, 4]),
    (set(), []),
]


def five_users() -> RankedLists:
    return RankedLists.from_lists(
        [[str(d) for d in predicted] for _, predicted in FIVE_USERS],
        [{str(d): 1 for d in relevant} for relevant, _ in FIVE_USERS],
    )


class Seed004Conventions(TypedDict):
    no_rel: NoRelevant


# The post skips users without labels (NaN) and uses: AP over relevant retrieved,
# nDCG with the ideal ranking of the top-k retrieved documents.
SEED_004: Seed004Conventions = {"no_rel": "skip"}


@pytest.mark.parametrize(
    ("spec", "expected_mean"),
    [
        (MeasureSpec("P", cutoff=1, **SEED_004), 0.333),
        (MeasureSpec("P", cutoff=3, **SEED_004), 0.333),
        (MeasureSpec("P", cutoff=5, **SEED_004), 0.267),
        (MeasureSpec("R", cutoff=1, **SEED_004), 0.056),
        (MeasureSpec("R", cutoff=3, **SEED_004), 0.222),
        (MeasureSpec("R", cutoff=5, **SEED_004), 0.333),
        (MeasureSpec("F1", cutoff=1, **SEED_004), 0.095),
        (MeasureSpec("F1", cutoff=3, **SEED_004), 0.259),
        (MeasureSpec("F1", cutoff=5, **SEED_004), 0.288),
        (MeasureSpec("AP", cutoff=1, denom="rel_ret", **SEED_004), 0.333),
        (MeasureSpec("AP", cutoff=3, denom="rel_ret", **SEED_004), 0.5),
        (MeasureSpec("AP", cutoff=5, denom="rel_ret", **SEED_004), 0.5),
        (MeasureSpec("RR", cutoff=1, **SEED_004), 0.333),
        # The post's table prints 0.333 for MRR@3 and MRR@5, but its per-user reciprocal
        # ranks (1, 1/2, 0) average to 0.5; we assert the arithmetic.
        (MeasureSpec("RR", cutoff=3, **SEED_004), 0.5),
        (MeasureSpec("RR", cutoff=5, **SEED_004), 0.5),
        (MeasureSpec("nDCG", cutoff=1, ideal="retrieved", **SEED_004), 0.333),
        (MeasureSpec("nDCG", cutoff=3, ideal="retrieved", **SEED_004), 0.544),
        (MeasureSpec("nDCG", cutoff=5, ideal="retrieved", **SEED_004), 0.550),
    ],
    ids=str,
)
def test_seed_004_five_users(spec: MeasureSpec, expected_mean: float) -> None:
    per_user = score(five_users(), spec)
    assert np.isnan(per_user[3:]).all(), "users without labels are skipped"
    assert round(aggregate(spec, per_user) or 0, 3) == expected_mean


def test_seed_004_user_2_ndcg_against_retrieved_ideal() -> None:
    per_user = score(five_users(), MeasureSpec("nDCG", cutoff=3, ideal="retrieved"))
    assert round(float(per_user[1]), 3) == 0.631
    per_user = score(five_users(), MeasureSpec("nDCG", cutoff=5, ideal="retrieved"))
    assert round(float(per_user[1]), 3) == 0.651


def test_seed_004_users_without_labels_score_zero_by_default() -> None:
    spec = MeasureSpec("P", cutoff=3)
    per_user = score(five_users(), spec)
    assert list(per_user[3:]) == [0.0, 0.0]
    assert aggregate(spec, per_user) == pytest.approx((2 / 3 + 1 / 3) / 5)


# --- conventions and variants -------------------------------------------------------------------


def test_ap_denominators() -> None:
    # R = 4 judged relevant; retrieved top 5 holds two of them, at ranks 1 and 3
    lists = lists_of((["a", "b", "c", "d", "e"], {"a": 1, "c": 1, "x": 1, "y": 1, "b": 0}))
    hits = 1 / 1 + 2 / 3
    assert values(lists, MeasureSpec("AP", cutoff=5)) == [pytest.approx(hits / 4)]
    assert values(lists, MeasureSpec("AP", cutoff=2, denom="min_R_k")) == [pytest.approx(1 / 2)]
    assert values(lists, MeasureSpec("AP", cutoff=5, denom="rel_ret")) == [pytest.approx(hits / 2)]


def test_precision_divides_by_k_when_fewer_retrieved() -> None:
    assert values(lists_of(labelled([1, 1])), MeasureSpec("P", cutoff=10)) == [0.2]


def test_relevance_threshold() -> None:
    lists = lists_of(labelled([1, 2, 0, 3]))
    assert values(lists, MeasureSpec("P", cutoff=4)) == [0.75]
    assert values(lists, MeasureSpec("P", cutoff=4, rel=2)) == [0.5]
    assert values(lists, MeasureSpec("P", cutoff=4, rel=3)) == [0.25]


def test_unjudged_documents_count_as_non_relevant_but_not_as_judged() -> None:
    lists = lists_of((["a", "u1", "b", "u2"], {"a": 1, "b": 0, "u2": -1}))
    assert values(lists, MeasureSpec("P", cutoff=4)) == [0.25]
    assert values(lists, MeasureSpec("Judged", cutoff=4)) == [0.5]
    assert values(lists, MeasureSpec("Judged", cutoff=10)) == [0.2]


def test_query_judged_only_with_minus_one_scores_zero_or_is_skipped() -> None:
    lists = lists_of((["a", "b"], {"a": -1}))
    for name in ("AP", "nDCG", "RR", "Rprec", "bpref"):
        assert values(lists, MeasureSpec(name)) == [0.0]
        assert math.isnan(values(lists, MeasureSpec(name, no_rel="skip"))[0])
    skipping = MeasureSpec("AP", no_rel="skip")
    assert aggregate(skipping, score(lists, skipping)) is None


def test_ndcg_ideal_from_all_judged_documents_by_default() -> None:
    # a relevant judged document that was not retrieved lowers nDCG (trec_eval)
    lists = lists_of((["a"], {"a": 1, "z": 1}))
    assert values(lists, MeasureSpec("nDCG")) == [pytest.approx(1 / (1 + 1 / math.log2(3)))]
    assert values(lists, MeasureSpec("nDCG", ideal="retrieved")) == [1.0]


LOG2_3 = math.log2(3)


@pytest.mark.parametrize(
    ("ranking", "labels", "expected"),
    [
        # DCG = (2^1024 - 1) + (2^5000 - 1) / log2 3, IDCG = (2^5000 - 1) + (2^1024 - 1) / log2 3:
        # 2^1024 is 2^-3976 of 2^5000, so the ratio is 1 / log2 3 to double precision
        (["b", "a"], {"a": 5000, "b": 1024, "c": 0}, 1 / LOG2_3),
        # (2^1024 + 2^1025 / log2 3) / (2^1025 + 2^1024 / log2 3), the -1s being 2^-1024 of it
        (["b", "a"], {"a": 1025, "b": 1024}, (LOG2_3 + 2) / (2 * LOG2_3 + 1)),
        # a label-3 document above a label-1024 one: its gain 7 is 2^-1021 of the top's
        (["b", "a"], {"a": 1024, "b": 3}, 1 / LOG2_3),
        (["a", "b"], {"a": 1024, "b": 3}, 1.0),
        # the largest label there is: 2^63 - 1
        (["b", "a"], {"a": 2**63 - 1, "b": 2**63 - 2}, (LOG2_3 / 2 + 1) / (LOG2_3 + 0.5)),
    ],
)
def test_exponential_gain_ndcg_of_huge_labels(
    ranking: list[str], labels: dict[str, int], expected: float
) -> None:
    lists = lists_of((ranking, labels))
    for ideal in ("judged", "retrieved"):
        spec = MeasureSpec("nDCG", gain="exp", ideal=ideal)
        assert values(lists, spec) == [pytest.approx(expected, rel=1e-12)], ideal


def test_exponential_gain_scaling_leaves_ordinary_labels_exact() -> None:
    # 2^label - 1 of labels below 1024 gives the same double after the scaling by 2^-max
    lists = lists_of(labelled([3, 0, 2, 1, 0]), labelled([10, 200, 1023, 0]))
    spec = MeasureSpec("nDCG", gain="exp")
    dcg = [7 / 1 + 3 / math.log2(4) + 1 / math.log2(5),
           (2**10 - 1) + (2**200 - 1) / LOG2_3 + (2**1023 - 1) / 2]
    idcg = [7 + 3 / LOG2_3 + 1 / 2,
            (2**1023 - 1) + (2**200 - 1) / LOG2_3 + (2**10 - 1) / 2]
    assert values(lists, spec) == [dcg[0] / idcg[0], pytest.approx(dcg[1] / idcg[1], rel=1e-15)]


# ir_measures 0.4.3, tests/test_judged.py: its Judged divides by min(k, retrieved)
IR_MEASURES_JUDGED = lists_of(
    (["D0", "D2", "D3", "D1", "D4"], {"D0": 0, "D1": 1, "D2": 1, "D3": 2, "D4": 0}),
    (["D1", "D3", "D2", "D4"], {"D0": 1, "D3": 2, "D5": 2}),
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (MeasureSpec("Judged", cutoff=1), [1.0, 0.0]),
        (MeasureSpec("Judged", cutoff=3), [1.0, 1 / 3]),
        (MeasureSpec("Judged", cutoff=10), [0.5, 0.1]),
        (MeasureSpec("Judged", cutoff=1, denom="retrieved"), [1.0, 0.0]),
        (MeasureSpec("Judged", cutoff=3, denom="retrieved"), [1.0, 1 / 3]),
        (MeasureSpec("Judged", cutoff=10, denom="retrieved"), [1.0, 1 / 4]),
        (MeasureSpec("Judged", cutoff=1000, denom="retrieved", negative="judged"), [1.0, 1 / 4]),
    ],
)
def test_judged_denominators_of_ir_measures_test(spec: MeasureSpec, expected: list[float]) -> None:
    assert values(IR_MEASURES_JUDGED, spec) == [pytest.approx(v) for v in expected]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (MeasureSpec("Judged", cutoff=3), 1 / 3),  # -1 is unjudged, as for every measure
        (MeasureSpec("Judged", cutoff=3, negative="judged"), 2 / 3),  # ir_measures: in qrels
        (MeasureSpec("Judged", cutoff=10, denom="retrieved"), 1 / 3),
        (MeasureSpec("Judged", cutoff=10, denom="retrieved", negative="judged"), 2 / 3),
        (MeasureSpec("Judged", cutoff=10, negative="judged"), 0.2),
    ],
)
def test_judged_label_minus_one(spec: MeasureSpec, expected: float) -> None:
    lists = lists_of((["a", "u", "b"], {"a": -1, "b": 0, "z": 1}))
    assert values(lists, spec) == [pytest.approx(expected)]


def test_judged_of_an_empty_list_is_zero() -> None:
    lists = lists_of(([], {"a": 1}))
    for denom in ("k", "retrieved"):
        assert values(lists, MeasureSpec("Judged", cutoff=5, denom=denom)) == [0.0]


def test_gmap_is_the_geometric_mean_with_trec_eval_floor() -> None:
    lists = lists_of(labelled([1]), labelled([0, 1]), labelled([0]))
    expected = math.exp((math.log(1.0) + math.log(0.5) + math.log(1e-5)) / 3)
    spec = MeasureSpec("GMAP")
    assert aggregate(spec, score(lists, spec)) == pytest.approx(expected)


def test_a_ranking_naming_a_document_twice_is_rejected() -> None:
    with pytest.raises(DuplicateDocumentError, match="'a'"):
        lists_of((["a", "b", "a"], {"a": 1}))


def test_mean_over_nothing_is_absent() -> None:
    spec = MeasureSpec("P", cutoff=5)
    assert aggregate(spec, score(lists_of(), spec)) is None


# --- invariants ---------------------------------------------------------------------------------

ALL_SPECS = [
    MeasureSpec("P", cutoff=5), MeasureSpec("R", cutoff=5), MeasureSpec("F1", cutoff=5),
    MeasureSpec("AP"), MeasureSpec("AP", cutoff=5), MeasureSpec("AP", cutoff=5, denom="min_R_k"),
    MeasureSpec("AP", denom="rel_ret"), MeasureSpec("RR"), MeasureSpec("RR", cutoff=3),
    MeasureSpec("nDCG"), MeasureSpec("nDCG", cutoff=5, gain="exp"),
    MeasureSpec("nDCG", cutoff=5, ideal="retrieved"), MeasureSpec("Rprec"), MeasureSpec("bpref"),
    MeasureSpec("Success", cutoff=3), MeasureSpec("Judged", cutoff=5), MeasureSpec("GMAP"),
    MeasureSpec("Judged", cutoff=5, denom="retrieved", negative="judged"),
    MeasureSpec("iprec_at_recall", level=0.0), MeasureSpec("iprec_at_recall", level=0.5),
    MeasureSpec("infAP"), MeasureSpec("gm_bpref"), MeasureSpec("Rprec_mult", level=0.6),
    MeasureSpec("Rprec_mult", level=2.0), MeasureSpec("11pt_avg"), MeasureSpec("binG"),
    MeasureSpec("G"), MeasureSpec("nDCG", pairs=(("1", 3.0), ("2", 9.0))),
    MeasureSpec("ndcg_rel"), MeasureSpec("Rndcg"), MeasureSpec("relative_P", cutoff=5),
    MeasureSpec("set_P"), MeasureSpec("set_relative_P"), MeasureSpec("set_recall"),
    MeasureSpec("set_map"), MeasureSpec("set_F"), MeasureSpec("rbp"),
    MeasureSpec("rbp", pairs=(("p", 0.5),)), MeasureSpec("rbp_resid"),
    MeasureSpec("unj", cutoff=5),
]
UNBOUNDED_SPECS = [  # counts, sums of gains and the utility: not in [0, 1]
    MeasureSpec("num_q"), MeasureSpec("num_ret"), MeasureSpec("num_rel"),
    MeasureSpec("num_rel_ret"), MeasureSpec("num_nonrel_judged_ret"), MeasureSpec("utility"),
    MeasureSpec("dcg"), MeasureSpec("runid"), MeasureSpec("relstring"),
]
assert {s.name for s in ALL_SPECS + UNBOUNDED_SPECS} == set(MEASURES)

# a query: per ranked document its label (-1 = unjudged), plus labels of unretrieved judged docs
query_strategy = st.tuples(
    st.lists(st.integers(-1, 3), max_size=15), st.lists(st.integers(0, 3), max_size=5)
)


def build(ranked: list[int], unretrieved: list[int]) -> tuple[list[str], dict[str, int]]:
    docs = [f"d{i}" for i in range(len(ranked))]
    labels = dict(zip(docs, ranked, strict=True))
    labels.update({f"j{i}": v for i, v in enumerate(unretrieved)})
    return docs, labels


@settings(max_examples=200, deadline=None)
@given(st.lists(query_strategy, min_size=1, max_size=6))
def test_every_measure_lies_in_unit_interval(queries: list[tuple[list[int], list[int]]]) -> None:
    lists = lists_of(*(build(*q) for q in queries))
    for spec in ALL_SPECS:
        per_query = score(lists, spec)
        assert ((per_query >= 0) & (per_query <= 1 + 1e-12)).all(), str(spec)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=15).filter(lambda ls: max(ls) > 0))
def test_a_perfect_ranking_scores_one(labels: list[int]) -> None:
    lists = lists_of(labelled(sorted(labels, reverse=True)))
    for spec in (MeasureSpec("AP"), MeasureSpec("nDCG"), MeasureSpec("nDCG", gain="exp"),
                 MeasureSpec("RR"), MeasureSpec("Rprec"), MeasureSpec("bpref"),
                 MeasureSpec("nDCG", cutoff=3)):
        assert values(lists, spec) == [pytest.approx(1.0)], str(spec)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=15).filter(lambda ls: max(ls) > 0))
def test_exponential_gain_ndcg_of_any_labels_lies_in_unit_interval_and_peaks_at_one(
    labels: list[int],
) -> None:
    best = lists_of(labelled(sorted(labels, reverse=True)))
    shuffled = lists_of(labelled(labels))
    for spec in (MeasureSpec("nDCG", gain="exp"), MeasureSpec("nDCG", gain="exp", cutoff=3),
                 MeasureSpec("nDCG", gain="exp", ideal="retrieved", cutoff=3)):
        assert values(best, spec) == [pytest.approx(1.0)], str(spec)
        assert 0.0 <= values(shuffled, spec)[0] <= 1.0 + 1e-12, str(spec)


@settings(max_examples=200, deadline=None)
@given(query_strategy, st.randoms(use_true_random=False))
def test_reordering_non_relevant_documents_changes_nothing(
    query: tuple[list[int], list[int]], rng: random.Random
) -> None:
    ranked, unretrieved = query
    nonrel_positions = [i for i, v in enumerate(ranked) if v < 1]
    shuffled = [ranked[i] for i in nonrel_positions]
    rng.shuffle(shuffled)
    permuted = list(ranked)
    for i, v in zip(nonrel_positions, shuffled, strict=True):
        permuted[i] = v
    before, after = lists_of(build(ranked, unretrieved)), lists_of(build(permuted, unretrieved))
    # bpref, Judged and the measures below tell judged non-relevant from unjudged (or weigh
    # non-relevant documents by their label's gain), so they may change
    for spec in ALL_SPECS:
        if spec.name not in {"bpref", "Judged", "gm_bpref", "infAP", "unj", "rbp",
                             "rbp_resid", "G", "Rndcg", "ndcg_rel", "nDCG"}:
            assert values(before, spec) == values(after, spec), str(spec)
