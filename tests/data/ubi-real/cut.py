"""Cuts the UBI test copies of this directory from their sources (README.md says which).

    python3 tests/data/ubi-real/cut.py ubi_queries_events.ndjson log_events.zip [out_dir]

Lines are copied as they are, byte for byte; only whole searches (Chorus) and whole clients
(kata) are kept, in the order of the source.
"""

from __future__ import annotations

import gzip
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

CHORUS_OUT = "chorus-ubi-subset.ndjson.gz"
KATA_OUT = "kata-log-subset.tsv.gz"
KATA_MEMBER = "log_events_new.json"

ORDINARY = 8  # Chorus searches with hits and one text, the first in file order
ORPHANS = 3  # query_ids with clicks but no query record (the export has one)
ESCI = 20  # query_ids of the esci_ubi_sample application
DEMO = 3  # query_ids of the ubi-demo events (no query records in this export)
KATA_CLIENTS = 14  # clients of the kata log, in order of first appearance


def is_aggregation(doc: dict[str, Any]) -> bool:
    """A facet request: its logged request body asks for no hits (size 0)."""
    body = doc.get("query")
    return isinstance(body, str) and json.loads(body).get("size") == 0


def cut_chorus(data: bytes) -> bytes:
    lines = data.split(b"\n")
    assert lines[-1] == b"" and len(lines) % 2 == 1, "a _bulk file: action and source lines"
    pairs = [(lines[i], lines[i + 1]) for i in range(0, len(lines) - 1, 2)]
    docs = [(json.loads(a)["index"]["_index"], json.loads(s)) for a, s in pairs]
    queries: dict[str, list[dict[str, Any]]] = {}
    for index, doc in docs:
        if index == "ubi_queries":
            queries.setdefault(doc["query_id"], []).append(doc)
    keep: list[str] = []

    def add(query_id: str) -> None:
        if query_id not in keep:
            keep.append(query_id)

    chorus = [q for q, records in queries.items() if records[0]["application"] == "Chorus"]
    for q in chorus:  # a text refined under one query_id
        if len({d["user_query"] for d in queries[q]}) > 1:
            add(q)
    for q in chorus:  # a hits request that found nothing
        if any(not is_aggregation(d) and not d["query_response_hit_ids"] for d in queries[q]):
            add(q)
    for q in [q for q in chorus if q not in keep][:ORDINARY]:
        add(q)
    orphans: list[str] = []
    for index, doc in docs:
        q = doc.get("query_id")
        if (index == "ubi_events" and doc["action_name"] == "click" and q not in queries
                and q not in orphans):
            orphans.append(q)
    for q in orphans[:ORPHANS]:
        add(q)
    esci = [q for q, records in queries.items() if records[0]["application"] != "Chorus"]
    for q in esci[:ESCI]:
        add(q)
    demo: list[str] = []
    for _, doc in docs:
        if doc["application"] == "ubi-demo" and doc["query_id"] not in demo:
            demo.append(doc["query_id"])
    for q in demo[:DEMO]:
        add(q)
    kept = set(keep)
    out = [
        a + b"\n" + s + b"\n"
        for (a, s), (_, doc) in zip(pairs, docs, strict=True)
        if doc.get("query_id") in kept or not doc.get("query_id")  # and events with no query_id
    ]
    return b"".join(out)


def cut_kata(data: bytes) -> bytes:
    lines = data.split(b"\n")
    assert lines[-1] == b"", "every line ends with a newline"
    records = [(line + b"\n", json.loads(line.split(b"\t", 1)[1])) for line in lines[:-1]]
    clients: list[str] = []
    for _, doc in records:
        if doc["client_id"] not in clients:
            clients.append(doc["client_id"])
    kept = set(clients[:KATA_CLIENTS])
    sessions: dict[str, set[str]] = {}
    for _, doc in records:
        session = (doc.get("event_attributes") or {}).get("session_id")
        if session is not None:
            sessions.setdefault(session, set()).add(doc["client_id"])
    grown = True
    while grown:  # whole sessions: a session shared by two clients takes both
        grown = False
        for owners in sessions.values():
            if owners & kept and not owners <= kept:
                kept |= owners
                grown = True
    return b"".join(line for line, doc in records if doc["client_id"] in kept)


def write_gzip(path: Path, data: bytes) -> None:
    """Gzip without a file name or time in the header: the same bytes on every run."""
    with open(path, "wb") as raw, gzip.GzipFile(
        filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0
    ) as packed:
        packed.write(data)


def main(argv: list[str]) -> None:
    chorus_path, kata_zip = Path(argv[1]), Path(argv[2])
    out = Path(argv[3]) if len(argv) > 3 else Path(__file__).parent
    write_gzip(out / CHORUS_OUT, cut_chorus(chorus_path.read_bytes()))
    with zipfile.ZipFile(kata_zip) as archive:
        write_gzip(out / KATA_OUT, cut_kata(archive.read(KATA_MEMBER)))


if __name__ == "__main__":
    main(sys.argv)
