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
(``rasa_client._arena``), not per buffer. The work runs on the connector's own threads with the GIL
released while bytes move; each batch's completion is signalled on the eventfd LMCache
polls.

``adapter_params``: ``endpoint`` (a gateway, or members of a cluster separated by commas),
``namespace`` (the tenant: its quota evicts its own chunks only), ``token``, ``ca_file``,
``timeout`` (seconds, a whole call), ``fast_path`` (``"auto"``, ``"off"``, ``"required"``),
``prefix`` (put before every key: deployments sharing a namespace), ``workers`` (batches
in flight at once) and ``register_arena`` (``True``; ``False`` reads into each buffer with
one copy, never registering LMCache's memory).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import Client
from ._arena import Arenas

Completion = tuple[int, bool, str, "list[bool] | None"]


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
        prefix: str = "",
        workers: int = 2,
        register_arena: bool = True,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._client = Client(
            endpoint,
            namespace=namespace,
            token=token,
            ca_file=ca_file,
            timeout=timeout,
            fast_path=fast_path,
        )
        self._prefix = prefix
        self.arenas = Arenas(self._client) if register_arena else None
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rasa-lmcache")
        self._lock = threading.Lock()
        self._next_id = 1
        self._done: list[Completion] = []
        self._closed = False

    # --- the native_plugin contract

    def event_fd(self) -> int:
        """The eventfd signalled when batches complete (LMCache polls it)."""
        return self._efd

    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[memoryview]) -> int:
        """Stores each chunk under its key (one Rasa batch); the batch's id."""
        pairs = list(zip(self._keys(keys), memoryviews, strict=True))
        return self._submit(lambda: self._set(pairs))

    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[memoryview]) -> int:
        """Reads each chunk into its buffer; the batch succeeds when every chunk was found
        and filled its buffer exactly."""
        names, views = self._keys(keys), list(memoryviews)
        if len(names) != len(views):
            raise ValueError("one buffer per key")
        return self._submit(lambda: self._get(names, views))

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        """Whether each key is stored (the gateway's index; no value is read)."""
        names = self._keys(keys)
        return self._submit(lambda: (True, "", self._client.exists_many(names)))

    def submit_batch_delete(self, keys: Sequence[str]) -> int:
        """Deletes each key; the result says which were there."""
        names = self._keys(keys)
        return self._submit(lambda: self._delete(names))

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
        self._client.close()

    # --- the work

    def _keys(self, keys: Sequence[str]) -> list[str]:
        return [self._prefix + k for k in keys]

    def _set(self, pairs: list[tuple[str, memoryview]]) -> tuple[bool, str, None]:
        self._client.put_many(pairs)
        return True, "", None

    def _get(self, names: list[str], views: list[memoryview]) -> tuple[bool, str, None]:
        if self.arenas is None:
            got = self._client.get_many_into(names, views)
        else:
            with self.arenas.placed(views) as spot:
                if spot is None:
                    got = self._client.get_many_into(names, views)
                else:
                    arena, offsets, lengths = spot
                    got = self._client.get_many_into(names, arena, offsets=offsets, lengths=lengths)
        for name, n, view in zip(names, got, views, strict=True):
            if n is None:
                return False, f"{name}: not stored", None
            if isinstance(n, BaseException):
                return False, f"{name}: {n}", None
            if n != view.nbytes:
                return False, f"{name}: {n} bytes stored, the buffer holds {view.nbytes}", None
        return True, "", None

    def _delete(self, names: list[str]) -> tuple[bool, str, list[bool]]:
        there = self._client.exists_many(names)
        self._client.delete_many(names)
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
