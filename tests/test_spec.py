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
)


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
        denom=st.sampled_from(["R", "min_R_k", "rel_ret"]) if name == "AP" else st.just("R"),
        gain=st.sampled_from(["linear", "exp"]) if name == "nDCG" else st.just("linear"),
        ideal=st.sampled_from(["judged", "retrieved"]) if name == "nDCG" else st.just("judged"),
    )
)


@given(specs)
def test_every_spec_round_trips_through_its_name(spec: MeasureSpec) -> None:
    assert parse_measure(str(spec)) == spec


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("P", "needs @k"),
        ("Rprec@5", "takes no @k"),
        ("nDCG@0", "positive integer"),
        ("nDCG@ten", "positive integer"),
        ("AP(gain=exp)", "bad parameter"),
        ("nDCG(gain=cubic)@5", "gain must be linear|exp"),
        ("P(rel=high)@5", "rel must be an integer"),
        ("P(rel=1,rel=2)@5", "given twice"),
        ("MRR@10", "unknown measure"),
        ("map.5", "takes no cutoff"),
        ("recall", "needs a cutoff"),
        ("", "unknown measure"),
    ],
)
def test_bad_names_state_the_grammar(text: str, reason: str) -> None:
    with pytest.raises(MeasureNameError, match=reason) as error:
        parse_measures(text)
    assert "expected NAME[(param=value,...)][@k]" in str(error.value)
