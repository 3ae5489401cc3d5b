"""SGLang HiCache's L3 tier in Rasa, driven by SGLang's own pieces on CPU: its KV pools
(``MHATokenToKVPool`` and the host pool ``MHATokenToKVPoolHost`` in ``page_first``
layout, what HiCache backs up from and prefetches into) and its backend factory loading
``RasaHiCache`` as a ``dynamic`` backend from the exact ``extra_config`` the engines guide
gives. Pages go out of the host pool and come back into other pages of it byte-exact,
also after the gateway restarts with a disk tier; each tenant sees only its namespace."""

from __future__ import annotations

import socket

import pytest
import torch
from conftest import start_gateway, stop_gateway
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

PAGE = 16  # tokens a page
PAGES = 32  # pages a batch (SGLang's prefetches run up to 128)
LAYERS, HEADS, DIM = 4, 2, 64


def host_pool() -> MHATokenToKVPoolHost:
    """SGLang's host KV pool on CPU, in the layout zero-copy backends need."""
    device = MHATokenToKVPool(
        1024, PAGE, torch.float16, HEADS, DIM, LAYERS, "cpu", False,
        start_layer=0, end_layer=LAYERS - 1, enable_alt_stream=False,
    )
    return MHATokenToKVPoolHost(
        device.get_device_pool_infos()[0].buffer_info,
        4,
        0,
        PAGE,
        "page_first",
        pin_memory=False,
        device_capacity_tokens=device.size,
        start_layer=device.start_layer,
        end_layer=device.end_layer,
        write_back_staging=device.hicache_write_back_staging,
    )


def backend(pool: MHATokenToKVPoolHost, endpoint: str, **extra):
    """``RasaHiCache`` as SGLang makes it from ``--hicache-storage-backend dynamic``."""
    config = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=True, is_page_first_layout=True,
        model_name="test-model",
        extra_config={
            "backend_name": "rasa", "module_path": "rasa_client.sglang",
            "class_name": "RasaHiCache", "interface_v1": 1, "endpoint": endpoint, **extra,
        },
    )
    b = StorageBackendFactory.create_backend("dynamic", config, pool)
    b.register_mem_pool_host(pool)
    return b


def pages(first: int, n: int = PAGES) -> torch.Tensor:
    """The host indices of pages ``first..first+n`` (a page's tokens, in a row)."""
    return torch.arange(first * PAGE, (first + n) * PAGE, dtype=torch.int64)


def page_bytes(pool: MHATokenToKVPoolHost, page: int) -> bytes:
    """Every byte of one page in the host pool (its K and V parts)."""
    ptrs, sizes = pool.get_page_buffer_meta(pages(page, 1))
    import ctypes

    return b"".join(ctypes.string_at(p, s) for p, s in zip(ptrs, sizes))


def fill(pool: MHATokenToKVPoolHost, first: int, n: int, value: float | None) -> None:
    """Random (or constant) bytes in pages ``first..first+n`` of the pool."""
    import ctypes

    ptrs, sizes = pool.get_page_buffer_meta(pages(first, n))
    for p, s in zip(ptrs, sizes):
        t = torch.frombuffer((ctypes.c_ubyte * s).from_address(p), dtype=torch.uint8)
        if value is None:
            t.copy_(torch.randint(0, 256, (s,), dtype=torch.uint8))
        else:
            t.fill_(int(value))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gateway(tmp_path):
    """A gateway with a disk tier and two tenants' namespaces; restartable."""
    # NAME MEMORY DISK: each tenant with a disk quota of its own.
    (tmp_path / "namespaces").write_text("tenant-a 64MiB 128MiB\ntenant-b 64MiB 128MiB\n")
    args = ("--listen", f"127.0.0.1:{free_port()}", "--memory", "256MiB", "--max-object-size", "4MiB",
            "--disk", str(tmp_path / "disk"), "--disk-size", "512MiB",
            "--namespaces", str(tmp_path / "namespaces"))
    proc, url = start_gateway(*args)
    state = {"proc": proc}

    def restart() -> None:
        stop_gateway(state["proc"])
        state["proc"], _ = start_gateway(*args)

    yield url, restart
    stop_gateway(state["proc"])


def test_pages_go_out_of_the_host_pool_and_come_back_byte_exact(gateway):
    url, restart = gateway
    pool = host_pool()
    b = backend(pool, url, namespace="tenant-a")
    keys = [f"{i:064x}" for i in range(PAGES)]  # chained page hashes
    fill(pool, 0, PAGES, None)
    sent = [page_bytes(pool, i) for i in range(PAGES)]
    assert b.batch_exists(keys) == 0
    assert b.batch_set_v1(keys, pages(0)) == [True] * PAGES
    assert b.batch_exists(keys + ["f" * 64]) == PAGES
    assert b.client.stats()["fabric_writes"] == 2 * PAGES, "K and V of each page, one-sided"
    # A page stored again is not written again (its hash names its content).
    assert b.batch_set_v1(keys[:4], pages(0, 4)) == [True] * 4
    assert b.client.stats()["fabric_writes"] == 2 * PAGES

    fill(pool, PAGES, PAGES, 0)
    before = b.client.stats()
    assert b.batch_get_v1(keys, pages(PAGES)) == [True] * PAGES
    assert [page_bytes(pool, PAGES + i) for i in range(PAGES)] == sent
    st = b.client.stats()
    assert st["fabric_reads"] == 2 * PAGES, st
    assert st["fabric_batches"] - before["fabric_batches"] == 1, "one go"
    assert st["bytes_copied"] == before["bytes_copied"], "landed in the pool, no copy"
    m = b.get_stats()
    assert m.prefetch_pgs == [PAGES] and m.backup_pgs == [PAGES, 4], m
    assert m.rasa["fabric_batches"] >= 1

    # Another tenant sees none of it; a miss is a clean False.
    other = backend(pool, url, namespace="tenant-b")
    assert other.batch_exists(keys) == 0
    assert other.batch_get_v1(keys[:2], pages(0, 2)) == [False, False]
    other.close()
    b.close()

    restart()  # SIGTERM: memory written down to the disk tier, read back at start
    fill(pool, PAGES, PAGES, 0)
    again = backend(pool, url, namespace="tenant-a")
    assert again.batch_exists(keys) == PAGES
    assert again.batch_get_v1(keys, pages(PAGES)) == [True] * PAGES
    assert [page_bytes(pool, PAGES + i) for i in range(PAGES)] == sent
    again.clear()
    assert again.batch_exists(keys) == 0
    again.close()
