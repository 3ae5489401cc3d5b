"""safetensors checkpoints straight from Rasa into registered memory.

    >>> from rasa_client import Client, safetensors
    >>> c = Client("http://rasa:8080")
    >>> tensors = safetensors.load(c, "llama/model-00001-of-00002.safetensors")
    >>> weights = safetensors.load_index(c, "llama/model.safetensors.index.json", framework="torch")
    >>> with safetensors.safe_open(c, "llama/model.safetensors") as f:
    ...     emb = f.get_tensor("model.embed_tokens.weight")

``load`` reads the whole value once, one-sided where the fast path is available, into one
registered buffer, and hands out each tensor as a view of it (numpy arrays, or torch
tensors with ``framework="torch"``): nothing is copied after the read. ``load_index`` does
the same for every shard of a sharded checkpoint, the shards read together (one batch into
one buffer). ``safe_open`` reads the header once and each tensor (``get_tensor``) or part of
one (``get_slice``) by a range read of its own bytes only.

The header is checked before any tensor is made: its length within the value, every dtype
known, every shape's bytes equal to its offsets' span, offsets within the data and no two
tensors overlapping; a file that fails is a ``SafetensorsError`` naming what is wrong, and
no byte outside the value is ever read. Keys may be given as ``rasa://`` URLs
(``rasa://llama/model.safetensors`` is the key ``llama/model.safetensors``).

numpy has no bfloat16 or float8: those tensors need ``framework="torch"`` (or the
``ml_dtypes`` package, used when installed).
"""

from __future__ import annotations

import json
import math
import posixpath
import struct
from typing import Any

import numpy as np

from ._errors import BufferTooSmall

#: safetensors' dtypes: bytes per element, and the numpy / torch type names.
DTYPES: dict[str, tuple[int, str | None, str]] = {
    "BOOL": (1, "bool", "bool"),
    "U8": (1, "uint8", "uint8"),
    "I8": (1, "int8", "int8"),
    "U16": (2, "uint16", "uint16"),
    "I16": (2, "int16", "int16"),
    "F16": (2, "float16", "float16"),
    "BF16": (2, None, "bfloat16"),
    "U32": (4, "uint32", "uint32"),
    "I32": (4, "int32", "int32"),
    "F32": (4, "float32", "float32"),
    "U64": (8, "uint64", "uint64"),
    "I64": (8, "int64", "int64"),
    "F64": (8, "float64", "float64"),
    "F8_E5M2": (1, None, "float8_e5m2"),
    "F8_E4M3": (1, None, "float8_e4m3fn"),
}
#: Names ``ml_dtypes`` gives the types numpy lacks.
_ML_DTYPES = {"BF16": "bfloat16", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn"}
#: The longest header accepted (safetensors' own limit).
MAX_HEADER = 100_000_000
#: The most tensors a header may name (a shard of today's largest checkpoints has a few
#: thousand): a header of a million empty tensors is refused before it is parsed.
MAX_TENSORS = 100_000
#: The largest dimension, and number of elements, a tensor may have (safetensors' own
#: are machine words).
MAX_ELEMENTS = (1 << 63) - 1


class SafetensorsError(ValueError):
    """A value that is not a well-formed safetensors file (what is wrong is named)."""


class TensorInfo:
    """One tensor of a header: dtype, shape, and where its bytes are in the value."""

    __slots__ = ("name", "dtype", "shape", "start", "end")

    def __init__(self, name: str, dtype: str, shape: tuple[int, ...], start: int, end: int):
        self.name, self.dtype, self.shape, self.start, self.end = name, dtype, shape, start, end

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.dtype}, {self.shape}, bytes {self.start}..{self.end})"


def key_of(key: str) -> str:
    """A key, given as itself or as a ``rasa://`` URL."""
    return key[len("rasa://") :] if key.startswith("rasa://") else key


def header_length(first8: bytes, total: int, key: str) -> int:
    """The header's length, from the value's first 8 bytes; checked against ``total``."""
    if total < 8 or len(first8) < 8:
        raise SafetensorsError(f"{key}: {total} bytes is too short for a safetensors file")
    (n,) = struct.unpack("<Q", first8[:8])
    if n > MAX_HEADER or 8 + n > total:
        raise SafetensorsError(
            f"{key}: the header claims {n} bytes, but the value has {total} bytes in all"
        )
    return n


