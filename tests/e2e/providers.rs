//! What every provider must do whatever the gateway does (issue 33): a one-sided read ends
//! within its timeout even when the gateway is frozen, and on `shm`, whose fast path
//! checks no remote key, a reader holding a descriptor whose arena was revoked and reused
//! gets a clean miss (its frame no longer validates), never another value's bytes.

use std::time::{Duration, Instant};

use base64::prelude::*;
use rasa_fastpath::fabric::FabricConfig;
use rasa_fastpath::reader::{ReadError, Reader};
use rasa_openapi::{Descriptor, FabricInfo};
use rasa_tests::{pattern, put_value, sha256_hex, Gateway};

use crate::faults::Frozen;

async fn reader_of(gw: &Gateway, provider: &str) -> Reader {
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    assert_eq!(info.provider.as_deref(), Some(provider));
    let address = BASE64_STANDARD.decode(info.address.unwrap()).unwrap();
    let cfg = FabricConfig::new(provider, Some("127.0.0.1".into()));
    tokio::task::spawn_blocking(move || Reader::connect(cfg, address).unwrap())
        .await
        .unwrap()
}

/// With the gateway stopped (SIGSTOP), a one-sided read of a 1 MiB value returns within
/// its timeout on every provider here: done (shm's reader copies by itself) or a timeout
/// (tcp;ofi_rxm and sockets need the gateway's progress), never later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_ends_within_its_timeout_on_every_provider_with_the_gateway_frozen() {
    const WITHIN: Duration = Duration::from_secs(1);
    for provider in ["tcp;ofi_rxm", "sockets", "shm"] {
        let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", provider]);
        let body = pattern(1 << 20, 9);
        let d: Descriptor = put_value(&gw, "frozen/v", &body).await;
        let mut reader = reader_of(&gw, provider).await;
        let frame = rasa_tests::remote(&d);
        // Warm: the connection exists before the gateway stops.
        tokio::task::block_in_place(|| reader.read(&frame, WITHIN)).unwrap();
        let frozen = Frozen::stop(gw.pid());
        let started = Instant::now();
        let got = tokio::task::block_in_place(|| reader.read(&frame, WITHIN));
        let took = started.elapsed();
        drop(frozen);
        println!(
            "{provider}: a read with the gateway frozen took {took:?}: {got:?}",
            got = got.as_ref().map(Vec::len)
        );
        assert!(
            took < WITHIN + Duration::from_millis(500),
            "{provider}: a read with a {WITHIN:?} timeout took {took:?}"
        );
        match got {
            Ok(bytes) => assert_eq!(sha256_hex(&bytes), d.sha256, "{provider}"),
            Err(ReadError::Timeout(_)) => {}
            Err(e) => panic!("{provider}: {e}"),
        }
    }
}

/// On shm a revoked key still reads (no key check): while the arena is not reused the old
/// frame is read as it was (right bytes); once the arena is recycled and refilled with
/// other values, the same descriptor's read is refused by frame validation, never
/// answered with the new bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_shm_a_straggler_misses_cleanly_once_its_arena_is_reused() {
    let gw = Gateway::start(&[
        "--fast-path",
        "on",
        "--fabric-provider",
        "shm",
        "--memory",
        "1MiB",
        "--arena-size",
        "64KiB",
        "--max-object-size",
        "512KiB",
        "--lease",
        "200ms",
        "--lease-grace",
        "50ms",
    ]);
    let v1 = pattern(40 << 10, 1);
    let d1: Descriptor = put_value(&gw, "doc", &v1).await;
    let mut reader = reader_of(&gw, "shm").await;
    let frame = rasa_tests::remote(&d1);
    let read = |reader: &mut Reader| {
        tokio::task::block_in_place(|| reader.read(&frame, Duration::from_secs(5)))
    };
    assert_eq!(read(&mut reader).unwrap(), v1);
    // Replaced, then its arena drained, revoked and recycled; then refilled by others.
    put_value(&gw, "doc", &pattern(40 << 10, 2)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while rasa_tests::metric(&gw, "rasa_arenas_recycled_total").await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the old arena was never recycled"
        );
        // Writes need room: they drive reclamation too.
        put_value(&gw, "filler", &pattern(40 << 10, 3)).await;
    }
    let mut refused = 0;
    for i in 0..40u64 {
        put_value(&gw, &format!("new/{i}"), &pattern(40 << 10, 100 + i)).await;
        match read(&mut reader) {
            Ok(bytes) => assert_eq!(bytes, v1, "a straggler got another value's bytes"),
            Err(ReadError::Frame(_)) | Err(ReadError::KeyRevoked(_)) => refused += 1,
            Err(e) => panic!("an unexpected error: {e}"),
        }
    }
    assert!(
        refused > 0,
        "the old descriptor's memory was never reused in 40 writes"
    );
}

