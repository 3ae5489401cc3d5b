"""LMCache with Rasa as its L2, end to end: LMCache's own ``StorageManager`` (CPU L1) with
``RasaConnector`` as its only L2 adapter stores chunks, drops its own copies and brings
them back from Rasa byte-exact — also across a restart of the gateway (disk tier) — and
loads land in LMCache's L1 arena with no copy, the arena registered once."""

from __future__ import annotations

import ctypes
import os
import socket
import time
import urllib.request
import uuid

import numpy as np
import pytest
import torch
from conftest import rasa_connector, start_gateway, stop_gateway
from lmcache.v1.distributed.api import (
    GroupedObjectKeys,
    MemoryLayoutDesc,
    ObjectKey,
    PrefetchTaskSpec,
)
from lmcache.v1.distributed.config import (
    EvictionConfig,
    L1ManagerConfig,
    L1MemoryManagerConfig,
    StorageManagerConfig,
)
from lmcache.v1.distributed.l2_adapters.config import L2AdaptersConfig
from lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter import (
    NativePluginL2AdapterConfig,
)
from lmcache.v1.distributed.l2_adapters.plugin_l2_adapter import PluginL2AdapterConfig
from lmcache.v1.distributed.storage_manager import StorageManager
from rasa_client import Client

LAYOUT = MemoryLayoutDesc(shapes=[torch.Size([256, 2, 1024])], dtypes=[torch.bfloat16])  # 1 MiB


