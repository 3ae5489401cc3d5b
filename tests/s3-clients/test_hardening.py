"""What a hostile review got through on the S3 listener (issue 29): DeleteObjects without
a checksum or with too many keys or too large a body, cross-site and DNS-rebinding
requests to an open listener, presigned URLs valid for more than a week, oversized
headers, unbounded multipart uploads, stored HTML served live, silent sockets."""

from __future__ import annotations

import base64
import hashlib
import http.client
import pathlib
import socket
import tempfile
import time

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import Gateway, start


def code(e: pytest.ExceptionInfo) -> str:
    return e.value.response["Error"]["Code"]


def raw(gw: Gateway, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""):
    host, port = gw.s3.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Host": f"{host}:{port}", **(headers or {})}
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.getheaders(), r.read().decode(errors="replace")


def delete_body(keys: list[str]) -> bytes:
    objects = "".join(f"<Object><Key>{k}</Key></Object>" for k in keys)
    return f"<Delete>{objects}</Delete>".encode()


def md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


@pytest.fixture
def open_gw():
    gw = Gateway("--s3-bucket", "open", "--fast-path", "off", "--first-byte-timeout", "1s")
    anon = boto3.client("s3", endpoint_url=gw.s3, region_name="us-east-1",
                        config=Config(signature_version=UNSIGNED, s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))
    try:
        yield gw, anon
    finally:
        gw.stop()


def test_delete_objects_needs_a_checksum_a_small_body_and_at_most_1000_keys(open_gw):
    gw, anon = open_gw
    anon.put_object(Bucket="open", Key="keep", Body=b"v")
    body = delete_body(["keep"])
    # A web page's simple request (text/plain, no preflight, no checksum) deletes nothing.
    status, _, text = raw(gw, "POST", "/open?delete", {"Content-Type": "text/plain"}, body)
    assert (status, "InvalidRequest" in text, "Content-MD5" in text) == (400, True, True)
    status, _, text = raw(gw, "POST", "/open?delete", {"Content-MD5": md5(b"other")}, body)
    assert (status, "BadDigest" in text) == (400, True)
    assert anon.get_object(Bucket="open", Key="keep")["Body"].read() == b"v"
    # boto3 sends a checksum itself; more than 1,000 keys is S3's MalformedXML.
    with pytest.raises(ClientError) as e:
        anon.delete_objects(Bucket="open", Delete={"Objects": [{"Key": f"k{i}"} for i in range(1001)]})
    assert code(e) == "MalformedXML"
    out = anon.delete_objects(Bucket="open", Delete={"Objects": [{"Key": f"k{i}"} for i in range(1000)]})
    assert len(out["Deleted"]) == 1000
    # A body over the limit is a 400, declared or chunked (s3s answered 500).
    status, _, text = raw(gw, "POST", "/open?delete",
                          {"Content-MD5": md5(b""), "Content-Length": str(21 << 20)}, b"")
    assert (status, "MalformedXML" in text) == (400, True)
    big = b"<Delete>" + b"<Object><Key>" + b"a" * (3 << 20) + b"</Key></Object></Delete>"

    def chunks():
        for i in range(0, len(big), 64 << 10):
            yield big[i:i + (64 << 10)]

    host, port = gw.s3.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/open?delete", body=chunks(), encode_chunked=True,
                     headers={"Content-MD5": md5(big), "Transfer-Encoding": "chunked"})
        r = conn.getresponse()
        assert (r.status, b"MalformedXML" in r.read()) == (400, True)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the gateway answered and closed before the body was all sent: not a 500
    assert anon.get_object(Bucket="open", Key="keep")["Body"].read() == b"v"


def test_an_open_listener_refuses_web_pages(open_gw):
    gw, anon = open_gw
    anon.put_object(Bucket="open", Key="k", Body=b"v")
    port = gw.s3.rsplit(":", 1)[1]
    # DNS rebinding: the page's own name in Host.
    status, _, text = raw(gw, "GET", "/open/k", {"Host": f"evil.example:{port}"})
    assert (status, "AccessDenied" in text) == (403, True)
    # A cross-site write.
    status, _, _ = raw(gw, "PUT", "/open/k", {"Origin": "https://evil.example"}, b"changed")
    assert status == 403
    status, _, _ = raw(gw, "DELETE", "/open/k", {"Sec-Fetch-Site": "cross-site"})
    assert status == 403
    assert anon.get_object(Bucket="open", Key="k")["Body"].read() == b"v"
    status, _, _ = raw(gw, "GET", "/open/k", {"Host": f"localhost:{port}"})
    assert status == 200


