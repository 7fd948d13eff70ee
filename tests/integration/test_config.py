"""Configuration through the commands: `check-config` and `run` name the key that is wrong, with
the environment over the file, and never print a secret."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.config import ConfigError, load_config, parse_config
from tests.support.files import ROOT


def test_check_config_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[sessions]\ntimeout = -3\nlateness = "1m"\n')
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "check-config", str(bad)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "sessions.timeout = -3: a duration cannot be negative" in done.stderr
    assert "sessions.lateness: unknown key" in done.stderr
    good = subprocess.run(
        [sys.executable, "-m", "monitor", "check-config", str(ROOT / "config.example.toml")],
        capture_output=True, text=True, timeout=60,
    )
    assert good.returncode == 0, good.stderr


def test_the_environment_overrides_the_file_and_check_config_validates_both(
    tmp_path: Path,
) -> None:
    path = tmp_path / "searchmon.toml"
    path.write_text('[kafka]\ngroup_id = "from-file"\nmax_poll_records = 10\n')
    config = load_config(path, {
        "SEARCHMON_KAFKA__GROUP_ID": "from-env",
        "SEARCHMON_KAFKA__BOOTSTRAP_SERVERS": "k1:9092, k2:9092",
        "SEARCHMON_SESSIONS__TIMEOUT": "10m",
        "SEARCHMON_OFFLINE__WINDOWS": '["1h", "1d"]',
        "SEARCHMON_HTTP__LISTEN": "0.0.0.0:9300",
        "SEARCHMON_WRITE_SOMETHING": "not a setting: no double underscore",
        "OTHER__THING": "ignored",
    })
    assert config.kafka.group_id == "from-env" and config.kafka.max_poll_records == 10
    assert config.kafka.bootstrap_servers == ["k1:9092", "k2:9092"]
    assert config.sessions.timeout == 600.0 and config.offline.windows == [3600.0, 86400.0]
    assert config.http.listen == "0.0.0.0:9300"
    with pytest.raises(ConfigError, match="SEARCHMON_KAFAK__GROUP_ID: no section"):
        load_config(path, {"SEARCHMON_KAFAK__GROUP_ID": "x"})
    with pytest.raises(ConfigError, match=r"kafka\.max_poll_records = 'many'"):
        load_config(path, {"SEARCHMON_KAFKA__MAX_POLL_RECORDS": "many"})
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "check-config", str(path)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "SEARCHMON_SESSIONS__TIMEOUT": "-5"},
    )
    assert done.returncode == 2 and "sessions.timeout" in done.stderr, done.stderr


def test_secrets_come_from_files_and_are_never_printed(tmp_path: Path) -> None:
    secret = tmp_path / "sasl"
    secret.write_text("s3cret-value\n")
    base = '[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_mechanism = "PLAIN"\n'
    from_file = parse_config(base + f'sasl_password_file = "{secret}"\n')
    from_env = parse_config(base, environ={"SEARCHMON_KAFKA__SASL_PASSWORD_FILE": str(secret)})
    for config in (from_file, from_env):
        assert config.kafka.client_options()["sasl_plain_password"] == "s3cret-value"
    with pytest.raises(ConfigError, match="set one of the two"):
        parse_config(base + f'sasl_password = "x"\nsasl_password_file = "{secret}"\n')
    with pytest.raises(ConfigError, match="cannot read"):
        parse_config(base + f'sasl_password_file = "{tmp_path / "missing"}"\n')
    # a password of the wrong TOML type: the error names the key, never the value
    path = tmp_path / "typed.toml"
    path.write_text(base + "sasl_password = 12345678\n")
    for command in ("check-config", "run"):
        args = [sys.executable, "-m", "monitor", command]
        args += [str(path)] if command == "check-config" else ["--config", str(path)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "kafka.sasl_password" in done.stderr and "12345678" not in done.stderr
