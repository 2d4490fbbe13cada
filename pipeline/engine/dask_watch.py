"""Which Dask workers have gone silent: stopped (SIGSTOP) or frozen, a worker keeps its connection to the
scheduler open and stays listed until distributed's ``worker-ttl`` (5 minutes by default) while the tasks it
holds wait, so a stage stalled there far past ``executor.timeout``.

A worker's silence is measured by the driver's own clock, from the last time the scheduler's record of its
last heartbeat changed, so that clocks of other machines never matter.
"""

from __future__ import annotations

import time
from typing import Any


class Heartbeats:
    """When the driver last saw each worker's heartbeat move."""

    def __init__(self) -> None:
        self._heard: dict[str, tuple[Any, float]] = {}

    def silent_holder(self, client: Any, timeout: float) -> str | None:
        """A worker that has sent no heartbeat for ``timeout`` seconds (at least three of distributed's heartbeat
        intervals) while it runs tasks, when every worker running tasks is such a one; else None."""
        from distributed.scheduler import heartbeat_interval

        try:
            workers = client.scheduler_info(callback_timeout=timeout)["workers"]
            processing = client.sync(client.scheduler.processing, workers=None, callback_timeout=timeout)
        except Exception:  # the watch only advises: a lost scheduler is the caller's to report
            return None
        now = time.monotonic()
        for address, info in workers.items():
            if self._heard.get(address, (None,))[0] != info.get("last_seen"):
                self._heard[address] = (info.get("last_seen"), now)
        limit = max(timeout, 3 * heartbeat_interval(len(workers)))
        busy = [address for address, keys in processing.items() if keys]
        silent = [address for address in busy if now - self._heard.get(address, (None, now))[1] >= limit]
        return silent[0] if busy and len(silent) == len(busy) else None
