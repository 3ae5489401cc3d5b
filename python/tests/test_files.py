"""Files in and out of Python (issue 48): ``put_file`` and ``get_file`` streamed with
progress callbacks, ``get_file`` into file objects, and fsspec's ``put_file``/``get_file``
through them, against a real gateway."""

from __future__ import annotations

import asyncio
import io
import os
import uuid

import fsspec
import pytest
import rasa_client

SIZE = 24 << 20


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(SIZE))
    return path


def assert_progress(seen: list[int], size: int) -> None:
    """Reports go up, come about once a MiB, and end at the whole size."""
    assert seen, "progress was never told"
    assert seen == sorted(seen), seen
    assert seen[-1] == size, seen[-1]
    assert size // (2 << 20) <= len(seen) <= size // (1 << 20) + 2, len(seen)


def test_put_file_and_get_file_tell_their_progress(gateway, data_file, tmp_path):
    k = f"files/{uuid.uuid4().hex}"
    with rasa_client.Client(gateway.url) as c:
        up: list[int] = []
        assert c.put_file(k, data_file, progress=up.append).length == SIZE
        assert_progress(up, SIZE)
        down: list[int] = []
        assert c.get_file(k, str(tmp_path / "back.bin"), progress=down.append) == SIZE
        assert_progress(down, SIZE)
        assert (tmp_path / "back.bin").read_bytes() == data_file.read_bytes()


def test_get_file_writes_into_file_objects_from_where_they_stand(gateway, data_file, tmp_path):
    k = f"files/{uuid.uuid4().hex}"
    want = data_file.read_bytes()
    with rasa_client.Client(gateway.url) as c:
        c.put_file(k, data_file)
        buf = io.BytesIO()
        seen: list[int] = []
        assert c.get_file(k, buf, progress=seen.append) == SIZE
        assert buf.getvalue() == want
        assert_progress(seen, SIZE)
        with open(tmp_path / "out.bin", "wb") as f:
            f.write(b"head")
            assert c.get_file(k, f) == SIZE
        assert (tmp_path / "out.bin").read_bytes() == b"head" + want
        with pytest.raises(rasa_client.NotFound):
            c.get_file(f"{k}-missing", io.BytesIO())

        class Refuses(io.RawIOBase):
            def writable(self) -> bool:
                return True

            def write(self, b) -> int:
                raise OSError("disk full")

        with pytest.raises(rasa_client.RasaError, match="disk full"):
            c.get_file(k, Refuses())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # printed, as meant
def test_a_progress_callback_that_raises_does_not_stop_the_transfer(gateway, data_file, tmp_path):
    def broken(done: int) -> None:
        raise RuntimeError("a bug in the caller's progress bar")

    k = f"files/{uuid.uuid4().hex}"
    with rasa_client.Client(gateway.url) as c:
        assert c.put_file(k, data_file, progress=broken).length == SIZE
        assert c.get_file(k, tmp_path / "b.bin", progress=broken) == SIZE
    assert (tmp_path / "b.bin").read_bytes() == data_file.read_bytes()


def test_async_put_file_and_get_file(gateway, data_file, tmp_path):
    k = f"files/{uuid.uuid4().hex}"

    async def main() -> None:
        a = rasa_client.AsyncClient(gateway.url)
        up: list[int] = []
        d = await a.put_file(k, str(data_file), progress=up.append)
        assert d.length == SIZE
        assert_progress(up, SIZE)
        buf = io.BytesIO()
        assert await a.get_file(k, buf) == SIZE
        assert buf.getvalue() == data_file.read_bytes()
        assert await a.get_file(k, tmp_path / "a.bin") == SIZE
        with open(data_file, "rb") as f:  # a file object on a regular file: streamed
            assert (await a.put_file(f"{k}/f", f)).length == SIZE

    asyncio.run(main())
    assert (tmp_path / "a.bin").read_bytes() == data_file.read_bytes()


def test_fsspec_put_file_and_get_file_stream_with_callbacks(gateway, data_file, tmp_path):
    fs = fsspec.filesystem("rasa", endpoint=gateway.url, skip_instance_cache=True)
    k = f"rasa://files/{uuid.uuid4().hex}/w.bin"

    class Seen(fsspec.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.values: list[int] = []

        def call(self, *args, **kwargs) -> None:
            self.values.append(self.value)

    up = Seen()
    fs.put_file(str(data_file), k, callback=up)
    assert up.size == SIZE and up.values[-1] == SIZE
    down = Seen()
    fs.get_file(k, str(tmp_path / "g.bin"), callback=down)
    assert down.size == SIZE and down.values[-1] == SIZE
    assert (tmp_path / "g.bin").read_bytes() == data_file.read_bytes()
    with pytest.raises(FileNotFoundError):
        fs.get_file(k + ".missing", str(tmp_path / "never.bin"))
    assert not (tmp_path / "never.bin").exists()
