"""boto3 against the S3 listener: ranges, conditional writes, versions, listings with
awkward keys, integrity checks, access control, multipart bookkeeping."""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.client
import os
import pathlib
import ssl
import tempfile
import time
import urllib.parse

import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

import boto3
from conftest import Gateway, Key, new_key, start


def code(e: pytest.ExceptionInfo) -> str:
    return e.value.response["Error"]["Code"]


def test_range_and_checksums(s3, prefix):
    c = s3.boto3()
    data = os.urandom(100_000)
    put = c.put_object(Bucket="data", Key=f"{prefix}r", Body=data)
    full = c.get_object(Bucket="data", Key=f"{prefix}r", ChecksumMode="ENABLED")
    assert full["Body"].read() == data
    assert full["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(data).digest()).decode()
    assert full["VersionId"] == put["VersionId"]
    part = c.get_object(Bucket="data", Key=f"{prefix}r", Range="bytes=10-19")
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["Body"].read() == data[10:20]
    assert part["ContentRange"] == f"bytes 10-19/{len(data)}"
    assert "ChecksumSHA256" not in part
    assert c.get_object(Bucket="data", Key=f"{prefix}r", Range="bytes=-5")["Body"].read() == data[-5:]
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket="data", Key=f"{prefix}r", Range=f"bytes={len(data)}-")
    assert code(e) == "InvalidRange"


def test_conditional_writes_and_reads(s3, prefix):
    c = s3.boto3()
    k = f"{prefix}c"
    c.put_object(Bucket="data", Key=k, Body=b"one", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="data", Key=k, Body=b"two", IfNoneMatch="*")
    assert code(e) == "PreconditionFailed"
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"one"
    etag = c.head_object(Bucket="data", Key=k)["ETag"]
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket="data", Key=k, IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    # A 304 names what the client still holds (RFC 9110 §15.4.5), on GET and HEAD.
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["etag"] == etag
    assert "last-modified" in e.value.response["ResponseMetadata"]["HTTPHeaders"]
    with pytest.raises(ClientError) as e:
        c.head_object(Bucket="data", Key=k, IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["etag"] == etag
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket="data", Key=k, IfMatch='"0000"')
    assert code(e) == "PreconditionFailed"


def test_if_match_writes_replace_only_the_version_they_name(s3, prefix):
    """If-Match / If-None-Match with an ETag on PutObject and CompleteMultipartUpload (S3's
    conditional writes): a condition not met is 412 and the stored body stays as it was."""
    c = s3.boto3()
    k = f"{prefix}cw"
    # No such key: nothing to match, and S3 says so (404 NoSuchKey, not 412).
    for cond in ('"0123"', "*"):
        with pytest.raises(ClientError) as e:
            c.put_object(Bucket="data", Key=k, Body=b"none", IfMatch=cond)
        assert code(e) == "NoSuchKey", cond
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket="data", Key=k)
    assert code(e) == "NoSuchKey"
    etag = c.put_object(Bucket="data", Key=k, Body=b"one")["ETag"]
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="data", Key=k, Body=b"two", IfMatch='"0123"')
    assert code(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="data", Key=k, Body=b"two", IfNoneMatch=etag)
    assert code(e) == "PreconditionFailed"
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"one"
    etag = c.put_object(Bucket="data", Key=k, Body=b"two", IfMatch=etag)["ETag"]
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"two"
    c.put_object(Bucket="data", Key=k, Body=b"three", IfNoneMatch='"0123"')
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"three"
    # Complete with a stale If-Match: 412, the object unchanged, the upload still there.
    up = c.create_multipart_upload(Bucket="data", Key=k)["UploadId"]
    e1 = c.upload_part(Bucket="data", Key=k, UploadId=up, PartNumber=1, Body=b"mp")["ETag"]
    parts = {"Parts": [{"PartNumber": 1, "ETag": e1}]}
    with pytest.raises(ClientError) as e:
        c.complete_multipart_upload(Bucket="data", Key=k, UploadId=up, MultipartUpload=parts, IfMatch=etag)
    assert code(e) == "PreconditionFailed"
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"three"
    current = c.head_object(Bucket="data", Key=k)["ETag"]
    c.complete_multipart_upload(Bucket="data", Key=k, UploadId=up, MultipartUpload=parts, IfMatch=current)
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"mp"


