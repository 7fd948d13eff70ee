"""Measure names: parsed into frozen specs that print back to the same canonical string.

Grammar (ours): ``NAME[(param=value[,param=value]...)][@k]``, for example ``P@5``,
``nDCG@10``, ``AP(denom=min_R_k)@10``, ``nDCG(gain=exp,ideal=retrieved)@5``,
``P(rel=2,no_rel=skip)@3``. trec_eval's names are accepted too (``P_5``, ``P.5``,
``ndcg_cut.10``, ``map``, ``recip_rank``, ``success.1``, ``gm_map`` ...); a name given in
trec_eval's grammar is printed as trec_eval prints it (``ndcg_cut.5,10`` gives
``ndcg_cut_5`` and ``ndcg_cut_10``), and every printed name parses back to its spec.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
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
    level: float | None = None
    values: tuple[float, ...] = ()
    pairs: tuple[tuple[str, float], ...] = ()
    printable: str | None = field(default=None, compare=False)

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
        text = self.name
        if self.name in TREC_NAMED:  # named only by trec_eval's name, with its parameters
            text = trec_eval_name(replace(self, rel=None, no_rel="zero"))
        for f in fields(self):
            if f.name in ("name", "cutoff", *_TREC_PARAMETERS):
                continue
            value = getattr(self, f.name)
            if value != f.default:
                params.append(f"{f.name}={value}")
        if params:
            text += "(" + ",".join(sorted(params)) + ")"
        if self.cutoff is not None and self.name not in TREC_NAMED:
            text += f"@{self.cutoff}"
        return text


_OURS = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*)(?:\((?P<params>[^()]*)\))?(?:@(?P<k>\S+))?$")

ParamKind = Literal["none", "cutoffs", "levels", "values", "pairs"]


@dataclass(frozen=True, slots=True)
class TrecMeasure:
    """How trec_eval names a measure: the name of our spec, the kind of parameters its name
    takes and the ones it takes when named without any.

    ``cutoffs`` (``P.5,10``) and ``levels`` (``iprec_at_recall..1,.5``, printed ``%.2f``)
    give one spec each, in ascending order; ``values`` (``utility.1,-1,0,0``) and ``pairs``
    (``ndcg.1=3,2=9``, ``rbp.p=0.8``) are the parameters of one spec, printed as given
    (``utility_1,-1,0,0``); named without them, the measure prints its bare name.
    """

    ours: str
    params: ParamKind = "none"
    defaults: tuple[float, ...] = ()


_DEPTHS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
RECALL_LEVELS: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""trec_eval's recall levels: iprec_at_recall's and 11pt_avg's defaults, the points of a
precision-recall curve."""

