"""Benchmark: what slices cost.

1. Throughput: the same JSONL file of generated traffic whose queries carry three dimensions
   (platform: 3 values, locale: 5, variant: 4) replayed twice in the same run, alternately
   ``--rounds`` times each: baseline without ``[slices]`` (the dimensions are read by
   nobody), ours with ``dimensions = ["platform", "locale", "variant"]`` (the query lists
   kept by class, their default), and ours with the lists kept by platform too. Prints the
   best rates and the ratios to the baseline (target >= 0.9 for ours).
2. Series and memory per slice: a pipeline that learns ``--slices`` slices (one query
   each) prints the series ``/metrics`` then exports, and the memory the slices hold per
   slice (tracemalloc, the query lists disabled and enabled).
3. Checkpoint size: the encoded state after N and 2N events of the same slices (it grows
   with the number of slices, not with traffic), and after as many events spread over
   twice the slices.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import tempfile
import time
import tracemalloc
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from monitor.cli.replay import replay
from monitor.config import Config, parse_config
from monitor.core.export import export
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.inputs.generate import Traffic, World, events
from monitor.run.tuning import tune_for_throughput
from monitor.serve.metrics import ExportCollector
from monitor.state import codec
from monitor.state.codec import UnitState

VALUES = {
    "platform": ["ios", "android", "web"],
    "locale": ["en-US", "de-DE", "fr-FR", "ja-JP", "es-ES"],
    "variant": ["control", "a", "b", "c"],
}
SLICED = parse_config('[slices]\ndimensions = ["platform", "locale", "variant"]\n')


def write_events(path: Path, count: int) -> int:
    """Generated traffic; each session's queries carry its three values (a third of them
    as top-level fields, the rest in ``attributes``)."""
    world = World.build(seed=11)
    traffic = Traffic(seed=11, sessions_per_second=50.0, duration=1e9)
    rng = random.Random(11)
    picked: dict[str, dict[str, str]] = {}
    written = 0
    with path.open("wb") as out:
        for _, _, line in events(world, traffic):
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if isinstance(event, dict) and event.get("type") == "query" and isinstance(
                event.get("session_id"), str
            ):
                values = picked.setdefault(event["session_id"], {
                    name: rng.choice(choices) for name, choices in VALUES.items()
                })
                if len(picked) > 100_000:
                    picked.clear()
                if rng.random() < 1 / 3:
                    event.update(values)
                else:
                    event["attributes"] = values
                line = json.dumps(event, separators=(",", ":")).encode()
            out.write(line + b"\n")
            written += 1
            if written == count:
                break
    return written


def timed(path: Path, config: Config) -> tuple[float, Pipeline]:
    pipeline = Pipeline(config)
    tune_for_throughput()
    start = time.perf_counter()
    replay(pipeline, path, RejectionLog(0))
    pipeline.close()
    return time.perf_counter() - start, pipeline


BY_PLATFORM = parse_config('[slices]\ndimensions = ["platform", "locale", "variant"]\n'
                           '[query_lists]\ndimensions = ["platform"]\n')


def throughput(path: Path, lines: int, rounds: int) -> None:
    runs = {"baseline": Config(), "ours": SLICED, "lists by platform": BY_PLATFORM}
    best = dict.fromkeys(runs, float("inf"))
    slices = 0
    for _ in range(rounds):
        for name, config in runs.items():
            gc.collect()
            seconds, pipeline = timed(path, config)
            best[name] = min(best[name], seconds)
            if name == "ours":
                slices = len(export(pipeline).slices)
    rate = {name: lines / seconds for name, seconds in best.items()}
    print(f"replay, {lines:,} lines, best of {rounds} (alternating):")
    print(f"  baseline (no [slices]):                    {rate['baseline']:>10,.0f} lines/s")
    print(f"  ours (3 dimensions, {slices} slices):          {rate['ours']:>10,.0f} lines/s")
    print(f"  ours, query lists also by platform:        {rate['lists by platform']:>10,.0f} "
          "lines/s")
    print(f"  ratio ours / baseline: {rate['ours'] / rate['baseline']:.3f} (target >= 0.9); "
          f"with lists by platform: {rate['lists by platform'] / rate['baseline']:.3f}")


def query(i: int, values: dict[str, str], klass: str) -> bytes:
    return json.dumps({
        "type": "query", "event_id": f"q{i}", "timestamp": 1_790_000_000_000 + i,
        "session_id": f"s{i}", "query_id": f"q{i}", "query_text": f"text {i % 97}",
        "result_ids": ["d1", "d2"], "query_class": klass, "attributes": values,
    }).encode()


def every_slice(count: int) -> list[tuple[str, dict[str, str]]]:
    """``count`` distinct (class, values) combinations."""
    out = []
    for i in range(count):
        out.append((f"class{i % 10}", {
            "platform": f"p{i // 10 % 10}", "locale": f"l{i // 100 % 10}",
            "variant": f"v{i // 1000}",
        }))
    return out


def series_and_memory(slices: int) -> None:
    wide = ("[slices]\ndimensions = [\"platform\", \"locale\", \"variant\"]\n"
            f"max_series = {slices + 100}\n[query_classes]\nmax_query_classes = 20\n")
    print(f"series and memory, {slices:,} slices (10 classes x 10 platforms x 10 locales x "
          f"{max(slices // 1000, 1)} variants):")
    for lists in (False, True):
        config = parse_config(wide + f"[query_lists]\nenabled = {str(lists).lower()}\n")
        combos = every_slice(slices)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        pipeline = Pipeline(config)
        for i, (klass, values) in enumerate(combos):
            pipeline.feed(query(i, values, klass))
        pipeline.close()
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        figures = export(pipeline)
        registry = CollectorRegistry()
        registry.register(ExportCollector(lambda figures=figures: figures))
        exposition = generate_latest(registry).decode()
        series = sum(1 for line in exposition.splitlines() if line and line[0] != "#")
        online = sum(1 for line in exposition.splitlines()
                     if line.startswith("search_") and "judged" not in line)
        print(f"  query lists {'on ' if lists else 'off'}: {len(figures.slices):,} slices, "
              f"{series:,} series on /metrics ({online:,} online), "
              f"{held / len(figures.slices):,.0f} bytes per slice")


def checkpoint_size(lines: int) -> None:
    config = parse_config('[slices]\ndimensions = ["platform", "locale", "variant"]\n'
                          "[query_lists]\nenabled = false\n")

    def size(count: int, slices: int) -> tuple[int, int]:
        combos = every_slice(slices)
        pipeline = Pipeline(config)
        for i in range(count):
            klass, values = combos[i % slices]
            pipeline.feed(query(i, values, klass))
        pipeline.close()
        data = codec.encode("unit", UnitState("e", 0, count, 0.0, None, {},
                                              pipeline.snapshot()))
        return len(data), len(export(pipeline).slices)

    print("checkpoint size (sessions closed):")
    for count, slices in ((lines, 100), (2 * lines, 100), (lines, 200)):
        data, kept = size(count, slices)
        print(f"  {count:>9,} queries over {kept:>4} slices: {data:>10,} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slices", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "events.jsonl"
        lines = write_events(path, args.lines)
        throughput(path, lines, args.rounds)
    series_and_memory(args.slices)
    checkpoint_size(args.lines // 10)


if __name__ == "__main__":
    main()