def test_conditional_deletes(s3, prefix):
    """DeleteObject with If-Match, x-amz-if-match-last-modified-time or -size deletes only
    the version they describe (412 and the object stays otherwise); an absent key is
    deleted all the same (204); DeleteObjects applies each key's ETag, time and size."""
    c = s3.boto3()
    k = f"{prefix}cd"
    etag = c.put_object(Bucket="data", Key=k, Body=b"12345")["ETag"]
    head = c.head_object(Bucket="data", Key=k)
    for bad in ({"IfMatch": '"0123"'}, {"IfMatchSize": 4},
                {"IfMatchLastModifiedTime": head["LastModified"] - datetime.timedelta(seconds=5)}):
        with pytest.raises(ClientError) as e:
            c.delete_object(Bucket="data", Key=k, **bad)
        assert code(e) == "PreconditionFailed", bad
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"12345"
    c.delete_object(Bucket="data", Key=k, IfMatch=etag, IfMatchSize=5,
                    IfMatchLastModifiedTime=head["LastModified"])
    with pytest.raises(ClientError) as e:
        c.head_object(Bucket="data", Key=k)
    got = c.delete_object(Bucket="data", Key=k, IfMatch='"0123"')  # absent: deleted anyway
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 204
    a, b = f"{prefix}cd-a", f"{prefix}cd-b"
    ea = c.put_object(Bucket="data", Key=a, Body=b"a")["ETag"]
    c.put_object(Bucket="data", Key=b, Body=b"b")
    out = c.delete_objects(Bucket="data", Delete={"Objects": [
        {"Key": a, "ETag": ea}, {"Key": b, "ETag": '"0123"'}]})
    assert [d["Key"] for d in out.get("Deleted", [])] == [a]
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [(b, "PreconditionFailed")]
    assert c.get_object(Bucket="data", Key=b)["Body"].read() == b"b"


def test_conformance_details_ceph_s3_tests_found(s3, prefix):
    """What ceph/s3-tests found wrong, each as S3 answers it."""
    c = s3.boto3()
    k = f"{prefix}cf"
    c.put_object(Bucket="data", Key=k, Body=b"body")
    # A Content-MD5 that is not the base64 of 16 bytes is InvalidDigest, before the body.
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="data", Key=f"{prefix}md5", Body=b"x", ContentMD5="AAAA")
    assert code(e) == "InvalidDigest"
    # The checksum only when asked for (x-amz-checksum-mode: ENABLED, which boto3 sends on
    # GetObject unless told to validate only when required).
    asks_not = boto3.client("s3", endpoint_url=s3.gw.s3, region_name="us-east-1",
                            aws_access_key_id=s3.admin.id, aws_secret_access_key=s3.admin.secret,
                            verify=s3.ca if s3.ca else True,
                            config=Config(s3={"addressing_style": "path"},
                                          response_checksum_validation="when_required"))
    assert "x-amz-checksum-sha256" not in asks_not.get_object(Bucket="data", Key=k)["ResponseMetadata"]["HTTPHeaders"]
    assert "ChecksumSHA256" not in c.head_object(Bucket="data", Key=k)
    assert "ChecksumSHA256" in c.head_object(Bucket="data", Key=k, ChecksumMode="ENABLED")
    # A copy onto itself must change something.
    with pytest.raises(ClientError) as e:
        c.copy_object(Bucket="data", Key=k, CopySource={"Bucket": "data", "Key": k})
    assert code(e) == "InvalidRequest"
    c.copy_object(Bucket="data", Key=k, CopySource={"Bucket": "data", "Key": k},
                  MetadataDirective="REPLACE", ContentType="text/plain")
    assert c.head_object(Bucket="data", Key=k)["ContentType"] == "text/plain"
    # v1 listings always carry Marker; an empty delimiter is not echoed back.
    v1 = c.list_objects(Bucket="data", Prefix=prefix, Delimiter="")
    assert v1["Marker"] == ""
    assert "Delimiter" not in v1
    assert "Delimiter" not in c.list_objects_v2(Bucket="data", Prefix=prefix, Delimiter="")
    # v1 answers its Prefix as given (botocore decodes Key and Marker, not Prefix); v2 names
    # each object's owner with fetch-owner.
    odd = f"{prefix}\n"
    assert c.list_objects(Bucket="data", Prefix=odd)["Prefix"] == odd
    owned = c.list_objects_v2(Bucket="data", Prefix=prefix, FetchOwner=True)["Contents"]
    assert owned and all(o["Owner"]["ID"] for o in owned)
    assert "Owner" not in c.list_objects_v2(Bucket="data", Prefix=prefix)["Contents"][0]


