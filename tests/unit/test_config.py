"""Configuration: defaults, partial files, and errors that say what is accepted."""

from __future__ import annotations

import pickle
import typing
from pathlib import Path
from typing import Any

import pytest

from monitor.config import Config, ConfigError, load_config, parse_config, parse_duration
from tests.support.files import ROOT


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
        ("[kafka]\nsession_timeout_ms = 1500",
         "heartbeat_interval_ms (2000) must be below session_timeout_ms (1500)"),
    ],
)
def test_errors_name_the_key_and_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(text)
    assert message in str(error.value)


def test_the_example_names_every_key() -> None:
    import tomllib

    written = tomllib.loads((ROOT / "config.example.toml").read_text())
    text = (ROOT / "config.example.toml").read_text()
    for section, model in Config.model_fields.items():
        assert model.annotation is not None
        if typing.get_origin(model.annotation) is list:  # tables of their own, commented
            (table,) = typing.get_args(model.annotation)
            assert f"# [[{section}]]" in text, section
            for key, field in table.model_fields.items():
                assert f"# {field.alias or key} =" in text, f"{section}.{key}"
            continue
        assert section in written, section
        for key, field in model.annotation.model_fields.items():
            name = field.alias or key
            assert name in written[section] or f"# {name} =" in text, f"{section}.{name}"


def test_the_state_process_gets_the_real_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon hands its Config to the state process (fork: inherited; spawn: pickled
    over a pipe), not a JSON dump, which would mask the SASL password."""
    from monitor.run import worker

    seen = tmp_path / "seen-by-the-state-process"
    real_serve = worker.serve

    def serve(connection: Any, parents_end: Any, config: Config, *rest: Any) -> None:
        seen.write_text(config.kafka.client_options()["sasl_plain_password"])
        real_serve(connection, parents_end, config, *rest)

    monkeypatch.setattr(worker, "serve", serve)
    config = Config.model_validate({
        "kafka": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                  "sasl_username": "u", "sasl_password": "s3cret-value"},
        "state": {"dir": str(tmp_path / "state")},
    })
    state_process = worker.Worker(config, "replica-1", discard=False)
    state_process.close()
    assert seen.read_text() == "s3cret-value"
    again = pickle.loads(pickle.dumps(config))  # what spawn sends over its pipe
    assert again.kafka.client_options()["sasl_plain_password"] == "s3cret-value"


def test_a_duration_is_a_number_of_seconds_with_a_unit_or_without() -> None:
    """``3600``, as a number or as a string (a command-line argument), is 3600 seconds."""
    assert parse_duration(3600) == parse_duration("3600") == parse_duration("1h") == 3600.0
    assert parse_duration("1.5") == 1.5
    assert parse_config('[sessions]\ntimeout = "900"\n').sessions.timeout == 900.0
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration("1 hour")
