"""Small builders of wire-format events for tests (docs/reference/events.md)."""

from __future__ import annotations

import json
from typing import Any

T0 = 1_790_000_000.0  # an arbitrary epoch second


def stamp(seconds: float) -> int:
    """Epoch milliseconds ``seconds`` after T0."""
    return round((T0 + seconds) * 1000)


def line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


def query(
    event_id: str, at: float, session: str, query_id: str, *, text: str = "cheap flights",
    results: int = 10, klass: str | None = "travel", **extra: Any,
) -> bytes:
    event = {
        "type": "query", "event_id": event_id, "timestamp": stamp(at), "session_id": session,
        "query_id": query_id, "query_text": text,
        "result_ids": [f"d{i}" for i in range(results)], **extra,
    }
    if klass is not None:
        event["query_class"] = klass
    return line(event)


def click(
    event_id: str, at: float, session: str, query_id: str, position: int = 1, **extra: Any
) -> bytes:
    return line({
        "type": "click", "event_id": event_id, "timestamp": stamp(at), "session_id": session,
        "query_id": query_id, "doc_id": f"d{position - 1}", "position": position, **extra,
    })


def dwell(event_id: str, at: float, session: str, query_id: str, dwell_ms: float) -> bytes:
    return line({
        "type": "dwell", "event_id": event_id, "timestamp": stamp(at), "session_id": session,
        "query_id": query_id, "doc_id": "d0", "dwell_ms": dwell_ms,
    })


def conversion(event_id: str, at: float, session: str, query_id: str | None = None) -> bytes:
    event: dict[str, Any] = {
        "type": "conversion", "event_id": event_id, "timestamp": stamp(at), "session_id": session,
    }
    if query_id is not None:
        event["query_id"] = query_id
    return line(event)
