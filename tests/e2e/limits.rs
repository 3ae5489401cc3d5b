//! Limits at the edge: silent and crawling connections, stalled bodies, shed requests,
//! oversized headers, a busy gateway, a client that stops reading, chunked uploads sharing
//! a bounded memory (split from `security.rs`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::objects::assert_problem;
use rasa_client::{Client, FastPath};
use rasa_openapi::{Problem, ProblemCode, PROBLEM_JSON};
use rasa_tests::{http, metric, raw_request, wait_for_metric, Gateway};
use reqwest::header::RETRY_AFTER;
use reqwest::StatusCode;

/// A client trickling its headers is cut off after `--header-timeout` while other
/// clients are served meanwhile.
#[tokio::test]
async fn slowloris_is_closed_while_others_are_served() {
    let gw = Gateway::start(&["--header-timeout", "1s", "--fast-path", "off"]);
    let addr = gw.addr;
    let slow = std::thread::spawn(move || {
        let start = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        // The pause between bytes is the attack's pace, not a synchronisation.
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: rasa\r\n")
            .unwrap();
        let mut buf = [0u8; 512];
        loop {
            if s.write_all(b"x").is_err() {
                return (start.elapsed(), Vec::new());
            }
            match s.read(&mut buf) {
                Ok(0) => return (start.elapsed(), Vec::new()),
                Ok(n) => return (start.elapsed(), buf[..n].to_vec()),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    assert!(start.elapsed() < Duration::from_secs(30), "never closed");
                }
                Err(_) => return (start.elapsed(), Vec::new()),
            }
        }
    });
    // While the slow client holds its connection, others get answers.
    let c = http();
    let mut served = 0;
    while !slow.is_finished() {
        let r = c.get(gw.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        served += 1;
        tokio::task::yield_now().await;
        if served >= 3 {
            break;
        }
    }
    assert!(served >= 1);
    let (elapsed, answer) = tokio::task::spawn_blocking(move || slow.join().unwrap())
        .await
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&answer).contains(" 200 "),
        "the trickled request was served"
    );
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(10),
        "closed after {elapsed:?}, expected about 1 s"
    );
    // And the gateway still serves (a new client: the pooled connection sat idle past
    // --header-timeout, which closes idle keep-alive connections too, and may be half
    // closed when reused).
    let r = http().get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// A PUT whose body stops arriving gets 408 after `--body-timeout`, stores nothing and
/// leaves the current version in place.
#[tokio::test]
async fn stalled_body_gets_408_and_loses_nothing() {
    let gw = Gateway::start(&["--body-timeout", "500ms", "--fast-path", "off"]);
    let c = http();
    let put = c
        .put(gw.url("/v1/objects/stall"))
        .body("v1")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let stalled = HeldUpload::start(
        gw.url("/v1/objects/stall"),
        b"first chunk".to_vec(),
        Some(1000),
    )
    .await;
    let r = stalled.response.await.unwrap().unwrap();
    assert_problem(r, 408, ProblemCode::RequestTimeout).await;
    let got = c.get(gw.url("/v1/objects/stall")).send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "v1");
}

/// A PUT whose body the test feeds by hand: its first chunk is sent at once, the rest
/// when the test sends on the returned channel (dropping it ends the body).
struct HeldUpload {
    more: tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
    response: tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
}

impl HeldUpload {
    async fn start(url: String, first: Vec<u8>, content_length: Option<usize>) -> HeldUpload {
        let (more, rx) = tokio::sync::mpsc::channel(1);
        more.send(Ok(first)).await.unwrap();
        let mut req = http()
            .put(url)
            .body(reqwest::Body::wrap_stream(tokio_stream(rx)));
        if let Some(len) = content_length {
            req = req.header("content-length", len.to_string());
        }
        HeldUpload {
            more,
            response: tokio::spawn(req.send()),
        }
    }

