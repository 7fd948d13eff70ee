"""Measure names: parsed into frozen specs that print back to the same canonical string.

Grammar (ours): ``NAME[(param=value[,param=value]...)][@k]``, for example ``P@5``,
``nDCG@10``, ``AP(denom=min_R_k)@10``, ``nDCG(gain=exp,ideal=retrieved)@5``,
``P(rel=2,no_rel=skip)@3``. trec_eval's names are accepted too (``P_5``, ``P.5``,
``ndcg_cut.10``, ``map``, ``recip_rank``, ``success.1``, ``gm_map`` ...); a name given in
trec_eval's grammar is printed as trec_eval prints it (``ndcg_cut.5,10`` gives
``ndcg_cut_5`` and ``ndcg_cut_10``), and every printed name parses back to its spec.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal

Denominator = Literal["R", "min_R_k", "rel_ret", "k", "retrieved"]
Gain = Literal["linear", "exp"]
Ideal = Literal["judged", "retrieved"]
NoRelevant = Literal["zero", "skip"]
Negative = Literal["unjudged", "judged"]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""Relevance labels, relevance levels and cutoffs are 64-bit integers."""

# name -> (cutoff: "required" | "optional" | "none", {parameter: its values, default first})
# for the parameters it accepts besides rel and no_rel
MEASURE_GRAMMAR: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "P": ("required", {}),
    "R": ("required", {}),
    "F1": ("required", {}),
    "AP": ("optional", {"denom": ("R", "min_R_k", "rel_ret")}),
    "RR": ("optional", {}),
    "nDCG": ("optional", {"gain": ("linear", "exp"), "ideal": ("judged", "retrieved")}),
    "Rprec": ("none", {}),
    "bpref": ("none", {}),
    "Success": ("required", {}),
    "Judged": ("required", {"denom": ("k", "retrieved"), "negative": ("unjudged", "judged")}),
    "GMAP": ("none", {}),
}
_COMMON_PARAMS: dict[str, tuple[str, ...]] = {"no_rel": ("zero", "skip")}

GRAMMAR_HELP = (
    "expected NAME[(param=value,...)][@k] with NAME one of "
    + ", ".join(MEASURE_GRAMMAR)
    + "; @k is required for P, R, F1, Success, Judged, optional for AP, RR, nDCG and not "
    "allowed for Rprec, bpref, GMAP; params: rel=INT (all), no_rel=zero|skip (all), "
    "denom=R|min_R_k|rel_ret (AP), gain=linear|exp and ideal=judged|retrieved (nDCG), "
    "denom=k|retrieved and negative=unjudged|judged (Judged); "
    "trec_eval names such as P_5, P.5, recall_100, map, map_cut.10, ndcg, ndcg_cut.10, "
    "recip_rank, Rprec, bpref, success.1, gm_map are accepted too"
)


