//! Replicas of a namespace's keys (issue 66: `hot 64MiB replicas=3` in the namespaces
//! file): each holder serves the namespace's key from its own memory (HTTP and
//! one-sided), the same key of the default namespace stays its owner's alone and is never
//! mistaken for it, a write through any member is read nowhere older once acknowledged,
//! an SDK client of the namespace spreads its readers over the holders, and the rules
//! follow the file when it is read again (SIGHUP).

use std::time::{Duration, Instant};

use rasa_openapi::cluster::placement;
use rasa_openapi::ClusterView;
use rasa_tests::etcd::Etcd;
use rasa_tests::{metric, pattern, temp_dir, Gateway};

use super::replicas::{get_at as get, one_sided_at, put_at as put};
use super::{all_see, kill};

const KEY: &str = "ckpt/shard-0";

async fn view(gw: &Gateway) -> ClusterView {
    let r = rasa_tests::http().get(gw.url("/v1/cluster")).send().await;
    r.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaces_replicated_key_is_served_by_every_holder_and_never_read_older() {
    let etcd = Etcd::start();
    let file = temp_dir("replicas-ns").join("namespaces");
    std::fs::write(&file, "hot 64MiB replicas=3\nplain 64MiB\n").unwrap();
    let flags = ["--namespaces", file.to_str().unwrap()];
    let gws = super::secret_fleet(&etcd, "replicas-ns", &flags);
    let refs: Vec<&Gateway> = gws.iter().collect();
    let members = all_see(&refs, 3).await.members;
    let order: Vec<usize> = placement(KEY, &members)
        .into_iter()
        .map(|m| gws.iter().position(|g| g.base == m.url).expect("a member"))
        .collect();
    let rules = view(&gws[0]).await.replicas;
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        (rules[0].namespace.as_deref(), rules[0].prefix.as_str()),
        (Some("hot"), "")
    );

    let path = format!("/v1/ns/hot/objects/{KEY}");
    let body = pattern(1 << 20, 7);
    let version = put(&gws[order[1]], &path, &body).await;
    // The same key of the default namespace: other bytes, its owner's alone.
    let plain = pattern(1 << 20, 8);
    put(&gws[order[2]], &format!("/v1/objects/{KEY}"), &plain).await;
    for (rank, &at) in order.iter().enumerate() {
        let (status, replica, v, got) = get(&gws[at], &path).await;
        assert_eq!(status, 200);
        assert!(got == body, "wrong bytes at holder {rank}");
        assert_eq!(v, version, "every holder serves the owner's version id");
        assert_eq!(replica, rank > 0, "holder {rank} (0: the owner)");
        let descriptor = format!("/v1/ns/hot/descriptors/{KEY}");
        one_sided_at(&gws[at], at, &descriptor, (&version, &body)).await;

        let (status, replica, _, got) = get(&gws[at], &format!("/v1/objects/{KEY}")).await;
        assert_eq!(status, 200);
        assert!(!replica, "the default namespace's key has no replicas");
        assert!(
            got == plain,
            "the default namespace's bytes at holder {rank}"
        );
    }

    // A write through any member is read nowhere older once acknowledged.
    let mut older = 0;
    for round in 0..12u64 {
        let next = pattern(64 << 10, 100 + round);
        let via = order[(round % 3) as usize];
        let v = put(&gws[via], &path, &next).await;
        for &at in &order {
            let (status, _, got_v, got) = get(&gws[at], &path).await;
            assert_eq!(status, 200);
            if got_v != v || got != next {
                older += 1;
            }
        }
    }
    assert_eq!(older, 0, "reads older than an acknowledged write");

    // An SDK client of the namespace: its readers spread over the holders.
    let last = get(&gws[order[0]], &path).await.3;
    let before: Vec<f64> = futures_util::future::join_all(
        order
            .iter()
            .map(|&at| metric(&gws[at], "rasa_cluster_replica_reads_total")),
    )
    .await;
    for _ in 0..24 {
        let c = super::replicas::ns_client(&gws[0].base, "hot", Duration::from_secs(3));
        assert!(c.get(KEY).await.expect("a read").bytes.as_ref() == &last[..]);
    }
    for (i, &at) in order[1..].iter().enumerate() {
        let after = metric(&gws[at], "rasa_cluster_replica_reads_total").await;
        assert!(
            after > before[i + 1],
            "replica {at} served none of 24 readers"
        );
    }

    // The rules follow the file: `plain` gets replicas once it is read again, and a
    // client that learnt the view before learns them at once (its long poll of the view
    // ends; it waited 25 s for a member's change before).
    let early = super::replicas::ns_client(&gws[0].base, "plain", Duration::from_secs(3));
    let keys: Vec<String> = (0..6).map(|i| format!("ckpt/early-{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    early.many().get(&refs).await.expect("the view learnt");
    std::fs::write(&file, "hot 64MiB replicas=3\nplain 64MiB replicas=2\n").unwrap();
    for gw in &gws {
        kill(gw, "HUP");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while view(&gws[order[1]]).await.replicas.len() < 2 {
        assert!(Instant::now() < deadline, "the reloaded rules in the view");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let path = format!("/v1/ns/plain/objects/{KEY}");
    put(&gws[order[0]], &path, &body).await;
    let (status, replica, _, got) = get(&gws[order[1]], &path).await;
    assert_eq!((status, replica), (200, true), "plain's second holder");
    assert!(got == body);
    let (_, replica, _, _) = get(&gws[order[2]], &path).await;
    assert!(!replica, "plain has two holders, not three");

    for k in &keys {
        put(&gws[0], &format!("/v1/ns/plain/objects/{k}"), &body).await;
    }
    let replica_reads = || async {
        let each = gws
            .iter()
            .map(|g| metric(g, "rasa_cluster_replica_reads_total"));
        futures_util::future::join_all(each)
            .await
            .iter()
            .sum::<f64>()
    };
    let before = replica_reads().await;
    let learnt = Instant::now();
    loop {
        for r in early.many().get(&refs).await.expect("a batch") {
            assert!(r.expect("a value").bytes.as_ref() == &body[..]);
        }
        if replica_reads().await > before {
            break;
        }
        assert!(
            learnt.elapsed() < Duration::from_secs(5),
            "a client of plain made before the reload reads no replica 5 s after it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await; // a reader's pace
    }
}