def until(predicate, what: str, timeout: float = 20.0) -> None:
    """Waits for ``predicate`` (LMCache offers no signal for these), naming ``what``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.02)


def storage_manager(endpoint: str, prefix: str, route: str = "native_plugin") -> StorageManager:
    """LMCache's StorageManager with Rasa as its L2, through the ``native_plugin`` route
    (``RasaConnector``) or the ``plugin`` route (``RasaL2Adapter``, given the L1 arena)."""
    l1 = L1MemoryManagerConfig(
        size_in_bytes=64 << 20, use_lazy=False, init_size_in_bytes=64 << 20, align_bytes=0x1000
    )
    params = {"endpoint": endpoint, "prefix": prefix, "timeout": 10}
    if route == "plugin":
        rasa = PluginL2AdapterConfig(
            module_path="rasa_client.lmcache_l2", class_name="RasaL2Adapter", adapter_params=params
        )
    else:
        rasa = NativePluginL2AdapterConfig(
            module_path="rasa_client.lmcache", class_name="RasaConnector", adapter_params=params
        )
    return StorageManager(
        StorageManagerConfig(
            l1_manager_config=L1ManagerConfig(
                memory_config=l1, write_ttl_seconds=600, read_ttl_seconds=300
            ),
            eviction_config=EvictionConfig(eviction_policy="LRU"),
            l2_adapter_config=L2AdaptersConfig(adapters=[rasa]),
        )
    )


def keys_of(n: int) -> list[ObjectKey]:
    return [
        ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(1000 + i), model_name="llama", kv_rank=0)
        for i in range(n)
    ]


def store(sm: StorageManager, keys: list[ObjectKey], endpoint: str, prefix: str) -> dict[ObjectKey, bytes]:
    """Writes random chunks into L1 and waits until the store controller has pushed them
    to Rasa (the gateway lists them, their L1 copies are evictable); what each holds."""
    objs = sm.reserve_write(keys, LAYOUT)
    assert len(objs) == len(keys)
    written = {}
    for i, (k, obj) in enumerate(objs.items()):
        t = obj.tensor.view(torch.uint8).reshape(-1)
        t.copy_(torch.from_numpy(np.random.default_rng(i).integers(0, 256, t.numel(), dtype=np.uint8)))
        written[k] = bytes(t.numpy())
    sm.finish_write(list(objs))
    with Client(endpoint) as c:
        until(lambda: len(c.list(prefix).items) == len(keys), "chunks stored in Rasa")
    until(lambda: all(sm._l1_manager.is_key_evictable(k) for k in keys), "chunks released in L1")
    return written


def load_back(sm: StorageManager, keys: list[ObjectKey], written: dict[ObjectKey, bytes]) -> None:
    """Drops L1, prefetches every chunk back from Rasa and checks each byte."""
    sm.clear()
    assert sm._l1_manager.get_memory_usage()[0] == 0
    spec = PrefetchTaskSpec(key_groups=[GroupedObjectKeys(keys=keys, object_group_id=0, layout_desc=LAYOUT)])
    handle = sm.submit_prefetch_task(spec)
    status = []
    until(lambda: status.append(sm.query_prefetch_status(handle)) or status[-1] is not None, "the prefetch")
    assert status[-1].hit_cells[0].count_leading_ones() == len(keys)
    with sm.read_prefetched_results(keys) as objs:
        for k, obj in zip(keys, objs, strict=True):
            assert bytes(obj.tensor.view(torch.uint8).reshape(-1).numpy()) == written[k], "a chunk came back other"
    sm.finish_read_prefetched(keys)


def test_lmcache_storage_manager_loads_its_chunks_back_from_rasa():
    endpoint, prefix = os.environ["RASA_ENDPOINT"], f"sm-{uuid.uuid4().hex}/"
    sm = storage_manager(endpoint, prefix)
    try:
        keys = keys_of(8)
        written = store(sm, keys, endpoint, prefix)
        load_back(sm, keys, written)
        connector = sm._l2_adapters[0]._client  # type: ignore[attr-defined]
        assert connector.tenant(None).arenas.registered == 1, "the L1 arena registered once"
    finally:
        sm.close()


def test_the_plugin_route_registers_the_l1_arena_once_when_made():
    """The ``plugin`` route: LMCache hands ``RasaL2Adapter`` its L1 arena, registered when
    the adapter is made (once per worker); chunks go out and come back byte-exact, and the
    load registers nothing more and copies nothing."""
    endpoint, prefix = os.environ["RASA_ENDPOINT"], f"plugin-{uuid.uuid4().hex}/"
    sm = storage_manager(endpoint, prefix, route="plugin")
    try:
        adapter = sm._l2_adapters[0]  # type: ignore[attr-defined]
        tenant = adapter.connector.tenant(None)
        assert tenant.arenas.registered == 2, "the L1 arena, once per worker, when made"
        keys = keys_of(8)
        written = store(sm, keys, endpoint, prefix)
        before = tenant.client.stats()
        load_back(sm, keys, written)
        after = tenant.client.stats()
        assert tenant.arenas.registered == 2, "a load registers nothing"
        assert after["fabric_reads"] - before["fabric_reads"] == 8, after
        assert after["bytes_copied"] == before["bytes_copied"], "chunks land in L1, no copy"
    finally:
        sm.close()


def metric(url: str, name: str) -> float:
    """A gauge or counter of the gateway's ``/metrics``."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in {url}/metrics")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_chunks_survive_a_gateway_restart_through_the_disk_tier(tmp_path):
    """The gateway restarts between the store and the load (SIGTERM: memory written down
    to its disk tier): LMCache loads every chunk back, byte-exact."""
    listen = f"127.0.0.1:{free_port()}"
    disk = str(tmp_path / "disk")
    args = ("--listen", listen, "--memory", "64MiB", "--max-object-size", "4MiB", "--disk", disk, "--disk-size", "256MiB")
    proc, url = start_gateway(*args)
    sm = storage_manager(url, "restart/")
    try:
        keys = keys_of(6)
        written = store(sm, keys, url, "restart/")
        stop_gateway(proc)
        proc, _ = start_gateway(*args)
        recovered = metric(url, "rasa_disk_recovered_values")
        assert recovered >= len(keys), f"the new gateway recovered {recovered} values from disk"
        load_back(sm, keys, written)
    finally:
        sm.close()
        stop_gateway(proc)