TREC_MEASURES: dict[str, TrecMeasure] = {
    "runid": TrecMeasure("runid"),
    "num_q": TrecMeasure("num_q"),
    "num_ret": TrecMeasure("num_ret"),
    "num_rel": TrecMeasure("num_rel"),
    "num_rel_ret": TrecMeasure("num_rel_ret"),
    "map": TrecMeasure("AP"),
    "gm_map": TrecMeasure("GMAP"),
    "Rprec": TrecMeasure("Rprec"),
    "bpref": TrecMeasure("bpref"),
    "recip_rank": TrecMeasure("RR"),
    "iprec_at_recall": TrecMeasure("iprec_at_recall", "levels", RECALL_LEVELS),
    "P": TrecMeasure("P", "cutoffs", _DEPTHS),
    "relstring": TrecMeasure("relstring", "values", (10,)),
    "recall": TrecMeasure("R", "cutoffs", _DEPTHS),
    "infAP": TrecMeasure("infAP"),
    "gm_bpref": TrecMeasure("gm_bpref"),
    "Rprec_mult": TrecMeasure(
        "Rprec_mult", "levels", (0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0)
    ),
    "utility": TrecMeasure("utility", "values", (1.0, -1.0, 0.0, 0.0)),
    "11pt_avg": TrecMeasure("11pt_avg", "values", RECALL_LEVELS),
    "binG": TrecMeasure("binG"),
    "G": TrecMeasure("G", "pairs"),
    "dcg": TrecMeasure("dcg", "pairs"),
    "ndcg": TrecMeasure("nDCG", "pairs"),
    "ndcg_rel": TrecMeasure("ndcg_rel", "pairs"),
    "Rndcg": TrecMeasure("Rndcg", "pairs"),
    "ndcg_cut": TrecMeasure("nDCG", "cutoffs", _DEPTHS),
    "map_cut": TrecMeasure("AP", "cutoffs", _DEPTHS),
    "relative_P": TrecMeasure("relative_P", "cutoffs", _DEPTHS),
    "success": TrecMeasure("Success", "cutoffs", (1, 5, 10)),
    "set_P": TrecMeasure("set_P"),
    "set_relative_P": TrecMeasure("set_relative_P"),
    "set_recall": TrecMeasure("set_recall"),
    "set_map": TrecMeasure("set_map"),
    "set_F": TrecMeasure("set_F", "values", (1.0,)),
    "num_nonrel_judged_ret": TrecMeasure("num_nonrel_judged_ret"),
    "rbp": TrecMeasure("rbp", "pairs"),
    "rbp_resid": TrecMeasure("rbp_resid", "pairs"),
    "unj": TrecMeasure("unj", "cutoffs", (5, 10, 20)),
}
"""trec_eval 10's measures (of ``all_trec``, and ``dcg``) in the order it prints them (its
measure table), whatever the order they were asked in."""

TREC_NICKNAMES: dict[str, tuple[str, ...]] = {
    "official": (
        "runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec",
        "bpref", "recip_rank", "iprec_at_recall", "P",
    ),
    "set": (
        "runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "utility", "set_P",
        "set_recall", "set_relative_P", "set_map", "set_F",
    ),
    "all_trec": (
        "runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec",
        "bpref", "recip_rank", "iprec_at_recall", "P", "relstring", "recall", "unj", "rbp",
        "rbp_resid", "infAP", "gm_bpref", "utility", "11pt_avg", "ndcg", "relative_P",
        "Rprec_mult", "success", "map_cut", "ndcg_cut", "ndcg_rel", "Rndcg", "binG", "G",
        "set_P", "set_recall", "set_relative_P", "set_map", "set_F", "num_nonrel_judged_ret",
    ),
}
"""trec_eval's names for sets of measures (``-m all_trec``), each measure with its defaults."""

TREC_NAMED = frozenset(
    trec for trec, measure in TREC_MEASURES.items()
    if measure.ours == trec and trec not in MEASURE_GRAMMAR
)
"""Measures we name as trec_eval does, in both grammars (``infAP``, ``utility_2,-1,0,0``)."""

_TREC_PARAMETERS = ("level", "values", "pairs", "printable")
_TREC_PRINTED = {
    (measure.ours, measure.params == "cutoffs"): trec for trec, measure in TREC_MEASURES.items()
}
TREC_ORDER = tuple(TREC_MEASURES)
TREC_DEFAULT_CUTOFFS: dict[str, tuple[int, ...]] = {
    trec: tuple(int(k) for k in measure.defaults)
    for trec, measure in TREC_MEASURES.items() if measure.params == "cutoffs"
}
"""trec_eval 10's cutoffs of a measure named without any (``-m P``: P_5 to P_1000)."""

Named = tuple[str, MeasureSpec]


def trec_family(spec: MeasureSpec) -> str | None:
    """The trec_eval measure ``spec`` belongs to (``P`` for P@5), None if none."""
    return _TREC_PRINTED.get((spec.name, spec.cutoff is not None))


