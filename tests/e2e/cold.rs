//! Cold objects stream while they fill from the origin (s3s-fs): the first bytes arrive
//! before the object is stored, concurrent misses share one origin fetch, and an origin
//! that dies midway cuts the streams short and publishes nothing.

use std::time::Instant;

use rasa_openapi::cluster::PEER_FILL_HEADER;
use rasa_openapi::FILLING_HEADER;
use rasa_tests::{pattern, Gateway, S3Server};

fn gateway(s3: &S3Server) -> Gateway {
    let args = s3.gateway_args("pre");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start_with_s3(&args)
}

/// Whether the gateway holds `key` (its listing shows what it stores, never the origin).
async fn stored(gw: &Gateway, key: &str) -> bool {
    let r = rasa_tests::http()
        .get(gw.url(&format!("/v1/objects?prefix={key}")))
        .send()
        .await
        .unwrap();
    let list: rasa_openapi::ObjectList = r.json().await.unwrap();
    list.items.iter().any(|i| i.key == key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_object_streams_while_it_fills_then_is_served_from_memory() {
    let s3 = S3Server::start();
    let value = pattern(64 << 20, 5);
    s3.put_file("pre/big", &value);
    let gw = gateway(&s3);
    let c = rasa_tests::http();
    let start = Instant::now();
    let mut r = c.get(gw.url("/v1/objects/big")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[FILLING_HEADER], "true", "a cold miss streams");
    assert_eq!(r.content_length(), Some(value.len() as u64));
    let first = r.chunk().await.unwrap().expect("a first chunk");
    let first_at = start.elapsed();
    let mut got = first.to_vec();
    while let Some(c) = r.chunk().await.unwrap() {
        got.extend_from_slice(&c);
    }
    let all_at = start.elapsed();
    assert!(got == value, "streamed bytes differ");
    assert!(
        first_at < all_at,
        "first byte {first_at:?}, last {all_at:?}"
    );
    // Stored once complete: the next GET is a hit with a version and the SHA-256 ETag.
    let r = c.get(gw.url("/v1/objects/big")).send().await.unwrap();
    assert!(r.headers().contains_key("rasa-version"));
    assert!(!r.headers().contains_key(FILLING_HEADER));
    assert!(r.bytes().await.unwrap() == value);
    assert_eq!(s3.ops("GetObject", "pre/big"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_the_fill_has_reached_is_served_from_it_without_asking_the_origin_again() {
    let s3 = S3Server::start();
    let value = pattern(200 << 20, 8);
    s3.put_file("pre/ranged", &value);
    let gw = gateway(&s3);
    let c = rasa_tests::http();
    let mut whole = c.get(gw.url("/v1/objects/ranged")).send().await.unwrap();
    assert_eq!(whole.headers()[FILLING_HEADER], "true");
    let mut got = whole
        .chunk()
        .await
        .unwrap()
        .expect("a first chunk")
        .to_vec();
    // The fill has begun: a range from its start is cut from it (the first bytes are
    // there, the rest of the range follows as it arrives).
    for (first, last) in [(0usize, 1023usize), (1000, (8 << 20) - 1)] {
        let r = c
            .get(gw.url("/v1/objects/ranged"))
            .header("range", format!("bytes={first}-{last}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 206);
        assert_eq!(r.headers()[FILLING_HEADER], "true", "not from the fill");
        assert_eq!(
            r.headers()["content-range"],
            format!("bytes {first}-{last}/{}", value.len()).as_str()
        );
        assert!(
            r.bytes().await.unwrap() == value[first..=last],
            "{first}-{last}"
        );
    }
    assert_eq!(
        s3.ops("GetObject", "pre/ranged"),
        1,
        "the origin was asked again"
    );
    while let Some(chunk) = whole.chunk().await.unwrap() {
        got.extend_from_slice(&chunk);
    }
    assert!(got == value);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cold_requests_share_one_fetch() {
    let s3 = S3Server::start();
    let value = pattern(24 << 20, 6);
    s3.put_file("pre/shared", &value);
    let gw = gateway(&s3);
    let reads = (0..10).map(|_| {
        let url = gw.url("/v1/objects/shared");
        async move {
            let r = rasa_tests::http().get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap()
        }
    });
    for body in futures_util::future::join_all(reads).await {
        assert!(body == value, "a concurrent reader got other bytes");
    }
    assert_eq!(
        s3.ops("GetObject", "pre/shared"),
        1,
        "one origin fetch for all"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_dying_mid_fill_cuts_streams_short_and_stores_nothing() {
    let mut s3 = S3Server::start();
    let value = pattern(200 << 20, 7);
    s3.put_file("pre/huge", &value);
    let gw = gateway(&s3);
    let c = rasa_tests::http();
    let mut r = c.get(gw.url("/v1/objects/huge")).send().await.unwrap();
    assert_eq!(r.headers()[FILLING_HEADER], "true");
    let mut got = r.chunk().await.unwrap().expect("a first chunk").len();
    s3.kill(); // while 200 MiB are still on their way
    let ended = loop {
        match r.chunk().await {
            Ok(Some(c)) => got += c.len(),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    assert!(
        ended.is_err() || got < value.len(),
        "a fetch that failed midway looked complete ({got} bytes)"
    );
    assert!(
        got < value.len(),
        "all {got} bytes arrived: the origin died too late"
    );
    assert!(!stored(&gw, "huge").await, "a partial object was stored");
    // The origin is back: the next request fetches again, whole.
    s3.restart();
    let r = c.get(gw.url("/v1/objects/huge")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.unwrap() == value);
    assert!(stored(&gw, "huge").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_misses_asks_the_origin_and_fetches_nothing() {
    let s3 = S3Server::start();
    let value = pattern(2 << 20, 8);
    s3.put_file("pre/h", &value);
    let gw = gateway(&s3);
    let c = rasa_tests::http();
    let r = c.head(gw.url("/v1/objects/h")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-length"],
        value.len().to_string().as_str()
    );
    assert_eq!(r.headers()[rasa_openapi::PASS_THROUGH_HEADER], "true");
    assert!(!r.headers().contains_key("rasa-version"));
    assert_eq!(s3.ops("HeadObject", "pre/h"), 1);
    assert_eq!(s3.ops("GetObject", "pre/h"), 0, "a HEAD fetched the object");
    assert!(!stored(&gw, "h").await);
    let r = c.head(gw.url("/v1/objects/absent")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    // A GET stores it; then HEAD answers from memory, with its version.
    assert!(
        c.get(gw.url("/v1/objects/h"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            == value
    );
    // The GET streamed while the object filled; it is stored once the fill completes,
    // which may be just after the last byte reached the client.
    wait_stored(&gw, "h").await;
    let r = c.head(gw.url("/v1/objects/h")).send().await.unwrap();
    assert!(r.headers().contains_key("rasa-version"));
    assert_eq!(s3.ops("HeadObject", "pre/h"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_range_is_served_from_the_origins_range_while_the_object_fills() {
    let s3 = S3Server::start();
    let value = pattern(8 << 20, 9);
    s3.put_file("pre/r", &value);
    s3.put_file("pre/only", &value);
    let gw = gateway(&s3);
    let c = rasa_tests::http();
    let range = |key: &str| {
        c.get(gw.url(&format!("/v1/objects/{key}")))
            .header("range", "bytes=1000-1999")
            .send()
    };
    let r = range("r").await.unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes 1000-1999/{}", value.len()).as_str()
    );
    assert!(r.bytes().await.unwrap() == value[1000..2000]);
    // --origin-fill whole (the default): the object is stored in the background.
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while !stored(&gw, "r").await {
        assert!(
            Instant::now() < deadline,
            "the whole object was never stored"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = range("r").await.unwrap();
    assert_eq!(r.status(), 206);
    assert!(
        r.headers().contains_key("rasa-version"),
        "now served from memory"
    );
    assert!(r.bytes().await.unwrap() == value[1000..2000]);

    // --origin-fill range: only the range is fetched.
    let args = {
        let mut a = s3.gateway_args("pre");
        a.extend(["--origin-fill".to_owned(), "range".to_owned()]);
        a
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let only = Gateway::start_with_s3(&args);
    let r = c
        .get(only.url("/v1/objects/only"))
        .header("range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert!(r.bytes().await.unwrap() == value[1000..2000]);
    assert!(!stored(&only, "only").await);
    assert_eq!(
        s3.ops("GetObject", "pre/only"),
        1,
        "only the range was fetched"
    );
}

/// A gateway reading through `s3` (prefix `pre`) with an S3 listener and a reader's key, and
/// an S3 client with that key; `extra` flags added.
fn s3_listener(s3: &S3Server, extra: &[&str]) -> (Gateway, aws_sdk_s3::Client) {
    let keys = rasa_tests::temp_dir("s3-listener").join("s3-keys");
    let (id, secret) = rasa_tests::new_s3_key(&keys, "reader", "read");
    let mut args = s3.gateway_args("pre");
    args.extend(["--s3-listen".to_owned(), "127.0.0.1:0".to_owned()]);
    args.extend([
        "--s3-credentials-file".to_owned(),
        keys.display().to_string(),
    ]);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_with_s3(&args);
    let client = rasa_tests::s3_client_with(&gw.s3_url(), &id, &secret);
    (gw, client)
}

/// Waits (10 s at most) until the fill of `key` has stored it, which may be just after
/// the last byte of a streamed GET reached the client.
async fn wait_stored(gw: &Gateway, key: &str) {
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while !stored(gw, key).await {
        assert!(Instant::now() < deadline, "the fill never stored {key}");
        tokio::task::yield_now().await;
    }
}

/// Issue 44: the S3 listener reads through the object service as the HTTP API does, so an
/// S3 HeadObject of a key not held here asks the origin's HEAD and fetches nothing (it had
/// fetched the whole object), answering with the ETag the object has once stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_head_that_misses_asks_the_origins_head_and_fetches_nothing() {
    let s3 = S3Server::start();
    let value = pattern(2 << 20, 12);
    s3.put_file("pre/h", &value);
    let (gw, client) = s3_listener(&s3, &[]);
    let bucket = rasa_tests::S3_BUCKET;
    // The listener serves the origin's bucket: its keys are the origin's ("pre/h").
    let head_of = |key: &'static str| client.head_object().bucket(bucket).key(key).send();
    let head = head_of("pre/h").await.unwrap();
    assert_eq!(head.content_length(), Some(value.len() as i64));
    let origin_etag = head.e_tag().expect("the origin's ETag").to_owned();
    assert!(head.last_modified().is_some(), "the origin's Last-Modified");
    assert_eq!(s3.ops("HeadObject", "pre/h"), 1);
    assert_eq!(
        s3.ops("GetObject", "pre/h"),
        0,
        "an S3 HEAD fetched the object"
    );
    assert!(!stored(&gw, "h").await);
    let absent = head_of("pre/absent").await;
    assert_eq!(
        absent
            .unwrap_err()
            .raw_response()
            .map(|r| r.status().as_u16()),
        Some(404)
    );

    // Read, then HEAD again: from memory now (a version), the same ETag as before.
    let got = client
        .get_object()
        .bucket(bucket)
        .key("pre/h")
        .send()
        .await
        .unwrap();
    assert!(got.body.collect().await.unwrap().into_bytes() == value);
    let head = head_of("pre/h").await.unwrap();
    assert!(
        head.version_id().is_some(),
        "answered from the stored version"
    );
    assert_eq!(head.e_tag(), Some(origin_etag.as_str()));
    assert_eq!(s3.ops("HeadObject", "pre/h"), 1);
    assert_eq!(s3.ops("GetObject", "pre/h"), 1);
}

/// Issue 44: an S3 GET reads through the object service too, as the native GET does: a cold
/// object streams as it fills (no version yet; the next GET is a hit with one), a cold range
/// is the origin's range, and an object too large to cache passes through from the origin
/// (it was refused with 501 NotImplemented).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_get_streams_a_cold_object_and_passes_a_too_large_one_through() {
    let s3 = S3Server::start();
    let value = pattern(8 << 20, 13);
    s3.put_file("pre/big", &value);
    s3.put_file("pre/r", &value);
    let huge = pattern(40 << 20, 14);
    s3.put_file("pre/huge", &huge);
    let (gw, client) = s3_listener(
        &s3,
        &["--max-object-size", "32MiB", "--origin-fill", "range"],
    );
    let get = |key: &'static str| client.get_object().bucket(rasa_tests::S3_BUCKET).key(key);

    let cold = get("pre/big").send().await.unwrap();
    assert_eq!(cold.content_length(), Some(value.len() as i64));
    assert!(
        cold.version_id().is_none(),
        "streamed as it fills: no version yet"
    );
    assert!(cold.body.collect().await.unwrap().into_bytes() == value);
    wait_stored(&gw, "big").await;
    let hit = get("pre/big").send().await.unwrap();
    assert!(hit.version_id().is_some(), "a hit has a version");
    assert!(hit.body.collect().await.unwrap().into_bytes() == value);
    assert_eq!(s3.ops("GetObject", "pre/big"), 1);

    // A cold range: the origin's range (--origin-fill range: nothing else fetched).
    let part = get("pre/r").range("bytes=1000-1999").send().await.unwrap();
    assert_eq!(part.content_range(), Some("bytes 1000-1999/8388608"));
    assert!(part.body.collect().await.unwrap().into_bytes() == value[1000..2000]);
    assert!(!stored(&gw, "r").await);

    // Too large to cache (40 MiB over --max-object-size 32MiB): passed through.
    let through = get("pre/huge").send().await.unwrap();
    assert_eq!(through.content_length(), Some(huge.len() as i64));
    assert!(through.body.collect().await.unwrap().into_bytes() == huge);
    assert!(!stored(&gw, "huge").await);
}

/// Review III, finding 9: `Rasa-Peer-Fill` asks a member for a memory-only answer; from
/// a client (no proven hop, no cluster) it is ignored, so a cold key still comes from
/// the origin instead of a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_peer_fill_marker_is_ignored() {
    let s3 = S3Server::start();
    s3.put_file("pre/cold0", b"from the origin");
    s3.put_file("pre/cold1", b"from the origin");
    let gw = gateway(&s3);
    let both = [PEER_FILL_HEADER, rasa_openapi::HOP_HEADER];
    for (i, marks) in [&both[..1], &both[..]].into_iter().enumerate() {
        let mut req = rasa_tests::http().get(gw.url(&format!("/v1/objects/cold{i}")));
        for m in marks {
            req = req.header(*m, "1");
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200, "with {marks:?}");
        assert_eq!(&r.bytes().await.unwrap()[..], b"from the origin");
    }
}
