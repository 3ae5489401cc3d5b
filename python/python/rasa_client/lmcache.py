"""Rasa as LMCache's L2 storage: a ``native_plugin`` connector.

LMCache (multi-process mode) keeps KV-cache chunks in a CPU L1 arena and hands batches of
them to its L2 adapters. Point it at Rasa with::

    {"type": "native_plugin",
     "module_path": "rasa_client.lmcache", "class_name": "RasaConnector",
     "adapter_params": {"endpoint": "http://rasa:8080", "namespace": "tenant-a"}}

Each batch goes to the gateway as Rasa batches: a store is one ``put_many`` (one request
per 1000 chunks or 64 MiB), a load one ``get_many_into`` (one descriptor request, then the
one-sided reads in flight together; HTTP where the fast path is not available), an
existence check one ``exists_many`` (the gateway's index, memory and disk tier: no value is
read). Loads land in LMCache's buffers with no copy: the L1 arena they point into is
registered with the client once, the first time a chunk is loaded into it
(``rasa_client._arena``), not per buffer. The work runs on the connector's own threads
with the GIL released while bytes move; each batch's completion is signalled on the eventfd
LMCache polls.

``adapter_params``: ``endpoint`` (a gateway, or members of a cluster separated by commas),
``namespace`` (the tenant: its quota evicts its own chunks only), ``token``, ``ca_file``,
``timeout`` (seconds, a whole call), ``fast_path`` (``"auto"``, ``"off"``, ``"required"``),
``fabric_provider`` (``"shm"``, ``"tcp;ofi_rxm"``, ``"efa"``: which of the gateway's fast
paths to read through; default: shm on the same host), ``prefix`` (put before every key: deployments sharing a namespace), ``workers`` (batches
in flight at once), ``register_arena`` (``True``; ``False`` reads into each buffer with
one copy, never registering LMCache's memory).

Tenancy: one tenant per namespace is one connector per tenant, each with its own
``namespace`` (and a token allowed only there). Within one connector, ``namespace_by``
with ``namespace_map`` sends some chunks elsewhere: ``"cache_salt"`` (the request's
``cache_salt``, which LMCache appends to salted keys) or ``"model"`` (the model's name),
looked up in ``namespace_map`` (``{"salt-or-model": "namespace"}``). Only the operator's
map names a namespace: a salt is a per-request secret that separates users' prefixes, so
an unmapped salt — whatever it says, even another namespace's name — stays part of the
chunk's key, in the connector's own ``namespace`` (LMCache's own meaning of a salt).
Each mapped namespace must exist on the gateway (``--namespaces``), with its own quota:
one tenant's chunks evict only its own. The token must be allowed in each.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import Client
from ._arena import Arenas

Completion = tuple[int, bool, str, "list[bool] | None"]


@dataclass
class Tenant:
    """One namespace's client, and the arenas registered with it."""

    client: Client
    arenas: Arenas | None

    def read(self, names: list[str], views: list[memoryview]) -> list[Any]:
        """``get_many_into`` the views: in place in their registered arena when they all
        lie in one, else into each view (one copy)."""
        if self.arenas is None:
            return self.client.get_many_into(names, views)
        with self.arenas.placed(views) as spot:
            if spot is None:
                return self.client.get_many_into(names, views)
            arena, offsets, lengths = spot
            return self.client.get_many_into(names, arena, offsets=offsets, lengths=lengths)