def trec_order(named: Sequence[Named]) -> list[Named]:
    """``named`` as trec_eval prints them: the measures asked for by a trec_eval name in
    trec_eval's order (``TREC_ORDER``, cutoffs and levels ascending), then the others in the
    order given; each once."""
    trec: dict[str, tuple[tuple[int, float], MeasureSpec]] = {}
    ours: dict[str, MeasureSpec] = {}
    for name, spec in named:
        family = trec_family(spec)
        try:
            is_trec = family is not None and trec_eval_name(spec) == name
        except ValueError:
            is_trec = False
        if is_trec:
            within = spec.cutoff if spec.cutoff is not None else spec.level or 0.0
            trec.setdefault(name, ((TREC_ORDER.index(str(family)), within), spec))
        else:
            ours.setdefault(name, spec)
    ordered = sorted(trec.items(), key=lambda item: item[1][0])
    return [(name, spec) for name, (_, spec) in ordered] + list(ours.items())


def parse_requested(texts: Sequence[str]) -> list[Named]:
    """The measures of several names (``-m`` options) as trec_eval prints them: in its
    order (``trec_order``), a measure named with parameters (``-m all_trec -m P.5``) printed
    with those only, not with its defaults too."""
    asked: list[tuple[Named, bool]] = []
    given: set[str | None] = set()  # the families named with parameters so far
    for text in texts:
        defaulted = text.strip() in TREC_NICKNAMES or text.strip() in TREC_MEASURES
        found = parse_named(text)
        if not defaulted and _split_trec(text.strip())[0] is not None:
            # as trec_eval: of a measure's -m options with parameters the first is the one
            found = [named for named in found if trec_family(named[1]) not in given]
            given |= {trec_family(spec) for _, spec in found}
        asked += [(named, defaulted) for named in found]
    explicit = {trec_family(spec) for (_, spec), defaulted in asked if not defaulted}
    return trec_order([
        named for named, defaulted in asked
        if not defaulted or trec_family(named[1]) not in explicit
    ])


def parse_measure(text: str) -> MeasureSpec:
    """Parse one measure name (ours or trec_eval's) into a spec."""
    specs = parse_measures(text)
    if len(specs) != 1:
        raise MeasureNameError(f"measure {text!r}: names one measure only here")
    return specs[0]


def parse_measures(text: str) -> list[MeasureSpec]:
    """Parse a name that may expand to several specs (trec_eval's ``P.5,10``)."""
    return [spec for _, spec in parse_named(text)]


def parse_named(text: str) -> list[Named]:
    """Parse like ``parse_measures``, each spec with the name to print for it.

    A trec_eval name prints as trec_eval prints it (``ndcg_cut.5,10``: ``ndcg_cut_5`` and
    ``ndcg_cut_10``; ``P.5``: ``P_5``), any other as its canonical name; both parse back to
    the same spec. A nickname of trec_eval (``all_trec``, ``official``, ``set``) gives its
    measures with their defaults.
    """
    text = text.strip()
    if text in TREC_NICKNAMES:
        return [named for trec in TREC_NICKNAMES[text] for named in _trec_defaults(trec)]
    if text in TREC_MEASURES:
        return _trec_defaults(text)
    family, params = _split_trec(text)
    if family is not None and params is not None:
        return [(trec_eval_name(spec), spec) for spec in _from_trec(text, family, params)]
    ours = _OURS.match(text)
    if not ours or ours["name"] not in MEASURE_GRAMMAR:
        raise MeasureNameError(f"unknown measure {text!r}")
    spec = _from_ours(text, ours["name"], ours["params"], ours["k"])
    return [(str(spec), spec)]