@pytest.mark.parametrize("fast_path", ["required", "off"])
def test_loads_land_in_the_arena_with_no_copy(fast_path):
    """Buffers as LMCache makes them (``ctypes`` overlays on one arena): the arena is
    registered on the first load and every load after lands in place — no byte copied
    one-sided; over HTTP, one copy."""
    arena = np.zeros(32 << 20, dtype=np.uint8)
    base, size = arena.ctypes.data, 1 << 20

    def views(rows: list[int]) -> list[memoryview]:
        return [memoryview((ctypes.c_ubyte * size).from_address(base + r * size)) for r in rows]

    c = rasa_connector(fast_path=fast_path)
    try:
        names = [f"chunk{i}" for i in range(8)]
        arena[: 8 * size] = np.random.default_rng(3).integers(0, 256, 8 * size, dtype=np.uint8)
        want = arena[: 8 * size].copy()
        done = []

        def wait(fid: int) -> tuple:
            until(lambda: done.extend(c.drain_completions()) or any(d[0] == fid for d in done), f"batch {fid}")
            return next(d for d in done if d[0] == fid)

        assert wait(c.submit_batch_set(names, views(range(8))))[1]
        # The store took the one-sided way (issue 63): the chunks went straight into the
        # gateway's memory, none as an HTTP body.
        stats = c.tenant(None).client.stats()
        assert (stats["fabric_writes"], stats["http_writes"]) == ((8, 0) if fast_path == "required" else (0, 8))
        for rows in ([8, 9, 10, 11, 12, 13, 14, 15], [31, 20, 25, 16, 17, 18, 19, 30]):
            before = c.tenant(None).client.stats()["bytes_copied"]
            fid, ok, err, _ = wait(c.submit_batch_get(names, views(rows)))
            assert ok, err
            for i, r in enumerate(rows):
                assert (arena[r * size : (r + 1) * size] == want[i * size : (i + 1) * size]).all()
            copied = c.tenant(None).client.stats()["bytes_copied"] - before
            assert copied == (0 if fast_path == "required" else 8 * size)
        assert c.tenant(None).arenas.registered == 1, "one registration of the arena for both batches"
        assert not arena[21 * size : 25 * size].any(), "rows no load named are untouched"
    finally:
        c.close()


def test_each_tenant_has_its_namespace_and_evicts_only_its_own(tmp_path):
    """``namespace_by="cache_salt"`` with ``namespace_map``: a salted chunk goes to the
    namespace the operator's map gives its salt; a tenant that overfills its quota evicts
    its own chunks, never another's."""
    (tmp_path / "namespaces").write_text("tenant-a 8MiB\ntenant-b 8MiB\n")
    proc, url = start_gateway(
        "--listen", "127.0.0.1:0", "--memory", "64MiB", "--arena-size", "1MiB",
        "--max-object-size", "1MiB", "--namespaces", str(tmp_path / "namespaces"),
    )
    c = rasa_connector(
        endpoint=url, namespace_by="cache_salt", prefix="",
        namespace_map={"tenant-a": "tenant-a", "tenant-b": "tenant-b"},
    )
    try:
        done: list = []

        def run(fid: int) -> tuple:
            until(lambda: done.extend(c.drain_completions()) or any(d[0] == fid for d in done), f"batch {fid}")
            return next(d for d in done if d[0] == fid)

        def salted(salt: str, n: int, first: int = 0) -> list[str]:
            return [f"llama@00000000@0@{i:08x}@{salt}" for i in range(first, first + n)]

        chunk = memoryview(bytearray(512 << 10))
        a, b, plain = salted("tenant-a", 6), salted("tenant-b", 40), ["llama@00000000@0@ffff"]
        # tenant-b stores 20 MiB, 2 MiB a batch, into its 8 MiB.
        for keys in (a, plain, *(b[i : i + 4] for i in range(0, len(b), 4))):
            fid, ok, err, _ = run(c.submit_batch_set(keys, [chunk] * len(keys)))
            assert ok, err
        with Client(url, namespace="tenant-a") as ta, Client(url) as default:
            assert len(ta.list("llama").items) == 6, "tenant-a's chunks are in tenant-a"
            assert [i.key for i in default.list("llama").items] == plain, "unsalted stay in default"
        # tenant-b wrote 20 MiB into 8: it evicted its own oldest; tenant-a lost nothing.
        assert run(c.submit_batch_exists(a))[3] == [True] * 6
        there_b = run(c.submit_batch_exists(b))[3]
        assert not all(there_b) and there_b[-1], f"tenant-b kept its newest only: {there_b}"
        assert metric(url, 'rasa_namespace_evictions_total{namespace="tenant-a"}') == 0
        assert metric(url, 'rasa_namespace_evictions_total{namespace="tenant-b"}') > 0
        # A salt the map does not name stays in the connector's namespace, in the key.
        fid, ok, err, _ = run(c.submit_batch_set(salted("nobody", 1), [chunk]))
        assert ok, err
        with Client(url) as default:
            assert salted("nobody", 1)[0] in [i.key for i in default.list("llama").items]
    finally:
        c.close()
        stop_gateway(proc)


