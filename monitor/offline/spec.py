"""Measure names: parsed into frozen specs that print back to the same canonical string.

Grammar (ours): ``NAME[(param=value[,param=value]...)][@k]``, for example ``P@5``,
``nDCG@10``, ``AP(denom=min_R_k)@10``, ``nDCG(gain=exp,ideal=retrieved)@5``,
``P(rel=2,no_rel=skip)@3``. trec_eval's names are accepted too (``P_5``, ``P.5``,
``ndcg_cut.10``, ``map``, ``recip_rank``, ``success.1``, ``gm_map`` ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Literal

ApDenominator = Literal["R", "min_R_k", "rel_ret"]
Gain = Literal["linear", "exp"]
Ideal = Literal["judged", "retrieved"]
NoRelevant = Literal["zero", "skip"]

# name -> (cutoff: "required" | "optional" | "none", parameters it accepts besides rel/no_rel)
MEASURE_GRAMMAR: dict[str, tuple[str, frozenset[str]]] = {
    "P": ("required", frozenset()),
    "R": ("required", frozenset()),
    "F1": ("required", frozenset()),
    "AP": ("optional", frozenset({"denom"})),
    "RR": ("optional", frozenset()),
    "nDCG": ("optional", frozenset({"gain", "ideal"})),
    "Rprec": ("none", frozenset()),
    "bpref": ("none", frozenset()),
    "Success": ("required", frozenset()),
    "Judged": ("required", frozenset()),
    "GMAP": ("none", frozenset()),
}

_PARAM_VALUES: dict[str, tuple[str, ...]] = {
    "denom": ("R", "min_R_k", "rel_ret"),
    "gain": ("linear", "exp"),
    "ideal": ("judged", "retrieved"),
    "no_rel": ("zero", "skip"),
}
_COMMON_PARAMS = frozenset({"rel", "no_rel"})

GRAMMAR_HELP = (
    "expected NAME[(param=value,...)][@k] with NAME one of "
    + ", ".join(MEASURE_GRAMMAR)
    + "; @k is required for P, R, F1, Success, Judged, optional for AP, RR, nDCG and not "
    "allowed for Rprec, bpref, GMAP; params: rel=INT (all), no_rel=zero|skip (all), "
    "denom=R|min_R_k|rel_ret (AP), gain=linear|exp and ideal=judged|retrieved (nDCG); "
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
    (``-l``, default 1).
    """

    name: str
    cutoff: int | None = None
    rel: int | None = None
    no_rel: NoRelevant = "zero"
    denom: ApDenominator = "R"
    gain: Gain = "linear"
    ideal: Ideal = "judged"

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

# trec_eval name -> (our name, cutoff: "required" | "none" | "optional")
_TREC_NAMES: dict[str, str] = {
    "P": "P",
    "recall": "R",
    "map": "AP",
    "map_cut": "AP",
    "ndcg": "nDCG",
    "ndcg_cut": "nDCG",
    "recip_rank": "RR",
    "Rprec": "Rprec",
    "bpref": "bpref",
    "success": "Success",
    "gm_map": "GMAP",
}
_TREC = re.compile(r"^(?P<name>[A-Za-z_]+?)(?:[._](?P<k>[0-9][0-9,]*))?$")


def parse_measure(text: str) -> MeasureSpec:
    """Parse one measure name (ours or trec_eval's) into a spec."""
    specs = parse_measures(text)
    if len(specs) != 1:
        raise MeasureNameError(f"measure {text!r}: names one measure only here")
    return specs[0]


def parse_measures(text: str) -> list[MeasureSpec]:
    """Parse a name that may expand to several specs (trec_eval's ``P.5,10``)."""
    text = text.strip()
    trec = _TREC.match(text)
    if trec and trec["name"] in _TREC_NAMES and not _is_our_name(text):
        return _from_trec(text, trec["name"], trec["k"])
    ours = _OURS.match(text)
    if not ours or ours["name"] not in MEASURE_GRAMMAR:
        raise MeasureNameError(f"unknown measure {text!r}")
    return [_from_ours(text, ours["name"], ours["params"], ours["k"])]


def _is_our_name(text: str) -> bool:
    # "P", "Rprec" and "bpref" are spelled the same in both grammars.
    return text in MEASURE_GRAMMAR


def _from_trec(text: str, trec_name: str, cutoffs: str | None) -> list[MeasureSpec]:
    name = _TREC_NAMES[trec_name]
    if trec_name in ("map", "ndcg") and cutoffs is None:
        return [MeasureSpec(name)]
    if trec_name in ("map", "ndcg", "Rprec", "bpref", "recip_rank", "gm_map"):
        if cutoffs is not None:
            raise MeasureNameError(f"measure {text!r}: {trec_name} takes no cutoff")
        return [MeasureSpec(name)]
    if cutoffs is None:
        raise MeasureNameError(f"measure {text!r}: {trec_name} needs a cutoff")
    return [MeasureSpec(name, cutoff=_cutoff(text, k)) for k in cutoffs.split(",") if k]


def _from_ours(text: str, name: str, params: str | None, k: str | None) -> MeasureSpec:
    cutoff_rule, extra = MEASURE_GRAMMAR[name]
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
        if not sep or key not in (_COMMON_PARAMS | extra):
            raise MeasureNameError(f"measure {text!r}: bad parameter {item!r}")
        if key in values:
            raise MeasureNameError(f"measure {text!r}: parameter {key!r} given twice")
        if key == "rel":
            try:
                values[key] = int(value)
            except ValueError:
                raise MeasureNameError(
                    f"measure {text!r}: rel must be an integer, got {value!r}"
                ) from None
        elif value in _PARAM_VALUES[key]:
            values[key] = value
        else:
            allowed = "|".join(_PARAM_VALUES[key])
            raise MeasureNameError(f"measure {text!r}: {key} must be {allowed}, got {value!r}")
    return MeasureSpec(name, cutoff, **values)  # type: ignore[arg-type]


def _cutoff(text: str, k: str) -> int:
    if not k.isdigit() or int(k) < 1:
        raise MeasureNameError(f"measure {text!r}: cutoff must be a positive integer, got {k!r}")
    return int(k)