    /// Sends the last chunk and returns the answer.
    async fn finish(self, last: Vec<u8>) -> reqwest::Response {
        self.more.send(Ok(last)).await.unwrap();
        drop(self.more);
        self.response.await.unwrap().unwrap()
    }
}

/// A stream over a channel's items, for request bodies the test feeds by hand.
fn tokio_stream<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// With every slot held, more `/v1` requests are shed at once with 503 and `Retry-After`
/// (health stays up); once the slots free up, the gateway serves again and the held
/// uploads complete intact.
#[tokio::test]
async fn excess_requests_are_shed_then_served() {
    let gw = Gateway::start(&[
        "--max-concurrent-requests",
        "2",
        "--body-timeout",
        "60s",
        "--fast-path",
        "off",
    ]);
    let c = http();
    let mut uploads = Vec::new();
    for i in 0..2u8 {
        let url = gw.url(&format!("/v1/objects/held/{i}"));
        uploads.push(HeldUpload::start(url, vec![b'a' + i; 10], Some(20)).await);
    }
    // Wait until both uploads hold a slot.
    wait_for_metric(&gw, "rasa_http_requests_active", 2.0).await;
    let burst: Vec<_> = (0..16)
        .map(|_| tokio::spawn(http().get(gw.url("/v1/objects/held/0")).send()))
        .collect();
    for r in burst {
        let r = r.await.unwrap().unwrap();
        assert_eq!(r.headers()[RETRY_AFTER], "1");
        assert_problem(r, 503, ProblemCode::Overloaded).await;
    }
    assert!(metric(&gw, "rasa_http_requests_shed_total").await >= 16.0);
    let health = c.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK, "health must not be shed");
    for (i, upload) in (0u8..).zip(uploads) {
        let r = upload.finish(vec![b'a' + i; 10]).await;
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    for i in 0..2u8 {
        let got = c
            .get(gw.url(&format!("/v1/objects/held/{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), StatusCode::OK);
        assert_eq!(got.bytes().await.unwrap().to_vec(), vec![b'a' + i; 20]);
    }
}

/// Request heads larger than `--max-header-size` get 431 as a problem document; smaller
/// ones are served.
#[tokio::test]
async fn oversized_headers_get_431() {
    let gw = Gateway::start(&["--max-header-size", "4KiB", "--fast-path", "off"]);
    let req = |filler: usize| {
        format!(
            "GET /healthz HTTP/1.1\r\nHost: rasa\r\nX-Filler: {}\r\nConnection: close\r\n\r\n",
            "f".repeat(filler)
        )
    };
    let big = raw_request(gw.addr, req(5000).as_bytes());
    assert_eq!(big.status, 431);
    assert_eq!(big.header("content-type"), Some(PROBLEM_JSON));
    let p: Problem = serde_json::from_slice(&big.body).unwrap();
    assert_eq!(p.code, ProblemCode::HeadersTooLarge);
    let small = raw_request(gw.addr, req(3000).as_bytes());
    assert_eq!(small.status, 200);
}

/// The SDK waits out a `503` with `Retry-After` and retries (nothing was done by the
/// refused request); with retries off it returns the `503` at once.
#[tokio::test]
async fn the_sdk_waits_out_a_busy_gateway() {
    let gw = Gateway::start(&[
        "--max-concurrent-requests",
        "1",
        "--body-timeout",
        "60s",
        "--fast-path",
        "off",
    ]);
    let c = http();
    let put = c
        .put(gw.url("/v1/objects/busy"))
        .body("value")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    // Hold the only slot with an upload that has not finished.
    let held = HeldUpload::start(gw.url("/v1/objects/held"), b"half".to_vec(), Some(8)).await;
    wait_for_metric(&gw, "rasa_http_requests_active", 1.0).await;

    let impatient = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .retries_when_busy(0)
        .build()
        .unwrap();
    let err = impatient.get("busy").await.unwrap_err();
    assert_eq!(err.code(), Some(ProblemCode::Overloaded));
    assert_eq!(impatient.stats().busy_retries, 0);

    let patient = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .retries_when_busy(5)
        .build()
        .unwrap();
    let waiting = {
        let patient = patient.clone();
        tokio::spawn(async move { patient.get("busy").await })
    };
    // Once the patient client has been turned away, free the slot.
    wait_for_metric(&gw, "rasa_http_requests_shed_total", 2.0).await;
    let r = held.finish(b"more".to_vec()).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let got = waiting.await.unwrap().expect("served after waiting");
    assert_eq!(&got.bytes[..], b"value");
    assert!(patient.stats().busy_retries >= 1);
}

/// A client that asks for a large value and stops reading is cut off after
/// `--send-timeout`, so it cannot pin the memory its response refers to; others are
/// served meanwhile.
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off() {
    let gw = Gateway::start(&["--send-timeout", "1s", "--fast-path", "off"]);
    let c = http();
    let value = vec![7u8; 64 << 20]; // far more than loopback socket buffers hold
    let put = c
        .put(gw.url("/v1/objects/big"))
        .body(value.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let mut s = TcpStream::connect(gw.addr).unwrap();
    s.write_all(b"GET /v1/objects/big HTTP/1.1\r\nHost: rasa\r\n\r\n")
        .unwrap();
    // Do not read. The gateway's writes stall, then time out.
    let others = async {
        loop {
            let r = c.get(gw.url("/healthz")).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "others are served meanwhile");
            tokio::task::yield_now().await;
        }
    };
    tokio::select! {
        () = wait_for_metric(&gw, "rasa_http_send_timeouts_total", 1.0) => {}
        () = others => unreachable!(),
    }
    let received = tokio::task::spawn_blocking(move || {
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf); // ends with EOF or a reset
        buf.len()
    })
    .await
    .unwrap();
    assert!(
        received < value.len(),
        "got the whole value: {received} bytes"
    );
    // The value itself is intact for a client that reads.
    let got = c.get(gw.url("/v1/objects/big")).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap().len(), value.len());
}

/// Bodies without Content-Length are gathered in memory before they are stored; together
/// they stay under `--chunked-upload-memory`: a larger one gets 413, one that arrives while
/// the memory is taken gets 503, and both succeed once there is room.
#[tokio::test]
async fn chunked_uploads_share_a_bounded_memory() {
    let gw = Gateway::start(&[
        "--chunked-upload-memory",
        "64KiB",
        "--max-object-size",
        "1MiB",
        "--fast-path",
        "off",
    ]);
    let c = http();
    let chunked = |key: &str, parts: Vec<Vec<u8>>| {
        let stream = futures_util::stream::iter(parts.into_iter().map(Ok::<_, std::io::Error>));
        c.put(gw.url(&format!("/v1/objects/{key}")))
            .body(reqwest::Body::wrap_stream(stream))
            .send()
    };
    let r = chunked("too-big", vec![vec![1; 40 << 10], vec![2; 40 << 10]])
        .await
        .unwrap();
    assert_problem(r, 413, ProblemCode::PayloadTooLarge).await;

    // Hold 40 KiB of the 64 with an upload that has not finished.
    let held = HeldUpload::start(gw.url("/v1/objects/first"), vec![3; 40 << 10], None).await;
    wait_for_metric(
        &gw,
        "rasa_http_chunked_upload_bytes",
        f64::from(40u32 << 10),
    )
    .await;
    let r = chunked("second", vec![vec![4; 40 << 10]]).await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key(RETRY_AFTER));
    let r = held.finish(Vec::new()).await; // the first upload ends here, complete
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = chunked("second", vec![vec![4; 40 << 10]]).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(metric(&gw, "rasa_http_chunked_upload_bytes").await, 0.0);
    let got = c.get(gw.url("/v1/objects/first")).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap().len(), 40 << 10);
}