def test_flexible_checksums_are_kept_and_answered(s3, prefix):
    """A PutObject's checksum (here CRC64NVME, ceph/s3-tests' case) is verified, echoed in
    the answer, kept with the version (a copy keeps it: the bytes are the same) and answered
    by GET and HEAD when asked (x-amz-checksum-mode); a wrong one is BadDigest."""
    c = s3.boto3()
    k, body = f"{prefix}crc", b"A" * 1024
    put = c.put_object(Bucket="data", Key=k, Body=body, ChecksumAlgorithm="CRC64NVME",
                       ChecksumCRC64NVME="Qeh8oXvGiSo=")
    assert put["ChecksumCRC64NVME"] == "Qeh8oXvGiSo="
    assert "ChecksumCRC64NVME" not in c.head_object(Bucket="data", Key=k)
    assert c.head_object(Bucket="data", Key=k, ChecksumMode="ENABLED")["ChecksumCRC64NVME"] == "Qeh8oXvGiSo="
    assert c.get_object(Bucket="data", Key=k, ChecksumMode="ENABLED")["ChecksumCRC64NVME"] == "Qeh8oXvGiSo="
    c.copy_object(Bucket="data", Key=f"{k}2", CopySource={"Bucket": "data", "Key": k},
                  MetadataDirective="REPLACE", ContentType="text/plain")
    assert c.head_object(Bucket="data", Key=f"{k}2", ChecksumMode="ENABLED")["ChecksumCRC64NVME"] == "Qeh8oXvGiSo="
    crc32 = c.put_object(Bucket="data", Key=f"{k}3", Body=body, ChecksumAlgorithm="CRC32")
    assert crc32["ChecksumCRC32"]  # computed by boto3, verified and echoed
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="data", Key=f"{k}4", Body=body, ChecksumAlgorithm="CRC64NVME",
                     ChecksumCRC64NVME="bad")
    assert code(e) == "BadDigest"


def test_every_answer_names_a_request_id(s3, prefix):
    """x-amz-request-id on every answer (boto3's ResponseMetadata.RequestId), and
    <RequestId> in an error's XML, as S3 answers: what users quote in a report."""
    c = s3.boto3()
    a = c.put_object(Bucket="data", Key=f"{prefix}rid", Body=b"x")["ResponseMetadata"]["RequestId"]
    b = c.head_object(Bucket="data", Key=f"{prefix}rid")["ResponseMetadata"]["RequestId"]
    assert a and b and a != b
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket="data", Key=f"{prefix}missing")
    assert e.value.response["ResponseMetadata"]["RequestId"]
    # An unsigned request is refused before any handler: its XML names the id too.
    url = urllib.parse.urlsplit(s3.gw.s3)
    conn = (http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection)(
        url.hostname, url.port, timeout=10,
        **({"context": ssl.create_default_context(cafile=s3.ca)} if url.scheme == "https" else {}))
    conn.request("GET", f"/data/{prefix}rid")
    resp = conn.getresponse()
    body = resp.read().decode()
    rid = resp.getheader("x-amz-request-id")
    assert resp.status == 403 and rid and f"<RequestId>{rid}</RequestId>" in body, body


def test_versions(s3, prefix):
    c = s3.boto3()
    k = f"{prefix}v"
    v1 = c.put_object(Bucket="data", Key=k, Body=b"first")["VersionId"]
    v2 = c.put_object(Bucket="data", Key=k, Body=b"second")["VersionId"]
    assert v1 != v2
    assert c.get_object(Bucket="data", Key=k, VersionId=v1)["Body"].read() == b"first"
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"second"
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket="data", Key=k, VersionId="00000000000000ff")
    assert code(e) == "NoSuchVersion"
    status = c.get_bucket_versioning(Bucket="data")
    assert "Status" not in status  # not S3 versioning: old versions go when reclaimed


