"""Reads that one event-loop turn asks for, sent as one batch.

``asyncio.gather(*(c.get(k) for k in keys))`` starts every ``get`` before any of them
waits; each one's own coroutine on the SDK's runtime, woken back into the loop one by one,
cost ~100 µs a read, so 200 small reads took 8× one ``get_many``. ``AsyncClient.get``
queues its key here instead: the first key of a turn schedules a flush for the end of the
turn, and the flush reads every queued key with one ``get_many`` (one descriptor round
trip, the one-sided reads in flight together), handing each caller its own result or the
very exception a single ``get`` raises.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

#: Keys one batch reads at most (gateways take 1,000 by default, `--max-batch-keys`).
MAX_BATCH = 256

Fetch = Callable[[Sequence[str]], Awaitable[list[Any]]]


class GetBatcher:
    """The keys queued in each running event loop, and the call that reads them."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._queued: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, list[tuple[str, asyncio.Future[Any]]]
        ] = weakref.WeakKeyDictionary()

    def get(self, key: str) -> asyncio.Future[Any]:
        """A future of ``key``'s value, read with the other keys of this loop turn."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        queued = self._queued.get(loop)
        if queued is None:
            queued = self._queued[loop] = []
            loop.call_soon(self._flush, loop)
        queued.append((key, fut))
        return fut

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        queued = self._queued.pop(loop, [])
        for at in range(0, len(queued), MAX_BATCH):
            loop.create_task(self._read(queued[at : at + MAX_BATCH]))

    async def _read(self, batch: list[tuple[str, asyncio.Future[Any]]]) -> None:
        try:
            results = await self._fetch([k for k, _ in batch])
        except BaseException as e:  # the batch failed as a whole: each caller hears why
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
        for (_, fut), r in zip(batch, results, strict=True):
            if fut.done():  # its caller was cancelled
                continue
            if isinstance(r, BaseException):
                fut.set_exception(r)
            else:
                fut.set_result(r)
