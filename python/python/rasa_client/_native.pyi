"""Type stubs of the extension module (the Rust half of rasa_client)."""

from collections.abc import Awaitable, Callable, Iterator, Sequence
from os import PathLike
from typing import IO, Any, Literal, Protocol, overload

from typing_extensions import Buffer as _Buffer
from typing_extensions import TypeAlias
from ._errors import RasaError

class _ArrayInterface(Protocol):
    """numpy arrays (and other array-interface objects): numpy's stubs declare their
    ``__buffer__`` only on Python >= 3.12, so on 3.11 a checker would refuse them as buffers."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...

Buffer: TypeAlias = _Buffer | _ArrayInterface
"""What a call takes as bytes or as memory to fill: any buffer, numpy arrays included."""

__version__: str

FastPathMode = Literal["auto", "off", "required"]

class Object:
    """A value read from the gateway, bytes-like: read-only buffer protocol (zero-copy),
    ``==`` with bytes, slicing, ``decode()``, hashing like bytes, pickling."""

    key: str
    """The key it was read under."""
    version: str
    """The version id."""
    sha256: str
    """The value's SHA-256, lowercase hex."""
    content_type: str
    """Its media type."""
    path: Literal["fabric", "http"]
    """How the bytes travelled: one-sided (``"fabric"``) or ``"http"``."""
    etag: str
    """The entity tag the gateway answers for it (its SHA-256, quoted)."""
    def __new__(
        cls,
        data: bytes,
        key: str,
        version: str,
        sha256: str,
        content_type: str,
        path: Literal["fabric", "http"],
    ) -> Object: ...
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> bytes: ...
    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The value decoded as text (``bytes.decode``)."""

class RegisteredBuffer:
    """Memory one-sided reads land in with no copy (``Client.register``: new memory, or the
    caller's own array); a writable buffer (``numpy.frombuffer(buf, dtype)`` views it without
    copying). Read it only while no read into it is in flight."""

    registrations: int
    """Fabric endpoints it is registered with now."""
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class Descriptor:
    """Where and how a version can be read one-sided, and its lease."""

    key: str
    version: str
    length: int
    sha256: str
    content_type: str
    lease_ms: int
    lease_expires_at: str
    node_id: str | None
    one_sided: bool
    def to_dict(self) -> dict[str, Any]:
        """Every field, as the gateway sent it (JSON names)."""

class Meta:
    """The metadata of a version (``head``)."""

    version: str
    length: int
    etag: str
    content_type: str

class ObjectSummary:
    """A key in a listing."""

    key: str
    version: str
    length: int
    etag: str

class ObjectList:
    """A page of a listing."""

    items: list[ObjectSummary]
    next_after: str | None
    """Pass as ``after`` for the next page; ``None`` on the last one."""
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[ObjectSummary]: ...
    def __getitem__(self, index: int) -> ObjectSummary: ...

class Client:
    """A blocking client; the GIL is released while it waits."""

    def __new__(
        cls,
        endpoint: str = "http://127.0.0.1:8080",
        *,
        fast_path: FastPathMode = "auto",
        token: str | None = None,
        ca_file: str | PathLike[str] | None = None,
        timeout: float | None = 30.0,
        read_timeout: float = 5.0,
        connect_timeout: float = 3.0,
        verify_sha256: bool = False,
        fabric_addr: str | None = None,
        fabric_provider: str | None = None,
        retries_when_busy: int = 2,
        discover_cluster: bool = True,
        namespace: str | None = None,
        lease_puts: bool | None = None,
    ) -> Client: ...
    def put(
        self,
        key: str,
        data: Buffer,
        content_type: str | None = None,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> Descriptor:
        """Stores ``data`` as a new version of ``key``."""
    def get(self, key: str, *, version: str | None = None) -> Object:
        """Reads ``key``'s current version."""
    def get_into(self, key: str, out: Buffer | RegisteredBuffer) -> int:
        """Reads ``key`` into the writable buffer ``out``; returns the bytes written.
        Into a ``RegisteredBuffer``, a one-sided read copies nothing."""
    def register(self, capacity: int | Buffer) -> RegisteredBuffer:
        """Memory one-sided reads land in with no copy: a new buffer of ``capacity`` bytes,
        or the caller's own writable, contiguous buffer (a numpy array, a ``bytearray``),
        kept alive and unresizable by the registration."""
    def get_many(self, keys: Sequence[str]) -> list[Object | None | Exception]:
        """One result per key: the object, ``None`` for a miss, or the exception."""
    def _get_batch(self, keys: Sequence[str]) -> list[Object | Exception]: ...
    def _read_range(self, key: str, start: int, end: int) -> bytes: ...
    def get_many_into(
        self,
        keys: Sequence[str],
        out: Buffer | Sequence[Buffer] | RegisteredBuffer,
        offsets: Sequence[int] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> list[int | None | Exception]:
        """Reads keys into a buffer each, or one buffer cut at ``offsets`` (each region
        running to the next offset, or for ``lengths`` bytes when given, in any order; a
        ``RegisteredBuffer``: each value lands in place with no copy one-sided)."""
    def get_range_into(self, key: str, start: int, end: int, out: Buffer) -> int:
        """Reads bytes ``start``..``end`` of ``key`` into the front of ``out``; returns the
        bytes written."""
    def get_range(self, key: str, start: int, end: int) -> Object:
        """Bytes ``start`` (inclusive) to ``end`` (exclusive) of ``key``: one-sided when
        the version has a block table (each covered block validated), else over HTTP."""
    def head(self, key: str) -> Meta:
        """The metadata of ``key``'s current version."""
    def exists(self, key: str) -> bool:
        """Whether ``key`` has a current version."""
    def list(self, prefix: str = "", *, after: str | None = None, limit: int = 1000) -> ObjectList:
        """A page of keys starting with ``prefix``."""
    def delete(self, key: str) -> None:
        """Deletes ``key`` (no error when absent)."""
    def _put_many(self, items: list[tuple[str, Buffer]]) -> list[Descriptor | RasaError]:
        """One request per batch; a descriptor or the exception per item."""
    def _delete_many(self, keys: list[str]) -> list[RasaError | None]:
        """One request per batch; ``None`` or the exception per key."""
    def _exists_many(self, keys: list[str]) -> list[bool | RasaError]:
        """One request per batch; a bool or the exception per key."""
    def put_file(
        self,
        key: str,
        path: str | PathLike[str],
        *,
        content_type: str | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> Descriptor:
        """Stores the file at ``path``, streamed from disk (memory does not grow with it);
        ``progress(done)`` told the bytes sent so far."""
    def _get_file(
        self, key: str, path: str | PathLike[str], *, progress: Callable[[int], object] | None = None
    ) -> int:
        """Writes the value to ``path``, streamed, renamed into place once whole and
        validated; the bytes written."""
    def _get_to_writer(
        self, key: str, file: IO[bytes], *, progress: Callable[[int], object] | None = None
    ) -> int:
        """Writes the value to a file object's ``write``, streamed; the bytes written."""
    def resolve(self, key: str) -> Descriptor:
        """The descriptor of ``key``'s current version."""
    def stats(self) -> dict[str, Any]:
        """Counters: fabric_reads, http_reads, fabric_batches, fabric_writes, http_writes, busy_retries, bytes_copied, fabric_provider
        (the provider one-sided reads go over), cluster_members (the node ids of the member list
        the client follows; empty for a single gateway), fallbacks."""
    def close(self) -> None:
        """Closes connections and the fabric endpoint; later calls raise."""
    def _config(self) -> dict[str, Any]: ...

class AsyncClient:
    """A client whose calls are coroutines on the SDK's tokio runtime."""

    def __new__(
        cls,
        endpoint: str = "http://127.0.0.1:8080",
        *,
        fast_path: FastPathMode = "auto",
        token: str | None = None,
        ca_file: str | PathLike[str] | None = None,
        timeout: float | None = 30.0,
        read_timeout: float = 5.0,
        connect_timeout: float = 3.0,
        verify_sha256: bool = False,
        fabric_addr: str | None = None,
        fabric_provider: str | None = None,
        retries_when_busy: int = 2,
        discover_cluster: bool = True,
        namespace: str | None = None,
        lease_puts: bool | None = None,
    ) -> AsyncClient: ...
    def put(
        self,
        key: str,
        data: Buffer,
        content_type: str | None = None,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
    ) -> Awaitable[Descriptor]:
        """Stores ``data`` as a new version of ``key``."""
    def get(self, key: str, *, version: str | None = None) -> Awaitable[Object]:
        """Reads ``key``'s current version."""
    def get_into(self, key: str, out: Buffer | RegisteredBuffer) -> Awaitable[int]:
        """Reads ``key`` into the writable buffer ``out``; returns the bytes written.
        Into a ``RegisteredBuffer``, a one-sided read copies nothing."""
    def register(self, capacity: int | Buffer) -> RegisteredBuffer:
        """Memory one-sided reads land in with no copy: a new buffer of ``capacity`` bytes,
        or the caller's own writable, contiguous buffer (a numpy array, a ``bytearray``),
        kept alive and unresizable by the registration."""
    def get_many(self, keys: Sequence[str]) -> Awaitable[list[Object | None | Exception]]:
        """One result per key: the object, ``None`` for a miss, or the exception."""
    def _get_batch(self, keys: Sequence[str]) -> Awaitable[list[Object | Exception]]: ...
    def get_many_into(
        self,
        keys: Sequence[str],
        out: Buffer | Sequence[Buffer] | RegisteredBuffer,
        offsets: Sequence[int] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> Awaitable[list[int | None | Exception]]:
        """Reads keys into a buffer each, or one buffer cut at ``offsets`` (each region
        running to the next offset, or for ``lengths`` bytes when given, in any order; a
        ``RegisteredBuffer``: each value lands in place with no copy one-sided)."""
    def get_range_into(self, key: str, start: int, end: int, out: Buffer) -> Awaitable[int]:
        """Reads bytes ``start``..``end`` of ``key`` into the front of ``out``."""
    def get_range(self, key: str, start: int, end: int) -> Awaitable[Object]:
        """Bytes ``start`` (inclusive) to ``end`` (exclusive) of ``key``: one-sided when
        the version has a block table (each covered block validated), else over HTTP."""
    def head(self, key: str) -> Awaitable[Meta]:
        """The metadata of ``key``'s current version."""
    def exists(self, key: str) -> Awaitable[bool]:
        """Whether ``key`` has a current version."""
    def list(
        self, prefix: str = "", *, after: str | None = None, limit: int = 1000
    ) -> Awaitable[ObjectList]:
        """A page of keys starting with ``prefix``."""
    def delete(self, key: str) -> Awaitable[None]:
        """Deletes ``key`` (no error when absent)."""
    def _put_many(
        self, items: list[tuple[str, Buffer]]
    ) -> Awaitable[list[Descriptor | RasaError]]:
        """One request per batch; a descriptor or the exception per item."""
    def _delete_many(self, keys: list[str]) -> Awaitable[list[RasaError | None]]:
        """One request per batch; ``None`` or the exception per key."""
    def _exists_many(self, keys: list[str]) -> Awaitable[list[bool | RasaError]]:
        """One request per batch; a bool or the exception per key."""
    def put_file(
        self,
        key: str,
        path: str | PathLike[str],
        *,
        content_type: str | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> Awaitable[Descriptor]:
        """Stores the file at ``path``, streamed from disk."""
    def _get_file(
        self, key: str, path: str | PathLike[str], *, progress: Callable[[int], object] | None = None
    ) -> Awaitable[int]:
        """Writes the value to ``path``, streamed, renamed into place once whole."""
    def _get_to_writer(
        self, key: str, file: IO[bytes], *, progress: Callable[[int], object] | None = None
    ) -> Awaitable[int]:
        """Writes the value to a file object's ``write``, streamed; the bytes written."""
    def resolve(self, key: str) -> Awaitable[Descriptor]:
        """The descriptor of ``key``'s current version."""
    def stats(self) -> dict[str, Any]:
        """Counters: fabric_reads, http_reads, fabric_batches, fabric_writes, http_writes, busy_retries, bytes_copied, fabric_provider
        (the provider one-sided reads go over), cluster_members (the node ids of the member list
        the client follows; empty for a single gateway), fallbacks."""
    def close(self) -> None:
        """Closes connections and the fabric endpoint; later calls raise."""
    def _config(self) -> dict[str, Any]: ...
