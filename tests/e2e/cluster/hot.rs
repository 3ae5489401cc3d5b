//! Keys hot by demand (`--cluster-hot-reads`): a key read past the threshold at its owner
//! is promoted (listed in the owner's record), then served by each of its holders from
//! their own memory and spread over them by the SDK; reads its replicas serve keep it hot;
//! once reads stop it is demoted and reads go back to its owner.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rasa_client::{Client, FastPath};
use rasa_openapi::cluster::placement;
use rasa_openapi::ClusterView;
use rasa_tests::etcd::{wait_view, Etcd};
use rasa_tests::{metric, pattern, Gateway};

use super::all_see;

const KEY: &str = "prompts/system-0";
const MISSING: &str = "prompts/none";

/// GET `KEY` at `gw`: whether a replica served it, and the body (asserted whole).
async fn read(gw: &Gateway, body: &[u8]) -> bool {
    read_at(&gw.url(&format!("/v1/objects/{KEY}")), body).await
}

/// GET `url`: whether a replica served it (the body asserted whole).
async fn read_at(url: &str, body: &[u8]) -> bool {
    let r = rasa_tests::http().get(url).send().await.unwrap();
    assert_eq!(r.status(), 200, "GET {url}");
    let replica = r.headers().get("rasa-replica").is_some();
    assert!(r.bytes().await.unwrap() == body, "the value, whole");
    replica
}

/// Reads `KEY` through `urls` in turn, one every 20 ms at most (five times the 10 a
/// second that make it hot), until `stop`: how many reads, and how many a replica did not
/// serve.
async fn keep_reading(urls: Vec<String>, body: Vec<u8>, stop: Arc<AtomicBool>) -> (u64, u64) {
    let (mut reads, mut forwarded) = (0, 0);
    let mut pace = tokio::time::interval(Duration::from_millis(20));
    while !stop.load(Ordering::Acquire) {
        for url in &urls {
            pace.tick().await;
            reads += 1;
            forwarded += u64::from(!read_at(url, &body).await);
        }
    }
    (reads, forwarded)
}

/// How many members hold `KEY` by its owner's list of hot keys in `view`.
fn hot_count(view: &ClusterView) -> u32 {
    let owner = placement(KEY, &view.members)[0];
    owner
        .hot
        .iter()
        .find(|h| h.key == KEY)
        .map_or(1, |h| h.count)
}

/// Reads `KEY` at `gws` in turn until `metric` at `at` reaches 1 (within `within`).
async fn read_until(gws: &[&Gateway], body: &[u8], at: &Gateway, name: &str, within: Duration) {
    let started = Instant::now();
    while metric(at, name).await < 1.0 {
        assert!(
            started.elapsed() < within,
            "{name} at the owner still 0 after {within:?} of reads"
        );
        for _ in 0..20 {
            for gw in gws {
                read(gw, body).await;
                // A key that is not there is no demand for a copy.
                let r = rasa_tests::http().get(gw.url(&format!("/v1/objects/{MISSING}")));
                assert_eq!(r.send().await.unwrap().status(), 404);
            }
        }
    }
}

