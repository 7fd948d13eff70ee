"""Configuration: TOML validated by pydantic at start-up, every key with a default.

A file that sets only what differs from the defaults is valid; an unknown key is an error
(``extra="forbid"``), and every error names the key, the bad value and what is accepted.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from monitor.offline.spec import MeasureNameError, parse_measure

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def window_label(seconds: float) -> str:
    """A window as people write it, the one label of a window everywhere (``/metrics``,
    ``/queries``, the page): ``3600`` -> ``1h``, ``86400`` -> ``24h``, ``172800`` -> ``2d``,
    ``604800`` -> ``7d``, ``90`` -> ``90s``. ``parse_duration`` reads it back."""
    whole = int(seconds)
    if whole == seconds:
        if whole % 86400 == 0 and whole > 86400:
            return f"{whole // 86400}d"
        for unit, size in (("h", 3600), ("m", 60)):
            if whole % size == 0:
                return f"{whole // size}{unit}"
    return f"{seconds:g}s"


def parse_duration(value: Any) -> float:
    """Seconds from a number (seconds) or a string such as ``"30s"``, ``"5m"``, ``"7d"``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 5m, 1h, 7d or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match[1]) * _UNITS[match[2] or "s"]  # no unit: seconds
    else:
        raise ValueError("expected a duration such as 30s, 5m, 1h, 7d or a number of seconds")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


PAGE_REFRESH = 30.0
"""``[http] page_refresh`` unless set: seconds between the status page's reloads."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaConfig(Section):
    bootstrap_servers: list[str] = ["127.0.0.1:9092"]
    group_id: str = "searchmon"
    events_topic: str = "search-events"
    judgments_topic: str = "search-judgments"
    dead_letter_topic: str | None = None
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    session_timeout_ms: int = Field(default=6000, ge=1000)
    heartbeat_interval_ms: int = Field(default=2000, ge=100)
    max_poll_interval_ms: int = Field(default=300000, ge=1000)
    max_poll_records: int = Field(default=5000, ge=1)

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> KafkaConfig:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms}); a third of it is recommended"
            )
        return self

    def client_options(self) -> dict[str, Any]:
        """Security settings as kafka-python keyword arguments (the password revealed here
        only, never logged)."""
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.sasl_mechanism is not None:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            if self.sasl_password is not None:
                options["sasl_plain_password"] = self.sasl_password.get_secret_value()
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, key)
            if value is not None:
                options[key] = str(value)
        return options


class HttpConfig(Section):
    listen: str = "127.0.0.1:9108"
    tls_certfile: Path | None = None
    """Serve HTTPS with this certificate (PEM) and ``tls_keyfile``."""
    tls_keyfile: Path | None = None
    tls_client_cafile: Path | None = None
    """Require client certificates signed by this CA (mutual TLS)."""
    page_refresh: Annotated[Duration, Field(le=86400.0)] = PAGE_REFRESH
    """How often the status page reloads itself in a browser (whole seconds); 0: never.
    ``/?refresh=N`` overrides it for one page."""

    @model_validator(mode="after")
    def _tls_pairs(self) -> HttpConfig:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together")
        if self.tls_client_cafile is not None and self.tls_certfile is None:
            raise ValueError("tls_client_cafile (mutual TLS) needs tls_certfile and tls_keyfile")
        return self

    @field_validator("listen")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("expected HOST:PORT, for example 127.0.0.1:9108 or 0.0.0.0:9108")
        return value

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class StateConfig(Section):
    dir: Path = Path("state")
    """Checkpoints (``store = "dir"``) and this replica's export accounting."""
    checkpoint_interval: Duration = 5.0
    """How often the daemon writes a checkpoint; /metrics shows the newest durable one."""
    store: Literal["dir", "kafka"] = "dir"
    """Where partitions' checkpoints live: ``dir`` (one replica) or ``kafka``, a compacted
    changelog topic any replica of the group can restore a partition from."""
    changelog_topic: str | None = None
    """Default: ``<group_id>-changelog``; created (compacted, one partition) when missing."""
    changelog_replication_factor: int = Field(default=-1, ge=-1)
    """For the changelog topic the daemon creates; -1: the brokers' default."""
    chunk_bytes: int = Field(default=512 * 1024, ge=1024, le=16 * 1024 * 1024)
    """Checkpoints are split into changelog records of at most this size."""


