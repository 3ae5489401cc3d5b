//! Replicas (`--cluster-replicas PREFIX=N`): a key under a replicated prefix is served by
//! each of the first N members of its placement from that member's own memory (HTTP and
//! one-sided), the SDK spreads its readers over them, a write is acknowledged only once no
//! replica can serve what it replaced, and a reader whose replica is killed — between
//! reads, or in the middle of a fleet's batch load — goes on within its timeout.

use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath};
use rasa_openapi::cluster::placement;
use rasa_tests::etcd::Etcd;
use rasa_tests::{metric, pattern, Gateway};

use super::{all_see, kill, sdk};

const KEY: &str = "ckpt/shard-0";

/// A reader's call timeout.
const CALL: Duration = Duration::from_secs(3);

/// A started fleet where every member sees the others; the members in `KEY`'s placement
/// order (owner first), as indices into the fleet.
async fn replica_cluster(tag: &str, extra: &[&str]) -> (Etcd, Vec<Gateway>, Vec<usize>) {
    let etcd = Etcd::start();
    let mut flags = vec!["--cluster-replicas", "ckpt/=3"];
    flags.extend(extra);
    let gws = super::secret_fleet(&etcd, tag, &flags);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let view = all_see(&refs, 3).await;
    let order = placement(KEY, &view.members)
        .into_iter()
        .map(|m| gws.iter().position(|g| g.base == m.url).expect("a member"))
        .collect();
    (etcd, gws, order)
}

/// GET `KEY` at `gw`: status, whether a replica served it, its version, body.
async fn get(gw: &Gateway) -> (u16, bool, String, Vec<u8>) {
    get_at(gw, &format!("/v1/objects/{KEY}")).await
}

/// GET `path` at `gw`: status, whether a replica served it, its version, body.
pub(super) async fn get_at(gw: &Gateway, path: &str) -> (u16, bool, String, Vec<u8>) {
    let r = rasa_tests::http().get(gw.url(path)).send().await.unwrap();
    assert!(
        r.headers().get("rasa-near-lease").is_none(),
        "the owner's lease is not the client's"
    );
    let replica = r.headers().get("rasa-replica").is_some();
    let version = r
        .headers()
        .get("rasa-version")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let status = r.status().as_u16();
    (status, replica, version, r.bytes().await.unwrap().to_vec())
}

/// A client of namespace `ns` through the seed `seed`, the fast path on where it can be.
pub(super) fn ns_client(seed: &str, ns: &str, timeout: Duration) -> Client {
    Client::builder(seed)
        .namespace(ns)
        .fast_path(FastPath::Auto)
        .timeout(timeout)
        .build()
        .expect("a client")
}

/// The descriptor at `path` asked of `gw` (the fleet's member `at`) names that member's
/// own memory, and a one-sided read of it gets `version`'s `body`.
pub(super) async fn one_sided_at(
    gw: &Gateway,
    at: usize,
    path: &str,
    (version, body): (&str, &[u8]),
) {
    let d: rasa_openapi::Descriptor = rasa_tests::http()
        .get(gw.url(path))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(d.node_id.as_deref(), Some(format!("g{}", at + 1).as_str()));
    assert_eq!(d.version, version);
    assert!(d.addr.is_some() && d.rkey.is_some(), "{d:?}");
    let read = sdk(&gw.base)
        .versions()
        .read_descriptor(&d, Instant::now())
        .await
        .unwrap_or_else(|e| panic!("one-sided read of {path} at g{}: {e}", at + 1));
    assert_eq!(read.path, rasa_client::ReadPath::Fabric);
    assert!(read.bytes.as_ref() == body);
}

async fn put(gw: &Gateway, body: &[u8]) -> String {
    put_at(gw, &format!("/v1/objects/{KEY}"), body).await
}

