//! Namespaces (issue 31): a descriptor of one namespace exposes none of another's bytes,
//! credentials are scoped to namespaces over HTTP and S3, a namespace over its quota
//! evicts only its own values, and the namespaces file is read again on SIGHUP.

use rasa_openapi::{Descriptor, FabricInfo, Problem, ProblemCode};
use rasa_tests::raw::{contains, marker, read_region};
use rasa_tests::{metric, new_s3_key, new_token, temp_dir, wait_for_metric, Gateway};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The gateway of these tests, its tokens and S3 keys.
struct Setup {
    gw: Gateway,
    s3_url: String,
    ns_file: std::path::PathBuf,
    admin: String,
    alpha_rw: String,
    alpha_ro: String,
    alpha_wo: String,
    bravo_rw: String,
    alpha_s3: (String, String),
}

fn start(namespaces: &str, extra: &[&str]) -> Setup {
    let dir = temp_dir("namespaces");
    let tokens = dir.join("tokens");
    let s3_keys = dir.join("s3-keys");
    let ns_file = dir.join("namespaces");
    std::fs::write(&ns_file, namespaces).unwrap();
    let setup_tokens = (
        new_token(&tokens, "admin", "admin"),
        new_token(&tokens, "alpha-rw", "alpha:read,alpha:write"),
        new_token(&tokens, "alpha-ro", "alpha:read"),
        new_token(&tokens, "alpha-wo", "alpha:write"),
        new_token(&tokens, "bravo-rw", "bravo:admin"),
    );
    let alpha_s3 = new_s3_key(&s3_keys, "alpha", "alpha:read,alpha:write");
    let mut args = vec![
        "--fast-path",
        "on",
        "--fabric-provider",
        "tcp;ofi_rxm",
        "--test-hooks",
        "--public-metrics",
        "--memory",
        "64MiB",
        "--max-object-size",
        "8MiB",
        "--token-file",
        tokens.to_str().unwrap(),
        "--namespaces",
        ns_file.to_str().unwrap(),
        "--s3-listen",
        "127.0.0.1:0",
        "--s3-bucket",
        "bkt",
        "--s3-credentials-file",
        s3_keys.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let gw = Gateway::start(&args);
    Setup {
        s3_url: gw.s3_url(),
        gw,
        ns_file,
        admin: setup_tokens.0,
        alpha_rw: setup_tokens.1,
        alpha_ro: setup_tokens.2,
        alpha_wo: setup_tokens.3,
        bravo_rw: setup_tokens.4,
        alpha_s3,
    }
}

async fn put(gw: &Gateway, token: &str, path: &str, body: Vec<u8>) -> reqwest::Response {
    rasa_tests::http()
        .put(gw.url(&format!("{path}?lease=true")))
        .bearer_auth(token)
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn get(gw: &Gateway, token: &str, path: &str) -> reqwest::Response {
    rasa_tests::http()
        .get(gw.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// Every byte the memory region behind a descriptor covers (`path`: the region test
/// hook of its key), read one-sided as any holder of that descriptor can.
async fn exposed_by(s: &Setup, path: &str) -> Vec<u8> {
    let region: serde_json::Value = get(&s.gw, &s.admin, path).await.json().await.unwrap();
    let fabric: FabricInfo = get(&s.gw, &s.admin, "/v1/fabric")
        .await
        .json()
        .await
        .unwrap();
    read_region(&region, &fabric).await
}

/// With a descriptor of namespace `alpha`, every byte its remote key covers holds none of
/// `bravo`'s or the default namespace's values or key names, and none of an upload to
/// `alpha` in flight, failed, or staged as a multipart part: only `alpha`'s own frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_of_one_namespace_exposes_no_byte_of_another() {
    let s = start("alpha 16MiB\nbravo 16MiB\n", &[]);
    let gw = &s.gw;
    for (token, path, tag) in [
        (
            &s.bravo_rw,
            "/v1/ns/bravo/objects/bravo-secret-key",
            "bravo-secret",
        ),
        (&s.admin, "/v1/objects/default-secret-key", "default-secret"),
    ] {
        assert_eq!(
            put(gw, token, path, marker(tag, 50_000)).await.status(),
            201
        );
    }
    // Unpublished bytes of alpha: one upload held open, one abandoned, one multipart part.
    let head = |key: &str, len: usize| {
        format!(
            "PUT /v1/ns/alpha/objects/{key} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Length: {len}\r\n\r\n",
            gw.addr, s.alpha_rw
        )
    };
    let inflight = marker("alpha-inflight", 100_000);
    let mut open = TcpStream::connect(gw.addr).await.unwrap();
    open.write_all(head("held", inflight.len()).as_bytes())
        .await
        .unwrap();
    open.write_all(&inflight[..inflight.len() - 1])
        .await
        .unwrap();
    let failed = marker("alpha-failed", 50_000);
    let mut gone = TcpStream::connect(gw.addr).await.unwrap();
    gone.write_all(head("failed", 2 * failed.len()).as_bytes())
        .await
        .unwrap();
    gone.write_all(&failed).await.unwrap();
    wait_for_metric(
        gw,
        "rasa_upload_bytes_in_progress",
        (inflight.len() - 1 + failed.len()) as f64,
    )
    .await;
    drop(gone);
    let s3 = rasa_tests::s3_client_with(&s.s3_url, &s.alpha_s3.0, &s.alpha_s3.1);
    let mp = s3
        .create_multipart_upload()
        .bucket("alpha")
        .key("parts")
        .send()
        .await
        .expect("a multipart upload starts in bucket alpha");
    s3.upload_part()
        .bucket("alpha")
        .key("parts")
        .upload_id(mp.upload_id().unwrap())
        .part_number(1)
        .body(marker("alpha-multipart", 50_000).into())
        .send()
        .await
        .expect("a part is staged");
    let stored = marker("alpha-stored", 20_000);
    let d: Descriptor = put(gw, &s.alpha_rw, "/v1/ns/alpha/objects/mine", stored.clone())
        .await
        .json()
        .await
        .unwrap();
    assert!(
        d.rkey.is_some(),
        "a reader of alpha gets a remote key: {d:?}"
    );
    let exposed = exposed_by(&s, "/v1/ns/alpha/_test/region/mine").await;
    assert!(
        contains(&exposed, b"<alpha-stored>"),
        "alpha's own value reads"
    );
    for needle in [
        "<bravo-secret>",
        "bravo-secret-key",
        "<default-secret>",
        "default-secret-key",
        "<alpha-inflight>",
        "<alpha-failed>",
        "<alpha-multipart>",
    ] {
        assert!(
            !contains(&exposed, needle.as_bytes()),
            "{needle} is readable with a descriptor of namespace alpha"
        );
    }
    // The same key names another value in each namespace.
    let d_bravo: Descriptor = put(gw, &s.bravo_rw, "/v1/ns/bravo/objects/mine", b"b".to_vec())
        .await
        .json()
        .await
        .unwrap();
    assert_ne!(d_bravo.rkey, d.rkey, "two namespaces share a remote key");
    let got = get(gw, &s.alpha_rw, "/v1/ns/alpha/objects/mine").await;
    assert_eq!(got.bytes().await.unwrap().as_ref(), &stored[..]);
}

/// Tokens and S3 keys act only where they are granted: a read token of `alpha` gets 403 on
/// `bravo` and on the default namespace, over HTTP and S3 (a copy needs read on its
/// source's bucket); a write-only token's PUT carries no remote key; an unknown namespace
/// is `404 no_such_namespace`.
#[tokio::test]
async fn credentials_act_only_in_their_namespaces() {
    let s = start("alpha 16MiB\nbravo 16MiB\n", &[]);
    let gw = &s.gw;
    assert_eq!(
        put(gw, &s.bravo_rw, "/v1/ns/bravo/objects/b", b"bravo".to_vec())
            .await
            .status(),
        201
    );
    assert_eq!(
        put(gw, &s.admin, "/v1/objects/d", b"default".to_vec())
            .await
            .status(),
        201
    );
    assert_eq!(
        put(gw, &s.alpha_rw, "/v1/ns/alpha/objects/a", b"alpha".to_vec())
            .await
            .status(),
        201
    );
    assert_eq!(
        get(gw, &s.alpha_ro, "/v1/ns/alpha/objects/a")
            .await
            .status(),
        200
    );
    for path in [
        "/v1/ns/bravo/objects/b",
        "/v1/ns/bravo/descriptors/b",
        "/v1/ns/bravo/objects",
        "/v1/objects/d",
        "/v1/descriptors/d",
        "/v1/stats",
    ] {
        let got = get(gw, &s.alpha_ro, path).await;
        assert_eq!(got.status(), 403, "{path}");
    }
    assert_eq!(
        put(gw, &s.alpha_ro, "/v1/ns/alpha/objects/x", b"x".to_vec())
            .await
            .status(),
        403
    );
    // Readers of any namespace learn the fabric address.
    assert_eq!(get(gw, &s.alpha_ro, "/v1/fabric").await.status(), 200);
    let d: Descriptor = put(gw, &s.alpha_wo, "/v1/ns/alpha/objects/w", vec![1; 4096])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (d.addr, d.rkey),
        (None, None),
        "a write-only token got {d:?}"
    );
    let missing = get(gw, &s.admin, "/v1/ns/nowhere/objects/a").await;
    assert_eq!(missing.status(), 404);
    let p: Problem = missing.json().await.unwrap();
    assert_eq!(p.code, ProblemCode::NoSuchNamespace);
    // S3: bucket alpha is namespace alpha; bravo and the default bucket are not its key's.
    let s3 = rasa_tests::s3_client_with(&s.s3_url, &s.alpha_s3.0, &s.alpha_s3.1);
    let got = s3
        .get_object()
        .bucket("alpha")
        .key("a")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"alpha"
    );
    for bucket in ["bravo", "bkt"] {
        let err = s3
            .get_object()
            .bucket(bucket)
            .key("b")
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            err.raw_response().map(|r| r.status().as_u16()),
            Some(403),
            "{bucket}"
        );
    }
    let copy = s3
        .copy_object()
        .bucket("alpha")
        .key("stolen")
        .copy_source("bravo/b")
        .send()
        .await
        .unwrap_err();
    assert_eq!(copy.raw_response().map(|r| r.status().as_u16()), Some(403));
    s3.copy_object()
        .bucket("alpha")
        .key("copied")
        .copy_source("alpha/a")
        .send()
        .await
        .expect("a copy within alpha");
    let got = get(gw, &s.alpha_ro, "/v1/ns/alpha/objects/copied").await;
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"alpha");
}

