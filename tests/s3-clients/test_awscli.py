"""aws-cli v1 against the S3 listener, over http and https: cp up and down (1 MiB in one
PUT, 20 MiB multipart), ls, sync twice, rm --recursive, a presigned GET; and what S3
wrote is the native API's value, read one-sided."""

from __future__ import annotations

import hashlib
import os
import ssl
import urllib.request

from conftest import json_of


def test_cp_ls_sync_rm(s3, prefix):
    src = s3.tmp / prefix.strip("/")
    src.mkdir()
    small, big = os.urandom(1 << 20), os.urandom(20 << 20)
    (src / "small.bin").write_bytes(small)
    (src / "big.bin").write_bytes(big)
    for name in ("small.bin", "big.bin"):
        s3.aws("s3", "cp", str(src / name), f"s3://data/{prefix}{name}", "--only-show-errors")
    listing = s3.aws("s3", "ls", f"s3://data/{prefix}").stdout
    assert "small.bin" in listing and "big.bin" in listing and str(20 << 20) in listing
    down = s3.tmp / f"{prefix.strip('/')}-down"
    down.mkdir()
    for name, data in (("small.bin", small), ("big.bin", big)):
        s3.aws("s3", "cp", f"s3://data/{prefix}{name}", str(down / name), "--only-show-errors")
        assert (down / name).read_bytes() == data, name
    # The 20 MiB upload went in parts; its ETag says so (MD5 of the parts' MD5s, "-N").
    head = json_of(s3.aws("s3api", "head-object", "--bucket", "data", "--key", f"{prefix}big.bin"))
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]
    assert head["ContentLength"] == 20 << 20

    # sync: the first uploads what is missing, the second nothing.
    (src / "more.txt").write_text("more")
    first = s3.aws("s3", "sync", str(src), f"s3://data/{prefix}").stdout
    assert "more.txt" in first and "big.bin" not in first, first
    second = s3.aws("s3", "sync", str(src), f"s3://data/{prefix}").stdout
    assert second.strip() == "", second

    removed = s3.aws("s3", "rm", "--recursive", f"s3://data/{prefix}").stdout
    assert removed.count("delete:") == 3, removed
    assert s3.aws("s3", "ls", f"s3://data/{prefix}", check=False).stdout.strip() == ""


def test_presigned_get(s3, prefix):
    body = b"presigned bytes"
    client = s3.boto3()
    client.put_object(Bucket="data", Key=f"{prefix}p.txt", Body=body)
    url = s3.aws("s3", "presign", f"s3://data/{prefix}p.txt", "--expires-in", "60").stdout.strip()
    ctx = ssl.create_default_context(cafile=s3.ca) if s3.ca else None
    with urllib.request.urlopen(url, context=ctx, timeout=30) as r:
        assert r.read() == body
    assert "X-Amz-Signature=" in url  # SigV4
    v2 = s3.aws("s3", "presign", f"s3://data/{prefix}p.txt", sigv4=False).stdout.strip()
    try:
        urllib.request.urlopen(v2, context=ctx, timeout=30)
        raise AssertionError("a SigV2 presigned URL was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 403 and b"Version 2" in e.read()
    tampered = url.replace("p.txt", "q.txt")
    try:
        urllib.request.urlopen(tampered, context=ctx, timeout=30)
        raise AssertionError("a presigned URL for another key was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 403 and b"SignatureDoesNotMatch" in e.read()


def test_s3_values_are_native_values_and_read_one_sided(s3, prefix):
    data = os.urandom(300_000)
    s3.boto3().put_object(Bucket="data", Key=f"{prefix}v", Body=data, ContentType="application/x-t")
    got = json_of(s3.rasa("get", f"{prefix}v", "--fast-path", "required", "--json", "-o", str(s3.tmp / "v")))
    assert got["path"] == "fabric" and got["sha256"] == hashlib.sha256(data).hexdigest()
    assert (s3.tmp / "v").read_bytes() == data
    # And the other way: a value stored natively is an S3 object.
    (s3.tmp / "n").write_bytes(b"native")
    s3.rasa("put", f"{prefix}n", str(s3.tmp / "n"))
    obj = s3.boto3().get_object(Bucket="data", Key=f"{prefix}n")
    assert obj["Body"].read() == b"native"
