"""The ``searchmon`` command line: a thin layer that parses arguments and calls the library."""

from __future__ import annotations

import argparse
import mmap
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from monitor.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    HELD_TO_THE_END,
    UsageError,
    load,
    setup_logging,
    wait_for_signal,
)
from monitor.offline.spec import INT64_MAX, INT64_MIN  # no numpy: loads for the arguments

if TYPE_CHECKING:
    from monitor.offline.report import Named
    from monitor.offline.trec import Data, Qrels, Run

    ParsedFile = TypeVar("ParsedFile", Qrels, Run)

# Each command imports what it needs when it runs: `searchmon eval` is a short-lived process
# whose start-up time counts, and it needs neither pydantic nor prometheus_client. numpy
# loads with the command that uses it (see _one_blas_thread).


DEFAULT_EVAL_MEASURES = ("P@5", "P@10", "R@100", "AP", "nDCG", "nDCG@10", "RR", "Rprec", "bpref")


def _lazy(command: str) -> Callable[[argparse.Namespace], int]:
    """The handler of ``monitor.cli.<command>``, imported when that command runs."""
    def handler(args: argparse.Namespace) -> int:
        import importlib

        run: Callable[[argparse.Namespace], int] = importlib.import_module(
            f"monitor.cli.{command}"
        ).command
        return run(args)

    return handler


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``searchmon`` with ``argv`` (default: the process arguments); returns the exit code.

    ``searchmon eval`` and ``searchmon replay`` run as the process (``argv`` None) end the
    process when they are done (``_exit_now``) instead of returning.
    """
    arguments = sys.argv[1:] if argv is None else list(argv)
    one_shot = argv is None and arguments[:1] in (["eval"], ["replay"])
    if one_shot:
        _one_blas_thread()
    parser = _parser(eval_only=arguments[:1] == ["eval"])
    args = parser.parse_args(arguments)
    try:
        code = int(args.handler(args))
    except UsageError as error:
        print(f"searchmon: {error}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_FAILURE
    except BrokenPipeError:
        _reader_gone()
        return EXIT_OK
    finally:
        if not one_shot:  # returned to a caller: nothing is left to the process's end
            HELD_TO_THE_END.clear()
    if one_shot and sys.getprofile() is None and sys.gettrace() is None:
        _exit_now(code)  # not under a profiler or coverage: they write their data at exit
    return code


_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def _one_blas_thread() -> None:
    """Have numpy's OpenBLAS, when it loads, start no thread besides the process's own.

    By default OpenBLAS starts one thread per core as numpy is imported: 50 ms of CPU, an
    eighth of bench/eval_bench.py's whole ``searchmon eval``, which computes no matrix
    product (the paired test of RUN_B computes small ones); in a replay its threads took
    a thirtieth of the CPU, on the cores the replay runs on. Only for ``searchmon eval``
    and ``searchmon replay`` run as the process, and only when none of OpenBLAS's thread
    settings is given.
    """
    if not any(name in os.environ for name in _BLAS_THREADS):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def _reader_gone() -> None:
    """The reader of standard output went away (``| head``): not an error of ours; what is
    left to write goes nowhere."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _exit_now(code: int) -> None:
    """Flush the output and end the process at once, without the interpreter's teardown.

    An evaluation or a replay is a short-lived process: once its output is written, tearing
    down the interpreter (every module's objects, and a heap of arrays, sessions and ids
    freed one by one) takes 30 ms or more of bench/eval_bench.py's 0.4 s, and a tenth of a
    second after a replay of a million events, for memory the system takes back with the
    process anyway. They hold no other resource: their inputs are read-only, the SVG of
    ``eval --plot`` is written and closed before, a replay's sort removes its scratch files
    as it ends, and the log's handlers are flushed here.
    """
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone()
        code = EXIT_OK
    logs = sys.modules.get("logging")  # not imported for this alone: eval logs nothing
    if logs is not None:
        logs.shutdown()
    sys.stderr.flush()
    os._exit(code)