/// Filling `alpha` far beyond its 8 MiB quota evicts alpha's own cold values and leaves
/// every value of `bravo` readable; the per-namespace gauges say so.
#[tokio::test]
async fn a_namespace_over_its_quota_evicts_only_its_own_values() {
    let s = start(
        "alpha 8MiB\nbravo 8MiB\n",
        &["--lease", "200ms", "--lease-grace", "100ms"],
    );
    let gw = &s.gw;
    let bravo: Vec<Vec<u8>> = (0..20).map(|i| rasa_tests::pattern(100_000, i)).collect();
    for (i, v) in bravo.iter().enumerate() {
        let path = format!("/v1/ns/bravo/objects/keep/{i}");
        assert_eq!(put(gw, &s.bravo_rw, &path, v.clone()).await.status(), 201);
    }
    for i in 0..64u64 {
        let path = format!("/v1/ns/alpha/objects/fill/{i}");
        let got = put(
            gw,
            &s.alpha_rw,
            &path,
            rasa_tests::pattern(512 << 10, 1000 + i),
        )
        .await;
        assert_eq!(got.status(), 201, "fill {i}: {}", got.text().await.unwrap());
    }
    for (i, v) in bravo.iter().enumerate() {
        let got = get(gw, &s.bravo_rw, &format!("/v1/ns/bravo/objects/keep/{i}")).await;
        assert_eq!(got.status(), 200, "bravo's value {i} after alpha filled up");
        assert_eq!(got.bytes().await.unwrap().as_ref(), &v[..]);
    }
    let evicted = |ns: &str| format!("rasa_namespace_evictions_total{{namespace=\"{ns}\"}}");
    let allocated = |ns: &str| format!("rasa_namespace_bytes_allocated{{namespace=\"{ns}\"}}");
    assert!(metric(gw, &evicted("alpha")).await > 0.0);
    assert_eq!(metric(gw, &evicted("bravo")).await, 0.0);
    assert!(metric(gw, &allocated("alpha")).await <= (8 << 20) as f64);
    // The status page's figures say the same.
    let stats: rasa_openapi::stats::Stats =
        get(gw, &s.admin, "/v1/stats").await.json().await.unwrap();
    let names: Vec<&str> = stats.namespaces.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["default", "alpha", "bravo"]);
    let alpha = &stats.namespaces[1];
    assert!(
        alpha.evictions > 0 && alpha.quota_bytes == 8 << 20,
        "{alpha:?}"
    );
    assert_eq!(stats.namespaces[2].evictions, 0);
}

