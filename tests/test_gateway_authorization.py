"""The brokers' ACLs on the requests the gateway answers itself, compared with the broker's own answers.

One broker with StandardAuthorizer and allow.everyone.if.no.acl.found=false, a SASL_PLAINTEXT listener with
PLAIN users, and one `kprotocol gateway` process logged in upstream as a super user. Two groups of the same
shape: MANAGED (the gateway coordinates it) and BROKER (the broker does), each with a kafka-python consumer
(the good client, principal `app`) reading TOPIC. Every principal of the matrix holds the same ACLs on both
groups; each request goes through the gateway for both, and the two answers are compared field by field
(member ids, offsets and hosts normalized; the group id swapped).
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

from kprotocol import message_class as mc
from kprotocol.framing import decode_response, encode_request
from kprotocol.toolchain import KafkaBroker
from kprotocol.toolchain.processes import stop_process

pytestmark = pytest.mark.xdist_group("gateway-authorization")
MANAGED, BROKER, TOPIC, OTHER = "authz-managed", "authz-broker", "authz-topic", "authz-other"
STREAMS_MANAGED, STREAMS_BROKER = "authz-streams-managed", "authz-streams-broker"
GROUP, TOPIC_RESOURCE, CLUSTER, TRANSACTIONAL_ID = 3, 2, 4, 5
READ, WRITE, DELETE, DESCRIBE = 3, 4, 6, 8
USERS = {"gateway": "gateway-secret", "app": "app-secret", "none": "n", "group": "g", "grouptopic": "gt",
         "describe": "d", "delete": "x", "streams": "s", "streamscreate": "sc"}
# principal -> [(resource type, name or prefix, operation)] for both groups of a pair and the topic
ACLS: dict[str, list[tuple[int, str, int]]] = {
    "app": [(GROUP, "authz-", READ), (TOPIC_RESOURCE, TOPIC, READ)],
    "none": [],
    "group": [(GROUP, "authz-", READ)],
    "grouptopic": [(GROUP, "authz-", READ), (TOPIC_RESOURCE, TOPIC, READ), (TRANSACTIONAL_ID, "authz-", WRITE)],
    "describe": [(GROUP, "authz-", DESCRIBE), (TOPIC_RESOURCE, TOPIC, DESCRIBE)],
    "delete": [(GROUP, "authz-", DELETE), (TOPIC_RESOURCE, TOPIC, READ), (TRANSACTIONAL_ID, "authz-", WRITE)],
}
STREAMS_ACLS: dict[str, list[tuple[int, str, int]]] = {  # to reach the internal topics' CREATE check
    "streams": [(GROUP, "authz-", READ), (TOPIC_RESOURCE, "authz-", DESCRIBE)],
    "streamscreate": [(GROUP, "authz-", READ), (TOPIC_RESOURCE, "authz-", DESCRIBE), (TOPIC_RESOURCE, "authz-", 5)],
}
PRINCIPALS = [p for p in ACLS if p != "app"]
STREAMS_GROUPS = [f"{STREAMS_MANAGED}-{u}" for u in ("grouptopic", "streams", "streamscreate")]
REAUTH_MS = 6000


class Client:
    """A raw client logged in with SASL PLAIN."""

    def __init__(self, address: str, user: str | None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0
        if user is not None:
            assert self.send(mc("SaslHandshakeRequest")(mechanism="PLAIN"), 1).error_code == 0
            login = self.send(*_login(user))
            assert login.error_code == 0, login
            self.lifetime_ms = login.session_lifetime_ms

    def frame(self, request: Any, version: int) -> bytes:
        self.correlation += 1
        header = mc("RequestHeader")(request_api_key=request.api_key, request_api_version=version,
                                     correlation_id=self.correlation, client_id="authz-test")
        return encode_request(header, request)

    def send(self, request: Any, version: int) -> Any:
        self.sock.sendall(self.frame(request, version))
        return self.receive(request, version)

    def receive(self, request: Any, version: int) -> Any:
        size = self._read(4)
        return decode_response(size + self._read(struct.unpack(">i", size)[0]), request.api_key, version)[1]

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def _login(user: str) -> tuple[Any, int]:
    return mc("SaslAuthenticateRequest")(auth_bytes=b"\0" + user.encode() + b"\0" + USERS[user].encode()), 2


@dataclass
class Setup:
    broker: KafkaBroker
    gateway: str
    process: subprocess.Popen
    log: Path


def _acl_creations(principal: str, acls: list[tuple[int, str, int]]) -> list[Any]:
    cls = mc("CreateAclsRequest")
    return [cls.AclCreation(resource_type=rtype, resource_name=name,
                            resource_pattern_type=4 if name.endswith("-") else 3,
                            principal=f"User:{principal}", host="*", operation=op, permission_type=3)
            for rtype, name, op in acls]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("gateway-authz")
    broker = KafkaBroker.start(config={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:ANONYMOUS;User:gateway",  # ANONYMOUS: the PLAINTEXT inter-broker and admin listener
        "connections.max.reauth.ms": str(REAUTH_MS),  # KIP-368: the good clients re-authenticate meanwhile
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",  # unsecured tokens
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
    }, sasl_plain_users=USERS, ready_timeout=120)
    process = None
    try:
        broker.create_topic(TOPIC, partitions=2)
        broker.create_topic(OTHER, partitions=1)
        with broker.connect() as admin:
            created = admin.send(mc("CreateAclsRequest")(creations=[
                c for p, acls in {**ACLS, **STREAMS_ACLS}.items() for c in _acl_creations(p, acls)]))
            assert all(r.error_code == 0 for r in created.results)
        upstream = workdir / "upstream.properties"
        upstream.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                            "sasl.username=gateway\nsasl.password=gateway-secret\n")
        config = workdir / "gateway.toml"
        config.write_text(f'upstream = "{broker.sasl_bootstrap}"\nlisten = "127.0.0.1:0"\n'
                          f'groups = {[MANAGED, STREAMS_MANAGED, *STREAMS_GROUPS]!r}\nupstream_config = "{upstream}"\n'
                          'initial_rebalance_delay_ms = 0\n')
        log = workdir / "gateway.log"
        with log.open("w") as err:
            process = subprocess.Popen([sys.executable, "-m", "kprotocol", "gateway", "--config", str(config)],
                                       stdout=subprocess.PIPE, stderr=err, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        port = re.search(r"on 127\.0\.0\.1:(\d+)", line)
        assert port, f"gateway did not start: {line!r} {log.read_text()}"
        yield Setup(broker, f"127.0.0.1:{port.group(1)}", process, log)
    finally:
        if process is not None:
            stop_process(process, 10)
        broker.stop()


@pytest.fixture(scope="module")
def consumers(setup: Setup) -> Iterator[None]:
    """The good client: one kafka-python consumer (principal `app`) in each of the two groups, polling."""
    options = dict(bootstrap_servers=setup.gateway, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                   sasl_plain_username="app", sasl_plain_password=USERS["app"])
    producer = KafkaProducer(bootstrap_servers=setup.broker.bootstrap)  # ANONYMOUS, a super user
    for i in range(20):
        producer.send(TOPIC, f"v{i}".encode(), partition=i % 2)
    producer.flush(30)
    producer.close()
    stop = threading.Event()
    counts = {MANAGED: 0, BROKER: 0}
    errors: list[BaseException] = []

    def run(group: str) -> None:
        try:
            consumer = KafkaConsumer(TOPIC, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                     client_id="authz-app", **options)
            while not stop.is_set():
                for records in consumer.poll(200).values():
                    counts[group] += len(records)
                if counts[group] >= 20:
                    consumer.commit()
            consumer.close()
        except BaseException as exc:  # reported by the fixture
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(g,), daemon=True) for g in (MANAGED, BROKER)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while min(counts.values()) < 20 and time.monotonic() < deadline and not errors:
        time.sleep(0.2)
    assert not errors and min(counts.values()) >= 20, (counts, errors)
    time.sleep(1.0)  # a commit of each
    yield
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors


# --- the requests, for a group id -----------------------------------------------------------------------------

def _topic_ids(setup: Setup) -> dict[str, Any]:
    with setup.broker.connect() as admin:
        metadata = admin.send(mc("MetadataRequest")(topics=[mc("MetadataRequest").MetadataRequestTopic(name=n)
                                                            for n in (TOPIC, OTHER)]), 12)
    return {t.name: t.topic_id for t in metadata.topics}


def _requests(group: str, ids: dict[str, Any] | None = None) -> dict[str, tuple[Any, int]]:
    oc, of, od = mc("OffsetCommitRequest"), mc("OffsetFetchRequest"), mc("OffsetDeleteRequest")
    txn = mc("TxnOffsetCommitRequest")
    ids = ids or {}
    topics = [oc.OffsetCommitRequestTopic(name=n, partitions=[oc.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=999)]) for n in (TOPIC, OTHER)]
    protocol = mc("JoinGroupRequest").JoinGroupRequestProtocol
    out = {
        "JoinGroup": (mc("JoinGroupRequest")(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                                             member_id="", protocol_type="consumer",
                                             protocols=[protocol(name="range", metadata=b"")]), 7),
        "SyncGroup": (mc("SyncGroupRequest")(group_id=group, generation_id=1, member_id="intruder",
                                             protocol_type="consumer", protocol_name="range", assignments=[]), 5),
        "Heartbeat": (mc("HeartbeatRequest")(group_id=group, generation_id=1, member_id="intruder"), 4),
        "OffsetCommit": (oc(group_id=group, generation_id_or_member_epoch=1, member_id="intruder",
                            topics=topics), 8),
        "OffsetCommitAdmin": (oc(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                 topics=topics[1:]), 8),
        "OffsetFetch": (of(groups=[of.OffsetFetchRequestGroup(group_id=group, topics=[
            of.OffsetFetchRequestTopics(name=n, partition_indexes=[0]) for n in (TOPIC, OTHER)])]), 9),
        "OffsetFetchAll": (of(groups=[of.OffsetFetchRequestGroup(group_id=group, topics=None)]), 9),
        "OffsetFetchV7": (of(group_id=group, topics=[of.OffsetFetchRequestTopic(name=n, partition_indexes=[0])
                                                     for n in (TOPIC, OTHER)]), 7),
        "DescribeGroups": (mc("DescribeGroupsRequest")(groups=[group], include_authorized_operations=True), 5),
        "DeleteGroups": (mc("DeleteGroupsRequest")(groups_names=[group]), 2),
        "OffsetDelete": (od(group_id=group, topics=[od.OffsetDeleteRequestTopic(name=n, partitions=[
            od.OffsetDeleteRequestPartition(partition_index=0)]) for n in (TOPIC, OTHER)]), 0),
        "FindCoordinator": (mc("FindCoordinatorRequest")(key_type=0, coordinator_keys=[group]), 4),
        "StreamsGroupDescribe": (mc("StreamsGroupDescribeRequest")(group_ids=[group],
                                                                   include_authorized_operations=True), 0),
        "ConsumerGroupDescribe": (mc("ConsumerGroupDescribeRequest")(group_ids=[group],
                                                                     include_authorized_operations=True), 0),
        "LeaveGroup": (mc("LeaveGroupRequest")(group_id=group, members=[
            mc("LeaveGroupRequest").MemberIdentity(member_id="intruder", group_instance_id=None)]), 4),
        "TxnOffsetCommit": (txn(transactional_id="authz-tx", group_id=group, producer_id=1, producer_epoch=0,
                                generation_id_or_member_epoch=-1, member_id="", topics=[txn.TxnOffsetCommitRequestTopic(
                                    name=TOPIC, partitions=[txn.TxnOffsetCommitRequestPartition(
                                        partition_index=0, committed_offset=999)])]), 4),
    }
    if ids:
        out["OffsetCommitV10"] = (oc(group_id=group, generation_id_or_member_epoch=1, member_id="intruder",
                                     topics=[oc.OffsetCommitRequestTopic(name="", topic_id=ids[n], partitions=[
                                         oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=999)])
                                         for n in (TOPIC, OTHER)]), 10)
        out["OffsetFetchV10"] = (of(groups=[of.OffsetFetchRequestGroup(group_id=group, topics=[
            of.OffsetFetchRequestTopics(name="", topic_id=ids[n], partition_indexes=[0]) for n in (TOPIC, OTHER)])]),
            10)
    return out


def _streams_heartbeat(group: str, changelog: bool = False) -> tuple[Any, int]:
    cls = mc("StreamsGroupHeartbeatRequest")
    changelogs = [cls.TopicInfo(name=f"{group}-store-changelog", partitions=0, replication_factor=0,
                                topic_configs=[])] if changelog else []
    topology = cls.Topology(epoch=0, subtopologies=[cls.Subtopology(
        subtopology_id="0", source_topics=[TOPIC], repartition_sink_topics=[], state_changelog_topics=changelogs,
        repartition_source_topics=[], copartition_groups=[])])
    return cls(group_id=group, member_id=f"authz-{group}", member_epoch=0, endpoint_information_epoch=0,
               instance_id=None, rack_id=None, rebalance_timeout_ms=30000, topology=topology, active_tasks=[],
               standby_tasks=[], warmup_tasks=[], process_id="p", user_endpoint=None, client_tags=[],
               task_offsets=[], task_end_offsets=[], shutdown_application=False), 0


VOLATILE = {"member_id", "leader", "committed_offset", "client_host", "client_id", "members", "host", "port",
            "node_id", "error_message", "throttle_time_ms", "member_epoch", "heartbeat_interval_ms"}


def _normal(value: Any, group: str, other: str) -> Any:
    """A response as plain data, the group id `group` written `other`, values that differ by nature masked."""
    if hasattr(value, "_fields"):
        out = {}
        for name in value._fields:
            item = getattr(value, name)
            if name in VOLATILE and item not in (None, "", -1):
                item = "<set>" if name != "members" else len(item)
            out[name] = _normal(item, group, other)
        return out
    if isinstance(value, (list, tuple)):
        return [_normal(v, group, other) for v in value]
    if isinstance(value, str):
        return value.replace(group, other)
    return value


def _codes(outcome: Any) -> list[int]:
    """Every error code of a normalized answer, in order (the matrix's summary)."""
    if isinstance(outcome, dict):
        return [c for k, v in outcome.items() for c in ([v] if k == "error_code" else _codes(v))]
    if isinstance(outcome, list):
        return [c for v in outcome for c in _codes(v)]
    return []


def _diff(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """The fields where two normalized answers differ: `path: gateway's != broker's`."""
    if isinstance(ours, dict) and isinstance(theirs, dict) and ours.keys() == theirs.keys():
        return [d for k in ours for d in _diff(ours[k], theirs[k], f"{path}.{k}")]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in _diff(a, b, f"{path}[{i}]")]
    return [] if ours == theirs else [f"{path}: gateway {ours!r} != broker {theirs!r}"]


def _compare(setup: Setup, user: str, name: str, managed: tuple[Any, int], broker: tuple[Any, int],
             managed_group: str, broker_group: str) -> tuple[Any, Any]:
    client = Client(setup.gateway, user)
    try:
        ours = client.send(*managed)
        theirs = client.send(*broker)
    finally:
        client.close()
    return _normal(ours, managed_group, broker_group), _normal(theirs, broker_group, broker_group)


@pytest.mark.parametrize("user", PRINCIPALS)
def test_matrix_same_as_broker(setup: Setup, consumers: None, user: str) -> None:
    ids = _topic_ids(setup)
    managed, broker = _requests(MANAGED, ids), _requests(BROKER, ids)
    differences = {}
    outcomes = {}
    for name in managed:
        ours, theirs = _compare(setup, user, name, managed[name], broker[name], MANAGED, BROKER)
        outcomes[name] = theirs
        if ours != theirs:
            differences[name] = _diff(ours, theirs)
    print(f"\n{user}: " + "; ".join(f"{n} {_codes(o)}" for n, o in outcomes.items()))
    assert not differences, differences
    if user == "none":  # the broker refused everything: so did the gateway (not vacuous)
        assert outcomes["Heartbeat"]["error_code"] == 30 and outcomes["DescribeGroups"]["groups"][0]["error_code"] == 30
    if user == "group":
        assert {p["error_code"] for t in outcomes["OffsetCommit"]["topics"] for p in t["partitions"]} >= {29}


@pytest.mark.parametrize("user", PRINCIPALS)
def test_list_groups_as_broker(setup: Setup, consumers: None, user: str) -> None:
    client = Client(setup.gateway, user)
    try:
        listed = {g.group_id: g for g in client.send(mc("ListGroupsRequest")(states_filter=[], types_filter=[]),
                                                     5).groups}
    finally:
        client.close()
    assert (MANAGED in listed) == (BROKER in listed), sorted(listed)
    assert (BROKER in listed) == (user != "none")  # READ and DELETE imply DESCRIBE


@pytest.mark.parametrize("user", PRINCIPALS)
def test_streams_heartbeat_same_as_broker(setup: Setup, consumers: None, user: str) -> None:
    ours, theirs = _compare(setup, user, "StreamsGroupHeartbeat", _streams_heartbeat(STREAMS_MANAGED),
                            _streams_heartbeat(STREAMS_BROKER), STREAMS_MANAGED, STREAMS_BROKER)
    keys = ("error_code",)
    assert {k: ours[k] for k in keys} == {k: theirs[k] for k in keys}, (ours, theirs)
    if user == "none":
        assert theirs["error_code"] == 30


def test_offsets_never_written_without_read(setup: Setup, consumers: None) -> None:
    """The audit's case: a principal without ACLs commits offset 999 to the managed group; an admin reads none."""
    request, version = _requests(MANAGED)["OffsetCommitAdmin"]
    client = Client(setup.gateway, "none")
    try:
        answer = client.send(request, version)
    finally:
        client.close()
    assert {p.error_code for t in answer.topics for p in t.partitions} == {30}
    admin = Client(setup.gateway, "gateway")
    try:
        fetched = admin.send(*_requests(MANAGED)["OffsetFetchAll"])
    finally:
        admin.close()
    assert all(p.committed_offset != 999 for g in fetched.groups for t in g.topics for p in t.partitions)


# --- logins read as the broker reads them ---------------------------------------------------------------------

def _described_by_gateway(answer: Any) -> bool:
    """The gateway's DescribeGroups of MANAGED shows the good client; the broker has no member of it."""
    group = answer.groups[0]
    return group.error_code == 0 and group.group_state == "Stable" and len(group.members) == 1


def test_handshake_with_a_trailing_byte_is_a_login(setup: Setup, consumers: None) -> None:
    """Kafka reads a SaslHandshake with bytes after it: so does the gateway, and it keeps the group its own."""
    client = Client(setup.gateway, None)
    try:
        handshake = mc("SaslHandshakeRequest")(mechanism="PLAIN")
        frame = client.frame(handshake, 1) + b"\0"
        client.sock.sendall(struct.pack(">i", len(frame) - 4) + frame[4:])
        assert client.receive(handshake, 1).error_code == 0
        assert client.send(*_login("app")).error_code == 0
        describe = mc("DescribeGroupsRequest")(groups=[MANAGED])
        assert _described_by_gateway(client.send(describe, 5))
    finally:
        client.close()


def test_login_pipelined_with_group_requests(setup: Setup, consumers: None) -> None:
    """Handshake, login and a DescribeGroups of the managed group in one write: the gateway answers it."""
    client = Client(setup.gateway, None)
    try:
        handshake, login, describe = (mc("SaslHandshakeRequest")(mechanism="PLAIN"), _login("app"),
                                      mc("DescribeGroupsRequest")(groups=[MANAGED]))
        client.sock.sendall(client.frame(handshake, 1) + client.frame(*login) + client.frame(describe, 5))
        assert client.receive(handshake, 1).error_code == 0
        assert client.receive(*login).error_code == 0
        assert _described_by_gateway(client.receive(describe, 5))
    finally:
        client.close()


@pytest.mark.parametrize("password", ["wrong", None])
def test_group_request_before_a_completed_login_is_not_answered(setup: Setup, consumers: None,
                                                                password: str | None) -> None:
    """A wrong password, or no login at all: the broker hangs up, and so does the gateway, answering nothing."""
    client = Client(setup.gateway, None)
    try:
        describe = mc("DescribeGroupsRequest")(groups=[MANAGED])
        frames = b""
        if password is not None:
            frames += client.frame(mc("SaslHandshakeRequest")(mechanism="PLAIN"), 1) + client.frame(
                mc("SaslAuthenticateRequest")(auth_bytes=b"\0app\0" + password.encode()), 2)
        client.sock.sendall(frames + client.frame(describe, 5))
        if password is not None:
            assert client.receive(mc("SaslHandshakeRequest")(mechanism="PLAIN"), 1).error_code == 0
            assert client.receive(mc("SaslAuthenticateRequest")(auth_bytes=b""), 2).error_code == 58
        with pytest.raises((ConnectionError, OSError)):
            client.receive(describe, 5)
    finally:
        client.close()


@pytest.mark.parametrize("group", [MANAGED, BROKER])
def test_session_lifetime_ends_local_answers(setup: Setup, consumers: None, group: str) -> None:
    """KIP-368: past its session lifetime a connection that did not re-authenticate is closed at its next
    request, by the broker for its group and by the gateway for the group it answers itself."""
    client = Client(setup.gateway, "app")
    try:
        assert 0 < client.lifetime_ms <= REAUTH_MS
        describe = mc("DescribeGroupsRequest")(groups=[group])
        time.sleep(client.lifetime_ms / 1000 - 0.5)
        assert client.send(describe, 5).groups[0].error_code == 0  # the gateway's answers remembered: not enough
        time.sleep(0.7)
        with pytest.raises((ConnectionError, OSError)):
            client.send(describe, 5)
    finally:
        client.close()


@pytest.mark.parametrize("user", PRINCIPALS)
def test_mixed_describe_same_as_broker(setup: Setup, consumers: None, user: str) -> None:
    """A DescribeGroups naming the managed group and a broker group: each described as the broker describes the
    other, the broker's part asked on the client's own connection (its ACLs), refused groups first."""
    client = Client(setup.gateway, user)
    try:
        answer = client.send(mc("DescribeGroupsRequest")(groups=[MANAGED, BROKER],
                                                         include_authorized_operations=True), 5)
    finally:
        client.close()
    by_id = {g.group_id: g for g in answer.groups}
    assert _normal(by_id[MANAGED], MANAGED, BROKER) == _normal(by_id[BROKER], BROKER, BROKER)
    allowed = user != "none"
    assert by_id[BROKER].error_code == (0 if allowed else 30)
    if allowed:
        operations = {"group": 0b100001000, "grouptopic": 0b100001000, "describe": 0b100000000,
                      "delete": 0b101000000}[user]  # READ 3, DELETE 6, DESCRIBE 8
        assert by_id[MANAGED].authorized_operations == operations



@pytest.mark.parametrize("user", ["grouptopic", "streams", "streamscreate"])
def test_streams_internal_topics_created_only_with_create(setup: Setup, consumers: None, user: str) -> None:
    """A streams member whose topology has a changelog: without DESCRIBE on it TOPIC_AUTHORIZATION_FAILED;
    with DESCRIBE but no CREATE the topic is not created and the status says so; with CREATE it is."""
    managed, broker = f"{STREAMS_MANAGED}-{user}", f"{STREAMS_BROKER}-{user}"
    ours, theirs = _compare(setup, user, "StreamsGroupHeartbeat", _streams_heartbeat(managed, True),
                            _streams_heartbeat(broker, True), managed, broker)
    assert ours["error_code"] == theirs["error_code"], (ours, theirs)
    assert theirs["error_code"] == (29 if user == "grouptopic" else 0)
    statuses = {s["status_code"]: s["status_detail"] for s in (theirs["status"] or [])}
    assert {s["status_code"]: s["status_detail"] for s in (ours["status"] or [])} == statuses
    assert ("Unauthorized to CREATE" in statuses.get(3, "")) == (user == "streams")
    time.sleep(2)
    with setup.broker.connect() as admin:
        metadata = admin.send(mc("MetadataRequest")(topics=[mc("MetadataRequest").MetadataRequestTopic(name=n)
                                                            for n in (f"{managed}-store-changelog",
                                                                      f"{broker}-store-changelog")],
                                                    allow_auto_topic_creation=False))
    created = {t.name: t.error_code == 0 for t in metadata.topics}
    assert created[f"{managed}-store-changelog"] == created[f"{broker}-store-changelog"] == (user == "streamscreate")



def _unsecured_token(user: str) -> bytes:
    """An OAUTHBEARER client message with an unsecured JWT (Kafka's OAuthBearerUnsecured* handlers)."""
    import base64
    import json

    def part(doc: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    now = int(time.time())
    jwt = f"{part({'alg': 'none'})}.{part({'sub': user, 'iat': now, 'exp': now + 3600})}."
    return f"n,,\x01auth=Bearer {jwt}\x01\x01".encode()


def test_oauthbearer_login_is_known_by_the_brokers_answers(setup: Setup, consumers: None) -> None:
    """An OAUTHBEARER login (one round whose end only the broker knows) pipelined with a DescribeGroups of the
    managed group: the gateway answers it, and as the token's principal (whose ACLs apply)."""
    for user, allowed in (("app", True), ("none", False)):
        client = Client(setup.gateway, None)
        try:
            handshake = mc("SaslHandshakeRequest")(mechanism="OAUTHBEARER")
            login = mc("SaslAuthenticateRequest")(auth_bytes=_unsecured_token(user))
            describe = mc("DescribeGroupsRequest")(groups=[MANAGED])
            client.sock.sendall(client.frame(handshake, 1) + client.frame(login, 2) + client.frame(describe, 5))
            assert client.receive(handshake, 1).error_code == 0
            assert client.receive(login, 2).error_code == 0
            answer = client.receive(describe, 5)
        finally:
            client.close()
        if allowed:
            assert _described_by_gateway(answer)
        else:
            assert answer.groups[0].error_code == 30
