//! Batch writes (issue 46, item 2): one request carries N values, each streamed into
//! memory and stored as its own version with its own result; a bad value is named and the
//! others stored; the limits answer before the values are read; a body cut short stores
//! nothing; deletes batch too; the SDK's `put_many` of 256 × 64 KiB is one request.

use bytes::Bytes;
use rasa_client::{Client, FastPath};
use rasa_openapi::{DeleteBatchResponse, Problem, ProblemCode, PutBatchManifest, PutBatchResponse};
use rasa_tests::{bytes_of, http, metric, pattern, requests_to, Gateway};

const LIMITED: [&str; 8] = [
    "--max-object-size",
    "4KiB",
    "--max-batch-keys",
    "6",
    "--max-batch-size",
    "20KiB",
    "--body-timeout",
    "5s",
];

/// A batch body: the manifest line and the values.
fn body_of(values: &[(&str, &[u8])]) -> Vec<u8> {
    let manifest = PutBatchManifest::of(values.iter().map(|(k, v)| (*k, v.len() as u64)));
    let mut body = manifest.line();
    values.iter().for_each(|(_, v)| body.extend_from_slice(v));
    body
}

async fn post(gw: &Gateway, body: impl Into<reqwest::Body>) -> reqwest::Response {
    http()
        .post(gw.url("/v1/batch/put"))
        .header("content-type", rasa_openapi::BATCH_CONTENT_TYPE)
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn status_of(gw: &Gateway, key: &str) -> u16 {
    let r = http().get(gw.url(&format!("/v1/objects/{key}")));
    r.send().await.unwrap().status().as_u16()
}

async fn refused(r: reqwest::Response, status: u16, code: ProblemCode) -> Problem {
    assert_eq!(r.status(), status);
    let p: Problem = r.json().await.unwrap();
    assert_eq!(p.code, code, "{p:?}");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_bad_values_in_the_middle_stores_the_others_and_names_the_bad_ones() {
    let gw = Gateway::start(&LIMITED);
    let (a, b, c) = (pattern(3000, 1), pattern(1, 2), pattern(4096, 3));
    let big = pattern(5000, 4);
    let values: [(&str, &[u8]); 6] = [
        ("mix/a", &a),
        ("mix/../escape", b"x"),
        ("mix/b", &b),
        ("mix/big", &big),
        ("mix/c", &c),
        ("mix/empty", b""),
    ];
    let r = post(&gw, body_of(&values)).await;
    assert_eq!(r.status(), 200);
    let results = r.json::<PutBatchResponse>().await.unwrap().results;
    let keys: Vec<&str> = results.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        values.map(|(k, _)| k),
        "one result per value, in order"
    );
    let code = |i: usize| results[i].error.as_ref().map(|p| p.code);
    assert_eq!(code(1), Some(ProblemCode::InvalidKey));
    assert_eq!(code(3), Some(ProblemCode::PayloadTooLarge));
    for i in [0, 2, 4, 5] {
        let d = results[i].descriptor.as_ref().expect("stored");
        assert_eq!(d.length, values[i].1.len() as u64);
        assert_eq!(
            (d.addr, d.lease_ms),
            (None, 0),
            "a plain batch leases nothing"
        );
        let got = bytes_of(http().get(gw.url(&format!("/v1/objects/{}", values[i].0)))).await;
        assert_eq!(&got[..], values[i].1, "{}", values[i].0);
    }
    assert_eq!(status_of(&gw, "mix/big").await, 404);
    let versions: std::collections::HashSet<_> = results
        .iter()
        .filter_map(|r| r.descriptor.as_ref().map(|d| d.version.clone()))
        .collect();
    assert_eq!(versions.len(), 4, "each value is its own version");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_limits_refuse_before_anything_is_stored() {
    let gw = Gateway::start(&LIMITED);
    let small = pattern(100, 5);
    let seven: Vec<(String, &[u8])> = (0..7).map(|i| (format!("many/{i}"), &small[..])).collect();
    let seven: Vec<(&str, &[u8])> = seven.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let p = refused(
        post(&gw, body_of(&seven)).await,
        400,
        ProblemCode::TooManyKeys,
    )
    .await;
    assert!(p.detail.contains("--max-batch-keys"), "{}", p.detail);
    let v = pattern(4000, 6);
    let six: Vec<(String, &[u8])> = (0..6).map(|i| (format!("big/{i}"), &v[..])).collect();
    let six: Vec<(&str, &[u8])> = six.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let p = refused(
        post(&gw, body_of(&six)).await,
        413,
        ProblemCode::PayloadTooLarge,
    )
    .await;
    assert!(p.detail.contains("--max-batch-size"), "{}", p.detail);
    // A manifest that is not one, and none at all.
    refused(
        post(&gw, b"{\"keys\":[\"a\"]}\n".to_vec()).await,
        400,
        ProblemCode::InvalidRequest,
    )
    .await;
    refused(
        post(&gw, b"{\"items\":[]".to_vec()).await,
        400,
        ProblemCode::IncompleteBody,
    )
    .await;
    // Bytes after the last value.
    let mut extra = body_of(&[("extra/a", b"abc")]);
    extra.extend_from_slice(b"more");
    refused(post(&gw, extra).await, 400, ProblemCode::InvalidRequest).await;
    // A body that ends in the middle of its second value (no declared length).
    let mut cut = body_of(&[("cut/a", b"first"), ("cut/b", b"second")]);
    cut.truncate(cut.len() - 3);
    let stream = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(cut))]);
    let p = refused(
        post(&gw, reqwest::Body::wrap_stream(stream)).await,
        400,
        ProblemCode::IncompleteBody,
    )
    .await;
    assert!(p.detail.contains("cut/b"), "{}", p.detail);
    for key in ["many/0", "big/0", "extra/a", "cut/a", "cut/b"] {
        assert_eq!(
            status_of(&gw, key).await,
            404,
            "{key}: nothing of a refused batch is stored"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_length_that_disagrees_with_the_manifest_is_refused_at_once() {
    let gw = Gateway::start(&LIMITED);
    let mut body = body_of(&[("declared/a", b"abc")]);
    body.extend_from_slice(b"zz"); // 2 more than the manifest names; declared honestly
    let r = post(&gw, body).await;
    let p = refused(r, 400, ProblemCode::InvalidRequest).await;
    assert!(p.detail.contains("Content-Length"), "{}", p.detail);
    assert_eq!(status_of(&gw, "declared/a").await, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_batch_deletes_each_key_and_names_the_bad_one() {
    let gw = Gateway::start(&LIMITED);
    for k in ["del/a", "del/b", "del/keep"] {
        rasa_tests::put_value(&gw, k, b"value").await;
    }
    let r = http()
        .post(gw.url("/v1/batch/delete"))
        .json(&serde_json::json!({"keys": ["del/a", "del/./x", "del/absent", "del/b"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let results = r.json::<DeleteBatchResponse>().await.unwrap().results;
    let errors: Vec<Option<ProblemCode>> = results
        .iter()
        .map(|r| r.error.as_ref().map(|p| p.code))
        .collect();
    assert_eq!(errors, [None, Some(ProblemCode::InvalidKey), None, None]);
    assert_eq!(status_of(&gw, "del/a").await, 404);
    assert_eq!(status_of(&gw, "del/b").await, 404);
    assert_eq!(status_of(&gw, "del/keep").await, 200);
    let seven: Vec<String> = (0..7).map(|i| format!("k{i}")).collect();
    let r = http()
        .post(gw.url("/v1/batch/delete"))
        .json(&serde_json::json!({"keys": seven}));
    refused(r.send().await.unwrap(), 400, ProblemCode::TooManyKeys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_put_many_of_256_blocks_is_four_requests_and_reads_back() {
    let gw = Gateway::start(&["--memory", "512MiB"]);
    let client = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..256).map(|i| format!("kv/block{i}")).collect();
    let items: Vec<(&str, Bytes)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), Bytes::from(pattern(64 << 10, i as u64))))
        .collect();
    let before = requests_to(&gw, "/v1/batch/put").await;
    let results = client.many().put(&items).await.unwrap();
    // Four batches of 64, in flight together: one request a batch, none a value.
    assert_eq!(requests_to(&gw, "/v1/batch/put").await - before, 4.0);
    assert_eq!(
        metric(&gw, "rasa_http_requests_total{method=\"PUT\"").await,
        0.0
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let read = client.many().get(&refs).await.unwrap();
    for ((_, want), got) in items.iter().zip(read) {
        assert_eq!(got.unwrap().bytes, *want);
    }
    let deleted = client.many().delete(&refs).await.unwrap();
    assert!(deleted.iter().all(Result::is_ok));
    assert_eq!(requests_to(&gw, "/v1/batch/delete").await, 1.0);
    assert_eq!(status_of(&gw, "kv/block0").await, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_puts_and_removes_many_in_one_request_each() {
    let gw = Gateway::start(&LIMITED);
    let dir = rasa_tests::temp_dir("put-many");
    let (a, b, big) = (dir.join("a.bin"), dir.join("b.bin"), dir.join("big.bin"));
    std::fs::write(&a, b"alpha").unwrap();
    std::fs::write(&b, b"beta").unwrap();
    std::fs::write(&big, pattern(5000, 9)).unwrap();
    let before = requests_to(&gw, "/v1/batch/put").await;
    let out = rasa_tests::rasa_cli(
        &gw,
        &[
            "put-many",
            "--prefix",
            "cli/",
            a.to_str().unwrap(),
            &format!("cli/named={}", b.display()),
            big.to_str().unwrap(),
        ],
    );
    assert_eq!(requests_to(&gw, "/v1/batch/put").await - before, 1.0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a value not stored fails the command"
    );
    assert!(stderr.contains("1 of 3 values were not stored"), "{stderr}");
    assert!(
        stdout.contains("stored  cli/a.bin") && stdout.contains("failed  cli/big.bin"),
        "{stdout}"
    );
    assert_eq!(
        &bytes_of(http().get(gw.url("/v1/objects/cli/named"))).await[..],
        b"beta"
    );
    let out = rasa_tests::rasa_cli(&gw, &["rm", "cli/a.bin", "cli/named", "cli/absent"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(requests_to(&gw, "/v1/batch/delete").await, 1.0);
    assert_eq!(status_of(&gw, "cli/a.bin").await, 404);
    assert_eq!(status_of(&gw, "cli/named").await, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_memory_stores_what_fits_and_refuses_the_rest_at_once() {
    // 40 × 512 KiB into 16 MiB: the batch's own values, unpublished until it ends, fill
    // the memory; the rest cannot fit however long they wait. (They waited a lease each:
    // 10 s per value, minutes for the batch.)
    let gw = Gateway::start(&[
        "--memory",
        "16MiB",
        "--arena-size",
        "1MiB",
        "--max-object-size",
        "1MiB",
    ]);
    let values: Vec<(String, Vec<u8>)> = (0..40u64)
        .map(|i| (format!("big/{i}"), pattern(512 << 10, i)))
        .collect();
    let refs: Vec<(&str, &[u8])> = values
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let started = std::time::Instant::now();
    let r = post(&gw, body_of(&refs)).await;
    let took = started.elapsed();
    assert_eq!(r.status(), 200);
    let results = r.json::<PutBatchResponse>().await.unwrap().results;
    assert!(
        took < std::time::Duration::from_secs(5),
        "the batch took {took:?}"
    );
    let stored: Vec<usize> = (0..40).filter(|&i| results[i].error.is_none()).collect();
    assert!(
        !stored.is_empty() && stored.len() < 40,
        "{} stored",
        stored.len()
    );
    for r in results.iter().filter(|r| r.error.is_some()) {
        let p = r.error.as_ref().unwrap();
        assert_eq!(
            p.code,
            ProblemCode::InsufficientStorage,
            "{}: {}",
            r.key,
            p.detail
        );
    }
    for &i in &stored {
        let got = bytes_of(http().get(gw.url(&format!("/v1/objects/{}", values[i].0)))).await;
        assert_eq!(got, values[i].1, "{}", values[i].0);
    }
}
