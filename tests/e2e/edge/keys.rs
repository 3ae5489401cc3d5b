//! The SDK (hence the CLI and Python) sends every key exactly: characters the URL layer
//! would interpret are percent-encoded, and keys it would rewrite whatever the encoding
//! (`.`/`..` segments) are refused as the gateway refuses them, before anything is sent.

use rasa_client::{Client, FastPath};
use rasa_openapi::ProblemCode;
use rasa_tests::{metric, rasa_cli, temp_dir, Gateway};

/// Keys an HTTP URL layer would rewrite, and the gateway refuses.
const REWRITTEN: &[&str] = &["a/../b", "a/./b", "../x", "./x", "a/..", "..", "."];

/// Keys that must arrive exactly as given.
const EXACT: &[&str] = &[
    "a%2Fb",
    "a%2e%2e/b",
    "what?x=1",
    "frag#ment",
    "with space",
    "café/ü/𝄞",
    "a//b",
    "...",
    "a/.../b",
    "a+b&c=d;e",
    "back\\slash",
    "per%cent",
    "tab-less/%00",
];

/// Requests the gateway answered on keyed routes (objects, descriptors).
async fn keyed_requests(gw: &Gateway) -> f64 {
    metric(gw, "rasa_http_requests_total{route=\"/v1/objects/").await
        + metric(gw, "rasa_http_requests_total{route=\"/v1/descriptors/").await
}

#[tokio::test]
async fn the_sdk_refuses_dot_segments_before_sending_and_sends_other_keys_exactly() {
    let gw = Gateway::start(&["--fast-path", "off"]);
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let before = keyed_requests(&gw).await;
    for key in REWRITTEN {
        let errors = [
            c.put(key, b"x".to_vec()).await.err(),
            c.get(key).await.err(),
            c.head(key).await.err(),
            c.delete(key).await.err(),
            c.resolve(key).await.err(),
        ];
        for e in errors {
            let e = e.unwrap_or_else(|| panic!("{key:?} was accepted"));
            assert_eq!(e.code(), Some(ProblemCode::InvalidKey), "{key:?}: {e}");
        }
    }
    // Counted by the gateway: none of them arrived.
    let after = keyed_requests(&gw).await;
    assert_eq!(
        after,
        before,
        "a refused key reached the gateway: {}",
        rasa_tests::text_of(rasa_tests::http().get(gw.url("/metrics"))).await
    );
    for (i, key) in EXACT.iter().enumerate() {
        let value = format!("value {i}");
        let d = c.put(key, value.clone().into_bytes()).await.unwrap();
        assert_eq!(d.key, *key, "stored under another key");
        let o = c.get(key).await.unwrap();
        assert_eq!(o.bytes, value.as_bytes(), "{key:?} read another value");
        assert_eq!(c.resolve(key).await.unwrap().key, *key);
    }
    let listed = c.list("", None, 1000).await.unwrap();
    let mut stored: Vec<&str> = listed.items.iter().map(|i| i.key.as_str()).collect();
    let mut want = EXACT.to_vec();
    stored.sort_unstable();
    want.sort_unstable();
    assert_eq!(stored, want, "the gateway holds exactly the keys given");
    // `a/b` was never written: `a%2Fb` is a key of its own.
    assert!(c.get("a/b").await.is_err());
}

#[test]
fn the_cli_stores_keys_exactly_and_refuses_dot_segments() {
    let gw = Gateway::start(&["--fast-path", "off"]);
    let file = temp_dir("cli-keys").join("value");
    std::fs::write(&file, b"from a file").unwrap();
    let file = file.to_str().unwrap();
    let out = rasa_cli(&gw, &["put", "a/../b", file]);
    assert!(!out.status.success(), "rasa put a/../b succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid_key"), "stderr: {err}");
    let out = rasa_cli(&gw, &["ls"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "something was stored: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for key in ["a%2Fb", "q?x", "h#x", "s p", "é/ü"] {
        let out = rasa_cli(&gw, &["put", key, file]);
        assert!(
            out.status.success(),
            "put {key:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = rasa_cli(&gw, &["get", key]);
        assert!(
            out.status.success(),
            "get {key:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, b"from a file");
    }
    let out = rasa_cli(&gw, &["get", "a/./b"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_key"));
}
