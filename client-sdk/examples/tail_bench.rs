//! The tail of large one-sided reads: `N` reads of one value, one at a time, landing in
//! registered memory (no copy, no allocation: only the transport and the validation are
//! timed), and the spread of their latencies.
//!
//! ```sh
//! cargo run --release -p rasa-client --example tail_bench -- http://127.0.0.1:8080 SIZE_MIB N
//! ```
//!
//! Prints `p50_us p90_us p99_us max_us GB/s`. `bench/tail.sh` runs it against gateways
//! started with different provider settings (`make bench`).

use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath};
use rasa_fastpath::reader::LandingBuffer;

#[path = "common/raw.rs"]
mod raw;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: tail_bench ENDPOINT SIZE_MIB N";
    let endpoint = args.next().expect(usage);
    let size: usize = args.next().expect(usage).parse::<usize>().expect(usage) << 20;
    let n: usize = args.next().expect(usage).parse().expect(usage);
    let client = Client::builder(&endpoint)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    let (mut reader, _) = raw::raw_reader(&client).await;
    let key = format!("bench/tail/{size}");
    client.put(&key, vec![7u8; size]).await.unwrap();
    let mut dst = LandingBuffer::new(size).unwrap();
    let mut fresh = raw::Fresh::new(&client, &key).await;
    let mut lat = Vec::with_capacity(n);
    let warm = 5;
    let wall = Instant::now();
    for i in 0..n + warm {
        let f = fresh.frame(&client).await;
        let t = Instant::now();
        let got = reader
            .direct()
            .read(&f, &mut dst, Duration::from_secs(5))
            .unwrap();
        if i >= warm {
            lat.push(t.elapsed());
        }
        assert_eq!(got, size);
    }
    let wall = wall.elapsed();
    lat.sort();
    let us = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)].as_secs_f64() * 1e6;
    println!(
        "{:.0} {:.0} {:.0} {:.0} {:.2}",
        us(0.5),
        us(0.9),
        us(0.99),
        us(1.0),
        (size * (n + warm)) as f64 / wall.as_secs_f64() / 1e9
    );
}
