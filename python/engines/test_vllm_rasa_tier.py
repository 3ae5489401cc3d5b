"""vLLM's secondary-tier tests, adapted to ``RasaTier`` against a real gateway.

The helpers (offloading spec, keys, jobs, drain, the lookup cycle, page-aligned pools) are
vLLM 0.33's own, from ``tests/v1/kv_offload/tiering/test_fs_tier.py`` in its sdist (copied
next to this file as ``vllm_fs_tier.py`` by ``scripts/engines.sh``); the tests are those of
that file that are about a tier's contract rather than about files — store and lookup,
the round trip, data integrity for batches of every size, a missing chunk, partial
failures, jobs tracked independently — and an end-to-end run of vLLM's own
``TieringOffloadingManager`` storing to Rasa, forgetting its CPU copy and promoting the
chunks back byte-exact.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

import numpy as np
import pytest
import torch
import vllm_fs_tier as fs
from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

from conftest import start_gateway, stop_gateway
from rasa_client.vllm import RasaTier


def make_tier(tensor: torch.Tensor, **cfg) -> RasaTier:
    """A ``RasaTier`` over the pool ``tensor``, built the way vLLM builds it (the factory,
    ``module_path``), under a key prefix of its own."""
    config = {
        "type": "RasaTier",
        "module_path": "rasa_client.vllm",
        "endpoint": os.environ["RASA_ENDPOINT"],
        "prefix": f"vllm-{uuid.uuid4().hex}",
        "timeout": 10,
        **cfg,
    }
    view = memoryview(tensor.numpy())
    return SecondaryTierFactory.create_secondary_tier(config, view, fs._MOCK_OFFLOADING_SPEC)


@pytest.fixture
def rasa_tier():
    tensor = fs._page_aligned_zero_tensor(fs._NUM_BLOCKS, fs._BLOCK_ELEMENTS)
    tier = make_tier(tensor)
    yield tier, tensor
    tier.shutdown()


def test_lookup_empty_tier(rasa_tier):
    tier, _ = rasa_tier
    assert fs.lookup_and_wait(tier, [fs.key(1), fs.key(2)]) == [LookupResult.MISS] * 2


def test_store_then_lookup_and_load_roundtrip(rasa_tier):
    tier, _ = rasa_tier
    tier.submit_store(fs.make_job(1, [fs.key(1), fs.key(2)], [0, 1]))
    assert all(r.success for r in fs.drain(tier))
    assert fs.lookup_and_wait(tier, [fs.key(1), fs.key(2)]) == [LookupResult.HIT] * 2
    tier.submit_load(fs.make_job(2, [fs.key(1), fs.key(2)], [2, 3], is_promotion=True))
    assert all(r.success for r in fs.drain(tier))
    # Stored chunks stay stored after a load.
    assert fs.lookup_and_wait(tier, [fs.key(1), fs.key(2)], ctx=ReqContext(req_id="again")) == [
        LookupResult.HIT
    ] * 2


@pytest.mark.parametrize("batch_size", [0, 1, 3, fs._NUM_BLOCKS // 2])
@pytest.mark.parametrize("fast_path", ["required", "off"])
def test_store_load_data_integrity(batch_size, fast_path):
    """vLLM's data-integrity test: what a store took from the pool, a load puts back
    exactly, into other rows — one-sided into the registered pool, and over HTTP."""
    tensor = fs._page_aligned_zero_tensor(fs._NUM_BLOCKS, fs._BLOCK_ELEMENTS)
    tier = make_tier(tensor, fast_path=fast_path)
    try:
        tensor[:] = fs._page_aligned_rand_tensor(fs._NUM_BLOCKS, fs._BLOCK_ELEMENTS)
        keys = [fs.key(i) for i in range(batch_size)]
        load_ids = list(range(fs._NUM_BLOCKS - batch_size, fs._NUM_BLOCKS))
        expected = tensor[:batch_size].clone()
        tier.submit_store(fs.make_job(1, keys, list(range(batch_size))))
        results = fs.drain(tier)
        assert len(results) == 1 and results[0].success
        # Stored one-sided (issue 63) when the fast path is on and the batch is worth a
        # region (64 KiB or more), else as an HTTP batch.
        one_sided = fast_path == "required" and batch_size * tier.block_size_bytes >= 64 << 10
        written = tier._client.stats()
        assert written["fabric_writes"] == (batch_size if one_sided else 0), written
        assert written["http_writes"] == (0 if one_sided else batch_size), written
        tensor[:] = 0.0  # what a load puts back comes from Rasa
        copied = tier._client.stats()["bytes_copied"]
        tier.submit_load(fs.make_job(2, keys, load_ids, is_promotion=True))
        results = fs.drain(tier)
        assert len(results) == 1 and results[0].success
        # One-sided, the chunks land in the registered pool itself: no byte copied.
        moved = tier._client.stats()["bytes_copied"] - copied
        assert moved == (0 if fast_path == "required" else batch_size * tier.block_size_bytes)
        for i, cid in enumerate(load_ids):
            assert torch.equal(tensor[cid], expected[i]), f"chunk {cid} after store+load"
        untouched = fs._NUM_BLOCKS - batch_size
        assert not tensor[:untouched].any(), "rows no load named are not written"
    finally:
        tier.shutdown()


def test_failed_load_missing_chunk_is_a_miss_after(rasa_tier):
    tier, _ = rasa_tier
    tier.submit_load(fs.make_job(1, [fs.key(99)], [0], is_promotion=True))
    results = fs.drain(tier)
    assert len(results) == 1 and not results[0].success
    assert results[0].successful_keys == []


def test_multi_block_job_partial_failure(rasa_tier):
    tier, tensor = rasa_tier
    tensor[0] = 7.0
    tier.submit_store(fs.make_job(1, [fs.key(1)], [0]))
    assert all(r.success for r in fs.drain(tier))
    tier.submit_load(fs.make_job(2, [fs.key(1), fs.key(2)], [4, 5], is_promotion=True))
    results = fs.drain(tier)
    assert len(results) == 1 and not results[0].success
    assert list(results[0].successful_keys) == [fs.key(1)]
    assert torch.equal(tensor[4], tensor[0])


def test_multiple_jobs_tracked_independently(rasa_tier):
    tier, _ = rasa_tier
    for j in range(1, 4):
        tier.submit_store(fs.make_job(j, [fs.key(j)], [j]))
    results = fs.drain(tier)
    assert sorted(r.job_id for r in results) == [1, 2, 3]
    assert all(r.success for r in results)


def test_a_stored_chunk_is_not_sent_again(rasa_tier):
    """Chunks are named by their tokens' hash: a chunk Rasa holds is skipped."""
    tier, _ = rasa_tier
    tier.submit_store(fs.make_job(1, [fs.key(1), fs.key(2)], [0, 1]))
    first = fs.drain(tier)
    tier.submit_store(fs.make_job(2, [fs.key(1), fs.key(2), fs.key(3)], [0, 1, 2]))
    second = fs.drain(tier)
    assert first[0].transfer_bytes == 2 * tier.block_size_bytes
    assert second[0].transfer_bytes == tier.block_size_bytes