def parse_header(raw: bytes, data_len: int, key: str) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """The tensors and metadata of a header (``raw``, the JSON), each tensor checked
    against ``data_len``, the bytes after the header. Whatever ``raw`` holds, the only
    error is a ``SafetensorsError``; a header naming more than ``MAX_TENSORS`` tensors is
    refused before it is parsed."""
    if raw.count(b"data_offsets") > MAX_TENSORS:
        raise SafetensorsError(f"{key}: the header names more than {MAX_TENSORS} tensors")
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise SafetensorsError(f"{key}: the header nests deeper than a safetensors header") from None
    except (UnicodeDecodeError, ValueError) as e:
        # ValueError: JSON syntax, or an integer of more digits than Python parses.
        raise SafetensorsError(f"{key}: the header is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SafetensorsError(f"{key}: the header is not a JSON object")
    meta = doc.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise SafetensorsError(f"{key}: __metadata__ must map strings to strings")
    tensors = {name: tensor_info(name, t, data_len, key) for name, t in doc.items()}
    spans = sorted((t.start, t.end, t.name) for t in tensors.values() if t.end > t.start)
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise SafetensorsError(f"{key}: tensors {a!r} and {b!r} overlap")
    return tensors, meta


def tensor_info(name: str, t: Any, data_len: int, key: str) -> TensorInfo:
    """One header entry, checked."""
    if not isinstance(t, dict):
        raise SafetensorsError(f"{key}: tensor {name!r} is not an object")
    dtype, shape, offsets = t.get("dtype"), t.get("shape"), t.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise SafetensorsError(f"{key}: tensor {name!r} has an unknown dtype {_short(dtype)}")
    # `type(d) is int`: JSON's true and false are Python ints too.
    if (
        not isinstance(shape, list)
        or not all(type(d) is int and 0 <= d <= MAX_ELEMENTS for d in shape)
        or math.prod(shape) > MAX_ELEMENTS
    ):
        raise SafetensorsError(f"{key}: tensor {name!r} has a bad shape {_short(shape)}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_len
    ):
        raise SafetensorsError(
            f"{key}: tensor {name!r} has offsets {_short(offsets)} outside the data ({data_len} bytes)"
        )
    want = math.prod(shape) * DTYPES[dtype][0]
    if offsets[1] - offsets[0] != want:
        raise SafetensorsError(
            f"{key}: tensor {name!r} ({dtype}, shape {shape}) needs {want} bytes, "
            f"its offsets span {offsets[1] - offsets[0]}"
        )
    return TensorInfo(name, dtype, tuple(shape), offsets[0], offsets[1])


def _short(value: Any) -> str:
    """``value`` for an error message, at most 80 characters of it."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _numpy_dtype(dtype: str) -> np.dtype:
    name = DTYPES[dtype][1]
    if name is not None:
        return np.dtype(name).newbyteorder("<")
    try:
        import ml_dtypes
    except ImportError:
        raise SafetensorsError(
            f"numpy has no {dtype}: load with framework='torch', or install ml_dtypes"
        ) from None
    return np.dtype(getattr(ml_dtypes, _ML_DTYPES[dtype]))


def view(buf: Any, at: int, t: TensorInfo, framework: str) -> Any:
    """Tensor ``t`` as a view of ``buf``, its data starting at ``at`` (no copy)."""
    count = math.prod(t.shape)
    if framework == "numpy":
        return np.frombuffer(buf, dtype=_numpy_dtype(t.dtype), count=count, offset=at + t.start).reshape(t.shape)
    if framework in ("torch", "pt"):
        import torch

        dtype = getattr(torch, DTYPES[t.dtype][2])
        if count == 0:
            return torch.empty(t.shape, dtype=dtype)
        return torch.frombuffer(buf, dtype=dtype, count=count, offset=at + t.start).reshape(t.shape)
    raise ValueError(f"framework is 'numpy' or 'torch', not {framework!r}")


def _read_whole(client: Any, key: str, into: Any) -> tuple[Any, int]:
    """``key``'s value in a registered buffer (``into``, or a new one), and its length."""
    for _ in range(2):  # the key may be replaced, with another length, between head and read
        n = client.head(key).length
        buf = into if into is not None else client.register(max(n, 1))
        if len(buf) < n:
            raise ValueError(f"{key} has {n} bytes; the buffer given holds {len(buf)}")
        try:
            return buf, client.get_into(key, buf)
        except BufferTooSmall:  # the value changed: again, with its new length
            if into is not None:
                raise
    raise RuntimeError(f"{key} kept changing length while it was read")


def tensors_in(buf: Any, n: int, at: int, key: str, framework: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors of the safetensors file in ``buf[at : at + n]``, as views."""
    mem = memoryview(buf)[at : at + n]
    hlen = header_length(bytes(mem[:8]), n, key)
    infos, meta = parse_header(bytes(mem[8 : 8 + hlen]), n - 8 - hlen, key)
    data = at + 8 + hlen
    return {name: view(buf, data, t, framework) for name, t in infos.items()}, meta


def load(client: Any, key: str, framework: str = "numpy", into: Any = None, device: str = "cpu") -> dict[str, Any]:
    """Every tensor of the safetensors file at ``key``, as views of one registered buffer
    (``into``: a registered buffer of the caller's, large enough). ``device`` other than
    ``"cpu"`` (torch) copies the tensors there."""
    key = key_of(key)
    buf, n = _read_whole(client, key, into)
    tensors, _ = tensors_in(buf, n, 0, key, framework)
    if device != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors


def load_index(
    client: Any,
    index_key: str,
    framework: str = "numpy",
    shards: list[str] | None = None,
    into: Any = None,
) -> dict[str, Any]:
    """Every tensor of a sharded checkpoint (its ``model.safetensors.index.json``; shard
    keys are relative to the index's), or of the ``shards`` named (file names as the
    index gives them): the shards read together, one batch into one registered buffer
    (``into``: the caller's, large enough for every shard, each page-aligned), each tensor
    a view of it."""
    index_key = key_of(index_key)
    doc = json.loads(bytes(client.get(index_key)))
    weight_map = doc.get("weight_map")
    if not isinstance(weight_map, dict):
        raise SafetensorsError(f"{index_key}: no weight_map")
    files = sorted(set(weight_map.values()))
    if shards is not None:
        unknown = set(shards) - set(files)
        if unknown:
            raise KeyError(f"{index_key} names no shard {sorted(unknown)}")
        files = [f for f in files if f in shards]
    base = posixpath.dirname(index_key)
    keys = [posixpath.join(base, f) if base else f for f in files]
    lengths = [client.head(k).length for k in keys]
    offsets = [0]
    for n in lengths[:-1]:  # each shard page-aligned in the buffer
        offsets.append(offsets[-1] + (n + 4095) // 4096 * 4096)
    need = offsets[-1] + lengths[-1]
    if into is not None and len(into) < need:
        raise ValueError(f"the shards need {need} bytes; the buffer given holds {len(into)}")
    buf = into if into is not None else client.register(max(need, 1))
    got = client.get_many_into(keys, buf, offsets=offsets, lengths=lengths)
    out: dict[str, Any] = {}
    for k, at, want, n in zip(keys, offsets, lengths, got, strict=True):
        if isinstance(n, BaseException):
            raise n
        if n != want:
            raise SafetensorsError(f"{k}: {n} bytes read, {want} expected (replaced meanwhile?)")
        out.update(tensors_in(buf, n, at, k, framework)[0])
    return out


class safe_open:
    """A safetensors file in Rasa, opened lazily: the header read once, each tensor read
    on demand by a range read of its own bytes (``get_tensor``, ``get_slice``)."""

    def __init__(self, client: Any, key: str, framework: str = "numpy", device: str = "cpu"):
        self._client, self._key, self._framework, self._device = client, key_of(key), framework, device
        total = client.head(self._key).length
        hlen = header_length(bytes(client.get_range(self._key, 0, min(8, total))), total, self._key)
        raw = bytes(client.get_range(self._key, 8, 8 + hlen)) if hlen else b""
        self._data = 8 + hlen
        self._infos, self._meta = parse_header(raw, total - self._data, self._key)

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def keys(self) -> list[str]:
        """The tensors' names, in file order."""
        return sorted(self._infos, key=lambda n: self._infos[n].start)

    def metadata(self) -> dict[str, str]:
        """The header's ``__metadata__``."""
        return dict(self._meta)

    def info(self, name: str) -> TensorInfo:
        """Where tensor ``name`` is, and what it is."""
        try:
            return self._infos[name]
        except KeyError:
            raise KeyError(f"{self._key} has no tensor {name!r}") from None

    def _read(self, start: int, end: int) -> Any:
        """Bytes ``start..end`` of the data, read into a fresh buffer."""
        out = bytearray(end - start)
        if end > start:
            self._client.get_range_into(self._key, self._data + start, self._data + end, out)
        return out

    def get_tensor(self, name: str) -> Any:
        """Tensor ``name``, read by itself (its bytes only)."""
        t = self.info(name)
        tensor = view(self._read(t.start, t.end), -t.start, t, self._framework)
        return tensor if self._device == "cpu" else tensor.to(self._device)

    def get_slice(self, name: str) -> TensorSlice:
        """Tensor ``name``, to be indexed (``[a:b]`` along its first dimension reads those
        rows only)."""
        return TensorSlice(self, self.info(name))


class TensorSlice:
    """Part of a tensor, read on indexing: the rows the first index selects."""

    def __init__(self, f: safe_open, t: TensorInfo):
        self._f, self._t = f, t

    def get_shape(self) -> list[int]:
        return list(self._t.shape)

    def get_dtype(self) -> str:
        return self._t.dtype

    def __getitem__(self, index: Any) -> Any:
        t = self._t
        index = index if isinstance(index, tuple) else (index,)
        if not t.shape:
            return self._f.get_tensor(t.name)[index]
        first, rest = index[0], index[1:]
        rows = range(t.shape[0])[first] if isinstance(first, slice) else None
        if rows is None or rows.step != 1:
            return self._f.get_tensor(t.name)[index]
        row = (t.end - t.start) // t.shape[0] if t.shape[0] else 0
        lo, hi = rows.start, max(rows.start, rows.stop)
        part = TensorInfo(t.name, t.dtype, (hi - lo, *t.shape[1:]), t.start + lo * row, t.start + hi * row)
        tensor = view(self._f._read(part.start, part.end), -part.start, part, self._f._framework)
        return tensor[(slice(None), *rest)] if rest else tensor
