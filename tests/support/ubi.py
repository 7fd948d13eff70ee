"""The worked UBI example (README, "UBI"): OpenSearch UBI queries and events as an application
logs them, and the online numbers computed for them by hand."""

from __future__ import annotations

from typing import Any

QUERIES: list[dict[str, Any]] = [
    # c1 asks twice; the first query's results were not logged (impressions say what was
    # shown), the second's were
    {"query_id": "q1", "client_id": "c1", "user_query": "laptop",
     "timestamp": "2026-11-22T10:00:00.000Z", "application": "shop"},
    {"query_id": "q2", "client_id": "c1", "user_query": "laptop bag",
     "timestamp": "2026-11-22T10:00:40Z", "query_response_hit_ids": [201, "202"]},
    # c2 finds nothing and leaves
    {"query_id": "q3", "client_id": "c2", "user_query": "xyz",
     "timestamp": "2026-11-22T10:05:00+00:00", "query_response_hit_ids": []},
    # c3: no offset in the timestamp (UTC), results shown as impressions
    {"query_id": "q4", "client_id": "c3", "user_query": "phone",
     "timestamp": "2026-11-22T10:10:00"},
]


def event(action: str, query_id: str, at: str, session: str, client: str,
          **attributes: Any) -> dict[str, Any]:
    return {"action_name": action, "query_id": query_id, "session_id": session,
            "client_id": client, "timestamp": f"2026-11-22T{at}Z",
            "event_attributes": attributes}


EVENTS: list[dict[str, Any]] = [
    *(event("impression", "q1", f"10:00:0{i}", "S1", "c1",
            object={"object_id": 101 + i}, position={"ordinal": i}) for i in range(3)),
    event("click", "q1", "10:00:10", "S1", "c1", object={"object_id": 102},
          position={"ordinal": 1}),
    event("item_click", "q2", "10:00:50", "S1", "c1", object={"object_id": "201"},
          position={"ordinal": 0}),
    event("add_to_cart", "q1", "10:01:00", "S1", "c1", object={"object_id": 102}),
    *(event("impression", "q4", f"10:10:0{i}", "S3", "c3",
            object={"object_id": f"p{i}"}, position={"ordinal": i}) for i in range(2)),
    event("click", "q4", "10:10:05", "S3", "c3", object={"object_id": "p1"},
          position={"xy": {"x": 120.5, "y": 388}}, dwell_time=45.0),
    event("hover", "q4", "10:10:06", "S3", "c3", object={"object_id": "p0"}),
]


EXPECTED = {
    "queries": 4, "zero_result_queries": 1, "clicked_queries": 3, "clicks": 3,
    # q1: 3 impressions (its hit ids unknown); q2: its 2 hit ids; q3: none; q4: 2 impressions
    "result_impressions": 7,
    "sessions": 3, "abandoned_sessions": 1, "successful_sessions": 2, "conversions": 1,
    # q1 is followed by q2 within 60 s, but c1 clicked between them
    "reformulated_queries": 0,
    "ctr": 0.75, "zero_result_rate": 0.25, "abandonment_rate": 1 / 3,
    "session_success_rate": 2 / 3,
}
