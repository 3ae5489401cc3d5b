//! The object API over real HTTP against the real binary.

use std::collections::HashSet;

use rasa_openapi::{Descriptor, ObjectList, Problem, ProblemCode};
use rasa_tests::{http, pattern, sha256_hex, Gateway};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Client, Response, StatusCode};

async fn put(c: &Client, gw: &Gateway, key: &str, body: Vec<u8>) -> Response {
    c.put(gw.url(&format!("/v1/objects/{key}?lease=true")))
        .body(body)
        .send()
        .await
        .unwrap()
}

pub(crate) async fn put_ok(c: &Client, gw: &Gateway, key: &str, body: Vec<u8>) -> Descriptor {
    let r = put(c, gw, key, body).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    r.json().await.unwrap()
}

/// Asserts an error response is problem+json with the status and code given.
pub async fn assert_problem(r: Response, status: u16, code: ProblemCode) -> Problem {
    assert_eq!(r.status().as_u16(), status, "status of {}", r.url());
    assert_eq!(
        r.headers()["content-type"],
        "application/problem+json",
        "content type of {}",
        r.url()
    );
    let p: Problem = r.json().await.unwrap();
    assert_eq!((p.status, p.code), (status, code), "{p:?}");
    assert!(!p.detail.is_empty());
    p
}

