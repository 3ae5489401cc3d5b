"""rasa_client: the Python SDK of Rasa, an object-store gateway with one-sided RDMA reads.

``Client`` blocks (with the GIL released while it waits); ``AsyncClient`` has the same
methods as coroutines. Both read one-sided over libfabric when the gateway and this
machine can (``fast_path="auto"``), over HTTP otherwise, and always return the right
bytes or raise a ``RasaError``.

    >>> import rasa_client
    >>> with rasa_client.Client("http://127.0.0.1:8080") as c:
    ...     c.put("greeting", b"hello")
    ...     obj = c.get("greeting")
    ...     bytes(obj), obj.path
    (b'hello', 'fabric')

Clients are safe to share between threads, keep working in a ``fork()``\\ ed child (which
makes its own connections and fabric endpoint on first use), and pickle as their
configuration (token included).
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from . import _native
from ._batch import GetBatcher
from ._errors import *  # noqa: F403
from ._errors import __all__ as _errors_all
from ._native import Descriptor, Meta, Object, ObjectList, ObjectSummary, RegisteredBuffer

if TYPE_CHECKING:
    from ._native import Buffer

__version__: str = _native.__version__

__all__ = [
    "Client",
    "AsyncClient",
    "Object",
    "Descriptor",
    "Meta",
    "ObjectList",
    "ObjectSummary",
    "RegisteredBuffer",
    *_errors_all,
]


def _env_settings() -> dict[str, Any]:
    """Client settings from the environment (the same variables as the ``rasa`` CLI)."""
    kw: dict[str, Any] = {"endpoint": os.environ.get("RASA_ENDPOINT", "http://127.0.0.1:8080")}
    if "RASA_TOKEN" in os.environ:
        kw["token"] = os.environ["RASA_TOKEN"]
    if "RASA_CA_FILE" in os.environ:
        kw["ca_file"] = os.environ["RASA_CA_FILE"]
    if "RASA_FAST_PATH" in os.environ:
        kw["fast_path"] = os.environ["RASA_FAST_PATH"]
    if "RASA_FABRIC_ADDR" in os.environ:
        kw["fabric_addr"] = os.environ["RASA_FABRIC_ADDR"]
    if "RASA_READ_PROVIDER" in os.environ:
        kw["fabric_provider"] = os.environ["RASA_READ_PROVIDER"]
    if "RASA_TIMEOUT" in os.environ:
        kw["timeout"] = float(os.environ["RASA_TIMEOUT"].removesuffix("s"))
    if "RASA_NAMESPACE" in os.environ:
        kw["namespace"] = os.environ["RASA_NAMESPACE"]
    return kw


class Client(_native.Client):
    """A client of a Rasa gateway, or of a cluster (comma-separated seed endpoints).

    Args:
        endpoint: the gateway's URL, e.g. ``"http://127.0.0.1:8080"``.
        fast_path: ``"auto"`` (one-sided when possible, else HTTP), ``"off"`` (HTTP
            only) or ``"required"`` (one-sided or ``FastPathUnavailable``).
        token: a bearer token, for gateways run with ``--token-file``.
        ca_file: a PEM file of extra certificate authorities for ``https://`` endpoints.
        timeout: seconds one call may take in all (its HTTP exchanges, one-sided reads,
            retries and failover included), then ``Timeout``; ``None`` for no total
            limit (an exchange still fails after 30 s without progress).
        read_timeout: seconds a one-sided read may take.
        connect_timeout: seconds to wait for a connection.
        verify_sha256: also check each one-sided read's SHA-256 (frames are always
            checked against their checksum).
        fabric_addr: the local address of this side's fabric endpoint.
        fabric_provider: the gateway fabric endpoint to read through, by provider
            (``"shm"``, ``"tcp;ofi_rxm"``, ``"efa"``); default: ``shm`` when the gateway
            is on this host and cross-memory attach works, else its other provider.
        retries_when_busy: how often a ``503`` with ``Retry-After`` is retried.
        discover_cluster: learn a cluster's members from the endpoint and send each key
            to its owner.
        namespace: the namespace the keys are in (a gateway run with ``--namespaces``);
            default: the default namespace.
        lease_puts: whether a write asks for a descriptor to read its value one-sided (the
            gateway then leases the new version, and its memory waits for the lease
            before reuse); default: off, so a writer is never throttled by leases it
            does not use (one that turned ``--memory`` over within a lease used to wait
            the leases out). Turn it on when the returned descriptors are read one-sided.
    """

    @classmethod
    def from_env(cls, **overrides: Any) -> Client:
        """A client configured by ``RASA_ENDPOINT``, ``RASA_TOKEN``, ``RASA_CA_FILE``,
        ``RASA_FAST_PATH``, ``RASA_FABRIC_ADDR``, ``RASA_READ_PROVIDER``, ``RASA_TIMEOUT`` (seconds)
        and ``RASA_NAMESPACE``."""
        return cls(**{**_env_settings(), **overrides})

    def iter_keys(self, prefix: str = "", *, page_size: int = 1000) -> Iterator[ObjectSummary]:
        """Every key starting with ``prefix``, in order, fetched a page at a time."""
        after: str | None = None
        while True:
            page = self.list(prefix, after=after, limit=page_size)
            yield from page.items
            if page.next_after is None:
                return
            after = page.next_after

    def put(
        self,
        key: str,
        data: Buffer | str | os.PathLike[str] | IO[bytes],
        content_type: str | None = None,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> Descriptor:
        """Stores ``data`` as a new version of ``key``; its descriptor. ``data`` is any
        bytes-like object, a ``str`` (stored as UTF-8), a path, or a file object: a file
        opened on a regular file at its start is streamed from disk (memory does not grow
        with it, as ``put_file``), any other is read to its end first. ``if_match=etag``
        stores only if the current version has that ETag, ``if_none_match="*"`` only if
        the key has none (data in memory only); otherwise ``PreconditionFailed``."""
        conditions = {"if_match": if_match, "if_none_match": if_none_match}
        d: Descriptor = _put(self, key, data, content_type, conditions)
        return d

    def put_file(
        self,
        key: str,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        content_type: str | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> Descriptor:
        """Stores a file as a new version of ``key``, streamed from disk (memory does not
        grow with it); its descriptor. ``file`` is a path or a file object opened on a
        regular file at its start (any other file object is read to its end first).
        ``progress(done)`` is told the bytes sent so far, about once a MiB and at the end
        (from 0 again if the upload starts over at another member)."""
        kind, body = _file_body(file)
        if kind == "file":
            return super().put_file(key, body, content_type=content_type, progress=progress)
        d: Descriptor = _native_put(self, key, body, content_type, {})
        if progress is not None:
            progress(len(memoryview(body)))
        return d

    def get_file(
        self,
        key: str,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        progress: Callable[[int], object] | None = None,
    ) -> int:
        """Writes ``key``'s current version to ``file``, streamed (memory does not grow
        with the value); the bytes written. A path is written under a temporary name next
        to it and renamed into place once whole and validated, so it never holds a
        partial value; a file object gets the bytes through its ``write`` from where it
        stands, and on an error holds part of them (``Incomplete`` says how many).
        ``progress(done)`` is told the bytes written so far, about once a MiB."""
        n: int = _get_file(self, key, file, progress)
        return n

    def put_many(
        self, items: Mapping[str, Buffer] | Iterable[tuple[str, Buffer]]
    ) -> list[Descriptor]:
        """Stores each ``(key, data)`` as its own version, in one request per batch (up to
        1000 values, 64 MiB); one descriptor per item, in order. A value the gateway
        refuses does not stop the others: they are stored, and the first refusal is raised
        with ``.results`` (a descriptor or the exception, per item)."""
        return _all_or_raise(self._put_many(_pairs(items)), "stored")

    def delete_many(self, keys: Iterable[str]) -> None:
        """Deletes each key (absent ones too), in one request per batch. A key that could
        not be deleted does not stop the others; the first failure is raised with
        ``.results``."""
        _all_or_raise(self._delete_many(list(keys)), "deleted")

    def exists_many(self, keys: Iterable[str]) -> list[bool]:
        """Whether each key has a current version, in order, in one request per batch of
        1000 keys: the gateway answers from its index (memory and disk tier) and reads no
        value; an object only the origin holds is ``False``. An invalid key raises (with
        ``.results``)."""
        return _all_or_raise(self._exists_many(list(keys)), "checked")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        kw = self._config()
        return (functools.partial(type(self), **kw), ())


def _pairs(items: Mapping[str, Buffer] | Iterable[tuple[str, Buffer]]) -> list[tuple[str, Any]]:
    return list(items.items() if isinstance(items, Mapping) else items)


def _body(data: Any) -> tuple[str, Any]:
    """What ``put`` was given: ``("bytes", buffer)`` — a ``str`` as its UTF-8 bytes —, or
    ``("file", path)`` for a path or a file opened on a regular file at its start
    (streamed from disk), else a file object's remaining bytes, read."""
    if isinstance(data, str):
        return "bytes", data.encode()
    if isinstance(data, os.PathLike):
        return "file", os.fspath(data)
    if hasattr(data, "read"):
        try:
            regular = stat.S_ISREG(os.fstat(data.fileno()).st_mode) and data.tell() == 0
        except (AttributeError, OSError, ValueError):
            regular = False
        if regular:
            return "file", f"/proc/self/fd/{data.fileno()}"
        rest = data.read()
        return "bytes", rest.encode() if isinstance(rest, str) else rest
    return "bytes", data


