//! The key index at scale: a million keys of 32 bytes, then random lookups of present
//! keys (`Store::current`) on one thread and on every core at once, and a page of a
//! prefix listing.
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
            staging_memory: 256 << 20,
            warm_memory: 0,
        },
        None,
        None,
    );
    let n = 1_000_000usize;
    let key = |i: usize| format!("thumbnails/{:021}", i % n);
    // Inserted in a scattered order, as keys arrive in a cache.
    for i in 0..n {
        let mut up = store
            .writes()
            .begin(&key(i * 7919), "application/octet-stream", 16)
            .await
            .unwrap();
        up.write(&[7u8; 16]).unwrap();
        store.writes().commit(up, |_| Ok(())).unwrap();
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
    // Every core looking up at once, while one more thread overwrites keys (the index
    // must not make readers wait on one lock).
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let t = Instant::now();
    let handle = tokio::runtime::Handle::current();
    std::thread::scope(|s| {
        let store = &store;
        let stop = &stop;
        s.spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                handle.block_on(async {
                    let mut up = store
                        .writes()
                        .begin(&key(i * 31), "application/octet-stream", 16)
                        .await
                        .unwrap();
                    up.write(&[8u8; 16]).unwrap();
                    store.writes().commit(up, |_| Ok(())).unwrap();
                });
                i += 1;
            }
        });
        let readers: Vec<_> = (0..cores)
            .map(|c| {
                let probes = &probes;
                s.spawn(move || {
                    for k in probes.iter().skip(c) {
                        assert!(black_box(store.current(k)).is_some());
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let lookups: usize = (0..cores).map(|c| probes.len() - c).sum();
    println!(
        "index of {n} keys: {cores} threads looking up at once while another overwrites: {:.1} M lookups/s ({:.1} M/s on one thread)",
        lookups as f64 / t.elapsed().as_secs_f64() / 1e6,
        1e3 / rounds[2]
    );
    let t = Instant::now();
    let (page, more) = store.list("thumbnails/00000000000000050", None, 1000);
    assert!(page.len() == 1000 && more);
    println!(
        "index of {n} keys: a page of 1000 keys by prefix {:.0} µs",
        t.elapsed().as_secs_f64() * 1e6
    );
}