class SessionsConfig(Section):
    timeout: Duration = 1800.0
    """A session closes after this long without events (event time)."""
    allowed_lateness: Duration = 120.0
    """The watermark trails the newest event time by this much."""
    success_dwell: Duration = 30.0
    """A click with at least this dwell makes a session successful."""
    reformulation_window: Duration = 60.0
    """A query followed within this time by another, with no click between, is reformulated."""
    recent_queries: int = Field(default=8, ge=1, le=64)
    """Queries per session remembered to attribute clicks, dwell and conversions."""
    max_future: Duration = 300.0
    """Events stamped further ahead than this are rejected (``future_timestamp``): ahead of
    the wall clock in ``run``, of the median event time around them in ``replay``."""
    idle_after: Duration = 30.0
    """``run``: a partition read to its end that gets no event for this long (wall clock)
    has its watermark follow the wall clock less ``allowed_lateness``, so that its last
    events are applied and its sessions close; 0: never."""


class ClassRule(Section):
    """Assigns ``class`` to queries whose normalised text matches every condition given."""

    class_: str = Field(alias="class", min_length=1)
    pattern: str | None = None
    min_terms: int | None = Field(default=None, ge=0)
    max_terms: int | None = Field(default=None, ge=0)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as error:
                raise ValueError(f"not a regular expression: {error}") from None
        return value

    @model_validator(mode="after")
    def _has_a_condition(self) -> ClassRule:
        if self.pattern is None and self.min_terms is None and self.max_terms is None:
            raise ValueError("a rule needs at least one of pattern, min_terms, max_terms")
        return self


