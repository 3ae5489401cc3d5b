//! The fast path across processes: the real gateway binary serves registered arenas, this
//! test process reads them one-sided with the real libfabric API, on every software
//! provider this machine has (`tcp;ofi_rxm`, `sockets`, `shm`).

use std::time::{Duration, Instant};

use base64::prelude::*;
use rasa_fastpath::fabric::FabricConfig;
use rasa_fastpath::reader::{ReadError, Reader, RemoteFrame};
use rasa_openapi::{Descriptor, FabricInfo};
use rasa_tests::{pattern, sha256_hex, Gateway};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(10);

async fn descriptor(gw: &Gateway, key: &str) -> Descriptor {
    gw.get_json(&format!("/v1/descriptors/{key}")).await
}

async fn suite(provider: &str) {
    let gw = Gateway::start(&[
        "--fast-path",
        "on",
        "--fabric-provider",
        provider,
        "--test-hooks",
    ]);
    let c = rasa_tests::http();
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    assert!(info.enabled);
    assert_eq!(info.provider.as_deref(), Some(provider));
    let address = BASE64_STANDARD.decode(info.address.unwrap()).unwrap();
    let cfg = FabricConfig::new(provider, Some("127.0.0.1".into()));
    let mut reader = Reader::connect(cfg, address).unwrap();

    // Values PUT over HTTP read back one-sided, byte for byte.
    for (i, len) in [0usize, 1, 4 << 10, 1 << 20, 64 << 20]
        .into_iter()
        .enumerate()
    {
        let body = pattern(len, 7 + i as u64);
        let key = format!("fp/{len}");
        let r = c
            .put(gw.url(&format!("/v1/objects/{key}?lease=true")))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let d: Descriptor = r.json().await.unwrap();
        let got = reader
            .read(&rasa_tests::remote(&d), TIMEOUT)
            .unwrap_or_else(|e| panic!("{provider} {len}: {e}"));
        assert_eq!(got.len(), len);
        assert_eq!(
            sha256_hex(&got),
            sha256_hex(&body),
            "{provider}: {len} bytes differ"
        );
    }

    // A revoked key: a prompt, typed miss; a fresh descriptor then reads after the rebuild.
    let stale = descriptor(&gw, "fp/4096").await;
    let r = c
        .post(gw.url("/v1/_test/revoke/fp/4096"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let start = Instant::now();
    let e = reader.read(&rasa_tests::remote(&stale), TIMEOUT);
    // shm's fast path never looks at the key: the unchanged bytes may still be read
    // (frame validation is the fence there, once the memory is reused).
    let checks_keys = rasa_fastpath::fabric::plan::checks_remote_keys(provider);
    let unchecked = |e: &Result<Vec<u8>, ReadError>| {
        !checks_keys && e.as_ref().is_ok_and(|b| sha256_hex(b) == stale.sha256)
    };
    assert!(
        matches!(e, Err(ReadError::KeyRevoked(_))) || unchecked(&e),
        "{provider}: revoked key gave {e:?}"
    );
    assert!(
        start.elapsed() < TIMEOUT / 2,
        "{provider}: revoked read took {:?}",
        start.elapsed()
    );
    let fresh = descriptor(&gw, "fp/4096").await;
    assert_ne!(fresh.rkey, stale.rkey, "rotation hands out a new key");
    let rebuilds = reader.rebuilds();
    let got = reader.read(&rasa_tests::remote(&fresh), TIMEOUT).unwrap();
    assert_eq!(sha256_hex(&got), fresh.sha256);
    // Only where the provider drops the connection on a revoked key (tcp;ofi_rxm) is the
    // endpoint rebuilt; sockets (and efa) keep it.
    let survives = rasa_fastpath::fabric::plan::survives_revoked_key(provider);
    assert_eq!(
        reader.rebuilds(),
        rebuilds + u64::from(!survives),
        "{provider}: endpoint rebuilds after a revoked key"
    );

    // Past the end of the region: a clean error, and the reader recovers.
    let past = RemoteFrame {
        addr: fresh.addr.unwrap() + (1 << 30),
        ..rasa_tests::remote(&fresh)
    };
    let e = reader.read(&past, TIMEOUT);
    // shm checks no bounds: the read fails (unmapped memory) or fails validation.
    assert!(
        matches!(e, Err(ReadError::KeyRevoked(_))) || (!checks_keys && e.is_err()),
        "{provider}: read past the region gave {e:?}"
    );
    assert_eq!(
        sha256_hex(&reader.read(&rasa_tests::remote(&fresh), TIMEOUT).unwrap()),
        fresh.sha256
    );

    // A frame whose bytes were corrupted in arena memory is rejected, never returned.
    for key in ["fp/1048576", "fp/0"] {
        let bad: Descriptor =
            rasa_tests::json_of(c.post(gw.url(&format!("/v1/_test/corrupt/{key}")))).await;
        let e = reader.read(&rasa_tests::remote(&bad), TIMEOUT);
        assert!(
            matches!(e, Err(ReadError::Frame(_))),
            "{provider} {key}: corrupt frame gave {e:?}"
        );
    }
    // The healthy copy is still served.
    let d = descriptor(&gw, "fp/1048576").await;
    assert_eq!(
        sha256_hex(&reader.read(&rasa_tests::remote(&d), TIMEOUT).unwrap()),
        d.sha256
    );
}

#[tokio::test]
async fn one_sided_reads_from_another_process_on_tcp_rxm() {
    suite("tcp;ofi_rxm").await;
}

#[tokio::test]
async fn one_sided_reads_from_another_process_on_sockets() {
    suite("sockets").await;
}

#[tokio::test]
async fn one_sided_reads_from_another_process_on_shm() {
    suite("shm").await;
}

/// The repro: the CLI reads over shm one-sided (`fi_enable` failed with EBUSY
/// when the gateway and the reader both named their shared-memory region after
/// `127.0.0.1`), within its timeout.
#[test]
fn the_cli_reads_over_shm() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "shm"]);
    let dir = rasa_tests::temp_dir("cli-shm");
    let (input, output) = (dir.join("in"), dir.join("out"));
    let body = pattern(1 << 20, 3);
    std::fs::write(&input, &body).unwrap();
    let put = rasa(&gw, &["put", "shm/v", input.to_str().unwrap()]);
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let started = Instant::now();
    let get = rasa(
        &gw,
        &[
            "--timeout",
            "5s",
            "get",
            "shm/v",
            "--fast-path",
            "required",
            "--json",
            "-o",
            output.to_str().unwrap(),
        ],
    );
    assert!(
        get.status.success(),
        "{}",
        String::from_utf8_lossy(&get.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let report: Value = serde_json::from_slice(&get.stdout).unwrap();
    assert_eq!(report["path"], "fabric");
    assert!(std::fs::read(&output).unwrap() == body);
}

use rasa_tests::rasa_cli as rasa;

#[test]
fn cli_reads_one_sided_and_falls_back_to_http() {
    let gw = Gateway::start(&[]);
    let dir = std::env::temp_dir().join(format!("rasa-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("value.bin");
    let body = pattern(3 << 20, 42);
    std::fs::write(&file, &body).unwrap();
    let out = rasa(&gw, &["put", "cli/value.bin", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Descriptor = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d.sha256, sha256_hex(&body));

    let copy = dir.join("copy.bin");
    let out = rasa(
        &gw,
        &[
            "get",
            "cli/value.bin",
            "--fast-path",
            "required",
            "--json",
            "-o",
            copy.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["path"], "fabric");
    assert_eq!(j["sha256"], d.sha256.as_str());
    assert_eq!(j["length"], body.len());
    assert_eq!(j["version"], d.version.as_str());
    assert_eq!(std::fs::read(&copy).unwrap(), body);

    let out = rasa(
        &gw,
        &["get", "cli/value.bin", "--fast-path", "off", "--json"],
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (j["path"].as_str(), j["sha256"].as_str()),
        (Some("http"), Some(d.sha256.as_str()))
    );

    // Without output or --json, the value goes to standard output.
    let out = rasa(&gw, &["get", "cli/value.bin"]);
    assert_eq!(sha256_hex(&out.stdout), d.sha256);

    // stat, ls and rm, human and --json.
    let out = rasa(&gw, &["stat", "cli/value.bin", "--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (j["length"].as_u64(), j["version"].as_str()),
        (Some(body.len() as u64), Some(d.version.as_str()))
    );
    let out = rasa(&gw, &["stat", "cli/value.bin"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&d.version));
    let out = rasa(&gw, &["ls", "cli/", "--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j.as_array().map(Vec::len), Some(1));
    assert_eq!(j[0]["key"], "cli/value.bin");
    let out = rasa(&gw, &["rm", "cli/value.bin", "--json"]);
    assert!(out.status.success());
    let out = rasa(&gw, &["ls", "cli/"]);
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let out = rasa(&gw, &["get", "cli/missing", "--json"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not_found"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn required_fast_path_fails_clearly_against_an_http_only_gateway() {
    let gw = Gateway::start(&["--fast-path", "off"]);
    let r = rasa_tests::raw_request(
        gw.addr,
        b"PUT /v1/objects/k HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    );
    assert_eq!(r.status, 201);
    let out = rasa(&gw, &["get", "k", "--fast-path", "required", "--json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fast path"), "{err}");
    let out = rasa(&gw, &["get", "k", "--fast-path", "auto", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["path"], "http");
}

#[tokio::test]
async fn clients_that_come_and_go_do_not_leak_gateway_resources() {
    let gw = Gateway::start(&["--fast-path", "on"]);
    let c = rasa_tests::http();
    let d: Descriptor = rasa_tests::json_of(
        c.put(gw.url("/v1/objects/churn?lease=true"))
            .body(vec![5u8; 4096]),
    )
    .await;
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    let address = BASE64_STANDARD.decode(info.address.unwrap()).unwrap();
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", gw.pid()))
            .unwrap()
            .count()
    };
    let cfg = FabricConfig::new("tcp;ofi_rxm", Some("127.0.0.1".into()));
    let connect_and_read = || {
        let mut r = Reader::connect(cfg.clone(), address.clone()).unwrap();
        assert_eq!(
            r.read(&rasa_tests::remote(&d), TIMEOUT).unwrap().len(),
            4096
        );
    };
    for _ in 0..5 {
        connect_and_read();
    }
    let before = fds();
    for _ in 0..100 {
        connect_and_read();
    }
    let after = fds();
    println!("gateway descriptors: {before} before, {after} after 100 client endpoints");
    assert!(
        after <= before + 10,
        "the gateway leaks per client: {before} -> {after}"
    );
}

/// `--key-lifetime` gives live arenas fresh keys: new descriptors carry the new key, a
/// descriptor with the old key keeps reading while its lease lasts, and once that lease
/// (plus grace) has ended the old key is revoked — a clean miss, never other bytes.
#[tokio::test]
async fn keys_of_live_arenas_are_refreshed_and_old_ones_revoked() {
    let gw = Gateway::start(&[
        "--fast-path",
        "on",
        "--key-lifetime",
        "300ms",
        "--lease",
        "3s",
        "--lease-grace",
        "100ms",
    ]);
    let c = rasa_tests::http();
    let body = pattern(100_000, 42);
    let r = c
        .put(gw.url("/v1/objects/kl/v"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    let address = BASE64_STANDARD.decode(info.address.unwrap()).unwrap();
    let cfg = FabricConfig::new(info.provider.unwrap(), Some("127.0.0.1".into()));
    let mut reader = Reader::connect(cfg, address).unwrap();

    let old = descriptor(&gw, "kl/v").await;
    let refreshed = rasa_tests::metric(&gw, "rasa_keys_refreshed_total").await;
    rasa_tests::wait_for_metric(&gw, "rasa_keys_refreshed_total", refreshed + 1.0).await;
    let new = descriptor(&gw, "kl/v").await;
    assert_ne!(new.rkey, old.rkey, "a refreshed arena hands out a new key");
    assert_eq!(new.addr, old.addr, "same bytes, same place");
    for d in [&new, &old] {
        let got = reader.read(&rasa_tests::remote(d), TIMEOUT).unwrap();
        assert_eq!(
            sha256_hex(&got),
            sha256_hex(&body),
            "while the old lease lasts"
        );
    }

    // Once the old key's leases have ended, it is revoked. Keys retire oldest first; each
    // retirement is checked, and until the old key's turn it still reads the same bytes.
    let mut retired = 0.0;
    let e = loop {
        retired += 1.0;
        rasa_tests::wait_for_metric(&gw, "rasa_keys_retired_total", retired).await;
        match reader.read(&rasa_tests::remote(&old), TIMEOUT) {
            Ok(got) => assert_eq!(sha256_hex(&got), sha256_hex(&body)),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(e, ReadError::KeyRevoked(_)),
        "a retired key gave {e:?}"
    );
    let newest = descriptor(&gw, "kl/v").await;
    let got = reader.read(&rasa_tests::remote(&newest), TIMEOUT).unwrap();
    assert_eq!(sha256_hex(&got), sha256_hex(&body));
}
