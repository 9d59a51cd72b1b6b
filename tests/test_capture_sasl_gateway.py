"""Real captures of SASL/PLAIN traffic and of traffic through the migration gateway, decoded.

The kept fixtures (no broker needed): fixtures/captures/sasl.pcap (kafka-python and librdkafka
logging in with PLAIN on a SASL_PLAINTEXT listener, one wrong password) and gateway.pcap (clients
through `kprotocol gateway`, both legs in one capture). Each also decodes to the same exchanges from
its pcapng copy. One live test logs in with kafka-python through the recording proxy in front of the
SASL listener and checks the capture against the proxy's bytes, field for field.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from kprotocol import message_class
from kprotocol.capture import Exchange, decode_capture
from kprotocol.connection import Connection
from kprotocol.records import read_batches
from kprotocol.toolchain import KafkaBroker, free_port
from kprotocol.toolchain.broker import sasl_plain_config
from kprotocol.toolchain.recorder import RecordingProxy
from kprotocol.toolchain.tcpdump import Tcpdump, to_pcapng
from proxy_capture import assert_capture_matches_proxy, recorded_exchanges

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_AUTHENTICATION_FAILED = 58
METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER = 3, 8, 9, 10, 18, 60
STREAMS_GROUP_HEARTBEAT = 88


@dataclass(frozen=True)
class SaslFixture:
    """fixtures/captures/sasl.pcap (record_sasl.py)."""

    path: Path = CAPTURES / "sasl.pcap"
    port: int = 46333
    user: str = "alice"
    password: str = "alice-test-pw"         # throwaway test credentials, in clear in the capture
    wrong_password: str = "not-alice-pw"


@dataclass(frozen=True)
class GatewayFixture:
    """fixtures/captures/gateway.pcap (record_gateway.py)."""

    path: Path = CAPTURES / "gateway.pcap"
    bootstrap_port: int = 58191   # the gateway's bootstrap listener
    node_port: int = 48664        # the gateway's listener standing for broker 1
    broker_port: int = 43853
    managed_group: str = "gw-streams"  # coordinated by the gateway itself (--group)

    @property
    def ports(self) -> tuple[int, int, int]:
        return (self.bootstrap_port, self.node_port, self.broker_port)


SASL, GATEWAY = SaslFixture(), GatewayFixture()


def _decode(path: Path, ports: tuple[int, ...]) -> tuple[list[Exchange], list, list]:
    capture = decode_capture(path, ports=ports)
    exchanges = list(capture)
    return exchanges, capture.orphans, capture.problems


def _by_conn(exchanges: list[Exchange]) -> dict[str, list[Exchange]]:
    out: dict[str, list[Exchange]] = defaultdict(list)
    for exchange in exchanges:
        out[exchange.conn].append(exchange)
    return out


def _server_port(conn: str) -> int:
    return int(conn.rsplit(":", 1)[1])


def _assert_complete(exchange: Exchange) -> None:
    """A request and its response, both decoded."""
    doc = exchange.to_json()
    where = f"{exchange.conn} #{exchange.correlation_id} {exchange.api_name} v{exchange.api_version}"
    assert exchange.request is not None and "requestError" not in doc, (where, doc.get("requestError"))
    assert exchange.response is not None and "responseError" not in doc, (where, doc.get("responseError"))
    assert exchange.no_response is None, (where, exchange.no_response)
    flags = [k for k in ("requestGap", "responseGap", "requestTruncated", "responseTruncated",
                         "requestAfterResync", "responseAfterResync") if k in doc]
    assert flags == [], (where, flags)


@pytest.fixture(scope="module")
def sasl_capture() -> list[Exchange]:
    exchanges, orphans, problems = _decode(SASL.path, (SASL.port,))
    assert problems == [] and orphans == []
    return exchanges


@pytest.fixture(scope="module")
def gateway_capture() -> list[Exchange]:
    exchanges, orphans, problems = _decode(GATEWAY.path, GATEWAY.ports)
    assert problems == [] and orphans == []
    return exchanges


# --- sasl.pcap -----------------------------------------------------------------------------------

def _plain_token(exchange: Exchange) -> tuple[str, str, str]:
    """(authorization id, user, password) of a PLAIN SaslAuthenticate, read from the JSON's base64."""
    token = base64.b64decode(exchange.to_json(credentials=True)["request"]["authBytes"])
    assert token == exchange.request.auth_bytes  # type: ignore[union-attr]
    authzid, user, password = token.split(b"\0")
    return authzid.decode(), user.decode(), password.decode()