#[tokio::test]
async fn round_trips_from_empty_to_100_mib() {
    let gw = Gateway::start(&[]);
    let c = http();
    for (i, len) in [0usize, 1, 1 << 20, 100 << 20].into_iter().enumerate() {
        let body = pattern(len, i as u64);
        let key = format!("sizes/{len}");
        let r = put(&c, &gw, &key, body.clone()).await;
        assert_eq!(r.status(), StatusCode::CREATED, "PUT {len}");
        let etag = r.headers()["etag"].to_str().unwrap().to_owned();
        let location = r.headers()["location"].to_str().unwrap().to_owned();
        let d: Descriptor = r.json().await.unwrap();
        assert_eq!(d.length, len as u64);
        assert_eq!(d.sha256, sha256_hex(&body));
        assert_eq!(etag, format!("\"{}\"", d.sha256));
        assert_eq!(location, format!("/v1/objects/{key}?version={}", d.version));
        assert_eq!(d.content_type, "application/octet-stream");
        assert_eq!(d.checksum.len(), 16);
        assert_eq!(d.frame_header_len, 64);
        assert_eq!(d.frame_format, 2);
        // The block table: 64 KiB blocks right after the payload.
        assert_eq!(d.block_size, 64 << 10);
        assert_eq!(d.block_table_offset, Some(64 + len as u64));
        assert_eq!(d.lease_ms, 10_000);

        let r = c
            .get(gw.url(&format!("/v1/objects/{key}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
        assert_eq!(r.headers()["content-length"], len.to_string().as_str());
        assert_eq!(r.headers()["accept-ranges"], "bytes");
        assert_eq!(r.headers()["rasa-version"].to_str().unwrap(), d.version);
        assert!(r.headers().contains_key("last-modified"));
        // The frame checksum HTTP readers check bodies with: the descriptor's.
        assert_eq!(r.headers()["rasa-frame-checksum"], d.checksum.as_str());
        assert_eq!(r.headers()["rasa-frame-format"], "2");
        let got = r.bytes().await.unwrap();
        assert_eq!(sha256_hex(&got), d.sha256, "GET {len} returned other bytes");
        let id = rasa_fastpath::frame::FrameIdentity {
            key_hash: rasa_fastpath::frame::key_hash(&key),
            version: u64::from_str_radix(&d.version, 16).unwrap(),
            payload_len: len as u64,
        };
        let mut hasher = rasa_fastpath::frame::FrameHasher::new();
        hasher.update(&got);
        assert_eq!(
            format!("{:016x}", hasher.seal(id, d.block_size).1),
            d.checksum
        );

        let r = c
            .head(gw.url(&format!("/v1/objects/{key}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-length"], len.to_string().as_str());
        assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
    }
}

#[tokio::test]
async fn content_type_is_stored_and_served() {
    let gw = Gateway::start(&[]);
    let c = http();
    let r = c
        .put(gw.url("/v1/objects/photos/cat.jpg"))
        .header("content-type", "image/jpeg")
        .body(vec![0xff, 0xd8])
        .send()
        .await
        .unwrap();
    let d: Descriptor = r.json().await.unwrap();
    assert_eq!(d.content_type, "image/jpeg");
    let r = c
        .get(gw.url("/v1/objects/photos/cat.jpg"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "image/jpeg");
}

#[tokio::test]
async fn ranges() {
    let gw = Gateway::start(&[]);
    let c = http();
    let body: Vec<u8> = (0..100u8).collect();
    put_ok(&c, &gw, "r", body.clone()).await;
    let get = |range: &'static str| c.get(gw.url("/v1/objects/r")).header("range", range).send();
    for (range, start, end) in [
        ("bytes=0-0", 0usize, 0usize),
        ("bytes=-10", 90, 99),
        ("bytes=5-", 5, 99),
        ("bytes=90-1000", 90, 99),
        ("bytes=-1000", 0, 99),
    ] {
        let r = get(range).await.unwrap();
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            r.headers()["content-range"].to_str().unwrap(),
            format!("bytes {start}-{end}/100"),
            "{range}"
        );
        assert_eq!(r.bytes().await.unwrap(), &body[start..=end], "{range}");
    }
    for range in ["bytes=100-", "bytes=200-300", "bytes=-0"] {
        let r = get(range).await.unwrap();
        assert_eq!(r.headers()["content-range"], "bytes */100", "{range}");
        assert_problem(r, 416, ProblemCode::RangeNotSatisfiable).await;
    }
    // Several ranges, and ranges we must ignore, are answered with the whole value.
    for range in ["bytes=0-1,5-6", "bytes=5-2", "lines=1-2", "bytes=x-y"] {
        let r = get(range).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{range}");
        assert_eq!(r.bytes().await.unwrap(), &body[..], "{range}");
    }
    // A stale If-Range means the whole value.
    let r = c
        .get(gw.url("/v1/objects/r"))
        .header("range", "bytes=0-0")
        .header("if-range", "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn conditional_requests() {
    let gw = Gateway::start(&[]);
    let c = http();
    let d = put_ok(&c, &gw, "c", b"v1".to_vec()).await;
    let etag = format!("\"{}\"", d.sha256);
    let url = gw.url("/v1/objects/c");
    let with = |name: &'static str, value: &str| {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        c.get(&url).headers(h).send()
    };
    let r = with("if-none-match", &etag).await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(
        with("if-none-match", "\"other\"").await.unwrap().status(),
        200
    );
    assert_eq!(with("if-none-match", "*").await.unwrap().status(), 304);
    assert_eq!(with("if-match", &etag).await.unwrap().status(), 200);
    assert_problem(
        with("if-match", "\"other\"").await.unwrap(),
        412,
        ProblemCode::PreconditionFailed,
    )
    .await;
    let lm = c.get(&url).send().await.unwrap().headers()["last-modified"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(with("if-modified-since", &lm).await.unwrap().status(), 304);
    assert_problem(
        with("if-match", "not-quoted").await.unwrap(),
        400,
        ProblemCode::InvalidRequest,
    )
    .await;

    // Conditional writes: create-only refuses an existing key and stores nothing.
    let r = c
        .put(&url)
        .header("if-none-match", "*")
        .body("v2")
        .send()
        .await
        .unwrap();
    assert_problem(r, 412, ProblemCode::PreconditionFailed).await;
    let r = c
        .put(&url)
        .header("if-match", "\"other\"")
        .body("v2")
        .send()
        .await
        .unwrap();
    assert_problem(r, 412, ProblemCode::PreconditionFailed).await;
    assert_eq!(rasa_tests::bytes_of(c.get(&url)).await, "v1");
    let r = c
        .put(&url)
        .header("if-match", &etag)
        .body("v2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = c
        .put(gw.url("/v1/objects/fresh"))
        .header("if-none-match", "*")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    // Conditional delete.
    let r = c
        .delete(&url)
        .header("if-match", &etag)
        .send()
        .await
        .unwrap();
    assert_problem(r, 412, ProblemCode::PreconditionFailed).await;
    assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn versions_overwrite_and_delete() {
    let gw = Gateway::start(&[]);
    let c = http();
    let v1 = put_ok(&c, &gw, "doc", b"first".to_vec()).await;
    let v2 = put_ok(&c, &gw, "doc", b"second".to_vec()).await;
    assert_ne!(v1.version, v2.version);
    let url = gw.url("/v1/objects/doc");
    assert_eq!(rasa_tests::bytes_of(c.get(&url)).await, "second");
    let r = c
        .get(format!("{url}?version={}", v1.version))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["rasa-version"].to_str().unwrap(), v1.version);
    assert!(r.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    assert_eq!(r.bytes().await.unwrap(), "first");
    let r = c
        .get(format!("{url}?version=0123456789abcdef"))
        .send()
        .await
        .unwrap();
    assert_problem(r, 404, ProblemCode::NotFound).await;
    let r = c.get(format!("{url}?version=latest")).send().await.unwrap();
    assert_problem(r, 400, ProblemCode::InvalidVersion).await;

    assert_eq!(c.delete(&url).send().await.unwrap().status(), 204);
    assert_problem(
        c.get(&url).send().await.unwrap(),
        404,
        ProblemCode::NotFound,
    )
    .await;
    let r = c
        .get(format!("{url}?version={}", v2.version))
        .send()
        .await
        .unwrap();
    assert_problem(r, 404, ProblemCode::NotFound).await;
    // Idempotent, like S3.
    assert_eq!(c.delete(&url).send().await.unwrap().status(), 204);
    // A new version after a delete gets yet another id.
    let v3 = put_ok(&c, &gw, "doc", b"third".to_vec()).await;
    assert!(![&v1.version, &v2.version].contains(&&v3.version));
}

#[tokio::test]
async fn oversized_bodies_are_refused_and_leave_nothing() {
    let gw = Gateway::start(&["--max-object-size", "1KiB"]);
    let c = http();
    assert_eq!(put(&c, &gw, "ok", vec![1; 1024]).await.status(), 201);
    let r = put(&c, &gw, "big", vec![1; 1025]).await;
    assert_problem(r, 413, ProblemCode::PayloadTooLarge).await;
    // Without Content-Length (chunked), the limit is enforced while streaming.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(vec![2; 600]), Ok(vec![2; 600])];
    let r = c
        .put(gw.url("/v1/objects/big"))
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_problem(r, 413, ProblemCode::PayloadTooLarge).await;
    assert_problem(
        c.get(gw.url("/v1/objects/big")).send().await.unwrap(),
        404,
        ProblemCode::NotFound,
    )
    .await;
    let list: ObjectList = gw.get_json("/v1/objects").await;
    assert_eq!(list.items.len(), 1, "only the accepted object is listed");
    // A chunked body within the limit is stored.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(vec![3; 500]), Ok(vec![4; 500])];
    let r = c
        .put(gw.url("/v1/objects/chunked"))
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let d: Descriptor = r.json().await.unwrap();
    assert_eq!(d.length, 1000);
}

/// Allowed on top of `--memory` and of the idle gateway's own RSS (binary, runtime and
/// libfabric's buffer pools): HTTP buffers in flight.
const RSS_SLACK_MIB: u64 = 16;

#[tokio::test]
async fn memory_budget_holds_while_puts_evict_cold_values() {
    let gw = Gateway::start(&[
        "--memory",
        "64MiB",
        "--arena-size",
        "4MiB",
        "--max-object-size",
        "8MiB",
        "--lease",
        "200ms",
        "--lease-grace",
        "50ms",
        "--upload-staging-memory",
        "4MiB",
    ]);
    // Uploads arrive in staging memory outside the budget, bounded on their own.
    const STAGING_MIB: u64 = 4;
    let c = http();
    let idle = rasa_tests::proc_status_kib(gw.pid(), "VmRSS:");
    // Four times the budget, 1 MiB at a time, to distinct keys: no 507, no 503.
    let total = 256;
    for i in 0..total {
        let r = put(&c, &gw, &format!("fill/{i}"), pattern(1 << 20, i as u64)).await;
        assert_eq!(r.status(), 201, "PUT {i} of {total}: {:?}", r.text().await);
    }
    // The most recent values are all there, whole.
    for i in total - 8..total {
        let got = c
            .get(gw.url(&format!("/v1/objects/fill/{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200, "recent value {i} was evicted");
        assert_eq!(
            sha256_hex(&got.bytes().await.unwrap()),
            sha256_hex(&pattern(1 << 20, i as u64))
        );
    }
    // Cold ones made room (evicted whole arenas at a time).
    let first = c.get(gw.url("/v1/objects/fill/0")).send().await.unwrap();
    assert_eq!(first.status(), 404);
    assert!(rasa_tests::metric(&gw, "rasa_evictions_total").await > 0.0);
    assert!(rasa_tests::metric(&gw, "rasa_arenas_recycled_total").await > 0.0);
    let peak = rasa_tests::proc_status_kib(gw.pid(), "VmHWM:");
    println!(
        "RSS: idle {} MiB, peak {} MiB with --memory 64MiB after {total} MiB of PUTs",
        idle / 1024,
        peak / 1024
    );
    assert!(
        peak <= idle + (64 + STAGING_MIB + RSS_SLACK_MIB) * 1024,
        "peak RSS {peak} KiB exceeds idle {idle} KiB + the 64 MiB budget + {STAGING_MIB} MiB of staging + {RSS_SLACK_MIB} MiB"
    );
    // A value that fits the budget but not an arena still goes in (dedicated arena).
    assert_eq!(
        put(&c, &gw, "large", pattern(6 << 20, 1)).await.status(),
        201
    );
}

#[tokio::test]
async fn a_client_that_disconnects_mid_upload_leaves_no_version() {
    let gw = Gateway::start(&[]);
    let c = http();
    let addr = gw.addr;
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(
            b"PUT /v1/objects/partial HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
        )
        .unwrap();
        s.write_all(&[7; 1000]).unwrap();
        // Dropping the stream closes the connection with 99 000 bytes missing.
    })
    .await
    .unwrap();
    // The signal that the gateway saw the upload end: its abandoned-upload counter.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while rasa_tests::metric(&gw, "rasa_uploads_abandoned_total").await < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned upload was never noticed"
        );
        tokio::task::yield_now().await;
    }
    assert_problem(
        c.get(gw.url("/v1/objects/partial")).send().await.unwrap(),
        404,
        ProblemCode::NotFound,
    )
    .await;
    assert_eq!(
        rasa_tests::metric(&gw, "rasa_versions_stored_total").await,
        0.0
    );
}

#[tokio::test]
async fn concurrent_puts_to_one_key_all_land_as_distinct_versions() {
    let gw = Gateway::start(&[]);
    let c = http();
    let bodies: Vec<Vec<u8>> = (0..64).map(|i| pattern(64 << 10, 1000 + i)).collect();
    let puts = bodies.iter().map(|b| put_ok(&c, &gw, "hot", b.clone()));
    let descs = futures_util::future::join_all(puts).await;
    let versions: HashSet<_> = descs.iter().map(|d| d.version.clone()).collect();
    assert_eq!(versions.len(), 64, "version ids must be distinct");
    let shas: HashSet<_> = bodies.iter().map(|b| sha256_hex(b)).collect();
    let current = rasa_tests::bytes_of(c.get(gw.url("/v1/objects/hot"))).await;
    assert!(
        shas.contains(&sha256_hex(&current)),
        "GET returned a torn or foreign value"
    );
    for d in &descs {
        let r = c
            .get(gw.url(&format!("/v1/objects/hot?version={}", d.version)))
            .send()
            .await
            .unwrap();
        assert_eq!(sha256_hex(&r.bytes().await.unwrap()), d.sha256);
    }
}
