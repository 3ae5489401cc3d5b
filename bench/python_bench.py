"""Python `get_into` over the fabric vs the Rust SDK vs Python over HTTP, one run.

    python bench/python_bench.py GATEWAY_URL RUST_GET_INTO_BENCH [S3_URL S3_KEY S3_SECRET]

Prints a Markdown table: for 4 KiB, 1 MiB and 16 MiB values, the median latency and the
throughput (one read at a time, into a reused buffer) of
- rasa_client `get_into`, one-sided (fast_path="required") over shm (the gateway serves
  `tcp;ofi_rxm,shm`; a client on its host picks shm);
- the same into a `RegisteredBuffer` (`Client.register`: the value lands in it, no copy);
- rasa_client `get_into`, one-sided over tcp;ofi_rxm (fabric_provider="tcp;ofi_rxm");
- the Rust SDK's `get_into`, one-sided (client-sdk/examples/get_into_bench.rs; shm);
- rasa_client `get_into` over HTTP (fast_path="off");
- the standard library's http.client (a kept-alive connection, `readinto` a buffer).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import os
import statistics
import subprocess
import sys
import time
import urllib.parse

import rasa_client

SIZES = [(4 << 10, "4 KiB", 3000), (1 << 20, "1 MiB", 300), (16 << 20, "16 MiB", 40)]


def timed(fn, rounds: int, size: int) -> tuple[float, float]:
    for _ in range(3):
        fn()
    lat = []
    start = time.perf_counter()
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t)
    wall = time.perf_counter() - start
    return statistics.median(lat) * 1e6, size * rounds / wall / 1e9


def main() -> None:
    url, rust_bench = sys.argv[1], sys.argv[2]
    fabric = rasa_client.Client(url, fast_path="required")
    tcp = rasa_client.Client(url, fast_path="required", fabric_provider="tcp;ofi_rxm")
    http_sdk = rasa_client.Client(url, fast_path="off")
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    rows = {}
    for size, name, rounds in SIZES:
        key = f"bench/python/{size}"
        fabric.put(key, os.urandom(size))
        buf = bytearray(size)
        view = memoryview(buf)

        def stdlib():
            conn.request("GET", f"/v1/objects/{key}")
            r = conn.getresponse()
            n = r.readinto(view)
            assert n == size and r.read() == b""

        def one_sided():
            assert fabric.get_into(key, buf) == size

        registered = fabric.register(size)
        rows[size] = [
            timed(one_sided, rounds, size),
            timed(lambda: fabric.get_into(key, registered), rounds, size),
            timed(lambda: tcp.get_into(key, buf), rounds, size),
            None,
            timed(lambda: http_sdk.get_into(key, buf), rounds, size),
            timed(stdlib, rounds, size),
        ]
        assert fabric.stats()["fallbacks"] == {}, fabric.stats()
        assert fabric.stats()["fabric_provider"] == "shm", fabric.stats()
        assert tcp.stats()["fabric_provider"] == "tcp;ofi_rxm", tcp.stats()
    specs = [f"bench/python/{size}:{rounds}" for size, _, rounds in SIZES]
    out = subprocess.run([rust_bench, url, *specs], check=True, capture_output=True, text=True)
    for line, (size, _, _) in zip(out.stdout.splitlines(), SIZES):
        _, p50, gbps = line.split()
        rows[size][3] = (float(p50), float(gbps))
    print("| value | Python get_into, one-sided (shm) | Python get_into a RegisteredBuffer (shm) | Python get_into, one-sided (tcp;ofi_rxm) | Rust SDK get_into, one-sided (shm) | Python get_into, HTTP | Python http.client readinto |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size, name, _ in SIZES:
        cells = " | ".join(f"p50 {p:.0f} µs, {g:.2f} GB/s" for p, g in rows[size])
        print(f"| {name} | {cells} |")


def threads_and_asyncio(url: str) -> None:
    """Threads sharing one client (1 MiB get_into, one-sided over shm, each thread its own
    buffer), and asyncio: a gather of 200 reads of 4 KiB next to one get_many of them."""
    c = rasa_client.Client(url, fast_path="required")
    size, per_thread = 1 << 20, 200
    c.put("bench/python/threads", os.urandom(size))
    print()
    print("| threads sharing one client | 1 MiB get_into, one-sided (shm) | per thread |")
    print("| --- | --- | --- |")
    base = None
    for n in (1, 2, 4, 8):
        bufs = [bytearray(size) for _ in range(n)]

        def work(i: int) -> None:
            for _ in range(per_thread):
                c.get_into("bench/python/threads", bufs[i])

        work(0)
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            start = time.perf_counter()
            list(pool.map(work, range(n)))
            wall = time.perf_counter() - start
        gbps = size * per_thread * n / wall / 1e9
        base = base or gbps
        print(f"| {n} | {gbps:.2f} GB/s ({gbps / base:.2f}x one thread) | {gbps / n:.2f} GB/s |")

    keys = [f"bench/python/small/{i}" for i in range(200)]
    for k in keys:
        c.put(k, os.urandom(4096))

    async def gathered() -> list[float]:
        a = rasa_client.AsyncClient(url, fast_path="required")
        await asyncio.gather(*(a.get(k) for k in keys))  # warm: endpoints, descriptors
        walls = []
        for _ in range(RUNS):
            start = time.perf_counter()
            await asyncio.gather(*(a.get(k) for k in keys))
            walls.append(time.perf_counter() - start)
        return walls

    def many() -> list[float]:
        c.get_many(keys)
        walls = []
        for _ in range(RUNS):
            start = time.perf_counter()
            c.get_many(keys)
            walls.append(time.perf_counter() - start)
        return walls

    def into_registered() -> list[float]:
        reg = c.register(4096 * len(keys))
        offsets = [4096 * i for i in range(len(keys))]
        c.get_many_into(keys, reg, offsets=offsets)
        walls = []
        for _ in range(RUNS):
            start = time.perf_counter()
            got = c.get_many_into(keys, reg, offsets=offsets)
            walls.append(time.perf_counter() - start)
            assert got == [4096] * len(keys), got
        return walls

    m, g, r = statistics.median(many()), statistics.median(asyncio.run(gathered())), statistics.median(into_registered())
    print()
    print(f"| 200 reads of 4 KiB (median of {RUNS}) | wall | vs get_many |")
    print("| --- | --- | --- |")
    print(f"| Client.get_many | {m * 1e3:.1f} ms | 1.00x |")
    print(f"| AsyncClient: asyncio.gather of get | {g * 1e3:.1f} ms | {g / m:.2f}x |")
    print(f"| Client.get_many_into one RegisteredBuffer at offsets | {r * 1e3:.1f} ms | {r / m:.2f}x |")


def pandas_parquet(url: str, s3: str, s3_key: str, s3_secret: str) -> None:
    """pandas.read_parquet of one ~100 MB file: via rasa:// (rasa_client.fsspec), via the S3
    listener (s3fs), via plain HTTP (pandas fetches the URL itself); median of RUNS each."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    df = pd.DataFrame({f"c{i}": rng.random(1_250_000) for i in range(10)})  # 100 MB of float64
    body = df.to_parquet(compression=None)
    key = "bench/pandas/frame.parquet"
    rasa_client.Client(url).put(key, body)
    ways = {
        "rasa:// (rasa_client.fsspec, one-sided)": lambda: pd.read_parquet(
            f"rasa://{key}", storage_options={"endpoint": url}
        ),
        "s3:// via the S3 listener (s3fs)": lambda: pd.read_parquet(
            f"s3://bench/{key}",
            storage_options={"key": s3_key, "secret": s3_secret, "client_kwargs": {"endpoint_url": s3}},
        ),
        "plain HTTP (pandas fetches the URL)": lambda: pd.read_parquet(f"{url}/v1/objects/{key}"),
    }
    print()
    print(f"pandas {pd.__version__} `read_parquet` of a {len(body) / 1e6:.0f} MB file (10 float64 columns, uncompressed), median of {RUNS} after one warm-up, same gateway:")
    print()
    print("| via | wall | MB/s |")
    print("| --- | --- | --- |")
    for name, read in ways.items():
        assert read().equals(df), name
        walls = []
        for _ in range(RUNS):
            start = time.perf_counter()
            read()
            walls.append(time.perf_counter() - start)
        w = statistics.median(walls)
        print(f"| {name} | {w * 1e3:.0f} ms | {len(body) / w / 1e6:.0f} |")


RUNS = 5


if __name__ == "__main__":
    main()
    threads_and_asyncio(sys.argv[1])
    if len(sys.argv) > 3:
        pandas_parquet(sys.argv[1], *sys.argv[3:6])