def test_sasl_capture_decodes_every_exchange(sasl_capture: list[Exchange]) -> None:
    for exchange in sasl_capture:
        _assert_complete(exchange)
    connections = _by_conn(sasl_capture)
    clients = Counter(es[0].client_id for es in connections.values())
    assert set(clients) == {"py-producer", "py-consumer", "py-wrong-password", "rd-producer", "rd-consumer"}
    for conn, exchanges in connections.items():
        # Every connection logs in first: ApiVersions (allowed before authentication), SaslHandshake,
        # SaslAuthenticate; correlation ids count up from the first request.
        assert [e.api_key for e in exchanges[:3]] == [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE], conn
        assert [e.correlation_id for e in exchanges] == sorted(e.correlation_id for e in exchanges), conn
        assert len({e.client_id for e in exchanges}) == 1, conn


def test_sasl_handshake_and_plain_token(sasl_capture: list[Exchange]) -> None:
    handshakes = [e.to_json() for e in sasl_capture if e.api_key == SASL_HANDSHAKE]
    assert handshakes and all(h["request"] == {"mechanism": "PLAIN"} for h in handshakes)
    assert all(h["response"] == {"errorCode": 0, "mechanisms": ["PLAIN"]} for h in handshakes)
    tokens = Counter()
    for exchange in (e for e in sasl_capture if e.api_key == SASL_AUTHENTICATE):
        authzid, user, password = _plain_token(exchange)
        assert user == SASL.user
        # librdkafka leaves the authorization id empty (\0user\0password); kafka-python repeats the user.
        assert authzid == ("" if exchange.client_id.startswith("rd-") else SASL.user)  # type: ignore[union-attr]
        tokens[password] += 1
    assert tokens[SASL.wrong_password] == 1 and tokens[SASL.password] >= 8
    assert {e.api_version for e in sasl_capture if e.api_key == SASL_AUTHENTICATE} == {1, 2}  # both clients


def test_sasl_failed_login_carries_kafkas_error(sasl_capture: list[Exchange]) -> None:
    for conn, exchanges in _by_conn(sasl_capture).items():
        login = exchanges[2]
        response = login.to_json()["response"]
        if _plain_token(login)[2] == SASL.wrong_password:
            assert login.client_id == "py-wrong-password"
            assert response["errorCode"] == SASL_AUTHENTICATION_FAILED
            assert response["errorMessage"] == "Authentication failed: Invalid username or password"
            assert response["authBytes"] == "" and response.get("sessionLifetimeMs", 0) == 0
            # Nothing follows on that connection: the broker closes it after a failed login.
            assert [e.api_key for e in exchanges] == [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE], conn
        else:
            assert response["errorCode"] == 0 and response["errorMessage"] in ("", None), conn


def test_sasl_requests_after_login_decode_on_the_same_connection(sasl_capture: list[Exchange]) -> None:
    after = [e for es in _by_conn(sasl_capture).values() if _plain_token(es[2])[2] == SASL.password
             for e in es[3:]]
    apis = Counter(e.api_name for e in after)
    assert {"Metadata", "Produce", "Fetch", "FindCoordinator", "JoinGroup", "SyncGroup", "OffsetFetch",
            "OffsetCommit", "LeaveGroup", "ListOffsets"} <= set(apis), apis
    produced, fetched = Counter(), defaultdict(set)
    for exchange in after:
        if exchange.api_name == "Produce":
            for topic in exchange.request.topic_data:  # type: ignore[union-attr]
                for part in topic.partition_data:
                    produced.update((r.key, r.value) for batch in read_batches(part.records) for r in batch.records)
            assert all(p.error_code == 0 for t in exchange.response.responses  # type: ignore[union-attr]
                       for p in t.partition_responses)
        elif exchange.api_name == "Fetch":
            for topic in exchange.response.responses:  # type: ignore[union-attr]
                for part in topic.partitions:
                    fetched[exchange.client_id] |= {r.key for batch in read_batches(part.records or b"")
                                                    for r in batch.records}
    py = {f"py-{i}".encode() for i in range(5)}
    rd = {f"rd-{i}".encode() for i in range(5)}
    assert produced == Counter({(k, b"from kafka-python"): 1 for k in py} | {(k, b"from librdkafka"): 1 for k in rd})
    assert fetched["py-consumer"] == py and fetched["rd-consumer"] == py | rd