class RasaConnector:
    """An LMCache ``native_plugin`` L2 connector storing chunks in a Rasa gateway."""

    def __init__(
        self,
        endpoint: str = "http://127.0.0.1:8080",
        namespace: str | None = None,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        fast_path: str = "auto",
        fabric_provider: str | None = None,
        prefix: str = "",
        workers: int = 2,
        register_arena: bool = True,
        namespace_by: str | None = None,
        namespace_map: dict[str, str] | None = None,
        l1_memory: tuple[int, int] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if namespace_by not in (None, "cache_salt", "model"):
            raise ValueError(f"namespace_by is 'cache_salt', 'model' or None, not {namespace_by!r}")
        if namespace_by is not None and not namespace_map:
            raise ValueError(
                "namespace_by needs namespace_map ({salt-or-model: namespace}): a salt or a model"
                " name never chooses a namespace by itself; for one tenant per namespace, give"
                " each tenant a connector with its own namespace"
            )
        self._params = {
            "endpoint": endpoint,
            "token": token,
            "ca_file": ca_file,
            "timeout": timeout,
            "fast_path": fast_path,
            "fabric_provider": fabric_provider,
            # A stored chunk is read later with a descriptor asked for then: its write
            # takes no lease, so a tenant's full quota evicts its oldest chunks at once.
            "lease_puts": False,
        }
        self._register_arena = register_arena
        # LMCache's L1 arena, when a `plugin` adapter was given it: (start, end).
        self._l1 = None if l1_memory is None else (l1_memory[0], l1_memory[0] + l1_memory[1])
        self._workers = workers
        self._namespace = namespace
        self._namespace_by = namespace_by
        self._namespace_map = dict(namespace_map or {})
        self._tenants: dict[str | None, Tenant] = {}
        self._prefix = prefix
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rasa-lmcache")
        self._lock = threading.Lock()
        self._next_id = 1
        self._done: list[Completion] = []
        self._closed = False
        self.tenant(namespace)  # the default namespace's client, made now: bad params fail here

    # --- the native_plugin contract

    def event_fd(self) -> int:
        """The eventfd signalled when batches complete (LMCache polls it)."""
        return self._efd

    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[memoryview]) -> int:
        """Stores each chunk under its key (one Rasa batch); the batch's id."""
        keys, views = list(keys), list(memoryviews)
        if len(keys) != len(views):
            raise ValueError("one buffer per key")
        return self._submit(lambda: self._set(keys, views))

    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[memoryview]) -> int:
        """Reads each chunk into its buffer; the batch succeeds when every chunk was found
        and filled its buffer exactly."""
        keys, views = list(keys), list(memoryviews)
        if len(keys) != len(views):
            raise ValueError("one buffer per key")
        return self._submit(lambda: self._get(keys, views))

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        """Whether each key is stored (the gateway's index; no value is read)."""
        keys = list(keys)
        return self._submit(lambda: (True, "", self._exists(keys)))

    def submit_batch_delete(self, keys: Sequence[str]) -> int:
        """Deletes each key; the result says which were there."""
        keys = list(keys)
        return self._submit(lambda: self._delete(keys))

    def drain_completions(self) -> list[Completion]:
        """The batches completed since the last call, as ``(id, ok, error, bools)``."""
        try:
            os.eventfd_read(self._efd)
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        """Waits for the batches in flight, then releases the eventfd and the client."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        os.close(self._efd)
        for t in self._tenants.values():
            t.client.close()

    # --- tenants

    def tenant(self, namespace: str | None) -> Tenant:
        """The client (and registered arenas) of ``namespace``, made on first use."""
        with self._lock:
            t = self._tenants.get(namespace)
            if t is None:
                client = Client(namespace=namespace, **self._params)
                arenas = (
                    Arenas(client, self._l1, copies=self._workers)
                    if self._register_arena
                    else None
                )
                t = self._tenants[namespace] = Tenant(client, arenas)
            return t

    def namespace_of(self, key: str) -> str | None:
        """The namespace a chunk's key goes to: the connector's ``namespace``, or with
        ``namespace_by`` the namespace ``namespace_map`` gives the key's cache salt (salted
        keys only) or model name. A salt or model the map does not name stays in the
        connector's namespace: its name is never taken for a namespace's."""
        fields = key.split("@")
        if self._namespace_by == "model":
            by = fields[0]
        elif self._namespace_by == "cache_salt" and len(fields) > 4:
            by = fields[4]
        else:
            return self._namespace
        return self._namespace_map.get(by, self._namespace)

    def _by_tenant(self, keys: Sequence[str]) -> list[tuple[Tenant, list[int], list[str]]]:
        """The keys grouped by namespace: each tenant, the keys' places and Rasa names."""
        groups: dict[str | None, list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(self.namespace_of(k), []).append(i)
        return [
            (self.tenant(ns), idx, [self._prefix + keys[i] for i in idx])
            for ns, idx in groups.items()
        ]

    # --- the work

    def _set(self, keys: Sequence[str], views: list[memoryview]) -> tuple[bool, str, None]:
        for t, idx, names in self._by_tenant(keys):
            t.client.put_many([(n, views[i]) for n, i in zip(names, idx, strict=True)])
        return True, "", None

    def _get(self, keys: Sequence[str], views: list[memoryview]) -> tuple[bool, str, None]:
        for t, idx, names in self._by_tenant(keys):
            mine = [views[i] for i in idx]
            for name, n, view in zip(names, t.read(names, mine), mine, strict=True):
                if n is None:
                    return False, f"{name}: not stored", None
                if isinstance(n, BaseException):
                    return False, f"{name}: {n}", None
                if n != view.nbytes:
                    return False, f"{name}: {n} bytes stored, the buffer holds {view.nbytes}", None
        return True, "", None

    def _exists(self, keys: Sequence[str]) -> list[bool]:
        there = [False] * len(keys)
        for t, idx, names in self._by_tenant(keys):
            for i, found in zip(idx, t.client.exists_many(names), strict=True):
                there[i] = found
        return there

    def _delete(self, keys: Sequence[str]) -> tuple[bool, str, list[bool]]:
        there = self._exists(keys)
        for t, _, names in self._by_tenant(keys):
            t.client.delete_many(names)
        return True, "", there

    def _submit(self, work: Callable[[], tuple[bool, str, Any]]) -> int:
        if self._closed:
            raise RuntimeError("the connector is closed")
        with self._lock:
            fid = self._next_id
            self._next_id += 1
        self._pool.submit(self._run, fid, work)
        return fid

    def _run(self, fid: int, work: Callable[[], tuple[bool, str, Any]]) -> None:
        try:
            ok, error, bools = work()
        except Exception as e:  # the batch fails, named; the connector goes on
            ok, error, bools = False, f"{type(e).__name__}: {e}", None
        with self._lock:
            self._done.append((fid, ok, error, bools))
        try:
            os.eventfd_write(self._efd, 1)
        except OSError:
            pass  # closed meanwhile
