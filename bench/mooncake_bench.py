"""Rasa next to Mooncake Store (issue 63), in one run, round by round: writes and reads of
256 × 64 KiB and 16 × 16 MiB, and a 4 KiB get's latency, every read checked byte-exact.

Rasa: the default Python client (its fast path: one-sided writes and reads over shm on
this host), the same asked to use tcp (``fabric_provider="tcp;ofi_rxm"``), and plain HTTP
(``fast_path="off"``). Mooncake Store 0.3.13 (PyPI ``mooncake-transfer-engine-efa-non-cuda``):
its ``mooncake_master`` and a ``mooncake_client`` holding the memory, reached over TCP
(``setup(..., "tcp", ...)``) and in its same-host mode (``setup_dummy``: shared memory with
the ``mooncake_client``). Reads land in registered memory on both sides. Also the memcpy
ceiling of this machine in the same run.

Usage: mooncake_bench.py RASA_URL MASTER_ADDR METADATA_URL CLIENT_ADDR [LABEL=URL ...]
(env ROUNDS). Prints Markdown rows; medians over the rounds. With LABEL=URL (gateways with
``--memory 1GiB``): 30 rounds of 16 × 16 MiB ``put_many`` by the default client, the memory
turned over many times (issue 63: the slowest round against the median).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid

import numpy as np

import rasa_client

# Mooncake's module lives in its own venv (scripts/setup.sh --bench), after this one's.
if os.environ.get("MOONCAKE_SITE"):
    sys.path.append(os.environ["MOONCAKE_SITE"])

ROUNDS = int(os.environ.get("ROUNDS", "9"))
SHAPES = {"256 × 64 KiB": (256, 64 << 10), "16 × 16 MiB": (16, 16 << 20)}


def values(n: int, size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n * size, dtype=np.uint8)


class Rasa:
    def __init__(self, url: str, name: str, **kw) -> None:
        self.name = name
        self.c = rasa_client.Client(url, **kw)
        self.reg = self.c.register(256 << 20)

    def write(self, keys: list[str], data: np.ndarray, size: int) -> None:
        mv = memoryview(data)
        self.c.put_many([(k, mv[i * size : (i + 1) * size]) for i, k in enumerate(keys)])

    def read(self, keys: list[str], size: int) -> memoryview:
        offsets = [i * size for i in range(len(keys))]
        self.c.get_many_into(keys, self.reg, offsets=offsets)
        return memoryview(self.reg)[: len(keys) * size]

    def get(self, key: str) -> bytes:
        return bytes(self.c.get(key))

    def drop(self, keys: list[str]) -> None:
        self.c.delete_many(keys)


class Mooncake:
    def __init__(self, name: str, store, alloc) -> None:
        self.name, self.s = name, store
        self.buf, self.ptr = alloc(256 << 20)
        self.small, self.small_ptr = alloc(1 << 20)

    def write(self, keys: list[str], data: np.ndarray, size: int) -> None:
        self.buf[: data.size] = data
        ptrs = [self.ptr + i * size for i in range(len(keys))]
        rc = self.s.batch_put_from(keys, ptrs, [size] * len(keys))
        assert all(r == 0 for r in rc), rc

    def read(self, keys: list[str], size: int) -> memoryview:
        ptrs = [self.ptr + i * size for i in range(len(keys))]
        got = self.s.batch_get_into(keys, ptrs, [size] * len(keys))
        assert all(g == size for g in got), got
        return memoryview(self.buf)[: len(keys) * size]

    def get(self, key: str) -> bytes:
        return bytes(self.s.get(key))

    def drop(self, keys: list[str]) -> None:
        self.s.batch_remove(keys) if hasattr(self.s, "batch_remove") else [self.s.remove(k) for k in keys]


def mooncake_tcp(master: str, metadata: str):
    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", metadata, 0, 512 << 20, "tcp", "", master)
    assert rc == 0, f"mooncake setup: {rc}"

    def alloc(n: int):
        a = np.zeros(n, dtype=np.uint8)
        assert s.register_buffer(a.ctypes.data, n) == 0
        return a, a.ctypes.data

    return Mooncake("Mooncake tcp", s, alloc)


def mooncake_same_host(client: str):
    import ctypes

    from mooncake.store import MooncakeDistributedStore

    s = MooncakeDistributedStore()
    rc = s.setup_dummy(1 << 30, 512 << 20, client)
    assert rc == 0, f"mooncake setup_dummy: {rc}"

    def alloc(n: int):
        ptr = s.alloc_from_mem_pool(n)
        assert ptr, "alloc_from_mem_pool"
        assert s.register_buffer(ptr, n) == 0
        a = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))
        return a, ptr

    return Mooncake("Mooncake same-host", s, alloc)


def best_of(work, rounds: int = 5) -> float:
    """The shortest of ``rounds`` runs of ``work``, in seconds."""
    best = []
    for _ in range(rounds):
        t = time.perf_counter()
        work()
        best.append(time.perf_counter() - t)
    return min(best)


def ceilings() -> tuple[float, float]:
    """The memcpy ceiling (GB/s of a numpy copy of 256 MiB, best of 5), and the bound it
    puts on a write checked where it lands against a read: a read is one copy (checked in
    the cache it lands in), a one-sided write one copy and then one read of what landed
    (the gateway's check at the commit), so a write's rate over a read's is at most
    copy ÷ (copy + a read of 256 MiB)."""
    src = values(1, 256 << 20, 1)
    dst = np.empty_like(src)
    copy = best_of(lambda: np.copyto(dst, src))
    read = best_of(lambda: dst.view(np.uint64).sum())
    return src.size / copy / 1e9, copy / (copy + read)


def turnover(label: str, url: str) -> None:
    """30 rounds of 16 × 16 MiB into ``--memory 1GiB`` with the default client, after one
    small call that sets its fast path up (as Mooncake's ``setup`` does before its rounds)."""
    n, size = 16, 16 << 20
    data = values(n, size, 7)
    mv = memoryview(data)
    c = rasa_client.Client(url)
    t = time.perf_counter()
    c.put_many([(f"turnover/setup/{i}", mv[:65536]) for i in range(2)])
    setup = (time.perf_counter() - t) * 1e3
    took = []
    for r in range(30):
        t = time.perf_counter()
        c.put_many([(f"turnover/{r}/{i}", mv[i * size : (i + 1) * size]) for i in range(n)])
        took.append((time.perf_counter() - t) * 1e3)
    med = statistics.median(took)
    print(
        f"- {label}: 30 rounds of 16 × 16 MiB `put_many` (default client, one-sided "
        f"over {c.stats()['fabric_provider']}): median {med:.0f} ms, slowest {max(took):.0f} ms "
        f"= **{max(took) / med:.2f}× the median** (goal ≤ 3×); rounds in ms: "
        f"{[round(x) for x in took]}; the client's first call (a small one, which sets its "
        f"fast path up) {setup:.0f} ms."
    )


def main() -> None:
    url, master, metadata, client = sys.argv[1:5]
    peers = [
        Rasa(url, "Rasa default (shm)"),
        Rasa(url, "Rasa tcp", fabric_provider="tcp;ofi_rxm"),
        Rasa(url, "Rasa HTTP", fast_path="off"),
        mooncake_tcp(master, metadata),
        mooncake_same_host(client),
    ]
    rates: dict[tuple[str, str], list[float]] = {}
    lat: dict[str, list[float]] = {p.name: [] for p in peers}
    data = {shape: values(n, size, i) for i, (shape, (n, size)) in enumerate(SHAPES.items())}
    for r in range(ROUNDS):
        for p in peers:
            for shape, (n, size) in SHAPES.items():
                keys = [f"mc/{uuid.uuid4().hex}/{i}" for i in range(n)]
                t = time.perf_counter()
                p.write(keys, data[shape], size)
                w = time.perf_counter() - t
                t = time.perf_counter()
                got = p.read(keys, size)
                rd = time.perf_counter() - t
                assert got == memoryview(data[shape]), f"{p.name}: {shape} read back wrong"
                rates.setdefault((p.name, f"write {shape}"), []).append(n * size / w / 1e9)
                rates.setdefault((p.name, f"read {shape}"), []).append(n * size / rd / 1e9)
                p.drop(keys)
            key = f"mc/small/{uuid.uuid4().hex}"
            small = values(1, 4096, r).tobytes()
            if isinstance(p, Rasa):
                p.c.put(key, small)
            else:
                assert p.s.put(key, small) == 0
            for _ in range(50):
                t = time.perf_counter()
                assert p.get(key) == small
                lat[p.name].append((time.perf_counter() - t) * 1e6)
    names = [p.name for p in peers]
    med = lambda peer, what: statistics.median(rates[(peer, what)])  # noqa: E731
    ceiling, write_bound = ceilings()
    print(f"| GB/s (median of {ROUNDS} rounds) | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for what in [f"{op} {shape}" for shape in SHAPES for op in ("write", "read")]:
        row = [med(n, what) for n in names]
        best = max(row)
        print(f"| {what} | " + " | ".join(f"**{v:.2f}**" if v == best else f"{v:.2f}" for v in row) + " |")
    p50 = [statistics.median(lat[n]) for n in names]
    print("| get 4 KiB, p50 µs | " + " | ".join(f"**{v:.0f}**" if v == min(p50) else f"{v:.0f}" for v in p50) + " |")
    print()
    print(f"memcpy ceiling in this run: {ceiling:.2f} GB/s (numpy copy of 256 MiB, best of 5).")
    print()
    shm = "Rasa default (shm)"
    wr = {shape: med(shm, f"write {shape}") / med(shm, f"read {shape}") for shape in SHAPES}
    print(
        f"Writes ÷ reads, Rasa default (shm): 16 × 16 MiB **{wr['16 × 16 MiB']:.2f}** (goal 0.7), "
        f"256 × 64 KiB **{wr['256 × 64 KiB']:.2f}** (goal 0.5). The bound this machine puts on a write "
        f"checked where it lands, against a read: one copy ÷ (one copy and one read of what "
        f"it copied) = **{write_bound:.2f}** (numpy, 256 MiB, best of 5)."
    )
    print()
    for w in [f"{op} {shape}" for shape in SHAPES for op in ("write", "read")]:
        print(
            f"- {w}: Rasa shm / Mooncake same-host {med(shm, w) / med('Mooncake same-host', w):.2f}×, "
            f"Rasa tcp / Mooncake tcp {med('Rasa tcp', w) / med('Mooncake tcp', w):.2f}×"
        )
    if len(sys.argv) > 5:
        print()
        print("Memory turned over (a gateway with `--memory 1GiB`, new keys every round):")
        print()
        for arg in sys.argv[5:]:
            turnover(*arg.split("=", 1))


if __name__ == "__main__":
    main()