# --- gateway.pcap --------------------------------------------------------------------------------

def _request_key(exchange: Exchange) -> tuple:
    return (exchange.correlation_id, exchange.api_key, exchange.api_version, exchange.client_id,
            exchange.request_frame.data)


GROUP_APIS = {OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, 11, 12, 13, 14, 28, STREAMS_GROUP_HEARTBEAT, 89}


def _groups(exchange: Exchange) -> set[str]:
    """The groups a request names, read from its JSON (only the fields of its version)."""
    request = exchange.to_json()["request"]
    out = {request["groupId"]} if "groupId" in request else set()
    out.update(g["groupId"] for g in request.get("groups") or [] if isinstance(g, dict))
    out.update(request.get("groupIds") or [])
    if exchange.api_key == FIND_COORDINATOR and request["keyType"] == 0:
        out.update(request.get("coordinatorKeys") or [request.get("key")])
    return out


def _answered_by_gateway(exchange: Exchange) -> bool:
    """The gateway answers requests about the group it coordinates itself (FindCoordinator, the group
    APIs, offsets); it forwards every other request."""
    groups = _groups(exchange)
    return exchange.api_key in GROUP_APIS and bool(groups) and groups <= {GATEWAY.managed_group}


@dataclass
class Legs:
    pairs: list[tuple[list[Exchange], list[Exchange]]]  # (client leg, its upstream leg), each connection's exchanges
    gateway_own: list[Exchange]  # the gateway's own connections to the broker


def _pair_legs(exchanges: list[Exchange], front_ports: set[int], back_port: int,
               forwarded: Callable[[Exchange], bool]) -> tuple[list[tuple[list[Exchange], list[Exchange]]],
                                                               list[list[Exchange]]]:
    """Each client connection to a relay (on `front_ports`) with the relay's connection to `back_port`
    that carries its `forwarded` requests, the very same frames in the same order; and the connections
    to `back_port` that forward no client's requests."""
    connections = _by_conn(exchanges)
    front = {c: es for c, es in connections.items() if _server_port(c) in front_ports}
    back = {c: es for c, es in connections.items() if _server_port(c) == back_port}
    assert set(front) | set(back) == set(connections)
    unused = list(back)  # in first-packet order
    pairs = []
    for conn, leg in front.items():
        wanted = [_request_key(e) for e in leg if forwarded(e)]
        match = next((u for u in unused if [_request_key(e) for e in back[u]] == wanted), None)
        assert match is not None, f"no connection to port {back_port} carries the requests of {conn}"
        unused.remove(match)
        pairs.append((leg, back[match]))
    return pairs, [back[u] for u in unused]


def _legs(exchanges: list[Exchange]) -> Legs:
    # The gateway opens one upstream connection per client connection and forwards the frames in order.
    pairs, unused = _pair_legs(exchanges, {GATEWAY.bootstrap_port, GATEWAY.node_port}, GATEWAY.broker_port,
                               lambda e: not _answered_by_gateway(e))
    own = [e for leg in unused for e in leg]
    assert {e.client_id for e in own} == {"kprotocol-gateway"}
    return Legs(pairs, own)


def _gateway_address(node_id: int) -> tuple[str, int]:
    assert node_id == 1
    return ("127.0.0.1", GATEWAY.node_port)


