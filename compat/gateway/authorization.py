"""The brokers' ACLs on every request the gateway answers itself, decided by the brokers.

A client's login passes through to its own upstream connection, so the gateway asks the broker on that
connection, as that principal (whatever the principal builder, super.users or allow.everyone.if.no.acl.found
make of it; ANONYMOUS without SASL or mutual TLS upstream), with requests that read and change nothing:

- READ on a group: an OffsetCommit of the group for one partition of a topic that cannot exist (its name
  is not a legal topic name): GROUP_AUTHORIZATION_FAILED, or any other answer given before a coordinator
  is asked (Kafka checks the group first, then the topic, then answers without the coordinator);
- DESCRIBE on groups: one DescribeGroups naming them (GROUP_AUTHORIZATION_FAILED per group, or anything else);
- DELETE on a group: an OffsetDelete of no partitions;
- WRITE on a transactional id (with READ on the group): a TxnOffsetCommit like the OffsetCommit above;
- topics: one Metadata (by name or id) with `include_topic_authorized_operations`, auto-creation off;
- DESCRIBE on the cluster: DescribeCluster with `include_cluster_authorized_operations`.

The probes are written on the client's connection just after the request they judge was read, and their
answers taken off it before that request's answer is due (proxy.Session), so a pipelined connection keeps
its order. Each connection remembers an answer for `TTL_S` seconds at most (bounded to `MAX_ENTRIES`): an
ACL the brokers add or remove applies to locally answered requests within that time, the staleness bound
(UNREACHABLE_GRACE_S more while the connection's broker is unreachable, for what it judged before).

`Checks.run` then answers as the broker's KafkaApis does (Kafka 4.4): which operation on which resource per
API, which error at which level of the response (the request's, the group's, the topic's, the partition's),
in the broker's order (refused groups before the coordinator's answers in DescribeGroups and the describes,
after them in DeleteGroups; refused topics of a commit before the committed ones, of a fetch after them).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from compat.gateway import group_apis as apis
from kprotocol.registry import api_classes, message_class
from kprotocol.runtime.struct import Message

TTL_S = 1.0
UNREACHABLE_GRACE_S = 60.0
NOTHING = object()  # no answer remembered
MAX_ENTRIES = 4096
GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 30, 29, 53
STREAMS_INVALID_TOPOLOGY, UNKNOWN_TOPIC_ID, INCONSISTENT_GROUP_PROTOCOL = 130, 100, 23
READ, WRITE, CREATE, DELETE, DESCRIBE = 3, 4, 5, 6, 8  # AclOperation codes (bits of the authorized operations)
GROUP_OPERATIONS = (READ, DESCRIBE, DELETE)
NO_OPERATIONS = -(1 << 31)  # Kafka's "not computed" bitfield
PROBE_TOPIC = "kprotocol/authorization-probe"  # '/' is not legal in a topic name: it never exists
ZERO_UUID = uuid.UUID(int=0)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
VERSIONS = {"OffsetCommitRequest": 8, "DescribeGroupsRequest": 5, "OffsetDeleteRequest": 0,
            "TxnOffsetCommitRequest": 3, "MetadataRequest": 12, "DescribeClusterRequest": 1}

AUTHORIZED_APIS = frozenset(apis.API_KEYS)  # FindCoordinator, ListGroups and every group API
current: contextvars.ContextVar[ConnectionAuthorizer | None] = contextvars.ContextVar("authorizer", default=None)


class Creating:
    """Which internal topics of a StreamsGroupHeartbeat the principal may have created (CREATE on the cluster,
    or on the topic), and those refused: the gateway creates the others only, as the broker does."""

    def __init__(self, allows: Callable[[str], bool]) -> None:
        self.allows = allows
        self.refused: list[str] = []


creating: contextvars.ContextVar[Creating | None] = contextvars.ContextVar("creating", default=None)
MISSING_INTERNAL_TOPICS = 3  # StreamsGroupHeartbeat status code

Submit = Callable[[bytes, int, int], asyncio.Future]  # (request frame, api key, version) -> future response body


SECURITY_DISABLED = 54
ACL_RECHECK_S = 10.0
ACL_CHECK_TIMEOUT_S = 5.0


class ClusterAcls:
    """Whether the brokers enforce ACLs at all. A broker without an authorizer answers DescribeAcls with
    SECURITY_DISABLED and allows every request: while every broker the gateway knows says so, the brokers'
    judgement is known without asking, and no probe is written on clients' connections. Any other answer
    (ACLs, CLUSTER_AUTHORIZATION_FAILED for the gateway's own principal, an error, no answer in time) turns
    the probes on. Checked at start and every ACL_RECHECK_S: an authorizer a rolling restart enables applies
    to locally answered requests within that time."""

    def __init__(self, upstream: Any, recheck_s: float = ACL_RECHECK_S) -> None:
        self.upstream, self.recheck_s = upstream, recheck_s
        self.enforced = True  # until the brokers said otherwise
        self._task: asyncio.Task | None = None

    async def check(self) -> bool:
        """Ask every known broker (the bootstrap address until they are known); whether ACLs are enforced."""
        cls = message_class("DescribeAclsRequest")
        request = cls(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
                      host_filter=None, operation=1, permission_type=1)  # ANY of everything
        brokers = list(dict.fromkeys(getattr(self.upstream, "brokers", {}).values()))
        connections = [self.upstream.connection(a) for a in brokers] or [self.upstream.bootstrap]
        try:
            answers = await asyncio.wait_for(asyncio.gather(*(c.send(request, 1) for c in connections),
                                                            return_exceptions=True), ACL_CHECK_TIMEOUT_S)
        except asyncio.TimeoutError:
            answers = []
        self.enforced = not answers or any(isinstance(a, BaseException) or a.error_code != SECURITY_DISABLED
                                           for a in answers)
        return self.enforced

    async def run(self) -> None:
        """Check every `recheck_s` until cancelled (`start` made the first check)."""
        while True:
            await asyncio.sleep(self.recheck_s)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - whatever went wrong, the probes stay (or turn) on
                self.enforced = True

    async def start(self) -> None:
        await self.check()
        self._task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


class ConnectionAuthorizer:
    """One client connection's questions to the broker, and its answers remembered for TTL_S seconds."""

    def __init__(self, ttl_s: float = TTL_S, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self.lost_at: float | None = None  # when the client's upstream connection went away
        self.answered = False  # the broker answered a probe: the connection was logged in
        self.must_close = False  # a question nobody could answer: closed after that answer
        self._cache: OrderedDict[Any, tuple[float, asyncio.Future]] = OrderedDict()
        self._ids = itertools.count(0x40000000)
        self.pending: list[tuple[bytes, int, int, asyncio.Future]] = []  # written upstream after the request

    def take(self) -> list[tuple[bytes, int, int, asyncio.Future]]:
        pending, self.pending = self.pending, []
        return pending

    def ask(self, request: Message, version: int | None = None) -> asyncio.Future:
        """The broker's answer to `request` on the client's connection (written once the current request is)."""
        from kprotocol.framing import encode_request

        if self.lost_at is not None:  # nobody to ask: what the broker said before, or no answer
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(ConnectionError("the client's upstream connection is gone"))
            failed.exception()  # retrieved: only those who wait on it hear of it
            return failed
        version = VERSIONS[type(request).__name__] if version is None else version
        header = message_class("RequestHeader")(request_api_key=request.api_key, request_api_version=version,
                                                correlation_id=next(self._ids), client_id="kprotocol-gateway")
        future = asyncio.get_running_loop().create_future()
        self.pending.append((encode_request(header, request), request.api_key, version, future))
        return future

    def _fresh(self, key: Any, now: float) -> asyncio.Future | None:
        """A remembered answer younger than TTL_S that did not fail."""
        entry = self._cache.get(key)
        if entry is None or entry[0] <= now and not (self.lost_at is not None and entry[0] + UNREACHABLE_GRACE_S > now):
            return None
        future = entry[1]
        if future.cancelled() or (future.done() and future.exception() is not None):
            return None
        return future

    def lost(self) -> None:
        """The client's upstream connection closed: its broker restarts, or is gone. The login and the ACLs the
        broker judged on this connection stand for UNREACHABLE_GRACE_S more (a managed group's members keep
        heartbeating through a broker restart); anything not asked before is answered COORDINATOR_NOT_AVAILABLE."""
        if self.lost_at is None:
            self.lost_at = time.monotonic()

    def _remembered(self, key: Any, make: Callable[[], asyncio.Future]) -> asyncio.Future:
        now = time.monotonic()
        fresh = self._fresh(key, now)
        if fresh is not None:
            return fresh
        previous = self._cache.get(key)
        last, expired_at = NOTHING, 0.0
        if previous is not None and previous[1].done() and not previous[1].cancelled() \
                and previous[1].exception() is None:  # should the broker be gone by now: what it said last
            last, expired_at = previous[1].result(), previous[0]
        future = self._or_last(make(), last, expired_at)
        self._cache[key] = (now + self.ttl_s, future)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return future

    def _or_last(self, asked: asyncio.Future, last: Any, expired_at: float) -> asyncio.Future:
        """`asked`'s answer, or when the connection's broker went away before giving it, the `last` answer
        (within UNREACHABLE_GRACE_S of its expiry)."""
        future = asyncio.get_running_loop().create_future()

        def done(f: asyncio.Future) -> None:
            if future.done():
                return
            error = ConnectionError("probe cancelled") if f.cancelled() else f.exception()
            if error is None:
                future.set_result(f.result())
            elif isinstance(error, ConnectionError) and self.lost_at is not None and last is not NOTHING \
                    and time.monotonic() < expired_at + UNREACHABLE_GRACE_S:
                future.set_result(last)
            else:
                if self.lost_at is not None:
                    self.must_close = True  # the client reconnects, to a broker that can judge
                future.set_exception(error)
                future.exception()  # retrieved: only those who wait on it hear of it
        asked.add_done_callback(done)
        return future

    # --- the questions ----------------------------------------------------------------------------------

    def group_read(self, group_id: str) -> asyncio.Future:
        """The OffsetCommit probe's answer (one partition)."""
        cls = message_class("OffsetCommitRequest")
        return self._remembered(("read", group_id), lambda: self.ask(cls(
            group_id=group_id, generation_id_or_member_epoch=-1, member_id="", topics=[cls.OffsetCommitRequestTopic(
                name=PROBE_TOPIC, partitions=[cls.OffsetCommitRequestPartition(partition_index=0)])])))

    def group_delete(self, group_id: str) -> asyncio.Future:
        cls = message_class("OffsetDeleteRequest")
        return self._remembered(("delete", group_id), lambda: self.ask(cls(group_id=group_id, topics=[])))

    def transactional(self, transactional_id: str, group_id: str) -> asyncio.Future:
        cls = message_class("TxnOffsetCommitRequest")
        return self._remembered(("txn", transactional_id, group_id), lambda: self.ask(cls(
            transactional_id=transactional_id, group_id=group_id, producer_id=-1, producer_epoch=-1,
            topics=[cls.TxnOffsetCommitRequestTopic(name=PROBE_TOPIC, partitions=[
                cls.TxnOffsetCommitRequestPartition(partition_index=0)])])))

    def groups_described(self, group_ids: Iterable[str]) -> dict[str, asyncio.Future]:
        """group -> a future of whether the principal may DESCRIBE it (one DescribeGroups for the unknown ones)."""
        now = time.monotonic()
        out: dict[str, asyncio.Future] = {}
        missing = []
        for g in dict.fromkeys(group_ids):
            fresh = self._fresh(("describe", g), now)
            if fresh is not None:
                out[g] = fresh
            else:
                missing.append(g)
        if missing:
            answer = self.ask(message_class("DescribeGroupsRequest")(groups=missing))
            for g in missing:
                out[g] = self._remembered(("describe", g), lambda g=g: _derived(
                    answer, lambda r, g=g: next(x.error_code for x in r.groups if x.group_id == g)
                    != GROUP_AUTHORIZATION_FAILED))
        return out

    def topics(self, names: Iterable[str] = (), ids: Iterable[uuid.UUID] = ()) -> dict[Any, asyncio.Future]:
        """name or id -> a future of (name, error code, authorized operations bitfield) from one Metadata."""
        now = time.monotonic()
        out: dict[Any, asyncio.Future] = {}
        missing: list[Any] = []
        for key in dict.fromkeys([*names, *ids]):
            fresh = self._fresh(("topic", key), now)
            if fresh is not None:
                out[key] = fresh
            else:
                missing.append(key)
        if missing:
            cls = message_class("MetadataRequest")
            answer = self.ask(cls(topics=[cls.MetadataRequestTopic(name=k) if isinstance(k, str) else
                                          cls.MetadataRequestTopic(name=None, topic_id=k) for k in missing],
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=True))
            for key in missing:
                out[key] = self._remembered(("topic", key), lambda key=key: _derived(answer, lambda r, key=key: next(
                    ((t.name, t.error_code, t.topic_authorized_operations) for t in r.topics
                     if (t.name == key if isinstance(key, str) else t.topic_id == key)), (None, UNKNOWN_TOPIC_ID, 0))))
        return out

    def describable_topics(self) -> asyncio.Future:
        """Every topic the principal may DESCRIBE (a Metadata of all topics lists only those)."""
        cls = message_class("MetadataRequest")
        return self._remembered(("all topics",), lambda: _derived(
            self.ask(cls(topics=None, allow_auto_topic_creation=False)), lambda r: {t.name for t in r.topics}))

    def cluster_operations(self) -> asyncio.Future:
        """The principal's operations on the cluster (a bitfield; none when DescribeCluster fails)."""
        return self._remembered(("cluster",), lambda: _derived(
            self.ask(message_class("DescribeClusterRequest")(include_cluster_authorized_operations=True)),
            lambda r: r.cluster_authorized_operations if r.error_code == 0 else NO_OPERATIONS))

    def cluster_describe(self) -> asyncio.Future:
        return _derived(self.cluster_operations(), lambda operations: _has(operations, DESCRIBE))


def _derived(source: asyncio.Future, derive: Callable[[Message], Any]) -> asyncio.Future:
    """A future of `derive(source's result)`."""
    future = asyncio.get_running_loop().create_future()

    def done(f: asyncio.Future) -> None:
        if future.done():
            return
        if f.cancelled() or f.exception() is not None:
            future.set_exception(f.exception() if not f.cancelled() else ConnectionError("probe cancelled"))
            future.exception()  # retrieved: only those who wait on it hear of it
            return
        try:
            future.set_result(derive(f.result()))
        except Exception as exc:  # an answer of an unexpected shape
            future.set_exception(exc)
    source.add_done_callback(done)
    return future


def _has(operations: int, operation: int) -> bool:
    return operations != NO_OPERATIONS and bool(operations & (1 << operation))


async def _read_allowed(probe: asyncio.Future) -> bool:
    answer = await probe
    return all(p.error_code != GROUP_AUTHORIZATION_FAILED for t in answer.topics for p in t.partitions)


async def _delete_allowed(probe: asyncio.Future) -> bool:
    return (await probe).error_code != GROUP_AUTHORIZATION_FAILED


async def _transaction_error(probe: asyncio.Future) -> int:
    for t in (await probe).topics:
        for p in t.partitions:
            if p.error_code in (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED):
                return p.error_code
    return 0


Inner = Callable[[Message], Awaitable[Message]]


class Checks:
    """The authorization of one request: its probes are asked at once (`begin`), `run` answers."""

    def __init__(self, auth: ConnectionAuthorizer, api_key: int, version: int, request: Message,
                 groups: list[str], topics_of: Callable[[str], set[str]]) -> None:
        """`groups`: the managed groups `request` names (the others it names are the broker's to judge)."""
        if api_key in apis.MANY and not (api_key == apis.OFFSET_FETCH and version < 8):
            request = apis.with_groups(api_key, request, groups)
        self.auth, self.api_key, self.version, self.request, self.groups = auth, api_key, version, request, groups
        self.futures: dict[Any, Any] = {}
        self._begin(topics_of)

    def _begin(self, topics_of: Callable[[str], set[str]]) -> None:
        api, request, auth = self.api_key, self.request, self.auth
        if api in (apis.JOIN_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP, apis.SYNC_GROUP, apis.STREAMS_GROUP_HEARTBEAT,
                   apis.STREAMS_GROUP_TOPOLOGY_UPDATE, apis.OFFSET_COMMIT, *apis.NOT_THIS_KIND):
            self.futures["read"] = auth.group_read(request.group_id)
        if api == apis.TXN_OFFSET_COMMIT:
            self.futures["txn"] = auth.transactional(request.transactional_id, request.group_id)
        if api in (apis.OFFSET_COMMIT, apis.TXN_OFFSET_COMMIT, apis.OFFSET_DELETE):
            self.futures["topics"] = auth.topics(
                [t.name for t in request.topics if getattr(t, "name", "")],
                [t.topic_id for t in request.topics if not getattr(t, "name", "") and
                 getattr(t, "topic_id", ZERO_UUID) != ZERO_UUID])
        if api == apis.STREAMS_GROUP_HEARTBEAT and request.topology is not None:
            self.futures["topics"] = auth.topics(_topology_topics(request.topology))
            self.futures["cluster"] = auth.cluster_operations()
        if api in (apis.OFFSET_DELETE, apis.DELETE_GROUPS):
            self.futures["delete"] = {g: auth.group_delete(g) for g in dict.fromkeys(self.groups)}
        if api in (apis.OFFSET_FETCH, apis.DESCRIBE_GROUPS, apis.CONSUMER_GROUP_DESCRIBE, apis.SHARE_GROUP_DESCRIBE,
                   apis.STREAMS_GROUP_DESCRIBE, apis.DESCRIBE_SHARE_GROUP_OFFSETS):
            self.futures["describe"] = auth.groups_described(self.groups)
        if api in (apis.DESCRIBE_GROUPS, apis.CONSUMER_GROUP_DESCRIBE, apis.STREAMS_GROUP_DESCRIBE) and \
                getattr(request, "include_authorized_operations", False):
            self.futures["read_all"] = {g: auth.group_read(g) for g in dict.fromkeys(self.groups)}
            self.futures["delete"] = {g: auth.group_delete(g) for g in dict.fromkeys(self.groups)}
        if api == apis.STREAMS_GROUP_DESCRIBE:
            self.futures["topics"] = auth.topics(sorted(set().union(*(topics_of(g) for g in self.groups))))
        if api == apis.OFFSET_FETCH:
            named = [t.name for g in _fetch_groups(self.version, request) for t in (g.topics or ())
                     if getattr(t, "name", "")]
            ids = [t.topic_id for g in _fetch_groups(self.version, request) for t in (g.topics or ())
                   if not getattr(t, "name", "") and getattr(t, "topic_id", ZERO_UUID) != ZERO_UUID]
            self.futures["topics"] = auth.topics(named, ids)
            if any(g.topics is None for g in _fetch_groups(self.version, request)):
                self.futures["all topics"] = auth.describable_topics()

    async def run(self, inner: Inner, others: Awaitable[Message] | None = None) -> Message:
        """The answer for the managed groups (`inner` answers what the principal may do), merged with the
        broker's answer `others` for the other groups of the request, in the broker's order."""
        ours = await self._run(inner)
        if others is None:
            return ours
        theirs = await others
        api = self.api_key
        items = [*apis.response_items(api, ours), *apis.response_items(api, theirs)]
        order = {g: i for i, g in enumerate(apis.named_groups(api, self.version, self.request))}
        order.update({i.group_id: len(order) + n for n, i in enumerate(apis.response_items(api, theirs))})
        items.sort(key=lambda i: order.get(i.group_id, 0))
        if api in (apis.DESCRIBE_GROUPS, apis.CONSUMER_GROUP_DESCRIBE, apis.STREAMS_GROUP_DESCRIBE):
            items.sort(key=lambda i: i.error_code != GROUP_AUTHORIZATION_FAILED)  # refused first (a stable sort)
        elif api == apis.DELETE_GROUPS:
            items.sort(key=lambda i: i.error_code == GROUP_AUTHORIZATION_FAILED)  # refused last
        return ours.replace(results=items) if api == apis.DELETE_GROUPS else ours.replace(groups=items)

    async def _run(self, inner: Inner) -> Message:
        api = self.api_key
        if api in (apis.JOIN_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP, apis.SYNC_GROUP,
                   apis.STREAMS_GROUP_TOPOLOGY_UPDATE, *apis.NOT_THIS_KIND):
            if api == apis.SYNC_GROUP and self.version >= 5 and (
                    self.request.protocol_type is None or self.request.protocol_name is None):
                return await inner(self.request)  # INCONSISTENT_GROUP_PROTOCOL comes first at the broker
            if not await _read_allowed(self.futures["read"]):
                return apis.error_answer(api, self.version, self.request, GROUP_AUTHORIZATION_FAILED)
            answer = await inner(self.request)
            return apis.join_refusal_shape(self.version, answer) if api == apis.JOIN_GROUP else answer
        if api == apis.STREAMS_GROUP_HEARTBEAT:
            return await self._streams_heartbeat(inner)
        if api in (apis.OFFSET_COMMIT, apis.TXN_OFFSET_COMMIT):
            return await self._commit(inner)
        if api == apis.OFFSET_DELETE:
            return await self._offset_delete(inner)
        if api == apis.OFFSET_FETCH:
            return await self._offset_fetch(inner)
        if api == apis.DELETE_GROUPS:
            return await self._delete_groups(inner)
        if api in apis.MANY:
            return await self._describe(inner)
        return await inner(self.request)

    async def _described(self) -> dict[str, bool]:
        return {g: await f for g, f in self.futures["describe"].items()}

    async def _topic_verdicts(self) -> dict[Any, tuple[str | None, int, int]]:
        return {k: await f for k, f in self.futures.get("topics", {}).items()}

    # --- per API -----------------------------------------------------------------------------------------

    async def _streams_heartbeat(self, inner: Inner) -> Message:
        request = self.request
        if not await _read_allowed(self.futures["read"]):
            return apis.error_answer(self.api_key, self.version, request, GROUP_AUTHORIZATION_FAILED)
        if request.topology is not None:
            required = _topology_topics(request.topology)
            if any(t in INTERNAL_TOPICS for t in required) or not all(LEGAL_TOPIC.fullmatch(t) for t in required):
                return await inner(request)  # the coordinator's STREAMS_INVALID_TOPOLOGY comes first
            verdicts = await self._topic_verdicts()
            if not all(_has(verdicts[t][2], DESCRIBE) for t in required):
                _, cls = api_classes(self.api_key)
                return cls(error_code=TOPIC_AUTHORIZATION_FAILED)
            cluster = await self.futures["cluster"]
            permission = Creating(lambda name: _has(cluster, CREATE) or (
                name in verdicts and _has(verdicts[name][2], CREATE)))
            token = creating.set(permission)
            try:
                answer = await inner(request)
            finally:
                creating.reset(token)
            return _creations_refused(answer, sorted(set(permission.refused)))
        return await inner(request)

    async def _commit(self, inner: Inner) -> Message:
        request, api = self.request, self.api_key
        if api == apis.TXN_OFFSET_COMMIT:
            error = await _transaction_error(self.futures["txn"])
            if error:
                return apis.error_answer(api, self.version, request, error)
        elif not await _read_allowed(self.futures["read"]):
            return _commit_answer(api, request, GROUP_AUTHORIZATION_FAILED)
        verdicts = await self._topic_verdicts()
        refused, kept = [], []
        for t in request.topics:
            verdict = verdicts.get(_topic_key(t))
            if verdict is not None and verdict[1] != UNKNOWN_TOPIC_ID and not _has(verdict[2], READ):
                refused.append(t)
            else:
                kept.append(t)
        if not refused:
            return await inner(request)
        _, cls = api_classes(api)
        refusals = list(_commit_answer(api, request.replace(topics=refused), TOPIC_AUTHORIZATION_FAILED).topics)
        if not kept:
            return cls(topics=refusals)
        answer = await inner(request.replace(topics=kept))
        return answer.replace(topics=_early_first(request.topics, refusals, list(answer.topics)))

    async def _offset_delete(self, inner: Inner) -> Message:
        request = self.request
        if not await _delete_allowed(self.futures["delete"][request.group_id]):
            return apis.error_answer(self.api_key, self.version, request, GROUP_AUTHORIZATION_FAILED)
        verdicts = await self._topic_verdicts()
        refused = [t for t in request.topics if not _has(verdicts[t.name][2], READ)]
        if not refused:
            return await inner(request)
        _, cls = api_classes(self.api_key)
        refusals = [cls.OffsetDeleteResponseTopic(name=t.name, partitions=[cls.OffsetDeleteResponsePartition(
            partition_index=p.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED) for p in t.partitions])
            for t in refused]
        answer = await inner(request.replace(topics=[t for t in request.topics if t not in refused]))
        return answer.replace(topics=_early_first(request.topics, refusals, list(answer.topics)))

    async def _offset_fetch(self, inner: Inner) -> Message:
        request, version = self.request, self.version
        described = await self._described()
        verdicts = await self._topic_verdicts()
        everything = await self.futures["all topics"] if "all topics" in self.futures else set()
        _, cls = api_classes(self.api_key)
        if version < 8:
            if not described[request.group_id]:
                return apis.error_answer(self.api_key, version, request, GROUP_AUTHORIZATION_FAILED)
            group = _fetch_groups(version, request)[0]
            allowed, refused = _split_fetch_topics(group, verdicts)
            if request.topics is None:
                answer = await inner(request)
                return answer.replace(topics=[t for t in answer.topics if t.name in everything])
            answer = await inner(request.replace(topics=allowed)) if allowed or not refused else \
                cls(topics=[], error_code=0)
            if answer.error_code:
                return answer
            return answer.replace(topics=[*answer.topics, *[cls.OffsetFetchResponseTopic(
                name=t.name, partitions=[cls.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=-1, error_code=TOPIC_AUTHORIZATION_FAILED)
                    for p in t.partition_indexes]) for t in refused]])
        asked, plans = [], {}
        for g in request.groups:
            if not described[g.group_id]:
                continue
            allowed, refused = _split_fetch_topics(g, verdicts)
            plans[g.group_id] = refused
            asked.append(g if g.topics is None else g.replace(topics=allowed))
        answers: dict[str, Any] = {}
        if asked:
            answer = await inner(request.replace(groups=asked))
            answers = {a.group_id: a for a in answer.groups}
        groups = []
        for g in request.groups:
            if not described[g.group_id]:
                groups.append(cls.OffsetFetchResponseGroup(group_id=g.group_id, topics=[],
                                                           error_code=GROUP_AUTHORIZATION_FAILED))
                continue
            got = answers.get(g.group_id) or cls.OffsetFetchResponseGroup(group_id=g.group_id, topics=[])
            if got.error_code:
                groups.append(got)
            elif g.topics is None:
                groups.append(got.replace(topics=[t for t in got.topics if _fetched_name(t, verdicts) in everything]))
            else:
                groups.append(got.replace(topics=[*got.topics, *[cls.OffsetFetchResponseTopics(
                    name=getattr(t, "name", ""), topic_id=getattr(t, "topic_id", ZERO_UUID),
                    partitions=[cls.OffsetFetchResponsePartitions(
                        partition_index=p, committed_offset=-1, error_code=TOPIC_AUTHORIZATION_FAILED)
                        for p in t.partition_indexes]) for t in plans[g.group_id]]]))
        return cls(groups=groups)

    async def _delete_groups(self, inner: Inner) -> Message:
        allowed = {g: await _delete_allowed(f) for g, f in self.futures["delete"].items()}
        _, cls = api_classes(self.api_key)
        ok = [g for g in allowed if allowed[g]]
        results = list((await inner(apis.with_groups(self.api_key, self.request, ok))).results) if ok else []
        results += [cls.DeletableGroupResult(group_id=g, error_code=GROUP_AUTHORIZATION_FAILED)
                    for g in allowed if not allowed[g]]
        return cls(results=results)

    async def _describe(self, inner: Inner) -> Message:
        """DescribeGroups and the other describes: refused groups first, then the coordinator's answers."""
        api, request = self.api_key, self.request
        described = await self._described()
        _, cls = api_classes(api)
        refused = [g for g in self.groups if not described[g]]
        ok = [g for g in self.groups if described[g]]
        answer = await inner(apis.with_groups(api, request, ok)) if ok else None
        items = list(apis.response_items(api, apis.error_answer(api, self.version, apis.with_groups(
            api, request, refused), GROUP_AUTHORIZATION_FAILED))) if refused else []
        if api == apis.DESCRIBE_SHARE_GROUP_OFFSETS:
            items = [i.replace(error_message=None) for i in items]
        got = list(apis.response_items(api, answer)) if answer is not None else []
        if api == apis.STREAMS_GROUP_DESCRIBE:
            verdicts = await self._topic_verdicts()
            got = [_streams_topics_checked(cls, g, verdicts) for g in got]
        if "read_all" in self.futures:
            got = [await self._with_operations(g) for g in got]
        if api in (apis.DESCRIBE_GROUPS, apis.CONSUMER_GROUP_DESCRIBE, apis.STREAMS_GROUP_DESCRIBE):
            items += got
        else:  # DescribeShareGroupOffsets, OffsetFetch-like: the request's order
            order = {g: i for i, g in enumerate(self.groups)}
            items = sorted([*items, *got], key=lambda i: order.get(i.group_id, 0))
        if answer is None:
            return cls(groups=items)
        return answer.replace(groups=items)

    async def _with_operations(self, group: Any) -> Any:
        if group.error_code:
            return group
        g = group.group_id
        operations = 0
        if await _read_allowed(self.futures["read_all"][g]):
            operations |= 1 << READ
        if await _delete_allowed(self.futures["delete"][g]):
            operations |= 1 << DELETE
        if (await self._described())[g]:
            operations |= 1 << DESCRIBE
        return group.replace(authorized_operations=operations)


def _creations_refused(answer: Message, refused: list[str]) -> Message:
    """A StreamsGroupHeartbeat answer telling of internal topics not created for want of CREATE, as Kafka
    tells it (in the MISSING_INTERNAL_TOPICS status, or in one of its own)."""
    if not refused or answer.error_code:
        return answer
    _, cls = api_classes(apis.STREAMS_GROUP_HEARTBEAT)
    statuses = list(answer.status or ())
    note = f"Unauthorized to CREATE on topics {', '.join(refused)}."
    for i, status in enumerate(statuses):
        if status.status_code == MISSING_INTERNAL_TOPICS:
            statuses[i] = status.replace(status_detail=f"{status.status_detail or ''}; {note}")
            break
    else:
        statuses.append(cls.Status(status_code=MISSING_INTERNAL_TOPICS, status_detail=note))
    return answer.replace(status=statuses)


def _topic_key(topic: Any) -> Any:
    name = getattr(topic, "name", "")
    return name if name else getattr(topic, "topic_id", ZERO_UUID)


def _topology_topics(topology: Any) -> list[str]:
    """The topics a streams topology reads, writes or keeps state in, as Kafka collects them to authorize."""
    return list(dict.fromkeys(t for s in topology.subtopologies for t in [
        *s.source_topics, *s.repartition_sink_topics, *(r.name for r in s.repartition_source_topics),
        *(c.name for c in s.state_changelog_topics)]))


def _commit_answer(api_key: int, request: Message, error: int) -> Message:
    from compat.gateway.managed import commit_refusal
    return commit_refusal(api_key, request, error)


def _early_first(asked: Iterable[Any], refusals: list[Any], answered: list[Any]) -> list[Any]:
    """A commit's topics in the broker's order: those refused before the coordinator was asked (refused by
    ACL, or unknown: UNKNOWN_TOPIC_OR_PARTITION) in the request's order, then the coordinator's."""
    refused = {_topic_key(t): t for t in refusals}
    early_answered = {_topic_key(t): t for t in answered
                      if any(p.error_code == apis.UNKNOWN_TOPIC_OR_PARTITION for p in t.partitions)}
    early = [refused.get(_topic_key(t)) or early_answered.get(_topic_key(t)) for t in asked]
    early = [t for t in dict.fromkeys(id(t) for t in early if t is not None)]
    by_id = {id(t): t for t in [*refusals, *answered]}
    firsts = [by_id[i] for i in early]
    return [*firsts, *[t for t in answered if id(t) not in early]]


def _fetch_groups(version: int, request: Message) -> list[Any]:
    if version >= 8:
        return list(request.groups)
    return [request]


def _split_fetch_topics(group: Any, verdicts: dict[Any, tuple[str | None, int, int]]) -> tuple[list, list]:
    if group.topics is None:
        return [], []
    allowed, refused = [], []
    for t in group.topics:
        verdict = verdicts.get(_topic_key(t))
        if verdict is not None and verdict[1] != UNKNOWN_TOPIC_ID and not _has(verdict[2], DESCRIBE):
            refused.append(t)
        else:
            allowed.append(t)
    return allowed, refused


def _fetched_name(topic: Any, verdicts: dict[Any, tuple[str | None, int, int]]) -> str | None:
    name = getattr(topic, "name", "")
    return name or (verdicts.get(getattr(topic, "topic_id", ZERO_UUID)) or (None,))[0]


def _streams_topics_checked(cls: type[Message], group: Any, verdicts: dict[Any, tuple[str | None, int, int]]) -> Any:
    """A described streams group whose topology names a topic the principal may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED."""
    topology = getattr(group, "topology", None)
    if group.error_code or topology is None:
        return group
    names = {n for s in topology.subtopologies for n in [
        *s.source_topics, *s.repartition_sink_topics, *(t.name for t in s.repartition_source_topics),
        *(t.name for t in s.state_changelog_topics)]}
    if all(n in verdicts and _has(verdicts[n][2], DESCRIBE) for n in names):
        return group
    return cls.DescribedGroup(group_id=group.group_id, error_code=TOPIC_AUTHORIZATION_FAILED,
                              error_message="The described group uses topics that the client is not authorized "
                                            "to describe.", members=[], topology=None)


def find_coordinator(auth: ConnectionAuthorizer, version: int, request: Message,
                     answer: Awaitable[Message]) -> Awaitable[Message]:
    """FindCoordinator of managed groups: DESCRIBE on each (the broker's refusal in its place)."""
    keys = [request.key] if version < 4 else list(request.coordinator_keys)
    described = auth.groups_described(keys)

    async def checked() -> Message:
        _, cls = api_classes(apis.FIND_COORDINATOR)
        try:
            allowed = {k: await f for k, f in described.items()}
        except ConnectionError:  # the client's broker is gone and never judged these: retriable
            if version < 4:
                return cls(error_code=apis.COORDINATOR_NOT_AVAILABLE, node_id=-1, host="", port=-1)
            return cls(coordinators=[cls.Coordinator(key=k, node_id=-1, host="", port=-1,
                                                     error_code=apis.COORDINATOR_NOT_AVAILABLE) for k in keys])
        response = await answer
        if version < 4:
            if allowed[request.key]:
                return response
            return cls(error_code=GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.",
                       node_id=-1, host="", port=-1)
        return response.replace(coordinators=[c if allowed[c.key] else cls.Coordinator(
            key=c.key, node_id=-1, host="", port=-1, error_code=GROUP_AUTHORIZATION_FAILED, error_message="")
            for c in response.coordinators])
    return checked()


def list_groups(auth: ConnectionAuthorizer, version: int, request: Message, held: list[str],
                answer: Callable[[Message, set[str]], Awaitable[Message]]) -> Awaitable[Message]:
    """ListGroups: the broker's list for the client's own principal (asked on its connection), and the
    managed groups it may DESCRIBE (all of them with DESCRIBE on the cluster), as Kafka filters."""
    upstream = auth.ask(request, version)
    cluster = auth.cluster_describe()
    described = auth.groups_described(held)

    async def listed() -> Message:
        shown = set(held) if await cluster else {g for g, f in described.items() if await f}
        return await answer(await upstream, shown)
    return listed()
