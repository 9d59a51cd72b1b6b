"""The upstream cluster's topics as the coordinator needs them (partition counts, names by id), refreshed by one
Metadata call at a time for every group, with a time-out: a stalled broker delays a request by at most
`fresh_wait_s` once topics are known (it goes on with the last ones), never holds a group's lock."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping

from compat.gateway.supervisor import Throttle
from compat.gateway.upstream import Upstream
from kprotocol.registry import message_class

log = logging.getLogger("kprotocol.gateway")
METADATA = message_class("MetadataRequest")


class Topics:
    """`await refresh()` before a request that reads the topics; `names` maps topic ids to names."""

    def __init__(self, upstream: Upstream, apply: Callable[[Mapping[str, int]], None], *, max_age_s: float = 0.5,
                 timeout_s: float = 10.0, fresh_wait_s: float = 1.0) -> None:
        self.upstream, self.apply = upstream, apply  # apply: the coordinator's set_topics
        self.max_age_s, self.timeout_s, self.fresh_wait_s = max_age_s, timeout_s, fresh_wait_s
        self.names: dict[uuid.UUID, str] = {}
        self.known = False  # one refresh succeeded
        self.calls = 0  # Metadata calls made (for tests and metrics)
        self._at = 0.0  # when the last refresh succeeded (monotonic)
        self._task: asyncio.Task | None = None
        self._started = 0.0
        self._throttle = Throttle(60.0)

    def hold(self) -> None:
        """Keep the topics as they are, never asking the cluster (a coordinator without upstream: the fuzzer)."""
        self._at, self.known = float("inf"), True

    def invalidate(self) -> None:
        """The next refresh asks the cluster whatever the age (topics were just created)."""
        self._at = 0.0

    async def refresh(self, force: bool = False) -> None:
        """Topics at most `max_age_s` old, or the last ones known when the cluster does not answer in time
        (raises when none are known yet)."""
        if not force and time.monotonic() - self._at < self.max_age_s:
            return
        if self._task is None or self._task.done():
            self._started = time.monotonic()
            self._task = asyncio.create_task(self._fetch())
            self._task.add_done_callback(_retrieve)
        wait = self.timeout_s if not self.known else max(0.0, self._started + self.fresh_wait_s - time.monotonic())
        try:
            await asyncio.wait_for(asyncio.shield(self._task), wait)
        except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
            if not self.known:
                raise
            if self._throttle.ready(type(exc)):
                log.warning("upstream metadata unavailable within %.1f s (%s): going on with the topics of %.1f s "
                            "ago", wait, type(exc).__name__, time.monotonic() - self._at)

    async def _fetch(self) -> None:
        self.calls += 1
        response = await asyncio.wait_for(self.upstream.bootstrap.send(METADATA(topics=None)), self.timeout_s)
        self.apply({t.name: len(t.partitions) for t in response.topics if t.error_code == 0 and not t.is_internal})
        self.names = {t.topic_id: t.name for t in response.topics if t.error_code == 0 and t.name}
        self._at, self.known = time.monotonic(), True


def _retrieve(task: asyncio.Task) -> None:
    """A refresh nobody waits for any more: its error is not 'never retrieved'."""
    if not task.cancelled():
        task.exception()
