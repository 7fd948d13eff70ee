"""A configured secret is masked in log lines, in every spelling (no broker, no daemon)."""

from __future__ import annotations

import io
import json
import logging
import uuid

import pytest

from monitor import logs


def test_every_spelling_of_a_configured_secret_is_masked() -> None:
    """As it is, inside the repr of a str or of bytes, inside JSON, in an exception: a secret
    with quotes, a backslash and a non-ASCII letter, whose spellings all differ."""
    secret = f"q'u\"o\\té-{uuid.uuid4().hex}"
    random_part = secret[-32:]
    stream = io.StringIO()
    logs.setup("debug", "json", secrets=[secret])
    handler = logging.getLogger().handlers[0]
    handler.setStream(stream)  # type: ignore[attr-defined]
    log = logging.getLogger("searchmon.secrets-test")
    try:
        log.debug("as it is: %s", secret)
        log.debug("Send: %r", b"\x00user\x00" + secret.encode())
        log.debug("Request: %r", {"password": secret, "user": "u"})
        log.info("document %s", json.dumps({"p": secret}))
        log.info("document %s", json.dumps({"p": secret}, ensure_ascii=False))
        try:
            raise ValueError(f"bad login {secret!r}")
        except ValueError:
            log.exception("failed")
        log.warning("%s", "not a %s format", "too many")  # unformattable: args not shown
        protocol = [logging.getLogger(name).isEnabledFor(logging.DEBUG)
                    for name in ("kafka.protocol.parser", "kafka.net.connection",
                                 "kafka.net.sasl.plain", "kafka.conn")]
        logs.setup("debug", "text", unsafe=True, secrets=[secret])
        unsafe = logging.getLogger("kafka.protocol.parser").isEnabledFor(logging.DEBUG)
    finally:
        logs.setup("info")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 7 and all(json.loads(line) for line in lines)
    assert [random_part in line for line in lines] == [False] * 7, lines
    assert "**********" in lines[1] and "user" in lines[1]
    assert "ValueError" in json.loads(lines[5])["exception"]
    assert protocol == [False] * 4, "kafka-python's protocol records stay out at debug"
    assert unsafe and logging.getLogger("kafka").isEnabledFor(logging.DEBUG) is False


def test_a_text_line_never_carries_what_a_message_could_forge_or_send_a_terminal() -> None:
    stream = io.StringIO()
    logs.setup("info", "text")
    handler = logging.getLogger().handlers[0]
    handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        logging.getLogger("searchmon.lines-test").warning(
            "rejected: %s", "label 'a\nFAKE ERROR line\x1b[2J\u2028x\x85'"
        )
        try:
            raise ValueError("one\ntwo")
        except ValueError:
            logging.getLogger("searchmon.lines-test").exception("failed")
    finally:
        logs.setup("info")
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("rejected: label 'a\\nFAKE ERROR line\\x1b[2J\\u2028x\\x85'")
    assert lines[1].endswith("failed") and lines[2] == "Traceback (most recent call last):"
    assert not any("\x1b" in line for line in lines)


def test_top_never_shows_the_password_of_the_url_it_could_not_reach(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from monitor.cli.main import main

    code = main(["top", "--url", "http://alice:S3cretPW@127.0.0.1:1"])
    error = capsys.readouterr().err
    assert code == 2 and "S3cretPW" not in error and "alice:***@127.0.0.1:1" in error