def test_the_plugin_entry_point_registers_the_rasa_type():
    from importlib.metadata import entry_points

    from vllm.plugins import load_general_plugins

    names = [e.value for e in entry_points(group="vllm.general_plugins")]
    assert "rasa_client.vllm:register" in names
    load_general_plugins()
    load_general_plugins()  # vLLM may load plugins more than once
    assert SecondaryTierFactory.get_tier_class({"type": "rasa"}) is RasaTier


@pytest.mark.parametrize("restart", [False, True])
def test_vllms_tiering_manager_promotes_chunks_back_from_rasa_byte_exact(restart, tmp_path):
    """vLLM's own TieringOffloadingManager over a CPU primary tier and RasaTier: stores
    cascade to Rasa; after the CPU copies are dropped (reset), a lookup finds the chunks
    in Rasa, promotes them, and the pool holds the very bytes stored — also when the
    gateway restarts in between (SIGTERM, its disk tier brings the chunks back)."""
    from unittest.mock import MagicMock

    from vllm.v1.kv_offload.tiering.manager import (
        CPUPrimaryTierOffloadingManager,
        TieringOffloadingManager,
    )

    chunks, row = 6, 256 << 10
    pool = torch.zeros((chunks, row), dtype=torch.uint8)
    region = MagicMock()
    region.create_kv_memoryview.return_value = memoryview(pool.numpy())
    primary = CPUPrimaryTierOffloadingManager(num_chunks=chunks, mmap_region=region)
    gateway = None
    if restart:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            listen = f"127.0.0.1:{sock.getsockname()[1]}"
        args = ("--listen", listen, "--memory", "64MiB", "--max-object-size", "4MiB",
                "--disk", str(tmp_path / "disk"), "--disk-size", "256MiB")
        gateway, url = start_gateway(*args)
        tier = make_tier(pool, endpoint=url)
    else:
        tier = make_tier(pool)
    manager = TieringOffloadingManager(primary_tier=primary, secondary_tiers=[tier])
    ctx = ReqContext(req_id="r1")

    def step() -> None:
        manager.on_schedule_end(ScheduleEndContext(new_req_ids=[], preempted_req_ids=()))
        list(manager.take_events())

    try:
        keys = [fs.key(100 + i) for i in range(3)]
        manager.on_new_request(ctx)
        stored = manager.prepare_store(keys, ctx)
        assert stored is not None
        assert list(stored.keys_to_store) == keys
        slots = [int(c) for c in stored.store_spec.chunk_ids]  # where the GPU would write
        rng = np.random.default_rng(7)
        want = {k: rng.integers(0, 256, row, dtype=np.uint8) for k in keys}
        for k, slot in zip(keys, slots, strict=True):
            pool[slot] = torch.from_numpy(want[k])
        manager.complete_store(keys, ctx, success=True)  # cascades to Rasa
        tier.drain_jobs()
        step()
        manager.on_request_finished(ctx)
        if gateway is not None:  # the gateway restarts: memory gone, the disk tier kept
            stop_gateway(gateway)
            gateway, _ = start_gateway(*args)
        manager.reset_cache()  # the CPU copies are gone
        manager.on_reset_flushed()
        pool.zero_()

        later = ReqContext(req_id="r2")
        manager.on_new_request(later)
        seen = [manager.lookup(k, later) for k in keys]
        deadline = time.monotonic() + 10
        # Step by step: the lookups resolve (on the tier's lookup thread), the promotions
        # are submitted, run and are collected.
        while any(s is not LookupResult.HIT for s in seen):
            assert time.monotonic() < deadline, f"chunks not promoted within 10 s: {seen}"
            step()
            tier.drain_jobs()
            time.sleep(0.005)
            seen = [manager.lookup(k, later) for k in keys]
        rows = {bytes(pool[i].numpy()) for i in range(chunks)}
        for k in keys:
            assert want[k].tobytes() in rows, "a promoted chunk holds the bytes stored"
    finally:
        tier.shutdown()
        if gateway is not None:
            stop_gateway(gateway)