def test_stored_html_is_served_inert(open_gw):
    gw, anon = open_gw
    anon.put_object(Bucket="open", Key="page.html", Body=b"<script>alert(1)</script>", ContentType="text/html")
    got = anon.get_object(Bucket="open", Key="page.html")
    headers = got["ResponseMetadata"]["HTTPHeaders"]
    assert headers["content-type"] == "text/html"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-security-policy"].startswith("sandbox")


def test_the_header_size_limit_holds_on_the_s3_listener(open_gw):
    gw, _ = open_gw
    status, _, text = raw(gw, "GET", "/open/k", {"X-Padding": "a" * (200 << 10)})
    assert (status, "RequestHeaderSectionTooLarge" in text) == (400, True)


def test_silent_sockets_on_the_s3_port_are_closed(open_gw):
    gw, _ = open_gw
    host, port = gw.s3.removeprefix("http://").split(":")
    socks = [socket.create_connection((host, int(port))) for _ in range(50)]
    start_at = time.monotonic()
    for s in socks:
        s.settimeout(max(0.01, start_at + 4 - time.monotonic()))
        assert s.recv(1) == b"", "a silent socket was answered"
    assert time.monotonic() - start_at < 4


def test_presigned_urls_are_valid_for_a_week_at_most(s3):
    s3.boto3().put_object(Bucket="data", Key="presigned", Body=b"p")
    c = boto3.client("s3", endpoint_url=s3.gw.s3, aws_access_key_id=s3.admin.id,
                     aws_secret_access_key=s3.admin.secret, region_name="us-east-1",
                     config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    for expires, ok in [(604800, True), (604801, False)]:
        url = c.generate_presigned_url("get_object", Params={"Bucket": "data", "Key": "presigned"},
                                       ExpiresIn=expires)
        rest = url.split("://", 1)[1].split("/", 1)[1]
        host, port = s3.gw.s3.split("://", 1)[1].split(":")
        conn = (http.client.HTTPSConnection(host, int(port), timeout=30,
                                            context=__import__("ssl").create_default_context(cafile=s3.ca))
                if s3.ca else http.client.HTTPConnection(host, int(port), timeout=30))
        conn.request("GET", "/" + rest)
        r = conn.getresponse()
        body = r.read()
        if ok:
            assert (r.status, body) == (200, b"p")
        else:
            assert r.status == 400 and b"AuthorizationQueryParametersError" in body


def test_multipart_uploads_are_bounded_paged_and_private():
    with tempfile.TemporaryDirectory() as d:
        setup = start(pathlib.Path(d), "--multipart-max-uploads", "5")
        try:
            c = setup.boto3()
            ids = [c.create_multipart_upload(Bucket="data", Key=f"mp/{i}")["UploadId"] for i in range(5)]
            with pytest.raises(ClientError) as e:
                c.create_multipart_upload(Bucket="data", Key="mp/over")
            assert code(e) == "SlowDown"
            # Pages of two, walked with the markers.
            seen, kw = [], {}
            while True:
                page = c.list_multipart_uploads(Bucket="data", MaxUploads=2, **kw)
                seen += [u["UploadId"] for u in page.get("Uploads", [])]
                assert len(page.get("Uploads", [])) <= 2
                if not page["IsTruncated"]:
                    break
                kw = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}
            assert sorted(seen) == sorted(ids) and len(seen) == 5
            # A read key sees no one's uploads.
            with pytest.raises(ClientError) as e:
                setup.boto3(setup.reader).list_multipart_uploads(Bucket="data")
            assert code(e) == "AccessDenied"
            c.abort_multipart_upload(Bucket="data", Key="mp/0", UploadId=ids[0])
            c.create_multipart_upload(Bucket="data", Key="mp/again")
        finally:
            setup.gw.stop()


def test_a_refused_upload_that_asked_to_continue_closes_its_connection(open_gw):
    """A PUT with `Expect: 100-continue` refused before its body was asked for (If-Match on
    a missing key: 404): a client that stopped waiting for `100 Continue` may send the body
    anyway (botocore does after a second), and those bytes must not be read as the next
    request on the connection (a 400 where botocore expected NoSuchKey, seen under load)."""
    gw, _ = open_gw
    host, port = gw.s3.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            f"PUT /open/missing-{time.time_ns()} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            'If-Match: "0123"\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n'.encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 404"), head
        assert b"connection: close" in head.lower(), head
        # The late body, then another request: the server has closed instead of reading it.
        try:
            s.sendall(b"none" + f"GET /open/k HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            rest = s.recv(65536)
            while rest and b"HTTP/1.1 400" not in rest:
                more = s.recv(65536)
                if not more:
                    break
                rest += more
        except (ConnectionResetError, BrokenPipeError):
            rest = b""
        assert b"HTTP/1.1 400" not in rest, rest
