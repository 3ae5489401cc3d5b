"""Rasa as a vLLM KV-offloading tier: a ``SecondaryTierManager`` behind vLLM's CPU tier.

vLLM (0.33, ``vllm.v1.kv_offload.tiering``; the API is marked experimental: this module
follows 0.33) offloads KV-cache chunks from the GPU to a pool of CPU memory and cascades
them from there to secondary tiers; loading a chunk back promotes it into that pool.
Point it at Rasa with a secondary tier in the offloading config::

    "secondary_tiers": [{"type": "RasaTier", "module_path": "rasa_client.vllm",
                         "endpoint": "http://rasa:8080", "namespace": "tenant-a"}]

or, with the wheel installed (it registers the type through vLLM's
``vllm.general_plugins`` entry point), ``{"type": "rasa", "endpoint": …}``.

The CPU pool is registered with the client once, when the tier is made: a load lands
each chunk in its row of the pool one-sided with no copy (over HTTP where the fast path is
not available). A store is one ``exists_many`` (chunks already stored are skipped: a
chunk is named by its tokens' hash) and one ``put_many``; the scheduler's lookups of a
step go out as one ``exists_many``, answered from the gateway's index. All of it runs on
the tier's own threads; the scheduler thread only queues work and collects results.

Config: ``endpoint`` (a gateway, or members of a cluster separated by commas),
``namespace`` (the tenant: its quota evicts its own chunks only), ``token``, ``ca_file``,
``timeout`` (seconds, a whole call), ``fast_path`` (``"auto"``, ``"off"``,
``"required"``), ``prefix`` (the first part of every key, ``vllm`` unless set), ``workers``
(jobs in flight at once) and ``locality`` (``"LOCAL"`` or ``"REMOTE"``, for vLLM's events).
Keys name the model, its KV layout and the chunk's hash (vLLM's own ``FileMapper``
layout), so engines of one model share chunks and other models never see them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, ClassVar

from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)
from vllm.v1.kv_offload.file_mapper import FileMapper
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

from . import Client

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec
    from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector

logger = logging.getLogger(__name__)

#: A job's outcome: success, the keys loaded when only some were, bytes moved.
Outcome = tuple[bool, "list[OffloadKey] | None", int]

#: The tier type the ``vllm.general_plugins`` entry point registers.
TIER_TYPE = "rasa"


def register() -> None:
    """vLLM's plugin hook: makes ``{"type": "rasa"}`` name :class:`RasaTier` (idempotent:
    vLLM may load plugins more than once)."""
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    if TIER_TYPE not in SecondaryTierFactory._registry:
        SecondaryTierFactory.register_tier(TIER_TYPE, __name__, "RasaTier")


class _Lookups(AsyncLookupManager):
    """A step's lookups as one ``exists_many`` (the gateway's index; no value read)."""

    def __init__(self, tier: RasaTier) -> None:
        super().__init__(tier_type=tier.tier_type)
        self._tier = tier

    def batch_lookup(self, keys: list[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        return self._tier._client.exists_many([self._tier._name(k) for k in keys])


class RasaTier(SecondaryTierManager):
    """A vLLM secondary tier storing KV chunks in a Rasa gateway."""

    medium: ClassVar[Medium] = Medium.CPU

    def __init__(
        self,
        offloading_spec: OffloadingSpec,
        primary_kv_view: memoryview,
        tier_type: str,
        backpressure_detector: BackpressureDetector | None = None,
        endpoint: str = "http://127.0.0.1:8080",
        namespace: str | None = None,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        fast_path: str = "auto",
        prefix: str = "vllm",
        workers: int = 2,
        locality: str | None = None,
    ) -> None:
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.locality = Locality(locality) if locality is not None else None
        self._client = Client(
            endpoint,
            namespace=namespace,
            token=token,
            ca_file=ca_file,
            timeout=timeout,
            fast_path=fast_path,
            lease_puts=False,  # chunks are read later, with descriptors asked for then
        )
        # The whole pool as bytes, registered once: loads land in its rows.
        self._rows = primary_kv_view.cast("B")
        self._pool = self._client.register(self._rows)
        self._mapper = FileMapper.from_offloading_spec(
            prefix,
            offloading_spec,
            blocks_per_file=offloading_spec.blocks_per_chunk,
            parallel_agnostic=True,
        )
        self._lookup_manager = _Lookups(self)
        self._jobs = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rasa-vllm")
        self._lock = threading.Lock()
        self._finished: list[JobResult] = []
        self._missing: list[OffloadKey] = []
        self._in_flight: set[Future[None]] = set()

    # --- lookups (the scheduler thread; answers arrive from the lookup thread)

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        found = self._lookup_manager.lookup(key, req_context)
        if found is None:
            return LookupResult.RETRY
        return LookupResult.HIT if found else LookupResult.MISS

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self._lookup_manager.flush()

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._lookup_manager.cleanup(req_context.req_id)

    # --- transfers (queued here, run on the tier's threads)

    def submit_store(self, job_metadata: TransferJob) -> None:
        keys, rows = list(job_metadata.keys), [int(c) for c in job_metadata.chunk_ids]
        self._submit(job_metadata.job_id, lambda: self._store(keys, rows))

    def submit_load(self, job_metadata: TransferJob) -> None:
        keys, rows = list(job_metadata.keys), [int(c) for c in job_metadata.chunk_ids]
        self._submit(job_metadata.job_id, lambda: self._load(keys, rows))

    def get_finished_jobs(self) -> Iterable[JobResult]:
        with self._lock:
            done, self._finished = self._finished, []
            missing, self._missing = self._missing, []
        # Chunks a load did not find are misses from now on (on the scheduler's thread,
        # which owns the lookups' state): the scheduler must not ask for them again.
        self._lookup_manager.mark_miss(missing)
        return done

    def has_pending_work(self) -> bool:
        with self._lock:
            return bool(self._in_flight)

    def drain_jobs(self) -> None:
        """Waits for every submitted job (each bounded by the client's timeout)."""
        with self._lock:
            pending = set(self._in_flight)
        wait(pending)

    def shutdown(self) -> None:
        self.drain_jobs()
        self._lookup_manager.shutdown()
        self._jobs.shutdown(wait=True)
        self._client.close()

    # --- the work

    def _name(self, key: OffloadKey) -> str:
        return self._mapper.get_file_name(key)

    def _row(self, chunk: int) -> memoryview:
        size = self.block_size_bytes
        return self._rows[chunk * size : (chunk + 1) * size]

    def _store(self, keys: list[OffloadKey], rows: list[int]) -> Outcome:
        names = [self._name(k) for k in keys]
        there = self._client.exists_many(names)
        todo = [(n, self._row(r)) for n, r, t in zip(names, rows, there, strict=True) if not t]
        if todo:
            self._client.put_many(todo)
        return True, None, len(todo) * self.block_size_bytes

    def _load(self, keys: list[OffloadKey], rows: list[int]) -> Outcome:
        size = self.block_size_bytes
        names = [self._name(k) for k in keys]
        got = self._client.get_many_into(
            names, self._pool, offsets=[r * size for r in rows], lengths=[size] * len(rows)
        )
        whole = [n == size for n in got]
        if all(whole):
            return True, None, len(keys) * size
        for name, n in zip(names, got, strict=True):
            if n != size:
                why = "not stored" if n is None else n if isinstance(n, BaseException) else f"{n} bytes"
                logger.warning("rasa: chunk %s not loaded: %s", name, why)
        loaded = [k for k, ok in zip(keys, whole, strict=True) if ok]
        with self._lock:
            self._missing.extend(k for k, ok in zip(keys, whole, strict=True) if not ok)
        return False, loaded, len(loaded) * size

    def _submit(self, job_id: int, work: Callable[[], Outcome]) -> None:
        started = time.monotonic()

        def run() -> None:
            try:
                success, loaded, moved = work()
            except Exception as e:  # the job fails, the tier goes on
                logger.warning("rasa: job %d failed: %s", job_id, e)
                success, loaded, moved = False, None, None
            result = JobResult(
                job_id=job_id,
                success=success,
                successful_keys=loaded,
                transfer_time=time.monotonic() - started,
                transfer_bytes=moved,
            )
            with self._lock:
                self._finished.append(result)
                self._in_flight.discard(fut)

        # `run` takes the lock too: it cannot finish before its future is recorded.
        with self._lock:
            fut = self._jobs.submit(run)
            self._in_flight.add(fut)
