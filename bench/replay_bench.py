"""Benchmark: replay throughput against a bare ``json.loads`` loop, and memory per session.

1. Writes realistic events (``monitor.inputs.generate``: ~10 results per query, position-biased
   clicks, sessions of a few queries, a trickle of malformed and duplicated lines) to a JSONL
   file, then times in the same run:
   - baseline: ``for line in file: json.loads(line)``;
   - ours: the replay pipeline over the same file (decode, validate, classify, sessionize,
     count, keep the query lists), sessions closed at the end;
   - ours without the query lists (``[query_lists] enabled = false``): what they cost.
   Prints which build runs (compiled, or plain Python: ``monitor.compiled``), the rates and
   the ratios ours / baseline (target >= 0.5), and per line, for this file and the mixed one:
   the bare loop, decoding (``Pipeline.read``: the decoder chain, the timestamp, the class),
   taking the events in and the session rules (dedupe, the clock, the watermark, the counts
   on arrival, the events applied to their sessions, the sessions closed: the pipeline
   without the lists less decoding), and the query lists.
2. The same file and a mixed one (below), each replayed by ``searchmon replay FILE`` as a
   whole process (interpreter, imports, report) against the bare ``json.loads`` loop over
   its lines (target >= 0.5, aim 1.0), and the same process as plain Python
   (``SEARCHMON_PURE_PYTHON=1``): what compiling the hot path buys; with DuckDB installed
   (the test extra), also a DuckDB SQL query as a whole process that counts queries,
   zero-result queries and clicks per class over the same lines (no sessions, no event
   time, no lists): what a data engineer compares a backfill with.

   The mixed input: the generated events of another seed, rewritten line by line as search
   logs mix them: a quarter of the native events stamped in epoch milliseconds, a fifth with
   a ``+02:00`` offset, a tenth ``Z`` without fractions, the rest the usual
   ``YYYY-MM-DDTHH:MM:SS.fffZ``; one session in eight written as UBI records (query records,
   one in twenty logged twice, click and purchase events, stamped ``Z`` or ``+02:00``); the
   generator's duplicates and malformed lines, and as many again.
3. Opens 1,000,000 sessions (one query each, all within the timeout) and prints the memory
   they hold, per session (target < 400 bytes), measured with tracemalloc, with and without
   the query lists (which remember each open query's text until its outcome is known).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from as_installed import compile_package

from monitor import compiled
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


PLUS_TWO = timezone(timedelta(hours=2))
NATIVE = {"query", "click", "conversion", "dwell", "impression"}


def write_mixed(path: Path, count: int, seed: int = 23) -> int:
    """The mixed input (see the module's doc): ``count`` lines or a few more."""
    rng = random.Random(seed)
    world = World.build(seed=seed)
    traffic = Traffic(seed=seed, sessions_per_second=50.0, duration=1e9)
    written = 0
    with path.open("wb") as out:
        previous = b""
        for _, _, line in events(world, traffic):
            for mixed in _mixed(line, rng):
                out.write(mixed + b"\n")
                written += 1
                if rng.random() < 0.001 and previous:  # a duplicate
                    out.write(previous + b"\n")
                    written += 1
                if rng.random() < 0.001:  # a truncated line
                    out.write(mixed[: rng.randrange(1, len(mixed))] + b"\n")
                    written += 1
                previous = mixed
            if written >= count:
                return written
    return written


def _stamp(seconds: float, rng: random.Random, native: bool) -> int | str:
    draw = rng.random()
    if native and draw < 0.25:
        return round(seconds * 1000)
    if draw < 0.45:
        return datetime.fromtimestamp(seconds, PLUS_TWO).isoformat(timespec="milliseconds")
    if native and draw < 0.55:
        return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return rfc3339(seconds)


def _mixed(line: bytes, rng: random.Random) -> list[bytes]:
    try:
        event = json.loads(line)
    except ValueError:
        return [line]  # a malformed line of the generator's
    if not isinstance(event, dict) or event.get("type") not in NATIVE or not str(
        event.get("timestamp", "")
    ).endswith("Z"):
        return [line]  # another kind of malformed line (unknown type, naive timestamp)
    seconds = datetime.fromisoformat(event["timestamp"]).timestamp()
    session = event.get("session_id")
    if type(session) is not str or zlib.crc32(session.encode()) % 8:
        event["timestamp"] = _stamp(seconds, rng, native=True)
        return [json.dumps(event, separators=(",", ":")).encode()]
    stamp, kind = _stamp(seconds, rng, native=False), event["type"]
    client = "c" + session
    if kind == "query":
        record = {
            "application": "shop", "query_id": event["query_id"], "client_id": client,
            "session_id": session, "timestamp": stamp, "user_query": event["query_text"],
            "query_response_hit_ids": event["result_ids"],
        }
        first = json.dumps(record, separators=(",", ":")).encode()
        if rng.random() < 0.05:  # the same search logged twice (another request body)
            record["query"] = '{"size":10}'
            return [first, json.dumps(record, separators=(",", ":")).encode()]
        return [first]
    attributes: dict[str, object] = {"object": {"object_id": event.get("doc_id") or "d0"}}
    if kind == "click":
        attributes["position"] = {"ordinal": event["position"] - 1}
    action = {"click": "click", "conversion": "purchase"}.get(kind, "hover")
    return [json.dumps({
        "action_name": action, "query_id": event["query_id"], "session_id": session,
        "client_id": client, "timestamp": stamp, "event_attributes": attributes,
    }, separators=(",", ":")).encode()]


def whole_replay(path: Path, plain: bool = False) -> float:
    """Seconds of ``searchmon replay FILE`` as a process of its own, start to exit; with
    ``plain``, as plain Python (``SEARCHMON_PURE_PYTHON=1``) whatever is installed."""
    env = {**os.environ, compiled.PURE_PYTHON: "1" if plain else "0"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "monitor", "replay", str(path)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


DUCKDB_SQL = """
WITH lines AS (
    SELECT * FROM read_json(?, format = 'newline_delimited', ignore_errors = true,
        columns = {type: 'VARCHAR', query_id: 'VARCHAR', query_class: 'VARCHAR',
                   result_count: 'BIGINT', result_ids: 'VARCHAR[]', user_query: 'VARCHAR',
                   query_response_hit_ids: 'VARCHAR[]', action_name: 'VARCHAR'})
), queries AS (
    SELECT query_id, coalesce(any_value(query_class), 'other') AS class,
        bool_or(coalesce(result_count, len(coalesce(result_ids, query_response_hit_ids))) = 0)
            AS zero
    FROM lines WHERE type = 'query' OR user_query IS NOT NULL GROUP BY query_id
), clicks AS (
    SELECT query_id, count(*) AS clicks FROM lines
    WHERE type = 'click' OR action_name = 'click' GROUP BY query_id
)
SELECT class, count(*), count(*) FILTER (WHERE zero), coalesce(sum(clicks), 0)
FROM queries LEFT JOIN clicks USING (query_id) GROUP BY class ORDER BY class
"""


def duckdb_available() -> bool:
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return False
    return True


def whole_duckdb(path: Path) -> float:
    """Seconds of a process that runs ``DUCKDB_SQL`` over ``path`` and prints the rows."""
    script = (f"import duckdb, sys; print(duckdb.execute({DUCKDB_SQL!r}, [sys.argv[1]])"
              ".fetchall())")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", script, str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


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


def decoding(path: Path) -> float:
    """Seconds to read the file's lines and decode and validate each (``Pipeline.read``:
    the decoder chain, the timestamp, the query's class), admitting none."""
    read = Pipeline(Config()).read
    start = time.perf_counter()
    with path.open("rb") as lines:
        for line in lines:
            read(line)
    return time.perf_counter() - start


def ours(path: Path, config: Config) -> tuple[float, Pipeline]:
    """Seconds of the replay pipeline over ``path``, sessions closed at the end."""
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
    parser.add_argument("--mixed", type=int, default=380_000, help="lines of the mixed input")
    parser.add_argument("--sessions", type=int, default=1_000_000, help="0: no memory figures")
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
        mixed = Path(tmp) / "mixed.jsonl"
        mixed_count = write_mixed(mixed, args.mixed)
        stages = {}
        for name, file in (("generated", path), ("mixed", mixed)):
            best = [float("inf")] * 4
            for _ in range(args.repeat):
                for i, seconds in enumerate((
                    bare_json(file), decoding(file), ours(file, NO_LISTS)[0],
                    ours(file, Config())[0],
                )):
                    best[i] = min(best[i], seconds)
            stages[name] = best
        compile_package()  # as installed: no module compiled at each start
        wholes = {}
        for name, file in (("generated", path), ("mixed", mixed)):
            loop_s = whole_s = plain_s = duck_s = float("inf")
            for _ in range(args.repeat):
                loop_s = min(loop_s, bare_json(file))
                whole_s = min(whole_s, whole_replay(file))
                plain_s = min(plain_s, whole_replay(file, plain=True))
                if duckdb_available():
                    duck_s = min(duck_s, whole_duckdb(file))
            wholes[name] = loop_s, whole_s, plain_s, duck_s
    base_rate, ours_rate, bare_rate = count / base_s, count / ours_s, count / bare_s
    rejected = sum(pipeline.health.rejected.values())
    print(f"replay bench: {count} events ({rejected} rejected by design: malformed/duplicates)")
    print(f"  the hot path runs {'compiled' if compiled.running_compiled() else 'as plain Python'}"
          f"{': ' + compiled.PLAIN_PYTHON if compiled.PLAIN_PYTHON else ''}")
    print(f"  bare json.loads loop:        {base_rate:12,.0f} events/s ({base_s:.2f} s)")
    print(f"  searchmon replay pipeline:   {ours_rate:12,.0f} events/s ({ours_s:.2f} s)")
    print(f"  ratio ours / json.loads:     {ours_rate / base_rate:12.2f}  (target >= 0.5)")
    print(f"  without the query lists:     {bare_rate:12,.0f} events/s ({bare_s:.2f} s), "
          f"ratio {bare_rate / base_rate:.2f}")
    print(f"  the query lists cost:        {(ours_s - bare_s) / count * 1e6:12.2f} us per event")
    print("per line, in microseconds (best of each; the pipeline's stages by difference;")
    print("  taking in and the session rules: dedupe, clock, watermark, the counts on arrival,")
    print("  the events applied to their sessions and the sessions closed):")
    print(f"  {'':18}{'json.loads':>11}{'decoding':>10}{'taking in + sessions':>22}"
          f"{'lists':>7}{'pipeline':>10}")
    for name, lines in (("generated", count), ("mixed", mixed_count)):
        loop_s, decode_s, no_lists_s, lists_s = (s / lines * 1e6 for s in stages[name])
        print(f"  {name + ' input':18}{loop_s:11.2f}{decode_s:10.2f}{no_lists_s - decode_s:22.2f}"
              f"{lists_s - no_lists_s:7.2f}{lists_s:10.2f}")
    for name, lines in (("generated", count), ("mixed", mixed_count)):
        loop_s, whole_s, plain_s, duck_s = wholes[name]
        print(f"`searchmon replay FILE` as a whole process, {name} input ({lines:,} lines):")
        print(f"  bare json.loads loop:        {lines / loop_s:12,.0f} lines/s ({loop_s:.2f} s)")
        print(f"  searchmon replay (process):  {lines / whole_s:12,.0f} lines/s ({whole_s:.2f} s)")
        print(f"  ratio replay / json.loads:   {loop_s / whole_s:12.2f}  (target >= 0.5, aim 1.0)")
        print(f"  as plain Python:             {lines / plain_s:12,.0f} lines/s ({plain_s:.2f} s; "
              f"ratio {loop_s / plain_s:.2f}; compiled takes {whole_s / plain_s:.2f} of its time)")
        if duck_s < float("inf"):
            print(f"  DuckDB SQL (process):        {lines / duck_s:12,.0f} lines/s "
                  f"({duck_s:.2f} s; replay takes {whole_s / duck_s:.1f} times as long)")
        else:
            print("  DuckDB: not installed (the test extra has it)")
    if not args.sessions:
        return
    for name, config in (("with the query lists", Config()), ("without them", NO_LISTS)):
        table, with_ids = memory_per_session(args.sessions, config)
        print(f"memory with {args.sessions:,} open sessions (one query each), {name}, per "
              "session:")
        print(f"  session table:               {table:12.0f} bytes  (target < 400)")
        print(f"  plus dedupe memory of ids:   {with_ids:12.0f} bytes")


if __name__ == "__main__":
    main()
