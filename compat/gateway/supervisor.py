"""`Throttle` keeps a repeated log line to one per key and interval (the groups' isolation from each other
is the coordinator's: `MigrationCoordinator.begin` and `poll_group`)."""

from __future__ import annotations

import time
from typing import Any


class Throttle:
    """`ready(key)` is true at most once per `interval_s` for each key; `suppressed(key)` counts the rest."""

    def __init__(self, interval_s: float = 10.0, max_keys: int = 10_000) -> None:
        self.interval_s, self.max_keys = interval_s, max_keys
        self._last: dict[Any, float] = {}
        self._suppressed: dict[Any, int] = {}

    def ready(self, key: Any) -> bool:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._last) >= self.max_keys:
            self._last.clear()
            self._suppressed.clear()
        self._last[key] = now
        return True

    def suppressed(self, key: Any) -> int:
        """How many times `key` was held back since it last went through (and forget them)."""
        return self._suppressed.pop(key, 0)