def _file_body(file: Any) -> tuple[str, Any]:
    """What ``put_file`` was given: a ``str`` is a path here."""
    return ("file", os.fspath(file)) if isinstance(file, str | os.PathLike) else _body(file)


def _put(client: Any, key: str, data: Any, content_type: str | None, conditions: dict[str, Any]) -> Any:
    kind, body = _body(data)
    if kind == "file":
        if any(v is not None for v in conditions.values()):
            raise TypeError("if_match / if_none_match take the data in memory, not a file")
        return _native_of(client).put_file(client, key, body, content_type=content_type)
    return _native_put(client, key, body, content_type, conditions)


def _native_of(client: Any) -> Any:
    """The native class whose methods ``client``'s overrides stand in front of."""
    return _native.AsyncClient if isinstance(client, _native.AsyncClient) else _native.Client


def _native_put(client: Any, key: str, body: Any, content_type: str | None, conditions: dict[str, Any]) -> Any:
    return _native_of(client).put(client, key, body, content_type, **conditions)


def _get_file(client: Any, key: str, file: Any, progress: Any) -> Any:
    """``get_file``'s read (a value, or an awaitable for ``AsyncClient``): to a file
    object through its ``write``, else to the path."""
    if hasattr(file, "write"):
        return client._get_to_writer(key, file, progress=progress)
    return client._get_file(key, os.fspath(file), progress=progress)


