//! One-sided writes (issue 63, item 1): a batch written straight into gateway memory over
//! the fabric lands byte-exact on shm and tcp; the upload key writes only, and only until
//! the commit; bytes in flight are no key's to read and no descriptor's; a commit with a
//! wrong checksum stores nothing and says why; an upload never committed is reclaimed at
//! its lease's end and its late commit refused; `put_file` writes one-sided too.

use std::time::{Duration, Instant};

use base64::prelude::*;
use bytes::Bytes;
use rasa_client::{Client, FastPath, ReadPath};
use rasa_fastpath::fabric::FabricConfig;
use rasa_fastpath::frame::{key_hash, FrameHasher, FrameIdentity};
use rasa_fastpath::reader::{ReadError, Reader, RemoteFrame, RemoteWrite};
use rasa_openapi::{
    FabricInfo, Problem, ProblemCode, PutBatchManifest, PutBatchResponse, UploadCommit,
    UploadRegion,
};
use rasa_tests::{http, metric, pattern, requests_to, sha256_hex, Gateway};

const TCP: &str = "tcp;ofi_rxm";
const TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_sided_batch_lands_byte_exact_on_shm_and_tcp() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm,shm"]);
    for provider in ["shm", TCP] {
        let client = Client::builder(&gw.base)
            .fast_path(FastPath::Required)
            .fabric_provider(provider)
            .build()
            .unwrap();
        let keys: Vec<String> = (0..33).map(|i| format!("{provider}/v{i}")).collect();
        let items: Vec<(&str, Bytes)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let len = if i == 32 { (3 << 20) + 5 } else { 64 << 10 };
                (k.as_str(), Bytes::from(pattern(len, i as u64 + 7)))
            })
            .collect();
        let before = requests_to(&gw, "/v1/batch/put").await;
        let results = client.many().put(&items).await.unwrap();
        assert!(results.iter().all(Result::is_ok), "{provider}: {results:?}");
        assert_eq!(
            requests_to(&gw, "/v1/batch/put").await - before,
            0.0,
            "{provider}: no value went as an HTTP body"
        );
        let stats = client.stats();
        assert_eq!(stats.fabric_writes, 33, "{provider}: {stats:?}");
        assert_eq!(stats.fabric_provider.as_deref(), Some(provider));
        for (key, value) in &items {
            // Over HTTP, with its SHA-256 entity tag (computed when first asked for).
            let r = http()
                .get(gw.url(&format!("/v1/objects/{key}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{provider}: {key}");
            let etag = r.headers()["etag"].to_str().unwrap().to_owned();
            assert_eq!(
                etag,
                format!("\"{}\"", sha256_hex(value)),
                "{provider}: {key}"
            );
            assert_eq!(r.bytes().await.unwrap(), *value, "{provider}: {key}");
            // And one-sided.
            let got = client.get(key).await.unwrap();
            assert_eq!(got.path, ReadPath::Fabric);
            assert_eq!(got.bytes, *value, "{provider}: {key}");
        }
    }
    assert_eq!(
        metric(&gw, "rasa_one_sided_values_total{outcome=\"sealed\"}").await,
        66.0
    );
}

/// A `put_many` whose values are cut one a batch (here two, each over half of
/// `MAX_BATCH_BYTES`; four of 16 MiB are cut so too) is still a batch: no value's SHA-256
/// is computed at its commit (each is left to its first reader), where a lone `put`
/// answers with its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_cut_one_value_a_batch_leaves_the_digests_to_their_readers() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "shm"]);
    let client = Client::builder(&gw.base)
        .fast_path(FastPath::Required)
        .build()
        .unwrap();
    let big = (rasa_client::MAX_BATCH_BYTES / 2 + 1) as usize;
    let values: Vec<Bytes> = (0..2).map(|i| Bytes::from(pattern(big, i))).collect();
    let items: Vec<(&str, Bytes)> = ["cut/a", "cut/b"].into_iter().zip(values).collect();
    let results = client.many().put(&items).await.unwrap();
    for ((key, value), r) in items.iter().zip(results) {
        let d = r.unwrap();
        assert_eq!(d.sha256, "", "{key}: its digest was computed at the commit");
        let got = client.get(key).await.unwrap();
        assert_eq!(got.path, ReadPath::Fabric);
        assert_eq!(got.bytes, *value, "{key}");
    }
    assert_eq!(client.stats().fabric_writes, 2);
    let lone = Bytes::from(pattern(64 << 10, 9));
    let d = client.put("cut/lone", lone.clone()).await.unwrap();
    assert_eq!(d.sha256, sha256_hex(&lone), "a lone put names its digest");
}

