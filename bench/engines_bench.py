"""LMCache's L2 through each backend, one run: store and load throughput of KV chunks and
the time to load a 32k-token prefix (issue 47, item 5).

Every backend is driven through the same contract, LMCache's ``native_plugin`` connector
(``submit_batch_set`` / ``submit_batch_get`` of memoryviews into one arena, completions on
an eventfd): ``RasaConnector`` over shm, over ``tcp;ofi_rxm`` and over HTTP, and LMCache's
own native clients for a local directory (``LMCacheFSClient``: through the page cache, as
configured by default — the chunks just written are read back from memory —, and with
``O_DIRECT``, from the disk) and redis (``LMCacheRedisClient``). Chunks are 256 tokens: 2 MiB (a small model) and 32 MiB
(Llama-3-8B, bf16: 128 KiB a token); a batch is 8 chunks (a 2k-token request), all batches
in flight at once. Loads land in other rows of the arena than the stores came from, and are
checked. The ceiling is ``process_vm_readv`` from another process (what shm's reader does).

    python bench/engines_bench.py --gateway URL --fs DIR --redis HOST:PORT

Prints a Markdown section.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import select
import statistics
import sys
import time
import uuid

import numpy as np
from ceiling import ceiling  # bench/ceiling.py

BATCH = 8
TOTAL = 512 << 20  # bytes moved per measurement
PREFIX_TOKENS, TOKEN_BYTES, CHUNK_TOKENS = 32 * 1024, 128 << 10, 256


class Arena:
    """One block of memory, handed out as LMCache does: a ctypes overlay per chunk."""

    def __init__(self, size: int) -> None:
        # Page-aligned, as LMCache's arena is (O_DIRECT needs it).
        self._map = mmap.mmap(-1, size)
        self.mem = np.frombuffer(self._map, dtype=np.uint8)
        self.base = self.mem.ctypes.data

    def views(self, chunk: int, rows: range) -> list[memoryview]:
        t = ctypes.c_ubyte * chunk
        return [memoryview(t.from_address(self.base + r * chunk)) for r in rows]


def wait_all(conn, ids: set[int], what: str, timeout: float = 300.0) -> None:
    """Waits for every batch in ``ids`` on the connector's eventfd; fails on any error."""
    deadline = time.monotonic() + timeout
    efd = conn.event_fd()
    while ids:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what}: {len(ids)} batches not done within {timeout} s")
        select.select([efd], [], [], min(left, 1.0))
        for fid, ok, err, _ in conn.drain_completions():
            if fid in ids:
                if not ok:
                    raise RuntimeError(f"{what}: batch {fid} failed: {err}")
                ids.discard(fid)


def chunk_keys(n: int) -> list[str]:
    """``n`` fresh keys as LMCache names chunks (``model@kv_rank@group@hash``: its fs
    client parses them)."""
    run = uuid.uuid4().hex[:16]
    return [f"llama@00000000@0@{run}{i:08x}" for i in range(n)]


def move(conn, op: str, keys: list[str], views: list[memoryview]) -> float:
    """Seconds to move every chunk, BATCH a batch, all batches in flight."""
    submit = conn.submit_batch_set if op == "set" else conn.submit_batch_get
    t = time.perf_counter()
    ids = {submit(keys[i : i + BATCH], views[i : i + BATCH]) for i in range(0, len(keys), BATCH)}
    wait_all(conn, ids, op)
    return time.perf_counter() - t


def measure(conn, arena: Arena, chunk: int, n: int, rounds: int) -> tuple[float, float]:
    """Median store and load GB/s of ``n`` chunks of ``chunk`` bytes (stores from rows
    0..n, loads into rows n..2n, checked)."""
    stores, loads = [], []
    for r in range(rounds):
        keys = chunk_keys(n)
        src = arena.mem[: n * chunk]
        src[:] = np.random.default_rng(r).integers(0, 256, n * chunk, dtype=np.uint8)
        stores.append(n * chunk / move(conn, "set", keys, arena.views(chunk, range(n))) / 1e9)
        arena.mem[n * chunk : 2 * n * chunk] = 0
        loads.append(n * chunk / move(conn, "get", keys, arena.views(chunk, range(n, 2 * n))) / 1e9)
        if not np.array_equal(arena.mem[n * chunk : 2 * n * chunk], src):
            raise AssertionError("a load brought back other bytes")
        if hasattr(conn, "submit_batch_delete"):
            wait_all(conn, {conn.submit_batch_delete(keys)}, "delete")
    return statistics.median(stores), statistics.median(loads)


