//! The disk tier (`--disk`) with real files in a temporary directory and a real S3 origin
//! (s3s-fs, which counts the requests it gets): evicted values come back from disk,
//! restarts (clean or SIGKILL) recover them, a full disk deletes its oldest values.

use std::path::Path;

use rasa_tests::{http, metric, pattern, temp_dir, wait_for_metric, Gateway, S3Server};

/// 8 MiB of memory in 1 MiB arenas, short leases (300 ms, unless `extra` names one), over
/// a disk tier in `dir` of `size`, then `extra`.
pub(crate) fn disk_args(dir: &Path, size: &str, extra: &[&str]) -> Vec<String> {
    let lease = match extra.iter().position(|a| *a == "--lease") {
        Some(i) => extra[i + 1],
        None => "300ms",
    };
    [
        "--memory",
        "8MiB",
        "--arena-size",
        "1MiB",
        "--max-object-size",
        "1MiB",
        // Every PUT's descriptor leases its arena: short leases let memory turn over.
        "--lease",
        lease,
        "--lease-grace",
        "100ms",
        "--disk",
        dir.to_str().unwrap(),
        "--disk-size",
        size,
        "--disk-segment-size",
        "1MiB",
    ]
    .iter()
    .chain(extra.iter().enumerate().filter_map(|(i, a)| {
        let leasing = *a == "--lease" || (i > 0 && extra[i - 1] == "--lease");
        (!leasing).then_some(a)
    }))
    .map(|s| s.to_string())
    .collect()
}

fn start_with_origin(s3: &S3Server, dir: &Path, extra: &[&str]) -> Gateway {
    let mut args = s3.gateway_args("d");
    args.extend(disk_args(dir, "64MiB", extra));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start_with_s3(&args)
}

fn start(dir: &Path, size: &str, extra: &[&str]) -> Gateway {
    let args = disk_args(dir, size, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Gateway::start(&args)
}

const LEN: usize = 200_000;

async fn put(gw: &Gateway, key: &str, body: Vec<u8>) {
    let r = http()
        .put(gw.url(&format!("/v1/objects/{key}")))
        .header("content-type", "application/x-rasa-test")
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "PUT {key}: {}", r.status());
}

/// The status and body of `GET key`.
async fn get(gw: &Gateway, key: &str) -> (u16, bytes::Bytes) {
    let r = http()
        .get(gw.url(&format!("/v1/objects/{key}")))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap())
}

async fn put_many(gw: &Gateway, n: u64) {
    for i in 0..n {
        put(gw, &format!("k{i}"), pattern(LEN, i)).await;
    }
}

async fn all_back_exact(gw: &Gateway, n: u64) {
    for i in 0..n {
        let (status, body) = get(gw, &format!("k{i}")).await;
        assert_eq!(status, 200, "k{i}");
        assert!(body == pattern(LEN, i), "k{i}: other bytes");
    }
}

