//! Warm memory (issue 63): the gateway keeps `--warm-memory` of spare memory faulted in
//! ahead of writes, within `--memory`, and cuts arenas and one-sided upload regions out of
//! it, so a write finds its pages in place; it fills again in the background. Without it
//! (`--warm-memory 0`) every region is mapped fresh and its first writes fault its pages
//! in (measured: 16 MiB values at 0.8 GB/s into fresh memory, 5.6 GB/s into warm).

use bytes::Bytes;
use rasa_client::{Client, FastPath};
use rasa_tests::{metric, pattern, wait_for_metric, Gateway};

const MIB: f64 = (1u64 << 20) as f64;

/// Writes 8 × 2 MiB one-sided over shm and reads them back byte-exact.
async fn batch(gw: &Gateway, prefix: &str) {
    let client = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .fabric_provider("shm")
        .build()
        .unwrap();
    let keys: Vec<String> = (0..8).map(|i| format!("{prefix}/{i}")).collect();
    let items: Vec<(&str, Bytes)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), Bytes::from(pattern(2 << 20, i as u64))))
        .collect();
    let results = client.many().put(&items).await.unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(client.stats().fabric_writes, 8, "written one-sided");
    for (key, value) in &items {
        assert_eq!(client.get(key).await.unwrap().bytes, *value, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_sided_batch_is_cut_out_of_warm_memory_which_fills_again() {
    let gw = Gateway::start(&[
        "--memory",
        "256MiB",
        "--max-object-size",
        "16MiB",
        "--warm-memory",
        "64MiB",
        "--fast-path",
        "on",
        "--fabric-provider",
        "tcp;ofi_rxm,shm",
    ]);
    wait_for_metric(&gw, "rasa_arena_bytes_warm", 64.0 * MIB).await;
    assert_eq!(metric(&gw, "rasa_arena_bytes_allocated").await, 64.0 * MIB);
    batch(&gw, "warm").await;
    assert!(
        metric(&gw, "rasa_arena_bytes_from_warm_total").await >= 16.0 * MIB,
        "the region was cut out of warm memory"
    );
    assert_eq!(
        metric(&gw, "rasa_arena_bytes_cold_total").await,
        0.0,
        "nothing mapped fresh"
    );
    // Filled again to its target beside the region (which holds the values).
    wait_for_metric(&gw, "rasa_arena_bytes_allocated", 80.0 * MIB).await;
    wait_for_metric(&gw, "rasa_arena_bytes_warm", 64.0 * MIB).await;
    assert!(metric(&gw, "rasa_arena_bytes_warm").await <= 64.0 * MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_warm_memory_regions_are_mapped_fresh_and_by_default_all_of_it_is_warm() {
    let cold = Gateway::start(&[
        "--memory",
        "256MiB",
        "--max-object-size",
        "16MiB",
        "--warm-memory",
        "0",
        "--fast-path",
        "on",
        "--fabric-provider",
        "tcp;ofi_rxm,shm",
    ]);
    batch(&cold, "cold").await;
    assert!(metric(&cold, "rasa_arena_bytes_cold_total").await >= 16.0 * MIB);
    assert_eq!(metric(&cold, "rasa_arena_bytes_from_warm_total").await, 0.0);
    assert_eq!(metric(&cold, "rasa_arena_bytes_warm").await, 0.0);

    // By default all of --memory is faulted in at start (at most 1 GiB), so a writer's
    // first pass over it is not slower than the next ones (issue 63).
    let default = Gateway::start(&["--memory", "512MiB", "--max-object-size", "16MiB"]);
    wait_for_metric(&default, "rasa_arena_bytes_warm", 512.0 * MIB).await;
    assert_eq!(
        metric(&default, "rasa_arena_bytes_allocated").await,
        512.0 * MIB
    );
    drop(default);
    let large = Gateway::start(&["--memory", "3GiB", "--max-object-size", "16MiB"]);
    wait_for_metric(&large, "rasa_arena_bytes_warm", 1024.0 * MIB).await;
    assert_eq!(
        metric(&large, "rasa_arena_bytes_allocated").await,
        1024.0 * MIB
    );
}