def _assert_rewritten(api_key: int, client: dict, upstream: dict) -> None:
    """The gateway rewrites the broker addresses of Metadata, FindCoordinator and DescribeCluster to its
    own listeners and caps ApiVersions where it reads or answers an API itself; nothing else changes."""
    client = orjson.loads(orjson.dumps(client))
    if api_key in (METADATA, DESCRIBE_CLUSTER):
        node = "nodeId" if api_key == METADATA else "brokerId"
        assert len(client["brokers"]) == len(upstream["brokers"]) > 0
        for ours, theirs in zip(client["brokers"], upstream["brokers"]):
            assert (theirs["host"], theirs["port"]) == ("127.0.0.1", GATEWAY.broker_port)
            assert (ours["host"], ours["port"]) == _gateway_address(ours[node])
            ours["host"], ours["port"] = theirs["host"], theirs["port"]
    elif api_key == FIND_COORDINATOR:
        for ours, theirs in zip(client["coordinators"], upstream["coordinators"]):
            if theirs["errorCode"] == 0 and theirs["nodeId"] >= 0:
                assert (theirs["host"], theirs["port"]) == ("127.0.0.1", GATEWAY.broker_port)
                assert (ours["host"], ours["port"]) == _gateway_address(ours["nodeId"])
                ours["host"], ours["port"] = theirs["host"], theirs["port"]
    elif api_key == API_VERSIONS:
        ours = {k["apiKey"]: k for k in client.pop("apiKeys")}
        theirs = {k["apiKey"]: k for k in upstream["apiKeys"]}
        capped = {METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER, STREAMS_GROUP_HEARTBEAT, 89}
        assert set(theirs) <= set(ours) and set(ours) - set(theirs) <= {STREAMS_GROUP_HEARTBEAT, 89}
        for key, entry in theirs.items():
            if key in capped:
                assert ours[key]["minVersion"] == entry["minVersion"] and ours[key]["maxVersion"] <= entry["maxVersion"]
            else:
                assert ours[key] == entry, key
        client["apiKeys"] = upstream["apiKeys"]
    else:
        raise AssertionError(f"api {api_key} is not rewritten by the gateway")
    assert client == upstream


def test_gateway_capture_decodes_both_legs(gateway_capture: list[Exchange]) -> None:
    for exchange in gateway_capture:
        _assert_complete(exchange)
    legs = _legs(gateway_capture)
    client_apis = Counter(e.api_name for leg, _ in legs.pairs for e in leg)
    upstream_apis = Counter(e.api_name for _, leg in legs.pairs for e in leg)
    for apis in (client_apis, upstream_apis):  # forwarded: on both legs
        assert {"ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "InitProducerId", "FindCoordinator",
                "JoinGroup", "SyncGroup", "OffsetFetch", "OffsetCommit", "LeaveGroup"} <= set(apis), apis
    assert client_apis["StreamsGroupHeartbeat"] > 0 and "StreamsGroupHeartbeat" not in upstream_apis
    assert len(legs.pairs) >= 10 and legs.gateway_own


def test_gateway_forwards_requests_unchanged(gateway_capture: list[Exchange]) -> None:
    rewritten = Counter()
    forwarded = 0
    for client_leg, upstream_leg in _legs(gateway_capture).pairs:
        pairs = zip([e for e in client_leg if not _answered_by_gateway(e)], upstream_leg, strict=True)
        for ours, theirs in pairs:
            forwarded += 1
            # The gateway reads a whole frame before it passes it on: the request reaches the broker after
            # the client sent it, the response the client after the broker sent it.
            assert ours.request_frame.last < theirs.request_frame.first
            assert theirs.response_frame.last < ours.response_frame.first  # type: ignore[union-attr]
            assert ours.to_json(credentials=True)["request"] == theirs.to_json(credentials=True)["request"]
            assert ours.response_frame.data[4:8] == theirs.response_frame.data[4:8]  # type: ignore[union-attr]
            if ours.api_key in (METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER):
                _assert_rewritten(ours.api_key, ours.to_json()["response"], theirs.to_json()["response"])
                rewritten[ours.api_name] += 1
            else:
                assert ours.response_frame.data == theirs.response_frame.data  # type: ignore[union-attr]
                assert ours.to_json()["response"] == theirs.to_json()["response"]
    assert forwarded >= 50 and {"Metadata", "FindCoordinator", "ApiVersions"} <= set(rewritten), rewritten


