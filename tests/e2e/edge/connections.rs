//! Connections that send nothing are closed (`--first-byte-timeout`) on the HTTP listener
//! and on the fabric port; past `--max-connections` a new connection displaces a silent
//! one, so `/healthz` answers while thousands of silent sockets are open.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use base64::Engine;
use rasa_openapi::FabricInfo;
use rasa_tests::{metric, wait_for_metric, Gateway};

const SILENT: usize = 5_000;

/// The TCP address of a `FI_SOCKADDR_IN` fabric address.
fn fabric_addr(info: &FabricInfo) -> SocketAddr {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(info.address.as_deref().expect("a fabric address"))
        .unwrap();
    assert_eq!(info.address_format.as_deref(), Some("FI_SOCKADDR_IN"));
    let port = u16::from_be_bytes([raw[2], raw[3]]);
    SocketAddr::from(([raw[4], raw[5], raw[6], raw[7]], port))
}

/// Whether the gateway closed `s` before `deadline` (a read sees the end or a reset).
fn closed_by(mut s: &TcpStream, deadline: Instant) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// `GET /healthz` on a fresh connection; the status and how long it took.
fn healthz(addr: SocketAddr) -> (u16, Duration) {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let status = String::from_utf8_lossy(&buf)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, start.elapsed())
}

#[tokio::test(flavor = "multi_thread")]
async fn silent_sockets_are_closed_and_healthz_answers_meanwhile() {
    // The test process holds 5,050 sockets besides whatever other tests hold.
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let timeout = Duration::from_secs(2);
    let gw = Gateway::start(&["--first-byte-timeout", "2s", "--max-connections", "1000"]);
    let fabric = fabric_addr(&gw.get_json::<FabricInfo>("/v1/fabric").await);
    let opened = Instant::now();
    let silent: Vec<TcpStream> = (0..SILENT)
        .map(|_| TcpStream::connect(gw.addr).expect("connect"))
        .collect();
    let fabric_silent: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect(fabric).expect("connect to the fabric port"))
        .collect();
    // Five times the bound is open (or was, for those displaced): health still answers,
    // at once.
    let (status, took) = healthz(gw.addr);
    assert_eq!(status, 200, "/healthz with {SILENT} silent sockets open");
    assert!(took < Duration::from_secs(1), "/healthz took {took:?}");
    // Every silent socket is closed within the timeout (the fabric port is swept every
    // half timeout, so within 1.5 times it), plus a second of slack for a loaded machine.
    let deadline = opened + timeout * 3 / 2 + Duration::from_secs(1);
    let open_http = silent.iter().filter(|s| !closed_by(s, deadline)).count();
    let open_fabric = fabric_silent
        .iter()
        .filter(|s| !closed_by(s, deadline))
        .count();
    assert_eq!(
        (open_http, open_fabric),
        (0, 0),
        "silent sockets still open {:?} after they were opened",
        opened.elapsed()
    );
    let displaced = metric(
        &gw,
        "rasa_connections_closed_total{listener=\"http\",reason=\"displaced\"}",
    )
    .await;
    // On a loaded machine opening them takes longer than the timeout: the first ones
    // may then be closed by it rather than displaced — closed all the same.
    let timed_out = metric(
        &gw,
        "rasa_connections_closed_total{listener=\"http\",reason=\"first_byte_timeout\"}",
    )
    .await;
    // A connection is silent from its admission, so even when the accept loop outruns the
    // new connections' tasks one past the bound displaces another: none is refused.
    let refused = metric(&gw, "rasa_connections_refused_total{listener=\"http\"}").await;
    assert!(
        displaced > 0.0 && displaced + timed_out >= (SILENT - 1000) as f64 && refused == 0.0,
        "displaced: {displaced}, timed out: {timed_out}, refused: {refused}"
    );
    // Counted once the sweep that shut them down returns.
    let fabric_closed =
        "rasa_connections_closed_total{listener=\"fabric\",reason=\"first_byte_timeout\"}";
    wait_for_metric(&gw, fabric_closed, 50.0).await;
    assert_eq!(metric(&gw, fabric_closed).await, 50.0);
    // The fast path still works after its port was swept.
    let d = rasa_tests::put_value(&gw, "after-sweep", b"still here").await;
    assert!(d.rkey.is_some(), "a descriptor with a key");
}
