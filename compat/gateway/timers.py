"""Every managed group's next deadline in one heap: the ticker sleeps until the earliest, then runs the groups
that are due, each in a task of its own (a group busy with a slow write delays only its own timers)."""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("kprotocol.gateway")
BUSY_RETRY_MS = 100  # a group whose timers are still running when due again is looked at this much later


def now_ms() -> int:
    return int(time.time() * 1000)


class Deadlines:
    """`schedule(group, deadline)` keeps the earlier of a group's deadlines; `run()` calls `fire(group)` once it
    is due (never twice at once for a group). A stale heap entry (a deadline moved) is skipped when it surfaces."""

    def __init__(self, fire: Callable[[str], Awaitable[None]]) -> None:
        self.fire = fire
        self._heap: list[tuple[int, str]] = []
        self._at: dict[str, int] = {}  # group -> its scheduled deadline (the heap entry that counts)
        self._running: dict[str, asyncio.Task] = {}
        self._wake = asyncio.Event()

    def schedule(self, group_id: str, deadline: int | None) -> None:
        """Run `group_id`'s timers at `deadline` (or earlier, when it is already scheduled earlier)."""
        if deadline is None:
            return
        current = self._at.get(group_id)
        if current is not None and current <= deadline:
            return
        self._at[group_id] = deadline
        heapq.heappush(self._heap, (deadline, group_id))
        if self._heap[0] == (deadline, group_id):
            self._wake.set()

    def scheduled(self, group_id: str) -> int | None:
        return self._at.get(group_id)

    def __len__(self) -> int:
        return len(self._at)

    async def run(self) -> None:
        """Forever: sleep until the earliest deadline (or an earlier one is scheduled), fire what is due."""
        while True:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:  # the ticker itself never dies
                log.exception("the timers' ticker failed, it goes on")
                await asyncio.sleep(0.1)

    async def _round(self) -> None:
        """Sleep until the earliest deadline or a wake-up, then start the timers of every group due."""
        self._wake.clear()
        timeout = max(0.0, (self._heap[0][0] - now_ms()) / 1000) if self._heap else None
        if timeout is None or timeout > 0:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        now = now_ms()
        while self._heap and self._heap[0][0] <= now:
            deadline, group_id = heapq.heappop(self._heap)
            if self._at.get(group_id) != deadline:
                continue  # superseded by an earlier deadline
            if group_id in self._running:  # still running its last timers (waiting for its lock): later
                self._at[group_id] = now + BUSY_RETRY_MS
                heapq.heappush(self._heap, (now + BUSY_RETRY_MS, group_id))
                continue
            del self._at[group_id]
            task = asyncio.create_task(self.fire(group_id))
            self._running[group_id] = task
            task.add_done_callback(lambda _, g=group_id: self._running.pop(g, None))

    async def stop(self) -> None:
        """Cancel the timers running now (`run` itself is cancelled by its owner)."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
