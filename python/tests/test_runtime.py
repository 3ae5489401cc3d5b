"""The GIL, asyncio, fork, pickling, tokens, and failures that must raise in time."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

import rasa_client
from conftest import FAST, new_token


def key(name: str) -> str:
    return f"py/{uuid.uuid4().hex}/{name}"


def test_gil_released_during_large_get(client):
    k, size = key("big"), 64 << 20
    client.put(k, os.urandom(1 << 20) * 64)
    out = bytearray(size)
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        for _ in range(3):
            before = ticks
            assert client.get_into(k, out) == size
            during_into = ticks - before
            before = ticks
            assert len(client.get(k)) == size
            during_get = ticks - before
    finally:
        stop.set()
        t.join()
    # A thread holding the GIL for a whole call would leave the counter where it was
    # (give or take a switch interval); released, the counter runs all along.
    assert during_into > 10_000 and during_get > 10_000, (during_into, during_get)


def test_two_threads_overlap(gateway):
    c = rasa_client.Client(gateway.url, fast_path="off")
    k = key("t")
    c.put(k, b"x" * (8 << 20))
    spans = []

    def read():
        start = time.monotonic()
        for _ in range(5):
            c.get(k)
        spans.append((start, time.monotonic()))

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a0, a1), (b0, b1) = sorted(spans)
    assert b0 < a1, "the second thread started only after the first finished"


def test_asyncio_gather(gateway):
    async def main():
        async with rasa_client.AsyncClient(gateway.url, fast_path="required") as c:
            keys = [key(f"a{i}") for i in range(32)]
            await asyncio.gather(*(c.put(k, k.encode() * 100) for k in keys))
            objs = await asyncio.gather(*(c.get(k) for k in keys))
            assert [bytes(o) for o in objs] == [k.encode() * 100 for k in keys]
            assert {o.path for o in objs} == {"fabric"}
            buf = bytearray(10_000)
            assert await c.get_into(keys[0], buf) == len(keys[0]) * 100
            assert await c.exists(keys[1]) and not await c.exists(key("none"))
            with pytest.raises(rasa_client.NotFound):
                await c.get(key("none"))
            listed = [s.key async for s in c.iter_keys(keys[0])]
            assert listed == [keys[0]]
            got = await c.get_many([keys[2], key("none")])
            assert bytes(got[0]) == keys[2].encode() * 100 and got[1] is None

    asyncio.run(main())


def _child_reads(c: rasa_client.Client, k: str, expected: bytes) -> None:
    obj = c.get(k)
    assert bytes(obj) == expected, "wrong bytes in the child"
    assert obj.path == "fabric"
    c.put(k + "/child", b"from the child")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_client_in_child_process(client, method):
    k = key("fork")
    client.put(k, b"parent data")
    assert client.get(k).path == "fabric"  # the parent's endpoint is open before the fork
    ctx = multiprocessing.get_context(method)
    p = ctx.Process(target=_child_reads, args=(client, k, b"parent data"))
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 0, f"child ended with {p.exitcode}"
    assert bytes(client.get(k + "/child")) == b"from the child"
    assert client.get(k).path == "fabric"  # the parent's endpoint still works


def test_pickle_round_trip(gateway):
    c = rasa_client.Client(gateway.url, fast_path="off", timeout=7.5, token=None)
    c2 = pickle.loads(pickle.dumps(c))
    assert type(c2) is rasa_client.Client and repr(c2) == repr(c)
    assert c2._config() == c._config()
    k = key("p")
    c.put(k, b"v")
    assert bytes(c2.get(k)) == b"v"
    a = pickle.loads(pickle.dumps(rasa_client.AsyncClient(gateway.url)))
    assert type(a) is rasa_client.AsyncClient
    e = pickle.loads(pickle.dumps(rasa_client.BufferTooSmall("m", None, "c", "d", 5)))
    assert e.needed == 5


def test_tokens_and_scopes(own_gateway, tmp_token_file):
    reader = new_token(tmp_token_file, "reader", "read")
    writer = new_token(tmp_token_file, "writer", "read,write")
    gw = own_gateway("--token-file", str(tmp_token_file), *FAST)
    k = key("tok")
    rasa_client.Client(gw.url, token=writer).put(k, b"secret")
    r = rasa_client.Client(gw.url, token=reader, fast_path="required")
    assert bytes(r.get(k)) == b"secret"
    with pytest.raises(rasa_client.Forbidden) as e:
        r.put(k, b"nope")
    assert e.value.status == 403
    with pytest.raises(rasa_client.Unauthorized):
        rasa_client.Client(gw.url).get(k)
    with pytest.raises(rasa_client.Unauthorized):
        rasa_client.Client(gw.url, token="not-a-token").get(k)
    os.environ["RASA_ENDPOINT"], os.environ["RASA_TOKEN"] = gw.url, reader
    try:
        assert bytes(rasa_client.Client.from_env().get(k)) == b"secret"
    finally:
        del os.environ["RASA_ENDPOINT"], os.environ["RASA_TOKEN"]


def test_reads_over_shm_are_one_sided_and_exact(own_gateway):
    """On libfabric's ``shm`` (the same host), reads are one-sided — the reader copies
    from the gateway's memory itself — and byte for byte, into bytes and into a buffer."""
    gw = own_gateway("--fast-path", "on", "--fabric-provider", "shm")
    c = rasa_client.Client(gw.url, fast_path="required")
    value = os.urandom(3 << 20)
    c.put("shm/v", value)
    assert bytes(c.get("shm/v")) == value
    out = bytearray(len(value))
    assert c.get_into("shm/v", out) == len(value)
    assert out == value
    assert c.stats()["fabric_reads"] >= 2
    assert c.stats()["fabric_provider"] == "shm"
    assert c.stats()["cluster_members"] == []  # a single gateway: no member list


