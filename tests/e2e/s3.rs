//! Rasa as a read-through cache in front of a real S3-compatible server (`s3s-fs`), whose
//! own request log counts what reaches S3.

use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use rasa_client::{Client, FastPath, ReadPath};
use rasa_openapi::{DescriptorBatchResponse, ProblemCode};
use rasa_tests::{pattern, sha256_hex, Gateway, S3Server, S3_ACCESS_KEY, S3_BUCKET};

use crate::objects::assert_problem;

async fn put_s3(s3: &aws_sdk_s3::Client, key: &str, body: Vec<u8>, ctype: &str) {
    s3.put_object()
        .bucket(S3_BUCKET)
        .key(key)
        .content_type(ctype)
        .body(ByteStream::from(body))
        .send()
        .await
        .unwrap();
}

fn gateway(s3: &S3Server, extra: &[&str]) -> Gateway {
    let mut args = s3.gateway_args("pre");
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start_with_s3(&args)
}

#[tokio::test]
async fn misses_are_fetched_once_then_served_from_memory_and_one_sided() {
    let s3 = S3Server::start();
    let direct = s3.client().await;
    let csv = b"year,total\n2026,42\n".to_vec();
    put_s3(&direct, "pre/reports/2026.csv", csv.clone(), "text/csv").await;
    let big = pattern(4 << 20, 5);
    put_s3(
        &direct,
        "pre/big.bin",
        big.clone(),
        "application/octet-stream",
    )
    .await;
    put_s3(
        &direct,
        "pre/ranged.bin",
        pattern(1000, 6),
        "application/octet-stream",
    )
    .await;
    let gw = gateway(&s3, &["--negative-ttl", "60s"]);
    let c = rasa_tests::http();

    // First touch comes from S3, with its media type; the second is a hit.
    for _ in 0..2 {
        let r = c
            .get(gw.url("/v1/objects/reports/2026.csv"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/csv");
        assert_eq!(r.bytes().await.unwrap(), csv);
    }
    assert_eq!(s3.ops("GetObject", "pre/reports/2026.csv"), 1);

    // 100 concurrent GETs of one cold key: exactly one GetObject reaches S3.
    let gets = (0..100).map(|_| {
        let c = c.clone();
        let url = gw.url("/v1/objects/big.bin");
        async move { rasa_tests::bytes_of(c.get(url)).await }
    });
    for body in futures_util::future::join_all(gets).await {
        assert_eq!(sha256_hex(&body), sha256_hex(&big));
    }
    assert_eq!(s3.ops("GetObject", "pre/big.bin"), 1, "single-flight");

    // A range of a cold object.
    let r = c
        .get(gw.url("/v1/objects/ranged.bin"))
        .header("range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.bytes().await.unwrap(), pattern(1000, 6)[10..20]);

    // Absent at the origin: 404, remembered (one GetObject for two misses).
    for _ in 0..2 {
        let r = c.get(gw.url("/v1/objects/missing")).send().await.unwrap();
        assert_problem(r, 404, ProblemCode::NotFound).await;
    }
    assert_eq!(s3.ops("GetObject", "pre/missing"), 1, "negative caching");

    // Batch descriptors read through too.
    put_s3(&direct, "pre/batch.bin", b"batched".to_vec(), "text/plain").await;
    let b: DescriptorBatchResponse = rasa_tests::json_of(
        c.post(gw.url("/v1/descriptors"))
            .json(&serde_json::json!({"keys": ["batch.bin", "missing"]})),
    )
    .await;
    assert_eq!(b.results[0].descriptor.as_ref().unwrap().length, 7);
    assert_eq!(
        b.results[1].error.as_ref().unwrap().code,
        ProblemCode::NotFound
    );

    // A one-sided read of a read-through object.
    put_s3(
        &direct,
        "pre/fast.bin",
        pattern(1 << 20, 7),
        "application/octet-stream",
    )
    .await;
    let sdk = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let obj = sdk.get("fast.bin").await.unwrap();
    assert_eq!(obj.path, ReadPath::Fabric);
    assert_eq!(sha256_hex(&obj.bytes), sha256_hex(&pattern(1 << 20, 7)));
}

#[tokio::test]
async fn write_through_and_delete_through() {
    let s3 = S3Server::start();
    let direct = s3.client().await;
    let gw = gateway(&s3, &[]);
    let c = rasa_tests::http();
    let body = pattern(100_000, 9);
    let r = c
        .put(gw.url("/v1/objects/docs/a.bin"))
        .header("content-type", "application/x-test")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let got = direct
        .get_object()
        .bucket(S3_BUCKET)
        .key("pre/docs/a.bin")
        .send()
        .await
        .expect("the PUT is in the bucket once acknowledged");
    assert_eq!(got.content_type(), Some("application/x-test"));
    assert_eq!(got.body.collect().await.unwrap().into_bytes(), body);

    assert_eq!(
        c.delete(gw.url("/v1/objects/docs/a.bin"))
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    let gone = direct
        .head_object()
        .bucket(S3_BUCKET)
        .key("pre/docs/a.bin")
        .send()
        .await;
    assert!(gone.is_err(), "DELETE deletes in S3 too");
    let r = c
        .get(gw.url("/v1/objects/docs/a.bin"))
        .send()
        .await
        .unwrap();
    assert_problem(r, 404, ProblemCode::NotFound).await;
}

#[tokio::test]
async fn changes_at_the_origin_are_picked_up_after_the_ttl() {
    let s3 = S3Server::start();
    let direct = s3.client().await;
    put_s3(&direct, "pre/doc", b"v1".to_vec(), "text/plain").await;
    // A TTL of 1 ms: every hit is revalidated with a conditional GET.
    let gw = gateway(&s3, &["--origin-ttl", "1ms"]);
    let c = rasa_tests::http();
    let first = c.get(gw.url("/v1/objects/doc")).send().await.unwrap();
    let v1 = first.headers()["rasa-version"].to_str().unwrap().to_owned();
    assert_eq!(first.bytes().await.unwrap(), "v1");
    // Unchanged at the origin: same version.
    let again = c.get(gw.url("/v1/objects/doc")).send().await.unwrap();
    assert_eq!(again.headers()["rasa-version"].to_str().unwrap(), v1);
    // Changed at the origin: a new version.
    put_s3(&direct, "pre/doc", b"v2!".to_vec(), "text/plain").await;
    let changed = c.get(gw.url("/v1/objects/doc")).send().await.unwrap();
    assert_ne!(changed.headers()["rasa-version"].to_str().unwrap(), v1);
    assert_eq!(changed.bytes().await.unwrap(), "v2!");
    // Deleted at the origin: gone here too.
    direct
        .delete_object()
        .bucket(S3_BUCKET)
        .key("pre/doc")
        .send()
        .await
        .unwrap();
    let r = c.get(gw.url("/v1/objects/doc")).send().await.unwrap();
    assert_problem(r, 404, ProblemCode::NotFound).await;
}

#[tokio::test]
async fn s3_down_hits_still_served_misses_fail_fast_and_recovery_is_automatic() {
    let mut s3 = S3Server::start();
    let direct = s3.client().await;
    put_s3(&direct, "pre/warm", b"warm".to_vec(), "text/plain").await;
    put_s3(&direct, "pre/cold", b"cold".to_vec(), "text/plain").await;
    let gw = gateway(&s3, &["--origin-timeout", "2s", "--origin-ttl", "0s"]);
    let c = rasa_tests::http();
    assert_eq!(
        c.get(gw.url("/v1/objects/warm"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    s3.kill();
    let r = c.get(gw.url("/v1/objects/warm")).send().await.unwrap();
    assert_eq!(r.status(), 200, "hits are served while S3 is down");
    let start = Instant::now();
    let r = c.get(gw.url("/v1/objects/cold")).send().await.unwrap();
    let status = r.status().as_u16();
    assert!(
        status == 502 || status == 504,
        "miss with S3 down gave {status}"
    );
    let code = if status == 502 {
        ProblemCode::OriginUnavailable
    } else {
        ProblemCode::OriginTimeout
    };
    let p = assert_problem(r, status, code).await;
    assert!(p.detail.contains("origin"), "{p:?}");
    assert!(
        start.elapsed() < Duration::from_secs(2 + 8),
        "took {:?}",
        start.elapsed()
    );

    s3.restart();
    let r = c.get(gw.url("/v1/objects/cold")).send().await.unwrap();
    assert_eq!(r.status(), 200, "misses work again once S3 is back");
    assert_eq!(r.bytes().await.unwrap(), "cold");
}

#[tokio::test]
async fn a_public_bucket_is_read_with_s3_anonymous_and_origin_errors_are_one_line() {
    let s3 = S3Server::start_anonymous();
    s3.put_file("pre/open/data.csv", b"a,b\n1,2\n");
    // Signed requests to an endpoint that takes none fail, in one line naming the object.
    let signed = gateway(&s3, &[]);
    let c = rasa_tests::http();
    let r = c
        .get(signed.url("/v1/objects/open/data.csv"))
        .send()
        .await
        .unwrap();
    let p = assert_problem(r, 502, ProblemCode::OriginUnavailable).await;
    assert!(!p.detail.contains('\n'), "{}", p.detail);
    assert!(
        p.detail
            .contains(&format!("GetObject s3://{S3_BUCKET}/pre/open/data.csv: ")),
        "{}",
        p.detail
    );
    assert!(p.detail.len() < 400, "{}", p.detail);
    // Unsigned, as a public bucket wants.
    let open = gateway(&s3, &["--s3-anonymous"]);
    let r = c
        .get(open.url("/v1/objects/open/data.csv"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap(), "a,b\n1,2\n");
}

#[tokio::test]
async fn wrong_credentials_give_a_one_line_403_from_s3() {
    let s3 = S3Server::start();
    let mut args = s3.gateway_args("pre");
    args.extend(["--origin-timeout".into(), "5s".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_env(
        &args,
        &[
            ("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
        ],
    );
    let r = rasa_tests::http()
        .get(gw.url("/v1/objects/x"))
        .send()
        .await
        .unwrap();
    let p = assert_problem(r, 502, ProblemCode::OriginUnavailable).await;
    assert!(!p.detail.contains('\n'), "{}", p.detail);
    assert!(
        p.detail.starts_with(&format!(
            "the origin denied access: GetObject s3://{S3_BUCKET}/pre/x: 403 "
        )),
        "{}",
        p.detail
    );
    assert!(p.detail.contains("credentials"), "{}", p.detail);
}

#[tokio::test]
async fn objects_over_the_size_limit_stream_from_s3_without_being_cached() {
    let s3 = S3Server::start();
    let huge = pattern(300 << 10, 3);
    s3.put_file("pre/huge.bin", &huge);
    let gw = gateway(&s3, &["--max-object-size", "256KiB"]);
    let c = rasa_tests::http();
    for _ in 0..2 {
        let r = c.get(gw.url("/v1/objects/huge.bin")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["rasa-pass-through"], "true");
        assert!(r.headers().get("etag").is_none());
        assert!(r.bytes().await.unwrap() == huge);
    }
    let r = c
        .get(gw.url("/v1/objects/huge.bin"))
        .header("range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes 1000-1999/{}", huge.len())
    );
    assert!(r.bytes().await.unwrap() == huge[1000..2000]);
    assert_eq!(
        rasa_tests::metric(&gw, "rasa_origin_pass_through_total").await,
        3.0
    );
    // The first read learnt the object is too large; the next go straight to S3, once each.
    assert_eq!(
        s3.ops("GetObject", "pre/huge.bin"),
        4,
        "one opening GET, then one per read"
    );
    // No version here: no descriptor, said plainly.
    let r = c
        .get(gw.url("/v1/descriptors/huge.bin"))
        .send()
        .await
        .unwrap();
    let p = assert_problem(r, 413, ProblemCode::PayloadTooLarge).await;
    assert!(
        p.detail.contains("streams it from the origin"),
        "{}",
        p.detail
    );
    // The SDK reads it over HTTP in auto mode; required fails with that problem.
    let auto = Client::builder(&gw.base)
        .fast_path(FastPath::Auto)
        .build()
        .unwrap();
    let got = auto.get("huge.bin").await.unwrap();
    assert_eq!(got.path, ReadPath::Http);
    assert!(got.bytes == huge);
    let mut out = Vec::new();
    auto.get_to("huge.bin", &mut out).await.unwrap();
    assert!(out == huge);
    let required = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    assert!(required.get("huge.bin").await.unwrap_err().http_only());
}

/// A TCP relay in front of the origin that holds back the first response it sees until
/// another response has gone by (or `hold` passes): the origin answers the first write
/// last, the interleaving that per-key write order exists for.
async fn relay_holding_first_response(
    origin: std::net::SocketAddr,
    hold: Duration,
) -> std::net::SocketAddr {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let responses = Arc::new(AtomicUsize::new(0));
    let passed = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = tokio::net::TcpStream::connect(origin).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut ur, mut uw) = upstream.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut cr, &mut uw).await });
            let (responses, passed) = (Arc::clone(&responses), Arc::clone(&passed));
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                let mut fresh = true;
                loop {
                    let n = match ur.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    // A chunk starting with the status line begins a response.
                    if fresh || buf.starts_with(b"HTTP/1.1 ") {
                        fresh = false;
                        if responses.fetch_add(1, Ordering::SeqCst) == 0 {
                            let _ = tokio::time::timeout(hold, passed.notified()).await;
                        } else {
                            passed.notify_waiters();
                        }
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    at
}

/// Two write-through PUTs of one key, the origin answering the first one last: the
/// gateway publishes them in the order the origin stored them, so what it serves is what
/// the origin holds. Without per-key order the first PUT would be published last, over a
/// value the origin no longer has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_through_puts_of_one_key_are_published_in_the_origins_order() {
    let s3 = S3Server::start();
    let origin = format!("127.0.0.1:{}", s3.port()).parse().unwrap();
    let relay = relay_holding_first_response(origin, Duration::from_secs(2)).await;
    let mut args = s3.gateway_args("pre");
    let endpoint = args.iter().position(|a| a == "--s3-endpoint").unwrap() + 1;
    args[endpoint] = format!("http://{relay}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_with_s3(&args);
    let c = rasa_tests::http();
    let (first, second) = (pattern(4096, 1), pattern(4096, 2));
    let put = |body: Vec<u8>| c.put(gw.url("/v1/objects/contended")).body(body).send();
    let a = tokio::spawn(put(first.clone()));
    // The first PUT is at the origin (its answer held back) before the second one starts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s3.ops("PutObject", "pre/contended") == 0 {
        assert!(
            Instant::now() < deadline,
            "the first PUT never reached the origin"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let b = tokio::spawn(put(second.clone()));
    assert_eq!(a.await.unwrap().unwrap().status(), 201);
    assert_eq!(b.await.unwrap().unwrap().status(), 201);
    let served = rasa_tests::bytes_of(c.get(gw.url("/v1/objects/contended"))).await;
    let held = s3.object("pre/contended").await;
    assert!(
        served == held,
        "the gateway serves {} but the origin holds {}",
        sha256_hex(&served),
        sha256_hex(&held)
    );
    assert!(held == second, "the later PUT is the one both keep");
}