/// A process whose first shm read went unanswered (the gateway frozen) and which then
/// exits normally must not take the gateway down: libfabric 1.17's gateway maps a new
/// reader's region by name when it gets to the reader's first contact and crashes
/// (SIGSEGV) if the region is gone. The reader (this test binary again, below) never
/// closes an endpoint whose first contact is unanswered; the resumed gateway serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_shm_a_reader_exiting_before_its_first_contact_is_answered_leaves_the_gateway_up() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "shm"]);
    let body = pattern(64 << 10, 5);
    let d: Descriptor = put_value(&gw, "contact/v", &body).await;
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    let frozen = Frozen::stop(gw.pid());
    let helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "providers::helper_reads_once_on_a_fresh_shm_endpoint",
            "--nocapture",
        ])
        .env("RASA_HELPER_ADDRESS", info.address.unwrap())
        .env("RASA_HELPER_DESCRIPTOR", serde_json::to_string(&d).unwrap())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&helper.stdout);
    assert!(helper.status.success(), "helper: {out}");
    assert!(out.contains("helper read: timeout"), "helper: {out}");
    drop(frozen);
    // A new endpoint's first read is answered after the helper's first contact (the
    // gateway takes them in order): once it reads, the gateway has handled the helper's.
    let mut reader = reader_of(&gw, "shm").await;
    let frame = rasa_tests::remote(&d);
    let got = tokio::task::block_in_place(|| reader.read(&frame, Duration::from_secs(5)));
    let region = |pid: &str| {
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("rasa-{pid}-"))
            })
            .map(|e| e.path())
            .collect::<Vec<_>>()
    };
    let helper_pid = out
        .lines()
        .find_map(|l| l.strip_prefix("helper pid: "))
        .expect("the helper says its pid")
        .trim()
        .to_owned();
    let kept = region(&helper_pid);
    for f in &kept {
        let _ = std::fs::remove_file(f);
    }
    assert_eq!(gw.exit_status(), None, "{}", gw.postmortem());
    assert_eq!(got.unwrap(), body);
    assert_eq!(kept.len(), 1, "the unanswered endpoint's region is kept");
}

/// Not a test on its own: run by the test above in a child process (it does nothing
/// without `RASA_HELPER_ADDRESS`). Opens a fresh shm endpoint and reads once with a short
/// timeout, then returns, so the process exits normally.
#[test]
fn helper_reads_once_on_a_fresh_shm_endpoint() {
    let Ok(address) = std::env::var("RASA_HELPER_ADDRESS") else {
        return;
    };
    let d: Descriptor =
        serde_json::from_str(&std::env::var("RASA_HELPER_DESCRIPTOR").unwrap()).unwrap();
    let address = BASE64_STANDARD.decode(address).unwrap();
    println!("helper pid: {}", std::process::id());
    let mut reader = Reader::connect(FabricConfig::new("shm", None), address).unwrap();
    match reader.read(&rasa_tests::remote(&d), Duration::from_millis(300)) {
        Err(ReadError::Timeout(_)) => println!("helper read: timeout"),
        other => println!("helper read: {:?}", other.map(|b| b.len())),
    }
    // What a client does after a failed read: drops its endpoint (then exits).
    drop(reader);
    assert_eq!(rasa_fastpath::reader::abandoned_shm_endpoints(), 1);
}

