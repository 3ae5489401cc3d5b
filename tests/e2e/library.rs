//! libfabric is loaded at run time, only when the fast path is used: with it hidden
//! (`RASA_LIBFABRIC` pointing nowhere), everything that speaks HTTP works, and what needs
//! the fast path fails (or, in `auto`, falls back) with a message naming the library.

use std::process::Command;
use std::time::{Duration, Instant};

use rasa_tests::{pattern, workspace_bin, Gateway};

const HIDDEN: (&str, &str) = ("RASA_LIBFABRIC", "/nonexistent/libfabric.so.1");

fn rasa(gw: &Gateway, args: &[&str]) -> std::process::Output {
    Command::new(workspace_bin("rasa"))
        .args(["--endpoint", &gw.base])
        .args(args)
        .env(HIDDEN.0, HIDDEN.1)
        .output()
        .expect("run rasa")
}

#[tokio::test]
async fn without_libfabric_http_works_and_the_fast_path_names_the_library() {
    // The CLI's help and its HTTP commands never load libfabric.
    let t = Instant::now();
    let help = Command::new(workspace_bin("rasa"))
        .arg("--help")
        .env(HIDDEN.0, HIDDEN.1)
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

    // A gateway in auto mode serves HTTP only, and says why.
    let gw = Gateway::start_env(&["--fast-path", "auto"], &[HIDDEN]);
    let info: rasa_openapi::FabricInfo = gw.get_json("/v1/fabric").await;
    assert!(!info.enabled);
    let file = rasa_tests::temp_dir("nolib").join("v");
    std::fs::write(&file, pattern(5000, 3)).unwrap();
    let out = rasa(&gw, &["put", "k", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = rasa(&gw, &["stat", "k"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = rasa(&gw, &["get", "k", "--fast-path", "auto"]);
    assert!(out.status.success());
    assert_eq!(out.stdout, pattern(5000, 3));

    // Against a gateway that serves one-sided reads, a client without libfabric: `auto`
    // falls back to HTTP, `required` fails naming the library.
    let fast = Gateway::start(&["--fast-path", "on"]);
    let c = rasa_tests::http();
    c.put(fast.url("/v1/objects/k"))
        .body(pattern(5000, 4))
        .send()
        .await
        .unwrap();
    let out = rasa(&fast, &["get", "k", "--fast-path", "auto", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"path\":\"http\""));
    let out = rasa(&fast, &["get", "k", "--fast-path", "required"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/libfabric.so.1") && err.contains("RASA_LIBFABRIC"),
        "{err}"
    );
}

#[test]
fn a_gateway_with_the_fast_path_on_refuses_to_start_without_libfabric() {
    let out = Command::new(rasa_tests::gateway_bin())
        .args(["--listen", "127.0.0.1:0", "--fast-path", "on"])
        .env(HIDDEN.0, HIDDEN.1)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot start the fast path") && err.contains("/nonexistent/libfabric.so.1"),
        "{err}"
    );
}
