"""Benchmark: replay throughput against a bare ``json.loads`` loop, and memory per session.

1. Writes realistic events (``monitor.inputs.generate``: ~10 results per query, position-biased
   clicks, sessions of a few queries, a trickle of malformed and duplicated lines) to a JSONL
   file, then times in the same run:
   - baseline: ``for line in file: json.loads(line)``;
   - ours: the replay pipeline over the same file (decode, validate, classify, sessionize,
     count, keep the query lists), sessions closed at the end;
   - ours without the query lists (``[query_lists] enabled = false``): what they cost.
   Prints the rates and the ratios ours / baseline (target >= 0.5).
2. Opens 1,000,000 sessions (one query each, all within the timeout) and prints the memory
   they hold, per session (target < 400 bytes), measured with tracemalloc, with and without
   the query lists (which remember each open query's text until its outcome is known).
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

from monitor.cli.replay import replay
from monitor.config import Config, parse_config
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.inputs.generate import Traffic, World, events, rfc3339
from monitor.run.tuning import tune_for_throughput


def write_events(path: Path, count: int) -> int:
    world = World.build(seed=11)
    traffic = Traffic(seed=11, sessions_per_second=50.0, duration=1e9)
    written = 0
    with path.open("wb") as out:
        for _, _, line in events(world, traffic):
            out.write(line + b"\n")
            written += 1
            if written == count:
                break
    return written


def bare_json(path: Path) -> float:
    start = time.perf_counter()
    with path.open("rb") as lines:
        for line in lines:
            # try/except, not contextlib.suppress: a context manager per line would slow
            # the baseline down and flatter the ratio
            try:  # noqa: SIM105
                json.loads(line)
            except ValueError:  # the malformed lines of the stream
                pass
    return time.perf_counter() - start


NO_LISTS = parse_config("[query_lists]\nenabled = false\n")


def ours(path: Path, config: Config) -> tuple[float, Pipeline]:
    pipeline = Pipeline(config)
    log = RejectionLog(0)
    tune_for_throughput()  # as `searchmon replay` and `searchmon run` do
    start = time.perf_counter()
    replay(pipeline, path, log)
    pipeline.close()
    return time.perf_counter() - start, pipeline


def memory_per_session(sessions: int, config: Config) -> tuple[float, float]:
    """Bytes per open session: of the session table alone, and with the dedupe memory.

    Measured with tracemalloc (every Python allocation still held after feeding the events,
    including the session ids and query ids the table keeps alive).
    """
    pipeline = Pipeline(config)
    lines = [
        json.dumps({
            "type": "query", "event_id": f"e{i:09d}", "timestamp": rfc3339(1.79e9 + i / 1000),
            "session_id": f"s{i:09d}", "query_id": f"q{i:09d}", "query_text": "cheap flights",
            "result_ids": [f"d{j}" for j in range(10)], "query_class": "travel",
        }).encode()
        for i in range(sessions)
    ]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for line in lines:
        pipeline.feed(line)
    # one more event moves the watermark past every query (not past any session's end):
    # every session is open, none waits
    pipeline.feed(json.dumps({
        "type": "query", "event_id": "last", "timestamp": rfc3339(1.79e9 + sessions / 1000 + 121),
        "session_id": "last", "query_id": "last", "query_text": "x", "result_ids": [],
    }).encode())
    gc.collect()
    with_ids = tracemalloc.get_traced_memory()[0] - before
    assert len(pipeline.sessions.open) == sessions, "every session is still open"
    pipeline.sessions.seen.clear()
    pipeline.sessions.seen_before.clear()
    pipeline.sessions.waiting.clear()
    gc.collect()
    table = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return table / sessions, with_ids / sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N for each side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        count = write_events(path, args.events)
        # alternate the two, best of N each: this machine's noise hits both alike
        base_s = ours_s = bare_s = float("inf")
        for _ in range(args.repeat):
            base_s = min(base_s, bare_json(path))
            elapsed, pipeline = ours(path, Config())
            ours_s = min(ours_s, elapsed)
            bare_s = min(bare_s, ours(path, NO_LISTS)[0])
    base_rate, ours_rate, bare_rate = count / base_s, count / ours_s, count / bare_s
    rejected = sum(pipeline.health.rejected.values())
    print(f"replay bench: {count} events ({rejected} rejected by design: malformed/duplicates)")
    print(f"  bare json.loads loop:        {base_rate:12,.0f} events/s ({base_s:.2f} s)")
    print(f"  searchmon replay pipeline:   {ours_rate:12,.0f} events/s ({ours_s:.2f} s)")
    print(f"  ratio ours / json.loads:     {ours_rate / base_rate:12.2f}  (target >= 0.5)")
    print(f"  without the query lists:     {bare_rate:12,.0f} events/s ({bare_s:.2f} s), "
          f"ratio {bare_rate / base_rate:.2f}")
    print(f"  the query lists cost:        {(ours_s - bare_s) / count * 1e6:12.2f} us per event")
    for name, config in (("with the query lists", Config()), ("without them", NO_LISTS)):
        table, with_ids = memory_per_session(args.sessions, config)
        print(f"memory with {args.sessions:,} open sessions (one query each), {name}, per "
              "session:")
        print(f"  session table:               {table:12.0f} bytes  (target < 400)")
        print(f"  plus dedupe memory of ids:   {with_ids:12.0f} bytes")


if __name__ == "__main__":
    main()