class QueryClassesConfig(Section):
    names: list[str] = []
    """The closed set of classes; empty: the first ``max_query_classes`` seen become classes."""
    max_query_classes: int = Field(default=20, ge=1, le=1000)
    rules: list[ClassRule] = []

    @field_validator("names")
    @classmethod
    def _distinct_and_not_other(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("class names must be distinct")
        if "other" in names or "all" in names:
            raise ValueError(
                "'other' (every query outside the set) and 'all' (the overall offline "
                "figures) are reserved"
            )
        if any(not name for name in names):
            raise ValueError("class names must not be empty")
        return names


LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
RESERVED_LABELS = frozenset({
    "query_class", "measure", "source", "window", "reason", "le", "quantile", "job",
    "instance", "topic", "partition", "list", "dimension", "version",
})
"""Label names of searchmon's own families and of Prometheus targets: no dimension's."""
UNKNOWN = "unknown"
"""The value of a dimension an event does not give."""
SPECIAL_VALUES = frozenset({"unknown", "other", "all"})


class SlicesConfig(Section):
    """Dimensions besides the query class: each a label of every online and offline family."""

    dimensions: list[str] = []
    """Names of the dimensions, in label order (``query_class`` is always the first)."""
    values: dict[str, list[str]] = {}
    """The closed value set of a dimension; a dimension not named here keeps the first
    ``max_values`` values seen in event time."""
    max_values: int = Field(default=20, ge=1, le=1000)
    max_series: int = Field(default=2000, ge=1, le=1_000_000)
    max_value_chars: int = Field(default=100, ge=1, le=1000)
    """A longer value counts as ``other``."""

    @field_validator("dimensions")
    @classmethod
    def _label_names(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("dimension names must be distinct")
        for name in names:
            if not LABEL_NAME.fullmatch(name) or name.startswith("__"):
                raise ValueError(f"{name!r} is not a Prometheus label name")
            if name in RESERVED_LABELS:
                raise ValueError(f"{name!r} is a label searchmon or Prometheus uses already")
        return names

    @field_validator("values")
    @classmethod
    def _value_lists(cls, values: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, listed in values.items():
            if not listed or len(set(listed)) != len(listed) or not all(listed):
                raise ValueError(f"values of {name}: expected distinct, non-empty values")
            special = SPECIAL_VALUES.intersection(listed)
            if special:
                raise ValueError(f"values of {name}: {sorted(special)} are reserved "
                                 "(unknown: no value given; other: outside the set)")
        return values

    @model_validator(mode="after")
    def _within_budget(self) -> SlicesConfig:
        strangers = set(self.values) - set(self.dimensions)
        if strangers:
            raise ValueError(f"values given for {sorted(strangers)}, not in dimensions")
        product = 1
        for listed in self.values.values():
            product *= len(listed)
        if product > self.max_series:
            raise ValueError(f"the configured value lists make {product} slices, more than "
                             f"max_series ({self.max_series})")
        return self


class ExperimentConfig(Section):
    """One A/B test: the variants of ``attribute`` a query carries, compared with
    ``control`` (docs/concepts/experiments.md)."""

    id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")
    attribute: str = Field(min_length=1, max_length=100)
    """The event field or ``attributes`` key holding the variant."""
    control: str = Field(min_length=1)
    split: dict[str, float]
    """Each variant's intended share of the units (normalised to sum 1)."""
    unit: Literal["user", "session"] = "user"
    """The randomization unit: ``user_id`` (UBI: ``client_id``), or the session."""
    buckets: int = Field(default=128, ge=100, le=10_000)
    """Units are hashed into this many buckets per variant; variances are taken over them."""
    max_units: int = Field(default=10_000_000, ge=1000, le=1_000_000_000)
    """Units counted exactly per experiment, shared equally by its variants (8 bytes each, in
    memory and in checkpoints); beyond, approximately (HyperLogLog, about 0.8%)."""

    @model_validator(mode="after")
    def _variants(self) -> ExperimentConfig:
        if len(self.split) < 2:
            raise ValueError("split: at least two variants")
        if self.control not in self.split:
            raise ValueError(f"control {self.control!r} is not a variant of split")
        if any(share <= 0 for share in self.split.values()):
            raise ValueError("split: every share must be positive")
        return self

    @property
    def variants(self) -> list[str]:
        """The control first, then the treatments in ``split`` order."""
        return [self.control, *(name for name in self.split if name != self.control)]

    @property
    def shares(self) -> list[float]:
        total = sum(self.split.values())
        return [self.split[name] / total for name in self.variants]


def _zone_name(value: str) -> str:
    if value != "reject":
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("expected an IANA time zone (UTC, Europe/Berlin) or reject") from None
    return value


class InputConfig(Section):
    max_event_bytes: int = Field(default=1 << 20, ge=256)
    """Messages larger than this are rejected as ``too_large`` before decoding."""
    rejection_log_limit: int = Field(default=100, ge=0)
    """Rejected messages logged individually per reason; later ones are only counted."""
    max_depth: int = Field(default=64, ge=2, le=500)
    """Messages nesting arrays and objects deeper than this are rejected as ``too_deep``
    (checked in one linear pass before decoding)."""
    formats: list[str] = ["native", "ubi"]
    """The decoder chain: the input formats tried in this order on each message (the first
    that recognises it decodes it). Each is the module ``monitor/inputs/<name>.py``, whose
    ``DECODER`` reads it: listing a module here is its registration."""
    naive_timezone: str = "reject"
    """Native timestamps without an offset: rejected (``naive_timestamp``), or read in this
    IANA zone. (UBI records have their own, ``[ubi] naive_timezone``.)"""
    batch_budget: Duration = Field(default=10.0, gt=0)
    """A batch still being processed after this long is a stall: logged with the partition
    and offset of the record in hand, and ``/readyz`` says so until it ends."""
    max_query_chars: int = Field(default=1000, ge=10)
    """Query texts (live, judged and qrels) are cut to this many characters (at a word
    boundary) before classification rules, the live join and judged samples read them, so
    that no step's cost grows with a text's length beyond it (the query lists' redaction is
    linear and reads only what their key needs)."""



    @field_validator("naive_timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return _zone_name(value)

    @field_validator("formats")
    @classmethod
    def _known_formats(cls, names: list[str]) -> list[str]:
        unknown = [
            name for name in names
            if not name.isidentifier() or find_spec(f"monitor.inputs.{name}") is None
        ]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(
                "expected distinct input formats, each a module of monitor/inputs "
                f"(native, ubi, ...); unknown: {', '.join(unknown) or 'none'}"
            )
        return names

class OfflineConfig(Section):
    measures: list[str] = ["nDCG@10", "P@5", "AP", "RR", "Judged@10"]
    windows: list[Duration] = [3600.0, 86400.0, 604800.0]
    """Rolling time windows of the judged-score means, in event time."""
    last_samples: list[Annotated[int, Field(ge=1)]] = [1, 4]
    """Windows over the last N completed samples."""
    sample_quiet: Duration = 600.0
    """A sample is complete when no message of it arrived for this long (event time)."""
    sample_size: int = Field(default=0, ge=0)
    """A sample is also complete at this many judged queries; 0: by quiet period only."""
    baseline: str = Field(default="last_good", min_length=1)
    """What each completed sample is compared with, per class and measure: ``last_good``
    (the last sample not flagged there), ``previous`` (the sample completed before), or
    this pinned sample_id."""
    min_shared_queries: int = Field(default=20, ge=2)
    """Fewer queries shared with the baseline than this (per class): no verdict."""
    min_drop: float = Field(default=0.02, ge=0)
    """A regression is a drop of the mean larger than this (absolute, in measure units)..."""
    max_p_value: float = Field(default=0.01, gt=0, le=1)
    """...and a randomization-test p-value significant at this family-wise level (Holm)."""
    permutations: int = Field(default=10000, ge=100)
    qrels_capacity: int = Field(default=10000, ge=0)
    """Query texts whose newest qrels labels are kept for live evaluation (LRU by update)."""
    max_labels: int = Field(default=1000, ge=1)
    """A judgment or qrels message with more labels than this is rejected (``schema``): the
    stored qrels hold at most ``qrels_capacity`` x ``max_labels`` labels."""

    @field_validator("measures")
    @classmethod
    def _parse(cls, names: list[str]) -> list[str]:
        canonical = []
        for name in names:
            try:
                canonical.append(str(parse_measure(name)))
            except MeasureNameError as error:
                raise ValueError(str(error)) from None
        return canonical


class ImplicitConfig(Section):
    """Labels from clicks in the daemon (docs/concepts/implicit-judgments.md)."""

    enabled: bool = False
    """Fit a click model on the traffic of every ``interval`` and score the live queries
    against its labels (``source="implicit"``)."""
    model: Literal["coec", "pbm", "dbn", "sdbn"] = "coec"
    """The click model: COEC and SDBN are counted (milliseconds); PBM and DBN fit by EM."""
    interval: Annotated[Duration, Field(ge=60.0)] = 3600.0
    """Event time between fits; each fit reads the searches of the interval before it."""
    min_impressions: int = Field(default=10, ge=1)
    """A (query, document) pair shown fewer times in an interval gets no label."""
    thresholds: list[float] = []
    """The least score of labels 1, 2, ...; empty: the model's documented thresholds."""
    max_searches: int = Field(default=100_000, ge=1)
    """The searches one interval keeps (per partition): the events of further searches in
    the interval are left out, and counted."""

    @field_validator("thresholds")
    @classmethod
    def _ascending(cls, thresholds: list[float]) -> list[float]:
        if thresholds != sorted(thresholds) or len(set(thresholds)) != len(thresholds):
            raise ValueError("thresholds must be distinct and ascending")
        return thresholds


class UbiConfig(Section):
    """How OpenSearch UBI records become events (docs/reference/events.md)."""

    click_actions: list[str] = ["click", "click_through", "item_click", "product_click"]
    """A click on a result. Not ``global_click``: the UBI client's click anywhere on the page,
    whose object is a screen position (counting it made zero-result queries look clicked)."""
    conversion_actions: list[str] = ["add_to_cart", "purchase", "product_purchase"]
    impression_actions: list[str] = ["impression"]
    ordinal_base: int = Field(default=0, ge=0, le=1)
    """``event_attributes.position.ordinal`` of the first result: 0 (the UBI plugin's data
    generator and click models) or 1."""
    naive_timezone: str = "UTC"
    """The zone of a UBI timestamp without an offset (the spec's own example has none), or
    ``reject``."""
    empty_hit_ids: Literal["zero_results", "unknown"] = "zero_results"
    """An empty ``query_response_hit_ids``: the query found nothing, or its results were not
    logged. Absent hit ids are always unknown."""

    @field_validator("naive_timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return _zone_name(value)

    @model_validator(mode="after")
    def _disjoint(self) -> UbiConfig:
        groups = (self.click_actions, self.conversion_actions, self.impression_actions)
        names = [name for group in groups for name in group]
        if len(set(names)) != len(names):
            raise ValueError("an action name is in more than one of the action lists")
        return self


class QueryListsConfig(Section):
    """Which queries (docs/concepts/query-lists-and-privacy.md)."""

    enabled: bool = True
    """Off: no query text is kept or shown anywhere (lists and worsened queries)."""
    capacity: int = Field(default=1000, ge=10, le=100_000)
    """Counters per query class, per list and per time bucket of a window."""
    min_sessions: int = Field(default=5, ge=1, le=1000)
    """A query is shown only once this many distinct sessions issued it in the window."""
    windows: list[Duration] = [3600.0, 86400.0]
    """Rolling windows of the lists, in event time."""
    top: int = Field(default=20, ge=1, le=1000)
    """Rows per list."""
    min_searches: int = Field(default=20, ge=1)
    """Searches a query needs (in the window) to be ranked in the lowest-CTR list."""
    redact: list[Literal["email", "digits"]] = ["email", "digits"]
    """Built-in redactions applied to query text before anything is kept: e-mail addresses
    (``<email>``), runs of six or more digits (``<digits>``); see
    docs/concepts/query-lists-and-privacy.md."""
    redact_patterns: list[str] = []
    """More regular expressions; each match becomes ``<redacted>``. They run after the
    built-in ones, on the first 400 characters those left (keys are cut at 200)."""
    dimensions: list[str] = []
    """``[slices]`` dimensions the lists are kept by besides the class (empty: by class):
    each one multiplies the summaries kept and their cost per query."""

    @field_validator("dimensions")
    @classmethod
    def _distinct(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("expected distinct dimension names")
        return names

    @field_validator("windows")
    @classmethod
    def _positive(cls, windows: list[float]) -> list[float]:
        if not windows or any(w <= 0 for w in windows) or len(set(windows)) != len(windows):
            raise ValueError("expected distinct positive durations")
        return windows

    @field_validator("redact_patterns")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                compiled = re.compile(pattern)
            except re.error as error:
                raise ValueError(f"{pattern!r} is not a regular expression: {error}") from None
            if compiled.match(""):
                raise ValueError(f"{pattern!r} matches the empty string")
        return patterns


class Config(Section):
    kafka: KafkaConfig = KafkaConfig()
    http: HttpConfig = HttpConfig()
    state: StateConfig = StateConfig()
    sessions: SessionsConfig = SessionsConfig()
    query_classes: QueryClassesConfig = QueryClassesConfig()
    slices: SlicesConfig = SlicesConfig()
    input: InputConfig = InputConfig()
    offline: OfflineConfig = OfflineConfig()
    implicit: ImplicitConfig = ImplicitConfig()
    ubi: UbiConfig = UbiConfig()
    query_lists: QueryListsConfig = QueryListsConfig()
    experiments: list[ExperimentConfig] = []

    @model_validator(mode="after")
    def _distinct_experiments(self) -> Config:
        ids = [experiment.id for experiment in self.experiments]
        if len(set(ids)) != len(ids):
            raise ValueError("experiments: ids must be distinct")
        return self

    @model_validator(mode="after")
    def _lists_by_slice_dimensions(self) -> Config:
        strangers = set(self.query_lists.dimensions) - set(self.slices.dimensions)
        if strangers:
            raise ValueError(f"query_lists.dimensions: {sorted(strangers)} not in "
                             "[slices] dimensions")
        return self


class ConfigError(Exception):
    """A configuration that cannot be used; ``problems`` has one line per error."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


ENV_PREFIX = "SEARCHMON_"
"""``SEARCHMON_<SECTION>__<KEY>`` overrides ``[section] key`` of the file."""
SECRETS = {("kafka", "sasl_password")}
"""Settings whose value is never printed, and which can be read from a file instead:
``<key>_file`` in the file or ``SEARCHMON_<SECTION>__<KEY>_FILE`` in the environment."""


def secret_values(config: Config) -> tuple[str, ...]:
    """The values of the ``SECRETS`` that are set, for the logs to mask wherever they appear
    (kafka-python's DEBUG records print the bytes a SASL/PLAIN login sends)."""
    values = []
    for section, key in sorted(SECRETS):
        value = getattr(getattr(config, section), key)
        if isinstance(value, SecretStr) and value.get_secret_value():
            values.append(value.get_secret_value())
    return tuple(values)


def load_config(path: Path | None, environ: Mapping[str, str] | None = None) -> Config:
    """The effective configuration: the file in ``path`` (the defaults when None), then the
    ``SEARCHMON_<SECTION>__<KEY>`` variables of ``environ`` (default: the process
    environment) over it, then secrets read from their ``*_file``."""
    text = ""
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(str(path), [f"cannot read: {error.strerror}"]) from None
        except UnicodeDecodeError:
            raise ConfigError(str(path), ["not UTF-8 text"]) from None
    return parse_config(text, source, os.environ if environ is None else environ)


def parse_config(
    text: str, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(source, [f"not valid TOML: {error}"]) from None
    problems = _overlay(data, environ or {})
    problems += _read_secret_files(data)
    if problems:
        raise ConfigError(source, problems)
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, [_explain(e) for e in error.errors()]) from None


def _overlay(data: dict[str, Any], environ: Mapping[str, str]) -> list[str]:
    """Put the environment's ``SEARCHMON_<SECTION>__<KEY>`` values into ``data``.

    A value is taken as it is (pydantic reads numbers, booleans and durations from strings),
    except for list settings: JSON (``["a:9092", "b:9092"]``) or comma-separated."""
    problems = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        section, _, key = name[len(ENV_PREFIX):].lower().partition("__")
        model = Config.model_fields.get(section)
        if model is None:
            problems.append(f"{name}: no section [{section}] (see config.example.toml)")
            continue
        table = data.setdefault(section, {})
        if not isinstance(table, dict):
            problems.append(f"{name}: [{section}] is not a table in the file")
            continue
        value: Any = environ[name]
        field = _field_type(section, key)
        if field is not None and get_origin(field) is list:
            try:
                value = json.loads(value) if value.lstrip().startswith("[") else [
                    item.strip() for item in value.split(",") if item.strip()
                ]
            except json.JSONDecodeError as error:
                problems.append(f"{name}: not a JSON list ({error.msg})")
                continue
        table[key] = value
    return problems


def _field_type(section: str, key: str) -> Any:
    model = Config.model_fields[section].annotation
    fields = getattr(model, "model_fields", {})
    return fields[key].annotation if key in fields else None


def _read_secret_files(data: dict[str, Any]) -> list[str]:
    problems = []
    for section, key in sorted(SECRETS):
        table = data.get(section)
        if not isinstance(table, dict) or f"{key}_file" not in table:
            continue
        path = table.pop(f"{key}_file")
        if key in table:
            problems.append(f"{section}.{key} and {section}.{key}_file: set one of the two")
            continue
        try:
            table[key] = Path(str(path)).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            problems.append(f"{section}.{key}_file = {str(path)!r}: cannot read ({error})")
    return problems


def _explain(error: Any) -> str:
    key = ".".join(str(part) for part in error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key (check the spelling against config.example.toml)"
    if kind == "missing":
        return f"{key}: required"
    message = str(error["msg"]).removeprefix("Value error, ")
    if tuple(str(part) for part in error["loc"][:2]) in SECRETS:
        return f"{key}: {message} (the value of a secret is not shown)"
    return f"{key} = {error['input']!r}: {message}"
