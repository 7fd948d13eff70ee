"""The ``searchmon`` command line: a thin layer that parses arguments and calls the library."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client.registry import CollectorRegistry

from monitor.config import Config, ConfigError, HttpConfig, load_config, parse_duration
from monitor.export import export
from monitor.http import MetricsServer
from monitor.metrics import ExportCollector
from monitor.offline.evaluate import evaluate
from monitor.offline.report import Named, format_json, format_text, skipped_note
from monitor.offline.spec import MeasureNameError, parse_measures
from monitor.offline.trec import TrecFormatError, parse_qrels, parse_run
from monitor.pipeline import Pipeline, RejectionLog
from monitor.replay import format_json as format_replay_json
from monitor.replay import format_table, replay, report, tune_for_throughput

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

DEFAULT_EVAL_MEASURES = ("P@5", "P@10", "R@100", "AP", "nDCG", "nDCG@10", "RR", "Rprec", "bpref")


class UsageError(Exception):
    """Bad arguments, configuration or input file: reported on one line, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``searchmon`` with ``argv`` (default: the process arguments); returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except UsageError as error:
        print(f"searchmon: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_FAILURE
    except BrokenPipeError:  # the reader went away (| head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="searchmon", description="Search-quality monitoring: online and offline metrics."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ev = commands.add_parser(
        "eval",
        help="trec_eval-style evaluation of TREC-format qrels and run files",
        description="Evaluate RUN against QRELS with trec_eval 10's conventions by default.",
    )
    ev.add_argument("qrels", type=Path, help="qrels file: 'qid iter docno label' per line")
    ev.add_argument("run", type=Path, help="run file: 'qid Q0 docno rank score tag' per line")
    ev.add_argument(
        "-m",
        dest="measures",
        action="append",
        metavar="MEASURE",
        help="measure to compute, repeatable (P@5, nDCG@10, AP(denom=min_R_k)@10, ndcg_cut.10 "
        f"...); default: {' '.join(DEFAULT_EVAL_MEASURES)}",
    )
    ev.add_argument("-q", dest="per_query", action="store_true", help="also print per query")
    ev.add_argument(
        "-c",
        dest="complete",
        action="store_true",
        help="average over all queries of the qrels; a query missing from the run scores 0",
    )
    ev.add_argument(
        "-l", dest="rel_level", type=int, default=1, metavar="REL",
        help="lowest label that counts as relevant (default 1)",
    )
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.set_defaults(handler=_eval)

    rp = commands.add_parser(
        "replay",
        help="the daemon's pipeline over JSONL event files, then a report",
        description="Run the pipeline over EVENTS (JSONL, optionally gzip), close every "
        "session at the end and print the report.",
    )
    rp.add_argument("events", type=Path, nargs="+", metavar="EVENTS", help="JSONL event file")
    rp.add_argument(
        "--judgments", type=Path, action="append", default=[], metavar="FILE",
        help="JSONL file of judgment / qrels messages, replayed after the events (repeatable)",
    )
    rp.add_argument("--config", type=Path, help="TOML configuration (default: built-in)")
    rp.add_argument("--report", choices=("json", "table"), default="table")
    rp.add_argument(
        "--serve", action="store_true",
        help="keep serving /metrics on [http] listen afterwards, until interrupted",
    )
    rp.set_defaults(handler=_replay)

    rn = commands.add_parser(
        "run",
        help="the daemon: Kafka in, /metrics, /healthz, /readyz out",
        description="Consume the events and judgments topics, checkpoint, serve /metrics.",
    )
    rn.add_argument("--config", type=Path, required=True, help="TOML configuration")
    rn.add_argument(
        "--discard-checkpoint", action="store_true",
        help="move an unusable (or outdated) checkpoint aside instead of refusing to start",
    )
    rn.set_defaults(handler=_run)

    cc = commands.add_parser(
        "check-config",
        help="validate a configuration file and explain every error",
        description="Validate FILE; exit 0 when it is usable, 2 with one line per error.",
    )
    cc.add_argument("file", type=Path, metavar="FILE")
    cc.set_defaults(handler=_check_config)

    demo = commands.add_parser(
        "demo",
        help="the embedded default: local broker, generated traffic, the daemon, a live view",
        description="Start a local Kafka-compatible broker, stream generated traffic with a "
        "ranking bug injected into one class, run the daemon on it, serve /metrics and show "
        "a live view. Ctrl-C stops everything.",
    )
    demo.add_argument("--listen", default=HttpConfig().listen, help="HOST:PORT of /metrics")
    demo.add_argument("--accelerate", type=float, default=600.0,
                      help="event time runs this many times faster than real time (600)")
    demo.add_argument("--regression-class", default="navigational",
                      help="class whose results get shuffled ('' for none)")
    demo.add_argument("--regression-after", type=parse_duration, default=9000.0,
                      help="event time until the bug ships (default 2.5h)")
    demo.add_argument("--duration", type=float, help="stop after this many seconds")
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument(
        "--prometheus", metavar="HOST:PORT", nargs="?", const="127.0.0.1:9090",
        help="also start an installed Prometheus with the project's rules (default "
        "127.0.0.1:9090) to watch the alerts fire",
    )
    demo.set_defaults(handler=_demo)

    gen = commands.add_parser(
        "generate",
        help="realistic synthetic traffic and judged samples, as JSONL or to Kafka",
        description="Seeded, reproducible traffic: Zipf-like query popularity, classes, "
        "sessions with reformulations, cascade-model clicks, dwell, conversions, a trickle of "
        "malformed and duplicated messages, judged samples and qrels.",
    )
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--duration", type=parse_duration, default=3600.0,
                     help="event time to cover (default 1h)")
    gen.add_argument("--sessions-per-second", type=float, default=5.0)
    gen.add_argument("--judged-every", type=parse_duration, default=0.0,
                     help="event time between judged samples (default: none)")
    gen.add_argument("--judged-queries", type=int, default=300)
    gen.add_argument("--qrels", action="store_true", help="start with qrels messages")
    gen.add_argument("--regression-class", help="class whose results get shuffled")
    gen.add_argument("--regression-after", type=parse_duration, default=1800.0)
    gen.add_argument("--malformed-rate", type=float, default=0.001)
    gen.add_argument("--duplicate-rate", type=float, default=0.001)
    gen.add_argument("-o", "--output", type=Path, help="JSONL file (default: standard output)")
    gen.add_argument("--kafka", metavar="BOOTSTRAP", help="produce to Kafka instead (host:port)")
    gen.add_argument("--topic", default="search-events")
    gen.add_argument("--judgments-topic", default="search-judgments")
    gen.set_defaults(handler=_generate)
    return parser