def test_gateway_coordinates_its_group_and_commits_upstream(gateway_capture: list[Exchange]) -> None:
    legs = _legs(gateway_capture)
    local = [e for leg, _ in legs.pairs for e in leg if _answered_by_gateway(e)]
    assert {e.api_name for e in local} == {"FindCoordinator", "StreamsGroupHeartbeat", "OffsetFetch", "OffsetCommit"}
    for exchange in local:
        response = exchange.to_json()["response"]
        if exchange.api_key == FIND_COORDINATOR:  # the gateway names itself as the coordinator
            assert [(c["host"], c["port"]) for c in response["coordinators"]] == [_gateway_address(1)]
    heartbeats = [e.to_json() for e in local if e.api_key == STREAMS_GROUP_HEARTBEAT]
    assert all(h["response"]["errorCode"] == 0 for h in heartbeats)
    assert any(h["response"]["activeTasks"] for h in heartbeats)  # the gateway assigned the tasks
    assert heartbeats[-1]["request"]["memberEpoch"] == -1 and heartbeats[-1]["response"]["memberEpoch"] == -1
    # The offsets the member commits and fetches go upstream on the gateway's own connection, as an admin
    # would send them (no member, no epoch); the broker's answers go back to the member as they are.
    offsets = [e for e in local if e.api_key in (OFFSET_COMMIT, OFFSET_FETCH)]
    upstream = [e for e in legs.gateway_own if e.api_key in (OFFSET_COMMIT, OFFSET_FETCH)
                and _groups(e) == {GATEWAY.managed_group}]
    assert len(offsets) == len(upstream) >= 2 and any(e.api_key == OFFSET_COMMIT for e in offsets)
    for ours, theirs in zip(offsets, upstream):
        assert ours.request_frame.last < theirs.request_frame.first
        assert theirs.response_frame.last < ours.response_frame.first  # type: ignore[union-attr]
        request, sent = ours.to_json()["request"], theirs.to_json()["request"]
        if ours.api_key == OFFSET_COMMIT:
            assert request["generationIdOrMemberEpoch"] >= 0 and request["memberId"]
            assert sent == {**request, "generationIdOrMemberEpoch": -1, "memberId": ""}
        else:
            assert sent == {**request, "groups": [{**g, "memberId": None, "memberEpoch": -1}
                                                  for g in request["groups"]]}
        assert ours.to_json()["response"] == theirs.to_json()["response"]


def test_gateway_capture_cli_decodes_both_legs(gateway_capture: list[Exchange]) -> None:
    done = subprocess.run([sys.executable, "-m", "kprotocol", "capture", "decode", str(GATEWAY.path),
                           "--ports", ",".join(map(str, GATEWAY.ports))],
                          capture_output=True, timeout=120)
    assert done.returncode == 0 and done.stderr == b"", done.stderr[-2000:]
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert lines == [orjson.loads(orjson.dumps(e.to_json())) for e in gateway_capture]


def test_group_ids_name_only_fields_of_the_version(gateway_capture: list[Exchange]) -> None:
    """`Exchange.group_ids` (what `--group` filters on) names the groups of the request's own version:
    OffsetFetch v8+ has no top-level groupId, so no exchange is about the group ""."""
    grouped = [e for e in gateway_capture if e.api_key in GROUP_APIS]
    assert any(e.api_key == OFFSET_FETCH and e.api_version >= 8 for e in grouped)
    for exchange in grouped:
        assert exchange.group_ids() == _groups(exchange), exchange.to_json()["request"]


# --- both fixtures in pcapng ---------------------------------------------------------------------

@pytest.mark.parametrize("path, ports", [(SASL.path, (SASL.port,)), (GATEWAY.path, GATEWAY.ports)],
                         ids=["sasl", "gateway"])
def test_pcapng_copy_decodes_the_same(tmp_path: Path, path: Path, ports: tuple[int, ...]) -> None:
    pcap, pcap_orphans, pcap_problems = _decode(path, ports)
    pcapng, orphans, problems = _decode(to_pcapng(path, tmp_path / f"{path.stem}.pcapng"), ports)
    assert problems == pcap_problems == [] and orphans == pcap_orphans == []
    assert len(pcap) > 50
    assert [orjson.dumps(e.to_json()) for e in pcapng] == [orjson.dumps(e.to_json()) for e in pcap]


# --- the broker's SASL listener --------------------------------------------------------------------