def test_listing_pagination_with_awkward_keys(s3, prefix):
    c = s3.boto3()
    keys = [f"{prefix}{k}" for k in ["a", "b/1", "b/2", "c%41", "d e", "e/x/y", "f+g", "ü"]]
    for k in keys:
        c.put_object(Bucket="data", Key=k, Body=k.encode())
    seen = []
    for page in c.get_paginator("list_objects_v2").paginate(
        Bucket="data", Prefix=prefix, PaginationConfig={"PageSize": 2}
    ):
        assert page["KeyCount"] <= 2
        seen += [o["Key"] for o in page.get("Contents", [])]
    assert seen == sorted(keys)
    top, prefixes = [], []
    for page in c.get_paginator("list_objects_v2").paginate(
        Bucket="data", Prefix=prefix, Delimiter="/", PaginationConfig={"PageSize": 2}
    ):
        top += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    assert prefixes == [f"{prefix}b/", f"{prefix}e/"]
    assert top == sorted(k for k in keys if "/" not in k[len(prefix) :])
    v1 = []
    for page in c.get_paginator("list_objects").paginate(
        Bucket="data", Prefix=prefix, PaginationConfig={"PageSize": 3}
    ):
        v1 += [o["Key"] for o in page.get("Contents", [])]
    assert v1 == sorted(keys)
    c.copy_object(Bucket="data", Key=f"{prefix}copy", CopySource={"Bucket": "data", "Key": keys[-1]})
    assert c.get_object(Bucket="data", Key=f"{prefix}copy")["Body"].read() == keys[-1].encode()


def test_integrity_failures_store_nothing(s3, prefix):
    c = s3.boto3()
    k = f"{prefix}bad"
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="data", Key=k, Body=b"payload", ChecksumSHA256=wrong)
    assert code(e) == "BadDigest"
    wrong_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="data", Key=k, Body=b"payload", ContentMD5=wrong_md5)
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        c.head_object(Bucket="data", Key=k)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # Right checksums are accepted, and a Content-MD5 makes the MD5 the ETag.
    md5 = hashlib.md5(b"payload")
    put = c.put_object(
        Bucket="data", Key=k, Body=b"payload", ContentMD5=base64.b64encode(md5.digest()).decode(),
        ChecksumAlgorithm="CRC32",
    )
    assert put["ETag"].strip('"') == md5.hexdigest()


def test_access_control(s3, prefix):
    k = f"{prefix}acl"
    s3.boto3().put_object(Bucket="data", Key=k, Body=b"x")
    reader = s3.boto3(s3.reader)
    assert reader.get_object(Bucket="data", Key=k)["Body"].read() == b"x"
    with pytest.raises(ClientError) as e:
        reader.put_object(Bucket="data", Key=k, Body=b"y")
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        s3.boto3(Key(s3.admin.id, "wrong-secret")).get_object(Bucket="data", Key=k)
    assert code(e) == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as e:
        s3.boto3(Key("AKIDNOTAKEY", "x")).get_object(Bucket="data", Key=k)
    assert code(e) == "InvalidAccessKeyId"
    with pytest.raises(ClientError) as e:
        s3.boto3().get_object(Bucket="nope", Key=k)
    assert code(e) == "NoSuchBucket"
    sigv2 = boto3.client(
        "s3", endpoint_url=s3.gw.s3, aws_access_key_id=s3.admin.id,
        aws_secret_access_key=s3.admin.secret, region_name="us-east-1", verify=s3.ca or True,
        config=Config(signature_version="s3", s3={"addressing_style": "path"}),
    )
    with pytest.raises(ClientError) as e:
        sigv2.get_object(Bucket="data", Key=k)
    assert code(e) == "AccessDenied" and "Version 2" in e.value.response["Error"]["Message"]