def _all_or_raise(results: list[Any], done: str) -> list[Any]:
    """``results`` of a batch when no item failed; else the first failure, raised with
    ``.results`` and a note naming how many items were not ``done``."""
    failed = [r for r in results if isinstance(r, BaseException)]
    if not failed:
        return results
    first = failed[0]
    first.results = results  # type: ignore[attr-defined]
    first.add_note(f"{len(failed)} of {len(results)} items were not {done}; .results has each")
    raise first


class AsyncClient(_native.AsyncClient):
    """A client of a Rasa gateway whose methods are coroutines (on the SDK's own tokio
    runtime; many may be in flight at once). Takes the same arguments as ``Client``.

    The ``get`` calls that one turn of the event loop starts (``asyncio.gather`` of many)
    are read together, as one ``get_many`` would: each caller still gets its own value or
    the exception a lone ``get`` raises."""

    @functools.cached_property
    def _gets(self) -> GetBatcher:
        return GetBatcher(self._fetch)

    async def _fetch(self, keys: Sequence[str]) -> list[Any]:
        if len(keys) == 1:  # alone: the single read (and its cached descriptor)
            try:
                return [await super().get(keys[0])]
            except Exception as e:
                return [e]
        return await self._get_batch(list(keys))

    async def get(self, key: str, *, version: str | None = None) -> Object:
        """Reads ``key``'s current version (one-sided when possible) as an ``Object``; with
        ``version=``, that version while the gateway still holds it. Reads started in the
        same event-loop turn go to the gateway as one batch."""
        if version is not None:
            return await super().get(key, version=version)
        obj: Object = await self._gets.get(key)
        return obj

    async def put(
        self,
        key: str,
        data: Buffer | str | os.PathLike[str] | IO[bytes],
        content_type: str | None = None,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> Descriptor:
        """Stores ``data`` as a new version of ``key``, like ``Client.put`` (a ``str`` as
        UTF-8, a path or a regular file streamed from disk)."""
        conditions = {"if_match": if_match, "if_none_match": if_none_match}
        d: Descriptor = await _put(self, key, data, content_type, conditions)
        return d

    @classmethod
    def from_env(cls, **overrides: Any) -> AsyncClient:
        """An async client configured from the environment, like ``Client.from_env``."""
        return cls(**{**_env_settings(), **overrides})

    async def iter_keys(
        self, prefix: str = "", *, page_size: int = 1000
    ) -> AsyncIterator[ObjectSummary]:
        """Every key starting with ``prefix``, in order, fetched a page at a time."""
        after: str | None = None
        while True:
            page = await self.list(prefix, after=after, limit=page_size)
            for item in page.items:
                yield item
            if page.next_after is None:
                return
            after = page.next_after

    async def put_file(
        self,
        key: str,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        content_type: str | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> Descriptor:
        """Stores a file as a new version of ``key``, streamed, like ``Client.put_file``."""
        kind, body = _file_body(file)
        if kind == "file":
            d: Descriptor = await super().put_file(key, body, content_type=content_type, progress=progress)
            return d
        d = await _native_put(self, key, body, content_type, {})
        if progress is not None:
            progress(len(memoryview(body)))
        return d

    async def get_file(
        self,
        key: str,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        progress: Callable[[int], object] | None = None,
    ) -> int:
        """Writes ``key``'s current version to a path or file object, streamed, like
        ``Client.get_file``."""
        n: int = await _get_file(self, key, file, progress)
        return n

    async def put_many(
        self, items: Mapping[str, Buffer] | Iterable[tuple[str, Buffer]]
    ) -> list[Descriptor]:
        """Stores each ``(key, data)`` as its own version, in one request per batch, like
        ``Client.put_many``."""
        return _all_or_raise(await self._put_many(_pairs(items)), "stored")

    async def delete_many(self, keys: Iterable[str]) -> None:
        """Deletes each key (absent ones too), in one request per batch, like
        ``Client.delete_many``."""
        _all_or_raise(await self._delete_many(list(keys)), "deleted")

    async def exists_many(self, keys: Iterable[str]) -> list[bool]:
        """Whether each key has a current version, in one request per batch, like
        ``Client.exists_many``."""
        return _all_or_raise(await self._exists_many(list(keys)), "checked")

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        kw = self._config()
        return (functools.partial(type(self), **kw), ())
