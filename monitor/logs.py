"""Logging of the commands: a level, plain or JSON lines, and kafka-python kept quiet.

kafka-python logs every reconnect, rebalance step and slow task of its IO thread; its
records pass at WARNING and above unless the level is ``debug``. Secrets never reach a
record: the configuration prints no secret value, and kafka-python's own DEBUG records
that carry a client's arguments are filtered (``Redact``).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Literal

Level = Literal["debug", "info", "warning", "error"]
Format = Literal["text", "json"]
LEVELS: tuple[Level, ...] = ("debug", "info", "warning", "error")
FORMATS: tuple[Format, ...] = ("text", "json")

_settings: tuple[Level, Format] = ("info", "text")

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
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class Redact(logging.Filter):
    """Masks password-like arguments and key file paths in a record's message
    (kafka-python's DEBUG records print the configuration of the clients they build)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _SECRET.sub(r"\1'**********'", message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def setup(level: Level = "info", form: Format = "text") -> None:
    """Configure the root logger of this process (the state process repeats it)."""
    global _settings
    _settings = (level, form)
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonLines() if form == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(Redact())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("kafka").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


def settings() -> tuple[Level, Format]:
    """What ``setup`` was last called with (for the state process)."""
    return _settings