def test_buckets(s3):
    c = s3.boto3()
    assert [b["Name"] for b in c.list_buckets()["Buckets"]] == ["data"]
    c.head_bucket(Bucket="data")
    c.get_bucket_location(Bucket="data")
    with pytest.raises(ClientError) as e:
        c.head_bucket(Bucket="other")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # Tools create the bucket first (rclone copy): a served one succeeds, another is refused.
    c.create_bucket(Bucket="data")
    with pytest.raises(ClientError) as e:
        c.create_bucket(Bucket="other")
    assert code(e) == "AccessDenied" and "--s3-bucket" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        c.get_bucket_policy(Bucket="data")
    assert code(e) == "NotImplemented"


def test_metadata_and_stored_headers_travel_with_the_object(s3, prefix):
    """x-amz-meta-* and Cache-Control, Content-Disposition, Content-Encoding,
    Content-Language and Expires are kept with the version (PutObject, multipart, copy
    with COPY or REPLACE), given back by GET and HEAD, and bounded as S3 bounds them."""
    c = s3.boto3()
    k = f"{prefix}meta"
    expires = "Wed, 21 Oct 2037 07:28:00 GMT"
    c.put_object(
        Bucket="data", Key=k, Body=b"x", Metadata={"Owner": "ml", "run": "42"},
        CacheControl="max-age=60", ContentDisposition='attachment; filename="x.bin"',
        ContentEncoding="identity", ContentLanguage="en", Expires=expires,
    )
    for got in (c.head_object(Bucket="data", Key=k), c.get_object(Bucket="data", Key=k)):
        assert got["Metadata"] == {"owner": "ml", "run": "42"}
        assert got["CacheControl"] == "max-age=60"
        assert got["ContentDisposition"] == 'attachment; filename="x.bin"'
        assert got["ContentEncoding"] == "identity"
        assert got["ContentLanguage"] == "en"
        assert got["ResponseMetadata"]["HTTPHeaders"]["expires"] == expires
    # response-* parameters still win on GET.
    got = c.get_object(Bucket="data", Key=k, ResponseCacheControl="no-store")
    assert got["CacheControl"] == "no-store"
    # Copy: COPY keeps the source's, REPLACE takes the request's.
    c.copy_object(Bucket="data", Key=f"{k}-copy", CopySource=f"data/{k}")
    assert c.head_object(Bucket="data", Key=f"{k}-copy")["Metadata"] == {"owner": "ml", "run": "42"}
    c.copy_object(Bucket="data", Key=f"{k}-new", CopySource=f"data/{k}",
                  MetadataDirective="REPLACE", Metadata={"fresh": "yes"})
    replaced = c.head_object(Bucket="data", Key=f"{k}-new")
    assert replaced["Metadata"] == {"fresh": "yes"} and "CacheControl" not in replaced
    # Multipart: given at create, carried by the completed object.
    up = c.create_multipart_upload(Bucket="data", Key=f"{k}-mp", Metadata={"part": "ly"},
                                   ContentLanguage="de")["UploadId"]
    e1 = c.upload_part(Bucket="data", Key=f"{k}-mp", UploadId=up, PartNumber=1, Body=b"p")["ETag"]
    c.complete_multipart_upload(Bucket="data", Key=f"{k}-mp", UploadId=up,
                                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}]})
    mp = c.head_object(Bucket="data", Key=f"{k}-mp")
    assert mp["Metadata"] == {"part": "ly"} and mp["ContentLanguage"] == "de"
    # More than 2 KiB of user metadata is refused, and nothing is stored.
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="data", Key=f"{k}-big", Body=b"x", Metadata={"k": "v" * 2100})
    assert code(e) == "MetadataTooLarge"
    with pytest.raises(ClientError):
        c.head_object(Bucket="data", Key=f"{k}-big")


