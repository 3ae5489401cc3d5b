"""Rasa as SGLang HiCache's L3 storage: a ``dynamic`` backend with ``interface_v1``.

SGLang keeps KV pages in a host pool (L2) and backs them up to, and prefetches them from,
an L3 storage backend. Point it at Rasa with::

    python -m sglang.launch_server --model-path … --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "rasa",
        "module_path": "rasa_client.sglang", "class_name": "RasaHiCache",
        "interface_v1": 1, "endpoint": "http://127.0.0.1:8080", "namespace": "tenant-a"}'

Each page is one value per part, as SGLang's other object stores name them: MHA pages
``{page hash}_{tp rank}_{pp rank}_k`` and ``…_v`` (each rank holds its own heads), MLA
pages ``{page hash}_{pp rank}_k`` (one copy for every rank). A ``batch_set_v1`` is one
existence check (pages are named by their content's chained hash: a page already stored
is not written again) and one ``put_many`` of the missing pages straight from the host
pool (one-sided over the fast path: the bytes go from the pool into the gateway's memory);
a ``batch_get_v1`` is one ``get_many_into`` that lands every page in the host pool with no
copy (the pool's memory is registered with the client once, the first time a page lands
in it); ``batch_exists`` is one request however many pages.

``extra_config`` (besides SGLang's ``backend_name``, ``module_path``, ``class_name``,
``interface_v1``): ``endpoint`` (a gateway, or members of a cluster separated by commas;
default: ``RASA_ENDPOINT`` and the other variables ``Client.from_env`` reads), ``namespace`` (the tenant: its quota evicts its own pages only;
tenancy is chosen here, by the operator, never by anything in a key), ``token``,
``ca_file``, ``timeout`` (seconds, a whole call), ``fast_path`` (``"auto"``, ``"off"``,
``"required"``), ``fabric_provider``, ``prefix`` (put before every key: deployments sharing
a namespace). ``get_stats()`` answers SGLang's storage metrics (pages and GB/s of each
prefetch and backup, when ``--enable-metrics``) with the client's counters as ``.rasa``.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import Client, _env_settings
from ._arena import Arenas

try:  # SGLang is the caller: its base class when it is installed.
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except ImportError:  # pragma: no cover - documentation builds, type checks
    _Base = object  # type: ignore[assignment,misc]


class RasaHiCache(_Base):  # type: ignore[misc,valid-type]
    """SGLang HiCache L3 storage in a Rasa gateway (see the module's documentation)."""

    def __init__(self, storage_config: Any, kwargs: dict[str, Any] | None = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        # The environment's settings (as ``Client.from_env``), then extra_config's.
        options: dict[str, Any] = {**_env_settings(), "lease_puts": False}
        for name in ("endpoint", "namespace", "token", "ca_file", "fast_path", "fabric_provider"):
            if extra.get(name) is not None:
                options[name] = extra[name]
        if extra.get("timeout") is not None:
            options["timeout"] = float(extra["timeout"])
        self.client = Client(**options)
        self.storage_config = storage_config
        self.prefix = str(extra.get("prefix", ""))
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        pp = getattr(storage_config, "pp_rank", 0)
        tp = getattr(storage_config, "tp_rank", 0)
        self.suffix = f"{pp}" if self.is_mla else f"{tp}_{pp}"
        self.metrics = bool(getattr(storage_config, "enable_storage_metrics", False))
        self.mem_pool_host: Any = None
        self._arenas = Arenas(self.client)
        self._lock = threading.Lock()
        self._prefetch: list[tuple[int, float]] = []  # (pages, GB/s)
        self._backup: list[tuple[int, float]] = []

    # -- names ---------------------------------------------------------------------------

    def _parts(self, entries: int) -> list[str]:
        """What each of a page's ``entries`` buffers is called."""
        if not self.is_mla and entries == 2:
            return ["k", "v"]
        return ["k"] + [f"k{j}" for j in range(1, entries)]

    def _names(self, keys: Sequence[str], entries: int) -> list[str]:
        parts = self._parts(entries)
        return [f"{self.prefix}{k}_{self.suffix}_{p}" for k in keys for p in parts]

    # -- the host pool ---------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    def _views(self, keys: Sequence[str], host_indices: Any) -> tuple[list[str], list[memoryview]]:
        """Each page part's value name and the host-pool memory it lives in."""
        if self.mem_pool_host is None:
            raise RuntimeError("RasaHiCache: register_mem_pool_host was not called")
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if not keys or len(ptrs) % len(keys):
            raise RuntimeError(
                f"RasaHiCache: {len(ptrs)} page buffers for {len(keys)} keys"
            )
        views = [_view(p, s) for p, s in zip(ptrs, sizes, strict=True)]
        return self._names(keys, len(ptrs) // len(keys)), views

    # -- interface_v1: zero copy -----------------------------------------------------------

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        if not keys:
            return []
        names, views = self._views(keys, host_indices)
        per = len(names) // len(keys)
        started = time.perf_counter()
        stored = self._store(names, views)
        self._record(self._backup, keys, views, started)
        return [all(stored[i * per : (i + 1) * per]) for i in range(len(keys))]

    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        if not keys:
            return []
        names, views = self._views(keys, host_indices)
        per = len(names) // len(keys)
        started = time.perf_counter()
        got = self._load(names, views)
        self._record(self._prefetch, keys, views, started)
        return [all(got[i * per : (i + 1) * per]) for i in range(len(keys))]

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        """How many of ``keys`` are stored in a row from the first: one request."""
        if not keys:
            return 0
        parts = 1 if self.is_mla else 2
        found = self.client.exists_many(self._names(keys, parts))
        for i in range(len(keys)):
            if not all(found[i * parts : (i + 1) * parts]):
                return i
        return len(keys)

    # -- the older interface: a key is a value, a location a pointer -------------------------

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value], [target_location], [target_sizes])

    def batch_set(
        self,
        keys: list[str],
        values: Any = None,
        target_locations: Any = None,
        target_sizes: Any = None,
    ) -> bool:
        if not keys:
            return False
        views = _located(keys, values, target_locations, target_sizes)
        return all(self._store([self.prefix + k for k in keys], views))

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        if target_location is None:
            obj = self.client.get_many([self.prefix + key])[0]
            return None if obj is None or isinstance(obj, Exception) else obj.bytes
        return self.batch_get([key], [target_location], [target_sizes]) == 1

    def batch_get(self, keys: list[str], target_locations: Any = None, target_sizes: Any = None) -> int:
        """How many of ``keys`` landed at their locations in a row from the first."""
        if not keys:
            return 0
        views = _located(keys, None, target_locations, target_sizes)
        got = self._load([self.prefix + k for k in keys], views)
        return got.index(False) if False in got else len(got)

    def exists(self, key: str) -> bool:
        return self.client.exists_many([self.prefix + key])[0]

    # -- the rest --------------------------------------------------------------------------

    def clear(self) -> None:
        """Deletes every value this backend's prefix names in its namespace."""
        batch: list[str] = []
        for summary in self.client.iter_keys(self.prefix):
            batch.append(summary.key)
            if len(batch) == 1000:
                self.client.delete_many(batch)
                batch = []
        if batch:
            self.client.delete_many(batch)

    def get_stats(self) -> Any:
        with self._lock:
            prefetch, self._prefetch = self._prefetch, []
            backup, self._backup = self._backup, []
        try:
            from sglang.srt.observability.metrics_collector import StorageMetrics
        except ImportError:  # pragma: no cover - SGLang is the caller
            return None
        m = StorageMetrics()
        m.prefetch_pgs.extend(p for p, _ in prefetch)
        m.prefetch_bandwidth.extend(b for _, b in prefetch)
        m.backup_pgs.extend(p for p, _ in backup)
        m.backup_bandwidth.extend(b for _, b in backup)
        m.rasa = self.client.stats()  # type: ignore[attr-defined]
        return m

    def close(self) -> None:
        self.client.close()

    # -- moving bytes ----------------------------------------------------------------------

    def _store(self, names: list[str], views: list[memoryview]) -> list[bool]:
        """Writes the values not stored yet (one existence check, one ``put_many``); whether
        each is stored now."""
        found = self.client.exists_many(names)
        todo = [i for i, f in enumerate(found) if not f]
        if todo:
            results = self.client._put_many([(names[i], views[i]) for i in todo])
            for i, r in zip(todo, results, strict=True):
                found[i] = not isinstance(r, Exception)
        return found

    def _load(self, names: list[str], views: list[memoryview]) -> list[bool]:
        """Lands each value in its view: in place when they all lie in memory that can be
        registered, else with one copy; whether each landed whole."""
        with self._arenas.placed(views) as spot:
            if spot is None:
                got = self.client.get_many_into(names, views)
            else:
                arena, offsets, lengths = spot
                got = self.client.get_many_into(names, arena, offsets=offsets, lengths=lengths)
        return [isinstance(n, int) and n == v.nbytes for n, v in zip(got, views, strict=True)]

    def _record(self, into: list[tuple[int, float]], keys: Sequence[str], views: list[memoryview], started: float) -> None:
        if not self.metrics:
            return
        took = max(time.perf_counter() - started, 1e-9)
        gb = sum(v.nbytes for v in views) / 1e9
        with self._lock:
            into.append((len(keys), gb / took))


def _view(ptr: int, size: int) -> memoryview:
    """The ``size`` bytes at ``ptr`` in this process (host-pool memory SGLang keeps alive)."""
    return memoryview((ctypes.c_ubyte * int(size)).from_address(int(ptr))).cast("B")


def _located(keys: Sequence[str], values: Any, locations: Any, sizes: Any) -> list[memoryview]:
    """The memory each key's value is read from or written to: its tensor, or its pointer
    and size."""
    views = []
    for i in range(len(keys)):
        value = None if values is None else values[i]
        if value is None and locations is not None and hasattr(locations[i], "data_ptr"):
            value = locations[i]  # a tensor to read into, as some of SGLang's callers pass
        if value is not None:
            t = value.contiguous().view(-1)
            views.append(_view(t.data_ptr(), t.numel() * t.element_size()))
        elif locations is None or locations[i] is None or sizes is None or sizes[i] is None:
            raise ValueError(f"RasaHiCache: no value and no location for {keys[i]!r}")
        else:
            views.append(_view(locations[i], sizes[i]))
    return views