def _eval(args: argparse.Namespace) -> int:
    measures: list[Named] = []
    for text in args.measures or DEFAULT_EVAL_MEASURES:
        try:
            specs = parse_measures(text)
        except MeasureNameError as error:
            raise UsageError(str(error)) from None
        for spec in specs:
            name = text if len(specs) == 1 else _trec_display_name(text, spec.cutoff)
            measures.append((name, spec.with_relevance_level(args.rel_level)))
    # numpy releases the GIL in most of the parsing, so the two files parse side by side
    with ThreadPoolExecutor(max_workers=1) as pool:
        qrels_job = pool.submit(lambda: parse_qrels(_read(args.qrels), str(args.qrels)))
        try:
            run = parse_run(_read(args.run), str(args.run))
            qrels = qrels_job.result()
        except TrecFormatError as error:
            raise UsageError(str(error)) from None
    evaluation = evaluate(qrels, run, [spec for _, spec in measures], complete=args.complete)
    for note in skipped_note(evaluation, measures):
        print(f"searchmon eval: {note}", file=sys.stderr)
    out = format_json if args.json else format_text
    sys.stdout.write(out(evaluation, measures, args.per_query))
    return EXIT_OK


def _load(path: Path | None) -> Config:
    try:
        return load_config(path)
    except ConfigError as error:
        raise UsageError("invalid configuration " + str(error)) from None


