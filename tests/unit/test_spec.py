"""Measure names: our grammar and trec_eval's, canonical round trip, errors that teach."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.offline.spec import (
    MEASURE_GRAMMAR,
    MeasureNameError,
    MeasureSpec,
    parse_measure,
    parse_measures,
    parse_named,
    parse_requested,
    trec_eval_name,
    trec_order,
)
from tests.support.files import DATA


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("P@5", MeasureSpec("P", cutoff=5)),
        ("nDCG@10", MeasureSpec("nDCG", cutoff=10)),
        ("AP", MeasureSpec("AP")),
        ("RR@10", MeasureSpec("RR", cutoff=10)),
        ("Rprec", MeasureSpec("Rprec")),
        ("bpref", MeasureSpec("bpref")),
        ("Success@1", MeasureSpec("Success", cutoff=1)),
        ("Judged@10", MeasureSpec("Judged", cutoff=10)),
        ("F1@10", MeasureSpec("F1", cutoff=10)),
        ("R@100", MeasureSpec("R", cutoff=100)),
        ("GMAP", MeasureSpec("GMAP")),
        ("AP(denom=min_R_k)@10", MeasureSpec("AP", cutoff=10, denom="min_R_k")),
        ("nDCG(ideal=retrieved, gain=exp)@5",
         MeasureSpec("nDCG", cutoff=5, gain="exp", ideal="retrieved")),
        ("P(rel=2,no_rel=skip)@3", MeasureSpec("P", cutoff=3, rel=2, no_rel="skip")),
        ("AP(denom=R)", MeasureSpec("AP")),
        ("Judged(denom=retrieved)@10", MeasureSpec("Judged", cutoff=10, denom="retrieved")),
        ("Judged(negative=judged, denom=k)@10",
         MeasureSpec("Judged", cutoff=10, negative="judged")),
        # trec_eval's names
        ("P_5", MeasureSpec("P", cutoff=5)),
        ("P.5", MeasureSpec("P", cutoff=5)),
        ("recall_100", MeasureSpec("R", cutoff=100)),
        ("map", MeasureSpec("AP")),
        ("map_cut.10", MeasureSpec("AP", cutoff=10)),
        ("ndcg", MeasureSpec("nDCG")),
        ("ndcg_cut.10", MeasureSpec("nDCG", cutoff=10)),
        ("ndcg_cut_10", MeasureSpec("nDCG", cutoff=10)),
        ("recip_rank", MeasureSpec("RR")),
        ("success.1", MeasureSpec("Success", cutoff=1)),
        ("gm_map", MeasureSpec("GMAP")),
    ],
)
def test_parses(text: str, spec: MeasureSpec) -> None:
    assert parse_measure(text) == spec


def test_trec_cutoff_lists_expand() -> None:
    assert parse_measures("P.5,10,20") == [MeasureSpec("P", cutoff=k) for k in (5, 10, 20)]
    with pytest.raises(MeasureNameError, match="one measure only"):
        parse_measure("ndcg_cut.5,10")


def test_canonical_names() -> None:
    spec = MeasureSpec("nDCG", cutoff=5, gain="exp", ideal="retrieved", rel=2)
    assert str(spec) == "nDCG(gain=exp,ideal=retrieved,rel=2)@5"
    assert str(MeasureSpec("AP")) == "AP"


def _values(name: str, parameter: str) -> st.SearchStrategy[str | None]:
    """The values ``name`` accepts for ``parameter``; None (the default) if it has none."""
    allowed = MEASURE_GRAMMAR[name][1].get(parameter)
    return st.sampled_from(allowed) if allowed else st.none()


specs = st.sampled_from(sorted(MEASURE_GRAMMAR)).flatmap(
    lambda name: st.builds(
        MeasureSpec,
        name=st.just(name),
        cutoff=(
            st.none() if MEASURE_GRAMMAR[name][0] == "none"
            else st.integers(1, 1000) if MEASURE_GRAMMAR[name][0] == "required"
            else st.none() | st.integers(1, 1000)
        ),
        rel=st.none() | st.integers(0, 4),
        no_rel=st.sampled_from(["zero", "skip"]),
        denom=_values(name, "denom"),
        gain=_values(name, "gain").map(lambda v: v or "linear"),
        ideal=_values(name, "ideal").map(lambda v: v or "judged"),
        negative=_values(name, "negative").map(lambda v: v or "unjudged"),
    )
)


@given(specs)
def test_every_spec_round_trips_through_its_name(spec: MeasureSpec) -> None:
    assert parse_measure(str(spec)) == spec
    assert parse_named(str(spec)) == [(str(spec), spec)]


# trec_eval's names as -m takes them, and the names trec_eval prints for them
TREC_EVAL_NAMES = [
    ("P.5,10", ["P_5", "P_10"]),
    ("P_5", ["P_5"]),
    ("P.5", ["P_5"]),
    ("recall.5,100", ["recall_5", "recall_100"]),
    ("recall_100", ["recall_100"]),
    ("map", ["map"]),
    ("map_cut.5,10", ["map_cut_5", "map_cut_10"]),
    ("map_cut_10", ["map_cut_10"]),
    ("ndcg", ["ndcg"]),
    ("ndcg_cut.5,10", ["ndcg_cut_5", "ndcg_cut_10"]),
    ("ndcg_cut.10", ["ndcg_cut_10"]),
    ("ndcg_cut_10", ["ndcg_cut_10"]),
    ("recip_rank", ["recip_rank"]),
    ("Rprec", ["Rprec"]),
    ("bpref", ["bpref"]),
    ("success.1,5,10", ["success_1", "success_5", "success_10"]),
    ("success_1", ["success_1"]),
    ("gm_map", ["gm_map"]),
]


@pytest.mark.parametrize(("text", "printed"), TREC_EVAL_NAMES)
def test_trec_eval_names_print_as_trec_eval_prints_them_and_parse_back(
    text: str, printed: list[str]
) -> None:
    named = parse_named(text)
    assert [name for name, _ in named] == printed
    for name, spec in named:
        assert parse_named(name) == [(name, spec)]
        assert trec_eval_name(spec) == name


def test_printed_names_are_those_of_trec_eval_output() -> None:
    """Every name of trec_eval 10's own output (out.test.aq) that we support prints as is."""
    printed = {line.split("\t")[0].strip() for line in (DATA / "out.test.aq").open()}
    supported = {name for name in printed if _parses(name)}
    assert {"P_5", "recall_1000", "map", "map_cut_100", "ndcg", "ndcg_cut_10", "recip_rank",
            "Rprec", "bpref", "success_10", "gm_map"} <= supported
    for name in supported:
        assert [printed_name for printed_name, _ in parse_named(name)] == [name]