fn s3_gets(s3: &S3Server, n: u64) -> usize {
    (0..n)
        .map(|i| s3.ops("GetObject", &format!("d/k{i}")))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_evicted_from_memory_come_back_from_disk_without_asking_s3() {
    let s3 = S3Server::start();
    let dir = temp_dir("disk-back");
    let gw = start_with_origin(&s3, &dir, &[]);
    // 60 x 200 KB through the gateway (written through to S3): 12 MB in 8 MiB of memory.
    put_many(&gw, 60).await;
    wait_for_metric(&gw, "rasa_disk_spills_total", 20.0).await;
    // The oldest is on disk only: 16 readers at once share one disk read.
    let reads = metric(&gw, "rasa_disk_reads_total").await;
    let many = (0..16).map(|_| get(&gw, "k0"));
    for (status, body) in futures_util::future::join_all(many).await {
        assert_eq!(status, 200);
        assert!(body == pattern(LEN, 0), "k0: other bytes");
    }
    assert_eq!(
        metric(&gw, "rasa_disk_reads_total").await,
        reads + 1.0,
        "one disk read for 16 readers"
    );
    all_back_exact(&gw, 60).await;
    assert!(metric(&gw, "rasa_disk_hits_total").await >= 20.0);
    assert_eq!(s3_gets(&s3, 60), 0, "no value was fetched from S3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_serves_every_value_with_no_s3_gets() {
    let s3 = S3Server::start();
    let dir = temp_dir("disk-restart");
    let gw = start_with_origin(&s3, &dir, &[]);
    put_many(&gw, 60).await;
    assert!(gw.terminate().success(), "a clean stop");
    // Memory's values were written down at the stop: all 60 are on disk.
    let gw = start_with_origin(&s3, &dir, &[]);
    assert_eq!(metric(&gw, "rasa_disk_recovered_values").await, 60.0);
    all_back_exact(&gw, 60).await;
    assert_eq!(s3_gets(&s3, 60), 0, "no value was fetched from S3");
    // Versions survive too: a HEAD names the version the PUT's descriptor named.
    let (status, _) = get(&gw, "k0").await;
    assert_eq!(status, 200);
}

/// A value that proves itself: `key seq` and a pattern seeded by both.
fn proving(key: &str, seq: u64) -> Vec<u8> {
    let mut v = format!("{key} {seq:08}\n").into_bytes();
    let seed = seq * 1000 + key[1..].parse::<u64>().unwrap();
    v.extend(pattern(LEN, seed));
    v
}

/// Whether `body`, served for `key`, is exactly a value [`proving`] made for it.
fn proves(key: &str, body: &[u8]) -> bool {
    let Some(nl) = body.iter().position(|&b| b == b'\n') else {
        return false;
    };
    let head = String::from_utf8_lossy(&body[..nl]);
    let Some((k, seq)) = head.split_once(' ') else {
        return false;
    };
    k == key && seq.parse().is_ok_and(|seq| proving(key, seq) == body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_heavy_spilling_then_restart_serves_only_exact_values() {
    let dir = temp_dir("disk-kill");
    let log = dir.with_extension("log");
    let args = disk_args(&dir, "256MiB", &["--disk-admit", "second-hit"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = Gateway::start_logged(&args, &[], &log);
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let url = gw.url("/v1/objects/");
            tokio::spawn(async move {
                let c = http();
                for seq in 0.. {
                    let key = format!("k{}", (seq * 4 + w) % 80);
                    let sent = c
                        .put(format!("{url}{key}"))
                        .body(proving(&key, seq))
                        .send()
                        .await;
                    if sent.is_err() {
                        return; // killed
                    }
                }
            })
        })
        .collect();
    wait_for_metric(&gw, "rasa_disk_spills_total", 150.0).await;
    let kill = std::process::Command::new("kill")
        .args(["-KILL", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    for w in writers {
        w.await.unwrap();
    }
    drop(gw);
    // Wherever the kill landed, the newest segment also ends in a record cut short.
    let newest = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 4096)
        .max()
        .expect("segments were written");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    f.set_len(f.metadata().unwrap().len() - 1000).unwrap();
    drop(f);

    let gw = Gateway::start_logged(&args, &[], &log);
    let recovered = metric(&gw, "rasa_disk_recovered_values").await;
    assert!(recovered > 0.0, "values came back");
    assert!(
        metric(&gw, "rasa_disk_torn_bytes").await > 0.0,
        "the torn tail was cut"
    );
    let mut served = 0;
    for i in 0..80 {
        let key = format!("k{i}");
        match get(&gw, &key).await {
            (200, body) => {
                assert!(
                    proves(&key, &body),
                    "{key}: served bytes that were never PUT"
                );
                served += 1;
            }
            (404, _) => {}
            (s, _) => panic!("{key}: {s}"),
        }
    }
    assert_eq!(served as f64, recovered, "every recovered value is served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_deletes_its_oldest_values_and_never_fails_a_put() {
    let dir = temp_dir("disk-full");
    let gw = start(&dir, "4MiB", &[]);
    // 120 x 200 KB = 24 MB through 8 MiB of memory and 4 MiB of disk: every PUT succeeds.
    put_many(&gw, 120).await;
    wait_for_metric(&gw, "rasa_disk_evictions_total", 1.0).await;
    assert!(metric(&gw, "rasa_disk_bytes").await <= (4 << 20) as f64);
    assert_eq!(
        get(&gw, "k0").await.0,
        404,
        "the oldest went with its segment"
    );
    let (status, body) = get(&gw, "k119").await;
    assert_eq!(status, 200);
    assert!(body == pattern(LEN, 119));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_on_the_second_hit_and_descriptors_always_promote() {
    let dir = temp_dir("disk-admit");
    // Leases long enough for a debug build's first one-sided read.
    let gw = start(
        &dir,
        "64MiB",
        &["--disk-admit", "second-hit", "--lease", "3s"],
    );
    put_many(&gw, 60).await;
    wait_for_metric(&gw, "rasa_disk_spills_total", 20.0).await;
    let promoted = |reason: &'static str| {
        let gw = &gw;
        async move {
            metric(
                gw,
                &format!("rasa_disk_promotions_total{{reason=\"{reason}\"}}"),
            )
            .await
        }
    };
    assert_eq!(get(&gw, "k0").await.0, 200);
    assert_eq!(
        promoted("second_hit").await,
        0.0,
        "the first hit is served from disk"
    );
    assert_eq!(get(&gw, "k0").await.0, 200);
    // Admitted once memory has room (at once, or after the spills under way are written).
    wait_for_metric(
        &gw,
        "rasa_disk_promotions_total{reason=\"second_hit\"}",
        1.0,
    )
    .await;
    let hits = metric(&gw, "rasa_disk_hits_total").await;
    assert_eq!(get(&gw, "k0").await.0, 200);
    assert_eq!(
        metric(&gw, "rasa_disk_hits_total").await,
        hits,
        "then served from memory"
    );

    let r = http()
        .get(gw.url("/v1/descriptors/k1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        promoted("descriptor").await,
        1.0,
        "a descriptor admits at once"
    );
    // One-sided readers get exactly the bytes of values that were only on disk.
    let c = rasa_client::Client::builder(&gw.base)
        .fast_path(rasa_client::FastPath::Required)
        .build()
        .unwrap();
    for i in [1, 4, 5] {
        let obj = c.get(&format!("k{i}")).await.unwrap();
        assert_eq!(obj.path, rasa_client::ReadPath::Fabric);
        assert!(obj.bytes == pattern(LEN, i), "k{i}: one-sided bytes differ");
    }

    // Overwritten and deleted keys are gone from disk too.
    put(&gw, "k2", b"new".to_vec()).await;
    assert_eq!(&get(&gw, "k2").await.1[..], b"new");
    let r = http()
        .delete(gw.url("/v1/objects/k3"))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "a key only on disk is deleted: {}",
        r.status()
    );
    assert_eq!(get(&gw, "k3").await.0, 404);
}

#[test]
fn a_directory_that_cannot_hold_the_disk_tier_is_refused_at_start() {
    let file = temp_dir("disk-bad").join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = std::process::Command::new(rasa_tests::gateway_bin())
        .args(["--listen", "127.0.0.1:0", "--disk", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--disk"), "{err}");
    let dir = temp_dir("disk-small");
    let out = std::process::Command::new(rasa_tests::gateway_bin())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--disk",
            dir.to_str().unwrap(),
            "--disk-size",
            "1PiB",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--disk-size") && err.contains("free"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_spills_to_a_disk_tier_of_its_own_within_its_disk_quota() {
    let dir = temp_dir("disk-ns");
    let ns_file = dir.with_extension("namespaces");
    // web: 2 MiB of memory and 3 MiB of disk; cold: no disk quota (evictions are dropped).
    std::fs::write(&ns_file, "web 2MiB 3MiB\ncold 2MiB\n").unwrap();
    let gw = start(&dir, "16MiB", &["--namespaces", ns_file.to_str().unwrap()]);
    let url = |ns: &str, i: u64| gw.url(&format!("/v1/ns/{ns}/objects/k{i}"));
    for ns in ["web", "cold"] {
        for i in 0..30 {
            let r = http()
                .put(url(ns, i))
                .body(pattern(LEN, i))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "PUT {ns}/k{i}: {}", r.status());
        }
    }
    let bytes = |ns: &'static str| {
        let gw = &gw;
        async move {
            metric(
                gw,
                &format!("rasa_namespace_disk_bytes{{namespace=\"{ns}\"}}"),
            )
            .await
        }
    };
    let on_disk = bytes("web").await;
    assert!(
        on_disk > 0.0 && on_disk <= (3 << 20) as f64,
        "web's disk tier: {on_disk}"
    );
    assert!(
        dir.join("ns/web").is_dir(),
        "beside the default namespace's"
    );
    assert!(!dir.join("ns/cold").exists(), "no disk quota, no disk tier");
    // The newest values of web are all back (memory or disk); cold lost its oldest.
    for i in 20..30 {
        let r = http().get(url("web", i)).send().await.unwrap();
        assert_eq!(r.status(), 200, "web/k{i}");
        assert!(r.bytes().await.unwrap() == pattern(LEN, i));
    }
    let r = http().get(url("cold", 0)).send().await.unwrap();
    assert_eq!(r.status(), 404, "cold has no disk tier");
    let r = http().get(gw.url("/v1/objects/k0")).send().await.unwrap();
    assert_eq!(r.status(), 404, "namespaces do not share a disk tier");
}