class _Version(argparse.Action):
    """``--version``: the version is read only when asked for (not on every start)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        import monitor

        sys.stdout.write(f"searchmon {monitor.__version__}\n")  # as argparse's version does
        parser.exit()


def _parser(*, eval_only: bool = False) -> argparse.ArgumentParser:
    """The command line's parser; with ``eval_only``, only ``eval``'s (the others' defaults
    come from the configuration module, which loads pydantic)."""
    parser = argparse.ArgumentParser(
        prog="searchmon", description="Search-quality monitoring: online and offline metrics."
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show program's version number and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ev = commands.add_parser(
        "eval",
        help="trec_eval-style evaluation of TREC-format qrels and run files",
        description="Evaluate RUN against QRELS with trec_eval 10's conventions by default.",
    )
    ev.add_argument("qrels", type=Path, help="qrels file: 'qid iter docno label' per line")
    ev.add_argument("run", type=Path, help="run file: 'qid Q0 docno rank score tag' per line")
    ev.add_argument(
        "run_b", type=Path, nargs="?", metavar="RUN_B",
        help="a second run: compare it with RUN (means, B - A, paired tests' p-values)",
    )
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
        "-l", dest="rel_level", type=_relevance_level, default=1, metavar="REL",
        help="lowest label that counts as relevant (default 1)",
    )
    ev.add_argument(
        "-M", dest="max_docs", type=_positive, default=None, metavar="N",
        help="use only the top N documents of each query's ranking (trec_eval -M)",
    )
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument(
        "--plot", type=Path, metavar="FILE.svg",
        help="also write an SVG: precision-recall curves, a histogram of --plot-measure per "
        "query, and with RUN_B each query's difference",
    )
    ev.add_argument("--plot-measure", metavar="MEASURE",
                    help="the measure of the histogram and of the differences (default AP)")
    ev.add_argument(
        "--permutations", type=_positive, default=10000, metavar="N",
        help="with RUN_B: random sign flips of the randomization test (default 10000; "
        "exact when 2^queries <= N)",
    )
    ev.set_defaults(handler=_eval)
    if eval_only:
        return parser

    from monitor.config import HttpConfig, parse_duration
    from monitor.logs import FORMATS, LEVELS

    logging_options = argparse.ArgumentParser(add_help=False)
    logging_options.add_argument(
        "--log-level", choices=LEVELS, default=None,
        help="least severe level logged (default: info; warning for demo); kafka-python's "
        "records only from warning up unless debug",
    )
    logging_options.add_argument(
        "--log-unsafe", action="store_true",
        help="at debug, also log kafka-python's protocol records: every request and response "
        "and the raw bytes sent and received, including the SASL login (the configured "
        "password is still masked); for debugging the Kafka protocol only",
    )
    logging_options.add_argument(
        "--log-format", choices=FORMATS, default="text",
        help="text lines, or one JSON object per line (time, level, logger, message)",
    )

    rp = commands.add_parser(
        "replay", parents=[logging_options],
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
    rp.add_argument(
        "--report", choices=("json", "table", "openmetrics"), default="table",
        help="the report as a table, as JSON, or the OpenMetrics text of /metrics (default "
        "table)",
    )
    rp.add_argument(
        "--step", type=_step, metavar="DURATION",
        help="with --report openmetrics: a sample of every series at every step of event "
        "time (5m, 1h, ...), timestamped, for promtool tsdb create-blocks-from openmetrics",
    )
    rp.add_argument(
        "--serve", action="store_true",
        help="keep serving the status page (/), /queries and /metrics on [http] listen "
        "afterwards, until interrupted",
    )
    rp.set_defaults(handler=_lazy("replay"))

    tp = commands.add_parser(
        "top", help="the query lists in the terminal, from a running daemon or a replay report",
        description="Print the query lists (top searches, searches without results or "
        "without a click, lowest click-through rate) and the worsened judged queries, from "
        "--url (a daemon or replay --serve) or from a replay --report json file.",
    )
    source = tp.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", action="append",
                        help="http://HOST:PORT of a daemon or of replay --serve; repeated for "
                        "the replicas of one deployment, whose lists are merged")
    source.add_argument("--report", type=Path, metavar="FILE",
                        help="a replay --report json output ('-': standard input)")
    tp.add_argument("--class", dest="query_class", help="one query class (all: overall)")
    tp.add_argument("--window", help="one window (1h, 24h, ...)")
    tp.add_argument("--slice", action="append", default=[], metavar="DIMENSION=VALUE",
                    help="the slices with this value of a [slices] dimension (platform=ios); "
                    "repeated: all must hold")
    tp.add_argument("--list", dest="list_name",
                    help="searches, zero_results, no_clicks, low_ctr or worsened")
    tp.add_argument("--rows", type=int, default=10, help="rows per list (default 10)")
    tp.set_defaults(handler=_lazy("top"))

    rn = commands.add_parser(
        "run", parents=[logging_options],
        help="the daemon: Kafka in, /metrics, /healthz, /livez, /readyz out",
        description="Consume the events and judgments topics, checkpoint, serve /metrics.",
    )
    rn.add_argument("--config", type=Path, required=True, help="TOML configuration")
    rn.add_argument(
        "--discard-checkpoint", action="store_true",
        help="move aside a checkpoint that cannot be used (unreadable, or written under "
        "other state settings) instead of refusing to start; a usable one is restored (to "
        "start over: searchmon reset)",
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
        "demo", parents=[logging_options],
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
    demo.add_argument("--slice-regression-after", type=parse_duration, default=5400.0,
                      help="event time until an iOS release breaks every class's results "
                      "on platform=ios (default 1.5h; 0: never)")
    demo.add_argument("--duration", type=float, help="stop after this many seconds")
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument(
        "--prometheus", metavar="HOST:PORT", nargs="?", const="127.0.0.1:9090",
        help="also start an installed Prometheus with the project's rules (default "
        "127.0.0.1:9090) to watch the alerts fire",
    )
    demo.set_defaults(handler=_demo)

    broker = commands.add_parser(
        "broker", parents=[logging_options],
        help="a local Kafka-protocol broker for trying searchmon run (the demo extra)",
        description="Run the embedded broker (Tansu, in memory: empty after a restart) in the "
        "foreground with the topics of the configuration created: the events topic with "
        "--partitions partitions, the judgments topic with one, the dead-letter topic when "
        "set. Not for production. Ctrl-C stops it.",
    )
    broker.add_argument("--listen", default="127.0.0.1:9092",
                        help="HOST:PORT to listen on (default 127.0.0.1:9092, the default "
                        "bootstrap server)")
    broker.add_argument("--config", type=Path, help="TOML configuration naming the topics")
    broker.add_argument("--partitions", type=int, default=4,
                        help="partitions of the events topic (default 4)")
    broker.set_defaults(handler=_broker)

    reset = commands.add_parser(
        "reset",
        help="start over: move the state aside and set the group's offsets",
        description="With every replica stopped: move the checkpoints and the ledger aside "
        "(into reset-TIME/ of [state] dir; the changelog's records are deleted) and set the "
        "group's committed offsets of the events and judgments topics to the earliest, the "
        "latest, or those of a time.",
    )
    reset.add_argument("--config", type=Path, required=True, help="TOML configuration")
    reset.add_argument("--to", default="earliest", metavar="earliest|latest|TIME",
                       help="where the group starts reading again (default earliest; TIME: "
                       "ISO 8601 with an offset, the first offsets at or after it)")
    reset.add_argument("--dry-run", action="store_true",
                       help="say which offsets it would set, change nothing")
    reset.set_defaults(handler=_lazy("reset"))

    base = commands.add_parser(
        "baseline",
        help="accept an intended change: a judged sample becomes the baseline",
        description="Write a baseline message: from it on, the named classes and measures "
        "are compared with that sample, and their regressions end.",
    )
    actions = base.add_subparsers(dest="action", required=True, metavar="ACTION")
    accept = actions.add_parser(
        "accept", help="make a completed sample the baseline (audited: reason, by)",
        description="Produce a baseline message to the judgments topic of --config, or print "
        "it (--print) as a JSON line for a judgments file.",
    )
    accept.add_argument("--reason", required=True, help="why the change is accepted")
    accept.add_argument("--by", required=True, help="who accepts it")
    accept.add_argument("--sample", help="the sample (default: the newest completed one)")
    accept.add_argument("--class", dest="class_", metavar="CLASS",
                        help="one query class, or all (default: every class and all)")
    accept.add_argument("--measure", help="one measure (default: every measure)")
    accept.add_argument("--at", help="timestamp of the message (default: now)")
    target = accept.add_mutually_exclusive_group()
    target.add_argument("--config", type=Path, help="TOML configuration naming the topic")
    target.add_argument("--print", action="store_true", help="print the message instead")
    accept.set_defaults(handler=_lazy("baseline"))

    gen = commands.add_parser(
        "generate",
        help="realistic synthetic traffic and judged samples, as JSONL or to Kafka",
        description="Seeded, reproducible traffic: Zipf-like query popularity, classes, "
        "sessions with reformulations, cascade-model clicks, dwell, conversions, a trickle of "
        "malformed and duplicated messages, judged samples and qrels; each session has a "
        "platform, a locale and an experiment variant. On request: users with several "
        "sessions, A/B experiments assigning users to variants with true effects, and "
        "team-draft interleaved result lists with a true preference.",
    )
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--duration", type=parse_duration, default=3600.0,
                     help="event time to cover (default 1h)")
    gen.add_argument("--start", metavar="TIME",
                     help="first event time: now, epoch seconds or ISO 8601 (default: "
                     "2026-09-21T14:13:20Z to a file; to Kafka, so that it ends now)")
    gen.add_argument("--end", metavar="TIME", help="last event time instead (then the start "
                     "is END less the duration)")
    gen.add_argument("--sessions-per-second", type=float, default=5.0)
    gen.add_argument("--judged-every", type=parse_duration, default=0.0,
                     help="event time between judged samples (default: none)")
    gen.add_argument("--judged-queries", type=int, default=300)
    gen.add_argument("--qrels", action="store_true", help="start with qrels messages")
    gen.add_argument("--platforms", metavar="MIX", help="each session's platform, drawn "
                     "from name:weight,... (default ios:0.3,android:0.3,web:0.4)")
    gen.add_argument("--locales", metavar="MIX", help="each session's locale (default "
                     "en-US:0.5,de-DE:0.2,fr-FR:0.15,ja-JP:0.15)")
    gen.add_argument("--variants", metavar="MIX", help="each session's experiment variant "
                     "(default control:0.5,treatment:0.5)")
    gen.add_argument("--regression-class", help="class whose results get shuffled (default: "
                     "every class of --regression-slice)")
    gen.add_argument("--regression-slice", metavar="K=V", action="append",
                     help="confine the regression to the sessions of this slice "
                     "(platform=ios; comma-separated or repeated: all must match)")
    gen.add_argument("--regression-after", type=parse_duration, default=1800.0,
                     help="event time until the bug ships (default 30m)")
    gen.add_argument("--regression-until", type=parse_duration,
                     help="event time at which the bug is fixed (default: never)")
    gen.add_argument("--users", action="store_true", help="sessions belong to users (3 "
                     "sessions each on average) and every event carries user_id (implied by "
                     "--experiment)")
    gen.add_argument("--experiment", metavar="ID:ATTRIBUTE:SPLIT", action="append",
                     help="assign each user a variant by a hash of the user and the experiment, "
                     "in attributes[ATTRIBUTE]: exp-7:ranker:A=0.5,B=0.5 (the shares add up "
                     "to 1; repeatable)")
    gen.add_argument("--effect", metavar="[ID:]VARIANT:ctr=CHANGE", action="append",
                     help="a variant's true effect: its users' queries are clicked with "
                     "probability p + CHANGE, where p is what the click model gives "
                     "(B:ctr=+0.02; repeatable)")
    gen.add_argument("--interleave", metavar="FIRST:SECOND", help="team-draft interleave the "
                     "result lists of two rankers, named in result_teams (A:B)")
    gen.add_argument("--preference", metavar="RANKER=SIZE", help="the true preference of "
                     "--interleave: B=0.1 makes delta_AB -0.1 (default: none, delta_AB 0)")
    gen.add_argument("--malformed-rate", type=float, default=0.001)
    gen.add_argument("--duplicate-rate", type=float, default=0.001)
    gen.add_argument("-o", "--output", type=Path, help="JSONL file (default: standard output)")
    gen.add_argument("--kafka", metavar="BOOTSTRAP", help="produce to Kafka instead (host:port)")
    gen.add_argument("--topic", default="search-events")
    gen.add_argument("--judgments-topic", default="search-judgments")
    gen.set_defaults(handler=_lazy("generate"))
    _judgment_commands(commands)
    return parser


def _judgment_commands(commands: Any) -> None:
    """``judgments from-clicks``, ``judgments import`` and ``sample``."""
    judgments = commands.add_parser(
        "judgments", help="judgments from clicks, or imported from CSV and TREC qrels",
        description="Estimate judgments from the clicks of search logs, or import judgment "
        "files as judgment / qrels messages.",
    )
    actions = judgments.add_subparsers(dest="action", required=True, metavar="ACTION")
    fc = actions.add_parser(
        "from-clicks", help="a relevance score per (query, document) from a click model",
        description="Fit a click model on EVENTS (every input replay reads) and print a score "
        "per (query, document) pair on standard output; what was left out goes to standard "
        "error.",
    )
    fc.add_argument("events", type=Path, nargs="+", metavar="EVENTS", help="event file")
    fc.add_argument("--model", choices=("coec", "pbm", "dbn", "sdbn"), default="coec",
                    help="clicks over expected clicks, the position-based model, the dynamic "
                    "Bayesian network, or its simplified form (default coec)")
    fc.add_argument("--format", choices=("csv", "qrels", "json"), default="csv",
                    help="output format (default csv)")
    fc.add_argument("--min-impressions", type=_positive, default=10, metavar="N",
                    help="leave out pairs shown fewer than N times (default 10)")
    fc.add_argument("--min-sessions", type=_positive, metavar="K",
                    help="leave out queries fewer than K distinct sessions issued (default: "
                    "[query_lists] min_sessions, 5)")
    fc.add_argument("--thresholds", metavar="T1,T2,...",
                    help="with --format qrels: the least score of labels 1, 2, 3 (default "
                    "per model: coec 0.5,1,2; pbm 0.15,0.4,0.7; dbn and sdbn 0.05,0.2,0.5)")
    fc.add_argument("--config", type=Path, help="TOML configuration: input formats, [ubi], "
                    "the query lists' normalisation and redactions (default: built-in)")
    fc.set_defaults(handler=_lazy("judgments"))
    im = actions.add_parser(
        "import", help="query,docid,rating CSV or TREC qrels as qrels / judgment messages",
        description="Read FILE (query,docid,rating[,rater] CSV, a header optional, or TREC "
        "qrels), label each (query, document) pair with the aggregate of its raters' ratings, "
        "print the raters' agreement on standard error, and write one message per query.",
    )
    im.add_argument("file", type=Path, metavar="FILE", help="the judgments ('-': standard "
                    "input)")
    im.add_argument("--format", choices=("auto", "csv", "qrels"), default="auto",
                    help="the file's format (default: qrels when its first line is four "
                    "whitespace-separated fields, else CSV)")
    im.add_argument("--underscores", action="store_true",
                    help="read every _ of a qrels topic as a blank (the topics of "
                    "judgments from-clicks --format qrels are query texts so written)")
    im.add_argument("--aggregate", choices=("mean", "median", "majority"), default="mean",
                    help="several raters' ratings of a pair become its label by this "
                    "(rounded half up; default mean)")
    im.add_argument("--as", dest="as_type", choices=("qrels", "judgment"), default="qrels",
                    help="qrels messages (labels without a ranking), or the judgment messages "
                    "of one judged sample (default qrels)")
    im.add_argument("--sample-id", metavar="ID", help="with --as judgment: the sample's id")
    im.add_argument("--qrels-id", metavar="ID", help="the qrels messages' qrels_id")
    im.add_argument("--query-class", metavar="CLASS", help="every message's query_class")
    im.add_argument("--timestamp", metavar="TIME", help="the messages' time, ISO 8601 with an "
                    "offset (default: now)")
    im.add_argument("-o", "--output", type=Path, help="JSONL file (default: standard output)")
    im.add_argument("--kafka", "--brokers", dest="kafka", metavar="HOST:PORT",
                    help="produce to the judgments topic of this Kafka cluster instead")
    im.add_argument("--topic", help="with --kafka: the topic (default [kafka] "
                    "judgments_topic: search-judgments)")
    im.add_argument("--config", type=Path, help="TOML configuration: [offline] max_labels, "
                    "[kafka] judgments_topic and security (default: built-in)")
    im.set_defaults(handler=_lazy("judgments"))

    sm = commands.add_parser(
        "sample", help="queries of search logs picked for judging, with their served results",
        description="Pick COUNT queries of EVENTS (every input replay reads) for judging, "
        "each with the result list it was last served, as CSV (a row per result) or JSON. "
        "Only queries at least --min-sessions distinct sessions issued can be picked. With "
        "--url, pick them from running daemons' query lists instead (their counts; the "
        "lists keep no served lists).",
    )
    sm.add_argument("events", type=Path, nargs="*", metavar="EVENTS", help="event file")
    sm.add_argument("--url", action="append", metavar="URL",
                    help="a daemon (or replay --serve) whose query lists to pick from, "
                    "instead of EVENTS; one per replica (repeatable)")
    sm.add_argument("--window", metavar="DURATION",
                    help="with --url: the lists' window (default: the longest)")
    sm.add_argument("-n", "--count", type=_positive, default=100, metavar="COUNT",
                    help="queries to pick (default 100)")
    sm.add_argument("--method", choices=("random", "top", "pps"), default="pps",
                    help="at random, the most searched, or with probability proportional to "
                    "searches (default pps)")
    sm.add_argument("--by", action="append", metavar="class|DIMENSION",
                    help="stratify: by the query class, or by a slice dimension of the "
                    "queries' attributes (platform, locale, ...); repeatable")
    sm.add_argument("--format", choices=("csv", "json"), default="csv",
                    help="CSV, a row per served result, or JSON (default csv)")
    sm.add_argument("--seed", type=int, default=1, help="the random picks' seed (default 1)")
    sm.add_argument("--min-sessions", type=_positive, metavar="K",
                    help="the k-anonymity floor (default: [query_lists] min_sessions, 5)")
    sm.add_argument("--config", type=Path, help="TOML configuration: input formats, [ubi], "
                    "[query_classes], [slices], the query lists' normalisation (default: "
                    "built-in)")
    sm.set_defaults(handler=_lazy("sample"))


def _eval(args: argparse.Namespace) -> int:
    from monitor.offline.evaluate import evaluate
    from monitor.offline.report import format_json, format_text, skipped_note, summary_name_note
    from monitor.offline.spec import MeasureNameError, parse_requested
    from monitor.offline.trec import parse_qrels, parse_run

    _keep_freed_memory()
    try:  # in trec_eval's order where asked by trec_eval's names
        asked = parse_requested(args.measures or DEFAULT_EVAL_MEASURES)
    except MeasureNameError as error:
        raise UsageError(str(error)) from None
    measures: list[Named] = [
        (name, spec.with_relevance_level(args.rel_level)) for name, spec in asked
    ]
    if args.plot_measure is not None and args.plot is None:
        raise UsageError("--plot-measure is the measure of --plot's charts: give --plot too")
    if args.plot is not None:
        from monitor.cli.eval_runs import plot_measure

        plot_measure(args.plot_measure, args.rel_level)  # a bad name is refused before work
    if args.run_b is not None and args.per_query:
        raise UsageError("-q prints one run's values per query; with RUN_B, --plot shows "
                         "each query's difference")
    qrels = _parse_file(parse_qrels, args.qrels)
    runs = [(path, _parse_file(parse_run, path)) for path in (args.run, args.run_b) if path]
    # trec_eval refuses an empty file too ("Cannot read"), and a file of comments only
    files: list[tuple[Path, Qrels | Run, str]] = [(args.qrels, qrels, "judgments")]
    for path, lines, what in files + [(path, run, "results") for path, run in runs]:
        if not len(lines):
            raise UsageError(f"{path}: no {what} (the file is empty, or only comments and "
                             "blank lines)")
    if args.run_b is not None:
        from monitor.cli import eval_runs

        return eval_runs.compare_runs(args, qrels, runs, measures)
    specs = [spec for _, spec in measures]
    figure = None
    if args.plot is None:
        evaluation = evaluate(qrels, runs[0][1], specs, complete=args.complete,
                              max_docs=args.max_docs)
    else:
        from monitor.cli.eval_runs import evaluate_run

        evaluation, figure = evaluate_run(args, qrels, *runs[0], specs)
    if not evaluation.shared_queries:
        if not args.complete:  # trec_eval 9: exit 7; trec_eval 10.0: exit 4 (docs/reference/cli.md)
            raise UsageError(f"no query of {args.run} is in {args.qrels}: nothing to evaluate")
        _eval_note(f"no query of {args.run} is in {args.qrels}: every query scores as an "
                   "empty ranking (-c)")
    if args.per_query and (note := summary_name_note(evaluation, args.json)):
        _eval_note(note)
    for note in skipped_note(evaluation, measures):
        _eval_note(note)
    out = format_json if args.json else format_text
    from monitor.offline.report import write_bytes_as_read

    write_bytes_as_read(out(evaluation, measures, args.per_query))
    if figure is not None:
        from monitor.cli.eval_runs import write_plot

        write_plot(args, [args.run], [figure])
    return EXIT_OK


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _step(text: str) -> float:
    from monitor.config import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}, got {text!r}") from None
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"expected a step of at least 1s, got {text!r}")
    return seconds


def _relevance_level(text: str) -> int:
    try:
        level = int(text)
    except ValueError:
        level = None
    if level is None or not INT64_MIN <= level <= INT64_MAX:
        raise argparse.ArgumentTypeError(f"expected an integer (64-bit), got {text!r}")
    return level


def _parse_file(parse: Callable[..., ParsedFile], path: Path) -> ParsedFile:
    from monitor.offline.trec import TrecFormatError

    data, mapped = _read(path)
    try:
        return parse(data, str(path), path=str(path) if mapped else None)
    except TrecFormatError as error:
        raise UsageError(str(error)) from None


def _eval_note(note: str) -> None:
    print(f"searchmon eval: {note}", file=sys.stderr)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def _keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for reuse; elsewhere, nothing changes.

    An evaluation makes and drops arrays of megabytes many times. By default glibc maps
    each such array afresh and unmaps it when it is freed, and gives the top of its heap
    back as soon as that is free, so the pages of most arrays fault in anew. Keeping them
    spares half the page faults (17,000 of 35,000) and about 5% of the time of
    bench/eval_bench.py. Results do not change.
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc, or no C library to load
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest
    mallopt(_M_TRIM_THRESHOLD, 1 << 30)


def _run(args: argparse.Namespace) -> int:
    from monitor.run.daemon import Daemon, StartError  # kafka-python loads only for the daemon
    from monitor.run.tuning import tune_for_throughput

    config = load(args.config)
    setup_logging(args, "info", config)
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
    from monitor.config import ConfigError, load_config

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
    import logging
    import socket

    from monitor.cli.demo import run_demo  # the broker and kafka-python load only for the demo
    from monitor.config import HttpConfig

    address = HttpConfig(listen=args.listen).address
    try:  # refused at once, before the broker and the daemon start behind it
        with socket.create_server(address):
            pass
    except OSError as error:
        raise UsageError(
            f"cannot listen on {args.listen} "
            f"({os.strerror(error.errno) if error.errno else error}): another process has it; "
            "choose another address with --listen 127.0.0.1:PORT"
        ) from None
    setup_logging(args, "warning")
    logging.getLogger("kafka").setLevel(logging.ERROR)  # its notices would cut the live view
    return run_demo(
        listen=args.listen, accelerate=args.accelerate,
        regression_class=args.regression_class or None,
        regression_after=args.regression_after, duration=args.duration, seed=args.seed,
        slice_regression_after=args.slice_regression_after or None,
        prometheus_listen=args.prometheus,
    )


def _broker(args: argparse.Namespace) -> int:
    from monitor.cli.broker import Broker

    config = load(args.config)
    setup_logging(args, "info", config)
    host, _, port = args.listen.rpartition(":")
    if host != "127.0.0.1" or not port.isdigit():
        raise UsageError("--listen: expected 127.0.0.1:PORT (the broker is for this machine)")
    kafka = config.kafka
    topics = {kafka.events_topic: args.partitions, kafka.judgments_topic: 1}
    if kafka.dead_letter_topic:
        topics[kafka.dead_letter_topic] = 1
    try:
        broker = Broker(int(port)).start()
    except RuntimeError as error:
        raise UsageError(str(error)) from None
    try:
        broker.create_topics(topics)
        print(f"searchmon broker: listening on {broker.address}, topics "
              + ", ".join(f"{name} ({count})" for name, count in topics.items())
              + "; Ctrl-C to stop (it keeps nothing)", file=sys.stderr, flush=True)
        wait_for_signal()
    finally:
        broker.stop()
    return EXIT_OK


def _read(path: Path) -> tuple[Data, bool]:
    """The contents of ``path``, and whether they are a memory map of it: a regular file is
    mapped (its pages are the page cache's, nothing is copied), anything else is read; a
    gzip-compressed file (recognised by its first bytes, as ``replay`` does) is decompressed."""
    try:
        with path.open("rb") as file:
            if path.is_file() and os.fstat(file.fileno()).st_size:
                mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
                if mapped[:2] != b"\x1f\x8b":
                    return mapped, True
                mapped.close()
                file.seek(0)
            data = file.read()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    if data[:2] == b"\x1f\x8b":
        import gzip
        import zlib

        try:
            return gzip.decompress(data), False
        except (OSError, EOFError, zlib.error) as error:
            raise UsageError(f"cannot read {path}: not a whole gzip file ({error})") from None
    return data, False

