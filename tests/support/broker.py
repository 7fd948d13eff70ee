"""The local broker of the integration tests is the product's own (monitor.cli.broker)."""

from monitor.cli.broker import FAST_GROUP, Broker, free_port

__all__ = ["FAST_GROUP", "Broker", "free_port"]
