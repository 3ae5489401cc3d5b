"""``rasa://`` through fsspec, and the libraries that open files with it (pandas, pyarrow),
against the real gateway, one-sided."""

from __future__ import annotations

import uuid

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import rasa_client
from rasa_client.fsspec import RasaFileSystem


@pytest.fixture
def fs(gateway) -> RasaFileSystem:
    return fsspec.filesystem("rasa", endpoint=gateway.url, fast_path="required", skip_instance_cache=True)


@pytest.fixture
def base() -> str:
    return f"fs/{uuid.uuid4().hex}"


def test_the_protocol_is_registered_by_entry_point(monkeypatch):
    assert fsspec.get_filesystem_class("rasa") is RasaFileSystem
    monkeypatch.delenv("RASA_ENDPOINT", raising=False)
    with pytest.raises(ValueError, match="endpoint"):
        RasaFileSystem(skip_instance_cache=True)


def test_whole_values_and_ranges_read_one_sided(fs, base):
    data = np.random.default_rng(1).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    fs.pipe_file(f"rasa://{base}/blob", data)
    before = fs.client.stats()["fabric_reads"]
    assert fs.cat_file(f"rasa://{base}/blob") == data
    assert fs.cat_file(f"{base}/blob", start=100_000, end=100_010) == data[100_000:100_010]
    assert fs.cat_file(f"{base}/blob", start=-5) == data[-5:]
    assert fs.cat_file(f"{base}/blob", start=10, end=-10) == data[10:-10]
    assert fs.cat_ranges([f"{base}/blob"] * 2, [0, 299_990], [3, 300_000]) == [data[:3], data[-10:]]
    assert fs.client.stats()["fabric_reads"] > before
    with fs.open(f"{base}/blob", "rb", block_size=64 << 10) as f:
        f.seek(250_000)
        assert f.read(7) == data[250_000:250_007]
        f.seek(3)
        assert f.read(4) == data[3:7]
        assert f.size == len(data)
    # Reads of a block or more go to the gateway as they are (bytes, past the cache);
    # smaller ones around them still come from the read-ahead cache.
    with fs.open(f"{base}/blob", "rb", block_size=64 << 10) as f:
        f.seek(1000)
        big = f.read(200_000)
        assert type(big) is bytes and big == data[1000:201_000]
        assert f.tell() == 201_000
        assert f.read(5) == data[201_000:201_005]
        assert f.read() == data[201_005:]  # the rest, as one range read
        assert f.read(10) == b"" and f.read() == b""
    assert type(fs.client._read_range(f"{base}/blob", 299_000, 400_000)) is bytes
    assert fs.client._read_range(f"{base}/blob", 299_000, 400_000) == data[299_000:]
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{base}/missing")
    with pytest.raises(FileNotFoundError):
        fs.open(f"{base}/missing", "rb")


def test_files_written_are_stored_on_close(fs, base):
    with fs.open(f"{base}/w.bin", "wb", block_size=5 << 20) as f:
        for i in range(12):
            f.write(bytes([i]) * (1 << 20))
    got = fs.cat_file(f"{base}/w.bin")
    assert len(got) == 12 << 20 and got[-1] == 11 and got[5 << 20] == 5


def test_directories_listings_and_removal(fs, base, tmp_path):
    for k in ["a/1", "a/2", "a/sub/3", "b"]:
        fs.pipe_file(f"{base}/{k}", k.encode())
    (tmp_path / "local.txt").write_bytes(b"from disk")
    fs.put(str(tmp_path / "local.txt"), f"{base}/local.txt")
    assert fs.ls(base, detail=False) == [f"{base}/a", f"{base}/b", f"{base}/local.txt"]
    assert fs.ls(f"{base}/a", detail=False) == [f"{base}/a/1", f"{base}/a/2", f"{base}/a/sub"]
    assert fs.info(f"{base}/a")["type"] == "directory"
    info = fs.info(f"{base}/a/1")
    assert (info["type"], info["size"]) == ("file", 3) and info["etag"]
    assert fs.isdir(f"{base}/a/sub") and fs.isfile(f"{base}/b") and not fs.exists(f"{base}/c")
    assert sorted(fs.find(base)) == [f"{base}/{k}" for k in ["a/1", "a/2", "a/sub/3", "b", "local.txt"]]
    assert fs.glob(f"{base}/a/*") == [f"{base}/a/1", f"{base}/a/2", f"{base}/a/sub"]
    assert fs.cat_file(f"{base}/local.txt") == b"from disk"
    fs.rm(f"{base}/a", recursive=True)
    assert not fs.exists(f"{base}/a") and fs.exists(f"{base}/b")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{base}/a/1")


def test_pandas_and_pyarrow_read_and_write_parquet(gateway, fs, base):
    opts = {"endpoint": gateway.url, "fast_path": "required"}
    df = pd.DataFrame({"id": np.arange(10_000), "x": np.random.default_rng(2).random(10_000)})
    df.to_parquet(f"rasa://{base}/t.parquet", storage_options=opts)
    back = pd.read_parquet(f"rasa://{base}/t.parquet", storage_options=opts)
    pd.testing.assert_frame_equal(back, df)
    # A dataset of several files, through pyarrow's filesystem over fsspec.
    for i in range(3):
        part = pa.table({"id": pa.array(range(i * 100, (i + 1) * 100))})
        with fs.open(f"{base}/ds/part-{i}.parquet", "wb") as f:
            pq.write_table(part, f)
    dataset = ds.dataset(f"{base}/ds", filesystem=pafs.PyFileSystem(pafs.FSSpecHandler(fs)), format="parquet")
    assert sorted(dataset.to_table().column("id").to_pylist()) == list(range(300))


def test_a_shared_client_and_pickling(gateway, base):
    import pickle

    with rasa_client.Client(gateway.url) as c:
        fs = RasaFileSystem(client=c, skip_instance_cache=True)
        fs.pipe_file(f"{base}/p", b"shared")
        assert c.get(f"{base}/p") == b"shared"
    fs2 = fsspec.filesystem("rasa", endpoint=gateway.url, skip_instance_cache=True)
    again = pickle.loads(pickle.dumps(fs2))
    assert again.cat_file(f"{base}/p") == b"shared"
