//! A frozen gateway (SIGSTOP) fails a call after its timeout once, not once per exchange:
//! cluster discovery, a descriptor and an HTTP fallback share one wait per gateway.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::faults::Frozen;
use rasa_client::{Client, Error, FastPath, TimeoutKind};
use rasa_tests::{workspace_bin, Gateway};

fn assert_one_timeout<T: std::fmt::Debug>(
    what: &str,
    r: Result<T, Error>,
    took: Duration,
    timeout: Duration,
) {
    assert!(
        matches!(
            r,
            Err(Error::Timeout {
                kind: TimeoutKind::Request | TimeoutKind::Connect,
                ..
            })
        ),
        "{what}: expected a timeout, got {r:?}"
    );
    // One timeout and scheduling slack; two would be past 1.5x.
    assert!(
        took >= timeout && took < timeout * 3 / 2,
        "{what}: failed after {took:?} with a timeout of {timeout:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_on_a_frozen_gateway_fails_within_one_timeout() {
    let gw = Gateway::start(&[]);
    rasa_tests::put_value(&gw, "frozen/one", b"a value").await;
    let timeout = Duration::from_secs(1);
    let _frozen = Frozen::stop(gw.pid());
    for mode in [FastPath::Auto, FastPath::Off] {
        // A fresh client: cluster discovery, then the call itself.
        let fresh = || {
            Client::builder(&gw.base)
                .fast_path(mode)
                .timeout(timeout)
                .connect_timeout(timeout)
                .build()
                .unwrap()
        };
        let t = Instant::now();
        let r = fresh().get("frozen/one").await;
        assert_one_timeout(&format!("get ({mode:?})"), r, t.elapsed(), timeout);
        let t = Instant::now();
        let r = fresh().head("frozen/one").await;
        assert_one_timeout(&format!("head ({mode:?})"), r, t.elapsed(), timeout);
        let t = Instant::now();
        let r = fresh().put("frozen/two", b"x".to_vec()).await;
        assert_one_timeout(&format!("put ({mode:?})"), r, t.elapsed(), timeout);
        let t = Instant::now();
        let r = fresh().get_into("frozen/one", vec![0u8; 64]).await.0;
        assert_one_timeout(&format!("get_into ({mode:?})"), r, t.elapsed(), timeout);
    }
    // The CLI: `--timeout 2s` fails after 2 s, with the fast path on or off.
    for mode in ["auto", "off"] {
        let t = Instant::now();
        let out = Command::new(workspace_bin("rasa"))
            .args(["--endpoint", &gw.base, "--timeout", "2s"])
            .args(["get", "frozen/one", "--fast-path", mode])
            .output()
            .unwrap();
        let took = t.elapsed();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("timed out"), "{err}");
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(3),
            "rasa --timeout 2s --fast-path {mode} get took {took:?}"
        );
    }
}