def prefix_load(conn, arena: Arena) -> float:
    """Seconds to load a 32k-token prefix of Llama-3-8B (128 chunks of 32 MiB: 4 GiB)."""
    chunk = CHUNK_TOKENS * TOKEN_BYTES
    n = PREFIX_TOKENS // CHUNK_TOKENS
    keys = chunk_keys(n)
    arena.mem[: n * chunk] = 7
    move(conn, "set", keys, arena.views(chunk, range(n)))
    arena.mem[: n * chunk] = 0
    took = move(conn, "get", keys, arena.views(chunk, range(n)))
    if not (arena.mem[:: 1 << 20][: n * chunk >> 20] == 7).all():
        raise AssertionError("the prefix came back other")
    if hasattr(conn, "submit_batch_delete"):
        wait_all(conn, {conn.submit_batch_delete(keys)}, "delete")
    return took


def connectors(args) -> list[tuple[str, object]]:
    from lmcache.lmcache_fs import LMCacheFSClient
    from lmcache.lmcache_redis import LMCacheRedisClient

    from rasa_client.lmcache import RasaConnector

    host, port = args.redis.rsplit(":", 1)

    def rasa(**params):
        return RasaConnector(args.gateway, workers=4, timeout=120, **params)

    return [
        ("Rasa, shm", lambda: rasa(fast_path="required", fabric_provider="shm")),
        ("Rasa, tcp;ofi_rxm", lambda: rasa(fast_path="required", fabric_provider="tcp;ofi_rxm")),
        ("Rasa, HTTP", lambda: rasa(fast_path="off")),
        ("LMCache fs (local directory, page cache)", lambda: LMCacheFSClient(args.fs, 4)),
        (
            "LMCache fs (local directory, O_DIRECT)",
            lambda: LMCacheFSClient(args.fs, 4, use_odirect=True),
        ),
        ("LMCache redis (redis-server)", lambda: LMCacheRedisClient(host, int(port), 4)),
    ]


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("--gateway", "--fs", "--redis"):
        p.add_argument(name, required=True)
    p.add_argument("--rounds", type=int, default=int(os.environ.get("ENGINE_ROUNDS", "3")))
    args = p.parse_args()
    chunk_sizes = [2 << 20, CHUNK_TOKENS * TOKEN_BYTES]
    arena = Arena(PREFIX_TOKENS * TOKEN_BYTES)  # 4 GiB: the prefix, and 2 × 512 MiB
    rows, prefix = [], {}
    for name, make in connectors(args):
        print(f"engines: {name}...", file=sys.stderr)
        conn = make()
        try:
            figures = []
            for c in chunk_sizes:
                figures.append(measure(conn, arena, c, TOTAL // c, args.rounds))
                print(f"engines:   {c >> 20} MiB chunks: store, load {figures[-1]} GB/s", file=sys.stderr)
            prefix[name] = prefix_load(conn, arena)
            print(f"engines:   32k-token prefix loaded in {prefix[name]:.3f} s", file=sys.stderr)
        finally:
            conn.close()
        rows.append((name, figures))
    top = {c: max(r[1][i][1] for r in rows) for i, c in enumerate(chunk_sizes)}
    cap = ceiling(32 << 20, 100)
    print("## Inference engines: LMCache's L2 through each backend (`bench/engines.sh`)")
    print()
    print(
        f"One run, medians of {args.rounds}; {TOTAL >> 20} MiB moved per figure, {BATCH} chunks a "
        "batch, all batches in flight; every backend driven through LMCache's native "
        "connector contract (memoryviews into one arena, completions on an eventfd), loads "
        "checked. The fs and redis clients are LMCache's own (C++), 4 workers each, as "
        "Rasa's connector; the fs client's default reads the page cache (chunks just "
        "written: a local memory copy, not shared with other hosts), `O_DIRECT` the disk. "
        "The ceiling, `process_vm_readv` of 32 MiB from another process: "
        f"**{cap:.2f} GB/s**."
    )
    print()
    print("| backend | store 2 MiB | load 2 MiB | store 32 MiB | load 32 MiB | load ÷ ceiling (32 MiB) | 32k-token prefix (4 GiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, ((s2, l2), (s32, l32)) in rows:
        mark = lambda v, c: f"**{v:.2f}**" if v == top[c] else f"{v:.2f}"  # noqa: E731
        print(
            f"| {name} | {s2:.2f} GB/s | {mark(l2, chunk_sizes[0])} GB/s | {s32:.2f} GB/s | "
            f"{mark(l32, chunk_sizes[1])} GB/s | {l32 / cap:.2f} | {prefix[name] * 1e3:.0f} ms |"
        )


if __name__ == "__main__":
    main()