class MeasureNameError(ValueError):
    """A measure name that does not follow the grammar; the message states the grammar."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"{problem}; {GRAMMAR_HELP}")


@dataclass(frozen=True, slots=True)
class MeasureSpec:
    """One measure with its cutoff and conventions; ``str()`` gives the canonical name.

    ``rel`` is None when the name did not set it: the evaluation's relevance level applies
    (``-l``, default 1). ``denom`` is None for the measure's default denominator (AP: ``R``,
    Judged: ``k``); a spec built with the default spelled out is the same spec.
    """

    name: str
    cutoff: int | None = None
    rel: int | None = None
    no_rel: NoRelevant = "zero"
    denom: Denominator | None = None
    gain: Gain = "linear"
    ideal: Ideal = "judged"
    negative: Negative = "unjudged"

    def __post_init__(self) -> None:
        choices = MEASURE_GRAMMAR.get(self.name, ("", {}))[1].get("denom")
        if choices and self.denom == choices[0]:
            object.__setattr__(self, "denom", None)

    @property
    def relevance(self) -> int:
        """The label from which a document counts as relevant."""
        return 1 if self.rel is None else self.rel

    def with_relevance_level(self, level: int) -> MeasureSpec:
        """This spec with ``level`` as its threshold unless the name set one itself."""
        return self if self.rel is not None else replace(self, rel=level)

    def __str__(self) -> str:
        params = []
        for f in fields(self):
            if f.name in ("name", "cutoff"):
                continue
            value = getattr(self, f.name)
            if value != f.default:
                params.append(f"{f.name}={value}")
        text = self.name
        if params:
            text += "(" + ",".join(sorted(params)) + ")"
        if self.cutoff is not None:
            text += f"@{self.cutoff}"
        return text


_OURS = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*)(?:\((?P<params>[^()]*)\))?(?:@(?P<k>\S+))?$")

# trec_eval's measure name -> (our name, whether it takes a cutoff: ``P.5,10``, ``P_5``)
_TREC_NAMES: dict[str, tuple[str, bool]] = {
    "P": ("P", True),
    "recall": ("R", True),
    "map": ("AP", False),
    "map_cut": ("AP", True),
    "ndcg": ("nDCG", False),
    "ndcg_cut": ("nDCG", True),
    "recip_rank": ("RR", False),
    "Rprec": ("Rprec", False),
    "bpref": ("bpref", False),
    "success": ("Success", True),
    "gm_map": ("GMAP", False),
}
_TREC_PRINTED = {value: trec for trec, value in _TREC_NAMES.items()}
TREC_ORDER = (
    "map", "gm_map", "Rprec", "bpref", "recip_rank", "P", "recall", "ndcg", "ndcg_cut",
    "map_cut", "success",
)
"""The order trec_eval 10 prints its measures in (its measure table), whatever the order
they were asked in; a measure's cutoffs print in ascending order."""
_TREC_PRINTED_NAME = re.compile(r"^(?P<family>[A-Za-z_]+?)(?:_(?P<k>[0-9]+))?$")


def trec_order(named: Sequence[tuple[str, MeasureSpec]]) -> list[tuple[str, MeasureSpec]]:
    """``named`` as trec_eval prints them: the measures asked for by a trec_eval name in
    trec_eval's order (``TREC_ORDER``, cutoffs ascending), then the others in the order
    given; each once."""
    trec: dict[str, tuple[tuple[int, int], MeasureSpec]] = {}
    ours: dict[str, MeasureSpec] = {}
    for name, spec in named:
        printed = _TREC_PRINTED_NAME.match(name)
        family = printed["family"] if printed else None
        try:
            is_trec = trec_eval_name(spec) == name and family in TREC_ORDER
        except ValueError:
            is_trec = False
        if is_trec:
            trec[name] = ((TREC_ORDER.index(str(family)), spec.cutoff or 0), spec)
        else:
            ours.setdefault(name, spec)
    ordered = sorted(trec.items(), key=lambda item: item[1][0])
    return [(name, spec) for name, (_, spec) in ordered] + list(ours.items())
TREC_DEFAULT_CUTOFFS: dict[str, tuple[int, ...]] = {
    "P": (5, 10, 15, 20, 30, 100, 200, 500, 1000),
    "recall": (5, 10, 15, 20, 30, 100, 200, 500, 1000),
    "map_cut": (5, 10, 15, 20, 30, 100, 200, 500, 1000),
    "ndcg_cut": (5, 10, 15, 20, 30, 100, 200, 500, 1000),
    "success": (1, 5, 10),
}
"""trec_eval 10's cutoffs of a measure named without any (``-m P``: P_5 to P_1000)."""
_TREC = re.compile(r"^(?P<name>[A-Za-z_]+?)(?:[._](?P<k>[0-9][0-9,]*))?$")


def parse_measure(text: str) -> MeasureSpec:
    """Parse one measure name (ours or trec_eval's) into a spec."""
    specs = parse_measures(text)
    if len(specs) != 1:
        raise MeasureNameError(f"measure {text!r}: names one measure only here")
    return specs[0]


def parse_measures(text: str) -> list[MeasureSpec]:
    """Parse a name that may expand to several specs (trec_eval's ``P.5,10``)."""
    return [spec for _, spec in parse_named(text)]


