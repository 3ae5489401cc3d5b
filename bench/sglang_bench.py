"""SGLang HiCache's L3 through Rasa (issue 64): ``RasaHiCache`` made by SGLang's own backend
factory over SGLang's host KV pool (``MHATokenToKVPoolHost``, ``page_first``), pages of a
Llama-3-8B-like geometry (32 layers, 8 KV heads of 128, bf16, 64 tokens a page: 4 MiB of
K and 4 MiB of V a page), batches of 32 pages backed up (``batch_set_v1``) and prefetched
(``batch_get_v1``), every prefetch checked byte-exact. The ceiling is ``process_vm_readv``
from another process (what shm's reader does). Prints Markdown rows.

    python bench/sglang_bench.py GATEWAY_URL [ROUNDS]
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "engines"))
sys.path.insert(0, os.path.dirname(__file__))
from ceiling import ceiling  # noqa: E402  bench/ceiling.py
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

PAGE, PAGES, LAYERS, HEADS, DIM = 64, 32, 32, 8, 128


def pool() -> MHATokenToKVPoolHost:
    device = MHATokenToKVPool(
        4 * PAGES * PAGE, PAGE, torch.bfloat16, HEADS, DIM, LAYERS, "cpu", False,
        start_layer=0, end_layer=LAYERS - 1, enable_alt_stream=False,
    )
    return MHATokenToKVPoolHost(
        device.get_device_pool_infos()[0].buffer_info, 1, 0, PAGE, "page_first",
        pin_memory=False, device_capacity_tokens=device.size, start_layer=device.start_layer,
        end_layer=device.end_layer, write_back_staging=device.hicache_write_back_staging,
    )


def main() -> None:
    url = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    p = pool()
    config = HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="bench", extra_config={
            "backend_name": "rasa", "module_path": "rasa_client.sglang",
            "class_name": "RasaHiCache", "interface_v1": 1, "endpoint": url,
        },
    )
    b = StorageBackendFactory.create_backend("dynamic", config, p)
    b.register_mem_pool_host(p)
    out = torch.arange(0, PAGES * PAGE, dtype=torch.int64)
    back = torch.arange(PAGES * PAGE, 2 * PAGES * PAGE, dtype=torch.int64)
    ptrs, sizes = p.get_page_buffer_meta(out)
    batch = sum(sizes)
    stores, loads = [], []
    for r in range(rounds + 1):
        keys = [f"{os.getpid():x}-{r}-{i:060x}" for i in range(PAGES)]
        for ptr, size in zip(ptrs, sizes):
            t = torch.frombuffer((ctypes.c_ubyte * size).from_address(ptr), dtype=torch.uint8)
            t.copy_(torch.randint(0, 256, (size,), dtype=torch.uint8))
        t0 = time.perf_counter()
        assert all(b.batch_set_v1(keys, out))
        t1 = time.perf_counter()
        assert all(b.batch_get_v1(keys, back))
        t2 = time.perf_counter()
        bptrs, bsizes = p.get_page_buffer_meta(back)
        for (a, n), (c, m) in zip(zip(ptrs, sizes), zip(bptrs, bsizes)):
            assert n == m and ctypes.string_at(a, n) == ctypes.string_at(c, m), "a page came back other"
        if r:  # the first round warms the arenas and the registrations
            stores.append(batch / (t1 - t0) / 1e9)
            loads.append(batch / (t2 - t1) / 1e9)
    cap = ceiling(32 << 20, 100)
    st = b.client.stats()
    print(f"SGLang {__import__('importlib.metadata').metadata.version('sglang')}'s host pool, "
          f"{PAGES}-page batches of {batch >> 20} MiB (pages of {PAGE} tokens, K and V "
          f"{sizes[0] >> 20} MiB each), medians of {rounds} rounds, every prefetch checked; "
          f"one-sided writes {st['fabric_writes']}, reads {st['fabric_reads']} "
          f"({st['fabric_provider']}), bytes copied {st['bytes_copied']}:")
    print()
    print("| backup (`batch_set_v1`) | prefetch (`batch_get_v1`) | `process_vm_readv` ceiling | prefetch ÷ ceiling |")
    print("| --- | --- | --- | --- |")
    load = statistics.median(loads)
    print(f"| {statistics.median(stores):.2f} GB/s | {load:.2f} GB/s | {cap:.2f} GB/s | {load / cap:.2f} |")
    b.close()


if __name__ == "__main__":
    main()