/// Three members, keys hot past 10 reads a second over windows of 2 s (and `extra`
/// flags), `KEY` written at its owner with `body`: the members and their view.
async fn hot_fleet(
    etcd: &Etcd,
    tag: &str,
    extra: &[&str],
    body: &[u8],
) -> (Vec<Gateway>, ClusterView) {
    let mut flags = vec!["--cluster-hot-reads", "10", "--cluster-hot-window", "2s"];
    flags.extend(extra);
    let gws = super::secret_fleet(etcd, tag, &flags);
    let view = all_see(&gws.iter().collect::<Vec<_>>(), 3).await;
    let owner = &placement(KEY, &view.members)[0].url;
    let owner = gws.iter().find(|g| &g.base == owner).expect("a member");
    let r = rasa_tests::http()
        .put(owner.url(&format!("/v1/objects/{KEY}")))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        201,
        "PUT {KEY}: {}",
        r.text().await.unwrap_or_default()
    );
    (gws, view)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_promoted_by_its_reads_and_demoted_when_they_stop() {
    let etcd = Etcd::start();
    let body = pattern(64 << 10, 9);
    let (gws, view) = hot_fleet(&etcd, "hot", &["--cluster-hot-replicas", "3"], &body).await;
    let order: Vec<&Gateway> = placement(KEY, &view.members)
        .into_iter()
        .map(|m| gws.iter().find(|g| g.base == m.url).expect("a member"))
        .collect();
    // Cold: a replica-to-be forwards to the owner.
    assert!(!read(order[2], &body).await, "no replica before any demand");
    assert_eq!(metric(order[0], "rasa_cluster_hot_keys").await, 0.0);

    // Read at the owner past the threshold: promoted, and every member's view says so.
    let within = Duration::from_secs(20);
    let promoted = "rasa_cluster_hot_promotions_total";
    read_until(&[order[0]], &body, order[0], promoted, within).await;
    for gw in &order {
        wait_view(gw, "the owner listing the key as hot", within, |v| {
            hot_count(v) == 3
        })
        .await;
    }
    assert_eq!(metric(order[0], "rasa_cluster_hot_keys").await, 1.0);
    let view: ClusterView = order[0].get_json("/v1/cluster").await;
    let listed = view.members.iter().flat_map(|m| &m.hot);
    assert!(
        listed.map(|h| &h.key).all(|k| k == KEY),
        "only the key read is hot"
    );

    // Each replica serves it from its own memory, and reads there alone keep it hot (the
    // replicas report them to the owner) — while the SDK's readers spread over all three.
    for gw in &order[1..] {
        assert!(read(gw, &body).await, "a replica at {} serves it", gw.base);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let urls = order[1..]
        .iter()
        .map(|g| g.url(&format!("/v1/objects/{KEY}")));
    let replicas_only = tokio::spawn(keep_reading(urls.collect(), body.clone(), stop.clone()));
    let replicas_since = Instant::now();
    let fabric = "rasa_descriptors_total{path=\"fabric\"}";
    let mut before = Vec::new();
    for gw in &order {
        before.push(metric(gw, fabric).await);
    }
    for _ in 0..24 {
        let c = Client::builder(&gws[0].base)
            .fast_path(FastPath::Auto)
            .timeout(Duration::from_secs(5))
            .build()
            .expect("a client");
        let got = c.get(KEY).await.expect("a read");
        assert!(got.bytes.as_ref() == &body[..]);
    }
    for (i, gw) in order.iter().enumerate() {
        let served = metric(gw, fabric).await - before[i];
        assert!(
            served >= 1.0,
            "holder {i} served {served} of 24 readers' descriptors"
        );
    }
    let demoted = "rasa_cluster_hot_demotions_total";
    // Three windows of reads at the replicas (a duration of load, not a wait for a signal).
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(replicas_since.elapsed())).await;
    stop.store(true, Ordering::Release);
    let (reads, forwarded) = replicas_only.await.expect("the replicas' reader");
    assert_eq!(
        (forwarded, metric(order[0], demoted).await),
        (0, 0.0),
        "reads the replicas forwarded (of {reads}), demotions while they served it"
    );

    // No reads: demoted within a few windows; every view drops it; reads go to the owner.
    let started = Instant::now();
    while metric(order[0], demoted).await < 1.0 {
        assert!(
            started.elapsed() < within,
            "not demoted {within:?} after reads stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await; // polls the owner's metric
    }
    for gw in &order {
        wait_view(gw, "the owner no longer listing the key", within, |v| {
            hot_count(v) == 1
        })
        .await;
    }
    assert!(!read(order[1], &body).await, "a former replica forwards");
    assert_eq!(metric(order[0], "rasa_cluster_hot_keys").await, 0.0);
}

/// Reads through the S3 listener count too: GETs of a key of an `--s3-bucket` bucket,
/// at its owner and through another member, promote it; GETs of a missing key do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_through_the_s3_listener_make_a_key_hot() {
    let etcd = Etcd::start();
    let body = pattern(4096, 3);
    let s3 = ["--s3-listen", "127.0.0.1:0", "--s3-bucket", "data"];
    let (gws, view) = hot_fleet(&etcd, "hot-s3", &s3, &body).await;
    let order = placement(KEY, &view.members);
    let owner = gws
        .iter()
        .find(|g| g.base == order[0].url)
        .expect("a member");
    let s3 = |m: &rasa_openapi::ClusterMember, key: &str| {
        let base = m
            .s3_url
            .as_deref()
            .expect("each member advertises its S3 listener");
        format!("{}/data/{key}", base.trim_end_matches('/'))
    };
    let (at_owner, elsewhere) = (s3(order[0], KEY), s3(order[1], KEY));
    let missing = s3(order[0], MISSING);
    let promoted = "rasa_cluster_hot_promotions_total";
    let within = Duration::from_secs(20);
    let started = Instant::now();
    while metric(owner, promoted).await < 1.0 {
        assert!(
            started.elapsed() < within,
            "{promoted} at the owner still 0 after {within:?} of S3 reads"
        );
        for _ in 0..20 {
            for url in [&at_owner, &elsewhere] {
                let r = rasa_tests::http().get(url).send().await.unwrap();
                assert_eq!(r.status(), 200, "GET {url}");
                assert!(r.bytes().await.unwrap() == body, "the value, whole");
            }
            let r = rasa_tests::http().get(&missing).send().await.unwrap();
            assert_eq!(r.status(), 404, "GET {missing}");
        }
    }
    let view: ClusterView = owner.get_json("/v1/cluster").await;
    let listed: Vec<&str> = view
        .members
        .iter()
        .flat_map(|m| &m.hot)
        .map(|h| h.key.as_str())
        .collect();
    assert_eq!(listed, [KEY], "the key read is hot, the missing one is not");
}

