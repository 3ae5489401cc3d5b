//! The Rust SDK's `get_into` (one-sided, into a reused buffer), for comparison with the
//! Python SDK in the same run (`bench/python.sh`).
//!
//! ```sh
//! cargo run --release -p rasa-client --example get_into_bench -- http://127.0.0.1:8080 KEY:ROUNDS...
//! ```
//!
//! Prints, per key: `KEY p50_us GB/s` (GB/s over the whole run, one read at a time).

use std::time::Instant;

use rasa_client::{Client, FastPath};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .expect("usage: get_into_bench ENDPOINT KEY:ROUNDS...");
    let client = Client::builder(&endpoint)
        .fast_path(FastPath::Required)
        .build()
        .expect("client");
    for spec in args {
        let (key, rounds) = spec.rsplit_once(':').expect("KEY:ROUNDS");
        let rounds: usize = rounds.parse().expect("ROUNDS is a number");
        let len = client.head(key).await.expect("head").length as usize;
        let mut buf = vec![0_u8; len];
        // Warm up: the endpoint, the descriptor cache, the buffer's pages.
        for _ in 0..3 {
            let (r, b) = client.get_into(key, buf).await;
            r.expect("get_into");
            buf = b;
        }
        let mut lat = Vec::with_capacity(rounds);
        let start = Instant::now();
        for _ in 0..rounds {
            let t = Instant::now();
            let (r, b) = client.get_into(key, buf).await;
            r.expect("get_into");
            buf = b;
            lat.push(t.elapsed());
        }
        let wall = start.elapsed();
        lat.sort();
        println!(
            "{key} {:.1} {:.3}",
            lat[lat.len() / 2].as_secs_f64() * 1e6,
            (len * rounds) as f64 / wall.as_secs_f64() / 1e9
        );
    }
}
