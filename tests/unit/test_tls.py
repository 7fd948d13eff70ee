"""TLS settings of the metrics endpoint come in pairs."""

from __future__ import annotations

import pytest

from monitor.config import ConfigError, parse_config


def test_tls_settings_come_in_pairs() -> None:
    with pytest.raises(ConfigError, match="tls_certfile and tls_keyfile go together"):
        parse_config('[http]\ntls_certfile = "a.crt"\n')
    with pytest.raises(ConfigError, match="needs tls_certfile"):
        parse_config('[http]\ntls_client_cafile = "ca.crt"\n')
