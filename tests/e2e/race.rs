//! Reclamation under fire: writers overwrite and delete a few keys while fast-path readers
//! read them, with short leases and a small memory budget, so arenas are recycled and keys
//! revoked many times during the run. Every value a reader gets must be a complete payload
//! that was PUT for that key, and every range read (a quarter of the reads, validated by the
//! frame's block table) the start of one. `RASA_STRESS_READS` sets the number of reads
//! (`make stress`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rasa_client::{Client, Error, FastPath, ProblemCode};
use rasa_fastpath::reader::{ReadError, Reader};
use rasa_tests::{pattern, Gateway};
use sha2::{Digest, Sha256};

const KEYS: usize = 8;

/// `RACE|<key>|<seq>|<len>|` + pseudo-random body + SHA-256 of everything before it.
fn payload(key: &str, seq: u64, len: usize) -> Vec<u8> {
    let mut v = format!("RACE|{key}|{seq}|{len}|").into_bytes();
    v.extend_from_slice(&pattern(len, seq));
    let sum = Sha256::digest(&v);
    v.extend_from_slice(&sum);
    v
}

/// Whether `bytes` is a complete payload written for `key`.
fn valid(key: &str, bytes: &[u8]) -> bool {
    if bytes.len() < 32 {
        return false;
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    let prefix = format!("RACE|{key}|");
    body.starts_with(prefix.as_bytes()) && Sha256::digest(body).as_slice() == sum
}

/// Whether `bytes` is the start of a complete payload written for `key` (its prefix names
/// the rest, so it can be rebuilt and compared).
fn valid_start(key: &str, bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(64)]);
    let mut parts = text.split('|');
    let (Some("RACE"), Some(k), Some(seq), Some(len)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (Ok(seq), Ok(len)) = (seq.parse(), len.parse()) else {
        return false;
    };
    let whole = payload(key, seq, len);
    k == key && bytes.len() <= whole.len() && whole[..bytes.len()] == *bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_never_see_torn_stale_or_foreign_bytes_while_memory_is_recycled() {
    race_on("tcp;ofi_rxm").await;
}

/// The same on `shm`, whose fast path checks no remote key: a reader holding a descriptor
/// whose arena was revoked and reused reads other frames' bytes there, and frame
/// validation alone must turn them into a clean miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_shm_too_readers_never_see_torn_stale_or_foreign_bytes() {
    race_on("shm").await;
}

