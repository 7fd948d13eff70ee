"""Implicit judgments in the pipeline: every ``[implicit] interval`` a click model fitted on
the traffic gives labels, and the live queries whose key has them are scored under
``source="implicit"``: exported, kept in the state, shown on the status page."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from monitor.config import parse_config
from monitor.core.classes import normalise
from monitor.core.export import export
from monitor.core.implicit import Implicit, ImplicitLabels
from monitor.core.pipeline import Pipeline
from monitor.inputs.clicklog import ClickLogReader
from monitor.inputs.generate import Traffic, World, events, true_grades
from monitor.serve.metrics import ExportCollector
from monitor.serve.page import render
from tests.support.checkpoints import round_trip

CONFIG = parse_config(
    '[implicit]\nenabled = true\nmodel = "coec"\ninterval = "1h"\nmin_impressions = 5\n'
    '[query_lists]\nmin_sessions = 2\n'
)


def replayed(seed: int, hours: float) -> tuple[Pipeline, World]:
    world = World.build(seed, size=300)
    pipeline = Pipeline(CONFIG)
    traffic = Traffic(seed=seed, duration=hours * 3600, sessions_per_second=2.0,
                      malformed_rate=0, duplicate_rate=0)
    for n, (_, _, line) in enumerate(events(world, traffic)):
        pipeline.feed(line)
        if n % 500 == 0:
            pipeline.offline_tick(pipeline.sessions.newest, True)
    pipeline.offline_tick(pipeline.sessions.newest, True)
    return pipeline, world


def test_labels_from_clicks_score_the_live_queries_under_the_implicit_source() -> None:
    pipeline, world = replayed(seed=3, hours=2.5)
    implicit = pipeline.judged.implicit
    assert pipeline.implicit is not None and pipeline.implicit.fits == 2
    assert len(implicit) >= 20, "the frequent queries are labelled"
    # the labels follow the hidden relevance the clicks were drawn from
    truth = {(normalise(text), doc): grade for (text, doc), grade in true_grades(world).items()}
    pairs = [(label, truth[(key, doc)]) for key, labels in implicit.items()
             for doc, label in labels.items() if (key, doc) in truth]
    assert len(pairs) >= 100
    high = [grade for label, grade in pairs if label >= 2]
    low = [grade for label, grade in pairs if label == 0]
    assert high and low and sum(high) / len(high) > sum(low) / len(low) + 0.5

    figures = export(pipeline)
    assert figures.offline is not None
    scored = [m for m in figures.offline.means if m.source == "implicit"]
    assert scored and all(0 <= m.mean <= 1 for m in scored)
    overall = [m for m in scored if m.slice[0] == "all" and m.measure == "nDCG@10"]
    assert overall and overall[0].queries >= 100
    registry = CollectorRegistry()
    registry.register(ExportCollector(lambda: figures))
    text = generate_latest(registry).decode()
    assert 'source="implicit"' in text
    assert "search_judged_score_bucket{" in text
    page = render(figures, None).decode()
    assert "live queries with labels from clicks" in page

    restored = round_trip(pipeline)
    assert restored.judged.implicit == implicit, "the labels are kept in the state"


def test_without_implicit_no_series_of_the_source_appear() -> None:
    pipeline = Pipeline(parse_config(""))
    traffic = Traffic(seed=4, duration=600, sessions_per_second=2.0)
    for _, _, line in events(World.build(4, size=50), traffic):
        pipeline.feed(line)
    registry = CollectorRegistry()
    registry.register(ExportCollector(lambda: export(pipeline)))
    assert 'source="implicit"' not in generate_latest(registry).decode()
    assert pipeline.implicit is None


def test_queries_with_dimension_values_are_read_too() -> None:
    """With ``[slices]`` the decoder gives queries a struct with the dimensions' fields:
    they are queries of the click log all the same."""
    config = parse_config(
        '[implicit]\nenabled = true\ninterval = "1h"\nmin_impressions = 5\n'
        '[query_lists]\nmin_sessions = 2\n[slices]\ndimensions = ["platform"]\n'
    )
    pipeline = Pipeline(config)
    traffic = Traffic(seed=3, duration=1.5 * 3600, sessions_per_second=2.0)  # platforms
    for _, _, line in events(World.build(3, size=300), traffic):
        pipeline.feed(line)
    assert pipeline.implicit is not None and pipeline.implicit.fits == 1
    assert len(pipeline.judged.implicit) >= 20


def test_clicks_just_after_an_interval_ends_count_with_their_search() -> None:
    """Fitted every minute, 30 minutes of traffic: a search just before an interval's end
    has its clicks just after it; they count in its interval (fitted once its grace is
    over), not as clicks without a search in the next."""
    config = parse_config(
        '[implicit]\nenabled = true\nmodel = "coec"\ninterval = "1m"\nmin_impressions = 1\n'
        '[query_lists]\nmin_sessions = 1\n'
    )
    pipeline = Pipeline(config)
    implicit = pipeline.implicit
    assert implicit is not None
    fits: list[ImplicitLabels] = []
    fit = implicit._fit

    def recorded(reader: ClickLogReader, end: float) -> ImplicitLabels:
        fits.append(fit(reader, end))
        return fits[-1]

    implicit._fit = recorded  # type: ignore[method-assign]
    clicks = 0
    traffic = Traffic(seed=3, duration=1800, sessions_per_second=2.0, malformed_rate=0,
                      duplicate_rate=0)
    for _, _, line in events(World.build(3, size=300), traffic):
        clicks += b'"type":"click"' in line or b'"type": "click"' in line
        assert pipeline.feed(line) is None
    assert len(fits) >= 28 and clicks > 3000
    assert [f.time for f in fits] == sorted(f.time for f in fits)
    assert sum(f.unmatched for f in fits) <= clicks / 100


def test_a_click_past_the_grace_after_a_quiet_gap_is_not_in_the_interval_before() -> None:
    """Nothing for three hours after an interval, then a click of one of its searches: it is
    no click of that interval (its grace is over), whose fit labels nothing clicked."""
    from typing import cast

    from monitor.inputs.chain import DecoderChain
    from monitor.inputs.events import Decoded
    from tests.support.events import T0, click, query

    config = parse_config('[implicit]\nenabled = true\nmodel = "coec"\ninterval = "1h"\n'
                          'min_impressions = 1\n')
    chain = DecoderChain(config)
    implicit = Implicit(config.implicit, 1, normalise)

    def add(line: bytes) -> ImplicitLabels | None:
        read = chain.read(line)
        assert type(read) is tuple, read
        time, event = cast(Decoded, read)
        return implicit.add(time, event)

    hour = 3600 * (int(T0) // 3600 + 1) - T0  # an hour boundary, in seconds after T0
    assert add(query("e1", hour + 100, "s1", "q1")) is None
    assert add(query("e2", hour + 3590, "s2", "q2")) is None
    assert add(click("c1", hour + 4 * 3600, "s1", "q1", position=1)) is None
    fitted = add(query("e3", hour + 4 * 3600 + 1, "s3", "q3"))
    assert fitted is not None and fitted.time == T0 + hour + 3600
    assert fitted.labels and all(grade == 0 for labels in fitted.labels.values()
                                 for grade in labels.values())