def _replay(args: argparse.Namespace) -> int:
    config = _load(args.config)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    pipeline = Pipeline(config)
    rejections = RejectionLog(config.input.rejection_log_limit)
    tune_for_throughput()
    paths = [*args.events, *args.judgments]
    for number, path in enumerate(paths, 1):
        try:
            replay(pipeline, path, rejections)
        except OSError as error:
            raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
        # the same rule as the daemon's after each batch: with the last file read, no
        # judgment waits any more
        pipeline.offline_tick(pipeline.sessions.newest, number == len(paths))
    pipeline.close()
    result = report(pipeline)
    sys.stdout.write(format_replay_json(result) if args.report == "json" else format_table(result))
    sys.stdout.flush()
    if args.serve:
        registry = CollectorRegistry()
        figures = export(pipeline)
        registry.register(ExportCollector(lambda: figures))
        try:
            server = MetricsServer.from_config(config.http, registry).start()
        except (OSError, ssl.SSLError) as error:
            raise UsageError(f"cannot listen on {config.http.listen}: {error}") from None
        scheme = "https" if config.http.tls_certfile else "http"
        print(f"serving {scheme}://{config.http.listen}/metrics (Ctrl-C to stop)",
              file=sys.stderr)
        try:
            _wait_for_signal()
        finally:
            server.close()
    return EXIT_OK


def _wait_for_signal() -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


def _run(args: argparse.Namespace) -> int:
    from monitor.daemon import Daemon, StartError  # kafka-python loads only for the daemon

    config = _load(args.config)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    tune_for_throughput()  # kafka-python's records, as the pipeline's events
    try:
        daemon = Daemon(config, discard_checkpoint=args.discard_checkpoint)
        daemon.install_signal_handlers()
        return daemon.run()
    except StartError as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        print(f"searchmon: {error}", file=sys.stderr)
        return EXIT_FAILURE


def _check_config(args: argparse.Namespace) -> int:
    try:
        load_config(args.file)
    except ConfigError as error:
        print(f"{args.file}: invalid configuration", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{args.file}: ok")
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from monitor.demo import run_demo  # the broker and kafka-python load only for the demo

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run_demo(
        listen=args.listen, accelerate=args.accelerate,
        regression_class=args.regression_class or None,
        regression_after=args.regression_after, duration=args.duration, seed=args.seed,
        prometheus_listen=args.prometheus,
    )


def _generate(args: argparse.Namespace) -> int:
    from monitor.generate import Regression, Traffic, World, events

    world = World.build(args.seed)
    start = Traffic().start
    traffic = Traffic(
        seed=args.seed, start=start, sessions_per_second=args.sessions_per_second,
        duration=args.duration, malformed_rate=args.malformed_rate,
        duplicate_rate=args.duplicate_rate, judged_every=args.judged_every,
        judged_queries=args.judged_queries, qrels=args.qrels,
        regression=(Regression(args.regression_class, start + args.regression_after)
                    if args.regression_class else None),
    )
    stream = events(world, traffic)
    if args.kafka:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=args.kafka, linger_ms=20)
        for _, key, line in stream:
            judged = b'"type":"judgment"' in line or b'"type":"qrels"' in line
            topic = args.judgments_topic if judged else args.topic
            producer.send(topic, key=key.encode(), value=line)
        producer.flush()
        producer.close()
        return EXIT_OK
    out = args.output.open("wb") if args.output else sys.stdout.buffer
    try:
        for _, _, line in stream:
            out.write(line + b"\n")
    finally:
        if args.output:
            out.close()
    return EXIT_OK


def _trec_display_name(text: str, cutoff: int | None) -> str:
    base = text.split(".", 1)[0].split("_")[0] if "." in text else text.rsplit("_", 1)[0]
    return f"{base}_{cutoff}"


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