/// A `tcp;ofi_rxm` reader whose read timed out with reads in flight (the gateway frozen)
/// must not close its endpoint: libfabric 1.17's rxm then handles the flushed, cancelled
/// reads and dereferences a NULL context — the reader died of SIGSEGV inside `fi_close`
/// (core dump of a reader hammering a gateway frozen and cut off in turns:
/// `scripts/chaos-fabric.sh`). The endpoint is kept, unused; the reader (this test binary
/// again, below) exits normally, and the resumed gateway serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_tcp_a_reader_timing_out_with_reads_in_flight_keeps_its_endpoint() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm"]);
    let body = pattern(256 << 10, 7);
    let d: Descriptor = put_value(&gw, "inflight/v", &body).await;
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    let frozen = Frozen::stop(gw.pid());
    let helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "providers::helper_times_out_on_tcp_with_reads_in_flight",
            "--nocapture",
        ])
        .env("RASA_HELPER_ADDRESS", info.address.unwrap())
        .env("RASA_HELPER_DESCRIPTOR", serde_json::to_string(&d).unwrap())
        .output()
        .unwrap();
    drop(frozen);
    let out = String::from_utf8_lossy(&helper.stdout);
    assert!(
        helper.status.success(),
        "helper ({:?}): {out}",
        helper.status
    );
    assert!(out.contains("helper read: timeout"), "helper: {out}");
    assert!(out.contains("kept: 1"), "helper: {out}");
    let mut reader = reader_of(&gw, "tcp;ofi_rxm").await;
    let frame = rasa_tests::remote(&d);
    let got = tokio::task::block_in_place(|| reader.read(&frame, Duration::from_secs(5)));
    assert_eq!(got.unwrap(), body);
    assert_eq!(gw.exit_status(), None, "{}", gw.postmortem());
}

/// Not a test on its own: run by the test above in a child process (it does nothing
/// without `RASA_HELPER_ADDRESS`). Reads once with a short timeout from a frozen gateway
/// over `tcp;ofi_rxm`, drops the reader, and says how many endpoints it kept.
#[test]
fn helper_times_out_on_tcp_with_reads_in_flight() {
    let Ok(address) = std::env::var("RASA_HELPER_ADDRESS") else {
        return;
    };
    let d: Descriptor =
        serde_json::from_str(&std::env::var("RASA_HELPER_DESCRIPTOR").unwrap()).unwrap();
    let address = BASE64_STANDARD.decode(address).unwrap();
    let cfg = FabricConfig::new("tcp;ofi_rxm", Some("127.0.0.1".into()));
    let mut reader = Reader::connect(cfg, address).unwrap();
    match reader.read(&rasa_tests::remote(&d), Duration::from_millis(300)) {
        Err(ReadError::Timeout(_)) => println!("helper read: timeout"),
        other => println!("helper read: {:?}", other.map(|b| b.len())),
    }
    drop(reader);
    println!("kept: {}", rasa_fastpath::reader::abandoned_rxm_endpoints());
}

/// A gateway serving shm removes, at start, the `/dev/shm` regions left by processes that
/// are gone (killed readers and gateways: libfabric 1.17 unlinks a region only when its
/// endpoint is closed), but not a young one nor a live process's.
#[tokio::test]
async fn a_shm_gateway_removes_regions_that_dead_processes_left() {
    let dir = std::path::Path::new("/dev/shm");
    let dead = 4_194_304 + 11; // above pid_max: no such process
    let me = std::process::id();
    let old = std::time::SystemTime::now() - Duration::from_secs(300);
    let make = |name: String, when: std::time::SystemTime| {
        let path = dir.join(name);
        let f = std::fs::File::create(&path).unwrap();
        f.set_modified(when).unwrap();
        path
    };
    let stale = make(format!("rasa-{dead}-{me}:0:0"), old);
    let young = make(
        format!("rasa-{dead}-{me}:0:1"),
        std::time::SystemTime::now(),
    );
    let live = make(format!("rasa-{me}-9{me}:0:0"), old);
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "shm"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while stale.exists() {
        assert!(Instant::now() < deadline, "the stale region is still there");
        tokio::task::yield_now().await;
    }
    let kept = (young.exists(), live.exists());
    for f in [&young, &live] {
        let _ = std::fs::remove_file(f);
    }
    drop(gw);
    assert_eq!(
        kept,
        (true, true),
        "a young region and a live process's are kept"
    );
}