/// SIGHUP with a changed namespaces file adds a namespace and changes a quota without a
/// restart (and keeps the values); a broken file changes nothing; a broken file at start
/// is refused with its reason.
#[tokio::test]
async fn the_namespaces_file_is_read_again_on_sighup() {
    let s = start("alpha 16MiB\n", &[]);
    let gw = &s.gw;
    assert_eq!(
        put(gw, &s.alpha_rw, "/v1/ns/alpha/objects/k", b"kept".to_vec())
            .await
            .status(),
        201
    );
    assert_eq!(
        put(gw, &s.bravo_rw, "/v1/ns/bravo/objects/k", b"b".to_vec())
            .await
            .status(),
        404
    );
    let hangup = |result: &'static str| async move {
        let name = format!("rasa_namespace_reloads_total{{result=\"{result}\"}}");
        rasa_tests::hangup_and_wait(gw, &name).await;
    };
    std::fs::write(&s.ns_file, "alpha 8MiB\nbravo 16MiB\n").unwrap();
    hangup("ok").await;
    assert_eq!(
        put(gw, &s.bravo_rw, "/v1/ns/bravo/objects/k", b"b".to_vec())
            .await
            .status(),
        201
    );
    let quota = metric(gw, "rasa_namespace_quota_bytes{namespace=\"alpha\"}").await;
    assert_eq!(quota, (8 << 20) as f64);
    let left = metric(gw, "rasa_namespace_quota_bytes{namespace=\"default\"}").await;
    assert_eq!(
        left,
        (40 << 20) as f64,
        "the default namespace gets what is left"
    );
    std::fs::write(&s.ns_file, "alpha 8MiB\nbravo lots\n").unwrap();
    hangup("error").await;
    let got = get(gw, &s.alpha_rw, "/v1/ns/alpha/objects/k").await;
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"kept");
    assert_eq!(
        get(gw, &s.bravo_rw, "/v1/ns/bravo/objects/k")
            .await
            .status(),
        200
    );

    let dir = temp_dir("namespaces-bad");
    let bad = dir.join("namespaces");
    std::fs::write(&bad, "alpha 1GiB\nbravo 1GiB\n").unwrap();
    let out = std::process::Command::new(rasa_tests::gateway_bin())
        .args(["--memory", "1GiB", "--namespaces", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("more than --memory"), "{err}");
}

