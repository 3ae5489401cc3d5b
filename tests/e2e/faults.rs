//! Faults a cache's clients must survive: a frozen gateway, a gateway killed or restarted
//! under load. Every call returns — correct bytes or an error — within its timeouts, never
//! wrong bytes, and clients recover by themselves.

use std::process::Command;
use std::time::{Duration, Instant};

use rasa_client::{Client, Error, FastPath, TimeoutKind};
use rasa_tests::{pattern, workspace_bin, Gateway};

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

/// Sends SIGCONT when dropped, so a failing test does not leave a stopped process behind.
pub(crate) struct Frozen(u32);

impl Frozen {
    /// Stops `pid` and returns once every one of its threads is stopped: `kill` returns
    /// when the signal is sent, and on a busy machine the threads may run a little longer.
    pub(crate) fn stop(pid: u32) -> Frozen {
        signal(pid, "-STOP");
        let frozen = Frozen(pid);
        let deadline = Instant::now() + Duration::from_secs(10);
        let tasks = format!("/proc/{pid}/task");
        loop {
            let all_stopped = std::fs::read_dir(&tasks)
                .expect("the process's threads")
                .flatten()
                .all(|t| {
                    let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                    // The state follows the parenthesised command name.
                    stat.rsplit(')')
                        .next()
                        .is_some_and(|rest| rest.trim_start().starts_with('T'))
                });
            if all_stopped {
                return frozen;
            }
            assert!(Instant::now() < deadline, "{pid} did not stop within 10 s");
            std::thread::yield_now();
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

fn assert_timed_out<T: std::fmt::Debug>(
    what: &str,
    r: Result<T, Error>,
    took: Duration,
    within: Duration,
) {
    match r {
        Err(Error::Timeout { kind, endpoint, .. }) => {
            assert_eq!(kind, TimeoutKind::Request, "{what}");
            assert!(
                endpoint.starts_with("http://127.0.0.1:"),
                "{what}: {endpoint}"
            );
        }
        other => panic!("{what}: expected a request timeout, got {other:?}"),
    }
    assert!(took < within, "{what}: took {took:?}, more than {within:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_gateway_fails_calls_within_the_timeout_and_the_same_client_recovers() {
    let gw = Gateway::start(&[]);
    let client = Client::builder(&gw.base)
        .fast_path(FastPath::Auto)
        .timeout(Duration::from_millis(800))
        .connect_timeout(Duration::from_millis(800))
        .read_timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let body = pattern(3 << 20, 11);
    client.put("frozen/k", body.clone()).await.unwrap();
    assert_eq!(client.get("frozen/k").await.unwrap().bytes, body);

    let frozen = Frozen::stop(gw.pid());
    // A one-sided read times out (the provider needs the frozen target), HTTP then too.
    let t = Instant::now();
    let r = client.get("frozen/k").await;
    assert_timed_out("get", r, t.elapsed(), Duration::from_secs(5));
    let t = Instant::now();
    let r = client.head("frozen/k").await;
    assert_timed_out("head", r, t.elapsed(), Duration::from_secs(3));
    // An upload larger than the socket buffers stalls while being sent: no progress either.
    let t = Instant::now();
    let r = client.put("frozen/big", pattern(32 << 20, 12)).await;
    assert_timed_out("put", r, t.elapsed(), Duration::from_secs(4));

    // The CLI says which endpoint and which timeout, and exits within it.
    let t = Instant::now();
    let out = Command::new(workspace_bin("rasa"))
        .args([
            "--endpoint",
            &gw.base,
            "--timeout",
            "700ms",
            "get",
            "frozen/k",
            "--fast-path",
            "off",
        ])
        .output()
        .expect("run rasa");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("timed out waiting for http://127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("--timeout"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());

    drop(frozen); // SIGCONT
    let obj = client.get("frozen/k").await.unwrap();
    assert_eq!(obj.bytes, body);
    let big = pattern(32 << 20, 13);
    let d = client.put("frozen/big", big.clone()).await.unwrap();
    assert_eq!(d.length, big.len() as u64);
    assert_eq!(
        client
            .get_by("frozen/big", rasa_client::ReadPath::Http)
            .await
            .unwrap()
            .bytes,
        big
    );
}

#[tokio::test]
async fn a_large_transfer_that_keeps_moving_is_not_cut_off_by_the_timeout() {
    // The timeout bounds a pause, not a transfer: 64 MiB each way with a 300 ms timeout.
    let gw = Gateway::start(&["--max-object-size", "64MiB"]);
    let client = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let body = pattern(64 << 20, 21);
    client.put("moving/big", body.clone()).await.unwrap();
    assert_eq!(client.get("moving/big").await.unwrap().bytes, body);
}

#[tokio::test]
async fn a_refused_connection_fails_at_once() {
    let gw = Gateway::start(&[]);
    let base = gw.base.clone();
    drop(gw);
    let client = Client::builder(&base)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let t = Instant::now();
    let r = client.head("k").await;
    assert!(matches!(r, Err(Error::Http(_))), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

/// Before, a crash went through the handler Debian's PSM library installs (print
/// "terminated with signal N" on stderr, `exit(1)`): the harness saw a plain exit 1 and,
/// without the log, nobody could tell it was a crash.
#[test]
fn a_crash_is_reported_with_its_signal_not_as_a_clean_exit() {
    use std::os::unix::process::ExitStatusExt;
    for (sig, num, name) in [("-SEGV", 11, "SIGSEGV"), ("-ABRT", 6, "SIGABRT")] {
        let log = rasa_tests::temp_dir("crash").join("gateway.log");
        let gw = Gateway::start_logged(&["--fast-path", "on"], &[("RUST_LOG", "info")], &log);
        signal(gw.pid(), sig);
        let status = gw
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("the gateway did not die of {name}"));
        assert_eq!(
            status.signal(),
            Some(num),
            "{name}: {status}; {}",
            gw.postmortem()
        );
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains(&format!("rasa-gateway: fatal signal {name}")),
            "{name}: {}",
            gw.postmortem()
        );
    }
}

#[tokio::test]
async fn a_panic_on_a_background_thread_is_logged_with_its_cause() {
    let log = rasa_tests::temp_dir("panic").join("gateway.log");
    let gw = Gateway::start_logged(&["--test-hooks"], &[("RUST_LOG", "info")], &log);
    let http = rasa_tests::http();
    let r = http.post(gw.url("/v1/_test/panic")).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("panic: test hook: a background thread panicked"))
        .unwrap_or_else(|| panic!("no panic line in the log:\n{text}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("rasa-test-panic"), "{line}");
    assert!(line.contains("test_hooks.rs"), "{line}");
    // The gateway goes on serving.
    let ok = http.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    assert!(gw.exit_status().is_none());
}

/// A value for `key` that proves itself: a tag, the key, a generation, then a pattern and
/// the SHA-256 of everything before it. Any byte out of place is detected.
pub(crate) fn proof(key: &str, generation: u64, len: usize) -> Vec<u8> {
    use sha2::Digest;
    let mut v = format!("PROOF|{key}|{generation}|").into_bytes();
    v.extend_from_slice(&pattern(len, generation ^ len as u64));
    let sum = sha2::Sha256::digest(&v);
    v.extend_from_slice(&sum);
    v
}

/// The generation of a value written by [`proof`] for `key`, if it is one.
fn proven(key: &str, bytes: &[u8]) -> Option<u64> {
    use sha2::Digest;
    let (body, sum) = bytes.split_at(bytes.len().checked_sub(32)?);
    if sha2::Sha256::digest(body).as_slice() != sum {
        return None;
    }
    let rest = body.strip_prefix(format!("PROOF|{key}|").as_bytes())?;
    let end = rest.iter().position(|b| *b == b'|')?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

fn short_timeouts(base: &str, mode: FastPath) -> Client {
    Client::builder(base)
        .fast_path(mode)
        .timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_gateway_under_load_never_hangs_a_client_nor_gives_wrong_bytes() {
    let gw = Gateway::start(&[]);
    let keys: Vec<String> = (0..8).map(|i| format!("kill/{i}")).collect();
    let writer = short_timeouts(&gw.base, FastPath::Off);
    for (i, k) in keys.iter().enumerate() {
        writer
            .put(k, proof(k, 1, 40_000 + i * 9_000))
            .await
            .unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers_ok = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut clients = Vec::new();
    for c in 0..4 {
        // Two read one-sided (falling back to HTTP), two over HTTP only.
        let mode = if c < 2 { FastPath::Auto } else { FastPath::Off };
        let client = short_timeouts(&gw.base, mode);
        let (keys, stop, readers_ok) = (keys.clone(), stop.clone(), readers_ok.clone());
        clients.push(tokio::spawn(async move {
            let (mut ok, mut failed, mut slowest) = (0u64, 0u64, Duration::ZERO);
            let mut i = c;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = &keys[i % keys.len()];
                i += 1;
                let t = Instant::now();
                match client.get(key).await {
                    Ok(obj) => {
                        assert_eq!(
                            proven(key, &obj.bytes),
                            Some(1),
                            "wrong bytes for {key} via {:?}",
                            obj.path
                        );
                        ok += 1;
                        if ok == 5 {
                            readers_ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    Err(_) => failed += 1,
                }
                slowest = slowest.max(t.elapsed());
            }
            (ok, failed, slowest, client.stats())
        }));
    }
    // Let them read, then kill the gateway mid-flight and let them run into it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while readers_ok.load(std::sync::atomic::Ordering::Relaxed) < 4 {
        assert!(Instant::now() < deadline, "the clients did not get going");
        assert!(
            clients.iter().all(|c| !c.is_finished()),
            "a client stopped early"
        );
        writer
            .get_by(&keys[0], rasa_client::ReadPath::Http)
            .await
            .unwrap();
    }
    signal(gw.pid(), "-KILL");
    assert!(
        gw.wait_exit(Duration::from_secs(5)).is_some(),
        "SIGKILL did not end the gateway"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut fabric = 0;
    for c in clients {
        let (ok, failed, slowest, stats) = c.await.expect("a client task panicked");
        assert!(ok > 0, "a client read nothing before the kill");
        assert!(failed > 0, "a client never noticed the gateway was gone");
        // One call may try a one-sided read (1 s), a fresh descriptor (2 s), then HTTP (2 s).
        assert!(slowest < Duration::from_secs(6), "a call took {slowest:?}");
        fabric += stats.fabric_reads;
    }
    assert!(fabric > 0, "no read went one-sided");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_client_recovers_by_itself_when_the_gateway_restarts_on_its_port() {
    let gw = Gateway::start(&[]);
    let addr = gw.addr;
    let client = short_timeouts(&gw.base, FastPath::Auto);
    let keys: Vec<String> = (0..4).map(|i| format!("restart/{i}")).collect();
    for k in &keys {
        client.put(k, proof(k, 1, 64_000)).await.unwrap();
        let obj = client.get(k).await.unwrap();
        assert_eq!(obj.path, rasa_client::ReadPath::Fabric);
        assert_eq!(proven(k, &obj.bytes), Some(1));
    }
    let before = client.fabric_info().await.unwrap().incarnation;

    signal(gw.pid(), "-KILL");
    assert!(gw.wait_exit(Duration::from_secs(5)).is_some());
    drop(gw);
    let gw = Gateway::start_at(addr, &[]);
    assert_ne!(client.fabric_info().await.unwrap().incarnation, before);

    // Memory started empty: the same client writes generation 2, then reads until its fast
    // path is back. No value may be generation 1 (the old process's memory) or torn.
    for k in &keys {
        client.put(k, proof(k, 2, 64_000)).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut fabric_after = 0;
    while fabric_after < 20 {
        assert!(
            Instant::now() < deadline,
            "the fast path never came back: {:?}",
            client.stats()
        );
        for k in &keys {
            let obj = client.get(k).await.unwrap();
            assert_eq!(proven(k, &obj.bytes), Some(2), "{k} via {:?}", obj.path);
            if obj.path == rasa_client::ReadPath::Fabric {
                fabric_after += 1;
            }
        }
    }
    drop(gw);
}