def test_sasl_plain_config() -> None:
    config = sasl_plain_config({"alice": "a-b c!", "bob": "x"})
    assert config["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] == "PLAIN"
    assert config["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a-b c!" user_bob="x";')
    for bad in ({}, {"al ice": "x"}, {"alice": 'a"b'}, {"alice": "a\\b"}, {"alice": "é"}, {"alice": "a\nb"}):
        with pytest.raises(ValueError):
            sasl_plain_config(bad)


def test_recording_proxy_relays_across_a_half_close() -> None:
    """A server's answer sent after the client's FIN still crosses the proxy (and is recorded), as it
    would between the two directly: the proxy passes the FIN on instead of tearing both ways down."""
    server = socket.create_server(("127.0.0.1", 0))
    answered = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            received = b""
            while chunk := conn.recv(100):
                received += chunk
            time.sleep(0.1)  # well after the FIN
            conn.sendall(b"answer to " + received)
            answered.set()

    threading.Thread(target=serve, daemon=True).start()
    proxy = RecordingProxy(server.getsockname()[:2])
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            client.sendall(b"request")
            client.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := client.recv(100):
                got += chunk
        assert answered.wait(10)
    finally:
        proxy.stop()
        server.close()
    assert got == b"answer to request"
    assert (bytes(proxy.connections[0].client), bytes(proxy.connections[0].server)) == (b"request", got)


LIVE_USER, LIVE_PASSWORD = "carol", "carol-test-pw"  # throwaway


@dataclass
class SaslTraffic:
    broker: KafkaBroker
    proxy: RecordingProxy
    pcap: Path
    consumed: set[bytes]


@pytest.fixture(scope="module")
def sasl_traffic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslTraffic]:
    """kafka-python over SASL/PLAIN through the recording proxy (the SASL listener advertises the proxy),
    captured by tcpdump on the proxy's port and the SASL listener's."""
    port = free_port()
    broker = KafkaBroker.start(sasl_plain_users={LIVE_USER: LIVE_PASSWORD}, sasl_advertised_port=port)
    proxy = RecordingProxy(("127.0.0.1", broker.sasl_port), port)  # type: ignore[arg-type]
    directory = tmp_path_factory.mktemp("sasl-capture")
    capture = Tcpdump.start(directory / "sasl.pcap", (port, broker.sasl_port))  # type: ignore[arg-type]
    try:
        broker.create_topic("sasl-live", 2)  # on the PLAINTEXT listener: not captured
        bootstrap = f"127.0.0.1:{proxy.port}"
        login = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                 "sasl_plain_username": LIVE_USER, "sasl_plain_password": LIVE_PASSWORD}
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="live-producer", **login)
        for i in range(10):
            producer.send("sasl-live", key=f"k{i}".encode(), value=b"over SASL/PLAIN")
        producer.close()
        consumer = KafkaConsumer("sasl-live", bootstrap_servers=bootstrap, client_id="live-consumer",
                                 group_id="live-sasl", auto_offset_reset="earliest", consumer_timeout_ms=4000, **login)
        consumed = {m.key for m in consumer}
        consumer.commit()
        consumer.close()
        with pytest.raises(KafkaError):
            KafkaProducer(bootstrap_servers=bootstrap, client_id="live-wrong-password",
                          **{**login, "sasl_plain_password": "wrong"}, reconnect_backoff_ms=60_000,
                          reconnect_backoff_max_ms=60_000, bootstrap_timeout_ms=3000).close()
        proxy.stop()
        yield SaslTraffic(broker, proxy, capture.stop(), consumed)
    finally:
        capture.stop()
        proxy.stop()
        broker.stop()


