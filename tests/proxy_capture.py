"""A tcpdump capture checked against a RecordingProxy's bytes, field for field: every exchange the
proxy saw on each connection is the capture decoder's exchange of that connection, and the proxy's
own connections upstream carry the same requests. Shared by tests/test_real_traffic.py and
tests/test_capture_sasl_gateway.py."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import orjson

from kprotocol.capture import decode_capture
from kprotocol.conversation import Conversation, RequestEvent, ResponseEvent
from kprotocol.toolchain.recorder import Recording, RecordingProxy


def recorded_exchanges(recording: Recording) -> list[dict]:
    """What the proxy saw on one connection, in the capture decoder's terms."""
    conversation = Conversation()
    requests = [e for e in conversation.client_bytes(bytes(recording.client)) if isinstance(e, RequestEvent)]
    responses = {e.header.correlation_id: e for e in conversation.server_bytes(bytes(recording.server))
                 if isinstance(e, ResponseEvent)}
    out = []
    for request in requests:
        correlation_id = request.header.correlation_id
        doc = request.to_json()
        response = responses.get(correlation_id)
        out.append({"correlationId": correlation_id, "apiKey": request.api_key, "apiVersion": request.api_version,
                    "clientId": request.header.client_id, "request": doc["body"],
                    "response": None if response is None else response.to_json()["body"]})
    return out


def kafka_fields(exchange: dict) -> dict:
    return {"correlationId": exchange["correlationId"], "apiKey": exchange["apiKey"],
            "apiVersion": exchange["apiVersion"], "clientId": exchange["clientId"], "request": exchange["request"],
            "response": exchange.get("response")}


def assert_capture_matches_proxy(path: Path, proxy: RecordingProxy, upstream_port: int) -> int:
    """Assert that the capture at `path` (tcpdump on the proxy's port and on `upstream_port`, the port
    the proxy forwards to) holds exactly the proxy's connections and exchanges; their number."""
    capture = decode_capture(path, ports=(proxy.port,))
    by_conn: dict[str, list[dict]] = defaultdict(list)
    for exchange in capture:
        by_conn[exchange.conn].append(exchange.to_json(credentials=True))  # as the proxy recorded them
    assert capture.problems == [] and capture.orphans == []
    total = 0
    # A client port the kernel hands out again makes a later connection with the same addresses: the capture
    # holds them under one name, one after the other, and so are the proxy's recordings compared.
    recordings: dict[str, list] = defaultdict(list)
    for recording in proxy.connections:
        recordings[f"127.0.0.1:{recording.peer[1]}->127.0.0.1:{proxy.port}"].append(recording)
    for conn, same_addresses in recordings.items():
        got = [kafka_fields(e) for e in by_conn.pop(conn)]
        expected = [e for recording in same_addresses for e in recorded_exchanges(recording)]
        seen = [(e["correlationId"], e["response"] is None) for e in got]
        recorded = [(e["correlationId"], e["response"] is None) for e in expected]
        assert seen == recorded, f"{conn}: (correlation id, no response) captured {seen}, recorded {recorded}"
        assert got == expected, conn
        total += len(got)
    assert not by_conn, sorted(by_conn)
    # The proxy's own connections upstream carry the same requests (plus whatever else reached that port).
    upstream = Counter(orjson.dumps([e.api_key, e.to_json(credentials=True)["request"]])
                       for e in decode_capture(path, ports=(upstream_port,)))
    downstream = Counter(orjson.dumps([e["apiKey"], e["request"]])
                         for recording in proxy.connections for e in recorded_exchanges(recording))
    assert downstream - upstream == Counter()
    return total
