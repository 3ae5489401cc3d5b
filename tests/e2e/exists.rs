//! Presence checks in batches (issue 47, item 1: "`exists` answers from Rasa's index
//! (memory and disk), not by reading values"): `POST /v1/batch/exists` says which keys are
//! stored in one request, counting the disk tier, reading no value; the SDK's
//! `exists_many` is one request, not a HEAD per key.

use rasa_client::{Client, FastPath};
use rasa_openapi::{ExistsBatchResponse, ProblemCode};
use rasa_tests::{http, metric, pattern, requests_to, temp_dir, wait_for_metric, Gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exists_batch_counts_memory_and_disk_and_reads_no_value() {
    let dir = temp_dir("exists-disk");
    let args = crate::disk::disk_args(&dir, "64MiB", &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start(&args);
    // 60 × 200 KB into 8 MiB of memory: the oldest are on disk only.
    for i in 0..60u64 {
        rasa_tests::put_value(&gw, &format!("k{i}"), &pattern(200_000, i)).await;
    }
    wait_for_metric(&gw, "rasa_disk_spills_total", 20.0).await;
    let reads = metric(&gw, "rasa_disk_reads_total").await;
    let promoted = metric(&gw, "rasa_disk_promotions_total").await;
    let r = http()
        .post(gw.url("/v1/batch/exists"))
        .json(&serde_json::json!({"keys": ["k0", "k59", "k60", "k/./x", "k1"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let results = r.json::<ExistsBatchResponse>().await.unwrap().results;
    let exists: Vec<bool> = results.iter().map(|r| r.exists).collect();
    assert_eq!(exists, [true, true, false, false, true]);
    let codes: Vec<Option<ProblemCode>> = results
        .iter()
        .map(|r| r.error.as_ref().map(|p| p.code))
        .collect();
    assert_eq!(
        codes,
        [None, None, None, Some(ProblemCode::InvalidKey), None]
    );
    assert_eq!(
        metric(&gw, "rasa_disk_reads_total").await,
        reads,
        "no value was read from disk"
    );
    assert_eq!(metric(&gw, "rasa_disk_promotions_total").await, promoted);
    // The SDK: one request for the lot, no HEAD.
    let client = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..64).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let before = requests_to(&gw, "/v1/batch/exists").await;
    let there = client.many().exists(&refs).await.unwrap();
    assert_eq!(requests_to(&gw, "/v1/batch/exists").await - before, 1.0);
    assert_eq!(
        metric(&gw, "rasa_http_requests_total{method=\"HEAD\"").await,
        0.0
    );
    let there: Vec<bool> = there.into_iter().map(Result::unwrap).collect();
    let want: Vec<bool> = (0..64).map(|i| i < 60).collect();
    assert_eq!(there, want);
    // A deleted key is gone from the index, disk included.
    client.many().delete(&["k0", "k59"]).await.unwrap();
    let there = client.many().exists(&["k0", "k59", "k1"]).await.unwrap();
    assert_eq!(there, [Ok(false), Ok(false), Ok(true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exists_batch_is_held_to_the_batch_limit() {
    let gw = Gateway::start(&["--max-batch-keys", "3"]);
    let r = http()
        .post(gw.url("/v1/batch/exists"))
        .json(&serde_json::json!({"keys": ["a", "b", "c", "d"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let p: rasa_openapi::Problem = r.json().await.unwrap();
    assert_eq!(p.code, ProblemCode::TooManyKeys);
}
