"""Configuration: defaults, partial files, and errors that say what is accepted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from monitor.config import Config, ConfigError, load_config, parse_config

ROOT = Path(__file__).parent.parent


def test_every_key_has_a_default_and_the_example_is_valid() -> None:
    assert parse_config("") == Config()
    example = load_config(ROOT / "config.example.toml")
    assert example == Config(), "config.example.toml documents the defaults"


def test_a_file_with_only_what_differs_is_valid() -> None:
    config = parse_config('[sessions]\ntimeout = "10m"\n[http]\nlisten = "0.0.0.0:9200"')
    assert config.sessions.timeout == 600.0 and config.http.address == ("0.0.0.0", 9200)
    assert config.kafka.events_topic == "search-events"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sessions]\ntimout = 5", "sessions.timout: unknown key"),
        ('[sessions]\ntimeout = "soon"', "sessions.timeout = 'soon': expected a duration"),
        ('[http]\nlisten = "9108"', "http.listen = '9108': expected HOST:PORT"),
        ('[offline]\nmeasures = ["nDCG@x"]', "expected NAME[(param=value,...)][@k]"),
        ('[query_classes]\nnames = ["a", "a"]', "class names must be distinct"),
        ('[[query_classes.rules]]\nclass = "x"\npattern = "("',
         "not a regular expression"),
        ('[[query_classes.rules]]\nclass = "x"', "at least one of pattern"),
        ("[sessions\n", "not valid TOML"),
    ],
)
def test_errors_name_the_key_and_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(text)
    assert message in str(error.value)


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


def test_the_example_names_every_key() -> None:
    import tomllib

    written = tomllib.loads((ROOT / "config.example.toml").read_text())
    text = (ROOT / "config.example.toml").read_text()
    for section, model in Config.model_fields.items():
        assert section in written, section
        assert model.annotation is not None
        for key, field in model.annotation.model_fields.items():
            name = field.alias or key
            assert name in written[section] or f"# {name} =" in text, f"{section}.{name}"
