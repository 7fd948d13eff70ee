"""Messages built to break a decoder (invalid UTF-8, deep nesting, huge texts, too many
labels), each with the rejection reason expected of it, and good traffic to put them among."""

from __future__ import annotations

import json

from tests.support.events import click, query


def good_traffic() -> list[bytes]:
    lines = []
    for i in range(30):
        lines.append(query(f"g{i}", 20.0 * i, f"s{i % 6}", f"q{i}", klass="news"))
        if i % 2:
            lines.append(click(f"c{i}", 20.0 * i + 3, f"s{i % 6}", f"q{i}"))
    return lines


def deep(levels: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    """A valid query with an unknown field nested ``levels`` deep."""
    document = json.loads(query("deep", 100.0, "s-deep", "q-deep"))
    inner = opener * levels + closer * levels
    return json.dumps(document)[:-1].encode() + b', "extra": ' + inner + b"}"


def deep_objects(levels: int) -> bytes:
    document = json.loads(query("deepo", 100.0, "s-deep", "q-deep"))
    inner = b'{"a":' * levels + b"1" + b"}" * levels
    return json.dumps(document)[:-1].encode() + b', "extra": ' + inner + b"}"


def invalid_utf8(field: str) -> bytes:
    document = json.loads(query("bad-utf8", 100.0, "s-bad", "q-bad"))
    document[field] = "@@"
    return json.dumps(document).encode().replace(b"@@", b"caf\xc3\x28 \xff\xfe")


ADVERSARIAL: list[tuple[str, bytes, str | None]] = [
    ("invalid UTF-8 in query_text", invalid_utf8("query_text"), "invalid_json"),
    ("invalid UTF-8 in event_id", invalid_utf8("event_id"), "invalid_json"),
    ("invalid UTF-8, UBI", b'{"user_query": "\xff", "query_id": "u", "timestamp": 1}',
     "invalid_json"),
    ("invalid UTF-8, judgment", b'{"type": "judgment", "sample_id": "\xc0\xaf"}',
     "invalid_json"),
    ("lone surrogate escape", query("sur", 100.0, "s", "q").replace(b'"q"', b'"\\ud800"'),
     "invalid_json"),
    ("arrays 1,000 deep", deep(1000), "too_deep"),
    ("arrays 65 deep", deep(65), "too_deep"),
    ("arrays 60 deep", deep(60), None),
    ("objects 1,000 deep", deep_objects(1000), "too_deep"),
    ("objects 100,000 deep", deep_objects(100_000), "too_deep"),
    ("UBI event 5,000 deep", b'{"action_name": "click", "x": ' + b"[" * 5000 + b"]" * 5000
     + b"}", "too_deep"),
    ("brackets inside a string", query("br", 100.0, "s-br", "q-br", text="[" * 5000),
     None),
    ("a 1 MB query text of e-mails", query(
        "long", 100.0, "s-long", "q-long", text="a@" * 400_000 + "x@example.com"), None),
    ("a 900 KB query text of digits", query(
        "digits", 100.0, "s-dig", "q-dig", text="1 " * 450_000), None),
    ("a 900 KB judged text", json.dumps({
        "type": "qrels", "timestamp": 100_000, "query_text": "a." * 450_000,
        "labels": {"d1": 1}}).encode(), None),
    ("20,000 labels", json.dumps({
        "type": "qrels", "timestamp": 100_000, "query_text": "many",
        "labels": {f"d{i}": 1 for i in range(20_000)}}).encode(), "schema"),
]
