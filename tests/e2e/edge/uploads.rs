//! Crawling uploads: PUTs that declare a large length and then trickle bytes (each pause
//! shorter than `--body-timeout`) hold the memory budget only for the bytes they sent,
//! and end with `408` once they fall below `--min-upload-rate`; an honest PUT meanwhile
//! is stored at once.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rasa_tests::{metric, pattern, put_value, Gateway};

/// Declares `declared` bytes, then sends one byte every 300 ms until the gateway answers;
/// returns the status line and how long it took.
fn crawl(addr: SocketAddr, key: &str, declared: u64) -> (String, Duration) {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "PUT /v1/objects/{key} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {declared}\r\n\r\n"
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 512];
    while start.elapsed() < Duration::from_secs(60) {
        if s.write_all(b"x").is_err() {
            break; // the gateway answered and closed: read what it said
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]).to_string();
                return (
                    text.lines().next().unwrap_or_default().to_owned(),
                    start.elapsed(),
                );
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = s.read(&mut buf).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    (
        text.lines().next().unwrap_or_default().to_owned(),
        start.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawling_uploads_hold_little_and_end_with_408_while_an_honest_one_is_stored() {
    let gw = Gateway::start(&[
        "--fast-path",
        "off",
        "--memory",
        "160MiB",
        "--max-object-size",
        "128MiB",
        "--body-timeout",
        "4s",
        "--min-upload-rate",
        "256KiB",
    ]);
    let crawlers: Vec<_> = (0..8)
        .map(|i| {
            let addr = gw.addr;
            std::thread::spawn(move || crawl(addr, &format!("crawl/{i}"), 64 << 20))
        })
        .collect();
    // Eight declared 64 MiB each: more than three times the budget. An honest 8 MiB upload is stored at
    // once all the same.
    while metric(&gw, "rasa_http_requests_active").await < 8.0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = pattern(8 << 20, 3);
    let t = Instant::now();
    let d = put_value(&gw, "honest", &body).await;
    assert_eq!(d.length, 8 << 20);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the honest PUT took {:?}",
        t.elapsed()
    );
    // The crawlers fall behind 256 KiB/s after the 4 s grace: 408, nothing stored.
    for c in crawlers {
        let (status, took) = c.join().unwrap();
        assert!(status.contains(" 408 "), "a crawling upload got {status:?}");
        assert!(
            took < Duration::from_secs(5),
            "a crawling upload lasted {took:?}"
        );
    }
    assert_eq!(metric(&gw, "rasa_http_uploads_too_slow_total").await, 8.0);
    let listed = rasa_tests::text_of(rasa_tests::http().get(gw.url("/v1/objects"))).await;
    assert!(
        !listed.contains("crawl/"),
        "a crawling upload was stored: {listed}"
    );
}
