//! The heap a cached version costs beyond its frame (issue #22), measured with a counting
//! allocator (the bytes this thread holds, not RSS), so it cannot creep back.

use std::time::Duration;

use rasa_fastpath::counting::{held, Counting};
use rasa_gateway::store::{Store, StoreConfig};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes per version of 16-byte values under keys of `key_len` (≥ 32) bytes.
async fn per_version(n: usize, key_len: usize) -> f64 {
    let store = Store::new(
        StoreConfig {
            memory_budget: 1 << 30,
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
    let value = [7u8; 16];
    let put = |i: usize| {
        let key = format!("thumbnails/{i:0width$}", width = key_len - 11);
        let store = &store;
        async move {
            let mut up = store
                .writes()
                .begin(&key, "application/octet-stream", value.len() as u64)
                .await
                .unwrap();
            up.write(&value).unwrap();
            store.writes().commit(up, |_| Ok(())).unwrap();
        }
    };
    // Warm up: the arena, the index's first nodes.
    for i in 0..1000 {
        put(i).await;
    }
    let before = held();
    for i in 1000..1000 + n {
        put(i).await;
    }
    let after = held();
    drop(store);
    (after - before) as f64 / n as f64
}

#[tokio::test(flavor = "current_thread")]
async fn a_small_cached_version_costs_little_heap() {
    for key_len in [32, 200] {
        let cost = per_version(50_000, key_len).await;
        println!("heap per version (16 B value, {key_len} B key): {cost:.0} bytes");
        // Measured 537 bytes (32 B keys) before the key was shared, media types interned
        // and the origin state and older-versions map allocated only when used; 319 after;
        // 239 once the version id, checksum and SHA-256 were read from the frame instead of
        // held twice; 101 once the key, the creation time and the media type moved into
        // the frame's trailer too (the index orders versions by the key bytes in their
        // frames, arenas hold weak references to their members): the heap no longer grows
        // with the key. The goal (issue #22) is 128.
        assert!(
            cost <= 128.0,
            "{cost:.0} bytes of heap per version under {key_len}-byte keys (was 101): what grew?"
        );
    }
}
