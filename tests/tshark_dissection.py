"""tshark's Kafka dissector beside kprotocol's decoder, field by field (tests/test_real_traffic.py).

Every Kafka PDU tshark dissects is paired with kprotocol's exchange (same packet, same correlation id). tshark
declines some, and says so in its top-level expert info: a version newer than its dissector supports, an API key
it does not know, or a response whose request it did not keep. Those are counted per reason; every other PDU,
request or response, is compared field by field: tshark's fields in the order it shows them against kprotocol's
fields in document order (`FIELDS` names the pairs). What tshark gets wrong is listed in `KNOWN_MISTAKES`, with
the tshark release it was seen in; any other difference, or a field one side has that `FIELDS` does not name,
is a failure.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kprotocol.capture.exchanges import Exchange
from kprotocol.toolchain.tcpdump import tool

# kprotocol's field (`name`, or `list.name` where the name is not enough) -> tshark's field.
FIELDS = {
    "throttleTimeMs": "kafka.throttle_time", "errorCode": "kafka.error", "partitionErrorCode": "kafka.error",
    "errorMessage": "kafka.error_message", "groupId": "kafka.consumer_group", "generationId": "kafka.generation_id",
    "generationIdOrMemberEpoch": "kafka.generation_id", "memberId": "kafka.member_id",
    "groupInstanceId": "kafka.consumer_group_instance", "protocolType": "kafka.protocol_type",
    "protocolName": "kafka.protocol_name", "leader": "kafka.group_leader_id",
    "sessionTimeoutMs": "kafka.session_timeout", "rebalanceTimeoutMs": "kafka.rebalance_timeout",
    "assignment": "kafka.member_assignment",
    "protocols.name": "kafka.protocol_name", "protocols.metadata": "kafka.protocol_metadata",
    "members.metadata": "kafka.member_metadata", "topics.name": "kafka.topic_name", "name": "kafka.topic_name",
    "committedOffset": "kafka.offset", "committedLeaderEpoch": "kafka.leader_epoch",
    "committedMetadata": "kafka.metadata", "partitionIndex": "kafka.partition_id", "partitions": "kafka.partition_id",
    "transactionalId": "kafka.transactional_id", "v3AndBelowTransactionalId": "kafka.transactional_id",
    "producerId": "kafka.producer_id", "v3AndBelowProducerId": "kafka.producer_id",
    "producerEpoch": "kafka.producer_epoch", "v3AndBelowProducerEpoch": "kafka.producer_epoch",
    "committed": "kafka.transaction_result", "key": "kafka.coordinator_key", "keyType": "kafka.coordinator_type",
    "nodeId": "kafka.node_id", "host": "kafka.host", "port": "kafka.port",
    "apiKeys.apiKey": "kafka.api_versions.api_key", "apiKeys.minVersion": "kafka.api_versions.min_version",
    "apiKeys.maxVersion": "kafka.api_versions.max_version", "clientSoftwareName": "kafka.client_software_name",
    "clientSoftwareVersion": "kafka.client_software_version",
}
# tshark's fields that say how it framed and paired the PDU, compared apart (`header_differences`) or not at all.
FRAMING = {"kafka.len", "kafka.request_key", "kafka.response_key", "kafka.api_key", "kafka.request.version",
           "kafka.response.version", "kafka.api_version", "kafka.correlation_id", "kafka.client_id",
           "kafka.request_frame"}

# What tshark's dissector gets wrong or leaves out, by tshark release: (api, "request"/"response", a tshark field,
# or a kprotocol field tshark does not show) -> what tshark does.
_RAW_FEATURES = "shows ApiVersions v3's tagged fields (SupportedFeatures, FinalizedFeaturesEpoch, FinalizedFeatures) " \
                "as raw tags and bytes, not as fields"
KNOWN_MISTAKES: dict[str, dict[tuple[str, str, str], str]] = {
    "4.0.": {
        **{("ApiVersions", "response", name): _RAW_FEATURES for name in (
            "kafka.tagged_field_tag", "kafka.tagged_field_data", "supportedFeatures.name",
            "supportedFeatures.minVersion", "supportedFeatures.maxVersion", "finalizedFeaturesEpoch",
            "finalizedFeatures.name", "finalizedFeatures.minVersionLevel", "finalizedFeatures.maxVersionLevel")},
    },
}
DECLINED = (re.compile(r"Unsupported (?P<api>\w+) version\. Supports v0(-(?P<max>\d+))?\."),
            re.compile(r"Unknown (?P<key>\d+) API key"), re.compile(r"Request missing"))


NO_REQUEST = "tshark did not keep the request (it declined it)"


def version() -> str:
    return subprocess.run([tool("tshark"), "--version"], capture_output=True, text=True,
                          check=True).stdout.split()[2]


@dataclass
class Pdu:
    frame: int
    request: bool
    correlation_id: int
    fields: list[tuple[str, str]] = field(default_factory=list)  # leaves, in tshark's order
    declined: list[str] = field(default_factory=list)  # tshark's top-level expert messages

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.fields if k == name), None)


def dissect(path: Path, port: int) -> list[Pdu]:
    """Every Kafka PDU tshark dissects in `path` (Kafka on `port`)."""
    out = subprocess.run([tool("tshark"), "-r", str(path), "-d", f"tcp.port=={port},kafka", "-Y", "kafka",
                          "-T", "json"], capture_output=True, text=True, timeout=600, check=True).stdout
    pdus = []
    for packet in json.loads(out, object_pairs_hook=lambda pairs: pairs):  # keeps repeated keys
        layers = dict(dict(dict(packet)["_source"])["layers"])
        frame = int(dict(layers["frame"])["frame.number"])
        for name, tree in dict(packet)["_source"][0][1]:
            if name == "kafka":
                pdu = Pdu(frame, False, -1)
                _leaves(tree, pdu, top=True)
                pdu.request = pdu.get("kafka.request_key") is not None
                pdu.correlation_id = int(pdu.get("kafka.correlation_id"))
                pdus.append(pdu)
    return pdus


def _leaves(tree: list, pdu: Pdu, top: bool) -> None:
    for key, value in tree:
        if key == "_ws.expert":
            if top:
                pdu.declined.append(dict(value)["_ws.expert.message"])
        elif isinstance(value, list):
            _leaves(value, pdu, top and key.startswith("kafka.") and key.endswith("_tree"))
        elif key.startswith("kafka."):
            pdu.fields.append((key, value))


def declined_reason(pdu: Pdu, exchange: Exchange) -> str | None:
    """Why tshark declined the PDU, when it did: its own words, checked against what kprotocol decoded. A
    reason that does not hold (a version it claims to support, another API key) raises AssertionError."""
    for message in pdu.declined:
        for pattern in DECLINED:
            found = pattern.fullmatch(message)
            if found and "max" in pattern.groupindex:
                assert exchange.api_version > int(found["max"] or 0), (message, exchange.api_version)
                return f"tshark supports {found['api']} up to v{found['max'] or 0}"
            if found and "key" in pattern.groupindex:
                assert int(found["key"]) == exchange.api_key, (message, exchange.api_key)
                return f"tshark does not know API key {exchange.api_key}"
            if found:
                assert not pdu.request
                return NO_REQUEST
    assert not pdu.declined, f"frame {pdu.frame}: tshark says {pdu.declined}"
    return None


def header_differences(pdu: Pdu, exchange: Exchange) -> list[str]:
    """A request's header (its layout does not depend on the body's version, so every request is compared)."""
    theirs = (pdu.get("kafka.request_key"), pdu.get("kafka.request.version"), pdu.get("kafka.client_id"))
    ours = (str(exchange.api_key), str(exchange.api_version), _text(exchange.client_id))
    return [] if theirs == ours else [f"frame {pdu.frame} header: tshark {theirs}, kprotocol {ours}"]


def differences(pdu: Pdu, exchange: Exchange, tshark_version: str) -> tuple[list[str], Counter]:
    """Field by field, tshark's dissection against kprotocol's decode of the same message; the differences,
    and the known tshark mistakes met."""
    message = exchange.request if pdu.request else exchange.response
    assert message is not None, f"frame {pdu.frame}: tshark dissects what kprotocol could not decode"
    kind = "request" if pdu.request else "response"
    ours: list[tuple[str, str]] = []
    unnamed: list[str] = []
    _ours(message.to_json(exchange.api_version), "", ours, unnamed)
    mistakes = next((m for prefix, m in KNOWN_MISTAKES.items() if tshark_version.startswith(prefix)), {})
    met: Counter = Counter()
    for name in unnamed:
        if (exchange.api_name, kind, name) in mistakes:
            met[f"{exchange.api_name} {kind} {name}: {mistakes[(exchange.api_name, kind, name)]}"] += 1
            unnamed = [n for n in unnamed if n != name]
    theirs = [(k, v) for k, v in pdu.fields if k not in FRAMING]
    unnamed += [k for k, _ in theirs if k not in FIELDS.values() and (exchange.api_name, kind, k) not in mistakes]
    out = [f"{exchange.api_name} v{exchange.api_version} {kind} (frame {pdu.frame}): no field pairs with "
           f"{sorted(set(unnamed))}"] if unnamed else []
    for name in sorted({k for k, _ in theirs} | {k for k, _ in ours}):
        a, b = [v for k, v in theirs if k == name], [v for k, v in ours if k == name]
        if a != b:
            reason = mistakes.get((exchange.api_name, kind, name))
            if reason:
                met[f"{exchange.api_name} {kind} {name}: {reason}"] += 1
            else:
                out.append(f"{exchange.api_name} v{exchange.api_version} {kind} (frame {pdu.frame}) {name}: "
                           f"tshark {a}, kprotocol {b}")
    return out, met


def _ours(node: Any, parent: str, out: list[tuple[str, str]], unnamed: list[str], key: str = "") -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _ours(v, parent, out, unnamed, k) if not isinstance(v, list) or not v or not isinstance(v[0], dict) \
                else [_ours(item, k, out, unnamed) for item in v]
        return
    if isinstance(node, list):
        for item in node:
            _ours(item, parent, out, unnamed, key)
        return
    path = f"{parent}.{key}" if parent else key
    name = FIELDS.get(path, FIELDS.get(key)) if path not in NOT_TOPICS else None
    if name is None:
        unnamed.append(path)
    else:
        out.append((name, _bytes(node) if name in BYTES else _text(node)))


NOT_TOPICS = {"supportedFeatures.name", "finalizedFeatures.name"}  # `name` is a topic's elsewhere
BYTES = {"kafka.protocol_metadata", "kafka.member_metadata", "kafka.member_assignment"}


def _text(value: Any) -> str:
    if value is None:
        return "[ Null ]"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _bytes(value: str | None) -> str:
    return "[ Null ]" if value is None else ":".join(f"{b:02x}" for b in base64.b64decode(value))


@dataclass
class Judgement:
    tshark: str
    compared: Counter = field(default_factory=Counter)  # "request"/"response" -> PDUs compared field by field
    declined: Counter = field(default_factory=Counter)  # tshark's reason -> PDUs
    mistakes: Counter = field(default_factory=Counter)  # known tshark mistakes met
    differences: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"tshark {self.tshark}: {self.compared['request']} requests and {self.compared['response']} responses "
                f"equal field by field; declined by tshark: " +
                ", ".join(f"{n} ({reason})" for reason, n in self.declined.most_common()) +
                "; its known mistakes met: " + (", ".join(f"{n}x {m}" for m, n in self.mistakes.items()) or "none"))


def judge(path: Path, port: int) -> Judgement:
    """Every PDU tshark dissects in the capture against kprotocol's decode (`kprotocol.capture`)."""
    from kprotocol.capture import decode_capture

    ours: dict[tuple[bool, int, int], Exchange] = {}
    for e in decode_capture(path, ports=(port,)):
        ours[(True, e.request_frame.last, e.correlation_id)] = e
        if e.response_frame is not None:
            ours[(False, e.response_frame.last, e.correlation_id)] = e
    result = Judgement(version())
    declined_requests = set()
    for pdu in dissect(path, port):
        exchange = ours.get((pdu.request, pdu.frame, pdu.correlation_id))
        assert exchange is not None, f"frame {pdu.frame}: tshark dissects a Kafka PDU kprotocol did not find"
        if pdu.request:
            result.differences += header_differences(pdu, exchange)
        reason = declined_reason(pdu, exchange)
        if reason and pdu.request:
            declined_requests.add((pdu.frame, pdu.correlation_id))
        if reason == NO_REQUEST:
            assert (exchange.request_frame.last, exchange.correlation_id) in declined_requests, \
                f"frame {pdu.frame}: tshark lost the request of a response although it decoded the request"
        if reason:
            result.declined[reason] += 1
            continue
        found, met = differences(pdu, exchange, result.tshark)
        result.differences += found
        result.mistakes += met
        result.compared["request" if pdu.request else "response"] += 1
    return result
