"""HTTPS and mutual TLS on the metrics endpoint, with certificates made by openssl."""

from __future__ import annotations

import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.broker import free_port
from tests.support.files import DATA
from tests.support.tls import certificates
from tests.support.wait import wait_for


def test_metrics_over_mutual_tls(tmp_path: Path) -> None:
    certificates(tmp_path)
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(
        f'[http]\nlisten = "127.0.0.1:{port}"\ntls_certfile = "{tmp_path / "server.crt"}"\n'
        f'tls_keyfile = "{tmp_path / "server.key"}"\n'
        f'tls_client_cafile = "{tmp_path / "ca.crt"}"\n'
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor", "replay", str(DATA / "replay_small.jsonl"),
         "--config", str(config), "--serve"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    url = f"https://127.0.0.1:{port}/metrics"
    trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client.load_cert_chain(str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
    try:
        def page() -> str:
            with urllib.request.urlopen(url, context=client, timeout=5) as response:
                return str(response.read().decode())

        body = wait_for(page, "the HTTPS server comes up", 30, every=0.2,
                        ignoring=(urllib.error.URLError, ConnectionError))
        assert 'search_queries_total{query_class="travel"} 2.0' in body
        assert 'searchmon_http_info{scheme="https"} 1.0' in body  # the alerts' page links
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url, context=trusted, timeout=5)  # no client certificate
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err


