"""The local broker of the integration tests is the product's own (monitor.broker)."""

from monitor.broker import FAST_GROUP, Broker, free_port

__all__ = ["FAST_GROUP", "Broker", "free_port"]
