"""``rasa://`` for fsspec: pandas, pyarrow, dask and anything else that opens files through
fsspec read and write Rasa keys, one-sided where the fast path is available.

    >>> import pandas as pd
    >>> df.to_parquet("rasa://tables/t.parquet", storage_options={"endpoint": url})
    >>> pd.read_parquet("rasa://tables/t.parquet", storage_options={"endpoint": url})

A path is a key (``rasa://tables/t.parquet`` is the key ``tables/t.parquet``); ``/``
separates directories, which exist while some key is under them (as in S3). The gateway
comes from ``endpoint=`` (comma-separated seeds for a cluster), else ``RASA_ENDPOINT``;
the other keyword arguments are ``Client``'s (``token=``, ``fast_path=``, ``timeout=``…),
or pass ``client=`` to share one. Registered with fsspec under ``rasa`` by entry point:
``fsspec.filesystem("rasa", endpoint=...)``.

Whole files are one ``get``; ranges (``cat_file(start=, end=)``, ``cat_ranges``, and the
blocks of files opened for reading) are one-sided range reads that validate only the
blocks they cover. Files opened for writing are stored as one new version when closed.
"""

from __future__ import annotations

import os
from typing import Any

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import Client, NotFound

__all__ = ["RasaFileSystem", "RasaFile"]