/// PUT `body` at `path` through `gw` (answered `201`): the version.
pub(super) async fn put_at(gw: &Gateway, path: &str, body: &[u8]) -> String {
    let r = rasa_tests::http()
        .put(gw.url(path))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let (status, version) = (r.status(), r.headers().get("rasa-version").cloned());
    assert_eq!(status, 201, "put {path}: {}", r.text().await.unwrap());
    version.unwrap().to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_key_is_served_from_each_holders_own_memory() {
    let (_etcd, gws, order) = replica_cluster("replicas", &[]).await;
    let body = pattern(1 << 20, 7);
    let version = put(&gws[order[1]], &body).await;
    for (rank, &at) in order.iter().enumerate() {
        let (status, replica, v, got) = get(&gws[at]).await;
        assert_eq!(status, 200);
        assert!(got == body, "wrong bytes at holder {rank}");
        assert_eq!(v, version, "every holder serves the owner's version id");
        assert_eq!(
            replica,
            rank > 0,
            "holder {rank} (0: the owner) served by a replica"
        );
        let path = format!("/v1/descriptors/{KEY}");
        one_sided_at(&gws[at], at, &path, (&version, &body)).await;
    }
    for &at in &order[1..] {
        assert!(metric(&gws[at], "rasa_cluster_replica_reads_total").await >= 2.0);
        assert!(
            metric(
                &gws[at],
                "rasa_cluster_replica_copies_total{result=\"copied\"}"
            )
            .await
                >= 1.0
        );
    }
    // A key outside the prefix has no replicas: the owner serves it.
    let other = "plain/one";
    let r = rasa_tests::http()
        .put(gws[0].url(&format!("/v1/objects/{other}")))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    for gw in &gws {
        let r = rasa_tests::http()
            .get(gw.url(&format!("/v1/objects/{other}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("rasa-replica").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_read_nowhere_older_once_acknowledged() {
    let (_etcd, gws, order) = replica_cluster("replica-write", &[]).await;
    put(&gws[order[0]], b"v0").await;
    for &at in &order {
        get(&gws[at]).await; // every replica holds v0
    }
    for round in 1..=40u64 {
        let body = format!("v{round}");
        let via = &gws[(round as usize) % 3];
        let version = put(via, body.as_bytes()).await;
        for (rank, &at) in order.iter().enumerate() {
            let (status, _, v, got) = get(&gws[at]).await;
            assert_eq!(status, 200);
            assert_eq!(
                String::from_utf8_lossy(&got),
                body,
                "round {round}: holder {rank} answered an older value after the write's answer"
            );
            assert_eq!(v, version);
        }
    }
    // The replicas copied each version the owner told them of, or renewed it.
    let copies: f64 = {
        let mut n = 0.0;
        for &at in &order[1..] {
            n += metric(&gws[at], "rasa_cluster_replica_copies_total").await;
        }
        n
    };
    assert!(copies >= 40.0, "{copies} copies by the replicas");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_spreads_its_readers_over_the_replicas_and_fails_over() {
    let (_etcd, gws, order) = replica_cluster("replica-sdk", &[]).await;
    let body = pattern(256 << 10, 3);
    put(&gws[order[0]], &body).await;
    // Readers, each its own client: each reads the key from one holder.
    let mut readers = Vec::new();
    for _ in 0..24 {
        let c = Client::builder(&gws[0].base)
            .fast_path(FastPath::Auto)
            .timeout(CALL)
            .build()
            .expect("a client");
        let got = c.get(KEY).await.expect("a read");
        assert!(got.bytes.as_ref() == &body[..]);
        readers.push(c);
    }
    let mut served = Vec::new();
    for &at in &order {
        served.push(metric(&gws[at], "rasa_descriptors_total{path=\"fabric\"}").await);
    }
    assert!(
        served.iter().all(|n| *n >= 1.0),
        "descriptors served by the owner and each replica: {served:?}"
    );
    let stats: u64 = readers.iter().map(|c| c.stats().fabric_reads).sum();
    assert!(stats >= 24, "one-sided reads: {stats}");
    // A replica killed: every reader goes on within its call's timeout.
    kill(&gws[order[1]], "KILL");
    let killed = Instant::now();
    for c in &readers {
        let started = Instant::now();
        let got = c.get(KEY).await.expect("a read after a replica was killed");
        assert!(got.bytes.as_ref() == &body[..]);
        assert!(
            started.elapsed() < CALL + CALL / 10,
            "a read took {:?} after a replica was killed (timeout {CALL:?})",
            started.elapsed()
        );
    }
    assert!(killed.elapsed() < CALL * 24);
}

/// One reader's batch of keys with replicas splits evenly over their holders: 30 keys
/// owned by one member and held by three, read in one batch by one client, are served 10
/// by each member from its own memory (its one-sided descriptors), not as the keys'
/// hashes on the reader's name happen to fall (a fleet's load then waits for the holder
/// that drew the most).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_readers_batch_splits_evenly_over_the_replicas() {
    let (_etcd, gws, _) = replica_cluster("replica-split", &[]).await;
    let keys = owned_by(&gws, 0, "ckpt/split-", 30).await;
    let writer = sdk(&gws[0].base);
    for (i, k) in keys.iter().enumerate() {
        writer
            .put(k, pattern(64 << 10, i as u64))
            .await
            .expect("a put");
    }
    let descriptors = || async {
        let mut n = Vec::new();
        for gw in &gws {
            n.push(metric(gw, "rasa_descriptors_total{path=\"fabric\"}").await);
        }
        n
    };
    let before = descriptors().await;
    let reader = sdk(&gws[1].base);
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    for (i, r) in reader
        .many()
        .get(&refs)
        .await
        .expect("a batch")
        .into_iter()
        .enumerate()
    {
        let o = r.unwrap_or_else(|e| panic!("{}: {e}", refs[i]));
        assert!(
            o.bytes.as_ref() == &pattern(64 << 10, i as u64)[..],
            "{}",
            refs[i]
        );
    }
    let served: Vec<f64> = descriptors()
        .await
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    assert_eq!(
        served, [10.0; 3],
        "one-sided descriptors served by each member"
    );
    assert_eq!(reader.stats().fabric_reads, 30);
}

/// `n` keys under `prefix` that the fleet's member `at` owns.
async fn owned_by(gws: &[Gateway], at: usize, prefix: &str, n: usize) -> Vec<String> {
    let view: rasa_openapi::ClusterView = gws[at].get_json("/v1/cluster").await;
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| placement(k, &view.members)[0].url == gws[at].base)
        .take(n)
        .collect()
}

/// Replicas cost no more memory than configured: with `--cluster-replica-memory 3MiB`, a
/// member holds replicas of 1 MiB values up to that and no further; reads of the keys it
/// has no room for go to their owner, whole and right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_take_no_more_memory_than_configured() {
    let (_etcd, gws, _) =
        replica_cluster("replica-budget", &["--cluster-replica-memory", "3MiB"]).await;
    let keys: Vec<String> = (0..9).map(|i| format!("ckpt/budget-{i}")).collect();
    let mut bodies = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let body = pattern(1 << 20, 40 + i as u64);
        let r = rasa_tests::http()
            .put(gws[i % 3].url(&format!("/v1/objects/{key}")))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "put {key}");
        bodies.push(body);
    }
    let mut by_owner = 0;
    for gw in &gws {
        for (key, body) in keys.iter().zip(&bodies) {
            let r = rasa_tests::http()
                .get(gw.url(&format!("/v1/objects/{key}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{key} at {}", gw.base);
            by_owner += usize::from(r.headers().get("rasa-replica").is_none());
            assert!(r.bytes().await.unwrap() == body[..], "{key} at {}", gw.base);
        }
    }
    let mut held = 0.0;
    for gw in &gws {
        let bytes = metric(gw, "rasa_cluster_replica_bytes").await;
        assert!(
            bytes <= (3 << 20) as f64,
            "{} holds {bytes} bytes of replicas (budget 3 MiB)",
            gw.base
        );
        held += metric(gw, "rasa_cluster_replicas").await;
    }
    // 9 keys × 2 replicas each would be 18 copies of 1 MiB: at most 2 fit a member.
    assert!((3.0..=6.0).contains(&held), "replicas held: {held}");
    assert!(
        by_owner > 9,
        "reads beyond the budget served by their owner: {by_owner} of 27"
    );
}

/// A fleet loading a checkpoint while one of its replicas' members is killed mid-load:
/// six readers, each its own client, read a batch of 16 shards (all owned by one member)
/// over and over; a member holding replicas of them is killed once every reader has
/// loaded them; every shard is whole, and the kill costs a batch at most one call
/// timeout: a batch that did not end before it takes at most the slowest one that did (on
/// busy cores, a batch of a fleet sharing them takes seconds) plus the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_goes_on_when_a_replica_is_killed_mid_load() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let (_etcd, gws, _) = replica_cluster("replica-midload", &[]).await;
    let keys = owned_by(&gws, 0, "ckpt/load-", 16).await;
    let writer = sdk(&gws[0].base);
    for (i, k) in keys.iter().enumerate() {
        writer
            .put(k, pattern(256 << 10, 40 + i as u64))
            .await
            .expect("a shard");
    }
    let keys = Arc::new(keys);
    let (done, stop) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let killed_at = Arc::new(std::sync::OnceLock::<Instant>::new());
    // Readers that ended a batch before the kill (each must have, to compare with).
    let warm = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let (keys, done, stop) = (Arc::clone(&keys), Arc::clone(&done), Arc::clone(&stop));
            let (killed_at, warm) = (Arc::clone(&killed_at), Arc::clone(&warm));
            let c = Client::builder(&gws[0].base)
                .fast_path(FastPath::Auto)
                .timeout(CALL)
                .build()
                .expect("a client");
            tokio::spawn(async move {
                let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                // The slowest batch that ended before the kill, and of the others.
                let mut slowest = [Duration::ZERO; 2];
                while !stop.load(Ordering::Acquire) {
                    let started = Instant::now();
                    let got = c.many().get(&refs).await.expect("a batch");
                    let after = usize::from(killed_at.get().is_some());
                    if slowest == [Duration::ZERO; 2] && after == 0 {
                        warm.fetch_add(1, Ordering::AcqRel);
                    }
                    slowest[after] = slowest[after].max(started.elapsed());
                    for (i, r) in got.into_iter().enumerate() {
                        let o = r.unwrap_or_else(|e| panic!("{}: {e}", refs[i]));
                        assert!(o.bytes.as_ref() == &pattern(256 << 10, 40 + i as u64)[..]);
                    }
                    done.fetch_add(1, Ordering::AcqRel);
                }
                (slowest, c.stats().fabric_reads)
            })
        })
        .collect();
    let wait_for = |count: &Arc<AtomicUsize>, n: usize, what: &'static str| {
        let count = Arc::clone(count);
        async move {
            let started = Instant::now();
            while count.load(Ordering::Acquire) < n {
                assert!(started.elapsed() < Duration::from_secs(60), "{what}");
                tokio::time::sleep(Duration::from_millis(20)).await; // polls the readers' count
            }
        }
    };
    wait_for(&warm, 6, "a batch of each reader before the kill").await;
    let served = metric(&gws[1], "rasa_descriptors_total{path=\"fabric\"}").await;
    assert!(served >= 1.0, "the member to kill served none of the load");
    killed_at.set(Instant::now()).expect("one kill");
    kill(&gws[1], "KILL");
    let at_kill = done.load(Ordering::Acquire);
    wait_for(&done, at_kill + 18, "eighteen batches after the kill").await;
    stop.store(true, Ordering::Release);
    for r in readers {
        let ([before, after], fabric) = r.await.expect("a reader");
        assert!(
            after < before + CALL,
            "a batch after the kill took {after:?}, the slowest before it {before:?} (timeout {CALL:?})"
        );
        assert!(fabric >= 16, "one-sided reads: {fabric}");
    }
}
