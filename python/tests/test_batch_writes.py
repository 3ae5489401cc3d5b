"""Batch writes (issue 46): ``put_many`` and ``delete_many`` send one request per batch —
not one per value — on ``Client`` and ``AsyncClient``; a refused value is raised with
every item's result while the others are stored."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest

import rasa_client

from conftest import metric, requests_to


def blocks(n: int, size: int) -> dict[str, bytes]:
    prefix = uuid.uuid4().hex
    rng = np.random.default_rng(n)
    return {f"kv/{prefix}/{i}": rng.integers(0, 256, size, dtype=np.uint8).tobytes() for i in range(n)}


def test_put_many_of_256_blocks_is_four_requests(gateway):
    items = blocks(256, 64 << 10)
    puts, singles = requests_to(gateway.url, "/v1/batch/put"), requests_to(gateway.url, "/v1/objects/{*key}")
    # Written as an HTTP batch (the default client writes one-sided: the next test).
    with rasa_client.Client(gateway.url, fast_path="off") as w, rasa_client.Client(gateway.url) as c:
        ds = w.put_many(items)
        # 16 MiB in four batches of 64 values, in flight together; none a value.
        assert requests_to(gateway.url, "/v1/batch/put") - puts == 4
        assert [d.key for d in ds] == list(items)
        assert all(d.length == 64 << 10 for d in ds)
        for k in list(items)[::51]:
            assert bytes(c.get(k)) == items[k]
        checks = requests_to(gateway.url, "/v1/batch/exists")
        assert c.exists_many([*items, "kv/none"]) == [True] * 256 + [False]
        assert requests_to(gateway.url, "/v1/batch/exists") - checks == 1
        deletes = requests_to(gateway.url, "/v1/batch/delete")
        c.delete_many(items)
        assert requests_to(gateway.url, "/v1/batch/delete") - deletes == 1
        assert c.exists_many(list(items)[:3]) == [False] * 3
        with pytest.raises(rasa_client.InvalidRequest) as bad:
            c.exists_many(["kv/a", "kv/./b"])
        assert bad.value.results[0] is False
    # No single-key request was made for any of it (reads go one-sided or as batches).
    assert requests_to(gateway.url, "/v1/objects/{*key}") - singles <= 4


def test_the_default_client_writes_one_sided_and_no_value_crosses_http(gateway):
    """Issue 63: with the fast path on, ``put_many`` and a large ``put`` write the values
    one-sided into gateway memory (a region reserved, written, committed: two small
    requests a batch, four batches of 64 for 256 blocks; no value in an HTTP body); they
    read back byte-exact over HTTP with their SHA-256 entity tag. A small ``put`` still
    goes as one PUT."""
    import hashlib
    import urllib.request

    items = blocks(256, 64 << 10)
    before = {r: requests_to(gateway.url, r) for r in ("/v1/batch/put", "/v1/batch/reserve", "/v1/batch/commit/{upload}", "/v1/objects/{*key}")}
    with rasa_client.Client(gateway.url) as c:
        ds = c.put_many(items)
        assert [d.key for d in ds] == list(items)
        big = np.random.default_rng(5).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
        key = f"{next(iter(items))}-big"
        assert c.put(key, big).length == len(big)
        c.put(f"{key}-small", b"small")
        stats = c.stats()
        assert stats["fabric_writes"] == 257 and stats["http_writes"] == 1, stats
        for k in [*list(items)[::64], key]:
            want = items.get(k, big)
            with urllib.request.urlopen(f"{gateway.url}/v1/objects/{k}") as r:
                assert r.read() == want
                assert r.headers["ETag"] == f'"{hashlib.sha256(want).hexdigest()}"'
            assert bytes(c.get(k)) == want
    delta = {r: requests_to(gateway.url, r) - n for r, n in before.items()}
    assert delta["/v1/batch/put"] == 0, delta
    assert delta["/v1/batch/reserve"] == 5 and delta["/v1/batch/commit/{upload}"] == 5, delta


def test_async_put_many_is_one_request(gateway):
    items = blocks(64, 4096)

    async def main() -> None:
        a = rasa_client.AsyncClient(gateway.url, fast_path="off")
        before = requests_to(gateway.url, "/v1/batch/put")
        ds = await a.put_many(list(items.items()))
        assert requests_to(gateway.url, "/v1/batch/put") - before == 1
        assert [d.key for d in ds] == list(items)
        await a.delete_many(list(items))
        assert await a.exists_many(list(items)[:2]) == [False, False]

    asyncio.run(main())


def test_a_refused_value_is_raised_with_every_result_and_the_others_are_stored(own_gateway):
    gw = own_gateway("--max-object-size", "4KiB")
    prefix = uuid.uuid4().hex
    items = [(f"{prefix}/a", b"a" * 10), (f"{prefix}/big", b"b" * 5000), (f"{prefix}/c", b"c")]
    with rasa_client.Client(gw.url) as c:
        with pytest.raises(rasa_client.PayloadTooLarge) as e:
            c.put_many(items)
        results = e.value.results
        assert isinstance(results[0], rasa_client.Descriptor) and isinstance(results[2], rasa_client.Descriptor)
        assert isinstance(results[1], rasa_client.PayloadTooLarge)
        assert "1 of 3 items were not stored" in "".join(getattr(e.value, "__notes__", []))
        assert bytes(c.get(f"{prefix}/a")) == b"a" * 10 and bytes(c.get(f"{prefix}/c")) == b"c"
        assert not c.exists(f"{prefix}/big")


def test_lease_puts_off_takes_no_lease(gateway):
    """A write takes no lease unless the caller asks for a descriptor to read one-sided
    (``lease_puts=True``): by default, fast path on or off, its memory is never held for
    it."""
    items = blocks(4, 4096)
    with rasa_client.Client(gateway.url, fast_path="auto") as c:
        assert all(d.lease_ms == 0 for d in c.put_many(items))
        assert c.put("kv/nolease/one", b"x").lease_ms == 0
    with rasa_client.Client(gateway.url, lease_puts=True) as c:
        assert all(d.lease_ms > 0 for d in c.put_many(items))
        assert c._config()["lease_puts"] is True


def test_the_default_client_never_stalls_when_memory_turns_over_within_a_lease(own_gateway):
    """Issue 63: rounds of writes that turn ``--memory`` over many times within one lease.
    With every PUT leased (the old default) a round waited out the leases (10 s of
    ``--lease``) with no error; the default client takes no lease, so no round waits."""
    import time

    gw = own_gateway(
        "--memory", "48MiB", "--arena-size", "4MiB", "--max-object-size", "8MiB", "--lease", "10s"
    )
    value = b"v" * (1 << 20)
    with rasa_client.Client(gw.url, fast_path="auto") as c:
        took = []
        for r in range(12):  # 12 × 16 MiB: the memory four times over
            started = time.monotonic()
            c.put_many([(f"turn/{r}/{i}", value) for i in range(16)])
            took.append(time.monotonic() - started)
    assert max(took) < 5.0, f"a round waited for leases: {[round(t, 2) for t in took]}"
    assert sorted(took)[len(took) // 2] * 3 + 0.5 > max(took), took


def test_a_write_that_waits_for_leases_it_asked_for_says_so_in_the_metrics(own_gateway):
    """A writer that asks for leases (``lease_puts=True``) and outruns them waits for
    reclamation: ``/metrics`` counts each wait (``rasa_room_waits_total``) and its length
    (``rasa_room_wait_seconds``), so a slowed writer can see why."""
    gw = own_gateway(
        "--memory", "16MiB", "--arena-size", "4MiB", "--max-object-size", "4MiB", "--lease", "1s"
    )
    value = b"w" * (1 << 20)
    with rasa_client.Client(gw.url, lease_puts=True) as c:
        for r in range(4):  # 4 × 8 MiB into 16 MiB, each value leased for a second
            c.put_many([(f"leased/{r}/{i}", value) for i in range(8)])
    assert metric(gw.url, 'rasa_room_waits_total{outcome="room"}') >= 1
    assert metric(gw.url, "rasa_room_wait_seconds_count") >= 1


def test_put_file_and_get_file_stream_a_1_gib_file_in_bounded_memory(own_gateway, tmp_path):
    """A 1 GiB file goes up and comes back byte-exact; the process's peak memory grows by
    far less than the file (streamed, never held whole)."""
    import hashlib
    import resource

    src, dst = tmp_path / "big.bin", tmp_path / "back.bin"
    block = np.random.default_rng(9).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    digest = hashlib.sha256()
    with open(src, "wb") as f:
        for i in range(1024):
            piece = block[i:] + block[:i]
            f.write(piece)
            digest.update(piece)
    gateway = own_gateway("--memory", "1280MiB", "--max-object-size", "1GiB")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    key = f"files/{uuid.uuid4().hex}"
    with rasa_client.Client(gateway.url, fast_path="off", timeout=120) as c:
        d = c.put_file(key, src, content_type="application/octet-stream")
        assert d.length == 1 << 30
        assert c.get_file(key, dst) == 1 << 30
        c.delete(key)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - peak
    assert grown < 256 << 20, f"peak memory grew by {grown >> 20} MiB for a 1 GiB file"
    back = hashlib.sha256()
    with open(dst, "rb") as f:
        while piece := f.read(16 << 20):
            back.update(piece)
    assert back.digest() == digest.digest()
    with pytest.raises(rasa_client.NotFound):
        c2 = rasa_client.Client(gateway.url)
        c2.get_file(key, tmp_path / "never.bin")
    assert not (tmp_path / "never.bin").exists()


def test_put_takes_text_paths_and_file_objects(gateway, tmp_path):
    """``put`` of a ``str`` stores its UTF-8; of a path or a regular file at its start,
    the file streamed from disk; of another file object, what is left of it."""
    import io
    import pathlib

    path = tmp_path / "w.bin"
    path.write_bytes(b"weights" * 1000)
    k = f"kinds/{uuid.uuid4().hex}"
    with rasa_client.Client(gateway.url) as c:
        c.put(f"{k}/text", "héllo")
        assert bytes(c.get(f"{k}/text")) == "héllo".encode()
        c.put(f"{k}/path", pathlib.Path(path), content_type="application/octet-stream")
        assert bytes(c.get(f"{k}/path")) == path.read_bytes()
        with open(path, "rb") as f:
            c.put(f"{k}/file", f)
        assert bytes(c.get(f"{k}/file")) == path.read_bytes()
        stream = io.BytesIO(b"0123456789")
        stream.read(4)
        c.put(f"{k}/rest", stream)
        assert bytes(c.get(f"{k}/rest")) == b"456789"
        with pytest.raises(TypeError, match="in memory"):
            c.put(f"{k}/path", pathlib.Path(path), if_none_match="*")
        assert c.head(f"{k}/path").content_type == "application/octet-stream"

    async def main() -> None:
        a = rasa_client.AsyncClient(gateway.url)
        await a.put(f"{k}/async", "ünïcode")
        await a.put(f"{k}/async-path", pathlib.Path(path))
        assert bytes(await a.get(f"{k}/async")) == "ünïcode".encode()
        assert bytes(await a.get(f"{k}/async-path")) == path.read_bytes()

    asyncio.run(main())
