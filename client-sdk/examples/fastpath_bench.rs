//! Fast path vs HTTP, side by side, against a running gateway.
//!
//! ```sh
//! cargo run --release -p rasa-client --example fastpath_bench -- http://127.0.0.1:8080 [GATEWAY_PID]
//! ```
//!
//! For 4 KiB, 1 MiB, 16 MiB and 256 MiB values (`FASTPATH_BENCH_ONLY="256 MiB"`: one size): latency (p50/p99) and throughput of one-sided reads
//! (one descriptor, many validated reads) and of HTTP GETs of the same value, one request
//! at a time; with the gateway's PID, also the gateway's CPU time per GB served on each
//! path (from /proc). `make bench` runs it.

use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath};

#[path = "common/bench.rs"]
mod bench;
#[path = "common/raw.rs"]
mod raw;
use bench::{cpu_seconds, endpoint_and_pid};

struct Run {
    p50: Duration,
    p99: Duration,
    gbps: f64,
    cpu_per_gb: f64,
}

fn summarize(mut lat: Vec<Duration>, bytes: usize, wall: Duration, cpu: f64) -> Run {
    lat.sort();
    let total = (bytes * lat.len()) as f64;
    Run {
        p50: lat[lat.len() / 2],
        p99: lat[(lat.len() * 99 / 100).min(lat.len() - 1)],
        gbps: total / wall.as_secs_f64() / 1e9,
        cpu_per_gb: cpu / (total / 1e9),
    }
}

/// `get_into` one-sided into `buf`, reused read after read (a `Vec`: one copy; registered
/// memory: none).
async fn time_into<B: AsMut<[u8]> + Send + 'static>(
    c: &Client,
    key: &str,
    mut buf: B,
    iters: usize,
    pid: Option<u32>,
    want: rasa_client::ReadPath,
) -> Run {
    let size = c.head(key).await.unwrap().length as usize;
    for _ in 0..3 {
        let (r, b) = c.get_into(key, buf).await; // connect, warm the pages
        r.unwrap();
        buf = b;
    }
    let mut lat = Vec::with_capacity(iters);
    let cpu0 = cpu_seconds(pid);
    let wall = Instant::now();
    for _ in 0..iters {
        let t = Instant::now();
        let (r, b) = c.get_into(key, buf).await;
        lat.push(t.elapsed());
        assert_eq!(r.unwrap().path, want);
        buf = b;
    }
    summarize(lat, size, wall.elapsed(), cpu_seconds(pid) - cpu0)
}

