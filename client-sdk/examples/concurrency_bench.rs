//! Concurrent reads through one SDK client, one-sided vs HTTP, against a running gateway.
//!
//! ```sh
//! cargo run --release -p rasa-client --example concurrency_bench -- http://127.0.0.1:8080 [GATEWAY_PID]
//! ```
//!
//! For 4 KiB, 1 MiB and 16 MiB values and 1, 4 and 16 tasks sharing one client, with `get` (a new
//! buffer per read) and `get_into` (each reader's own buffer, reused): aggregate
//! throughput, p50/p99 latency of a read, and (with the gateway's PID) the gateway's CPU
//! seconds per GB served. One-sided reads use the client's default fabric endpoints (4),
//! or `RASA_BENCH_ENDPOINTS` of them.
//! Prints Markdown table rows; `make bench` runs it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath, ReadPath};

#[path = "common/bench.rs"]
mod bench;
use bench::{cpu_seconds, endpoint_and_pid};

#[tokio::main]
async fn main() {
    let (endpoint, pid) = endpoint_and_pid();
    let endpoints: usize = std::env::var("RASA_BENCH_ENDPOINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let setup = Client::builder(&endpoint)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    println!("| size | readers | path ({endpoints} fabric endpoints) | aggregate | p50 | p99 | gateway CPU per GB |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (label, size, per_task) in [
        ("4 KiB", 4usize << 10, 4000usize),
        ("1 MiB", 1 << 20, 400),
        ("16 MiB", 16 << 20, 40),
    ] {
        let key = format!("bench/concurrency/{size}");
        let body: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
        setup.put(&key, body).await.unwrap();
        for readers in [1usize, 4, 16] {
            for (mode, want, path, into) in [
                (FastPath::Required, ReadPath::Fabric, "one-sided", false),
                (FastPath::Off, ReadPath::Http, "HTTP", false),
                (
                    FastPath::Required,
                    ReadPath::Fabric,
                    "one-sided, get_into",
                    true,
                ),
                (FastPath::Off, ReadPath::Http, "HTTP, get_into", true),
            ] {
                let c = Client::builder(&endpoint)
                    .fast_path(mode)
                    .fabric_endpoints(endpoints)
                    .build()
                    .unwrap();
                // Warm up: open as many endpoints (or connections) as readers will use.
                let warm: Vec<_> = (0..readers)
                    .map(|_| {
                        let (c, key) = (c.clone(), key.clone());
                        tokio::spawn(async move { c.get(&key).await.unwrap() })
                    })
                    .collect();
                for w in warm {
                    w.await.unwrap();
                }
                let reads = (per_task / readers).max(4);
                let lat = Arc::new(Mutex::new(Vec::with_capacity(reads * readers)));
                let cpu0 = cpu_seconds(pid);
                let wall = Instant::now();
                let tasks: Vec<_> = (0..readers)
                    .map(|_| {
                        let (c, key, lat) = (c.clone(), key.clone(), Arc::clone(&lat));
                        tokio::spawn(async move {
                            // get_into reuses one buffer per reader (its pages touched once).
                            let mut buf = vec![1u8; size];
                            for _ in 0..reads {
                                let t = Instant::now();
                                if into {
                                    let (r, b) = c.get_into(&key, buf).await;
                                    buf = b;
                                    let got = r.unwrap();
                                    assert_eq!((got.length as usize, got.path), (size, want));
                                } else {
                                    let obj = c.get(&key).await.unwrap();
                                    assert_eq!((obj.bytes.len(), obj.path), (size, want));
                                }
                                lat.lock().unwrap().push(t.elapsed());
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                let wall = wall.elapsed();
                let cpu = cpu_seconds(pid) - cpu0;
                let mut lat = std::mem::take(&mut *lat.lock().unwrap());
                lat.sort();
                let q = |p: usize| lat[(lat.len() * p / 100).min(lat.len() - 1)];
                let bytes = (size * lat.len()) as f64;
                let us = |d: Duration| d.as_secs_f64() * 1e6;
                println!(
                    "| {label} | {readers} | {path} | {:.2} GB/s | {:.0} µs | {:.0} µs | {} |",
                    bytes / wall.as_secs_f64() / 1e9,
                    us(q(50)),
                    us(q(99)),
                    if pid.is_some() {
                        format!("{:.2} s", cpu / (bytes / 1e9))
                    } else {
                        "n/a".into()
                    }
                );
            }
        }
    }
}
