"""The arenas an engine's buffers live in, each registered once, for reads with no copy.

LMCache hands its L2 connectors a memoryview per chunk (a ``ctypes`` overlay on its CPU L1
arena), never the arena itself. To land one-sided reads straight in those buffers, the
mapping of this process's memory that holds them (``/proc/self/maps``: the arena, one
anonymous mapping) is registered with the client the first time a buffer in it is read
into, and every later read into it lands in place. Before each batch the mapping is looked
up again: one that changed (freed, moved, grown) is dropped and registered anew, so a
registration never outlives the memory it names. Buffers outside any mapping that can be
registered fall back to the client's ordinary reads (one copy).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator, Sequence
from typing import Any

#: Most arenas kept registered at once (the oldest is dropped for a new one).
MAX_ARENAS = 4
#: A mapping smaller than this is not worth a registration of its own.
MIN_ARENA = 1 << 20


def address(view: memoryview) -> int:
    """Where a writable, contiguous buffer starts in this process's memory."""
    if view.nbytes == 0:
        return 0
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def mappings() -> list[tuple[int, int]]:
    """This process's writable private mappings, as ``(start, end)``, in address order."""
    spans = []
    with open("/proc/self/maps", "rb") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) < 2 or not fields[1].startswith(b"rw"):
                continue
            start, end = fields[0].split(b"-")
            spans.append((int(start, 16), int(end, 16)))
    return spans


def containing(spans: list[tuple[int, int]], lo: int, hi: int) -> tuple[int, int] | None:
    """The span of ``spans`` that holds all of ``lo..hi``, if one does."""
    for start, end in spans:
        if start <= lo and hi <= end:
            return start, end
    return None


class Arenas:
    """Registered mappings of this process's memory, for one client. A registered buffer
    takes one batch at a time, so each arena has as many registrations as batches have
    been read into it at once (one per worker, at most)."""

    def __init__(self, client: Any, pinned: tuple[int, int] | None = None, copies: int = 1) -> None:
        self._client = client
        self._lock = threading.Lock()
        # (start, end) -> the registrations of that memory not in use now.
        self._free: dict[tuple[int, int], list[Any]] = {}
        self.registered = 0  # registrations made, for tests and figures
        # Memory the engine names and keeps for the client's life (LMCache's L1 arena,
        # given to a `plugin` adapter): registered now, ``copies`` times (one per batch
        # in flight), never looked up in /proc/self/maps nor dropped.
        self._pinned = pinned
        if pinned is not None:
            for _ in range(copies):
                arena = self._register(pinned)
                with self._lock:
                    self._free[pinned].append(arena)

    def __len__(self) -> int:
        return len(self._free)

    @contextlib.contextmanager
    def placed(self, views: Sequence[memoryview]) -> Iterator[tuple[Any, list[int], list[int]] | None]:
        """The registered arena holding every view, with each view's offset and length in
        it, for one batch; ``None`` when they are not all in one arena that can be
        registered."""
        spot = self._place(views)
        try:
            yield None if spot is None else spot[1:]
        finally:
            if spot is not None:
                with self._lock:
                    self._free.setdefault(spot[0], []).append(spot[1])

    def _place(self, views: Sequence[memoryview]) -> tuple[tuple[int, int], Any, list[int], list[int]] | None:
        live = [v for v in views if v.nbytes]
        if not live or any(v.readonly or not v.c_contiguous for v in live):
            return None
        at = [address(v) for v in views]
        lo = min(a for a, v in zip(at, views) if v.nbytes)
        hi = max(a + v.nbytes for a, v in zip(at, views) if v.nbytes)
        pinned = self._pinned
        if pinned is not None and pinned[0] <= lo and hi <= pinned[1]:
            spans, span = [pinned], pinned
        else:
            spans = mappings()
            span = containing(spans, lo, hi)
            if span is None or span[1] - span[0] < MIN_ARENA:
                return None
        with self._lock:
            # Registrations whose memory is no longer mapped as it was are dropped.
            for gone in [s for s in self._free if s not in spans and s != pinned]:
                del self._free[gone]
            free = self._free.get(span)
            arena = free.pop() if free else None
        if arena is None:
            arena = self._register(span)
        # An empty view lands nowhere: offset 0, length 0.
        offsets = [a - span[0] if v.nbytes else 0 for a, v in zip(at, views)]
        return span, arena, offsets, [v.nbytes for v in views]

    def _register(self, span: tuple[int, int]) -> Any:
        start, end = span
        memory = (ctypes.c_ubyte * (end - start)).from_address(start)
        arena = self._client.register(memory)
        with self._lock:
            self.registered += 1
            if span not in self._free and len(self._free) >= MAX_ARENAS:
                oldest = next((s for s in self._free if s != self._pinned), None)
                if oldest is not None:
                    del self._free[oldest]
            self._free.setdefault(span, [])
        return arena