#[tokio::main]
async fn main() {
    let (endpoint, pid) = endpoint_and_pid();
    let client = Client::builder(&endpoint)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    // reqwest is built without a crypto provider of its own (the SDK configures rustls).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let http = reqwest::Client::new();
    let (mut reader, provider) = raw::raw_reader(&client).await;

    println!("provider: {provider}; one request at a time; median of the run");
    println!("| size | path | p50 | p99 | throughput | gateway CPU per GB |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (label, size, iters) in [
        ("4 KiB", 4usize << 10, 3000usize),
        ("1 MiB", 1 << 20, 600),
        // Enough reads that p99 is not simply the slowest one.
        ("16 MiB", 16 << 20, 200),
        // The large-value row of issue #50: a warm client, so no process start-up is timed.
        ("256 MiB", 256 << 20, 15),
    ] {
        if std::env::var("FASTPATH_BENCH_ONLY").is_ok_and(|only| only != label) {
            continue;
        }
        let key = format!("bench/fastpath/{size}");
        let body: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
        client.put(&key, body.clone()).await.unwrap();

        // One-sided: resolve, then validated reads until the lease margin, then resolve again.
        let mut lat = Vec::with_capacity(iters);
        let cpu0 = cpu_seconds(pid);
        let wall = Instant::now();
        let mut fresh = raw::Fresh::new(&client, &key).await;
        // Warm up, untimed: the first read of a size allocates and registers the reader's
        // scratch memory (a 16 MiB read then took ~40 ms, which was this table's p99).
        let frame = fresh.frame(&client).await;
        reader.read(&frame, Duration::from_secs(5)).unwrap();
        for _ in 0..iters {
            let frame = fresh.frame(&client).await;
            let t = Instant::now();
            let got = reader.read(&frame, Duration::from_secs(5)).unwrap();
            lat.push(t.elapsed());
            assert_eq!(got.len(), size);
        }
        let fabric = summarize(lat, size, wall.elapsed(), cpu_seconds(pid) - cpu0);

        let url = format!("{endpoint}/v1/objects/{key}");
        http.get(&url).send().await.unwrap().bytes().await.unwrap(); // warm up
        let mut lat = Vec::with_capacity(iters);
        let cpu0 = cpu_seconds(pid);
        let wall = Instant::now();
        for _ in 0..iters {
            let t = Instant::now();
            let got = http.get(&url).send().await.unwrap().bytes().await.unwrap();
            lat.push(t.elapsed());
            assert_eq!(got.len(), size);
        }
        let web = summarize(lat, size, wall.elapsed(), cpu_seconds(pid) - cpu0);

        // The SDK's `get` end to end (descriptor cache, validation, fallback), both ways.
        let mut sdk = Vec::new();
        for (mode, want) in [
            (FastPath::Required, rasa_client::ReadPath::Fabric),
            (FastPath::Off, rasa_client::ReadPath::Http),
        ] {
            let c = Client::builder(&endpoint).fast_path(mode).build().unwrap();
            c.get(&key).await.unwrap(); // connect / warm up
            let mut lat = Vec::with_capacity(iters);
            let cpu0 = cpu_seconds(pid);
            let wall = Instant::now();
            for _ in 0..iters {
                let t = Instant::now();
                let obj = c.get(&key).await.unwrap();
                lat.push(t.elapsed());
                assert_eq!((obj.bytes.len(), obj.path), (size, want));
            }
            sdk.push(summarize(
                lat,
                size,
                wall.elapsed(),
                cpu_seconds(pid) - cpu0,
            ));
        }
        // Into the caller's memory: a reused Vec (one copy), registered memory (none).
        let c = Client::builder(&endpoint)
            .fast_path(FastPath::Required)
            .build()
            .unwrap();
        let registered = c.register(size).unwrap();
        let fabric_path = rasa_client::ReadPath::Fabric;
        let into_reg = time_into(&c, &key, registered, iters, pid, fabric_path).await;
        let into_vec = time_into(&c, &key, vec![0u8; size], iters, pid, fabric_path).await;
        // The same reused Vec over HTTP: the like-for-like figure for the one-copy read.
        let c = Client::builder(&endpoint)
            .fast_path(FastPath::Off)
            .build()
            .unwrap();
        let http_path = rasa_client::ReadPath::Http;
        let into_vec_http = time_into(&c, &key, vec![0u8; size], iters, pid, http_path).await;
        for (name, r) in [
            ("fabric", &fabric),
            ("http", &web),
            ("SDK get, fabric", &sdk[0]),
            ("SDK get, http", &sdk[1]),
            ("SDK get_into Vec, fabric (1 copy)", &into_vec),
            ("SDK get_into registered, fabric (0 copies)", &into_reg),
            ("SDK get_into Vec, http", &into_vec_http),
        ] {
            println!(
                "| {label} | {name} | {:.0} µs | {:.0} µs | {:.2} GB/s | {} |",
                r.p50.as_secs_f64() * 1e6,
                r.p99.as_secs_f64() * 1e6,
                r.gbps,
                if pid.is_some() {
                    format!("{:.2} s", r.cpu_per_gb)
                } else {
                    "n/a".into()
                },
            );
        }
        println!(
            "| {label} | ratio fabric/http | {:.2}x faster p50 | | {:.2}x | |",
            web.p50.as_secs_f64() / fabric.p50.as_secs_f64(),
            fabric.gbps / web.gbps
        );
        println!(
            "| {label} | ratio SDK get fabric/http | {:.2}x faster p50 | | {:.2}x | |",
            sdk[1].p50.as_secs_f64() / sdk[0].p50.as_secs_f64(),
            sdk[0].gbps / sdk[1].gbps
        );
        println!(
            "| {label} | ratio SDK get_into Vec fabric/http | {:.2}x faster p50 | | {:.2}x | |",
            into_vec_http.p50.as_secs_f64() / into_vec.p50.as_secs_f64(),
            into_vec.gbps / into_vec_http.gbps
        );
    }
}
