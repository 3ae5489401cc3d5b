"""Caller memory registered for one-sided reads, several values landing in one registered
buffer, asyncio reads batched per event-loop turn, and ``timeout`` as the most a whole call
may take — against the real gateway."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid

import numpy as np
import pytest

import rasa_client
from rasa_client import BufferTooSmall, NotFound

from conftest import FAST, requests_to


def key(name: str) -> str:
    return f"mem/{uuid.uuid4().hex}/{name}"


def payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(n + seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def address(buf: object) -> int:
    return int(np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0])


def test_register_caller_memory(gateway):
    """``register(array)`` registers the array's own memory: one-sided reads land in the
    array, nothing copied; the registration keeps it alive and unresizable."""
    with rasa_client.Client(gateway.url, fast_path="required") as c:
        arr = np.zeros(1 << 20, dtype=np.uint8)
        buf = c.register(arr)
        assert isinstance(buf, rasa_client.RegisteredBuffer) and len(buf) == arr.nbytes
        assert address(buf) == address(arr), "the array's own memory, not a copy"
        for size in [5, 4096, 1 << 20]:
            k, data = key("r"), payload(size)
            c.put(k, data)
            before = c.stats()
            assert c.get_into(k, buf) == size
            assert arr[:size].tobytes() == data  # the value is in the caller's array
            after = c.stats()
            assert after["fabric_reads"] == before["fabric_reads"] + 1
            assert after["bytes_copied"] == before["bytes_copied"]
        assert buf.registrations == 1

        # The registration holds the memory: the array's name can go.
        k, data = key("alive"), payload(999)
        c.put(k, data)
        view = np.frombuffer(buf, dtype=np.uint8)
        del arr
        assert c.get_into(k, buf) == 999 and view[:999].tobytes() == data

        # A bytearray cannot be resized while registered; it can once the buffer is gone.
        ba = bytearray(64)
        reg = c.register(ba)
        with pytest.raises(BufferError):
            ba.extend(b"more")
        del reg
        ba.extend(b"more")

        with pytest.raises(TypeError, match="read-only"):
            c.register(b"\0" * 64)
        with pytest.raises(ValueError, match="contiguous"):
            c.register(np.zeros(64, dtype=np.uint8)[::2])
        with pytest.raises(ValueError, match="non-negative"):
            c.register(-1)


@pytest.mark.parametrize(("fast_path", "copies"), [("required", 0), ("off", 1)])
def test_get_many_into_a_registered_buffer(gateway, fast_path, copies):
    """Several values land at their offsets of one registered buffer, in flight together:
    with no copy one-sided; a miss is ``None``, a region too small its ``BufferTooSmall``,
    in place; the buffer is whole and reusable after."""
    with rasa_client.Client(gateway.url, fast_path=fast_path) as c:
        keys = [key(f"m{i}") for i in range(6)]
        values = {k: payload(1000 * (i + 1), seed=i) for i, k in enumerate(keys) if i != 2}
        for k, v in values.items():
            c.put(k, v)
        arr = np.full(40_000, 0xEE, dtype=np.uint8)
        buf = c.register(arr)
        offsets = [0, 1000, 3000, 6000, 10_000, 15_000]
        before = c.stats()
        got = c.get_many_into(keys, buf, offsets=offsets)
        assert got == [1000, 2000, None, 4000, 5000, 6000]
        for k, off, n in zip(keys, offsets, got):
            if n is not None:
                assert arr[off : off + n].tobytes() == values[k]
        assert (arr[21_000:] == 0xEE).all(), "nothing written past the last value"
        after = c.stats()
        assert after["bytes_copied"] - before["bytes_copied"] == copies * sum(map(len, values.values()))

        # The last key's room too small: its exception in its place, the others read.
        got = c.get_many_into(keys[:2] + keys[5:], buf, offsets=[0, 1000, 39_000])
        assert got[:2] == [1000, 2000] and isinstance(got[2], BufferTooSmall)
        assert got[2].needed == 6000
        # And the buffer is whole again: a single read uses all of it.
        assert c.get_into(keys[5], buf) == 6000 and arr[:6000].tobytes() == values[keys[5]]

        with pytest.raises(ValueError, match="offsets"):
            c.get_many_into(keys[:2], buf)
        with pytest.raises(ValueError, match="decrease"):
            c.get_many_into(keys[:2], buf, offsets=[5, 1])
        with pytest.raises(ValueError, match="within"):
            c.get_many_into(keys[:1], buf, offsets=[40_001])


@pytest.mark.parametrize(("fast_path", "registered"), [("required", True), ("off", True), ("off", False)])
def test_get_many_into_rows_in_any_order(gateway, fast_path, registered):
    """With ``lengths``, each value lands in its own row of a pool, rows in any order (a KV
    pool's chunk ids): the bytes between rows are not touched, and a value longer than
    its row is that key's ``BufferTooSmall`` (its neighbours untouched)."""
    with rasa_client.Client(gateway.url, fast_path=fast_path) as c:
        keys = [key(f"row{i}") for i in range(4)]
        values = {k: payload(1000, seed=10 + i) for i, k in enumerate(keys)}
        values[keys[3]] = payload(1500, seed=13)
        for k, v in values.items():
            c.put(k, v)
        arr = np.full(8 * 1024, 0xEE, dtype=np.uint8)
        buf = c.register(arr) if registered else arr
        rows = [5, 0, 3, 1]  # row i is arr[i*1024 : i*1024+1000]
        got = c.get_many_into(keys, buf, offsets=[r * 1024 for r in rows], lengths=[1000] * 4)
        assert got[:3] == [1000, 1000, 1000]
        assert isinstance(got[3], BufferTooSmall) and got[3].needed == 1500
        for k, r in zip(keys[:3], rows):
            assert arr[r * 1024 : r * 1024 + 1000].tobytes() == values[k]
        for r in range(8):
            assert (arr[r * 1024 + 1000 : (r + 1) * 1024] == 0xEE).all(), f"the gap after row {r}"
        assert (arr[2 * 1024 : 3 * 1024] == 0xEE).all() and (arr[4 * 1024 : 5 * 1024] == 0xEE).all()
        with pytest.raises(ValueError, match="overlaps|share memory"):
            c.get_many_into(keys[:2], buf, offsets=[0, 500], lengths=[1000, 1000])
        with pytest.raises(ValueError, match="one length per key"):
            c.get_many_into(keys[:2], buf, offsets=[0, 2000], lengths=[1000])


def descriptor_requests(url: str) -> tuple[float, float]:
    """(single, batch) descriptor requests the gateway answered, from ``/metrics``."""
    return requests_to(url, "/v1/descriptors/{*key}"), requests_to(url, "/v1/descriptors")


def test_asyncio_gather_of_gets_is_one_batch(own_gateway):
    """``gather`` of many ``get`` calls goes out as one batch (one descriptor request), yet
    each caller gets its own value, or the ``NotFound`` a lone ``get`` raises."""
    gw = own_gateway(*FAST)
    keys = [key(f"g{i}") for i in range(64)]
    with rasa_client.Client(gw.url) as w:
        for i, k in enumerate(keys):
            w.put(k, payload(4096, seed=i))
    missing = key("missing")

    async def main() -> list[object]:
        async with rasa_client.AsyncClient(gw.url, fast_path="required") as c:
            single0, batch0 = descriptor_requests(gw.url)
            got = await asyncio.gather(*(c.get(k) for k in [*keys, missing]), return_exceptions=True)
            single1, batch1 = descriptor_requests(gw.url)
            assert (single1 - single0, batch1 - batch0) == (0, 1), "one batch request"
            # A lone get still reads (one key: the single read, its descriptor cached).
            lone = await c.get(keys[0])
            assert bytes(lone) == payload(4096, seed=0)
            # A cancelled caller leaves the others' results alone.
            tasks = [asyncio.ensure_future(c.get(k)) for k in keys[:8]]
            tasks[3].cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            assert isinstance(done[3], asyncio.CancelledError)
            assert [bytes(o) for i, o in enumerate(done) if i != 3] == [
                payload(4096, seed=i) for i in range(8) if i != 3
            ]
            return got

    got = asyncio.run(main())
    for i, o in enumerate(got[:-1]):
        assert isinstance(o, rasa_client.Object) and bytes(o) == payload(4096, seed=i)
        assert o.key == keys[i] and o.path == "fabric"
    assert isinstance(got[-1], NotFound) and isinstance(got[-1], KeyError)
    assert got[-1].status == 404


@pytest.fixture
def trickling_server():
    """An HTTP server that answers every request with a 1,000-byte body, one byte every
    0.2 s: always making progress, never done within a test."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n")
                conn.sendall(b"content-length: 1000\r\n\r\n")
                while not stop.wait(0.2):
                    conn.sendall(b"x")
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    srv.close()


def test_timeout_bounds_the_whole_call(trickling_server):
    """A body that keeps trickling never trips a no-progress timeout; ``timeout`` still
    ends the call, blocking or async, with a ``Timeout`` naming the setting."""
    c = rasa_client.Client(trickling_server, fast_path="off", timeout=1.0, discover_cluster=False)
    start = time.monotonic()
    with pytest.raises(rasa_client.Timeout) as e:
        c.get("k")
    assert 0.9 < time.monotonic() - start < 4
    assert "timeout=1 s" in str(e.value) and isinstance(e.value, TimeoutError)

    async def main() -> None:
        a = rasa_client.AsyncClient(trickling_server, fast_path="off", timeout=1.0, discover_cluster=False)
        with pytest.raises(rasa_client.Timeout):
            await a.get("k")

    start = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - start < 4
    # None: no total limit (the setting round-trips, e.g. through pickling).
    assert rasa_client.Client(trickling_server, timeout=None)._config()["timeout"] is None
    with pytest.raises(ValueError, match="timeout"):
        rasa_client.Client(trickling_server, timeout=0)