def test_a_gateway_with_shm_and_tcp_serves_this_host_over_shm_unless_asked(own_gateway):
    """With ``--fabric-provider 'tcp;ofi_rxm,shm'`` a client on the gateway's host reads
    over shm by itself; ``fabric_provider=`` makes another read over tcp; both exact."""
    gw = own_gateway("--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm,shm")
    local = rasa_client.Client(gw.url, fast_path="required")
    remote = rasa_client.Client(gw.url, fast_path="required", fabric_provider="tcp;ofi_rxm")
    value = os.urandom(1 << 20)
    local.put("two/v", value)
    out = bytearray(len(value))
    for c in (local, remote):
        assert bytes(c.get("two/v")) == value
        assert c.get_into("two/v", out) == len(value) and out == value
    assert local.stats()["fabric_provider"] == "shm"
    assert remote.stats()["fabric_provider"] == "tcp;ofi_rxm"
    nowhere = rasa_client.Client(gw.url, fast_path="required", fabric_provider="efa")
    with pytest.raises(rasa_client.FastPathUnavailable, match="no efa endpoint"):
        nowhere.get("two/v")


def test_a_client_of_a_namespace_sees_only_its_keys(own_gateway, tmp_token_file):
    """``namespace=`` sends a client's requests to ``/v1/ns/{ns}/…``: the same key names
    another value in each namespace, reads are one-sided, and a token of one namespace is
    refused in another (``Forbidden``)."""
    ns_file = tmp_token_file.with_name("namespaces")
    ns_file.write_text("alpha 16MiB\nbravo 16MiB\n")
    alpha = new_token(tmp_token_file, "alpha", "alpha:read,alpha:write")
    bravo = new_token(tmp_token_file, "bravo", "bravo:read,bravo:write")
    gw = own_gateway(
        "--token-file", str(tmp_token_file), "--namespaces", str(ns_file),
        "--memory", "64MiB", "--max-object-size", "8MiB", *FAST,
    )
    a = rasa_client.Client(gw.url, token=alpha, namespace="alpha", fast_path="required")
    b = rasa_client.Client(gw.url, token=bravo, namespace="bravo", fast_path="required")
    a.put("same/key", b"alpha's")
    b.put("same/key", b"bravo's")
    assert bytes(a.get("same/key")) == b"alpha's"
    assert bytes(b.get("same/key")) == b"bravo's"
    assert [o.key for o in a.list("same/")] == ["same/key"]
    intruder = rasa_client.Client(gw.url, token=alpha, namespace="bravo")
    with pytest.raises(rasa_client.Forbidden):
        intruder.get("same/key")
    assert pickle.loads(pickle.dumps(a)).get("same/key") == b"alpha's"
    with pytest.raises(rasa_client.ConfigError):
        rasa_client.Client(gw.url, namespace="Not A Name")


@pytest.mark.parametrize("endpoint", ["localhost:1234", "not a url", "ftp://h:1", ""])
def test_a_bad_endpoint_is_refused_by_the_constructor(endpoint):
    """Not at the first call, as a builder error: at once, saying what an endpoint is."""
    for cls in (rasa_client.Client, rasa_client.AsyncClient):
        with pytest.raises(rasa_client.ConfigError) as e:
            cls(endpoint)
        assert "http://" in str(e.value) or "no endpoint" in str(e.value)