def trec_eval_name(spec: MeasureSpec) -> str:
    """The name trec_eval prints for ``spec`` (``P_5``, ``map_cut_10``, ``ndcg``,
    ``iprec_at_recall_0.10``, ``utility_2,-1,0,0``).

    Raises ValueError for a spec trec_eval has no name for (a parameter, F1, Judged).
    """
    trec = trec_family(spec)
    plain = replace(spec, level=None, values=(), pairs=(), printable=None)
    if trec is None or plain != MeasureSpec(spec.name, spec.cutoff):
        raise ValueError(f"trec_eval has no name for {spec}")
    kind = TREC_MEASURES[trec].params
    if (spec.level is not None) != (kind == "levels") or (
        spec.values and kind != "values") or (spec.pairs and kind != "pairs"):
        raise ValueError(f"trec_eval has no name for {spec}")
    if kind == "cutoffs":
        return f"{trec}_{spec.cutoff}"
    if kind == "levels":
        return f"{trec}_{spec.level:.2f}"
    if spec.printable is not None:
        return f"{trec}_{spec.printable}"
    if spec.values:
        return f"{trec}_" + ",".join(f"{v:g}" for v in spec.values)
    if spec.pairs:
        return f"{trec}_" + ",".join(f"{k}={v:g}" for k, v in spec.pairs)
    return trec


def _trec_defaults(trec: str) -> list[Named]:
    measure = TREC_MEASURES[trec]
    if measure.params == "cutoffs":
        specs = [MeasureSpec(measure.ours, int(k)) for k in measure.defaults]
    elif measure.params == "levels":
        specs = [MeasureSpec(measure.ours, level=level) for level in measure.defaults]
    else:
        specs = [MeasureSpec(measure.ours)]
    return [(trec_eval_name(spec), spec) for spec in specs]


def _split_trec(text: str) -> tuple[str | None, str | None]:
    """trec_eval's measure and parameters of ``text``: split at the first '.', as trec_eval
    does (``P.5``, ``11pt_avg..25,.5``), or after the longest measure name followed by '_'
    (the printed ``P_5``, ``utility_2,-1,0,0``)."""
    name, dot, params = text.partition(".")
    if dot and name in TREC_MEASURES:
        return name, params
    for trec in sorted(TREC_MEASURES, key=len, reverse=True):
        if text.startswith(trec + "_") and not _is_our_name(text):
            return trec, text[len(trec) + 1:]
    return None, None


def _is_our_name(text: str) -> bool:
    # "P", "Rprec" and "bpref" are spelled the same in both grammars.
    return text in MEASURE_GRAMMAR


def _from_trec(text: str, trec: str, params: str) -> list[MeasureSpec]:
    measure = TREC_MEASURES[trec]
    name = measure.ours
    if measure.params == "none":  # trec_eval reads map.5 as map (map_cut.5 is AP at 5)
        import logging  # (only then: eval loads no logging)

        logging.getLogger(__name__).warning(
            "measure %r: %s takes no parameter: read as %s, as trec_eval reads it",
            text, trec, trec,
        )
        return [MeasureSpec(name)]
    items = [item for item in params.split(",") if item.strip()]
    if not items:
        raise MeasureNameError(f"measure {text!r}: {trec} needs parameters after its name")
    if measure.params == "cutoffs":
        # trec_eval reads a cutoff with atol: ndcg_cut.23.4 is ndcg_cut_23
        cutoffs = [_cutoff(text, re.sub(r"^([0-9]+)\.[0-9]*$", r"\1", k)) for k in items]
        return [MeasureSpec(name, cutoff=k) for k in cutoffs]
    if measure.params == "levels":
        return [MeasureSpec(name, level=v) for v in sorted({_number(text, v) for v in items})]
    if measure.params == "values":
        values = tuple(_number(text, v) for v in items)
        return [MeasureSpec(name, values=values, printable=params)]
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise MeasureNameError(f"measure {text!r}: expected name=value pairs, got {item!r}")
        pairs.append((key.strip(), _number(text, value)))
    return [MeasureSpec(name, pairs=tuple(pairs), printable=params)]


def _number(text: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise MeasureNameError(f"measure {text!r}: expected a number, got {value!r}")
    return number



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
    k = k.strip()
    if k[:1] == "+":  # (read with atol by trec_eval)
        k = k[1:]
    if not k.isdigit() or not 1 <= int(k) <= INT64_MAX:
        raise MeasureNameError(
            f"measure {text!r}: cutoff must be a positive integer (64-bit), got {k!r}"
        )
    return int(k)
