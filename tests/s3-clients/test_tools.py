"""s5cmd (cp, ls, wildcard rm → DeleteObjects) and pyarrow (a Parquet file through
S3FileSystem) against the S3 listener."""

from __future__ import annotations

import os
import subprocess

import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq

from conftest import VENV_BIN


def s5cmd(s3, *args: str) -> str:
    extra = []
    env = s3.env()
    if s3.ca:
        env["AWS_CA_BUNDLE"] = s3.ca
    out = subprocess.run(
        [str(VENV_BIN / "s5cmd"), "--endpoint-url", s3.gw.s3, *extra, *args],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_s5cmd_cp_ls_rm(s3, prefix):
    src = s3.tmp / f"s5-{prefix.strip('/')}"
    src.mkdir()
    for i in range(4):
        (src / f"f{i}.bin").write_bytes(os.urandom(1000 + i))
    s5cmd(s3, "cp", f"{src}/*", f"s3://data/{prefix}")
    listed = s5cmd(s3, "ls", f"s3://data/{prefix}*")
    assert all(f"f{i}.bin" in listed for i in range(4)), listed
    s5cmd(s3, "cp", f"s3://data/{prefix}f2.bin", str(s3.tmp / "f2.bin"))
    assert (s3.tmp / "f2.bin").read_bytes() == (src / "f2.bin").read_bytes()
    s5cmd(s3, "rm", f"s3://data/{prefix}f*")  # a wildcard: one DeleteObjects call
    assert s3.boto3().list_objects_v2(Bucket="data", Prefix=prefix)["KeyCount"] == 0


def test_pyarrow_parquet(s3, prefix):
    scheme, endpoint = s3.gw.s3.split("://")
    fs = pyarrow.fs.S3FileSystem(
        access_key=s3.admin.id, secret_key=s3.admin.secret, region="us-east-1",
        endpoint_override=endpoint, scheme=scheme, tls_ca_file_path=s3.ca,
    )
    table = pa.table({"id": list(range(10_000)), "name": [f"row {i}" for i in range(10_000)]})
    pq.write_table(table, f"data/{prefix}t.parquet", filesystem=fs)
    back = pq.read_table(f"data/{prefix}t.parquet", filesystem=fs)
    assert back.equals(table)
    infos = fs.get_file_info(pyarrow.fs.FileSelector(f"data/{prefix}"))
    assert [i.base_name for i in infos] == ["t.parquet"]


def rclone(s3, *args: str) -> subprocess.CompletedProcess:
    """rclone with default settings but for the remote's endpoint and key (configured in
    the environment, so no config file is read)."""
    env = {
        **s3.env(),
        "RCLONE_CONFIG": "/dev/null",
        "RCLONE_CONFIG_RASA_TYPE": "s3",
        "RCLONE_CONFIG_RASA_PROVIDER": "Other",
        "RCLONE_CONFIG_RASA_ENV_AUTH": "true",
        "RCLONE_CONFIG_RASA_ENDPOINT": s3.gw.s3,
        "RCLONE_CONFIG_RASA_REGION": "us-east-1",
    }
    env.pop("AWS_CA_BUNDLE", None)  # rclone takes its CA with --ca-cert
    extra = ["--ca-cert", s3.ca] if s3.ca else []
    return subprocess.run(["rclone", *extra, *args], env=env, capture_output=True, text=True, timeout=120)


def test_rclone_copy_with_default_settings(s3, prefix):
    """rclone's default `copy` creates the bucket first (CreateBucket), then uploads, then
    lists and checks; `check` then finds source and bucket the same."""
    src = s3.tmp / f"rc-{prefix.strip('/')}"
    src.mkdir()
    for i in range(3):
        (src / f"r{i}.bin").write_bytes(os.urandom(2000 + i))
    out = rclone(s3, "copy", str(src), f"rasa:data/{prefix}")
    assert out.returncode == 0, out.stderr
    out = rclone(s3, "check", str(src), f"rasa:data/{prefix}")
    assert out.returncode == 0, out.stderr
    got = s3.boto3().get_object(Bucket="data", Key=f"{prefix}r1.bin")["Body"].read()
    assert got == (src / "r1.bin").read_bytes()


def duckdb_on(s3):
    """A DuckDB connection with httpfs (its extension from PyPI, loaded from the wheel: no
    download) and an S3 secret for the listener."""
    import pathlib

    import duckdb
    import duckdb_extension_httpfs

    ext = next(pathlib.Path(duckdb_extension_httpfs.__file__).parent.glob("extensions/*/httpfs.duckdb_extension"))
    c = duckdb.connect()
    c.execute(f"LOAD '{ext}'")
    if s3.ca:
        c.execute(f"SET ca_cert_file = '{s3.ca}'")
    scheme, endpoint = s3.gw.s3.split("://")
    c.execute(
        f"CREATE SECRET (TYPE s3, KEY_ID '{s3.admin.id}', SECRET '{s3.admin.secret}', "
        f"ENDPOINT '{endpoint}', URL_STYLE 'path', USE_SSL {str(scheme == 'https').lower()}, "
        "REGION 'us-east-1')"
    )
    return c


def test_duckdb_writes_globs_and_reads_parquet(s3, prefix):
    """DuckDB's httpfs: COPY ... TO s3:// (a multipart upload), a glob over the bucket
    (ListObjectsV2), and read_parquet of the files (ranged GETs)."""
    c = duckdb_on(s3)
    for part in range(3):
        c.execute(
            f"COPY (SELECT {part} AS part, range AS i, range * 2 AS j FROM range(200000)) "
            f"TO 's3://data/{prefix}p{part}.parquet' (FORMAT parquet)"
        )
    n, total, parts = c.execute(
        f"SELECT count(*), sum(j), count(DISTINCT part) FROM read_parquet('s3://data/{prefix}*.parquet')"
    ).fetchone()
    assert (n, total, parts) == (600_000, 3 * 2 * sum(range(200_000)), 3)
    listed = s3.boto3().list_objects_v2(Bucket="data", Prefix=prefix)["Contents"]
    assert sorted(o["Key"] for o in listed) == [f"{prefix}p{i}.parquet" for i in range(3)]
