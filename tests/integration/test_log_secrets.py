"""No secret in any log line: ``searchmon run --log-level debug`` authenticating with
SASL/PLAIN through a SASL listener (tests/sasl_proxy.py) in front of the local broker, the
password from the configuration file or the environment, text and JSON lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from tests.support.broker import FAST_GROUP, Broker, free_port
from tests.support.events import query
from tests.support.http import scrape
from tests.support.sasl_proxy import SaslProxy

USER = "searchmon"
PASSWORD = f"Pw-{uuid.uuid4().hex}"
"""Unique: any line holding it, or its random part, shows the secret."""
FETCH = 1


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[SaslProxy]:
    """A broker of its own that advertises the SASL proxy in front of it: every client
    reaches it through the proxy, authenticated."""
    port = free_port()
    proxy = SaslProxy(port, {USER: PASSWORD}).start()
    broker = Broker(port, advertised=proxy.address).start()
    try:
        yield proxy
    finally:
        broker.stop()
        proxy.stop()


def sasl_options() -> dict[str, str]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": USER, "sasl_plain_password": PASSWORD}


def fill(proxy: SaslProxy, topic: str, count: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=proxy.address, **sasl_options())
    try:
        admin.create_topics([NewTopic(topic, 2, 1), NewTopic(f"{topic}-judgments", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=proxy.address, acks="all", **sasl_options())
    try:
        for i in range(count):
            producer.send(topic, key=f"s{i}".encode(), value=query(f"e{i}", i, f"s{i}", f"q{i}"))
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)


def run_daemon(
    tmp: Path, proxy: SaslProxy, topic: str, source: str, form: str, options: tuple[str, ...]
) -> tuple[subprocess.Popen[bytes], int]:
    """``searchmon run`` at debug level, its standard output and error in files of ``tmp``
    (the state process writes to the same ones); the password in the configuration file or
    in the environment, as ``source`` says."""
    port = free_port()
    config = tmp / "searchmon.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = ["{proxy.address}"]\ngroup_id = "g-{topic}"\n'
        f'events_topic = "{topic}"\njudgments_topic = "{topic}-judgments"\n'
        'security_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "PLAIN"\n'
        f'sasl_username = "{USER}"\n'
        + (f'sasl_password = "{PASSWORD}"\n' if source == "file" else "")
        + "".join(f"{k} = {v}\n" for k, v in FAST_GROUP.items())
        + f'[http]\nlisten = "127.0.0.1:{port}"\n'
        f'[state]\ndir = "{tmp / "state"}"\ncheckpoint_interval = "500ms"\n'
        'store = "kafka"\nchangelog_replication_factor = 1\n'
    )
    environ = dict(os.environ)
    if source == "environment":
        environ["SEARCHMON_KAFKA__SASL_PASSWORD"] = PASSWORD
    with (tmp / "stdout.log").open("ab") as out, (tmp / "stderr.log").open("ab") as err:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "monitor", "run", "--config", str(config),
             "--log-level", "debug", "--log-format", form, *options],
            stdout=out, stderr=err, env=environ,
        )
    return daemon, port


def lines_of(tmp: Path) -> list[str]:
    return [line for name in ("stdout.log", "stderr.log")
            for line in (tmp / name).read_text(errors="replace").splitlines()]


@pytest.mark.parametrize(("source", "form", "options"), [
    ("file", "text", ()),
    ("file", "json", ()),
    ("environment", "text", ()),
    ("environment", "json", ()),
    ("file", "text", ("--log-unsafe",)),
], ids=["file-text", "file-json", "env-text", "env-json", "file-text-unsafe"])
def test_the_sasl_password_is_in_no_log_line_at_debug_level(
    tmp_path: Path, sasl_broker: SaslProxy, source: str, form: str, options: tuple[str, ...]
) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    sent = 40
    fill(sasl_broker, topic, sent)
    logins, fetches = sasl_broker.authenticated, sasl_broker.forwarded[FETCH]
    daemon, port = run_daemon(tmp_path, sasl_broker, topic, source, form, options)
    try:
        deadline = time.monotonic() + 120
        while scrape(port).get("searchmon_events_read_total") != sent:
            assert daemon.poll() is None, "\n".join(lines_of(tmp_path)[-80:])
            assert time.monotonic() < deadline, "\n".join(lines_of(tmp_path)[-80:])
            time.sleep(0.3)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    lines = lines_of(tmp_path)
    assert daemon.returncode == 0, "\n".join(lines[-80:])
    # it did log in through the proxy, and read the topic through it
    assert sasl_broker.authenticated > logins and sasl_broker.forwarded[FETCH] > fetches
    assert sasl_broker.refused == 0
    if form == "json":
        records = [json.loads(line) for line in lines if line.startswith("{")]
        assert any(r["level"] == "debug" and r["logger"].startswith("kafka.") for r in records)
        messages = [r["message"] for r in records]
    else:
        assert any(" DEBUG kafka." in line for line in lines)
        messages = lines
    assert any(f"Authenticated as {USER} via SASL / Plain" in m for m in messages)
    if options:  # the protocol records themselves are logged, with the password masked
        assert any("SaslAuthenticateRequest" in m for m in messages)
    secret_part = PASSWORD.removeprefix("Pw-")
    leaks = [line for line in lines if secret_part in line]
    assert not leaks, f"{len(leaks)} lines show the password, first: {leaks[0][:300]}"


