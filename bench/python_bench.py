"""Python `get_into` over the fabric vs the Rust SDK vs Python over HTTP, one run.

    python bench/python_bench.py GATEWAY_URL RUST_GET_INTO_BENCH

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


if __name__ == "__main__":
    main()
