"""HTTPS and mutual TLS on the metrics endpoint, with certificates made by openssl."""

from __future__ import annotations

import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from monitor.config import ConfigError, parse_config
from tests.conftest import DATA
from tests.test_exposition import free_port


def openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    assert binary is not None, "openssl is part of the machine's base system"
    subprocess.run([binary, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def certificates(directory: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=test-ca", cwd=directory)
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"),
                            ("client", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN={name}", cwd=directory)
        (directory / f"{name}.ext").write_text(extension + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile",
                f"{name}.ext", cwd=directory)


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
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, context=client, timeout=5) as response:
                    body = response.read().decode()
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the HTTPS server did not come up"
                time.sleep(0.2)
        assert 'search_queries_total{query_class="travel"} 2.0' in body
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url, context=trusted, timeout=5)  # no client certificate
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err


def test_tls_settings_come_in_pairs() -> None:
    with pytest.raises(ConfigError, match="tls_certfile and tls_keyfile go together"):
        parse_config('[http]\ntls_certfile = "a.crt"\n')
    with pytest.raises(ConfigError, match="needs tls_certfile"):
        parse_config('[http]\ntls_client_cafile = "ca.crt"\n')
