"""Round trips, reads into caller memory, batches and the other calls, one-sided and over
HTTP, against the real gateway."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

import rasa_client
from rasa_client import BufferTooSmall, NotFound

SIZES = [0, 1, 4096, (1 << 20) + 3]


def key(name: str) -> str:
    return f"py/{uuid.uuid4().hex}/{name}"


def payload(n: int) -> bytes:
    return np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("fast_path", "path"), [("required", "fabric"), ("off", "http")])
def test_round_trip(gateway, size, fast_path, path):
    with rasa_client.Client(gateway.url, fast_path=fast_path) as c:
        k, data = key("v"), payload(size)
        d = c.put(k, data, content_type="application/x-test")
        assert (d.key, d.length) == (k, size)
        before = c.stats()[f"{path}_reads"]
        obj = c.get(k)
        assert bytes(obj) == data and len(obj) == size
        assert obj.path == path
        assert obj.version == d.version and obj.sha256 == d.sha256
        assert obj.content_type == "application/x-test"
        assert c.stats()[f"{path}_reads"] == before + 1
        assert memoryview(obj).readonly and memoryview(obj).nbytes == size


def test_object_buffer_is_zero_copy(client):
    k = key("z")
    client.put(k, b"abcdef")
    obj = client.get(k)
    a, b = memoryview(obj), memoryview(obj)
    assert np.frombuffer(obj, dtype=np.uint8).tobytes() == b"abcdef"
    # Two views of one object share its memory: nothing was copied for either.
    addr = lambda m: np.frombuffer(m, dtype=np.uint8).__array_interface__["data"][0]  # noqa: E731
    assert addr(a) == addr(b)
    with pytest.raises(ValueError):  # read-only: the SDK's bytes cannot be changed
        np.frombuffer(obj, dtype=np.uint8).setflags(write=True)
    with pytest.raises(TypeError, match="read-only"):
        memoryview(obj)[0] = 1


@pytest.mark.parametrize("fast_path", ["required", "off"])
def test_get_into_buffers(gateway, fast_path):
    c = rasa_client.Client(gateway.url, fast_path=fast_path)
    k, data = key("into"), payload(70_000)
    c.put(k, data)

    ba = bytearray(len(data))
    assert c.get_into(k, ba) == len(data) and bytes(ba) == data

    arr = np.zeros(len(data) // 4 + 1, dtype=np.float32)  # any dtype: bytes are bytes
    assert c.get_into(k, arr) == len(data)
    assert arr.view(np.uint8)[: len(data)].tobytes() == data

    big = bytearray(b"\xee" * (len(data) + 100))
    view = memoryview(big)[50:]  # a slice: the value lands at offset 50 of `big`
    assert c.get_into(k, view) == len(data)
    assert big[:50] == b"\xee" * 50 and bytes(big[50 : 50 + len(data)]) == data
    assert big[50 + len(data) :] == b"\xee" * 50


@pytest.mark.parametrize(("fast_path", "path", "copies"), [("required", "fabric", 0), ("off", "http", 1)])
def test_get_into_a_registered_buffer(gateway, fast_path, path, copies):
    with rasa_client.Client(gateway.url, fast_path=fast_path) as c:
        buf = c.register(1 << 20)
        assert isinstance(buf, rasa_client.RegisteredBuffer) and len(buf) == 1 << 20
        view = np.frombuffer(buf, dtype=np.uint8)  # shares the buffer's memory
        for size in [1, 4096, 1 << 20, 7]:
            k, data = key("r"), payload(size)
            c.put(k, data)
            before = c.stats()
            assert c.get_into(k, buf) == size
            assert view[:size].tobytes() == data
            after = c.stats()
            assert after[f"{path}_reads"] == before[f"{path}_reads"] + 1
            assert after["bytes_copied"] - before["bytes_copied"] == copies * size
        k = key("big")
        c.put(k, payload((1 << 20) + 1))
        with pytest.raises(BufferTooSmall):
            c.get_into(k, buf)
        if path == "fabric":
            assert buf.registrations == 1  # one endpoint read into it, read after read


@pytest.mark.parametrize("fast_path", ["required", "off"])
def test_get_into_refuses_bad_buffers(gateway, fast_path):
    c = rasa_client.Client(gateway.url, fast_path=fast_path)
    k = key("bad")
    c.put(k, b"x" * 1000)
    small = bytearray(999)
    with pytest.raises(BufferTooSmall) as e:
        c.get_into(k, small)
    assert e.value.needed == 1000 and isinstance(e.value, ValueError)
    assert small == bytearray(999), "nothing written into a buffer too small"
    with pytest.raises(TypeError, match="read-only"):
        c.get_into(k, b"\0" * 2000)
    with pytest.raises(TypeError, match="read-only"):
        c.get_into(k, memoryview(bytearray(2000)).toreadonly())
    with pytest.raises(ValueError, match="contiguous"):
        c.get_into(k, np.zeros(4000, dtype=np.uint8)[::2])
    with pytest.raises(TypeError, match="bytes-like"):
        c.get_into(k, [0] * 2000)


@pytest.mark.parametrize("fast_path", ["required", "off"])
def test_get_many_into_with_misses(gateway, fast_path):
    c = rasa_client.Client(gateway.url, fast_path=fast_path)
    keys = [key(f"m{i}") for i in range(5)]
    values = {k: payload(100 * (i + 1)) for i, k in enumerate(keys) if i != 2}
    for k, v in values.items():
        c.put(k, v)
    # One buffer, a region per key.
    offsets = [0, 100, 300, 600, 1000]
    buf = np.zeros(2000, dtype=np.uint8)
    got = c.get_many_into(keys, buf, offsets=offsets)
    assert got == [100, 200, None, 400, 500]
    for k, off, n in zip(keys, offsets, got):
        if n is not None:
            assert buf[off : off + n].tobytes() == values[k]
    # A buffer per key; one too small gives its exception, in place.
    outs = [bytearray(100), bytearray(200), bytearray(10), bytearray(10), bytearray(500)]
    got = c.get_many_into(keys, outs)
    assert got[:3] == [100, 200, None] and got[4] == 500
    assert isinstance(got[3], BufferTooSmall) and got[3].needed == 400
    assert bytes(outs[4]) == values[keys[4]]
    with pytest.raises(ValueError, match="offsets"):
        c.get_many_into(keys, bytearray(10))
    with pytest.raises(ValueError, match="non-decreasing"):
        c.get_many_into(keys[:2], bytearray(10), offsets=[5, 1])
    shared = bytearray(1000)
    with pytest.raises(ValueError, match="share memory"):
        c.get_many_into(keys[:2], [shared, memoryview(shared)[10:]])


def test_get_many(client):
    keys = [key("a"), key("missing"), key("b")]
    client.put(keys[0], b"A")
    client.put(keys[2], b"BB")
    got = client.get_many(keys)
    assert [None if o is None else bytes(o) for o in got] == [b"A", None, b"BB"]
    assert got[0].path == "fabric"


def test_metadata_listing_and_delete(client):
    prefix = key("ls") + "/"
    for i in range(5):
        client.put(f"{prefix}{i}", b"x" * i)
    assert [s.key for s in client.list(prefix).items] == [f"{prefix}{i}" for i in range(5)]
    page = client.list(prefix, limit=2)
    assert len(page) == 2 and page.next_after == f"{prefix}1"
    assert [s.length for s in client.iter_keys(prefix, page_size=2)] == [0, 1, 2, 3, 4]
    meta = client.head(f"{prefix}3")
    assert meta.length == 3 and meta.etag.strip('"') == client.resolve(f"{prefix}3").sha256
    assert bytes(client.get_range(f"{prefix}4", 1, 3)) == b"xx"
    assert client.exists(f"{prefix}2")
    client.delete(f"{prefix}2")
    assert not client.exists(f"{prefix}2")
    client.delete(f"{prefix}2")  # absent: no error
    with pytest.raises(NotFound) as e:
        client.get(f"{prefix}2")
    assert isinstance(e.value, KeyError)
    assert (e.value.status, e.value.code) == (404, "not_found")
    assert client.resolve(f"{prefix}1").one_sided


def test_invalid_input_raises(client):
    with pytest.raises(rasa_client.InvalidRequest) as e:
        client.put("", b"x")
    assert e.value.status == 400
    with pytest.raises(ValueError, match="fast_path"):
        rasa_client.Client("http://127.0.0.1:1", fast_path="sometimes")
    with pytest.raises(ValueError, match="timeout"):
        rasa_client.Client("http://127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError, match="before it starts"):
        client.get_range("k", 5, 1)


def test_closed_client_raises(gateway):
    c = rasa_client.Client(gateway.url)
    c.close()
    with pytest.raises(rasa_client.RasaError, match="closed"):
        c.get("k")


def test_readme_numpy_example(client):
    # The Python SDK guide's example: a KV cache of 32 blocks, read into one array's rows.
    prefix = key("kv")
    blocks = [np.full(4096, i, dtype=np.float16) for i in range(32)]
    for i, b in enumerate(blocks):
        if i != 7:  # block 7 is a miss
            client.put(f"{prefix}/block{i}", b)
    kv = np.empty((32, 4096), dtype=np.float16)
    assert client.get_into(f"{prefix}/block0", kv[0]) == kv[0].nbytes
    keys = [f"{prefix}/block{i}" for i in range(32)]
    got = client.get_many_into(keys, kv, offsets=[i * kv[0].nbytes for i in range(32)])
    assert got == [None if i == 7 else 8192 for i in range(32)]
    for i in range(32):
        if i != 7:
            assert (kv[i] == i).all()


@pytest.mark.parametrize("bad", ["a/../b", "a/./b", "../x", "./x", ".."])
def test_dot_segments_are_refused_before_sending(client, bad):
    # An HTTP URL layer would rewrite these (a/../b into b): refused as the gateway would.
    for call in (lambda: client.put(bad, b"x"), lambda: client.get(bad), lambda: client.delete(bad)):
        with pytest.raises(rasa_client.InvalidRequest) as e:
            call()
        assert e.value.code == "invalid_key" and e.value.status == 400


def test_keys_are_sent_exactly(client):
    base = key("exact")
    names = ["a%2Fb", "q?x=1", "h#f", "with space", "café/ü", "a//b", "...", "+&=;"]
    for i, name in enumerate(names):
        k = f"{base}/{name}"
        d = client.put(k, f"v{i}".encode())
        assert d.key == k
        assert bytes(client.get(k)) == f"v{i}".encode()
    listed = sorted(item.key for item in client.list(prefix=base + "/").items)
    assert listed == sorted(f"{base}/{n}" for n in names)
    with pytest.raises(NotFound):
        client.get(f"{base}/a/b")  # a%2Fb is a key of its own


def test_an_object_is_bytes_like(client):
    """An Object compares, slices, decodes, hashes and pickles as the bytes it holds, and
    names its key and ETag (what a pandas or multiprocessing user reaches for first)."""
    import pickle

    k = key("bytes-like")
    d = client.put(k, b"hello world", content_type="text/plain")
    o = client.get(k)
    assert o == b"hello world" and o != b"hello"
    assert o == bytearray(b"hello world") and o == memoryview(b"hello world")
    assert o == client.get(k)
    assert o[0:5] == b"hello" and o[-5:] == b"world" and o[::2] == b"hlowrd"
    assert o[0] == ord("h") and o[-1] == ord("d")
    assert o.decode() == "hello world" and o.decode("ascii") == "hello world"
    assert hash(o) == hash(b"hello world") and {o: 1}[b"hello world"] == 1
    assert (o.key, o.version, o.etag) == (k, d.version, f'"{d.sha256}"')
    back = pickle.loads(pickle.dumps(o))
    assert back == o and (back.key, back.version, back.sha256, back.content_type, back.path) == (
        o.key, o.version, o.sha256, o.content_type, o.path)
    assert k in repr(o)
    with pytest.raises(IndexError):
        o[11]
    assert [m.key for m in client.get_many([k])] == [k]
    assert client.get_range(k, 6, 11) == b"world"


def test_a_listing_page_is_a_sequence(client):
    prefix = key("page/")
    for i in range(3):
        client.put(f"{prefix}{i}", b"x" * i)
    page = client.list(prefix, limit=2)
    assert [s.key for s in page] == [f"{prefix}0", f"{prefix}1"]
    assert page[0].key == f"{prefix}0" and page[-1].key == f"{prefix}1"
    with pytest.raises(IndexError):
        page[2]
    assert repr(page) == f"<rasa_client.ObjectList 2 keys, next_after=\"{prefix}1\">"
    last = client.list(prefix, after=page.next_after)
    assert "next_after=None" in repr(last)


def test_an_over_limit_put_raises_what_the_gateway_said(own_gateway, tmp_path):
    """The gateway answers an over-limit PUT before the body has all arrived; the SDK
    raises that answer every time, never Unreachable (a broken pipe): 413 over
    --max-object-size, 507 over what the namespace can ever hold."""
    ns_file = tmp_path / "namespaces"
    ns_file.write_text("small 16MiB\n")
    gw = own_gateway("--memory", "256MiB", "--max-object-size", "1MiB",
                     "--namespaces", str(ns_file))
    c = rasa_client.Client(gw.url)
    for i in range(20):
        with pytest.raises(rasa_client.PayloadTooLarge):
            c.put(f"k{i}", b"x" * (2 << 20))
    gw = own_gateway("--memory", "256MiB", "--max-object-size", "64MiB",
                     "--namespaces", str(ns_file))
    c = rasa_client.Client(gw.url, namespace="small")
    for i in range(10):
        with pytest.raises(rasa_client.InsufficientStorage):
            c.put(f"k{i}", b"x" * (20 << 20))
    with pytest.raises(rasa_client.NotFound):
        c.get("k0")
