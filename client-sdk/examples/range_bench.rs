//! One-sided range reads vs HTTP range GETs, through the SDK, against a running gateway
//! that holds `KEY` (a large value).
//!
//! ```sh
//! cargo run --release -p rasa-client --example range_bench -- http://127.0.0.1:8080 KEY [LABEL] [fabric-only]
//! ```
//!
//! Prints Markdown table rows `| LABEL | range | path | p50 | p99 | throughput |` for 1 MiB
//! ranges at random offsets and 64 KiB ranges at random offsets (rounds of 64), read one
//! at a time with `Client::get_range`. `bench/ranges.sh` (part of `make bench`) runs it.

use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath, ReadPath};

/// A small deterministic generator (the offsets are the same on both paths).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) % n.max(1)
    }
}

fn row(label: &str, what: &str, path: &str, mut lat: Vec<Duration>, bytes: u64, wall: Duration) {
    lat.sort();
    let p = |q: usize| lat[(lat.len() * q / 100).min(lat.len() - 1)].as_secs_f64() * 1e6;
    println!(
        "| {label} | {what} | {path} | {:.0} µs | {:.0} µs | {:.2} GB/s |",
        p(50),
        p(99),
        bytes as f64 / wall.as_secs_f64() / 1e9
    );
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let endpoint = args.next().expect("endpoint");
    let key = args.next().expect("key");
    let label = args.next().unwrap_or_default();
    let fabric_only = args.next().is_some_and(|a| a == "fabric-only");
    let probe = Client::builder(&endpoint)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let len = probe.head(&key).await.expect("the key is stored").length;
    let mut modes = vec![(FastPath::Required, ReadPath::Fabric)];
    if !fabric_only {
        modes.push((FastPath::Off, ReadPath::Http));
    }
    for (mode, want) in modes {
        let c = Client::builder(&endpoint).fast_path(mode).build().unwrap();
        c.get_range(&key, 0..1).await.unwrap(); // connect, warm up
        for (what, size, reads) in [("1 MiB", 1u64 << 20, 200usize), ("64 KiB", 64 << 10, 640)] {
            let mut rng = Lcg(size);
            let mut lat = Vec::with_capacity(reads);
            let wall = Instant::now();
            for _ in 0..reads {
                let start = rng.below(len - size);
                let t = Instant::now();
                let obj = c.get_range(&key, start..start + size).await.unwrap();
                lat.push(t.elapsed());
                assert_eq!((obj.bytes.len() as u64, obj.path), (size, want));
            }
            let path = if want == ReadPath::Fabric {
                "one-sided"
            } else {
                "HTTP"
            };
            row(&label, what, path, lat, size * reads as u64, wall.elapsed());
        }
    }
}