def test_list_object_versions_lists_current_versions_and_pages(s3, prefix):
    """ListObjectVersions answers each key's current version (IsLatest), pages with key
    markers, groups by delimiter, and a clean-up that deletes what it lists (as tools and
    ceph/s3-tests' teardown do) empties the prefix; a read-only key may list."""
    c = s3.boto3()
    keys = [f"{prefix}v/{i:02}" for i in range(7)] + [f"{prefix}v/sub/x"]
    ids = {k: c.put_object(Bucket="data", Key=k, Body=k.encode())["VersionId"] for k in keys}
    ids[keys[0]] = c.put_object(Bucket="data", Key=keys[0], Body=b"newer")["VersionId"]
    seen, marker = [], None
    while True:
        kw = {"KeyMarker": marker} if marker else {}
        page = s3.boto3(s3.reader).list_object_versions(
            Bucket="data", Prefix=f"{prefix}v/", MaxKeys=3, **kw)
        for v in page.get("Versions", []):
            assert v["IsLatest"] and v["VersionId"] == ids[v["Key"]]
            seen.append(v["Key"])
        if not page["IsTruncated"]:
            break
        marker = page["NextKeyMarker"]
    assert seen == sorted(keys)
    grouped = c.list_object_versions(Bucket="data", Prefix=f"{prefix}v/", Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == [f"{prefix}v/sub/"]
    assert len(grouped["Versions"]) == 7
    for v in c.list_object_versions(Bucket="data", Prefix=f"{prefix}v/")["Versions"]:
        c.delete_object(Bucket="data", Key=v["Key"])
    assert "Versions" not in c.list_object_versions(Bucket="data", Prefix=f"{prefix}v/")


def test_multipart_bookkeeping(s3, prefix):
    c = s3.boto3()
    k = f"{prefix}mp"
    up = c.create_multipart_upload(Bucket="data", Key=k)["UploadId"]
    p1, p2 = os.urandom(5 << 20), os.urandom(1000)
    e1 = c.upload_part(Bucket="data", Key=k, UploadId=up, PartNumber=1, Body=p1)["ETag"]
    e2 = c.upload_part(Bucket="data", Key=k, UploadId=up, PartNumber=2, Body=p2)["ETag"]
    parts = c.list_parts(Bucket="data", Key=k, UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in parts] == [(1, 5 << 20), (2, 1000)]
    assert up in [u["UploadId"] for u in c.list_multipart_uploads(Bucket="data")["Uploads"]]
    # Another key may not touch it; wrong order and wrong ETags are refused.
    with pytest.raises(ClientError) as e:
        s3.boto3(s3.reader).upload_part(Bucket="data", Key=k, UploadId=up, PartNumber=3, Body=b"z")
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        c.complete_multipart_upload(Bucket="data", Key=k, UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}]})
    assert code(e) == "InvalidPartOrder"
    with pytest.raises(ClientError) as e:
        c.complete_multipart_upload(Bucket="data", Key=k, UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": e2}, {"PartNumber": 2, "ETag": e2}]})
    assert code(e) == "InvalidPart"
    listed = {"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]}
    done = c.complete_multipart_upload(Bucket="data", Key=k, UploadId=up, MultipartUpload=listed)
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == p1 + p2
    # A retry after a lost answer gets the same answer while the version is current.
    again = c.complete_multipart_upload(Bucket="data", Key=k, UploadId=up, MultipartUpload=listed)
    assert (again["ETag"], again["VersionId"]) == (done["ETag"], done["VersionId"])
    with pytest.raises(ClientError) as e:
        s3.boto3(s3.reader).complete_multipart_upload(Bucket="data", Key=k, UploadId=up, MultipartUpload=listed)
    assert code(e) in ("NoSuchUpload", "AccessDenied")
    c.put_object(Bucket="data", Key=k, Body=b"newer")  # replaced: the retry no longer applies
    with pytest.raises(ClientError) as e:
        c.complete_multipart_upload(Bucket="data", Key=k, UploadId=up, MultipartUpload=listed)
    assert code(e) == "NoSuchUpload"
    assert c.get_object(Bucket="data", Key=k)["Body"].read() == b"newer"
    with pytest.raises(ClientError) as e:
        c.abort_multipart_upload(Bucket="data", Key=k, UploadId=up)
    assert code(e) == "NoSuchUpload"


def test_abandoned_multipart_upload_is_reaped():
    with tempfile.TemporaryDirectory() as d:
        setup = start(pathlib.Path(d), "--multipart-expiry", "1s")
        try:
            c = setup.boto3()
            up = c.create_multipart_upload(Bucket="data", Key="abandoned")["UploadId"]
            c.upload_part(Bucket="data", Key="abandoned", UploadId=up, PartNumber=1, Body=b"x" * 1000)
            # The reaper runs every quarter of the expiry; give it a few rounds.
            deadline = time.monotonic() + 15
            while c.list_multipart_uploads(Bucket="data").get("Uploads"):
                assert time.monotonic() < deadline, "the abandoned upload was never reaped"
                time.sleep(0.25)
            with pytest.raises(ClientError) as e:
                c.upload_part(Bucket="data", Key="abandoned", UploadId=up, PartNumber=2, Body=b"y")
            assert code(e) == "NoSuchUpload"
        finally:
            setup.gw.stop()


def test_open_listener_takes_unsigned_requests_only():
    gw = Gateway("--s3-bucket", "open", "--fast-path", "off", "--s3-domain", "s3.test", "--s3-etag", "md5")
    try:
        anon = boto3.client("s3", endpoint_url=gw.s3, region_name="us-east-1",
                            config=Config(signature_version=UNSIGNED, s3={"addressing_style": "path"}))
        anon.put_object(Bucket="open", Key="k", Body=b"v")
        assert anon.get_object(Bucket="open", Key="k")["Body"].read() == b"v"
        signed = boto3.client("s3", endpoint_url=gw.s3, region_name="us-east-1",
                              aws_access_key_id="a", aws_secret_access_key="b",
                              config=Config(s3={"addressing_style": "path"}))
        with pytest.raises(ClientError) as e:
            signed.get_object(Bucket="open", Key="k")
        assert code(e) == "AccessDenied" and "unsigned" in e.value.response["Error"]["Message"]
        # --s3-etag md5: the MD5 even without Content-MD5.
        put = anon.put_object(Bucket="open", Key="m", Body=b"md5 me")
        assert put["ETag"].strip('"') == hashlib.md5(b"md5 me").hexdigest()
        # Virtual-host style (--s3-domain): the bucket in the Host header.
        host, port = gw.s3.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("GET", "/m", headers={"Host": f"open.s3.test:{port}"})
        r = conn.getresponse()
        assert (r.status, r.read()) == (200, b"md5 me")
        # response-* overrides.
        got = anon.get_object(Bucket="open", Key="m", ResponseContentType="text/x-over",
                              ResponseContentDisposition="attachment")
        assert got["ContentType"] == "text/x-over" and got["ContentDisposition"] == "attachment"
    finally:
        gw.stop()


def test_keys_are_reloaded_on_sighup():
    import signal as sig

    with tempfile.TemporaryDirectory() as d:
        setup = start(pathlib.Path(d))
        try:
            late = new_key(setup.tmp / "s3-keys", "late", "read,write")
            c = setup.boto3(late)
            with pytest.raises(ClientError) as e:
                c.list_objects_v2(Bucket="data")
            assert code(e) == "InvalidAccessKeyId"
            setup.gw.proc.send_signal(sig.SIGHUP)
            # The reload is not announced to clients: ask until the key works (bounded).
            deadline = time.monotonic() + 10
            while True:
                try:
                    c.list_objects_v2(Bucket="data")
                    break
                except ClientError:
                    assert time.monotonic() < deadline, "the new key never took effect"
                    time.sleep(0.05)
        finally:
            setup.gw.stop()


def test_copying_needs_read_on_the_source(tmp_path_factory_dir):
    """A write-only key may store, but not copy what it may not read: CopyObject would
    hand it the source's bytes under a key of its choosing (and its SHA-256)."""
    writer = new_key(tmp_path_factory_dir / "s3-keys", "writer", "write")
    setup = start(tmp_path_factory_dir)
    try:
        admin, w = setup.boto3(), setup.boto3(writer)
        admin.put_object(Bucket="data", Key="secret", Body=b"the reader's secret")
        w.put_object(Bucket="data", Key="mine", Body=b"x")
        for attempt in (lambda: w.get_object(Bucket="data", Key="secret"),
                        lambda: w.copy_object(Bucket="data", Key="stolen",
                                              CopySource={"Bucket": "data", "Key": "secret"})):
            with pytest.raises(ClientError) as e:
                attempt()
            assert code(e) == "AccessDenied"
        with pytest.raises(ClientError) as e:
            admin.head_object(Bucket="data", Key="stolen")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        admin.copy_object(Bucket="data", Key="copied", CopySource={"Bucket": "data", "Key": "secret"})
        assert admin.get_object(Bucket="data", Key="copied")["Body"].read() == b"the reader's secret"
    finally:
        setup.gw.stop()


def test_buckets_that_tools_create_are_namespaces(tmp_path_factory_dir):
    """With --s3-create-buckets, CreateBucket by a key with the buckets scope makes a
    namespace (a line in the namespaces file the gateway owns, a quota of
    --s3-bucket-quota), again is success, and DeleteBucket removes it once empty; a key
    with write alone, or scoped to one namespace, cannot make or delete buckets; bad
    names and quotas past --memory are refused and leave the file as it was."""
    tmp = tmp_path_factory_dir
    ns_file = tmp / "namespaces"
    ns_file.write_text("team 16MiB\n")
    scoped = new_key(tmp / "s3-keys", "scoped", "team:read,team:write")
    maker = new_key(tmp / "s3-keys", "maker", "read,write,buckets")
    setup = start(tmp, "--namespaces", str(ns_file), "--s3-create-buckets",
                  "--s3-bucket-quota", "16MiB", "--memory", "64MiB", "--max-object-size", "8MiB")
    try:
        writer = setup.boto3()  # read,write
        with pytest.raises(ClientError) as e:
            writer.create_bucket(Bucket="by-a-writer")
        assert code(e) == "AccessDenied"
        c = setup.boto3(maker)
        c.create_bucket(Bucket="made-by-a-tool")
        writer.create_bucket(Bucket="made-by-a-tool")  # it exists: its writers succeed
        with pytest.raises(ClientError) as e:
            writer.delete_bucket(Bucket="made-by-a-tool")
        assert code(e) == "AccessDenied"
        c.create_bucket(Bucket="made-by-a-tool")  # again: success, as S3 answers its owner
        c.create_bucket(Bucket="with.periods")  # S3's names may hold periods
        c.put_object(Bucket="with.periods", Key="k", Body=b"p")
        c.delete_object(Bucket="with.periods", Key="k")
        c.delete_bucket(Bucket="with.periods")
        for bad in ("a..b", "a.-b", "a-.b", "10.0.0.1", "Upper"):
            with pytest.raises(ClientError) as e:
                c.create_bucket(Bucket=bad)
            assert code(e) == "InvalidBucketName", bad
        assert "made-by-a-tool 16MiB" in ns_file.read_text()
        names = [b["Name"] for b in c.list_buckets()["Buckets"]]
        assert {"data", "team", "made-by-a-tool"} <= set(names)
        c.put_object(Bucket="made-by-a-tool", Key="k", Body=b"v")
        assert c.get_object(Bucket="made-by-a-tool", Key="k")["Body"].read() == b"v"
        with pytest.raises(ClientError) as e:
            c.delete_bucket(Bucket="made-by-a-tool")
        assert code(e) == "BucketNotEmpty"
        c.delete_object(Bucket="made-by-a-tool", Key="k")
        c.delete_bucket(Bucket="made-by-a-tool")
        assert "made-by-a-tool" not in ns_file.read_text()
        with pytest.raises(ClientError) as e:
            c.head_bucket(Bucket="made-by-a-tool")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        with pytest.raises(ClientError) as e:
            setup.boto3(scoped).create_bucket(Bucket="not-for-you")
        assert code(e) == "AccessDenied"
        before = ns_file.read_text()
        for bucket in ("b1", "b2", "b3"):  # 16 MiB each: the third leaves no room
            try:
                c.create_bucket(Bucket=f"quota-{bucket}")
            except ClientError as e:
                assert e.response["Error"]["Code"] == "TooManyBuckets", e.response
                assert "cannot be made" in e.response["Error"]["Message"], e.response
                break
        else:
            pytest.fail("64 MiB held four 16 MiB namespaces and a default one")
        assert ns_file.read_text().count("\n") == before.count("\n") + 2
        with pytest.raises(ClientError) as e:
            c.delete_bucket(Bucket="data")
        assert code(e) == "AccessDenied"
    finally:
        setup.gw.stop()