class RasaFileSystem(AbstractFileSystem):
    """Rasa keys as an fsspec filesystem (``rasa://``)."""

    protocol = ("rasa",)
    root_marker = ""

    def __init__(self, endpoint: str | None = None, *, client: Client | None = None, **kwargs: Any):
        fs_kwargs = {
            k: kwargs.pop(k)
            for k in ("skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths")
            if k in kwargs
        }
        super().__init__(endpoint=endpoint, **fs_kwargs, **kwargs)
        if client is None:
            endpoint = endpoint or os.environ.get("RASA_ENDPOINT")
            if not endpoint:
                raise ValueError("rasa:// needs endpoint= (storage_options) or RASA_ENDPOINT")
            client = Client(endpoint, **kwargs)
        self.client = client

    @classmethod
    def _strip_protocol(cls, path: str | list[str]) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        if path.startswith("rasa://"):
            path = path[len("rasa://") :]
        return path.lstrip("/").rstrip("/")

    # Reading whole values and ranges.

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        """The value of ``path``, or the bytes ``[start, end)`` of it (negative: from its end)."""
        key = self._strip_protocol(path)
        try:
            if start is None and end is None:
                return bytes(self.client.get(key))
            size = self.client.head(key).length
            lo, hi = _bounds(start, end, size)
            if hi <= lo:
                return b""
            return bytes(self.client.get_range(key, lo, hi))
        except NotFound as e:
            raise FileNotFoundError(path) from e

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """Size, type, ETag and version of a key; a directory while some key is under it."""
        key = self._strip_protocol(path)
        if key:
            try:
                m = self.client.head(key)
                return {
                    "name": key,
                    "size": m.length,
                    "type": "file",
                    "etag": m.etag,
                    "version": m.version,
                    "content_type": m.content_type,
                }
            except NotFound:
                pass
        prefix = f"{key}/" if key else ""
        if not key or len(self.client.list(prefix, limit=1)) > 0:
            return {"name": key, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        """The keys and directories directly under ``path``; a key lists as itself."""
        key = self._strip_protocol(path)
        prefix = f"{key}/" if key else ""
        entries: dict[str, dict[str, Any]] = {}
        for s in self.client.iter_keys(prefix):
            rest = s.key[len(prefix) :]
            head, sep, _ = rest.partition("/")
            name = prefix + head
            if sep:
                entries.setdefault(name, {"name": name, "size": 0, "type": "directory"})
            else:
                entries[name] = {"name": name, "size": s.length, "type": "file", "etag": s.etag,
                                 "version": s.version}
        if not entries:
            one = self.info(path)  # a key (or FileNotFoundError)
            return [one if detail else one["name"]]
        out = sorted(entries.values(), key=lambda e: e["name"])
        return out if detail else [e["name"] for e in out]

    # Writing and removing.

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Stores ``value`` as a new version of ``path``."""
        key = self._strip_protocol(path)
        if mode == "create" and self.client.exists(key):
            raise FileExistsError(path)
        self.client.put(key, value, content_type=kwargs.get("content_type"))

    def put_file(self, lpath: str, rpath: str, callback: Any = None, mode: str = "overwrite", **kwargs: Any) -> None:
        """Stores the local file ``lpath`` as ``rpath``, streamed from disk (memory does not
        grow with it); ``callback`` (an fsspec ``Callback``) follows the bytes sent."""
        if os.path.isdir(lpath):
            return  # keys need no directories
        key = self._strip_protocol(rpath)
        if mode == "create" and self.client.exists(key):
            raise FileExistsError(rpath)
        if callback is not None:
            callback.set_size(os.path.getsize(lpath))
        self.client.put_file(key, lpath, content_type=kwargs.get("content_type"),
                             progress=None if callback is None else callback.absolute_update)

    def get_file(self, rpath: str, lpath: Any, callback: Any = None, outfile: Any = None, **kwargs: Any) -> None:
        """Writes ``rpath`` to the local file ``lpath`` (or the file object ``outfile``),
        streamed, one-sided where it can; a path never holds a partial value."""
        info = self.info(rpath)  # FileNotFoundError when neither a key nor a directory
        if info["type"] == "directory":
            os.makedirs(lpath, exist_ok=True)
            return
        key = self._strip_protocol(rpath)
        if callback is not None:
            callback.set_size(info["size"])
        progress = None if callback is None else callback.absolute_update
        try:
            self.client.get_file(key, outfile if outfile is not None else lpath, progress=progress)
        except NotFound as e:
            raise FileNotFoundError(rpath) from e

    def rm_file(self, path: str) -> None:
        """Deletes the key ``path`` (absent keys are no error, as in S3)."""
        self.client.delete(self._strip_protocol(path))

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing to do: a directory exists while a key is under it."""

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Nothing to do: a directory exists while a key is under it."""

    def rmdir(self, path: str) -> None:
        """Nothing to do: a directory goes with its last key."""

    def _open(self, path: str, mode: str = "rb", block_size: Any = "default", autocommit: bool = True,
              cache_options: Any = None, **kwargs: Any) -> RasaFile:
        return RasaFile(self, path, mode=mode, block_size=block_size, autocommit=autocommit,
                        cache_options=cache_options, **kwargs)

    def ukey(self, path: str) -> str:
        """The current version's ETag: changes with every write."""
        return self.info(path)["etag"]


class RasaFile(AbstractBufferedFile):
    """A key opened for reading (random access: each block a one-sided range read) or
    writing (stored as one new version on close)."""

    def _fetch_range(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        try:
            # Straight into the bytes object handed back: no copy after the read.
            data: bytes = self.fs.client._read_range(self.fs._strip_protocol(self.path), start, end)
            return data
        except NotFound as e:
            raise FileNotFoundError(self.path) from e

    def read(self, length: int = -1) -> bytes:
        """``length`` bytes from the position (all that is left when negative). A read of
        a block or more (Arrow's coalesced column chunks) goes to the gateway as one range
        read, past the read-ahead cache, whose slicing would copy it once more."""
        if self.mode != "rb" or self.closed:
            return super().read(length)  # type: ignore[no-any-return]
        left = max(0, self.size - self.loc)
        want = left if length is None or length < 0 else min(length, left)
        if want < self.blocksize:
            return super().read(length)  # type: ignore[no-any-return]
        out = self._fetch_range(self.loc, self.loc + want)
        self.loc += len(out)
        return out

    def _initiate_upload(self) -> None:
        self._parts: list[bytes] = []

    def _upload_chunk(self, final: bool = False) -> bool:
        self._parts.append(self.buffer.getvalue())
        if final:
            self.fs.pipe_file(self.path, b"".join(self._parts))
        return True


def _bounds(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """``[start, end)`` of a value of ``size`` bytes, negative offsets from its end."""
    lo = 0 if start is None else (start + size if start < 0 else start)
    hi = size if end is None else (end + size if end < 0 else end)
    return max(0, min(lo, size)), max(0, min(hi, size))