def test_a_salt_never_chooses_a_namespace(tmp_path):
    """Review III, finding 5: with ``namespace="tenant-a"`` and ``namespace_by="cache_salt"``,
    a chunk salted ``tenant-b`` went to namespace ``tenant-b``: a request could read tenant
    B's chunks and flood its quota. Only the operator's map names namespaces."""
    (tmp_path / "namespaces").write_text("tenant-a 16MiB\ntenant-b 8MiB\n")
    proc, url = start_gateway(
        "--listen", "127.0.0.1:0", "--memory", "64MiB", "--arena-size", "1MiB",
        "--max-object-size", "1MiB", "--namespaces", str(tmp_path / "namespaces"),
    )
    with pytest.raises(ValueError, match="namespace_map"):
        rasa_connector(endpoint=url, namespace="tenant-a", namespace_by="cache_salt")
    c = rasa_connector(
        endpoint=url, namespace="tenant-a", namespace_by="cache_salt", prefix="",
        namespace_map={"salt-of-a": "tenant-a"},
    )
    try:
        done: list = []

        def run(fid: int) -> tuple:
            until(lambda: done.extend(c.drain_completions()) or any(d[0] == fid for d in done), f"batch {fid}")
            return next(d for d in done if d[0] == fid)

        keys = [f"llama@00000000@0@{i:08x}@tenant-b" for i in range(48)]
        chunk = memoryview(bytearray(512 << 10))
        # Tenant B's own chunks, under the very names a salted request would use.
        with Client(url, namespace="tenant-b") as tb:
            tb.put_many([(k, b"B" * 4096) for k in keys[:4]])
        # A request salted "tenant-b" does not see them...
        assert run(c.submit_batch_exists(keys[:4]))[3] == [False] * 4
        # ...and its 24 MiB land in the connector's namespace, never in tenant B's.
        for i in range(0, len(keys), 4):
            fid, ok, err, _ = run(c.submit_batch_set(keys[i : i + 4], [chunk] * 4))
            assert ok, err
        with Client(url, namespace="tenant-b") as tb, Client(url, namespace="tenant-a") as ta:
            assert [i.key for i in tb.list("llama").items] == keys[:4], "tenant B holds only its own"
            assert all(bytes(tb.get(k)) == b"B" * 4096 for k in keys[:4])
            assert ta.list("llama").items, "the salted chunks are in tenant-a"
        assert metric(url, 'rasa_namespace_evictions_total{namespace="tenant-b"}') == 0
    finally:
        c.close()
        stop_gateway(proc)
