//! Single-core throughput of the digests every stored byte goes through: SHA-256 (the
//! ETag), the XXH3-64 frame checksum (validated on every whole fast-path read) and the
//! block table (one seeded XXH3-64 per block, validated by range reads) — and, for whole
//! reads, whether checking by blocks would be cheaper than by the whole-value checksum.
//!
//! `cargo bench -p rasa-fastpath --bench checksums` (part of `make bench`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use rasa_fastpath::frame::{
    block_count, fill_table, key_hash, FrameHasher, FrameIdentity, DEFAULT_BLOCK_SIZE, ENTRY_LEN,
};
use sha2::{Digest, Sha256};

fn rate(name: &str, len: usize, mut f: impl FnMut()) {
    // Warm up, then run for at least half a second; report the median of 5 rounds.
    f();
    let mut rounds: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < Duration::from_millis(100) {
                f();
                n += 1;
            }
            (n as f64 * len as f64) / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    println!("{name:<28} {:>7.2} GB/s", rounds[2]);
}

fn main() {
    for len in [4 << 10, 1 << 20] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let label = if len >= 1 << 20 { "1 MiB" } else { "4 KiB" };
        rate(&format!("sha256 {label}"), len, || {
            black_box(Sha256::digest(black_box(&data)));
        });
        rate(&format!("xxh3-64 frame checksum {label}"), len, || {
            let mut h = FrameHasher::new();
            h.update(black_box(&data));
            black_box(h.seal(
                FrameIdentity {
                    key_hash: key_hash("k"),
                    version: 1,
                    payload_len: len as u64,
                },
                0,
            ));
        });
    }
    // Whole reads of 16 MiB: the whole-value checksum (what readers do) vs checking each
    // block against its entry (what they could do instead, with the table read too).
    let len = 16usize << 20;
    let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let id = FrameIdentity {
        key_hash: key_hash("k"),
        version: 1,
        payload_len: len as u64,
    };
    let bs = DEFAULT_BLOCK_SIZE;
    let mut table = vec![0u8; block_count(len as u64, bs) as usize * ENTRY_LEN];
    rate("whole read 16 MiB: checksum", len, || {
        let mut h = FrameHasher::new();
        h.update(black_box(&data));
        black_box(h.seal(id, bs));
    });
    // The same work as writing the table at ingest.
    rate("whole read 16 MiB: by blocks", len, || {
        black_box(fill_table(&id, bs, black_box(&data), 0, &mut table));
    });
}