@pytest.mark.xdist_group("kafka")
def test_live_sasl_capture_matches_the_proxys_bytes(sasl_traffic: SaslTraffic) -> None:
    proxy = sasl_traffic.proxy
    assert sasl_traffic.consumed == {f"k{i}".encode() for i in range(10)}
    total = assert_capture_matches_proxy(sasl_traffic.pcap, proxy, sasl_traffic.broker.sasl_port)  # type: ignore[arg-type]
    # The proxy relays SASL byte for byte: every connection logged in, one with the wrong password.
    recorded = [recorded_exchanges(r) for r in proxy.connections]
    logins = [next(e for e in exchanges if e["apiKey"] == SASL_AUTHENTICATE) for exchanges in recorded]
    errors = Counter(e["response"]["errorCode"] for e in logins)
    assert errors == Counter({0: len(logins) - 1, SASL_AUTHENTICATION_FAILED: 1}) and len(logins) >= 4
    for exchanges in recorded:
        assert [e["apiKey"] for e in exchanges[:3]] == [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE]
        metadata = [e["response"] for e in exchanges if e["apiKey"] == METADATA]
        assert all(b["port"] == proxy.port for m in metadata for b in m["brokers"])  # advertised: the proxy
    apis = {e["apiKey"] for exchanges in recorded for e in exchanges}
    assert {0, 1, 3, 8, 9, 10, 11, 14, 17, 36} <= apis  # Produce, Fetch, Metadata, offsets, the group, SASL
    # Only the proxy talks to the SASL listener here: each client connection and the proxy's connection
    # for it carry the very same frames both ways. The one exception is a last response still in flight
    # when the client hung up: the broker's bytes then reach the client leg in part, or not at all.
    capture = decode_capture(sasl_traffic.pcap, ports=(proxy.port, sasl_traffic.broker.sasl_port))
    pairs, unused = _pair_legs(list(capture), {proxy.port}, sasl_traffic.broker.sasl_port, lambda e: True)
    assert capture.problems == [] and capture.orphans == [] and unused == [] and len(pairs) == len(recorded)
    late = 0
    for front, back in pairs:
        for number, (ours, theirs) in enumerate(zip(front, back, strict=True), 1):
            # The proxy relays chunk by chunk: each packet crosses after it arrived.
            assert ours.request_frame.first < theirs.request_frame.first
            assert ours.request_frame.last < theirs.request_frame.last
            if ours.response is not None and not ours.response_frame.truncated:  # type: ignore[union-attr]
                assert theirs.response_frame.first < ours.response_frame.first  # type: ignore[union-attr]
                assert theirs.response_frame.last < ours.response_frame.last  # type: ignore[union-attr]
                assert ours.response_frame.data == theirs.response_frame.data  # type: ignore[union-attr]
            else:
                assert number == len(front), (ours.conn, ours.correlation_id, ours.no_response)
                sent = theirs.response_frame.data if theirs.response_frame else b""
                assert sent.startswith(ours.response_frame.data if ours.response_frame else b"")
                late += 1
    assert sum(len(front) for front, _ in pairs) == total and late <= len(pairs)
    print(f"\n{total} exchanges over {len(proxy.connections)} SASL connections match the proxy's bytes "
          f"({late} last responses in flight at the client's close)")


@pytest.mark.xdist_group("kafka")
def test_live_sasl_listener_requires_a_plain_login(sasl_traffic: SaslTraffic) -> None:
    broker = sasl_traffic.broker
    handshake, authenticate = message_class("SaslHandshakeRequest"), message_class("SaslAuthenticateRequest")
    metadata = message_class("MetadataRequest")(topics=[])
    with Connection("127.0.0.1", broker.sasl_port) as conn:  # type: ignore[arg-type]
        assert conn.send(handshake(mechanism="PLAIN"), version=1).mechanisms == ("PLAIN",)
        ok = conn.send(authenticate(auth_bytes=f"\0{LIVE_USER}\0{LIVE_PASSWORD}".encode()), version=2)
        assert ok.error_code == 0
        assert [b.port for b in conn.send(metadata).brokers] == [sasl_traffic.proxy.port]
    with Connection("127.0.0.1", broker.sasl_port) as conn:  # type: ignore[arg-type]
        conn.send(handshake(mechanism="PLAIN"), version=1)
        failed = conn.send(authenticate(auth_bytes=f"\0{LIVE_USER}\0nope".encode()), version=2)
        assert failed.error_code == SASL_AUTHENTICATION_FAILED
        assert failed.error_message == "Authentication failed: Invalid username or password"
    with Connection("127.0.0.1", broker.sasl_port) as conn, pytest.raises(ConnectionError):  # type: ignore[arg-type]
        conn.send(metadata)  # before any login: the broker hangs up
    with broker.connect() as conn:  # the PLAINTEXT listener is unchanged
        assert [b.port for b in conn.send(metadata).brokers] == [broker.port]