/// A namespace's key is hot by its own reads: `train`'s `KEY`, read at its owner, is
/// promoted and listed with its namespace; its replicas serve it from their own memory
/// while the default namespace's `KEY` (written too, other bytes) stays its owner's; an
/// SDK client of the namespace spreads its readers over the holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaces_key_is_promoted_by_its_own_reads() {
    let etcd = Etcd::start();
    let file = rasa_tests::temp_dir("hot-ns").join("namespaces");
    std::fs::write(&file, "train 64MiB\n").unwrap();
    let plain = pattern(4096, 1);
    let flags = ["--namespaces", file.to_str().unwrap()];
    let (gws, view) = hot_fleet(&etcd, "hot-ns", &flags, &plain).await;
    let order: Vec<&Gateway> = placement(KEY, &view.members)
        .into_iter()
        .map(|m| gws.iter().find(|g| g.base == m.url).expect("a member"))
        .collect();
    let url = |gw: &Gateway| gw.url(&format!("/v1/ns/train/objects/{KEY}"));
    let body = pattern(64 << 10, 2);
    let r = rasa_tests::http().put(url(order[1])).body(body.clone());
    assert_eq!(r.send().await.unwrap().status(), 201);

    let promoted = "rasa_cluster_hot_promotions_total";
    let within = Duration::from_secs(20);
    let started = Instant::now();
    while metric(order[0], promoted).await < 1.0 {
        assert!(
            started.elapsed() < within,
            "{promoted} still 0 after {within:?}"
        );
        for _ in 0..20 {
            for gw in &order[..2] {
                read_at(&url(gw), &body).await;
            }
        }
    }
    let listed = |v: &ClusterView| -> Vec<(Option<String>, String)> {
        let hot = v.members.iter().flat_map(|m| &m.hot);
        hot.map(|h| (h.namespace.clone(), h.key.clone())).collect()
    };
    for gw in &order {
        wait_view(gw, "the owner listing train's key as hot", within, |v| {
            listed(v) == [(Some("train".to_owned()), KEY.to_owned())]
        })
        .await;
    }
    for gw in &order[1..] {
        assert!(read_at(&url(gw), &body).await, "a replica at {}", gw.base);
        assert!(
            !read(gw, &plain).await,
            "the default namespace's key is not hot"
        );
    }
    let served = "rasa_cluster_replica_reads_total";
    let before = metric(order[1], served).await + metric(order[2], served).await;
    for _ in 0..12 {
        let c = super::replicas::ns_client(&gws[0].base, "train", Duration::from_secs(5));
        assert!(c.get(KEY).await.expect("a read").bytes.as_ref() == &body[..]);
    }
    let after = metric(order[1], served).await + metric(order[2], served).await;
    assert!(
        after > before,
        "no SDK reader of train's key reached a replica"
    );
}
