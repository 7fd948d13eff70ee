"""Faults met without a daemon: discarded checkpoints are kept, secrets stay out of DEBUG logs."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from monitor import logs
from monitor.state.checkpoint import DirStore
from tests.support.broker import free_port
from tests.support.daemon import EVENTS


def test_every_discarded_checkpoint_is_kept(tmp_path: Path) -> None:
    store = DirStore(tmp_path)
    keys = {(EVENTS, p) for p in range(3)}
    for key in keys:
        store.path(key).parent.mkdir(parents=True, exist_ok=True)
        store.path(key).write_bytes(b"garbage " + str(key).encode())
    store.discard(keys)
    store.discard(set())
    for key in keys:
        store.path(key).write_bytes(b"more garbage " + str(key).encode())
    store.discard(keys)
    kept = sorted(p.name for p in store.path((EVENTS, 0)).parent.iterdir())
    assert len([name for name in kept if ".discarded" in name]) == 6, kept


def test_secrets_stay_out_of_debug_logs() -> None:

    logs.setup("debug")
    stream = io.StringIO()
    handler = logging.getLogger().handlers[0]
    handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        with pytest.raises(Exception):  # noqa: B017 (nobody listens: any failure will do)
            KafkaAdminClient(
                bootstrap_servers=f"127.0.0.1:{free_port()}", security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PLAIN", sasl_plain_username="u",
                sasl_plain_password="s3cret-value", ssl_keyfile="/etc/secret/key.pem",
                request_timeout_ms=500, api_version_auto_timeout_ms=500,
            )
    finally:
        logs.setup("info")
    text = stream.getvalue()
    assert "Starting KafkaAdminClient with configuration" in text
    assert "s3cret-value" not in text and "/etc/secret/key.pem" not in text