def parse_named(text: str) -> list[tuple[str, MeasureSpec]]:
    """Parse like ``parse_measures``, each spec with the name to print for it.

    A trec_eval name prints as trec_eval prints it (``ndcg_cut.5,10``: ``ndcg_cut_5`` and
    ``ndcg_cut_10``; ``P.5``: ``P_5``), any other as its canonical name; both parse back to
    the same spec.
    """
    text = text.strip()
    defaults = TREC_DEFAULT_CUTOFFS.get(text)
    if defaults is not None:  # trec_eval's default cutoffs
        name = _TREC_NAMES[text][0]
        return [(trec_eval_name(spec), spec) for spec in (MeasureSpec(name, k) for k in defaults)]
    trec = _TREC.match(text)
    if trec and trec["name"] in _TREC_NAMES and not _is_our_name(text):
        return [(trec_eval_name(spec), spec) for spec in _from_trec(text, trec["name"], trec["k"])]
    ours = _OURS.match(text)
    if not ours or ours["name"] not in MEASURE_GRAMMAR:
        raise MeasureNameError(f"unknown measure {text!r}")
    spec = _from_ours(text, ours["name"], ours["params"], ours["k"])
    return [(str(spec), spec)]


def trec_eval_name(spec: MeasureSpec) -> str:
    """The name trec_eval prints for ``spec`` (``P_5``, ``map_cut_10``, ``ndcg``).

    Raises ValueError for a spec trec_eval has no name for (a parameter, F1, Judged).
    """
    trec = _TREC_PRINTED.get((spec.name, spec.cutoff is not None))
    if trec is None or spec != MeasureSpec(spec.name, spec.cutoff):
        raise ValueError(f"trec_eval has no name for {spec}")
    return trec if spec.cutoff is None else f"{trec}_{spec.cutoff}"


def _is_our_name(text: str) -> bool:
    # "P", "Rprec" and "bpref" are spelled the same in both grammars.
    return text in MEASURE_GRAMMAR


def _from_trec(text: str, trec_name: str, cutoffs: str | None) -> list[MeasureSpec]:
    name, takes_cutoff = _TREC_NAMES[trec_name]
    if not takes_cutoff:
        if cutoffs is not None:
            # map.5 is not map_cut.5: trec_eval's map takes no cutoff
            raise MeasureNameError(f"measure {text!r}: {trec_name} takes no cutoff")
        return [MeasureSpec(name)]
    if cutoffs is None:
        raise MeasureNameError(f"measure {text!r}: {trec_name} needs a cutoff")
    return [MeasureSpec(name, cutoff=_cutoff(text, k)) for k in cutoffs.split(",") if k]


def _from_ours(text: str, name: str, params: str | None, k: str | None) -> MeasureSpec:
    cutoff_rule, accepted = MEASURE_GRAMMAR[name]
    accepted = _COMMON_PARAMS | accepted
    cutoff = None if k is None else _cutoff(text, k)
    if cutoff_rule == "required" and cutoff is None:
        raise MeasureNameError(f"measure {text!r}: {name} needs @k")
    if cutoff_rule == "none" and cutoff is not None:
        raise MeasureNameError(f"measure {text!r}: {name} takes no @k")
    values: dict[str, object] = {}
    for item in (params or "").split(","):
        if not item.strip():
            continue
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or (key != "rel" and key not in accepted):
            raise MeasureNameError(f"measure {text!r}: bad parameter {item!r}")
        if key in values:
            raise MeasureNameError(f"measure {text!r}: parameter {key!r} given twice")
        if key == "rel":
            values[key] = _relevance(text, value)
        elif value in accepted[key]:
            values[key] = value
        else:
            allowed = "|".join(accepted[key])
            raise MeasureNameError(f"measure {text!r}: {key} must be {allowed}, got {value!r}")
    return MeasureSpec(name, cutoff, **values)  # type: ignore[arg-type]


def _relevance(text: str, value: str) -> int:
    try:
        level = int(value)
    except ValueError:
        level = None
    if level is None or not INT64_MIN <= level <= INT64_MAX:
        raise MeasureNameError(f"measure {text!r}: rel must be an integer (64-bit), got {value!r}")
    return level


def _cutoff(text: str, k: str) -> int:
    if not k.isdigit() or not 1 <= int(k) <= INT64_MAX:
        raise MeasureNameError(
            f"measure {text!r}: cutoff must be a positive integer (64-bit), got {k!r}"
        )
    return int(k)
