"""The hand counts of README.md, printed for a Chorus export and a kata log (full or cut).

    python3 tests/data/ubi-real/counts.py chorus FILE   # a _bulk file, .gz or not
    python3 tests/data/ubi-real/counts.py kata FILE     # <index>\\t<json> lines, .gz or not
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

Doc = dict[str, Any]

SUCCESS_DWELL = 30.0  # seconds: searchmon's [sessions] success_dwell default


def read(path: str) -> bytes:
    data = Path(path).read_bytes()
    return gzip.decompress(data) if path.endswith(".gz") else data


def show(name: str, value: object) -> None:
    print(f"{name}: {value}")


def ratio(part: int, whole: int) -> str:
    return f"{part}/{whole} = {part / whole:.4f}" if whole else f"{part}/0"


def when(stamp: str) -> datetime:
    """Both forms of the export: ...+0000 (queries) and ...Z (events)."""
    return datetime.fromisoformat(stamp.replace("+0000", "+00:00").replace("Z", "+00:00"))


def is_aggregation(doc: Doc) -> bool:
    body = doc.get("query")
    return isinstance(body, str) and json.loads(body).get("size") == 0


def chorus(data: bytes) -> None:
    lines = data.split(b"\n")[:-1]
    docs = [(json.loads(lines[i])["index"]["_index"], json.loads(lines[i + 1]))
            for i in range(0, len(lines), 2)]
    queries = [d for index, d in docs if index == "ubi_queries"]
    events = [d for index, d in docs if index == "ubi_events"]
    show("lines", len(lines))
    show("query records", len(queries))
    show("query records by application", sorted(Counter(d["application"] for d in queries).items()))
    by_id: dict[str, list[Doc]] = defaultdict(list)
    for d in queries:
        by_id[d["query_id"]].append(d)
    show("distinct query_ids", len(by_id))
    show("query_ids with several records", sum(len(v) > 1 for v in by_id.values()))
    show("records per query_id", sorted(Counter(len(v) for v in by_id.values()).items()))
    seen: dict[str, set[str]] = {}
    reuse: Counter[str] = Counter()
    for d in queries:
        texts = seen.setdefault(d["query_id"], set())
        if texts:
            kind = "aggregation" if is_aggregation(d) else "hits request"
            reuse[("same text, " if d["user_query"] in texts else "new text, ") + kind] += 1
        texts.add(d["user_query"])
    show("records reusing a query_id seen before", sum(reuse.values()))
    show("  of which", sorted(reuse.items()))
    show("query_ids with more than one text", sum(len(t) > 1 for t in seen.values()))
    kinds: Counter[str] = Counter()
    for d in queries:
        hits = d.get("query_response_hit_ids")
        if "query" not in d:
            kinds["no request body, no hit ids field"] += 1
        else:
            kind = "aggregation (size 0)" if is_aggregation(d) else "hits request"
            kinds[kind + (", no hits" if not hits else ", hits")] += 1
    show("records by kind", sorted(kinds.items()))
    clicked = {e["query_id"] for e in events if e["action_name"] == "click"}
    first = [min(v, key=lambda d: when(d["timestamp"])) for v in by_id.values()]
    first = [d for d in first if "query_response_hit_ids" in d and not d["query_response_hit_ids"]]
    show("first-record reading: query_ids whose earliest record has no hits", len(first))
    show("  of which aggregation requests", sum(is_aggregation(d) for d in first))
    show("  of which clicked", sum(d["query_id"] in clicked for d in first))

    show("events", len(events))
    show("events by action_name", sorted(Counter(e["action_name"] for e in events).items()))
    show("events by application and action_name",
         sorted(Counter(f"{e['application']}/{e['action_name']}" for e in events).items()))
    show("events without a query_id", sum(not e.get("query_id") for e in events))
    for action in ("click", "add_to_cart", "impression"):
        some = [e for e in events if e["action_name"] == action]
        orphans = [e for e in some if e.get("query_id") not in by_id]
        show(f"{action} events whose query_id has no query record",
             f"{len(orphans)} of {len(some)} "
             f"({len({e['query_id'] for e in orphans})} query_ids)")

    for application in ("all", "Chorus", "esci_ubi_sample"):
        ids = [q for q, v in by_id.items()
               if application in ("all", v[0]["application"])
               and not all(is_aggregation(d) for d in v)]
        known = [q for q in ids if any("query_response_hit_ids" in d for d in by_id[q])]
        zero = [q for q in known if not any(d.get("query_response_hit_ids") for d in by_id[q])]
        show(f"[{application}] searches (query_ids with a hits request)", len(ids))
        show(f"[{application}] CTR (query_ids with a click / searches)",
             ratio(sum(q in clicked for q in ids), len(ids)))
        show(f"[{application}] searches whose hit ids are logged", len(known))
        show(f"[{application}] zero-result (no record of the query_id had a hit)",
             ratio(len(zero), len(known)))

    # A search as the user saw it: one text under a query_id (its hits request with the
    # aggregation requests beside it); a click goes to the text shown at its time.
    pairs: dict[tuple[str, str], list[Doc]] = defaultdict(list)
    for d in queries:
        if d["application"] == "Chorus":
            pairs[(d["query_id"], d["user_query"])].append(d)
    starts: dict[str, list[tuple[datetime, str]]] = defaultdict(list)
    for (q, text), v in pairs.items():
        starts[q].append((min(when(d["timestamp"]) for d in v), text))
    credited: set[tuple[str, str]] = set()
    for e in events:
        if e["action_name"] == "click" and e["query_id"] in starts:
            at = when(e["timestamp"])
            shown = [s for s in sorted(starts[e["query_id"]]) if s[0] <= at]
            if shown:
                credited.add((e["query_id"], shown[-1][1]))
    readings: list[tuple[str, list[tuple[str, str]]]] = [
        ("", list(pairs)), (", non-empty text", [k for k in pairs if k[1]])]
    for label, keys in readings:
        empty = [k for k in keys
                 if not any(d["query_response_hit_ids"] for d in pairs[k] if not is_aggregation(d))]
        show(f"[Chorus] searches as (query_id, text){label}", len(keys))
        show(f"[Chorus] zero-result (query_id, text){label}", ratio(len(empty), len(keys)))
        show(f"[Chorus] CTR (query_id, text){label}",
             ratio(sum(k in credited for k in keys), len(keys)))


def kata(data: bytes) -> None:
    lines = data.split(b"\n")[:-1]
    show("lines", len(lines))
    show("lines ending in CRLF", sum(line.endswith(b"\r") for line in lines))
    rows = [(line.split(b"\t", 1)[0].decode(), json.loads(line.split(b"\t", 1)[1]))
            for line in lines]
    show("lines by index", sorted(Counter(index for index, _ in rows).items()))
    queries = {d["query_id"]: d for index, d in rows if index == "ubi_queries"}
    events = [d for index, d in rows if index == "ubi_events"]
    show("query records", sum(index == "ubi_queries" for index, _ in rows))
    show("distinct query_ids", len(queries))
    zero = {q for q, d in queries.items() if not d["query_response_object_ids"]}
    show("zero-result (empty query_response_object_ids)", ratio(len(zero), len(queries)))
    texts: dict[str, set[bool]] = defaultdict(set)
    for d in queries.values():
        texts[d["user_query"]].add(not d["query_response_object_ids"])
    show("distinct texts", len(texts))
    show("texts that never found anything", sum(v == {True} for v in texts.values()))
    show("events", len(events))
    show("events by action_name", sorted(Counter(e["action_name"] for e in events).items()))
    show("events whose query_id has no query record",
         sum(e["query_id"] not in queries for e in events))
    searches = [e for e in events if e["action_name"] == "on_search"]
    show("on_search events with result_count 0", ratio(
        sum(e["event_attributes"]["result_count"] == 0 for e in searches), len(searches)))
    show("on_search result_count == length of the query's object ids", sum(
        e["event_attributes"]["result_count"]
        == len(queries[e["query_id"]]["query_response_object_ids"]) for e in searches))
    for action in ("item_click", "add_to_cart", "purchase", "global_click"):
        some = [e for e in events if e["action_name"] == action]
        show(f"{action} events on zero-result queries",
             f"{sum(e['query_id'] in zero for e in some)} of {len(some)}")
    items = [e for e in events if e["action_name"] == "item_click"]
    show("item_click object_id in its query's object ids", sum(
        e["event_attributes"]["object"]["object_id"]
        in queries[e["query_id"]]["query_response_object_ids"] for e in items))
    show("CTR (queries with an item_click / queries)",
         ratio(len({e["query_id"] for e in items} & set(queries)), len(queries)))
    show("events carrying event_attributes.dwell_time",
         sum("dwell_time" in e["event_attributes"] for e in events))
    show(f"events with dwell_time >= {SUCCESS_DWELL:g} s",
         sum(e["event_attributes"].get("dwell_time", 0) >= SUCCESS_DWELL for e in events))
    for name, key in (("session (event_attributes.session_id)", "session"),
                      ("client (client_id)", "client")):
        groups: dict[str, set[str]] = defaultdict(set)
        dwelled: set[str] = set()
        for e in events:
            g = e["event_attributes"]["session_id"] if key == "session" else e["client_id"]
            groups[g].add(e["action_name"])
            if e["event_attributes"].get("dwell_time", 0) >= SUCCESS_DWELL:
                dwelled.add(g)
        n = len(groups)
        show(f"by {name}: groups", n)
        show(f"by {name}: with an item_click or a purchase",
             ratio(sum(bool(a & {"item_click", "purchase"}) for a in groups.values()), n))
        show(f"by {name}: with an add_to_cart or a purchase",
             ratio(sum(bool(a & {"add_to_cart", "purchase"}) for a in groups.values()), n))
        show(f"by {name}: with an on_search", ratio(
            sum("on_search" in a for a in groups.values()), n))
        show(f"by {name}: with any event of dwell_time >= {SUCCESS_DWELL:g} s",
             ratio(len(dwelled), n))


if __name__ == "__main__":
    {"chorus": chorus, "kata": kata}[sys.argv[1]](read(sys.argv[2]))
