"""The S3 listener in front of an origin bucket (s3s-fs): tools change only their
endpoint — the same bucket and keys — and get the cache: misses read through, LIST is the
origin's, writes go through to it."""

from __future__ import annotations

import pathlib
import tempfile

import pytest
from botocore.exceptions import ClientError

from conftest import Gateway, Key, S3sFs, new_key, FAST


def test_origin_bucket_through_the_s3_listener():
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        origin = S3sFs(root / "s3", "lake")
        o = origin.client()
        o.put_object(Bucket="lake", Key="cache/cold.txt", Body=b"from the origin")
        o.put_object(Bucket="lake", Key="cache/dir/a", Body=b"a")
        o.put_object(Bucket="lake", Key="elsewhere/x", Body=b"not cached")
        admin = new_key(root / "keys", "admin", "read,write")
        gw = Gateway(
            "--origin", "s3://lake/cache", "--s3-endpoint", origin.url,
            "--s3-credentials-file", str(root / "keys"), *FAST,
            env={"AWS_ACCESS_KEY_ID": S3sFs.ACCESS, "AWS_SECRET_ACCESS_KEY": S3sFs.SECRET},
        )
        try:
            import boto3
            from botocore.config import Config

            c = boto3.client(
                "s3", endpoint_url=gw.s3, aws_access_key_id=admin.id,
                aws_secret_access_key=admin.secret, region_name="us-east-1",
                config=Config(s3={"addressing_style": "path"}),
            )
            # The origin's bucket, same keys: a miss reads through.
            assert c.get_object(Bucket="lake", Key="cache/cold.txt")["Body"].read() == b"from the origin"
            # A write goes through to the origin (the default write policy).
            c.put_object(Bucket="lake", Key="cache/new.txt", Body=b"written via rasa")
            assert o.get_object(Bucket="lake", Key="cache/new.txt")["Body"].read() == b"written via rasa"
            # LIST is the origin's, including what the cache never saw.
            listed = c.list_objects_v2(Bucket="lake", Prefix="cache/", Delimiter="/")
            assert [x["Key"] for x in listed["Contents"]] == ["cache/cold.txt", "cache/new.txt"]
            assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["cache/dir/"]
            # Keys outside the cached part of the bucket are not served.
            with pytest.raises(ClientError) as e:
                c.get_object(Bucket="lake", Key="elsewhere/x")
            assert e.value.response["Error"]["Code"] == "AccessDenied"
            c.delete_object(Bucket="lake", Key="cache/new.txt")
            with pytest.raises(ClientError):
                o.head_object(Bucket="lake", Key="cache/new.txt")
        finally:
            gw.stop()
            origin.stop()