async fn race_on(provider: &str) {
    let target: u64 = std::env::var("RASA_STRESS_READS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    // The log is kept (and printed, with the exit status, if the gateway dies): a stress
    // run once ended with the gateway gone and nothing to say why.
    let log = rasa_tests::temp_dir("race").join("gateway.log");
    println!(
        "race: gateway log at {}; this process had abandoned {} tcp;ofi_rxm endpoints before",
        log.display(),
        rasa_fastpath::reader::abandoned_rxm_endpoints()
    );
    let gw = Arc::new(Gateway::start_logged(
        &[
            "--fast-path",
            "on",
            "--fabric-provider",
            provider,
            "--memory",
            "4MiB",
            "--arena-size",
            "256KiB",
            "--max-object-size",
            "64KiB",
            "--lease",
            "100ms",
            "--lease-grace",
            "20ms",
            "--block-size",
            "4KiB",
        ],
        &[("RUST_LOG", "info"), ("FI_LOG_LEVEL", "warn")],
        &log,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let seq = Arc::new(AtomicU64::new(0));
    let (puts, busy) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut writers = Vec::new();
    for w in 0..3u64 {
        let (gw, stop, seq, puts, busy) = (
            gw.clone(),
            stop.clone(),
            seq.clone(),
            puts.clone(),
            busy.clone(),
        );
        writers.push(tokio::spawn(async move {
            let c = Client::builder(&gw.base)
                .fast_path(FastPath::Off)
                .build()
                .unwrap();
            let mut x = w + 1;
            while !stop.load(Ordering::Relaxed) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let key = format!("race/{}", (x >> 33) as usize % KEYS);
                if (x >> 20) % 10 == 0 {
                    if let Err(e) = c.delete(&key).await {
                        panic!("DELETE failed: {e}\n{}", gw.postmortem());
                    }
                    continue;
                }
                let n = seq.fetch_add(1, Ordering::Relaxed);
                let len = 1024 + ((x >> 40) as usize % (30 << 10));
                match c.put(&key, payload(&key, n, len)).await {
                    Ok(_) => puts.fetch_add(1, Ordering::Relaxed),
                    Err(e) if e.code() == Some(ProblemCode::Unavailable) => {
                        busy.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) => panic!("PUT failed: {e}\n{}", gw.postmortem()),
                };
            }
        }));
    }
    let (reads, corrupt, missing) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut readers = Vec::new();
    // Two clients, each shared by three reader tasks: one-sided reads of one client are
    // in flight together on its endpoints while memory is recycled under them.
    let clients: Vec<Client> = (0..2)
        .map(|_| {
            Client::builder(&gw.base)
                .fast_path(FastPath::Auto)
                .build()
                .unwrap()
        })
        .collect();
    for r in 0..6u64 {
        let (gw, reads, corrupt, missing) =
            (gw.clone(), reads.clone(), corrupt.clone(), missing.clone());
        let c = clients[r as usize % 2].clone();
        readers.push(tokio::spawn(async move {
            let mut x = r + 100;
            while reads.load(Ordering::Relaxed) < target {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let key = format!("race/{}", (x >> 33) as usize % KEYS);
                // A quarter of the reads are ranges from the start, up to past the end of
                // the longest value (a range past the end is cut to the value).
                let range = (x >> 10) % 4 == 0;
                let got = if range {
                    c.get_range(&key, 0..64 + (x >> 12) % (34 << 10)).await
                } else {
                    c.get(&key).await
                };
                match got {
                    Ok(obj) => {
                        reads.fetch_add(1, Ordering::Relaxed);
                        let ok = if range {
                            valid_start(&key, &obj.bytes)
                        } else {
                            valid(&key, &obj.bytes)
                        };
                        if !ok {
                            corrupt.fetch_add(1, Ordering::Relaxed);
                            eprintln!(
                                "CORRUPT read of {key} via {:?}: {} bytes",
                                obj.path,
                                obj.bytes.len()
                            );
                        }
                    }
                    Err(Error::Problem(p)) if p.code == rasa_client::ProblemCode::NotFound => {
                        missing.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("GET {key} failed: {e}\n{}", gw.postmortem()),
                }
            }
        }));
    }
    let started = Instant::now();
    for r in readers {
        r.await.unwrap();
    }
    let mut stats = rasa_client::Stats::default();
    for c in &clients {
        let s = c.stats();
        stats.fabric_reads += s.fabric_reads;
        stats.http_reads += s.http_reads;
        stats.fabric_endpoints += s.fabric_endpoints;
        for (k, v) in s.fallbacks {
            *stats.fallbacks.entry(k).or_default() += v;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let recycled = rasa_tests::metric(&gw, "rasa_arenas_recycled_total").await;
    let revoked = rasa_tests::metric(&gw, "rasa_keys_revoked_total").await;
    let evicted = rasa_tests::metric(&gw, "rasa_evictions_total").await;
    let total = stats.fabric_reads + stats.http_reads;
    println!(
        "race: {} reads in {:.1?} ({} not found), {:.1}% one-sided on {} endpoints, fallbacks {:?}; {} puts ({} busy); arenas recycled {recycled}, keys revoked {revoked}, evictions {evicted}; corrupt {}",
        reads.load(Ordering::Relaxed),
        started.elapsed(),
        missing.load(Ordering::Relaxed),
        100.0 * stats.fabric_reads as f64 / total.max(1) as f64,
        stats.fabric_endpoints,
        stats.fallbacks,
        puts.load(Ordering::Relaxed),
        busy.load(Ordering::Relaxed),
        corrupt.load(Ordering::Relaxed),
    );
    assert_eq!(
        corrupt.load(Ordering::Relaxed),
        0,
        "a reader got bytes that were never PUT for its key"
    );
    assert!(stats.fabric_reads > 0, "no read went one-sided");
    assert!(
        stats.fabric_endpoints > clients.len() as u64,
        "the readers of a client never read one-sided at the same time"
    );
    assert!(
        recycled >= 3.0 && revoked >= 3.0,
        "the run did not exercise reclamation"
    );
}

#[tokio::test]
async fn an_old_descriptor_reads_the_old_version_until_reclaimed_then_misses_cleanly() {
    let gw = Gateway::start(&[
        "--memory",
        "1MiB",
        "--arena-size",
        "64KiB",
        "--max-object-size",
        "512KiB",
        "--lease",
        "1s",
        "--lease-grace",
        "100ms",
        "--test-hooks",
    ]);
    let c = Client::builder(&gw.base)
        .fast_path(FastPath::Auto)
        .build()
        .unwrap();
    let v1 = payload("doc", 1, 40 << 10);
    let v2 = payload("doc", 2, 40 << 10);
    c.put("doc", v1.clone()).await.unwrap();
    let d1 = c.resolve("doc").await.unwrap();
    assert_eq!(c.get("doc").await.unwrap().bytes, v1);
    // Overwrite, by another client (a client reads its own writes): v2 lands in a new
    // arena; v1's arena has nothing current any more.
    let writer = Client::builder(&gw.base)
        .fast_path(FastPath::Off)
        .build()
        .unwrap();
    writer.put("doc", v2.clone()).await.unwrap();
    // Lazy update: a reader holding the old descriptor still reads the old version...
    let info = c.fabric_info().await.unwrap();
    let addr =
        base64::Engine::decode(&base64::prelude::BASE64_STANDARD, info.address.unwrap()).unwrap();
    let cfg =
        rasa_fastpath::fabric::FabricConfig::new(info.provider.unwrap(), Some("127.0.0.1".into()));
    let mut reader = Reader::connect(cfg, addr).unwrap();
    assert_eq!(
        reader
            .read(&rasa_tests::remote(&d1), Duration::from_secs(5))
            .unwrap(),
        v1
    );
    // ...and so does the SDK, from its cached descriptor, while the lease runs.
    let cached = c.get("doc").await.unwrap();
    assert_eq!(
        cached.bytes, v1,
        "within the lease the cached descriptor's version is served"
    );
    // HTTP readers see the current version at once.
    assert_eq!(
        c.get_by("doc", rasa_client::ReadPath::Http)
            .await
            .unwrap()
            .bytes,
        v2
    );

    // After the lease and grace, the arena is reclaimed: its key revoked.
    let deadline = Instant::now() + Duration::from_secs(20);
    while rasa_tests::metric(&gw, "rasa_keys_revoked_total").await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the old arena was never reclaimed"
        );
        tokio::task::yield_now().await;
    }
    let e = reader.read(&rasa_tests::remote(&d1), Duration::from_secs(5));
    assert!(
        matches!(e, Err(ReadError::KeyRevoked(_))),
        "old descriptor after reclaim gave {e:?}"
    );

    // The SDK recovers transparently from a revoked key under a cached descriptor.
    let fresh = c.get("doc").await.unwrap();
    assert_eq!(fresh.bytes, v2);
    let r = rasa_tests::http()
        .post(gw.url("/v1/_test/revoke/doc"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let after = c.get("doc").await.unwrap();
    assert_eq!(after.bytes, v2, "the current value, whatever the path");
    assert!(
        c.stats().fallbacks.get("key_revoked").copied().unwrap_or(0) >= 1,
        "{:?}",
        c.stats()
    );
}
