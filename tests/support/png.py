"""The pixels of a PNG (8-bit RGB or RGBA, not interlaced: what Chromium's screenshots are),
read with zlib alone."""

from __future__ import annotations

import struct
import zlib


def pixels(data: bytes) -> list[tuple[int, int, int]]:
    """Every pixel's (red, green, blue), row by row."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, chunks, header = 8, b"", b""
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and not interlace, "an 8-bit RGB(A) PNG"
    size = 3 if colour == 2 else 4
    raw = zlib.decompress(chunks)
    stride = width * size
    previous = bytearray(stride)
    out = []
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - size] if i >= size else 0
            up = previous[i]
            corner = previous[i - size] if i >= size else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                near = min((abs(guess - left), 0, left), (abs(guess - up), 1, up),
                           (abs(guess - corner), 2, corner))
                line[i] = (line[i] + near[2]) & 0xFF
        out += [(line[i], line[i + 1], line[i + 2]) for i in range(0, stride, size)]
        previous = line
    return out
