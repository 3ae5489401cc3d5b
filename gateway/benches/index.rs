//! The key index at scale: a million keys of 32 bytes, then random lookups of present
//! keys (`Store::current`) and a page of a prefix listing, one thread.
//!
//! `cargo bench -p rasa-gateway --bench index` (part of `make bench`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use rasa_gateway::store::{Store, StoreConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let store = Store::new(
        StoreConfig {
            memory_budget: 2 << 30,
            arena_size: 64 << 20,
            lease: Duration::from_secs(10),
            grace: Duration::from_secs(1),
            key_lifetime: None,
            block_size: rasa_fastpath::frame::DEFAULT_BLOCK_SIZE,
        },
        None,
    );
    let n = 1_000_000usize;
    let key = |i: usize| format!("thumbnails/{:021}", i % n);
    // Inserted in a scattered order, as keys arrive in a cache.
    for i in 0..n {
        let mut up = store
            .begin(&key(i * 7919), "application/octet-stream", 16)
            .await
            .unwrap();
        up.write(&[7u8; 16]).unwrap();
        store.commit(up, |_| Ok(())).unwrap();
    }
    let probes: Vec<String> = (0..200_000).map(|i| key(i * 104_729)).collect();
    let mut rounds: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for k in &probes {
                assert!(black_box(store.current(k)).is_some());
            }
            t.elapsed().as_nanos() as f64 / probes.len() as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    println!(
        "index of {n} keys: random lookup {:.0} ns (median of 5 rounds)",
        rounds[2]
    );
    let t = Instant::now();
    let (page, more) = store.list("thumbnails/00000000000000050", None, 1000);
    assert!(page.len() == 1000 && more);
    println!(
        "index of {n} keys: a page of 1000 keys by prefix {:.0} µs",
        t.elapsed().as_secs_f64() * 1e6
    );
}
