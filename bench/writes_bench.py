"""Writes next to redis-server, and cold batch reads next to warm ones, in one run.

    python bench/writes_bench.py GATEWAY_URL REDIS_PORT

Prints Markdown tables (issue 46):
- a batch of N values stored with `Client.put_many` (one request per batch; a call is
  cut into up to four batches written together), with N sequential `Client.put`, and
  with redis-py's pipelined `SET` of the same blocks (`transaction=False`) — 256 × 4 KiB,
  256 × 64 KiB, 32 × 1 MiB — and with the default client's `put_many` (one-sided: a
  region, the bytes over shm, a commit);
- `get_many_into` of 256 × 64 KiB into one `RegisteredBuffer`: with descriptors this
  client does not hold yet (keys just written by another client) and again (held);
- the first batch into a newly `register()`ed buffer next to the second;
- PUT of 1 MiB over plain HTTP (http.client, no lease), p50 and p99.
Each figure is the median of its rounds (p99 where said), all against one gateway whose
memory was written through once first (see `warm`).
"""

from __future__ import annotations

import http.client
import os
import statistics
import sys
import time
import urllib.parse
import uuid

import redis

import rasa_client

ROUNDS = int(os.environ.get("WRITE_ROUNDS", "15"))


def median_ms(fn, rounds: int = ROUNDS) -> float:
    fn()  # warm-up: connections, endpoints
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def writes(c: rasa_client.Client, fast: rasa_client.Client, r: redis.Redis) -> None:
    print("| batch | `put_many` over HTTP (up to 4 requests) | N × `put` | redis pipelined `SET` | put_many's speed vs N × put | vs redis (> 1: ahead) | `put_many` one-sided (default client) | one-sided vs redis |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, size, name in [(256, 4 << 10, "256 × 4 KiB"), (256, 64 << 10, "256 × 64 KiB"), (32, 1 << 20, "32 × 1 MiB")]:
        items = [(f"bench/writes/{size}/{i}", os.urandom(size)) for i in range(n)]

        def many() -> None:
            c.put_many(items)

        def one_by_one() -> None:
            for k, v in items:
                c.put(k, v)

        def pipelined() -> None:
            p = r.pipeline(transaction=False)
            for k, v in items:
                p.set(k, v)
            p.execute()

        def one_sided() -> None:
            fast.put_many(items)

        m, s, p = median_ms(many), median_ms(one_by_one, max(3, ROUNDS // 3)), median_ms(pipelined)
        o = median_ms(one_sided)
        print(f"| {name} | {m:.1f} ms | {s:.1f} ms | {p:.1f} ms | {s / m:.1f}× | {p / m:.2f}× | {o:.1f} ms | {p / o:.2f}× |")
    r.flushall()


def cold_reads(url: str) -> None:
    n, size = 256, 64 << 10
    writer = rasa_client.Client(url, fast_path="off")
    reader = rasa_client.Client(url, fast_path="required")
    reg = reader.register(n * size)
    offsets = [i * size for i in range(n)]
    values = [os.urandom(size) for _ in range(n)]
    cold, warm = [], []
    for _ in range(ROUNDS + 1):
        keys = [f"bench/cold/{uuid.uuid4().hex}/{i}" for i in range(n)]
        writer.put_many(list(zip(keys, values)))
        t = time.perf_counter()
        got = reader.get_many_into(keys, reg, offsets=offsets)
        cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        got = reader.get_many_into(keys, reg, offsets=offsets)
        warm.append(time.perf_counter() - t)
        assert got == [size] * n, got
        writer.delete_many(keys)
    c, w = statistics.median(cold[1:]) * 1e3, statistics.median(warm[1:]) * 1e3
    first, second = [], []
    keys = [f"bench/reg/{i}" for i in range(n)]
    writer.put_many(list(zip(keys, values)))
    reader.get_many_into(keys, reg, offsets=offsets)  # descriptors held
    for _ in range(ROUNDS):
        fresh = reader.register(n * size)
        t = time.perf_counter()
        reader.get_many_into(keys, fresh, offsets=offsets)
        first.append(time.perf_counter() - t)
        t = time.perf_counter()
        reader.get_many_into(keys, fresh, offsets=offsets)
        second.append(time.perf_counter() - t)
    f, s = statistics.median(first) * 1e3, statistics.median(second) * 1e3
    print()
    print(f"| `get_many_into` of 256 × 64 KiB, one RegisteredBuffer (median of {ROUNDS}) | wall | vs warm |")
    print("| --- | --- | --- |")
    print(f"| descriptors not held (keys just written by another client) | {c:.1f} ms | {c / w:.2f}× |")
    print(f"| descriptors held | {w:.1f} ms | 1.00× |")
    print(f"| first batch into a newly `register()`ed buffer (p50 / max) | {f:.1f} ms / {max(first) * 1e3:.0f} ms | {f / s:.2f}× the second |")
    print(f"| second batch into it | {s:.1f} ms | |")


def put_tail(url: str) -> None:
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    body = os.urandom(1 << 20)
    lat = []
    for i in range(300):
        t = time.perf_counter()
        conn.request("PUT", f"/v1/objects/bench/tail/{i % 50}", body=body)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 201, resp.status
        lat.append(time.perf_counter() - t)
    lat.sort()
    p50, p99 = lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3
    print()
    print(f"PUT of 1 MiB over plain HTTP (http.client, kept alive, 300 in a row): p50 {p50:.2f} ms, p99 {p99:.2f} ms, p99/p50 {p99 / p50:.1f}.")


def warm(c: rasa_client.Client, memory: int) -> None:
    """Writes the gateway's whole memory once (and drops it), so its arenas are faulted in
    as on any gateway that has served for a while: a fresh one pays the kernel's zeroing of
    each page on first touch (about a third of a write's CPU here)."""
    block = os.urandom(1 << 20)
    keys = [f"bench/warm/{i}" for i in range(memory // len(block))]
    for i in range(0, len(keys), 64):
        c.put_many([(k, block) for k in keys[i : i + 64]])
    c.delete_many(keys)


def main() -> None:
    url, redis_port = sys.argv[1], int(sys.argv[2])
    # Plain writes, as redis takes them: no descriptor asked for, so nothing leased.
    c = rasa_client.Client(url, fast_path="off")
    warm(c, int(os.environ.get("WARM_BYTES", str(1 << 30))))
    r = redis.Redis(port=redis_port)
    # The default client: its fast path, so batches of 64 KiB or more go one-sided.
    writes(c, rasa_client.Client(url), r)
    cold_reads(url)
    put_tail(url)


if __name__ == "__main__":
    main()
