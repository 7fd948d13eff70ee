"""Logging of the commands: a level, plain or JSON lines, and kafka-python kept quiet.

kafka-python logs every reconnect, rebalance step and slow task of its IO thread; its
records pass at WARNING and above unless the level is ``debug``. Secrets never reach a
line, at any level:

- kafka-python's protocol loggers (``PROTOCOL_LOGGERS``) print every request and response,
  decoded and as raw bytes, at DEBUG: the SASL exchange among them, with a PLAIN password
  in clear. They stay at INFO even at ``debug`` unless ``unsafe`` (``--log-unsafe``).
- Every record, its exception and stack included, is masked (``Redact``): password-like
  arguments (kafka-python prints the configuration of the clients it builds), and the
  configured secrets' values wherever they appear, as they are or escaped as Python or
  JSON would print them. The secrets are handed to ``setup`` by the command that loaded
  the configuration; only the filter keeps them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal, NamedTuple

from monitor.text import printable

Level = Literal["debug", "info", "warning", "error"]
Format = Literal["text", "json"]
LEVELS: tuple[Level, ...] = ("debug", "info", "warning", "error")
FORMATS: tuple[Format, ...] = ("text", "json")

PROTOCOL_LOGGERS = ("kafka.protocol", "kafka.net.connection", "kafka.net.sasl",
                    "kafka.conn", "kafka.sasl")
"""kafka-python's loggers whose DEBUG records print requests and responses or the bytes
sent and received (3.x: ``kafka.protocol.parser``, ``kafka.net.connection``; 2.x:
``kafka.conn``, ``kafka.protocol.parser``), and its SASL mechanisms'."""

MASK = "**********"


class Settings(NamedTuple):
    """What ``setup`` was called with, but the secrets (the state process repeats it)."""

    level: Level = "info"
    form: Format = "text"
    unsafe: bool = False


_settings = Settings()

_SECRET = re.compile(
    r"(['\"]?(?:sasl_plain_password|ssl_password|ssl_keyfile|password|"
    r"sasl_oauth_token_provider)['\"]?"
    r"\s*[:=]\s*)('[^']*'|\"[^\"]*\"|[^,\s})]+)",
    re.IGNORECASE,
)


class JsonLines(logging.Formatter):
    """One JSON object per record: time (UTC, RFC 3339), level, logger, message, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ).replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False)


class Redact(logging.Filter):
    """Masks password-like arguments and key file paths (kafka-python's DEBUG records print
    the configuration of the clients they build), and every spelling of the ``secrets``
    given, in a record's message, exception and stack."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        forms = {form for secret in secrets if secret for form in spellings(secret)}
        self._forms = sorted(forms, key=len, reverse=True)  # a longer one may hold a shorter

    def mask(self, text: str) -> str:
        for form in self._forms:  # first: the pattern could cut a value short, at a quote
            text = text.replace(form, MASK)
        return _SECRET.sub(rf"\1'{MASK}'", text)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # the formatter would print the arguments with its complaint
            message = f"{record.msg} (its arguments do not fit it: not shown)"
        redacted = self.mask(message)
        if redacted != message or record.args:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = _PLAIN.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        return True


def spellings(secret: str) -> set[str]:
    """``secret`` as a record can show it: as it is, inside a Python ``str`` or ``bytes``
    representation (kafka-python prints the bytes it sends), and inside a JSON string."""
    return {secret, repr(secret)[1:-1], repr(secret.encode())[2:-1],
            json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}


_PLAIN = logging.Formatter()

class TextLines(logging.Formatter):
    """``time level logger: message``, one line per record (an exception's lines below it).
    A message may quote what a message said (a rejection's detail): it is ``printable``, so
    no input forges a log line or drives a terminal."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)


def setup(
    level: Level = "info", form: Format = "text", unsafe: bool = False,
    secrets: Iterable[str] = (),
) -> None:
    """Configure the root logger of this process (the state process repeats it); the values
    of ``secrets`` are masked in every line."""
    global _settings
    _settings = Settings(level, form, unsafe)
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonLines() if form == "json"
        else TextLines("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(Redact(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    debug = level == "debug"
    logging.getLogger("kafka").setLevel(logging.DEBUG if debug else logging.WARNING)
    for name in PROTOCOL_LOGGERS:  # NOTSET: as the kafka logger
        logging.getLogger(name).setLevel(logging.INFO if debug and not unsafe else logging.NOTSET)


def settings() -> Settings:
    """What ``setup`` was last called with, but the secrets (for the state process)."""
    return _settings