def test_an_unreachable_gateway_says_why():
    """The root cause is in the message ("Connection refused"), not only "error sending
    request"."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there once closed
    c = rasa_client.Client(f"http://127.0.0.1:{port}", discover_cluster=False)
    with pytest.raises(rasa_client.Unreachable) as e:
        c.head("k")
    assert "connection refused" in str(e.value).lower(), str(e.value)


def test_stopped_gateway_raises_within_timeout(own_gateway):
    gw = own_gateway(*FAST)
    c = rasa_client.Client(gw.url, timeout=2, connect_timeout=1)
    k = key("gone")
    c.put(k, b"v")
    assert bytes(c.get(k)) == b"v"
    gw.stop()
    start = time.monotonic()
    with pytest.raises(rasa_client.RasaError) as e:
        c.get(k)
    assert time.monotonic() - start < 10
    assert isinstance(e.value, (rasa_client.Unreachable, rasa_client.Timeout)), repr(e.value)


@pytest.fixture
def silent_server():
    """A port that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()


def test_silent_gateway_times_out(silent_server):
    c = rasa_client.Client(silent_server, timeout=1, discover_cluster=False)
    start = time.monotonic()
    with pytest.raises(rasa_client.Timeout) as e:
        c.head("k")
    assert 0.9 < time.monotonic() - start < 5
    assert isinstance(e.value, TimeoutError) and "timeout" in str(e.value).lower()
    # Named as a Python user sets it, not as the Rust builder does.
    assert "timeout=" in str(e.value) and "ClientBuilder" not in str(e.value)


def test_ctrl_c_interrupts_a_blocking_call(silent_server):
    c = rasa_client.Client(silent_server, timeout=60, discover_cluster=False)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        c.get("k")
    assert time.monotonic() - start < 5
    timer.join()


def test_extension_does_not_link_libfabric():
    # libfabric is loaded at run time from the system (EFA's build on AWS), never bundled
    # nor linked: the extension's needed libraries must not name it.
    ext = rasa_client._native.__file__
    needed = subprocess.run(["ldd", ext], capture_output=True, text=True, check=True).stdout
    assert "libfabric" not in needed and "libpython" not in needed, needed


def test_versions_conditional_puts_ranges_into_and_the_many_helpers(own_gateway):
    """``get(version=)`` reads an older version one-sided; ``put(if_match=/if_none_match=)``
    stores only when the condition holds (``PreconditionFailed`` and nothing changed
    otherwise); ``get_range_into`` fills the front of a buffer; ``put_many``,
    ``exists_many`` and ``delete_many`` do what they say, also on ``AsyncClient``."""
    gw = own_gateway(*FAST)
    c = rasa_client.Client(gw.url, fast_path="required")
    d1 = c.put("v/doc", b"first version")
    d2 = c.put("v/doc", b"second version")
    old = c.get("v/doc", version=d1.version)
    assert bytes(old) == b"first version" and old.path == "fabric"
    assert bytes(c.get("v/doc")) == b"second version"
    with pytest.raises(rasa_client.NotFound):
        c.get("v/doc", version="00000000000000ff")

    with pytest.raises(rasa_client.PreconditionFailed):
        c.put("v/doc", b"lost", if_match=d1.sha256)
    assert bytes(c.get("v/doc")) == b"second version"
    c.put("v/doc", b"won", if_match=d2.sha256)
    assert bytes(c.get("v/doc")) == b"won"
    with pytest.raises(rasa_client.PreconditionFailed):
        c.put("v/doc", b"again", if_none_match="*")
    c.put("v/new", b"created", if_none_match="*")
    with pytest.raises(ValueError, match="only"):
        c.put("v/doc", b"x", if_none_match=d2.sha256)
    with pytest.raises(ValueError, match="not both"):
        c.put("v/doc", b"x", if_match=d2.sha256, if_none_match="*")

    value = os.urandom(300_000)
    c.put("v/big", value)
    out = bytearray(100_000)
    assert c.get_range_into("v/big", 1000, 101_000, out) == 100_000
    assert out == value[1000:101_000]
    with pytest.raises(rasa_client.BufferTooSmall):
        c.get_range_into("v/big", 0, 200_000, out)

    items = {f"v/many/{i}": bytes([i]) * (i + 1) for i in range(5)}
    ds = c.put_many(items)
    assert [d.key for d in ds] == list(items)
    assert c.exists_many([*items, "v/many/none"]) == [True] * 5 + [False]
    c.delete_many(list(items)[:2])
    assert c.exists_many(items) == [False, False, True, True, True]

    async def run_async():
        a = rasa_client.AsyncClient(gw.url)
        await a.put_many([("v/a/1", b"one"), ("v/a/2", b"two")])
        assert await a.exists_many(["v/a/1", "v/a/2", "v/a/3"]) == [True, True, False]
        await a.delete_many(["v/a/1", "v/a/2"])
        assert await a.exists_many(["v/a/1", "v/a/2"]) == [False, False]
        old = await a.get("v/doc", version=d2.version)
        assert bytes(old) == b"second version"

    asyncio.run(run_async())
