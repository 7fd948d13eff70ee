"""Query classes: a closed set whatever the input says."""

from __future__ import annotations

from prometheus_client.registry import CollectorRegistry

from monitor.config import Config, parse_config
from monitor.core.export import export
from monitor.core.pipeline import Pipeline
from monitor.serve.metrics import ExportCollector
from tests.support.events import query


def label_values(pipeline: Pipeline) -> set[str]:
    registry = CollectorRegistry()
    registry.register(ExportCollector(lambda: export(pipeline)))
    values = set()
    for family in registry.collect():
        for sample in family.samples:
            if "query_class" in sample.labels:
                values.add(sample.labels["query_class"])
    return values


def test_100000_made_up_classes_give_at_most_the_limit_plus_other() -> None:
    pipeline = Pipeline(Config())
    for i in range(100_000):
        pipeline.feed(query(f"e{i}", i / 100, f"s{i}", f"q{i}", klass=f"class-{i}"))
    values = label_values(pipeline)
    # default max_query_classes = 20, plus "other", plus "all" of the offline figures
    assert len(values) == 22 and {"other", "all"} <= values
    assert sum(pipeline.counters.queries) == 100_000
    other = sum(part.count("queries") for part in export(pipeline).slices
                if part.slice == ("other",))
    assert other == 100_000 - 20  # the rest went to "other"
    # other, the members, and at most 4 x the limit waiting
    assert len(pipeline.slices.classes.names) <= 1 + 20 + 4 * 20, "names kept are bounded"
    assert len(pipeline.slices.names) <= 1 + 20 + 4 * 20


def test_configured_set_and_rules() -> None:
    config = parse_config(
        """
        [query_classes]
        names = ["navigational", "product"]

        [[query_classes.rules]]
        class = "navigational"
        pattern = "^(www\\\\.|login\\\\b)"

        [[query_classes.rules]]
        class = "long_tail"
        min_terms = 5
        """
    )
    pipeline = Pipeline(config)
    cases = [
        ("product", "red shoes", "product"),  # declared and in the set
        ("made-up", "www.example.com", "navigational"),  # rule on the text
        (None, "Login  Page", "navigational"),  # text is normalised before matching
        (None, "one two three four five", "long_tail"),  # term-count rule; its class joins
        (None, "red shoes", "other"),
    ]
    for i, (declared, text, _) in enumerate(cases):
        pipeline.feed(query(f"e{i}", i, f"s{i}", f"q{i}", text=text, klass=declared))
    names = pipeline.slices.classes.names
    counted = {names[c]: n for c, n in enumerate(pipeline.counters.queries) if n}
    assert counted == {"product": 1, "navigational": 2, "long_tail": 1, "other": 1}
    assert label_values(pipeline) == {"other", "navigational", "product", "long_tail", "all"}