def _parses(name: str) -> bool:
    try:
        parse_named(name)
    except MeasureNameError:
        return False
    return True


@given(
    st.sampled_from(["P", "recall", "map_cut", "ndcg_cut", "success"]),
    st.lists(st.integers(1, 10_000), min_size=1, max_size=5),
    st.sampled_from([".", "_"]),
)
def test_trec_eval_cutoff_lists_print_one_name_per_cutoff(
    name: str, cutoffs: list[int], separator: str
) -> None:
    text = name + separator + ",".join(map(str, cutoffs))
    named = parse_named(text)
    assert [printed for printed, _ in named] == [f"{name}_{k}" for k in cutoffs]
    assert [spec for _, spec in named] == parse_measures(text)
    for printed, spec in named:
        assert parse_named(printed) == [(printed, spec)]


# (our name, with a cutoff) of the measures trec_eval has
TREC_EVAL_HAS = {("P", True), ("R", True), ("AP", False), ("AP", True), ("nDCG", False),
                 ("nDCG", True), ("RR", False), ("Rprec", False), ("bpref", False),
                 ("Success", True), ("GMAP", False)}


@given(specs)
def test_trec_eval_name_exists_only_for_trec_eval_measures(spec: MeasureSpec) -> None:
    has = (spec.name, spec.cutoff is not None) in TREC_EVAL_HAS
    if not has or spec != MeasureSpec(spec.name, spec.cutoff):  # a parameter: no trec name
        with pytest.raises(ValueError, match="trec_eval has no name"):
            trec_eval_name(spec)
        return
    name = trec_eval_name(spec)
    assert parse_named(name) == [(name, spec)]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("F1", "needs @k"),
        ("Rprec@5", "takes no @k"),
        ("nDCG@0", "positive integer"),
        ("nDCG@ten", "positive integer"),
        ("AP(gain=exp)", "bad parameter"),
        ("AP(denom=k)", "denom must be R|min_R_k|rel_ret"),
        ("Judged(denom=R)@5", "denom must be k|retrieved"),
        ("Judged(negative=maybe)@5", "negative must be unjudged|judged"),
        ("P(negative=judged)@5", "bad parameter"),
        ("nDCG(gain=cubic)@5", "gain must be linear|exp"),
        ("P(rel=high)@5", "rel must be an integer"),
        ("P(rel=1,rel=2)@5", "given twice"),
        ("P(rel=9223372036854775808)@5", r"rel must be an integer \(64-bit\)"),
        ("P@9223372036854775808", r"cutoff must be a positive integer \(64-bit\)"),
        ("Judged(denom=retrieved)@99999999999999999999", "cutoff must be a positive integer"),
        ("MRR@10", "unknown measure"),
        ("Success", "needs @k"),
        ("", "unknown measure"),
    ],
)
def test_bad_names_state_the_grammar(text: str, reason: str) -> None:
    with pytest.raises(MeasureNameError, match=reason) as error:
        parse_measures(text)
    assert "expected NAME[(param=value,...)][@k]" in str(error.value)