/// The gateway's endpoint `provider` from `/v1/fabric`: its index and address.
fn endpoint_of(info: &FabricInfo, provider: &str) -> (usize, Vec<u8>) {
    let (i, e) = info
        .endpoints
        .iter()
        .enumerate()
        .find(|(_, e)| e.provider == provider)
        .expect("the gateway serves the provider");
    (i, BASE64_STANDARD.decode(&e.address).unwrap())
}

async fn reserve(gw: &Gateway, values: &[(&str, u64)]) -> UploadRegion {
    let r = http()
        .post(gw.url("/v1/batch/reserve"))
        .json(&PutBatchManifest::of(values.iter().copied()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    r.json().await.unwrap()
}

async fn commit(gw: &Gateway, region: &UploadRegion, checksums: Vec<String>) -> reqwest::Response {
    commit_with(gw, region, checksums, false).await
}

async fn commit_with(
    gw: &Gateway,
    region: &UploadRegion,
    checksums: Vec<String>,
    sha256: bool,
) -> reqwest::Response {
    http()
        .post(gw.url(&format!("/v1/batch/commit/{}", region.upload)))
        .json(&UploadCommit { checksums, sha256 })
        .send()
        .await
        .unwrap()
}

/// The frame checksum of `bytes` as the value of `key` written under `region`'s slot `i`.
fn checksum(region: &UploadRegion, i: usize, key: &str, bytes: &[u8]) -> String {
    let mut h = FrameHasher::new();
    h.update(bytes);
    let id = FrameIdentity {
        key_hash: key_hash(key),
        version: u64::from_str_radix(&region.items[i].version, 16).unwrap(),
        payload_len: bytes.len() as u64,
    };
    format!("{:016x}", h.seal(id, 0).1)
}

/// A raw libfabric client over tcp (which checks keys), as an attacker or a buggy SDK.
struct Raw {
    reader: Reader,
}

impl Raw {
    fn connect(address: Vec<u8>) -> Raw {
        let cfg = FabricConfig::new(TCP, Some("127.0.0.1".into()));
        Raw {
            reader: Reader::connect(cfg, address).expect("a fabric connection"),
        }
    }

    fn write(&mut self, addr: u64, rkey: u64, bytes: &[u8]) -> Result<(), ReadError> {
        self.reader
            .write_many(&[RemoteWrite { addr, rkey, bytes }], &|_, _| {}, TIMEOUT)
    }

    fn read(&mut self, addr: u64, rkey: u64, len: u64) -> Result<Vec<u8>, ReadError> {
        let f = RemoteFrame {
            addr,
            rkey,
            identity: FrameIdentity {
                key_hash: 0,
                version: 0,
                payload_len: len,
            },
            checksum: 0,
            blocks: None,
        };
        self.reader.read(&f, TIMEOUT)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upload_key_writes_only_until_the_commit_and_bytes_in_flight_are_no_ones_to_read() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", TCP]);
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    let (at, address) = endpoint_of(&info, TCP);
    let value = pattern(200_000, 3);
    let region = reserve(&gw, &[("flight/a", value.len() as u64)]).await;
    let start = &region.endpoints[at];
    let addr = start.addr + region.items[0].offset;
    let (sent, rkey) = (value.clone(), start.rkey);
    let mut raw = tokio::task::spawn_blocking(move || {
        let mut raw = Raw::connect(address);
        raw.write(addr, rkey, &sent).expect("the upload key writes");
        // The upload key never reads, not even what its holder wrote.
        let read = raw.read(addr, rkey, 64);
        assert!(matches!(read, Err(ReadError::KeyRevoked(_))), "{read:?}");
        raw
    })
    .await
    .unwrap();
    // Nothing in flight is anyone's to read: no version, no descriptor.
    assert_eq!(status_of(&gw, "/v1/descriptors/flight/a").await, 404);
    let sum = checksum(&region, 0, "flight/a", &value);
    let r = commit_with(&gw, &region, vec![sum], true).await;
    assert_eq!(r.status(), 200);
    let results = r.json::<PutBatchResponse>().await.unwrap().results;
    let d = results[0].descriptor.as_ref().expect("stored");
    assert_eq!(d.length, value.len() as u64);
    assert_eq!(d.sha256, sha256_hex(&value), "asked for with the commit");
    // Committed: the key writes no more, and the value is what was written.
    let late = pattern(64, 9);
    let wrote = tokio::task::spawn_blocking(move || raw.write(addr, rkey, &late))
        .await
        .unwrap();
    assert!(matches!(wrote, Err(ReadError::KeyRevoked(_))), "{wrote:?}");
    let got = http()
        .get(gw.url("/v1/objects/flight/a"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.bytes().await.unwrap(), value);
    // A second commit of the same upload finds none.
    let again = commit(&gw, &region, vec![checksum(&region, 0, "flight/a", &value)]).await;
    assert_eq!(again.status(), 404);
    let p: Problem = again.json().await.unwrap();
    assert_eq!(p.code, ProblemCode::NoSuchUpload, "{p:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_with_a_wrong_checksum_stores_nothing_and_says_why() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", TCP]);
    let info: FabricInfo = gw.get_json("/v1/fabric").await;
    let (at, address) = endpoint_of(&info, TCP);
    let (good, bad) = (pattern(70_000, 1), pattern(70_000, 2));
    let region = reserve(&gw, &[("sum/good", 70_000), ("sum/bad", 70_000)]).await;
    let start = &region.endpoints[at];
    let (a, b, rkey) = (
        start.addr + region.items[0].offset,
        start.addr + region.items[1].offset,
        start.rkey,
    );
    let (g, x) = (good.clone(), bad.clone());
    tokio::task::spawn_blocking(move || {
        let mut raw = Raw::connect(address);
        raw.write(a, rkey, &g).unwrap();
        raw.write(b, rkey, &x).unwrap();
    })
    .await
    .unwrap();
    // The client says it wrote other bytes than those that landed for the second value.
    let other = pattern(70_000, 3);
    let sums = vec![
        checksum(&region, 0, "sum/good", &good),
        checksum(&region, 1, "sum/bad", &other),
    ];
    let r = commit(&gw, &region, sums).await;
    assert_eq!(r.status(), 200);
    let results = r.json::<PutBatchResponse>().await.unwrap().results;
    assert!(results[0].descriptor.is_some(), "{results:?}");
    let p = results[1].error.as_ref().expect("refused");
    assert_eq!(p.code, ProblemCode::DigestMismatch, "{p:?}");
    assert!(
        p.detail.contains("sum/bad") && p.detail.contains("nothing was stored"),
        "{p:?}"
    );
    let status = |k: &'static str| {
        let gw = &gw;
        async move {
            let r = http().get(gw.url(&format!("/v1/objects/{k}")));
            r.send().await.unwrap().status().as_u16()
        }
    };
    assert_eq!(status("sum/bad").await, 404, "nothing stored for it");
    assert_eq!(status("sum/good").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_upload_is_reclaimed_at_its_leases_end_and_its_late_commit_refused() {
    let gw = Gateway::start(&[
        "--fast-path",
        "on",
        "--fabric-provider",
        TCP,
        "--lease",
        "1s",
    ]);
    let region = reserve(&gw, &[("gone/a", 100_000)]).await;
    assert!(region.lease_ms <= 1000, "{region:?}");
    let expired = "rasa_one_sided_uploads_total{outcome=\"expired\"}";
    let until = Instant::now() + Duration::from_secs(20);
    while metric(&gw, expired).await < 1.0 {
        assert!(
            Instant::now() < until,
            "the upload was not reclaimed within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let late = commit(
        &gw,
        &region,
        vec![checksum(&region, 0, "gone/a", &[0; 100_000])],
    )
    .await;
    assert_eq!(late.status(), 404);
    let p: Problem = late.json().await.unwrap();
    assert_eq!(p.code, ProblemCode::NoSuchUpload);
    assert!(p.detail.contains("reclaimed"), "{p:?}");
    assert_eq!(status_of(&gw, "/v1/objects/gone/a").await, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_value_is_named_in_its_slot_and_a_wrong_count_commits_nothing() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", TCP]);
    let region = reserve(&gw, &[("slot/ok", 10), ("slot/../bad", 5)]).await;
    assert!(region.items[0].error.is_none() && !region.items[0].version.is_empty());
    let p = region.items[1].error.as_ref().expect("refused in its slot");
    assert_eq!(p.code, ProblemCode::InvalidKey, "{p:?}");
    // One checksum per value with room: two is a conflict, and nothing is stored.
    let r = commit(&gw, &region, vec!["0".repeat(16), "0".repeat(16)]).await;
    assert_eq!(r.status(), 409);
    assert_eq!(status_of(&gw, "/v1/objects/slot/ok").await, 404);
    // Nothing to write: a region of no values, committed as nothing.
    let empty = reserve(&gw, &[]).await;
    assert_eq!(
        (empty.upload.as_str(), empty.items.len()),
        ("0000000000000000", 0)
    );
    let r = commit(&gw, &empty, vec![]).await;
    assert_eq!(r.status(), 200);
    assert!(r
        .json::<PutBatchResponse>()
        .await
        .unwrap()
        .results
        .is_empty());
}

/// `put_file` with the fast path writes the file one-sided, a piece at a time (20 MiB in
/// three), byte-exact on shm and tcp, with no PUT body, progress reported up to its
/// length, and the answer's SHA-256 the file's; a small file goes as a PUT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_file_writes_the_file_one_sided_a_piece_at_a_time() {
    let gw = Gateway::start(&["--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm,shm"]);
    let dir = rasa_tests::temp_dir("one-sided-file");
    let value = pattern((20 << 20) + 3, 63);
    let path = dir.join("weights.bin");
    std::fs::write(&path, &value).unwrap();
    for provider in ["shm", TCP] {
        let client = Client::builder(&gw.base)
            .fast_path(FastPath::Required)
            .fabric_provider(provider)
            .build()
            .unwrap();
        let key = format!("{provider}/weights");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = std::sync::Arc::clone(&seen);
        let before = requests_to(&gw, "/v1/objects/{*key}").await;
        let d = rasa_client::FileTransfer::new(&client)
            .on_progress(move |n| log.lock().unwrap().push(n))
            .put_file(&key, &path, Some("application/x-weights"))
            .await
            .unwrap();
        assert_eq!(d.sha256, sha256_hex(&value), "{provider}");
        assert_eq!(d.content_type, "application/x-weights");
        assert_eq!(
            requests_to(&gw, "/v1/objects/{*key}").await,
            before,
            "{provider}: no PUT"
        );
        assert_eq!(client.stats().fabric_writes, 1, "{provider}");
        let seen = seen.lock().unwrap().clone();
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{provider}: {seen:?}");
        assert_eq!(seen.last(), Some(&(value.len() as u64)), "{provider}");
        let r = http()
            .get(gw.url(&format!("/v1/objects/{key}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.bytes().await.unwrap(), value, "{provider}: over HTTP");
        let counted = requests_to(&gw, "/v1/objects/{*key}").await;
        assert_eq!(
            counted,
            before + 1.0,
            "{provider}: the route counts requests"
        );
    }
    let small = dir.join("small.bin");
    std::fs::write(&small, pattern(1000, 1)).unwrap();
    let client = Client::builder(&gw.base).build().unwrap();
    client.put_file("small", &small, None).await.unwrap();
    let st = client.stats();
    assert_eq!((st.fabric_writes, st.http_writes), (0, 1), "{st:?}");
}

/// The status a GET of `path` answers.
async fn status_of(gw: &Gateway, path: &str) -> reqwest::StatusCode {
    http().get(gw.url(path)).send().await.unwrap().status()
}