/// The Rust SDK (`ClientBuilder::namespace`) and the CLI (`--namespace`) address a
/// namespace plainly: the same key names another value in each, read one-sided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_and_the_cli_address_a_namespace() {
    use rasa_client::{Client, FastPath};
    let s = start("alpha 16MiB\nbravo 16MiB\n", &[]);
    let client = |ns: &str, token: &str| {
        Client::builder(&s.gw.base)
            .namespace(ns)
            .token(token)
            .fast_path(FastPath::Required)
            .build()
            .unwrap()
    };
    let (a, b) = (client("alpha", &s.alpha_rw), client("bravo", &s.bravo_rw));
    a.put("same", b"alpha's".to_vec()).await.unwrap();
    b.put("same", b"bravo's".to_vec()).await.unwrap();
    assert_eq!(a.get("same").await.unwrap().bytes.as_ref(), b"alpha's");
    assert_eq!(b.get("same").await.unwrap().bytes.as_ref(), b"bravo's");
    assert_eq!(a.stats().http_reads, 0, "read one-sided");
    let listed = a.list("", None, 10).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let intruder = client("bravo", &s.alpha_rw);
    assert!(intruder.get("same").await.is_err());
    let bad = Client::builder(&s.gw.base).namespace("Not A Name").build();
    assert!(bad.is_err());
    let out = std::process::Command::new(rasa_tests::workspace_bin("rasa"))
        .args([
            "--endpoint",
            &s.gw.base,
            "--namespace",
            "bravo",
            "get",
            "same",
        ])
        .env("RASA_TOKEN", &s.bravo_rw)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"bravo's");
}
