//! Reads of distinct keys the origin does not have (a scan, a typo'd prefix, an attacker)
//! are remembered within `--negative-cache-size`, not one map entry each for ever: 200,000
//! of them leave the gateway's resident memory within that bound, and the metric shows the
//! evictions that kept it there.

use futures_util::StreamExt;
use rasa_tests::{metric, proc_status_kib, Gateway, S3Server};

/// `HEAD`s `n` distinct missing keys from `first`, 64 at a time; each must be a 404.
async fn miss(gw: &Gateway, first: usize, n: usize) {
    let c = rasa_tests::http();
    let statuses: Vec<u16> = futures_util::stream::iter(first..first + n)
        .map(|i| {
            let c = c.clone();
            let url = gw.url(&format!("/v1/objects/scan/{i:09}"));
            async move { c.head(url).send().await.unwrap().status().as_u16() }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 404), "a miss was not a 404");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_thousand_distinct_misses_stay_within_the_negative_cache() {
    let s3 = S3Server::start();
    let mut args = s3.gateway_args("pre");
    args.extend(
        [
            "--negative-cache-size",
            "1MiB",
            "--negative-ttl",
            "10m",
            "--fast-path",
            "off",
            // Spare memory faulted in at start is not what this measures.
            "--warm-memory",
            "0",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_with_s3(&args);
    // Warm up (connection pools, allocator, the cache's table at its full size).
    miss(&gw, 0, 20_000).await;
    let before = proc_status_kib(gw.pid(), "VmRSS:");
    miss(&gw, 20_000, 180_000).await;
    let after = proc_status_kib(gw.pid(), "VmRSS:");
    let grown_kib = after.saturating_sub(before);
    eprintln!("the gateway grew {grown_kib} KiB over 180,000 distinct misses (from {before} KiB)");
    // 180,000 entries of ~110 bytes would be ~19 MiB; the cache holds at most 1 MiB.
    assert!(
        grown_kib < 4 << 10,
        "the gateway grew {grown_kib} KiB over 180,000 distinct misses (was {before} KiB)"
    );
    assert!(metric(&gw, "rasa_origin_remembered_bytes").await <= (1 << 20) as f64);
    let evicted = metric(&gw, "rasa_origin_remembered_evictions_total").await;
    assert!(evicted > 150_000.0, "evictions: {evicted}");
    // Still remembered: the most recent misses are answered without the origin.
    let negative_hits = metric(&gw, "rasa_cache_negative_hits_total").await;
    miss(&gw, 199_990, 10).await;
    assert!(metric(&gw, "rasa_cache_negative_hits_total").await >= negative_hits + 10.0);
}
