"""The decoder chain: every message's bytes to an event, whatever its input format.

Before any decoder reads a message, the chain bounds it: larger than ``[input]
max_event_bytes`` is ``too_large``; arrays and objects nested deeper than ``max_depth`` is
``too_deep`` (one linear pass, before any decoder recurses). Then the formats of ``[input]
formats`` try the message in order; each owns the whole bytes-to-event conversion, event
time included (``monitor.inputs.timestamps``), and answers None for a message that is not
its format. A new input format is one module of ``monitor/inputs`` with a ``DECODER``
class, and its name in ``formats``.
"""

from __future__ import annotations

import importlib
from typing import Protocol

import msgspec

from monitor.config import Config
from monitor.inputs.brackets import brackets
from monitor.inputs.events import (
    Decoded,
    IgnoredAction,
    JudgedMessage,
    Reason,
    Rejection,
    json_value,
    nested_deeper,
    too_deep,
    too_large,
)
from monitor.inputs.native import NativeDecoder

Result = Decoded | JudgedMessage | Rejection | IgnoredAction
"""What the chain makes of a message: a live event with its event time (epoch seconds), a
judged message, a rejection, or a valid action that is not measured."""


class Decoder(Protocol):
    """One input format."""

    def __init__(self, config: Config) -> None: ...

    def decode(self, data: bytes, hint: str | None) -> Result | None:
        """The message as this format reads it, or None when it is not this format's.
        ``hint``: the index a ``_bulk`` export names for it."""
        ...


UNRECOGNISED = Rejection(Reason.UNKNOWN_TYPE, "neither 'type' nor a UBI query or event record")


class DecoderChain:
    """The formats of ``[input] formats``, in order, behind the size and depth bounds."""

    def __init__(self, config: Config) -> None:
        self.max_bytes = config.input.max_event_bytes
        self.max_depth = config.input.max_depth
        self.decoders: list[Decoder] = [
            importlib.import_module(f"monitor.inputs.{name}").DECODER(config)
            for name in config.input.formats
        ]
        first = self.decoders[0]
        self._native = first if isinstance(first, NativeDecoder) else None
        """The first format, when it is the native one (the common case): a direct call."""
        self._others = self.decoders[1:] if self._native is not None else self.decoders
        """The formats tried after it."""

    def read(self, data: bytes, hint: str | None = None) -> Result:
        if len(data) > self.max_bytes:
            return too_large(data, self.max_bytes)
        if data[:1] != b"{":
            data, hint = indexed(data, hint)
        if brackets(data) > self.max_depth and nested_deeper(data, self.max_depth):
            return too_deep(self.max_depth)
        native = self._native
        if native is not None:
            found = native.decode(data, hint)
            if found is not None:
                return found
        for decoder in self._others:
            other = decoder.decode(data, hint)
            if other is not None:
                return other
        hit = search_hit(data, hint)
        if hit is not None:  # a document as a search returns it: its ``_source`` is read
            return self.read(*hit)
        return UNRECOGNISED


def search_hit(data: bytes, hint: str | None) -> tuple[bytes, str | None] | None:
    """A search hit (``{"_index": ..., "_id": ..., "_source": {...}}``: a line of an
    elasticdump or ``_search`` export): its document, and its index as the hint; None for
    any other message (a hit's ``_source`` is read once: one that is a hit again is not)."""
    try:
        value = json_value(data)
    except (msgspec.MsgspecError, UnicodeDecodeError):
        return None
    if type(value) is not dict:
        return None
    document = value.get("_source")
    if type(document) is not dict or "_source" in document:
        return None
    index = value.get("_index")
    return msgspec.json.encode(document), index if type(index) is str else hint


MAX_INDEX_NAME = 255
"""The longest index name (OpenSearch's limit, in bytes)."""


def indexed(data: bytes, hint: str | None) -> tuple[bytes, str | None]:
    """A line of the form ``<index>\t<json>`` (an export of documents with the index each
    came from): the document, and its index as the hint; any other data as it is."""
    index, tab, document = data.partition(b"\t")
    if not tab or len(index) > MAX_INDEX_NAME or document.lstrip()[:1] != b"{":
        return data, hint
    try:
        name = index.strip().decode()
    except UnicodeDecodeError:
        return data, hint
    if not name or not name.isprintable() or "{" in name or '"' in name:
        return data, hint
    return document, name
