"""``rasa_client.safetensors`` (issue 48): checkpoints written by the safetensors library
itself, loaded from a real gateway as views of one registered buffer; lazy reads of one
tensor that cost its bytes only; sharded checkpoints in one batch; malformed files refused
by name, never read past the value."""

from __future__ import annotations

import json
import struct
import urllib.request
import uuid

import numpy as np
import pytest
import rasa_client
from conftest import FAST, metric, requests_to
from rasa_client import safetensors as rst
from safetensors.numpy import save

NUMPY_DTYPES = ["bool", "uint8", "int8", "uint16", "int16", "float16", "uint32", "int32",
                "float32", "uint64", "int64", "float64"]


def tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """One tensor of every dtype numpy can hold, of assorted shapes (a scalar, an empty one)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i, dt in enumerate(NUMPY_DTYPES):
        shape = [(3, 5), (7,), (2, 3, 4), (64, 33)][i % 4]
        out[f"t.{dt}"] = (rng.integers(0, 2, shape) if dt == "bool" else rng.integers(0, 100, shape)).astype(dt)
    out["scalar"] = np.array(3.5, dtype=np.float32)
    out["empty"] = np.zeros((0, 4), dtype=np.float32)
    return out


@pytest.fixture
def client(gateway):
    with rasa_client.Client(gateway.url) as c:
        yield c


def owner(a: np.ndarray) -> object:
    """What owns an array's memory, down its chain of views."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def served(url: str) -> float:
    """Bytes of values the gateway has served over HTTP."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("rasa_http_bytes_served_total "):
                return float(line.split()[1])
    return 0.0


def key(name: str) -> str:
    return f"weights/{uuid.uuid4().hex}/{name}"


def test_load_gives_every_dtype_exactly_as_views_of_one_registered_buffer(client):
    want = tensors()
    k = key("model.safetensors")
    client.put(k, save(want, metadata={"format": "np"}))
    got = rst.load(client, k)
    assert set(got) == set(want)
    for name, a in want.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape, name
        assert np.array_equal(got[name], a), name
    # Views, no copies: every tensor's memory is the one registered buffer.
    owners = {id(owner(t)): owner(t) for t in got.values()}
    assert len(owners) == 1 and isinstance(next(iter(owners.values())), rasa_client.RegisteredBuffer)
    # rasa:// URLs name keys too; a caller's registered buffer is used as given.
    buf = client.register(1 << 20)
    again = rst.load(client, f"rasa://{k}", into=buf)
    assert np.array_equal(again["t.int64"], want["t.int64"])
    assert np.shares_memory(again["t.int64"], np.frombuffer(buf, dtype=np.uint8))


def test_safe_open_reads_one_tensor_by_its_bytes_only(client, gateway):
    want = {f"layer{i}": np.full((256, 1024), i, dtype=np.float32) for i in range(8)}  # 1 MiB each
    k = key("lazy.safetensors")
    client.put(k, save(want, metadata={"n": "8"}))
    c = rasa_client.Client(gateway.url, fast_path="off")  # reads counted at the gateway
    before = served(gateway.url)
    with rst.safe_open(c, k) as f:
        assert f.keys() == [f"layer{i}" for i in range(8)]
        assert f.metadata() == {"n": "8"}
        assert np.array_equal(f.get_tensor("layer5"), want["layer5"])
        s = f.get_slice("layer3")
        assert s.get_shape() == [256, 1024] and s.get_dtype() == "F32"
        assert np.array_equal(s[10:20], want["layer3"][10:20])
        assert np.array_equal(s[10:20, 5], want["layer3"][10:20, 5])
    sent = served(gateway.url) - before
    # The header, one tensor (1 MiB) and ten rows (40 KiB) twice: not the file's 8 MiB.
    tensor_bytes = (1 << 20) + 2 * 10 * 1024 * 4
    assert tensor_bytes < sent < tensor_bytes + 4096, sent
    c.close()


def test_load_index_reads_every_shard_in_one_batch(client, gateway):
    base = key("ckpt")
    shards = {f"model-0000{i}-of-00004.safetensors": tensors(seed=i) for i in range(1, 5)}
    weight_map = {}
    for fname, ts in shards.items():
        ts = {f"{fname}/{n}": a for n, a in ts.items()}
        client.put(f"{base}/{fname}", save(ts))
        weight_map.update({n: fname for n in ts})
    client.put(f"{base}/model.safetensors.index.json", json.dumps({"weight_map": weight_map}).encode())
    batches = requests_to(gateway.url, "/v1/descriptors")
    got = rst.load_index(client, f"{base}/model.safetensors.index.json")
    assert requests_to(gateway.url, "/v1/descriptors") - batches <= 1
    assert set(got) == set(weight_map)
    for fname, ts in shards.items():
        for n, a in ts.items():
            assert np.array_equal(got[f"{fname}/{n}"], a)
    one = rst.load_index(client, f"{base}/model.safetensors.index.json", shards=["model-00002-of-00004.safetensors"])
    assert {weight_map[n] for n in one} == {"model-00002-of-00004.safetensors"}


def malformed(header: dict | bytes, data: bytes, claim: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if claim is None else claim) + raw + data


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (malformed({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8), "outside the data"),
        (
            malformed(
                {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                 "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}},
                b"\0" * 24,
            ),
            "overlap",
        ),
        (malformed({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16, claim=1 << 40), "header claims"),
        (malformed({"a": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}, b"\0" * 16), "needs 20 bytes"),
        (malformed({"a": {"dtype": "Q7", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16), "unknown dtype"),
        (malformed(b"{not json", b""), "not JSON"),
        (b"\x01\x02", "too short"),
        # Review III, finding 6: hostile headers that raised other errors, or took 25 s.
        (malformed(b"[" * 100_000 + b"]" * 100_000, b""), "nests deeper"),
        (malformed(b'{"a": {"dtype": "U8", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 0]}}', b""), "not JSON"),
        (malformed({"a": {"dtype": "U8", "shape": [2**64, 0], "data_offsets": [0, 0]}}, b""), "bad shape"),
        (malformed({"a": {"dtype": "U8", "shape": [True, 8], "data_offsets": [0, 8]}}, b"\0" * 8), "bad shape"),
        (malformed({"a": {"dtype": "U8", "shape": [8], "data_offsets": [False, 8]}}, b"\0" * 8), "offsets"),
        (malformed({"a": {"dtype": ["U8"], "shape": [8], "data_offsets": [0, 8]}}, b"\0" * 8), "unknown dtype"),
        (malformed({"a": {"dtype": "U8", "shape": [2**40, 2**40], "data_offsets": [0, 0]}}, b""), "bad shape"),
        (malformed({f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(100_001)}, b""), "more than 100000 tensors"),
    ],
    ids=lambda v: v if isinstance(v, str) else "value",
)
def test_a_malformed_file_is_refused_by_name(client, value, says):
    """Every malformed header is a ``SafetensorsError`` naming what is wrong (never
    another exception), refused before its tensors are made."""
    k = key("bad.safetensors")
    client.put(k, value)
    with pytest.raises(rst.SafetensorsError, match=says):
        rst.load(client, k)
    with pytest.raises(rst.SafetensorsError, match=says):
        rst.safe_open(client, k)


def test_bfloat16_needs_torch_or_ml_dtypes(client):
    raw = malformed({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, b"\x80\x3f\x00\x40")
    k = key("bf16.safetensors")
    client.put(k, raw)
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        with pytest.raises(rst.SafetensorsError, match="framework='torch'"):
            rst.load(client, k)
    else:
        assert rst.load(client, k)["w"].astype(np.float32).tolist() == [1.0, 2.0]


def test_a_checkpoint_read_through_from_s3_is_fetched_once(own_gateway, s3_origin):
    """A cold load fetches the file from the origin once, streamed into memory; the second
    load is a hit (no second fetch), and ``safe_open`` over it reads from memory too."""
    want = tensors(7)
    s3_origin.put("models/m/model.safetensors", save(want))
    gw = own_gateway(*FAST, *s3_origin.gateway_args("models"))
    with rasa_client.Client(gw.url, fast_path="required") as c:
        got = rst.load(c, "rasa://m/model.safetensors")
        assert metric(gw.url, "rasa_origin_fetches_total") == 1
        for name, a in want.items():
            assert np.array_equal(got[name], a), name
        again = rst.load(c, "m/model.safetensors")
        assert np.array_equal(again["t.float32"], want["t.float32"])
        with rst.safe_open(c, "rasa://m/model.safetensors") as f:
            assert np.array_equal(f.get_tensor("t.uint8"), want["t.uint8"])
        assert metric(gw.url, "rasa_origin_fetches_total") == 1
        with pytest.raises(rasa_client.NotFound):
            rst.load(c, "m/absent.safetensors")