def test_trec_names_without_a_cutoff_take_trec_evals_defaults() -> None:
    assert [name for name, _ in parse_named("P")] == [
        "P_5", "P_10", "P_15", "P_20", "P_30", "P_100", "P_200", "P_500", "P_1000"
    ]
    assert parse_measures("success") == [MeasureSpec("Success", k) for k in (1, 5, 10)]
    assert parse_measures("ndcg_cut")[0] == MeasureSpec("nDCG", 5)
    assert parse_measures("map_cut")[-1] == MeasureSpec("AP", 1000)
    assert parse_measures("recall")[1] == MeasureSpec("R", 10)


def test_trec_names_are_put_in_trec_evals_order_and_ours_follow_as_asked() -> None:
    asked = [*parse_named("ndcg_cut.10"), *parse_named("nDCG@5"), *parse_named("P.20,5"),
             *parse_named("map"), *parse_named("AP"), *parse_named("P.5")]
    assert [name for name, _ in trec_order(asked)] == [
        "map", "P_5", "P_20", "ndcg_cut_10", "nDCG@5", "AP"
    ]


def test_trec_names_as_trec_eval_reads_them_its_first_parameters_and_parameters_it_ignores(
) -> None:
    """A measure without parameters ignores those given (``map.5`` is map, not AP at 5); a
    cutoff is read with atol (``+10``); of two ``-m`` options of one measure the first
    counts (``-m P.10 -m P.5`` prints P_10 only)."""
    assert parse_named("map.5") == parse_named("map")
    assert parse_named("binG.1=2") == parse_named("binG")
    assert [name for name, _ in parse_named("P.5,+10")] == ["P_5", "P_10"]
    assert [name for name, _ in parse_requested(["P.10", "P.5"])] == ["P_10"]
    assert [name for name, _ in parse_requested(["all_trec", "P.5"]) if name.startswith("P_")
            ] == ["P_5"]
    assert [name for name, _ in parse_requested(["P.5", "ndcg_cut.10", "nDCG@5"])] == [
        "P_5", "ndcg_cut_10", "nDCG@5"]
